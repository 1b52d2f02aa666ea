/*
 * test_hier.c — the hierarchy over DRAM + NVMe: eviction policies chosen by
 * configuration, write-through, write-back (demotion of victims), none,
 * admission, pins, TTL, promotion (asynchronous, one transfer per key) and
 * prefetch with a deadline.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

static char dir[64];

static kvt_config *config_with(const char *const *sets)
{
	kvt_config *c = kvt_config_new();

	kvt_config_set(c, "max_local_cpu_size", "2MiB");
	kvt_config_set(c, "dram_page_size", "16KiB");
	kvt_config_set(c, "dram_lock_memory", "false");
	kvt_config_set(c, "dram_prefault", "false");
	kvt_config_set(c, "local_disk", dir);
	kvt_config_set(c, "max_local_disk_size", "64MiB");
	for (int i = 0; sets && sets[i]; i += 2)
		if (kvt_config_set(c, sets[i], sets[i + 1])) {
			fprintf(stderr, "set %s: %s\n", sets[i], kvt_errmsg());
			test_failures++;
		}
	return c;
}

static kvt_store *open_with(const char *const *sets)
{
	kvt_config *c = config_with(sets);
	kvt_store *st;
	int err;

	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

static void fresh_dir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {
	}
}

static kvt_ns ns_of(kvt_store *st)
{
	kvt_ns_desc d = { 0 };
	kvt_ns ns;
	d.model = "test/hier";
	d.layout = (kvt_layout){ 4, 2, 64, KVT_DTYPE_BF16, 2, 0, 16, 64 }; /* 128 KiB */
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	return ns;
}

static void chain(const kvt_ns *ns, uint32_t seed, size_t n, kvt_key *k)
{
	uint32_t *t = malloc(n * 64 * sizeof(*t));
	for (size_t i = 0; i < n * 64; i++)
		t[i] = (uint32_t)(i * 7 + seed * 1000003u);
	CHECK_EQ(kvt_key_chain(ns, t, n * 64, NULL, k, n), (int)n);
	free(t);
}

static void put_all(kvt_store *st, const kvt_ns *ns, const kvt_key *k, int n,
		    uint64_t seed)
{
	size_t per = kvt_layout_payload_bytes(&ns->layout);
	uint8_t *p = malloc(per);
	for (int i = 0; i < n; i++) {
		test_fill(p, per, seed + (uint64_t)i);
		CHECK_EQ(kvt_put(st, ns, &k[i], p, per, KVT_DUR_CACHED), 0);
	}
	free(p);
}

static int get_ok(kvt_store *st, const kvt_ns *ns, const kvt_key *k, uint64_t seed)
{
	size_t per = kvt_layout_payload_bytes(&ns->layout), len;
	uint8_t *p = malloc(per), *q = malloc(per);
	int ok;
	test_fill(p, per, seed);
	ok = kvt_get(st, ns, k, q, per, &len) == 0 && !memcmp(p, q, per);
	free(p);
	free(q);
	return ok;
}

static kvt_tier_stats stats(kvt_store *st, int tier)
{
	kvt_tier_stats s;
	CHECK_EQ(kvt_store_stats(st, tier, &s), 0);
	return s;
}

/* Close and reopen: drains the background copies (close waits for them). */
static kvt_store *reopen(kvt_store *st, const char *const *sets)
{
	kvt_store_close(st);
	return open_with(sets);
}

static int tier_of(kvt_store *st, const kvt_ns *ns, const kvt_key *k)
{
	uint8_t t[1];
	kvt_lookup_result r = { .tier = t };
	return kvt_lookup(st, ns, k, 1, &r) == 1 ? t[0] : -1;
}

static void write_through_and_policies(const char *eviction, const char *promote)
{
	const char *sets[] = { "dram_eviction", eviction, promote ? "dram_s3fifo_promote" : NULL,
			       promote, NULL };
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[40];
	kvt_tier_stats s0, s1;

	fresh_dir();
	st = open_with(sets);
	ns = ns_of(st);
	chain(&ns, 1, 40, k);
	put_all(st, &ns, k, 40, 100); /* 40 x 132 KiB over a 2 MiB DRAM tier */
	st = reopen(st, sets);       /* write-through finished */
	s0 = stats(st, 0);
	s1 = stats(st, 1);
	CHECK_EQ(s1.chunks, 40);     /* every chunk written through */
	CHECK_EQ(kvt_lookup(st, &ns, k, 40, NULL), 40);
	for (int i = 0; i < 40; i++)
		CHECK(get_ok(st, &ns, &k[i], 100 + (uint64_t)i));
	CHECK_EQ(kvt_store_flush(st, 60000), 0); /* the promotions those hits queued */
	s0 = stats(st, 0);
	CHECK(s0.used_bytes <= s0.capacity_bytes);
	CHECK(s0.policy_evictions > 0); /* the policy, not the arena, chose */
	kvt_store_close(st);
}

static void write_back(void)
{
	const char *sets[] = { "nvme_write", "back", NULL };
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[40];
	kvt_tier_stats s1;

	fresh_dir();
	st = open_with(sets);
	ns = ns_of(st);
	chain(&ns, 2, 40, k);
	put_all(st, &ns, k, 4, 200);
	CHECK_EQ(stats(st, 1).chunks, 0); /* nothing reaches the disk yet */
	put_all(st, &ns, k + 4, 36, 204);
	st = reopen(st, sets);
	s1 = stats(st, 1);
	/* DRAM's victims went down; the newest stayed in DRAM only and are
	 * lost with the process (cached level).  Every chunk the disk holds
	 * is one of ours, whole. */
	CHECK(s1.chunks > 0 && s1.chunks < 40);
	CHECK_EQ(tier_of(st, &ns, &k[0]), 1); /* the oldest went down first */
	{
		uint64_t found = 0;
		for (int i = 0; i < 40; i++)
			if (tier_of(st, &ns, &k[i]) == 1) {
				CHECK(get_ok(st, &ns, &k[i], 200 + (uint64_t)i));
				found++;
			}
		CHECK_EQ(found, s1.chunks);
	}
	kvt_store_close(st);

	/* Demotions are counted where they land. */
	fresh_dir();
	st = open_with(sets);
	ns = ns_of(st);
	put_all(st, &ns, k, 40, 200);
	for (int w = 0; w < 300 && stats(st, 1).demotions == 0; w++)
		usleep(10000);
	CHECK(stats(st, 1).demotions > 0);
	kvt_store_close(st);
}

static void write_none_and_durability(void)
{
	const char *sets[] = { "nvme_write", "none", NULL };
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[4];
	size_t per;
	uint8_t *p;

	fresh_dir();
	st = open_with(sets);
	ns = ns_of(st);
	chain(&ns, 3, 4, k);
	put_all(st, &ns, k, 4, 300);
	per = kvt_layout_payload_bytes(&ns.layout);
	p = calloc(1, per);
	/* The only durable tier takes no puts: a crash-safe put cannot be. */
	CHECK(kvt_put(st, &ns, &k[3], p, per, KVT_DUR_CRASH_SAFE) < 0);
	free(p);
	st = reopen(st, sets);
	CHECK_EQ(stats(st, 1).chunks, 0);
	kvt_store_close(st);
}

static void admission(void)
{
	const char *sets[] = { "nvme_admission", "seen:2", NULL };
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[8];

	fresh_dir();
	st = open_with(sets);
	ns = ns_of(st);
	chain(&ns, 4, 8, k);
	/* k[0..3] were asked for by two requests, k[4..7] by one: with
	 * seen:2 only the former earn the disk.  (A lookup counts a sighting
	 * for every key of its chain.) */
	CHECK_EQ(kvt_lookup(st, &ns, k, 8, NULL), 0);
	CHECK_EQ(kvt_lookup(st, &ns, k, 4, NULL), 0);
	put_all(st, &ns, k, 8, 400);
	st = reopen(st, sets);
	CHECK_EQ(stats(st, 1).chunks, 4);
	CHECK_EQ(tier_of(st, &ns, &k[0]), 1);
	CHECK_EQ(tier_of(st, &ns, &k[5]), -1);
	kvt_store_close(st);
}

static void pins_and_ttl(void)
{
	const char *none[] = { "nvme_write", "none", NULL };
	const char *ttl[] = { "ttl", "1s", NULL };
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[40];

	fresh_dir();
	st = open_with(none);
	ns = ns_of(st);
	chain(&ns, 5, 40, k);
	put_all(st, &ns, k, 1, 500);
	CHECK_EQ(kvt_pin(st, &ns, &k[0], 1), 0);
	CHECK_EQ(stats(st, 0).pinned, 1);
	put_all(st, &ns, k + 1, 39, 501);
	/* A pinned system prompt outlives the flood; an unpinned one not. */
	CHECK_EQ(tier_of(st, &ns, &k[0]), 0);
	CHECK_EQ(tier_of(st, &ns, &k[1]), -1);
	CHECK(get_ok(st, &ns, &k[0], 500));
	CHECK_EQ(kvt_pin(st, &ns, &k[0], 0), 0);
	CHECK_EQ(kvt_pin(st, &ns, &k[1], 1), KVT_ENOTFOUND);
	kvt_store_close(st);

	/* Keys a client made itself may share their first bytes: the
	 * policies still tell them apart.  Pinning one keeps that one. */
	st = open_with(none);
	{
		kvt_key a = k[0], b = k[0];
		b.b[31] ^= 1;
		put_all(st, &ns, &a, 1, 510);
		put_all(st, &ns, &b, 1, 511);
		CHECK_EQ(kvt_pin(st, &ns, &b, 1), 0);
		put_all(st, &ns, k + 2, 38, 520);
		CHECK_EQ(tier_of(st, &ns, &b), 0);
		CHECK(get_ok(st, &ns, &b, 511));
		CHECK_EQ(tier_of(st, &ns, &a), -1);
	}
	kvt_store_close(st);

	fresh_dir();
	st = open_with(ttl);
	ns = ns_of(st);
	put_all(st, &ns, k, 2, 600);
	CHECK(get_ok(st, &ns, &k[0], 600));
	sleep(2);
	CHECK(!get_ok(st, &ns, &k[1], 601)); /* expired: a miss */
	CHECK(!get_ok(st, &ns, &k[1], 601)); /* still, and never removed by it */
	/* The writer replaces an expired chunk: a put stores it anew. */
	put_all(st, &ns, &k[1], 1, 700);
	CHECK(get_ok(st, &ns, &k[1], 700));
	kvt_store_close(st);

	/* The longest TTL accepted (100 years) never wraps into "expired". */
	{
		static const char *const huge[] = { "ttl", "36500d", NULL };
		fresh_dir();
		st = open_with(huge);
		if (st) {
			ns = ns_of(st);
			put_all(st, &ns, k, 1, 800);
			CHECK(get_ok(st, &ns, &k[0], 800));
			kvt_store_close(st);
		}
	}
}

struct reader {
	kvt_store *st;
	const kvt_ns *ns;
	const kvt_key *k;
	uint64_t seed;
	int ok;
};

static void *read_main(void *arg)
{
	struct reader *r = arg;
	r->ok = get_ok(r->st, r->ns, r->k, r->seed);
	return NULL;
}

static void promotion_and_prefetch(void)
{
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[40];
	kvt_op *op;
	pthread_t th[8];
	struct reader r[8];
	int n;

	fresh_dir();
	st = open_with(NULL);
	ns = ns_of(st);
	chain(&ns, 6, 40, k);
	put_all(st, &ns, k, 40, 700);
	st = reopen(st, NULL); /* DRAM empty, all 40 on disk */
	CHECK_EQ(tier_of(st, &ns, &k[0]), 1);

	/* Eight readers of one disk chunk: each gets it, one promotion. */
	for (int i = 0; i < 8; i++) {
		r[i] = (struct reader){ st, &ns, &k[0], 700, 0 };
		pthread_create(&th[i], NULL, read_main, &r[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK(r[i].ok);
	}
	/* The promotion is published, then counted: wait for both. */
	for (int w = 0; w < 300 && (tier_of(st, &ns, &k[0]) != 0 ||
				    stats(st, 1).promotions == 0); w++)
		usleep(10000);
	CHECK_EQ(tier_of(st, &ns, &k[0]), 0);
	CHECK_EQ(stats(st, 1).promotions, 1);

	/* Prefetch the next 12 with time to spare: all in DRAM after. */
	CHECK_EQ(kvt_prefetch(st, &ns, k, 12, 10000, &op), 0);
	CHECK_EQ(kvt_op_wait(op, 20000), 12);
	kvt_op_free(op);
	for (int i = 0; i < 12; i++) {
		CHECK_EQ(tier_of(st, &ns, &k[i]), 0);
		CHECK(get_ok(st, &ns, &k[i], 700 + (uint64_t)i)); /* bit-exact */
	}
	/* A deadline already past: a partial hit, never a stall. */
	CHECK_EQ(kvt_prefetch(st, &ns, k + 12, 12, 0, &op), 0);
	n = kvt_op_wait(op, 20000);
	CHECK(n >= 0 && n < 12);
	kvt_op_free(op);
	/* The prefix ends at a chunk no tier holds. */
	CHECK_EQ(kvt_delete(st, &ns, &k[30]), 0);
	CHECK_EQ(kvt_prefetch(st, &ns, k + 24, 16, 10000, &op), 0);
	CHECK_EQ(kvt_op_wait(op, 20000), 6);
	kvt_op_free(op);
	kvt_store_close(st);

	/* A chunk damaged on disk ends a prefetch there and is dropped: it
	 * never reaches DRAM. */
	st = open_with(NULL);
	{
		char hex[65], path[256];
		FILE *f;
		kvt_key_hex(&k[34], hex);
		snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s.kvt", dir, hex, hex + 2, hex);
		f = fopen(path, "r+b");
		CHECK(f != NULL);
		if (f) {
			int c;
			fseek(f, 4096 + 777, SEEK_SET);
			c = fgetc(f);
			fseek(f, 4096 + 777, SEEK_SET);
			fputc(c ^ 0x5a, f);
			fclose(f);
		}
	}
	CHECK_EQ(kvt_prefetch(st, &ns, k + 32, 6, 10000, &op), 0);
	CHECK_EQ(kvt_op_wait(op, 20000), 2);
	kvt_op_free(op);
	CHECK_EQ(tier_of(st, &ns, &k[34]), -1);
	CHECK(get_ok(st, &ns, &k[33], 733));
	kvt_store_close(st);
}

/* Tensor-parallel ranks are one unit; rank-shared KV is stored once; the
 * cost model loads only what beats recomputing. */
static void ranks_and_cost(void)
{
	const char *none[] = { "nvme_write", "none", NULL };
	kvt_store *st;
	kvt_ns_desc d = { 0 };
	kvt_ns ns[2], shared[2];
	kvt_key k0[6], k1[6];
	const kvt_key *keys[2] = { k0, k1 };
	uint8_t tiers[6];
	kvt_lookup_result r = { .tier = tiers };
	uint32_t t[6 * 64];
	kvt_tier_stats s0;
	int n;

	fresh_dir();
	st = open_with(none);
	d.model = "test/tp";
	d.layout = (kvt_layout){ 4, 1, 64, KVT_DTYPE_BF16, 2, 0, 16, 64 };
	d.tp_size = 2;
	for (int i = 0; i < 6 * 64; i++)
		t[i] = (uint32_t)(i * 13 + 5);
	for (uint32_t rk = 0; rk < 2; rk++) {
		d.tp_rank = rk;
		CHECK_EQ(kvt_ns_init(st, &d, &ns[rk]), 0);
		d.rank_shared = 1;
		CHECK_EQ(kvt_ns_init(st, &d, &shared[rk]), 0);
		d.rank_shared = 0;
	}
	CHECK(memcmp(ns[0].digest, ns[1].digest, 32) != 0);
	CHECK(!memcmp(shared[0].digest, shared[1].digest, 32)); /* one copy */
	CHECK_EQ(kvt_key_chain(&ns[0], t, 6 * 64, NULL, k0, 6), 6);
	CHECK_EQ(kvt_key_chain(&ns[1], t, 6 * 64, NULL, k1, 6), 6);
	put_all(st, &ns[0], k0, 6, 800);
	put_all(st, &ns[1], k1, 4, 900); /* rank 1 has only 4 shards */
	n = kvt_lookup_ranks(st, ns, 2, keys, 6, &r);
	CHECK_EQ(n, 4);
	CHECK_EQ(tiers[0], 0);

	/* From DRAM a 64 KiB chunk loads in microseconds: worth it against a
	 * millisecond of recompute, not against a nanosecond. */
	CHECK_EQ(kvt_lookup_worth(st, &ns[0], &r, 1e-3), 4);
	CHECK_EQ(kvt_lookup_worth(st, &ns[0], &r, 1e-9), 0);
	/* Reads are measured and binned. */
	CHECK(get_ok(st, &ns[0], &k0[0], 800));
	s0 = stats(st, 0);
	CHECK(s0.read_gbps > 0 && s0.read_latency_us > 0);
	{
		uint64_t reads = 0;
		for (int b = 0; b < 24; b++)
			reads += s0.get_latency_log2_us[b];
		CHECK_EQ(reads, 1);
	}
	kvt_store_close(st);
}

static void bad_config(void)
{
	kvt_config *c = kvt_config_new();
	CHECK_EQ(kvt_config_set(c, "nvme_eviction", "mru"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "lru or s3fifo") != NULL);
	CHECK_EQ(kvt_config_set(c, "nvme_admission", "seen:1"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "shared_fs_write", "sideways"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "ttl", "3 fortnights"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "ttl", "7d"), 0);
	CHECK_EQ(kvt_config_set(c, "nvme_background_bandwidth", "500MB"), 0);
	kvt_config_free(c);
}

/* A daemon's SIGHUP: policies change under a running store. */
static void reconfigure(void)
{
	const char *none[] = { "nvme_write", "none", NULL };
	const char *next[] = { "nvme_write", "through", "dram_eviction", "s3fifo",
			       "max_local_disk_size", "32MiB", NULL };
	const char *back[] = { "nvme_write", "through", "dram_eviction", "lru",
			       "max_local_disk_size", "32MiB", "ttl", "1s", NULL };
	char later[256];
	kvt_config *c;
	kvt_store *st;
	kvt_ns ns;
	kvt_key k[40];

	fresh_dir();
	st = open_with(none);
	ns = ns_of(st);
	chain(&ns, 7, 40, k);
	put_all(st, &ns, k, 2, 700);
	CHECK_EQ(kvt_store_flush(st, 10000), 0);
	CHECK_EQ(stats(st, 1).chunks, 0); /* write none: not on disk */
	CHECK_EQ(kvt_pin(st, &ns, &k[0], 1), 0);

	c = config_with(next);
	CHECK_EQ(kvt_store_reconfigure(st, c, later, sizeof(later)), 0);
	kvt_config_free(c);
	CHECK(strcmp(later, "max_local_disk_size") == 0); /* a capacity: at the next open */
	put_all(st, &ns, k + 2, 1, 702);
	CHECK_EQ(kvt_store_flush(st, 10000), 0);
	CHECK_EQ(stats(st, 1).chunks, 1); /* written through now */
	/* The pin survived the DRAM policy's rebuild (LRU to S3-FIFO): a
	 * flood of three times DRAM leaves k[0] there. */
	put_all(st, &ns, k + 3, 37, 703);
	CHECK_EQ(tier_of(st, &ns, &k[0]), 0);
	CHECK(get_ok(st, &ns, &k[0], 700));
	/* Flooded out of DRAM (which of them S3-FIFO kept is its choice):
	 * on disk now. */
	int on_disk = 0;
	for (int i = 3; i < 40; i++)
		on_disk += tier_of(st, &ns, &k[i]) == 1;
	CHECK(on_disk >= 37 - 13);

	/* Back to LRU, with a TTL: what is older than a second is a miss. */
	c = config_with(back);
	CHECK_EQ(kvt_store_reconfigure(st, c, later, sizeof(later)), 0);
	kvt_config_free(c);
	CHECK(strcmp(later, "max_local_disk_size") == 0); /* still only at the next open */
	CHECK_EQ(tier_of(st, &ns, &k[0]), 0);
	sleep(2);
	CHECK(!get_ok(st, &ns, &k[0], 700));
	kvt_store_close(st);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/kvt-hier-%d", (int)getpid());
	bad_config();
	write_through_and_policies("lru", NULL);
	write_through_and_policies("s3fifo", NULL);
	write_through_and_policies("s3fifo", "2"); /* libCacheSim's threshold */
	write_back();
	write_none_and_durability();
	admission();
	pins_and_ttl();
	promotion_and_prefetch();
	ranks_and_cost();
	reconfigure();
	fresh_dir();
	TEST_DONE();
}
