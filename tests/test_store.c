/*
 * test_store.c — the public API over a DRAM tier and over DRAM + a disk
 * directory: round trips, first writer wins, layouts that do not match,
 * lookups, zero-copy reads, async ops, tenants, corruption and promotion.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

static kvt_ns_desc desc(const char *tenant)
{
	kvt_ns_desc d = { 0 };
	d.model = "test/model";
	d.layout = (kvt_layout){ .num_layers = 4, .num_kv_heads = 2, .head_dim = 64,
				 .dtype = KVT_DTYPE_BF16, .kv_planes = 2,
				 .block_size = 16, .chunk_tokens = 64 };
	d.tenant = tenant;
	return d;
}

static kvt_store *open_store(const char *dir, const char *cpu_size)
{
	kvt_config *c = kvt_config_new();
	kvt_store *st;
	int err;

	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", cpu_size), 0);
	CHECK_EQ(kvt_config_set(c, "dram_page_size", "16KiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "tenants",
				"a=000102030405060708090a0b0c0d0e0f,b=0f0e0d0c0b0a09080706050403020100"), 0);
	if (dir)
		CHECK_EQ(kvt_config_set(c, "local_disk", dir), 0);
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

static void chain(const kvt_ns *ns, uint32_t seed, size_t n_tokens, kvt_key *keys)
{
	uint32_t *t = malloc(n_tokens * sizeof(*t));
	for (size_t i = 0; i < n_tokens; i++)
		t[i] = (uint32_t)(i * 2654435761u + seed);
	CHECK_EQ(kvt_key_chain(ns, t, n_tokens, NULL, keys, n_tokens / 64),
		 (int)(n_tokens / 64));
	free(t);
}

static void dram_only(void)
{
	kvt_store *st = open_store(NULL, "4MiB");
	kvt_ns_desc d = desc(NULL);
	kvt_ns ns, nsa, nsb;
	size_t len = 0, per;
	kvt_key k[8];
	uint8_t *p, *q;
	kvt_ref *ref;
	const struct iovec *iov;
	int n_iov;

	if (!st) {
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_store_tiers(st), 1);
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	per = kvt_layout_payload_bytes(&ns.layout);
	CHECK(per == 4 * 2 * 64 * 2 * 64 * 2);
	p = malloc(per + 1);
	q = malloc(per + 1);
	chain(&ns, 1, 8 * 64, k);

	/* Round trip; then the first version wins. */
	test_fill(p, per, 1);
	CHECK_EQ(kvt_put(st, &ns, &k[0], p, per, KVT_DUR_CACHED), 0);
	CHECK_EQ(kvt_get(st, &ns, &k[0], q, per, &len), 0);
	CHECK(len == per && !memcmp(p, q, per));
	test_fill(p, per, 2);
	CHECK_EQ(kvt_put(st, &ns, &k[0], p, per, KVT_DUR_CACHED), KVT_EEXIST);
	CHECK_EQ(kvt_get(st, &ns, &k[0], q, per, &len), 0);
	test_fill(p, per, 1);
	CHECK(!memcmp(p, q, per));

	/* Layouts that do not match; durability this store cannot give. */
	CHECK_EQ(kvt_put(st, &ns, &k[1], p, per - 1, KVT_DUR_CACHED), KVT_ELAYOUT);
	CHECK(strstr(kvt_errmsg(), "layout needs") != NULL);
	CHECK_EQ(kvt_put(st, &ns, &k[1], p, per + 1, KVT_DUR_CACHED), KVT_ELAYOUT);
	CHECK_EQ(kvt_put(st, &ns, &k[1], p, per, KVT_DUR_POWER_SAFE), KVT_ENOTSUP);
	CHECK_EQ(kvt_put(st, &ns, &k[1], p, per, 7), KVT_EINVAL);
	CHECK_EQ(kvt_exists(st, &ns, &k[1]), 0);
	/* Nothing stored was damaged by the failures. */
	CHECK_EQ(kvt_get(st, &ns, &k[0], q, per, &len), 0);
	CHECK(!memcmp(p, q, per));
	CHECK_EQ(kvt_get(st, &ns, &k[0], q, per - 1, &len), KVT_ESMALL);
	CHECK(len == per);

	/* One layer at a time. */
	for (uint32_t l = 0; l < 4; l++) {
		CHECK_EQ(kvt_get_layer(st, &ns, &k[0], l, q, per), 0);
		CHECK(!memcmp(q, p + l * (per / 4), per / 4));
	}
	CHECK_EQ(kvt_get_layer(st, &ns, &k[0], 4, q, per), KVT_EINVAL);

	/* Lookup: the longest run of leading keys. */
	for (int i = 1; i < 5; i++) {
		test_fill(p, per, 10 + (uint64_t)i);
		CHECK_EQ(kvt_put(st, &ns, &k[i], p, per, KVT_DUR_CACHED), 0);
	}
	test_fill(p, per, 17);
	CHECK_EQ(kvt_put(st, &ns, &k[6], p, per, KVT_DUR_CACHED), 0); /* a hole at 5 */
	{
		uint8_t tiers[8];
		kvt_lookup_result r = { .tier = tiers };
		CHECK_EQ(kvt_lookup(st, &ns, k, 8, &r), 5);
		CHECK_EQ(r.n_hit, 5);
		CHECK_EQ(tiers[4], 0);
	}

	/* Zero-copy: the borrowed pages hold the payload. */
	CHECK_EQ(kvt_borrow(st, &ns, &k[2], &ref), 0);
	CHECK_EQ(kvt_ref_iov(ref, &iov, &n_iov), 0);
	CHECK(kvt_ref_len(ref) == per);
	{
		size_t off = 0;
		test_fill(p, per, 12);
		for (int i = 0; i < n_iov; i++) {
			CHECK(!memcmp(iov[i].iov_base, p + off, iov[i].iov_len));
			off += iov[i].iov_len;
		}
		CHECK(off == per);
	}
	CHECK_EQ(kvt_ref_verify(ref), 0);
	/* A layer at a time, verified in the copy. */
	{
		uint64_t lb = kvt_layout_layer_bytes(&ns.layout);
		uint32_t nl = ns.layout.num_layers;
		test_fill(p, per, 12);
		for (uint32_t l = 0; l < nl; l++) {
			memset(q, 0, lb);
			CHECK_EQ(kvt_ref_read_layer(ref, l, q, lb), 0);
			CHECK(!memcmp(q, p + l * lb, lb));
		}
		CHECK_EQ(kvt_ref_read_layer(ref, nl, q, lb), KVT_EINVAL);
		CHECK_EQ(kvt_ref_read_layer(ref, 0, q, lb - 1), KVT_ESMALL);
		CHECK_EQ(kvt_ref_read_layer(NULL, 0, q, lb), KVT_EINVAL);
	}
	/* Deleted while borrowed: gone for others, intact for the holder. */
	CHECK_EQ(kvt_delete(st, &ns, &k[2]), 0);
	CHECK_EQ(kvt_exists(st, &ns, &k[2]), 0);
	CHECK_EQ(kvt_ref_verify(ref), 0);
	kvt_release(ref);
	CHECK_EQ(kvt_delete(st, &ns, &k[2]), KVT_ENOTFOUND);
	CHECK_EQ(kvt_get(st, &ns, &k[2], q, per, &len), KVT_ENOTFOUND);
	ref = (kvt_ref *)&len; /* whatever the caller left there */
	CHECK_EQ(kvt_borrow(st, &ns, &k[2], &ref), KVT_ENOTFOUND);
	CHECK(ref == NULL);

	/* Async forms. */
	{
		kvt_op *op1, *op2;
		test_fill(p, per, 99);
		CHECK_EQ(kvt_put_async(st, &ns, &k[7], p, per, KVT_DUR_CACHED, &op1), 0);
		CHECK_EQ(kvt_op_wait(op1, 5000), 0);
		CHECK(kvt_op_bytes(op1) == per);
		memset(q, 0, per);
		CHECK_EQ(kvt_get_async(st, &ns, &k[7], q, per, &op2), 0);
		CHECK_EQ(kvt_op_wait(op2, -1), 0);
		CHECK_EQ(kvt_op_poll(op2), 0);
		CHECK(!memcmp(p, q, per));
		CHECK_EQ(kvt_op_errmsg(op1)[0], '\0'); /* success: no detail */
		kvt_op_free(op1);
		kvt_op_free(op2);
		CHECK_EQ(kvt_get_async(st, &ns, &k[5], q, per, &op2), 0);
		CHECK_EQ(kvt_op_wait(op2, 5000), KVT_ENOTFOUND);
		/* The worker's detail travels with the op. */
		CHECK(strstr(kvt_op_errmsg(op2), "no chunk under that key") != NULL);
		kvt_op_free(op2);
		/* A wrong-length async put says why, too. */
		CHECK_EQ(kvt_put_async(st, &ns, &k[6], p, per - 1, KVT_DUR_CACHED, &op2), 0);
		CHECK(kvt_op_wait(op2, 5000) < 0);
		CHECK(strstr(kvt_op_errmsg(op2), "bytes") != NULL);
		kvt_op_free(op2);
	}

	/* Tenants: same description and tokens, different keys; an
	 * unconfigured tenant is refused. */
	{
		kvt_ns_desc da = desc("a"), db = desc("b"), dx = desc("mallory");
		kvt_key ka, kb;
		CHECK_EQ(kvt_ns_init(st, &da, &nsa), 0);
		CHECK_EQ(kvt_ns_init(st, &db, &nsb), 0);
		CHECK_EQ(kvt_ns_init(st, &dx, &ns), KVT_ETENANT);
		CHECK(strstr(kvt_errmsg(), "mallory") != NULL);
		chain(&nsa, 1, 64, &ka);
		chain(&nsb, 1, 64, &kb);
		CHECK(memcmp(&ka, &kb, sizeof(ka)) != 0);
		test_fill(p, per, 5);
		CHECK_EQ(kvt_put(st, &nsa, &ka, p, per, KVT_DUR_CACHED), 0);
		/* Even holding a's key, b's namespace does not read a's chunk,
		 * and the attempt does not evict it. */
		CHECK_EQ(kvt_get(st, &nsb, &ka, q, per, &len), KVT_ENOTFOUND);
		CHECK_EQ(kvt_get(st, &nsa, &ka, q, per, &len), 0);
	}

	/* Batch forms. */
	{
		kvt_key bk[3];
		const void *pl[3] = { p, p, p };
		void *bufs[3];
		int res[3];
		uint8_t *b3 = malloc(per * 3);
		chain(&nsa, 77, 3 * 64, bk);
		CHECK_EQ(kvt_put_batch(st, &nsa, bk, pl, 3, KVT_DUR_CACHED, res), 3);
		for (int i = 0; i < 3; i++)
			bufs[i] = b3 + i * per;
		CHECK_EQ(kvt_get_batch(st, &nsa, bk, bufs, per, 3, res), 3);
		for (int i = 0; i < 3; i++)
			CHECK(!memcmp(b3 + i * per, p, per));
		free(b3);
	}

	/* Capacity: far more than fits; usage never exceeds it. */
	{
		kvt_key many[64];
		kvt_tier_stats s;
		chain(&nsa, 5, 64 * 64, many);
		for (int i = 0; i < 64; i++) {
			test_fill(p, per, 1000 + (uint64_t)i);
			CHECK_EQ(kvt_put(st, &nsa, &many[i], p, per, KVT_DUR_CACHED), 0);
		}
		CHECK_EQ(kvt_store_stats(st, 0, &s), 0);
		CHECK(s.used_bytes <= s.capacity_bytes);
		CHECK(s.evictions > 0);
		CHECK(!strcmp(s.name, "dram"));
		/* The newest survive, bit-exact. */
		CHECK_EQ(kvt_get(st, &nsa, &many[63], q, per, &len), 0);
		test_fill(p, per, 1063);
		CHECK(!memcmp(p, q, per));
		CHECK_EQ(kvt_store_stats(st, 1, &s), KVT_EINVAL);
	}
	free(p);
	free(q);
	kvt_store_close(st);
}

static int rm_tree(const char *path)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	return system(cmd);
}

/* Find the one object file of `hex` under dir. */
static int object_path(const char *dir, const char *hex, char *out, size_t len)
{
	snprintf(out, len, "%s/%.2s/%.2s/%s.kvt", dir, hex, hex + 2, hex);
	return access(out, F_OK);
}

static int iter_len(void *arg, const kvt_key *key, uint64_t len)
{
	(void)key;
	CHECK_EQ(len, *(size_t *)arg);
	return 0;
}

/* Two writers race on each key of a DRAM + disk store with different bytes:
 * exactly one wins, and both tiers hold the winner's bytes. */
struct racer {
	kvt_store *st;
	const kvt_ns *ns;
	const kvt_key *keys;
	int n, id;
	int *won;              /* per key: which racer's put returned 0 */
	pthread_barrier_t *bar;
};

static void *race_main(void *arg)
{
	struct racer *r = arg;
	size_t per = kvt_layout_payload_bytes(&r->ns->layout);
	uint8_t *p = malloc(per);
	for (int i = 0; i < r->n; i++) {
		int rc;
		memset(p, 0x10 * (r->id + 1), per);
		pthread_barrier_wait(r->bar);
		rc = kvt_put(r->st, r->ns, &r->keys[i], p, per, KVT_DUR_CRASH_SAFE);
		if (rc == 0)
			r->won[i] = r->id;
		else if (rc != KVT_EEXIST)
			r->won[i] = -100;
	}
	free(p);
	return NULL;
}

static void racing_writers(void)
{
	char dir[] = "/tmp/kvt-race-XXXXXX";
	kvt_store *st;
	kvt_ns_desc d = desc(NULL);
	kvt_ns ns;
	enum { N = 200 };
	kvt_key k[N];
	int won[N];
	pthread_t th[2];
	pthread_barrier_t bar;
	struct racer r[2];
	size_t per, len;
	uint8_t *q;

	if (!mkdtemp(dir)) {
		test_failures++;
		return;
	}
	st = open_store(dir, "64MiB");
	if (!st) {
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	per = kvt_layout_payload_bytes(&ns.layout);
	q = malloc(per);
	chain(&ns, 11, N * 64, k);
	for (int i = 0; i < N; i++)
		won[i] = -1;
	pthread_barrier_init(&bar, NULL, 2);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct racer){ st, &ns, k, N, i, won, &bar };
		pthread_create(&th[i], NULL, race_main, &r[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	for (int i = 0; i < N; i++) {
		int ok;
		CHECK(won[i] == 0 || won[i] == 1);
		/* Memory copy first, then (after a restart) the disk copy. */
		CHECK_EQ(kvt_get(st, &ns, &k[i], q, per, &len), 0);
		ok = q[0] == 0x10 * (won[i] + 1) && q[per - 1] == q[0];
		if (!ok) {
			fprintf(stderr, "key %d: winner %d, DRAM holds 0x%02x\n", i, won[i], q[0]);
			test_failures++;
		}
	}
	kvt_store_close(st);
	st = open_store(dir, "64MiB");
	for (int i = 0; st && i < N; i++) {
		CHECK_EQ(kvt_get(st, &ns, &k[i], q, per, &len), 0);
		if (q[0] != 0x10 * (won[i] + 1)) {
			fprintf(stderr, "key %d: winner %d, disk holds 0x%02x\n", i, won[i], q[0]);
			test_failures++;
		}
	}
	kvt_store_close(st);
	free(q);
	rm_tree(dir);
}

/* A durable put the disk tier cannot take fails, and leaves no cached copy
 * that a retry would mistake for the chunk being stored. */
static void failed_durable_put(void)
{
	char dir[] = "/tmp/kvt-dur-XXXXXX";
	kvt_config *c = kvt_config_new();
	kvt_ns_desc d = desc(NULL);
	kvt_store *st;
	kvt_ns ns;
	kvt_key k;
	uint8_t *p;
	size_t per;
	int err;

	if (!mkdtemp(dir)) {
		test_failures++;
		return;
	}
	kvt_config_set(c, "max_local_cpu_size", "8MiB");
	kvt_config_set(c, "dram_page_size", "16KiB");
	kvt_config_set(c, "local_disk", dir);
	kvt_config_set(c, "max_local_disk_size", "1MiB");
	d.layout.num_layers = 64; /* 4 MiB payload: more than the disk tier holds */
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st) {
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	per = kvt_layout_payload_bytes(&ns.layout);
	p = calloc(1, per);
	chain(&ns, 5, 64, &k);
	CHECK_EQ(kvt_put(st, &ns, &k, p, per, KVT_DUR_POWER_SAFE), KVT_ETOOBIG);
	CHECK_EQ(kvt_exists(st, &ns, &k), 0);
	CHECK_EQ(kvt_put(st, &ns, &k, p, per, KVT_DUR_POWER_SAFE), KVT_ETOOBIG);
	/* At the cached level the memory tier alone is enough. */
	CHECK_EQ(kvt_put(st, &ns, &k, p, per, KVT_DUR_CACHED), 0);
	CHECK_EQ(kvt_exists(st, &ns, &k), 1);
	/* Asking for more later tries to write that version down, and says
	 * why it cannot. */
	CHECK_EQ(kvt_put(st, &ns, &k, p, per, KVT_DUR_POWER_SAFE), KVT_ETOOBIG);
	free(p);
	kvt_store_close(st);
	rm_tree(dir);
}

static void two_tiers(void)
{
	char dir[] = "/tmp/kvt-store-XXXXXX";
	kvt_store *st;
	kvt_ns_desc d = desc(NULL);
	kvt_ns ns;
	kvt_key k[16];
	size_t per, len;
	uint8_t *p, *q;
	kvt_tier_stats s0, s1;

	if (!mkdtemp(dir)) {
		test_failures++;
		return;
	}
	st = open_store(dir, "2MiB");
	if (!st) {
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_store_tiers(st), 2);
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	per = kvt_layout_payload_bytes(&ns.layout);
	p = malloc(per);
	q = malloc(per);
	chain(&ns, 3, 16 * 64, k);
	/* 16 chunks of ~132 KiB overflow a 2 MiB DRAM tier; the disk keeps
	 * them all (write-through). */
	for (int i = 0; i < 16; i++) {
		test_fill(p, per, 500 + (uint64_t)i);
		CHECK_EQ(kvt_put(st, &ns, &k[i], p, per, KVT_DUR_POWER_SAFE), 0);
	}
	CHECK_EQ(kvt_lookup(st, &ns, k, 16, NULL), 16);
	kvt_store_stats(st, 0, &s0);
	kvt_store_stats(st, 1, &s1);
	CHECK(s0.evictions > 0);
	CHECK_EQ(s1.chunks, 16);
	{
		uint8_t tiers[16];
		kvt_lookup_result r = { .tier = tiers };
		CHECK_EQ(kvt_lookup(st, &ns, k, 16, &r), 16);
		CHECK_EQ(tiers[0], 1); /* evicted from DRAM, found on disk */
		CHECK_EQ(tiers[15], 0);
	}
	/* Read from disk, verified, then promoted to DRAM in the background
	 * (the reader does not wait for it). */
	CHECK_EQ(kvt_get(st, &ns, &k[0], q, per, &len), 0);
	test_fill(p, per, 500);
	CHECK(!memcmp(p, q, per));
	{
		uint8_t tiers[1];
		kvt_lookup_result r = { .tier = tiers };
		for (int w = 0; w < 500; w++) {
			CHECK_EQ(kvt_lookup(st, &ns, k, 1, &r), 1);
			CHECK_EQ(kvt_store_stats(st, 1, &s1), 0);
			if (tiers[0] == 0 && s1.promotions == 1)
				break;
			usleep(10000);
		}
		CHECK_EQ(tiers[0], 0);
		CHECK_EQ(s1.promotions, 1);
	}
	kvt_store_close(st);

	/* Restart: the disk tier comes back warm. */
	st = open_store(dir, "2MiB");
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	CHECK_EQ(kvt_lookup(st, &ns, k, 16, NULL), 16);
	CHECK_EQ(kvt_get(st, &ns, &k[9], q, per, &len), 0);
	test_fill(p, per, 509);
	CHECK(!memcmp(p, q, per));

	/* Walks report payload lengths, in every tier. */
	for (int t = 0; t < kvt_store_tiers(st); t++)
		CHECK_EQ(kvt_store_iterate(st, t, iter_len, &per), 0);

	/* A payload byte flipped on disk: a miss, counted, never data. */
	{
		char hex[65], path[1200];
		FILE *f;
		kvt_key_hex(&k[3], hex);
		CHECK_EQ(object_path(dir, hex, path, sizeof(path)), 0);
		f = fopen(path, "r+b");
		if (f) {
			int c;
			fseek(f, 4096 + 1000, SEEK_SET);
			c = fgetc(f);
			fseek(f, 4096 + 1000, SEEK_SET);
			fputc(c ^ 0x40, f);
			fclose(f);
		}
		CHECK_EQ(kvt_get(st, &ns, &k[3], q, per, &len), KVT_ENOTFOUND);
		kvt_store_stats(st, 1, &s1);
		CHECK(s1.corrupt >= 1);
		CHECK_EQ(kvt_exists(st, &ns, &k[3]), 0);
		/* Not served, and not removed by the read either. */
		CHECK_EQ(object_path(dir, hex, path, sizeof(path)), 0);
		/* The prefix now ends at the hole. */
		CHECK_EQ(kvt_lookup(st, &ns, k, 16, NULL), 3);
	}
	kvt_store_close(st);
	free(p);
	free(q);
	rm_tree(dir);
}

/* The disk tier's directory disappears under a running store: the store
 * keeps serving from memory, a chunk that was only on disk is a miss, puts
 * that need the disk fail with a reason, and after a few I/O errors in a
 * row the store stops sending writes to that tier. */
static void disk_vanishes(void)
{
	char dir[] = "/tmp/kvt-gone-XXXXXX";
	kvt_store *st;
	kvt_ns_desc d = desc(NULL);
	kvt_ns ns;
	kvt_key k[24];
	kvt_tier_stats s1;
	size_t per, len;
	uint8_t *p, *q;
	int in_dram = -1;

	if (!mkdtemp(dir)) {
		test_failures++;
		return;
	}
	st = open_store(dir, "2MiB");
	if (!st) {
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	per = kvt_layout_payload_bytes(&ns.layout);
	p = malloc(per);
	q = malloc(per);
	chain(&ns, 9, 24 * 64, k);
	for (int i = 0; i < 16; i++) {
		test_fill(p, per, 900 + (uint64_t)i);
		CHECK_EQ(kvt_put(st, &ns, &k[i], p, per, KVT_DUR_CRASH_SAFE), 0);
	}
	{
		uint8_t tiers[16];
		kvt_lookup_result r = { .tier = tiers };
		CHECK_EQ(kvt_lookup(st, &ns, k, 16, &r), 16);
		CHECK_EQ(tiers[0], 1); /* the oldest only on disk */
		for (int i = 15; i >= 0; i--)
			if (tiers[i] == 0)
				in_dram = i;
	}
	CHECK(in_dram > 0);
	CHECK_EQ(rm_tree(dir), 0);

	/* Disk-only chunk: a miss, not a crash or an error. */
	CHECK_EQ(kvt_get(st, &ns, &k[0], q, per, &len), KVT_ENOTFOUND);
	/* Memory still serves. */
	CHECK_EQ(kvt_get(st, &ns, &k[15], q, per, &len), 0);
	test_fill(p, per, 915);
	CHECK(!memcmp(p, q, per));
	/* A crash-safe put needs the disk: it fails and says which tier. */
	CHECK(kvt_put(st, &ns, &k[16], p, per, KVT_DUR_CRASH_SAFE) < 0);
	CHECK(strstr(kvt_errmsg(), "nvme") != NULL);
	/* Cached puts go on in memory; the disk's errors add up until the
	 * store stops trying it. */
	for (int i = 17; i < 24; i++)
		CHECK_EQ(kvt_put(st, &ns, &k[i], p, per, KVT_DUR_CACHED), 0);
	/* Write-through to the disk runs in the background: wait for it. */
	for (int w = 0; w < 500; w++) {
		CHECK_EQ(kvt_store_stats(st, 1, &s1), 0);
		if (s1.writes_off)
			break;
		usleep(10000);
	}
	CHECK(s1.write_errors >= 3);
	CHECK_EQ(s1.writes_off, 1);
	CHECK(s1.write_errors < 8); /* not every put paid the dead disk */
	CHECK_EQ(kvt_get(st, &ns, &k[23], q, per, &len), 0);
	kvt_store_close(st);
	free(p);
	free(q);
}

static void bad_configs(void)
{
	kvt_config *c = kvt_config_new();
	kvt_store *st;
	int err = 0;

	kvt_config_set(c, "local_cpu", "false");
	st = kvt_store_open(c, &err);
	CHECK(st == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "no tier") != NULL);
	kvt_config_set(c, "local_disk", "/proc/kvtier-cannot-create-here");
	st = kvt_store_open(c, &err);
	CHECK(st == NULL);
	CHECK(err != 0);
	CHECK(strstr(kvt_errmsg(), "/proc/kvtier-cannot-create-here") != NULL);
	kvt_config_free(c);
}

int main(void)
{
	dram_only();
	two_tiers();
	racing_writers();
	failed_durable_put();
	disk_vanishes();
	bad_configs();
	TEST_DONE();
}
