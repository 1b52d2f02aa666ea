/*
 * hierarchy.c — `kvtier-bench hierarchy`: the DRAM + NVMe hierarchy as a
 * whole: promotion bandwidth NVMe -> DRAM against the NVMe tier's own read
 * bandwidth, and the shared production trace replayed through a real
 * two-tier store, per eviction/admission policy.  This file holds the
 * options, the run's scratch directory and the reports; each part is a file
 * of its own.
 *
 * PART 1, PROMOTION (hier_promotion.c): N distinct chunks of 14 and 32 MiB
 * on the NVMe tier alone, then per round the NVMe-only store's own
 * kvt_get_async read (the bound) against kvt_prefetch into an empty DRAM
 * tier, one op with all keys (prefetch_1) and 16 ops of slices
 * (prefetch_16).  ratio_vs_nvme_read, target >= 0.8.
 *
 * PART 2, TRACE REPLAY (hier_replay.c): the repository's conversation trace
 * through a real DRAM + NVMe store with 64 KiB chunks, per DRAM eviction x
 * NVMe admission x write policy: hit ratio per tier, bytes, promotions,
 * demotions, admission rejects, evictions, and the deterministic reference
 * (policy/replay.h) alongside.
 *
 * A benchmark reports; it does not fail: a figure below its target is
 * printed as such and the exit code stays 0.  1 means something went wrong,
 * 2 a usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "hier.h"
#include "kvtier/units.h"

/* ------------------------------------------------------------------------ */
/* Reports                                                                   */
/* ------------------------------------------------------------------------ */

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void print_table(const struct hier_bench *b)
{
	char buf[64];

	printf("kvtier-bench hierarchy: %d rounds; each figure is the median [min..max]\n"
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
			const struct hier_promo *p = &b->promo[i];

			for (int m = 0; m < HIER_N_SUBJ; m++) {
				char c0[32], c1[32], s[64], rt[24];
				struct summary r = hier_promo_ratio(p, m, b->rounds);

				snprintf(c0, sizeof(c0), "%lluMiB",
					 (unsigned long long)(p->chunk_bytes >> 20));
				snprintf(c1, sizeof(c1), "%ld", p->chunks);
				bench_fmt_summary(bench_summarize(p->gbps[m], b->rounds), s,
						  sizeof(s));
				if (m == 0)
					snprintf(rt, sizeof(rt), "(bound)");
				else
					snprintf(rt, sizeof(rt), "%.3fx", r.median);
				printf("  %-7s %-7s %-12s %-24s %-9s %s\n", c0, c1, hier_meas_names[m],
				       s, rt,
				       m == 0 ? "" : r.median >= HIER_TARGET_VS_NVME ? ">=0.80x PASS"
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
		const struct hier_tr_result *r = &b->tr[i];
		char rh[24] = "-", rd[32] = "-";

		if (r->has_ref) {
			snprintf(rh, sizeof(rh), "%.4f", ratio(r->ref.hit_blocks, r->ref.blocks));
			snprintf(rd, sizeof(rd), "%.4f/%.4f",
				 ratio(r->ref.hit_tier[0], r->ref.blocks),
				 ratio(r->ref.hit_tier[1], r->ref.blocks));
		}
		printf("  %-6s %-6s %-7s %-7.4f %-7.4f %-7.4f %-13s %-13s %.2f\n",
		       hier_tr_confs[i].evict, hier_tr_confs[i].admit, hier_tr_confs[i].write,
		       ratio(r->hit_blocks, r->blocks), ratio(r->hit_tier[0], r->blocks),
		       ratio(r->hit_tier[1], r->blocks), rh, rd, r->wall_s);
	}
	printf("\n  bytes moved (GiB; read = bytes_out, written = bytes_in) and counters\n");
	printf("  %-6s %-6s %-7s %-8s %-8s %-8s %-8s %-8s %-8s %-8s %-8s %-8s\n", "dram",
	       "nvme", "write", "dram rd", "dram wr", "nvme rd", "nvme wr", "promot",
	       "demot", "adm rej", "dram ev", "nvme ev");
	for (int i = 0; i < b->n_tr; i++) {
		const struct hier_tr_result *r = &b->tr[i];
		const double g = 1024.0 * 1024 * 1024;

		printf("  %-6s %-6s %-7s %-8.2f %-8.2f %-8.2f %-8.2f %-8llu %-8llu %-8llu "
		       "%-8llu %-8llu\n",
		       hier_tr_confs[i].evict, hier_tr_confs[i].admit, hier_tr_confs[i].write,
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
		const struct hier_tr_result *r = &b->tr[i];

		if (r->lookup_vs_get_mismatch || r->puts_fail || !r->settled)
			printf("  note %s/%s/%s: %llu prefix hits missed by the get that "
			       "followed, %llu puts refused (full)%s\n",
			       hier_tr_confs[i].evict, hier_tr_confs[i].admit, hier_tr_confs[i].write,
			       (unsigned long long)r->lookup_vs_get_mismatch,
			       (unsigned long long)r->puts_fail,
			       r->settled ? "" : ", still moving after 30 s");
	}
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

static void print_json(const struct hier_bench *b)
{
	printf("{\"bench\":\"hierarchy\",\"version\":\"%s\",\"rounds\":%d,\"quick\":%s,"
	       "\"gbps\":\"1e9 payload bytes/s\",",
	       KVT_VERSION_STRING, b->rounds, b->quick ? "true" : "false");
	bench_json_str("dir", b->base);
	printf(",\"free_bytes\":%llu,\n\"promotion\":{", (unsigned long long)b->free_bytes);
	printf("\"bound\":\"nvme_read: NVMe-only store, kvt_get_async + verify, %d "
	       "outstanding\",\"subjects\":{\"prefetch_1\":\"one kvt_prefetch op with all "
	       "keys\",\"prefetch_16\":\"16 kvt_prefetch ops of contiguous slices at "
	       "once\"},\"workers\":16,\"nvme_queue_depth\":16,\"dram_page_size\":65536,"
	       "\"skipped\":",
	       HIER_IN_FLIGHT);
	if (b->promo_skipped)
		printf("\"%s\"", b->promo_skipped);
	else
		printf("null");
	printf(",\"scaled\":%s,\"results\":[", b->promo_scaled ? "true" : "false");
	for (int i = 0; !b->promo_skipped && i < b->n_promo; i++) {
		const struct hier_promo *p = &b->promo[i];

		printf("%s{\"model\":\"%s\",\"chunk_bytes\":%llu,\"chunks\":%ld,"
		       "\"total_bytes\":%llu,",
		       i ? ",\n" : "\n", p->model, (unsigned long long)p->chunk_bytes,
		       p->chunks, (unsigned long long)(p->chunk_bytes * (uint64_t)p->chunks));
		bench_json_summary("nvme_read_gbps", bench_summarize(p->gbps[0], b->rounds));
		for (int m = 1; m < HIER_N_SUBJ; m++) {
			struct summary r = hier_promo_ratio(p, m, b->rounds);
			char nm[64];

			printf(",\"%s\":{", hier_meas_names[m]);
			bench_json_summary("subject_gbps",
					   bench_summarize(p->gbps[m], b->rounds));
			printf(",\"ratio_vs_nvme_read\":%.6g,", r.median);
			bench_json_summary("ratio_range", r);
			printf(",\"target\":%.6g,\"better\":\"higher\",\"pass\":%s}",
			       HIER_TARGET_VS_NVME, r.median >= HIER_TARGET_VS_NVME ? "true" : "false");
			(void)nm;
		}
		printf("}");
	}
	printf("]},\n\"replay\":{");
	bench_json_str("trace", b->trace);
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
	       HIER_TR_PAYLOAD, HIER_TR_IMAGE, (unsigned long long)b->tr_nreq,
	       (unsigned long long)b->tr_blocks, (unsigned long long)b->tr_ids);
	for (int i = 0; i < b->n_tr; i++) {
		const struct hier_tr_result *r = &b->tr[i];

		printf("%s{\"dram_eviction\":\"%s\",\"nvme_admission\":\"%s\","
		       "\"nvme_write\":\"%s\",\"blocks\":%llu,\"hit_blocks\":%llu,"
		       "\"hit_ratio\":%.6g,",
		       i ? ",\n" : "\n", hier_tr_confs[i].evict, hier_tr_confs[i].admit,
		       hier_tr_confs[i].write, (unsigned long long)r->blocks,
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
		"usage: kvtier-bench hierarchy [--json] [--quick] [--dir DIR] [--trace PATH]\n"
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
		"                conversation_trace.jsonl, which the build copies into\n"
		"                bench-data/traces next to this program)\n"
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
	struct hier_bench *b = calloc(1, sizeof(*b));
	const char *parent = "/var/tmp", *trace = NULL;
	int ret = 1;

	if (!b)
		return bench_fail(HIER_CMD, "setup", KVT_ENOMEM);
	struct bench_opts o = { .dir = parent };
	for (int i = 1; i < argc; i++) {
		int r = bench_common_opt(HIER_CMD, argc, argv, &i, &o, usage);
		if (r < 0) {
			free(b);
			return r == -2 ? 0 : 2;
		}
		if (r)
			continue;
		if (!strcmp(argv[i], "--trace") && i + 1 < argc) {
			trace = argv[++i];
		} else if (!strncmp(argv[i], "--trace=", 8) && argv[i][8]) {
			trace = argv[i] + 8;
		} else {
			free(b);
			return bench_unknown_opt(HIER_CMD, argv[i], usage);
		}
	}
	b->json = o.json;
	b->quick = o.quick;
	parent = o.dir;
	b->rounds = b->quick ? 2 : HIER_MAX_ROUNDS;
	if ((ret = bench_scratch_dir(HIER_CMD, parent, "hier", b->base, sizeof(b->base)))) {
		free(b);
		return ret;
	}
	ret = 1;
	b->base_made = 1;
	bench_spread_dir(b->base);
	if (hier_free_space(b))
		goto out;
	if (!b->json)
		fprintf(stderr, "kvtier-bench " HIER_CMD ": working in %s\n", b->base);
	if (hier_promotion(b))
		goto out;
	if (hier_replay(b, trace))
		goto out;
	ret = 0;
	if (b->json)
		print_json(b);
	else
		print_table(b);
out:
	if (b->base_made && bench_remove_tree(b->base))
		fprintf(stderr, "kvtier-bench " HIER_CMD ": could not remove all of %s\n", b->base);
	free(b);
	return ret;
}
