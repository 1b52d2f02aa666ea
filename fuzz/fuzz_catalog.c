/*
 * fuzz_catalog.c — libFuzzer target for the planner's catalog reader
 * (plan_catalog_load, src/plan/cost.c).
 *
 * `kvtier plan --catalog FILE` extends the built-in model, GPU, tier and
 * link tables from a text file the user names.  plan_catalog_load takes a path,
 * so the input is given to it as a memfd opened by its /proc/self/fd name
 * (nothing is written to any file system).
 *
 * The tables are process-wide and a load adds to them, so each input would
 * start from what the ones before it left.  cost.c is compiled into this
 * file (rather than linked from the library archive, which is also built
 * without coverage instrumentation), which lets the target put the
 * built-in tables back after every input: each run starts from the same
 * state, and a crash reproduces from its input alone.
 *
 * Checked: the only failure is KVT_ECONFIG; after a load that succeeds,
 * every entry is within the ranges cost.c documents, the cost formulas give
 * finite, non-negative times for each model, GPU and tier, and loading the
 * same file again changes nothing (an entry that names an existing one
 * overrides it with the same values).
 *
 *   ./fuzz_catalog -max_len=4096 fuzz/corpus/catalog
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_memfile.h"
#include "plan/cost.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct {
	struct plan_model models[MAX_ENTRIES];
	struct plan_gpu gpus[MAX_ENTRIES];
	struct plan_tier_cost tiers[MAX_ENTRIES];
	struct plan_link links[MAX_ENTRIES];
	int n_models, n_gpus, n_tiers, n_links;
} builtin;

static fuzz_memfile mem = { -1, "" };

static void setup(void)
{
	/* The built-in models are copied in on first use: before taking the
	 * snapshot, so that it holds them. */
	plan_model_find("");
	if (n_models == 0 || n_gpus == 0 || n_tiers == 0)
		abort();
	memcpy(builtin.models, models, sizeof(models));
	memcpy(builtin.gpus, gpus, sizeof(gpus));
	memcpy(builtin.tiers, tiers, sizeof(tiers));
	memcpy(builtin.links, links, sizeof(links));
	builtin.n_models = n_models;
	builtin.n_gpus = n_gpus;
	builtin.n_tiers = n_tiers;
	builtin.n_links = n_links;
	fuzz_memfile_open(&mem, "fuzz_catalog");
}

static void restore(void)
{
	memcpy(models, builtin.models, sizeof(models));
	memcpy(gpus, builtin.gpus, sizeof(gpus));
	memcpy(tiers, builtin.tiers, sizeof(tiers));
	memcpy(links, builtin.links, sizeof(links));
	n_models = builtin.n_models;
	n_gpus = builtin.n_gpus;
	n_tiers = builtin.n_tiers;
	n_links = builtin.n_links;
	memset(model_src, 0, sizeof(model_src));
	memset(gpu_src, 0, sizeof(gpu_src));
	memset(tier_src, 0, sizeof(tier_src));
	memset(link_src, 0, sizeof(link_src));
}


static int in(double v, double lo, double hi)
{
	return isfinite(v) && v >= lo && v <= hi;
}

static void check_tables(void)
{
	if (n_models > MAX_ENTRIES || n_gpus > MAX_ENTRIES || n_tiers > MAX_ENTRIES)
		abort();
	for (int i = 0; i < n_models; i++) {
		const struct plan_model *m = &models[i];
		if (!m->name[0] || strlen(m->name) >= sizeof(m->name) || !in(m->params, 1, 1e15) ||
		    !in(m->layers, 1, 1e5) || !in(m->d_model, 1, 1e6) || !in(m->kv_heads, 1, 1e5) ||
		    !in(m->head_dim, 1, 1e5) || plan_model_find(m->name) != m)
			abort();
		if (!in(plan_kv_bytes_per_token(m), 1, INFINITY))
			abort();
		for (int g = 0; g < n_gpus; g++)
			if (!in(plan_prefill_s(m, &gpus[g], 0, 131072), 0, INFINITY))
				abort();
	}
	for (int i = 0; i < n_gpus; i++) {
		const struct plan_gpu *g = &gpus[i];
		if (!g->name[0] || !in(g->tflops, 1e-3, 1e6) || !in(g->mfu, 1e-6, 1) ||
		    !in(g->usd_hour, 0, 1e6) || plan_gpu_find(g->name) != g)
			abort();
	}
	for (int i = 0; i < n_tiers; i++) {
		const struct plan_tier_cost *t = &tiers[i];
		if (!t->name[0] || !in(t->gbps, 1e-6, 1e6) || !in(t->latency_us, 0, 1e9) ||
		    !in(t->usd_gib_month, 0, 1e6) || !in(t->usd_per_1k_get, 0, 1e6) ||
		    !in(t->usd_per_1k_put, 0, 1e6) || !in(t->gbps_per_tib, 0, 1e6) ||
		    !in(t->min_tib, 0, 1e9) || !in(t->get_per_s, 0, 1e12) || !in(t->prefixes, 0, 1e9) ||
		    plan_tier_find(t->name) != t || !plan_catalog_source("tier", t->name))
			abort();
		if (!in(plan_load_s(t, 1e12), 0, INFINITY))
			abort();
	}
	if (n_links > MAX_ENTRIES)
		abort();
	for (int i = 0; i < n_links; i++) {
		const struct plan_link *l = &links[i];
		const char *src = plan_catalog_source("link", l->name);
		if (!l->name[0] || !in(l->gbps, 1e-6, 1e6) || plan_link_find(l->name) != l || !src ||
		    (i >= builtin.n_links && !strcmp(src, "built-in")))
			abort();
	}
}

/* The tables as plan_catalog_print shows them (caller frees). */
static char *tables(size_t *len)
{
	char *s = NULL;
	FILE *f = open_memstream(&s, len);

	if (!f)
		abort();
	plan_catalog_print(f);
	if (fclose(f))
		abort();
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int rc;

	if (mem.fd < 0)
		setup();
	fuzz_memfile_fill(&mem, data, size);
	rc = plan_catalog_load(mem.path);
	if (rc && rc != KVT_ECONFIG)
		abort();
	if (rc == 0) {
		size_t la, lb;
		char *a, *b;

		check_tables();
		a = tables(&la);
		if (plan_catalog_load(mem.path))
			abort();
		b = tables(&lb);
		if (la != lb || memcmp(a, b, la))
			abort();
		free(a);
		free(b);
	}
	restore();
	return 0;
}
