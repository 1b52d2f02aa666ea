/*
 * api.c — the planner's public calls (kvtier.h, "Capacity planning and
 * trace replay"): thin wrappers that check what a caller passes and map the
 * public configuration onto the simulator's (plan.h), whose results and
 * catalog entries are the public structs themselves.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "plan/cost.h"
#include "plan/fleet.h"
#include "plan/plan.h"
#include "kvtier/plan.h"

struct kvt_plan_trace {
	struct plan_trace pt;
};

int kvt_plan_format_parse(const char *name)
{
	return plan_fmt_parse(name);
}

const char *kvt_plan_format_name(int format)
{
	return plan_fmt_name((enum plan_fmt)format);
}

static int trace_new(int format, kvt_plan_trace **out, kvt_plan_trace **t)
{
	*out = NULL;
	if (format < KVT_PLAN_FMT_AUTO || format > KVT_PLAN_FMT_VLLM)
		return kvt_err(KVT_EINVAL, "trace format %d: expected 0..4 (enum kvt_plan_format)",
			       format);
	*t = malloc(sizeof(**t));
	return *t ? 0 : kvt_err(KVT_ENOMEM, "out of memory");
}

int kvt_plan_trace_read(const char *path, int format, uint32_t block_tokens,
				uint64_t max_requests, kvt_plan_trace **out)
{
	kvt_plan_trace *t;
	int rc = trace_new(format, out, &t);

	if (rc)
		return rc;
	rc = plan_trace_read(path, (enum plan_fmt)format, block_tokens, max_requests, &t->pt);
	if (rc)
		free(t);
	else
		*out = t;
	return rc;
}

int kvt_plan_trace_parse(const char *buf, size_t len, int format,
				 uint32_t block_tokens, uint64_t max_requests,
				 kvt_plan_trace **out)
{
	kvt_plan_trace *t;
	int rc = trace_new(format, out, &t);

	if (rc)
		return rc;
	rc = plan_trace_parse(buf, len, (enum plan_fmt)format, block_tokens, max_requests,
			      &t->pt);
	if (rc)
		free(t);
	else
		*out = t;
	return rc;
}

void kvt_plan_trace_free(kvt_plan_trace *t)
{
	if (!t)
		return;
	plan_trace_free(&t->pt);
	free(t);
}

void kvt_plan_trace_view_get(const kvt_plan_trace *t, kvt_plan_trace_view *out)
{
	const struct plan_trace *pt = &t->pt;

	out->format = pt->fmt;
	out->block_tokens = pt->block_tokens;
	out->requests = pt->t.nreq;
	out->blocks = pt->t.nblocks;
	out->distinct_blocks = pt->t.nids;
	out->off = pt->t.off;
	out->ids = pt->t.ids;
	out->arrive_s = pt->arrive_s;
	out->in_len = pt->in_len;
	out->out_len = pt->out_len;
}

/* One tier's admission rule onto the policy module's. */
static int admit_conf(unsigned k, const kvt_plan_tier_conf *tc, struct kvt_admit_conf *a)
{
	memset(a, 0, sizeof(*a));
	switch (tc->admit) {
	case KVT_PLAN_ADMIT_ALL:
		return 0;
	case KVT_PLAN_ADMIT_TINYLFU:
		a->rules = KVT_ADMIT_TINYLFU;
		return 0;
	case KVT_PLAN_ADMIT_SEEN:
		if (tc->seen_n < 1 || tc->seen_n > 15)
			return kvt_err(KVT_EINVAL, "tier %u: seen_n %u: expected 1..15", k, tc->seen_n);
		a->rules = KVT_ADMIT_SEEN;
		a->seen_n = tc->seen_n;
		return 0;
	case KVT_PLAN_ADMIT_PREFIX:
		if (tc->min_prefix < 1)
			return kvt_err(KVT_EINVAL, "tier %u: min_prefix 0: expected at least 1", k);
		a->rules = KVT_ADMIT_PREFIX;
		a->min_prefix = tc->min_prefix;
		return 0;
	}
	return kvt_err(KVT_EINVAL, "tier %u: admission rule %d: expected 0..3 (enum kvt_plan_admit)",
		       k, tc->admit);
}

int kvt_plan_simulate(const kvt_plan_trace *t, const kvt_plan_conf *c,
			      kvt_plan_result *r, kvt_plan_req_hit *per_req)
{
	struct plan_conf pc;
	int rc;

	memset(r, 0, sizeof(*r));
	memset(&pc, 0, sizeof(pc));
	if (c->policy != KVT_PLAN_LRU && c->policy != KVT_PLAN_S3FIFO)
		return kvt_err(KVT_EINVAL, "policy %d: expected KVT_PLAN_LRU or KVT_PLAN_S3FIFO",
			       c->policy);
	if (c->route != KVT_PLAN_ROUTE_RR && c->route != KVT_PLAN_ROUTE_AFFINITY &&
	    c->route != KVT_PLAN_ROUTE_BALANCED)
		return kvt_err(KVT_EINVAL, "route %d: expected KVT_PLAN_ROUTE_RR, _AFFINITY or _BALANCED",
			       c->route);
	if (c->s3_small_pct > 90)
		return kvt_err(KVT_EINVAL, "S3-FIFO small queue %u%%: expected 1..90", c->s3_small_pct);
	if (c->s3_promote > 3)
		return kvt_err(KVT_EINVAL, "S3-FIFO promotion after %u hits: expected 1..3 "
			       "(a block's frequency saturates at 3)", c->s3_promote);
	pc.kind = c->policy == KVT_PLAN_LRU ? KVT_EVICT_LRU : KVT_EVICT_S3FIFO;
	pc.s3_small_pct = c->s3_small_pct;
	pc.s3_promote = c->s3_promote;
	pc.s3_fill_main = c->s3_fill_main != 0;
	pc.nodes = c->nodes;
	pc.route = c->route == KVT_PLAN_ROUTE_RR ? PLAN_ROUTE_RR
		   : c->route == KVT_PLAN_ROUTE_AFFINITY ? PLAN_ROUTE_AFFINITY : PLAN_ROUTE_BALANCED;
	for (unsigned k = 0; k < KVT_PLAN_NT; k++) {
		pc.tier[k].capacity = c->tier[k].capacity;
		if ((rc = admit_conf(k, &c->tier[k], &pc.tier[k].admit)))
			return rc;
	}
	return plan_sim_run(&t->pt, &pc, r, per_req);
}

const kvt_plan_model *kvt_plan_model_find(const char *name)
{
	return plan_model_find(name);
}

const kvt_plan_gpu *kvt_plan_gpu_find(const char *name)
{
	return plan_gpu_find(name);
}

const kvt_plan_tier *kvt_plan_tier_find(const char *name)
{
	return plan_tier_find(name);
}

const kvt_plan_link *kvt_plan_link_find(const char *name)
{
	return plan_link_find(name);
}

const kvt_plan_link *kvt_plan_link_at(size_t i)
{
	return plan_link_at(i);
}

const char *kvt_plan_catalog_source(const char *kind, const char *name)
{
	return plan_catalog_source(kind, name);
}

int kvt_plan_fleet_run(const kvt_plan_trace *t, const kvt_plan_req_hit *per_req,
		       const kvt_plan_fleet_conf *f, kvt_plan_timing *out, double *ttft_s,
		       double *wait_s, double *series, size_t series_cap)
{
	return plan_fleet_run(&t->pt, per_req, f, out, ttft_s, wait_s, series, series_cap);
}

const kvt_plan_model *kvt_plan_model_at(size_t i)
{
	return plan_model_at(i);
}

const kvt_plan_gpu *kvt_plan_gpu_at(size_t i)
{
	return plan_gpu_at(i);
}

const kvt_plan_tier *kvt_plan_tier_at(size_t i)
{
	return plan_tier_at(i);
}

int kvt_plan_catalog_write(int fd)
{
	int d = dup(fd);
	FILE *f = d >= 0 ? fdopen(d, "w") : NULL;

	if (!f) {
		int e = errno;
		if (d >= 0)
			close(d);
		return kvt_err(-e, "catalog: fd %d: %s", fd, strerror(e));
	}
	plan_catalog_print(f);
	if (fclose(f)) {
		int e = errno;
		return kvt_err(-e, "catalog: fd %d: %s", fd, strerror(e));
	}
	return 0;
}

int kvt_plan_catalog_load(const char *path)
{
	return plan_catalog_load(path);
}

double kvt_plan_kv_bytes_per_token(const kvt_plan_model *m)
{
	return plan_kv_bytes_per_token(m);
}

double kvt_plan_prefill_seconds(const kvt_plan_model *m, const kvt_plan_gpu *g,
					double from_tok, double to_tok)
{
	return plan_prefill_s(m, g, from_tok, to_tok);
}

double kvt_plan_load_seconds(const kvt_plan_tier *t, double bytes)
{
	return plan_load_s(t, bytes);
}
