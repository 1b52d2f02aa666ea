/*
 * cmd_daemon.c — `kvtier stat --daemon` and `kvtier top`: a running
 * kvtierd's figures, read from its /metrics (Prometheus text over HTTP,
 * kvtierd --metrics-port) like any scraper would.  The command links no
 * daemon code: the text is the interface.
 *
 * top samples twice an interval apart and shows rates (hits, misses,
 * bytes read and written, evictions, commands per second) and the get
 * latency's median and 99th percentile over the interval, from the
 * histogram's buckets (their upper bounds: log2 buckets, so within 2x).
 */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define METRICS_MAX (16u << 20)
#define MAX_TIERS 8
#define MAX_TENANTS 64
#define N_BUCKETS 24

struct tier_fig {
	char name[32];
	double capacity, used, chunks, hits, misses, evictions, promotions, demotions;
	double read_bytes, written_bytes, corrupt;
	double bucket[N_BUCKETS]; /* cumulative, le = 2^i us */
};

struct tenant_fig {
	char tenant[64], tier[32];
	double bytes, quota, reserve;
};

struct figures {
	struct tier_fig t[MAX_TIERS];
	int n_tiers;
	struct tenant_fig u[MAX_TENANTS];
	int n_tenants;
	double connections, commands, uptime;
};

/* "http://host:port/path", "host:port" or ":port": host and port. */
static int parse_url(const char *url, char *host, size_t hl, char *port, size_t pl)
{
	const char *p = url, *colon, *end;

	if (!strncmp(p, "http://", 7))
		p += 7;
	end = p + strcspn(p, "/");
	colon = memchr(p, ':', (size_t)(end - p));
	if (!colon || colon + 1 == end || (size_t)(colon - p) >= hl ||
	    (size_t)(end - colon - 1) >= pl)
		return -1;
	snprintf(host, hl, "%.*s", (int)(colon - p), p);
	snprintf(port, pl, "%.*s", (int)(end - colon - 1), colon + 1);
	if (!host[0])
		snprintf(host, hl, "127.0.0.1");
	return 0;
}

/* GET /metrics: 0 and the body (malloc'd, NUL-terminated), or -1 with
 * the reason printed. */
static int fetch(const char *cmd, const char *url, char **body)
{
	char host[256], port[16], req[512];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	struct timeval tv = { 5, 0 };
	size_t len = 0, cap = 65536;
	char *buf, *b;
	int fd = -1, rc;

	if (parse_url(url, host, sizeof(host), port, sizeof(port))) {
		fprintf(stderr, "kvtier %s: --daemon \"%s\": expected HOST:PORT of kvtierd's "
				"--metrics-port (http://127.0.0.1:9121)\n", cmd, url);
		return -1;
	}
	if ((rc = getaddrinfo(host, port, &hints, &ai))) {
		fprintf(stderr, "kvtier %s: %s: %s\n", cmd, host, gai_strerror(rc));
		return -1;
	}
	for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
				connect(fd, a->ai_addr, a->ai_addrlen))) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		fprintf(stderr, "kvtier %s: cannot connect to %s:%s: %s (is kvtierd running with "
				"--metrics-port?)\n", cmd, host, port, strerror(errno));
		return -1;
	}
	snprintf(req, sizeof(req), "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", host);
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req) || !(buf = malloc(cap))) {
		fprintf(stderr, "kvtier %s: %s:%s: cannot send the request\n", cmd, host, port);
		close(fd);
		return -1;
	}
	for (;;) {
		ssize_t n;
		if (len + 1 == cap) {
			char *nb = cap < METRICS_MAX ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				fprintf(stderr, "kvtier %s: %s:%s: more than %u bytes of metrics\n",
					cmd, host, port, METRICS_MAX);
				free(buf);
				close(fd);
				return -1;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "kvtier %s: %s:%s: %s\n", cmd, host, port, strerror(errno));
			free(buf);
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	if (strncmp(buf, "HTTP/1.", 7) || strncmp(buf + 8, " 200", 4) ||
	    !(b = strstr(buf, "\r\n\r\n"))) {
		fprintf(stderr, "kvtier %s: %s:%s did not answer 200 with metrics: %.60s\n", cmd,
			host, port, buf);
		free(buf);
		return -1;
	}
	memmove(buf, b + 4, len - (size_t)(b + 4 - buf) + 1);
	*body = buf;
	return 0;
}

/* The value of label `name` in "{a=\"x\",b=\"y\"}" into out. */
static int label(const char *labels, const char *name, char *out, size_t len)
{
	char pat[48];
	const char *p, *e;

	snprintf(pat, sizeof(pat), "%s=\"", name);
	if (!(p = strstr(labels, pat)))
		return -1;
	p += strlen(pat);
	if (!(e = strchr(p, '"')) || (size_t)(e - p) >= len)
		return -1;
	snprintf(out, len, "%.*s", (int)(e - p), p);
	return 0;
}

static struct tier_fig *tier_of(struct figures *f, const char *labels)
{
	char name[32];

	if (label(labels, "tier", name, sizeof(name)))
		return NULL;
	for (int i = 0; i < f->n_tiers; i++)
		if (!strcmp(f->t[i].name, name))
			return &f->t[i];
	if (f->n_tiers == MAX_TIERS)
		return NULL;
	memset(&f->t[f->n_tiers], 0, sizeof(f->t[0]));
	strcpy(f->t[f->n_tiers].name, name);
	return &f->t[f->n_tiers++];
}

static struct tenant_fig *tenant_of(struct figures *f, const char *labels)
{
	char tn[64], tr[32];

	if (label(labels, "tenant", tn, sizeof(tn)) || label(labels, "tier", tr, sizeof(tr)))
		return NULL;
	for (int i = 0; i < f->n_tenants; i++)
		if (!strcmp(f->u[i].tenant, tn) && !strcmp(f->u[i].tier, tr))
			return &f->u[i];
	if (f->n_tenants == MAX_TENANTS)
		return NULL;
	memset(&f->u[f->n_tenants], 0, sizeof(f->u[0]));
	strcpy(f->u[f->n_tenants].tenant, tn);
	strcpy(f->u[f->n_tenants].tier, tr);
	return &f->u[f->n_tenants++];
}

static void parse_metrics(char *text, struct figures *f)
{
	static const struct {
		const char *name;
		size_t off;
	} tier_rows[] = {
#define ROW(n, m) { "kvtier_tier_" n, offsetof(struct tier_fig, m) }
		ROW("capacity_bytes", capacity), ROW("used_bytes", used), ROW("chunks", chunks),
		ROW("hits_total", hits), ROW("misses_total", misses),
		ROW("evictions_total", evictions), ROW("promotions_total", promotions),
		ROW("demotions_total", demotions), ROW("read_bytes_total", read_bytes),
		ROW("written_bytes_total", written_bytes), ROW("corrupt_total", corrupt),
#undef ROW
	};
	memset(f, 0, sizeof(*f));
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' '), *br = strchr(line, '{');
		double v;
		if (line[0] == '#' || !sp)
			continue;
		*sp = '\0';
		v = strtod(sp + 1, NULL);
		if (!strcmp(line, "kvtierd_connections"))
			f->connections = v;
		else if (!strcmp(line, "kvtierd_commands_total"))
			f->commands = v;
		else if (!strcmp(line, "kvtierd_uptime_seconds"))
			f->uptime = v;
		if (!br)
			continue;
		*br = '\0';
		if (!strncmp(line, "kvtier_tier_", 12)) {
			struct tier_fig *t = tier_of(f, br + 1);
			char le[32];
			if (!t)
				continue;
			for (size_t i = 0; i < sizeof(tier_rows) / sizeof(tier_rows[0]); i++)
				if (!strcmp(line, tier_rows[i].name))
					*(double *)((char *)t + tier_rows[i].off) = v;
			if (!strcmp(line, "kvtier_tier_get_latency_seconds_bucket") &&
			    !label(br + 1, "le", le, sizeof(le)) && strcmp(le, "+Inf")) {
				int b = (int)(log2(strtod(le, NULL) * 1e6) + 0.5);
				if (b >= 0 && b < N_BUCKETS)
					t->bucket[b] = v;
			}
		} else if (!strncmp(line, "kvtier_tenant_", 14)) {
			struct tenant_fig *u = tenant_of(f, br + 1);
			if (!u)
				continue;
			if (!strcmp(line, "kvtier_tenant_bytes"))
				u->bytes = v;
			else if (!strcmp(line, "kvtier_tenant_quota_bytes"))
				u->quota = v;
			else if (!strcmp(line, "kvtier_tenant_reserve_bytes"))
				u->reserve = v;
		}
	}
}

static const char *sz(double v, char *buf)
{
	return kvt_fmt_size(v > 0 ? (uint64_t)v : 0, buf, 32);
}

static int get_figures(const char *cmd, const char *url, struct figures *f)
{
	char *body;

	if (fetch(cmd, url, &body))
		return -1;
	parse_metrics(body, f);
	free(body);
	if (!f->n_tiers) {
		fprintf(stderr, "kvtier %s: %s serves no kvtier_tier_* metrics: not a kvtierd?\n",
			cmd, url);
		return -1;
	}
	return 0;
}

struct daemon_args {
	const char *url;
	int json;
	double interval;
	uint32_t count;
	const char *cmd;
};

enum { O_DAEMON = 0x100, O_JSON, O_INTERVAL, O_COUNT };

static int daemon_opt(void *arg, int id, const char *val)
{
	struct daemon_args *a = arg;

	switch (id) {
	case O_DAEMON: a->url = val; break;
	case O_JSON: a->json = 1; break;
	case O_INTERVAL:
		return cli_parse_double(a->cmd, "--interval", val, 0.05, 3600, &a->interval) ? 2 : -1;
	case O_COUNT:
		return cli_parse_u32(a->cmd, "--count", val, 1, 1000000, &a->count) ? 2 : -1;
	}
	return -1;
}

static void stat_daemon_usage(FILE *f)
{
	fprintf(f, "usage: kvtier stat --daemon HOST:PORT [--json]\n\n"
		   "A running kvtierd's tiers, tenants and clients, from its /metrics\n"
		   "(kvtierd --metrics-port PORT).\n");
}

int cmd_stat_daemon(int argc, char **argv)
{
	static const struct option own[] = {
		{ "daemon", required_argument, 0, O_DAEMON },
		{ "json", no_argument, 0, O_JSON },
		{ 0, 0, 0, 0 },
	};
	struct daemon_args a = { .cmd = "stat" };
	struct figures f;
	char b1[32], b2[32], b3[32];
	int first, rc;

	rc = cli_getopt("stat", argc, argv, NULL, own, NULL, daemon_opt, &a, stat_daemon_usage,
			&first);
	if (rc >= 0)
		return rc;
	if (first < argc) {
		fprintf(stderr, "kvtier stat: unexpected argument \"%s\"\n", argv[first]);
		return 2;
	}
	if (get_figures("stat", a.url, &f))
		return 1;
	if (a.json) {
		json_t *tiers = json_array(), *tenants = json_array();
		for (int i = 0; i < f.n_tiers; i++) {
			const struct tier_fig *t = &f.t[i];
			json_array_append_new(tiers, json_pack(
				"{s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "name", t->name,
				"capacity_bytes", t->capacity, "used_bytes", t->used, "chunks", t->chunks,
				"hits", t->hits, "misses", t->misses, "evictions", t->evictions,
				"promotions", t->promotions, "read_bytes", t->read_bytes,
				"written_bytes", t->written_bytes));
		}
		for (int i = 0; i < f.n_tenants; i++)
			json_array_append_new(tenants, json_pack(
				"{s:s, s:s, s:f, s:f, s:f}", "tenant", f.u[i].tenant, "tier", f.u[i].tier,
				"bytes", f.u[i].bytes, "quota_bytes", f.u[i].quota,
				"reserve_bytes", f.u[i].reserve));
		cli_json_print(json_pack("{s:o, s:o, s:f, s:f, s:f}", "tiers", tiers, "tenants",
					 tenants, "connections", f.connections, "commands",
					 f.commands, "uptime_s", f.uptime));
		return 0;
	}
	printf("kvtierd at %s: %.0f connections, %.0f commands, up %.0f s\n", a.url,
	       f.connections, f.commands, f.uptime);
	for (int i = 0; i < f.n_tiers; i++) {
		const struct tier_fig *t = &f.t[i];
		printf("%-6s %s of %s used, %.0f chunks; hits %.0f misses %.0f evictions %.0f "
		       "promotions %.0f; read %s written %s\n",
		       t->name, sz(t->used, b1), sz(t->capacity, b2), t->chunks, t->hits, t->misses,
		       t->evictions, t->promotions, sz(t->read_bytes, b3), sz(t->written_bytes, b1));
	}
	for (int i = 0; i < f.n_tenants; i++) {
		const struct tenant_fig *u = &f.u[i];
		printf("tenant %-13s %-6s %s of quota %s, reserved %s\n", u->tenant, u->tier,
		       sz(u->bytes, b1), u->quota ? sz(u->quota, b2) : "none", sz(u->reserve, b3));
	}
	return 0;
}

/* The latency under which a fraction q of the interval's reads fell, in
 * microseconds (the bucket's upper bound), or 0 if there were none. */
static double quantile_us(const struct tier_fig *now, const struct tier_fig *then, double q)
{
	double total = now->bucket[N_BUCKETS - 1] - then->bucket[N_BUCKETS - 1];

	if (total <= 0)
		return 0;
	for (int b = 0; b < N_BUCKETS; b++)
		if (now->bucket[b] - then->bucket[b] >= q * total)
			return ldexp(1.0, b);
	return ldexp(1.0, N_BUCKETS - 1);
}

static void top_usage(FILE *f)
{
	fprintf(f, "usage: kvtier top --daemon HOST:PORT [--interval S] [--count N]\n\n"
		   "A running kvtierd's rates, refreshed every S seconds (default 1): per tier\n"
		   "hits, misses and evictions per second, read and write bandwidth, the get\n"
		   "latency's median and p99; clients and commands per second.  --count N\n"
		   "stops after N refreshes (default: until interrupted).\n");
}

int cmd_top(int argc, char **argv)
{
	static const struct option own[] = {
		{ "daemon", required_argument, 0, O_DAEMON },
		{ "interval", required_argument, 0, O_INTERVAL },
		{ "count", required_argument, 0, O_COUNT },
		{ 0, 0, 0, 0 },
	};
	struct daemon_args a = { .cmd = "top", .interval = 1 };
	struct figures *prev = malloc(sizeof(*prev)), *cur = malloc(sizeof(*cur)), *sw;
	int first, rc, tty = isatty(1);

	if (!prev || !cur) {
		free(prev);
		free(cur);
		return 1;
	}
	rc = cli_getopt("top", argc, argv, NULL, own, NULL, daemon_opt, &a, top_usage, &first);
	if (rc < 0 && !a.url) {
		fprintf(stderr, "kvtier top: --daemon HOST:PORT is needed\n");
		rc = 2;
	}
	if (rc < 0 && get_figures("top", a.url, prev))
		rc = 1;
	for (uint32_t n = 0; rc < 0 && (!a.count || n < a.count); n++) {
		struct timespec d = { (time_t)a.interval,
				      (long)((a.interval - (double)(time_t)a.interval) * 1e9) };
		char b1[32], b2[32], b3[32];
		while (nanosleep(&d, &d) && errno == EINTR)
			;
		if (get_figures("top", a.url, cur)) {
			rc = 1;
			break;
		}
		if (tty)
			printf("\033[H\033[2J");
		printf("kvtierd %s: %.0f clients, %.0f commands/s\n", a.url, cur->connections,
		       (cur->commands - prev->commands) / a.interval);
		printf("%-6s %10s %10s %6s %10s %10s %10s %9s %9s %10s\n", "tier", "hits/s",
		       "misses/s", "hit%", "evict/s", "read/s", "write/s", "p50 us", "p99 us",
		       "used");
		for (int i = 0; i < cur->n_tiers; i++) {
			const struct tier_fig *t = &cur->t[i];
			const struct tier_fig *o = i < prev->n_tiers ? &prev->t[i] : t;
			double h = (t->hits - o->hits) / a.interval;
			double m = (t->misses - o->misses) / a.interval;
			printf("%-6s %10.0f %10.0f %6.1f %10.0f %10s %10s %9.0f %9.0f %10s\n",
			       t->name, h, m, h + m > 0 ? 100 * h / (h + m) : 0,
			       (t->evictions - o->evictions) / a.interval,
			       sz((t->read_bytes - o->read_bytes) / a.interval, b1),
			       sz((t->written_bytes - o->written_bytes) / a.interval, b2),
			       quantile_us(t, o, 0.5), quantile_us(t, o, 0.99), sz(t->used, b3));
		}
		fflush(stdout);
		sw = prev;
		prev = cur;
		cur = sw;
	}
	free(prev);
	free(cur);
	return rc < 0 ? 0 : rc;
}
