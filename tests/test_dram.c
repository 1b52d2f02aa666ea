/*
 * test_dram.c — the host-DRAM tier against its contract (src/tier/tier.h):
 * bit-exact round trips across page boundaries, first writer wins, capacity
 * and global LRU eviction order, borrowed chunks never evicted or reused,
 * delete under a reader, the error codes, and a multi-threaded stress whose
 * payloads verify themselves.
 *
 * KVT_STRESS_MS sets the stress duration, both runs together (default 2000).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "tier/dram.h"

#define PS 4096u

static void make_key(uint64_t id, kvt_key *k)
{
	test_fill(k->b, sizeof(k->b), id ^ 0x5eedf00dull);
}

static kvt_tier *open_tier(uint64_t capacity, uint32_t page_size, uint32_t shards)
{
	kvt_dram_opts o = {
		.capacity = capacity, .page_size = page_size, .shards = shards,
	};
	kvt_tier *t = NULL;
	int rc = kvt_dram_open(&o, &t);
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "cannot open tier: %s\n", kvt_errmsg());
		exit(1);
	}
	return t;
}

static void tier_stats(kvt_tier *t, kvt_tier_stats *st)
{
	t->ops->stats(t, st);
}

static void scatter(const struct iovec *iov, int n, const unsigned char *src)
{
	for (int i = 0; i < n; i++) {
		memcpy(iov[i].iov_base, src, iov[i].iov_len);
		src += iov[i].iov_len;
	}
}

static void gather(const struct iovec *iov, int n, unsigned char *dst)
{
	for (int i = 0; i < n; i++) {
		memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
}

/* put_begin, copy, put_commit. */
static int put_bytes(kvt_tier *t, const kvt_key *k, const void *buf, uint64_t len,
		     int durability)
{
	kvt_tier_wbuf *w;
	int rc = t->ops->put_begin(t, k, len, &w);
	if (rc)
		return rc;
	scatter(w->iov, w->n_iov, buf);
	return t->ops->put_commit(t, w, durability);
}

/* A payload of `len` bytes named by `seed`. */
static int put_seed(kvt_tier *t, const kvt_key *k, uint64_t len, uint64_t seed)
{
	unsigned char *buf = malloc(len);
	int rc;
	test_fill(buf, len, seed);
	rc = put_bytes(t, k, buf, len, KVT_DUR_CACHED);
	free(buf);
	return rc;
}

/* 1 if the borrowed image is exactly test_fill(seed) of `len` bytes. */
static int rbuf_matches(const kvt_tier_rbuf *r, uint64_t len, uint64_t seed)
{
	unsigned char *want, *got;
	int ok;
	if (r->len != len)
		return 0;
	want = malloc(len);
	got = malloc(len);
	test_fill(want, len, seed);
	gather(r->iov, r->n_iov, got);
	ok = memcmp(want, got, len) == 0;
	free(want);
	free(got);
	return ok;
}

/* Borrow, compare, release. */
static int get_matches(kvt_tier *t, const kvt_key *k, uint64_t len, uint64_t seed)
{
	kvt_tier_rbuf *r;
	int ok;
	if (t->ops->get(t, k, &r) != 0)
		return 0;
	ok = rbuf_matches(r, len, seed);
	t->ops->release(t, r);
	return ok;
}

static void touch(kvt_tier *t, uint64_t id)
{
	kvt_key k;
	kvt_tier_rbuf *r;
	make_key(id, &k);
	CHECK_EQ(t->ops->get(t, &k, &r), 0);
	if (r)
		t->ops->release(t, r);
}

static int present(kvt_tier *t, uint64_t id)
{
	kvt_key k;
	make_key(id, &k);
	return t->ops->exists(t, &k);
}

/* ---------------------------------------------------------------------- */

static void test_round_trip(void)
{
	const uint64_t sizes[] = { 1, PS - 1, PS, PS + 1, 10 * PS, 3 * PS + 17 };
	kvt_tier *t = open_tier(64 * PS, PS, 0);
	kvt_tier_stats st;
	uint64_t pages = 0, bytes = 0;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t len = sizes[i], n = (len + PS - 1) / PS;
		kvt_key k;
		kvt_tier_wbuf *w;
		unsigned char *buf = malloc(len);

		make_key(100 + i, &k);
		test_fill(buf, len, 1000 + i);
		CHECK_EQ(t->ops->put_begin(t, &k, len, &w), 0);
		CHECK_EQ(w->n_iov, n);
		CHECK(w->len == len);
		CHECK(memcmp(&w->key, &k, sizeof(k)) == 0);
		for (int j = 0; j < w->n_iov; j++)
			CHECK_EQ(w->iov[j].iov_len, j + 1 < w->n_iov ? PS : len - (n - 1) * PS);
		scatter(w->iov, w->n_iov, buf);
		CHECK_EQ(t->ops->put_commit(t, w, KVT_DUR_CACHED), 0);
		CHECK(get_matches(t, &k, len, 1000 + i));
		CHECK_EQ(t->ops->exists(t, &k), 1);
		pages += n;
		bytes += len;
		free(buf);
	}
	tier_stats(t, &st);
	CHECK(strcmp(st.name, "dram") == 0);
	CHECK_EQ(st.capacity_bytes, 64 * PS);
	CHECK_EQ(st.used_bytes, pages * PS);
	CHECK_EQ(st.chunks, 6);
	CHECK_EQ(st.puts, 6);
	CHECK_EQ(st.bytes_in, bytes);
	CHECK_EQ(st.bytes_out, bytes);
	CHECK_EQ(st.hits, 6);
	CHECK_EQ(st.borrowed, 0);

	/* A miss, and an empty image. */
	{
		kvt_key k;
		kvt_tier_rbuf *r;
		kvt_tier_wbuf *w;
		make_key(9999, &k);
		CHECK_EQ(t->ops->get(t, &k, &r), KVT_ENOTFOUND);
		CHECK_EQ(t->ops->exists(t, &k), 0);
		CHECK_EQ(t->ops->del(t, &k), KVT_ENOTFOUND);
		CHECK_EQ(t->ops->put_begin(t, &k, 0, &w), KVT_EINVAL);
		tier_stats(t, &st);
		CHECK_EQ(st.misses, 1);
	}
	t->ops->close(t);
}

static void test_exists(void)
{
	kvt_tier *t = open_tier(32 * PS, PS, 0);
	kvt_tier_wbuf *w1, *w2;
	kvt_tier_stats st;
	kvt_key k;
	unsigned char *a = malloc(3 * PS), *b = malloc(3 * PS);

	make_key(1, &k);
	test_fill(a, 3 * PS, 11);
	test_fill(b, 3 * PS, 22);
	CHECK_EQ(put_bytes(t, &k, a, 3 * PS, KVT_DUR_CACHED), 0);
	CHECK_EQ(put_bytes(t, &k, b, 3 * PS, KVT_DUR_CACHED), KVT_EEXIST);
	CHECK(get_matches(t, &k, 3 * PS, 11));

	/* Two writers in flight on one fresh key: the first commit wins, the
	 * second's pages go back. */
	make_key(2, &k);
	CHECK_EQ(t->ops->put_begin(t, &k, 3 * PS, &w1), 0);
	CHECK_EQ(t->ops->put_begin(t, &k, 3 * PS, &w2), 0);
	scatter(w1->iov, w1->n_iov, a);
	scatter(w2->iov, w2->n_iov, b);
	tier_stats(t, &st);
	CHECK_EQ(st.used_bytes, 9 * PS);
	CHECK_EQ(t->ops->put_commit(t, w2, KVT_DUR_CACHED), 0);
	CHECK_EQ(t->ops->put_commit(t, w1, KVT_DUR_CACHED), KVT_EEXIST);
	CHECK(get_matches(t, &k, 3 * PS, 22));
	tier_stats(t, &st);
	CHECK_EQ(st.used_bytes, 6 * PS);
	CHECK_EQ(st.put_exists, 2);
	CHECK_EQ(st.puts, 2);
	CHECK_EQ(st.chunks, 2);

	/* Keys equal in the bytes that pick shard and bucket are still two
	 * keys. */
	{
		kvt_key k2;
		make_key(3, &k);
		k2 = k;
		k2.b[KVT_KEY_BYTES - 1] ^= 1;
		CHECK_EQ(put_bytes(t, &k, a, PS, KVT_DUR_CACHED), 0);
		CHECK_EQ(put_bytes(t, &k2, b, PS, KVT_DUR_CACHED), 0);
		CHECK(get_matches(t, &k, PS, 11));
		CHECK(get_matches(t, &k2, PS, 22));
		CHECK_EQ(t->ops->del(t, &k), 0);
		CHECK_EQ(t->ops->exists(t, &k2), 1);
		CHECK(get_matches(t, &k2, PS, 22));
	}
	free(a);
	free(b);
	t->ops->close(t);
}

/* 16 pages, chunks of 2 pages: 8 fit.  Recency is set by a permutation of
 * gets; each new put then evicts exactly the least recently used. */
static void test_lru(void)
{
	const uint64_t order[8] = { 5, 2, 7, 0, 3, 6, 1, 4 };
	kvt_tier *t = open_tier(16 * PS, PS, 0);
	kvt_tier_stats st;
	kvt_key k;

	for (uint64_t i = 0; i < 8; i++) {
		make_key(i, &k);
		CHECK_EQ(put_seed(t, &k, 2 * PS, i), 0);
	}
	for (int i = 0; i < 8; i++)
		touch(t, order[i]);
	for (int i = 0; i < 8; i++) {
		make_key(100 + (uint64_t)i, &k);
		CHECK_EQ(put_seed(t, &k, 2 * PS, 100 + (uint64_t)i), 0);
		CHECK_EQ(present(t, order[i]), 0);
		for (int j = i + 1; j < 8; j++)
			CHECK_EQ(present(t, order[j]), 1);
		tier_stats(t, &st);
		CHECK_EQ(st.evictions, i + 1);
		CHECK_EQ(st.evicted_bytes, (uint64_t)(i + 1) * 2 * PS);
		CHECK_EQ(st.chunks, 8);
	}

	/* Old key touched survives; untouched one of the same age goes. */
	touch(t, 100);
	make_key(200, &k);
	CHECK_EQ(put_seed(t, &k, 2 * PS, 200), 0);
	CHECK_EQ(present(t, 100), 1);
	CHECK_EQ(present(t, 101), 0);

	/* Capacity is never exceeded, whatever the sizes. */
	for (uint64_t i = 0; i < 500; i++) {
		uint64_t len = 1 + (i * 7919) % (5 * PS);
		make_key(1000 + i, &k);
		CHECK_EQ(put_seed(t, &k, len, 1000 + i), 0);
		CHECK(get_matches(t, &k, len, 1000 + i));
		tier_stats(t, &st);
		CHECK(st.used_bytes <= st.capacity_bytes);
	}
	CHECK_EQ(st.borrowed, 0);
	t->ops->close(t);
}

struct collect {
	kvt_tier *t;
	kvt_key keys[64];
	uint64_t lens[64];
	int n;
	int stop_at;
};

static int collect_fn(void *arg, const kvt_key *key, uint64_t len)
{
	struct collect *c = arg;
	/* Calls back into the tier: iterate must not hold a lock here. */
	CHECK_EQ(c->t->ops->exists(c->t, key), 1);
	if (c->n < 64) {
		c->keys[c->n] = *key;
		c->lens[c->n] = len;
	}
	c->n++;
	return c->stop_at && c->n == c->stop_at ? 42 : 0;
}

static int count_pages_fn(void *arg, const kvt_key *key, uint64_t len)
{
	(void)key;
	*(uint64_t *)arg += (len + PS - 1) / PS;
	return 0;
}

/* Pages of the published chunks, by walking them. */
static uint64_t live_pages(kvt_tier *t)
{
	uint64_t n = 0;
	CHECK_EQ(t->ops->iterate(t, count_pages_fn, &n), 0);
	return n;
}

static void test_borrowed(void)
{
	kvt_tier *t = open_tier(16 * PS, PS, 0);
	kvt_tier_rbuf *held, *rs[16];
	kvt_tier_wbuf *w, *w2;
	kvt_tier_stats st;
	struct collect c = { .t = t };
	kvt_key k;
	int nr = 0;

	make_key(1, &k);
	CHECK_EQ(put_seed(t, &k, 2 * PS, 1), 0);
	CHECK_EQ(t->ops->get(t, &k, &held), 0);
	for (uint64_t i = 0; i < 50; i++) {
		make_key(100 + i, &k);
		CHECK_EQ(put_seed(t, &k, 2 * PS, 100 + i), 0);
	}
	CHECK(rbuf_matches(held, 2 * PS, 1));
	CHECK_EQ(present(t, 1), 1);
	tier_stats(t, &st);
	CHECK_EQ(st.borrowed, 1);
	CHECK_EQ(st.chunks, 8);

	/* Borrow everything: nothing is evictable, a put is refused. */
	CHECK_EQ(t->ops->iterate(t, collect_fn, &c), 0);
	CHECK_EQ(c.n, 8);
	for (int i = 0; i < c.n && i < 64; i++) {
		CHECK_EQ(c.lens[i], 2 * PS);
		CHECK_EQ(t->ops->get(t, &c.keys[i], &rs[nr]), 0);
		nr++;
	}
	make_key(999, &k);
	CHECK_EQ(put_seed(t, &k, PS, 999), KVT_EFULL);
	CHECK(strlen(kvt_errmsg()) > 0);
	tier_stats(t, &st);
	CHECK_EQ(st.put_rejects, 1);
	CHECK_EQ(st.borrowed, 9);
	CHECK(rbuf_matches(held, 2 * PS, 1));
	for (int i = 0; i < nr; i++)
		t->ops->release(t, rs[i]);
	t->ops->release(t, held);
	CHECK_EQ(put_seed(t, &k, PS, 999), 0);

	/* Iteration stops at a nonzero return and passes it on. */
	c.n = 0;
	c.stop_at = 3;
	CHECK_EQ(t->ops->iterate(t, collect_fn, &c), 42);
	CHECK_EQ(c.n, 3);

	/* Pages held by a write in flight are not evictable either. */
	for (uint64_t i = 0; i < 50; i++) {
		make_key(100 + i, &k);
		(void)t->ops->del(t, &k);
	}
	make_key(999, &k);
	CHECK_EQ(t->ops->del(t, &k), 0);
	make_key(1, &k);
	(void)t->ops->del(t, &k);
	tier_stats(t, &st);
	CHECK_EQ(st.chunks, 0);
	CHECK_EQ(st.used_bytes, 0);
	make_key(2000, &k);
	CHECK_EQ(t->ops->put_begin(t, &k, 16 * PS, &w), 0);
	make_key(2001, &k);
	CHECK_EQ(t->ops->put_begin(t, &k, 1, &w2), KVT_EFULL);
	t->ops->put_abort(t, w);
	tier_stats(t, &st);
	CHECK_EQ(st.used_bytes, 0);
	CHECK_EQ(put_seed(t, &k, 1, 2001), 0);
	t->ops->close(t);
}

static void test_delete_borrowed(void)
{
	kvt_tier *t = open_tier(16 * PS, PS, 0);
	kvt_tier_rbuf *r, *r2;
	kvt_tier_stats st;
	kvt_key k;

	make_key(7, &k);
	CHECK_EQ(put_seed(t, &k, 3 * PS, 7), 0);
	CHECK_EQ(t->ops->get(t, &k, &r), 0);
	CHECK_EQ(t->ops->del(t, &k), 0);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	CHECK_EQ(t->ops->get(t, &k, &r2), KVT_ENOTFOUND);
	CHECK_EQ(t->ops->del(t, &k), KVT_ENOTFOUND);
	tier_stats(t, &st);
	CHECK_EQ(st.chunks, 0);
	CHECK_EQ(st.used_bytes, 3 * PS); /* still the reader's */

	/* A new version under the same key, and a tier full of others: the
	 * reader still sees the old bytes. */
	CHECK_EQ(put_seed(t, &k, 2 * PS, 77), 0);
	for (uint64_t i = 0; i < 40; i++) {
		kvt_key o;
		make_key(500 + i, &o);
		CHECK_EQ(put_seed(t, &o, PS + 1, 500 + i), 0);
	}
	CHECK(rbuf_matches(r, 3 * PS, 7));
	tier_stats(t, &st);
	CHECK(st.used_bytes <= st.capacity_bytes);
	t->ops->release(t, r);
	tier_stats(t, &st);
	CHECK_EQ(st.borrowed, 0);
	CHECK_EQ(st.used_bytes, live_pages(t) * PS); /* the reader's came back */

	/* corrupt: dropped and counted, the borrower unharmed. */
	make_key(8, &k);
	CHECK_EQ(put_seed(t, &k, 2 * PS, 8), 0);
	CHECK_EQ(t->ops->get(t, &k, &r), 0);
	t->ops->corrupt(t, r);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	CHECK(rbuf_matches(r, 2 * PS, 8));
	t->ops->release(t, r);
	tier_stats(t, &st);
	CHECK_EQ(st.corrupt, 1);
	/* A copy found bad after a good one replaced it under the same key
	 * drops only itself: the good one stays. */
	CHECK_EQ(put_seed(t, &k, 2 * PS, 81), 0);
	CHECK_EQ(t->ops->get(t, &k, &r), 0);
	CHECK_EQ(t->ops->del(t, &k), 0);
	CHECK_EQ(put_seed(t, &k, 2 * PS, 82), 0);
	t->ops->corrupt(t, r);
	t->ops->release(t, r);
	CHECK_EQ(t->ops->exists(t, &k), 1);
	CHECK_EQ(t->ops->get(t, &k, &r), 0);
	CHECK(rbuf_matches(r, 2 * PS, 82));
	t->ops->release(t, r);
	t->ops->close(t);
}

static void test_errors(void)
{
	kvt_tier *t = open_tier(16 * PS + 100, PS, 0);
	kvt_tier_wbuf *w;
	kvt_tier_stats st;
	kvt_key k;

	tier_stats(t, &st);
	CHECK_EQ(st.capacity_bytes, 16 * PS); /* rounded down */

	make_key(1, &k);
	CHECK_EQ(t->ops->put_begin(t, &k, 16 * PS + 1, &w), KVT_ETOOBIG);
	CHECK(strstr(kvt_errmsg(), "65537") != NULL);
	CHECK_EQ(t->ops->put_begin(t, &k, UINT64_MAX, &w), KVT_ETOOBIG);
	CHECK_EQ(t->ops->put_begin(t, &k, 16 * PS, &w), 0);
	t->ops->put_abort(t, w);

	/* Durability beyond memory is refused and the pages come back. */
	CHECK_EQ(t->ops->put_begin(t, &k, 2 * PS, &w), 0);
	CHECK_EQ(t->ops->put_commit(t, w, KVT_DUR_CRASH_SAFE), KVT_ENOTSUP);
	CHECK_EQ(t->ops->put_begin(t, &k, 2 * PS, &w), 0);
	CHECK_EQ(t->ops->put_commit(t, w, KVT_DUR_POWER_SAFE), KVT_ENOTSUP);
	CHECK_EQ(t->ops->put_begin(t, &k, 2 * PS, &w), 0);
	CHECK_EQ(t->ops->put_commit(t, w, 7), KVT_EINVAL);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	tier_stats(t, &st);
	CHECK_EQ(st.used_bytes, 0);
	CHECK_EQ(st.put_rejects, 2);
	CHECK_EQ(st.puts, 0);
	t->ops->close(t);

	/* Bad options. */
	{
		struct {
			uint64_t cap;
			uint32_t ps, shards;
			const char *says;
		} bad[] = {
			{ 1 << 20, 0, 0, "page_size 0" },
			{ 1 << 20, 1000, 0, "page_size 1000" },
			{ 1 << 20, 2048, 0, "page_size 2048" },
			{ 1 << 20, 3 * 4096, 0, "page_size 12288" },
			{ 1ull << 30, 128u << 20, 0, "page_size 134217728" },
			{ 1 << 20, 4096, 3, "shards 3" },
			{ 1 << 20, 4096, 4096, "shards 4096" },
			{ 4095, 4096, 0, "capacity 4095" },
			{ 0, 65536, 0, "capacity 0" },
			{ 1ull << 62, 4096, 0, "pages" },
		};
		kvt_tier *bt;
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			kvt_dram_opts o = {
				.capacity = bad[i].cap, .page_size = bad[i].ps,
				.shards = bad[i].shards,
			};
			bt = (kvt_tier *)1;
			CHECK_EQ(kvt_dram_open(&o, &bt), KVT_EINVAL);
			CHECK(bt == NULL);
			if (!strstr(kvt_errmsg(), bad[i].says)) {
				fprintf(stderr, "message \"%s\" lacks \"%s\"\n",
					kvt_errmsg(), bad[i].says);
				test_failures++;
			}
		}
		CHECK_EQ(kvt_dram_open(NULL, &bt), KVT_EINVAL);
	}
}

/* Huge pages and locking are requests the kernel may refuse; the tier must
 * work either way.  A large arena must cost no memory until used. */
static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long size, res;
	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = -1;
	fclose(f);
	return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_arena_options(void)
{
	kvt_dram_opts o = {
		.capacity = 64ull << 20, .page_size = 65536, .hugepages = 1,
		.lock_memory = 1,
	};
	kvt_tier *t = NULL;
	kvt_key k;
	long before, after;

	CHECK_EQ(kvt_dram_open(&o, &t), 0);
	if (t) {
		int l = kvt_dram_locked(t);
		CHECK(l == 0 || l == 1);
		make_key(1, &k);
		CHECK_EQ(put_seed(t, &k, 3 * 65536 + 5, 1), 0);
		CHECK(get_matches(t, &k, 3 * 65536 + 5, 1));
		t->ops->close(t);
	}
	CHECK_EQ(kvt_dram_locked(NULL), 0);

	o.capacity = 16ull << 30;
	o.hugepages = 0;
	o.lock_memory = 0;
	before = rss_kib();
	if (kvt_dram_open(&o, &t) != 0) {
		fprintf(stderr, "note: 16 GiB reservation refused (%s); skipped\n",
			kvt_errmsg());
		return;
	}
	make_key(2, &k);
	CHECK_EQ(put_seed(t, &k, 65536, 2), 0);
	after = rss_kib();
	if (before >= 0 && after >= 0)
		CHECK(after - before < 64 * 1024); /* far below 16 GiB */
	t->ops->close(t);
}

/* ---------------------------------------------------------------------- */
/* Stress                                                                   */
/* ---------------------------------------------------------------------- */

#define ST_THREADS 8
#define ST_KEYS 96

static kvt_tier *st_tier;
static _Atomic int st_stop;
static _Atomic uint64_t st_puts, st_dels, st_gets, st_mismatch, st_full;

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A payload's length follows from its seed, and the seed carries the key
 * id, so a reader checks length, key and every byte from the image alone. */
static uint64_t st_len(uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull;
	return 16 + (x >> 20) % (4 * PS);
}

static void st_fill(unsigned char *buf, uint64_t seed)
{
	uint64_t len = st_len(seed);
	memcpy(buf, &seed, 8);
	test_fill(buf + 8, len - 8, seed);
}

static int st_verify(const kvt_tier_rbuf *r, uint64_t id, unsigned char *want,
		     unsigned char *got)
{
	uint64_t seed;
	if (r->len < 16 || r->len > 4 * PS + 16)
		return 0;
	gather(r->iov, r->n_iov, got);
	memcpy(&seed, got, 8);
	if (seed >> 32 != id || st_len(seed) != r->len)
		return 0;
	st_fill(want, seed);
	return memcmp(want, got, r->len) == 0;
}

static void *st_worker(void *arg)
{
	uint64_t s = (uint64_t)(uintptr_t)arg * 0x2545F4914F6CDD1Dull + 1;
	unsigned char *want = malloc(5 * PS), *got = malloc(5 * PS);
	kvt_tier *t = st_tier;
	kvt_tier_rbuf *held[2] = { NULL, NULL };
	uint64_t held_id[2] = { 0, 0 };

	while (!atomic_load(&st_stop)) {
		uint64_t op = rnd(&s) % 100, id = rnd(&s) % ST_KEYS;
		kvt_key k;
		kvt_tier_rbuf *r;
		kvt_tier_wbuf *w;
		int rc;

		make_key(id, &k);
		if (op < 40) {
			uint64_t seed = id << 32 | (rnd(&s) & 0xffffffffu);
			rc = t->ops->put_begin(t, &k, st_len(seed), &w);
			if (rc == 0) {
				st_fill(want, seed);
				scatter(w->iov, w->n_iov, want);
				if (op < 3) {
					t->ops->put_abort(t, w);
					continue;
				}
				rc = t->ops->put_commit(t, w, KVT_DUR_CACHED);
			}
			if (rc == 0)
				atomic_fetch_add(&st_puts, 1);
			else if (rc == KVT_EFULL)
				atomic_fetch_add(&st_full, 1);
			else if (rc != KVT_EEXIST)
				atomic_fetch_add(&st_mismatch, 1);
		} else if (op < 75) {
			atomic_fetch_add(&st_gets, 1);
			rc = t->ops->get(t, &k, &r);
			if (rc == 0) {
				if (!st_verify(r, id, want, got))
					atomic_fetch_add(&st_mismatch, 1);
				t->ops->release(t, r);
			} else if (rc != KVT_ENOTFOUND) {
				atomic_fetch_add(&st_mismatch, 1);
			}
		} else if (op < 85) {
			rc = t->ops->del(t, &k);
			if (rc == 0)
				atomic_fetch_add(&st_dels, 1);
			else if (rc != KVT_ENOTFOUND)
				atomic_fetch_add(&st_mismatch, 1);
		} else if (op < 90) {
			(void)t->ops->exists(t, &k);
		} else {
			/* Hold a borrow across other threads' puts and
			 * deletes, verify again when letting it go. */
			int slot = (int)(op & 1);
			if (held[slot]) {
				if (!st_verify(held[slot], held_id[slot], want, got))
					atomic_fetch_add(&st_mismatch, 1);
				t->ops->release(t, held[slot]);
				held[slot] = NULL;
			} else {
				atomic_fetch_add(&st_gets, 1);
				if (t->ops->get(t, &k, &held[slot]) == 0) {
					held_id[slot] = id;
					if (!st_verify(held[slot], id, want, got))
						atomic_fetch_add(&st_mismatch, 1);
				}
			}
		}
	}
	for (int i = 0; i < 2; i++) {
		if (held[i]) {
			if (!st_verify(held[i], held_id[i], want, got))
				atomic_fetch_add(&st_mismatch, 1);
			t->ops->release(t, held[i]);
		}
	}
	free(want);
	free(got);
	return NULL;
}

struct st_sum {
	uint64_t n, pages;
};

static int st_sum_fn(void *arg, const kvt_key *key, uint64_t len)
{
	struct st_sum *s = arg;
	(void)key;
	s->n++;
	s->pages += (len + PS - 1) / PS;
	return 0;
}

/* `pages` of arena for ST_KEYS keys of 1..5 pages: 128 keeps most keys and
 * hits often; 12 is mostly evictions and KVT_EFULL (threads hold borrows). */
static void test_stress(uint32_t pages, long ms)
{
	pthread_t th[ST_THREADS];
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	struct st_sum sum = { 0, 0 };
	kvt_tier_stats st;

	atomic_store(&st_stop, 0);
	atomic_store(&st_puts, 0);
	atomic_store(&st_dels, 0);
	atomic_store(&st_gets, 0);
	atomic_store(&st_mismatch, 0);
	atomic_store(&st_full, 0);
	st_tier = open_tier((uint64_t)pages * PS, PS, 8);
	for (uintptr_t i = 0; i < ST_THREADS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, st_worker, (void *)(i + 1)), 0);
	nanosleep(&ts, NULL);
	atomic_store(&st_stop, 1);
	for (int i = 0; i < ST_THREADS; i++)
		pthread_join(th[i], NULL);

	tier_stats(st_tier, &st);
	CHECK_EQ(atomic_load(&st_mismatch), 0);
	CHECK_EQ(st.borrowed, 0);
	CHECK(st.used_bytes <= st.capacity_bytes);
	CHECK_EQ(st.puts, atomic_load(&st_puts));
	CHECK_EQ(st.hits + st.misses, atomic_load(&st_gets));
	CHECK_EQ(st.put_rejects, atomic_load(&st_full));
	CHECK_EQ(st.puts - st.evictions - atomic_load(&st_dels), st.chunks);
	CHECK_EQ(st_tier->ops->iterate(st_tier, st_sum_fn, &sum), 0);
	CHECK_EQ(sum.n, st.chunks);
	/* Quiescent: every page in use belongs to a published chunk. */
	CHECK_EQ(sum.pages * PS, st.used_bytes);
	fprintf(stderr,
		"stress: %u pages, %ld ms, %llu puts, %llu gets (%llu hits), %llu dels, "
		"%llu evictions, %llu EFULL, %llu EEXIST\n",
		pages, ms, (unsigned long long)st.puts,
		(unsigned long long)(st.hits + st.misses),
		(unsigned long long)st.hits, (unsigned long long)atomic_load(&st_dels),
		(unsigned long long)st.evictions, (unsigned long long)st.put_rejects,
		(unsigned long long)st.put_exists);
	st_tier->ops->close(st_tier);
}

int main(void)
{
	const char *env = getenv("KVT_STRESS_MS");
	long ms = env ? atol(env) : 2000;

	test_round_trip();
	test_exists();
	test_lru();
	test_borrowed();
	test_delete_borrowed();
	test_errors();
	test_arena_options();
	test_stress(128, ms / 2);
	test_stress(12, ms - ms / 2);
	TEST_DONE();
}
