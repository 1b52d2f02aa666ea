/*
 * s3.h — a tier that keeps one object image per S3 object.
 *
 * Works with any S3-compatible endpoint (AWS S3 and S3 Express One Zone,
 * MinIO, Ceph RGW) signed with SigV4 by libcurl (CURLOPT_AWS_SIGV4).  Layout
 * in the bucket:
 *
 *   <prefix><k0>/<64 hex of the key>.kvt
 *
 * where k0 is the key's first byte in hex (256 prefixes spread the request
 * rate; S3 scales per prefix).  The object is the image byte for byte, so
 * `aws s3 cp` fetches exactly what kvtier wrote.  With an HMAC key, the
 * HMAC-SHA-256 of the image rides in the user metadata x-amz-meta-kvt-hmac
 * and a GET whose image does not match is treated as corrupt.
 *
 * exists() answers from memory: an existence cache filled by ListObjectsV2 at
 * open (objects whose names are not kvtier keys are skipped with one log
 * line) and kept current by this tier's own puts and deletes.  A chunk
 * another node publishes later is seen after the next re-list: every
 * refresh_s seconds in the background when refresh_s > 0, or on demand with
 * kvt_s3_refresh().  get() does not consult the cache: it always asks S3.
 *
 * Puts send If-None-Match: * (first writer wins where the endpoint supports
 * conditional writes: AWS S3 since 2024, MinIO, recent Ceph RGW; a 412 is
 * KVT_EEXIST).  An endpoint that ignores the header (s3rver, older RGW)
 * gives last-writer-wins: a reader still never mixes two versions, because
 * every ranged part of a large GET carries If-Match with the ETag of the
 * first part, and each image names its key and checksums its layers.
 *
 * Memory: put_begin's write buffer and a get's image come from a cache of
 * image buffers the tier owns; put_commit, put_abort and release give them
 * back, and up to 8 idle buffers (256 MiB) stay for the next put or get,
 * so a chunk is not an mmap, a page fault per 4 KiB and a munmap each time
 * (docs/S3.md, "32 MiB").  close frees them; every rbuf must be released
 * before it.
 *
 * Every call has a deadline of timeout_ms: retries (5xx, 503 SlowDown,
 * 429, connection errors, timeouts, truncated bodies) back off
 * exponentially with full jitter and stop when the deadline would pass, so a
 * dead or hung endpoint costs a caller at most timeout_ms.
 *
 * Errors say what failed (docs/S3.md has the table), each with a sentence
 * naming the operation, s3://bucket/object, the endpoint and what happened:
 *   KVT_ENOTFOUND   404 NoSuchKey: the only miss (and a ranged read whose
 *                   object was replaced midway: never two versions mixed)
 *   KVT_ECONFIG     404 NoSuchBucket, naming the bucket
 *   -EACCES         403 / SignatureDoesNotMatch / InvalidAccessKeyId
 *   -ECONNREFUSED   nothing listens at the endpoint ("unreachable")
 *   -EHOSTUNREACH   the endpoint's host name does not resolve ("unreachable")
 *   KVT_ETIMEDOUT   no complete answer by the deadline (a hung endpoint)
 *   -EIO            5xx/429 on every attempt, bodies cut short or reset,
 *                   a 404 that is neither NoSuchKey nor NoSuchBucket
 *   -EPROTO         a listing the endpoint got wrong: a continuation token
 *                   given twice (the listing would loop), IsTruncated without
 *                   a token, an answer that is not a ListBucketResult
 *   KVT_ETOOBIG     a listing longer than list_max_pages pages
 *   KVT_ECORRUPT    an object that is not a valid image of its key
 *
 * Listing is bounded three ways: an overall deadline (list_timeout_ms), a
 * page limit (list_max_pages) and a check that no continuation token comes
 * back twice.  A failed listing changes nothing in the existence cache and
 * is reported; it is never taken for an empty prefix.
 */
#ifndef KVT_S3_H
#define KVT_S3_H

#include <stddef.h>
#include <stdint.h>

#include "tier/tier.h"

typedef struct kvt_s3_opts {
	/* "http://127.0.0.1:9000" or "https://s3.us-east-1.amazonaws.com";
	 * NULL: https://s3.<region>.amazonaws.com */
	const char *endpoint;
	/* NULL: AWS_REGION, AWS_DEFAULT_REGION, the profile's region in
	 * ~/.aws/config (AWS_CONFIG_FILE), else us-east-1 */
	const char *region;
	const char *bucket;
	const char *prefix;   /* "" or NULL, or e.g. "kv/"; [A-Za-z0-9._~/-] */
	int path_style;       /* 1: endpoint/bucket/key; 0: bucket.host/key */
	/* NULL: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
	 * then ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE), section
	 * [AWS_PROFILE or default], then ~/.aws/config (AWS_CONFIG_FILE),
	 * section [profile NAME] or [default].  A malformed file fails the
	 * open with KVT_ECONFIG naming it and the line.  session_token may
	 * stay NULL (X-Amz-Security-Token when set). */
	const char *access_key, *secret_key, *session_token;
	uint64_t capacity;    /* bytes; 0 = unbounded (UINT64_MAX) */
	uint32_t max_parallel;/* connections in flight; 0 = 16 */
	uint64_t part_bytes;  /* multipart part / GET range size; 0 = 8 MiB */
	/* Objects up to this size move in one request (one PUT, one GET);
	 * larger ones as parallel parts of part_bytes (multipart PUT, ranged
	 * GETs).  0 = 64 MiB: a single stream is faster below that on the
	 * servers measured (docs/S3.md).  At least 1 MiB. */
	uint64_t multipart_bytes;
	int timeout_ms;       /* deadline of one call; 0 = 30000 */
	int retries;          /* per request; 0 = 5, <0 = none */
	const uint8_t *hmac_key; /* optional object authentication */
	size_t hmac_key_len;
	int refresh_s;        /* >0: re-list every refresh_s seconds */
	/* Deadline of one whole listing (every page of it); 0 = 10 x
	 * timeout_ms.  Each page still gets at most timeout_ms. */
	int list_timeout_ms;
	/* Pages (of up to 1000 objects) one listing may take before it stops
	 * with KVT_ETOOBIG; 0 = 10000, i.e. 10 million objects, about 800 MB
	 * of existence cache. */
	uint32_t list_max_pages;
} kvt_s3_opts;

/* Open the tier and warm its existence cache by listing <prefix>.  A failed
 * authentication (403 InvalidAccessKeyId, SignatureDoesNotMatch, ...) fails
 * the open with -EACCES, a missing bucket with KVT_ECONFIG ("NoSuchBucket",
 * naming the bucket), both with the S3 error code in kvt_errmsg().  An
 * endpoint that cannot be reached or whose listing fails does not fail the
 * open, so a store keeps serving from its other tiers: one error-level log
 * line says the tier is unreachable (or its listing failed) and is shown
 * empty until a listing succeeds, kvt_s3_status_get() reports it, and
 * calls fail with the codes above until the endpoint answers.  KVT_EINVAL names a bad
 * option, KVT_ECONFIG missing credentials.  The caller owns *out and frees
 * it with (*out)->ops->close. */
int kvt_s3_open(const kvt_s3_opts *o, kvt_tier **out);

/* Re-list the bucket and replace the existence cache (chunks this tier put
 * while the listing ran are kept).  0 or a negative code; on failure the
 * cache is left as it was. */
int kvt_s3_refresh(kvt_tier *t);

/* Lifecycle through listing: re-list, delete every chunk older than
 * max_age_s (0: no age limit), then the oldest until the prefix holds at
 * most budget_bytes (0: no budget).  *deleted (may be NULL) counts the
 * objects removed.  Any node may run it; two running at once only repeat
 * deletes.  The S3 lifecycle rule that does the age part is in docs/S3.md. */
int kvt_s3_gc(kvt_tier *t, uint64_t max_age_s, uint64_t budget_bytes,
	      uint64_t *deleted);

/* Store raw bytes under `name` (below the prefix) without If-None-Match:
 * for tests and tools that plant foreign or damaged objects. */
int kvt_s3_put_raw(kvt_tier *t, const char *name, const void *data,
		   size_t len);

/* One object of a listing: its name below the prefix, size and mtime. */
typedef int (*s3_list_fn)(void *arg, const char *key, size_t klen,
			  uint64_t size, int64_t mtime_s);

/* Parse one ListObjectsV2 page with expat: `xml` is len bytes plus a NUL
 * (bytes from the endpoint: a fuzz target drives this).  The whole page is
 * parsed first; then each <Contents> whose Key (percent-decoded when the
 * page says <EncodingType>url</EncodingType>) is under `prefix` goes to fn,
 * and *truncated and `token` (token_cap bytes) say whether and where the
 * listing goes on.  0, fn's nonzero code, or -EPROTO naming `where` and
 * `page` and what was wrong: not well-formed XML, not a ListBucketResult, a
 * DOCTYPE, a NUL inside, a truncated page without a token, a token, Key or
 * other field too long to keep whole, a <Contents> without a Key, a Size
 * that is not a byte count, an EncodingType other than url, or a Key that
 * does not decode. */
int kvt_s3_parse_list_page(const char *xml, size_t len, const char *prefix,
			   s3_list_fn fn, void *arg, int *truncated, char *token,
			   size_t token_cap, const char *where, unsigned page);

/* The refresh without the network, for kvtier-bench's measure of the
 * index: the pages next() hands out (0 and a page of *len bytes plus a
 * NUL, until a page is not truncated; nonzero stops) go through the same
 * parser and fill as kvt_s3_refresh's and then replace the cache.  0 or a
 * negative code (the cache then stays as it was). */
int kvt_s3_refresh_pages(kvt_tier *t,
			 int (*next)(void *arg, const char **xml, size_t *len),
			 void *arg);

/* Drop from the cache what the tier would evict to make room for `need`
 * more bytes, oldest first, without deleting anything in the bucket (for
 * kvtier-bench's measure of the index).  The number dropped. */
uint64_t kvt_s3_evict_index(kvt_tier *t, uint64_t need);

/* What the tier knows of its endpoint's health, beyond kvt_tier_stats. */
typedef struct kvt_s3_status {
	/* 1: the last request got an HTTP answer; 0: it could not connect or
	 * got no answer by its deadline. */
	int reachable;
	int list_rc;            /* 0: the last listing completed; else its code */
	char list_error[512];   /* that failure's sentence; "" if none */
	uint64_t lists;         /* listings completed */
	uint64_t list_failures; /* listings that failed */
	uint64_t list_pages;    /* pages the last completed listing took */
	/* Of the last completed listing: objects skipped because their names
	 * are not kvtier chunk names, and chunk names whose listed size rules
	 * out a chunk (at most the 4 KiB header, or over the largest image). */
	uint64_t skipped_foreign, skipped_size;
	uint64_t read_errors;   /* gets that failed other than by a miss */
} kvt_s3_status;

/* Fill *out for S3 tier `t`.  0 or KVT_EINVAL. */
int kvt_s3_status_get(kvt_tier *t, kvt_s3_status *out);

/* Is `t` an S3 tier?  1 or 0. */
int kvt_s3_is(const kvt_tier *t);

#endif
