/*
 * test_plan.c — the planner's simulator against policy/replay.c (the one
 * definition of what a cache would have hit), the trace readers and the
 * cost model.
 */
#include <math.h>

#include "plan/cost.h"
#include "plan/plan.h"
#include "test.h"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	if (b)
		b[n] = 0;
	*len = (size_t)n;
	return b;
}

/* One node, local tiers only == kvt_replay_run exclusive; one node, T0 +
 * shared == kvt_replay_run inclusive. */
static void same_as_replay(const struct plan_trace *pt, enum kvt_evict_kind kind, uint64_t c0,
			   uint64_t c1, uint32_t rules, int shared)
{
	struct kvt_admit_conf ad = {.rules = rules, .seen_n = 2, .min_prefix = 2};
	struct kvt_replay_conf rc = {.ntiers = c1 ? 2 : 1,
				     .mode = shared ? KVT_REPLAY_INCLUSIVE : KVT_REPLAY_EXCLUSIVE};
	rc.tier[0].kind = kind;
	rc.tier[0].capacity = c0;
	rc.tier[1].kind = kind;
	rc.tier[1].capacity = c1;
	rc.tier[1].admit = ad;
	struct plan_conf pc = {.kind = kind, .nodes = 1};
	pc.tier[PLAN_T0].capacity = c0;
	unsigned lower = shared ? PLAN_TS : PLAN_T1;
	pc.tier[lower].capacity = c1;
	pc.tier[lower].admit = ad;
	struct kvt_replay_result rr;
	struct plan_result pr;
	CHECK_EQ(kvt_replay_run(&pt->t, &rc, &rr), 0);
	CHECK_EQ(plan_sim_run(pt, &pc, &pr, NULL), 0);
	CHECK_EQ(pr.hit_blocks, rr.hit_blocks);
	CHECK_EQ(pr.blocks, rr.blocks);
	CHECK_EQ(pr.hit_tier[0], rr.hit_tier[0]);
	CHECK_EQ(pr.hit_tier[lower], rr.hit_tier[1]);
	CHECK_EQ(pr.inserts[0], rr.inserts[0]);
	CHECK_EQ(pr.inserts[lower], rr.inserts[1]);
	CHECK_EQ(pr.rejects[lower], rr.rejects[1]);
	CHECK_EQ(pr.promotions, rr.promotions);
	if (!shared)
		CHECK_EQ(pr.demotions, rr.demotions);
}

static void readers(void)
{
	/* Bailian: seconds, 16-token blocks by default. */
	const char *bl =
		"{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 10.5, \"input_length\": 40, "
		"\"output_length\": 7, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [1, 2, 3]}\n"
		"{\"chat_id\": 2, \"parent_chat_id\": 1, \"timestamp\": 12.0, \"input_length\": 70, "
		"\"output_length\": 9, \"type\": \"text\", \"turn\": 2, \"hash_ids\": [1, 2, 3, 4, 5]}\n";
	struct plan_trace pt;
	CHECK_EQ(plan_trace_parse(bl, strlen(bl), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.fmt, PLAN_FMT_BAILIAN);
	CHECK_EQ(pt.block_tokens, 16);
	CHECK_EQ(pt.t.nreq, 2);
	CHECK_EQ(pt.t.nids, 5);
	CHECK_EQ(pt.in_len[1], 70);
	CHECK_EQ(pt.out_len[0], 7);
	CHECK(fabs(pt.arrive_s[1] - 1.5) < 1e-9);
	struct plan_conf pc = {.kind = KVT_EVICT_LRU, .nodes = 1};
	pc.tier[0].capacity = PLAN_UNBOUNDED;
	struct plan_result r;
	CHECK_EQ(plan_sim_run(&pt, &pc, &r, NULL), 0);
	CHECK_EQ(r.hit_blocks, 3);
	CHECK_EQ(r.hit_tokens, 48);
	plan_trace_free(&pt);

	/* --limit keeps the first requests. */
	CHECK_EQ(plan_trace_parse(bl, strlen(bl), PLAN_FMT_AUTO, 0, 1, &pt), 0);
	CHECK_EQ(pt.t.nreq, 1);
	plan_trace_free(&pt);

	/* Mooncake: milliseconds. */
	const char *mc = "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [7, 8]}\n"
			 "{\"timestamp\": 3500, \"input_length\": 1100, \"output_length\": 3, \"hash_ids\": [7, 8, 9]}\n";
	CHECK_EQ(plan_trace_parse(mc, strlen(mc), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.fmt, PLAN_FMT_MOONCAKE);
	CHECK_EQ(pt.block_tokens, 512);
	CHECK(fabs(pt.arrive_s[1] - 2.5) < 1e-9);
	CHECK_EQ(plan_sim_run(&pt, &pc, &r, NULL), 0);
	CHECK_EQ(r.hit_blocks, 2);
	CHECK_EQ(r.hit_tokens, 1024);
	plan_trace_free(&pt);

	/* Token ids, chained with kvtier's own key: prompts sharing the first
	 * 4 tokens share the first block (block_tokens 4), then diverge; the
	 * partial tail is not keyed. */
	const char *tk = "1 2 3 4 5 6 7 8 9\n[1, 2, 3, 4, 5, 6, 7, 9]\n1,2,3,4,5,6,7,8,10,11,12,13\n";
	CHECK_EQ(plan_trace_parse(tk, strlen(tk), PLAN_FMT_AUTO, 4, 0, &pt), 0);
	CHECK_EQ(pt.fmt, PLAN_FMT_TOKENS);
	CHECK_EQ(pt.t.nreq, 3);
	CHECK_EQ(pt.t.nblocks, 2 + 2 + 3);
	CHECK_EQ(pt.t.nids, 4);
	CHECK_EQ(pt.in_len[2], 12);
	CHECK_EQ(plan_sim_run(&pt, &pc, &r, NULL), 0);
	CHECK_EQ(r.hit_blocks, 1 + 2);
	plan_trace_free(&pt);

	const char *badtk = "1 2 x\n";
	CHECK_EQ(plan_trace_parse(badtk, strlen(badtk), PLAN_FMT_TOKENS, 4, 0, &pt), KVT_EMALFORMED);
}

static void cost(void)
{
	const struct plan_model *m = plan_model_find("Llama-3.1-8B");
	const struct plan_gpu *g = plan_gpu_find("H100");
	CHECK(m && g && plan_model_find("qwen2.5-72b") && plan_gpu_find("Trainium2"));
	if (!m || !g)
		return;
	CHECK_EQ((long long)plan_kv_bytes_per_token(m), 131072); /* DESIGN.md: 128 KiB */
	double t = plan_prefill_s(m, g, 0, 1000);
	double want = (2 * 8.03e9 * 1000 + 2.0 * 32 * 4096 * 1e6) / (989e12 * 0.5);
	CHECK(fabs(t - want) < 1e-12);
	CHECK(plan_prefill_s(m, g, 500, 1000) < t);
	CHECK(plan_prefill_s(m, g, 1000, 1000) == 0);
	const struct plan_tier_cost *d = plan_tier_find("dram");
	CHECK(d && fabs(plan_load_s(d, 25e9) - (1 + 5e-6)) < 1e-9);
	CHECK(plan_load_s(d, 0) == 0);
}

int main(void)
{
	readers();
	cost();
	const char *data = getenv("KVT_TEST_DATA");
	char path[4096];
	snprintf(path, sizeof(path), "%s/../../../shared/traces/conversation_trace.jsonl",
		 data ? data : "tests/data");
	size_t len;
	char *buf = slurp(path, &len);
	if (!buf) {
		fprintf(stderr, "test_plan: %s absent: trace checks skipped\n", path);
		TEST_DONE();
	}
	struct plan_trace pt;
	CHECK_EQ(plan_trace_parse(buf, len, PLAN_FMT_AUTO, 0, 0, &pt), 0);
	free(buf);
	CHECK_EQ(pt.t.nreq, 12031);
	CHECK_EQ(pt.t.nblocks, 288500);

	/* The numbers, to the block. */
	static const uint64_t caps[] = {1000, 5000, 20000, PLAN_UNBOUNDED};
	static const uint64_t want[] = {12831, 31840, 82939, 105710};
	for (int i = 0; i < 4; i++) {
		struct plan_conf pc = {.kind = KVT_EVICT_LRU, .nodes = 1};
		pc.tier[0].capacity = caps[i];
		struct plan_result r;
		CHECK_EQ(plan_sim_run(&pt, &pc, &r, NULL), 0);
		CHECK_EQ(r.hit_blocks, want[i]);
	}

	/* Same answers as policy/replay.c, both policies, with and without
	 * admission, exclusive and inclusive. */
	for (int k = KVT_EVICT_LRU; k <= KVT_EVICT_S3FIFO; k++) {
		same_as_replay(&pt, (enum kvt_evict_kind)k, 3000, 0, 0, 0);
		same_as_replay(&pt, (enum kvt_evict_kind)k, 1000, 8000, 0, 0);
		same_as_replay(&pt, (enum kvt_evict_kind)k, 1000, 8000, KVT_ADMIT_SEEN, 0);
		same_as_replay(&pt, (enum kvt_evict_kind)k, 1000, 8000, KVT_ADMIT_TINYLFU, 0);
		same_as_replay(&pt, (enum kvt_evict_kind)k, 2000, 10000, KVT_ADMIT_PREFIX, 0);
		same_as_replay(&pt, (enum kvt_evict_kind)k, 1000, 8000, 0, 1);
		same_as_replay(&pt, (enum kvt_evict_kind)k, 1000, 8000, KVT_ADMIT_SEEN, 1);
	}

	/* A fleet: per-node caches split the reuse; a shared tier wins it back;
	 * affinity routing keeps conversations together (at 10,000 blocks a
	 * node; at 2,000 it loses to round-robin: with no load balancing the
	 * nodes holding hot prefixes get more than their share and thrash). */
	struct plan_conf f = {.kind = KVT_EVICT_LRU, .nodes = 4};
	f.tier[0].capacity = 10000;
	struct plan_result rr, aff, sh, one;
	CHECK_EQ(plan_sim_run(&pt, &f, &rr, NULL), 0);
	f.route = PLAN_ROUTE_AFFINITY;
	CHECK_EQ(plan_sim_run(&pt, &f, &aff, NULL), 0);
	f.route = PLAN_ROUTE_RR;
	f.tier[PLAN_TS].capacity = PLAN_UNBOUNDED;
	CHECK_EQ(plan_sim_run(&pt, &f, &sh, NULL), 0);
	struct plan_conf u = {.kind = KVT_EVICT_LRU, .nodes = 1};
	u.tier[0].capacity = PLAN_UNBOUNDED;
	CHECK_EQ(plan_sim_run(&pt, &u, &one, NULL), 0);
	CHECK(aff.hit_blocks > rr.hit_blocks);
	CHECK(sh.hit_blocks > aff.hit_blocks);
	CHECK_EQ(sh.hit_blocks, one.hit_blocks); /* an unbounded shared tier = one global cache */
	fprintf(stderr, "fleet of 4 x 10000 blocks: rr %llu, affinity %llu, + shared %llu hit blocks\n",
		(unsigned long long)rr.hit_blocks, (unsigned long long)aff.hit_blocks,
		(unsigned long long)sh.hit_blocks);
	plan_trace_free(&pt);
	TEST_DONE();
}
