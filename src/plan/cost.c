/*
 * cost.c — the built-in model, GPU and tier tables and the cost formulas
 * (cost.h).  Sources of the numbers: docs/PLANNING.md.
 */
#include "plan/cost.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kvtier.h"

#define MAX_ENTRIES 64

static struct plan_model models[MAX_ENTRIES] = {
	{ "Llama-3.1-8B", 8.03e9, 32, 4096, 8, 128 },
	{ "Llama-3.1-70B", 70.6e9, 80, 8192, 8, 128 },
	{ "Qwen2.5-7B", 7.62e9, 28, 3584, 4, 128 },
	{ "Qwen2.5-72B", 72.7e9, 80, 8192, 8, 128 },
};
static int n_models = 4;

static struct plan_gpu gpus[MAX_ENTRIES] = {
	{ "H100", 989, 0.5, 4.0 },
	{ "H200", 989, 0.5, 5.0 },
	{ "B200", 2250, 0.5, 7.0 },
	{ "Trainium2", 667, 0.5, 2.5 },
};
static int n_gpus = 4;

static struct plan_tier_cost tiers[MAX_ENTRIES] = {
	{ "dram", 25, 5, 2.0, 0, 0 },
	{ "nvme", 6, 100, 0.10, 0, 0 },
	{ "fs", 1, 1000, 0.145, 0, 0 },
	{ "s3", 1, 30000, 0.023, 0.0004, 0.005 },
};
static int n_tiers = 4;

#define FIND(arr, n, name) \
	for (int i_ = 0; i_ < (n); i_++) \
		if (!strcasecmp((arr)[i_].name, (name))) \
			return &(arr)[i_]; \
	return NULL;

const struct plan_model *plan_model_find(const char *name) { FIND(models, n_models, name) }
const struct plan_gpu *plan_gpu_find(const char *name) { FIND(gpus, n_gpus, name) }
const struct plan_tier_cost *plan_tier_find(const char *name) { FIND(tiers, n_tiers, name) }

void plan_catalog_print(FILE *f)
{
	fprintf(f, "models:\n");
	for (int i = 0; i < n_models; i++)
		fprintf(f, "  %-16s params=%.3g layers=%u d_model=%u kv_heads=%u head_dim=%u (%.0f KiB/token)\n",
			models[i].name, models[i].params, models[i].layers, models[i].d_model,
			models[i].kv_heads, models[i].head_dim,
			plan_kv_bytes_per_token(&models[i]) / 1024);
	fprintf(f, "gpus:\n");
	for (int i = 0; i < n_gpus; i++)
		fprintf(f, "  %-16s tflops=%g mfu=%g usd_hour=%g\n", gpus[i].name, gpus[i].tflops,
			gpus[i].mfu, gpus[i].usd_hour);
	fprintf(f, "tiers:\n");
	for (int i = 0; i < n_tiers; i++)
		fprintf(f, "  %-16s gbps=%g latency_us=%g usd_gib_month=%g usd_per_1k_get=%g usd_per_1k_put=%g\n",
			tiers[i].name, tiers[i].gbps, tiers[i].latency_us, tiers[i].usd_gib_month,
			tiers[i].usd_per_1k_get, tiers[i].usd_per_1k_put);
}

/* key=value into *out; 1 if `tok` was `key`. */
static int kv(const char *tok, const char *key, double *out)
{
	size_t n = strlen(key);
	if (strncmp(tok, key, n) || tok[n] != '=')
		return 0;
	*out = strtod(tok + n + 1, NULL);
	return 1;
}

int plan_catalog_load(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return kvt_err(-errno, "catalog %s: cannot open", path);
	char line[1024];
	int ln = 0, rc = 0;
	while (!rc && fgets(line, sizeof(line), f)) {
		ln++;
		char *h = strchr(line, '#');
		if (h)
			*h = 0;
		char *save = NULL;
		char *kind = strtok_r(line, " \t\r\n", &save);
		if (!kind)
			continue;
		char *name = strtok_r(NULL, " \t\r\n", &save);
		if (!name || strlen(name) >= 48) {
			rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: a name is needed", path, ln);
			break;
		}
		double v[6] = {0};
		int m = !strcmp(kind, "model"), g = !strcmp(kind, "gpu"), t = !strcmp(kind, "tier");
		if (!m && !g && !t) {
			rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: \"%s\" is not model, gpu or tier",
				     path, ln, kind);
			break;
		}
		if (m) {
			const struct plan_model *o = plan_model_find(name);
			if (o) {
				v[0] = o->params; v[1] = o->layers; v[2] = o->d_model;
				v[3] = o->kv_heads; v[4] = o->head_dim;
			}
		} else if (g) {
			const struct plan_gpu *o = plan_gpu_find(name);
			v[1] = 0.5;
			if (o) {
				v[0] = o->tflops; v[1] = o->mfu; v[2] = o->usd_hour;
			}
		} else {
			const struct plan_tier_cost *o = plan_tier_find(name);
			if (o) {
				v[0] = o->gbps; v[1] = o->latency_us; v[2] = o->usd_gib_month;
				v[3] = o->usd_per_1k_get; v[4] = o->usd_per_1k_put;
			}
		}
		static const char *const mk[] = {"params", "layers", "d_model", "kv_heads", "head_dim"};
		static const char *const gk[] = {"tflops", "mfu", "usd_hour"};
		static const char *const tk[] = {"gbps", "latency_us", "usd_gib_month",
						 "usd_per_1k_get", "usd_per_1k_put"};
		const char *const *keys = m ? mk : g ? gk : tk;
		int nk = m ? 5 : g ? 3 : 5;
		char *tok;
		while (!rc && (tok = strtok_r(NULL, " \t\r\n", &save))) {
			int ok = 0;
			for (int i = 0; i < nk && !ok; i++)
				ok = kv(tok, keys[i], &v[i]);
			if (!ok)
				rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: unknown setting \"%s\"", path,
					     ln, tok);
		}
		if (rc)
			break;
		if (m) {
			if (v[0] <= 0 || v[1] < 1 || v[2] < 1 || v[3] < 1 || v[4] < 1) {
				rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: model %s needs params, layers, d_model, kv_heads, head_dim > 0",
					     path, ln, name);
				break;
			}
			struct plan_model *e = (struct plan_model *)plan_model_find(name);
			if (!e && n_models < MAX_ENTRIES)
				e = &models[n_models++];
			if (!e) { rc = kvt_err(KVT_ECONFIG, "catalog: too many models"); break; }
			snprintf(e->name, sizeof(e->name), "%s", name);
			e->params = v[0]; e->layers = (uint32_t)v[1]; e->d_model = (uint32_t)v[2];
			e->kv_heads = (uint32_t)v[3]; e->head_dim = (uint32_t)v[4];
		} else if (g) {
			if (v[0] <= 0 || v[1] <= 0 || v[1] > 1) {
				rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: gpu %s needs tflops > 0 and 0 < mfu <= 1",
					     path, ln, name);
				break;
			}
			struct plan_gpu *e = (struct plan_gpu *)plan_gpu_find(name);
			if (!e && n_gpus < MAX_ENTRIES)
				e = &gpus[n_gpus++];
			if (!e) { rc = kvt_err(KVT_ECONFIG, "catalog: too many gpus"); break; }
			snprintf(e->name, sizeof(e->name), "%s", name);
			e->tflops = v[0]; e->mfu = v[1]; e->usd_hour = v[2];
		} else {
			if (v[0] <= 0) {
				rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: tier %s needs gbps > 0", path,
					     ln, name);
				break;
			}
			struct plan_tier_cost *e = (struct plan_tier_cost *)plan_tier_find(name);
			if (!e && n_tiers < MAX_ENTRIES)
				e = &tiers[n_tiers++];
			if (!e) { rc = kvt_err(KVT_ECONFIG, "catalog: too many tiers"); break; }
			snprintf(e->name, sizeof(e->name), "%s", name);
			e->gbps = v[0]; e->latency_us = v[1]; e->usd_gib_month = v[2];
			e->usd_per_1k_get = v[3]; e->usd_per_1k_put = v[4];
		}
	}
	fclose(f);
	return rc;
}

double plan_kv_bytes_per_token(const struct plan_model *m)
{
	return 2.0 * m->layers * m->kv_heads * m->head_dim * 2.0;
}

double plan_prefill_s(const struct plan_model *m, const struct plan_gpu *g,
		      double from_tok, double to_tok)
{
	if (to_tok <= from_tok)
		return 0;
	double fl = 2.0 * m->params * (to_tok - from_tok) +
		    2.0 * m->layers * (double)m->d_model * (to_tok * to_tok - from_tok * from_tok);
	return fl / (g->tflops * 1e12 * g->mfu);
}

double plan_load_s(const struct plan_tier_cost *t, double bytes)
{
	if (bytes <= 0)
		return 0;
	return t->latency_us * 1e-6 + bytes / (t->gbps * 1e9);
}
