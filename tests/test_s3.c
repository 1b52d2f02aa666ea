/*
 * test_s3.c — the S3 tier against a real S3-compatible server that checks
 * SigV4 signatures (@20minutes/s3rver behind tests/s3/server.js, which also
 * injects faults: 500s, 503 SlowDown, hung and truncated responses).
 *
 * Skips (77) when node or tests/s3/node_modules is missing
 * (`npm ci --prefix tests/s3` installs it).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "format/object.h"
#include "tier/s3.h"
#include "test.h"

#define AK "kvtier-test"
#define SK "kvtier-test-secret"

static int port;
static pid_t server_pid;
static int server_stdin = -1;
static char endpoint[64];

static kvt_ns small_ns, big_ns;

static void ns_make(kvt_ns *ns, uint32_t heads, uint32_t dim, uint32_t tokens)
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

static uint64_t img_bytes(const kvt_ns *ns)
{
	return KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout);
}

static kvt_key key_of(uint64_t i)
{
	kvt_key k;
	test_fill(k.b, sizeof(k.b), 7000003 * (i + 1) + (uint64_t)getpid());
	return k;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A valid image of `key` in `ns`; malloc'd, *len set. */
static uint8_t *make_image(const kvt_ns *ns, const kvt_key *key, uint64_t seed,
			   uint64_t *len)
{
	uint64_t lb = kvt_layout_layer_bytes(&ns->layout);
	uint64_t n = img_bytes(ns);
	uint8_t *payload = malloc(2 * lb), *img = malloc(n);
	const void *layers[2] = { payload, payload + lb };
	struct iovec iov = { img, n };
	kvt_obj_hdr h;
	int rc;

	test_fill(payload, 2 * lb, seed);
	rc = kvt_obj_hdr_init(&h, ns, key);
	if (!rc)
		rc = kvt_obj_write_iov(&h, layers, &iov, 1);
	free(payload);
	if (rc) {
		fprintf(stderr, "make_image: %s %s\n", kvt_strerror(rc), kvt_errmsg());
		free(img);
		return NULL;
	}
	*len = n;
	return img;
}

static int put_img(kvt_tier *t, const kvt_key *k, const uint8_t *img,
		   uint64_t len)
{
	kvt_tier_wbuf *w;
	int rc = t->ops->put_begin(t, k, len, &w);

	if (rc)
		return rc;
	memcpy(w->iov[0].iov_base, img, len);
	return t->ops->put_commit(t, w, KVT_DUR_CACHED);
}

/* 0 if `t` serves exactly `img` under `k`, else the get's code (or 1). */
static int get_cmp(kvt_tier *t, const kvt_key *k, const uint8_t *img,
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

/* --- the server ------------------------------------------------------------ */

static void server_start(const char *dir)
{
	char script[2048], mods[4096], data[4096], line[128];
	int in[2], outp[2];
	FILE *f;
	char *slash;

	snprintf(script, sizeof(script), "%s", __FILE__);
	slash = strrchr(script, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(script, sizeof(script), ".");
	snprintf(mods, sizeof(mods), "%s/s3/node_modules/@20minutes/s3rver", script);
	strncat(script, "/s3/server.js", sizeof(script) - strlen(script) - 1);
	if (system("node --version >/dev/null 2>&1") != 0)
		SKIP("node is not installed");
	if (access(mods, R_OK))
		SKIP("%s missing: run npm ci --prefix tests/s3", mods);
	snprintf(data, sizeof(data), "%s", dir);
	if (pipe(in) || pipe(outp))
		exit(1);
	server_pid = fork();
	if (server_pid == 0) {
		dup2(in[0], 0);
		dup2(outp[1], 1);
		close(in[1]);
		close(outp[0]);
		execlp("node", "node", script, data, "kvt", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(outp[1]);
	server_stdin = in[1];
	f = fdopen(outp[0], "r");
	if (!f || !fgets(line, sizeof(line), f) || sscanf(line, "PORT %d", &port) != 1) {
		fprintf(stderr, "s3 test server did not start\n");
		exit(1);
	}
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", port);
}

static void server_stop(void)
{
	if (server_pid > 0) {
		close(server_stdin);
		kill(server_pid, SIGTERM);
		waitpid(server_pid, NULL, 0);
	}
}

static size_t sink(char *p, size_t s, size_t n, void *u)
{
	(void)p;
	(void)u;
	return s * n;
}

static void fault(const char *mode, int count)
{
	char url[256];
	CURL *e = curl_easy_init();

	snprintf(url, sizeof(url), "%s/__fault?mode=%s&count=%d", endpoint, mode, count);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
	CHECK(curl_easy_perform(e) == CURLE_OK);
	curl_easy_cleanup(e);
}

static kvt_s3_opts base_opts(void)
{
	kvt_s3_opts o;

	memset(&o, 0, sizeof(o));
	o.endpoint = endpoint;
	o.region = "us-east-1";
	o.bucket = "kvt";
	o.prefix = "t/";
	o.path_style = 1;
	o.access_key = AK;
	o.secret_key = SK;
	o.part_bytes = 8u << 20;
	o.multipart_bytes = 8u << 20; /* 20 MiB objects go multipart */
	o.max_parallel = 8;
	o.timeout_ms = 5000;
	return o;
}

static int count_cb(void *arg, const kvt_key *k, uint64_t len)
{
	(void)k;
	(void)len;
	(*(uint64_t *)arg)++;
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/kvt_s3_XXXXXX";
	kvt_s3_opts o;
	kvt_tier *a = NULL, *b = NULL, *c = NULL;
	kvt_key k1 = key_of(1), k2 = key_of(2), kg = key_of(3), kb = key_of(4);
	uint8_t *img1, *img1b, *big;
	uint64_t len1, len1b, lenb, n;
	kvt_tier_rbuf *r;
	double t0, dt;
	int rc;

	if (!mkdtemp(dir))
		return 1;
	ns_make(&small_ns, 2, 8, 16);
	ns_make(&big_ns, 8, 128, 2560); /* 2 x 10 MiB layers */
	server_start(dir);
	atexit(server_stop);
	curl_global_init(CURL_GLOBAL_DEFAULT);

	img1 = make_image(&small_ns, &k1, 1, &len1);
	img1b = make_image(&small_ns, &k1, 2, &len1b);
	big = make_image(&big_ns, &kb, 3, &lenb);
	if (!img1 || !img1b || !big)
		return 1;

	/* Open, round trip small, first writer wins in one instance. */
	o = base_opts();
	rc = kvt_s3_open(&o, &a);
	CHECK_EQ(rc, 0);
	if (rc)
		return 1;
	/* Another node, opened before the puts. */
	CHECK_EQ(kvt_s3_open(&o, &b), 0);
	CHECK_EQ(a->ops->exists(a, &k1), 0);
	CHECK_EQ(a->ops->get(a, &k1, &r), KVT_ENOTFOUND);
	CHECK_EQ(put_img(a, &k1, img1, len1), 0);
	CHECK_EQ(a->ops->exists(a, &k1), 1);
	CHECK_EQ(get_cmp(a, &k1, img1, len1), 0);
	CHECK_EQ(put_img(a, &k1, img1b, len1b), KVT_EEXIST);
	/* s3rver ignores If-None-Match on PUT: the other node's put of the
	 * same key wins last (an endpoint with conditional writes answers
	 * 412 -> KVT_EEXIST).  Either way a reader gets one whole version. */
	rc = put_img(b, &k1, img1b, len1b);
	CHECK(rc == 0 || rc == KVT_EEXIST);
	rc = get_cmp(a, &k1, rc == 0 ? img1b : img1, len1);
	CHECK_EQ(rc, 0);

	/* 20 MiB: multipart with parallel parts, parallel ranged GET. */
	t0 = now_s();
	CHECK_EQ(put_img(a, &kb, big, lenb), 0);
	CHECK_EQ(get_cmp(a, &kb, big, lenb), 0);
	CHECK_EQ(get_cmp(b, &kb, big, lenb), 0);
	fprintf(stderr, "20 MiB put+2 gets: %.2f s\n", now_s() - t0);
	/* The default threshold (64 MiB): the same 20 MiB in one PUT and one
	 * GET, under another prefix; and a 1 MiB threshold forces many
	 * parallel parts and ranges of part_bytes (1 MiB). */
	{
		kvt_s3_opts od = base_opts();
		kvt_tier *d;
		od.prefix = "one/";
		od.multipart_bytes = 0;
		CHECK_EQ(kvt_s3_open(&od, &d), 0);
		t0 = now_s();
		CHECK_EQ(put_img(d, &kb, big, lenb), 0);
		CHECK_EQ(get_cmp(d, &kb, big, lenb), 0);
		fprintf(stderr, "20 MiB single put+get: %.2f s\n", now_s() - t0);
		d->ops->close(d);
		od.prefix = "many/";
		od.multipart_bytes = 1u << 20;
		od.part_bytes = 1u << 20;
		CHECK_EQ(kvt_s3_open(&od, &d), 0);
		t0 = now_s();
		CHECK_EQ(put_img(d, &kb, big, lenb), 0);
		CHECK_EQ(get_cmp(d, &kb, big, lenb), 0);
		fprintf(stderr, "20 MiB in 1 MiB parts put+get: %.2f s\n", now_s() - t0);
		d->ops->close(d);
		od.multipart_bytes = (1u << 20) - 1;
		CHECK_EQ(kvt_s3_open(&od, &d), KVT_EINVAL);
	}

	/* A new instance sees both through the listing. */
	CHECK_EQ(kvt_s3_open(&o, &c), 0);
	CHECK_EQ(c->ops->exists(c, &k1), 1);
	CHECK_EQ(c->ops->exists(c, &kb), 1);
	n = 0;
	c->ops->iterate(c, count_cb, &n);
	CHECK_EQ(n, 2);
	c->ops->close(c);
	/* ... and so does b after a refresh (b already knows kb: its own
	 * successful get added it). */
	CHECK_EQ(kvt_s3_refresh(b), 0);
	CHECK_EQ(b->ops->exists(b, &kb), 1);

	/* Foreign objects are skipped (one log line), garbage is never data. */
	CHECK_EQ(kvt_s3_put_raw(a, "README.txt", "hello", 5), 0);
	CHECK_EQ(kvt_s3_put_raw(a, "zz/not-a-key.kvt", "hello", 5), 0);
	{
		char name[128], hex[65];
		uint8_t junk[8192];
		kvt_key_hex(&kg, hex);
		snprintf(name, sizeof(name), "%.2s/%s.kvt", hex, hex);
		test_fill(junk, sizeof(junk), 99);
		CHECK_EQ(kvt_s3_put_raw(a, name, junk, sizeof(junk)), 0);
		/* a valid image of another key planted under kg's name */
		CHECK_EQ(kvt_s3_open(&o, &c), 0);
		CHECK_EQ(c->ops->exists(c, &kg), 1);
		n = 0;
		c->ops->iterate(c, count_cb, &n);
		CHECK_EQ(n, 3);
		CHECK_EQ(c->ops->get(c, &kg, &r), KVT_ECORRUPT);
		CHECK_EQ(c->ops->exists(c, &kg), 0);
		CHECK_EQ(c->ops->get(c, &kg, &r), KVT_ENOTFOUND);
		CHECK_EQ(kvt_s3_put_raw(a, name, img1, len1), 0);
		CHECK_EQ(c->ops->get(c, &kg, &r), KVT_ECORRUPT);
		{
			kvt_tier_stats st;
			c->ops->stats(c, &st);
			CHECK_EQ(st.corrupt, 2);
		}
		c->ops->close(c);
	}

	/* HMAC: a tier with another key rejects the object like a corrupt one. */
	{
		kvt_s3_opts oh = base_opts();
		kvt_tier *h1, *h2;
		kvt_key kh = key_of(5);
		uint8_t *imgh;
		uint64_t lenh;
		oh.prefix = "h/";
		oh.hmac_key = (const uint8_t *)"secret-one";
		oh.hmac_key_len = 10;
		imgh = make_image(&small_ns, &kh, 5, &lenh);
		CHECK_EQ(kvt_s3_open(&oh, &h1), 0);
		CHECK_EQ(put_img(h1, &kh, imgh, lenh), 0);
		CHECK_EQ(get_cmp(h1, &kh, imgh, lenh), 0);
		oh.hmac_key = (const uint8_t *)"secret-two";
		CHECK_EQ(kvt_s3_open(&oh, &h2), 0);
		CHECK_EQ(h2->ops->get(h2, &kh, &r), KVT_ECORRUPT);
		h1->ops->close(h1);
		h2->ops->close(h2);
		free(imgh);
	}

	/* Wrong secret: the open fails naming the authentication failure. */
	{
		kvt_s3_opts ow = base_opts();
		ow.secret_key = "not-the-secret";
		c = NULL;
		rc = kvt_s3_open(&ow, &c);
		CHECK_EQ(rc, -EACCES);
		CHECK(strstr(kvt_errmsg(), "authentication failed") != NULL);
		CHECK(strstr(kvt_errmsg(), "SignatureDoesNotMatch") != NULL);
		fprintf(stderr, "wrong secret: %s\n", kvt_errmsg());
		ow = base_opts();
		ow.access_key = "nobody";
		CHECK_EQ(kvt_s3_open(&ow, &c), -EACCES);
		CHECK(strstr(kvt_errmsg(), "InvalidAccessKeyId") != NULL);
	}

	/* Faults: 500s and 503 SlowDown are retried and then succeed. */
	fault("500", 2);
	CHECK_EQ(get_cmp(a, &k1, img1b, len1b) == 0 || get_cmp(a, &k1, img1, len1) == 0, 1);
	fault("503", 3);
	{
		kvt_key k5 = key_of(6);
		uint8_t *i5;
		uint64_t l5;
		i5 = make_image(&small_ns, &k5, 6, &l5);
		CHECK_EQ(put_img(a, &k5, i5, l5), 0);
		CHECK_EQ(get_cmp(a, &k5, i5, l5), 0);
		free(i5);
	}
	/* Truncated once: retried; truncated every time: an error, never data. */
	fault("truncate", 1);
	CHECK_EQ(get_cmp(a, &kb, big, lenb), 0);
	fault("truncate", 1000);
	rc = a->ops->get(a, &k2, &r); /* absent key: 404s pass untouched */
	CHECK_EQ(rc, KVT_ENOTFOUND);
	rc = a->ops->get(a, &kb, &r);
	CHECK(rc < 0);
	if (!rc)
		a->ops->release(a, r);
	fault("none", 0);

	/* A hung server: the call returns within its deadline. */
	{
		kvt_s3_opts oq = base_opts();
		kvt_tier *q;
		oq.timeout_ms = 1500;
		CHECK_EQ(kvt_s3_open(&oq, &q), 0);
		fault("hang", 1000);
		t0 = now_s();
		rc = q->ops->get(q, &k1, &r);
		dt = now_s() - t0;
		CHECK_EQ(rc, KVT_ETIMEDOUT);
		CHECK(dt < 2.5);
		fprintf(stderr, "hung get: %s after %.2f s (%s)\n", kvt_strerror(rc), dt, kvt_errmsg());
		t0 = now_s();
		rc = put_img(q, &k2, img1, len1);
		dt = now_s() - t0;
		CHECK(rc < 0);
		CHECK(dt < 2.5);
		fault("slow", 1000);
		t0 = now_s();
		rc = q->ops->get(q, &k1, &r);
		CHECK(rc < 0);
		CHECK(now_s() - t0 < 2.5);
		fault("none", 0);
		q->ops->close(q);
	}

	/* Endpoint down: nothing listens. */
	{
		kvt_s3_opts od = base_opts();
		char ep[64];
		struct sockaddr_in sa = { .sin_family = AF_INET };
		socklen_t sl = sizeof(sa);
		int s = socket(AF_INET, SOCK_STREAM, 0);
		kvt_tier *d;
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(s, (struct sockaddr *)&sa, sizeof(sa));
		getsockname(s, (struct sockaddr *)&sa, &sl);
		snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", ntohs(sa.sin_port));
		close(s);
		od.endpoint = ep;
		od.timeout_ms = 1000;
		t0 = now_s();
		CHECK_EQ(kvt_s3_open(&od, &d), 0); /* cold cache, one log line */
		rc = put_img(d, &k2, img1, len1);
		CHECK(rc < 0);
		fprintf(stderr, "endpoint down put: %s (%s)\n", kvt_strerror(rc), kvt_errmsg());
		rc = d->ops->get(d, &k1, &r);
		CHECK(rc < 0 && rc != KVT_ENOTFOUND ? 1 : rc == KVT_ENOTFOUND);
		CHECK(now_s() - t0 < 4.0);
		d->ops->close(d);
	}

	/* GC by budget through listing. */
	{
		uint64_t del = 0;
		CHECK_EQ(kvt_s3_gc(a, 0, 1, &del), 0);
		CHECK(del >= 3);
		CHECK_EQ(a->ops->exists(a, &kb), 0);
		CHECK_EQ(a->ops->get(a, &kb, &r), KVT_ENOTFOUND);
	}

	/* Delete. */
	CHECK_EQ(put_img(a, &k2, img1, len1) == 0 ? 0 : 1, 0);
	CHECK_EQ(a->ops->del(a, &k2), 0);
	CHECK_EQ(a->ops->exists(a, &k2), 0);
	CHECK_EQ(a->ops->get(a, &k2, &r), KVT_ENOTFOUND);

	a->ops->close(a);
	b->ops->close(b);
	free(img1);
	free(img1b);
	free(big);
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd))
			CHECK(0);
	}
	curl_global_cleanup();
	TEST_DONE();
}
