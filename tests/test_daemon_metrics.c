/*
 * test_daemon_metrics.c — kvtierd's /metrics and /health (src/daemon/http.c)
 * over a real store, scraped with curl as Prometheus would: the families
 * and their values after known traffic, the histogram's shape, tenants'
 * usage against quota, the daemon's own families, and the answers to
 * paths and methods that are not served.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/http.h"
#include "test.h"

#define SECRET_A "000102030405060708090a0b0c0d0e0f"

static int sick;

static void daemon_metrics(void *arg, struct kvtd_text *o)
{
	kvt_store *st = arg;
	const char *names[] = { NULL, "a" };

	kvtd_text_printf(o, "# HELP kvtierd_connections Clients connected now.\n"
			    "# TYPE kvtierd_connections gauge\nkvtierd_connections 3\n");
	kvtd_metrics_tenants(st, names, NULL, 2, o);
}

static int daemon_health(void *arg, struct kvtd_text *o)
{
	(void)arg;
	if (sick)
		kvtd_text_printf(o, "shutting down\n");
	return sick;
}

/* curl's body into a malloc'd string, the status into *code. */
static char *scrape(uint16_t port, const char *path, const char *method, int *code)
{
	char cmd[256], *body = calloc(1, 1 << 20);
	FILE *p;
	size_t n;

	snprintf(cmd, sizeof(cmd),
		 "curl -s -X %s -w '\\n%%{http_code}' http://127.0.0.1:%u%s", method,
		 (unsigned)port, path);
	p = popen(cmd, "r");
	n = p ? fread(body, 1, (1 << 20) - 1, p) : 0;
	if (p)
		pclose(p);
	body[n] = '\0';
	*code = 0;
	{
		char *nl = strrchr(body, '\n');
		if (nl) {
			*code = atoi(nl + 1);
			nl[1] = '\0';
		}
	}
	return body;
}

/* The value of the sample `series` (name and labels as written), or -1. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	return -1;
}

/* Prometheus text format 0.0.4, as much as a scraper relies on: each
 * sample line is name{labels} value, its family's TYPE came before it,
 * and no family is declared twice. */
static void check_format(const char *text)
{
	char typed[64][96];
	int n_typed = 0;

	for (const char *l = text; *l;) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		char line[512];

		if (len >= sizeof(line)) {
			test_failures++;
			return;
		}
		memcpy(line, l, len);
		line[len] = '\0';
		l += len + (e ? 1 : 0);
		if (!strncmp(line, "# TYPE ", 7)) {
			char name[96];
			CHECK(sscanf(line + 7, "%95s", name) == 1);
			for (int i = 0; i < n_typed; i++)
				CHECK(strcmp(typed[i], name));
			if (n_typed < 64)
				strcpy(typed[n_typed++], name);
		} else if (line[0] != '#' && line[0]) {
			char *sp = strrchr(line, ' '), *end;
			size_t nl = strcspn(line, "{ ");
			int known = 0;
			CHECK(sp != NULL);
			if (!sp)
				continue;
			strtod(sp + 1, &end);
			CHECK(*end == '\0' || !strcmp(sp + 1, "+Inf"));
			for (size_t i = 0; i < nl; i++)
				CHECK(islower((unsigned char)line[i]) || line[i] == '_');
			for (int i = 0; i < n_typed; i++) {
				size_t tl = strlen(typed[i]);
				known |= !strncmp(line, typed[i], tl) &&
					 (nl == tl || !strncmp(line + tl, "_bucket", 7) ||
					  !strncmp(line + tl, "_sum", 4) || !strncmp(line + tl, "_count", 6));
			}
			if (!known) {
				fprintf(stderr, "sample before its TYPE: %s\n", line);
				test_failures++;
			}
		}
	}
}

int main(void)
{
	kvt_config *c = kvt_config_new();
	struct kvtd_http_conf hc = { 0 };
	kvtd_http *h = NULL;
	kvt_store *st;
	kvt_ns_desc d = { 0 };
	kvt_ns ns;
	kvt_key k[2];
	uint32_t tok[128];
	char err[256], *m;
	size_t per;
	uint8_t *buf;
	int code, err_open;

	kvt_config_set(c, "max_local_cpu_size", "2MiB");
	kvt_config_set(c, "dram_page_size", "16KiB");
	kvt_config_set(c, "dram_lock_memory", "false");
	kvt_config_set(c, "dram_prefault", "false");
	CHECK_EQ(kvt_config_set(c, "tenants", "a=" SECRET_A), 0);
	st = kvt_store_open(c, &err_open);
	kvt_config_free(c);
	CHECK(st != NULL);
	if (!st)
		TEST_DONE();
	d.model = "test/metrics";
	d.tenant = "a";
	d.layout = (kvt_layout){ 4, 2, 64, KVT_DTYPE_BF16, 2, 0, 16, 64 };
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	for (int i = 0; i < 128; i++)
		tok[i] = (uint32_t)i;
	CHECK_EQ(kvt_key_chain(&ns, tok, 128, NULL, k, 2), 2);
	per = kvt_layout_payload_bytes(&ns.layout);
	buf = calloc(1, per);
	CHECK_EQ(kvt_store_set_quota(st, "a", 0, 1 << 20, 256 << 10), 0);
	CHECK_EQ(kvt_put(st, &ns, &k[0], buf, per, KVT_DUR_CACHED), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(kvt_get(st, &ns, &k[0], buf, per, NULL), 0);
	CHECK_EQ(kvt_get(st, &ns, &k[1], buf, per, NULL), KVT_ENOTFOUND);
	{
		/* A borrow is a read served too: it counts in the histogram. */
		kvt_ref *ref;
		CHECK_EQ(kvt_borrow(st, &ns, &k[0], &ref), 0);
		kvt_release(ref);
	}

	hc.st = st;
	hc.metrics = daemon_metrics;
	hc.health = daemon_health;
	hc.arg = st;
	CHECK_EQ(kvtd_http_start(&hc, &h, err, sizeof(err)), 0);
	CHECK(kvtd_http_port(h) != 0);

	m = scrape(kvtd_http_port(h), "/metrics", "GET", &code);
	CHECK_EQ(code, 200);
	check_format(m);
	CHECK_EQ(sample(m, "kvtier_tier_chunks{tier=\"dram\"}"), 1);
	CHECK_EQ(sample(m, "kvtier_tier_capacity_bytes{tier=\"dram\"}"), 2 << 20);
	CHECK_EQ(sample(m, "kvtier_tier_hits_total{tier=\"dram\"}"), 4);
	CHECK_EQ(sample(m, "kvtier_tier_misses_total{tier=\"dram\"}"), 1);
	CHECK_EQ(sample(m, "kvtier_tier_puts_total{tier=\"dram\"}"), 1);
	CHECK_EQ(sample(m, "kvtier_tier_read_bytes_total{tier=\"dram\"}"), 4 * (double)(per + 4096)); /* images, headers included */
	CHECK(sample(m, "kvtier_tier_written_bytes_total{tier=\"dram\"}") >= (double)per);
	CHECK(sample(m, "kvtier_tier_read_bandwidth_bytes_per_second{tier=\"dram\"}") > 0);
	CHECK_EQ(sample(m, "kvtier_tier_evictions_total{tier=\"dram\"}"), 0);
	CHECK_EQ(sample(m, "kvtier_tier_promotions_total{tier=\"dram\"}"), 0);
	/* The histogram: cumulative, ending at the count of reads served. */
	CHECK_EQ(sample(m, "kvtier_tier_get_latency_seconds_count{tier=\"dram\"}"), 4);
	CHECK_EQ(sample(m, "kvtier_tier_get_latency_seconds_bucket{tier=\"dram\",le=\"+Inf\"}"), 4);
	CHECK(sample(m, "kvtier_tier_get_latency_seconds_sum{tier=\"dram\"}") > 0);
	CHECK_EQ(sample(m, "kvtier_tier_get_latency_seconds_bucket{tier=\"dram\",le=\"1e-06\"}") >= 0, 1);
	CHECK_EQ(sample(m, "kvtier_tier_get_latency_seconds_bucket{tier=\"dram\",le=\"8.38861\"}"), 4);
	/* The tenant's usage against its quota, and the default tenant's. */
	CHECK_EQ(sample(m, "kvtier_tenant_chunks{tenant=\"a\",tier=\"dram\"}"), 1);
	CHECK_EQ(sample(m, "kvtier_tenant_bytes{tenant=\"a\",tier=\"dram\"}"), 9 * 16384);
	CHECK_EQ(sample(m, "kvtier_tenant_quota_bytes{tenant=\"a\",tier=\"dram\"}"), 1 << 20);
	CHECK_EQ(sample(m, "kvtier_tenant_reserve_bytes{tenant=\"a\",tier=\"dram\"}"), 256 << 10);
	CHECK_EQ(sample(m, "kvtier_tenant_chunks{tenant=\"default\",tier=\"dram\"}"), 0);
	CHECK_EQ(sample(m, "kvtierd_connections"), 3);
	free(m);

	m = scrape(kvtd_http_port(h), "/health", "GET", &code);
	CHECK_EQ(code, 200);
	CHECK(!strcmp(m, "ok\n\n") || !strcmp(m, "ok\n"));
	free(m);
	sick = 1;
	m = scrape(kvtd_http_port(h), "/health", "GET", &code);
	CHECK_EQ(code, 503);
	CHECK(strstr(m, "shutting down") != NULL);
	free(m);
	m = scrape(kvtd_http_port(h), "/secrets", "GET", &code);
	CHECK_EQ(code, 404);
	free(m);
	m = scrape(kvtd_http_port(h), "/metrics", "DELETE", &code);
	CHECK_EQ(code, 405);
	free(m);

	/* A port in use is refused with the address named. */
	{
		struct kvtd_http_conf hc2 = hc;
		kvtd_http *h2 = NULL;
		hc2.port = kvtd_http_port(h);
		CHECK_EQ(kvtd_http_start(&hc2, &h2, err, sizeof(err)), -1);
		CHECK(strstr(err, "127.0.0.1:") != NULL);
		hc2.addr = "localhost:80";
		CHECK_EQ(kvtd_http_start(&hc2, &h2, err, sizeof(err)), -1);
		CHECK(strstr(err, "expected an IPv4 address") != NULL);
	}
	kvtd_http_stop(h);
	kvt_store_close(st);
	free(buf);
	TEST_DONE();
}
