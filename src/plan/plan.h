/*
 * plan.h — the capacity planner's simulator: a trace through a fleet of
 * cache nodes, without data.
 *
 * It is policy/replay.c's semantics generalised to a fleet, built from the
 * same pure policy modules the store runs (policy/evict.h, policy/admit.h):
 *
 *  - Each of `nodes` nodes has a local T0 (DRAM) and optionally a local T1
 *    (NVMe) below it; the two local tiers are EXCLUSIVE exactly as in
 *    kvt_replay_run (T0's victims are demoted into T1, a T1 hit is moved up
 *    into T0).  With one node and no shared tier the result is identical to
 *    kvt_replay_run(KVT_REPLAY_EXCLUSIVE) — tests/test_plan.c checks it.
 *  - An optional shared tier S (a shared file system or S3) is common to all
 *    nodes and INCLUSIVE (write-through): a missed block is offered to S as
 *    well as to the node; a hit in S is copied into the node's T0 and
 *    refreshed in S; a block leaving the node's last local tier is written
 *    to S if S no longer holds it.  With one node, no T1 and S, the result
 *    is identical to kvt_replay_run(KVT_REPLAY_INCLUSIVE) with S as T1.
 *  - Routing: round-robin, or prefix affinity (the node whose local tiers
 *    hold the longest prefix of the prompt; ties go round-robin), as a
 *    KV-aware router would, or balanced: prefix affinity among the nodes
 *    whose recent work (blocks computed, decayed by 1 - 1/(4 nodes) a
 *    request) is at most PLAN_BALANCE_SLACK times the mean, as a router
 *    with bounded loads does.
 *
 * A request's hit is the number of leading blocks present in the node's
 * tiers or in S; then every block is accessed in prompt order (see
 * replay.h).  Capacities are in blocks; PLAN_UNBOUNDED is no limit.
 */
#ifndef KVT_PLAN_PLAN_H
#define KVT_PLAN_PLAN_H

#include <stdint.h>

#include "kvtier.h"
#include "plan/trace.h"
#include "policy/admit.h"
#include "policy/evict.h"
#include "kvtier/plan.h"

#define PLAN_UNBOUNDED UINT64_MAX
#define PLAN_MAX_NODES 1024

enum plan_route {
	PLAN_ROUTE_RR = 0,
	PLAN_ROUTE_AFFINITY = 1,
	PLAN_ROUTE_BALANCED = 2,
};

/* Balanced routing passes over a node whose recent work is above this
 * many times the fleet's mean. */
#define PLAN_BALANCE_SLACK 1.25

/* Tier slots in results: local T0, local T1, shared S. */
enum { PLAN_T0 = 0, PLAN_T1 = 1, PLAN_TS = 2, PLAN_NT = 3 };

struct plan_tier {
	uint64_t capacity;            /* blocks; 0 = tier absent */
	struct kvt_admit_conf admit;  /* rules = 0: admit everything */
};

struct plan_conf {
	enum kvt_evict_kind kind;     /* eviction policy of every tier */
	unsigned nodes;               /* 1..PLAN_MAX_NODES */
	enum plan_route route;
	struct plan_tier tier[PLAN_NT];
	uint32_t s3_small_pct, s3_promote; /* S3-FIFO; 0: the defaults */
	int s3_fill_main;                  /* S3-FIFO: libCacheSim's fill rule */
};

/* Results are the public API's (kvtier.h); the planner's code keeps its
 * own names for them. */
#define plan_result kvt_plan_result
#define plan_req_hit kvt_plan_req_hit

/* Simulate.  `per_req` (nreq entries) may be NULL.  0, KVT_EINVAL or
 * KVT_ENOMEM (or a policy error). */
int plan_sim_run(const struct plan_trace *pt, const struct plan_conf *c,
		 struct plan_result *r, struct plan_req_hit *per_req);

/* Cached tokens of a request with n blocks of which h are hit. */
static inline uint64_t plan_hit_tokens(const struct plan_trace *pt, uint64_t q,
				       uint64_t h, uint64_t n)
{
	uint64_t len = pt->in_len[q];
	uint64_t t = h * pt->block_tokens;
	(void)n;
	return t < len ? t : len;
}

#endif
