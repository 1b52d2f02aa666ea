/*
 * why.h — what the store remembers to say why a chunk is not served
 * (kvt_why; docs/WHY.md): a bounded history of chunks that left a tier and
 * why, the namespaces this store has resolved, and misses counted by
 * reason, tier and tenant.
 *
 * The history is a direct-mapped table keyed by the chunk's key, like a
 * cache's ghost list: a newer entry takes the slot of an older one, so it
 * remembers the recent past (WHY_SLOTS chunks at most) and costs a fixed
 * 1.5 MiB, allocated at the first record.  Every call takes `mu` briefly
 * and never does I/O.
 */
#ifndef KVT_STORE_WHY_H
#define KVT_STORE_WHY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kvtier.h"

#define WHY_MAX_NS 64      /* namespaces remembered for the mismatch check */
#define WHY_TIERS 9        /* KVT_MAX_TIERS + 1: the last counts "no tier" */
#define WHY_ACCTS 17       /* the default tenant + KVT_MAX_TENANTS */

struct why_ns {
	kvt_ns ns;
	int acct;
	char model[128], revision[64], lora[64];
	uint32_t rank_shared;
};

struct kvt_why_state {
	pthread_mutex_t mu;
	struct why_rec *hist; /* WHY_SLOTS entries, NULL until the first record */
	struct why_ns ns[WHY_MAX_NS];
	uint32_t n_ns, ns_next;
	_Atomic uint64_t misses[WHY_ACCTS][KVT_WHY_REASONS][WHY_TIERS];
};

void why_init(struct kvt_why_state *w);
void why_fini(struct kvt_why_state *w);

/* `key` left tier `tier` (-1: none in particular) for `reason` now. */
void why_record(struct kvt_why_state *w, const kvt_key *key, int reason, int tier);

/* What the history says of `key`: 1 with *reason, *tier, *when (seconds,
 * CLOCK_REALTIME), or 0. */
int why_recall(struct kvt_why_state *w, const kvt_key *key, int *reason, int *tier,
	       double *when);

/* A namespace kvt_ns_init resolved, with what it was resolved from. */
void why_note_ns(struct kvt_why_state *w, const kvt_ns_desc *d, const kvt_ns *ns, int acct);

#endif
