/*
 * store.c — one store over an ordered list of tiers.
 *
 * The store is the only layer that knows namespaces and object headers
 * together: it encodes a caller's payload into an object image straight into
 * the first tier's memory (checksums in the same pass), copies that image to
 * the tiers below (write-through), and on a read takes the first tier that
 * has the key, checks that the object is the chunk asked for, verifies it
 * where the medium can tear or rot, and promotes a lower-tier hit into the
 * first tier.  Eviction, admission and bandwidth budgets are the
 * hierarchy's (hier.c); the worker pool, asynchronous operations and
 * prefetch are ops.c's; the fsck is verify.c's (store_int.h).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "format/object.h"
#include "key/key.h"
#include "store/config.h"
#include "store/hier.h"

#include "store/store_int.h"
#include "store/tiers.h"

/* The payload segments of an image: skip the header's bytes. */
int store_payload_iov(const kvt_tier_rbuf *rb, uint64_t skip,
		      struct iovec **out, int *n_out)
{
	struct iovec *v = malloc(sizeof(*v) * (size_t)(rb->n_iov ? rb->n_iov : 1));
	int n = 0;

	if (!v)
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (int i = 0; i < rb->n_iov; i++) {
		const struct iovec *s = &rb->iov[i];
		if (skip >= s->iov_len) {
			skip -= s->iov_len;
			continue;
		}
		v[n].iov_base = (char *)s->iov_base + skip;
		v[n].iov_len = s->iov_len - skip;
		skip = 0;
		n++;
	}
	*out = v;
	*n_out = n;
	return 0;
}

/* Decode the header of a borrowed image, which may span segments. */
int store_image_header(const kvt_tier_rbuf *rb, kvt_obj_hdr *h)
{
	uint8_t tmp[KVT_OBJ_HEADER_BYTES];
	size_t got = 0;

	if (rb->n_iov > 0 && rb->iov[0].iov_len >= KVT_OBJ_HEADER_BYTES)
		return kvt_obj_hdr_decode(rb->iov[0].iov_base, rb->len < rb->iov[0].iov_len
						     ? rb->len : rb->iov[0].iov_len, h);
	for (int i = 0; i < rb->n_iov && got < sizeof(tmp); i++) {
		size_t n = rb->iov[i].iov_len;
		if (n > sizeof(tmp) - got)
			n = sizeof(tmp) - got;
		memcpy(tmp + got, rb->iov[i].iov_base, n);
		got += n;
	}
	return kvt_obj_hdr_decode(tmp, got, h);
}

static void image_copy(const kvt_tier_rbuf *src, kvt_tier_wbuf *dst)
{
	int si = 0, di = 0;
	size_t so = 0, dof = 0;

	while (si < src->n_iov && di < dst->n_iov) {
		size_t n = src->iov[si].iov_len - so;
		if (n > dst->iov[di].iov_len - dof)
			n = dst->iov[di].iov_len - dof;
		memcpy((char *)dst->iov[di].iov_base + dof,
		       (const char *)src->iov[si].iov_base + so, n);
		so += n;
		dof += n;
		if (so == src->iov[si].iov_len) {
			si++;
			so = 0;
		}
		if (dof == dst->iov[di].iov_len) {
			di++;
			dof = 0;
		}
	}
}

/* put_begin of tier t for the image `src` holds whole: written from there
 * at commit where the tier can (put_begin_from), else copied now into the
 * space put_begin reserves. */
static int begin_from(kvt_tier *t, const kvt_tier_rbuf *src, kvt_tier_wbuf **w)
{
	if (t->ops->put_begin_from) {
		int rc = t->ops->put_begin_from(t, &src->key, src->len, src->iov, src->n_iov, w);
		if (rc != KVT_ENOTSUP)
			return rc;
		kvt_err_clear();
	}
	int rc = t->ops->put_begin(t, &src->key, src->len, w);
	if (rc == 0)
		image_copy(src, *w);
	return rc;
}

/* --- open / close ------------------------------------------------------------ */


/* Whether some tier survives the process (a durability beyond cached). */
static int store_has_persistent(const kvt_store *st)
{
	for (int i = 0; i < st->n_tiers; i++)
		if (st->cls[i]->persistent)
			return 1;
	return 0;
}

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

static void evict_victims(kvt_store *st, int tier, kvt_key *v, size_t n);

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

static void store_event_tokens(kvt_store *st, int type, int tier, const kvt_key *key,
			       uint32_t tokens)
{
	const char *medium = st->events ? event_medium(st, tier) : NULL;

	if (medium)
		kvt_events_post(st->events, type, medium, key, tokens ? tokens : st->cfg.chunk_size);
}

static void store_event(kvt_store *st, int type, int tier, const kvt_key *key)
{
	store_event_tokens(st, type, tier, key, 0);
}

uint32_t store_image_tokens(const struct iovec *iov, int n)
{
	const uint8_t *p;

	if (n < 1 || iov[0].iov_len < 116)
		return 0;
	p = (const uint8_t *)iov[0].iov_base + 112; /* token_count, docs/FORMAT.md */
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
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
	pthread_mutex_init(&st->qlock, NULL);
	kvt_cond_init_mono(&st->qcond); /* flush waits on it with a deadline */
	pthread_mutex_init(&st->flight_mu, NULL);
	pthread_mutex_init(&st->err_mu, NULL);
	pthread_rwlock_init(&st->nsa_lock, NULL);
	why_init(&st->why);
	st->max_bg = cfg->workers > 1 ? cfg->workers - 1 : 1;

	for (int i = 0; kvt_tier_classes[i]; i++) {
		const kvt_tier_class *cls = kvt_tier_classes[i];
		kvt_tier *t;
		if (!cls->configured(cfg) || (alone && cls != alone))
			continue;
		if ((rc = cls->open(&st->cfg, io, &t)))
			goto fail;
		add_tier(st, t, cls);
	}

	if (st->cfg.kv_events_on && (rc = kvt_events_open(&st->cfg.kv_events, &st->events)))
		goto fail;
	if ((rc = hier_setup(st)))
		goto fail;
	{
		kvt_tier_stats ts = { 0 };
		if (st->n_tiers)
			st->tiers[0]->ops->stats(st->tiers[0], &ts);
		st->max_bg_bytes = ts.capacity_bytes / 10;
	}
	st->workers = calloc(cfg->workers, sizeof(pthread_t));
	if (!st->workers) {
		rc = kvt_err(KVT_ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < cfg->workers; i++) {
		if (pthread_create(&st->workers[i], NULL, store_worker_main, st)) {
			rc = kvt_err(-EAGAIN, "cannot start worker thread %u", i);
			goto fail;
		}
		st->n_workers++;
	}
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
	pthread_mutex_lock(&st->qlock);
	st->stopping = 1;
	pthread_cond_broadcast(&st->qcond);
	pthread_mutex_unlock(&st->qlock);
	for (uint32_t i = 0; i < st->n_workers; i++)
		pthread_join(st->workers[i], NULL);
	free(st->workers);
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
	pthread_mutex_destroy(&st->qlock);
	pthread_cond_destroy(&st->qcond);
	OPENSSL_cleanse(&st->cfg, sizeof(st->cfg)); /* secrets, the auth key */
	free(st);
}

/* --- tenants' accounts --------------------------------------------------------- */

/* Account of a tenant name: 0 for the default (NULL), else its index in
 * the configuration + 1; KVT_ETENANT if the store does not know it. */
int store_tenant_acct(const kvt_store *st, const char *tenant)
{
	if (!tenant)
		return 0;
	for (uint32_t i = 0; i < st->cfg.n_tenants; i++)
		if (!strcmp(st->cfg.tenants[i].name, tenant))
			return (int)i + 1;
	return kvt_err(KVT_ETENANT, "tenant \"%s\" is not configured", tenant);
}

static size_t nsa_slot(const struct kvt_store *st, const uint8_t *digest)
{
	uint64_t h;

	memcpy(&h, digest, sizeof(h)); /* an HMAC: uniform already */
	return (size_t)h & st->nsa_mask;
}

static int nsa_grow(kvt_store *st)
{
	size_t n = st->nsa ? (st->nsa_mask + 1) * 2 : 64;
	struct ns_acct *old = st->nsa, *nt = calloc(n, sizeof(*nt));
	size_t old_n = st->nsa ? st->nsa_mask + 1 : 0;
	static const uint8_t zero[32];

	if (!nt)
		return kvt_err(KVT_ENOMEM, "out of memory");
	st->nsa = nt;
	st->nsa_mask = n - 1;
	for (size_t i = 0; i < old_n; i++) {
		size_t s;
		if (!memcmp(old[i].digest, zero, 32))
			continue;
		for (s = nsa_slot(st, old[i].digest); memcmp(nt[s].digest, zero, 32);
		     s = (s + 1) & st->nsa_mask)
			;
		nt[s] = old[i];
	}
	free(old);
	return 0;
}

/* Remember which account `ns` belongs to.  The default tenant's
 * namespaces need no entry (a miss is account 0). */
static int nsa_set(kvt_store *st, const kvt_ns *ns, int acct)
{
	static const uint8_t zero[32];
	size_t s;
	int rc = 0;

	if (acct == 0)
		return 0;
	pthread_rwlock_wrlock(&st->nsa_lock);
	if ((st->nsa_n + 1) * 2 > (st->nsa ? st->nsa_mask + 1 : 0) && (rc = nsa_grow(st)))
		goto out;
	for (s = nsa_slot(st, ns->digest); memcmp(st->nsa[s].digest, zero, 32);
	     s = (s + 1) & st->nsa_mask)
		if (!memcmp(st->nsa[s].digest, ns->digest, 32))
			goto out; /* a digest names one tenant: HMAC keys differ */
	memcpy(st->nsa[s].digest, ns->digest, 32);
	st->nsa[s].acct = (uint32_t)acct;
	st->nsa_n++;
out:
	pthread_rwlock_unlock(&st->nsa_lock);
	return rc;
}

int store_ns_acct(kvt_store *st, const kvt_ns *ns)
{
	static const uint8_t zero[32];
	int acct = 0;

	pthread_rwlock_rdlock(&st->nsa_lock);
	if (st->nsa)
		for (size_t s = nsa_slot(st, ns->digest); memcmp(st->nsa[s].digest, zero, 32);
		     s = (s + 1) & st->nsa_mask)
			if (!memcmp(st->nsa[s].digest, ns->digest, 32)) {
				acct = (int)st->nsa[s].acct;
				break;
			}
	pthread_rwlock_unlock(&st->nsa_lock);
	return acct;
}

int kvt_ns_init(kvt_store *st, const kvt_ns_desc *desc, kvt_ns *ns)
{
	int rc, acct;

	if (!st)
		return kvt_err(KVT_EINVAL, "store missing");
	if ((rc = kvt_config_ns(&st->cfg, desc, ns)))
		return rc;
	if ((acct = store_tenant_acct(st, desc->tenant)) < 0)
		return acct;
	why_note_ns(&st->why, desc, ns, acct);
	return nsa_set(st, ns, acct);
}

/* A tier index and a tenant, checked: the tenant's account, or an error. */
static int share_args(kvt_store *st, const char *tenant, int tier)
{
	kvt_err_clear();
	if (!st || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "tier %d of %d", tier, st ? st->n_tiers : 0);
	return store_tenant_acct(st, tenant);
}

int kvt_store_set_quota(kvt_store *st, const char *tenant, int tier,
			uint64_t quota, uint64_t reserve)
{
	kvt_key *v;
	size_t n;
	int rc, acct;

	if ((acct = share_args(st, tenant, tier)) < 0)
		return acct;
	if ((rc = hier_set_share(st->hier, tier, acct, quota, reserve, &v, &n)))
		return kvt_err_prefix(rc, "%s tier, tenant %s: ", st->tiers[tier]->ops->name,
				      tenant ? tenant : "(default)");
	if (n)
		evict_victims(st, tier, v, n);
	free(v);
	return 0;
}

int kvt_store_reconfigure(kvt_store *st, const kvt_config *cfg, char *later, size_t later_len)
{
	int err = 0;

	kvt_err_clear();
	if (!st || !cfg)
		return kvt_err(KVT_EINVAL, "store or configuration missing");
	if (later && later_len)
		kvt_config_changed_later(&st->cfg, cfg, later, later_len);
	for (int i = 0; i < st->n_tiers; i++) {
		const struct kvt_tier_conf *c = &cfg->tier[st->kind[i]];
		struct hier_tier_conf hc = { .eviction = c->eviction, .s3_small_pct = c->s3_small_pct,
					     .s3_promote = c->s3_promote, .admit_rules = c->admit_rules,
					     .admit_seen = c->admit_seen, .write = c->write,
					     .background_bps = c->background_bps };
		kvt_key *v;
		size_t n;
		int rc;

		/* The first tier takes every put: it is never written "none". */
		if (i == 0)
			hc.write = hier_write_mode(st->hier, 0);
		rc = hier_reconfigure(st->hier, i, &hc, &v, &n);
		if (n)
			evict_victims(st, i, v, n);
		free(v);
		if (rc && !err)
			err = kvt_err_prefix(rc, "%s tier: ", st->tiers[i]->ops->name);
		if (rc == 0 || rc == KVT_ENOTSUP)
			st->cfg.tier[st->kind[i]] = *c;
	}
	__atomic_store_n(&st->cfg.ttl_s, cfg->ttl_s, __ATOMIC_RELAXED);
	return err;
}

int kvt_store_tenant_usage(kvt_store *st, const char *tenant, int tier,
			   kvt_tenant_usage *out)
{
	struct hier_share s;
	int rc, acct;

	if (!out)
		return kvt_err(KVT_EINVAL, "output missing");
	memset(out, 0, sizeof(*out));
	if ((acct = share_args(st, tenant, tier)) < 0)
		return acct;
	if ((rc = hier_share(st->hier, tier, acct, &s)))
		return rc;
	out->bytes = s.bytes;
	out->chunks = s.chunks;
	out->quota = s.quota;
	out->reserve = s.reserve;
	out->capacity = s.capacity;
	out->quota_evictions = s.quota_evictions;
	out->share_evictions = s.share_evictions;
	return 0;
}

/* --- put --------------------------------------------------------------------- */

int store_check_args(kvt_store *st, const kvt_ns *ns, const kvt_key *key)
{
	if (!st || !ns || !key)
		return kvt_err(KVT_EINVAL, "store, namespace or key missing");
	if (ns->hash_scheme == 0)
		return kvt_err(KVT_EINVAL, "namespace not initialised (kvt_ns_init)");
	return 0;
}

static int writes_off(kvt_store *st, int i)
{
	long long until = atomic_load(&st->health[i].off_until);
	return until && kvt_mono_ns() < until;
}

/* The error of a write refused while tier i's writes are off: the code and
 * the words of the failure that turned them off (a full disk stays
 * "No space left on device", not a vaguer I/O error), and for how long. */
static int writes_off_text(kvt_store *st, int i, char *buf, size_t len)
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

static int writes_off_err(kvt_store *st, int i)
{
	char why[320];
	int rc = writes_off_text(st, i, why, sizeof(why));

	return kvt_err(rc, "%s", why);
}

/* Count a put's outcome in tier i's health: an I/O error (a negated errno) or a timeout
 * lengthens the streak; anything else that reached the medium ends it. */
static void tier_note_write(kvt_store *st, int i, int rc)
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

/* Durability each tier is asked for: memory gives "cached" only, so a
 * stronger level is the disk tiers' (and the daemon's) to give. */
static int tier_durability(kvt_store *st, int i, int want)
{
	return st->cls[i]->persistent ? want : KVT_DUR_CACHED;
}

/* Copy the image a tier already holds into tiers that can give
 * `durability` and lack it: a put asked to make a cached chunk crash- or
 * power-safe writes the first version down, never the caller's bytes, so
 * every tier keeps holding the same version. */
static int store_harden(kvt_store *st, const kvt_key *key, int holder,
			int durability)
{
	kvt_tier *src = st->tiers[holder];
	kvt_tier_rbuf *rb;
	int rc, done = 0, err = 0;

	if ((rc = src->ops->get(src, key, &rb)))
		return rc == KVT_ENOTFOUND ? kvt_err(KVT_ENOTFOUND, "chunk vanished") : rc;
	for (int i = st->n_tiers - 1; i >= 0; i--) {
		kvt_tier *t = st->tiers[i];
		kvt_tier_wbuf *w;
		if (tier_durability(st, i, durability) < durability ||
		    hier_write_mode(st->hier, i) == KVT_WRITE_NONE)
			continue;
		if (writes_off(st, i)) {
			if (!err)
				err = writes_off_err(st, i);
			continue;
		}
		rc = t->ops->put_begin(t, key, rb->len, &w);
		if (rc == 0) {
			image_copy(rb, w);
			rc = t->ops->put_commit(t, w, durability);
		}
		if (rc != KVT_EEXIST)
			tier_note_write(st, i, rc);
		if (rc == 0)
			store_after_insert(st, i, key, rb->len, -1,
					   store_image_tokens(rb->iov, rb->n_iov));
		if (rc == 0 || rc == KVT_EEXIST)
			done = 1;
		else if (!err)
			err = rc;
	}
	src->ops->release(src, rb);
	if (done)
		return kvt_err(KVT_EEXIST, "key already stored; made %s",
			       durability == KVT_DUR_POWER_SAFE ? "power-safe" : "crash-safe");
	return err ? err : kvt_err(KVT_ENOTSUP, "no tier can give that durability");
}

/* Which tiers a put writes itself (the rest get the chunk by write-through
 * in the background, by demotion, or never): a cached put writes the first
 * tier and lets the lower write-through tiers follow asynchronously; a
 * crash- or power-safe put writes every tier that takes puts, now. */
static unsigned put_mask(kvt_store *st, int durability, int *async_through)
{
	unsigned mask = 0;

	*async_through = 0;
	for (int i = 0; i < st->n_tiers; i++) {
		int w = hier_write_mode(st->hier, i);
		if (w == KVT_WRITE_NONE)
			continue;
		if (durability > KVT_DUR_CACHED) {
			mask |= 1u << i; /* write-back tiers too: asked for now */
		} else if (!mask) {
			mask |= 1u << i; /* the first tier that takes puts */
		} else if (w == KVT_WRITE_THROUGH) {
			*async_through = 1;
		}
	}
	return mask;
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

void store_after_insert(kvt_store *st, int tier, const kvt_key *key,
			 uint64_t len, int acct, uint32_t tokens)
{
	kvt_key *v;
	size_t n;

	store_event_tokens(st, KVT_EV_STORED, tier, key, tokens);
	hier_insert(st->hier, tier, key, len, acct, &v, &n);
	if (n)
		evict_victims(st, tier, v, n);
	free(v);
}

static int expired(const kvt_store *st, const kvt_obj_hdr *h);

/* The writer's side of the TTL: a key held past it in tier i is removed
 * there, so that a put of it stores anew instead of reporting "already
 * stored" for a chunk every read misses.  1 if it was removed. */
static int drop_expired(kvt_store *st, int i, const kvt_key *key)
{
	kvt_tier *t = st->tiers[i];
	kvt_tier_rbuf *rb;
	kvt_obj_hdr h;
	int old;

	if (t->ops->get(t, key, &rb))
		return 0;
	old = store_image_header(rb, &h) == 0 && expired(st, &h);
	t->ops->release(t, rb);
	if (!old || t->ops->del(t, key))
		return 0;
	store_forget(st, i, key, KVT_WHY_EXPIRED);
	return 1;
}

/* A put's second half, once the image is in tier `first`'s wbuf and
 * copied into the others' (w[i] valid where rc[i] == 0): publish, or give
 * back.  `lost`: another writer was first somewhere; `err`: the first error
 * so far. */
static int put_publish(kvt_store *st, const kvt_key *key, uint64_t len,
		       kvt_tier_wbuf **w, int *rc, int first, int lost, int err,
		       int durability, int acct)
{
	int stored = 0, durable = 0;
	/* read before any commit consumes the wbuf that holds the image */
	uint32_t tokens = first >= 0 ? store_image_tokens(w[first]->iov, w[first]->n_iov) : 0;

	if (err && first < 0 && !lost) {
		/* Nothing reserved anywhere, or the image could not be
		 * written: give back what was taken. */
		for (int i = 0; i < st->n_tiers; i++)
			if (rc[i] == 0 && w[i])
				st->tiers[i]->ops->put_abort(st->tiers[i], w[i]);
		return err;
	}
	/* Publish from the bottom up.  The lowest tier is the most widely
	 * shared, so it arbitrates a race: if another writer published the
	 * key there first, our image is withdrawn from every tier above.  A
	 * durable put whose durable tiers all failed is withdrawn from the
	 * memory tier too: the caller is told it failed, and a retry must not
	 * find a cached copy and call it stored. */
	for (int i = st->n_tiers - 1; i >= 0; i--) {
		kvt_tier *t = st->tiers[i];
		int want = tier_durability(st, i, durability);
		if (rc[i] != 0)
			continue;
		if (lost || (want < durability && !durable)) {
			t->ops->put_abort(t, w[i]);
			continue;
		}
		rc[i] = t->ops->put_commit(t, w[i], want);
		tier_note_write(st, i, rc[i]);
		if (rc[i] == 0) {
			store_after_insert(st, i, key, len, acct, tokens);
			stored++;
			if (want >= durability)
				durable = 1;
		} else if (rc[i] == KVT_EEXIST) {
			lost = 1;
		} else if (!err) {
			err = rc[i];
		}
	}
	if (lost)
		return kvt_err(KVT_EEXIST, "another writer published the key first");
	if (stored && durable)
		return 0;
	if (!err)
		err = kvt_err(KVT_EFULL, "no tier accepted the chunk");
	return err;
}

static int store_put(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		     const void *const *layers, int durability, unsigned mask)
{
	kvt_tier_wbuf *w[KVT_MAX_TIERS] = { 0 };
	int rc[KVT_MAX_TIERS];
	kvt_obj_hdr *h;
	uint64_t len;
	int first = -1, lost = 0, err = 0, holder = -1;
	int acct = store_ns_acct(st, ns);

	for (int i = 0; i < KVT_MAX_TIERS; i++)
		rc[i] = 1; /* not begun */

	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE)
		return kvt_err(KVT_EINVAL, "durability %d unknown", durability);
	if (durability > KVT_DUR_CACHED && !store_has_persistent(st))
		return kvt_err(KVT_ENOTSUP,
			       "%s asked but the store has no disk tier",
			       durability == KVT_DUR_POWER_SAFE ? "power-safe" : "crash-safe");
	/* First version wins in every tier: a key held anywhere is not
	 * written again, or two tiers could serve different bytes for it.  A
	 * key held only where the asked durability is not given is written
	 * down from the copy that exists. */
	if (st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only (read_only: true)");
	for (int i = 0; i < st->n_tiers; i++) {
		if (st->tiers[i]->ops->put_unprobed ||
		    st->tiers[i]->ops->exists(st->tiers[i], key) != 1)
			continue;
		if (__atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED) && drop_expired(st, i, key))
			continue;
		if (tier_durability(st, i, durability) >= durability)
			return kvt_err(KVT_EEXIST, "key already stored in the %s tier",
				       st->tiers[i]->ops->name);
		holder = i;
	}
	if (holder >= 0)
		return store_harden(st, key, holder, durability);
	h = malloc(sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if ((err = kvt_obj_hdr_init(h, ns, key))) {
		free(h);
		return err;
	}
	len = KVT_OBJ_HEADER_BYTES + h->payload_len;

	for (int i = 0; i < st->n_tiers; i++) {
		kvt_tier *t = st->tiers[i];
		if (!(mask & (1u << i)))
			continue;
		if (writes_off(st, i)) {
			rc[i] = writes_off_err(st, i);
			if (!err)
				err = rc[i];
			continue;
		}
		if (first < 0) {
			rc[i] = t->ops->put_begin(t, key, len, &w[i]);
		} else { /* the image is whole in the first tier's space */
			kvt_tier_rbuf src = { .key = *key, .len = len, .iov = w[first]->iov,
					      .n_iov = w[first]->n_iov };
			rc[i] = begin_from(t, &src, &w[i]);
		}
		if (rc[i] != 0) /* success is judged at commit */
			tier_note_write(st, i, rc[i]);
		if (rc[i] == KVT_EEXIST) {
			lost = 1; /* published by someone else meanwhile */
		} else if (rc[i] == 0 && first < 0) {
			int e = kvt_obj_write_iov(h, layers, w[i]->iov, w[i]->n_iov);
			if (e) {
				t->ops->put_abort(t, w[i]);
				rc[i] = e;
				if (!err)
					err = e;
				break;
			}
			first = i;
		} else if (rc[i] != 0 && !err) {
			err = rc[i];
		}
	}
	free(h);
	return put_publish(st, key, len, w, rc, first, lost, err, durability, acct);
}

/* --- moving chunks between tiers ------------------------------------------------ */

/* One copy of a chunk's image from tier `src` to tier `dst`, run by a worker
 * (or inline when the background queue is long: back-pressure instead of
 * unbounded memory).  The image is borrowed from `src` when the job is made,
 * so it stays readable even if `src` drops the chunk meanwhile. */
enum { MOVE_DEMOTE = 1, MOVE_THROUGH = 2, MOVE_PROMOTE = 3 };

struct move_job {
	struct job job;
	int kind;
	int src;
	kvt_key key;
	kvt_tier_rbuf *rb;
	uint64_t held; /* bytes counted in queued_bg_bytes */
	double queued_s; /* store_now_s() at submit */
};

#define MAX_QUEUED_BG 64
/* A queued write-through copy starts no sooner than this after its put:
 * a chunk deleted within it is never written down (see move_run). */
#define THROUGH_SETTLE_S 0.010

static int flight_enter(kvt_store *st, const kvt_key *key)
{
	int ok = 1;

	pthread_mutex_lock(&st->flight_mu);
	for (size_t i = 0; i < st->n_flight; i++)
		if (!memcmp(&st->flight[i], key, sizeof(*key)))
			ok = 0;
	if (ok && st->n_flight == st->cap_flight) {
		size_t nc = st->cap_flight ? st->cap_flight * 2 : 16;
		kvt_key *nf = realloc(st->flight, nc * sizeof(*nf));
		if (nf) {
			st->flight = nf;
			st->cap_flight = nc;
		} else {
			ok = 0;
		}
	}
	if (ok)
		st->flight[st->n_flight++] = *key;
	pthread_mutex_unlock(&st->flight_mu);
	return ok;
}

static void flight_leave(kvt_store *st, const kvt_key *key)
{
	pthread_mutex_lock(&st->flight_mu);
	for (size_t i = 0; i < st->n_flight; i++)
		if (!memcmp(&st->flight[i], key, sizeof(*key))) {
			st->flight[i] = st->flight[--st->n_flight];
			break;
		}
	pthread_mutex_unlock(&st->flight_mu);
}

/* Copy the borrowed image into tier `dst`.  0, KVT_EEXIST or an error. */
static int copy_into(kvt_store *st, int dst, const kvt_tier_rbuf *rb,
		     int durability)
{
	kvt_tier *t = st->tiers[dst];
	kvt_tier_wbuf *w;
	int rc;

	if (writes_off(st, dst))
		return -EIO;
	rc = begin_from(t, rb, &w);
	if (rc == 0)
		rc = t->ops->put_commit(t, w, durability);
	if (rc != KVT_EEXIST)
		tier_note_write(st, dst, rc);
	if (rc == 0)
		store_after_insert(st, dst, &rb->key, rb->len, -1,
				   store_image_tokens(rb->iov, rb->n_iov));
	return rc;
}

/* Where a victim of tier `src` goes: the first tier below that is
 * write-back, or write-through but missing it (its write-through copy never
 * happened: the chunk was evicted first, or the copy failed).  -1: none. */
static int demote_target(kvt_store *st, int src, const kvt_key *key)
{
	for (int d = src + 1; d < st->n_tiers; d++) {
		int w = hier_write_mode(st->hier, d);
		if (w == KVT_WRITE_NONE)
			continue;
		if (st->tiers[d]->ops->exists(st->tiers[d], key) == 1)
			return -1; /* held below already */
		return d;
	}
	return -1;
}

/* Copy a lower tier's image into tier `dst` and verify it in the same
 * pass: the payload is re-checksummed as it is copied (kvt_obj_write_iov),
 * and the copy is published only if every layer's checksum matches the
 * header read from the source.  One pass over the bytes where verify, then
 * copy, would take two.  KVT_ECORRUPT if the source is bad. */
int store_copy_verified(kvt_store *st, int dst, const kvt_tier_rbuf *rb,
			 const kvt_obj_hdr *src_hdr)
{
	const void *layers[KVT_MAX_LAYERS];
	kvt_tier *t = st->tiers[dst];
	kvt_obj_hdr *h;
	kvt_tier_wbuf *w;
	const uint8_t *base;
	int rc;

	if (rb->n_iov != 1 || rb->iov[0].iov_len < rb->len) { /* paged source */
		rc = kvt_obj_verify_iov(src_hdr, rb->iov, rb->n_iov);
		return rc ? rc : copy_into(st, dst, rb, KVT_DUR_CACHED);
	}
	if (writes_off(st, dst))
		return -EIO;
	h = malloc(sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	*h = *src_hdr;
	base = (const uint8_t *)rb->iov[0].iov_base + KVT_OBJ_HEADER_BYTES;
	for (uint32_t i = 0; i < h->n_layers; i++)
		layers[i] = base + h->layers[i].offset;
	rc = t->ops->put_begin(t, &rb->key, rb->len, &w);
	if (rc == 0) {
		rc = kvt_obj_write_iov(h, layers, w->iov, w->n_iov);
		for (uint32_t i = 0; rc == 0 && i < h->n_layers; i++)
			if (h->layers[i].csum != src_hdr->layers[i].csum)
				rc = kvt_err(KVT_ECORRUPT, "layer %u checksum mismatch", i);
		if (rc)
			t->ops->put_abort(t, w);
		else
			rc = t->ops->put_commit(t, w, KVT_DUR_CACHED);
	}
	free(h);
	if (rc != KVT_EEXIST && rc != KVT_ECORRUPT)
		tier_note_write(st, dst, rc);
	if (rc == 0)
		store_after_insert(st, dst, &rb->key, rb->len, -1,
				   store_image_tokens(rb->iov, rb->n_iov));
	return rc;
}

static void move_run(kvt_store *st, struct job *j)
{
	struct move_job *m = (struct move_job *)j;
	kvt_tier *src = st->tiers[m->src];

	if (m->kind == MOVE_PROMOTE) {
		/* This is a second read of the lower tier: verify it before it
		 * lands where reads are not verified. */
		kvt_obj_hdr *h = malloc(sizeof(*h));
		/* A chunk deleted since the read that asked for it is not
		 * brought back (the window left is one copy long). */
		if (h && src->ops->exists(src, &m->key) == 1 &&
		    store_image_header(m->rb, h) == 0 &&
		    store_copy_verified(st, 0, m->rb, h) == 0)
			hier_count(st->hier, m->src, HIER_PROMOTION);
		free(h);
		flight_leave(st, &m->key);
	} else if (m->kind == MOVE_DEMOTE) {
		int d = demote_target(st, m->src, &m->key);
		if (d >= 0 && hier_admit(st->hier, d, &m->key)) {
			hier_throttle(st->hier, d, m->rb->len);
			if (copy_into(st, d, m->rb, KVT_DUR_CACHED) == 0)
				hier_count(st->hier, d, HIER_DEMOTION);
		}
	} else { /* MOVE_THROUGH: every write-through tier below the first */
		/* Queued (not run inline by a writer the queue pushed back):
		 * let it settle first.  kvtierd deletes a key's version at the
		 * key's next SET; under redis-benchmark's stream of SETs of one
		 * key every version was written down and then unlinked (2,000
		 * files for 2,000 SETs of 1 MiB, making them a third of the
		 * cached daemon's CPU time: ext4 looking for a free inode among
		 * ones just freed), and the check below alone still let about
		 * half through, copies that ran before their overwrite came.
		 * With the wait: one or two.  The cost is that much longer for
		 * an acknowledged put to reach the disk, which cached promises
		 * nothing about. */
		double wait = m->held ? m->queued_s + THROUGH_SETTLE_S - store_now_s() : 0;
		if (wait > 0) {
			struct timespec ts = { 0, (long)(wait * 1e9) };
			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}
		for (int d = m->src + 1; d < st->n_tiers; d++) {
			int rc;
			if (hier_write_mode(st->hier, d) != KVT_WRITE_THROUGH ||
			    !hier_admit(st->hier, d, &m->key))
				continue;
			/* Gone from the tier it was put in since it was queued:
			 * deleted (kvtierd's overwritten versions are), so a
			 * copy would be written only to be deleted again; or
			 * evicted, and then its demotion, queued with its own
			 * borrow at the eviction, carries it down.  Under a
			 * stream of overwrites this keeps the disk's work to
			 * the versions that live (docs/DAEMON.md, "Benchmark"). */
			if (src->ops->exists(src, &m->key) != 1)
				break;
			hier_throttle(st->hier, d, m->rb->len);
			rc = copy_into(st, d, m->rb, KVT_DUR_CACHED);
			if (rc == KVT_EEXIST) {
				/* Another writer (another node, on a shared tier)
				 * published first: its version wins, so ours
				 * leaves the tiers above and later reads load
				 * the winner. */
				for (int u = 0; u < d; u++) {
					if (st->tiers[u]->ops->del(st->tiers[u], &m->key) == 0)
						store_forget(st, u, &m->key, KVT_WHY_DELETED);
					else
						hier_remove(st->hier, u, &m->key);
				}
				break;
			}
		}
	}
	src->ops->release(src, m->rb);
	if (m->held) {
		pthread_mutex_lock(&st->qlock);
		st->queued_bg_bytes -= m->held;
		pthread_mutex_unlock(&st->qlock);
	}
	free(m);
}

/* Queue a move of `key` out of tier `src`; inline when the background
 * queue is full (demotions and write-through must not pile up unbounded). */
static void move_submit(kvt_store *st, int kind, int src, const kvt_key *key)
{
	struct move_job *m;
	kvt_tier *t = st->tiers[src];
	int prio = kind == MOVE_PROMOTE ? PRIO_PROMOTE : PRIO_BACKGROUND;

	m = calloc(1, sizeof(*m));
	if (!m || t->ops->get(t, key, &m->rb)) { /* no memory, or gone */
		free(m);
		if (kind == MOVE_PROMOTE)
			flight_leave(st, key);
		return;
	}
	m->job.run = move_run;
	m->kind = kind;
	m->src = src;
	m->key = *key;
	m->queued_s = store_now_s();
	/* Back-pressure: queued copies hold their images (DRAM pages among
	 * them), so beyond a count or a share of the first tier the copy is
	 * made here, by the writer that is producing faster than the tiers
	 * below absorb. */
	if (prio == PRIO_BACKGROUND) {
		int inline_now;
		pthread_mutex_lock(&st->qlock);
		inline_now = st->queued_bg >= MAX_QUEUED_BG ||
			     st->queued_bg_bytes + m->rb->len > st->max_bg_bytes;
		if (!inline_now)
			st->queued_bg_bytes += m->rb->len;
		pthread_mutex_unlock(&st->qlock);
		if (inline_now) {
			move_run(st, &m->job);
			return;
		}
		m->held = m->rb->len;
	}
	if (store_job_submit(st, &m->job, prio)) {
		if (m->held) {
			pthread_mutex_lock(&st->qlock);
			st->queued_bg_bytes -= m->held;
			pthread_mutex_unlock(&st->qlock);
			m->held = 0;
		}
		move_run(st, &m->job);
	}
}

/* Victims the policy of `tier` chose: a write-back tier below gets a copy,
 * then the chunk leaves `tier`.  (A write-through tier below has it
 * already.) */
static void evict_victims(kvt_store *st, int tier, kvt_key *v, size_t n)
{
	kvt_tier *t = st->tiers[tier];

	for (size_t i = 0; i < n; i++) {
		if (demote_target(st, tier, &v[i]) >= 0)
			move_submit(st, MOVE_DEMOTE, tier, &v[i]);
		if (t->ops->del(t, &v[i]) == 0) /* the policy has forgotten it */
			store_lost(st, tier, &v[i], KVT_WHY_EVICTED);
	}
}

static int put_chunk(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		     const void *const *layers, int durability)
{
	int async_through, rc, first = -1;
	unsigned mask = put_mask(st, durability, &async_through);

	if (!mask)
		return kvt_err(KVT_ENOTSUP, "no tier takes puts (every tier's write is none)");
	rc = store_put(st, ns, key, layers, durability, mask);
	for (int i = 0; i < st->n_tiers && first < 0; i++)
		if (mask & (1u << i))
			first = i;
	if (rc == 0 && async_through)
		move_submit(st, MOVE_THROUGH, first, key);
	return rc;
}

/* --- images another process writes (the local server, local_server.c) ------------- */

int store_image_held(kvt_store *st, const kvt_key *key)
{
	for (int i = 0; i < st->n_tiers; i++)
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1 &&
		    !(__atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED) && drop_expired(st, i, key)))
			return kvt_err(KVT_EEXIST, "key already stored in the %s tier",
				       st->tiers[i]->ops->name);
	return 0;
}

int store_image_begin(kvt_store *st, const kvt_key *key, uint64_t len,
		      kvt_tier_wbuf **w, int *first)
{
	int async_through, rc;
	unsigned mask = put_mask(st, KVT_DUR_CACHED, &async_through);

	*w = NULL;
	if (st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only (read_only: true)");
	if (len < KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_EINVAL, "an image of %llu bytes has no room for its header",
			       (unsigned long long)len);
	if ((rc = store_image_held(st, key)))
		return rc;
	*first = mask ? __builtin_ctz(mask) : -1;
	if (*first != 0)
		return kvt_err(KVT_ENOTSUP, "the first tier takes no puts");
	if (writes_off(st, 0))
		return writes_off_err(st, 0);
	rc = st->tiers[0]->ops->put_begin(st->tiers[0], key, len, w);
	if (rc)
		tier_note_write(st, 0, rc);
	return rc;
}

int store_image_commit(kvt_store *st, int first, kvt_tier_wbuf *w0, int durability,
		       int acct)
{
	kvt_tier_wbuf *w[KVT_MAX_TIERS] = { 0 };
	int rc[KVT_MAX_TIERS];
	int async_through, lost = 0, err = 0;
	kvt_key key = w0->key;
	uint64_t len = w0->len;
	unsigned mask;

	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE ||
	    (durability > KVT_DUR_CACHED && !store_has_persistent(st))) {
		st->tiers[first]->ops->put_abort(st->tiers[first], w0);
		return kvt_err(durability > KVT_DUR_POWER_SAFE || durability < 0 ? KVT_EINVAL
										 : KVT_ENOTSUP,
			       "durability %d: unknown, or the daemon has no disk tier",
			       durability);
	}
	mask = put_mask(st, durability, &async_through);
	for (int i = 0; i < KVT_MAX_TIERS; i++)
		rc[i] = 1; /* not begun */
	rc[first] = 0;
	w[first] = w0;
	for (int i = first + 1; i < st->n_tiers; i++) {
		kvt_tier_rbuf src = { .key = key, .len = len, .iov = w0->iov, .n_iov = w0->n_iov };
		if (!(mask & (1u << i)))
			continue;
		if (writes_off(st, i)) {
			if (!err)
				err = writes_off_err(st, i);
			continue;
		}
		rc[i] = begin_from(st->tiers[i], &src, &w[i]);
		if (rc[i] != 0)
			tier_note_write(st, i, rc[i]);
		if (rc[i] == KVT_EEXIST)
			lost = 1;
		else if (rc[i] && !err)
			err = rc[i];
	}
	err = put_publish(st, &key, len, w, rc, first, lost, err, durability, acct);
	if (err == 0 && async_through)
		move_submit(st, MOVE_THROUGH, first, &key);
	return err;
}

void store_image_abort(kvt_store *st, int first, kvt_tier_wbuf *w)
{
	st->tiers[first]->ops->put_abort(st->tiers[first], w);
}

/* A tier whose reads fetch from elsewhere (peers) reads into DRAM pages
 * directly when it can: one copy fewer than into its own buffer and then
 * up. */
static int fetch_into(const kvt_store *st, int i)
{
	return i > 0 && st->cls[i]->fetches && st->tiers[i]->ops->get_into &&
	       st->kind[0] == KVT_CT_DRAM;
}

/* The order a read asks the tiers in: the node's own first, as configured
 * (fastest first), then the remote ones — another node's daemon, the
 * shared file system, S3 — cheapest first by what the cost model expects a
 * read of `bytes` to take from each: the fixed cost and bandwidth it has
 * measured (planning speeds until it has).  So a decode node fetches from
 * its prefill node when that node answers faster than the shared tiers,
 * and from the shared file system when it does not.  One such read in 32
 * asks the runner-up first, so a tier that was slow once is measured again
 * and can win its place back.  The registry lists every remote kind after
 * the others, so ord[i] == i for the node's own tiers.  `bytes` 0: the
 * caller does not know the size (the local protocol's GET). */
static void read_order(kvt_store *st, uint64_t bytes, int *ord)
{
	double est[KVT_MAX_TIERS];
	int n = 0, first;

	if (!bytes) /* not known to the caller: the last read's, or a chunk's */
		bytes = atomic_load(&st->last_read_bytes);
	if (!bytes)
		bytes = 1u << 20;

	for (int i = 0; i < st->n_tiers; i++)
		if (!st->cls[i]->remote)
			ord[n++] = i;
	first = n;
	for (int i = 0; i < st->n_tiers; i++) {
		int k;
		if (!st->cls[i]->remote)
			continue;
		pthread_mutex_lock(&st->perf[i].mu);
		est[i] = st->perf[i].lat_us * 1e-6 + (double)bytes / (st->perf[i].gbps * 1e9);
		pthread_mutex_unlock(&st->perf[i].mu);
		for (k = n; k > first && est[ord[k - 1]] > est[i]; k--)
			ord[k] = ord[k - 1];
		ord[k] = i;
		n++;
	}
	if (n - first > 1 && (atomic_fetch_add(&st->remote_reads, 1) & 31) == 31) {
		int x = ord[first];
		ord[first] = ord[first + 1];
		ord[first + 1] = x;
	}
}

int store_image_get(kvt_store *st, const kvt_key *key, kvt_tier_rbuf **rb)
{
	kvt_tier *t0 = st->tiers[0];
	int rc = t0->ops->get(t0, key, rb);

	if (rc != KVT_ENOTFOUND)
		return rc;
	/* Held below only: copied up into the first tier now, verified in
	 * the copy (a bad copy is not promoted), then served from there. */
	int ord[KVT_MAX_TIERS];
	read_order(st, 0, ord);
	for (int j = 1; j < st->n_tiers; j++) {
		int i = ord[j];
		kvt_tier *t = st->tiers[i];
		kvt_tier_rbuf *src;
		kvt_obj_hdr h;
		double t_read = store_now_s();

		if (fetch_into(st, i)) {
			rc = store_promote_into(st, NULL, key, i);
			if (rc == 0 || rc == KVT_EEXIST)
				return t0->ops->get(t0, key, rb);
			if (rc != KVT_EFULL && rc != KVT_ENOMEM && rc != KVT_ETOOBIG)
				continue; /* a miss there, or a failure it reported */
		}
		if (t->ops->get(t, key, &src))
			continue;
		if (st->cls[i]->remote)
			store_perf_note(st, i, src->len, store_now_s() - t_read);
		rc = store_image_header(src, &h);
		if (rc == 0)
			rc = store_copy_verified(st, 0, src, &h);
		if (rc <= KVT_EBADMAGIC && rc >= KVT_EMALFORMED) { /* the image is bad */
			t->ops->corrupt(t, src);
			store_forget(st, i, key, KVT_WHY_CORRUPT);
		}
		t->ops->release(t, src);
		if (rc && rc != KVT_EEXIST)
			return rc;
		if (rc == 0)
			hier_count(st->hier, i, HIER_PROMOTION);
		hier_hit(st->hier, i, key);
		return t0->ops->get(t0, key, rb);
	}
	return KVT_ENOTFOUND;
}

int store_image_exists(kvt_store *st, const kvt_key *key)
{
	for (int i = 0; i < st->n_tiers; i++)
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1)
			return 1;
	return 0;
}

int store_image_del(kvt_store *st, const kvt_key *key)
{
	int rc, found = 0, err = 0;

	if (st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only (read_only: true)");
	for (int i = 0; i < st->n_tiers; i++) {
		rc = st->tiers[i]->ops->del(st->tiers[i], key);
		if (rc == 0)
			store_forget(st, i, key, KVT_WHY_DELETED);
		else if (rc == KVT_ENOTFOUND)
			hier_remove(st->hier, i, key);
		if (rc == 0)
			found = 1;
		else if (rc != KVT_ENOTFOUND && !err)
			err = rc; /* e.g. unlink refused: the chunk may come back */
	}
	if (err)
		return err;
	return found ? 0 : kvt_err(KVT_ENOTFOUND, "no chunk under that key");
}

/* --- puts written in place (kvt_put_reserve): an image begun in the first
 * tier, its payload written by the caller, sealed and committed ---------- */

struct kvt_put_buf {
	kvt_store *st;
	kvt_obj_hdr h;
	kvt_tier_wbuf *w;
	int first, durability, acct;
	uint32_t summed;        /* layers whose checksum is computed */
	struct iovec *iov;
	int n_iov;
};

int kvt_put_reserve(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int durability,
		    kvt_put_buf **out)
{
	kvt_put_buf *b;
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	if (!out)
		return kvt_err(KVT_EINVAL, "output missing");
	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE)
		return kvt_err(KVT_EINVAL, "durability %d unknown", durability);
	if (durability > KVT_DUR_CACHED && !store_has_persistent(st))
		return kvt_err(KVT_ENOTSUP, "%s asked but the store has no disk tier",
			       durability == KVT_DUR_POWER_SAFE ? "power-safe" : "crash-safe");
	b = calloc(1, sizeof(*b));
	if (!b)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if ((rc = kvt_obj_hdr_init(&b->h, ns, key)) ||
	    (rc = store_image_begin(st, key, KVT_OBJ_HEADER_BYTES + b->h.payload_len, &b->w,
				    &b->first))) {
		free(b);
		return rc;
	}
	kvt_tier_rbuf img = { .key = *key, .len = b->w->len, .iov = b->w->iov,
			      .n_iov = b->w->n_iov };
	if ((rc = store_payload_iov(&img, KVT_OBJ_HEADER_BYTES, &b->iov, &b->n_iov))) {
		store_image_abort(st, b->first, b->w);
		free(b);
		return rc;
	}
	/* The space may be rounded up (pages, O_DIRECT): the caller sees the
	 * payload's bytes alone. */
	uint64_t left = b->h.payload_len;
	for (int i = 0; i < b->n_iov; i++) {
		if (b->iov[i].iov_len > left)
			b->iov[i].iov_len = (size_t)left;
		left -= b->iov[i].iov_len;
		if (!left) {
			b->n_iov = i + 1;
			break;
		}
	}
	b->st = st;
	b->durability = durability;
	b->acct = store_ns_acct(st, ns);
	*out = b;
	return 0;
}

int kvt_put_buf_iov(const kvt_put_buf *b, const struct iovec **iov, int *n_iov)
{
	if (!b || !iov || !n_iov)
		return kvt_err(KVT_EINVAL, "put buffer or outputs missing");
	*iov = b->iov;
	*n_iov = b->n_iov;
	return 0;
}

int kvt_put_buf_written(kvt_put_buf *b, uint64_t bytes)
{
	if (!b)
		return kvt_err(KVT_EINVAL, "put buffer missing");
	while (b->summed < b->h.n_layers &&
	       b->h.layers[b->summed].offset + b->h.layers[b->summed].length <= bytes) {
		int rc = kvt_obj_layer_sum_iov(&b->h, b->w->iov, b->w->n_iov, b->summed);
		if (rc)
			return rc;
		b->summed++;
	}
	return 0;
}

int kvt_put_publish(kvt_put_buf *b)
{
	int rc;

	kvt_err_clear();
	if (!b)
		return kvt_err(KVT_EINVAL, "put buffer missing");
	rc = kvt_obj_seal_iov(&b->h, b->w->iov, b->w->n_iov, b->summed);
	if (rc)
		store_image_abort(b->st, b->first, b->w);
	else
		rc = store_image_commit(b->st, b->first, b->w, b->durability, b->acct);
	free(b->iov);
	free(b);
	return rc;
}

void kvt_put_cancel(kvt_put_buf *b)
{
	if (!b)
		return;
	store_image_abort(b->st, b->first, b->w);
	free(b->iov);
	free(b);
}

int kvt_put_layers(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		   const void *const *layers, uint32_t n_layers, int durability)
{
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	if (!layers || n_layers != ns->layout.num_layers)
		return kvt_err(KVT_ELAYOUT, "%u layers given, namespace has %u",
			       n_layers, ns->layout.num_layers);
	for (uint32_t i = 0; i < n_layers; i++)
		if (!layers[i])
			return kvt_err(KVT_EINVAL, "layer %u missing", i);
	return put_chunk(st, ns, key, layers, durability);
}

int kvt_put(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	    const void *payload, size_t len, int durability)
{
	const void *layers[KVT_MAX_LAYERS];
	uint64_t want, per;
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	want = kvt_layout_payload_bytes(&ns->layout);
	if (want == 0)
		return KVT_ELAYOUT;
	if (!payload || len != want)
		return kvt_err(KVT_ELAYOUT,
			       "payload is %zu bytes, the namespace's layout needs %llu",
			       len, (unsigned long long)want);
	per = kvt_layout_layer_bytes(&ns->layout);
	for (uint32_t i = 0; i < ns->layout.num_layers; i++)
		layers[i] = (const char *)payload + i * per;
	return put_chunk(st, ns, key, layers, durability);
}

/* --- get ------------------------------------------------------------------------ */

/* Borrow `key` from the first tier that holds a valid copy.  Bad copies are
 * dropped from their tier (counted there) and the search goes on. */
/* Count one read served by tier i in its latency histogram. */
static void store_perf_hist(kvt_store *st, int i, double secs)
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

double store_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Past the store's TTL.  Saturating: a TTL near the largest number never
 * wraps into "expired long ago". */
static int expired(const kvt_store *st, const kvt_obj_hdr *h)
{
	struct timespec now;
	uint64_t born = h->created_ns / 1000000000ull;

	uint64_t ttl = __atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED); /* reloadable */

	if (!ttl || ttl > UINT64_MAX - born)
		return 0;
	clock_gettime(CLOCK_REALTIME, &now);
	return now.tv_sec > 0 && (uint64_t)now.tv_sec > born + ttl;
}

double store_held_expired(kvt_store *st, int tier, const kvt_key *key)
{
	kvt_tier *t = st->tiers[tier];
	kvt_tier_rbuf *rb;
	kvt_obj_hdr h;
	double born = 0;

	if (!__atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED) || t->ops->get(t, key, &rb))
		return 0;
	if (store_image_header(rb, &h) == 0 && expired(st, &h))
		born = (double)h.created_ns / 1e9;
	t->ops->release(t, rb);
	return born;
}

/* A miss after some tier failed says what failed: an unreachable
 * endpoint or a failing disk is not "no chunk under that key". */
static void note_failure(char *why, size_t len, int *first, int rc,
			 const char *tier)
{
	if (*first)
		return;
	*first = rc;
	snprintf(why, len, "%s tier: %s", tier, kvt_errmsg()[0] ? kvt_errmsg()
								 : kvt_strerror(rc));
}

int store_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
			kvt_ref **out, int *tier_out, int dev)
{
	char why[384] = "";
	int failed = 0, bad = 0, ord[KVT_MAX_TIERS], ordered = 0, copied_up = 0;

	for (int j = 0; j < st->n_tiers; j++) {
		int i = ordered ? ord[j] : j;
		kvt_tier *t;
		kvt_tier_rbuf *rb;
		kvt_ref *ref;
		int on_dev, rc;
		double t0;

		if (!ordered && st->n_remote > 1 && st->cls[j]->remote) {
			read_order(st, KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout),
				   ord);
			ordered = 1;
			i = ord[j];
		}
		t = st->tiers[i];
		if (fetch_into(st, i) && !copied_up) {
			/* Fetched over the network straight into DRAM pages,
			 * checked there, and the read served from DRAM. */
			rc = store_promote_into(st, ns, key, i);
			if (rc == 0 || rc == KVT_EEXIST) {
				copied_up = 1;
				ordered = 0;
				j = -1;
				continue;
			}
			if (rc == KVT_ENOTFOUND)
				continue;
			if (rc == KVT_EFULL || rc == KVT_ENOMEM || rc == KVT_ETOOBIG)
				goto fetch_plain; /* no room above: the tier's own buffer */
			kvt_log(KVT_LOG_WARN, "%s tier: read failed: %s (%s)", t->ops->name,
				kvt_strerror(rc), kvt_errmsg());
			if (!failed && rc > KVT_ERR_BASE)
				note_failure(why, sizeof(why), &failed, rc, t->ops->name);
			else if (!failed && !bad)
				note_failure(why, sizeof(why), &bad, rc, t->ops->name);
			continue;
		}
fetch_plain:
		on_dev = dev && t->ops->get_dev;
		t0 = st->cls[i]->remote ? store_now_s() : 0;
		rc = on_dev ? t->ops->get_dev(t, key, &rb) : t->ops->get(t, key, &rb);
		if (rc == KVT_ENOTFOUND)
			continue;
		if (rc == 0 && st->cls[i]->remote)
			/* the read is the transfer: what the cost model learns */
			store_perf_note(st, i, rb->len, store_now_s() - t0);
		if (rc < 0) {
			kvt_log(KVT_LOG_WARN, "%s tier: read failed: %s (%s)",
				t->ops->name, kvt_strerror(rc), kvt_errmsg());
			if (rc > KVT_ERR_BASE || rc == KVT_ETIMEDOUT)
				note_failure(why, sizeof(why), &failed, rc, t->ops->name);
			else if (!failed)
				note_failure(why, sizeof(why), &bad, rc, t->ops->name);
			continue;
		}
		ref = calloc(1, sizeof(*ref));
		if (!ref) {
			t->ops->release(t, rb);
			return kvt_err(KVT_ENOMEM, "out of memory");
		}
		ref->st = st;
		ref->tier = t;
		ref->rb = rb;
		ref->iov = NULL;
		ref->dev = on_dev;
		rc = store_image_header(rb, &ref->hdr);
		if (rc == 0)
			rc = kvt_obj_hdr_expect(&ref->hdr, ns, key);
		if (rc == 0 && rb->len != KVT_OBJ_HEADER_BYTES + ref->hdr.payload_len)
			rc = kvt_err(KVT_ETRUNCATED, "image is %llu bytes, header says %llu",
				     (unsigned long long)rb->len,
				     (unsigned long long)(KVT_OBJ_HEADER_BYTES +
							  ref->hdr.payload_len));
		if (rc == 0)
			rc = store_payload_iov(rb, KVT_OBJ_HEADER_BYTES, &ref->iov, &ref->n_iov);
		if (rc == KVT_EMISMATCH) {
			/* Another namespace's chunk under this key: not ours to
			 * read, and not ours to drop either. */
			free(ref->iov);
			t->ops->release(t, rb);
			free(ref);
			continue;
		}
		if (rc == 0 && expired(st, &ref->hdr)) {
			/* Past its TTL: a miss.  A read removes nothing: the
			 * next put of the key replaces it (store_put), and
			 * eviction or GC reclaims it. */
			free(ref->iov);
			t->ops->release(t, rb);
			free(ref);
			continue;
		}
		if (rc) {
			char hex[65];
			kvt_key_hex(key, hex);
			kvt_log(KVT_LOG_WARN, "%s tier: not serving %s: %s (%s)",
				t->ops->name, hex, kvt_strerror(rc), kvt_errmsg());
			if (!failed)
				note_failure(why, sizeof(why), &bad, rc, t->ops->name);
			if (rc != KVT_ENOMEM) {
				t->ops->corrupt(t, rb);
				store_forget(st, i, key, KVT_WHY_CORRUPT);
			}
			t->ops->release(t, rb);
			free(ref);
			continue;
		}
		hier_hit(st->hier, i, key);
		if (st->cls[i]->fetches && i > 0 && !copied_up) {
			/* Fetched over the network and kept nowhere: copied up
			 * into the first tier now (verified as it is copied),
			 * and the read served from there. */
			rc = store_copy_verified(st, 0, rb, &ref->hdr);
			if (rc == 0 || rc == KVT_EEXIST) {
				hier_count(st->hier, i, HIER_PROMOTION);
				free(ref->iov);
				t->ops->release(t, rb);
				free(ref);
				copied_up = 1;
				ordered = 0;
				j = -1;
				continue;
			}
			if (rc == KVT_ECORRUPT) {
				char hex[65];
				kvt_key_hex(key, hex);
				kvt_log(KVT_LOG_WARN, "%s tier: chunk %s failed verification: %s",
					t->ops->name, hex, kvt_errmsg());
				if (!failed)
					note_failure(why, sizeof(why), &bad, rc, t->ops->name);
				t->ops->corrupt(t, rb);
				store_forget(st, i, key, KVT_WHY_CORRUPT);
				free(ref->iov);
				t->ops->release(t, rb);
				free(ref);
				continue;
			}
			/* no room above: served from the fetched copy */
		}
		*out = ref;
		*tier_out = i;
		return 0;
	}
	if (failed)
		return kvt_err(failed, "%s", why);
	if (bad)
		return kvt_err(KVT_ENOTFOUND, "no good copy under that key: %s", why);
	return kvt_err(KVT_ENOTFOUND, "no chunk under that key");
}

void store_ref_free(kvt_ref *ref)
{
	ref->tier->ops->release(ref->tier, ref->rb);
	free(ref->iov);
	free(ref);
}

/* A hit in a lower tier: copy it up to the first tier without making the
 * reader wait, once per key however many readers ask at the same time. */
static void promote(kvt_store *st, int tier, const kvt_key *key)
{
	if (tier == 0 || st->cls[tier]->fetches || !flight_enter(st, key))
		return;
	move_submit(st, MOVE_PROMOTE, tier, key);
}

/* Drop the borrowed copy that failed verification (exactly that one: a
 * good copy published since stays), then let go of it. */
int store_ref_check_layer(kvt_ref *ref, int tier, const kvt_key *key, uint32_t layer)
{
	int rc;

	if (!ref->st->verify[tier] || ref->dev)
		return 0;
	rc = kvt_obj_verify_layer_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov, layer);
	if (rc == KVT_ECORRUPT)
		store_drop_corrupt(ref, key);
	return rc;
}

void store_each_arena(kvt_store *st, void (*fn)(void *arg, void *base, size_t len),
		      void *arg)
{
	for (int i = 0; i < st->n_tiers; i++) {
		const struct kvt_tier_pages *p = st->tiers[i]->ops->pages;
		void *base;
		size_t len;
		if (p && p->arena(st->tiers[i], &base, &len) == 0)
			fn(arg, base, len);
	}
}

void store_drop_corrupt(kvt_ref *ref, const kvt_key *key)
{
	char hex[65];
	kvt_tier *t = ref->tier;

	kvt_key_hex(key, hex);
	kvt_log(KVT_LOG_WARN, "%s tier: chunk %s failed verification: %s",
		t->ops->name, hex, kvt_errmsg());
	t->ops->corrupt(t, ref->rb);
	for (int i = 0; i < ref->st->n_tiers; i++)
		if (ref->st->tiers[i] == t)
			store_forget(ref->st, i, key, KVT_WHY_CORRUPT);
	store_ref_free(ref);
}

int kvt_get(kvt_store *st, const kvt_ns *ns, const kvt_key *key, void *buf,
	    size_t cap, size_t *len)
{
	kvt_ref *ref;
	int rc, tier;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	for (;;) {
		double t0 = store_now_s();
		if ((rc = store_borrow(st, ns, key, &ref, &tier, 0))) {
			if (rc == KVT_ENOTFOUND)
				store_count_miss(st, store_ns_acct(st, ns), key);
			return rc;
		}
		if (len)
			*len = ref->hdr.payload_len;
		if (!buf || cap < ref->hdr.payload_len) {
			store_ref_free(ref);
			return kvt_err(KVT_ESMALL, "buffer of %zu bytes, chunk is %llu",
				       cap, (unsigned long long)(len ? *len : 0));
		}
		rc = kvt_obj_read_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov, buf,
				      cap, st->verify[tier]);
		if (rc == KVT_ECORRUPT) {
			store_drop_corrupt(ref, key);
			continue; /* a lower tier may hold a good copy */
		}
		store_ref_free(ref);
		if (rc == 0) {
			if (!st->cls[tier]->remote) /* a remote read noted itself */
				store_perf_note(st, tier, KVT_OBJ_HEADER_BYTES + (len ? *len : 0),
						store_now_s() - t0);
			promote(st, tier, key);
		}
		return rc;
	}
}

int kvt_get_layer(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  uint32_t layer, void *buf, size_t cap)
{
	kvt_ref *ref;
	int rc, tier;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	for (;;) {
		if ((rc = store_borrow(st, ns, key, &ref, &tier, 0)))
			return rc;
		if (layer >= ref->hdr.n_layers) {
			uint32_t n = ref->hdr.n_layers;
			store_ref_free(ref);
			return kvt_err(KVT_EINVAL, "layer %u of a %u-layer chunk", layer, n);
		}
		rc = kvt_obj_read_layer_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov,
					    layer, buf, cap);
		if (rc == KVT_ECORRUPT) {
			store_drop_corrupt(ref, key);
			continue;
		}
		store_ref_free(ref);
		return rc;
	}
}

int kvt_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       kvt_ref **ref)
{
	int rc, tier;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	if (!ref)
		return kvt_err(KVT_EINVAL, "reference output missing");
	for (;;) {
		/* A borrow is a read served: it counts in the latency histogram
		 * (a daemon serves most reads so), but not in the bandwidth the
		 * cost model learns, since from memory it copies nothing. */
		double t0 = store_now_s();
		if ((rc = store_borrow(st, ns, key, ref, &tier, 0))) {
			*ref = NULL; /* not a dropped copy's dangling pointer */
			if (rc == KVT_ENOTFOUND)
				store_count_miss(st, store_ns_acct(st, ns), key);
			return rc;
		}
		if (st->verify[tier] &&
		    kvt_obj_verify_iov(&(*ref)->hdr, (*ref)->rb->iov, (*ref)->rb->n_iov)) {
			store_drop_corrupt(*ref, key);
			continue;
		}
		store_perf_hist(st, tier, store_now_s() - t0);
		return 0;
	}
}

int kvt_ref_iov(const kvt_ref *ref, const struct iovec **iov, int *n_iov)
{
	if (!ref || !iov || !n_iov)
		return kvt_err(KVT_EINVAL, "reference or outputs missing");
	*iov = ref->iov;
	*n_iov = ref->n_iov;
	return 0;
}

uint64_t kvt_ref_len(const kvt_ref *ref)
{
	return !ref ? 0 : ref->image ? ref->rb->len : ref->hdr.payload_len;
}

int kvt_ref_verify(const kvt_ref *ref)
{
	if (!ref)
		return kvt_err(KVT_EINVAL, "reference missing");
	return kvt_obj_verify_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov);
}

int kvt_ref_read_layer(const kvt_ref *ref, uint32_t layer, void *buf, size_t cap)
{
	if (!ref || !buf)
		return kvt_err(KVT_EINVAL, "reference or buffer missing");
	if (layer >= ref->hdr.n_layers)
		return kvt_err(KVT_EINVAL, "layer %u of a %u-layer chunk", layer, ref->hdr.n_layers);
	return kvt_obj_read_layer_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov, layer, buf, cap);
}

void kvt_release(kvt_ref *ref)
{
	if (ref)
		store_ref_free(ref);
}

/* --- whole images, for other nodes ------------------------------------------------ */

int kvt_image_borrow(kvt_store *st, const kvt_key *key, kvt_ref **out)
{
	kvt_err_clear();
	if (!st || !key || !out)
		return kvt_err(KVT_EINVAL, "store, key or reference output missing");
	for (int i = 0; i < st->n_tiers; i++) {
		kvt_tier *t = st->tiers[i];
		kvt_tier_rbuf *rb;
		kvt_ref *ref;
		int rc;

		if (st->cls[i]->remote || t->ops->get(t, key, &rb))
			continue;
		if (!(ref = calloc(1, sizeof(*ref)))) {
			t->ops->release(t, rb);
			return kvt_err(KVT_ENOMEM, "out of memory");
		}
		ref->st = st;
		ref->tier = t;
		ref->rb = rb;
		ref->image = 1;
		rc = store_image_header(rb, &ref->hdr);
		if (rc == 0 && rb->len != KVT_OBJ_HEADER_BYTES + ref->hdr.payload_len)
			rc = kvt_err(KVT_ETRUNCATED, "image is %llu bytes, header says %llu",
				     (unsigned long long)rb->len,
				     (unsigned long long)(KVT_OBJ_HEADER_BYTES +
							  ref->hdr.payload_len));
		if (rc == 0 && st->verify[i])
			rc = kvt_obj_verify_iov(&ref->hdr, rb->iov, rb->n_iov);
		if (rc == 0 && !(ref->iov = malloc((size_t)rb->n_iov * sizeof(*ref->iov))))
			rc = kvt_err(KVT_ENOMEM, "out of memory");
		if (rc == KVT_ENOMEM) {
			t->ops->release(t, rb);
			free(ref);
			return rc;
		}
		if (rc) {
			char hex[65];
			kvt_key_hex(key, hex);
			kvt_log(KVT_LOG_WARN, "%s tier: not serving %s to a peer: %s (%s)",
				t->ops->name, hex, kvt_strerror(rc), kvt_errmsg());
			t->ops->corrupt(t, rb);
			store_forget(st, i, key, KVT_WHY_CORRUPT);
			t->ops->release(t, rb);
			free(ref);
			continue;
		}
		memcpy(ref->iov, rb->iov, (size_t)rb->n_iov * sizeof(*ref->iov));
		ref->n_iov = rb->n_iov;
		hier_hit(st->hier, i, key);
		*out = ref;
		return 0;
	}
	return kvt_err(KVT_ENOTFOUND, "no chunk under that key on this node");
}

int kvt_image_present(kvt_store *st, const kvt_key *keys, size_t n)
{
	size_t k;

	if (!st || (!keys && n))
		return kvt_err(KVT_EINVAL, "store or keys missing");
	for (k = 0; k < n && k < INT32_MAX; k++) {
		int held = 0;
		for (int i = 0; i < st->n_tiers && !held; i++)
			held = !st->cls[i]->remote &&
			       st->tiers[i]->ops->exists(st->tiers[i], &keys[k]) == 1;
		if (!held)
			break;
	}
	return (int)k;
}

int kvt_exists(kvt_store *st, const kvt_ns *ns, const kvt_key *key)
{
	int rc;

	if ((rc = store_check_args(st, ns, key)))
		return rc;
	return store_image_exists(st, key);
}

int kvt_delete(kvt_store *st, const kvt_ns *ns, const kvt_key *key)
{
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	return store_image_del(st, key);
}

/* --- lookup ---------------------------------------------------------------------- */

/* How many of keys[0..n), from the first, some tier holds; tier_out[k]
 * (when not NULL) the first tier holding key k.  A tier that knows nothing
 * from memory (another node's daemon) is asked once, for the rest of the
 * chain from the first key no other tier holds: upto[i] is where its
 * answer ends. */
size_t store_chain_held(kvt_store *st, const kvt_key *keys, size_t n_keys, uint8_t *tier_out)
{
	size_t upto[KVT_MAX_TIERS], hit = 0;
	int asked[KVT_MAX_TIERS] = { 0 };

	for (size_t k = 0; k < n_keys; k++) {
		int found = -1;
		for (int i = 0; i < st->n_tiers; i++)
			if (st->tiers[i]->ops->exists(st->tiers[i], &keys[k]) == 1) {
				found = i;
				break;
			}
		for (int i = 0; found < 0 && i < st->n_tiers; i++) {
			kvt_tier *t = st->tiers[i];
			if (!st->cls[i]->fetches || !t->ops->exists_prefix)
				continue;
			if (!asked[i]) {
				int got = t->ops->exists_prefix(t, &keys[k], n_keys - k);
				upto[i] = k + (got > 0 ? (size_t)got : 0);
				asked[i] = 1;
			}
			if (k < upto[i])
				found = i;
		}
		if (found < 0)
			break;
		if (tier_out)
			tier_out[k] = (uint8_t)found;
		hit++;
	}
	return hit;
}

int kvt_lookup(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
	       size_t n_keys, kvt_lookup_result *res)
{
	uint32_t hit = 0;

	if (!st || !ns || (!keys && n_keys))
		return kvt_err(KVT_EINVAL, "store, namespace or keys missing");
	if (st->n_tiers == 1 && st->tiers[0]->ops->exists_prefix && n_keys) {
		/* one tier that answers for the whole chain at once */
		int n = st->tiers[0]->ops->exists_prefix(st->tiers[0], keys, n_keys);
		hit = n > 0 ? (uint32_t)n : 0;
		if (res && res->tier)
			memset(res->tier, 0, hit);
		n_keys = 0; /* answered */
	} else {
		hit = (uint32_t)store_chain_held(st, keys, n_keys, res ? res->tier : NULL);
	}
	if (hit < n_keys)
		store_count_miss(st, store_ns_acct(st, ns), &keys[hit]);
	/* Admission counts one sighting per chunk per lookup, the whole chain
	 * and not only the hits: an engine asks once per request, and a chunk
	 * asked for again is one worth a slower tier. */
	for (size_t k = 0; k < n_keys; k++)
		for (int i = 1; i < st->n_tiers; i++)
			hier_seen(st->hier, i, &keys[k]);
	if (res)
		res->n_hit = hit;
	return (int)hit;
}

int kvt_lookup_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens,
		      size_t n_tokens, const kvt_extra_keys *extra,
		      kvt_key *keys, size_t max_keys, kvt_lookup_result *res)
{
	kvt_key stack[64];
	kvt_key *k = keys;
	size_t n;
	int whole, rc;

	if (!st || !ns)
		return kvt_err(KVT_EINVAL, "store or namespace missing");
	if (!ns->layout.chunk_tokens)
		return kvt_err(KVT_EINVAL, "namespace not initialised");
	n = n_tokens / ns->layout.chunk_tokens;
	if (!k) {
		max_keys = n;
		k = n <= 64 ? stack : malloc(n * sizeof(*k));
		if (!k)
			return kvt_err(KVT_ENOMEM, "out of memory");
	}
	whole = kvt_key_chain(ns, tokens, n_tokens, extra, k, max_keys);
	if (whole < 0) {
		rc = whole;
	} else {
		n = (size_t)whole < max_keys ? (size_t)whole : max_keys;
		rc = kvt_lookup(st, ns, k, n, res);
	}
	if (k != keys && k != stack)
		free(k);
	return rc;
}

int kvt_lookup_ranks(kvt_store *st, const kvt_ns *ns, size_t n_ranks,
		     const kvt_key *const *keys, size_t n_keys,
		     kvt_lookup_result *res)
{
	uint8_t *tiers = NULL;
	size_t common = n_keys;

	if (!st || !ns || !keys || n_ranks == 0)
		return kvt_err(KVT_EINVAL, "store, namespaces or keys missing");
	if (res && res->tier) {
		tiers = malloc(n_keys ? n_keys : 1);
		if (!tiers)
			return kvt_err(KVT_ENOMEM, "out of memory");
		memset(res->tier, 0, n_keys);
	}
	for (size_t r = 0; r < n_ranks && common > 0; r++) {
		kvt_lookup_result one = { .tier = tiers };
		int hit = kvt_lookup(st, &ns[r], keys[r], common, &one);
		if (hit < 0) {
			free(tiers);
			return hit;
		}
		common = (size_t)hit;
		for (size_t i = 0; tiers && i < common; i++)
			if (tiers[i] > res->tier[i])
				res->tier[i] = tiers[i];
	}
	free(tiers);
	if (res)
		res->n_hit = (uint32_t)common;
	return (int)common;
}

int kvt_lookup_worth(kvt_store *st, const kvt_ns *ns,
		     const kvt_lookup_result *res, double recompute_s)
{
	double bytes, save = 0, best = 0;
	int best_k = 0;

	if (!st || !ns || !res)
		return kvt_err(KVT_EINVAL, "store, namespace or lookup result missing");
	bytes = (double)(KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout));
	/* Loading chunk i instead of recomputing it saves recompute_s minus
	 * its load time; the engine loads a prefix, so take the prefix
	 * whose savings add up to the most. */
	for (uint32_t i = 0; i < res->n_hit; i++) {
		int t = res->tier ? res->tier[i] : 0;
		double gbps, lat_us;
		if (t >= st->n_tiers)
			t = st->n_tiers - 1;
		pthread_mutex_lock(&st->perf[t].mu);
		gbps = st->perf[t].gbps;
		lat_us = st->perf[t].lat_us;
		pthread_mutex_unlock(&st->perf[t].mu);
		save += recompute_s - (lat_us * 1e-6 + bytes / (gbps * 1e9));
		if (save > best) {
			best = save;
			best_k = (int)i + 1;
		}
	}
	return best_k;
}

/* --- batch ----------------------------------------------------------------------- */

int kvt_put_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  const void *const *payloads, size_t n, int durability,
		  int *results)
{
	size_t len = ns ? kvt_layout_payload_bytes(&ns->layout) : 0;
	int ok = 0;

	if (!keys || !payloads)
		return kvt_err(KVT_EINVAL, "keys or payloads missing");
	for (size_t i = 0; i < n; i++) {
		int rc = kvt_put(st, ns, &keys[i], payloads[i], len, durability);
		if (results)
			results[i] = rc;
		if (rc == 0 || rc == KVT_EEXIST)
			ok++;
	}
	return ok;
}

int kvt_get_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  void *const *bufs, size_t cap, size_t n, int *results)
{
	int ok = 0;

	if (!keys || !bufs)
		return kvt_err(KVT_EINVAL, "keys or buffers missing");
	for (size_t i = 0; i < n; i++) {
		int rc = kvt_get(st, ns, &keys[i], bufs[i], cap, NULL);
		if (results)
			results[i] = rc;
		if (rc == 0)
			ok++;
	}
	return ok;
}

int kvt_pin(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int pin)
{
	int rc, held = 0, err = 0;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	for (int i = 0; i < st->n_tiers; i++) {
		if (st->tiers[i]->ops->exists(st->tiers[i], key) != 1)
			continue;
		held = 1;
		rc = hier_pin(st->hier, i, key, pin);
		if (rc && !err)
			err = rc;
	}
	if (!held)
		return kvt_err(KVT_ENOTFOUND, "no chunk under that key to %s",
			       pin ? "pin" : "unpin");
	return err;
}

/* --- statistics -------------------------------------------------------------------- */

int kvt_store_flush(kvt_store *st, int timeout_ms)
{
	struct timespec until;
	int rc = 0;

	if (!st)
		return kvt_err(KVT_EINVAL, "store missing");
	until = kvt_deadline_after(timeout_ms);
	pthread_mutex_lock(&st->qlock);
	while (!rc && st->moves_pending) {
		if (timeout_ms < 0)
			pthread_cond_wait(&st->qcond, &st->qlock);
		else if (pthread_cond_timedwait(&st->qcond, &st->qlock, &until))
			rc = kvt_err(KVT_ETIMEDOUT,
				     "%u promotions or background copies still queued or running after %d ms",
				     st->moves_pending, timeout_ms);
	}
	pthread_mutex_unlock(&st->qlock);
	return rc;
}

int kvt_locate(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       uint32_t *mask)
{
	int rc, n = 0;

	if ((rc = store_check_args(st, ns, key)))
		return rc;
	*mask = 0;
	for (int i = 0; i < st->n_tiers; i++) {
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1) {
			*mask |= 1u << i;
			n++;
		}
	}
	return n;
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
	out->writes_off = (uint32_t)writes_off(st, tier);
	if (out->writes_off && !out->state[0])
		writes_off_text(st, tier, out->state, sizeof(out->state));
	return 0;
}

/* Tiers walk object images; callers are promised payload lengths. */
struct iter_ctx {
	int (*fn)(void *arg, const kvt_key *key, uint64_t len);
	void *arg;
};

static int iter_payload(void *arg, const kvt_key *key, uint64_t len)
{
	struct iter_ctx *c = arg;
	return c->fn(c->arg, key, len >= KVT_OBJ_HEADER_BYTES ? len - KVT_OBJ_HEADER_BYTES : 0);
}

int kvt_store_iterate(kvt_store *st, int tier,
		      int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		      void *arg)
{
	struct iter_ctx c = { fn, arg };

	if (!st || !fn || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "tier %d of %d", tier, st ? st->n_tiers : 0);
	return st->tiers[tier]->ops->iterate(st->tiers[tier], iter_payload, &c);
}

/* Copy bytes [off, off + len) of a borrowed image out of its segments. */
static void rbuf_copy(const kvt_tier_rbuf *rb, uint64_t off, void *buf, size_t len)
{
	for (int i = 0; i < rb->n_iov && len; i++) {
		const struct iovec *s = &rb->iov[i];
		if (off >= s->iov_len) {
			off -= s->iov_len;
			continue;
		}
		size_t k = s->iov_len - (size_t)off < len ? s->iov_len - (size_t)off : len;
		memcpy(buf, (const char *)s->iov_base + off, k);
		buf = (char *)buf + k;
		len -= k;
		off = 0;
	}
}

int kvt_store_peek(kvt_store *st, int tier, const kvt_key *key, kvt_object_info *info,
		   uint64_t off, void *buf, size_t len)
{
	uint8_t *raw = NULL;
	kvt_obj_hdr *h = NULL;
	kvt_tier_rbuf *rb = NULL;
	kvt_tier *t;
	uint64_t image = 0;
	int rc, retried = 0;

	kvt_err_clear();
	if (!st || !key || !info || (len && !buf) || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "peek: a NULL pointer, or tier %d of %d", tier,
			       st ? st->n_tiers : 0);
	t = st->tiers[tier];
	h = malloc(sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if (t->ops->peek) {
		/* The range is asked with the header, before the header says
		 * how long the payload is: checked after. */
		if (!(raw = malloc(KVT_OBJ_HEADER_BYTES)))
			rc = kvt_err(KVT_ENOMEM, "out of memory");
		else
			rc = t->ops->peek(t, key, raw, KVT_OBJ_HEADER_BYTES + off, buf, len, &image);
		if (rc == KVT_ETRUNCATED && len) { /* short, or a range past the end? */
			rc = t->ops->peek(t, key, raw, 0, NULL, 0, &image);
			retried = 1;
		}
		if (rc == 0)
			rc = kvt_obj_hdr_decode(raw, KVT_OBJ_HEADER_BYTES, h);
	} else {
		rc = t->ops->get(t, key, &rb);
		if (rc == 0) {
			image = rb->len;
			rc = store_image_header(rb, h);
		}
	}
	if (rc == 0 && memcmp(h->key.b, key->b, KVT_KEY_BYTES))
		rc = kvt_err(KVT_EMISMATCH, "peek: the %s tier's object under that key names "
			     "another", t->ops->name);
	if (rc == 0 && (off > h->payload_len || len > h->payload_len - off))
		rc = kvt_err(KVT_EINVAL, "peek: bytes %llu..%llu of a %llu-byte payload",
			     (unsigned long long)off, (unsigned long long)(off + len),
			     (unsigned long long)h->payload_len);
	if (rc == 0 && image < (uint64_t)h->header_len + h->payload_len)
		rc = kvt_err(KVT_ETRUNCATED, "peek: the %s tier's image is %llu bytes, its "
			     "header declares %llu", t->ops->name, (unsigned long long)image,
			     (unsigned long long)(h->header_len + h->payload_len));
	if (rc == 0 && retried) /* the range was not read: the file changed between */
		rc = kvt_err(KVT_ETRUNCATED, "peek: the %s tier's image ended early",
			     t->ops->name);
	if (rc == 0 && rb)
		rbuf_copy(rb, h->header_len + off, buf, len);
	if (rc == 0) {
		memset(info, 0, sizeof(*info));
		store_info_from_hdr(info, h);
		info->signature = KVT_SIG_UNCHECKED;
	}
	if (rb)
		t->ops->release(t, rb);
	free(raw);
	free(h);
	return rc;
}
