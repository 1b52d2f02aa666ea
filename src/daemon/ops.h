/*
 * ops.h — kvtierd's operations side, as main.c calls it: the access list
 * and the tenants (tenant.h), TLS for TCP clients (tls.h), /metrics and
 * /health (http.h), and what SIGHUP and shutdown do to them.
 *
 * main.c calls, in order: kvtd_ops_check for --check-config, or
 * kvtd_ops_start once the store and the default tenant are open (before
 * the rebuild, which needs every tenant: kvtd_ops_tenants), kvtd_ops_serve
 * once the RESP port listens, kvtd_ops_reload on SIGHUP (the access list
 * and the TLS certificate and key, each kept in force on any fault), and
 * kvtd_ops_stop after the workers stopped and before the store closes.
 */
#ifndef KVTD_OPS_H
#define KVTD_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <kvtier.h>

#include "daemon/http.h"

struct kvtd;
struct kvtd_tenant;

struct kvtd_ops_opts {
	const char *acl;          /* --acl FILE, or NULL: no tenants but the default */
	const char *metrics_bind; /* --metrics-bind ADDR (default 127.0.0.1) */
	int metrics_port;         /* --metrics-port N; -1: no HTTP, 0: any free port */
	int metrics_names;        /* --metrics-tenant-names: label tenants by name */
	const char *tls_cert;     /* --tls-cert FILE: the TCP port speaks TLS */
	const char *tls_key;      /* --tls-key FILE */
};

/* --check-config: the access list parses, the TLS files load, the options
 * agree.  0, or -1 with the reason printed on stderr. */
int kvtd_ops_check(const struct kvtd_ops_opts *o);
int kvtd_ops_start(struct kvtd *d, const struct kvtd_ops_opts *o, const kvt_ns_desc *base);
/* The tenants whose keys the rebuild looks for: up to `max`; how many. */
size_t kvtd_ops_tenants(struct kvtd *d, const struct kvtd_tenant **out, size_t max);
int kvtd_ops_serve(struct kvtd *d, const struct kvtd_ops_opts *o);
void kvtd_ops_reload(struct kvtd *d);
void kvtd_ops_stop(struct kvtd *d);

/* Reads of keys that were there (misses 0) or not (1): tenant t's, or
 * the node's (t NULL). */
uint64_t kvtd_ops_keyspace(struct kvtd *d, const struct kvtd_tenant *t, int misses);

/* http.h's callbacks over the struct kvtd (public for the tests). */
void kvtd_metrics_daemon(void *arg, struct kvtd_text *out);
int kvtd_health_daemon(void *arg, struct kvtd_text *out);
/* /ready: 1 once the warm start (if any) is done, else 0 with its progress. */
int kvtd_ready_daemon(void *arg, struct kvtd_text *out);

#endif
