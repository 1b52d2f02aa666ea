/*
 * test_s3.c — the S3 tier against a real S3-compatible server that checks
 * SigV4 signatures (@20minutes/s3rver behind tests/s3/server.js): round
 * trips small and multipart, image buffers reused (exact images out of
 * buffers that held others, no page faults on reuse), first writer wins,
 * the listing seen by another node, foreign and impossible objects in the
 * prefix, HMAC, wrong credentials, a missing bucket (at open and on put),
 * GC and delete.  The hostile-endpoint cases are in test_s3_faults.c.
 *
 * Fails when node or tests/s3/node_modules is missing (scripts/install-deps.sh
 * installs both).
 */
#include <sys/resource.h>
#include <sys/stat.h>

#include "test_s3_server.h"

static kvt_ns small_ns, big_ns;

static int count_cb(void *arg, const kvt_key *k, uint64_t len)
{
	(void)k;
	(void)len;
	(*(uint64_t *)arg)++;
	return 0;
}

/* Plant a raw object of `len` bytes under the chunk name of `k`. */
static int plant_named(kvt_tier *t, const kvt_key *k, size_t len)
{
	char name[128], hex[65];
	uint8_t *junk = calloc(1, len ? len : 1);
	int rc;

	kvt_key_hex(k, hex);
	snprintf(name, sizeof(name), "%.2s/%s.kvt", hex, hex);
	test_fill(junk, len, len);
	rc = kvt_s3_put_raw(t, name, junk, len);
	free(junk);
	return rc;
}

int main(void)
{
	char dir[] = "/tmp/kvt_s3_XXXXXX";
	kvt_s3_opts o;
	kvt_tier *a = NULL, *b = NULL, *c = NULL;
	kvt_key k1 = s3t_key(1), k2 = s3t_key(2), kg = s3t_key(3), kb = s3t_key(4);
	kvt_key ks1 = s3t_key(8), ks2 = s3t_key(9);
	uint8_t *img1, *img1b, *big;
	uint64_t len1, len1b, lenb, n;
	kvt_tier_rbuf *r;
	double t0;
	int rc;

	if (!mkdtemp(dir))
		return 1;
	s3t_ns(&small_ns, 2, 8, 16);
	s3t_ns(&big_ns, 8, 128, 2560); /* 2 x 10 MiB layers */
	s3t_start(dir, (const char *const[]){ "kvt", "gone", NULL });
	atexit(s3t_stop);
	curl_global_init(CURL_GLOBAL_DEFAULT);

	img1 = s3t_image(&small_ns, &k1, 1, &len1);
	img1b = s3t_image(&small_ns, &k1, 2, &len1b);
	big = s3t_image(&big_ns, &kb, 3, &lenb);
	if (!img1 || !img1b || !big)
		return 1;

	/* Open, round trip small, first writer wins in one instance. */
	o = s3t_opts("t/");
	rc = kvt_s3_open(&o, &a);
	CHECK_EQ(rc, 0);
	if (rc)
		return 1;
	/* Another node, opened before the puts. */
	CHECK_EQ(kvt_s3_open(&o, &b), 0);
	CHECK_EQ(a->ops->exists(a, &k1), 0);
	CHECK_EQ(a->ops->get(a, &k1, &r), KVT_ENOTFOUND);
	CHECK_EQ(s3t_put(a, &k1, img1, len1), 0);
	CHECK_EQ(a->ops->exists(a, &k1), 1);
	CHECK_EQ(s3t_get_cmp(a, &k1, img1, len1), 0);
	CHECK_EQ(s3t_put(a, &k1, img1b, len1b), KVT_EEXIST);
	/* s3rver ignores If-None-Match on PUT: the other node's put of the
	 * same key wins last (an endpoint with conditional writes answers
	 * 412 -> KVT_EEXIST).  Either way a reader gets one whole version. */
	rc = s3t_put(b, &k1, img1b, len1b);
	CHECK(rc == 0 || rc == KVT_EEXIST);
	rc = s3t_get_cmp(a, &k1, rc == 0 ? img1b : img1, len1);
	CHECK_EQ(rc, 0);

	/* 20 MiB: multipart with parallel parts, parallel ranged GET. */
	t0 = s3t_now();
	CHECK_EQ(s3t_put(a, &kb, big, lenb), 0);
	CHECK_EQ(s3t_get_cmp(a, &kb, big, lenb), 0);
	CHECK_EQ(s3t_get_cmp(b, &kb, big, lenb), 0);
	fprintf(stderr, "20 MiB put+2 gets: %.2f s\n", s3t_now() - t0);
	/* The default threshold (64 MiB): the same 20 MiB in one PUT and one
	 * GET, under another prefix; and a 1 MiB threshold forces many
	 * parallel parts and ranges of part_bytes (1 MiB). */
	{
		kvt_s3_opts od = s3t_opts("t/");
		kvt_tier *d;
		od.prefix = "one/";
		od.multipart_bytes = 0;
		CHECK_EQ(kvt_s3_open(&od, &d), 0);
		t0 = s3t_now();
		CHECK_EQ(s3t_put(d, &kb, big, lenb), 0);
		CHECK_EQ(s3t_get_cmp(d, &kb, big, lenb), 0);
		fprintf(stderr, "20 MiB single put+get: %.2f s\n", s3t_now() - t0);
		d->ops->close(d);
		od.prefix = "many/";
		od.multipart_bytes = 1u << 20;
		od.part_bytes = 1u << 20;
		CHECK_EQ(kvt_s3_open(&od, &d), 0);
		t0 = s3t_now();
		CHECK_EQ(s3t_put(d, &kb, big, lenb), 0);
		CHECK_EQ(s3t_get_cmp(d, &kb, big, lenb), 0);
		fprintf(stderr, "20 MiB in 1 MiB parts put+get: %.2f s\n", s3t_now() - t0);
		d->ops->close(d);
		od.multipart_bytes = (1u << 20) - 1;
		CHECK_EQ(kvt_s3_open(&od, &d), KVT_EINVAL);
	}

	/* Image buffers are reused: the tier keeps released ones, so a chunk
	 * of 32 MiB + 4 KiB (Llama-3.1-8B's 256 tokens; above glibc's 32 MiB
	 * cap on reusing freed memory) is not an mmap, 8193 page faults and a
	 * munmap per put and per get.  A buffer holds what its last user
	 * left, yet every get serves exactly its own image, single or in
	 * ranges, also one read into a buffer a larger image left behind,
	 * and an image still held is not handed to the next get. */
	{
		kvt_s3_opts ob = s3t_opts("reuse/");
		kvt_ns huge_ns;
		kvt_key kh = s3t_key(10);
		uint8_t *huge;
		uint64_t lenh;
		kvt_tier *d = NULL;
		kvt_tier_rbuf *r1 = NULL, *r2 = NULL;

		s3t_ns(&huge_ns, 8, 128, 4096);
		huge = s3t_image(&huge_ns, &kh, 11, &lenh);
		CHECK(huge != NULL);
		for (int pass = 0; huge && pass < 2; pass++) {
			/* pass 1: multipart and ranged GETs of 4 MiB */
			ob.multipart_bytes = pass ? 1u << 20 : 0;
			ob.part_bytes = pass ? 4u << 20 : 0;
			ob.prefix = pass ? "reuse-r/" : "reuse/";
			CHECK_EQ(kvt_s3_open(&ob, &d), 0);
			if (!d)
				break;
			CHECK_EQ(s3t_put(d, &kh, huge, lenh), 0);
			CHECK_EQ(s3t_put(d, &kb, big, lenb), 0); /* into huge's buffer */
			CHECK_EQ(s3t_get_cmp(d, &kh, huge, lenh), 0);
			CHECK_EQ(s3t_get_cmp(d, &kb, big, lenb), 0);
			CHECK_EQ(d->ops->get(d, &kb, &r1), 0);
			CHECK_EQ(d->ops->get(d, &kh, &r2), 0);
			if (r1 && r2) {
				CHECK(r1->iov[0].iov_base != r2->iov[0].iov_base);
				CHECK(r1->len == lenb && !memcmp(r1->iov[0].iov_base, big, lenb));
				CHECK(r2->len == lenh && !memcmp(r2->iov[0].iov_base, huge, lenh));
			}
			if (r1)
				d->ops->release(d, r1);
			if (r2)
				d->ops->release(d, r2);
			r1 = r2 = NULL;
			if (!pass) {
				/* A get into a reused buffer faults in almost
				 * none of its pages (a fresh one: 8193). */
				struct rusage u0, u1;
				getrusage(RUSAGE_SELF, &u0);
				CHECK_EQ(s3t_get_cmp(d, &kh, huge, lenh), 0);
				getrusage(RUSAGE_SELF, &u1);
				fprintf(stderr, "32 MiB get into a reused buffer: %ld page faults\n",
					u1.ru_minflt - u0.ru_minflt);
				CHECK(u1.ru_minflt - u0.ru_minflt < (long)(lenh / 4096 / 4));
			}
			d->ops->close(d);
			d = NULL;
		}
		free(huge);
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
		/* Chunk names whose listed size rules a chunk out: the bare
		 * header's 4096 bytes and 100 bytes.  Lookup must not count
		 * them (a hit would skip prefill for a chunk no get serves). */
		CHECK_EQ(plant_named(a, &ks1, KVT_OBJ_HEADER_BYTES), 0);
		CHECK_EQ(plant_named(a, &ks2, 100), 0);
		CHECK_EQ(kvt_s3_open(&o, &c), 0);
		CHECK_EQ(c->ops->exists(c, &kg), 1);
		CHECK_EQ(c->ops->exists(c, &ks1), 0);
		CHECK_EQ(c->ops->exists(c, &ks2), 0);
		n = 0;
		c->ops->iterate(c, count_cb, &n);
		CHECK_EQ(n, 3);
		{
			kvt_s3_status hs;
			CHECK_EQ(kvt_s3_status_get(c, &hs), 0);
			CHECK_EQ(hs.skipped_size, 2);
			CHECK_EQ(hs.skipped_foreign, 2);
			CHECK_EQ(hs.list_rc, 0);
			CHECK_EQ(hs.reachable, 1);
		}
		CHECK_EQ(c->ops->get(c, &kg, &r), KVT_ECORRUPT);
		CHECK_EQ(c->ops->exists(c, &kg), 0);
		/* The same object again: never handed out, not counted twice,
		 * and left in the bucket (another node may replace it). */
		CHECK_EQ(c->ops->get(c, &kg, &r), KVT_ECORRUPT);
		CHECK(strstr(kvt_errmsg(), "found bad before") != NULL);
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
		kvt_s3_opts oh = s3t_opts("t/");
		kvt_tier *h1, *h2;
		kvt_key kh = s3t_key(5);
		uint8_t *imgh;
		uint64_t lenh;
		oh.prefix = "h/";
		oh.hmac_key = (const uint8_t *)"secret-one";
		oh.hmac_key_len = 10;
		imgh = s3t_image(&small_ns, &kh, 5, &lenh);
		CHECK_EQ(kvt_s3_open(&oh, &h1), 0);
		CHECK_EQ(s3t_put(h1, &kh, imgh, lenh), 0);
		CHECK_EQ(s3t_get_cmp(h1, &kh, imgh, lenh), 0);
		oh.hmac_key = (const uint8_t *)"secret-two";
		CHECK_EQ(kvt_s3_open(&oh, &h2), 0);
		CHECK_EQ(h2->ops->get(h2, &kh, &r), KVT_ECORRUPT);
		h1->ops->close(h1);
		h2->ops->close(h2);
		free(imgh);
	}

	/* Wrong secret: the open fails naming the authentication failure. */
	{
		kvt_s3_opts ow = s3t_opts("t/");
		ow.secret_key = "not-the-secret";
		c = NULL;
		rc = kvt_s3_open(&ow, &c);
		CHECK_EQ(rc, -EACCES);
		CHECK(strstr(kvt_errmsg(), "authentication failed") != NULL);
		CHECK(strstr(kvt_errmsg(), "SignatureDoesNotMatch") != NULL);
		fprintf(stderr, "wrong secret: %s\n", kvt_errmsg());
		ow = s3t_opts("t/");
		ow.access_key = "nobody";
		CHECK_EQ(kvt_s3_open(&ow, &c), -EACCES);
		CHECK(strstr(kvt_errmsg(), "InvalidAccessKeyId") != NULL);
	}

	/* A missing bucket is named as such at open, not taken for an empty
	 * one. */
	{
		kvt_s3_opts on = s3t_opts("t/");
		on.bucket = "nope";
		c = NULL;
		rc = kvt_s3_open(&on, &c);
		CHECK_EQ(rc, KVT_ECONFIG);
		CHECK(strstr(kvt_errmsg(), "NoSuchBucket") != NULL);
		CHECK(strstr(kvt_errmsg(), "'nope'") != NULL);
		fprintf(stderr, "missing bucket at open: %s\n", kvt_errmsg());
		if (!rc)
			c->ops->close(c);
	}
	/* ... and on put and get when it goes away after the open: a put
	 * names it, a get is not a miss, a re-list is an error. */
	{
		kvt_s3_opts og = s3t_opts("t/");
		kvt_tier *g = NULL;
		kvt_key kn = s3t_key(7);
		og.bucket = "gone";
		CHECK_EQ(kvt_s3_open(&og, &g), 0);
		if (g) {
			CHECK_EQ(s3t_signed("DELETE", "/gone"), 204);
			rc = s3t_put(g, &kn, img1, len1);
			CHECK_EQ(rc, KVT_ECONFIG);
			CHECK(strstr(kvt_errmsg(), "NoSuchBucket") != NULL);
			CHECK(strstr(kvt_errmsg(), "'gone'") != NULL);
			fprintf(stderr, "missing bucket on put: %s\n", kvt_errmsg());
			rc = g->ops->get(g, &kn, &r);
			CHECK_EQ(rc, KVT_ECONFIG);
			CHECK(strstr(kvt_errmsg(), "NoSuchBucket") != NULL);
			CHECK_EQ(kvt_s3_refresh(g), KVT_ECONFIG);
			{
				kvt_s3_status hs;
				CHECK_EQ(kvt_s3_status_get(g, &hs), 0);
				CHECK_EQ(hs.list_rc, KVT_ECONFIG);
				CHECK(strstr(hs.list_error, "NoSuchBucket") != NULL);
				CHECK_EQ(hs.read_errors, 1);
			}
			g->ops->close(g);
		}
	}

	/* Credentials from the AWS files, as a fleet's nodes have them: the
	 * profile AWS_PROFILE names, in the shared credentials file or only
	 * in the config file, a session token longer than a kilobyte; a
	 * profile with the wrong keys is refused by the server's signature
	 * check, so the keys really came from the file. */
	{
		char cred[1200], conf[1200], tok[1501];
		FILE *f;
		kvt_tier *p = NULL;
		kvt_key kc = s3t_key(77);
		kvt_s3_opts po = s3t_opts("cred/");

		memset(tok, 'T', sizeof(tok) - 1);
		tok[sizeof(tok) - 1] = '\0';
		snprintf(cred, sizeof(cred), "%s/credentials", dir);
		snprintf(conf, sizeof(conf), "%s/config", dir);
		f = fopen(cred, "w");
		CHECK(f != NULL);
		if (f) {
			fprintf(f, "[default]\naws_access_key_id = WRONGKEY\n"
				   "aws_secret_access_key = wrong\n\n"
				   "# the fleet's profile\n[fleet]\n"
				   "aws_access_key_id = %s\naws_secret_access_key = %s\n"
				   "aws_session_token = %s\n", S3T_AK, S3T_SK, tok);
			fclose(f);
		}
		f = fopen(conf, "w");
		CHECK(f != NULL);
		if (f) {
			fprintf(f, "[profile cfgonly]\nregion = us-east-1\n"
				   "aws_access_key_id = %s\naws_secret_access_key = %s\n",
				   S3T_AK, S3T_SK);
			fclose(f);
		}
		po.access_key = po.secret_key = NULL;
		unsetenv("AWS_ACCESS_KEY_ID");
		unsetenv("AWS_SECRET_ACCESS_KEY");
		setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
		setenv("AWS_CONFIG_FILE", conf, 1);
		uint64_t lenc;
		uint8_t *imgc = s3t_image(&small_ns, &kc, 7, &lenc);
		for (int i = 0; imgc && i < 2; i++) {
			static const char *const prof[] = { "fleet", "cfgonly" };
			setenv("AWS_PROFILE", prof[i], 1);
			CHECK_EQ(kvt_s3_open(&po, &p), 0);
			if (!p)
				continue;
			rc = s3t_put(p, &kc, imgc, lenc);
			CHECK(rc == 0 || (i == 1 && rc == KVT_EEXIST));
			CHECK_EQ(s3t_get_cmp(p, &kc, imgc, lenc), 0);
			p->ops->close(p);
			p = NULL;
		}
		free(imgc);
		/* The default profile's key id is not the server's. */
		setenv("AWS_PROFILE", "default", 1);
		CHECK_EQ(kvt_s3_open(&po, &p), -EACCES);
		CHECK(strstr(kvt_errmsg(), "InvalidAccessKeyId") != NULL);
		CHECK(strstr(kvt_errmsg(), "WRONGKEY") != NULL);
		if (p)
			p->ops->close(p);
		unsetenv("AWS_PROFILE");
		unsetenv("AWS_SHARED_CREDENTIALS_FILE");
		unsetenv("AWS_CONFIG_FILE");
	}

	/* Capacity: a put that does not fit evicts the oldest chunks first,
	 * from the index and from the bucket, and nothing younger. */
	{
		kvt_s3_opts oc = s3t_opts("cap/");
		kvt_tier *d = NULL;
		kvt_tier_stats st;
		kvt_key kc[5];
		oc.capacity = 3 * len1;
		CHECK_EQ(kvt_s3_open(&oc, &d), 0);
		for (int i = 0; d && i < 5; i++) {
			kc[i] = s3t_key(20 + i);
			CHECK_EQ(s3t_put(d, &kc[i], img1, len1), 0);
		}
		for (int i = 0; d && i < 5; i++) {
			CHECK_EQ(d->ops->exists(d, &kc[i]), i >= 2);
			if (i < 2)
				CHECK_EQ(d->ops->get(d, &kc[i], &r), KVT_ENOTFOUND);
		}
		if (d) {
			d->ops->stats(d, &st);
			CHECK_EQ(st.evictions, 2);
			CHECK_EQ(st.chunks, 3);
			CHECK_EQ(st.used_bytes, 3 * len1);
			/* A re-listing sees what the bucket holds: the same three. */
			CHECK_EQ(kvt_s3_refresh(d), 0);
			d->ops->stats(d, &st);
			CHECK_EQ(st.chunks, 3);
			CHECK_EQ(d->ops->exists(d, &kc[2]), 1);
			d->ops->close(d);
		}
	}

	/* GC by budget through listing. */
	{
		uint64_t del = 0;
		CHECK_EQ(kvt_s3_gc(a, 0, 1, &del), 0);
		/* k1, kb, and the garbage object a read left in place */
		CHECK_EQ(del, 3);
		CHECK_EQ(a->ops->exists(a, &kb), 0);
		CHECK_EQ(a->ops->get(a, &kb, &r), KVT_ENOTFOUND);
	}

	/* Delete. */
	CHECK_EQ(s3t_put(a, &k2, img1, len1) == 0 ? 0 : 1, 0);
	CHECK_EQ(a->ops->del(a, &k2), 0);
	CHECK_EQ(a->ops->exists(a, &k2), 0);
	CHECK_EQ(a->ops->get(a, &k2, &r), KVT_ENOTFOUND);

	a->ops->close(a);
	b->ops->close(b);
	free(img1);
	free(img1b);
	free(big);
	s3t_rmdir(dir);
	curl_global_cleanup();
	TEST_DONE();
}
