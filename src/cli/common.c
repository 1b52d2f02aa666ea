/*
 * common.c — what every kvtier subcommand shares.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

/* DESIGN.md's reference models (fp16/bf16, K and V). */
static const cli_model models[] = {
	{ "llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 32, 8, 128 },
	{ "llama3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", 80, 8, 128 },
	{ "qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", 28, 4, 128 },
	{ "qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct", 24, 2, 64 },
	/* A toy for tests and quick looks: 2 layers × 2 heads × 16 dims. */
	{ "tiny", "kvtier/tiny-test-model", 2, 2, 16 },
};

const cli_model *cli_model_find(const char *name)
{
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		if (!strcmp(models[i].name, name) || !strcmp(models[i].model_id, name))
			return &models[i];
	return NULL;
}

void cli_models_print(FILE *f)
{
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		fprintf(f, "  %-14s %-36s %3u layers x %u KV heads x %u dims\n",
			models[i].name, models[i].model_id, models[i].layers,
			models[i].kv_heads, models[i].head_dim);
}

const char cli_common_help[] =
	"  --config FILE        YAML configuration (default: embedded, DRAM only)\n"
	"  --set KEY=VALUE      override one configuration key (repeatable)\n"
	"  --dir PATH           shorthand for --set local_disk=PATH\n"
	"  --model NAME         model preset (default qwen2.5-0.5b; see kvtier hash --models)\n"
	"  --tenant NAME        tenant configured in the store (default: none)\n"
	"  --chunk-tokens N     tokens per chunk (default: the config's chunk_size)\n";

int cli_common_arg(cli_common *c, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	const char **slot = NULL;

	if (!strcmp(a, "--config"))
		slot = &c->config;
	else if (!strcmp(a, "--model"))
		slot = &c->model;
	else if (!strcmp(a, "--tenant"))
		slot = &c->tenant;
	else if (strcmp(a, "--chunk-tokens") && strcmp(a, "--set") &&
		 strcmp(a, "--dir"))
		return 0;
	if (*i + 1 >= argc) {
		fprintf(stderr, "kvtier: %s needs a value\n", a);
		return -1;
	}
	(*i)++;
	if (slot) {
		*slot = argv[*i];
	} else if (!strcmp(a, "--chunk-tokens")) {
		char *end;
		unsigned long v = strtoul(argv[*i], &end, 10);
		if (*end || v == 0 || v > (1u << 20)) {
			fprintf(stderr, "kvtier: --chunk-tokens \"%s\": expected 1..1048576\n",
				argv[*i]);
			return -1;
		}
		c->chunk = (uint32_t)v;
	} else {
		if (c->n_sets == (int)(sizeof(c->sets) / sizeof(c->sets[0]))) {
			fprintf(stderr, "kvtier: too many --set/--dir options\n");
			return -1;
		}
		if (!strcmp(a, "--dir")) {
			snprintf(c->dir_set, sizeof(c->dir_set), "local_disk=%s", argv[*i]);
			c->sets[c->n_sets++] = c->dir_set;
		} else {
			c->sets[c->n_sets++] = argv[*i];
		}
	}
	return 1;
}

int cli_fail(const char *cmd, const char *what, int rc)
{
	const char *d = kvt_errmsg();
	fprintf(stderr, "kvtier %s: %s: %s%s%s%s\n", cmd, what, kvt_strerror(rc),
		*d ? " (" : "", d, *d ? ")" : "");
	return 1;
}

int cli_config(const cli_common *c, kvt_config **out)
{
	kvt_config *cfg;
	int rc = 0;

	cfg = c->config ? kvt_config_load(c->config, &rc) : kvt_config_new();
	if (!cfg)
		return cli_fail("config", c->config ? c->config : "defaults",
				rc ? rc : KVT_ENOMEM);
	/* A one-shot command touches a few chunks: populating a whole default
	 * arena would cost more than the command.  A config file decides. */
	if (!c->config)
		kvt_config_set(cfg, "dram_prefault", "false");
	if ((rc = kvt_config_apply_env(cfg))) {
		kvt_config_free(cfg);
		return cli_fail("config", "environment", rc);
	}
	for (int i = 0; i < c->n_sets; i++) {
		char key[128];
		const char *eq = strchr(c->sets[i], '=');
		if (!eq || (size_t)(eq - c->sets[i]) >= sizeof(key)) {
			fprintf(stderr, "kvtier: --set \"%s\": expected KEY=VALUE\n",
				c->sets[i]);
			kvt_config_free(cfg);
			return 1;
		}
		memcpy(key, c->sets[i], (size_t)(eq - c->sets[i]));
		key[eq - c->sets[i]] = '\0';
		if ((rc = kvt_config_set(cfg, key, eq + 1))) {
			kvt_config_free(cfg);
			return cli_fail("config", c->sets[i], rc);
		}
	}
	/* Inspection changes nothing, whatever the configuration says. */
	if (c->read_only)
		kvt_config_set(cfg, "read_only", "true");
	*out = cfg;
	return 0;
}

int cli_desc(const cli_common *c, kvt_ns_desc *d)
{
	const cli_model *m = cli_model_find(c->model ? c->model : "qwen2.5-0.5b");

	if (!m) {
		fprintf(stderr, "kvtier: unknown model \"%s\"; known presets:\n", c->model);
		cli_models_print(stderr);
		return 1;
	}
	memset(d, 0, sizeof(*d));
	d->model = m->model_id;
	d->layout.num_layers = m->layers;
	d->layout.num_kv_heads = m->kv_heads;
	d->layout.head_dim = m->head_dim;
	d->layout.dtype = KVT_DTYPE_BF16;
	d->layout.kv_planes = 2;
	d->layout.block_size = 0; /* the library's default (kvt_config_ns) */
	d->layout.chunk_tokens = c->chunk;
	d->tenant = c->tenant;
	return 0;
}

int cli_open(const cli_common *c, kvt_store **st, kvt_ns *ns)
{
	kvt_config *cfg;
	kvt_ns_desc d;
	int rc = 0;

	if (cli_desc(c, &d) || cli_config(c, &cfg))
		return 1;
	*st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!*st)
		return cli_fail("store", "open", rc);
	if ((rc = kvt_ns_init(*st, &d, ns))) {
		kvt_store_close(*st);
		*st = NULL;
		return cli_fail("namespace", d.model, rc);
	}
	return 0;
}

int cli_read_file(const char *path, uint8_t **buf, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	uint8_t *b = NULL;
	size_t n = 0, cap = 0, r;

	if (!f) {
		fprintf(stderr, "kvtier: %s: %s\n", path, strerror(errno));
		return -1;
	}
	do {
		if (n == cap) {
			uint8_t *nb;
			cap = cap ? cap * 2 : 1 << 16;
			nb = realloc(b, cap);
			if (!nb) {
				free(b);
				if (f != stdin)
					fclose(f);
				fprintf(stderr, "kvtier: %s: out of memory\n", path);
				return -1;
			}
			b = nb;
		}
		r = fread(b + n, 1, cap - n, f);
		n += r;
	} while (r > 0);
	if (ferror(f)) {
		fprintf(stderr, "kvtier: %s: read error\n", path);
		free(b);
		if (f != stdin)
			fclose(f);
		return -1;
	}
	if (f != stdin)
		fclose(f);
	*buf = b;
	*len = n;
	return 0;
}

int cli_read_tokens(const char *path, uint32_t **tokens, size_t *n_out)
{
	uint8_t *buf;
	size_t len, n = 0, cap = 0, i = 0, line = 1;
	uint32_t *t = NULL;
	int in_array = 0;

	if (cli_read_file(path, &buf, &len))
		return -1;
	while (i < len) {
		unsigned char ch = buf[i];
		if (ch == '\n')
			line++;
		if (isspace(ch) || ch == ',') {
			i++;
		} else if (ch == '[' && !in_array && n == 0) {
			in_array = 1;
			i++;
		} else if (ch == ']' && in_array) {
			in_array = 2;
			i++;
		} else if (isdigit(ch) && in_array != 2) {
			unsigned long long v = 0;
			while (i < len && isdigit(buf[i])) {
				v = v * 10 + (unsigned)(buf[i] - '0');
				if (v > UINT32_MAX)
					break;
				i++;
			}
			if (v > UINT32_MAX) {
				fprintf(stderr, "kvtier: %s:%zu: token id exceeds 32 bits\n",
					path, line);
				goto bad;
			}
			if (n == cap) {
				uint32_t *nt;
				cap = cap ? cap * 2 : 1024;
				nt = realloc(t, cap * sizeof(*t));
				if (!nt)
					goto bad;
				t = nt;
			}
			t[n++] = (uint32_t)v;
		} else {
			fprintf(stderr,
				"kvtier: %s:%zu: unexpected '%c' (expected token ids: a JSON array or whitespace-separated integers)\n",
				path, line, isprint(ch) ? ch : '?');
			goto bad;
		}
	}
	if (in_array == 1) {
		fprintf(stderr, "kvtier: %s: JSON array not closed\n", path);
		goto bad;
	}
	free(buf);
	*tokens = t;
	*n_out = n;
	return 0;
bad:
	free(buf);
	free(t);
	return -1;
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
