/*
 * test_policy.c — eviction and admission policies on hand-checkable
 * sequences, and the reference replay on the real conversation trace.
 */
#include "test.h"
#include "test_data.h"

#include <stdint.h>

#include "policy/admit.h"
#include "policy/evict.h"
#include "plan/trace.h"
#include "policy/replay.h"

/* Victims land here so a test can say which ones, in which order. */
struct victims {
	uint64_t id[4096];
	uint64_t size[4096];
	unsigned n;
};

static void on_victim(void *arg, uint64_t id, uint64_t size)
{
	struct victims *v = arg;
	if (v->n < 4096) {
		v->id[v->n] = id;
		v->size[v->n] = size;
	}
	v->n++;
}

static kvt_evict *mk(enum kvt_evict_kind kind, uint64_t cap, struct victims *v)
{
	struct kvt_evict_conf c = {.kind = kind, .capacity = cap, .on_victim = on_victim,
				   .victim_arg = v};
	kvt_evict *e = NULL;
	CHECK_EQ(kvt_evict_create(&c, &e), 0);
	if (!e)
		exit(1);
	if (v)
		memset(v, 0, sizeof(*v));
	return e;
}

static void test_lru_basic(void)
{
	struct victims v;
	kvt_evict *e = mk(KVT_EVICT_LRU, 3, &v);
	CHECK_EQ(kvt_evict_access(e, 1, 1), 0);
	CHECK_EQ(kvt_evict_access(e, 2, 1), 0);
	CHECK_EQ(kvt_evict_access(e, 3, 1), 0);
	CHECK_EQ(kvt_evict_access(e, 1, 1), 1); /* 1 is now most recent */
	CHECK_EQ(kvt_evict_access(e, 4, 1), 0); /* evicts 2, the LRU */
	CHECK_EQ(v.n, 1);
	CHECK_EQ(v.id[0], 2);
	uint64_t pk = 0;
	CHECK_EQ(kvt_evict_peek_victim(e, &pk), 0);
	CHECK_EQ(pk, 3);
	CHECK_EQ(kvt_evict_contains(e, 2), 0);
	CHECK_EQ(kvt_evict_used(e), 3);
	CHECK_EQ(kvt_evict_insert(e, 4, 1), KVT_EEXIST);
	CHECK(strcmp(kvt_evict_name(e), "lru") == 0);
	/* remove: gone, not reported as a victim, room freed */
	CHECK_EQ(kvt_evict_remove(e, 3), 0);
	CHECK_EQ(kvt_evict_remove(e, 3), KVT_ENOTFOUND);
	CHECK_EQ(kvt_evict_used(e), 2);
	CHECK_EQ(v.n, 1);
	CHECK_EQ(kvt_evict_access(e, 5, 1), 0);
	CHECK_EQ(v.n, 1);
	kvt_evict_destroy(e);

	/* sizes: one big insert can push out several */
	e = mk(KVT_EVICT_LRU, 10, &v);
	CHECK_EQ(kvt_evict_insert(e, 1, 3), 0);
	CHECK_EQ(kvt_evict_insert(e, 2, 3), 0);
	CHECK_EQ(kvt_evict_insert(e, 3, 3), 0);
	CHECK_EQ(kvt_evict_insert(e, 4, 7), 0); /* needs 1 and 2 out */
	CHECK_EQ(v.n, 2);
	CHECK_EQ(v.id[0], 1);
	CHECK_EQ(v.id[1], 2);
	CHECK_EQ(v.size[0], 3);
	CHECK_EQ(kvt_evict_used(e), 10);
	CHECK_EQ(kvt_evict_insert(e, 5, 11), KVT_ETOOBIG);
	CHECK_EQ(kvt_evict_insert(e, 5, 0), KVT_ETOOBIG);
	kvt_evict_destroy(e);

	struct kvt_evict_conf bad = {.kind = KVT_EVICT_LRU, .capacity = 0};
	CHECK_EQ(kvt_evict_create(&bad, &e), KVT_EINVAL);
	bad.capacity = 5;
	bad.kind = 99;
	CHECK_EQ(kvt_evict_create(&bad, &e), KVT_EINVAL);
}

/* A hot set touched three times, then a one-pass scan twice the cache, then
 * the hot set again: how many of the last five are hits. */
static int hot_after_scan(enum kvt_evict_kind kind)
{
	struct victims v;
	kvt_evict *e = mk(kind, 10, &v);
	for (int r = 0; r < 3; r++)
		for (uint64_t id = 1; id <= 5; id++)
			kvt_evict_access(e, id, 1);
	for (uint64_t id = 100; id < 120; id++)
		CHECK_EQ(kvt_evict_access(e, id, 1), 0);
	int hits = 0;
	for (uint64_t id = 1; id <= 5; id++)
		hits += kvt_evict_access(e, id, 1) == 1;
	kvt_evict_destroy(e);
	return hits;
}

static void test_scan_resistance(void)
{
	CHECK_EQ(hot_after_scan(KVT_EVICT_LRU), 0);
	CHECK_EQ(hot_after_scan(KVT_EVICT_S3FIFO), 5);
}

static void test_s3fifo_rules(void)
{
	struct victims v;
	/* capacity 10: S holds 1 unit before it must give, M 9, G 9. */
	kvt_evict *e = mk(KVT_EVICT_S3FIFO, 10, &v);
	CHECK(strcmp(kvt_evict_name(e), "s3fifo") == 0);
	CHECK_EQ(kvt_evict_access(e, 1, 1), 0);
	for (uint64_t id = 2; id <= 10; id++)
		CHECK_EQ(kvt_evict_access(e, id, 1), 0);
	CHECK_EQ(v.n, 0);
	uint64_t pk = 0;
	CHECK_EQ(kvt_evict_peek_victim(e, &pk), 0);
	CHECK_EQ(pk, 1); /* oldest in S */
	CHECK_EQ(kvt_evict_access(e, 11, 1), 0); /* 1 unhit in S: out, id to G */
	CHECK_EQ(v.n, 1);
	CHECK_EQ(v.id[0], 1);
	CHECK_EQ(kvt_evict_contains(e, 1), 0); /* a ghost is not resident */
	CHECK_EQ(kvt_evict_remove(e, 1), KVT_ENOTFOUND);
	/* ghost hit: a miss, but it goes straight to M ... */
	CHECK_EQ(kvt_evict_access(e, 1, 1), 0);
	CHECK_EQ(v.id[1], 2);
	/* ... where a long scan of one-hit wonders cannot touch it. */
	for (uint64_t id = 1000; id < 1100; id++)
		CHECK_EQ(kvt_evict_access(e, id, 1), 0);
	CHECK_EQ(kvt_evict_contains(e, 1), 1);
	CHECK_EQ(kvt_evict_contains(e, 3), 0); /* never hit: went with the scan */
	CHECK_EQ(kvt_evict_used(e), 10);
	kvt_evict_destroy(e);

	/* M: an object hit in M survives one more pass, then goes.  Cap 4:
	 * S = 1 unit.  1 and 2 hit in S move to M on the next evictions. */
	e = mk(KVT_EVICT_S3FIFO, 4, &v);
	kvt_evict_access(e, 1, 1);
	kvt_evict_access(e, 2, 1);
	kvt_evict_access(e, 1, 1);
	kvt_evict_access(e, 2, 1);
	kvt_evict_access(e, 3, 1);
	kvt_evict_access(e, 4, 1);
	kvt_evict_access(e, 5, 1); /* S: 1,2 -> M; 3 evicted (G) */
	CHECK_EQ(v.n, 1);
	CHECK_EQ(v.id[0], 3);
	CHECK_EQ(kvt_evict_access(e, 3, 1), 0); /* ghost -> M; S tail 4 goes */
	CHECK_EQ(v.id[1], 4);
	/* Now M = {1,2,3} (freq 0), S = {5}.  Hit 1 in M: */
	CHECK_EQ(kvt_evict_access(e, 1, 1), 1);
	/* S has its share: next insert evicts 5 from S (unhit). */
	CHECK_EQ(kvt_evict_access(e, 6, 1), 0);
	CHECK_EQ(v.id[2], 5);
	kvt_evict_destroy(e);

	struct kvt_evict_conf c = {.kind = KVT_EVICT_S3FIFO, .capacity = 95, .small_pct = 91};
	kvt_evict *bad = NULL;
	CHECK_EQ(kvt_evict_create(&c, &bad), KVT_EINVAL);
}


static kvt_evict *mk_fill(uint64_t cap, struct victims *v)
{
	struct kvt_evict_conf c = {.kind = KVT_EVICT_S3FIFO, .capacity = cap, .s3_fill_main = 1,
				   .on_victim = on_victim, .victim_arg = v};
	kvt_evict *e = NULL;
	CHECK_EQ(kvt_evict_create(&c, &e), 0);
	if (!e)
		exit(1);
	memset(v, 0, sizeof(*v));
	return e;
}

/* libCacheSim's variant (s3_fill_main): until the first eviction, new
 * objects fill M once S holds its share. */
static void test_s3fifo_fill_main(void)
{
	struct victims v;
	/* capacity 10: S holds 1 unit before it must give, M 9, G 9. */
	kvt_evict *e = mk_fill(10, &v);
	CHECK(strcmp(kvt_evict_name(e), "s3fifo") == 0);
	CHECK_EQ(kvt_evict_access(e, 1, 1), 0);
	/* Before the first eviction, S full: new objects fill M. */
	for (uint64_t id = 2; id <= 10; id++)
		CHECK_EQ(kvt_evict_access(e, id, 1), 0);
	CHECK_EQ(v.n, 0);
	uint64_t pk = 0;
	CHECK_EQ(kvt_evict_peek_victim(e, &pk), 0);
	CHECK_EQ(pk, 1); /* S holds its share: its oldest */
	CHECK_EQ(kvt_evict_access(e, 11, 1), 0); /* 1 unhit in S: out, id to G */
	CHECK_EQ(v.n, 1);
	CHECK_EQ(v.id[0], 1);
	CHECK_EQ(kvt_evict_contains(e, 1), 0); /* a ghost is not resident */
	CHECK_EQ(kvt_evict_remove(e, 1), KVT_ENOTFOUND);
	/* ghost hit: a miss, but it goes straight to M; room comes from S
	 * (11, unhit), which holds its share. */
	CHECK_EQ(kvt_evict_access(e, 1, 1), 0);
	CHECK_EQ(v.id[1], 11);
	/* A long scan of one-hit wonders: S is empty for the first, so M's
	 * oldest unhit object (2) makes room once; then the scan only churns
	 * S and never touches M again. */
	for (uint64_t id = 1000; id < 1100; id++)
		CHECK_EQ(kvt_evict_access(e, id, 1), 0);
	CHECK_EQ(kvt_evict_contains(e, 1), 1);
	CHECK_EQ(kvt_evict_contains(e, 2), 0);
	for (uint64_t id = 3; id <= 10; id++)
		CHECK_EQ(kvt_evict_contains(e, id), 1);
	CHECK_EQ(kvt_evict_contains(e, 1098), 0);
	CHECK_EQ(kvt_evict_contains(e, 1099), 1);
	CHECK_EQ(kvt_evict_used(e), 10);
	kvt_evict_destroy(e);

	/* Cap 4, S = 1 unit.  1 goes to S, 2..4 fill M (no eviction yet). */
	e = mk_fill(4, &v);
	kvt_evict_access(e, 1, 1);
	kvt_evict_access(e, 2, 1);
	CHECK_EQ(kvt_evict_access(e, 1, 1), 1); /* hit in S */
	CHECK_EQ(kvt_evict_access(e, 2, 1), 1); /* hit in M */
	kvt_evict_access(e, 3, 1);
	kvt_evict_access(e, 4, 1);
	/* 5: S's 1 was hit: to M, S is empty; M's tail 2 was hit: another
	 * round with one frequency less; 3, unhit, goes (not to G: only S's
	 * victims leave ghosts). */
	kvt_evict_access(e, 5, 1);
	CHECK_EQ(v.n, 1);
	CHECK_EQ(v.id[0], 3);
	/* 3 is no ghost: it returns to S, whose 5 (unhit) makes room. */
	CHECK_EQ(kvt_evict_access(e, 3, 1), 0);
	CHECK_EQ(v.id[1], 5);
	/* 5 is a ghost: it returns to M, S's 3 makes room. */
	CHECK_EQ(kvt_evict_access(e, 5, 1), 0);
	CHECK_EQ(v.id[2], 3);
	CHECK_EQ(kvt_evict_contains(e, 5), 1);
	/* M = 4, 1, 2, 5 (oldest first), S empty: the next insert takes M's
	 * oldest unhit object. */
	CHECK_EQ(kvt_evict_access(e, 6, 1), 0);
	CHECK_EQ(v.id[3], 4);
	kvt_evict_destroy(e);
}

static void test_pinning(enum kvt_evict_kind kind)
{
	struct victims v;
	kvt_evict *e = mk(kind, 3, &v);
	for (uint64_t id = 1; id <= 3; id++)
		kvt_evict_access(e, id, 1);
	CHECK_EQ(kvt_evict_pin(e, 1), 0);
	CHECK_EQ(kvt_evict_pin(e, 1), 0); /* nests */
	CHECK_EQ(kvt_evict_pin(e, 99), KVT_ENOTFOUND);
	CHECK_EQ(kvt_evict_unpin(e, 2), KVT_EINVAL);
	for (uint64_t id = 10; id < 30; id++) {
		CHECK_EQ(kvt_evict_access(e, id, 1), 0);
		CHECK(kvt_evict_used(e) <= 3);
	}
	CHECK_EQ(kvt_evict_contains(e, 1), 1);
	for (unsigned i = 0; i < v.n && i < 4096; i++)
		CHECK(v.id[i] != 1);
	CHECK_EQ(kvt_evict_access(e, 1, 1), 1); /* hit while pinned is fine */
	/* pin everything: no room for anything, and nothing is evicted */
	CHECK_EQ(kvt_evict_pin(e, 28), 0);
	CHECK_EQ(kvt_evict_pin(e, 29), 0);
	unsigned before = v.n;
	CHECK_EQ(kvt_evict_access(e, 50, 1), KVT_EFULL);
	CHECK_EQ(v.n, before);
	CHECK_EQ(kvt_evict_contains(e, 50), 0);
	CHECK_EQ(kvt_evict_used(e), 3);
	/* one unpin is not enough: 1 was pinned twice */
	CHECK_EQ(kvt_evict_unpin(e, 1), 0);
	CHECK_EQ(kvt_evict_access(e, 50, 1), KVT_EFULL);
	CHECK_EQ(kvt_evict_unpin(e, 1), 0);
	CHECK_EQ(kvt_evict_access(e, 50, 1), 0);
	CHECK_EQ(v.id[v.n - 1], 1);
	/* removing a pinned object releases its pinned units */
	CHECK_EQ(kvt_evict_remove(e, 28), 0);
	CHECK_EQ(kvt_evict_access(e, 51, 1), 0);
	CHECK_EQ(kvt_evict_contains(e, 29), 1);
	kvt_evict_destroy(e);
}

/* Random operations with random sizes: used() matches a shadow built only
 * from what the interface reported, and never exceeds the capacity. */
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

struct shadow {
	uint64_t size[512]; /* 0 = absent */
	uint64_t used;
};

static void shadow_victim(void *arg, uint64_t id, uint64_t size)
{
	struct shadow *s = arg;
	if (id >= 512 || s->size[id] != size) {
		test_failures++;
		fprintf(stderr, "bad victim %llu\n", (unsigned long long)id);
		return;
	}
	s->used -= size;
	s->size[id] = 0;
}

static void test_capacity_random(enum kvt_evict_kind kind)
{
	static struct shadow s;
	memset(&s, 0, sizeof(s));
	int pins[512] = {0};
	struct kvt_evict_conf c = {.kind = kind, .capacity = 200, .on_victim = shadow_victim,
				   .victim_arg = &s};
	kvt_evict *e = NULL;
	CHECK_EQ(kvt_evict_create(&c, &e), 0);
	int bad = 0;
	for (int step = 0; step < 200000; step++) {
		uint64_t r = rnd();
		uint64_t id = (r >> 8) % 512;
		/* skewed: half the accesses go to 32 hot ids */
		if (r & 1)
			id &= 31;
		uint64_t size = 1 + (id * 7) % 8;
		unsigned op = (unsigned)(r >> 40) % 100;
		if (op < 85) {
			int present = s.size[id] != 0;
			int rc = kvt_evict_access(e, id, size);
			if (present)
				bad += rc != 1;
			else if (rc == 0) {
				s.size[id] = size;
				s.used += size;
			} else
				bad += rc != KVT_EFULL;
		} else if (op < 90) {
			if (kvt_evict_remove(e, id) == 0) {
				s.used -= s.size[id];
				s.size[id] = 0;
				pins[id] = 0;
			}
		} else if (op < 95) {
			if (kvt_evict_pin(e, id) == 0)
				pins[id]++;
		} else if (pins[id]) {
			bad += kvt_evict_unpin(e, id) != 0;
			pins[id]--;
		}
		bad += kvt_evict_used(e) > 200;
		bad += kvt_evict_used(e) != s.used;
		bad += kvt_evict_contains(e, id) != (s.size[id] != 0);
	}
	CHECK_EQ(bad, 0);
	kvt_evict_destroy(e);
}

/* The dense-id map (id_limit) is a faster index, not another policy: the
 * same access sequence gives the same hits and victims with and without
 * it, and an id beyond the limit is refused. */
static void test_id_limit(enum kvt_evict_kind kind)
{
	struct kvt_evict_conf c = { .kind = kind, .capacity = 150 };
	kvt_evict *a = NULL, *b = NULL;
	int diff = 0;

	CHECK_EQ(kvt_evict_create(&c, &a), 0);
	c.id_limit = 1000;
	CHECK_EQ(kvt_evict_create(&c, &b), 0);
	for (int step = 0; step < 100000; step++) {
		uint64_t r = rnd(), id = (r >> 8) % 1000;
		if (r & 1)
			id &= 63;
		diff += kvt_evict_access(a, id, 1 + id % 3) != kvt_evict_access(b, id, 1 + id % 3);
		diff += kvt_evict_used(a) != kvt_evict_used(b);
	}
	CHECK_EQ(diff, 0);
	for (uint64_t id = 0; id < 1000; id++)
		diff += kvt_evict_contains(a, id) != kvt_evict_contains(b, id);
	CHECK_EQ(diff, 0);
	CHECK_EQ(kvt_evict_insert(b, 1000, 1), KVT_EINVAL);
	CHECK_EQ(kvt_evict_contains(b, 1000), 0);
	kvt_evict_destroy(a);
	kvt_evict_destroy(b);
}

static void test_sketch(void)
{
	kvt_admit *a = NULL;
	struct kvt_admit_conf c = {.rules = 0, .sketch_width = 1024, .sample = 100};
	CHECK_EQ(kvt_admit_create(&c, &a), 0);
	for (int i = 0; i < 5; i++)
		kvt_admit_record(a, 7);
	CHECK_EQ(kvt_admit_estimate(a, 7), 5);
	CHECK_EQ(kvt_admit_estimate(a, 8), 0);
	for (int i = 0; i < 40; i++)
		kvt_admit_record(a, 9);
	CHECK_EQ(kvt_admit_estimate(a, 9), 15); /* 4-bit saturation */
	/* 45 sightings so far; 55 more distinct ids reach the sample of 100
	 * and halve everything: 5 -> 2, 15 -> 7. */
	for (uint64_t id = 1000; id < 1054; id++)
		kvt_admit_record(a, id);
	CHECK_EQ(kvt_admit_estimate(a, 7), 5);
	kvt_admit_record(a, 2000);
	CHECK_EQ(kvt_admit_estimate(a, 7), 2);
	CHECK_EQ(kvt_admit_estimate(a, 9), 7);
	CHECK_EQ(kvt_admit_estimate(a, 2000), 0);
	struct kvt_admit_query q = {.id = 7};
	CHECK_EQ(kvt_admit_check(a, &q), 1); /* no rules: always */
	kvt_admit_destroy(a);

	/* doorkeeper: the first sighting never reaches the sketch */
	c.doorkeeper = 1;
	c.sample = 0;
	CHECK_EQ(kvt_admit_create(&c, &a), 0);
	kvt_admit_record(a, 5);
	CHECK_EQ(kvt_admit_estimate(a, 5), 1);
	kvt_admit_record(a, 5);
	CHECK_EQ(kvt_admit_estimate(a, 5), 2);
	for (int i = 0; i < 30; i++)
		kvt_admit_record(a, 5);
	CHECK_EQ(kvt_admit_estimate(a, 5), 16);
	kvt_admit_destroy(a);

	struct kvt_admit_conf badc = {.rules = KVT_ADMIT_SEEN, .seen_n = 0};
	CHECK_EQ(kvt_admit_create(&badc, &a), KVT_EINVAL);
	badc.seen_n = 16;
	CHECK_EQ(kvt_admit_create(&badc, &a), KVT_EINVAL);
	badc.doorkeeper = 1;
	CHECK_EQ(kvt_admit_create(&badc, &a), 0);
	kvt_admit_destroy(a);
	badc.rules = KVT_ADMIT_PREFIX;
	badc.min_prefix = 0;
	CHECK_EQ(kvt_admit_create(&badc, &a), KVT_EINVAL);
}

static void test_admit_rules(void)
{
	kvt_admit *a = NULL;
	/* admit on the second sighting */
	struct kvt_admit_conf c = {.rules = KVT_ADMIT_SEEN, .seen_n = 2, .doorkeeper = 1};
	CHECK_EQ(kvt_admit_create(&c, &a), 0);
	struct kvt_admit_query q = {.id = 42};
	CHECK_EQ(kvt_admit_access(a, &q), 0);
	CHECK_EQ(kvt_admit_access(a, &q), 1);
	q.id = 43;
	CHECK_EQ(kvt_admit_check(a, &q), 0);
	kvt_admit_destroy(a);

	/* TinyLFU: candidate must beat the victim */
	c = (struct kvt_admit_conf){.rules = KVT_ADMIT_TINYLFU};
	CHECK_EQ(kvt_admit_create(&c, &a), 0);
	for (int i = 0; i < 3; i++)
		kvt_admit_record(a, 1); /* victim, 3 */
	kvt_admit_record(a, 2);     /* candidate, 1 */
	q = (struct kvt_admit_query){.id = 2, .has_victim = 1, .victim = 1};
	CHECK_EQ(kvt_admit_check(a, &q), 0);
	q.has_victim = 0;
	CHECK_EQ(kvt_admit_check(a, &q), 1); /* room: no contest */
	q.has_victim = 1;
	kvt_admit_record(a, 2);
	kvt_admit_record(a, 2);
	CHECK_EQ(kvt_admit_check(a, &q), 0); /* a tie keeps the incumbent */
	kvt_admit_record(a, 2);
	CHECK_EQ(kvt_admit_check(a, &q), 1);
	kvt_admit_destroy(a);

	/* prefix depth, combined with seen: both must agree */
	c = (struct kvt_admit_conf){.rules = KVT_ADMIT_PREFIX | KVT_ADMIT_SEEN, .min_prefix = 3,
				    .seen_n = 1};
	CHECK_EQ(kvt_admit_create(&c, &a), 0);
	q = (struct kvt_admit_query){.id = 10, .pos = 1};
	CHECK_EQ(kvt_admit_check(a, &q), 0); /* depth 2, never seen */
	kvt_admit_record(a, 10);
	CHECK_EQ(kvt_admit_check(a, &q), 0); /* seen, depth 2 < 3 */
	q.pos = 2;
	CHECK_EQ(kvt_admit_check(a, &q), 1); /* depth 3 */
	q.id = 11;
	CHECK_EQ(kvt_admit_check(a, &q), 0); /* depth 3, never seen */
	kvt_admit_destroy(a);

	c = (struct kvt_admit_conf){.rules = KVT_ADMIT_NEVER};
	CHECK_EQ(kvt_admit_create(&c, &a), 0);
	CHECK_EQ(kvt_admit_access(a, &q), 0);
	kvt_admit_destroy(a);
}

/* Request by request, ids renumbered densely in order of first sight. */
static int build(struct kvt_trace *t, const uint64_t *const *reqs, const size_t *n, size_t nreq)
{
	struct kvt_trace_builder b;
	int rc = kvt_trace_build_begin(&b, t);
	for (size_t i = 0; !rc && i < nreq; i++)
		rc = kvt_trace_build_add(&b, reqs[i], n[i]);
	kvt_trace_build_end(&b);
	return rc;
}

static void test_build(void)
{
	static const uint64_t r0[] = {5, 6, 7}, r1[] = {5, 6, 9, 10};
	const uint64_t *reqs[] = {r0, r1, NULL};
	const size_t n[] = {3, 4, 0};
	struct kvt_trace t;
	CHECK_EQ(build(&t, reqs, n, 3), 0);
	CHECK_EQ(t.nreq, 3);
	CHECK_EQ(t.nblocks, 7);
	CHECK_EQ(t.nids, 5);
	CHECK_EQ(t.ids[3], 0);
	CHECK_EQ(t.ids[5], 3);
	CHECK_EQ(t.pos[3], 2);
	struct kvt_replay_conf c = {.ntiers = 1, .tier = {{.kind = KVT_EVICT_LRU, .capacity = 100}}};
	struct kvt_replay_result r;
	CHECK_EQ(kvt_replay_run(&t, &c, &r), 0);
	CHECK_EQ(r.hit_blocks, 2);
	CHECK_EQ(r.inserts[0], 5);
	kvt_trace_free(&t);
	/* A request with no block replays as nothing (it had no ids to
	 * point at); ids use all 64 bits. */
	static const uint64_t big[] = {UINT64_MAX, 0, UINT64_MAX};
	const uint64_t *reqs2[] = {NULL, big};
	const size_t n2[] = {0, 3};
	CHECK_EQ(build(&t, reqs2, n2, 2), 0);
	CHECK_EQ(t.nids, 2);
	CHECK_EQ(t.ids[2], t.ids[0]);
	struct kvt_replay_conf c2 = {.ntiers = 1, .tier = {{.kind = KVT_EVICT_LRU, .capacity = 10}}};
	CHECK_EQ(kvt_replay_run(&t, &c2, &r), 0);
	CHECK_EQ(r.hit_blocks, 0);
	CHECK_EQ(r.blocks, 3);
	kvt_trace_free(&t);
}

/* Dense ids are mapped by index, sparse ones by hash; an id first seen
 * while sparse (100000 after one block) and seen again once the dense run
 * has grown the index table over it keeps its first dense id. */
static void test_build_dense_and_sparse(void)
{
	enum { N = 200000 };
	uint64_t *dense = malloc(N * sizeof(*dense));
	static const uint64_t first[] = {7, 100000, 1ull << 40};
	static const uint64_t again[] = {100000, 1ull << 40, 7};
	CHECK(dense != NULL);
	for (uint64_t i = 0; i < N; i++)
		dense[i] = i;
	const uint64_t *reqs[] = {first, dense, again};
	const size_t n[] = {3, N, 3};
	struct kvt_trace t;
	CHECK_EQ(build(&t, reqs, n, 3), 0);
	CHECK_EQ(t.nids, N + 1); /* 0..N-1 and 2^40 */
	CHECK_EQ(t.ids[0], 0);   /* 7 */
	CHECK_EQ(t.ids[1], 1);   /* 100000, hashed */
	CHECK_EQ(t.ids[2], 2);   /* 2^40 */
	CHECK_EQ(t.ids[3 + 7], 0);
	CHECK_EQ(t.ids[3 + 100000], 1); /* found in the hash, not renumbered */
	CHECK_EQ(t.ids[3 + 0], 3);      /* the first id new in the run */
	CHECK_EQ(t.ids[3 + 8], 10);     /* after 0..6 and 7 (seen before) */
	CHECK_EQ(t.ids[3 + N + 0], 1);
	CHECK_EQ(t.ids[3 + N + 1], 2);
	CHECK_EQ(t.ids[3 + N + 2], 0);
	kvt_trace_free(&t);
	free(dense);
}

/* The reference numbers of the capacity-planning issue, from a plain exact
 * simulation: our policies must reproduce them to the block. */
static void test_trace_exact(void)
{
	size_t len = 0;
	char *buf = test_data_read("traces/conversation_trace.jsonl", &len);
	struct plan_trace pt;
	CHECK_EQ(plan_trace_parse(buf, len, PLAN_FMT_MOONCAKE, 0, 0, &pt), 0);
	free(buf);
	struct kvt_trace t = pt.t; /* the planner's reader, the one trace reader */
	CHECK_EQ(t.nreq, 12031);
	CHECK_EQ(t.nblocks, 288500);
	static const struct {
		uint64_t cap, hits;
	} want[] = {{1000, 12831}, {5000, 31840}, {20000, 82939}, {UINT64_MAX, 105710}};
	for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct kvt_replay_conf c = {.ntiers = 1,
					    .tier = {{.kind = KVT_EVICT_LRU, .capacity = want[i].cap}}};
		struct kvt_replay_result r;
		CHECK_EQ(kvt_replay_run(&t, &c, &r), 0);
		CHECK_EQ(r.blocks, 288500);
		CHECK_EQ(r.hit_blocks, want[i].hits);
		CHECK_EQ(r.rejects[0], 0);
	}
	/* Unbounded S3-FIFO never evicts: same answer as unbounded LRU. */
	struct kvt_replay_conf c = {.ntiers = 1,
				    .tier = {{.kind = KVT_EVICT_S3FIFO, .capacity = UINT64_MAX / 2}}};
	struct kvt_replay_result r;
	CHECK_EQ(kvt_replay_run(&t, &c, &r), 0);
	CHECK_EQ(r.hit_blocks, 105710);
	/* Two exclusive tiers hit at least what the top tier alone does, and
	 * every hit is found in exactly one of them. */
	struct kvt_replay_conf c2 = {.ntiers = 2, .mode = KVT_REPLAY_EXCLUSIVE,
				     .tier = {{.kind = KVT_EVICT_LRU, .capacity = 1000},
					      {.kind = KVT_EVICT_LRU, .capacity = 4000}}};
	CHECK_EQ(kvt_replay_run(&t, &c2, &r), 0);
	CHECK(r.hit_blocks >= 12831);
	CHECK_EQ(r.hit_tier[0] + r.hit_tier[1], r.hit_blocks);
	plan_trace_free(&pt);
}

int main(void)
{
	test_lru_basic();
	test_scan_resistance();
	test_s3fifo_rules();
	test_s3fifo_fill_main();
	test_pinning(KVT_EVICT_LRU);
	test_pinning(KVT_EVICT_S3FIFO);
	test_capacity_random(KVT_EVICT_LRU);
	test_capacity_random(KVT_EVICT_S3FIFO);
	test_id_limit(KVT_EVICT_LRU);
	test_id_limit(KVT_EVICT_S3FIFO);
	test_sketch();
	test_admit_rules();
	test_build();
	test_build_dense_and_sparse();
	test_trace_exact();
	TEST_DONE();
}
