/*
 * connector.c — `kvtier-bench connector`: the engine connector's CPU gather
 * (paged blocks → chunk) and scatter (chunk → blocks), against memcpy of
 * the same bytes in the same run.
 *
 * Shapes: 16-token vLLM FlashAttention NHD blocks, (2, num_blocks, 16,
 * heads, head_dim) per layer, of Llama-3.1-8B (32 layers, 8 KV heads × 128,
 * bf16: a 256-token chunk is 32 MiB) and an MLA latent cache (num_blocks,
 * 16, 576) of DeepSeek-V3's 61 layers (bf16, one plane: 18 MiB a chunk).
 * The engine pool holds four chunks' worth of blocks (two with --quick);
 * each chunk's block table is a shuffled draw from the pool, so blocks are
 * scattered as in a running engine and the copy moves one block-plane
 * (32 KiB, 18 KiB) per run.
 *
 * The bound, exactly: glibc memcpy, through a volatile pointer, of the
 * chunk's bytes between the chunk buffer and a contiguous region of the
 * engine pool of the same size, cycling over the pool as the subjects do,
 * so both sides touch the same amount of memory from the same buffers.
 * The subjects: kvt_conn_gather of every layer of a chunk into the chunk
 * buffer, and kvt_conn_scatter of every layer back.
 *
 * Method: as dram.c: each figure calibrates an op count that lasts at least
 * 50 ms (20 ms with --quick), then 7 rounds (3) time bound and subject back
 * to back, the order flipping every round; figures are medians over rounds,
 * ratios medians of per-round ratios.  Target: 0.9 of memcpy.  A figure
 * below target is reported, not failed; 1 means a call failed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define CMD "connector"
#define MAX_ROUNDS 7
#define BT 16
#define CT 256
#define TARGET 0.9

static void *(*volatile bound_memcpy)(void *, const void *, size_t) = memcpy;

struct shape {
	const char *model, *layout;
	uint32_t layers, heads, dim, planes;
};

static const struct shape shapes[] = {
	{ "llama3.1-8b", "vllm-flash-attn-nhd", 32, 8, 128, 2 },
	{ "deepseek-v3-mla", "vllm-mla-576", 61, 1, 576, 1 },
};
#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

enum { OP_GATHER = 0, OP_SCATTER = 1 };
static const char *const op_names[] = { "gather", "scatter" };

struct figure {
	const struct shape *s;
	int op;
	uint64_t chunk_bytes;
	long n;
	double bound[MAX_ROUNDS], subj[MAX_ROUNDS];
};

struct ctx {
	const struct shape *s;
	kvt_conn *c;
	uint8_t *pool, *chunk;
	uint32_t *table; /* n_chunks × blocks per chunk */
	uint32_t n_chunks;
	uint64_t chunk_bytes, layer_bytes;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* n ops of the bound (subject 0) or of the subject; *secs the wall time. */
static int run(struct ctx *x, int op, int subject, long n, double *secs)
{
	double t0 = now_s();

	for (long k = 0; k < n; k++) {
		uint32_t ci = (uint32_t)(k % x->n_chunks);
		uint8_t *region = x->pool + ci * x->chunk_bytes;
		const uint32_t *ids = x->table + (size_t)ci * (CT / BT);

		if (!subject) {
			if (op == OP_GATHER)
				bound_memcpy(x->chunk, region, x->chunk_bytes);
			else
				bound_memcpy(region, x->chunk, x->chunk_bytes);
			continue;
		}
		for (uint32_t l = 0; l < x->s->layers; l++) {
			uint8_t *dst = x->chunk + l * x->layer_bytes;
			int rc = op == OP_GATHER
					 ? kvt_conn_gather(x->c, l, ids, CT / BT, CT, dst, x->layer_bytes)
					 : kvt_conn_scatter(x->c, l, ids, CT / BT, CT, dst,
							    x->layer_bytes);
			if (rc)
				return bench_fail(CMD, op_names[op], rc);
		}
	}
	*secs = now_s() - t0;
	return 0;
}

static int measure(struct ctx *x, struct figure *f, int rounds, double min_s)
{
	double s = 0;
	int rc;

	/* Warm both (faults every page), then size a run from the bound. */
	if ((rc = run(x, f->op, 1, x->n_chunks, &s)) || (rc = run(x, f->op, 0, x->n_chunks, &s)))
		return rc;
	f->n = (long)ceil(min_s / (s / x->n_chunks > 1e-9 ? s / x->n_chunks : 1e-9));
	if (f->n < (long)x->n_chunks)
		f->n = x->n_chunks;
	for (int r = 0; r < rounds; r++) {
		int first = r & 1;
		for (int k = 0; k < 2; k++) {
			int subj = k ^ first;
			if ((rc = run(x, f->op, subj, f->n, subj ? &f->subj[r] : &f->bound[r])))
				return rc;
		}
	}
	return 0;
}

static int open_shape(kvt_store *st, const struct shape *s, struct ctx *x, uint32_t n_chunks)
{
	kvt_ns_desc nd = { 0 };
	kvt_ns ns;
	kvt_paged_layer *L = calloc(s->layers, sizeof(*L));
	kvt_conn_desc d = { 0 };
	uint32_t nb = n_chunks * (CT / BT);
	uint64_t plane = (uint64_t)nb * BT * s->heads * s->dim * 2;
	int rc;

	memset(x, 0, sizeof(*x));
	x->s = s;
	x->n_chunks = n_chunks;
	nd.model = s->model;
	nd.layout = (kvt_layout){ s->layers, s->heads, s->dim, KVT_DTYPE_BF16, s->planes, 0, BT, CT };
	if ((rc = kvt_ns_init(st, &nd, &ns)))
		return bench_fail(CMD, "namespace", rc);
	x->layer_bytes = kvt_layout_layer_bytes(&ns.layout);
	x->chunk_bytes = kvt_layout_payload_bytes(&ns.layout);
	x->pool = bench_buffer(plane * s->planes * s->layers);
	x->chunk = bench_buffer(x->chunk_bytes);
	x->table = malloc(nb * sizeof(*x->table));
	if (!L || !x->pool || !x->chunk || !x->table)
		return bench_fail(CMD, "engine pool", KVT_ENOMEM);
	bench_fill_random(x->pool, plane * s->planes * s->layers, 42);
	for (uint32_t l = 0; l < s->layers; l++)
		for (uint32_t p = 0; p < s->planes; p++) {
			kvt_paged_plane *pl = &L[l].plane[p];
			pl->base = x->pool + (l * s->planes + p) * plane;
			pl->block_stride = (uint64_t)BT * s->heads * s->dim * 2;
			pl->token_stride = (uint64_t)s->heads * s->dim * 2;
			pl->head_stride = (uint64_t)s->dim * 2;
			pl->elem_stride = 2;
		}
	/* A shuffled block table over the whole pool. */
	for (uint32_t i = 0; i < nb; i++)
		x->table[i] = i;
	for (uint32_t i = nb - 1, seed = 7; i > 0; i--) {
		uint32_t j = (seed = seed * 1103515245u + 12345u) % (i + 1), t = x->table[i];
		x->table[i] = x->table[j];
		x->table[j] = t;
	}
	d.layers = L;
	d.n_layer_descs = s->layers;
	d.num_blocks = nb;
	d.threads = 1;
	rc = kvt_conn_open(st, &ns, &d, &x->c);
	free(L);
	return rc ? bench_fail(CMD, "kvt_conn_open", rc) : 0;
}

static void close_shape(struct ctx *x)
{
	kvt_conn_close(x->c);
	free(x->pool);
	free(x->chunk);
	free(x->table);
}

static double gbps(const struct figure *f, double secs)
{
	return (double)f->chunk_bytes * f->n / secs / 1e9;
}

static struct summary fig_sum(const struct figure *f, const double *v, int rounds)
{
	double g[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++)
		g[r] = gbps(f, v[r]);
	return bench_summarize(g, rounds);
}

static struct summary fig_ratio(const struct figure *f, int rounds)
{
	double g[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++)
		g[r] = f->bound[r] / f->subj[r];
	return bench_summarize(g, rounds);
}

static void print_text(const struct figure *fig, int n, int rounds, double min_s)
{
	char b1[64], b2[64], b3[64];

	printf("kvtier-bench connector: %d rounds, >= %.0f ms per timed run; GB/s = 1e9 B/s\n"
	       "  %-16s %-20s %-8s %-24s %-24s %-22s %s\n", rounds, min_s * 1e3, "model",
	       "layout", "op", "memcpy GB/s", "connector GB/s", "ratio_vs_memcpy", "target");
	for (int i = 0; i < n; i++) {
		const struct figure *f = &fig[i];
		struct summary r = fig_ratio(f, rounds);
		printf("  %-16s %-20s %-8s %-24s %-24s %-22s %.2fx %s\n", f->s->model, f->s->layout,
		       op_names[f->op], bench_fmt_summary(fig_sum(f, f->bound, rounds), b1, sizeof(b1)),
		       bench_fmt_summary(fig_sum(f, f->subj, rounds), b2, sizeof(b2)),
		       bench_fmt_summary(r, b3, sizeof(b3)), TARGET,
		       r.median >= TARGET ? "ok" : "BELOW");
	}
}

static void print_json(const struct figure *fig, int n, int rounds, int quick, double min_s)
{
	printf("{\"bench\":\"connector\",\"version\":\"%s\",\"rounds\":%d,\"quick\":%s,"
	       "\"min_run_seconds\":%g,\"gbps\":\"1e9 bytes/s\",\"results\":[",
	       KVT_VERSION_STRING, rounds, quick ? "true" : "false", min_s);
	for (int i = 0; i < n; i++) {
		const struct figure *f = &fig[i];
		struct summary r = fig_ratio(f, rounds);

		printf("%s\n{\"op\":\"%s\",", i ? "," : "", op_names[f->op]);
		bench_json_str("model", f->s->model);
		printf(",");
		bench_json_str("layout", f->s->layout);
		printf(",\"layers\":%u,\"kv_heads\":%u,\"head_dim\":%u,\"planes\":%u,"
		       "\"block_tokens\":%u,\"chunk_tokens\":%u,\"chunk_bytes\":%llu,"
		       "\"ops_per_run\":%ld,",
		       f->s->layers, f->s->heads, f->s->dim, f->s->planes, BT, CT,
		       (unsigned long long)f->chunk_bytes, f->n);
		bench_json_summary("memcpy_gbps", fig_sum(f, f->bound, rounds));
		printf(",");
		bench_json_summary("subject_gbps", fig_sum(f, f->subj, rounds));
		printf(",\"ratio_vs_memcpy\":%.6g,", r.median);
		bench_json_summary("ratio_range", r);
		printf(",\"target\":%g,\"better\":\"higher\",\"pass\":%s}", TARGET,
		       r.median >= TARGET ? "true" : "false");
	}
	printf("]}\n");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench connector [--json] [--quick]\n"
		"\n"
		"The engine connector's CPU gather (paged blocks -> chunk) and scatter\n"
		"(chunk -> blocks) of a whole 256-token chunk, against memcpy of the\n"
		"same bytes: 16-token vLLM FlashAttention NHD blocks of Llama-3.1-8B\n"
		"(32 layers, 8 KV heads x 128, bf16) and an MLA latent cache (61\n"
		"layers, 576, one plane).  Block tables are shuffled over the pool.\n"
		"  --json    every figure as JSON; ratios in ratio_vs_memcpy\n"
		"  --quick   3 rounds of >= 20 ms, a pool of 2 chunks (default 7, 50 ms, 4)\n");
}

int bench_connector(int argc, char **argv)
{
	struct figure fig[N_SHAPES * 2];
	int json = 0, quick = 0, n = 0, rc = 0, err;
	kvt_config *cfg;
	kvt_store *st;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--quick")) {
			quick = 1;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "kvtier-bench " CMD ": unknown option \"%s\"\n\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	int rounds = quick ? 3 : MAX_ROUNDS;
	double min_s = quick ? 0.02 : 0.05;

	/* The connector needs a store to name its namespace; no chunk is
	 * stored by this benchmark. */
	cfg = kvt_config_new();
	if (!cfg)
		return bench_fail(CMD, "configuration", KVT_ENOMEM);
	err = kvt_config_set(cfg, "max_local_cpu_size", "8MiB");
	if (!err)
		err = kvt_config_set(cfg, "dram_lock_memory", "false");
	if (!err)
		err = kvt_config_set(cfg, "dram_prefault", "false");
	if (bench_store_open(CMD, "store", cfg, err, 0, &st))
		return 1;
	for (size_t s = 0; s < N_SHAPES && !rc; s++) {
		struct ctx x;

		if ((rc = open_shape(st, &shapes[s], &x, quick ? 2 : 4)) == 0) {
			for (int op = 0; op < 2 && !rc; op++) {
				struct figure *f = &fig[n];
				memset(f, 0, sizeof(*f));
				f->s = &shapes[s];
				f->op = op;
				f->chunk_bytes = x.chunk_bytes;
				if ((rc = measure(&x, f, rounds, min_s)) == 0)
					n++;
			}
		}
		close_shape(&x);
	}
	kvt_store_close(st);
	if (rc)
		return 1;
	if (json)
		print_json(fig, n, rounds, quick, min_s);
	else
		print_text(fig, n, rounds, min_s);
	return 0;
}
