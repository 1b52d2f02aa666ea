/*
 * ops.c — kvtierd's operations side (ops.h): starting, reloading and
 * stopping the tenants, TLS and the HTTP server, and the daemon's own
 * families for /metrics (connections, commands, the keyspace's hits and
 * misses, uptime, the tenants' usage) and its verdict for /health.
 * Everything the HTTP thread reads here is an atomic of struct kvtd or
 * behind the tenants' lock: it reads while the workers run.
 */
#include "daemon/ops.h"

#include <stdio.h>

#include "daemon/log.h"
#include "daemon/server.h"
#include "daemon/tenant.h"
#include "daemon/tls.h"
#include "kvtier/units.h"

static void family(struct kvtd_text *o, const char *name, const char *type,
		   const char *help, unsigned long long v)
{
	kvtd_text_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type,
			 name, v);
}

uint64_t kvtd_ops_keyspace(struct kvtd *d, const struct kvtd_tenant *t, int misses)
{
	_Atomic uint64_t *v = misses ? d->keyspace_misses : d->keyspace_hits;
	uint64_t sum = 0;

	if (t)
		return atomic_load(&v[t->id]);
	for (size_t i = 0; i < VALS_MAX_TENANTS; i++)
		sum += atomic_load(&v[i]);
	return sum;
}

void kvtd_metrics_daemon(void *arg, struct kvtd_text *o)
{
	struct kvtd *d = arg;

	family(o, "kvtierd_connections", "gauge", "Clients connected now.",
	       (unsigned long long)atomic_load(&d->clients));
	family(o, "kvtierd_connections_total", "counter", "Clients accepted since start.",
	       (unsigned long long)atomic_load(&d->total_conns));
	family(o, "kvtierd_rejected_connections_total", "counter",
	       "Clients refused (maxclients reached).",
	       (unsigned long long)atomic_load(&d->rejected_conns));
	family(o, "kvtierd_accept_fd_errors_total", "counter",
	       "Accepts that failed for want of a file descriptor (EMFILE/ENFILE).",
	       (unsigned long long)atomic_load(&d->accept_fd_errors));
	family(o, "kvtierd_auth_failures_total", "counter",
	       "AUTH attempts with a wrong user or password.",
	       (unsigned long long)atomic_load(&d->auth_failures));
	family(o, "kvtierd_auth_refused_total", "counter",
	       "AUTH attempts refused unchecked: their source failed too often this minute.",
	       (unsigned long long)atomic_load(&d->auth_refused));
	family(o, "kvtierd_commands_total", "counter", "Commands run since start.",
	       (unsigned long long)atomic_load(&d->total_cmds));
	family(o, "kvtierd_keyspace_hits_total", "counter", "Reads of keys that were there.",
	       (unsigned long long)kvtd_ops_keyspace(d, NULL, 0));
	family(o, "kvtierd_keyspace_misses_total", "counter", "Reads of keys that were not.",
	       (unsigned long long)kvtd_ops_keyspace(d, NULL, 1));
	family(o, "kvtierd_peer_fetches_total", "counter",
	       "Chunks this node served to other nodes (KVTIER.FETCH).",
	       (unsigned long long)atomic_load(&d->peer_fetches));
	family(o, "kvtierd_peer_fetched_bytes_total", "counter",
	       "Bytes of the chunks served to other nodes.",
	       (unsigned long long)atomic_load(&d->peer_bytes));
	family(o, "kvtierd_uptime_seconds", "gauge", "Seconds since the daemon started.",
	       (unsigned long long)((kvtd_mono_ms() - d->start_ms) / 1000));
	if (d->auth == kvtd_tenants_auth && d->auth_ctx) {
		kvtd_tenants_metrics(d->auth_ctx, o);
	} else {
		const char *const dflt[1] = { NULL };
		kvtd_metrics_misses(d->st, dflt, NULL, 1, o);
	}
}

int kvtd_health_daemon(void *arg, struct kvtd_text *o)
{
	struct kvtd *d = arg;

	int64_t now = kvtd_mono_ms(), since;

	if (atomic_load(&d->stopping)) {
		kvtd_text_printf(o, "shutting down\n");
		return 1;
	}
	for (int i = 0; i < d->nw; i++) {
		since = atomic_load(&d->w[i].busy_since_ms);
		if (since && now - since > KVTD_STUCK_MS) {
			kvtd_text_printf(o, "worker %d has run one command for %lld s: stuck\n", i,
					 (long long)((now - since) / 1000));
			return 1;
		}
	}
	return 0;
}

int kvtd_ready_daemon(void *arg, struct kvtd_text *o)
{
	struct kvtd *d = arg;
	const kvt_warm_progress *w = &d->warm;
	char a[32], b[32];

	if (atomic_load(&d->ready))
		return 1;
	kvtd_text_printf(o, "warming the first tier: %llu of %llu listed chunks handled, %s of "
			    "%s loaded\n",
			 (unsigned long long)__atomic_load_n(&w->done, __ATOMIC_RELAXED),
			 (unsigned long long)__atomic_load_n(&w->listed, __ATOMIC_RELAXED),
			 kvt_fmt_size(__atomic_load_n(&w->loaded_bytes, __ATOMIC_RELAXED), a,
				      sizeof(a)),
			 kvt_fmt_size(__atomic_load_n(&w->budget_bytes, __ATOMIC_RELAXED), b,
				      sizeof(b)));
	return 0;
}

int kvtd_ops_check(const struct kvtd_ops_opts *o)
{
	char err[512];

	if (!o->tls_cert != !o->tls_key) {
		fprintf(stderr, "kvtierd: --tls-cert and --tls-key go together\n");
		return -1;
	}
	if (o->acl) {
		kvtd_acl *a;
		if (kvtd_acl_load(o->acl, &a, err, sizeof(err))) {
			fprintf(stderr, "kvtierd: --acl %s\n", err);
			return -1;
		}
		kvtd_acl_free(a);
	}
	if (o->tls_cert) {
		kvtd_tls_ctx *c;
		if (kvtd_tls_ctx_new(o->tls_cert, o->tls_key, &c, err, sizeof(err))) {
			fprintf(stderr, "kvtierd: %s\n", err);
			return -1;
		}
		kvtd_tls_ctx_free(c);
	}
	return 0;
}

int kvtd_ops_start(struct kvtd *d, const struct kvtd_ops_opts *o, const kvt_ns_desc *base)
{
	char err[512];

	if (kvtd_ops_check(o))
		return -1;
	/* Without an access list there is one tenant: the node is its own. */
	d->initial_admin = 1;
	if (o->acl) {
		struct kvtd_tenants *t;
		const struct kvtd_tenant *first;
		if (d->o.requirepass) {
			kvtd_log(KVTD_LOG_ERROR, "--requirepass and --acl: give one (the access "
				 "list names the default user's password)");
			return -1;
		}
		if (kvtd_tenants_open(d->st, base, d->default_tenant, o->acl, o->metrics_names, &t,
				      err, sizeof(err))) {
			kvtd_log(KVTD_LOG_ERROR, "%s", err);
			return -1;
		}
		d->auth = kvtd_tenants_auth;
		d->auth_ctx = t;
		d->shared_of = kvtd_tenants_shared;
		/* Whether a connection must AUTH first, and whether it then
		 * starts as an admin, are fixed at start: a reload that
		 * changes the default user's nopass or +admin says so.  A
		 * nopass default user's tenant is what connections start as. */
		first = kvtd_tenants_initial(t, &d->initial_admin);
		if (first)
			d->default_tenant = first;
		d->auth_required = first == NULL;
		kvtd_log(KVTD_LOG_INFO, "access list %s: %zu tenants%s", o->acl,
			 kvtd_tenants_list(t, NULL, 0),
			 d->auth_required ? ", AUTH required" : "");
	}
	if (o->tls_cert &&
	    kvtd_tls_ctx_new(o->tls_cert, o->tls_key, &d->tls, err, sizeof(err))) {
		kvtd_log(KVTD_LOG_ERROR, "%s", err);
		return -1;
	}
	return 0;
}

size_t kvtd_ops_tenants(struct kvtd *d, const struct kvtd_tenant **out, size_t max)
{
	if (d->auth == kvtd_tenants_auth && d->auth_ctx)
		return kvtd_tenants_list(d->auth_ctx, out, max);
	if (max)
		out[0] = d->default_tenant;
	return 1;
}

int kvtd_ops_serve(struct kvtd *d, const struct kvtd_ops_opts *o)
{
	struct kvtd_http_conf hc = {
		.addr = o->metrics_bind,
		.port = (uint16_t)(o->metrics_port > 0 ? o->metrics_port : 0),
		.st = d->st,
		.metrics = kvtd_metrics_daemon,
		.health = kvtd_health_daemon,
		.ready = kvtd_ready_daemon,
		.arg = d,
	};
	char err[256];

	if (o->metrics_port < 0)
		return 0;
	if (kvtd_http_start(&hc, &d->http, err, sizeof(err))) {
		kvtd_log(KVTD_LOG_ERROR, "%s", err);
		return -1;
	}
	printf("kvtierd: metrics on http://%s:%u/metrics\n",
	       o->metrics_bind ? o->metrics_bind : "127.0.0.1", (unsigned)kvtd_http_port(d->http));
	fflush(stdout);
	return 0;
}

/* The access list again: any fault keeps the one in force whole. */
static void reload_acl(struct kvtd *d, struct kvtd_tenants *t)
{
	char err[512];
	int admin;

	if (kvtd_tenants_reload(t, err, sizeof(err))) {
		kvtd_log(KVTD_LOG_WARN, "SIGHUP: the access list in force stays: %s", err);
		return;
	}
	if ((kvtd_tenants_initial(t, &admin) == NULL) != d->auth_required ||
	    (!d->auth_required && admin != d->initial_admin))
		kvtd_log(KVTD_LOG_WARN, "SIGHUP: whether the default user needs a password, "
			 "or is +admin, changed; connections that do not AUTH follow it at "
			 "the next start");
	kvtd_log(KVTD_LOG_INFO, "SIGHUP: access list reloaded: %zu tenants",
		 kvtd_tenants_list(t, NULL, 0));
}

/* The certificate and key again (a rotation on disk): new connections
 * get them, sessions open now keep theirs; a file that does not load, or
 * a key that is not the certificate's, keeps the pair in force. */
static void reload_tls(struct kvtd *d)
{
	char err[512], what[384];

	if (kvtd_tls_ctx_reload(d->tls, what, sizeof(what), err, sizeof(err))) {
		kvtd_log(KVTD_LOG_ERROR, "SIGHUP: the TLS certificate in force stays: %s", err);
		return;
	}
	kvtd_log(KVTD_LOG_INFO, "SIGHUP: TLS certificate reloaded for new connections: %s", what);
}

void kvtd_ops_reload(struct kvtd *d)
{
	if (d->auth == kvtd_tenants_auth && d->auth_ctx)
		reload_acl(d, d->auth_ctx);
	if (d->tls)
		reload_tls(d);
}

void kvtd_ops_stop(struct kvtd *d)
{
	kvtd_http_stop(d->http);
	d->http = NULL;
	if (d->auth == kvtd_tenants_auth) {
		d->shared_of = NULL;
		kvtd_tenants_close(d->auth_ctx);
		d->auth_ctx = NULL;
	}
	kvtd_tls_ctx_free(d->tls);
	d->tls = NULL;
}
