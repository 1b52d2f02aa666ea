/*
 * test_quota.c — tenants' shares of a tier: a tenant's flood cannot push
 * another below its reservation, a quota bounds what a tenant holds, a
 * tenant's chunks stay charged to it in every tier, and bad settings are
 * refused with the reason.
 *
 * The store is DRAM (2 MiB, 16 KiB pages) over NVMe; a chunk is 128 KiB of
 * payload plus its 4 KiB header: 9 pages.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#define SECRET_A "000102030405060708090a0b0c0d0e0f"
#define SECRET_B "f0e0d0c0b0a090807060504030201000"
#define CHUNK_BYTES (9 * 16384ull) /* what one chunk holds in the DRAM tier */

static char dir[64];

static kvt_store *open_store(int with_disk)
{
	kvt_config *c = kvt_config_new();
	kvt_store *st;
	int err;

	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "2MiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_page_size", "16KiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_prefault", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "tenants", "a=" SECRET_A ",b=" SECRET_B), 0);
	if (with_disk) {
		CHECK_EQ(kvt_config_set(c, "local_disk", dir), 0);
		CHECK_EQ(kvt_config_set(c, "max_local_disk_size", "64MiB"), 0);
	}
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

static kvt_ns ns_for(kvt_store *st, const char *tenant)
{
	kvt_ns_desc d = { 0 };
	kvt_ns ns;

	d.model = "test/quota";
	d.tenant = tenant;
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

/* How many of k[0..n) a get serves with the bytes put (seed as put_all). */
static int served(kvt_store *st, const kvt_ns *ns, const kvt_key *k, int n,
		  uint64_t seed)
{
	size_t per = kvt_layout_payload_bytes(&ns->layout), len;
	uint8_t *p = malloc(per), *q = malloc(per);
	int ok = 0;

	for (int i = 0; i < n; i++) {
		test_fill(p, per, seed + (uint64_t)i);
		ok += kvt_get(st, ns, &k[i], q, per, &len) == 0 && !memcmp(p, q, per);
	}
	free(p);
	free(q);
	return ok;
}

static kvt_tenant_usage usage(kvt_store *st, const char *tenant, int tier)
{
	kvt_tenant_usage u;

	CHECK_EQ(kvt_store_tenant_usage(st, tenant, tier, &u), 0);
	return u;
}

/* B floods the DRAM tier; A's reserved chunks all stay, B pays for room. */
static void reservation_survives_flood(int reserve)
{
	kvt_store *st = open_store(0);
	kvt_ns a = ns_for(st, "a"), b = ns_for(st, "b");
	kvt_key ka[4], kb[40];
	kvt_tenant_usage ua, ub;

	if (reserve)
		CHECK_EQ(kvt_store_set_quota(st, "a", 0, 0, 4 * CHUNK_BYTES), 0);
	chain(&a, 1, 4, ka);
	chain(&b, 2, 40, kb);
	put_all(st, &a, ka, 4, 100);
	put_all(st, &b, kb, 40, 200); /* 40 x 9 pages over a ~111-page policy */
	ua = usage(st, "a", 0);
	ub = usage(st, "b", 0);
	CHECK(ua.bytes + ub.bytes <= ua.capacity);
	if (reserve) {
		CHECK_EQ(ua.reserve, 4 * CHUNK_BYTES);
		CHECK_EQ(ua.chunks, 4);
		CHECK_EQ(ua.share_evictions, 0);
		CHECK_EQ(served(st, &a, ka, 4, 100), 4);
		CHECK(ub.share_evictions >= 40 - ub.chunks);
		CHECK(ub.chunks >= 8);       /* B still has the rest of the tier */
		/* B's newest chunks are the ones it kept (its own LRU). */
		CHECK_EQ(served(st, &b, &kb[40 - 8], 8, 200 + 40 - 8), 8);
	} else {
		/* The same flood without a reservation takes A's chunks: the
		 * reservation above is what kept them. */
		CHECK_EQ(served(st, &a, ka, 4, 100), 0);
		CHECK_EQ(ua.chunks, 0);
	}
	kvt_store_close(st);
}

/* A quota bounds what a tenant holds: past it the tenant's own oldest go,
 * the other tenant's chunks stay; a lowered quota applies at once. */
static void quota_bounds_tenant(void)
{
	kvt_store *st = open_store(0);
	kvt_ns a = ns_for(st, "a"), b = ns_for(st, "b");
	kvt_key ka[3], kb[10];
	kvt_tenant_usage ub;

	CHECK_EQ(kvt_store_set_quota(st, "b", 0, 3 * CHUNK_BYTES, 0), 0);
	chain(&a, 3, 3, ka);
	chain(&b, 4, 10, kb);
	put_all(st, &a, ka, 3, 300);
	put_all(st, &b, kb, 10, 400);
	ub = usage(st, "b", 0);
	CHECK_EQ(ub.chunks, 3);
	CHECK_EQ(ub.bytes, 3 * CHUNK_BYTES);
	CHECK_EQ(ub.quota, 3 * CHUNK_BYTES);
	CHECK_EQ(ub.quota_evictions, 7);
	CHECK_EQ(served(st, &b, &kb[7], 3, 407), 3);
	CHECK_EQ(served(st, &b, kb, 7, 400), 0);
	CHECK_EQ(served(st, &a, ka, 3, 300), 3);
	CHECK_EQ(usage(st, "a", 0).quota_evictions, 0);

	CHECK_EQ(kvt_store_set_quota(st, "b", 0, 1 * CHUNK_BYTES, 0), 0);
	ub = usage(st, "b", 0);
	CHECK_EQ(ub.chunks, 1);
	CHECK_EQ(served(st, &b, &kb[9], 1, 409), 1);
	CHECK_EQ(served(st, &b, &kb[7], 2, 407), 0);
	CHECK_EQ(usage(st, NULL, 0).chunks, 0); /* the default tenant put nothing */
	kvt_store_close(st);
}

/* A tenant's chunks are charged to it in the disk tier too (the
 * write-through copy inherits the account), and a quota there holds. */
static void charged_below(void)
{
	char cmd[128];
	kvt_store *st;
	kvt_ns a, b;
	kvt_key ka[5], kb[2];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
	st = open_store(1);
	a = ns_for(st, "a");
	b = ns_for(st, "b");
	CHECK_EQ(kvt_store_set_quota(st, "a", 1, 2 * 135168ull, 0), 0);
	chain(&a, 5, 5, ka);
	chain(&b, 6, 2, kb);
	put_all(st, &a, ka, 5, 500);
	put_all(st, &b, kb, 2, 600);
	CHECK_EQ(kvt_store_flush(st, 60000), 0);
	CHECK_EQ(usage(st, "a", 0).chunks, 5);
	CHECK_EQ(usage(st, "a", 1).chunks, 2);   /* its quota on disk */
	CHECK_EQ(usage(st, "a", 1).quota_evictions, 3);
	CHECK_EQ(usage(st, "b", 1).chunks, 2);
	CHECK_EQ(usage(st, NULL, 1).chunks, 0);
	kvt_store_close(st);
}

static void bad_settings(void)
{
	kvt_store *st = open_store(0);
	kvt_tenant_usage u;
	uint64_t cap;

	cap = usage(st, "a", 0).capacity;
	CHECK(cap > 0 && cap <= 2ull << 20);
	CHECK_EQ(kvt_store_set_quota(st, "c", 0, 0, 0), KVT_ETENANT);
	CHECK(strstr(kvt_errmsg(), "\"c\"") != NULL);
	CHECK_EQ(kvt_store_tenant_usage(st, "c", 0, &u), KVT_ETENANT);
	CHECK_EQ(kvt_store_set_quota(st, "a", 1, 0, 0), KVT_EINVAL); /* no tier 1 */
	CHECK_EQ(kvt_store_set_quota(st, "a", 0, CHUNK_BYTES, 2 * CHUNK_BYTES), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "above the quota") != NULL);
	/* Reservations together above the capacity: the second is refused
	 * and the first stays as set. */
	CHECK_EQ(kvt_store_set_quota(st, "a", 0, 0, cap / 2), 0);
	CHECK_EQ(kvt_store_set_quota(st, "b", 0, 0, cap / 2 + 3 * 16384), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "reservations") != NULL);
	CHECK_EQ(usage(st, "b", 0).reserve, 0);
	CHECK_EQ(usage(st, "a", 0).reserve, cap / 2 / 16384 * 16384);
	CHECK_EQ(kvt_store_set_quota(NULL, "a", 0, 0, 0), KVT_EINVAL);
	CHECK_EQ(kvt_store_tenant_usage(st, "a", 0, NULL), KVT_EINVAL);
	kvt_store_close(st);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/kvt_quota_%d", (int)getpid());
	reservation_survives_flood(1);
	reservation_survives_flood(0);
	quota_bounds_tenant();
	charged_below();
	bad_settings();
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd)) {
		}
	}
	TEST_DONE();
}
