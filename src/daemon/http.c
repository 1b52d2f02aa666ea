/*
 * http.c — /metrics and /health over libmicrohttpd (http.h).
 *
 * Families are named kvtier_* for the store and kvtierd_* for the daemon,
 * with units in the names (bytes, seconds) and counters ending in _total,
 * as Prometheus asks.  Bandwidth is what a scraper derives from the byte
 * counters (rate(kvtier_tier_read_bytes_total[1m])); the store's own
 * measured read bandwidth (the figure its cost model uses) is a gauge
 * beside them.  The get latency is a Prometheus histogram over the store's
 * log2 buckets: bucket i counts reads under 2^i microseconds.  The store
 * keeps counts per bucket only, so _sum is estimated at each bucket's
 * geometric middle; its HELP says so.
 */
#include "daemon/http.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

/*
 * Idle and slow clients cannot take /health away.  libmicrohttpd's timeout
 * is one of inactivity, so a client sending a byte every few seconds keeps
 * its connection, and 64 of them once filled every slot while a liveness
 * probe was refused (and restarted the daemon, losing its DRAM).  So the
 * connections are kept in the order of their last sign of use (opened, or
 * a request answered), and a connection beyond HTTP_SLOTS closes the one
 * least recently useful: a new client is always served, and a client that
 * is slow costs only itself.  All of this runs on libmicrohttpd's one
 * thread (its callbacks), so it needs no lock; the eviction is a
 * shutdown() of the socket, which libmicrohttpd then sees and closes.
 */
#define HTTP_SLOTS 64
#define HTTP_MAX_CONNS 256 /* libmicrohttpd's own limit, above ours */

struct http_conn {
	struct http_conn *prev, *next; /* NULL both, and not the head: evicted */
	int fd;
};

struct kvtd_http {
	struct MHD_Daemon *d;
	struct kvtd_http_conf conf;
	uint16_t port;
	struct http_conn *head, *tail; /* least recently useful first */
	unsigned n;
	_Atomic unsigned long long evicted;
};

static void lru_unlink(kvtd_http *h, struct http_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		h->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		h->tail = c->prev;
	c->prev = c->next = NULL;
	h->n--;
}

static void lru_append(kvtd_http *h, struct http_conn *c)
{
	c->prev = h->tail;
	c->next = NULL;
	if (h->tail)
		h->tail->next = c;
	else
		h->head = c;
	h->tail = c;
	h->n++;
}

static int lru_linked(const kvtd_http *h, const struct http_conn *c)
{
	return c->prev || c->next || h->head == c;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **ctx,
			  enum MHD_ConnectionNotificationCode what)
{
	kvtd_http *h = cls;
	struct http_conn *c = *ctx;

	if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (c && lru_linked(h, c))
			lru_unlink(h, c);
		free(c);
		*ctx = NULL;
		return;
	}
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || !(c = calloc(1, sizeof(*c))))
		return; /* served, only not tracked */
	c->fd = ci->connect_fd;
	*ctx = c;
	lru_append(h, c);
	while (h->n > HTTP_SLOTS) {
		struct http_conn *old = h->head;
		lru_unlink(h, old);
		shutdown(old->fd, SHUT_RDWR);
		atomic_fetch_add(&h->evicted, 1);
	}
}

/* A request answered: its connection is the most recently useful. */
static void on_completed(void *cls, struct MHD_Connection *mc, void **req,
			 enum MHD_RequestTerminationCode why)
{
	kvtd_http *h = cls;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct http_conn *c = ci ? ci->socket_context : NULL;

	(void)req;
	if (why != MHD_REQUEST_TERMINATED_COMPLETED_OK || !c || !lru_linked(h, c))
		return;
	lru_unlink(h, c);
	lru_append(h, c);
}

void kvtd_text_printf(struct kvtd_text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	for (;;) {
		size_t room = t->cap - t->len;
		va_start(ap, fmt);
		n = vsnprintf(t->b ? t->b + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = 1;
			return;
		}
		if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		{
			size_t nc = t->cap ? t->cap * 2 : 4096;
			char *nb;
			while (nc - t->len <= (size_t)n)
				nc *= 2;
			if (!(nb = realloc(t->b, nc))) {
				t->oom = 1;
				return;
			}
			t->b = nb;
			t->cap = nc;
		}
	}
}

void kvtd_text_free(struct kvtd_text *t)
{
	free(t->b);
	memset(t, 0, sizeof(*t));
}

/* One family of per-tier values: its HELP and TYPE lines, then a sample per
 * tier, read from the stats at `off`. */
struct tier_family {
	const char *name, *type, *help;
	size_t off;
};

#define TF(n, t, h, f) { n, t, h, offsetof(kvt_tier_stats, f) }
static const struct tier_family tier_families[] = {
	TF("kvtier_tier_capacity_bytes", "gauge", "Bytes the tier may hold.", capacity_bytes),
	TF("kvtier_tier_used_bytes", "gauge", "Bytes the tier holds (whole pages or blocks).", used_bytes),
	TF("kvtier_tier_chunks", "gauge", "Objects the tier holds.", chunks),
	TF("kvtier_tier_hits_total", "counter", "Reads the tier served.", hits),
	TF("kvtier_tier_misses_total", "counter", "Reads the tier did not have.", misses),
	TF("kvtier_tier_puts_total", "counter", "Objects written to the tier.", puts),
	TF("kvtier_tier_evictions_total", "counter", "Objects evicted from the tier (by its policy or itself).", evictions),
	TF("kvtier_tier_evicted_bytes_total", "counter", "Bytes evicted from the tier.", evicted_bytes),
	TF("kvtier_tier_promotions_total", "counter", "Objects copied from the tier up to the first.", promotions),
	TF("kvtier_tier_demotions_total", "counter", "Objects the tier took from the tier above.", demotions),
	TF("kvtier_tier_written_bytes_total", "counter", "Bytes written into the tier.", bytes_in),
	TF("kvtier_tier_read_bytes_total", "counter", "Bytes read out of the tier.", bytes_out),
	TF("kvtier_tier_corrupt_total", "counter", "Objects dropped because they failed verification.", corrupt),
	TF("kvtier_tier_write_errors_total", "counter", "Writes that failed with an I/O error.", write_errors),
	TF("kvtier_tier_read_errors_total", "counter", "Reads that failed other than by a miss.", read_errors),
	TF("kvtier_tier_borrowed", "gauge", "References to the tier's objects outstanding.", borrowed),
	TF("kvtier_tier_pinned", "gauge", "Pins held in the tier.", pinned),
};

#define MAX_TIERS 8

/* The KV event publisher's counters (docs/EVENTS.md), when it runs. */
static void metrics_events(kvt_store *st, struct kvtd_text *o)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} fam[] = {
		{ "kvtier_events_batches_total", "counter", "KV event batches published.",
		  offsetof(kvt_events_stats, batches) },
		{ "kvtier_events_total", "counter", "KV events published.",
		  offsetof(kvt_events_stats, events) },
		{ "kvtier_events_dropped_total", "counter",
		  "KV events dropped because the publisher's queue was full.",
		  offsetof(kvt_events_stats, dropped) },
		{ "kvtier_events_send_failures_total", "counter",
		  "KV event batches the socket refused (still replayable).",
		  offsetof(kvt_events_stats, send_failures) },
		{ "kvtier_events_replays_total", "counter", "Replay requests answered.",
		  offsetof(kvt_events_stats, replays) },
		{ "kvtier_events_replay_errors_total", "counter",
		  "Malformed replay requests (answered with an error).",
		  offsetof(kvt_events_stats, replay_errors) },
		{ "kvtier_events_last_sequence", "gauge", "The last published batch's sequence number.",
		  offsetof(kvt_events_stats, last_seq) },
		{ "kvtier_events_queued", "gauge", "KV events waiting for the publisher.",
		  offsetof(kvt_events_stats, queued) },
	};
	kvt_events_stats es;

	if (kvt_store_events_stats(st, &es) || !es.enabled)
		return;
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		uint64_t v;
		memcpy(&v, (const char *)&es + fam[f].off, sizeof(v));
		kvtd_text_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", fam[f].name,
				 fam[f].help, fam[f].name, fam[f].type, fam[f].name,
				 (unsigned long long)v);
	}
}

void kvtd_metrics_store(kvt_store *st, struct kvtd_text *o)
{
	kvt_tier_stats s[MAX_TIERS];
	int n = kvt_store_tiers(st);

	if (n > MAX_TIERS)
		n = MAX_TIERS;
	for (int i = 0; i < n; i++)
		if (kvt_store_stats(st, i, &s[i]))
			memset(&s[i], 0, sizeof(s[i]));
	for (size_t f = 0; f < sizeof(tier_families) / sizeof(tier_families[0]); f++) {
		const struct tier_family *tf = &tier_families[f];
		kvtd_text_printf(o, "# HELP %s %s\n# TYPE %s %s\n", tf->name, tf->help,
				 tf->name, tf->type);
		for (int i = 0; i < n; i++) {
			uint64_t v;
			memcpy(&v, (const char *)&s[i] + tf->off, sizeof(v));
			kvtd_text_printf(o, "%s{tier=\"%s\"} %llu\n", tf->name, s[i].name,
					 (unsigned long long)v);
		}
	}
	kvtd_text_printf(o, "# HELP kvtier_tier_read_bandwidth_bytes_per_second "
			    "The tier's measured read bandwidth (moving average), as the cost model uses it.\n"
			    "# TYPE kvtier_tier_read_bandwidth_bytes_per_second gauge\n");
	for (int i = 0; i < n; i++)
		kvtd_text_printf(o, "kvtier_tier_read_bandwidth_bytes_per_second{tier=\"%s\"} %.6g\n",
				 s[i].name, s[i].read_gbps * 1e9);
	kvtd_text_printf(o, "# HELP kvtier_tier_writes_off 1 while the tier takes no writes after repeated I/O errors.\n"
			    "# TYPE kvtier_tier_writes_off gauge\n");
	for (int i = 0; i < n; i++)
		kvtd_text_printf(o, "kvtier_tier_writes_off{tier=\"%s\"} %u\n", s[i].name,
				 s[i].writes_off);
	kvtd_text_printf(o, "# HELP kvtier_tier_get_latency_seconds Reads served by the tier, by time "
			    "(log2 buckets; _sum estimated at each bucket's geometric middle).\n"
			    "# TYPE kvtier_tier_get_latency_seconds histogram\n");
	for (int i = 0; i < n; i++) {
		uint64_t cum = 0;
		double sum = 0;
		for (int b = 0; b < 24; b++) {
			uint64_t c = s[i].get_latency_log2_us[b];
			cum += c;
			/* bucket b holds [2^(b-1), 2^b) us; bucket 0 [0, 1) us */
			sum += (double)c * (b ? ldexp(1.0, b) * M_SQRT1_2 : 0.5) * 1e-6;
			kvtd_text_printf(o, "kvtier_tier_get_latency_seconds_bucket{tier=\"%s\",le=\"%.6g\"} %llu\n",
					 s[i].name, ldexp(1.0, b) * 1e-6, (unsigned long long)cum);
		}
		kvtd_text_printf(o, "kvtier_tier_get_latency_seconds_bucket{tier=\"%s\",le=\"+Inf\"} %llu\n"
				    "kvtier_tier_get_latency_seconds_sum{tier=\"%s\"} %.9g\n"
				    "kvtier_tier_get_latency_seconds_count{tier=\"%s\"} %llu\n",
				 s[i].name, (unsigned long long)cum, s[i].name, sum, s[i].name,
				 (unsigned long long)cum);
	}
	metrics_events(st, o);
}

void kvtd_metrics_tenants(kvt_store *st, const char *const *names,
			  const char *const *labels, int n, struct kvtd_text *o)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} fam[] = {
		{ "kvtier_tenant_bytes", "gauge", "Bytes the tenant holds in the tier.",
		  offsetof(kvt_tenant_usage, bytes) },
		{ "kvtier_tenant_chunks", "gauge", "Objects the tenant holds in the tier.",
		  offsetof(kvt_tenant_usage, chunks) },
		{ "kvtier_tenant_quota_bytes", "gauge", "The tenant's quota in the tier (0: none).",
		  offsetof(kvt_tenant_usage, quota) },
		{ "kvtier_tenant_reserve_bytes", "gauge", "The tenant's reservation in the tier.",
		  offsetof(kvt_tenant_usage, reserve) },
		{ "kvtier_tenant_quota_evictions_total", "counter",
		  "Objects the tenant lost to its own quota.",
		  offsetof(kvt_tenant_usage, quota_evictions) },
		{ "kvtier_tenant_share_evictions_total", "counter",
		  "Objects the tenant lost to make room in the full tier.",
		  offsetof(kvt_tenant_usage, share_evictions) },
	};
	int nt = kvt_store_tiers(st);
	kvt_tier_stats ts;

	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		kvtd_text_printf(o, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
				 fam[f].name, fam[f].type);
		for (int t = 0; t < nt && t < MAX_TIERS; t++) {
			if (kvt_store_stats(st, t, &ts))
				continue;
			for (int k = 0; k < n; k++) {
				kvt_tenant_usage u;
				uint64_t v;
				const char *l = labels && labels[k] ? labels[k]
						: names[k] ? names[k] : "default";

				if (kvt_store_tenant_usage(st, names[k], t, &u))
					continue;
				memcpy(&v, (const char *)&u + fam[f].off, sizeof(v));
				kvtd_text_printf(o, "%s{tenant=\"%s\",tier=\"%s\"} %llu\n",
						 fam[f].name, l, ts.name, (unsigned long long)v);
			}
		}
	}
	kvtd_metrics_misses(st, names, labels, n, o);
}

void kvtd_metrics_misses(kvt_store *st, const char *const *names,
			 const char *const *labels, int n, struct kvtd_text *o)
{
	int nt = kvt_store_tiers(st);
	kvt_tier_stats ts;

	/* Misses by reason (kvt_why's, docs/WHY.md): a get or lookup that found
	 * nothing, classified from the history of removals; tier "none" when
	 * no tier is concerned (never stored, say). */
	kvtd_text_printf(o, "# HELP kvtier_misses_total Reads that found no chunk, by reason, "
			    "tier and tenant.\n# TYPE kvtier_misses_total counter\n");
	for (int t = -1; t < nt && t < MAX_TIERS; t++) {
		const char *tier = "none";
		if (t >= 0) {
			if (kvt_store_stats(st, t, &ts))
				continue;
			tier = ts.name;
		}
		for (int r = KVT_WHY_NEVER; r < KVT_WHY_REASONS; r++) {
			if (r == KVT_WHY_NAMESPACE)
				continue; /* only a prompt's tokens can tell */
			for (int k = 0; k < n; k++) {
				const char *l = labels && labels[k] ? labels[k]
						: names[k] ? names[k] : "default";
				kvtd_text_printf(o, "kvtier_misses_total{reason=\"%s\",tenant=\"%s\","
						    "tier=\"%s\"} %llu\n", kvt_why_name(r), l, tier,
						 (unsigned long long)kvt_store_misses(st, names[k], r, t));
			}
		}
	}
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status,
			      struct kvtd_text *t, const char *type)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (t->oom) {
		kvtd_text_free(t);
		status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		kvtd_text_printf(t, "out of memory\n");
	}
	r = MHD_create_response_from_buffer(t->len, t->b ? t->b : (char *)"",
					    t->b ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		kvtd_text_free(t);
		return MHD_NO;
	}
	t->b = NULL; /* the response owns it now */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload, size_t *upload_len, void **state)
{
	kvtd_http *h = cls;
	struct kvtd_text t = { 0 };

	(void)version;
	(void)upload;
	(void)state;
	if (*upload_len)
		return MHD_NO; /* nothing here takes a body */
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		kvtd_text_printf(&t, "only GET and HEAD are served\n");
		return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, &t, "text/plain");
	}
	if (!strcmp(url, "/metrics")) {
		kvtd_metrics_store(h->conf.st, &t);
		if (h->conf.metrics)
			h->conf.metrics(h->conf.arg, &t);
		kvtd_text_printf(&t, "# HELP kvtierd_http_evicted_total HTTP connections closed "
				 "to make room for a new one (the least recently useful).\n"
				 "# TYPE kvtierd_http_evicted_total counter\n"
				 "kvtierd_http_evicted_total %llu\n",
				 (unsigned long long)atomic_load(&h->evicted));
		return answer(c, MHD_HTTP_OK, &t, "text/plain; version=0.0.4; charset=utf-8");
	}
	if (!strcmp(url, "/health")) {
		int sick = h->conf.health ? h->conf.health(h->conf.arg, &t) : 0;
		int n = kvt_store_tiers(h->conf.st);

		for (int i = 0; i < n; i++) {
			kvt_tier_stats s;
			if (kvt_store_stats(h->conf.st, i, &s))
				continue;
			if (s.writes_off || s.unreachable)
				kvtd_text_printf(&t, "tier %s: %s\n", s.name,
						 s.state[0] ? s.state
						 : s.writes_off ? "takes no writes after I/O errors"
								: "unreachable");
		}
		if (!sick && t.len == 0)
			kvtd_text_printf(&t, "ok\n");
		/* A degraded tier is reported, but the daemon still serves:
		 * only the daemon's own verdict makes it unhealthy. */
		return answer(c, sick ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, &t,
			      "text/plain");
	}
	if (!strcmp(url, "/ready")) {
		/* Distinct from /health: a node rebuilding its index or still
		 * warming its first tier is healthy, and should not take a
		 * router's traffic yet. */
		int ready = !(h->conf.health && h->conf.health(h->conf.arg, &t)) &&
			    (!h->conf.ready || h->conf.ready(h->conf.arg, &t));
		if (ready && t.len == 0)
			kvtd_text_printf(&t, "ready\n");
		return answer(c, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, &t,
			      "text/plain");
	}
	kvtd_text_printf(&t, "not found: /metrics, /health and /ready are served\n");
	return answer(c, MHD_HTTP_NOT_FOUND, &t, "text/plain");
}

int kvtd_http_start(const struct kvtd_http_conf *conf, kvtd_http **out,
		    char *err, size_t errlen)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(conf->port) };
	const union MHD_DaemonInfo *di;
	kvtd_http *h;

	*out = NULL;
	if (inet_pton(AF_INET, conf->addr ? conf->addr : "127.0.0.1", &sa.sin_addr) != 1) {
		snprintf(err, errlen, "metrics address \"%s\": expected an IPv4 address",
			 conf->addr);
		return -1;
	}
	if (!(h = calloc(1, sizeof(*h)))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	h->conf = *conf;
	h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
				conf->port, NULL, NULL, on_request, h,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNS,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, errlen, "cannot serve metrics on %s:%u (in use, or not an address of this host)",
			 conf->addr ? conf->addr : "127.0.0.1", (unsigned)conf->port);
		free(h);
		return -1;
	}
	di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = di ? di->port : conf->port;
	*out = h;
	return 0;
}

uint16_t kvtd_http_port(const kvtd_http *h)
{
	return h ? h->port : 0;
}

void kvtd_http_stop(kvtd_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}
