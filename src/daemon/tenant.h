/*
 * tenant.h — kvtierd's tenants: the access list in force, the tenant each
 * user acts as, and the tenants' quotas applied to the store.
 *
 * A tenant here is a tenant of the store's configuration (its secret keys
 * the namespace digest, so no client can name another tenant's objects) or
 * the default one.  Each gets one struct kvtd_tenant (values.h) for the
 * daemon's life: a connection keeps a pointer to it, and a reload only ever
 * adds tenants.  Reloading (SIGHUP) parses the file again, resolves every
 * tenant it names, and applies its quotas; any fault keeps the list in
 * force whole, and the log says why.
 */
#ifndef KVTD_TENANT_H
#define KVTD_TENANT_H

#include <stddef.h>

#include <kvtier.h>

#include "daemon/acl.h"
#include "daemon/http.h"
#include "daemon/values.h"

struct kvtd;
struct kvtd_tenants;

/* Read `acl_path`, resolve its tenants against `st` in namespaces shaped
 * like `base` (the default tenant's description, tenant left NULL), apply
 * its quotas.  `dflt` is the default tenant (id 0) users of tenant
 * `default` act as.  /metrics labels tenants by name if `metrics_names`,
 * else by struct kvtd_tenant's label (the log says which is whose).  0 and
 * *out, or -1 with the reason in err. */
int kvtd_tenants_open(kvt_store *st, const kvt_ns_desc *base,
		      const struct kvtd_tenant *dflt, const char *acl_path, int metrics_names,
		      struct kvtd_tenants **out, char *err, size_t errlen);
/* Read the file again (SIGHUP): 0, or -1 with the reason and nothing
 * changed. */
int kvtd_tenants_reload(struct kvtd_tenants *t, char *err, size_t errlen);
void kvtd_tenants_close(struct kvtd_tenants *t);

/* AUTH (kvtd_auth_fn: d->auth_ctx is the struct kvtd_tenants). */
int kvtd_tenants_auth(struct kvtd *d, const char *user, size_t ulen, const char *pass,
		      size_t plen, const struct kvtd_tenant **out);
/* The shared namespace `key` falls in (struct kvtd's shared_of: d->auth_ctx
 * is the struct kvtd_tenants), or NULL. */
const struct kvtd_tenant *kvtd_tenants_shared(struct kvtd *d, const char *key, size_t len);
/* The tenant a local client (kvt_local_serve) of `uid` acts as: that of
 * the ACL user named as the uid's login, NULL (the default) if none;
 * kvt_local_opts.tenant_of with the struct kvtd_tenants as arg. */
const char *kvtd_tenants_of_uid(void *arg, uint32_t uid);
/* The tenant a new connection acts as before AUTH: the default user's
 * when it is nopass, else NULL (AUTH required); *admin (if not NULL)
 * whether that user is +admin. */
const struct kvtd_tenant *kvtd_tenants_initial(struct kvtd_tenants *t, int *admin);
/* Every tenant known (the default first): up to `max` into out; returns
 * how many there are. */
size_t kvtd_tenants_list(struct kvtd_tenants *t, const struct kvtd_tenant **out,
			 size_t max);
/* The tenants' usage against their quotas, as Prometheus text. */
void kvtd_tenants_metrics(struct kvtd_tenants *t, struct kvtd_text *out);

#endif
