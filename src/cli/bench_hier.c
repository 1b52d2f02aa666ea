/*
 * bench_hier.c — `kvtier bench hierarchy`: the DRAM + NVMe hierarchy as a
 * whole: promotion bandwidth NVMe -> DRAM against the NVMe tier's own read
 * bandwidth, and the shared production trace replayed through a real
 * two-tier store, per eviction/admission policy.
 *
 * PART 1, PROMOTION.  N distinct chunks (256 bf16 tokens of K and V per rank
 * of Qwen2.5-7B: 14 MiB, and Llama-3.1-8B: 32 MiB; about 1.5 GiB of each,
 * a quarter with --quick, at least 8) are put crash-safe into a store with
 * the disk tier alone, so they are on the NVMe tier and nowhere else.  Then,
 * per round, three measurements over those same files, in an order that
 * rotates round by round:
 *
 *   nvme_read    (the bound) a store with ONLY the NVMe tier (local_cpu
 *                false): kvt_get_async of the N chunks into 16 rotating
 *                caller buffers, 16 outstanding; each get reads and verifies
 *                the chunk.  Exactly `kvtier bench nvme`'s read.
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
 * PART 2, TRACE REPLAY.  tests/data/traces/conversation_trace.jsonl (found via
 * --trace, $KVT_SRC/tests/data/traces, from the executable in a build tree of
 * the repository, or from this source file) is replayed through a real DRAM + NVMe store whose chunks are
 * scaled down: one chunk per 512-token block, 64 KiB of payload (1 layer x 1
 * KV head x 32 dims x 512 tokens x K and V, f16; a 68 KiB image with its
 * header).  Block ids map to keys deterministically (splitmix64 of the
 * trace's dense id in the first 8 bytes, which the hierarchy's policies use
 * as the object id).  Per request, in one thread:
 *   1. kvt_lookup of the whole chain: the prefix hit, and the tier each hit
 *      block was found in;
 *   2. every block in prompt order: kvt_get (a DRAM hit refreshes it; an
 *      NVMe hit is promoted to DRAM asynchronously) and, if missing, kvt_put
 *      of its bytes at the cached durability (DRAM now; NVMe by
 *      write-through in the background, through NVMe's admission filter).
 * Capacities: DRAM 2,000 blocks, NVMe 20,000 blocks (the stores are sized
 * so that the share their policies fill, 97% of a tier, holds that many
 * 68 KiB images; DRAM pages are 4 KiB so an image takes no more than its
 * size).  Policies: DRAM eviction lru | s3fifo x NVMe admission always |
 * seen:2, NVMe written through; and two write-back variants (NVMe takes
 * DRAM's victims by demotion, not every put).  --quick: the first 3,000
 * requests.
 *
 * Figures per tier: block-weighted hit ratio (prefix blocks found in that
 * tier / all blocks), bytes read from and written to the tier, promotions,
 * demotions, admission rejects, policy evictions (kvt_store_stats), and the
 * wall time of the request loop.  After the loop the store is left to settle
 * (stats polled until nothing moves for 200 ms, at most 30 s) before the
 * counters are read.  Promotion and write-through are asynchronous: these
 * are figures of an asynchronous hierarchy, not the deterministic planner,
 * and they may differ slightly from run to run.  For the write-through
 * configurations the deterministic reference (policy/replay.h, inclusive
 * mode, same policies and capacities) is printed alongside.
 *
 * A benchmark reports; it does not fail: a figure below its target is
 * printed as such and the exit code stays 0.  1 means something went wrong,
 * 2 a usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "plan/trace.h"
#include "policy/replay.h"

#define CMD "bench hierarchy"
#define MAX_ROUNDS 3
#define IN_FLIGHT 16
#define HEADER_BYTES 4096u
#define TARGET_VS_NVME 0.8
#define MIN_CHUNKS 8
#define N_SUBJ 3 /* bound + two subjects */

static const char *const chunk_models[] = {
	"qwen2.5-7b",  /* 14 MiB */
	"llama3.1-8b", /* 32 MiB */
};
#define N_SIZES (sizeof(chunk_models) / sizeof(chunk_models[0]))

static const char *const meas_names[N_SUBJ] = { "nvme_read", "prefetch_1", "prefetch_16" };
static const int meas_ops[N_SUBJ] = { 0, 1, IN_FLIGHT };

struct promo {
	const char *model;
	uint64_t chunk_bytes;
	long chunks;
	double gbps[N_SUBJ][MAX_ROUNDS];
};

/* Trace replay ------------------------------------------------------------ */

#define TR_PAYLOAD (64u << 10)
#define TR_IMAGE (TR_PAYLOAD + HEADER_BYTES)
#define TR_DRAM_BLOCKS 2000
#define TR_NVME_BLOCKS 20000
#define TR_QUICK_REQ 3000

struct tr_conf {
	const char *evict;  /* dram_eviction */
	const char *admit;  /* nvme_admission */
	const char *write;  /* nvme_write */
	int ev_kind;        /* enum kvt_evict_kind */
	int seen;           /* 0: always */
};

static const struct tr_conf tr_confs[] = {
	{ "lru", "always", "through", KVT_EVICT_LRU, 0 },
	{ "lru", "seen:2", "through", KVT_EVICT_LRU, 2 },
	{ "s3fifo", "always", "through", KVT_EVICT_S3FIFO, 0 },
	{ "s3fifo", "seen:2", "through", KVT_EVICT_S3FIFO, 2 },
	{ "lru", "always", "back", KVT_EVICT_LRU, 0 },
	{ "s3fifo", "seen:2", "back", KVT_EVICT_S3FIFO, 2 },
};
#define N_TR (sizeof(tr_confs) / sizeof(tr_confs[0]))

struct tr_result {
	uint64_t blocks, hit_blocks, hit_tier[2];
	uint64_t gets_ok, gets_nonprefix, puts_ok, puts_exist, puts_fail;
	uint64_t lookup_vs_get_mismatch; /* prefix hit whose get missed */
	uint64_t cap_blocks[2];          /* policy capacity in blocks */
	kvt_tier_stats ts[2];
	double wall_s, settle_s;
	int settled;
	int has_ref;
	struct kvt_replay_result ref;
};

struct bench {
	int json, quick, rounds;
	char base[1024];
	int base_made;
	uint64_t free_bytes;

	struct promo promo[N_SIZES];
	int n_promo;
	int promo_scaled;
	const char *promo_skipped;

	char trace[4096];
	const char *trace_skipped;
	uint64_t tr_nreq, tr_blocks, tr_ids;
	struct tr_result tr[N_TR];
	int n_tr;
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static int free_space(struct bench *b)
{
	struct statvfs sv;

	if (statvfs(b->base, &sv)) {
		fprintf(stderr, "kvtier " CMD ": %s: %s\n", b->base, strerror(errno));
		return 1;
	}
	b->free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

/* A key whose first 8 bytes (the hierarchy's policy id) are well mixed. */
static int cfg_set_all(kvt_config *cfg, const char *const kv[][2], size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++)
		rc = kvt_config_set(cfg, kv[i][0], kv[i][1]);
	return rc;
}

/* `bytes` as "<n>KiB", rounded up to 4 KiB. */
static void size_kib(char *out, size_t cap, uint64_t bytes)
{
	snprintf(out, cap, "%lluKiB", (unsigned long long)(((bytes + 4095) >> 12) << 2));
}

/* ------------------------------------------------------------------------ */
/* Part 1: promotion                                                         */
/* ------------------------------------------------------------------------ */

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
		return cli_fail(CMD, "kvt_config_new", KVT_ENOMEM);
	rc = cfg_set_all(cfg, fixed, sizeof(fixed) / sizeof(fixed[0]));
	if (!rc)
		rc = kvt_config_set(cfg, "local_cpu", dram_bytes ? "true" : "false");
	if (!rc && dram_bytes) {
		size_kib(cap, sizeof(cap), dram_bytes);
		rc = kvt_config_set(cfg, "max_local_cpu_size", cap);
	}
	if (!rc) {
		size_kib(cap, sizeof(cap), disk_bytes);
		rc = kvt_config_set(cfg, "max_local_disk_size", cap);
	}
	if (!rc)
		rc = kvt_config_set(cfg, "local_disk", dir);
	if (rc) {
		kvt_config_free(cfg);
		return cli_fail(CMD, "configuration", rc);
	}
	*st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!*st)
		return cli_fail(CMD, "kvt_store_open", rc ? rc : KVT_ENOMEM);
	return 0;
}

/* n puts (bufs == NULL) or gets, IN_FLIGHT outstanding, oldest first. */
static int promo_bound(const char *dir, uint64_t disk, const kvt_ns_desc *d,
		       struct promo *p, int r, const uint8_t *src,
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
		return cli_fail(CMD, "kvt_get_async (nvme_read bound)", rc);
	}
	kvt_store_close(st);
	if (memcmp(bufs[(p->chunks - 1) % IN_FLIGHT], src, (size_t)p->chunk_bytes)) {
		fprintf(stderr, "kvtier " CMD ": a chunk read back differs from the one put\n");
		return 1;
	}
	p->gbps[0][r] = (double)p->chunks * (double)p->chunk_bytes / secs / 1e9;
	return 0;
}

static int promo_subject(const char *dir, uint64_t disk, uint64_t dram,
			 const kvt_ns_desc *d, struct promo *p, int m, int r,
			 const uint8_t *src, uint8_t *buf, uint32_t tag)
{
	int n_ops = meas_ops[m];
	kvt_op *ops[IN_FLIGHT] = { 0 };
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
		return cli_fail(CMD, "keys", KVT_ENOMEM);
	for (long i = 0; i < n; i++)
		bench_chunk_key(&keys[i], tag, 'H', (uint64_t)i, "kvthier!");
	if (promo_open(dir, disk, dram, &st))
		goto out;
	if ((rc = kvt_ns_init(st, d, &ns))) {
		cli_fail(CMD, "kvt_ns_init", rc);
		goto out;
	}
	if ((rc = kvt_store_stats(st, 0, &ts)) || ts.chunks != 0) {
		fprintf(stderr, "kvtier " CMD ": the DRAM tier of a fresh store holds "
			"%llu chunks\n", (unsigned long long)ts.chunks);
		goto out;
	}
	t0 = cli_now();
	for (int i = 0; i < n_ops; i++) {
		long lo = n * i / n_ops, hi = n * (i + 1) / n_ops;

		if ((rc = kvt_prefetch(st, &ns, keys + lo, (size_t)(hi - lo), 600000,
				       &ops[i]))) {
			cli_fail(CMD, "kvt_prefetch", rc);
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
		fprintf(stderr, "kvtier " CMD ": %s: prefetch reports %ld of %ld chunks "
			"in DRAM\n", meas_names[m], got, n);
		goto out;
	}
	if ((rc = kvt_store_stats(st, 0, &ts)) || ts.chunks != (uint64_t)n) {
		fprintf(stderr, "kvtier " CMD ": %s: the DRAM tier holds %llu chunks "
			"after prefetch, %ld expected\n", meas_names[m],
			(unsigned long long)ts.chunks, n);
		goto out;
	}
	if ((rc = kvt_get(st, &ns, &keys[n - 1], buf, (size_t)p->chunk_bytes, &len)) ||
	    len != p->chunk_bytes || memcmp(buf, src, (size_t)p->chunk_bytes)) {
		fprintf(stderr, "kvtier " CMD ": %s: a promoted chunk differs from the "
			"one put (rc %d)\n", meas_names[m], rc);
		goto out;
	}
	p->gbps[m][r] = (double)n * (double)p->chunk_bytes / secs / 1e9;
	ret = 0;
out:
	kvt_store_close(st);
	free(keys);
	return ret;
}

static int bench_promotion(struct bench *b)
{
	kvt_ns_desc d[N_SIZES];
	uint64_t max = 0;
	uint8_t *src = NULL, *bufs[IN_FLIGHT] = { 0 };
	char dir[1100];
	int ret = 1, rc;

	if (bench_path_join(dir, sizeof(dir), b->base, "promo"))
		return cli_fail(CMD, "path", KVT_EINVAL);
	for (size_t i = 0; i < N_SIZES; i++) {
		uint64_t n, room = (uint64_t)((double)b->free_bytes / 1.2);
		long want;

		if (bench_chunk_desc(CMD, chunk_models[i], &d[i]))
			return 1;
		n = kvt_layout_payload_bytes(&d[i].layout);
		if (n == 0)
			return cli_fail(CMD, d[i].model, kvt_layout_check(&d[i].layout));
		if (n > max)
			max = n;
		want = (long)((b->quick ? 384ull << 20 : 1536ull << 20) / n);
		if (want < MIN_CHUNKS)
			want = MIN_CHUNKS;
		if ((uint64_t)want * (n + HEADER_BYTES) > room) {
			want = (long)(room / (n + HEADER_BYTES));
			b->promo_scaled = 1;
		}
		if (want < MIN_CHUNKS) {
			b->promo_skipped = "not enough free space for 8 chunks of each "
					   "size with 20% to spare";
			return 0;
		}
		b->promo[i] = (struct promo){ .model = d[i].model, .chunk_bytes = n,
					      .chunks = want };
	}
	b->n_promo = (int)N_SIZES;
	src = bench_buffer((size_t)max);
	for (int i = 0; i < IN_FLIGHT; i++)
		bufs[i] = bench_buffer((size_t)max);
	if (!src || !bufs[IN_FLIGHT - 1]) {
		cli_fail(CMD, "buffers", KVT_ENOMEM);
		goto out;
	}
	bench_fill_random(src, (size_t)max, 0x9e3779b97f4a7c15ull);

	for (size_t i = 0; i < N_SIZES; i++) {
		struct promo *p = &b->promo[i];
		uint64_t image = p->chunk_bytes + HEADER_BYTES;
		/* Policies fill 97% of a lower tier: leave room for all N. */
		uint64_t disk = (uint64_t)((double)p->chunks * (double)image * 1.1) + (64u << 20);
		uint64_t dram = (uint64_t)((double)p->chunks * (double)image * 1.25) +
				(2u << 20) * 2;
		uint32_t tag = 0x100u + (uint32_t)i;
		kvt_store *st = NULL;
		kvt_ns ns;
		double secs = 0;

		if (!b->json)
			fprintf(stderr, "kvtier " CMD ": promotion, %ld x %llu MiB ...\n",
				p->chunks, (unsigned long long)(p->chunk_bytes >> 20));
		if (promo_open(dir, disk, 0, &st))
			goto out;
		if ((rc = kvt_ns_init(st, &d[i], &ns)) ||
		    (rc = bench_async_run(st, &ns, tag, 'H', 0, p->chunks, src, NULL,
					    (size_t)p->chunk_bytes, "kvthier!", &secs))) {
			kvt_store_close(st);
			cli_fail(CMD, "kvt_put_async (crash-safe fill)", rc);
			goto out;
		}
		kvt_store_close(st);
		for (int r = 0; r < b->rounds; r++) {
			for (int k = 0; k < N_SUBJ; k++) {
				int m = (k + r) % N_SUBJ;

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
	for (int i = 0; i < IN_FLIGHT; i++)
		free(bufs[i]);
	bench_remove_tree(dir);
	return ret;
}

static struct summary promo_ratio(const struct promo *p, int m, int rounds)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < rounds; r++)
		v[r] = p->gbps[m][r] / p->gbps[0][r];
	return bench_summarize(v, rounds);
}

/* ------------------------------------------------------------------------ */
/* Part 2: trace replay                                                      */
/* ------------------------------------------------------------------------ */

static int find_trace(struct bench *b, const char *opt)
{
	const char *rel = "tests/data/traces/conversation_trace.jsonl";
	char cand[4][4096];
	int nc = 0;

	if (opt) {
		snprintf(b->trace, sizeof(b->trace), "%s", opt);
		return access(b->trace, R_OK) == 0;
	}
	if (getenv("KVT_SRC") && *getenv("KVT_SRC"))
		snprintf(cand[nc++], sizeof(cand[0]), "%s/%s", getenv("KVT_SRC"), rel);
	{
		char exe[2048];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		if (n > 0) {
			char *s;

			exe[n] = '\0';
			if ((s = strrchr(exe, '/')))
				*s = '\0';
			snprintf(cand[nc++], sizeof(cand[0]), "%s/../../%s", exe, rel);
			snprintf(cand[nc++], sizeof(cand[0]), "%s/../%s", exe, rel);
		}
	}
	{
		/* <src>/src/cli/bench_hier.c -> <src>/tests/data/traces */
		char f[2048];
		char *s;

		snprintf(f, sizeof(f), "%s", __FILE__);
		for (int up = 0; up < 3 && (s = strrchr(f, '/')); up++)
			*s = '\0';
		if (f[0] == '/')
			snprintf(cand[nc++], sizeof(cand[0]), "%s/%s", f, rel);
	}
	for (int i = 0; i < nc; i++)
		if (access(cand[i], R_OK) == 0) {
			char *rp = realpath(cand[i], NULL);
			snprintf(b->trace, sizeof(b->trace), "%s", rp ? rp : cand[i]);
			free(rp);
			return 1;
		}
	snprintf(b->trace, sizeof(b->trace), "%s", nc ? cand[0] : rel);
	return 0;
}

static int tr_open(const char *dir, const struct tr_conf *c, kvt_store **st)
{
	static const char *const fixed[][2] = {
		{ "local_cpu", "true" },
		{ "dram_page_size", "4KiB" },
		{ "dram_prefault", "true" },
		{ "dram_write", "through" },
		{ "dram_admission", "always" },
		{ "nvme_eviction", "lru" },
		{ "nvme_queue_depth", "16" },
		{ "nvme_io_uring", "true" },
		{ "workers", "4" },
	};
	kvt_config *cfg = kvt_config_new();
	char cap[48];
	int rc;

	if (!cfg)
		return cli_fail(CMD, "kvt_config_new", KVT_ENOMEM);
	rc = cfg_set_all(cfg, fixed, sizeof(fixed) / sizeof(fixed[0]));
	/* The policies fill 97% of a tier: size it so that share holds the
	 * wanted number of images. */
	if (!rc) {
		size_kib(cap, sizeof(cap),
			 ((uint64_t)TR_DRAM_BLOCKS * TR_IMAGE * 100 + 96) / 97 + 8192);
		rc = kvt_config_set(cfg, "max_local_cpu_size", cap);
	}
	if (!rc) {
		size_kib(cap, sizeof(cap),
			 ((uint64_t)TR_NVME_BLOCKS * TR_IMAGE * 100 + 96) / 97 + 8192);
		rc = kvt_config_set(cfg, "max_local_disk_size", cap);
	}
	if (!rc)
		rc = kvt_config_set(cfg, "local_disk", dir);
	if (!rc)
		rc = kvt_config_set(cfg, "dram_eviction", c->evict);
	if (!rc)
		rc = kvt_config_set(cfg, "nvme_admission", c->admit);
	if (!rc)
		rc = kvt_config_set(cfg, "nvme_write", c->write);
	if (rc) {
		kvt_config_free(cfg);
		return cli_fail(CMD, "configuration", rc);
	}
	*st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!*st)
		return cli_fail(CMD, "kvt_store_open (replay)", rc ? rc : KVT_ENOMEM);
	return 0;
}

/* What the hierarchy's policy of a tier holds, in 68 KiB images (mirrors
 * store.c: 97% of the tier's capacity, in rounds of the DRAM page / 4 KiB). */
static uint64_t policy_blocks(uint64_t capacity_bytes, uint64_t round)
{
	uint64_t units = capacity_bytes / 100 * 97 / round;
	return units / ((TR_IMAGE + round - 1) / round);
}

static int stats_both(kvt_store *st, kvt_tier_stats ts[2])
{
	int rc = kvt_store_stats(st, 0, &ts[0]);
	return rc ? rc : kvt_store_stats(st, 1, &ts[1]);
}

static int moving(const kvt_tier_stats *a, const kvt_tier_stats *b)
{
	for (int i = 0; i < 2; i++)
		if (a[i].bytes_in != b[i].bytes_in || a[i].bytes_out != b[i].bytes_out ||
		    a[i].promotions != b[i].promotions || a[i].demotions != b[i].demotions ||
		    a[i].chunks != b[i].chunks || a[i].evictions != b[i].evictions)
			return 1;
	return 0;
}

static int tr_run(struct bench *b, const struct plan_trace *pt, const char *dir,
		  const struct tr_conf *c, struct tr_result *res)
{
	kvt_ns_desc d = {
		.model = "kvtier/bench-hierarchy",
		.layout = { .num_layers = 1, .num_kv_heads = 1, .head_dim = 32,
			    .dtype = KVT_DTYPE_F16, .kv_planes = 2, .block_size = 16,
			    .chunk_tokens = 512 },
		.tp_size = 1,
		.pp_size = 1,
		.hash_scheme = KVT_HASH_SHA256,
	};
	const struct kvt_trace *t = &pt->t;
	uint64_t maxn = 0;
	uint8_t *payload = NULL, *buf = NULL, *where = NULL;
	kvt_key *keys = NULL;
	kvt_store *st = NULL;
	kvt_ns ns;
	kvt_tier_stats prev[2], now[2];
	double t0;
	int rc, ret = 1;

	(void)b;
	memset(res, 0, sizeof(*res));
	for (uint64_t r = 0; r < t->nreq; r++)
		if (t->off[r + 1] - t->off[r] > maxn)
			maxn = t->off[r + 1] - t->off[r];
	payload = malloc(TR_PAYLOAD);
	buf = malloc(TR_PAYLOAD);
	keys = malloc((maxn ? maxn : 1) * sizeof(*keys));
	where = malloc(maxn ? maxn : 1);
	if (!payload || !buf || !keys || !where) {
		cli_fail(CMD, "replay buffers", KVT_ENOMEM);
		goto out;
	}
	bench_fill_random(payload, TR_PAYLOAD, 0x2545f4914f6cdd1dull);
	bench_remove_tree(dir);
	if (tr_open(dir, c, &st))
		goto out;
	if ((rc = kvt_ns_init(st, &d, &ns))) {
		cli_fail(CMD, "replay namespace", rc);
		goto out;
	}
	if (kvt_layout_payload_bytes(&ns.layout) != TR_PAYLOAD) {
		fprintf(stderr, "kvtier " CMD ": replay layout is not 64 KiB\n");
		goto out;
	}
	if ((rc = stats_both(st, now))) {
		cli_fail(CMD, "kvt_store_stats", rc);
		goto out;
	}
	res->cap_blocks[0] = policy_blocks(now[0].capacity_bytes, 4096);
	res->cap_blocks[1] = policy_blocks(now[1].capacity_bytes, 4096);

	t0 = cli_now();
	for (uint64_t r = 0; r < t->nreq; r++) {
		uint64_t n = t->off[r + 1] - t->off[r];
		const uint32_t *ids = t->ids + t->off[r];
		kvt_lookup_result lr = { .n_hit = 0, .tier = where };

		for (uint64_t i = 0; i < n; i++)
			bench_chunk_key(&keys[i], 0x48494552u /* "HIER" */, 'H', ids[i], "kvthier!");
		rc = kvt_lookup(st, &ns, keys, (size_t)n, &lr);
		if (rc < 0) {
			cli_fail(CMD, "kvt_lookup", rc);
			goto out;
		}
		res->blocks += n;
		res->hit_blocks += lr.n_hit;
		for (uint32_t i = 0; i < lr.n_hit; i++)
			res->hit_tier[where[i] ? 1 : 0]++;
		for (uint64_t i = 0; i < n; i++) {
			size_t len = 0;

			rc = kvt_get(st, &ns, &keys[i], buf, TR_PAYLOAD, &len);
			if (rc == 0) {
				res->gets_ok++;
				if (i >= lr.n_hit)
					res->gets_nonprefix++;
				continue;
			}
			if (rc != KVT_ENOTFOUND) {
				cli_fail(CMD, "kvt_get (replay)", rc);
				goto out;
			}
			if (i < lr.n_hit)
				res->lookup_vs_get_mismatch++;
			rc = kvt_put(st, &ns, &keys[i], payload, TR_PAYLOAD, KVT_DUR_CACHED);
			if (rc == 0)
				res->puts_ok++;
			else if (rc == KVT_EEXIST)
				res->puts_exist++;
			else if (rc == KVT_EFULL)
				res->puts_fail++;
			else {
				cli_fail(CMD, "kvt_put (replay)", rc);
				goto out;
			}
		}
	}
	res->wall_s = cli_now() - t0;

	/* Let background promotions, write-through and demotions finish. */
	t0 = cli_now();
	if ((rc = stats_both(st, prev))) {
		cli_fail(CMD, "kvt_store_stats", rc);
		goto out;
	}
	for (;;) {
		struct timespec ts = { 0, 200 * 1000000L };

		nanosleep(&ts, NULL);
		if ((rc = stats_both(st, now))) {
			cli_fail(CMD, "kvt_store_stats", rc);
			goto out;
		}
		if (!moving(prev, now)) {
			res->settled = 1;
			break;
		}
		if (cli_now() - t0 > 30)
			break;
		memcpy(prev, now, sizeof(prev));
	}
	res->settle_s = cli_now() - t0;
	memcpy(res->ts, now, sizeof(now));

	/* The deterministic reference, inclusive (write-through) only. */
	if (!strcmp(c->write, "through")) {
		struct kvt_replay_conf rcf;

		memset(&rcf, 0, sizeof(rcf));
		rcf.ntiers = 2;
		rcf.mode = KVT_REPLAY_INCLUSIVE;
		rcf.tier[0].kind = (enum kvt_evict_kind)c->ev_kind;
		rcf.tier[0].capacity = res->cap_blocks[0];
		rcf.tier[1].kind = KVT_EVICT_LRU;
		rcf.tier[1].capacity = res->cap_blocks[1];
		if (c->seen) {
			rcf.tier[1].admit.rules = 1u << 1; /* as config.c's seen:N */
			rcf.tier[1].admit.seen_n = (uint32_t)c->seen;
			rcf.tier[1].admit.doorkeeper = 1;
		}
		if ((rc = kvt_replay_run(t, &rcf, &res->ref)) == 0)
			res->has_ref = 1;
		else
			fprintf(stderr, "kvtier " CMD ": reference replay: %s\n",
				kvt_strerror(rc));
	}
	ret = 0;
out:
	kvt_store_close(st);
	bench_remove_tree(dir);
	free(payload);
	free(buf);
	free(keys);
	free(where);
	return ret;
}

static int bench_trace(struct bench *b, const char *trace_opt)
{
	struct plan_trace pt;
	uint8_t *buf = NULL;
	size_t len = 0;
	char dir[1100];
	uint64_t need = ((uint64_t)TR_NVME_BLOCKS * TR_IMAGE) * 12 / 10 + (256u << 20);
	int rc;

	if (!find_trace(b, trace_opt)) {
		b->trace_skipped = "trace not found (set --trace PATH or KVT_SRC)";
		if (!b->json)
			fprintf(stderr, "kvtier " CMD ": %s not found: skipping the trace "
				"replay (--trace PATH or KVT_SRC=<source dir>)\n", b->trace);
		return 0;
	}
	if (free_space(b))
		return 1;
	if (b->free_bytes < need) {
		b->trace_skipped = "not enough free space for the NVMe tier of the replay";
		return 0;
	}
	if (cli_read_file(b->trace, &buf, &len))
		return cli_fail(CMD, b->trace, -errno);
	memset(&pt, 0, sizeof(pt));
	rc = plan_trace_parse((const char *)buf, len, PLAN_FMT_MOONCAKE, 0,
			      b->quick ? TR_QUICK_REQ : 0, &pt);
	free(buf);
	if (rc)
		return cli_fail(CMD, "trace parse", rc);
	b->tr_nreq = pt.t.nreq;
	b->tr_blocks = pt.t.nblocks;
	b->tr_ids = pt.t.nids;
	if (bench_path_join(dir, sizeof(dir), b->base, "replay")) {
		plan_trace_free(&pt);
		return cli_fail(CMD, "path", KVT_EINVAL);
	}
	for (size_t i = 0; i < N_TR; i++) {
		if (!b->json)
			fprintf(stderr, "kvtier " CMD ": replay %zu/%zu: dram %s, nvme %s, "
				"nvme write %s ...\n", i + 1, N_TR, tr_confs[i].evict,
				tr_confs[i].admit, tr_confs[i].write);
		if (tr_run(b, &pt, dir, &tr_confs[i], &b->tr[i])) {
			plan_trace_free(&pt);
			return 1;
		}
		b->n_tr++;
	}
	plan_trace_free(&pt);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Reports                                                                   */
/* ------------------------------------------------------------------------ */

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void print_table(const struct bench *b)
{
	char buf[64];

	printf("kvtier bench hierarchy: %d rounds; each figure is the median [min..max]\n"
	       "over rounds, each ratio the median of the per-round ratios (bound and\n"
	       "subjects rotate within a round).  GB/s = 1e9 payload bytes/s.\n"
	       "Directory: %s, %s free.\n",
	       b->rounds, b->base, kvt_fmt_size(b->free_bytes, buf, sizeof(buf)));

	printf("\npromotion NVMe -> DRAM (kvt_prefetch) vs the NVMe tier's own read\n"
	       "(NVMe-only store, kvt_get_async + verify, 16 outstanding); workers 16\n");
	if (b->promo_skipped) {
		printf("  skipped: %s\n", b->promo_skipped);
	} else {
		if (b->promo_scaled)
			printf("  (chunk counts scaled down to fit the free space)\n");
		printf("  %-7s %-7s %-12s %-24s %-9s %-8s\n", "chunk", "count", "measure",
		       "GB/s", "ratio", "target");
		for (int i = 0; i < b->n_promo; i++) {
			const struct promo *p = &b->promo[i];

			for (int m = 0; m < N_SUBJ; m++) {
				char c0[32], c1[32], s[64], rt[24];
				struct summary r = promo_ratio(p, m, b->rounds);

				snprintf(c0, sizeof(c0), "%lluMiB",
					 (unsigned long long)(p->chunk_bytes >> 20));
				snprintf(c1, sizeof(c1), "%ld", p->chunks);
				bench_fmt_summary(bench_summarize(p->gbps[m], b->rounds), s,
						  sizeof(s));
				if (m == 0)
					snprintf(rt, sizeof(rt), "(bound)");
				else
					snprintf(rt, sizeof(rt), "%.3fx", r.median);
				printf("  %-7s %-7s %-12s %-24s %-9s %s\n", c0, c1, meas_names[m],
				       s, rt,
				       m == 0 ? "" : r.median >= TARGET_VS_NVME ? ">=0.80x PASS"
										: ">=0.80x BELOW");
			}
		}
		printf("  prefetch_1: one op with all keys (the store walks a prefetch\n"
		       "  chain one chunk at a time in one worker); prefetch_16: 16 ops\n"
		       "  of contiguous slices submitted together.\n");
	}

	printf("\ntrace replay through DRAM + NVMe, 64 KiB chunk per 512-token block\n");
	if (b->trace_skipped) {
		printf("  skipped: %s (%s)\n", b->trace_skipped, b->trace);
		return;
	}
	printf("  trace %s: %llu requests, %llu blocks, %llu distinct%s\n", b->trace,
	       (unsigned long long)b->tr_nreq, (unsigned long long)b->tr_blocks,
	       (unsigned long long)b->tr_ids, b->quick ? " (--quick: first 3000)" : "");
	printf("  capacities (what the policies hold): DRAM %llu blocks, NVMe %llu "
	       "blocks\n",
	       (unsigned long long)(b->n_tr ? b->tr[0].cap_blocks[0] : 0),
	       (unsigned long long)(b->n_tr ? b->tr[0].cap_blocks[1] : 0));
	printf("  Asynchronous hierarchy (promotion and write-through run in the\n"
	       "  background): not the deterministic planner; figures may differ\n"
	       "  slightly from run to run.  ref = policy/replay.h, inclusive.\n");
	printf("  %-6s %-6s %-7s %-7s %-7s %-7s %-13s %-13s %-7s\n", "dram", "nvme",
	       "write", "hit", "dram", "nvme", "ref hit", "ref dram/nvme", "wall s");
	for (int i = 0; i < b->n_tr; i++) {
		const struct tr_result *r = &b->tr[i];
		char rh[24] = "-", rd[32] = "-";

		if (r->has_ref) {
			snprintf(rh, sizeof(rh), "%.4f", ratio(r->ref.hit_blocks, r->ref.blocks));
			snprintf(rd, sizeof(rd), "%.4f/%.4f",
				 ratio(r->ref.hit_tier[0], r->ref.blocks),
				 ratio(r->ref.hit_tier[1], r->ref.blocks));
		}
		printf("  %-6s %-6s %-7s %-7.4f %-7.4f %-7.4f %-13s %-13s %.2f\n",
		       tr_confs[i].evict, tr_confs[i].admit, tr_confs[i].write,
		       ratio(r->hit_blocks, r->blocks), ratio(r->hit_tier[0], r->blocks),
		       ratio(r->hit_tier[1], r->blocks), rh, rd, r->wall_s);
	}
	printf("\n  bytes moved (GiB; read = bytes_out, written = bytes_in) and counters\n");
	printf("  %-6s %-6s %-7s %-8s %-8s %-8s %-8s %-8s %-8s %-8s %-8s %-8s\n", "dram",
	       "nvme", "write", "dram rd", "dram wr", "nvme rd", "nvme wr", "promot",
	       "demot", "adm rej", "dram ev", "nvme ev");
	for (int i = 0; i < b->n_tr; i++) {
		const struct tr_result *r = &b->tr[i];
		const double g = 1024.0 * 1024 * 1024;

		printf("  %-6s %-6s %-7s %-8.2f %-8.2f %-8.2f %-8.2f %-8llu %-8llu %-8llu "
		       "%-8llu %-8llu\n",
		       tr_confs[i].evict, tr_confs[i].admit, tr_confs[i].write,
		       (double)r->ts[0].bytes_out / g, (double)r->ts[0].bytes_in / g,
		       (double)r->ts[1].bytes_out / g, (double)r->ts[1].bytes_in / g,
		       (unsigned long long)r->ts[1].promotions,
		       (unsigned long long)r->ts[1].demotions,
		       (unsigned long long)r->ts[1].admit_rejects,
		       (unsigned long long)r->ts[0].policy_evictions,
		       (unsigned long long)r->ts[1].policy_evictions);
	}
	printf("  (promot = chunks copied NVMe -> DRAM; demot = DRAM victims NVMe took;\n"
	       "  adm rej = NVMe admission refusals; ev = policy evictions)\n");
	for (int i = 0; i < b->n_tr; i++) {
		const struct tr_result *r = &b->tr[i];

		if (r->lookup_vs_get_mismatch || r->puts_fail || !r->settled)
			printf("  note %s/%s/%s: %llu prefix hits missed by the get that "
			       "followed, %llu puts refused (full)%s\n",
			       tr_confs[i].evict, tr_confs[i].admit, tr_confs[i].write,
			       (unsigned long long)r->lookup_vs_get_mismatch,
			       (unsigned long long)r->puts_fail,
			       r->settled ? "" : ", still moving after 30 s");
	}
}

static void json_str(const char *name, const char *p)
{
	printf("\"%s\":\"", name);
	for (; *p; p++)
		putchar((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' ? '_' : *p);
	putchar('"');
}

static void json_tier(const char *name, const kvt_tier_stats *t, uint64_t hits,
		      uint64_t blocks, uint64_t cap_blocks)
{
	printf("\"%s\":{\"hit_blocks\":%llu,\"hit_ratio\":%.6g,\"capacity_blocks\":%llu,"
	       "\"capacity_bytes\":%llu,\"chunks_end\":%llu,\"bytes_read\":%llu,"
	       "\"bytes_written\":%llu,\"gets_hit\":%llu,\"gets_miss\":%llu,\"puts\":%llu,"
	       "\"put_exists\":%llu,\"put_rejects\":%llu,\"evictions\":%llu,"
	       "\"policy_evictions\":%llu,\"promotions\":%llu,\"demotions\":%llu,"
	       "\"admit_rejects\":%llu,\"write_errors\":%llu}",
	       name, (unsigned long long)hits, ratio(hits, blocks),
	       (unsigned long long)cap_blocks, (unsigned long long)t->capacity_bytes,
	       (unsigned long long)t->chunks, (unsigned long long)t->bytes_out,
	       (unsigned long long)t->bytes_in, (unsigned long long)t->hits,
	       (unsigned long long)t->misses, (unsigned long long)t->puts,
	       (unsigned long long)t->put_exists, (unsigned long long)t->put_rejects,
	       (unsigned long long)t->evictions, (unsigned long long)t->policy_evictions,
	       (unsigned long long)t->promotions, (unsigned long long)t->demotions,
	       (unsigned long long)t->admit_rejects, (unsigned long long)t->write_errors);
}

static void print_json(const struct bench *b)
{
	printf("{\"bench\":\"hierarchy\",\"version\":\"%s\",\"rounds\":%d,\"quick\":%s,"
	       "\"gbps\":\"1e9 payload bytes/s\",",
	       KVT_VERSION_STRING, b->rounds, b->quick ? "true" : "false");
	json_str("dir", b->base);
	printf(",\"free_bytes\":%llu,\n\"promotion\":{", (unsigned long long)b->free_bytes);
	printf("\"bound\":\"nvme_read: NVMe-only store, kvt_get_async + verify, %d "
	       "outstanding\",\"subjects\":{\"prefetch_1\":\"one kvt_prefetch op with all "
	       "keys\",\"prefetch_16\":\"16 kvt_prefetch ops of contiguous slices at "
	       "once\"},\"workers\":16,\"nvme_queue_depth\":16,\"dram_page_size\":65536,"
	       "\"skipped\":",
	       IN_FLIGHT);
	if (b->promo_skipped)
		printf("\"%s\"", b->promo_skipped);
	else
		printf("null");
	printf(",\"scaled\":%s,\"results\":[", b->promo_scaled ? "true" : "false");
	for (int i = 0; !b->promo_skipped && i < b->n_promo; i++) {
		const struct promo *p = &b->promo[i];

		printf("%s{\"model\":\"%s\",\"chunk_bytes\":%llu,\"chunks\":%ld,"
		       "\"total_bytes\":%llu,",
		       i ? ",\n" : "\n", p->model, (unsigned long long)p->chunk_bytes,
		       p->chunks, (unsigned long long)(p->chunk_bytes * (uint64_t)p->chunks));
		bench_json_summary("nvme_read_gbps", bench_summarize(p->gbps[0], b->rounds));
		for (int m = 1; m < N_SUBJ; m++) {
			struct summary r = promo_ratio(p, m, b->rounds);
			char nm[64];

			printf(",\"%s\":{", meas_names[m]);
			bench_json_summary("subject_gbps",
					   bench_summarize(p->gbps[m], b->rounds));
			printf(",\"ratio_vs_nvme_read\":%.6g,", r.median);
			bench_json_summary("ratio_range", r);
			printf(",\"target\":%.6g,\"better\":\"higher\",\"pass\":%s}",
			       TARGET_VS_NVME, r.median >= TARGET_VS_NVME ? "true" : "false");
			(void)nm;
		}
		printf("}");
	}
	printf("]},\n\"replay\":{");
	json_str("trace", b->trace);
	printf(",\"skipped\":");
	if (b->trace_skipped)
		printf("\"%s\"", b->trace_skipped);
	else
		printf("null");
	printf(",\"asynchronous\":true,\"note\":\"figures of an asynchronous hierarchy "
	       "(background promotion and write-through), not the deterministic "
	       "planner; they may differ slightly run to run\",\"chunk_payload_bytes\":%u,"
	       "\"chunk_image_bytes\":%u,\"block_tokens\":512,\"dram_page_size\":4096,"
	       "\"workers\":4,\"requests\":%llu,\"blocks\":%llu,\"distinct_blocks\":%llu,"
	       "\"configs\":[",
	       TR_PAYLOAD, TR_IMAGE, (unsigned long long)b->tr_nreq,
	       (unsigned long long)b->tr_blocks, (unsigned long long)b->tr_ids);
	for (int i = 0; i < b->n_tr; i++) {
		const struct tr_result *r = &b->tr[i];

		printf("%s{\"dram_eviction\":\"%s\",\"nvme_admission\":\"%s\","
		       "\"nvme_write\":\"%s\",\"blocks\":%llu,\"hit_blocks\":%llu,"
		       "\"hit_ratio\":%.6g,",
		       i ? ",\n" : "\n", tr_confs[i].evict, tr_confs[i].admit,
		       tr_confs[i].write, (unsigned long long)r->blocks,
		       (unsigned long long)r->hit_blocks, ratio(r->hit_blocks, r->blocks));
		json_tier("dram", &r->ts[0], r->hit_tier[0], r->blocks, r->cap_blocks[0]);
		putchar(',');
		json_tier("nvme", &r->ts[1], r->hit_tier[1], r->blocks, r->cap_blocks[1]);
		printf(",\"gets_ok\":%llu,\"gets_nonprefix\":%llu,\"puts_ok\":%llu,"
		       "\"puts_exist\":%llu,\"puts_full\":%llu,\"prefix_hit_get_missed\":%llu,"
		       "\"wall_seconds\":%.6g,\"settle_seconds\":%.6g,\"settled\":%s,"
		       "\"reference\":",
		       (unsigned long long)r->gets_ok, (unsigned long long)r->gets_nonprefix,
		       (unsigned long long)r->puts_ok, (unsigned long long)r->puts_exist,
		       (unsigned long long)r->puts_fail,
		       (unsigned long long)r->lookup_vs_get_mismatch, r->wall_s, r->settle_s,
		       r->settled ? "true" : "false");
		if (r->has_ref)
			printf("{\"mode\":\"inclusive\",\"hit_blocks\":%llu,\"hit_ratio\":%.6g,"
			       "\"dram_hit_ratio\":%.6g,\"nvme_hit_ratio\":%.6g,"
			       "\"dram_inserts\":%llu,\"nvme_inserts\":%llu,"
			       "\"nvme_rejects\":%llu,\"promotions\":%llu,\"demotions\":%llu,"
			       "\"ratio_vs_reference\":%.6g}",
			       (unsigned long long)r->ref.hit_blocks,
			       ratio(r->ref.hit_blocks, r->ref.blocks),
			       ratio(r->ref.hit_tier[0], r->ref.blocks),
			       ratio(r->ref.hit_tier[1], r->ref.blocks),
			       (unsigned long long)r->ref.inserts[0],
			       (unsigned long long)r->ref.inserts[1],
			       (unsigned long long)r->ref.rejects[1],
			       (unsigned long long)r->ref.promotions,
			       (unsigned long long)r->ref.demotions,
			       ratio(r->hit_blocks, r->ref.hit_blocks));
		else
			printf("null");
		printf("}");
	}
	printf("]}}\n");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier bench hierarchy [--json] [--quick] [--dir DIR] [--trace PATH]\n"
		"\n"
		"The DRAM + NVMe hierarchy as a whole:\n"
		"  promotion  NVMe -> DRAM with kvt_prefetch (one op with all keys, and\n"
		"             16 ops in parallel) vs the NVMe tier's own read bandwidth\n"
		"             (NVMe-only store, kvt_get_async, 16 outstanding);\n"
		"             14 and 32 MiB chunks, 1.5 GiB of each.   target >= 0.8x\n"
		"  replay     the shared conversation trace through a real DRAM + NVMe\n"
		"             store, 64 KiB per 512-token block, DRAM 2,000 / NVMe 20,000\n"
		"             blocks, per policy (dram lru|s3fifo x nvme always|seen:2,\n"
		"             write-through; two write-back variants): hit ratio per\n"
		"             tier, bytes read/written per tier, promotions, demotions,\n"
		"             admission rejects, wall time.\n"
		"\n"
		"  --dir DIR     work in a fresh directory under DIR (default /var/tmp);\n"
		"                removed afterwards\n"
		"  --trace PATH  the trace (default: the repository's tests/data/traces/\n"
		"                conversation_trace.jsonl, found from $KVT_SRC, the\n"
		"                executable or the source location)\n"
		"  --json        every figure as one JSON object; ratios in fields named\n"
		"                ratio_vs_<bound>\n"
		"  --quick       2 rounds, a quarter of the bytes, first 3,000 requests\n"
		"\n"
		"Replay figures come from an asynchronous hierarchy (background promotion\n"
		"and write-through), not the deterministic planner, and may differ\n"
		"slightly from run to run.  Exit code 0 unless something failed (1) or a\n"
		"usage error (2).\n");
}

int bench_hier(int argc, char **argv)
{
	struct bench *b = calloc(1, sizeof(*b));
	const char *parent = "/var/tmp", *trace = NULL;
	int ret = 1;

	if (!b)
		return cli_fail(CMD, "setup", KVT_ENOMEM);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			b->json = 1;
		} else if (!strcmp(argv[i], "--quick")) {
			b->quick = 1;
		} else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
			parent = argv[++i];
		} else if (!strncmp(argv[i], "--dir=", 6) && argv[i][6]) {
			parent = argv[i] + 6;
		} else if (!strcmp(argv[i], "--trace") && i + 1 < argc) {
			trace = argv[++i];
		} else if (!strncmp(argv[i], "--trace=", 8) && argv[i][8]) {
			trace = argv[i] + 8;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			free(b);
			return 0;
		} else {
			fprintf(stderr, "kvtier " CMD ": unknown option \"%s\"\n\n", argv[i]);
			usage(stderr);
			free(b);
			return 2;
		}
	}
	b->rounds = b->quick ? 2 : MAX_ROUNDS;
	if (snprintf(b->base, sizeof(b->base), "%s/kvtier-bench-hier.XXXXXX", parent) >=
	    (int)sizeof(b->base)) {
		fprintf(stderr, "kvtier " CMD ": --dir path too long\n");
		free(b);
		return 2;
	}
	if (!mkdtemp(b->base)) {
		fprintf(stderr, "kvtier " CMD ": cannot create a directory under %s: %s\n",
			parent, strerror(errno));
		free(b);
		return 1;
	}
	b->base_made = 1;
	if (free_space(b))
		goto out;
	if (!b->json)
		fprintf(stderr, "kvtier " CMD ": working in %s\n", b->base);
	if (bench_promotion(b))
		goto out;
	if (bench_trace(b, trace))
		goto out;
	ret = 0;
	if (b->json)
		print_json(b);
	else
		print_table(b);
out:
	if (b->base_made && bench_remove_tree(b->base))
		fprintf(stderr, "kvtier " CMD ": could not remove all of %s\n", b->base);
	free(b);
	return ret;
}
