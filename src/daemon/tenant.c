/*
 * tenant.c — the access list in force and the tenants it names (tenant.h).
 *
 * Tenants live in a table that only grows, under `mu`; the access list is
 * swapped whole under the same lock, so an AUTH sees one list or the
 * other, never a mix.  AUTH holds the lock only to look the user up (a
 * SHA-256 of the password and a scan of the users), never across a call
 * into the store.
 */
#include "daemon/tenant.h"

#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/server.h"

#define MAX_TIERS 8

struct kvtd_tenants {
	kvt_store *st;
	kvt_ns_desc base;
	char *path;
	pthread_rwlock_t mu;
	kvtd_acl *acl;                            /* in force */
	const struct kvtd_tenant *dflt;
	int metrics_names;                        /* label /metrics by name */
	struct kvtd_tenant *tab[VALS_MAX_TENANTS]; /* [0] unused: the default's id */
	size_t n;                                 /* entries of tab in use, 1.. */
};

/* The tenant named `name` ("default": the default), or NULL. */
static const struct kvtd_tenant *find(const struct kvtd_tenants *t, const char *name)
{
	if (!strcmp(name, "default"))
		return t->dflt;
	for (size_t i = 1; i < t->n; i++)
		if (!strcmp(t->tab[i]->name, name))
			return t->tab[i];
	return NULL;
}

/* Make sure every tenant `a` names exists: resolve the new ones through
 * the store (their secrets are its configuration's).  Under mu (write).
 * A tenant made here stays even if the list is then refused: it is only
 * a namespace nobody can reach until a list names it. */
static int resolve(struct kvtd_tenants *t, const kvtd_acl *a, char *err, size_t errlen)
{
	for (int i = 0; i < a->n_users + a->n_quotas + a->n_shared; i++) {
		const char *name = i < a->n_users ? a->users[i].tenant
				   : i < a->n_users + a->n_quotas ? a->quotas[i - a->n_users].tenant
				   : a->shared[i - a->n_users - a->n_quotas].tenant;
		struct kvtd_tenant *nt;
		kvt_ns_desc d = t->base;
		int rc;

		if (find(t, name))
			continue;
		if (t->n == VALS_MAX_TENANTS) {
			snprintf(err, errlen, "%s: more than %d tenants", t->path, VALS_MAX_TENANTS - 1);
			return -1;
		}
		if (!(nt = calloc(1, sizeof(*nt)))) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		d.tenant = name;
		if ((rc = kvt_ns_init(t->st, &d, &nt->ns))) {
			snprintf(err, errlen, "%s: tenant %s: %s%s", t->path, name, kvt_errmsg(),
				 rc == KVT_ETENANT ? " (add it to the configuration's tenants, with its secret)"
						   : "");
			free(nt);
			return -1;
		}
		nt->id = (uint32_t)t->n;
		snprintf(nt->name, sizeof(nt->name), "%s", name);
		/* The digest is keyed by the tenant's secret: the label names
		 * no tenant to whoever scrapes, and stays while the secret and
		 * the model do.  The log, the operator's, maps it back. */
		snprintf(nt->label, sizeof(nt->label), "t");
		for (int b = 0; b < 6; b++)
			snprintf(nt->label + 1 + 2 * b, 3, "%02x", nt->ns.digest[b]);
		kvtd_log(KVTD_LOG_INFO, "tenant %s: /metrics label %s", name,
			 t->metrics_names ? name : nt->label);
		t->tab[t->n++] = nt;
	}
	return 0;
}

static int tier_index(kvt_store *st, const char *name)
{
	for (int i = 0; i < kvt_store_tiers(st); i++) {
		kvt_tier_stats s;
		if (kvt_store_stats(st, i, &s) == 0 && !strcmp(s.name, name))
			return i;
	}
	return -1;
}

/* The store's name of a tenant: NULL for the default. */
static const char *store_name(const struct kvtd_tenant *x)
{
	return x->name[0] ? x->name : NULL;
}

/* Give the store the quotas of `a`: every known tenant's share of every
 * tier is first cleared (so reservations being moved between tenants do
 * not collide), then set.  Under mu (write). */
static int apply_quotas(struct kvtd_tenants *t, const kvtd_acl *a, char *err, size_t errlen)
{
	int nt = kvt_store_tiers(t->st);

	for (int q = 0; q < a->n_quotas; q++)
		if (tier_index(t->st, a->quotas[q].tier) < 0) {
			char names[128] = "";
			for (int i = 0; i < nt; i++) {
				kvt_tier_stats s;
				if (kvt_store_stats(t->st, i, &s) == 0)
					snprintf(names + strlen(names), sizeof(names) - strlen(names),
						 "%s%s", i ? ", " : "", s.name);
			}
			snprintf(err, errlen, "%s: quota of %s: no tier named %s (this store has %s)",
				 t->path, a->quotas[q].tenant, a->quotas[q].tier, names);
			return -1;
		}
	for (size_t i = 0; i < t->n; i++) {
		const struct kvtd_tenant *x = i ? t->tab[i] : t->dflt;
		for (int k = 0; k < nt; k++)
			(void)kvt_store_set_quota(t->st, store_name(x), k, 0, 0);
	}
	for (int q = 0; q < a->n_quotas; q++) {
		const struct kvtd_quota *e = &a->quotas[q];
		const struct kvtd_tenant *x = find(t, e->tenant);
		if (kvt_store_set_quota(t->st, store_name(x), tier_index(t->st, e->tier), e->quota,
					e->reserve)) {
			snprintf(err, errlen, "%s: quota of %s in %s: %s", t->path, e->tenant, e->tier,
				 kvt_errmsg());
			return -1;
		}
	}
	return 0;
}

/* Parse, resolve and apply the file; on success the new list is in force. */
static int load(struct kvtd_tenants *t, char *err, size_t errlen)
{
	kvtd_acl *a;
	char e2[256];

	if (kvtd_acl_load(t->path, &a, err, errlen))
		return -1;
	pthread_rwlock_wrlock(&t->mu);
	if (resolve(t, a, err, errlen) || apply_quotas(t, a, err, errlen)) {
		if (t->acl && apply_quotas(t, t->acl, e2, sizeof(e2)))
			kvtd_log(KVTD_LOG_ERROR, "restoring the quotas in force: %s", e2);
		pthread_rwlock_unlock(&t->mu);
		kvtd_acl_free(a);
		return -1;
	}
	kvtd_acl_free(t->acl);
	t->acl = a;
	pthread_rwlock_unlock(&t->mu);
	return 0;
}

int kvtd_tenants_open(kvt_store *st, const kvt_ns_desc *base,
		      const struct kvtd_tenant *dflt, const char *acl_path, int metrics_names,
		      struct kvtd_tenants **out, char *err, size_t errlen)
{
	struct kvtd_tenants *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t || !(t->path = strdup(acl_path))) {
		free(t);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	t->st = st;
	t->base = *base;
	t->base.tenant = NULL;
	t->dflt = dflt;
	t->metrics_names = metrics_names;
	t->n = 1;
	pthread_rwlock_init(&t->mu, NULL);
	if (load(t, err, errlen)) {
		kvtd_tenants_close(t);
		return -1;
	}
	*out = t;
	return 0;
}

int kvtd_tenants_reload(struct kvtd_tenants *t, char *err, size_t errlen)
{
	return load(t, err, errlen);
}

void kvtd_tenants_close(struct kvtd_tenants *t)
{
	if (!t)
		return;
	for (size_t i = 1; i < t->n; i++)
		free(t->tab[i]);
	kvtd_acl_free(t->acl);
	pthread_rwlock_destroy(&t->mu);
	free(t->path);
	free(t);
}

int kvtd_tenants_auth(struct kvtd *d, const char *user, size_t ulen, const char *pass,
		      size_t plen, const struct kvtd_tenant **out)
{
	struct kvtd_tenants *t = d->auth_ctx;
	const struct kvtd_user *u;
	int rc = -1;

	pthread_rwlock_rdlock(&t->mu);
	u = kvtd_acl_auth(t->acl, user, ulen, pass, plen);
	if (u && (*out = find(t, u->tenant)))
		rc = u->admin ? 1 : 0;
	pthread_rwlock_unlock(&t->mu);
	return rc;
}

const struct kvtd_tenant *kvtd_tenants_shared(struct kvtd *d, const char *key, size_t len)
{
	struct kvtd_tenants *t = d->auth_ctx;
	const struct kvtd_shared *s;
	const struct kvtd_tenant *x = NULL;

	pthread_rwlock_rdlock(&t->mu);
	if (t->acl->n_shared && (s = kvtd_acl_shared(t->acl, key, len)))
		x = find(t, s->tenant);
	pthread_rwlock_unlock(&t->mu);
	return x;
}

const char *kvtd_tenants_of_uid(void *arg, uint32_t uid)
{
	struct kvtd_tenants *t = arg;
	struct passwd pw, *res = NULL;
	const struct kvtd_tenant *x = NULL;
	char buf[1024];

	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &res) || !res)
		return NULL;
	pthread_rwlock_rdlock(&t->mu);
	for (int i = 0; i < t->acl->n_users && !x; i++)
		if (!strcmp(t->acl->users[i].name, res->pw_name))
			x = find(t, t->acl->users[i].tenant);
	pthread_rwlock_unlock(&t->mu);
	/* tenants live as long as the daemon: the name stays valid */
	return x && x != t->dflt ? x->name : NULL;
}

const struct kvtd_tenant *kvtd_tenants_initial(struct kvtd_tenants *t, int *admin)
{
	const struct kvtd_tenant *x = NULL;
	const struct kvtd_user *u;

	pthread_rwlock_rdlock(&t->mu);
	if ((u = kvtd_acl_initial(t->acl)))
		x = find(t, u->tenant);
	if (admin)
		*admin = x && u->admin;
	pthread_rwlock_unlock(&t->mu);
	return x;
}

size_t kvtd_tenants_list(struct kvtd_tenants *t, const struct kvtd_tenant **out,
			 size_t max)
{
	size_t n;

	pthread_rwlock_rdlock(&t->mu);
	n = t->n;
	for (size_t i = 0; i < n && i < max; i++)
		out[i] = i ? t->tab[i] : t->dflt;
	pthread_rwlock_unlock(&t->mu);
	return n;
}

void kvtd_tenants_metrics(struct kvtd_tenants *t, struct kvtd_text *o)
{
	const struct kvtd_tenant *l[VALS_MAX_TENANTS];
	const char *names[VALS_MAX_TENANTS], *labels[VALS_MAX_TENANTS];
	size_t n = kvtd_tenants_list(t, l, VALS_MAX_TENANTS);

	for (size_t i = 0; i < n; i++) {
		names[i] = store_name(l[i]);
		labels[i] = t->metrics_names || !l[i]->label[0] ? NULL : l[i]->label;
	}
	kvtd_metrics_tenants(t->st, names, labels, (int)n, o);
}
