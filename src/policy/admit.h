/*
 * admit.h — admission filters: is a missed chunk worth writing to a tier?
 *
 * Eviction decides what leaves; admission decides what may enter at all.  A
 * slow, large tier (NVMe, a shared file system, S3) pays for every write in
 * bandwidth, wear or requests, so it should take only chunks likely to be
 * read again.  Like the eviction policies this is a pure module: no I/O, no
 * clock, no threads, no globals, deterministic, O(1) per call (the periodic
 * halving is O(sketch) once every `sample` sightings, i.e. O(1) amortised).
 *
 * Rules (bit flags in kvt_admit_conf.rules; a chunk is admitted only if every
 * rule set agrees; no rule set = always admit):
 *
 * - KVT_ADMIT_NEVER: reject everything (a tier that is read-only for now).
 * - KVT_ADMIT_SEEN: admit on the seen_n-th sighting of the id within the
 *   frequency window, counting the current one (seen_n = 2: the second
 *   time a chunk is missed it is written).
 * - KVT_ADMIT_TINYLFU (Einziger et al., "TinyLFU", ACM ToS 2017): admit if
 *   the candidate's estimated frequency is strictly greater than the would-be
 *   victim's (kvt_evict_peek_victim); always admit when no victim is needed.
 * - KVT_ADMIT_PREFIX: admit only chunks at depth >= min_prefix, where the
 *   depth of the chunk at 0-based position `pos` of its prompt is pos + 1:
 *   the number of chunks, itself included, that a lookup must find before it
 *   can hit.  Shallow chunks are cheap to recompute and are the hottest
 *   (shared system prompts), so they live in the upper tiers; a slow tier is
 *   kept for the deep ones whose recompute is expensive.  A chunk whose
 *   shallower chunks are in no tier is useless, so this rule belongs on a
 *   lower tier only, never on the top one.
 *
 * Frequency estimates come from a count-min sketch: 4 rows of 4-bit
 * saturating counters (16 per uint64_t), `sketch_width` counters per row.
 * After `sample` sightings every counter is halved (TinyLFU's reset, which
 * ages out past popularity) and the doorkeeper is cleared.  The optional
 * doorkeeper is a Bloom filter that absorbs the first sighting of each id,
 * so one-hit wonders never reach the sketch.  Count-min only overestimates:
 * a hash collision can admit a chunk early, never late (until a halving).
 *
 * Thread safety: none; one owner at a time.
 */
#ifndef KVT_POLICY_ADMIT_H
#define KVT_POLICY_ADMIT_H

#include <stdint.h>

#include "kvtier.h"

enum kvt_admit_rule {
	KVT_ADMIT_ALWAYS = 0,
	KVT_ADMIT_NEVER = 1u << 0,
	KVT_ADMIT_SEEN = 1u << 1,
	KVT_ADMIT_TINYLFU = 1u << 2,
	KVT_ADMIT_PREFIX = 1u << 3,
};

struct kvt_admit_conf {
	uint32_t rules;         /* OR of kvt_admit_rule */
	uint32_t seen_n;        /* KVT_ADMIT_SEEN: 1..16 with a doorkeeper, else 1..15 */
	uint32_t min_prefix;    /* KVT_ADMIT_PREFIX: minimum depth, >= 1 */
	uint64_t sketch_width;  /* counters per row, rounded up to a power of 2; 0 = 4096 */
	uint64_t sample;        /* sightings between halvings; 0 = 10 x sketch_width */
	int doorkeeper;         /* non-zero: Bloom filter in front of the sketch */
};

/* One admission question.  `pos` is the chunk's 0-based position in the
 * prompt it came from (KVT_ADMIT_PREFIX); `victim` is what the tier would
 * evict to make room, if anything (KVT_ADMIT_TINYLFU). */
struct kvt_admit_query {
	uint64_t id;
	uint32_t pos;
	int has_victim;
	uint64_t victim;
};

typedef struct kvt_admit kvt_admit;

/* 0, KVT_EINVAL (seen_n or min_prefix out of range) or KVT_ENOMEM.  *out
 * owns its memory until kvt_admit_destroy. */
int kvt_admit_create(const struct kvt_admit_conf *conf, kvt_admit **out);
void kvt_admit_destroy(kvt_admit *a);

/* Count one sighting of `id` (call on every lookup, hit or miss, so the
 * sketch sees the real popularity).  May trigger the periodic halving. */
void kvt_admit_record(kvt_admit *a, uint64_t id);

/* Estimated sightings of `id` in the current window (doorkeeper included),
 * saturating at 15 (16 with the doorkeeper). */
uint32_t kvt_admit_estimate(const kvt_admit *a, uint64_t id);

/* 1 admit, 0 reject.  Records nothing. */
int kvt_admit_check(const kvt_admit *a, const struct kvt_admit_query *q);

/* kvt_admit_record(q->id) then kvt_admit_check(q): the usual call on a miss
 * when no separate record was made at lookup time. */
int kvt_admit_access(kvt_admit *a, const struct kvt_admit_query *q);

#endif
