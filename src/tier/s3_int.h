/*
 * s3_int.h — what the five files of the S3 tier share.
 *
 * s3.c is the tier proper (the existence cache, put, get, eviction, GC, the
 * bad list, the vtable, open); s3_http.c drives every request (curl handles
 * and their pool, request set-up, signing, retry with backoff, and the
 * taxonomy of results); s3_list.c reads a prefix's listing (the page parser
 * and the bounded listing loop); s3_creds.c finds the credentials and region
 * (options, environment, the AWS shared credentials and config files);
 * s3_buf.c keeps the image buffers that puts and gets reuse.
 * Nothing here is exported: s3.h is the interface.
 */
#ifndef KVT_S3_INT_H
#define KVT_S3_INT_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <curl/curl.h>

#include "common/err.h"
#include "format/object.h"
#include "tier/findex.h"
#include "tier/s3.h"

#define S3_URL_MAX 2048
#define S3_NAME_MAX 512
#define S3_HEX 64
#define S3_ERRBODY 1024
#define S3_BACKOFF_BASE_MS 40
#define S3_BACKOFF_CAP_MS 2000
#define S3_MIN_PART (1ull << 20) /* below AWS's 5 MiB only for tests */
#define S3_MAX_PARTS 10000
#define S3_PREALLOC_MAX (KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD)
#define S3_TOKEN_MAX 4096        /* longest continuation token accepted */
#define S3_LIST_PAGES 10000      /* default list_max_pages */
#define S3_LIST_TIMEOUT_MULT 10  /* default list deadline, x timeout_ms */
/* Idle image buffers kept for reuse (s3_buf.c says why); the same bounds
 * as the file tiers' caches (fsdir). */
#define S3_BUF_SLOTS 8
#define S3_BUF_BYTES (256ull << 20)

/* The cache of image buffers (s3_buf.c); its mutex guards the rest. */
typedef struct s3_bufs {
	pthread_mutex_t mu;
	struct {
		void *p;
		size_t cap;
	} slot[S3_BUF_SLOTS + 1];
	uint32_t n;     /* cached */
	uint64_t bytes; /* cached */
	int live;       /* initialised */
} s3_bufs;

typedef struct s3_ent {
	struct kvt_findex_ent fe; /* key, len; charge = len */
	int64_t mtime_s;   /* LastModified, or the local put time */
	int64_t put_ms;    /* monotonic ms of our own put; 0 if listed */
} s3_ent;

/* An object found bad and left in the bucket (a read never deletes):
 * verify lists them, repair deletes the damaged ones, and a put of a
 * damaged one's key replaces it unconditionally. */
struct s3_bad {
	struct kvt_findex_ent fe; /* key; len and charge 0 */
	int proven; /* damaged; 0: only unverifiable here (a tag) */
	char etag[128]; /* of the object found bad ("" if unknown) */
	char why[160];
};

typedef struct s3_tier {
	kvt_tier base;
	char *endpoint, *region, *bucket, *prefix;
	char *base_url;    /* up to the bucket, no trailing '/' */
	char *user, *secret, *sigv4;
	struct curl_slist *common; /* headers on every request (copied) */
	uint64_t capacity, part_bytes, multipart_bytes;
	uint32_t max_parallel;
	int timeout_ms, retries, refresh_s, path_style, list_timeout_ms;
	uint32_t list_max_pages;
	uint8_t *hmac_key;
	size_t hmac_key_len;

	/* Image buffers: put_begin's write buffers and the bodies of gets,
	 * given back by put_commit/put_abort and release. */
	s3_bufs bufs;

	CURLSH *share;
	pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];

	pthread_mutex_t pool_mu;
	pthread_cond_t pool_cv;
	CURL **pool;
	uint32_t npool, in_use;

	/* The objects known present (s3_ent), oldest first, with the
	 * capacity accounting and counters; ix.mu guards it, `bad` (struct
	 * s3_bad, oldest first; its own mutex unused) and `health`. */
	struct kvt_findex ix, bad;
	kvt_s3_status health; /* all but `reachable`, which is atomic */
	atomic_int reachable;
	atomic_uint_fast64_t borrowed;

	pthread_t refresher;
	int has_refresher, stopping;
	pthread_mutex_t stop_mu;
	pthread_cond_t stop_cv;
} s3_tier;

enum { RQ_PENDING, RQ_RUNNING, RQ_DONE };

typedef struct s3_req {
	/* in */
	const char *method;        /* GET PUT POST DELETE HEAD */
	char url[S3_URL_MAX];
	char obj[S3_NAME_MAX];     /* object name (or listed prefix), for errors */
	struct curl_slist *hdrs;   /* owned; the common headers included */
	const uint8_t *up;         /* PUT/POST body */
	size_t up_len, up_off;
	uint8_t *dst;              /* fixed sink, or NULL: grow buf */
	size_t dst_cap;
	/* Where buf comes from when the answer's headers size it (NULL:
	 * malloc).  A pooled buf (pooled = 1) goes back to the pool in
	 * s3_req_fini; whoever takes it over gives it back with cap. */
	s3_bufs *pool;
	/* out */
	uint8_t *buf;              /* grown body when dst is NULL */
	size_t len, cap;           /* bytes received this attempt */
	int pooled;                /* buf is from pool, cap bytes */
	char errbody[S3_ERRBODY];
	size_t errlen;
	long status;
	CURLcode cc;
	int overflow;              /* body longer than dst_cap */
	char etag[128];
	char hmac[80];
	uint64_t total;            /* from Content-Range */
	int has_total;
	curl_off_t clen;           /* Content-Length of the answer; -1 unknown */
	/* state */
	int attempts, state;
	int64_t not_before, t0_ms;
	CURL *e;
	char cerr[CURL_ERROR_SIZE];
} s3_req;

static inline int64_t s3_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t s3_wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}

/* --- s3_http.c ------------------------------------------------------------- */

/* curl_global_init, once per process: 0 or KVT_ENOMEM with its message. */
int s3_http_global_init(void);
/* The connection and DNS cache every handle of `t` shares: 0 or
 * KVT_ENOMEM. */
int s3_http_share_init(s3_tier *t);
/* Free the pooled handles and the share (the tier's mutexes stay). */
void s3_http_close(s3_tier *t);
/* RFC 3986 percent-encoding of `s` into out (cap bytes), as SigV4's
 * canonical form wants: unreserved characters pass, the rest is %XX. */
void s3_uri_encode(const char *s, char *out, size_t cap);
/* Set up `r` as `method` on object `name` ("" for the bucket) with an
 * already encoded and sorted `query` (or NULL), the common headers
 * copied: 0, KVT_EINVAL (URL too long) or KVT_ENOMEM. */
int s3_req_init(s3_tier *t, s3_req *r, const char *method, const char *name,
		const char *query);
/* Add the header printf(fmt, v): 0 or KVT_ENOMEM. */
int s3_req_hdr(s3_req *r, const char *fmt, const char *v);
void s3_req_fini(s3_req *r);
/* Run n requests concurrently (at most max_parallel connections) until each
 * has a final answer or the deadline passes.  Every request's outcome is in
 * its cc/status.  Returns 0, or KVT_ENOMEM if curl could not be driven. */
int s3_run(s3_tier *t, s3_req **rq, int n, int64_t deadline);
/* Turn a finished request into 0 or a code of the taxonomy in s3.h, with a
 * sentence that names the operation `what`, the object, the endpoint and
 * what happened.  Also records whether the endpoint answered at all. */
int s3_result(s3_tier *t, const s3_req *r, const char *what);
/* One request run and judged, by `deadline` or within timeout_ms. */
int s3_one_by(s3_tier *t, s3_req *r, const char *what, int64_t deadline);
int s3_one(s3_tier *t, s3_req *r, const char *what);
/* The text of the first <tag> element of an S3 XML answer (`body`, a
 * string; a namespace prefix on element names is ignored, entities are
 * decoded) into out: 0, -1 if absent ("" then), -2 if longer than cap
 * (cut to fit). */
int s3_xml_tag(const char *body, const char *tag, char *out, size_t cap);

/* --- s3_buf.c -------------------------------------------------------------- */

/* 0 or KVT_ENOMEM. */
int s3_bufs_init(s3_bufs *b);
/* Free what is cached (every buffer given back by now); safe on a cache
 * that was zeroed and never initialised. */
void s3_bufs_fini(s3_bufs *b);
/* A buffer of at least n bytes, *cap its size; its contents are what its
 * last user left.  NULL if memory is short.  Any thread. */
void *s3_buf_get(s3_bufs *b, uint64_t n, size_t *cap);
/* Give back a buffer s3_buf_get returned with `cap` (NULL: nothing). */
void s3_buf_put(s3_bufs *b, void *p, size_t cap);

/* --- s3_list.c ------------------------------------------------------------- */

/* Walk every object below the prefix, 1000 a page, within the listing's
 * deadline and page limit; *pages (may be NULL) counts the pages read.  An
 * error ends the walk: the caller must not take what it saw for the whole
 * prefix. */
int s3_list(s3_tier *t, s3_list_fn fn, void *arg, uint64_t *pages);

/* --- s3_creds.c ------------------------------------------------------------ */

/* Fill t->user, t->secret and t->region from the options, the environment
 * or the AWS files (s3.h says in which order); *token gets the session
 * token or NULL (the caller frees it).  0, or KVT_ECONFIG naming what is
 * missing or wrong. */
int s3_credentials(s3_tier *t, const kvt_s3_opts *o, char **token);

#endif
