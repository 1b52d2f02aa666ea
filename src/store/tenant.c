/*
 * tenant.c — namespaces and tenants: the account each namespace's chunks
 * are charged to, quotas and reservations per tier, and a reloaded
 * configuration's policy knobs.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "store/config.h"
#include "store/hier.h"
#include "store/store_int.h"

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
		store_evict_victims(st, tier, v, n);
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
			store_evict_victims(st, i, v, n);
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

int store_check_args(kvt_store *st, const kvt_ns *ns, const kvt_key *key)
{
	if (!st || !ns || !key)
		return kvt_err(KVT_EINVAL, "store, namespace or key missing");
	if (ns->hash_scheme == 0)
		return kvt_err(KVT_EINVAL, "namespace not initialised (kvt_ns_init)");
	return 0;
}
