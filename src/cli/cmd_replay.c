/*
 * cmd_replay.c — `kvtier replay`: drive a trace through a real store with
 * real bytes and report what the tiers did.
 *
 * Each trace block becomes one chunk whose payload is --block-bytes long
 * (a scaled-down stand-in for the model's real chunk, so a laptop can run a
 * production trace).  Per request, in one thread, deterministically
 * (replay_run.c, the loop kvtier-bench hierarchy drives too):
 *   1. kvt_lookup of the whole chain: the prefix hit (changes nothing);
 *   2. every block in prompt order: kvt_get (a hit refreshes it, or promotes
 *      it from a lower tier) and, if missing, kvt_put of its bytes.
 * That is the reference semantics of policy/replay.h ("present ones
 * refreshed, missing ones inserted"), so with a DRAM tier that holds exactly
 * N chunks (--dram-blocks N; the size is found by filling a scratch store,
 * since the store may keep headroom its policy does not fill) the hit blocks
 * equal those of `kvtier plan --dram N --policy lru` on the same trace.
 */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jsonw.h"
#include "replay_run.h"
#include "kvtier/plan.h"

/* --dram-blocks fills a scratch store N + 1 times over to size the tier:
 * beyond this it is not a test anyone waits for. */
#define MAX_DRAM_BLOCKS 100000000ull

static void block_key(kvt_key *k, uint64_t id)
{
	memset(k, 0, sizeof(*k));
	/* The first 8 bytes name the block to the store's policies, as a
	 * trace id names it to the planner's. */
	memcpy(k->b, &id, sizeof(id));
	memcpy(k->b + 24, "kvtrplay", 8);
}


/* Chunks a DRAM-only store of `kib` KiB holds, trying N+1 distinct puts. */
static int dram_fit(const kvt_config *base, const kvt_ns_desc *d, uint64_t kib, uint64_t n,
		    const uint8_t *data, uint64_t payload, uint64_t *fit)
{
	kvt_config *cfg = kvt_config_new();
	char v[64];
	int rc = 0;
	(void)base;
	snprintf(v, sizeof(v), "%lluKiB", (unsigned long long)kib);
	if (!cfg)
		return KVT_ENOMEM;
	if ((rc = kvt_config_set(cfg, "dram_page_size", "4KiB")) ||
	    (rc = kvt_config_set(cfg, "max_local_cpu_size", v)) ||
	    (rc = kvt_config_set(cfg, "workers", "1"))) {
		kvt_config_free(cfg);
		return rc;
	}
	kvt_store *st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!st)
		return rc;
	kvt_ns ns;
	if ((rc = kvt_ns_init(st, d, &ns))) {
		kvt_store_close(st);
		return rc;
	}
	kvt_key k;
	for (uint64_t i = 0; i <= n && !rc; i++) {
		block_key(&k, i);
		rc = kvt_put(st, &ns, &k, data, payload, KVT_DUR_CACHED);
	}
	*fit = 0;
	for (uint64_t i = 0; i <= n && !rc; i++) {
		block_key(&k, i);
		*fit += kvt_exists(st, &ns, &k) == 1;
	}
	kvt_store_close(st);
	return rc;
}

/* The DRAM capacity (KiB) that holds exactly n chunks of `payload` bytes:
 * found by trying, since the store may keep headroom that its policies do
 * not fill.  The smallest capacity that holds n holds exactly n.  When no
 * size does, KVT_EINVAL with the reason in why[]; else a store's code. */
static int dram_calibrate(const kvt_ns_desc *d, uint64_t n, uint64_t payload, uint64_t *kib,
			  char *why, size_t whylen)
{
	uint8_t *data = calloc(1, payload);
	if (!data)
		return KVT_ENOMEM;
	uint64_t per = (4096 + payload + 4095) / 4096 * 4; /* KiB per image */
	/* The first tier keeps ~13% headroom (store.c): search up to 1.25x. */
	uint64_t lo = n * per, hi = lo + lo / 4 + 1024, fit = 0;
	if (lo < 1024)
		lo = 1024;
	int rc = dram_fit(NULL, d, hi, n, data, payload, &fit);
	if (!rc && fit < n) {
		snprintf(why, whylen, "a DRAM tier of %llu KiB holds only %llu of %llu chunks",
			 (unsigned long long)hi, (unsigned long long)fit, (unsigned long long)n);
		rc = KVT_EINVAL;
	}
	while (!rc && lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		rc = dram_fit(NULL, d, mid, n, data, payload, &fit);
		if (fit >= n)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (!rc)
		rc = dram_fit(NULL, d, hi, n, data, payload, &fit);
	if (!rc && fit != n) {
		snprintf(why, whylen, "no DRAM size holds exactly %llu chunks (%llu KiB holds %llu)",
			 (unsigned long long)n, (unsigned long long)hi, (unsigned long long)fit);
		rc = KVT_EINVAL;
	}
	free(data);
	*kib = hi;
	return rc;
}

static const char replay_help[] =
	"usage: kvtier replay [options] TRACE\n\n"
	"Drive TRACE through a real store (the tiers of --config/--set) with real bytes,\n"
	"single-threaded and deterministic: per request a lookup of the chain, then a get\n"
	"of every present block and a put of every missing one, in prompt order.\n\n"
	"  --format F          auto|mooncake|bailian|tokens\n"
	"  --block-tokens N    tokens per block, 1..1048576 (default: the format's)\n"
	"  --block-bytes SIZE  payload of one chunk, 1B..1GiB (default 64KiB): the scale-down\n"
	"  --dram-blocks N     a DRAM tier of exactly N chunk images (4 KiB pages), 1..10^8\n"
	"  --limit N           only the first N requests (1..10^12)\n"
	"  --pace X            follow the trace's clock at X times its speed, 1e-6..1e6\n"
	"                      (default: as fast as possible)\n"
	"  --json              machine output\n"
	"  --config FILE, --set KEY=VALUE, --dir PATH   the store (see kvtier put --help);\n"
	"                      e.g. --set dram_eviction=s3fifo --set dram_s3fifo_promote=2\n";

static void replay_usage(FILE *f)
{
	fputs(replay_help, f);
}

enum { O_FORMAT = 0x100, O_BLOCK_TOKENS, O_BLOCK_BYTES, O_DRAM_BLOCKS, O_LIMIT, O_PACE, O_JSON };

struct replay_args {
	int fmt, json;
	uint32_t block_tokens;
	uint64_t limit, dram_blocks, block_bytes;
	double pace;
};

static int replay_opt(void *arg, int id, const char *v)
{
	struct replay_args *r = arg;

	switch (id) {
	case O_FORMAT:
		r->fmt = kvt_plan_format_parse(v);
		if (r->fmt < 0) {
			fprintf(stderr, "kvtier replay: unknown format %s\n", v);
			return 2;
		}
		return -1;
	case O_BLOCK_TOKENS:
		return cli_parse_u32("replay", "--block-tokens", v, 1, 1u << 20, &r->block_tokens) ? 2
												   : -1;
	case O_BLOCK_BYTES:
		return cli_parse_size("replay", "--block-bytes", v, 1, 1ull << 30, &r->block_bytes) ? 2
												    : -1;
	case O_DRAM_BLOCKS:
		return cli_parse_u64("replay", "--dram-blocks", v, 1, MAX_DRAM_BLOCKS, &r->dram_blocks)
			       ? 2 : -1;
	case O_LIMIT:
		return cli_parse_u64("replay", "--limit", v, 1, 1000000000000ull, &r->limit) ? 2 : -1;
	case O_PACE:
		return cli_parse_double("replay", "--pace", v, 1e-6, 1e6, &r->pace) ? 2 : -1;
	case O_JSON:
		r->json = 1;
		return -1;
	}
	return 2;
}

/* The store the trace is replayed through, with its namespace: chunks
 * of one layer of K and V in bf16, `block_tokens` tokens, about
 * --block-bytes each; with --dram-blocks, a DRAM tier that holds exactly
 * that many.  0, or the exit code (printed). */
static int replay_store(const cli_common *cc, const struct replay_args *ra, uint32_t block_tokens,
			kvt_store **st, kvt_ns *ns)
{
	int rc;

	/* The chunk: one layer, K and V, bf16, the trace's block of tokens;
	 * head_dim sets the bytes.  Payload + the 4 KiB header is a whole
	 * number of 4 KiB pages when the payload is. */
	uint64_t per_tok = 2 * 2; /* K,V x bf16 per head_dim element */
	uint64_t hd = ra->block_bytes / (per_tok * block_tokens);
	if (hd < 1)
		hd = 1;
	kvt_ns_desc d;
	memset(&d, 0, sizeof(d));
	d.model = "kvtier-replay";
	d.layout.num_layers = 1;
	d.layout.num_kv_heads = 1;
	d.layout.head_dim = (uint32_t)hd;
	d.layout.dtype = KVT_DTYPE_BF16;
	d.layout.kv_planes = 2;
	d.layout.chunk_tokens = block_tokens;
	d.tp_size = 1;
	d.pp_size = 1;
	d.tenant = cc->tenant;

	kvt_config *cfg = NULL;
	if (cli_config(cc, &cfg))
		return 1;
	uint64_t payload = per_tok * hd * block_tokens;
	if (ra->dram_blocks) {
		char v[64];
		uint64_t kib = 0;
		double tc = cli_now();
		char why[200] = "";
		rc = dram_calibrate(&d, ra->dram_blocks, payload, &kib, why, sizeof(why));
		if (rc) {
			kvt_config_free(cfg);
			if (!why[0])
				return cli_fail("replay", "--dram-blocks", rc);
			fprintf(stderr, "kvtier replay: --dram-blocks: %s (%s)\n", kvt_strerror(rc), why);
			return 1;
		}
		if (!ra->json)
			printf("DRAM of %llu KiB holds exactly %llu chunks (found in %.2f s)\n",
			       (unsigned long long)kib, (unsigned long long)ra->dram_blocks,
			       cli_now() - tc);
		snprintf(v, sizeof(v), "%lluKiB", (unsigned long long)kib);
		if ((rc = kvt_config_set(cfg, "dram_page_size", "4KiB")) ||
		    (rc = kvt_config_set(cfg, "max_local_cpu_size", v))) {
			kvt_config_free(cfg);
			return cli_fail("replay", "--dram-blocks", rc);
		}
	}
	*st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!*st)
		return cli_fail("replay", "open the store", rc);
	if ((rc = kvt_ns_init(*st, &d, ns))) {
		kvt_store_close(*st);
		*st = NULL;
		return cli_fail("replay", "namespace", rc);
	}
	return 0;
}

/* Every request of the trace through the store, at its own pace (--pace:
 * its arrival times sped up that much; 0: at once): the wall seconds;
 * the prompt's tokens and those found cached are added up. */
static double replay_requests(struct cli_replay *rr, const kvt_plan_trace_view *pt, double pace,
			      int json, uint64_t *hit_tokens, uint64_t *tokens)
{
	double t_start = cli_now();
	int tty = !json && isatty(2);

	memset(rr->data, 0x5a, rr->payload);
	double next_progress = t_start + 0.5;
	for (uint64_t q = 0; q < pt->requests; q++) {
		if (pace > 0) {
			double due = t_start + pt->arrive_s[q] / pace, now = cli_now();
			if (due > now) {
				struct timespec ts = {(time_t)(due - now),
						      (long)((due - now - floor(due - now)) * 1e9)};
				nanosleep(&ts, NULL);
			}
		}
		uint64_t h = cli_replay_request(rr, pt->ids + pt->off[q],
						pt->off[q + 1] - pt->off[q]);
		uint64_t ht = h * pt->block_tokens;
		*hit_tokens += ht < pt->in_len[q] ? ht : pt->in_len[q];
		*tokens += pt->in_len[q];
		if (tty && cli_now() > next_progress) {
			next_progress = cli_now() + 0.5;
			fprintf(stderr, "\rkvtier replay: %llu/%llu requests",
				(unsigned long long)q + 1, (unsigned long long)pt->requests);
		}
	}
	if (tty)
		fprintf(stderr, "\r%60s\r", "");
	return cli_now() - t_start;
}

int cmd_replay(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, NULL, O_FORMAT },
		{ "block-tokens", required_argument, NULL, O_BLOCK_TOKENS },
		{ "block-bytes", required_argument, NULL, O_BLOCK_BYTES },
		{ "dram-blocks", required_argument, NULL, O_DRAM_BLOCKS },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "pace", required_argument, NULL, O_PACE },
		{ "json", no_argument, NULL, O_JSON },
		{ 0 },
	};
	struct replay_args ra = { .fmt = KVT_PLAN_FMT_AUTO, .block_bytes = 64 * 1024 };
	struct cli_lat l_lookup = { 0 }, l_get = { 0 }, l_put = { 0 };
	uint64_t hit_tokens = 0, tokens = 0, maxn = 0, payload;
	kvt_plan_trace_view pt;
	kvt_plan_trace *tr;
	kvt_store *st;
	cli_common cc;
	kvt_ns ns;
	int first, rc;

	memset(&cc, 0, sizeof(cc));
	rc = cli_getopt("replay", argc, argv, NULL, opts, &cc, replay_opt, &ra, replay_usage, &first);
	if (rc >= 0)
		return rc;
	if (first + 1 < argc) {
		fprintf(stderr, "kvtier replay: unexpected argument \"%s\" (one TRACE)\n\n",
			argv[first + 1]);
		replay_usage(stderr);
		return 2;
	}
	const char *trace = first < argc ? argv[first] : NULL;
	int json = ra.json;
	if (!trace) {
		fputs(replay_help, stderr);
		return 2;
	}
	if ((rc = kvt_plan_trace_read(trace, ra.fmt, ra.block_tokens, ra.limit, &tr)))
		return cli_fail_detail("replay", rc); /* names the file, line, field */
	kvt_plan_trace_view_get(tr, &pt);
	if ((rc = replay_store(&cc, &ra, pt.block_tokens, &st, &ns))) {
		kvt_plan_trace_free(tr);
		return rc;
	}
	payload = kvt_layout_payload_bytes(&ns.layout);
	for (uint64_t q = 0; q < pt.requests; q++)
		if (pt.off[q + 1] - pt.off[q] > maxn)
			maxn = pt.off[q + 1] - pt.off[q];
	kvt_key *keys = calloc(maxn + 1, sizeof(*keys));
	uint8_t *tiers = calloc(maxn + 1, 1);
	uint8_t *data = malloc(payload), *back = malloc(payload);
	struct cli_replay rr = { .st = st, .ns = &ns, .key = block_key, .data = data,
				 .back = back, .payload = payload, .keys = keys, .tiers = tiers,
				 .l_lookup = &l_lookup, .l_get = &l_get, .l_put = &l_put };
	if (!keys || !tiers || !data || !back) {
		rc = KVT_ENOMEM;
		goto out;
	}
	double wall = replay_requests(&rr, &pt, ra.pace, json, &hit_tokens, &tokens);
	cli_lat_sort(&l_lookup);
	cli_lat_sort(&l_get);
	cli_lat_sort(&l_put);
	/* A full tier refusing a put is a failed call here, as any other. */
	uint64_t hit_blocks = rr.hit_blocks, blocks = rr.blocks, gets = rr.gets,
		 puts = rr.puts + rr.puts_exist, bad = rr.bad, errors = rr.errors + rr.puts_full;
	double get_gbps = l_get.sum > 0 ? (double)gets * (double)payload / l_get.sum / 1e9 : 0;
	double put_gbps = l_put.sum > 0 ? (double)puts * (double)payload / l_put.sum / 1e9 : 0;
	int nt = kvt_store_tiers(st);
	json_t *doc = NULL, *jtiers = NULL;
	if (json) {
		jtiers = json_array();
		doc = json_pack("{s:o,s:s,s:o,s:o,s:o,s:o,s:o,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
				"s:{s:o,s:o},s:{s:o,s:o},s:{s:o,s:o},s:o}",
			"trace", cli_json_str(trace), "format", kvt_plan_format_name(pt.format),
			"requests", cli_json_uint(pt.requests), "blocks", cli_json_uint(blocks),
			"hit_blocks", cli_json_uint(hit_blocks), "tokens", cli_json_uint(tokens),
			"hit_tokens", cli_json_uint(hit_tokens), "block_tokens", (json_int_t)pt.block_tokens,
			"payload_bytes", cli_json_uint(payload), "gets", cli_json_uint(gets),
			"puts", cli_json_uint(puts), "bad", cli_json_uint(bad),
			"errors", cli_json_uint(errors), "wall_seconds", cli_json_fixed(wall, 6),
			"get_gbps", cli_json_fixed(get_gbps, 3), "put_gbps", cli_json_fixed(put_gbps, 3),
			"lookup_us", "p50", cli_json_fixed(cli_lat_pct(&l_lookup, .5) * 1e6, 2),
			"p99", cli_json_fixed(cli_lat_pct(&l_lookup, .99) * 1e6, 2),
			"get_us", "p50", cli_json_fixed(cli_lat_pct(&l_get, .5) * 1e6, 2),
			"p99", cli_json_fixed(cli_lat_pct(&l_get, .99) * 1e6, 2),
			"put_us", "p50", cli_json_fixed(cli_lat_pct(&l_put, .5) * 1e6, 2),
			"p99", cli_json_fixed(cli_lat_pct(&l_put, .99) * 1e6, 2),
			"tiers", json_incref(jtiers));
		/* Per access, as a cache simulator counts hits (libCacheSim):
		 * every get that found its block, prefix or not. */
		json_object_set_new(doc, "access_hits", cli_json_uint(gets));
	} else {
		printf("trace %s: %llu requests, %llu blocks of %u tokens, %llu-byte chunks\n",
		       trace, (unsigned long long)pt.requests, (unsigned long long)blocks,
		       pt.block_tokens, (unsigned long long)payload);
		printf("prefix hits: %llu blocks (%.2f%%), %.2f%% of tokens\n",
		       (unsigned long long)hit_blocks,
		       100.0 * (double)hit_blocks / (double)(blocks ? blocks : 1),
		       100.0 * (double)hit_tokens / (double)(tokens ? tokens : 1));
		printf("per access (a cache simulator's hits): %llu of %llu blocks found (%.2f%%)\n",
		       (unsigned long long)gets, (unsigned long long)blocks,
		       100.0 * (double)gets / (double)(blocks ? blocks : 1));
		printf("lookup p50 %.1f us p99 %.1f us; get p50 %.1f us p99 %.1f us (%.2f GB/s while loading); "
		       "put p50 %.1f us p99 %.1f us (%.2f GB/s while storing); %.2f s in all\n",
		       cli_lat_pct(&l_lookup, .5) * 1e6, cli_lat_pct(&l_lookup, .99) * 1e6,
		       cli_lat_pct(&l_get, .5) * 1e6, cli_lat_pct(&l_get, .99) * 1e6, get_gbps,
		       cli_lat_pct(&l_put, .5) * 1e6, cli_lat_pct(&l_put, .99) * 1e6, put_gbps, wall);
		printf("%-6s %10s %10s %10s %12s %12s %10s\n", "tier", "hits", "misses", "puts",
		       "bytes_in", "bytes_out", "evictions");
	}
	for (int k = 0; k < nt; k++) {
		kvt_tier_stats ts;
		if (kvt_store_stats(st, k, &ts))
			continue;
		if (json)
			json_array_append_new(jtiers, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
				"name", cli_json_str(ts.name), "hits", cli_json_uint(ts.hits),
				"misses", cli_json_uint(ts.misses), "puts", cli_json_uint(ts.puts),
				"bytes_in", cli_json_uint(ts.bytes_in), "bytes_out", cli_json_uint(ts.bytes_out),
				"evictions", cli_json_uint(ts.evictions), "chunks", cli_json_uint(ts.chunks)));
		else
			printf("%-6s %10llu %10llu %10llu %12llu %12llu %10llu\n", ts.name,
			       (unsigned long long)ts.hits, (unsigned long long)ts.misses,
			       (unsigned long long)ts.puts, (unsigned long long)ts.bytes_in,
			       (unsigned long long)ts.bytes_out, (unsigned long long)ts.evictions);
	}
	if (json) {
		json_decref(jtiers);
		if (cli_json_write(doc, stdout))
			fprintf(stderr, "kvtier replay: out of memory writing JSON\n");
	}
	if (bad || errors)
		fprintf(stderr, "kvtier replay: %llu chunks came back wrong, %llu calls failed\n",
			(unsigned long long)bad, (unsigned long long)errors);
	rc = bad || errors;
out:
	free(keys);
	free(tiers);
	free(data);
	free(back);
	cli_lat_free(&l_lookup);
	cli_lat_free(&l_get);
	cli_lat_free(&l_put);
	kvt_store_close(st);
	kvt_plan_trace_free(tr);
	return rc < 0 ? cli_fail("replay", "replay", rc) : rc;
}
