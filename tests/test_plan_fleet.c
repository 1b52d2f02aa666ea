/*
 * test_plan_fleet.c — the planner's clock (plan/fleet.c): queues, loads
 * overlapped with compute, links that are busy, the rule that a load
 * slower than its recompute is not made, the bandwidth windows, balanced
 * routing on the shipped trace, and wrong fleets refused.
 */
#include <math.h>

#include "plan/cost.h"
#include "plan/fleet.h"
#include "plan/plan.h"
#include "test.h"
#include "test_data.h"
#include "kvtier/plan.h"

static int near(double a, double b)
{
	return fabs(a - b) <= 1e-9 * (1 + fabs(b));
}
#define NEAR(a, b) near((a), (b))

static const struct plan_model *m;
static const struct plan_gpu *g;

static kvt_plan_fleet_conf fleet(unsigned nodes)
{
	kvt_plan_fleet_conf f = {.model = m, .gpu = g, .rate = 1, .nodes = nodes,
				 .gpus_per_node = 1};
	f.tier[0] = plan_tier_find("dram");
	f.tier[1] = plan_tier_find("nvme");
	f.tier[2] = plan_tier_find("fs");
	f.link_gbps[KVT_PLAN_LINK_PCIE] = 50;
	f.link_gbps[KVT_PLAN_LINK_NIC] = 50;
	return f;
}

static void parse(const char *s, struct plan_trace *pt)
{
	CHECK_EQ(plan_trace_parse(s, strlen(s), PLAN_FMT_MOONCAKE, 0, 0, pt), 0);
}

/* Three 512-token prompts at once: one accelerator serves them one after
 * the other; three serve them together; --rate spreads them out. */
static void queues(void)
{
	const char *t = "{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [1]}\n"
			"{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [2]}\n"
			"{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [3]}\n";
	struct plan_trace pt;
	parse(t, &pt);
	double s = plan_prefill_s(m, g, 0, 512), tt[3], w[3];
	kvt_plan_fleet_conf f = fleet(1);
	kvt_plan_timing r;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, tt, w, NULL, 0), 0);
	CHECK(NEAR(tt[0], s) && NEAR(tt[1], 2 * s) && NEAR(tt[2], 3 * s));
	CHECK(NEAR(w[2], 2 * s));
	CHECK(NEAR(r.ttft_max, 3 * s) && NEAR(r.ttft_p50, 2 * s) && NEAR(r.wait_max, 2 * s));
	CHECK(NEAR(r.utilisation, 1) && NEAR(r.span_s, 3 * s) && NEAR(r.service_p90, s));
	f.nodes = 3;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, tt, w, NULL, 0), 0);
	CHECK(NEAR(r.ttft_max, s) && r.wait_max == 0 && NEAR(r.utilisation, 1));
	/* One node, three replicas on its queue: the same. */
	f.nodes = 1;
	f.gpus_per_node = 3;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, tt, w, NULL, 0), 0);
	CHECK(NEAR(r.ttft_max, s) && r.wait_max == 0);
	/* Tensor parallel over 2: each prefill takes half as long. */
	f.gpus_per_node = 1;
	f.tp = 2;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, tt, w, NULL, 0), 0);
	CHECK(NEAR(r.ttft_max, 1.5 * s));
	plan_trace_free(&pt);

	/* A second apart; at 10x the rate, 0.1 s apart: a queue when the
	 * prefill is longer than that. */
	const char *t2 = "{\"timestamp\": 0, \"input_length\": 8192, \"hash_ids\": [1]}\n"
			 "{\"timestamp\": 1000, \"input_length\": 8192, \"hash_ids\": [2]}\n";
	parse(t2, &pt);
	s = plan_prefill_s(m, g, 0, 8192);
	CHECK(s > 0.1 && s < 1);
	f = fleet(1);
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, tt, w, NULL, 0), 0);
	CHECK(r.wait_max == 0);
	f.rate = 10;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, tt, w, NULL, 0), 0);
	CHECK(NEAR(w[1], s - 0.1) && NEAR(tt[1], 2 * s - 0.1));
	plan_trace_free(&pt);
}

/* A cached prefix loads layer by layer under the compute of the rest. */
static void overlap(void)
{
	/* Layer l's KV at (l + 1)/10 of a 1 s load, 0.1 s of compute each. */
	CHECK(NEAR(plan_fleet_overlap_end(0, 0, 1, 1, 10), 1.1));
	/* Compute-bound: the first layer's KV, then all of the compute. */
	CHECK(NEAR(plan_fleet_overlap_end(0, 0, 0.1, 2, 10), 2.01));
	CHECK(NEAR(plan_fleet_overlap_end(5, 0, 0, 2, 10), 7));

	const char *t = "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [1, 2]}\n";
	struct plan_trace pt;
	parse(t, &pt);
	kvt_plan_req_hit ph = {.hit = {1, 0, 0}, .node = 0};
	kvt_plan_fleet_conf f = fleet(1);
	kvt_plan_timing r;
	double tt, bytes = 512 * plan_kv_bytes_per_token(m);
	double lat = f.tier[0]->latency_us * 1e-6, bw = fmin(f.tier[0]->gbps, 50) * 1e9;
	double comp = plan_prefill_s(m, g, 512, 1024);
	CHECK_EQ(plan_fleet_run(&pt, &ph, &f, &r, &tt, NULL, NULL, 0), 0);
	CHECK(NEAR(tt, plan_fleet_overlap_end(0, lat, lat + bytes / bw, comp, m->layers)));
	CHECK(tt < lat + bytes / bw + comp); /* overlapped, not one after the other */
	CHECK(NEAR(r.link[KVT_PLAN_LINK_PCIE].bytes, bytes));
	CHECK_EQ(r.link[KVT_PLAN_LINK_PCIE].loads, 1);
	CHECK_EQ(r.link[KVT_PLAN_LINK_PCIE].starved, 0);
	CHECK(NEAR(r.compute_s, comp));

	/* A tier slower than recomputing its tokens is not read: the whole
	 * prompt is computed, the load counted as starved, with the
	 * bandwidth that would have made it worth it. */
	kvt_plan_tier slow = *f.tier[0];
	slow.gbps = 0.01;
	f.tier[0] = &slow;
	CHECK_EQ(plan_fleet_run(&pt, &ph, &f, &r, &tt, NULL, NULL, 0), 0);
	CHECK(NEAR(tt, plan_prefill_s(m, g, 0, 1024)));
	CHECK_EQ(r.link[KVT_PLAN_LINK_PCIE].starved, 1);
	CHECK_EQ(r.link[KVT_PLAN_LINK_PCIE].latency_bound, 0);
	CHECK(r.link[KVT_PLAN_LINK_PCIE].bytes == 0);
	double rec = plan_prefill_s(m, g, 0, 512);
	CHECK(NEAR(r.link[KVT_PLAN_LINK_PCIE].fix_gbps, bytes / (rec - lat) / 1e9));
	/* Latency alone above the recompute: no bandwidth helps. */
	slow = *plan_tier_find("dram");
	slow.latency_us = rec * 2e6;
	CHECK_EQ(plan_fleet_run(&pt, &ph, &f, &r, &tt, NULL, NULL, 0), 0);
	CHECK_EQ(r.link[KVT_PLAN_LINK_PCIE].latency_bound, 1);
	CHECK(r.link[KVT_PLAN_LINK_PCIE].fix_gbps == 0);
	plan_trace_free(&pt);
}

/* Two nodes read the shared tier at once through its fleet-wide
 * throughput: the second load waits for the first. */
static void contention(void)
{
	const char *t = "{\"timestamp\": 0, \"input_length\": 8192, \"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}\n"
			"{\"timestamp\": 0, \"input_length\": 8192, \"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}\n";
	struct plan_trace pt;
	parse(t, &pt);
	kvt_plan_req_hit ph[2] = {{.hit = {0, 0, 8}, .node = 0}, {.hit = {0, 0, 8}, .node = 1}};
	kvt_plan_fleet_conf f = fleet(2);
	kvt_plan_tier fast = *plan_tier_find("fs");
	fast.gbps = 100;
	fast.latency_us = 0;
	f.tier[2] = &fast;
	f.link_gbps[KVT_PLAN_LINK_SHARED] = 20;
	double tt[2], bytes = 8 * 512 * plan_kv_bytes_per_token(m), one = bytes / 20e9;
	double series[2 * KVT_PLAN_NLINK];
	kvt_plan_timing r;
	CHECK_EQ(plan_fleet_run(&pt, ph, &f, &r, tt, NULL, series, 2), 0);
	CHECK(tt[1] > tt[0]);
	CHECK(NEAR(r.link[KVT_PLAN_LINK_SHARED].busy_s, 2 * one));
	CHECK(NEAR(r.link[KVT_PLAN_LINK_SHARED].bytes, 2 * bytes));
	CHECK(NEAR(r.link[KVT_PLAN_LINK_NIC].busy_s, 2 * one));
	/* The windows hold every byte moved. */
	double sum = 0;
	for (size_t w = 0; w < r.windows && w < 2; w++)
		sum += series[KVT_PLAN_LINK_SHARED * 2 + w] * 1e9;
	CHECK(r.windows >= 1 && NEAR(sum, 2 * bytes));
	CHECK(NEAR(r.link[KVT_PLAN_LINK_SHARED].max_gbps, 2 * bytes / 1e9));
	plan_trace_free(&pt);
}

static void refused(void)
{
	const char *t = "{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [1]}\n";
	struct plan_trace pt;
	parse(t, &pt);
	kvt_plan_timing r;
	kvt_plan_fleet_conf f = fleet(1);
	f.rate = 0;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, NULL, NULL, NULL, 0), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "rate") != NULL);
	f = fleet(0);
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, NULL, NULL, NULL, 0), KVT_EINVAL);
	f = fleet(1);
	f.gpus_per_node = 65;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, NULL, NULL, NULL, 0), KVT_EINVAL);
	f = fleet(1);
	f.link_gbps[KVT_PLAN_LINK_NIC] = -1;
	CHECK_EQ(plan_fleet_run(&pt, NULL, &f, &r, NULL, NULL, NULL, 0), KVT_EINVAL);
	f = fleet(1);
	kvt_plan_req_hit ph = {.node = 3};
	CHECK_EQ(plan_fleet_run(&pt, &ph, &f, &r, NULL, NULL, NULL, 0), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "node 3") != NULL);
	plan_trace_free(&pt);
}

/* On the shipped trace every prompt starts with the same block, so pure
 * affinity sends nearly everything to one node; balanced routing keeps
 * each node near its share and still beats round-robin's hits. */
static void balanced(void)
{
	size_t len;
	char *buf = test_data_read("traces/conversation_trace.jsonl", &len);
	struct plan_trace pt;
	CHECK_EQ(plan_trace_parse(buf, len, PLAN_FMT_AUTO, 0, 0, &pt), 0);
	free(buf);
	uint64_t n = pt.t.nreq;
	kvt_plan_req_hit *ph = calloc(n, sizeof(*ph));
	struct plan_conf c = {.kind = KVT_EVICT_LRU, .nodes = 4};
	c.tier[0].capacity = 10000;
	struct plan_result res[3];
	double share[3];
	for (int k = 0; ph && k < 3; k++) {
		uint64_t cnt[4] = {0};
		c.route = (enum plan_route)k;
		CHECK_EQ(plan_sim_run(&pt, &c, &res[k], ph), 0);
		for (uint64_t q = 0; q < n; q++)
			cnt[ph[q].node]++;
		uint64_t mx = 0;
		for (int i = 0; i < 4; i++)
			mx = cnt[i] > mx ? cnt[i] : mx;
		share[k] = (double)mx / (double)n;
	}
	fprintf(stderr, "4 nodes x 10000 blocks: busiest node's share rr %.2f, affinity %.2f, balanced %.2f; "
		"hit blocks %llu, %llu, %llu\n", share[0], share[1], share[2],
		(unsigned long long)res[0].hit_blocks, (unsigned long long)res[1].hit_blocks,
		(unsigned long long)res[2].hit_blocks);
	CHECK(share[1] > 0.9);
	CHECK(share[2] < 0.4);
	CHECK(res[2].hit_blocks > res[0].hit_blocks);

	/* In time: the balanced fleet queues far less than affinity's. */
	kvt_plan_fleet_conf f = fleet(4);
	kvt_plan_timing ta, tb;
	c.route = PLAN_ROUTE_AFFINITY;
	CHECK_EQ(plan_sim_run(&pt, &c, &res[1], ph), 0);
	CHECK_EQ(plan_fleet_run(&pt, ph, &f, &ta, NULL, NULL, NULL, 0), 0);
	c.route = PLAN_ROUTE_BALANCED;
	CHECK_EQ(plan_sim_run(&pt, &c, &res[2], ph), 0);
	CHECK_EQ(plan_fleet_run(&pt, ph, &f, &tb, NULL, NULL, NULL, 0), 0);
	CHECK(tb.ttft_p90 * 10 < ta.ttft_p90);
	CHECK(tb.utilisation > 0 && tb.utilisation < 1);
	free(ph);
	plan_trace_free(&pt);
}

int main(void)
{
	m = plan_model_find("Llama-3.1-8B");
	g = plan_gpu_find("H100");
	CHECK(m && g);
	if (!m || !g)
		return 1;
	queues();
	overlap();
	contention();
	refused();
	balanced();
	TEST_DONE();
}
