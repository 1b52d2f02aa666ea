/*
 * plan_cli.h — what `kvtier plan`'s two files share: one configuration of
 * the grid and its results (cfg_out), the run's context (plan_ctx).
 * cmd_plan.c reads the options, runs the grid and writes the outputs;
 * plan_fleet.c runs configurations in time on a fleet and searches the
 * smallest fleet that meets a TTFT target.
 */
#ifndef KVT_PLAN_CLI_H
#define KVT_PLAN_CLI_H

#include <stdatomic.h>
#include <stdio.h>

#include <jansson.h>

#include "kvtier.h"
#include "kvtier/plan.h"

#define PLAN_FLEET_PTS 32 /* fleets tried per configuration, kept for the frontier */

/* One fleet size tried: its accelerators, TTFT p90 and $/month. */
struct fleet_pt {
	unsigned nodes;
	double p90, usd;
};

struct cfg_out {
	kvt_plan_conf conf;           /* conf.nodes: the fleet it was evaluated at */
	unsigned tp;                  /* accelerators a replica (tensor parallel) */
	const char *admit_name;
	const kvt_plan_tier *tc[KVT_PLAN_NT]; /* T0, T1, the shared tier */
	int no_tiers;                 /* the "accelerators only" fleet */
	kvt_plan_result r;
	kvt_plan_timing tm;           /* in time, with queueing */
	double sim_s;
	double ttft_alone_p90;        /* one request alone: no queue (seconds) */
	double gpu_s;                 /* prefill compute */
	double load_bytes[KVT_PLAN_NT];
	double usd_storage_month, usd_req_per_m, usd_month;  /* tiers */
	double usd_gpu_month, usd_fleet_month;               /* accelerators; both */
	double gpu_h_saved_per_m, usd_net_month;
	double shared_tib;            /* provisioned (a file system) */
	int met;                      /* fleet search: the target is met at conf.nodes */
	struct fleet_pt pts[PLAN_FLEET_PTS];
	int npts;
	int rc;
};

struct plan_ctx {
	kvt_plan_trace *tr;
	kvt_plan_trace_view tv;  /* of tr */
	const kvt_plan_model *model;
	const kvt_plan_gpu *gpu;
	const kvt_plan_tier *tc[KVT_PLAN_NT]; /* the first shared tier listed */
	const kvt_plan_tier *shared[8];       /* --shared-tier's list */
	int nshared;
	const kvt_plan_link *pcie, *nic;
	double block_bytes;
	double base_gpu_s;
	double base_ttft_p90;
	double req_per_month;     /* at --rate */
	double rate;
	unsigned gpus_per_node, max_nodes;  /* replicas a node */
	double target_ttft_s;     /* < 0: none */
	int fleet;                /* search the smallest fleet per configuration */
	struct cfg_out base;      /* fleet search: no tiers */
	struct cfg_out *cfg;
	size_t ncfg;
	unsigned repeat;
	atomic_size_t next, done;
};

/* Accelerators of o's fleet: nodes x replicas x tensor parallel. */
#define PLAN_HOURS_MONTH 730.0

/* A tier's capacity in blocks (an unbounded one holds every distinct block). */
static inline double plan_cap_blocks(const struct plan_ctx *x, uint64_t cap)
{
	return cap == KVT_PLAN_UNBOUNDED ? (double)x->tv.distinct_blocks : (double)cap;
}

static inline unsigned plan_accels(const struct plan_ctx *x, const struct cfg_out *o)
{
	return o->conf.nodes * x->gpus_per_node * (o->tp ? o->tp : 1);
}

/* Costs of o from its simulation (per_req) into o (plan_fleet.c); the TTFT
 * of each request alone into ttft[]. */
void plan_evaluate(const struct plan_ctx *x, struct cfg_out *o, const kvt_plan_req_hit *ph,
		   double *ttft);

/* The fleet of o->conf in time (kvt_plan_fleet_conf of its tiers). */
void plan_fleet_conf(const struct plan_ctx *x, const struct cfg_out *o, kvt_plan_fleet_conf *f);

/* Simulate and run o at o->conf.nodes; ph and scratch have room for
 * every request.  Optional per-request (qttft, wait) and series outputs
 * as kvt_plan_fleet_run's.  0 or an error code (also in o->rc). */
int plan_fleet_eval(const struct plan_ctx *x, struct cfg_out *o, kvt_plan_req_hit *ph,
		    double *scratch, double *qttft, double *wait, double *series,
		    size_t series_cap);

/* Fleet search: the fewest nodes (up to x->max_nodes) at which o meets
 * x->target_ttft_s; o is left evaluated there (o->met) or at the last
 * size tried. */
int plan_fleet_search(const struct plan_ctx *x, struct cfg_out *o, kvt_plan_req_hit *ph,
		      double *scratch);

/* The fleet part of the terminal output, the JSON, and the report's
 * pictures (frontier, bandwidth over time, queueing delay). */
void plan_fleet_print(const struct plan_ctx *x, long best, FILE *f);
json_t *plan_fleet_json(const struct plan_ctx *x, long best);
json_t *plan_timing_json(const struct plan_ctx *x, const struct cfg_out *o);
/* Data files and gnuplot commands into `gp` for the report's fleet
 * pictures; the number of <img> lines written into `html` is returned. */
int plan_fleet_report(const struct plan_ctx *x, long best, const char *dir, FILE *gp,
		      FILE *html);

#endif
