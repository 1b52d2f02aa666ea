/*
 * fleet.c — the trace in time on a fleet of accelerators (fleet.h).
 *
 * One pass in arrival order.  Arrivals are sorted and every queue is first
 * come, first served, so taking requests in trace order and giving each
 * the earliest free accelerator of its node is exactly the FCFS schedule
 * of every node's queue.  Links are reserved the same way: a load holds
 * each link of its path from when the last of them is free until it is
 * done, at the path's slowest bandwidth.  That serialises concurrent loads
 * on a link instead of sharing it fairly; the total time a link is busy,
 * and so the bandwidth it needs, is the same either way.
 */
#include "plan/fleet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "plan/cost.h"

/* Loads per link kept for the fix figure (one double per load). */
struct need {
	double *v;
	size_t n, cap;
};

/* One run's state: the configuration (tp applied to PCIe), the clock of
 * every accelerator and link, and the figures kept as it goes. */
struct fleet {
	const kvt_plan_fleet_conf *f;
	const struct plan_trace *pt;
	const kvt_plan_req_hit *per_req;  /* NULL: no hits, nodes in turn */
	kvt_plan_timing *out;
	double kvb;                       /* KV bytes per token */
	double tp;                        /* accelerators a request runs on */
	/* Free times: each accelerator and its PCIe link; each node's NVMe
	 * (2i) and NIC (2i + 1) and, last in node_free, the shared tier's
	 * (shared_free).  Not a double of this struct: the loads' stores
	 * through these pointers could then alias the struct's fields, and
	 * the hot loop would reload them (a run 25% slower). */
	double *acc_free, *pcie_free, *node_free, *shared_free;
	double *tt, *wt;                  /* per request: TTFT, wait */
	double *sorted;                   /* scratch for the quantiles */
	double end_max;                   /* when the last request ended */
	double win;                       /* window seconds */
	double *wbytes[KVT_PLAN_NLINK];   /* bytes per window; past wcap, 0 */
	size_t wcap[KVT_PLAN_NLINK];      /* 0: the link has carried nothing */
	size_t nwin;                      /* windows any link reached */
	struct need need[KVT_PLAN_NLINK];
	int err;
};

double plan_fleet_overlap_end(double start, double first, double last, double comp,
			      unsigned layers)
{
	double lr = layers ? (double)layers : 1;
	/* Layer l's KV is in at first + (l + 1)·a, a = (last − first)/L; each
	 * layer computes b = comp/L.  The end is the latest of: compute
	 * alone from start, the first layer's KV then all of compute, the
	 * last layer's KV then its compute (the terms between are linear in
	 * l, so an end is the worst). */
	double e = start + comp;
	double a = first + (last - first) / lr + comp;
	double b = last + comp / lr;
	if (a > e)
		e = a;
	return b > e ? b : e;
}

static int push(struct need *n, double v)
{
	if (n->n == n->cap) {
		size_t c = n->cap ? n->cap * 2 : 1024;
		double *p = realloc(n->v, c * sizeof(*p));
		if (!p)
			return KVT_ENOMEM;
		n->v = p;
		n->cap = c;
	}
	n->v[n->n++] = v;
	return 0;
}

/* Room for window index w in link l's series: only the links that carry
 * loads have one (most configurations use one or two of the four). */
static int windows_upto(struct fleet *fl, unsigned l, size_t w)
{
	if (w < fl->wcap[l])
		return 0;
	size_t c = fl->wcap[l] ? fl->wcap[l] : 4096;
	while (c <= w)
		c *= 2;
	double *p = realloc(fl->wbytes[l], c * sizeof(*p));
	if (!p)
		return KVT_ENOMEM;
	memset(p + fl->wcap[l], 0, (c - fl->wcap[l]) * sizeof(*p));
	fl->wbytes[l] = p;
	fl->wcap[l] = c;
	return 0;
}

/* `bytes` moved over link l evenly during [s, e). */
static void spread(struct fleet *fl, unsigned l, double s, double e, double bytes)
{
	size_t w0 = (size_t)(s / fl->win), w1 = (size_t)(e / fl->win);
	if (fl->err || (fl->err = windows_upto(fl, l, w1)))
		return;
	if (w1 + 1 > fl->nwin)
		fl->nwin = w1 + 1;
	if (w0 == w1 || e <= s) {
		fl->wbytes[l][w0] += bytes;
		return;
	}
	double rate = bytes / (e - s);
	for (size_t w = w0; w <= w1; w++) {
		double a = w == w0 ? s : (double)w * fl->win;
		double b = w == w1 ? e : (double)(w + 1) * fl->win;
		fl->wbytes[l][w] += rate * (b - a);
	}
}

/* The nearest-rank index of the p-quantile of n values. */
static size_t rank(size_t n, double p)
{
	size_t i = (size_t)ceil(p * (double)n);
	if (i)
		i--;
	return i < n ? i : n - 1;
}

/* Put the k-th smallest of v[lo..hi] at v[k], smaller ones before it and
 * larger after (Hoare's selection): a percentile without a whole sort,
 * which was most of a small configuration's time. */
static void select_k(double *v, size_t lo, size_t hi, size_t k)
{
	while (lo < hi) {
		double pivot = v[lo + (hi - lo) / 2];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				double t = v[i];
				v[i] = v[j];
				v[j] = t;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return;
	}
}

/* The p-quantile of v[0..n) (reordered), nearest rank; 0 when n is 0. */
double kvt_plan_quantile(double *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t k = rank(n, p);
	select_k(v, 0, n - 1, k);
	return v[k];
}

/* Mean, p50, p90, p99 and max of v[0..n) (reordered).  Each selection
 * leaves the larger values above its rank, so the next looks there only. */
static void summary(double *v, size_t n, double *mean, double *p50, double *p90, double *p99,
		    double *max)
{
	double sum = 0, mx = 0;
	for (size_t i = 0; i < n; i++) {
		sum += v[i];
		if (!i || v[i] > mx)
			mx = v[i];
	}
	*mean = n ? sum / (double)n : 0;
	*max = mx;
	*p50 = *p90 = *p99 = 0;
	if (!n)
		return;
	size_t k50 = rank(n, 0.5), k90 = rank(n, 0.9), k99 = rank(n, 0.99);
	select_k(v, 0, n - 1, k50);
	select_k(v, k50, n - 1, k90);
	select_k(v, k90, n - 1, k99);
	*p50 = v[k50];
	*p90 = v[k90];
	*p99 = v[k99];
}

static int check(const kvt_plan_fleet_conf *f)
{
	if (!f->model || !f->gpu)
		return kvt_err(KVT_EINVAL, "fleet: a model and a gpu are needed");
	for (unsigned k = 0; k < KVT_PLAN_NT; k++)
		if (!f->tier[k] || !(f->tier[k]->gbps > 0))
			return kvt_err(KVT_EINVAL, "fleet: tier %u: a tier with gbps > 0 is needed", k);
	for (unsigned l = 0; l < KVT_PLAN_NLINK; l++)
		if (!(f->link_gbps[l] >= 0) || !isfinite(f->link_gbps[l]))
			return kvt_err(KVT_EINVAL, "fleet: link %u: %g GB/s: expected >= 0 (0: no limit)",
				       l, f->link_gbps[l]);
	if (!(f->rate > 0) || !isfinite(f->rate))
		return kvt_err(KVT_EINVAL, "fleet: rate %g: expected > 0", f->rate);
	if (f->nodes < 1 || f->nodes > KVT_PLAN_MAX_NODES)
		return kvt_err(KVT_EINVAL, "fleet: nodes %u: expected 1..%u", f->nodes,
			       KVT_PLAN_MAX_NODES);
	if (f->gpus_per_node < 1 || f->gpus_per_node > PLAN_FLEET_MAX_GPUS_PER_NODE)
		return kvt_err(KVT_EINVAL, "fleet: gpus_per_node %u: expected 1..%u",
			       f->gpus_per_node, PLAN_FLEET_MAX_GPUS_PER_NODE);
	if (f->tp > 64)
		return kvt_err(KVT_EINVAL, "fleet: tp %u: expected 1..64", f->tp);
	if (!(f->window_s >= 0) || !isfinite(f->window_s))
		return kvt_err(KVT_EINVAL, "fleet: window_s %g: expected >= 0", f->window_s);
	return 0;
}

/* The links a load from tier k crosses, and the bandwidth of its slowest
 * (the tier's own per-node figure counts as the link it is read through). */
static unsigned path_of(const kvt_plan_fleet_conf *f, unsigned k, unsigned *links,
			double *gbps, unsigned *slowest)
{
	static const unsigned paths[KVT_PLAN_NT][3] = {
		{ KVT_PLAN_LINK_PCIE },
		{ KVT_PLAN_LINK_NVME, KVT_PLAN_LINK_PCIE },
		{ KVT_PLAN_LINK_NIC, KVT_PLAN_LINK_SHARED, KVT_PLAN_LINK_PCIE },
	};
	static const unsigned len[KVT_PLAN_NT] = { 1, 2, 3 };
	/* The tier's per-node figure: DRAM's is what reaches the GPU, NVMe's
	 * the device's, the shared tier's one node's client. */
	static const unsigned tier_link[KVT_PLAN_NT] = { KVT_PLAN_LINK_PCIE, KVT_PLAN_LINK_NVME,
							 KVT_PLAN_LINK_NIC };
	double best = f->tier[k]->gbps * (k == KVT_PLAN_T0 && f->tp ? f->tp : 1);
	*slowest = tier_link[k];
	for (unsigned i = 0; i < len[k]; i++) {
		unsigned l = paths[k][i];
		links[i] = l;
		if (f->link_gbps[l] > 0 && f->link_gbps[l] < best) {
			best = f->link_gbps[l];
			*slowest = l;
		}
	}
	*gbps = best;
	return len[k];
}

/* The free-time arrays of nacc accelerators on `nodes` nodes, and the
 * per-request ones of n requests (the caller's ttft_s, wait_s if given). */
static int fleet_alloc(struct fleet *fl, size_t nacc, unsigned nodes, uint64_t n,
		       double *ttft_s, double *wait_s)
{
	fl->acc_free = calloc(nacc, sizeof(double));
	fl->pcie_free = calloc(nacc, sizeof(double));
	fl->node_free = calloc((size_t)nodes * 2 + 1, sizeof(double));
	fl->shared_free = fl->node_free ? fl->node_free + (size_t)nodes * 2 : NULL;
	fl->tt = ttft_s ? ttft_s : malloc((n + 1) * sizeof(double));
	fl->wt = wait_s ? wait_s : malloc((n + 1) * sizeof(double));
	fl->sorted = malloc((n + 1) * sizeof(double));
	if (!fl->acc_free || !fl->pcie_free || !fl->node_free || !fl->tt || !fl->wt ||
	    !fl->sorted)
		return kvt_err(KVT_ENOMEM, "fleet: out of memory");
	return 0;
}

/* Free what fleet_alloc and the run allocated (not the caller's arrays). */
static void fleet_free(struct fleet *fl, const double *ttft_s, const double *wait_s)
{
	for (unsigned l = 0; l < KVT_PLAN_NLINK; l++) {
		free(fl->wbytes[l]);
		free(fl->need[l].v);
	}
	free(fl->acc_free);
	free(fl->pcie_free);
	free(fl->node_free);
	if (!ttft_s)
		free(fl->tt);
	if (!wait_s)
		free(fl->wt);
	free(fl->sorted);
}

/* The accelerator of `node` free first (the lowest index of a tie). */
static size_t earliest_acc(const struct fleet *fl, unsigned node)
{
	unsigned g = fl->f->gpus_per_node;
	size_t s = (size_t)node * g;
	for (size_t j = s + 1; j < (size_t)node * g + g; j++)
		if (fl->acc_free[j] < fl->acc_free[s])
			s = j;
	return s;
}

/* When link l, as seen from accelerator s of `node`, is free. */
static double *link_free(struct fleet *fl, unsigned l, size_t s, unsigned node)
{
	return l == KVT_PLAN_LINK_PCIE ? &fl->pcie_free[s]
		: l == KVT_PLAN_LINK_NVME ? &fl->node_free[2 * node]
		: l == KVT_PLAN_LINK_NIC ? &fl->node_free[2 * node + 1]
		: fl->shared_free;
}

/* A request's load of its hit prefix: the tokens it covers, when the
 * last tier's load ended and when the first began (< 0: nothing loaded). */
struct load {
	double prev, tnow, first;
};

/* Load request q's hit prefix (L tokens in all) tier by tier over its
 * links into accelerator s of `node`, from ld->tnow; stops at the first
 * tier not worth reading, whose tokens and the rest are then computed. */
static void load_prefix(struct fleet *fl, uint64_t q, unsigned node, size_t s, double L,
			struct load *ld)
{
	const kvt_plan_fleet_conf *f = fl->f;
	const struct plan_trace *pt = fl->pt;
	double prev = ld->prev, tnow = ld->tnow, first = ld->first, kvb = fl->kvb, tp = fl->tp;
	kvt_plan_timing *out = fl->out;
	uint64_t blocks = 0;
	for (unsigned k = 0; k < KVT_PLAN_NT; k++) {
		blocks += fl->per_req[q].hit[k];
		double upto = (double)blocks * pt->block_tokens;
		if (upto > L)
			upto = L;
		double bytes = (upto - prev) * kvb;
		if (bytes <= 0) {
			prev = upto;
			continue;
		}
		unsigned links[3], slow;
		double gbps;
		unsigned np = path_of(f, k, links, &gbps, &slow);
		double *fr[3];
		for (unsigned i = 0; i < np; i++)
			fr[i] = link_free(fl, links[i], s, node);
		double lat = f->tier[k]->latency_us * 1e-6;
		/* Restoring is only worth it when it beats recomputing
		 * (kvt_lookup_worth's rule): a tier slower than that, even
		 * alone on its links, is not read, and the rest of the prompt
		 * is computed. */
		double recompute = plan_prefill_s(f->model, f->gpu, prev, upto) / tp;
		kvt_plan_link_use *u = &out->link[slow];
		if (lat < recompute && (fl->err = push(&fl->need[slow],
						       bytes / (recompute - lat) / 1e9)))
			break;
		u->loads++;
		if (lat + bytes / (gbps * 1e9) > recompute) {
			u->starved++;
			u->latency_bound += lat >= recompute;
			break;
		}
		double s0 = tnow + lat;
		for (unsigned i = 0; i < np; i++)
			if (*fr[i] > s0)
				s0 = *fr[i];
		double e = s0 + bytes / (gbps * 1e9);
		for (unsigned i = 0; i < np; i++) {
			*fr[i] = e;
			out->link[links[i]].bytes += bytes;
			out->link[links[i]].busy_s += e - s0;
			spread(fl, links[i], s0, e, bytes);
		}
		/* Starved too: the load, with its waits for busy links, took
		 * longer than computing its tokens. */
		if (e - tnow > recompute)
			u->starved++;
		if (first < 0)
			first = s0;
		tnow = e;
		prev = upto;
	}
	ld->prev = prev;
	ld->tnow = tnow;
	ld->first = first;
}

/* Request q in time: the earliest free accelerator of its node, the load
 * of its prefix, then the rest of its prefill overlapped with the load;
 * its TTFT and wait, the accelerator's busy time, *end_max raised to its
 * end.  (Once a request, the run's fields are read into locals here and
 * in load_prefix: the compiler keeps those in registers.) */
static int fleet_request(struct fleet *fl, uint64_t q, double *end_max)
{
	const kvt_plan_fleet_conf *f = fl->f;
	const struct plan_trace *pt = fl->pt;
	const kvt_plan_req_hit *per_req = fl->per_req;
	double *acc_free = fl->acc_free, *tt = fl->tt, *wt = fl->wt, tp = fl->tp;
	kvt_plan_timing *out = fl->out;
	unsigned nodes = f->nodes;
	double a = pt->arrive_s[q] / f->rate;
	unsigned node = per_req ? per_req[q].node : (unsigned)(q % nodes);
	if (node >= nodes)
		return kvt_err(KVT_EINVAL, "fleet: request %llu on node %u of %u: the simulation "
			       "had more nodes", (unsigned long long)q, node, nodes);
	size_t s = earliest_acc(fl, node);
	double start = a > acc_free[s] ? a : acc_free[s];
	double L = pt->in_len[q];
	struct load ld = {.prev = 0, .tnow = start, .first = -1};
	if (per_req)
		load_prefix(fl, q, node, s, L, &ld);
	double from = ld.prev >= L ? (L > 0 ? L - 1 : 0) : ld.prev;
	double comp = plan_prefill_s(f->model, f->gpu, from, L) / tp;
	double end = ld.first < 0 ? start + comp
				  : plan_fleet_overlap_end(start, ld.first, ld.tnow, comp,
							   f->model->layers);
	acc_free[s] = end;
	if (end > *end_max)
		*end_max = end;
	out->busy_s += end - start;
	out->compute_s += comp;
	tt[q] = end - a;
	wt[q] = start - a;
	return 0;
}

/* The TTFT, wait and service-time (TTFT less wait) figures of n requests. */
static void fleet_summaries(struct fleet *fl, uint64_t n)
{
	kvt_plan_timing *out = fl->out;
	double *sorted = fl->sorted;
	memcpy(sorted, fl->tt, n * sizeof(double));
	summary(sorted, n, &out->ttft_mean, &out->ttft_p50, &out->ttft_p90, &out->ttft_p99,
		&out->ttft_max);
	for (uint64_t q = 0; q < n; q++)
		sorted[q] = fl->tt[q] - fl->wt[q];
	out->service_p90 = kvt_plan_quantile(sorted, n, 0.9);
	memcpy(sorted, fl->wt, n * sizeof(double));
	summary(sorted, n, &out->wait_mean, &out->wait_p50, &out->wait_p90, &out->wait_p99,
		&out->wait_max);
}

/* Each link's demand per window over the span (into series, up to
 * series_cap windows a link, if given), then its quantiles and the
 * bandwidth that would have fed its starved loads. */
static int fleet_windows(struct fleet *fl, uint64_t n, double *series, size_t series_cap)
{
	kvt_plan_timing *out = fl->out;
	size_t nw = (size_t)ceil(fl->end_max / fl->win);
	if (nw < fl->nwin)
		nw = fl->nwin;
	if (!nw)
		nw = 1;
	out->windows = nw;
	double *ws = realloc(fl->sorted, (nw > n + 1 ? nw : n + 1) * sizeof(double));
	if (!ws)
		return kvt_err(KVT_ENOMEM, "fleet: out of memory");
	fl->sorted = ws;
	for (unsigned l = 0; l < KVT_PLAN_NLINK; l++) {
		kvt_plan_link_use *u = &out->link[l];
		for (size_t w = 0; w < nw; w++)
			ws[w] = w < fl->wcap[l] ? fl->wbytes[l][w] / fl->win / 1e9 : 0;
		for (size_t w = 0; series && w < nw && w < series_cap; w++)
			series[(size_t)l * series_cap + w] = ws[w];
		if (u->starved)
			u->fix_gbps = kvt_plan_quantile(fl->need[l].v, fl->need[l].n, 0.99);
		if (!u->bytes)
			continue; /* every window 0 */
		double mean, p90;
		summary(ws, nw, &mean, &u->p50_gbps, &p90, &u->p99_gbps, &u->max_gbps);
	}
	return 0;
}

int plan_fleet_run(const struct plan_trace *pt, const kvt_plan_req_hit *per_req,
		   const kvt_plan_fleet_conf *f, kvt_plan_timing *out, double *ttft_s,
		   double *wait_s, double *series, size_t series_cap)
{
	memset(out, 0, sizeof(*out));
	int rc = check(f);
	if (rc)
		return rc;
	uint64_t n = pt->t.nreq;
	size_t nacc = (size_t)f->nodes * f->gpus_per_node;
	/* Tensor parallel: each of tp accelerators computes 1/tp of every
	 * layer (ideal scaling: an optimistic bound) and loads 1/tp of its
	 * KV over its own PCIe link, all at once. */
	double tp = f->tp ? f->tp : 1;
	kvt_plan_fleet_conf ft = *f;
	ft.link_gbps[KVT_PLAN_LINK_PCIE] *= tp;
	struct fleet fl = {.f = &ft, .pt = pt, .per_req = per_req, .out = out, .tp = tp,
			   .win = f->window_s > 0 ? f->window_s : 1.0};
	rc = fleet_alloc(&fl, nacc, f->nodes, n, ttft_s, wait_s);
	if (rc)
		goto out;
	fl.kvb = plan_kv_bytes_per_token(f->model);
	double end_max = 0;
	for (uint64_t q = 0; q < n && !fl.err; q++)
		if ((rc = fleet_request(&fl, q, &end_max)))
			goto out;
	fl.end_max = end_max;
	if (fl.err) {
		rc = kvt_err(fl.err, "fleet: out of memory");
		goto out;
	}
	out->requests = n;
	out->span_s = fl.end_max;
	out->utilisation = fl.end_max > 0 ? out->busy_s / ((double)nacc * fl.end_max) : 0;
	fleet_summaries(&fl, n);
	rc = fleet_windows(&fl, n, series, series_cap);
out:
	fleet_free(&fl, ttft_s, wait_s);
	return rc;
}
