/*
 * store.c — one store over an ordered list of tiers: open and close.
 *
 * The store is the only layer that knows namespaces and object headers
 * together.  Its files by concern (store_int.h has the map): put.c
 * writes chunks, get.c reads them, lookup.c answers what is held,
 * move.c moves chunks between tiers, tenant.c keeps namespaces' accounts,
 * stats.c accounts for what the tiers did, pool.c is the worker pool,
 * async.c the asynchronous operations and prefetch.  Eviction, admission
 * and bandwidth budgets are the hierarchy's (hier.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "common/err.h"
#include "store/config.h"
#include "store/hier.h"
#include "store/pool.h"
#include "store/store_int.h"
#include "store/tiers.h"
#include "store/why.h"

/* A tier dropped `key` on its own to make room (its policy's share
 * leaves a margin, so this is rare: a chunk large against the tier). */
static void tier_evicted(void *arg, const kvt_key *key)
{
	const struct tier_watch *w = arg;

	store_forget(w->st, w->tier, key, KVT_WHY_EVICTED);
}

static int add_tier(kvt_store *st, kvt_tier *t, const kvt_tier_class *cls)
{
	struct tier_perf *p = &st->perf[st->n_tiers];

	pthread_mutex_init(&p->mu, NULL);
	/* Planning figures until reads are measured (the planner's too). */
	p->gbps = cls->gbps;
	p->lat_us = cls->lat_us;
	st->verify[st->n_tiers] = cls->verify(&st->cfg);
	st->n_remote += cls->remote;
	st->kind[st->n_tiers] = cls->kind;
	st->cls[st->n_tiers] = cls;
	st->watch[st->n_tiers] = (struct tier_watch){ st, st->n_tiers };
	t->on_evict = tier_evicted;
	t->on_evict_arg = &st->watch[st->n_tiers];
	st->tiers[st->n_tiers++] = t;
	return 0;
}

/* Teach the policies what the tiers already hold (a warm restart). */
static int warm_one(void *arg, const kvt_key *key, uint64_t len)
{
	void **a = arg;
	kvt_store *st = a[0];
	int tier = *(int *)a[1];
	kvt_key *v;
	size_t n;

	/* Charged to the default tenant: an image names its namespace by a
	 * digest only, which no tenant's secret can be recovered from. */
	hier_insert(st->hier, tier, key, len, 0, &v, &n);
	free(v); /* over the policy's share: dropped after the walk */
	/* A router learns what a restarted node holds, up to the events
	 * the publisher's queue takes at once (the rest are counted as
	 * dropped: a router that needs them all replays or asks `where`). */
	store_event(st, KVT_EV_STORED, tier, key);
	return 0;
}

static int hier_setup(kvt_store *st)
{
	struct hier_tier_conf hc[KVT_MAX_TIERS];
	int rc;

	for (int i = 0; i < st->n_tiers; i++) {
		const struct kvt_tier_conf *c = &st->cfg.tier[st->kind[i]];
		kvt_tier_stats ts;

		memset(&ts, 0, sizeof(ts));
		st->tiers[i]->ops->stats(st->tiers[i], &ts);
		hc[i] = (struct hier_tier_conf){
			.eviction = c->eviction,
			.s3_small_pct = c->s3_small_pct,
			.s3_promote = c->s3_promote,
			.admit_rules = c->admit_rules,
			.admit_seen = c->admit_seen,
			.write = c->write,
			.background_bps = c->background_bps,
			/* The first tier's policy leaves room for what it cannot
			 * see: victims still held by queued demotions (up to a
			 * tenth, max_bg_bytes) and writes in flight (3%), so
			 * the tier's own LRU never has to decide. */
			.capacity = i == 0 && st->kind[i] == KVT_CT_DRAM
					? ts.capacity_bytes / 100 * 87
					: ts.capacity_bytes / 100 * 97,
			.round = st->cls[i]->round(&st->cfg),
			/* an unbounded tier (S3 by default) has no policy */
		};
	}
	if ((rc = hier_open(st->n_tiers, hc, &st->hier)))
		return rc;
	for (int i = 0; i < st->n_tiers; i++) {
		void *a[2] = { st, &i };
		st->tiers[i]->ops->iterate(st->tiers[i], warm_one, a);
	}
	return 0;
}

kvt_store *kvt_store_open(const kvt_config *cfg, int *err)
{
	return store_open_io(cfg, NULL, err);
}

kvt_store *store_open_io(const kvt_config *cfg, kvt_io *io, int *err)
{
	const kvt_tier_class *alone = NULL; /* the daemon: the other tiers are its */
	kvt_store *st;
	int rc = 0;

	kvt_err_clear();
	if (!cfg) {
		rc = kvt_err(KVT_EINVAL, "configuration missing");
		goto fail0;
	}
	{
		int any = 0;
		for (int i = 0; kvt_tier_classes[i]; i++)
			any |= kvt_tier_classes[i]->configured(cfg);
		for (int i = 0; kvt_tier_classes[i]; i++)
			if (kvt_tier_classes[i]->alone && kvt_tier_classes[i]->configured(cfg))
				alone = kvt_tier_classes[i];
		if (!any) {
			char hint[160];
			rc = kvt_err(KVT_ECONFIG, "no tier configured: set %s",
				     kvt_tier_enable_hint(hint, sizeof(hint)));
			goto fail0;
		}
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		rc = kvt_err(KVT_ENOMEM, "out of memory");
		goto fail0;
	}
	st->cfg = *cfg;
	pthread_mutex_init(&st->flight_mu, NULL);
	pthread_mutex_init(&st->err_mu, NULL);
	pthread_rwlock_init(&st->nsa_lock, NULL);
	why_init(&st->why);

	for (int i = 0; kvt_tier_classes[i]; i++) {
		const kvt_tier_class *cls = kvt_tier_classes[i];
		kvt_tier *t;
		if (!cls->configured(cfg) || (alone && cls != alone))
			continue;
		if ((rc = cls->open(&st->cfg, io, &t)))
			goto fail;
		add_tier(st, t, cls);
	}

	{
		/* Queued background copies may hold a tenth of the first tier. */
		kvt_tier_stats ts = { 0 };
		if (st->n_tiers)
			st->tiers[0]->ops->stats(st->tiers[0], &ts);
		pool_init(&st->pool, cfg->workers, ts.capacity_bytes / 10);
		st->pool_up = 1;
	}
	if (st->cfg.kv_events_on && (rc = kvt_events_open(&st->cfg.kv_events, &st->events)))
		goto fail;
	if ((rc = hier_setup(st)))
		goto fail;
	if ((rc = pool_start(&st->pool, cfg->workers)))
		goto fail;
	if (err)
		*err = 0;
	return st;
fail:
	kvt_store_close(st);
fail0:
	if (err)
		*err = rc;
	return NULL;
}

void kvt_store_close(kvt_store *st)
{
	if (!st)
		return;
	if (st->pool_up)
		pool_fini(&st->pool); /* what is queued runs first */
	for (int i = 0; i < st->n_tiers; i++)
		st->tiers[i]->ops->close(st->tiers[i]);
	hier_close(st->hier);
	kvt_events_close(st->events); /* what is queued is published first */
	why_fini(&st->why);
	for (int i = 0; i < st->n_tiers; i++)
		pthread_mutex_destroy(&st->perf[i].mu);
	free(st->flight);
	pthread_mutex_destroy(&st->flight_mu);
	pthread_mutex_destroy(&st->err_mu);
	free(st->nsa);
	pthread_rwlock_destroy(&st->nsa_lock);
	OPENSSL_cleanse(&st->cfg, sizeof(st->cfg)); /* secrets, the auth key */
	free(st);
}

int kvt_store_flush(kvt_store *st, int timeout_ms)
{
	uint32_t left;

	if (!st)
		return kvt_err(KVT_EINVAL, "store missing");
	if (pool_drain(&st->pool, timeout_ms, &left))
		return kvt_err(KVT_ETIMEDOUT,
			       "%u promotions or background copies still queued or running after %d ms",
			       left, timeout_ms);
	return 0;
}
