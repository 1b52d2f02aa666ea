/*
 * test_plan.c — the planner's simulator against policy/replay.c (the one
 * definition of what a cache would have hit), the trace readers and the
 * cost model.
 */
#include <errno.h>
#include <math.h>
#include <unistd.h>

#include "plan/cost.h"
#include "plan/plan.h"
#include "test.h"
#include "test_data.h"
#include "kvtier/plan.h"

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

	/* A wrong token log is a wrong argument naming its line, not a
	 * "malformed object header" (KVT_EMALFORMED). */
	const char *badtk = "1 2 3 4\n1 2 x\n";
	CHECK_EQ(plan_trace_parse(badtk, strlen(badtk), PLAN_FMT_TOKENS, 4, 0, &pt), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "trace:2: 'x' is not a token id") != NULL);
}

/* The trace `t` is refused with KVT_EINVAL and a message holding `want`. */
static void refused(const char *t, enum plan_fmt fmt, const char *want)
{
	struct plan_trace pt;
	int rc = plan_trace_parse(t, strlen(t), fmt, 0, 0, &pt);
	CHECK_EQ(rc, KVT_EINVAL);
	if (rc == 0)
		plan_trace_free(&pt);
	if (!strstr(kvt_errmsg(), want)) {
		fprintf(stderr, "trace \"%.60s\": error \"%s\" lacks \"%s\"\n", t, kvt_errmsg(),
			want);
		test_failures++;
	}
}

/* The canonical records are read by the fast path, the rest by jansson,
 * and either way a record is its fields, never text inside a string. */
static void fast_path(void)
{
	struct plan_trace pt;

	/* The canonical shape: all by the fast path, the same fields. */
	const char *mc = "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [7, 8]}\n"
			 "{\"timestamp\": 1.5e3, \"input_length\": 1100, \"output_length\": 4, \"hash_ids\": [7, 8, 9]}\n";
	CHECK_EQ(plan_trace_parse(mc, strlen(mc), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.nrec_fast, 2);
	CHECK_EQ(pt.nrec_json, 0);
	CHECK_EQ(pt.fmt, PLAN_FMT_MOONCAKE);
	CHECK_EQ(pt.t.nblocks, 5);
	CHECK_EQ(pt.t.nids, 3);
	CHECK_EQ(pt.in_len[1], 1100);
	CHECK_EQ(pt.out_len[1], 4);
	CHECK(fabs(pt.arrive_s[1] - 0.5) < 1e-9);
	plan_trace_free(&pt);

	/* Bailian's too: a negative parent, a string, a real timestamp. */
	const char *bl =
		"{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 10.5, \"input_length\": 40, "
		"\"output_length\": 7, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [1, 2, 3]}\n"
		"{\"chat_id\": 2, \"parent_chat_id\": 1, \"timestamp\": 12.0, \"input_length\": 70, "
		"\"output_length\": 9, \"type\": \"text\", \"turn\": 2, \"hash_ids\": [1, 2, 3, 4, 5]}\n";
	CHECK_EQ(plan_trace_parse(bl, strlen(bl), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.nrec_fast, 2);
	CHECK_EQ(pt.fmt, PLAN_FMT_BAILIAN);
	CHECK_EQ(pt.block_tokens, 16);
	CHECK(fabs(pt.arrive_s[1] - 1.5) < 1e-9);
	plan_trace_free(&pt);

	/* A "hash_ids": [1,2] inside a string value (after an escaped quote
	 * and an escaped backslash) is text: the record's ids are its field's. */
	const char *str = "{\"note\": \"say \\\"hash_ids\\\": [1,2] \\\\\", \"hash_ids\": [5, 6, 7], "
			  "\"tag\": \"\\\\\\\"hash_ids\\\": [9]\"}\n";
	CHECK_EQ(plan_trace_parse(str, strlen(str), PLAN_FMT_MOONCAKE, 0, 0, &pt), 0);
	CHECK_EQ(pt.nrec_fast, 1);
	CHECK_EQ(pt.t.nblocks, 3);
	CHECK_EQ(pt.t.nids, 3);
	plan_trace_free(&pt);
	refused("{\"note\": \"\\\"hash_ids\\\": [1, 2]\"}\n", PLAN_FMT_MOONCAKE,
		"trace:1: no \"hash_ids\" field");

	/* An escaped key is jansson's to read, and it reads the field. */
	const char *esc = "{\"time\\u0073tamp\": 2000, \"hash\\u005fids\": [1, 2], \"input_length\": 1024}\n"
			  "{\"timestamp\": 3000, \"hash_ids\": [1, 2, 3], \"ok\": true}\n"
			  "{\"timestamp\": 4000, \"hash_ids\": [1, 2, 3, 4]}\n";
	CHECK_EQ(plan_trace_parse(esc, strlen(esc), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.nrec_json, 2);
	CHECK_EQ(pt.nrec_fast, 1);
	CHECK_EQ(pt.t.nreq, 3);
	CHECK_EQ(pt.t.nblocks, 2 + 3 + 4);
	CHECK_EQ(pt.in_len[0], 1024);
	CHECK(fabs(pt.arrive_s[1] - 1.0) < 1e-9);
	CHECK(fabs(pt.arrive_s[2] - 2.0) < 1e-9);
	plan_trace_free(&pt);

	/* What the fast path leaves keeps jansson's messages. */
	refused("{\"hash_ids\": [1, 2], \"hash_ids\": [3]}\n", PLAN_FMT_MOONCAKE,
		"trace:1: hash_ids: the field appears twice");
	refused("{\"hash_ids\": [1, 02]}\n", PLAN_FMT_MOONCAKE, "trace:1: hash_ids: element 2");
	refused("{\"hash_ids\": [1], \"input_length\": 1.5}\n", PLAN_FMT_MOONCAKE,
		"trace:1: input_length: 1.5 is not a token count");
	refused("{\"hash_ids\": [1]} x\n", PLAN_FMT_MOONCAKE, "trace:1: not valid JSON");
	refused("{\"hash_ids\": [1, -2]}\n", PLAN_FMT_MOONCAKE,
		"trace:1: hash_ids: element 2 is not a non-negative integer");
}

/* A trace long enough to be read by several threads: what it gives, and
 * which error it reports, are those of a line-by-line read. */
static void large(void)
{
	size_t cap = 1 << 20, len = 0;
	char *t = malloc(cap);
	struct plan_trace pt;

	CHECK(t != NULL);
	if (!t)
		return;
	for (int i = 1; i <= 5000; i++)
		len += (size_t)snprintf(t + len, cap - len,
					"{\"timestamp\": %d, \"hash_ids\": [%d, %d, %d]}\n%s", i, i % 7,
					i, i + 1, i % 100 ? "" : "\n");
	CHECK_EQ(plan_trace_parse(t, len, PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.t.nreq, 5000);
	CHECK_EQ(pt.t.nblocks, 15000);
	CHECK_EQ(pt.t.nids, 5002); /* 0..5001 */
	CHECK_EQ(pt.t.ids[3 * 4999 + 2], 5001); /* first seen last: the newest id */
	CHECK(fabs(pt.arrive_s[4999] - 4.999) < 1e-9);
	plan_trace_free(&pt);
	/* Two wrong lines far apart: the first is reported, by its number
	 * (blank lines counted); with --limit before it, none is. */
	char *a = strstr(t, "{\"timestamp\": 3000,");
	char *b = strstr(t, "{\"timestamp\": 4500,");
	CHECK(a && b);
	if (a && b) {
		memcpy(strchr(a, '[') + 1, "x", 1);
		memcpy(b + 1, "\"", 1);
		refused(t, PLAN_FMT_AUTO, "trace:3029: hash_ids: element 1 is not");
		CHECK_EQ(plan_trace_parse(t, len, PLAN_FMT_AUTO, 0, 2999, &pt), 0);
		CHECK_EQ(pt.t.nreq, 2999);
		plan_trace_free(&pt);
	}
	free(t);
}

/* What a trace may hold, and the errors that name file, line and field. */
static void inputs(void)
{
	struct plan_trace pt;

	/* Ids use all 64 bits; one more is refused instead of wrapping. */
	const char *big = "{\"hash_ids\": [18446744073709551615, 0]}\n{\"hash_ids\": [0]}\n";
	CHECK_EQ(plan_trace_parse(big, strlen(big), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.t.nids, 2);
	CHECK_EQ(pt.in_len[0], 2 * 512); /* no input_length: whole blocks */
	plan_trace_free(&pt);
	refused("{\"hash_ids\": [1]}\n{\"hash_ids\": [18446744073709551616]}\n", PLAN_FMT_AUTO,
		"trace:2: hash_ids: element 1 exceeds 64 bits");
	refused("{\"hash_ids\": [1, -2]}\n", PLAN_FMT_AUTO, "trace:1: hash_ids: element 2 is not");
	refused("{\"hash_ids\": [1, 2.5]}\n", PLAN_FMT_AUTO, "hash_ids: element 2 is not");
	refused("{\"hash_ids\": [1, 2}\n", PLAN_FMT_AUTO, "hash_ids: element 2 is not");
	refused("{\"hash_ids\": 7}\n", PLAN_FMT_AUTO, "hash_ids: expected an array");
	refused("{\"hash_ids\": [1]}\n{\"timestamp\": 3}\n", PLAN_FMT_MOONCAKE,
		"trace:2: no \"hash_ids\" field");
	refused("{\"hash_ids\": [1]}\nnot json\n", PLAN_FMT_MOONCAKE, "trace:2: not a JSON object");

	/* Fields are taken by name from the parsed record: a string that
	 * holds "hash_ids": [...] is a string, escapes are decoded (a key
	 * may be spelled with them), and the order of fields is free. */
	const char *str = "{\"note\": \"\\\"hash_ids\\\": [1,2]\", \"input_length\": 1500, "
			  "\"hash_ids\": [7, 8, 9]}\n";
	CHECK_EQ(plan_trace_parse(str, strlen(str), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.t.nblocks, 3);
	CHECK_EQ(pt.in_len[0], 1500);
	plan_trace_free(&pt);
	const char *esc = "{\"note\": \"tab\\t quote\\\" slash\\\\ \\u00e9 \\ud83d\\ude00 }{\", "
			  "\"hash_\\u0069ds\": [1, 2], \"timestamp\": 5}\n"
			  "{\"timestamp\": 7, \"hash_ids\": [1, 2, 3, 4]}\n";
	CHECK_EQ(plan_trace_parse(esc, strlen(esc), PLAN_FMT_MOONCAKE, 0, 0, &pt), 0);
	CHECK_EQ(pt.t.nreq, 2);
	CHECK_EQ(pt.t.nblocks, 6);
	CHECK_EQ(pt.t.nids, 4);
	CHECK(fabs(pt.arrive_s[1] - 0.002) < 1e-12); /* milliseconds */
	plan_trace_free(&pt);
	/* Ids of 2^63 and more (past jansson's signed integers) come back
	 * whole: the same id on two lines is one block. */
	const char *high = "{\"hash_ids\": [9223372036854775808, 1, 18446744073709551615, "
			   "9223372036854775807]}\n{\"hash_ids\": [18446744073709551615, 1]}\n";
	CHECK_EQ(plan_trace_parse(high, strlen(high), PLAN_FMT_AUTO, 0, 0, &pt), 0);
	CHECK_EQ(pt.t.nids, 4);
	CHECK_EQ(pt.t.ids[4], pt.t.ids[2]);
	CHECK_EQ(pt.t.ids[5], pt.t.ids[1]);
	CHECK(pt.t.ids[0] != pt.t.ids[3]);
	plan_trace_free(&pt);
	/* A field named twice is ambiguous; a line that is not an object, or
	 * not only one, is not a record. */
	refused("{\"hash_ids\": [1], \"hash_ids\": [2]}\n", PLAN_FMT_AUTO,
		"trace:1: hash_ids: the field appears twice");
	refused("{\"hash_ids\": [1]}\n{\"timestamp\": 1, \"hash_ids\": [1], \"timestamp\": 2}\n",
		PLAN_FMT_MOONCAKE, "trace:2: timestamp: the field appears twice");
	refused("{\"hash_ids\": [1]}\n[1, 2]\n", PLAN_FMT_AUTO, "trace:2: not a JSON object");
	refused("{\"hash_ids\": [1]}\n\"text\"\n", PLAN_FMT_MOONCAKE, "trace:2: not a JSON object");
	refused("{\"hash_ids\": [1]} {\"hash_ids\": [2]}\n", PLAN_FMT_AUTO,
		"trace:1: not valid JSON: end of file expected");
	refused("{\"hash_ids\": [1], \"note\": \"unterminated}\n", PLAN_FMT_AUTO,
		"trace:1: not valid JSON");
	refused("{\"hash_ids\": [1, [2]]}\n", PLAN_FMT_AUTO, "hash_ids: element 2 is not");
	refused("{\"hash_ids\": [1], \"input_length\": null}\n", PLAN_FMT_AUTO,
		"input_length: \"null\" is not a number");

	/* Timestamps: finite, non-negative, bounded, in arrival order. */
	refused("{\"timestamp\": NaN, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"trace:1: timestamp: \"NaN\" is not a number");
	refused("{\"timestamp\": -1, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"timestamp: -1 is out of range");
	refused("{\"timestamp\": 1e400, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"timestamp: 1e400 is out of range");
	refused("{\"timestamp\": 1e14, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"timestamp: 100000000000000 is out of range 0..10000000000000 (milliseconds)");
	refused("{\"timestamp\": \"5\", \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"timestamp: \"\"5\"\" is not a number");
	refused("{\"timestamp\": 5, \"hash_ids\": [1]}\n{\"timestamp\": 4, \"hash_ids\": [1]}\n",
		PLAN_FMT_MOONCAKE, "trace:2: timestamp: 4 is before the previous request's 5");
	/* Lengths: whole token counts up to 2^30. */
	refused("{\"input_length\": -4, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"input_length: -4 is not a token count");
	refused("{\"input_length\": 12.5, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"input_length: 12.5 is not a token count");
	refused("{\"output_length\": 5e9, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"output_length: 5000000000 is not a token count");
	refused("{\"input_length\": 1e999, \"hash_ids\": [1]}\n", PLAN_FMT_MOONCAKE,
		"input_length: 1e999 is out of range");

	/* Nothing to plan from. */
	refused("", PLAN_FMT_AUTO, "trace: no requests");
	refused("\n  \n\t\n", PLAN_FMT_AUTO, "trace: no requests");
	refused("{\"hash_ids\": []}\n{\"hash_ids\": []}\n", PLAN_FMT_AUTO,
		"2 request(s) but not one whole block");
	refused("1 2 3\n", PLAN_FMT_TOKENS, "not one whole block of 256 tokens");
	/* Binary data and token ids past 32 bits. */
	static const char nul[] = "{\"hash_ids\": [1]}\n{\"hash\0_ids\": [1]}\n";
	CHECK_EQ(plan_trace_parse(nul, sizeof(nul) - 1, PLAN_FMT_AUTO, 0, 0, &pt), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "trace:2: a NUL byte") != NULL);
	refused("1 2 4294967296\n", PLAN_FMT_TOKENS, "trace:1: token 3: id exceeds 32 bits");

	/* A line longer than the bound, in memory and from a file. */
	size_t n = PLAN_TRACE_MAX_LINE + 10;
	char *l = malloc(n + 1);
	if (l) {
		memset(l, '7', n);
		l[n] = '\0';
		refused(l, PLAN_FMT_TOKENS, "trace:1: longer than 16 MiB");
		char path[] = "/tmp/kvt-trace-XXXXXX";
		int fd = mkstemp(path);
		if (fd >= 0) {
			CHECK(write(fd, "1 2\n", 4) == 4);
			CHECK(write(fd, l, n) == (ssize_t)n);
			close(fd);
			CHECK_EQ(plan_trace_read(path, PLAN_FMT_TOKENS, 1, 0, &pt), KVT_EINVAL);
			CHECK(strstr(kvt_errmsg(), ":2: longer than 16 MiB") != NULL);
			/* --limit reads no further than it needs. */
			CHECK_EQ(plan_trace_read(path, PLAN_FMT_TOKENS, 1, 1, &pt), 0);
			CHECK_EQ(pt.t.nreq, 1);
			CHECK_EQ(pt.t.nblocks, 2);
			plan_trace_free(&pt);
			unlink(path);
		}
		free(l);
	}

	/* Files: /dev/zero is refused on its first read, a directory by name;
	 * a file and the same bytes in memory give the same trace. */
	CHECK_EQ(plan_trace_read("/dev/zero", PLAN_FMT_AUTO, 0, 0, &pt), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "/dev/zero:1: a NUL byte") != NULL);
	CHECK_EQ(plan_trace_read("/tmp", PLAN_FMT_AUTO, 0, 0, &pt), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "/tmp: a directory") != NULL);
	CHECK(plan_trace_read("/nonexistent/t.jsonl", PLAN_FMT_AUTO, 0, 0, &pt) < 0);
	CHECK(strstr(kvt_errmsg(), "/nonexistent/t.jsonl") != NULL);
	const char *mc = "{\"timestamp\": 1000, \"input_length\": 600, \"hash_ids\": [7, 8]}\n"
			 "\n{\"timestamp\": 3500, \"input_length\": 1100, \"hash_ids\": [7, 8, 9]}";
	char path[] = "/tmp/kvt-trace-XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0) {
		CHECK(write(fd, mc, strlen(mc)) == (ssize_t)strlen(mc));
		close(fd);
		struct plan_trace a, b;
		CHECK_EQ(plan_trace_read(path, PLAN_FMT_AUTO, 0, 0, &a), 0);
		CHECK_EQ(plan_trace_parse(mc, strlen(mc), PLAN_FMT_AUTO, 0, 0, &b), 0);
		CHECK_EQ(a.t.nreq, 2);
		CHECK_EQ(a.t.nreq, b.t.nreq);
		CHECK_EQ(a.t.nblocks, b.t.nblocks);
		CHECK_EQ(a.in_len[1], 1100);
		CHECK(fabs(a.arrive_s[1] - 2.5) < 1e-9);
		plan_trace_free(&a);
		plan_trace_free(&b);
		unlink(path);
	}
}

/* Catalog values are numbers in a range, named when they are not. */
static void catalog(void)
{
	static const struct {
		const char *line, *want;
	} no[] = {
		{ "model M params=-1e9 layers=2 d_model=64 kv_heads=1 head_dim=64\n", "params=\"-1e9\"" },
		{ "model M params=1e9 layers=2.5 d_model=64 kv_heads=1 head_dim=64\n", "layers=\"2.5\": expected a whole number" },
		{ "model M params=1e400 layers=2 d_model=64 kv_heads=1 head_dim=64\n", "params=\"1e400\"" },
		{ "gpu G tflops=nan\n", "tflops=\"nan\"" },
		{ "gpu G tflops=100 mfu=0x1\n", "mfu=\"0x1\"" },
		{ "tier T gbps=1abc\n", "gbps=\"1abc\"" },
		{ "tier T gbps=1 latency_us=-5\n", "latency_us=\"-5\"" },
		{ "tier T gbps=1 color=red\n", "unknown setting \"color=red\"" },
	};
	char path[] = "/tmp/kvt-catalog-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0) {
		test_failures++;
		return;
	}
	close(fd);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		FILE *f = fopen(path, "w");
		if (!f)
			continue;
		fprintf(f, "# line 1\n%s", no[i].line);
		fclose(f);
		CHECK_EQ(plan_catalog_load(path), KVT_ECONFIG);
		if (!strstr(kvt_errmsg(), no[i].want) || !strstr(kvt_errmsg(), ":2:")) {
			fprintf(stderr, "catalog \"%s\": error \"%s\" lacks \"%s\"\n", no[i].line,
				kvt_errmsg(), no[i].want);
			test_failures++;
		}
	}
	FILE *f = fopen(path, "w");
	if (f) {
		fputs("gpu L4x tflops=121 mfu=0.4 usd_hour=0.8\n", f);
		fclose(f);
	}
	CHECK_EQ(plan_catalog_load(path), 0);
	const struct plan_gpu *g = plan_gpu_find("L4x");
	CHECK(g && fabs(g->mfu - 0.4) < 1e-12);
	unlink(path);
	CHECK_EQ(plan_catalog_load("/dev/zero"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "not a regular file") != NULL);
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

/* The public calls (kvtier.h) give what the planner's own do, and refuse
 * what is out of range with KVT_EINVAL naming it. */
static void api(const struct plan_trace *pt, const char *buf, size_t len)
{
	kvt_plan_trace *t = (kvt_plan_trace *)1;
	kvt_plan_trace_view v;

	CHECK_EQ(kvt_plan_trace_parse(buf, len, 7, 0, 0, &t), KVT_EINVAL);
	CHECK(t == NULL);
	CHECK(strstr(kvt_errmsg(), "trace format 7") != NULL);
	CHECK_EQ(kvt_plan_trace_read("/nonexistent/t.jsonl", KVT_PLAN_FMT_AUTO, 0, 0, &t), -ENOENT);
	CHECK(t == NULL);
	CHECK_EQ(kvt_plan_trace_parse(buf, len, KVT_PLAN_FMT_AUTO, 0, 0, &t), 0);
	if (!t)
		return;
	kvt_plan_trace_view_get(t, &v);
	CHECK_EQ(v.format, KVT_PLAN_FMT_MOONCAKE);
	CHECK_EQ(v.requests, pt->t.nreq);
	CHECK_EQ(v.blocks, pt->t.nblocks);
	CHECK_EQ(v.distinct_blocks, pt->t.nids);
	CHECK_EQ(v.off[v.requests], v.blocks);
	CHECK(memcmp(v.ids, pt->t.ids, v.blocks * sizeof(*v.ids)) == 0);
	CHECK_EQ(v.in_len[17], pt->in_len[17]);
	CHECK(v.arrive_s[100] == pt->arrive_s[100]);

	kvt_plan_conf c = {.policy = KVT_PLAN_S3FIFO, .nodes = 2, .route = KVT_PLAN_ROUTE_AFFINITY};
	c.tier[KVT_PLAN_T0].capacity = 3000;
	c.tier[KVT_PLAN_T1] = (kvt_plan_tier_conf){.capacity = 9000, .admit = KVT_PLAN_ADMIT_SEEN,
						     .seen_n = 2};
	struct plan_conf pc = {.kind = KVT_EVICT_S3FIFO, .nodes = 2, .route = PLAN_ROUTE_AFFINITY};
	pc.tier[PLAN_T0].capacity = 3000;
	pc.tier[PLAN_T1].capacity = 9000;
	pc.tier[PLAN_T1].admit.rules = KVT_ADMIT_SEEN;
	pc.tier[PLAN_T1].admit.seen_n = 2;
	kvt_plan_result a, b;
	CHECK_EQ(kvt_plan_simulate(t, &c, &a, NULL), 0);
	CHECK_EQ(plan_sim_run(pt, &pc, &b, NULL), 0);
	CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	CHECK(a.rejects[KVT_PLAN_T1] > 0);
	c.tier[KVT_PLAN_T1].seen_n = 0;
	CHECK_EQ(kvt_plan_simulate(t, &c, &a, NULL), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "seen_n 0: expected 1..15") != NULL);
	c.tier[KVT_PLAN_T1].seen_n = 2;
	c.policy = 9;
	CHECK_EQ(kvt_plan_simulate(t, &c, &a, NULL), KVT_EINVAL);
	c.policy = KVT_PLAN_LRU;
	c.nodes = 0;
	CHECK_EQ(kvt_plan_simulate(t, &c, &a, NULL), KVT_EINVAL);
	kvt_plan_trace_free(t);
	kvt_plan_trace_free(NULL);

	/* The catalog, and its prices of a block. */
	CHECK_EQ(kvt_plan_format_parse("qwen"), KVT_PLAN_FMT_BAILIAN);
	CHECK_EQ(kvt_plan_format_parse("csv"), -1);
	CHECK(strcmp(kvt_plan_format_name(KVT_PLAN_FMT_TOKENS), "tokens") == 0);
	const kvt_plan_model *m = kvt_plan_model_find("llama-3.1-8b");
	CHECK(m && m == kvt_plan_model_find("Llama-3.1-8B"));
	CHECK(kvt_plan_model_find("no-such-model") == NULL);
	size_t nm = 0;
	while (kvt_plan_model_at(nm))
		nm++;
	CHECK(nm > 0 && kvt_plan_model_at(0) != NULL);
	const kvt_plan_tier *d = kvt_plan_tier_find("dram");
	CHECK(d && d == kvt_plan_tier_at(0));
	if (m && d) {
		CHECK(kvt_plan_kv_bytes_per_token(m) == plan_kv_bytes_per_token(m));
		CHECK(kvt_plan_load_seconds(d, 1e9) == plan_load_s(d, 1e9));
		CHECK(kvt_plan_prefill_seconds(m, kvt_plan_gpu_find("H100"), 0, 100) > 0);
	}
	FILE *f = tmpfile();
	CHECK(f != NULL);
	if (f) {
		char text[4096] = "";
		CHECK_EQ(kvt_plan_catalog_write(fileno(f)), 0);
		rewind(f);
		CHECK(fread(text, 1, sizeof(text) - 1, f) > 0);
		CHECK(strncmp(text, "models:\n", 8) == 0 && strstr(text, "\ntiers:\n  dram"));
		fclose(f);
	}
	CHECK(kvt_plan_catalog_write(-1) < 0);
}

int main(void)
{
	readers();
	fast_path();
	inputs();
	large();
	catalog();
	cost();
	size_t len;
	char *buf = test_data_read("traces/conversation_trace.jsonl", &len);
	struct plan_trace pt;
	CHECK_EQ(plan_trace_parse(buf, len, PLAN_FMT_AUTO, 0, 0, &pt), 0);
	api(&pt, buf, len);
	free(buf);
	CHECK_EQ(pt.t.nreq, 12031);
	CHECK_EQ(pt.t.nblocks, 288500);
	/* A canonical trace: every record by the fast path. */
	CHECK_EQ(pt.nrec_fast, 12031);
	CHECK_EQ(pt.nrec_json, 0);

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
