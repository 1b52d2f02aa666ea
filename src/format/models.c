/*
 * models.c — the table of known models; see models.h.  Shapes from each
 * model's config.json (num_hidden_layers, hidden_size,
 * num_key_value_heads, head dimension); parameter counts from their model
 * cards.
 */
#include "format/models.h"

#include <string.h>
#include <strings.h>

#include "kvtier.h"

const kvt_model_preset kvt_model_presets[] = {
	{ "llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B", 8.03e9, 32, 4096, 8, 128 },
	{ "llama3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B", 70.6e9, 80, 8192, 8, 128 },
	{ "qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B", 7.62e9, 28, 3584, 4, 128 },
	{ "qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct", "Qwen2.5-72B", 72.7e9, 80, 8192, 8, 128 },
	{ "qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B", 0.49e9, 24, 896, 2, 64 },
	/* A toy for tests and quick looks: 2 layers x 2 heads x 16 dims. */
	{ "tiny", "kvtier/tiny-test-model", "tiny", 0, 2, 32, 2, 16 },
};
const size_t kvt_n_model_presets = sizeof(kvt_model_presets) / sizeof(kvt_model_presets[0]);

const kvt_model_preset *kvt_model_preset_find(const char *name)
{
	for (size_t i = 0; name && i < kvt_n_model_presets; i++) {
		const kvt_model_preset *m = &kvt_model_presets[i];
		if (!strcmp(m->name, name) || !strcmp(m->model_id, name) ||
		    !strcasecmp(m->title, name))
			return m;
	}
	return NULL;
}

const kvt_model_preset *kvt_model_preset_at(size_t i)
{
	return i < kvt_n_model_presets ? &kvt_model_presets[i] : NULL;
}

void kvt_model_preset_desc(const kvt_model_preset *m, kvt_ns_desc *d)
{
	memset(d, 0, sizeof(*d));
	d->model = m->model_id;
	d->layout.num_layers = m->layers;
	d->layout.num_kv_heads = m->kv_heads;
	d->layout.head_dim = m->head_dim;
	d->layout.dtype = KVT_DTYPE_BF16;
	d->layout.kv_planes = 2;
}
