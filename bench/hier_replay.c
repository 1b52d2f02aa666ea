/*
 * hier_replay.c — `kvtier-bench hierarchy`, part 2: the shared production
 * trace replayed through a real two-tier store, per eviction/admission
 * policy.
 *
 * The repository's tests/data/traces/conversation_trace.jsonl (the copy the
 * build puts in bench-data/traces next to this program; --trace names
 * another) is replayed through a real DRAM + NVMe store whose chunks are
 * scaled down: one chunk per 512-token block, 64 KiB of payload (1 layer x 1
 * KV head x 32 dims x 512 tokens x K and V, f16; a 68 KiB image with its
 * header; xorshift noise with the block id in its first 8 bytes).  Block ids
 * map to keys deterministically (splitmix64 of the trace's dense id in the
 * first 8 bytes, which the hierarchy's policies use as the object id).  Per
 * request, in one thread, the loop `kvtier replay` runs too
 * (src/cli/replay_run.c):
 *   1. kvt_lookup of the whole chain: the prefix hit, and the tier each hit
 *      block was found in;
 *   2. every block in prompt order: kvt_get (a DRAM hit refreshes it; an
 *      NVMe hit is promoted to DRAM asynchronously; what it serves must be
 *      the block's bytes) and, if missing, kvt_put of its bytes at the
 *      cached durability (DRAM now; NVMe by write-through in the
 *      background, through NVMe's admission filter).
 * Capacities: DRAM 2,000 blocks, NVMe 20,000 blocks (the stores are sized
 * so that the share their policies fill, 97% of a tier, holds that many
 * 68 KiB images; DRAM pages are 4 KiB so an image takes no more than its
 * size).  Policies: DRAM eviction lru | s3fifo x NVMe admission always |
 * seen:2, NVMe written through; and two write-back variants (NVMe takes
 * DRAM's victims by demotion, not every put).  --quick: the first 3,000
 * requests.  Each configuration's store is a fresh directory with a
 * random name under the run's (see bench_spread_dir); the next one takes
 * over its fan-out directories, emptied of files, as a store that has run
 * before has them (the first configuration's loop makes them).
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
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/replay_run.h"
#include "hier.h"
#include "plan/trace.h"

const struct hier_tr_conf hier_tr_confs[HIER_N_TR] = {
	{ "lru", "always", "through", KVT_EVICT_LRU, 0 },
	{ "lru", "seen:2", "through", KVT_EVICT_LRU, 2 },
	{ "s3fifo", "always", "through", KVT_EVICT_S3FIFO, 0 },
	{ "s3fifo", "seen:2", "through", KVT_EVICT_S3FIFO, 2 },
	{ "lru", "always", "back", KVT_EVICT_LRU, 0 },
	{ "s3fifo", "seen:2", "back", KVT_EVICT_S3FIFO, 2 },
};

/* --trace, else the copy of the repository's trace the build put in
 * bench-data/traces.  1 if it is readable (b->trace names it either way). */
static int find_trace(struct hier_bench *b, const char *opt)
{
	if (opt) {
		snprintf(b->trace, sizeof(b->trace), "%s", opt);
		return access(b->trace, R_OK) == 0;
	}
	return bench_data_path("traces/conversation_trace.jsonl", b->trace, sizeof(b->trace));
}

static int tr_open(const char *dir, const struct hier_tr_conf *c, kvt_store **st)
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
		return bench_fail(HIER_CMD, "kvt_config_new", KVT_ENOMEM);
	rc = bench_config_set_all(cfg, fixed, sizeof(fixed) / sizeof(fixed[0]));
	/* The policies fill 97% of a tier: size it so that share holds the
	 * wanted number of images. */
	if (!rc) {
		hier_size_kib(cap, sizeof(cap),
			 ((uint64_t)HIER_TR_DRAM_BLOCKS * HIER_TR_IMAGE * 100 + 96) / 97 + 8192);
		rc = kvt_config_set(cfg, "max_local_cpu_size", cap);
	}
	if (!rc) {
		hier_size_kib(cap, sizeof(cap),
			 ((uint64_t)HIER_TR_NVME_BLOCKS * HIER_TR_IMAGE * 100 + 96) / 97 + 8192);
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
	return bench_store_open(HIER_CMD, "kvt_store_open (replay)", cfg, rc, 0, st);
}

/* What the hierarchy's policy of a tier holds, in 68 KiB images (mirrors
 * store.c: 97% of the tier's capacity, in rounds of the DRAM page / 4 KiB). */
static uint64_t policy_blocks(uint64_t capacity_bytes, uint64_t round)
{
	uint64_t units = capacity_bytes / 100 * 97 / round;
	return units / ((HIER_TR_IMAGE + round - 1) / round);
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

/* The key of trace block `id`: first 8 bytes well mixed (the hierarchy's
 * policy id). */
static void tr_key(kvt_key *k, uint64_t id)
{
	bench_chunk_key(k, 0x48494552u /* "HIER" */, 'H', id, "kvthier!");
}

/* Move the fan-out directories the previous configuration's store made
 * (emptied of files by bench_empty_tree) into `dir`, then remove what is
 * left of `prev` (its tmp/).  Nothing moved if anything fails: the new
 * store then makes its tree itself. */
static void tr_take_tree(const char *prev, const char *dir)
{
	DIR *d = opendir(prev);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char from[1400], to[1400];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, "tmp"))
			continue;
		if (bench_path_join(from, sizeof(from), prev, e->d_name) ||
		    bench_path_join(to, sizeof(to), dir, e->d_name) || rename(from, to))
			break;
	}
	if (d)
		closedir(d);
	bench_remove_tree(prev);
}

static int tr_run(struct hier_bench *b, const struct plan_trace *pt,
		  const struct hier_tr_conf *c, char last[1100], struct hier_tr_result *res)
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
	struct cli_replay rr;
	char dir[1100];
	double t0;
	int rc, ret = 1;

	memset(res, 0, sizeof(*res));
	/* A directory of its own per configuration, under the run's (which
	 * hierarchy.c marked with bench_spread_dir): a random name puts its
	 * tmp/, where the tier creates every file, in block groups of its
	 * own, away from the inodes the configuration before freed (common.c
	 * says why that matters).  The fan-out directories move over. */
	if (bench_scratch_dir(HIER_CMD, b->base, "replay", dir, sizeof(dir)))
		return 1;
	if (last[0])
		tr_take_tree(last, dir);
	memcpy(last, dir, sizeof(dir));
	for (uint64_t r = 0; r < t->nreq; r++)
		if (t->off[r + 1] - t->off[r] > maxn)
			maxn = t->off[r + 1] - t->off[r];
	payload = malloc(HIER_TR_PAYLOAD);
	buf = malloc(HIER_TR_PAYLOAD);
	keys = malloc((maxn ? maxn : 1) * sizeof(*keys));
	where = malloc(maxn ? maxn : 1);
	if (!payload || !buf || !keys || !where) {
		bench_fail(HIER_CMD, "replay buffers", KVT_ENOMEM);
		goto out;
	}
	bench_fill_random(payload, HIER_TR_PAYLOAD, 0x2545f4914f6cdd1dull);
	if (tr_open(dir, c, &st))
		goto out;
	if ((rc = kvt_ns_init(st, &d, &ns))) {
		bench_fail(HIER_CMD, "replay namespace", rc);
		goto out;
	}
	if (kvt_layout_payload_bytes(&ns.layout) != HIER_TR_PAYLOAD) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": replay layout is not 64 KiB\n");
		goto out;
	}
	if ((rc = stats_both(st, now))) {
		bench_fail(HIER_CMD, "kvt_store_stats", rc);
		goto out;
	}
	res->cap_blocks[0] = policy_blocks(now[0].capacity_bytes, 4096);
	res->cap_blocks[1] = policy_blocks(now[1].capacity_bytes, 4096);

	rr = (struct cli_replay){ .st = st, .ns = &ns, .key = tr_key, .data = payload,
				  .back = buf, .payload = HIER_TR_PAYLOAD, .keys = keys,
				  .tiers = where };
	t0 = cli_now();
	for (uint64_t r = 0; r < t->nreq; r++) {
		cli_replay_request(&rr, t->ids + t->off[r], t->off[r + 1] - t->off[r]);
		if (rr.errors) {
			bench_fail(HIER_CMD, rr.first_error_call, rr.first_error);
			goto out;
		}
		if (rr.bad) {
			fprintf(stderr, "kvtier-bench " HIER_CMD ": a chunk read back differs "
				"from the one put\n");
			goto out;
		}
	}
	res->wall_s = cli_now() - t0;
	res->blocks = rr.blocks;
	res->hit_blocks = rr.hit_blocks;
	res->hit_tier[0] = rr.hit_tier[0];
	res->hit_tier[1] = rr.hit_tier[1];
	res->gets_ok = rr.gets;
	res->gets_nonprefix = rr.gets_nonprefix;
	res->lookup_vs_get_mismatch = rr.prefix_get_missed;
	res->puts_ok = rr.puts;
	res->puts_exist = rr.puts_exist;
	res->puts_fail = rr.puts_full;

	/* Let background promotions, write-through and demotions finish. */
	t0 = cli_now();
	if ((rc = stats_both(st, prev))) {
		bench_fail(HIER_CMD, "kvt_store_stats", rc);
		goto out;
	}
	for (;;) {
		struct timespec ts = { 0, 200 * 1000000L };

		nanosleep(&ts, NULL);
		if ((rc = stats_both(st, now))) {
			bench_fail(HIER_CMD, "kvt_store_stats", rc);
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
			fprintf(stderr, "kvtier-bench " HIER_CMD ": reference replay: %s\n",
				kvt_strerror(rc));
	}
	ret = 0;
out:
	kvt_store_close(st);
	if (bench_empty_tree(dir)) /* the next configuration takes the tree */
		bench_remove_tree(dir);
	free(payload);
	free(buf);
	free(keys);
	free(where);
	return ret;
}

int hier_replay(struct hier_bench *b, const char *trace_opt)
{
	struct plan_trace pt;
	char prev[1100] = "";
	uint64_t need = ((uint64_t)HIER_TR_NVME_BLOCKS * HIER_TR_IMAGE) * 12 / 10 + (256u << 20);
	int rc;

	if (!find_trace(b, trace_opt)) {
		b->trace_skipped = "trace not found (--trace PATH; the build copies the "
				   "repository's into bench-data/traces)";
		if (!b->json)
			fprintf(stderr, "kvtier-bench " HIER_CMD ": %s not found: skipping the trace "
				"replay (--trace PATH, or cmake --build to copy it there)\n",
				b->trace);
		return 0;
	}
	if (hier_free_space(b))
		return 1;
	if (b->free_bytes < need) {
		b->trace_skipped = "not enough free space for the NVMe tier of the replay";
		return 0;
	}
	memset(&pt, 0, sizeof(pt));
	rc = plan_trace_read(b->trace, PLAN_FMT_MOONCAKE, 0, b->quick ? HIER_TR_QUICK_REQ : 0,
			     &pt);
	if (rc)
		return bench_fail(HIER_CMD, "trace", rc); /* the detail names file and line */
	b->tr_nreq = pt.t.nreq;
	b->tr_blocks = pt.t.nblocks;
	b->tr_ids = pt.t.nids;
	for (int i = 0; i < HIER_N_TR; i++) {
		if (!b->json)
			fprintf(stderr, "kvtier-bench " HIER_CMD ": replay %d/%d: dram %s, nvme %s, "
				"nvme write %s ...\n", i + 1, HIER_N_TR, hier_tr_confs[i].evict,
				hier_tr_confs[i].admit, hier_tr_confs[i].write);
		rc = tr_run(b, &pt, &hier_tr_confs[i], prev, &b->tr[i]);
		if (rc)
			break;
		b->n_tr++;
	}
	plan_trace_free(&pt);
	if (prev[0])
		bench_remove_tree(prev);
	return rc ? 1 : 0;
}

