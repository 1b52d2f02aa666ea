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

#include "kvtier.h" /* kvt_model_preset, kvt_model_preset_find/_at/_desc */

/* The table behind kvt_model_preset_find and kvt_model_preset_at, for
 * the library's own loops (the planner's catalog). */
extern const kvt_model_preset kvt_model_presets[];
extern const size_t kvt_n_model_presets;

#endif
