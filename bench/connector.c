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
 * buffer, and kvt_conn_scatter of every layer back.  For Llama-3.1-8B also
 * the whole load path: kvt_conn_load of a prompt whose every chunk is in
 * the DRAM tier, waited on layer by layer as an engine does, against
 * memcpy of the prompt's bytes into the pool (the chunks, borrowed from
 * the arena's pages, are scattered straight into the blocks: no staging).
 *
 * Method: as dram.c: each figure calibrates an op count that lasts at least
 * 50 ms (20 ms with --quick), then 7 rounds (3) time bound and subject back
 * to back, the order flipping every round; figures are medians over rounds,
 * ratios medians of per-round ratios.  Target: 0.9 of memcpy.  A figure
 * below target is reported, not failed; 1 means a call failed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

enum { OP_GATHER = 0, OP_SCATTER = 1, OP_LOAD = 2 };
static const char *const op_names[] = { "gather", "scatter", "load_dram" };

struct figure {
	const struct shape *s;
	int op;
	uint64_t chunk_bytes;
	uint64_t bytes_per_op; /* a chunk; the whole prompt for a load */
	long n;
	double bound[MAX_ROUNDS], subj[MAX_ROUNDS];
};

struct ctx {
	const struct shape *s;
	kvt_conn *c;
	uint8_t *pool, *chunk;
	uint32_t *table; /* n_chunks × blocks per chunk */
	uint32_t n_chunks;
	uint32_t *tokens; /* the load's prompt: n_chunks whole chunks */
	uint8_t *src;     /* the load's bound: the prompt's bytes, contiguous */
	uint64_t req;
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

	for (long k = 0; k < n && op == OP_LOAD; k++) {
		int rc;

		if (!subject) {
			bound_memcpy(x->pool, x->src, x->chunk_bytes * x->n_chunks);
			continue;
		}
		rc = kvt_conn_load(x->c, ++x->req, x->tokens, (size_t)x->n_chunks * CT, NULL,
				   x->table, (size_t)x->n_chunks * (CT / BT),
				   (size_t)x->n_chunks * CT, -1);
		for (uint32_t l = 0; !rc && l < x->s->layers; l++)
			rc = kvt_conn_wait_layer(x->c, x->req, l, -1);
		if (rc == 0)
			rc = kvt_conn_end(x->c, x->req);
		if (rc)
			return bench_fail(CMD, "load", rc > 0 ? KVT_ENOTFOUND : rc);
	}
	for (long k = 0; k < n && op != OP_LOAD; k++) {
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

static int open_shape(kvt_store *st, const struct shape *s, struct ctx *x, uint32_t n_chunks,
		      int with_load)
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
	if (rc)
		return bench_fail(CMD, "kvt_conn_open", rc);
	if (!with_load)
		return 0;
	/* The load's prompt, saved from the pool into the DRAM tier. */
	x->tokens = malloc((size_t)n_chunks * CT * sizeof(*x->tokens));
	x->src = bench_buffer(x->chunk_bytes * n_chunks);
	if (!x->tokens || !x->src)
		return bench_fail(CMD, "load prompt", KVT_ENOMEM);
	bench_fill_random(x->src, x->chunk_bytes * n_chunks, 43);
	for (size_t i = 0; i < (size_t)n_chunks * CT; i++)
		x->tokens[i] = (uint32_t)(i * 2654435761u % 128000);
	rc = kvt_conn_save(x->c, 0, x->tokens, (size_t)n_chunks * CT, NULL, x->table, nb);
	if (rc != (int)n_chunks)
		return bench_fail(CMD, "save of the load prompt", rc < 0 ? rc : KVT_EEXIST);
	if ((rc = kvt_conn_save_layer(x->c, 0, KVT_CONN_ALL_LAYERS)) ||
	    (rc = kvt_conn_wait(x->c, 0, -1)) || (rc = kvt_conn_end(x->c, 0)))
		return bench_fail(CMD, "save of the load prompt", rc);
	if (kvt_conn_lookup(x->c, x->tokens, (size_t)n_chunks * CT, NULL) !=
	    (int)(n_chunks * CT - 1))
		return bench_fail(CMD, "the load prompt is not all in the store", KVT_ENOTFOUND);
	return 0;
}

static void close_shape(struct ctx *x)
{
	kvt_conn_close(x->c);
	free(x->pool);
	free(x->chunk);
	free(x->table);
	free(x->tokens);
	free(x->src);
}

static double gbps(const struct figure *f, double secs)
{
	return (double)f->bytes_per_op * f->n / secs / 1e9;
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
	       "  %-16s %-20s %-10s %-24s %-24s %-22s %s\n", rounds, min_s * 1e3, "model",
	       "layout", "op", "memcpy GB/s", "connector GB/s", "ratio_vs_memcpy", "target");
	for (int i = 0; i < n; i++) {
		const struct figure *f = &fig[i];
		struct summary r = fig_ratio(f, rounds);
		printf("  %-16s %-20s %-10s %-24s %-24s %-22s %.2fx %s\n", f->s->model, f->s->layout,
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
		       "\"bytes_per_op\":%llu,\"ops_per_run\":%ld,",
		       f->s->layers, f->s->heads, f->s->dim, f->s->planes, BT, CT,
		       (unsigned long long)f->chunk_bytes, (unsigned long long)f->bytes_per_op, f->n);
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
		"usage: kvtier-bench connector [--json] [--quick] [--device]\n"
		"\n"
		"The engine connector's CPU gather (paged blocks -> chunk) and scatter\n"
		"(chunk -> blocks) of a whole 256-token chunk, against memcpy of the\n"
		"same bytes: 16-token vLLM FlashAttention NHD blocks of Llama-3.1-8B\n"
		"(32 layers, 8 KV heads x 128, bf16) and an MLA latent cache (61\n"
		"layers, 576, one plane).  Block tables are shuffled over the pool.\n"
		"For Llama-3.1-8B also load_dram: kvt_conn_load of a prompt held in the\n"
		"DRAM tier, waited on layer by layer, against memcpy of its bytes.\n"
		"  --device  the CUDA backend instead: one chunk between a GPU's blocks and\n"
		"            pinned host memory against cudaMemcpy (ratio_vs_cudamemcpy)\n"
		"  --json    every figure as JSON; ratios in ratio_vs_memcpy\n"
		"  --quick   3 rounds of >= 20 ms, a pool of 2 chunks (default 7, 50 ms, 4)\n");
}

/* --device: the CUDA backend against cudaMemcpy, measured from Python (torch
 * allocates the device blocks and the pinned buffer, and times cudaMemcpy
 * through the same runtime): bench-data/cuda_bench.py with this build's
 * library, run by KVT_BENCH_PYTHON (an interpreter with CUDA torch). */
static int device_bench(int json, int quick)
{
	char script[4096], pkg[4096], lib[4096];

	if (!bench_data_path("cuda_bench.py", script, sizeof(script)) ||
	    !bench_data_path("python/kvtier/__init__.py", pkg, sizeof(pkg)) ||
	    bench_beside_exe("libkvtier.so", lib, sizeof(lib))) {
		fprintf(stderr, "kvtier-bench " CMD ": bench-data/cuda_bench.py missing\n");
		return 1;
	}
	*strrchr(pkg, '/') = '\0';
	*strrchr(pkg, '/') = '\0';
	setenv("KVTIER_LIB", lib, 1);
	setenv("PYTHONPATH", pkg, 1);
	setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
	execlp(KVT_BENCH_PYTHON, KVT_BENCH_PYTHON, script, json ? "--json" : "--table",
	       quick ? "--quick" : "--full", (char *)NULL);
	fprintf(stderr, "kvtier-bench " CMD ": cannot run " KVT_BENCH_PYTHON ": %s\n",
		strerror(errno));
	return 1;
}

int bench_connector(int argc, char **argv)
{
	struct figure fig[N_SHAPES * 3];
	int json = 0, quick = 0, device = 0, n = 0, rc = 0, err;
	kvt_config *cfg;
	kvt_store *st;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--quick")) {
			quick = 1;
		} else if (!strcmp(argv[i], "--device")) {
			device = 1;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "kvtier-bench " CMD ": unknown option \"%s\"\n\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (device)
		return device_bench(json, quick);
	int rounds = quick ? 3 : MAX_ROUNDS;
	double min_s = quick ? 0.02 : 0.05;

	/* The store names the namespace and, for the load figure, holds the
	 * prompt in its DRAM tier. */
	cfg = kvt_config_new();
	if (!cfg)
		return bench_fail(CMD, "configuration", KVT_ENOMEM);
	/* Room for the load figure's prompt (4 chunks of 32 MiB) and more. */
	err = kvt_config_set(cfg, "max_local_cpu_size", "256MiB");
	if (!err)
		err = kvt_config_set(cfg, "dram_lock_memory", "false");
	if (!err)
		err = kvt_config_set(cfg, "dram_prefault", "false");
	if (bench_store_open(CMD, "store", cfg, err, 0, &st))
		return 1;
	for (size_t s = 0; s < N_SHAPES && !rc; s++) {
		struct ctx x;

		int with_load = s == 0;

		if ((rc = open_shape(st, &shapes[s], &x, quick ? 2 : 4, with_load)) == 0) {
			for (int op = 0; op < 2 + with_load && !rc; op++) {
				struct figure *f = &fig[n];
				memset(f, 0, sizeof(*f));
				f->s = &shapes[s];
				f->op = op;
				f->chunk_bytes = x.chunk_bytes;
				f->bytes_per_op = x.chunk_bytes * (op == OP_LOAD ? x.n_chunks : 1);
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
