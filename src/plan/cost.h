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
 */
#ifndef KVT_PLAN_COST_H
#define KVT_PLAN_COST_H

#include <stdint.h>
#include <stdio.h>

struct plan_model {
	char name[48];
	double params;
	uint32_t layers, d_model, kv_heads, head_dim;
};

struct plan_gpu {
	char name[48];
	double tflops;     /* dense BF16 */
	double mfu;        /* achieved share of it in prefill */
	double usd_hour;   /* price of one GPU-hour */
};

struct plan_tier_cost {
	char name[48];
	double gbps;           /* read bandwidth, GB/s (10^9 B/s) per node */
	double latency_us;     /* first byte */
	double usd_gib_month;  /* storage */
	double usd_per_1k_get, usd_per_1k_put;
};

const struct plan_model *plan_model_find(const char *name);
const struct plan_gpu *plan_gpu_find(const char *name);
const struct plan_tier_cost *plan_tier_find(const char *name);
void plan_catalog_print(FILE *f);

/* Read extra entries; 0 or KVT_ECONFIG/KVT_EIO (kvt_errmsg names the line). */
int plan_catalog_load(const char *path);

double plan_kv_bytes_per_token(const struct plan_model *m);
double plan_prefill_s(const struct plan_model *m, const struct plan_gpu *g,
		      double from_tok, double to_tok);
double plan_load_s(const struct plan_tier_cost *t, double bytes);

#endif
