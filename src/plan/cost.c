/*
 * cost.c — the built-in model, GPU and tier tables and the cost formulas
 * (cost.h).  Sources of the numbers: docs/PLANNING.md.
 */
#include "plan/cost.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "kvtier.h"
#include "format/models.h"
#include "tier/speeds.h"

#define MAX_ENTRIES 64

/* The built-in models are format/models.c's (those with a size to plan
 * for), copied in on first use so that a catalog file can add to them. */
static struct plan_model models[MAX_ENTRIES];
static int n_models;
static pthread_once_t models_once = PTHREAD_ONCE_INIT;

static void models_fill(void)
{
	for (size_t i = 0; i < kvt_n_model_presets && n_models < MAX_ENTRIES; i++) {
		const kvt_model_preset *p = &kvt_model_presets[i];
		struct plan_model *m = &models[n_models];
		if (p->params <= 0)
			continue;
		snprintf(m->name, sizeof(m->name), "%s", p->title);
		m->params = p->params;
		m->layers = p->layers;
		m->d_model = p->d_model;
		m->kv_heads = p->kv_heads;
		m->head_dim = p->head_dim;
		n_models++;
	}
}

static void models_init(void)
{
	pthread_once(&models_once, models_fill);
}

static struct plan_gpu gpus[MAX_ENTRIES] = {
	{ "H100", 989, 0.5, 4.0 },
	{ "H200", 989, 0.5, 5.0 },
	{ "B200", 2250, 0.5, 7.0 },
	{ "Trainium2", 667, 0.5, 2.5 },
};
static int n_gpus = 4;

/* fs: FSx for Lustre Persistent-2 at 125 MB/s per TiB, 1.2 TiB at least;
 * s3: 5,500 GET/s per key prefix, S3's documented request rate. */
static struct plan_tier_cost tiers[MAX_ENTRIES] = {
	{ "dram", KVT_SPEED_DRAM_GBPS, KVT_SPEED_DRAM_LAT_US, 2.0, 0, 0, 0, 0, 0, 0 },
	{ "nvme", KVT_SPEED_NVME_GBPS, KVT_SPEED_NVME_LAT_US, 0.10, 0, 0, 0, 0, 0, 0 },
	{ "fs", KVT_SPEED_FS_GBPS, KVT_SPEED_FS_LAT_US, 0.145, 0, 0, 0.125, 1.2, 0, 0 },
	{ "s3", KVT_SPEED_S3_GBPS, KVT_SPEED_S3_LAT_US, 0.023, 0.0004, 0.005, 0, 0, 5500, 1 },
};
static int n_tiers = 4;

/* PCIe Gen5 x16 moves 64 GB/s each way raw, some 50 in practice; "nic" is
 * one accelerator's share of a p5-class node's EFA (3,200 Gb/s for 8). */
static struct plan_link links[MAX_ENTRIES] = {
	{ "pcie", 50 },
	{ "nic", 50 },
};
static int n_links = 2;

/* Where each entry's figures come from: empty = built-in; else the
 * catalog file and line that last set them. */
static char model_src[MAX_ENTRIES][64], gpu_src[MAX_ENTRIES][64], tier_src[MAX_ENTRIES][64],
	link_src[MAX_ENTRIES][64];

#define FIND(arr, n, name) \
	for (int i_ = 0; i_ < (n); i_++) \
		if (!strcasecmp((arr)[i_].name, (name))) \
			return &(arr)[i_]; \
	return NULL;

const struct plan_model *plan_model_find(const char *name)
{
	models_init();
	FIND(models, n_models, name)
}
const struct plan_gpu *plan_gpu_find(const char *name) { FIND(gpus, n_gpus, name) }
const struct plan_tier_cost *plan_tier_find(const char *name) { FIND(tiers, n_tiers, name) }
const struct plan_link *plan_link_find(const char *name) { FIND(links, n_links, name) }

const struct plan_model *plan_model_at(size_t i)
{
	models_init();
	return i < (size_t)n_models ? &models[i] : NULL;
}
const struct plan_gpu *plan_gpu_at(size_t i) { return i < (size_t)n_gpus ? &gpus[i] : NULL; }
const struct plan_tier_cost *plan_tier_at(size_t i) { return i < (size_t)n_tiers ? &tiers[i] : NULL; }
const struct plan_link *plan_link_at(size_t i) { return i < (size_t)n_links ? &links[i] : NULL; }

const char *plan_catalog_source(const char *kind, const char *name)
{
	const void *e = NULL, *base = NULL;
	size_t sz = 1;
	char (*src)[64] = NULL;

	models_init();
	if (!strcmp(kind, "model")) {
		e = plan_model_find(name), base = models, sz = sizeof(models[0]), src = model_src;
	} else if (!strcmp(kind, "gpu")) {
		e = plan_gpu_find(name), base = gpus, sz = sizeof(gpus[0]), src = gpu_src;
	} else if (!strcmp(kind, "tier")) {
		e = plan_tier_find(name), base = tiers, sz = sizeof(tiers[0]), src = tier_src;
	} else if (!strcmp(kind, "link")) {
		e = plan_link_find(name), base = links, sz = sizeof(links[0]), src = link_src;
	}
	if (!e)
		return NULL;
	size_t i = (size_t)((const char *)e - (const char *)base) / sz;
	return src[i][0] ? src[i] : "built-in";
}

void plan_catalog_print(FILE *f)
{
	models_init();
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
		fprintf(f, "  %-16s gbps=%g latency_us=%g usd_gib_month=%g usd_per_1k_get=%g usd_per_1k_put=%g"
			   " gbps_per_tib=%g min_tib=%g get_per_s=%g prefixes=%g\n",
			tiers[i].name, tiers[i].gbps, tiers[i].latency_us, tiers[i].usd_gib_month,
			tiers[i].usd_per_1k_get, tiers[i].usd_per_1k_put, tiers[i].gbps_per_tib,
			tiers[i].min_tib, tiers[i].get_per_s, tiers[i].prefixes);
	fprintf(f, "links:\n");
	for (int i = 0; i < n_links; i++)
		fprintf(f, "  %-16s gbps=%g\n", links[i].name, links[i].gbps);
}

/* A catalog is a short text file; anything larger is the wrong file. */
#define CATALOG_MAX_BYTES (1u << 20)

/* The range of each setting: wider than any real model, GPU or tier, so
 * that only a typo (a sign, a missing "e9", "1e400") is refused. */
struct setting {
	const char *key;
	double lo, hi;
	int whole; /* a count, not a measure */
};
static const struct setting model_keys[] = {
	{ "params", 1, 1e15, 0 }, { "layers", 1, 1e5, 1 }, { "d_model", 1, 1e6, 1 },
	{ "kv_heads", 1, 1e5, 1 }, { "head_dim", 1, 1e5, 1 },
};
static const struct setting gpu_keys[] = {
	{ "tflops", 1e-3, 1e6, 0 }, { "mfu", 1e-6, 1, 0 }, { "usd_hour", 0, 1e6, 0 },
};
static const struct setting tier_keys[] = {
	{ "gbps", 1e-6, 1e6, 0 }, { "latency_us", 0, 1e9, 0 }, { "usd_gib_month", 0, 1e6, 0 },
	{ "usd_per_1k_get", 0, 1e6, 0 }, { "usd_per_1k_put", 0, 1e6, 0 },
	{ "gbps_per_tib", 0, 1e6, 0 }, { "min_tib", 0, 1e9, 0 }, { "get_per_s", 0, 1e12, 0 },
	{ "prefixes", 0, 1e9, 0 },
};
static const struct setting link_keys[] = {
	{ "gbps", 1e-6, 1e6, 0 },
};

/* DIGITS [. DIGITS] [e [+-] DIGITS], the whole string: strtod alone takes
 * "-1", "0x10", "inf", "nan" and stops quietly at "12abc". */
static int strict_number(const char *s, double *out)
{
	const char *p = s;
	char *end;

	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (*p < '0' || *p > '9')
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p)
		return -1;
	*out = strtod(s, &end);
	return isfinite(*out) ? 0 : -1;
}

/* A key=value token into v[i] for the setting it names.  0, or
 * KVT_ECONFIG naming the file, line, setting and its range. */
static int setting_set(const char *path, int ln, const char *tok, const struct setting *keys,
		       int nk, double *v)
{
	const char *eq = strchr(tok, '=');
	for (int i = 0; eq && i < nk; i++) {
		size_t n = strlen(keys[i].key);
		if ((size_t)(eq - tok) != n || strncmp(tok, keys[i].key, n))
			continue;
		double d;
		if (strict_number(eq + 1, &d) || d < keys[i].lo || d > keys[i].hi ||
		    (keys[i].whole && d != floor(d)))
			return kvt_err(KVT_ECONFIG, "catalog %s:%d: %s=\"%s\": expected %s %g..%g",
				       path, ln, keys[i].key, eq + 1,
				       keys[i].whole ? "a whole number" : "a number", keys[i].lo,
				       keys[i].hi);
		v[i] = d;
		return 0;
	}
	return kvt_err(KVT_ECONFIG, "catalog %s:%d: unknown setting \"%s\"", path, ln, tok);
}

/* The file's last path element and the line: enough to find the entry,
 * short enough for a report's table. */
static void set_source(char *dst, const char *path, int ln)
{
	const char *b = strrchr(path, '/');
	snprintf(dst, 64, "%.48s:%d", b ? b + 1 : path, ln);
}

int plan_catalog_load(const char *path)
{
	struct stat st;
	FILE *f = fopen(path, "r");
	if (!f)
		return kvt_err(-errno, "catalog %s: cannot open: %s", path, strerror(errno));
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size > CATALOG_MAX_BYTES) {
		fclose(f);
		return kvt_err(KVT_ECONFIG, "catalog %s: not a regular file of at most 1 MiB", path);
	}
	char *line = NULL;
	size_t lcap = 0;
	ssize_t llen;
	int ln = 0, rc = 0;
	while (!rc && (llen = getline(&line, &lcap, f)) >= 0) {
		ln++;
		if (memchr(line, '\0', (size_t)llen)) {
			rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: a NUL byte: not a text file", path, ln);
			break;
		}
		char *h = strchr(line, '#');
		if (h)
			*h = 0;
		char *save = NULL;
		char *kind = strtok_r(line, " \t\r\n", &save);
		if (!kind)
			continue;
		char *name = strtok_r(NULL, " \t\r\n", &save);
		if (!name || strlen(name) >= 48) {
			rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: a name of 1..47 characters is needed",
				     path, ln);
			break;
		}
		double v[10] = {0};
		int m = !strcmp(kind, "model"), g = !strcmp(kind, "gpu"), t = !strcmp(kind, "tier");
		int l = !strcmp(kind, "link");
		if (!m && !g && !t && !l) {
			rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: \"%s\" is not model, gpu, tier or link",
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
		} else if (t) {
			const struct plan_tier_cost *o = plan_tier_find(name);
			if (o) {
				v[0] = o->gbps; v[1] = o->latency_us; v[2] = o->usd_gib_month;
				v[3] = o->usd_per_1k_get; v[4] = o->usd_per_1k_put;
				v[5] = o->gbps_per_tib; v[6] = o->min_tib; v[7] = o->get_per_s;
				v[8] = o->prefixes;
			}
		} else {
			const struct plan_link *o = plan_link_find(name);
			if (o)
				v[0] = o->gbps;
		}
		const struct setting *keys = m ? model_keys : g ? gpu_keys : t ? tier_keys : link_keys;
		int nk = m ? 5 : g ? 3 : t ? 9 : 1;
		char *tok;
		while (!rc && (tok = strtok_r(NULL, " \t\r\n", &save)))
			rc = setting_set(path, ln, tok, keys, nk, v);
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
			set_source(model_src[e - models], path, ln);
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
			set_source(gpu_src[e - gpus], path, ln);
			e->tflops = v[0]; e->mfu = v[1]; e->usd_hour = v[2];
		} else if (t) {
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
			set_source(tier_src[e - tiers], path, ln);
			e->gbps = v[0]; e->latency_us = v[1]; e->usd_gib_month = v[2];
			e->usd_per_1k_get = v[3]; e->usd_per_1k_put = v[4];
			e->gbps_per_tib = v[5]; e->min_tib = v[6]; e->get_per_s = v[7];
			e->prefixes = v[8];
		} else {
			if (v[0] <= 0) {
				rc = kvt_err(KVT_ECONFIG, "catalog %s:%d: link %s needs gbps > 0", path,
					     ln, name);
				break;
			}
			struct plan_link *e = (struct plan_link *)plan_link_find(name);
			if (!e && n_links < MAX_ENTRIES)
				e = &links[n_links++];
			if (!e) { rc = kvt_err(KVT_ECONFIG, "catalog: too many links"); break; }
			snprintf(e->name, sizeof(e->name), "%s", name);
			set_source(link_src[e - links], path, ln);
			e->gbps = v[0];
		}
	}
	free(line);
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
