/*
 * why.c — what the store remembers to say why a chunk is not served
 * (why.h): the history of chunks that left a tier (every removal goes
 * through it: store_forget and store_lost), the namespaces resolved, and
 * misses counted by reason.  explain.c puts kvt_why's answer together
 * from it.
 */

#include "store/why.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store.h"
#include "store/store_int.h"
#include "store/tiers.h"

#define WHY_SLOTS 32768 /* a power of two */

struct why_rec {
	kvt_key key;
	uint8_t reason; /* 0: a free slot (KVT_WHY_HIT is never recorded) */
	int8_t tier;
	double when;
};

static const char *const reason_names[KVT_WHY_REASONS] = {
	"hit", "prefix", "never", "namespace", "evicted", "deleted", "corrupt", "expired",
	"deadline", "tier_down",
};

const char *kvt_why_name(int reason)
{
	return reason >= 0 && reason < KVT_WHY_REASONS ? reason_names[reason] : "?";
}

void why_init(struct kvt_why_state *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->mu, NULL);
}

void why_fini(struct kvt_why_state *w)
{
	free(w->hist);
	pthread_mutex_destroy(&w->mu);
}

static size_t slot_of(const kvt_key *key)
{
	uint64_t h;

	memcpy(&h, key->b + 8, sizeof(h)); /* keys are digests: any 8 bytes hash */
	return (size_t)(h & (WHY_SLOTS - 1));
}

static double real_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void why_record(struct kvt_why_state *w, const kvt_key *key, int reason, int tier)
{
	struct why_rec *r;

	pthread_mutex_lock(&w->mu);
	if (!w->hist)
		w->hist = calloc(WHY_SLOTS, sizeof(*w->hist));
	if (w->hist) { /* without memory the history forgets */
		r = &w->hist[slot_of(key)];
		r->key = *key;
		r->reason = (uint8_t)reason;
		r->tier = (int8_t)tier;
		r->when = real_now();
	}
	pthread_mutex_unlock(&w->mu);
}

int why_recall(struct kvt_why_state *w, const kvt_key *key, int *reason, int *tier,
	       double *when)
{
	int found = 0;

	pthread_mutex_lock(&w->mu);
	if (w->hist) {
		const struct why_rec *r = &w->hist[slot_of(key)];
		if (r->reason && !memcmp(&r->key, key, sizeof(*key))) {
			*reason = r->reason;
			*tier = r->tier;
			*when = r->when;
			found = 1;
		}
	}
	pthread_mutex_unlock(&w->mu);
	return found;
}

static void copy_str(char *dst, size_t cap, const char *s)
{
	snprintf(dst, cap, "%s", s ? s : "");
}

void why_note_ns(struct kvt_why_state *w, const kvt_ns_desc *d, const kvt_ns *ns, int acct)
{
	struct why_ns *e;

	pthread_mutex_lock(&w->mu);
	for (uint32_t i = 0; i < w->n_ns; i++)
		if (!memcmp(w->ns[i].ns.digest, ns->digest, sizeof(ns->digest))) {
			pthread_mutex_unlock(&w->mu);
			return;
		}
	if (w->n_ns < WHY_MAX_NS) {
		e = &w->ns[w->n_ns++];
	} else { /* the oldest goes */
		e = &w->ns[w->ns_next];
		w->ns_next = (w->ns_next + 1) % WHY_MAX_NS;
	}
	memset(e, 0, sizeof(*e));
	e->ns = *ns;
	e->acct = acct;
	e->rank_shared = d->rank_shared;
	copy_str(e->model, sizeof(e->model), d->model);
	copy_str(e->revision, sizeof(e->revision), d->revision);
	copy_str(e->lora, sizeof(e->lora), d->lora);
	pthread_mutex_unlock(&w->mu);
}

/* --- what a miss is counted as --------------------------------------------- */

/* A tier that does not answer now, or -1.  `remote_only` asks only the
 * remote tiers (peer, S3), the only ones that can be unreachable: what a
 * miss on the read path can afford to ask. */
int store_tier_down(kvt_store *st, int remote_only)
{
	if (remote_only && st->n_remote == 0)
		return -1;
	for (int i = 0; i < st->n_tiers; i++) {
		kvt_tier_stats ts;
		if (remote_only && !st->cls[i]->remote)
			continue;
		memset(&ts, 0, sizeof(ts));
		st->tiers[i]->ops->stats(st->tiers[i], &ts);
		if (ts.unreachable)
			return i;
	}
	return -1;
}

void store_note_deadline(kvt_store *st, const kvt_key *key, uint32_t mask)
{
	/* kvt_why's answer for it, from the lowest tier holding it */
	why_record(&st->why, key, KVT_WHY_DEADLINE, mask ? __builtin_ctz(mask) : -1);
}

void store_count_miss(kvt_store *st, int acct, const kvt_key *key)
{
	int reason, tier;
	double when;

	if (acct < 0 || acct >= WHY_ACCTS)
		acct = 0;
	if (!why_recall(&st->why, key, &reason, &tier, &when)) {
		tier = store_tier_down(st, 1);
		reason = tier >= 0 ? KVT_WHY_TIER_DOWN : KVT_WHY_NEVER;
	}
	if (tier < 0 || tier >= WHY_TIERS - 1)
		tier = WHY_TIERS - 1;
	atomic_fetch_add_explicit(&st->why.misses[acct][reason][tier], 1, memory_order_relaxed);
}
