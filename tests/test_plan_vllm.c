/*
 * test_plan_vllm.c — traces out of vLLM's KV-cache events
 * (plan/vllm_events.c through plan_trace_parse): requests rebuilt from
 * BlockStored chains, continuations (chunked prefill, decode) folded into
 * their request, a new turn after a pause, the array form, string hashes,
 * and every wrong line named.
 */
#include "plan/plan.h"
#include "plan/trace.h"
#include "test.h"

#define EV(ts, hashes, parent, bs)                                                          \
	"{\"ts\": " ts ", \"events\": [{\"type\": \"BlockStored\", \"block_hashes\": " hashes \
	", \"parent_block_hash\": " parent ", \"token_ids\": [], \"block_size\": " bs         \
	", \"lora_id\": null, \"medium\": \"GPU\", \"lora_name\": null}], \"data_parallel_rank\": 0}\n"

static void parse_ok(const char *s, enum plan_fmt fmt, uint32_t bt, struct plan_trace *pt)
{
	CHECK_EQ(plan_trace_parse(s, strlen(s), fmt, bt, 0, pt), 0);
}

static void requests(void)
{
	/* Request 1: blocks 11 12 13.  Request 2 shares 11 12 (its parent is
	 * 12) and adds 21 22; then its prefill's next chunk (23 24) and one
	 * block its decode filled (25).  Ten seconds later a new turn
	 * continues after 25.  The GPU's evictions are read past. */
	const char *s = EV("1700000000.0", "[11, 12, 13]", "null", "2")
		EV("1700000000.5", "[21, 22]", "12", "2")
		EV("1700000000.6", "[23, 24]", "22", "2")
		"{\"ts\": 1700000000.7, \"events\": [{\"type\": \"BlockRemoved\", \"block_hashes\": [13], \"medium\": \"GPU\"}, "
		"{\"type\": \"AllBlocksCleared\"}]}\n"
		EV("1700000000.9", "[25]", "24", "2")
		EV("1700000011.0", "[26, 27]", "25", "2");
	struct plan_trace pt;
	parse_ok(s, PLAN_FMT_AUTO, 0, &pt);
	CHECK_EQ(pt.fmt, PLAN_FMT_VLLM);
	CHECK_EQ(pt.block_tokens, 2);
	CHECK_EQ(pt.t.nreq, 3);
	if (pt.t.nreq == 3) {
		CHECK_EQ(pt.t.off[1] - pt.t.off[0], 3);
		CHECK_EQ(pt.t.off[2] - pt.t.off[1], 6);  /* 11 12 21 22 23 24 */
		CHECK_EQ(pt.t.off[3] - pt.t.off[2], 9);  /* ... 25 26 27 */
		CHECK_EQ(pt.in_len[0], 6);
		CHECK_EQ(pt.in_len[1], 12);
		CHECK_EQ(pt.out_len[1], 2);              /* the decode's block */
		CHECK_EQ(pt.in_len[2], 18);
		CHECK(pt.arrive_s[0] == 0 && pt.arrive_s[1] == 0.5 && pt.arrive_s[2] == 11.0);
		/* Dense ids in order of first appearance: 11 12 13 21 22 23 24 25 26 27. */
		const uint32_t want[] = { 0, 1, 2, 0, 1, 3, 4, 5, 6, 0, 1, 3, 4, 5, 6, 7, 8, 9 };
		for (unsigned i = 0; i < 18; i++)
			CHECK_EQ(pt.t.ids[i], want[i]);
		/* Simulated: request 2 hits 11 12; request 3 all but 25 (never
		 * read: a decode's block) and its own two. */
		struct plan_conf c = {.kind = KVT_EVICT_LRU, .nodes = 1};
		c.tier[0].capacity = PLAN_UNBOUNDED;
		struct plan_result r;
		CHECK_EQ(plan_sim_run(&pt, &c, &r, NULL), 0);
		CHECK_EQ(r.hit_blocks, 2 + 6);
	}
	plan_trace_free(&pt);

	/* msgspec's array form of the same kind of batch, signed and string
	 * hashes, one event a line with its own ts; --limit. */
	const char *a = "[100.0, [[\"BlockStored\", [-5, 7], null, [1, 2], 1, null, \"GPU\", null]], 0]\n"
			"{\"type\": \"BlockStored\", \"ts\": 200.0, \"block_hashes\": [\"qUu3zQ==\"], "
			"\"parent_block_hash\": 7, \"token_ids\": [3], \"block_size\": 1}\n"
			"[300.0, [[\"BlockStored\", [5], null, [1], 1, null, \"GPU\", null]], 0]\n";
	parse_ok(a, PLAN_FMT_VLLM, 0, &pt);
	CHECK_EQ(pt.t.nreq, 3);
	CHECK_EQ(pt.t.nids, 4); /* -5, 7, the string, 5: -5 is not 5 */
	CHECK_EQ(pt.t.off[2] - pt.t.off[1], 3);
	plan_trace_free(&pt);
	CHECK_EQ(plan_trace_parse(a, strlen(a), PLAN_FMT_VLLM, 1, 2, &pt), 0);
	CHECK_EQ(pt.t.nreq, 2);
	plan_trace_free(&pt);
}

static void refused(const char *s, uint32_t bt, const char *want)
{
	struct plan_trace pt;
	CHECK_EQ(plan_trace_parse(s, strlen(s), PLAN_FMT_VLLM, bt, 0, &pt), KVT_EINVAL);
	if (!strstr(kvt_errmsg(), want)) {
		fprintf(stderr, "message \"%s\" lacks \"%s\"\n", kvt_errmsg(), want);
		CHECK(0);
	}
}

static void wrong(void)
{
	refused(EV("5", "[1]", "null", "16") EV("4", "[2]", "1", "16"),
		0, "trace:2: ts: 4 is earlier than the line before's 5");
	refused(EV("5", "[1]", "null", "16") EV("6", "[2]", "1", "32"),
		0, "trace:2: event 1: block_size 32, but the trace's blocks are 16 tokens");
	refused(EV("5", "[1]", "null", "16"), 32, "trace:1: event 1: block_size 16, but the trace's blocks are 32");
	refused("{\"ts\": 1, \"events\": [{\"type\": \"Mystery\"}]}\n", 0,
		"trace:1: event 1: type \"Mystery\": expected BlockStored, BlockRemoved or AllBlocksCleared");
	refused(EV("5", "[1, 2.5]", "null", "16"), 0, "trace:1: event 1: block_hashes[1]: expected an integer");
	refused(EV("5", "[1]", "true", "16"), 0, "trace:1: event 1: parent_block_hash[0]: expected an integer");
	refused(EV("5", "[1]", "null", "0"), 0, "trace:1: event 1: block_size: expected a whole number 1..1048576");
	refused(EV("-1", "[1]", "null", "16"), 0, "trace:1: ts: expected seconds 0..1e10");
	refused("{\"ts\": 1, \"events\": [{\"type\": \"BlockStored\", \"block_size\": 4}]}\n", 0,
		"trace:1: event 1: BlockStored without a block_hashes array");
	refused("{\"ts\": 1, \"events\": [3]}\n", 0, "trace:1: event 1: expected an object or an array");
	refused("{\"ts\": 1, \"events\": {}}\n", 0, "trace:1: expected a batch");
	refused("{\"ts\": 1, \"events\": [}\n", 0, "trace:1: not JSON");
	refused("{\"ts\": 1, \"ts\": 2, \"events\": []}\n", 0, "trace:1: not JSON: duplicate object key");
	refused(EV("5", "[7]", "7", "16"), 0, "trace:1: event 1: parent_block_hash: its chain of parents is a cycle");
	refused(EV("5", "[1]", "null", "16") EV("6", "[2]", "1", "16") EV("7", "[1]", "2", "16")
		EV("20", "[3]", "1", "16"), 0, "trace:4: event 1: parent_block_hash: its chain of parents is a cycle");
	/* Only evictions: no request to plan from. */
	refused("{\"ts\": 1, \"events\": [{\"type\": \"AllBlocksCleared\"}]}\n", 0, "no requests");
}

int main(void)
{
	requests();
	wrong();
	TEST_DONE();
}
