/*
 * cost.h — the planner's cost model: prefill compute, load time per tier,
 * and what each tier costs.  docs/PLANNING.md gives the sources and the
 * assumptions behind every number of the built-in tables.
 *
 *   prefill(from, to) = [2·P·(to − from) + 2·L·d·(to² − from²)] / (F · MFU)
 *     P params, L layers, d model width, F the GPU's dense BF16 FLOP/s:
 *     the linear term is the weights' matmuls per token, the quadratic one
 *     attention (QKᵀ and AV, 2·d FLOPs each per earlier position per layer).
 *   load(tier, bytes) = latency + bytes / bandwidth   (0 when nothing loads)
 *   TTFT = Σ load over the tiers a request reads + prefill(cached, prompt)
 *     (at least the last token is always computed; no queueing).
 *   KV bytes/token = 2 (K,V) · L · kv_heads · head_dim · 2 (bf16).
 *
 * Tables are extended (or entries overridden) by a text file, one entry a
 * line, '#' comments:
 *   model NAME params=8.03e9 layers=32 d_model=4096 kv_heads=8 head_dim=128
 *   gpu   NAME tflops=989 mfu=0.5 usd_hour=4.5
 *   tier  NAME gbps=50 latency_us=5 usd_gib_month=3 usd_per_1k_get=0 usd_per_1k_put=0
 *         gbps_per_tib=0.125 min_tib=1.2 get_per_s=5500 prefixes=1
 *   link  NAME gbps=50
 */
#ifndef KVT_PLAN_COST_H
#define KVT_PLAN_COST_H

#include <stdint.h>
#include <stdio.h>

#include "kvtier.h"
#include "kvtier/plan.h"

/* The catalog's entries are the public API's (kvtier.h: kvt_plan_model,
 * kvt_plan_gpu, kvt_plan_tier); the planner's code keeps its own names
 * for them. */
#define plan_model kvt_plan_model
#define plan_gpu kvt_plan_gpu
#define plan_tier_cost kvt_plan_tier
#define plan_link kvt_plan_link

const struct plan_model *plan_model_find(const char *name);
const struct plan_gpu *plan_gpu_find(const char *name);
const struct plan_tier_cost *plan_tier_find(const char *name);
const struct plan_link *plan_link_find(const char *name);
/* Entry i in catalog order, or NULL past the last. */
const struct plan_model *plan_model_at(size_t i);
const struct plan_gpu *plan_gpu_at(size_t i);
const struct plan_tier_cost *plan_tier_at(size_t i);
const struct plan_link *plan_link_at(size_t i);
void plan_catalog_print(FILE *f);
/* "built-in", or the file:line that last set the entry; NULL if none. */
const char *plan_catalog_source(const char *kind, const char *name);

/* Read extra entries; 0 or KVT_ECONFIG/KVT_EIO (kvt_errmsg names the line). */
int plan_catalog_load(const char *path);

double plan_kv_bytes_per_token(const struct plan_model *m);
double plan_prefill_s(const struct plan_model *m, const struct plan_gpu *g,
		      double from_tok, double to_tok);
double plan_load_s(const struct plan_tier_cost *t, double bytes);

#endif
