/*
 * hier.h — the store's per-tier policy state: which chunks a tier should
 * hold (eviction), which it should take at all (admission), how puts reach
 * it (write-through, write-back, none), pins, and the bandwidth background
 * copies may use.
 *
 * The decisions come from the pure policy modules (src/policy/): the same
 * code the capacity planner runs.  This layer adds what they leave out on
 * purpose: locking, the map from a policy id back to the chunk's key, and
 * counters.  It knows nothing about tiers' media; the store acts on what it
 * decides.
 */
#ifndef KVT_HIER_H
#define KVT_HIER_H

#include <stdint.h>

#include "kvtier.h"

typedef struct kvt_hier kvt_hier;

struct hier_tier_conf {
	uint32_t eviction;       /* 1 lru, 2 s3fifo; 0 = leave it to the tier */
	uint32_t admit_rules;    /* kvt_admit_rule flags; 0 = always */
	uint32_t admit_seen;
	uint32_t write;          /* KVT_WRITE_* */
	uint32_t s3_small_pct;   /* S3-FIFO's small queue, percent; 0 = 10 */
	uint32_t s3_promote;     /* S3-FIFO's hits in S to move to M; 0 = 1 */
	uint64_t background_bps; /* 0 = unlimited */
	uint64_t capacity;       /* bytes the policy may fill */
	uint64_t round;          /* accounting unit (a DRAM page, a disk block) */
};

struct hier_counters {
	uint64_t promotions, demotions, admit_rejects, policy_evictions, pinned;
};

int hier_open(int n_tiers, const struct hier_tier_conf *conf, kvt_hier **out);
void hier_close(kvt_hier *h);

/* Tier `tier`'s write mode (KVT_WRITE_*), as configured now. */
int hier_write_mode(const kvt_hier *h, int tier);

/* A reloaded configuration's policy knobs for `tier`, in force from now:
 * admission (its counts start over when it changes), write mode,
 * background bandwidth, and the eviction policy, rebuilt over what the
 * tier holds (recency and pins carried over).  `c`'s capacity and round
 * are ignored.  Victims of the rebuild come back as hier_insert's.  0, or
 * KVT_ENOTSUP for a policy added to or removed from a tier (at the next
 * start only: the rest of `c` is applied), KVT_ENOMEM. */
int hier_reconfigure(kvt_hier *h, int tier, const struct hier_tier_conf *c,
		     kvt_key **victims, size_t *n);

/* Where a put goes, from the tiers' write modes: the tiers it writes
 * itself (`now`: for a cached put the first tier that takes puts, for a
 * stronger one every tier that does), the write-through tiers below that
 * follow in the background (`through`, cached puts only), and every tier
 * that takes puts at all (`takes`: what a demotion may go to).  Bit i is
 * tier i. */
struct hier_put_plan {
	unsigned now, through, takes;
};
void hier_plan_put(const kvt_hier *h, int durability, struct hier_put_plan *p);

/* A read served by `tier`: recency and frequency, and a promotion counted
 * there when the chunk was copied up. */
void hier_read(kvt_hier *h, int tier, const kvt_key *key, int promoted);

/* May a background copy of `key` (`bytes` long) enter `tier`?  0 if its
 * admission says no (a rejection is counted); else 1, once the tier's
 * background bandwidth budget allows the copy (it may wait). */
int hier_copy_in(kvt_hier *h, int tier, const kvt_key *key, uint64_t bytes);

/* A lookup saw `key` (admission counts sightings, hit or miss). */
void hier_seen(kvt_hier *h, int tier, const kvt_key *key);
/* Accounts: one per tenant of the store's configuration (its index + 1),
 * 0 for the default tenant.  Each tier keeps each account's usage against
 * its quota and reservation (hier.c says how eviction honours them). */
#define HIER_MAX_ACCTS 65

/* `key` (bytes long) is now in `tier`, charged to account `acct`; -1: to
 * the account another tier charges it to (a promotion, a demotion, a
 * write-through copy), else the default.  Victims the policy chose to make
 * room are returned in *victims (malloc'd, *n of them; free it), in eviction
 * order: the caller demotes or drops them. */
int hier_insert(kvt_hier *h, int tier, const kvt_key *key, uint64_t bytes,
		int acct, kvt_key **victims, size_t *n);
/* The account some tier charges `key` to, or -1 if no tier's policy holds it. */
int hier_acct_of(kvt_hier *h, const kvt_key *key);

/* Set account `acct`'s quota (0 = none) and reservation in `tier`, in
 * bytes.  KVT_EINVAL if the reservations of all accounts would exceed the
 * tier's policy capacity or the reservation its quota; KVT_ENOTSUP for a
 * tier without a policy.  A quota lowered under the usage evicts at once:
 * the victims come back as from hier_insert. */
int hier_set_share(kvt_hier *h, int tier, int acct, uint64_t quota,
		   uint64_t reserve, kvt_key **victims, size_t *n);

struct hier_share {
	uint64_t bytes, chunks;      /* held now (bytes in accounting units) */
	uint64_t quota, reserve;     /* as set, rounded to accounting units */
	uint64_t capacity;           /* the tier policy's, all accounts */
	uint64_t quota_evictions;    /* own chunks given up over the quota */
	uint64_t share_evictions;    /* given up to make room for the tier */
};
int hier_share(kvt_hier *h, int tier, int acct, struct hier_share *out);
/* `key` left `tier` (deleted, corrupt, evicted by the tier itself). */
/* The keys the policy of `tier` holds, the most recently used (put or
 * hit) first: a malloc'd array in *keys (free it), *n of them.  0 (none
 * for a tier without a policy) or KVT_ENOMEM. */
int hier_hot(kvt_hier *h, int tier, kvt_key **keys, size_t *n);
void hier_remove(kvt_hier *h, int tier, const kvt_key *key);
/* Pin or unpin `key` in `tier`: a pinned chunk is never a victim.
 * KVT_ENOTFOUND if the policy does not hold it. */
int hier_pin(kvt_hier *h, int tier, const kvt_key *key, int pin);

void hier_count(kvt_hier *h, int tier, int what);
enum { HIER_PROMOTION = 0, HIER_DEMOTION = 1 };
void hier_counters(kvt_hier *h, int tier, struct hier_counters *out);

#endif
