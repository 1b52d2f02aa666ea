/*
 * hier_promotion.c — `kvtier-bench hierarchy`, part 1: promotion bandwidth
 * NVMe -> DRAM (kvt_prefetch) against the NVMe tier's own read bandwidth.
 *
 * N distinct chunks (256 bf16 tokens of K and V per rank
 * of Qwen2.5-7B: 14 MiB, and Llama-3.1-8B: 32 MiB; about 1.5 GiB of each,
 * a quarter with --quick, at least 8) are put crash-safe into a store with
 * the disk tier alone, so they are on the NVMe tier and nowhere else.  Then,
 * per round, three measurements over those same files, in an order that
 * rotates round by round:
 *
 *   nvme_read    (the bound) a store with ONLY the NVMe tier (local_cpu
 *                false): kvt_get_async of the N chunks into 16 rotating
 *                caller buffers, 16 outstanding; each get reads and verifies
 *                the chunk.  Exactly `kvtier-bench nvme`'s read.
 *   prefetch_1   (subject) a freshly opened DRAM + NVMe store (DRAM empty:
 *                the arena is new, the NVMe index is rebuilt from the
 *                files): ONE kvt_prefetch op with all N keys.  The store runs
 *                a prefetch op in one worker that walks its chain in order,
 *                reading (and verifying) one chunk at a time: one chunk in
 *                flight.
 *   prefetch_16  (subject) the same, with the N keys cut into 16 contiguous
 *                slices, one kvt_prefetch op each, all submitted at once: 16
 *                chunks in flight, as the bound has.
 *
 * A subject is timed from the first kvt_prefetch call until every op has
 * completed; it then checks (untimed) that each op reports its whole slice
 * in the first tier, that the DRAM tier holds N chunks, and that a chunk
 * read back from DRAM equals what was put.  GB/s = 1e9 payload bytes/s.
 * ratio_vs_nvme_read = subject GB/s / bound GB/s of the same round; the
 * figure is the median of the per-round ratios (target >= 0.8).  Both
 * stores: workers 16, nvme_queue_depth 16, nvme_io_uring true; DRAM
 * max_local_cpu_size = 1.25 x N images (the first tier keeps ~13% headroom; nothing is evicted), 64 KiB
 * pages, prefaulted at open (not timed).  3 rounds (2 with --quick).
 *
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "hier.h"

#define MIN_CHUNKS 8

static const char *const chunk_models[HIER_N_SIZES] = {
	"qwen2.5-7b",  /* 14 MiB */
	"llama3.1-8b", /* 32 MiB */
};

const char *const hier_meas_names[HIER_N_SUBJ] = { "nvme_read", "prefetch_1", "prefetch_16" };
static const int meas_ops[HIER_N_SUBJ] = { 0, 1, HIER_IN_FLIGHT };

/* dram_bytes 0: the disk tier alone (the bound's store and the filler). */
static int promo_open(const char *dir, uint64_t disk_bytes, uint64_t dram_bytes,
		      kvt_store **st)
{
	static const char *const fixed[][2] = {
		{ "nvme_queue_depth", "16" },
		{ "nvme_io_uring", "true" },
		{ "workers", "16" },
		{ "dram_page_size", "64KiB" },
		{ "dram_prefault", "true" },
		{ "dram_eviction", "lru" },
		{ "nvme_write", "through" },
	};
	kvt_config *cfg = kvt_config_new();
	char cap[48];
	int rc;

	if (!cfg)
		return bench_fail(HIER_CMD, "kvt_config_new", KVT_ENOMEM);
	rc = bench_config_set_all(cfg, fixed, sizeof(fixed) / sizeof(fixed[0]));
	if (!rc)
		rc = kvt_config_set(cfg, "local_cpu", dram_bytes ? "true" : "false");
	if (!rc && dram_bytes) {
		hier_size_kib(cap, sizeof(cap), dram_bytes);
		rc = kvt_config_set(cfg, "max_local_cpu_size", cap);
	}
	if (!rc) {
		hier_size_kib(cap, sizeof(cap), disk_bytes);
		rc = kvt_config_set(cfg, "max_local_disk_size", cap);
	}
	if (!rc)
		rc = kvt_config_set(cfg, "local_disk", dir);
	return bench_store_open(HIER_CMD, "kvt_store_open", cfg, rc, 0, st);
}

/* n puts (bufs == NULL) or gets, HIER_IN_FLIGHT outstanding, oldest first. */
static int promo_bound(const char *dir, uint64_t disk, const kvt_ns_desc *d,
		       struct hier_promo *p, int r, const uint8_t *src,
		       uint8_t *const *bufs, uint32_t tag)
{
	kvt_store *st = NULL;
	kvt_ns ns;
	double secs = 0;
	int rc;

	if (promo_open(dir, disk, 0, &st))
		return 1;
	if ((rc = kvt_ns_init(st, d, &ns)) ||
	    (rc = bench_async_run(st, &ns, tag, 'H', 0, p->chunks, NULL, bufs,
					    (size_t)p->chunk_bytes, "kvthier!", &secs))) {
		kvt_store_close(st);
		return bench_fail(HIER_CMD, "kvt_get_async (nvme_read bound)", rc);
	}
	kvt_store_close(st);
	if (memcmp(bufs[(p->chunks - 1) % HIER_IN_FLIGHT], src, (size_t)p->chunk_bytes)) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": a chunk read back differs from the one put\n");
		return 1;
	}
	p->gbps[0][r] = (double)p->chunks * (double)p->chunk_bytes / secs / 1e9;
	return 0;
}

static int promo_subject(const char *dir, uint64_t disk, uint64_t dram,
			 const kvt_ns_desc *d, struct hier_promo *p, int m, int r,
			 const uint8_t *src, uint8_t *buf, uint32_t tag)
{
	int n_ops = meas_ops[m];
	kvt_op *ops[HIER_IN_FLIGHT] = { 0 };
	kvt_key *keys = NULL;
	kvt_store *st = NULL;
	kvt_tier_stats ts;
	kvt_ns ns;
	long n = p->chunks, got = 0;
	double t0, secs;
	int rc, ret = 1;
	size_t len = 0;

	keys = malloc((size_t)n * sizeof(*keys));
	if (!keys)
		return bench_fail(HIER_CMD, "keys", KVT_ENOMEM);
	for (long i = 0; i < n; i++)
		bench_chunk_key(&keys[i], tag, 'H', (uint64_t)i, "kvthier!");
	if (promo_open(dir, disk, dram, &st))
		goto out;
	if ((rc = kvt_ns_init(st, d, &ns))) {
		bench_fail(HIER_CMD, "kvt_ns_init", rc);
		goto out;
	}
	if ((rc = kvt_store_stats(st, 0, &ts)) || ts.chunks != 0) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": the DRAM tier of a fresh store holds "
			"%llu chunks\n", (unsigned long long)ts.chunks);
		goto out;
	}
	t0 = cli_now();
	for (int i = 0; i < n_ops; i++) {
		long lo = n * i / n_ops, hi = n * (i + 1) / n_ops;

		if ((rc = kvt_prefetch(st, &ns, keys + lo, (size_t)(hi - lo), 600000,
				       &ops[i]))) {
			bench_fail(HIER_CMD, "kvt_prefetch", rc);
			for (int j = 0; j < i; j++)
				kvt_op_free(ops[j]);
			goto out;
		}
	}
	for (int i = 0; i < n_ops; i++) {
		rc = kvt_op_wait(ops[i], -1);
		if (rc > 0)
			got += rc;
	}
	secs = cli_now() - t0;
	for (int i = 0; i < n_ops; i++)
		kvt_op_free(ops[i]);
	if (got != n) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": %s: prefetch reports %ld of %ld chunks "
			"in DRAM\n", hier_meas_names[m], got, n);
		goto out;
	}
	if ((rc = kvt_store_stats(st, 0, &ts)) || ts.chunks != (uint64_t)n) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": %s: the DRAM tier holds %llu chunks "
			"after prefetch, %ld expected\n", hier_meas_names[m],
			(unsigned long long)ts.chunks, n);
		goto out;
	}
	if ((rc = kvt_get(st, &ns, &keys[n - 1], buf, (size_t)p->chunk_bytes, &len)) ||
	    len != p->chunk_bytes || memcmp(buf, src, (size_t)p->chunk_bytes)) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": %s: a promoted chunk differs from the "
			"one put (rc %d)\n", hier_meas_names[m], rc);
		goto out;
	}
	p->gbps[m][r] = (double)n * (double)p->chunk_bytes / secs / 1e9;
	ret = 0;
out:
	kvt_store_close(st);
	free(keys);
	return ret;
}

int hier_promotion(struct hier_bench *b)
{
	kvt_ns_desc d[HIER_N_SIZES];
	uint64_t max = 0;
	uint8_t *src = NULL, *bufs[HIER_IN_FLIGHT] = { 0 };
	char dir[1100];
	int ret = 1, rc;

	if (bench_path_join(dir, sizeof(dir), b->base, "promo"))
		return bench_fail(HIER_CMD, "path", KVT_EINVAL);
	for (size_t i = 0; i < HIER_N_SIZES; i++) {
		uint64_t n, room = (uint64_t)((double)b->free_bytes / 1.2);
		long want;

		if (bench_chunk_desc(HIER_CMD, chunk_models[i], &d[i]))
			return 1;
		n = kvt_layout_payload_bytes(&d[i].layout);
		if (n == 0)
			return bench_fail(HIER_CMD, d[i].model, kvt_layout_check(&d[i].layout));
		if (n > max)
			max = n;
		want = (long)((b->quick ? 384ull << 20 : 1536ull << 20) / n);
		if (want < MIN_CHUNKS)
			want = MIN_CHUNKS;
		if ((uint64_t)want * (n + HIER_HEADER_BYTES) > room) {
			want = (long)(room / (n + HIER_HEADER_BYTES));
			b->promo_scaled = 1;
		}
		if (want < MIN_CHUNKS) {
			b->promo_skipped = "not enough free space for 8 chunks of each "
					   "size with 20% to spare";
			return 0;
		}
		b->promo[i] = (struct hier_promo){ .model = d[i].model, .chunk_bytes = n,
					      .chunks = want };
	}
	b->n_promo = (int)HIER_N_SIZES;
	src = bench_buffer((size_t)max);
	for (int i = 0; i < HIER_IN_FLIGHT; i++)
		bufs[i] = bench_buffer((size_t)max);
	if (!src || !bufs[HIER_IN_FLIGHT - 1]) {
		bench_fail(HIER_CMD, "buffers", KVT_ENOMEM);
		goto out;
	}
	bench_fill_random(src, (size_t)max, 0x9e3779b97f4a7c15ull);

	for (size_t i = 0; i < HIER_N_SIZES; i++) {
		struct hier_promo *p = &b->promo[i];
		uint64_t image = p->chunk_bytes + HIER_HEADER_BYTES;
		/* Policies fill 97% of a lower tier: leave room for all N. */
		uint64_t disk = (uint64_t)((double)p->chunks * (double)image * 1.1) + (64u << 20);
		uint64_t dram = (uint64_t)((double)p->chunks * (double)image * 1.25) +
				(2u << 20) * 2;
		uint32_t tag = 0x100u + (uint32_t)i;
		kvt_store *st = NULL;
		kvt_ns ns;
		double secs = 0;

		if (!b->json)
			fprintf(stderr, "kvtier-bench " HIER_CMD ": promotion, %ld x %llu MiB ...\n",
				p->chunks, (unsigned long long)(p->chunk_bytes >> 20));
		if (promo_open(dir, disk, 0, &st))
			goto out;
		if ((rc = kvt_ns_init(st, &d[i], &ns)) ||
		    (rc = bench_async_run(st, &ns, tag, 'H', 0, p->chunks, src, NULL,
					    (size_t)p->chunk_bytes, "kvthier!", &secs))) {
			kvt_store_close(st);
			bench_fail(HIER_CMD, "kvt_put_async (crash-safe fill)", rc);
			goto out;
		}
		kvt_store_close(st);
		for (int r = 0; r < b->rounds; r++) {
			for (int k = 0; k < HIER_N_SUBJ; k++) {
				int m = (k + r) % HIER_N_SUBJ;

				if (m == 0 ? promo_bound(dir, disk, &d[i], p, r, src, bufs, tag)
					   : promo_subject(dir, disk, dram, &d[i], p, m, r, src,
							   bufs[0], tag))
					goto out;
			}
		}
		bench_remove_tree(dir);
	}
	ret = 0;
out:
	free(src);
	for (int i = 0; i < HIER_IN_FLIGHT; i++)
		free(bufs[i]);
	bench_remove_tree(dir);
	return ret;
}

struct summary hier_promo_ratio(const struct hier_promo *p, int m, int rounds)
{
	double v[HIER_MAX_ROUNDS];

	for (int r = 0; r < rounds; r++)
		v[r] = p->gbps[m][r] / p->gbps[0][r];
	return bench_summarize(v, rounds);
}

