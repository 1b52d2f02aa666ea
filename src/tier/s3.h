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
 * Every call has a deadline of timeout_ms: retries (5xx, 503 SlowDown,
 * 429, connection errors, timeouts, truncated bodies) back off
 * exponentially with full jitter and stop when the deadline would pass, so a
 * dead or hung endpoint costs a caller at most timeout_ms (the store then
 * reports a miss and the engine recomputes).
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
	 * [AWS_PROFILE or default].  session_token may stay NULL. */
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
} kvt_s3_opts;

/* Open the tier and warm its existence cache by listing <prefix>.  A failed
 * authentication (403 InvalidAccessKeyId, SignatureDoesNotMatch, ...) or a
 * missing bucket fails the open (-EACCES / KVT_ECONFIG with the S3 error code
 * in kvt_errmsg()); an unreachable endpoint does not (one log line, the
 * cache starts cold, calls fail until it comes back).  KVT_EINVAL names a bad
 * option, KVT_ECONFIG missing credentials.  The caller owns *out and frees
 * it with (*out)->ops->close. */
int kvt_s3_open(const kvt_s3_opts *o, kvt_tier **out);

/* Re-list the bucket and replace the existence cache (chunks this tier put
 * while the listing ran are kept).  0 or a negative code. */
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

/* Is `t` an S3 tier?  1 or 0. */
int kvt_s3_is(const kvt_tier *t);

#endif
