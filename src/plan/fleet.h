/*
 * fleet.h — the planner's clock: a simulated trace (its hits and nodes,
 * plan.h) run in time on a fleet of accelerators, with a queue per node,
 * prefill as the service time, and loads from the tiers over links of
 * limited bandwidth, overlapped with compute layer by layer.  The model
 * is kvtier.h's kvt_plan_fleet_run; docs/PLANNING.md gives its reasons.
 */
#ifndef KVT_PLAN_FLEET_H
#define KVT_PLAN_FLEET_H

#include <stddef.h>

#include "kvtier.h"
#include "plan/trace.h"
#include "kvtier/plan.h"

#define PLAN_FLEET_MAX_GPUS_PER_NODE 64

/* kvt_plan_fleet_run over the planner's own trace. */
int plan_fleet_run(const struct plan_trace *pt, const kvt_plan_req_hit *per_req,
		   const kvt_plan_fleet_conf *f, kvt_plan_timing *out, double *ttft_s,
		   double *wait_s, double *series, size_t series_cap);

/* Seconds of a prefill of `comp` seconds over `layers` layers whose KV
 * starts arriving at `first` and has all arrived at `last` (uniformly,
 * layer by layer), the accelerator free from `start`: layer l computes
 * once its KV is in and layer l - 1 is done.  Its end, in absolute time. */
double plan_fleet_overlap_end(double start, double first, double last, double comp,
			      unsigned layers);

#endif
