/*
 * models.h — the models kvtier knows by name: their KV shape (what a
 * chunk's layout is) and their size (what the planner's prefill cost
 * model needs).  One table for the CLI's --model presets, the planner's
 * built-in catalog and the benchmarks.
 */
#ifndef KVT_MODELS_H
#define KVT_MODELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvt_model_preset {
	const char *name;     /* short CLI name: "llama3.1-8b" */
	const char *model_id; /* the Hugging Face id */
	const char *title;    /* the planner's catalog name: "Llama-3.1-8B" */
	double params;        /* weights; 0: not a model to plan for */
	uint32_t layers, d_model, kv_heads, head_dim;
} kvt_model_preset;

extern const kvt_model_preset kvt_model_presets[];
extern const size_t kvt_n_model_presets;

/* By short name, model id or title (titles case-insensitively); NULL if
 * none. */
const kvt_model_preset *kvt_model_preset_find(const char *name);

struct kvt_ns_desc;
/* Zero *d and fill the model id and its KV layout (bf16, K and V); the
 * caller sets block size, chunk tokens, ranks and tenant. */
void kvt_model_preset_desc(const kvt_model_preset *m, struct kvt_ns_desc *d);

#endif
