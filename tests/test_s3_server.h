/*
 * test_s3_server.h — what the S3 tests share: the server they run against
 * (tests/s3/server.js: @20minutes/s3rver, which checks SigV4 signatures,
 * behind the fault proxy of tests/s3/faultproxy.js; started by s3/server.h,
 * which kvtier-bench s3 shares), its fault control, and images to store.
 *
 * node and tests/s3/node_modules are installed by scripts/install-deps.sh;
 * a test that does not find them fails (they are part of what the test
 * needs, not a capability the machine may lack).
 *
 * Every function is static inline so that a test including this header and
 * using only part of it still builds with -Werror.
 */
#ifndef KVT_TEST_S3_SERVER_H
#define KVT_TEST_S3_SERVER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "format/object.h"
#include "s3/server.h"
#include "tier/s3.h"
#include "test.h"

#define S3T_AK S3SRV_ACCESS_KEY
#define S3T_SK S3SRV_SECRET_KEY

static s3srv s3t_srv = S3SRV_NONE;
static int s3t_port; /* the fault proxy's: what the tests talk to */
static char s3t_endpoint[64];

static inline double s3t_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Start server.js on fresh data in `dir` with the given buckets (a
 * NULL-terminated list, at most 4).  Exits 1 if node or the server's
 * modules are missing or it does not start. */
static inline void s3t_start(const char *dir, const char *const *buckets)
{
	char here[2048], script[2100], mods[2100], why[2300];
	char *slash;

	snprintf(here, sizeof(here), "%s", __FILE__);
	slash = strrchr(here, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(here, sizeof(here), ".");
	snprintf(mods, sizeof(mods), "%s/s3/node_modules/@20minutes/s3rver", here);
	snprintf(script, sizeof(script), "%s/s3/server.js", here);
	if (system("node --version >/dev/null 2>&1") != 0) {
		fprintf(stderr, "FAIL: node is not installed (scripts/install-deps.sh installs it)\n");
		exit(1);
	}
	if (access(mods, R_OK)) {
		fprintf(stderr, "FAIL: %s missing: run scripts/install-deps.sh "
				"(npm ci --prefix tests/s3)\n", mods);
		exit(1);
	}
	if (s3srv_start(&s3t_srv, script, dir, buckets, why, sizeof(why))) {
		fprintf(stderr, "FAIL: the S3 test server did not start: %s\n", why);
		exit(1);
	}
	s3t_port = s3t_srv.proxy_port;
	snprintf(s3t_endpoint, sizeof(s3t_endpoint), "http://127.0.0.1:%d", s3t_port);
}

static inline void s3t_stop(void)
{
	s3srv_stop(&s3t_srv);
}

typedef struct s3t_body {
	char b[512];
	size_t n;
} s3t_body;

static inline size_t s3t_sink(char *p, size_t s, size_t n, void *u)
{
	s3t_body *b = u;
	size_t k = s * n;

	(void)p;
	if (b) {
		size_t room = sizeof(b->b) - 1 - b->n;
		if (k < room)
			room = k;
		memcpy(b->b + b->n, p, room);
		b->n += room;
		b->b[b->n] = '\0';
	}
	return s * n;
}

/* GET a control path of the fault proxy; its answer in *out (may be NULL). */
static inline void s3t_control(const char *path_query, s3t_body *out)
{
	char url[512];
	s3t_body tmp = { "", 0 };
	CURL *e = curl_easy_init();

	snprintf(url, sizeof(url), "%s%s", s3t_endpoint, path_query);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, s3t_sink);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, out ? out : &tmp);
	CHECK(curl_easy_perform(e) == CURLE_OK);
	curl_easy_cleanup(e);
}

/* Arm a fault: `spec` is the query of /__fault ("mode=500&count=2"). */
static inline void s3t_fault(const char *spec)
{
	char q[400];

	snprintf(q, sizeof(q), "/__fault?%s", spec);
	s3t_control(q, NULL);
}

/* A counter from the proxy's /__stats ("requests", "faulted", "lists"). */
static inline long s3t_stat(const char *name)
{
	s3t_body b = { "", 0 };
	char pat[64];
	const char *p;

	s3t_control("/__stats", &b);
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	p = strstr(b.b, pat);
	return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* A signed request of our own (a bucket operation the tier never makes).
 * Returns the HTTP status, or -1. */
static inline long s3t_signed(const char *method, const char *path)
{
	char url[512];
	long code = -1;
	CURL *e = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");

	snprintf(url, sizeof(url), "%s%s", s3t_endpoint, path);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
	curl_easy_setopt(e, CURLOPT_USERNAME, S3T_AK);
	curl_easy_setopt(e, CURLOPT_PASSWORD, S3T_SK);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, s3t_sink);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, NULL);
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(e);
	curl_slist_free_all(h);
	return code;
}

/* Options for bucket "kvt" under `prefix` at the test server. */
static inline kvt_s3_opts s3t_opts(const char *prefix)
{
	kvt_s3_opts o;

	memset(&o, 0, sizeof(o));
	o.endpoint = s3t_endpoint;
	o.region = "us-east-1";
	o.bucket = "kvt";
	o.prefix = prefix;
	o.path_style = 1;
	o.access_key = S3T_AK;
	o.secret_key = S3T_SK;
	o.part_bytes = 8u << 20;
	o.multipart_bytes = 8u << 20;
	o.max_parallel = 8;
	o.timeout_ms = 5000;
	return o;
}

static inline void s3t_ns(kvt_ns *ns, uint32_t heads, uint32_t dim, uint32_t tokens)
{
	memset(ns, 0, sizeof(*ns));
	test_fill(ns->digest, sizeof(ns->digest), 4242 + tokens);
	ns->layout = (kvt_layout){ .num_layers = 2, .num_kv_heads = heads,
				   .head_dim = dim, .dtype = KVT_DTYPE_F16,
				   .kv_planes = 2, .scale_bytes = 0,
				   .block_size = 16, .chunk_tokens = tokens };
	ns->hash_scheme = KVT_HASH_SHA256;
	ns->tp_size = ns->pp_size = 1;
}

static inline kvt_key s3t_key(uint64_t i)
{
	kvt_key k;
	test_fill(k.b, sizeof(k.b), 7000003 * (i + 1) + (uint64_t)getpid());
	return k;
}

/* A valid image of `key` in `ns`; malloc'd, *len set; NULL on failure. */
static inline uint8_t *s3t_image(const kvt_ns *ns, const kvt_key *key,
				 uint64_t seed, uint64_t *len)
{
	uint64_t lb = kvt_layout_layer_bytes(&ns->layout);
	uint64_t n = KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout);
	uint8_t *payload = malloc(2 * lb), *img = malloc(n);
	const void *layers[2] = { payload, payload + lb };
	struct iovec iov = { img, n };
	kvt_obj_hdr h;
	int rc = payload && img ? 0 : KVT_ENOMEM;

	if (!rc) {
		test_fill(payload, 2 * lb, seed);
		rc = kvt_obj_hdr_init(&h, ns, key);
	}
	if (!rc)
		rc = kvt_obj_write_iov(&h, layers, &iov, 1);
	free(payload);
	if (rc) {
		fprintf(stderr, "s3t_image: %s %s\n", kvt_strerror(rc), kvt_errmsg());
		free(img);
		return NULL;
	}
	*len = n;
	return img;
}

static inline int s3t_put(kvt_tier *t, const kvt_key *k, const uint8_t *img,
			  uint64_t len)
{
	kvt_tier_wbuf *w;
	int rc = t->ops->put_begin(t, k, len, &w);

	if (rc)
		return rc;
	memcpy(w->iov[0].iov_base, img, len);
	return t->ops->put_commit(t, w, KVT_DUR_CACHED);
}

/* 0 if `t` serves exactly `img` under `k`; the get's code; 1 if it served
 * other bytes. */
static inline int s3t_get_cmp(kvt_tier *t, const kvt_key *k, const uint8_t *img,
			      uint64_t len)
{
	kvt_tier_rbuf *r;
	int rc = t->ops->get(t, k, &r);

	if (rc)
		return rc;
	rc = r->len == len && r->n_iov == 1 &&
	     !memcmp(r->iov[0].iov_base, img, len) ? 0 : 1;
	t->ops->release(t, r);
	return rc;
}

static inline void s3t_rmdir(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		CHECK(0);
}

#endif
