/*
 * cmd_plan.c — `kvtier plan`: simulate a trace over a grid of tier
 * capacities × eviction × admission policies (src/plan/plan.h), price each
 * configuration with the cost model (kvt_plan_*, kvtier.h), and recommend the
 * cheapest one that meets a target.  Writes a terminal table, JSON, CSV and
 * a report directory (gnuplot SVG charts + index.html).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jsonw.h"
#include "plan_cli.h"
#include "kvtier/plan.h"

#define MAX_LIST 64     /* capacities per tier list */
#define MAX_POLICIES 8
#define MAX_ADMITS 16
#define MAX_THREADS 64
#define MAX_LIMIT 1000000000000ull /* requests: 10^12 */
#define PLAN_ACCESSES_PER_THREAD 2e6 /* ~50 ms of simulation */
#define MAX_SHARED_TIERS 8

/* ---- options -------------------------------------------------------------- */

/* Capacities are blocks; so that a typo is not a capacity, at most this. */
#define MAX_CAP_BLOCKS 1000000000000000ull /* 10^15 */

/* The comma-separated elements of an option's list into out[] (pointers
 * into buf, a copy of s): at most `max`, none empty.  The count, or -1
 * after saying what is wrong with the option. */
static int split_list(const char *opt, const char *s, char *buf, size_t len, char **out,
		      int max)
{
	int n = 0;

	if (strlen(s) >= len) {
		fprintf(stderr, "kvtier plan: %s: a list of more than %zu characters\n", opt,
			len - 1);
		return -1;
	}
	snprintf(buf, len, "%s", s);
	for (char *t = buf;;) {
		char *comma = strchr(t, ',');
		if (comma)
			*comma = '\0';
		if (!*t) {
			fprintf(stderr, "kvtier plan: %s \"%s\": an empty element (expected a comma list)\n",
				opt, s);
			return -1;
		}
		if (n == max) {
			fprintf(stderr, "kvtier plan: %s \"%s\": more than %d elements\n", opt, s, max);
			return -1;
		}
		out[n++] = t;
		if (!comma)
			break;
		t = comma + 1;
	}
	return n;
}

/* One capacity: "inf" or "unbounded"; blocks ("1000", "5k", "1.5m"); or a
 * size ("64GiB", "500GB") turned into whole blocks of `block_bytes`.  0, or
 * -1 after naming the option and the accepted forms. */
static int parse_cap(const char *opt, const char *t, double block_bytes, uint64_t *out)
{
	size_t digits = strspn(t, "0123456789.");
	const char *unit = t + digits;

	if (!strcmp(t, "inf") || !strcmp(t, "unbounded")) {
		*out = KVT_PLAN_UNBOUNDED;
		return 0;
	}
	if (!*unit)
		return cli_parse_u64("plan", opt, t, 0, MAX_CAP_BLOCKS, out);
	if (!strcasecmp(unit, "k") || !strcasecmp(unit, "m")) {
		char num[64];
		double v, mul = tolower((unsigned char)*unit) == 'k' ? 1e3 : 1e6;
		if (digits >= sizeof(num) || !digits) {
			fprintf(stderr, "kvtier plan: %s \"%s\": expected blocks (1000, 5k, 1.5m), a size (64GiB) or inf\n",
				opt, t);
			return -1;
		}
		memcpy(num, t, digits);
		num[digits] = '\0';
		if (cli_parse_double("plan", opt, num, 0, (double)MAX_CAP_BLOCKS / mul, &v))
			return -1;
		v *= mul;
		if (fabs(v - round(v)) > 1e-6) {
			fprintf(stderr, "kvtier plan: %s \"%s\": not a whole number of blocks\n", opt, t);
			return -1;
		}
		*out = (uint64_t)llround(v);
		return 0;
	}
	uint64_t bytes;
	if (kvt_parse_size(t, 1, &bytes)) {
		fprintf(stderr, "kvtier plan: %s \"%s\": expected blocks (1000, 5k, 1.5m), a size "
				"(64GiB, 512MiB, 1.5GB; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB) or inf\n",
			opt, t);
		return -1;
	}
	double blocks = floor((double)bytes / block_bytes);
	if (bytes && blocks < 1) {
		fprintf(stderr, "kvtier plan: %s \"%s\": less than one block (%.0f bytes of KV)\n",
			opt, t, block_bytes);
		return -1;
	}
	if (blocks > (double)MAX_CAP_BLOCKS) {
		fprintf(stderr, "kvtier plan: %s \"%s\": more than 10^15 blocks\n", opt, t);
		return -1;
	}
	*out = (uint64_t)blocks;
	return 0;
}

/* A capacity list: at most MAX_LIST. */
static int parse_caps(const char *opt, const char *s, double block_bytes, uint64_t *out, int *n)
{
	char buf[1024], *el[MAX_LIST];
	int k = split_list(opt, s, buf, sizeof(buf), el, MAX_LIST);

	if (k < 0)
		return -1;
	for (int i = 0; i < k; i++)
		if (parse_cap(opt, el[i], block_bytes, &out[i]))
			return -1;
	*n = k;
	return 0;
}

/* none | always | seenN (N 1..15, seen = seen2) | tinylfu | prefixN (N >= 1). */
static int parse_admit(const char *s, kvt_plan_tier_conf *a)
{
	memset(a, 0, sizeof(*a));
	if (!strcmp(s, "none") || !strcmp(s, "always"))
		return 0;
	if (!strcmp(s, "tinylfu")) {
		a->admit = KVT_PLAN_ADMIT_TINYLFU;
		return 0;
	}
	if (!strncmp(s, "seen", 4)) {
		a->admit = KVT_PLAN_ADMIT_SEEN;
		a->seen_n = 2;
		return s[4] ? cli_parse_u32("plan", "--admit seenN", s + 4, 1, 15, &a->seen_n) : 0;
	}
	if (!strncmp(s, "prefix", 6)) {
		a->admit = KVT_PLAN_ADMIT_PREFIX;
		return cli_parse_u32("plan", "--admit prefixN", s + 6, 1, 1u << 20, &a->min_prefix);
	}
	fprintf(stderr, "kvtier plan: --admit \"%s\": expected none, seenN, tinylfu or prefixN\n", s);
	return -1;
}

/* ---- evaluation ----------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void *worker(void *arg)
{
	struct plan_ctx *x = arg;
	uint64_t n = x->tv.requests;
	kvt_plan_req_hit *ph = malloc((n + 1) * sizeof(*ph));
	double *ttft = malloc((n + 1) * sizeof(*ttft));
	for (;;) {
		size_t i = atomic_fetch_add(&x->next, 1);
		if (i >= x->ncfg)
			break;
		struct cfg_out *o = &x->cfg[i];
		if (!ph || !ttft) {
			o->rc = KVT_ENOMEM;
		} else {
			/* --repeat: the fastest of several runs, to time the
			 * simulator rather than a noisy neighbour. */
			for (unsigned k = 1; k < (x->repeat ? x->repeat : 1); k++) {
				double t0 = cli_now();
				o->rc = kvt_plan_simulate(x->tr, &o->conf, &o->r, ph);
				double dt = cli_now() - t0;
				if (!o->sim_s || dt < o->sim_s)
					o->sim_s = dt;
			}
			if (o->rc)
				;
			else if (x->fleet)
				o->rc = plan_fleet_search(x, o, ph, ttft);
			else
				o->rc = plan_fleet_eval(x, o, ph, ttft, NULL, NULL, NULL, 0);
		}
		atomic_fetch_add(&x->done, 1);
	}
	free(ph);
	free(ttft);
	return NULL;
}

/* ---- output --------------------------------------------------------------- */

static const char *cap_str(uint64_t cap, char *buf, size_t n)
{
	if (cap == KVT_PLAN_UNBOUNDED)
		snprintf(buf, n, "inf");
	else
		snprintf(buf, n, "%llu", (unsigned long long)cap);
	return buf;
}

static const char *route_str(int r)
{
	return r == KVT_PLAN_ROUTE_AFFINITY ? "affinity" : r == KVT_PLAN_ROUTE_BALANCED ? "balanced" : "rr";
}

static const char *pol_name(int k)
{
	return k == KVT_PLAN_S3FIFO ? "s3fifo" : "lru";
}

static void print_table(const struct plan_ctx *x, FILE *f)
{
	fprintf(f, "%-6s %-8s %-8s %-4s %2s %9s %9s %9s %5s %7s %7s %9s %9s %9s %8s %8s %5s %10s %10s\n",
		"policy", "admit", "route", "sh", "tp", "dram", "nvme", "shared", x->fleet ? "accel" : "nodes",
		"hit%blk", "hit%tok", "hits_t0", "hits_t1", "hits_s", "ttft_p50", "ttft_p90", "util%",
		"gpuh/Mreq", x->fleet ? "fleet$/mo" : "usd/month");
	for (size_t i = 0; i < x->ncfg; i++) {
		const struct cfg_out *o = &x->cfg[i];
		char a[24], b[24], c[24];
		if (o->rc) {
			fprintf(f, "config %zu failed: %s\n", i, kvt_strerror(o->rc));
			continue;
		}
		char acc[16];
		if (x->fleet && !o->met)
			snprintf(acc, sizeof(acc), ">%u", x->max_nodes * x->gpus_per_node * o->tp);
		else
			snprintf(acc, sizeof(acc), "%u", x->fleet ? plan_accels(x, o) : o->conf.nodes);
		fprintf(f, "%-6s %-8s %-8s %-4s %2u %9s %9s %9s %5s %7.2f %7.2f %9llu %9llu %9llu %8.1f %8.1f %5.1f %10.1f %10.0f\n",
			pol_name(o->conf.policy), o->admit_name, route_str(o->conf.route),
			o->conf.tier[2].capacity ? o->tc[KVT_PLAN_TS]->name : "-", o->tp,
			cap_str(o->conf.tier[0].capacity, a, sizeof(a)),
			cap_str(o->conf.tier[1].capacity, b, sizeof(b)),
			cap_str(o->conf.tier[2].capacity, c, sizeof(c)), acc,
			100.0 * (double)o->r.hit_blocks / (double)(o->r.blocks ? o->r.blocks : 1),
			100.0 * (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1),
			(unsigned long long)o->r.hit_tier[0], (unsigned long long)o->r.hit_tier[1],
			(unsigned long long)o->r.hit_tier[2], o->tm.ttft_p50 * 1e3, o->tm.ttft_p90 * 1e3,
			100 * o->tm.utilisation, o->gpu_h_saved_per_m,
			x->fleet ? o->usd_fleet_month : o->usd_month);
	}
}

static void write_csv(const struct plan_ctx *x, FILE *f)
{
	fprintf(f, "policy,admit,dram_blocks,nvme_blocks,shared_blocks,nodes,route,blocks,hit_blocks,"
		   "hit_t0,hit_t1,hit_shared,tokens,hit_tokens,inserts_t0,inserts_t1,inserts_shared,"
		   "ttft_mean_ms,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,gpu_hours_saved_per_mreq,"
		   "usd_storage_month,usd_month,usd_net_month,sim_seconds,shared_tier,accelerators,"
		   "queue_p90_ms,utilisation,usd_fleet_month,target_met,tp,access_hits_t0,"
		   "access_hits_t1,access_hits_shared\n");
	for (size_t i = 0; i < x->ncfg; i++) {
		const struct cfg_out *o = &x->cfg[i];
		char a[24], b[24], c[24];
		if (o->rc)
			continue;
		fprintf(f, "%s,%s,%s,%s,%s,%u,%s,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,"
			   "%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.6f,%s,%u,%.3f,%.4f,%.2f,%s,%u,"
			   "%llu,%llu,%llu\n",
			pol_name(o->conf.policy), o->admit_name,
			cap_str(o->conf.tier[0].capacity, a, sizeof(a)),
			cap_str(o->conf.tier[1].capacity, b, sizeof(b)),
			cap_str(o->conf.tier[2].capacity, c, sizeof(c)), o->conf.nodes,
			route_str(o->conf.route),
			(unsigned long long)o->r.blocks, (unsigned long long)o->r.hit_blocks,
			(unsigned long long)o->r.hit_tier[0], (unsigned long long)o->r.hit_tier[1],
			(unsigned long long)o->r.hit_tier[2], (unsigned long long)o->r.tokens,
			(unsigned long long)o->r.hit_tokens, (unsigned long long)o->r.inserts[0],
			(unsigned long long)o->r.inserts[1], (unsigned long long)o->r.inserts[2],
			o->tm.ttft_mean * 1e3, o->tm.ttft_p50 * 1e3, o->tm.ttft_p90 * 1e3,
			o->tm.ttft_p99 * 1e3, o->gpu_h_saved_per_m, o->usd_storage_month, o->usd_month,
			o->usd_net_month, o->sim_s, o->conf.tier[2].capacity ? o->tc[KVT_PLAN_TS]->name : "",
			plan_accels(x, o), o->tm.wait_p90 * 1e3, o->tm.utilisation,
			o->usd_fleet_month, !x->fleet ? "" : o->met ? "yes" : "no", o->tp,
			(unsigned long long)o->r.access_hits[0], (unsigned long long)o->r.access_hits[1],
			(unsigned long long)o->r.access_hits[2]);
	}
}

/* ---- JSON (jansson: every string escaped, whatever a path holds) ----- */

static json_t *jtriple(const uint64_t v[KVT_PLAN_NT])
{
	return json_pack("[ooo]", cli_json_uint(v[0]), cli_json_uint(v[1]), cli_json_uint(v[2]));
}

static json_t *json_cfg(const struct plan_ctx *x, const struct cfg_out *o)
{
	char a[24], b[24], c[24];
	json_t *cfg = json_pack("{s:s,s:o,s:s,s:s,s:s,s:I,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
			 "s:{s:o,s:o,s:o,s:o},s:[ooo],s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
		"policy", pol_name(o->conf.policy), "admit", cli_json_str(o->admit_name),
		"dram_blocks", cap_str(o->conf.tier[0].capacity, a, sizeof(a)),
		"nvme_blocks", cap_str(o->conf.tier[1].capacity, b, sizeof(b)),
		"shared_blocks", cap_str(o->conf.tier[2].capacity, c, sizeof(c)),
		"nodes", (json_int_t)o->conf.nodes,
		"route", route_str(o->conf.route),
		"blocks", cli_json_uint(o->r.blocks), "hit_blocks", cli_json_uint(o->r.hit_blocks),
		"hit_tier", jtriple(o->r.hit_tier), "tokens", cli_json_uint(o->r.tokens),
		"hit_tokens", cli_json_uint(o->r.hit_tokens), "inserts", jtriple(o->r.inserts),
		"rejects", jtriple(o->r.rejects), "demotions", cli_json_uint(o->r.demotions),
		"promotions", cli_json_uint(o->r.promotions),
		"ttft_ms", "mean", cli_json_fixed(o->tm.ttft_mean * 1e3, 3), "p50", cli_json_fixed(o->tm.ttft_p50 * 1e3, 3),
		"p90", cli_json_fixed(o->tm.ttft_p90 * 1e3, 3), "p99", cli_json_fixed(o->tm.ttft_p99 * 1e3, 3),
		"load_gib", cli_json_fixed(o->load_bytes[0] / 1073741824.0, 3),
		cli_json_fixed(o->load_bytes[1] / 1073741824.0, 3), cli_json_fixed(o->load_bytes[2] / 1073741824.0, 3),
		"gpu_hours_saved_per_mreq", cli_json_fixed(o->gpu_h_saved_per_m, 4),
		"usd_storage_month", cli_json_fixed(o->usd_storage_month, 2),
		"usd_per_mreq", cli_json_fixed(o->usd_req_per_m, 4), "usd_month", cli_json_fixed(o->usd_month, 2),
		"usd_net_month", cli_json_fixed(o->usd_net_month, 2), "sim_seconds", cli_json_fixed(o->sim_s, 6),
		"shared_tier", cli_json_str(o->tc[KVT_PLAN_TS]->name),
		"ttft_alone_p90_ms", cli_json_fixed(o->ttft_alone_p90 * 1e3, 3),
		"target_met", x->fleet ? json_boolean(o->met) : json_null(),
		"timing", plan_timing_json(x, o));

	json_object_set_new(cfg, "access_hits", jtriple(o->r.access_hits));
	if (o->conf.policy == KVT_PLAN_S3FIFO)
		json_object_set_new(cfg, "s3fifo",
				    json_pack("{s:I,s:I,s:b}", "small_pct",
					      (json_int_t)(o->conf.s3_small_pct ? o->conf.s3_small_pct : 10),
					      "promote",
					      (json_int_t)(o->conf.s3_promote ? o->conf.s3_promote : 1),
					      "fill_main", o->conf.s3_fill_main));
	return cfg;
}

/* Which catalog entries the plan used and where their figures come from:
 * built-in planning defaults or a catalog file (a benchmark's measurements). */
static int sources(const struct plan_ctx *x, const char *kind[], const char *name[], int max)
{
	int n = 0;
	kind[n] = "model", name[n++] = x->model->name;
	kind[n] = "gpu", name[n++] = x->gpu->name;
	kind[n] = "tier", name[n++] = x->tc[KVT_PLAN_T0]->name;
	kind[n] = "tier", name[n++] = x->tc[KVT_PLAN_T1]->name;
	for (int i = 0; i < x->nshared && n < max - 2; i++)
		kind[n] = "tier", name[n++] = x->shared[i]->name;
	kind[n] = "link", name[n++] = x->pcie->name;
	kind[n] = "link", name[n++] = x->nic->name;
	return n;
}

static json_t *sources_json(const struct plan_ctx *x)
{
	const char *kind[16], *name[16];
	int n = sources(x, kind, name, 16);
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		json_array_append_new(a, json_pack("{s:s,s:o,s:o,s:b}", "kind", kind[i], "name",
						   cli_json_str(name[i]), "source",
						   cli_json_str(kvt_plan_catalog_source(kind[i], name[i])),
						   "measured", strcmp(kvt_plan_catalog_source(kind[i], name[i]), "built-in") != 0
						   ? 1 : 0));
	return a;
}

static void sources_print(const struct plan_ctx *x, FILE *f)
{
	const char *kind[16], *name[16];
	int n = sources(x, kind, name, 16);
	fprintf(f, "figures (measured: from a catalog file; built-in: planning defaults):");
	for (int i = 0; i < n; i++) {
		const char *src = kvt_plan_catalog_source(kind[i], name[i]);
		fprintf(f, "%s %s %s %s", i ? "," : "", kind[i], name[i],
			strcmp(src, "built-in") ? src : "built-in");
	}
	fputc('\n', f);
}

/* The whole result as one JSON document and a newline (caller frees), or
 * NULL when out of memory. */
static char *plan_json(const struct plan_ctx *x, const char *trace, long best, const char *why,
		       double wall, double accesses, double sim_cpu, unsigned threads)
{
	json_t *cfgs = json_array(), *rec = json_null();
	for (size_t i = 0; cfgs && i < x->ncfg; i++)
		if (!x->cfg[i].rc)
			json_array_append_new(cfgs, json_cfg(x, &x->cfg[i]));
	if (best >= 0)
		rec = json_pack("{s:I,s:o,s:o}", "index", (json_int_t)best, "reason", cli_json_str(why), "config",
				json_cfg(x, &x->cfg[best]));
	json_t *doc = json_pack(
		"{s:{s:o,s:s,s:o,s:o,s:o,s:I,s:o},s:o,s:o,s:[ooo],s:s,s:s,s:{s:o},s:o,s:o,"
		"s:{s:I,s:o,s:o,s:o,s:o},s:o,s:o,s:o}",
		"trace", "path", cli_json_str(trace), "format", kvt_plan_format_name(x->tv.format),
		"requests", cli_json_uint(x->tv.requests), "blocks", cli_json_uint(x->tv.blocks),
		"distinct_blocks", cli_json_uint(x->tv.distinct_blocks),
		"block_tokens", (json_int_t)x->tv.block_tokens,
		"block_bytes", json_integer((json_int_t)llround(x->block_bytes)),
		"model", cli_json_str(x->model->name), "gpu", cli_json_str(x->gpu->name),
		"tiers", cli_json_str(x->tc[0]->name), cli_json_str(x->tc[1]->name), cli_json_str(x->tc[2]->name),
		"local_tiers", "exclusive", "shared_tier", "inclusive",
		"no_cache", "gpu_seconds", cli_json_fixed(x->base_gpu_s, 3),
		"configs", cfgs, "recommendation", rec,
		"speed", "threads", (json_int_t)threads, "wall_seconds", cli_json_fixed(wall, 6),
		"sim_cpu_seconds", cli_json_fixed(sim_cpu, 6),
		"block_accesses", json_integer((json_int_t)llround(accesses)),
		"accesses_per_second_per_thread",
		json_integer((json_int_t)llround(sim_cpu > 0 ? accesses / sim_cpu : 0)),
		"fleet", plan_fleet_json(x, best), "figures", sources_json(x),
		"rate", cli_json_fixed(x->rate, 4));
	return cli_json_text(doc);
}

/* Run gnuplot on `script` (no shell).  0 on success. */
static int run_gnuplot(const char *script)
{
	pid_t p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		_exit(127);
	}
	int st;
	if (waitpid(p, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t n)
{
	snprintf(path, n, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "kvtier plan: %s: %s\n", path, strerror(errno));
	return f;
}

/* The report's hit-rate data: one series per (policy, admit, nvme,
 * shared, nodes), blank-line separated gnuplot data blocks, titled in
 * titles[].  The number of series, or -1. */
static int report_hitrate(const struct plan_ctx *x, const char *dir, char titles[64][160])
{
	char path[4200];
	FILE *f = open_in(dir, "hitrate.dat", path, sizeof(path));

	if (!f)
		return -1;
	char *done = calloc(x->ncfg, 1);
	int nseries = 0;

	for (size_t i = 0; done && i < x->ncfg; i++) {
		if (done[i] || x->cfg[i].rc)
			continue;
		const struct cfg_out *a = &x->cfg[i];
		char b1[24], b2[24];
		if (nseries < 64)
			snprintf(titles[nseries], sizeof(titles[0]), "%s %s nvme=%s %.40s=%s %s%s",
				 pol_name(a->conf.policy), a->admit_name,
				 cap_str(a->conf.tier[1].capacity, b1, sizeof(b1)),
				 a->conf.tier[2].capacity ? a->tc[KVT_PLAN_TS]->name : "shared",
				 cap_str(a->conf.tier[2].capacity, b2, sizeof(b2)),
				 route_str(a->conf.route),
				 x->fleet ? "" : "");
		fprintf(f, "# %s\n", titles[nseries < 64 ? nseries : 63]);
		for (size_t j = i; j < x->ncfg; j++) {
			const struct cfg_out *o = &x->cfg[j];
			if (o->rc || o->conf.policy != a->conf.policy || strcmp(o->admit_name, a->admit_name) ||
			    o->conf.tier[1].capacity != a->conf.tier[1].capacity ||
			    o->conf.tier[2].capacity != a->conf.tier[2].capacity ||
			    o->tc[KVT_PLAN_TS] != a->tc[KVT_PLAN_TS] || o->conf.route != a->conf.route ||
			    (!x->fleet && o->conf.nodes != a->conf.nodes))
				continue;
			done[j] = 1;
			fprintf(f, "%.6f %.4f %.4f\n",
				plan_cap_blocks(x, o->conf.tier[0].capacity) * x->block_bytes / 1073741824.0,
				100.0 * (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1),
				100.0 * (double)o->r.hit_blocks / (double)(o->r.blocks ? o->r.blocks : 1));
		}
		fprintf(f, "\n\n");
		nseries++;
	}
	free(done);
	fclose(f);
	return nseries;

}

/* The report's TTFT distribution, with queueing, without the cache (at
 * the fleet accelerators alone need, or the recommended one's) and with
 * the recommended configuration.  0, or 1. */
static int report_ttft(const struct plan_ctx *x, const char *dir, long best)
{
	char path[4200];
	uint64_t n = x->tv.requests;
	double *base = malloc((n + 1) * sizeof(double)), *with = malloc((n + 1) * sizeof(double));
	double *scratch = malloc((n + 1) * sizeof(double));
	kvt_plan_req_hit *ph = calloc(n + 1, sizeof(*ph));
	if (!base || !with || !ph || !scratch) {
		free(base); free(with); free(ph); free(scratch);
		return 1;
	}
	struct cfg_out rec = best >= 0 ? x->cfg[best] : x->cfg[0];
	struct cfg_out nocache = x->base;
	if (!x->fleet)
		nocache.conf.nodes = rec.conf.nodes;
	if (plan_fleet_eval(x, &nocache, ph, scratch, base, NULL, NULL, 0) ||
	    plan_fleet_eval(x, &rec, ph, scratch, with, NULL, NULL, 0)) {
		free(base); free(with); free(ph); free(scratch);
		return 1;
	}
	free(scratch);
	qsort(base, n, sizeof(double), cmp_double);
	qsort(with, n, sizeof(double), cmp_double);
	FILE *f = open_in(dir, "ttft.dat", path, sizeof(path));
	if (!f) {
		free(base); free(with); free(ph);
		return 1;
	}
	uint64_t step = n > 2000 ? n / 2000 : 1;
	fprintf(f, "# no cache\n");
	for (uint64_t i = 0; i < n; i += step)
		fprintf(f, "%.4f %.5f\n", base[i] * 1e3, (double)(i + 1) / (double)n);
	fprintf(f, "\n\n# with the recommended configuration\n");
	for (uint64_t i = 0; i < n; i += step)
		fprintf(f, "%.4f %.5f\n", with[i] * 1e3, (double)(i + 1) / (double)n);
	fclose(f);
	free(base); free(with); free(ph);
	return 0;
}

/* The gnuplot commands of every chart, drawn: 1 drawn, 0 not (gnuplot is
 * absent or failed), -1 the file could not be written.  *frag gets the
 * <img> lines of the pictures in time (plan_fleet_report). */
static int report_charts(const struct plan_ctx *x, const char *dir, char titles[64][160],
			 int nseries, long best, char **frag)
{
	char path[4200];
	FILE *f = open_in(dir, "charts.gp", path, sizeof(path));

	if (!f)
		return -1;
	fprintf(f, "set terminal svg size 900,560 dynamic enhanced font 'sans,12' background '#ffffff'\n"
		   "set datafile commentschars '#'\n"
		   "set output '%s/hitrate.svg'\n"
		   "set title 'Token hit rate against DRAM (T0) capacity per node'\n"
		   "set xlabel 'T0 capacity per node (GiB)'\nset ylabel 'token hit rate (%%)'\n"
		   "set logscale x\nset key bottom right\nset grid\n"
		   "plot ", dir);
	for (int s = 0; s < nseries && s < 64; s++)
		fprintf(f, "%s'%s/hitrate.dat' index %d using 1:2 with linespoints title '%s'",
			s ? ", " : "", dir, s, titles[s]);
	if (!nseries)
		fprintf(f, "0 notitle");
	fprintf(f, "\nunset logscale x\nset output '%s/ttft.svg'\n"
		   "set title 'TTFT distribution (%s on %s)'\n"
		   "set xlabel 'TTFT (ms)'\nset ylabel 'fraction of requests'\n"
		   "set logscale x\nset key bottom right\n"
		   "plot '%s/ttft.dat' index 0 using 1:2 with lines lw 2 title 'no cache', "
		   "'%s/ttft.dat' index 1 using 1:2 with lines lw 2 title 'with cache (recommended)'\n",
		dir, x->model->name, x->gpu->name, dir, dir);
	/* The pictures in time (frontier, bandwidth, queueing): their data
	 * and commands now, their <img> lines once gnuplot has drawn them. */
	size_t fraglen = 0;
	FILE *mem = open_memstream(frag, &fraglen);
	if (mem) {
		plan_fleet_report(x, best, dir, f, mem);
		fclose(mem);
	}
	fclose(f);
	if (run_gnuplot(path) == 0)
		return 1;
	fprintf(stderr, "kvtier plan: gnuplot failed or is absent; the report has no charts "
			"(apt-get install gnuplot-nox)\n");
	return 0;
}

/* index.html: the recommendation, the fleet, the charts, the grid. */
static int report_html(const struct plan_ctx *x, const char *dir, const char *trace, long best,
		       const char *why, int have_charts, const char *frag)
{
	char path[4200];
	FILE *f = open_in(dir, "index.html", path, sizeof(path));

	if (!f)
		return 1;
	fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
		   "<title>kvtier plan (loading)</title>\n"
		   "<style>body{font-family:sans-serif;margin:2em;max-width:1000px}"
		   "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
		   "img{max-width:100%%;border:1px solid #eee}</style></head><body>\n"
		   "<h1>kvtier capacity plan</h1>\n<p>Trace <code>%s</code> (%s, %llu requests, %llu block references, "
		   "%u tokens per block). Model %s on %s. Local tiers (DRAM over NVMe) are exclusive; the shared tier is "
		   "inclusive (write-through).</p>\n",
		   trace, kvt_plan_format_name(x->tv.format), (unsigned long long)x->tv.requests,
		   (unsigned long long)x->tv.blocks, x->tv.block_tokens, x->model->name, x->gpu->name);
	if (best >= 0) {
		const struct cfg_out *o = &x->cfg[best];
		char a[24], b[24], c[24];
		fprintf(f, "<p id=\"recommendation\"><b>Recommendation</b> (%s): %s/%s, DRAM %s, NVMe %s, shared %s blocks per the grid; "
			   "token hit rate %.1f%%, TTFT p90 %.1f ms, %.1f GPU-hours saved per million requests, $%.0f per month.</p>\n",
			why, pol_name(o->conf.policy), o->admit_name,
			cap_str(o->conf.tier[0].capacity, a, sizeof(a)),
			cap_str(o->conf.tier[1].capacity, b, sizeof(b)),
			cap_str(o->conf.tier[2].capacity, c, sizeof(c)),
			100.0 * (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1),
			o->tm.ttft_p90 * 1e3, o->gpu_h_saved_per_m, o->usd_month);
	} else {
		fprintf(f, "<p id=\"recommendation\">No configuration of the grid meets the target.</p>\n");
	}
	/* The fleet in time and where the figures come from, as the
	 * terminal shows them (names from a catalog are escaped). */
	char *txt = NULL;
	size_t txtlen = 0;
	FILE *tm = open_memstream(&txt, &txtlen);
	if (tm) {
		plan_fleet_print(x, best, tm);
		fputc('\n', tm);
		sources_print(x, tm);
		fclose(tm);
		fputs("<pre id=\"fleet\">", f);
		for (const char *p = txt; p && *p; p++)
			fputs(*p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '&' ? "&amp;" : (char[2]){ *p, 0 }, f);
		fputs("</pre>\n", f);
		free(txt);
	}
	if (have_charts)
		fprintf(f, "<h2>Hit rate against capacity</h2>\n<p><img class=\"chart\" src=\"hitrate.svg\" alt=\"hit rate against capacity\"></p>\n"
			   "<h2>TTFT with and without the cache</h2>\n<p><img class=\"chart\" src=\"ttft.svg\" alt=\"TTFT distribution\"></p>\n"
			   "%s", frag ? frag : "");
	else
		fprintf(f, "<p>Charts were not drawn: gnuplot is absent.</p>\n");
	fprintf(f, "<p>Data: <a href=\"plan.json\">plan.json</a>, <a href=\"plan.csv\">plan.csv</a>.</p>\n"
		   "<h2>Grid</h2>\n<table><tr><th>policy</th><th>admit</th><th>DRAM</th><th>NVMe</th><th>shared</th>"
		   "<th>%s</th><th>hit %% blocks</th><th>hit %% tokens</th><th>TTFT p90 ms</th><th>GPU-h/M req</th><th>$/month</th></tr>\n",
		   x->fleet ? "accelerators" : "nodes");
	for (size_t i = 0; i < x->ncfg; i++) {
		const struct cfg_out *o = &x->cfg[i];
		char a[24], b[24], c[24];
		if (o->rc)
			continue;
		fprintf(f, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%u</td><td>%.2f</td><td>%.2f</td>"
			   "<td>%.1f</td><td>%.1f</td><td>%.0f</td></tr>\n",
			pol_name(o->conf.policy), o->admit_name,
			cap_str(o->conf.tier[0].capacity, a, sizeof(a)),
			cap_str(o->conf.tier[1].capacity, b, sizeof(b)),
			cap_str(o->conf.tier[2].capacity, c, sizeof(c)),
			x->fleet ? plan_accels(x, o) : o->conf.nodes,
			100.0 * (double)o->r.hit_blocks / (double)(o->r.blocks ? o->r.blocks : 1),
			100.0 * (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1),
			o->tm.ttft_p90 * 1e3, o->gpu_h_saved_per_m,
			x->fleet ? o->usd_fleet_month : o->usd_month);
	}
	/* The page reports in its title whether every chart decoded: a
	 * headless browser test reads it (tests/plan_browser.py). */
	fprintf(f, "</table>\n<script>\n(function(){\n"
		   " var imgs = Array.prototype.slice.call(document.querySelectorAll('img.chart'));\n"
		   " var left = imgs.length, bad = 0;\n"
		   " function one(ok){ if(!ok) bad++; if(--left <= 0) document.title = bad ? 'charts-failed' : 'charts-ok'; }\n"
		   " if(!imgs.length){ document.title = 'charts-none'; return; }\n"
		   " imgs.forEach(function(im){\n"
		   "  if(im.complete) one(im.naturalWidth > 0);\n"
		   "  else { im.addEventListener('load', function(){ one(im.naturalWidth > 0); });\n"
		   "         im.addEventListener('error', function(){ one(false); }); }\n"
		   " });\n})();\n</script>\n</body></html>\n");
	fclose(f);
	return 0;
}

/* --report DIR: plan.csv, plan.json, the charts' data and pictures, and
 * index.html. */
static int write_report(struct plan_ctx *x, const char *dir, const char *trace, long best,
			const char *why, const char *json_tail)
{
	char path[4200], titles[64][160], *frag = NULL;
	int nseries, charts, rc;

	if (mkdir(dir, 0777) && errno != EEXIST) {
		fprintf(stderr, "kvtier plan: mkdir %s: %s\n", dir, strerror(errno));
		return 1;
	}
	FILE *f = open_in(dir, "plan.csv", path, sizeof(path));
	if (!f)
		return 1;
	write_csv(x, f);
	fclose(f);
	f = open_in(dir, "plan.json", path, sizeof(path));
	if (!f)
		return 1;
	fputs(json_tail, f);
	fclose(f);
	if ((nseries = report_hitrate(x, dir, titles)) < 0 || report_ttft(x, dir, best))
		return 1;
	if ((charts = report_charts(x, dir, titles, nseries, best, &frag)) < 0) {
		free(frag);
		return 1;
	}
	rc = report_html(x, dir, trace, best, why, charts, frag);
	free(frag);
	return rc;
}

/* ---- main ----------------------------------------------------------------- */

static const char plan_help[] =
	"usage: kvtier plan [options] TRACE\n\n"
	"Simulate TRACE (no data) over a grid of tier capacities x eviction x admission\n"
	"policies with the store's own policy modules, price each configuration and\n"
	"recommend the cheapest that meets a target.  Local tiers (DRAM over NVMe) are\n"
	"exclusive; a shared tier (file system or S3) is inclusive, shared by all nodes.\n\n"
	"  --format F          auto|mooncake|bailian|tokens|vllm (default auto; vllm: KV events,\n"
	"                      BlockStored, exported as JSON lines; docs/PLANNING.md)\n"
	"  --block-tokens N    tokens per block, 1..1048576 (default: the format's: 512, 16, 256)\n"
	"  --limit N           only the first N requests (1..10^12)\n"
	"  --dram LIST         T0 capacities per node: blocks (1000, 5k), sizes (64GiB) or inf\n"
	"                      (default 1000,2000,5000,10000,20000,50000,inf; fleet: 256GiB,1TiB)\n"
	"  --nvme LIST         T1 capacities per node, 0 = none (default 0; fleet: 0,4TiB)\n"
	"  --shared LIST       shared tier capacities, 0 = none (default 0; fleet: 0,16TiB)\n"
	"  --shared-tier LIST  fs, s3 or a catalog tier: price and speed (default fs; fleet: fs,s3)\n"
	"  --policy LIST       lru,s3fifo (default both; fleet: lru; at most 8)\n"
	"  --s3fifo-small PCT  S3-FIFO's small queue, percent of each tier, 1..90 (default 10)\n"
	"  --s3fifo-promote N  hits in the small queue that move a block to the main one,\n"
	"                      1..3 (default 1; libCacheSim's move_to_main_threshold: 2)\n"
	"  --s3fifo-fill-main  S3-FIFO as libCacheSim runs it: until the first eviction, new\n"
	"                      blocks fill the main queue once the small one is full\n"
	"  --admit LIST        none,seenN (N 1..15),tinylfu,prefixN for the lower tiers\n"
	"                      (default none; at most 16)\n"
	"  --nodes N           fleet size, 1..1024 (default 1; a fleet search sets it)\n"
	"  --route LIST        rr,affinity,balanced (default rr; fleet: rr,balanced); balanced:\n"
	"                      affinity among nodes under 1.25x the mean recent work\n"
	"  --gpus-per-node N   replicas serving each node's queue, 1..64 (default 1)\n"
	"  --tp LIST           accelerators a replica, tensor parallel, 1..64 (default 1;\n"
	"                      fleet: 1,2,4): prefill / tp (ideal scaling)\n"
	"  --rate X            traffic: arrivals at the trace's times / X, 0.001..1000 (default 1)\n"
	"  --model NAME        (default Llama-3.1-8B)   --gpu NAME (default H100)\n"
	"  --catalog FILE      more or measured models, GPUs, tiers, links (kvtier-bench llama\n"
	"                      --catalog writes one; see docs/PLANNING.md)\n"
	"  --list              print the models, GPUs, tiers and links known\n"
	"  --target-hit F      token hit rate to reach (0..1)\n"
	"  --target-ttft-ms MS p90 TTFT with queueing to meet (0.001..1e9): searches, per\n"
	"                      configuration and with no tiers, the fewest nodes that meet it\n"
	"                      (the fleet defaults above), and prints the cheapest fleet\n"
	"  --max-nodes N       the largest fleet searched, 1..1024 (default 32)\n"
	"  --threads N         worker threads, 1..64 (default: one per 2 M block accesses\n"
	"                      of the grid, up to the online CPUs)\n"
	"  --repeat N          time each configuration as the fastest of N runs (1..1000)\n"
	"  --json | --csv      machine output on stdout instead of the table\n"
	"  --report DIR        write plan.json, plan.csv, SVG charts (gnuplot) and index.html\n"
	"  --quiet             no progress line\n\n"
	"TRACE (\"-\" = stdin) is read line by line; a line is at most 16 MiB, and a\n"
	"trace with no request or no whole block is refused (docs/PLANNING.md).\n";

static void plan_usage(FILE *f)
{
	fputs(plan_help, f);
}

enum {
	O_FORMAT = 0x100, O_BLOCK_TOKENS, O_LIMIT, O_DRAM, O_NVME, O_SHARED, O_SHARED_TIER,
	O_POLICY, O_ADMIT, O_NODES, O_ROUTE, O_MODEL, O_GPU, O_CATALOG, O_TARGET_HIT,
	O_TARGET_TTFT, O_THREADS, O_REPEAT, O_REPORT, O_JSON, O_CSV, O_QUIET, O_LIST,
	O_RATE, O_GPUS_PER_NODE, O_MAX_NODES, O_TP, O_S3_SMALL, O_S3_PROMOTE, O_S3_FILL,
};

/* What the options say; lists are checked once the trace is read (a size
 * needs the block's bytes), the rest as they come. */
struct plan_args {
	const char *dram, *nvme, *shared, *shared_tier, *policy, *admit, *model, *gpu, *report,
		*catalog, *route;
	int fmt, json, csv, quiet, list;
	uint32_t nodes, threads, repeat, block_tokens, gpus_per_node, max_nodes;
	uint32_t s3_small, s3_promote;
	int s3_fill;
	const char *tp;
	uint64_t limit;
	double target_hit, target_ttft, rate;
};

static int plan_opt(void *arg, int id, const char *v)
{
	struct plan_args *p = arg;

	switch (id) {
	case O_FORMAT:
		p->fmt = kvt_plan_format_parse(v);
		if (p->fmt < 0) {
			fprintf(stderr, "kvtier plan: unknown format %s\n", v);
			return 2;
		}
		return -1;
	case O_BLOCK_TOKENS:
		return cli_parse_u32("plan", "--block-tokens", v, 1, 1u << 20, &p->block_tokens) ? 2 : -1;
	case O_LIMIT:
		return cli_parse_u64("plan", "--limit", v, 1, MAX_LIMIT, &p->limit) ? 2 : -1;
	case O_NODES:
		return cli_parse_u32("plan", "--nodes", v, 1, KVT_PLAN_MAX_NODES, &p->nodes) ? 2 : -1;
	case O_ROUTE: p->route = v; return -1;
	case O_RATE:
		return cli_parse_double("plan", "--rate", v, 1e-3, 1e3, &p->rate) ? 2 : -1;
	case O_GPUS_PER_NODE:
		return cli_parse_u32("plan", "--gpus-per-node", v, 1, 64, &p->gpus_per_node) ? 2 : -1;
	case O_TP: p->tp = v; return -1;
	case O_S3_SMALL:
		return cli_parse_u32("plan", "--s3fifo-small", v, 1, 90, &p->s3_small) ? 2 : -1;
	case O_S3_PROMOTE:
		return cli_parse_u32("plan", "--s3fifo-promote", v, 1, 3, &p->s3_promote) ? 2 : -1;
	case O_S3_FILL: p->s3_fill = 1; return -1;
	case O_MAX_NODES:
		return cli_parse_u32("plan", "--max-nodes", v, 1, KVT_PLAN_MAX_NODES, &p->max_nodes) ? 2
												     : -1;
	case O_TARGET_HIT:
		return cli_parse_double("plan", "--target-hit", v, 0, 1, &p->target_hit) ? 2 : -1;
	case O_TARGET_TTFT:
		return cli_parse_double("plan", "--target-ttft-ms", v, 1e-3, 1e9, &p->target_ttft) ? 2
											       : -1;
	case O_THREADS:
		return cli_parse_u32("plan", "--threads", v, 1, MAX_THREADS, &p->threads) ? 2 : -1;
	case O_REPEAT:
		return cli_parse_u32("plan", "--repeat", v, 1, 1000, &p->repeat) ? 2 : -1;
	case O_DRAM: p->dram = v; return -1;
	case O_NVME: p->nvme = v; return -1;
	case O_SHARED: p->shared = v; return -1;
	case O_SHARED_TIER: p->shared_tier = v; return -1;
	case O_POLICY: p->policy = v; return -1;
	case O_ADMIT: p->admit = v; return -1;
	case O_MODEL: p->model = v; return -1;
	case O_GPU: p->gpu = v; return -1;
	case O_CATALOG: p->catalog = v; return -1;
	case O_REPORT: p->report = v; return -1;
	case O_JSON: p->json = 1; return -1;
	case O_CSV: p->csv = 1; return -1;
	case O_QUIET: p->quiet = 1; return -1;
	case O_LIST: p->list = 1; return -1;
	}
	return 2;
}

/* A fleet too small for the trace's rate: every configuration's TTFT is
 * then mostly its queue (millions of ms at default settings), which says
 * nothing about the tiers.  Said on stderr, with the flags that size it. */
static void warn_overloaded(const struct plan_ctx *x, const struct cfg_out *o, unsigned nodes)
{
	if (o->tm.utilisation < 0.98 || o->tm.wait_p90 < 10 * x->base_ttft_p90)
		return;
	fprintf(stderr,
		"kvtier plan: warning: %u node(s) of %u accelerator(s) are overloaded by this trace at "
		"%gx its rate: utilisation %.0f%%, TTFT p90 %.0f ms of which %.0f ms waiting in the "
		"queue, against %.0f ms for a request alone.  The TTFTs are the queue's, not the "
		"tiers'.  Size the fleet with --target-ttft-ms MS (it searches the fewest nodes "
		"that meet it), or set --nodes N, --gpus-per-node N or --tp N; or replay slower "
		"traffic with --rate X (arrivals at the trace's times / X)\n",
		nodes, x->gpus_per_node, x->rate, 100 * o->tm.utilisation, o->tm.ttft_p90 * 1e3,
		o->tm.wait_p90 * 1e3, x->base_ttft_p90 * 1e3);
}

/* The grid of configurations the options ask for, parsed and checked
 * before the trace is read (a typo is reported at once, not after a long
 * trace); capacities are in blocks once the trace says a block's bytes. */
struct plan_grid {
	uint64_t c0[MAX_LIST], c1[MAX_LIST], cs[MAX_LIST];
	int n0, n1, ns;
	char pbuf[256], abuf[256], rbuf[64], sbuf[512], tbuf[64];
	char *pols[MAX_POLICIES], *adms[MAX_ADMITS], *rts[3], *sts[MAX_SHARED_TIERS], *tps_s[8];
	int kinds[MAX_POLICIES], routes[3];
	uint32_t tps[8];
	kvt_plan_tier_conf ac[MAX_ADMITS];
	int np, na, nr, nst, ntp;
};

/* The defaults a TTFT target changes: its grid explores every tier and
 * both routings over the fleet sizes searched. */
static void plan_defaults(struct plan_args *pa, int fleet)
{
	if (!pa->dram)
		pa->dram = fleet ? "256GiB,1TiB" : "1000,2000,5000,10000,20000,50000,inf";
	if (!pa->nvme)
		pa->nvme = fleet ? "0,4TiB" : "0";
	if (!pa->shared)
		pa->shared = fleet ? "0,16TiB" : "0";
	if (!pa->shared_tier)
		pa->shared_tier = fleet ? "fs,s3" : "fs";
	if (!pa->route)
		pa->route = fleet ? "rr,balanced" : "rr";
	if (!pa->policy)
		pa->policy = fleet ? "lru" : "lru,s3fifo";
	if (!pa->tp)
		pa->tp = fleet ? "1,2,4" : "1";
}

/* The capacity lists, in blocks of `block_bytes` (1 before the trace is
 * read: sizes are then only checked).  0, or 2 (printed). */
static int plan_grid_caps(const struct plan_args *pa, struct plan_grid *g, double block_bytes)
{
	return parse_caps("--dram", pa->dram, block_bytes, g->c0, &g->n0) ||
	       parse_caps("--nvme", pa->nvme, block_bytes, g->c1, &g->n1) ||
	       parse_caps("--shared", pa->shared, block_bytes, g->cs, &g->ns) ? 2 : 0;
}

/* Every list option into `g`: 0, or 2 (printed). */
static int plan_grid_parse(const struct plan_args *pa, struct plan_grid *g)
{
	if (plan_grid_caps(pa, g, 1))
		return 2;
	g->np = split_list("--policy", pa->policy, g->pbuf, sizeof(g->pbuf), g->pols, MAX_POLICIES);
	g->na = split_list("--admit", pa->admit, g->abuf, sizeof(g->abuf), g->adms, MAX_ADMITS);
	g->nr = split_list("--route", pa->route, g->rbuf, sizeof(g->rbuf), g->rts, 3);
	g->nst = split_list("--shared-tier", pa->shared_tier, g->sbuf, sizeof(g->sbuf), g->sts,
			    MAX_SHARED_TIERS);
	g->ntp = split_list("--tp", pa->tp, g->tbuf, sizeof(g->tbuf), g->tps_s, 8);
	if (g->np < 0 || g->na < 0 || g->nr < 0 || g->nst < 0 || g->ntp < 0)
		return 2;
	for (int i = 0; i < g->np; i++) {
		if (!strcmp(g->pols[i], "lru")) {
			g->kinds[i] = KVT_PLAN_LRU;
		} else if (!strcmp(g->pols[i], "s3fifo")) {
			g->kinds[i] = KVT_PLAN_S3FIFO;
		} else {
			fprintf(stderr, "kvtier plan: --policy \"%s\": expected a comma list of lru, s3fifo\n",
				g->pols[i]);
			return 2;
		}
	}
	for (int i = 0; i < g->na; i++)
		if (parse_admit(g->adms[i], &g->ac[i]))
			return 2;
	for (int i = 0; i < g->ntp; i++)
		if (cli_parse_u32("plan", "--tp", g->tps_s[i], 1, 64, &g->tps[i]))
			return 2;
	for (int i = 0; i < g->nr; i++) {
		if (!strcmp(g->rts[i], "rr") || !strcmp(g->rts[i], "round-robin")) {
			g->routes[i] = KVT_PLAN_ROUTE_RR;
		} else if (!strcmp(g->rts[i], "affinity") || !strcmp(g->rts[i], "prefix")) {
			g->routes[i] = KVT_PLAN_ROUTE_AFFINITY;
		} else if (!strcmp(g->rts[i], "balanced")) {
			g->routes[i] = KVT_PLAN_ROUTE_BALANCED;
		} else {
			fprintf(stderr, "kvtier plan: --route \"%s\": expected a comma list of rr, affinity, balanced\n",
				g->rts[i]);
			return 2;
		}
	}
	return 0;
}

static void plan_ctx_free(struct plan_ctx *x)
{
	if (!x)
		return;
	free(x->cfg);
	kvt_plan_trace_free(x->tr);
	free(x);
}

/* The context of a run: the catalog's entries, the trace read (in
 * *t_parse seconds), the cost of the trace with no cache and its request
 * rate, and the capacities in blocks.  NULL with *rc the exit code. */
static struct plan_ctx *plan_ctx_new(const struct plan_args *pa, struct plan_grid *g,
				     const char *trace, int fleet, double *t_parse, int *rc)
{
	struct plan_ctx *x = calloc(1, sizeof(*x));
	const char *unknown;
	double dur;

	*rc = 1;
	if (!x)
		return NULL;
	x->repeat = pa->repeat;
	x->rate = pa->rate;
	x->gpus_per_node = pa->gpus_per_node;
	x->max_nodes = pa->max_nodes;
	x->fleet = fleet;
	x->target_ttft_s = fleet ? pa->target_ttft / 1e3 : -1;
	x->model = kvt_plan_model_find(pa->model);
	x->gpu = kvt_plan_gpu_find(pa->gpu);
	x->tc[KVT_PLAN_T0] = kvt_plan_tier_find("dram");
	x->tc[KVT_PLAN_T1] = kvt_plan_tier_find("nvme");
	x->pcie = kvt_plan_link_find("pcie");
	x->nic = kvt_plan_link_find("nic");
	unknown = !x->model ? pa->model : !x->gpu ? pa->gpu : NULL;
	for (int i = 0; !unknown && i < g->nst; i++)
		if (!(x->shared[x->nshared++] = kvt_plan_tier_find(g->sts[i])))
			unknown = g->sts[i];
	x->tc[KVT_PLAN_TS] = x->shared[0];
	if (unknown || !x->tc[0] || !x->tc[1] || !x->pcie || !x->nic) {
		fprintf(stderr, "kvtier plan: unknown %s \"%s\" (kvtier plan --list)\n",
			!x->model ? "model" : !x->gpu ? "gpu" : "tier",
			unknown ? unknown : "dram, nvme, pcie or nic");
		free(x);
		*rc = 2;
		return NULL;
	}
	*t_parse = cli_now();
	int r = kvt_plan_trace_read(trace, pa->fmt, pa->block_tokens, pa->limit, &x->tr);
	if (r) {
		free(x);
		*rc = cli_fail_detail("plan", r); /* names the file, line, field */
		return NULL;
	}
	*t_parse = cli_now() - *t_parse;
	kvt_plan_trace_view_get(x->tr, &x->tv);
	x->block_bytes = kvt_plan_kv_bytes_per_token(x->model) * x->tv.block_tokens;
	for (uint64_t q = 0; q < x->tv.requests; q++)
		x->base_gpu_s += kvt_plan_prefill_seconds(x->model, x->gpu, 0, x->tv.in_len[q]);
	dur = x->tv.requests ? x->tv.arrive_s[x->tv.requests - 1] : 0;
	if (dur <= 0)
		dur = 3600; /* no timestamps: assume the trace spans an hour */
	x->req_per_month = (double)x->tv.requests / dur * 30 * 86400 * x->rate;
	if (plan_grid_caps(pa, g, x->block_bytes)) {
		plan_ctx_free(x);
		*rc = 2;
		return NULL;
	}
	return x;
}

/* No tiers at all: the fleet accelerators alone need (fleet search), and
 * a request's TTFT alone without a cache: the cheapest fleet of every
 * --tp that meets the target (or the one with the lowest TTFT). */
static void plan_base(struct plan_ctx *x, const struct plan_grid *g)
{
	kvt_plan_req_hit *ph = calloc(x->tv.requests + 1, sizeof(*ph));
	double *tt = malloc((x->tv.requests + 1) * sizeof(double));

	x->base.no_tiers = 1;
	x->base.admit_name = "none";
	x->base.conf.nodes = 1;
	for (unsigned k = 0; k < KVT_PLAN_NT; k++)
		x->base.tc[k] = x->tc[k];
	for (int i = 0; ph && tt && i < (x->fleet ? g->ntp : 1); i++) {
		struct cfg_out b = x->base;
		b.tp = g->tps[i];
		/* Without a target only its TTFT alone is shown: no fleet to
		 * run (the report runs it when it draws it). */
		if (x->fleet)
			b.rc = plan_fleet_search(x, &b, ph, tt);
		else
			plan_evaluate(x, &b, ph, tt);
		if (!i || (b.met && (!x->base.met || b.usd_fleet_month < x->base.usd_fleet_month)) ||
		    (!b.met && !x->base.met && b.tm.ttft_p90 < x->base.tm.ttft_p90))
			x->base = b;
	}
	x->base_ttft_p90 = x->base.ttft_alone_p90;
	free(ph);
	free(tt);
}

/* Every configuration of the grid into x->cfg: 0, or 1 out of memory. */
static int plan_grid_fill(struct plan_ctx *x, const struct plan_grid *g, const struct plan_args *pa)
{
	size_t maxcfg = (size_t)g->np * (size_t)g->na * (size_t)g->n0 * (size_t)g->n1 *
			(size_t)g->ns * (size_t)g->nr * (size_t)g->nst * (size_t)g->ntp;

	x->cfg = calloc(maxcfg ? maxcfg : 1, sizeof(*x->cfg));
	if (!x->cfg)
		return 1;
	for (size_t c = 0; c < (size_t)g->np * g->na * g->nr * g->nst * g->ntp; c++) {
		size_t h = c / (size_t)g->ntp;
		int ti = (int)(c % (size_t)g->ntp);
		int p = (int)(h / ((size_t)g->na * g->nr * g->nst));
		int a = (int)(h / ((size_t)g->nr * g->nst) % g->na);
		int ri = (int)(h / g->nst % g->nr), st = (int)(h % g->nst);
		for (int s = 0; s < g->ns; s++)
			for (int j = 0; j < g->n1; j++)
				for (int i = 0; i < g->n0; i++) {
					/* Admission filters guard the slower tiers; with
					 * none below T0 it has nothing to guard.  With no
					 * shared tier, its kind does not matter. */
					if (g->ac[a].admit && !g->c1[j] && !g->cs[s] && a > 0)
						continue;
					if (!g->cs[s] && st > 0)
						continue;
					struct cfg_out *o = &x->cfg[x->ncfg++];
					o->conf.policy = g->kinds[p];
					o->conf.s3_small_pct = pa->s3_small;
					o->conf.s3_promote = pa->s3_promote;
					o->conf.s3_fill_main = pa->s3_fill;
					o->conf.nodes = pa->nodes;
					o->conf.route = g->routes[ri];
					o->tp = g->tps[ti];
					o->tc[KVT_PLAN_T0] = x->tc[KVT_PLAN_T0];
					o->tc[KVT_PLAN_T1] = x->tc[KVT_PLAN_T1];
					o->tc[KVT_PLAN_TS] = x->shared[st];
					o->conf.tier[KVT_PLAN_T0].capacity = g->c0[i] ? g->c0[i] : 1;
					o->conf.tier[KVT_PLAN_T1].capacity = g->c1[j];
					o->conf.tier[KVT_PLAN_TS].capacity = g->cs[s];
					for (int k = KVT_PLAN_T1; k <= KVT_PLAN_TS; k++) {
						uint64_t cap = o->conf.tier[k].capacity;
						o->conf.tier[k] = g->ac[a];
						o->conf.tier[k].capacity = cap;
					}
					o->admit_name = g->adms[a];
				}
	}
	return 0;
}

/* Simulate every configuration on `threads` threads (0: as many as the
 * work is worth), the main thread reporting progress on a terminal;
 * returns the wall seconds, *threads the number used. */
static double plan_run(struct plan_ctx *x, unsigned *threads, int quiet)
{
	unsigned n = *threads, started = 0;
	pthread_t th[64];
	int tty = !quiet && isatty(2);
	double t0, wall;

	if (!n) {
		/* A thread costs its start, and on a busy machine its first
		 * wait for a core (tens of ms measured on a loaded 2-core box:
		 * the 4,000-request plan of kvtier-bench ran 3x slower with a
		 * second one); the simulator does some 20-50 M block accesses
		 * a second.  So one thread per PLAN_ACCESSES_PER_THREAD of
		 * work, up to the online CPUs. */
		long nc = sysconf(_SC_NPROCESSORS_ONLN);
		double work = (double)x->ncfg * (double)x->tv.blocks * (x->fleet ? 8 : 1);
		n = nc > 0 ? (unsigned)nc : 1;
		if (work / PLAN_ACCESSES_PER_THREAD < n)
			n = (unsigned)(work / PLAN_ACCESSES_PER_THREAD) + 1;
	}
	if (n > 64)
		n = 64;
	if (n > x->ncfg)
		n = (unsigned)x->ncfg;
	if (!n)
		n = 1;
	t0 = cli_now();
	for (unsigned i = 1; i < n; i++)
		if (pthread_create(&th[started], NULL, worker, x) == 0)
			started++;
	while (tty && started && atomic_load(&x->done) < x->ncfg) {
		/* The main thread reports progress; the workers simulate. */
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		fprintf(stderr, "\rkvtier plan: %zu/%zu configurations, %.1f s",
			(size_t)atomic_load(&x->done), x->ncfg, cli_now() - t0);
		nanosleep(&ts, NULL);
	}
	worker(x); /* the main thread works too (or finishes alone) */
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	wall = cli_now() - t0;
	if (tty)
		fprintf(stderr, "\rkvtier plan: %zu/%zu configurations, %.2f s\n", x->ncfg, x->ncfg,
			wall);
	*threads = n;
	return wall;
}

/* The recommendation: the cheapest configuration meeting the targets;
 * with no target, the one that saves the most money net of its own cost.
 * Its index or -1; *why says which rule chose it (in whybuf). */
static long plan_best(const struct plan_ctx *x, double target_hit, double target_ttft,
		      char *whybuf, size_t len, const char **why)
{
	long best = -1;

	if (target_hit < 0 && target_ttft < 0) {
		*why = "largest GPU saving net of tier cost";
		for (size_t i = 0; i < x->ncfg; i++)
			if (!x->cfg[i].rc && (best < 0 || x->cfg[i].usd_net_month > x->cfg[best].usd_net_month))
				best = (long)i;
		return best;
	}
	char hs[64] = "", ts[64] = "";
	if (target_hit >= 0)
		snprintf(hs, sizeof(hs), " token hit rate >= %.3g", target_hit);
	if (target_ttft >= 0)
		snprintf(ts, sizeof(ts), "%s TTFT p90 <= %.4g ms", target_hit >= 0 ? " and" : "",
			 target_ttft);
	snprintf(whybuf, len, "cheapest meeting%s%s", hs, ts);
	*why = whybuf;
	for (size_t i = 0; i < x->ncfg; i++) {
		const struct cfg_out *o = &x->cfg[i];
		if (o->rc)
			continue;
		double hr = (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1);
		if (target_hit >= 0 && hr < target_hit)
			continue;
		/* A fleet is met at its searched size; its price is the
		 * accelerators' and the tiers'. */
		if (x->fleet && !o->met)
			continue;
		double usd = x->fleet ? o->usd_fleet_month : o->usd_month;
		double bu = best < 0 ? 0 : x->fleet ? x->cfg[best].usd_fleet_month : x->cfg[best].usd_month;
		if (best < 0 || usd < bu)
			best = (long)i;
	}
	return best;
}

/* The answer in words: the trace, the table, the recommendation, the
 * sources of every figure and the simulation's own speed. */
static void plan_print(const struct plan_ctx *x, const struct plan_args *pa, const char *trace,
		       long best, const char *why)
{
	printf("trace %s: %s, %llu requests, %llu block references (%llu distinct), %u tokens/block, "
	       "%.1f MiB of KV per block (%s)\n",
	       trace, kvt_plan_format_name(x->tv.format), (unsigned long long)x->tv.requests,
	       (unsigned long long)x->tv.blocks, (unsigned long long)x->tv.distinct_blocks,
	       x->tv.block_tokens, x->block_bytes / 1048576.0, x->model->name);
	if (x->fleet)
		printf("capacities in blocks per node (shared: fleet-wide); accel: the fewest accelerators "
		       "(%u a node) meeting TTFT p90 <= %.4g ms with queueing at %gx the trace's rate; "
		       "DRAM over NVMe exclusive, shared tier inclusive; model %s on %s\n\n",
		       x->gpus_per_node, pa->target_ttft, x->rate, x->model->name, x->gpu->name);
	else
		printf("capacities in blocks per node (shared: fleet-wide); %u node(s) of %u accelerator(s), "
		       "%gx the trace's rate; DRAM over NVMe exclusive, shared tier inclusive; model %s on %s\n\n",
		       pa->nodes, x->gpus_per_node, x->rate, x->model->name, x->gpu->name);
	print_table(x, stdout);
	if (!x->fleet && x->ncfg)
		warn_overloaded(x, &x->cfg[best >= 0 ? best : 0], pa->nodes);
	if (x->fleet) {
		plan_fleet_print(x, best, stdout);
	} else if (best >= 0) {
		const struct cfg_out *o = &x->cfg[best];
		char a[24], b[24], c[24], s0[32], s1[32], s2[32];
		kvt_fmt_size((uint64_t)(plan_cap_blocks(x, o->conf.tier[0].capacity) * x->block_bytes), s0, sizeof(s0));
		kvt_fmt_size((uint64_t)(plan_cap_blocks(x, o->conf.tier[1].capacity) * x->block_bytes), s1, sizeof(s1));
		kvt_fmt_size((uint64_t)(plan_cap_blocks(x, o->conf.tier[2].capacity) * x->block_bytes), s2, sizeof(s2));
		printf("\nrecommendation (%s): %s/%s, DRAM %s blocks (%s) per node, NVMe %s (%s), shared %s (%s): "
		       "token hit %.1f%%, TTFT p90 %.1f ms (no cache %.1f ms), %.1f GPU-hours saved per million "
		       "requests, tiers $%.0f/month, net $%.0f/month\n",
		       why, pol_name(o->conf.policy), o->admit_name,
		       cap_str(o->conf.tier[0].capacity, a, sizeof(a)), s0,
		       cap_str(o->conf.tier[1].capacity, b, sizeof(b)), o->conf.tier[1].capacity ? s1 : "-",
		       cap_str(o->conf.tier[2].capacity, c, sizeof(c)), o->conf.tier[2].capacity ? s2 : "-",
		       100.0 * (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1),
		       o->tm.ttft_p90 * 1e3, x->base_ttft_p90 * 1e3, o->gpu_h_saved_per_m, o->usd_month, o->usd_net_month);
		plan_fleet_print(x, best, stdout);
	} else {
		printf("\nrecommendation: no configuration of the grid meets the target\n");
	}
	sources_print(x, stdout);
}

int cmd_plan(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, NULL, O_FORMAT },
		{ "block-tokens", required_argument, NULL, O_BLOCK_TOKENS },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "dram", required_argument, NULL, O_DRAM },
		{ "nvme", required_argument, NULL, O_NVME },
		{ "shared", required_argument, NULL, O_SHARED },
		{ "shared-tier", required_argument, NULL, O_SHARED_TIER },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "admit", required_argument, NULL, O_ADMIT },
		{ "nodes", required_argument, NULL, O_NODES },
		{ "route", required_argument, NULL, O_ROUTE },
		{ "model", required_argument, NULL, O_MODEL },
		{ "gpu", required_argument, NULL, O_GPU },
		{ "catalog", required_argument, NULL, O_CATALOG },
		{ "target-hit", required_argument, NULL, O_TARGET_HIT },
		{ "target-ttft-ms", required_argument, NULL, O_TARGET_TTFT },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "repeat", required_argument, NULL, O_REPEAT },
		{ "report", required_argument, NULL, O_REPORT },
		{ "json", no_argument, NULL, O_JSON },
		{ "csv", no_argument, NULL, O_CSV },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "list", no_argument, NULL, O_LIST },
		{ "rate", required_argument, NULL, O_RATE },
		{ "gpus-per-node", required_argument, NULL, O_GPUS_PER_NODE },
		{ "max-nodes", required_argument, NULL, O_MAX_NODES },
		{ "tp", required_argument, NULL, O_TP },
		{ "s3fifo-small", required_argument, NULL, O_S3_SMALL },
		{ "s3fifo-promote", required_argument, NULL, O_S3_PROMOTE },
		{ "s3fifo-fill-main", no_argument, NULL, O_S3_FILL },
		{ 0 },
	};
	struct plan_args pa = {
		.admit = "none", .model = "Llama-3.1-8B", .gpu = "H100", .fmt = KVT_PLAN_FMT_AUTO,
		.nodes = 1, .repeat = 1, .target_hit = -1, .target_ttft = -1, .rate = 1,
		.gpus_per_node = 1, .max_nodes = 32,
	};
	struct plan_grid g;
	struct plan_ctx *x;
	const char *trace, *why;
	char whybuf[160], *jbuf;
	double t_parse = 0, wall, accesses = 0, sim_cpu = 0;
	unsigned threads;
	int first, rc, failed = 0;
	long best;

	rc = cli_getopt("plan", argc, argv, NULL, opts, NULL, plan_opt, &pa, plan_usage, &first);
	if (rc >= 0)
		return rc;
	plan_defaults(&pa, pa.target_ttft >= 0);
	if (first + 1 < argc) {
		fprintf(stderr, "kvtier plan: unexpected argument \"%s\" (one TRACE)\n\n",
			argv[first + 1]);
		plan_usage(stderr);
		return 2;
	}
	trace = first < argc ? argv[first] : NULL;
	if (pa.catalog && (rc = kvt_plan_catalog_load(pa.catalog)))
		return cli_fail("plan", "catalog", rc);
	if (pa.list) {
		fflush(stdout);
		if ((rc = kvt_plan_catalog_write(1)))
			return cli_fail("plan", "--list", rc);
		return 0;
	}
	if (!trace) {
		fputs(plan_help, stderr);
		return 2;
	}
	memset(&g, 0, sizeof(g));
	if (plan_grid_parse(&pa, &g))
		return 2;
	if (!(x = plan_ctx_new(&pa, &g, trace, pa.target_ttft >= 0, &t_parse, &rc)))
		return rc;
	plan_base(x, &g);
	if (plan_grid_fill(x, &g, &pa)) {
		plan_ctx_free(x);
		return 1;
	}
	threads = pa.threads;
	wall = plan_run(x, &threads, pa.quiet);
	for (size_t i = 0; i < x->ncfg; i++) {
		if (x->cfg[i].rc) {
			failed = 1;
			fprintf(stderr, "kvtier plan: configuration %zu: %s\n", i,
				kvt_strerror(x->cfg[i].rc));
			continue;
		}
		accesses += (double)x->cfg[i].r.blocks;
		sim_cpu += x->cfg[i].sim_s;
	}
	best = plan_best(x, pa.target_hit, pa.target_ttft, whybuf, sizeof(whybuf), &why);
	jbuf = plan_json(x, trace, best, why, wall, accesses, sim_cpu, threads);
	if (pa.json) {
		fputs(jbuf ? jbuf : "{}\n", stdout);
	} else if (pa.csv) {
		write_csv(x, stdout);
	} else {
		plan_print(x, &pa, trace, best, why);
		printf("simulated %zu configurations (%.0f block accesses) in %.3f s on %u thread(s): "
		       "%.1f M accesses/s per thread; trace parsed in %.3f s\n",
		       x->ncfg, accesses, wall, threads, sim_cpu > 0 ? accesses / sim_cpu / 1e6 : 0,
		       t_parse);
	}
	rc = failed;
	if (pa.report && write_report(x, pa.report, trace, best, why, jbuf ? jbuf : "{}\n"))
		rc = 1;
	else if (pa.report && !pa.json && !pa.csv)
		printf("report: %s/index.html\n", pa.report);
	free(jbuf);
	plan_ctx_free(x);
	return rc;
}
