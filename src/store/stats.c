/*
 * stats.c — what the store accounts for as it runs: each tier's write
 * health (a tier whose writes keep failing is given none for a while),
 * its measured read speed (the cost model's inputs), the KV events a
 * chunk's arrival or departure posts, and the statistics kvt_store_stats
 * reports.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "store/config.h"
#include "store/hier.h"
#include "store/store_int.h"
#include "store/tiers.h"
#include "store/why.h"

/* The medium a tier's KV events name (docs/EVENTS.md); NULL: the tier
 * publishes nothing of its own (kvtierd's and other nodes' tiers, whose
 * own daemons publish). */
static const char *event_medium(const kvt_store *st, int tier)
{
	switch (st->kind[tier]) {
	case KVT_CT_DEVICE: return "GPU";
	case KVT_CT_DRAM: return "DRAM";
	case KVT_CT_NVME: return "NVME";
	case KVT_CT_SHARED: return "SHARED_FS";
	case KVT_CT_S3: return "S3";
	default: return NULL;
	}
}

void store_event_tokens(kvt_store *st, int type, int tier, const kvt_key *key,
			uint32_t tokens)
{
	const char *medium = st->events ? event_medium(st, tier) : NULL;

	if (medium)
		kvt_events_post(st->events, type, medium, key, tokens ? tokens : st->cfg.chunk_size);
}

void store_event(kvt_store *st, int type, int tier, const kvt_key *key)
{
	store_event_tokens(st, type, tier, key, 0);
}

int store_writes_off(kvt_store *st, int i)
{
	long long until = atomic_load(&st->health[i].off_until);
	return until && kvt_mono_ns() < until;
}

/* The error of a write refused while tier i's writes are off: the code and
 * the words of the failure that turned them off (a full disk stays
 * "No space left on device", not a vaguer I/O error), and for how long. */
static int store_writes_off_text(kvt_store *st, int i, char *buf, size_t len)
{
	struct tier_health *hl = &st->health[i];
	long long left = (atomic_load(&hl->off_until) - kvt_mono_ns()) / 1000000000ll + 1;
	int rc = atomic_load(&hl->last_rc);

	pthread_mutex_lock(&st->err_mu);
	snprintf(buf, len, "%s tier takes no writes for %lld s after %d failed in a row; the "
		 "last: %s", st->tiers[i]->ops->name, left > 0 ? left : 1, TIER_FAIL_STREAK,
		 hl->last);
	pthread_mutex_unlock(&st->err_mu);
	return rc < 0 ? rc : -EIO;
}

int store_writes_off_err(kvt_store *st, int i)
{
	char why[320];
	int rc = store_writes_off_text(st, i, why, sizeof(why));

	return kvt_err(rc, "%s", why);
}

/* Count a put's outcome in tier i's health: an I/O error (a negated errno) or a timeout
 * lengthens the streak; anything else that reached the medium ends it. */
void store_note_write(kvt_store *st, int i, int rc)
{
	struct tier_health *hl = &st->health[i];

	if (rc < 0 && rc != KVT_EEXIST) {
		pthread_mutex_lock(&st->err_mu);
		snprintf(hl->last, sizeof(hl->last), "%s (%s)", kvt_strerror(rc),
			 kvt_errmsg());
		pthread_mutex_unlock(&st->err_mu);
		atomic_store(&hl->last_rc, rc);
	}
	if ((rc < 0 && rc > KVT_ERR_BASE) || rc == KVT_ETIMEDOUT) {
		/* A medium or an endpoint that failed, or did not answer in
		 * time: both mean the next write will likely fail too. */
		atomic_fetch_add(&hl->errors, 1);
		if (atomic_fetch_add(&hl->streak, 1) + 1 == TIER_FAIL_STREAK) {
			atomic_store(&hl->off_until, kvt_mono_ns() + TIER_WRITES_OFF_NS);
			kvt_log(KVT_LOG_ERROR,
				"%s tier: %d writes failed in a row (last: %s); no writes for %lld s, reads go on",
				st->tiers[i]->ops->name, TIER_FAIL_STREAK, kvt_strerror(rc),
				TIER_WRITES_OFF_NS / 1000000000ll);
		}
	} else if (rc == 0 || rc == KVT_EEXIST) {
		atomic_store(&hl->streak, 0);
		atomic_store(&hl->off_until, 0);
	}
}

void store_lost(kvt_store *st, int tier, const kvt_key *key, int reason)
{
	why_record(&st->why, key, reason, tier);
	store_event(st, KVT_EV_REMOVED, tier, key);
}

void store_forget(kvt_store *st, int tier, const kvt_key *key, int reason)
{
	hier_remove(st->hier, tier, key);
	store_lost(st, tier, key, reason);
}

int kvt_store_name_chunk(kvt_store *st, const kvt_key *key, const uint8_t *hashes,
			 uint32_t n, uint32_t hash_len, const uint8_t *parent,
			 uint32_t block_size)
{
	kvt_err_clear();
	if (!st || !key || !hashes)
		return kvt_err(KVT_EINVAL, "store, key or hashes missing");
	if (st->n_tiers == 1 && st->tiers[0]->ops->name_chunk) /* kvtierd's client: it publishes */
		return st->tiers[0]->ops->name_chunk(st->tiers[0], key, hashes, n, hash_len, parent,
					       block_size);
	if (!n || n > KVT_CHUNK_NAME_MAX || (hash_len != 32 && hash_len != 8))
		return kvt_err(KVT_EINVAL, "a chunk's name is 1..%d block hashes of 32 or 8 bytes, "
				    "not %u of %u", KVT_CHUNK_NAME_MAX, n, hash_len);
	return st->events ? kvt_events_name(st->events, key, hashes, n, hash_len, parent,
					    block_size) : 0;
}

int kvt_store_events_stats(kvt_store *st, kvt_events_stats *out)
{
	if (!st || !out)
		return kvt_err(KVT_EINVAL, "NULL argument");
	kvt_events_counters(st->events, out);
	out->enabled = st->events != NULL;
	return 0;
}

/* Count one read served by tier i in its latency histogram. */
void store_perf_hist(kvt_store *st, int i, double secs)
{
	double us = secs * 1e6;
	int b = 0;

	while (b < 23 && us >= (double)(1ull << b))
		b++;
	atomic_fetch_add(&st->perf[i].hist[b], 1);
}

/* Fold one read of `bytes` that took `secs` into tier i's figures: small
 * reads teach the fixed cost, large ones the bandwidth. */
void store_perf_note(kvt_store *st, int i, uint64_t bytes, double secs)
{
	struct tier_perf *p = &st->perf[i];
	double us = secs * 1e6;

	store_perf_hist(st, i, secs);
	atomic_store(&st->last_read_bytes, bytes);
	pthread_mutex_lock(&p->mu);
	/* The first measurement replaces the planning figure outright: it
	 * was a guess about hardware, this is the hardware. */
	if (bytes <= 64 * 1024)
		p->lat_us = p->n_lat++ ? 0.8 * p->lat_us + 0.2 * us : us;
	else if (secs > 0)
		p->gbps = p->n_bw++ ? 0.8 * p->gbps + 0.2 * ((double)bytes / secs / 1e9)
				    : (double)bytes / secs / 1e9;
	pthread_mutex_unlock(&p->mu);
}

int kvt_store_tiers(const kvt_store *st)
{
	return st ? st->n_tiers : 0;
}

int kvt_store_stats(kvt_store *st, int tier, kvt_tier_stats *out)
{
	if (!st || !out || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "tier %d of %d", tier, st ? st->n_tiers : 0);
	memset(out, 0, sizeof(*out));
	st->tiers[tier]->ops->stats(st->tiers[tier], out);
	{
		struct hier_counters hc;
		hier_counters(st->hier, tier, &hc);
		out->promotions = hc.promotions;
		out->demotions = hc.demotions;
		out->admit_rejects = hc.admit_rejects;
		out->policy_evictions = hc.policy_evictions;
		out->evictions += hc.policy_evictions; /* the tier's own + the policy's */
		out->pinned = hc.pinned;
	}
	out->write_errors = atomic_load(&st->health[tier].errors);
	pthread_mutex_lock(&st->err_mu);
	memcpy(out->last_write_error, st->health[tier].last,
	       sizeof(out->last_write_error));
	out->last_write_error[sizeof(out->last_write_error) - 1] = '\0';
	pthread_mutex_unlock(&st->err_mu);
	pthread_mutex_lock(&st->perf[tier].mu);
	out->read_gbps = st->perf[tier].gbps;
	out->read_latency_us = st->perf[tier].lat_us;
	pthread_mutex_unlock(&st->perf[tier].mu);
	for (int b = 0; b < 24; b++)
		out->get_latency_log2_us[b] = atomic_load(&st->perf[tier].hist[b]);
	out->writes_off = (uint32_t)store_writes_off(st, tier);
	if (out->writes_off && !out->state[0])
		store_writes_off_text(st, tier, out->state, sizeof(out->state));
	return 0;
}
