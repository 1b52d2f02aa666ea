/*
 * policy_compare — replay a prefix-cache trace through every eviction policy
 * and admission rule at several capacities, and through a two-tier stack.
 *
 *   policy_compare [trace.jsonl]   (default tests/data/traces/conversation_trace.jsonl)
 *
 * Prints block-weighted prefix hit ratios and insertions (the proxy for
 * bytes written to a tier).  Reads the trace with the planner's reader
 * (plan/trace.h) and replays it with src/policy/replay.c, the same replay
 * the tests check against the reference numbers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "plan/trace.h"
#include "policy/replay.h"

struct rule {
	const char *name;
	struct kvt_admit_conf conf;
};

static struct rule rules[] = {
	{"always", {.rules = 0}},
	{"seen>=2", {.rules = KVT_ADMIT_SEEN, .seen_n = 2, .doorkeeper = 1, .sketch_width = 1 << 17}},
	{"prefix>=2", {.rules = KVT_ADMIT_PREFIX, .min_prefix = 2}},
	{"prefix>=8", {.rules = KVT_ADMIT_PREFIX, .min_prefix = 8}},
	{"tinylfu", {.rules = KVT_ADMIT_TINYLFU, .doorkeeper = 1, .sketch_width = 1 << 17}},
};

static const char *kname(enum kvt_evict_kind k)
{
	return k == KVT_EVICT_LRU ? "lru" : "s3fifo";
}

static int run(const struct kvt_trace *t, struct kvt_replay_conf *c, struct kvt_replay_result *r)
{
	int rc = kvt_replay_run(t, c, r);
	if (rc)
		fprintf(stderr, "replay failed: %d\n", rc);
	return rc;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "tests/data/traces/conversation_trace.jsonl";
	struct plan_trace pt;
	if (plan_trace_read(path, PLAN_FMT_AUTO, 0, 0, &pt)) {
		fprintf(stderr, "policy_compare: %s\n", kvt_errmsg());
		return 1;
	}
	const struct kvt_trace t = pt.t;
	printf("trace: %llu requests, %llu block references, %llu distinct blocks\n\n",
	       (unsigned long long)t.nreq, (unsigned long long)t.nblocks,
	       (unsigned long long)t.nids);

	struct kvt_replay_conf c;
	struct kvt_replay_result r;
	memset(&c, 0, sizeof(c));
	c.ntiers = 1;
	c.tier[0].capacity = UINT64_MAX;
	c.tier[0].kind = KVT_EVICT_LRU;
	if (run(&t, &c, &r))
		return 1;
	printf("unbounded: hit %.4f (%llu blocks), inserts %llu\n\n",
	       (double)r.hit_blocks / r.blocks, (unsigned long long)r.hit_blocks,
	       (unsigned long long)r.inserts[0]);

	static const uint64_t caps[] = {1000, 2000, 5000, 10000, 20000, 50000};
	const unsigned ncaps = sizeof(caps) / sizeof(caps[0]);
	const unsigned nrules = sizeof(rules) / sizeof(rules[0]);
	printf("## One tier: prefix hit ratio / insertions (thousands of blocks)\n\n");
	printf("| policy | admission |");
	for (unsigned i = 0; i < ncaps; i++)
		printf(" %lluk |", (unsigned long long)caps[i] / 1000);
	printf("\n|---|---|");
	for (unsigned i = 0; i < ncaps; i++)
		printf("---|");
	printf("\n");
	for (int k = KVT_EVICT_LRU; k <= KVT_EVICT_S3FIFO; k++) {
		for (unsigned a = 0; a < nrules; a++) {
			printf("| %s | %s |", kname(k), rules[a].name);
			for (unsigned i = 0; i < ncaps; i++) {
				memset(&c, 0, sizeof(c));
				c.ntiers = 1;
				c.tier[0].kind = k;
				c.tier[0].capacity = caps[i];
				c.tier[0].admit = rules[a].conf;
				if (run(&t, &c, &r))
					return 1;
				printf(" %.3f / %.1f |", (double)r.hit_blocks / r.blocks,
				       r.inserts[0] / 1000.0);
			}
			printf("\n");
		}
	}

	/* Two tiers: DRAM-sized T0 (always admits: that is where computed KV
	 * lands) over an NVMe-sized T1 whose admission varies. */
	static const uint64_t pairs[][2] = {{1000, 10000}, {2000, 20000}, {5000, 50000}};
	for (int mode = KVT_REPLAY_EXCLUSIVE; mode <= KVT_REPLAY_INCLUSIVE; mode++) {
		printf("\n## Two tiers, %s: T0 over T1 (same policy in both)\n\n",
		       mode == KVT_REPLAY_EXCLUSIVE ? "exclusive (victims demoted)"
						    : "inclusive (write-through)");
		printf("| T0/T1 | policy | T1 admission | hit | from T0 | from T1 | T0 writes | T1 writes |\n");
		printf("|---|---|---|---|---|---|---|---|\n");
		for (unsigned p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
			for (int k = KVT_EVICT_LRU; k <= KVT_EVICT_S3FIFO; k++)
				for (unsigned a = 0; a < nrules; a++) {
					memset(&c, 0, sizeof(c));
					c.ntiers = 2;
					c.mode = mode;
					c.tier[0].kind = k;
					c.tier[0].capacity = pairs[p][0];
					c.tier[1].kind = k;
					c.tier[1].capacity = pairs[p][1];
					c.tier[1].admit = rules[a].conf;
					if (run(&t, &c, &r))
						return 1;
					printf("| %lluk/%lluk | %s | %s | %.3f | %.3f | %.3f | %llu | %llu |\n",
					       (unsigned long long)pairs[p][0] / 1000,
					       (unsigned long long)pairs[p][1] / 1000, kname(k),
					       rules[a].name, (double)r.hit_blocks / r.blocks,
					       (double)r.hit_tier[0] / r.blocks,
					       (double)r.hit_tier[1] / r.blocks,
					       (unsigned long long)r.inserts[0],
					       (unsigned long long)r.inserts[1]);
				}
	}
	plan_trace_free(&pt);
	return 0;
}
