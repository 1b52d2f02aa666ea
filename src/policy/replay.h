/*
 * replay.h — replay a prefix-cache trace through the policies.
 *
 * The one definition of "what would this cache have hit", shared by the
 * tests, tools/policy_compare and the capacity planner, so that they can
 * never disagree.  Pure: the planner's reader (plan/trace.h) reads trace
 * files and builds the trace here; this renumbers ids and simulates.
 *
 * Semantics of one request (a list of block ids in prompt order):
 *  1. Its hit is the number of leading blocks present in some tier: a block
 *     counts only when every earlier block of the same prompt also hits.
 *  2. Then every block is accessed in prompt order: a present block is
 *     refreshed (a lookup in the tier that has it), a missing one is offered
 *     to the top tier (through its admission filter), evicting as the policy
 *     says.  Every block is recorded as one sighting in every tier's filter
 *     before any decision about the request is made.
 *
 * With one tier, LRU and no admission rule this is exactly the reference
 * replay of the capacity-planning issue.
 *
 * Two tiers (T0 small and fast over T1 large and slow):
 *  - KVT_REPLAY_EXCLUSIVE: a block lives in at most one tier.  T0's victims
 *    are demoted into T1 (through T1's filter; rejected ones are dropped); a
 *    hit in T1 promotes the block into T0 and removes it from T1.  A block
 *    T0 refuses is offered to T1 directly.
 *  - KVT_REPLAY_INCLUSIVE: write-through.  A new block goes to T0 and, if
 *    T1's filter admits it, to T1 as well; a T1 hit is copied into T0 (and
 *    refreshed in T1); a T0 victim is written to T1 only if T1 no longer
 *    holds it.  T1 sees only the accesses that reach it.
 * Insertions per tier are the proxy for bytes written to that tier.
 */
#ifndef KVT_POLICY_REPLAY_H
#define KVT_POLICY_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "policy/admit.h"
#include "policy/evict.h"

/* A parsed trace.  Block ids are renumbered densely in order of first
 * appearance (equality is all the replay needs), so per-block side tables
 * are plain arrays. */
struct kvt_trace {
	uint64_t nreq;
	uint64_t nblocks;   /* total block references */
	uint64_t nids;      /* distinct blocks */
	uint64_t *off;      /* nreq + 1 offsets into ids */
	uint32_t *ids;      /* dense block ids */
	uint32_t *pos;      /* nids: position of each block in its prompt */
};

/* Building a trace request by request, from a reader that has the ids
 * already (the planner's, plan/trace.h, the one reader of trace files): a
 * trace's own 64-bit block ids are mapped to dense ones in order of first
 * sight.  begin, add each request, end;
 * after an error, kvt_trace_build_end then kvt_trace_free. */
struct kvt_trace_builder {
	struct kvt_trace *t;
	struct kvt_trace_idmap {
		uint64_t *keys;
		uint32_t *vals; /* dense id + 1; 0 = empty */
		uint64_t mask, n;
		uint64_t hashed;  /* of n, those in keys/vals */
		uint32_t *direct; /* [id] = dense id + 1 for ids below direct_cap */
		uint64_t direct_cap;
	} map;
	uint64_t off_cap, ids_cap, pos_cap;
};
int kvt_trace_build_begin(struct kvt_trace_builder *b, struct kvt_trace *t);
/* One request of n block ids.  0 or KVT_ENOMEM. */
int kvt_trace_build_add(struct kvt_trace_builder *b, const uint64_t *ids, size_t n);
/* Free the builder's map (the trace stays the caller's). */
void kvt_trace_build_end(struct kvt_trace_builder *b);
void kvt_trace_free(struct kvt_trace *t);

enum kvt_replay_mode {
	KVT_REPLAY_EXCLUSIVE = 0,
	KVT_REPLAY_INCLUSIVE = 1,
};

struct kvt_replay_tier {
	enum kvt_evict_kind kind;
	uint64_t capacity;            /* blocks */
	struct kvt_admit_conf admit;  /* rules = 0: admit everything */
};

struct kvt_replay_conf {
	unsigned ntiers;              /* 1 or 2 */
	enum kvt_replay_mode mode;
	struct kvt_replay_tier tier[2];
};

struct kvt_replay_result {
	uint64_t blocks;          /* block references replayed */
	uint64_t hit_blocks;      /* prefix hits, any tier */
	uint64_t hit_tier[2];     /* ... of which found in T0 / T1 */
	uint64_t inserts[2];      /* blocks written into T0 / T1 */
	uint64_t rejects[2];      /* blocks a tier's filter refused */
	uint64_t demotions;       /* T0 victims written to T1 */
	uint64_t promotions;      /* T1 hits copied or moved to T0 */
};

/* 0, KVT_EINVAL (bad configuration) or KVT_ENOMEM. */
int kvt_replay_run(const struct kvt_trace *t, const struct kvt_replay_conf *c,
		   struct kvt_replay_result *r);

#endif
