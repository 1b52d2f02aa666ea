/*
 * plan_fleet.c — what one configuration costs (plan_evaluate: loads,
 * prefill, storage and requests priced), and `kvtier plan` in time: each
 * configuration run on a fleet of accelerators with queueing
 * (kvt_plan_fleet_run), the smallest fleet
 * that meets --target-ttft-ms with and without tiers, what the cheapest
 * saves, the bandwidth its links need, and the report's pictures of it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonw.h"
#include "kvtier/plan.h"
#include "plan_cli.h"

static const char *const link_name[KVT_PLAN_NLINK] = { "pcie", "nvme", "nic", "shared" };

/* ---- one configuration's price ------------------------------------------- */

/* Cached tokens of request q with h blocks hit: whole blocks, at most
 * the prompt. */
static uint64_t hit_tokens(const kvt_plan_trace_view *pt, uint64_t q, uint64_t h)
{
	uint64_t t = h * pt->block_tokens;
	return t < pt->in_len[q] ? t : pt->in_len[q];
}

void plan_evaluate(const struct plan_ctx *x, struct cfg_out *o, const kvt_plan_req_hit *ph,
		   double *ttft)
{
	const kvt_plan_trace_view *pt = &x->tv;
	double kvb = kvt_plan_kv_bytes_per_token(x->model);
	double sum = 0;
	o->gpu_s = 0;
	for (unsigned k = 0; k < KVT_PLAN_NT; k++)
		o->load_bytes[k] = 0;
	for (uint64_t q = 0; q < pt->requests; q++) {
		double L = pt->in_len[q];
		double load = 0, prev = 0;
		uint64_t acc = 0;
		for (unsigned k = 0; k < KVT_PLAN_NT; k++) {
			acc += ph[q].hit[k];
			double upto = (double)hit_tokens(pt, q, acc);
			double b = (upto - prev) * kvb;
			if (b > 0) {
				o->load_bytes[k] += b;
				load += kvt_plan_load_seconds(o->tc[k], b);
			}
			prev = upto;
		}
		double from = prev >= L ? (L > 0 ? L - 1 : 0) : prev;
		double comp = kvt_plan_prefill_seconds(x->model, x->gpu, from, L);
		o->gpu_s += comp;
		ttft[q] = load + comp;
		sum += ttft[q];
	}
	uint64_t n = pt->requests;
	(void)sum;
	/* One percentile: a selection, not a sort (a sort of every request's
	 * TTFT was a fifth of a large trace's whole run). */
	o->ttft_alone_p90 = kvt_plan_quantile(ttft, pt->requests, 0.9);

	const kvt_plan_conf *c = &o->conf;
	double gib = x->block_bytes / 1073741824.0;
	o->usd_storage_month = 0;
	o->shared_tib = 0;
	for (unsigned k = 0; k < KVT_PLAN_NT && !o->no_tiers; k++) {
		if (!c->tier[k].capacity)
			continue;
		double copies = k == KVT_PLAN_TS ? 1 : c->nodes;
		double g = plan_cap_blocks(x, c->tier[k].capacity) * gib;
		if (k == KVT_PLAN_TS && o->tc[k]->gbps_per_tib > 0) {
			/* A file system is bought by the TiB, at least its
			 * smallest size. */
			o->shared_tib = g / 1024 > o->tc[k]->min_tib ? g / 1024 : o->tc[k]->min_tib;
			g = o->shared_tib * 1024;
		}
		o->usd_storage_month += copies * g * o->tc[k]->usd_gib_month;
	}
	double usd_req = 0;
	for (unsigned k = 0; k < KVT_PLAN_NT; k++)
		usd_req += (double)o->r.hit_tier[k] * o->tc[k]->usd_per_1k_get / 1000 +
			   (double)o->r.inserts[k] * o->tc[k]->usd_per_1k_put / 1000;
	double nreq = n ? (double)n : 1;
	o->usd_req_per_m = usd_req / nreq * 1e6;
	o->usd_month = o->usd_storage_month + usd_req / nreq * x->req_per_month;
	o->gpu_h_saved_per_m = (x->base_gpu_s - o->gpu_s) / nreq * 1e6 / 3600;
	o->usd_net_month = (x->base_gpu_s - o->gpu_s) / nreq * x->req_per_month / 3600 *
			   x->gpu->usd_hour - o->usd_month;
	o->usd_gpu_month = (double)plan_accels(x, o) * x->gpu->usd_hour * PLAN_HOURS_MONTH;
	o->usd_fleet_month = o->usd_gpu_month + o->usd_month;
}


/* The shared tier's fleet-wide throughput: a file system's per TiB
 * provisioned, an object store's GET rate in blocks; 0: no limit. */
static double shared_gbps(const struct plan_ctx *x, const struct cfg_out *o)
{
	const kvt_plan_tier *ts = o->tc[KVT_PLAN_TS];
	if (!o->conf.tier[KVT_PLAN_TS].capacity || o->no_tiers)
		return 0;
	if (ts->gbps_per_tib > 0)
		return ts->gbps_per_tib * o->shared_tib;
	if (ts->get_per_s > 0)
		return ts->get_per_s * (ts->prefixes > 1 ? ts->prefixes : 1) * x->block_bytes / 1e9;
	return 0;
}

void plan_fleet_conf(const struct plan_ctx *x, const struct cfg_out *o, kvt_plan_fleet_conf *f)
{
	memset(f, 0, sizeof(*f));
	f->model = x->model;
	f->gpu = x->gpu;
	for (unsigned k = 0; k < KVT_PLAN_NT; k++)
		f->tier[k] = o->tc[k];
	f->link_gbps[KVT_PLAN_LINK_PCIE] = x->pcie->gbps;
	f->link_gbps[KVT_PLAN_LINK_NIC] = x->nic->gbps;
	f->link_gbps[KVT_PLAN_LINK_SHARED] = shared_gbps(x, o);
	f->rate = x->rate;
	f->nodes = o->conf.nodes;
	f->gpus_per_node = x->gpus_per_node;
	f->tp = o->tp;
}


/* Each link's capacity fleet-wide (every instance together), GB/s; 0:
 * the link carries nothing in this configuration. */
static double link_capacity(const struct plan_ctx *x, const struct cfg_out *o, unsigned l)
{
	double nodes = o->conf.nodes, acc = plan_accels(x, o);
	const kvt_plan_tier *const *tc = o->tc;
	if (o->no_tiers)
		return 0;
	switch (l) {
	case KVT_PLAN_LINK_PCIE:
		return acc * fmin(x->pcie->gbps, tc[KVT_PLAN_T0]->gbps);
	case KVT_PLAN_LINK_NVME:
		return o->conf.tier[KVT_PLAN_T1].capacity ? nodes * tc[KVT_PLAN_T1]->gbps : 0;
	case KVT_PLAN_LINK_NIC:
		return o->conf.tier[KVT_PLAN_TS].capacity ? nodes * fmin(x->nic->gbps, tc[KVT_PLAN_TS]->gbps)
							   : 0;
	default:
		return shared_gbps(x, o);
	}
}

int plan_fleet_eval(const struct plan_ctx *x, struct cfg_out *o, kvt_plan_req_hit *ph,
		    double *scratch, double *qttft, double *wait, double *series,
		    size_t series_cap)
{
	uint64_t n = x->tv.requests;
	if (o->no_tiers) {
		memset(ph, 0, (n + 1) * sizeof(*ph));
		memset(&o->r, 0, sizeof(o->r));
	} else {
		double t0 = cli_now();
		o->rc = kvt_plan_simulate(x->tr, &o->conf, &o->r, ph);
		double dt = cli_now() - t0;
		if (!o->sim_s || dt < o->sim_s)
			o->sim_s = dt;
		if (o->rc)
			return o->rc;
	}
	plan_evaluate(x, o, ph, scratch);
	kvt_plan_fleet_conf f;
	plan_fleet_conf(x, o, &f);
	o->rc = kvt_plan_fleet_run(x->tr, o->no_tiers ? NULL : ph, &f, &o->tm, qttft, wait, series,
				   series_cap);
	return o->rc;
}

/* Evaluate o at `nodes` and keep the point for the frontier; 1 if it
 * meets the target, 0 if not, < 0 on error. */
static int try_nodes(const struct plan_ctx *x, struct cfg_out *o, unsigned nodes,
		     kvt_plan_req_hit *ph, double *scratch)
{
	o->conf.nodes = nodes;
	int rc = plan_fleet_eval(x, o, ph, scratch, NULL, NULL, NULL, 0);
	if (rc)
		return rc;
	if (o->npts < PLAN_FLEET_PTS)
		o->pts[o->npts++] = (struct fleet_pt){ nodes, o->tm.ttft_p90, o->usd_fleet_month };
	return o->tm.ttft_p90 <= x->target_ttft_s;
}

int plan_fleet_search(const struct plan_ctx *x, struct cfg_out *o, kvt_plan_req_hit *ph,
		      double *scratch)
{
	unsigned lo = 0, hi = 0, last;
	o->npts = 0;
	int ok = try_nodes(x, o, 1, ph, scratch);
	if (ok < 0)
		return ok;
	last = 1;
	if (ok) {
		hi = 1;
	} else {
		/* No fleet removes the service time itself: when it alone
		 * misses the target, more accelerators cannot meet it. */
		if (o->tm.service_p90 > x->target_ttft_s &&
		    (o->no_tiers || o->conf.route == KVT_PLAN_ROUTE_RR)) {
			o->met = 0;
			return 0;
		}
		/* At least the accelerators that keep them below saturation:
		 * the service of one node (the best hit rate) over the
		 * arrivals' span. */
		double span = x->tv.requests ? x->tv.arrive_s[x->tv.requests - 1] / x->rate : 0;
		double need = span > 0 ? o->tm.busy_s / span / x->gpus_per_node : 2;
		unsigned n = need > x->max_nodes ? x->max_nodes : (unsigned)ceil(need);
		lo = 1;
		if (n < 2)
			n = 2;
		uint64_t hit_before = o->r.hit_tokens;
		while (n <= x->max_nodes) {
			ok = try_nodes(x, o, n, ph, scratch);
			last = n;
			if (ok < 0)
				return ok;
			if (ok) {
				hi = n;
				break;
			}
			/* Routed by prefix, more nodes hold more cache; once
			 * they stop adding hits, the service time is what it
			 * will stay. */
			if (o->tm.service_p90 > x->target_ttft_s && o->r.hit_tokens <= hit_before)
				break;
			hit_before = o->r.hit_tokens;
			lo = n;
			if (n == x->max_nodes)
				break;
			n = n * 2 > x->max_nodes ? x->max_nodes : n * 2;
		}
		while (hi && hi - lo > 1) {
			unsigned m = lo + (hi - lo) / 2;
			ok = try_nodes(x, o, m, ph, scratch);
			last = m;
			if (ok < 0)
				return ok;
			if (ok)
				hi = m;
			else
				lo = m;
		}
	}
	o->met = hi != 0;
	if (o->met && last != hi && (ok = try_nodes(x, o, hi, ph, scratch)) < 0)
		return ok;
	return 0;
}

/* ---- output ---------------------------------------------------------------- */

static void fmt_blocks(const struct plan_ctx *x, uint64_t cap, char *buf, size_t n)
{
	double b = cap == KVT_PLAN_UNBOUNDED ? (double)x->tv.distinct_blocks : (double)cap;
	kvt_fmt_size((uint64_t)(b * x->block_bytes), buf, n);
}

/* "DRAM 1 TiB/node, NVMe 4 TiB/node, shared fs 16 TiB", or "no tiers". */
static void tiers_str(const struct plan_ctx *x, const struct cfg_out *o, char *buf, size_t n)
{
	char a[32], b[32], c[32];
	if (o->no_tiers) {
		snprintf(buf, n, "no tiers");
		return;
	}
	fmt_blocks(x, o->conf.tier[KVT_PLAN_T0].capacity, a, sizeof(a));
	fmt_blocks(x, o->conf.tier[KVT_PLAN_T1].capacity, b, sizeof(b));
	fmt_blocks(x, o->conf.tier[KVT_PLAN_TS].capacity, c, sizeof(c));
	int k = snprintf(buf, n, "DRAM %s/node", a);
	if (o->conf.tier[KVT_PLAN_T1].capacity && k > 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, ", NVMe %s/node", b);
	if (o->conf.tier[KVT_PLAN_TS].capacity && k > 0 && (size_t)k < n)
		snprintf(buf + k, n - (size_t)k, ", shared %s %s (%.1f TiB provisioned)",
			 o->tc[KVT_PLAN_TS]->name, c, o->shared_tib);
}

static const char *route_name(const struct cfg_out *o)
{
	return o->conf.route == KVT_PLAN_ROUTE_AFFINITY ? "prefix-affinity routing"
	       : o->conf.route == KVT_PLAN_ROUTE_BALANCED ? "balanced prefix-affinity routing"
							  : "round-robin routing";
}

/* The bandwidth table of o: per link, demand against capacity. */
static void print_links(const struct plan_ctx *x, const struct cfg_out *o, FILE *f)
{
	fprintf(f, "  bandwidth over %llu windows of 1 s, fleet-wide (every link of a kind together):\n"
		   "    %-7s %10s %9s %9s %9s %8s %8s  %s\n",
		(unsigned long long)o->tm.windows, "link", "capacity", "p50", "p99", "max", "loads",
		"starved", "GB/s; starved: load slower than recomputing its tokens");
	for (unsigned l = 0; l < KVT_PLAN_NLINK; l++) {
		const kvt_plan_link_use *u = &o->tm.link[l];
		double cap = link_capacity(x, o, l);
		if (!u->bytes && !cap)
			continue;
		fprintf(f, "    %-7s %10.2f %9.3f %9.3f %9.3f %8llu %8llu", link_name[l], cap,
			u->p50_gbps, u->p99_gbps, u->max_gbps, (unsigned long long)u->loads,
			(unsigned long long)u->starved);
		if (u->starved && u->fix_gbps > 0) {
			double per = l == KVT_PLAN_LINK_SHARED ? 1
				     : l == KVT_PLAN_LINK_PCIE ? (double)plan_accels(x, o)
							       : (double)o->conf.nodes;
			double now = cap / (per > 0 ? per : 1);
			fprintf(f, "  fix: %.2f GB/s per %s (now %.2f)", u->fix_gbps,
				l == KVT_PLAN_LINK_SHARED ? "fleet" : l == KVT_PLAN_LINK_PCIE ? "accelerator" : "node",
				now);
			const kvt_plan_tier *ts = o->tc[KVT_PLAN_TS];
			if (l == KVT_PLAN_LINK_SHARED && ts->gbps_per_tib > 0)
				fprintf(f, " = %.1f TiB of %s at %.3g GB/s per TiB", u->fix_gbps / ts->gbps_per_tib,
					ts->name, ts->gbps_per_tib);
		}
		if (u->latency_bound)
			fprintf(f, "  (%llu latency-bound: no bandwidth helps)",
				(unsigned long long)u->latency_bound);
		fputc('\n', f);
	}
}

static void print_fleet_line(const struct plan_ctx *x, const struct cfg_out *o, FILE *f)
{
	char t[256];
	tiers_str(x, o, t, sizeof(t));
	fprintf(f, "%u accelerator(s) (%u node(s) x %u x tp %u), %s%s%s: TTFT p50/p90/p99 %.0f/%.0f/%.0f ms, "
		   "queueing p90 %.0f ms, utilisation %.0f%%, token hit %.1f%%; $%.0f/month "
		   "(accelerators $%.0f, tiers $%.0f)\n",
		plan_accels(x, o), o->conf.nodes, x->gpus_per_node, o->tp ? o->tp : 1, t,
		o->no_tiers ? "" : ", ", o->no_tiers ? "" : route_name(o), o->tm.ttft_p50 * 1e3,
		o->tm.ttft_p90 * 1e3, o->tm.ttft_p99 * 1e3, o->tm.wait_p90 * 1e3,
		100 * o->tm.utilisation,
		100.0 * (double)o->r.hit_tokens / (double)(o->r.tokens ? o->r.tokens : 1),
		o->usd_fleet_month, o->usd_gpu_month, o->usd_month);
}

void plan_fleet_print(const struct plan_ctx *x, long best, FILE *f)
{
	if (!x->fleet) {
		if (best >= 0) {
			fprintf(f, "\nin time at %gx the trace's rate: ", x->rate);
			print_fleet_line(x, &x->cfg[best], f);
			print_links(x, &x->cfg[best], f);
		}
		return;
	}
	const struct cfg_out *b = &x->base;
	fprintf(f, "\nfleet for TTFT p90 <= %.4g ms at %gx the trace's rate, %s on %s, %u accelerator(s) a node:\n",
		x->target_ttft_s * 1e3, x->rate, x->model->name, x->gpu->name, x->gpus_per_node);
	fprintf(f, "  accelerators only: ");
	if (b->met)
		print_fleet_line(x, b, f);
	else
		fprintf(f, "the target is not met within %u node(s) (TTFT p90 %.0f ms at %u)\n",
			x->max_nodes, b->tm.ttft_p90 * 1e3, b->conf.nodes);
	if (best < 0) {
		fprintf(f, "  with tiers: no configuration of the grid meets the target within %u node(s)\n",
			x->max_nodes);
		return;
	}
	const struct cfg_out *o = &x->cfg[best];
	fprintf(f, "  cheapest fleet: %s/%s, ", o->conf.policy == KVT_PLAN_S3FIFO ? "s3fifo" : "lru",
		o->admit_name);
	print_fleet_line(x, o, f);
	if (b->met) {
		int saved = (int)plan_accels(x, b) - (int)plan_accels(x, o);
		double usd = b->usd_fleet_month - o->usd_fleet_month;
		fprintf(f, "  against accelerators only it saves %d accelerator(s) and $%.0f/month (%.1f%%)\n",
			saved, usd, b->usd_fleet_month > 0 ? 100 * usd / b->usd_fleet_month : 0);
	} else {
		fprintf(f, "  accelerators alone do not meet the target within %u node(s): the tiers are what meets it\n",
			x->max_nodes);
	}
	print_links(x, o, f);
}

static json_t *jsummary(double mean, double p50, double p90, double p99, double max)
{
	return json_pack("{s:o,s:o,s:o,s:o,s:o}", "mean", cli_json_fixed(mean * 1e3, 3), "p50",
			 cli_json_fixed(p50 * 1e3, 3), "p90", cli_json_fixed(p90 * 1e3, 3), "p99",
			 cli_json_fixed(p99 * 1e3, 3), "max", cli_json_fixed(max * 1e3, 3));
}

json_t *plan_timing_json(const struct plan_ctx *x, const struct cfg_out *o)
{
	const kvt_plan_timing *t = &o->tm;
	json_t *links = json_object();
	for (unsigned l = 0; links && l < KVT_PLAN_NLINK; l++) {
		const kvt_plan_link_use *u = &t->link[l];
		json_object_set_new(links, link_name[l],
			json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
				  "capacity_gbps", cli_json_fixed(link_capacity(x, o, l), 3),
				  "gib", cli_json_fixed(u->bytes / 1073741824.0, 3),
				  "p50_gbps", cli_json_fixed(u->p50_gbps, 4),
				  "p99_gbps", cli_json_fixed(u->p99_gbps, 4),
				  "max_gbps", cli_json_fixed(u->max_gbps, 4),
				  "loads", cli_json_uint(u->loads), "starved", cli_json_uint(u->starved),
				  "latency_bound", cli_json_uint(u->latency_bound),
				  "fix_gbps", cli_json_fixed(u->fix_gbps, 3)));
	}
	return json_pack("{s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "nodes", (json_int_t)o->conf.nodes,
			 "tp", (json_int_t)(o->tp ? o->tp : 1), "accelerators", (json_int_t)plan_accels(x, o),
			 "ttft_ms", jsummary(t->ttft_mean, t->ttft_p50, t->ttft_p90, t->ttft_p99, t->ttft_max),
			 "queue_ms", jsummary(t->wait_mean, t->wait_p50, t->wait_p90, t->wait_p99, t->wait_max),
			 "service_p90_ms", cli_json_fixed(t->service_p90 * 1e3, 3),
			 "utilisation", cli_json_fixed(t->utilisation, 4),
			 "span_seconds", cli_json_fixed(t->span_s, 3),
			 "usd_fleet_month", cli_json_fixed(o->usd_fleet_month, 2), "links", links);
}

json_t *plan_fleet_json(const struct plan_ctx *x, long best)
{
	if (!x->fleet)
		return json_null();
	json_t *cheap = json_null(), *saves = json_null();
	const struct cfg_out *b = &x->base;
	if (best >= 0) {
		const struct cfg_out *o = &x->cfg[best];
		char t[256];
		tiers_str(x, o, t, sizeof(t));
		cheap = json_pack("{s:I,s:o,s:s,s:o}", "index", (json_int_t)best, "tiers", cli_json_str(t),
				  "route", o->conf.route == KVT_PLAN_ROUTE_AFFINITY ? "affinity"
					   : o->conf.route == KVT_PLAN_ROUTE_BALANCED ? "balanced" : "rr",
				  "timing", plan_timing_json(x, o));
		if (b->met)
			saves = json_pack("{s:I,s:o}", "accelerators",
					  (json_int_t)plan_accels(x, b) - (json_int_t)plan_accels(x, o),
					  "usd_month", cli_json_fixed(b->usd_fleet_month - o->usd_fleet_month, 2));
	}
	return json_pack("{s:o,s:o,s:I,s:I,s:{s:b,s:o},s:o,s:o}",
			 "target_ttft_ms", cli_json_fixed(x->target_ttft_s * 1e3, 3),
			 "rate", cli_json_fixed(x->rate, 4), "gpus_per_node", (json_int_t)x->gpus_per_node,
			 "max_nodes", (json_int_t)x->max_nodes,
			 "accelerators_only", "met", b->met, "timing", plan_timing_json(x, b),
			 "cheapest", cheap, "saves", saves);
}

/* ---- the report's pictures ----------------------------------------------- */

static int cmp_double_asc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int cmp_pt(const void *a, const void *b)
{
	const struct fleet_pt *p = a, *q = b;
	return (p->usd > q->usd) - (p->usd < q->usd);
}

/* Sweep o over `from`..`to` nodes into pts (for the frontier). */
static int sweep(const struct plan_ctx *x, const struct cfg_out *src, unsigned from, unsigned to,
		 struct fleet_pt *pts, int max, kvt_plan_req_hit *ph, double *scratch)
{
	struct cfg_out o = *src;
	int n = 0;
	for (unsigned k = from; k <= to && n < max; k++) {
		o.conf.nodes = k;
		if (plan_fleet_eval(x, &o, ph, scratch, NULL, NULL, NULL, 0))
			break;
		pts[n++] = (struct fleet_pt){ k, o.tm.ttft_p90, o.usd_fleet_month };
	}
	return n;
}

int plan_fleet_report(const struct plan_ctx *x, long best, const char *dir, FILE *gp,
		      FILE *html)
{
	uint64_t n = x->tv.requests;
	kvt_plan_req_hit *ph = calloc(n + 1, sizeof(*ph));
	double *scratch = malloc((n + 1) * sizeof(double));
	double *wait = malloc((n + 1) * sizeof(double)), *wbase = malloc((n + 1) * sizeof(double));
	size_t cap = 0;
	double *series = NULL;
	int imgs = 0;
	char path[4200];
	FILE *f;
	if (!ph || !scratch || !wait || !wbase)
		goto out;
	struct cfg_out rec = best >= 0 ? x->cfg[best] : x->base;
	/* The recommended fleet again, with its series and waits. */
	double span = n ? x->tv.arrive_s[n - 1] / x->rate : 0;
	cap = (size_t)ceil(span * 4) + 64;
	if (cap > (1u << 22))
		cap = 1u << 22;
	series = calloc(cap * KVT_PLAN_NLINK, sizeof(double));
	if (!series || plan_fleet_eval(x, &rec, ph, scratch, NULL, wait, series, cap))
		goto out;
	struct cfg_out base = x->base;
	if (!x->fleet)
		base.conf.nodes = rec.conf.nodes;
	base.no_tiers = 1;
	if (plan_fleet_eval(x, &base, ph, scratch, NULL, wbase, NULL, 0))
		goto out;

	/* Frontier: accelerators only swept over fleet sizes; with tiers,
	 * every fleet the search tried, cheapest first, kept while TTFT falls. */
	if (x->fleet) {
		struct fleet_pt acc[16], *all = malloc((x->ncfg + 1) * PLAN_FLEET_PTS * sizeof(*all));
		int na, nall = 0;
		unsigned c = x->base.conf.nodes;
		na = sweep(x, &x->base, c > 4 ? c - 4 : 1, c + 4, acc, 16, ph, scratch);
		if (!all)
			goto out;
		for (size_t i = 0; i < x->ncfg; i++)
			for (int k = 0; !x->cfg[i].rc && k < x->cfg[i].npts; k++)
				all[nall++] = x->cfg[i].pts[k];
		qsort(all, (size_t)nall, sizeof(*all), cmp_pt);
		snprintf(path, sizeof(path), "%s/frontier.dat", dir);
		if (!(f = fopen(path, "w"))) {
			free(all);
			goto out;
		}
		fprintf(f, "# accelerators only: usd_month ttft_p90_ms accelerators\n");
		for (int i = 0; i < na; i++)
			fprintf(f, "%.2f %.3f %u\n", acc[i].usd, acc[i].p90 * 1e3,
				acc[i].nodes * x->gpus_per_node * x->base.tp);
		fprintf(f, "\n\n# with tiers (the cheapest fleet for each TTFT)\n");
		double lowest = INFINITY;
		for (int i = 0; i < nall; i++)
			if (all[i].p90 < lowest) {
				lowest = all[i].p90;
				fprintf(f, "%.2f %.3f %u\n", all[i].usd, all[i].p90 * 1e3,
					all[i].nodes);
			}
		fclose(f);
		free(all);
		fprintf(gp, "set output '%s/frontier.svg'\nunset logscale\n"
			    "set title 'Cost against TTFT p90: tiers or accelerators'\n"
			    "set xlabel 'fleet cost ($/month: accelerators + tiers)'\nset ylabel 'TTFT p90 (ms)'\n"
			    "set logscale y\nset key top right\nset grid\n"
			    "plot '%s' index 0 using 1:2 with linespoints lw 2 title 'accelerators only', "
			    "'%s' index 1 using 1:2 with linespoints lw 2 title 'with tiers', "
			    "%.6g with lines dt 2 title 'target'\nunset logscale\n",
			dir, path, path, x->target_ttft_s * 1e3);
		fprintf(html, "<h2>Tiers or accelerators</h2>\n<p><img class=\"chart\" src=\"frontier.svg\" alt=\"cost against TTFT p90\"></p>\n");
		imgs++;
	}

	/* Bandwidth over time per link with its capacity. */
	snprintf(path, sizeof(path), "%s/bandwidth.dat", dir);
	if (!(f = fopen(path, "w")))
		goto out;
	size_t nw = rec.tm.windows < cap ? rec.tm.windows : cap;
	int used[KVT_PLAN_NLINK], nused = 0;
	for (unsigned l = 0; l < KVT_PLAN_NLINK; l++) {
		used[l] = rec.tm.link[l].bytes > 0;
		fprintf(f, "# %s\n", link_name[l]);
		for (size_t w = 0; used[l] && w < nw; w++)
			fprintf(f, "%zu %.5f\n", w, series[(size_t)l * cap + w]);
		if (!used[l])
			fprintf(f, "0 0\n");
		fprintf(f, "\n\n");
		nused += used[l];
	}
	fclose(f);
	if (nused) {
		fprintf(gp, "set output '%s/bandwidth.svg'\nset terminal svg size 900,%d dynamic enhanced font 'sans,11' background '#ffffff'\n"
			    "set multiplot layout %d,1 title 'Load bandwidth per 1-s window, fleet-wide'\n"
			    "set xlabel 'time (s)'\nset ylabel 'GB/s'\nset grid\nset key top right\n",
			dir, 220 * nused + 60, nused);
		for (unsigned l = 0; l < KVT_PLAN_NLINK; l++)
			if (used[l])
				fprintf(gp, "set title '%s'\nplot '%s' index %u using 1:2 with lines title 'demand', "
					    "%.6g with lines lw 2 dt 2 title 'capacity'\n",
					link_name[l], path, l, link_capacity(x, &rec, l));
		fprintf(gp, "unset multiplot\nset terminal svg size 900,560 dynamic enhanced font 'sans,12' background '#ffffff'\n");
		fprintf(html, "<h2>Bandwidth the loads need</h2>\n<p><img class=\"chart\" src=\"bandwidth.svg\" alt=\"bandwidth over time\"></p>\n");
		imgs++;
	}

	/* Queueing delay distribution, with the tiers and without. */
	snprintf(path, sizeof(path), "%s/queue.dat", dir);
	if (!(f = fopen(path, "w")))
		goto out;
	uint64_t step = n > 2000 ? n / 2000 : 1;
	double *w2[2] = { wait, wbase };
	for (int s = 0; s < 2; s++) {
		qsort(w2[s], n, sizeof(double), cmp_double_asc);
		fprintf(f, "# %s\n", s ? "accelerators only" : "recommended");
		for (uint64_t i = 0; i < n; i += step)
			fprintf(f, "%.4f %.5f\n", w2[s][i] * 1e3, (double)(i + 1) / (double)n);
		fprintf(f, "%.4f 1\n\n\n", n ? w2[s][n - 1] * 1e3 : 0);
	}
	fclose(f);
	fprintf(gp, "set output '%s/queue.svg'\nunset logscale\n"
		    "set title 'Queueing delay (%u and %u accelerators)'\n"
		    "set xlabel 'time in the queue (ms)'\nset ylabel 'fraction of requests'\nset key bottom right\nset grid\n"
		    "plot '%s' index 0 using 1:2 with lines lw 2 title 'recommended, %u accelerators', "
		    "'%s' index 1 using 1:2 with lines lw 2 title 'accelerators only, %u'\n",
		dir, plan_accels(x, &rec), plan_accels(x, &base), path, plan_accels(x, &rec), path, plan_accels(x, &base));
	fprintf(html, "<h2>Queueing delay</h2>\n<p><img class=\"chart\" src=\"queue.svg\" alt=\"queueing delay distribution\"></p>\n");
	imgs++;
out:
	free(ph);
	free(scratch);
	free(wait);
	free(wbase);
	free(series);
	return imgs;
}
