/*
 * http.h — kvtierd's HTTP side: Prometheus text at /metrics and a health
 * answer at /health, served by libmicrohttpd on a thread of its own.
 *
 * The store's figures (per tier: bytes, chunks, hits, misses, evictions,
 * promotions, bytes read and written, measured read bandwidth, the get
 * latency histogram) are read with kvt_store_stats at each scrape; the
 * daemon adds its own families (connections, commands, tenants' usage)
 * through a callback that runs on the HTTP thread, so what it reads must
 * be safe to read from another thread (atomics, or its own lock).
 */
#ifndef KVTD_HTTP_H
#define KVTD_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* A growing text buffer; after an allocation failure it keeps what it had
 * and sets `oom` (the scrape then answers 500). */
struct kvtd_text {
	char *b;
	size_t len, cap;
	int oom;
};

void kvtd_text_printf(struct kvtd_text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kvtd_text_free(struct kvtd_text *t);

/* The store's per-tier families, in Prometheus text format 0.0.4. */
void kvtd_metrics_store(kvt_store *st, struct kvtd_text *out);
/* Tenants' usage against their quotas and reservations, per tier
 * (kvt_store_tenant_usage): names[k] is the store's name of the k-th (NULL:
 * the default tenant), labels[k] what its samples' `tenant` label shows
 * (NULL: the name, "default" for the default tenant).  Tiers without a
 * policy (unbounded) are left out. */
void kvtd_metrics_tenants(kvt_store *st, const char *const *names,
			  const char *const *labels, int n, struct kvtd_text *out);
/* kvtier_misses_total by reason, tier and each of the n tenants (names[i]
 * NULL: the default). */
void kvtd_metrics_misses(kvt_store *st, const char *const *names,
			 const char *const *labels, int n, struct kvtd_text *out);

struct kvtd_http_conf {
	const char *addr;   /* an IPv4 address to bind; NULL: 127.0.0.1 */
	uint16_t port;      /* 0: a free port (kvtd_http_port says which) */
	kvt_store *st;
	/* Appends the daemon's own families to a /metrics answer; may be NULL. */
	void (*metrics)(void *arg, struct kvtd_text *out);
	/* Nonzero: the daemon is not healthy (draining, say), and what it wrote
	 * is the reason; may be NULL. */
	int (*health)(void *arg, struct kvtd_text *out);
	/* Nonzero once the daemon should take traffic (/ready); 0 with what
	 * it is still doing written.  NULL: ready whenever healthy. */
	int (*ready)(void *arg, struct kvtd_text *out);
	void *arg;
};

typedef struct kvtd_http kvtd_http;

/* Start serving.  0 and *out, or -1 with the reason in err. */
int kvtd_http_start(const struct kvtd_http_conf *conf, kvtd_http **out,
		    char *err, size_t errlen);
uint16_t kvtd_http_port(const kvtd_http *h);
/* Stop serving and wait for the thread; NULL is a no-op. */
void kvtd_http_stop(kvtd_http *h);

#endif
