/*
 * python.c — `kvtier-bench python`: a request's save and load through the
 * Python binding (python/kvtier over libkvtier.so, torch CPU tensors in
 * vLLM's FlashAttention NHD layout), against the C connector doing the same
 * on the same blocks in the same run.
 *
 * Shape: Llama-3.1-8B (32 layers, 8 KV heads x 128, bf16, 16-token blocks,
 * 256-token chunks of 32 MiB), a request of 4 chunks (2 with --quick) whose
 * block table is the same shuffled draw over a pool of exactly its blocks
 * on both sides.  Each side has its own DRAM store, prefaulted, of 128 MiB a
 * chunk of the request (the chunks the loads read, pinned, and room for
 * the saves' new ones).
 *
 *   save: fresh keys (kvt_key_from_engine_hash of a counter, one a chunk),
 *         kvt_conn_save_keys, kvt_conn_save_layer of every layer, wait, end:
 *         the request's blocks gathered into new chunks of the DRAM tier;
 *   load: kvt_conn_load_keys of the request's chunks (held in the DRAM
 *         tier), kvt_conn_wait_layer of every layer, end.
 *
 * The Python side is bench-data/python_bench.py, run by the project's
 * venv interpreter (KVT_BENCH_PYTHON, set by the build when .venv exists,
 * else python3; --python PATH) as a coprocess with the package the
 * build copied into bench-data/python and this build's libkvtier.so: it
 * builds the same engine through the binding (its KV tensors are views of
 * one mapping advised for huge pages, like bench_buffer's pool here: with
 * torch's own allocation, in 4 KiB pages, the load ran 0.3-1.06x in
 * the same conditions: the pages, not the binding), and runs N operations
 * when asked, answering the wall time.  Eleven rounds (3 with --quick) interleave the two sides,
 * the order flipping every round; each run lasts at least 300 ms (50 ms
 * with --quick) of the C side: a save of 128 MiB takes about that on a
 * loaded machine, and longer runs average out what other processes do.
 * ratio_vs_c_connector is the median of per-round C time / Python time: 1
 * means the binding adds nothing.  Target: 0.8.  A figure below target is
 * reported, not failed; 1 means a call failed.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CMD "python"
#define MAX_ROUNDS 11
#define BT 16
#define CT 256
#define TARGET 0.8
#define LAYERS 32
#define HEADS 8
#define DIM 128
#define DRAM_MIB_PER_CHUNK 128

enum { OP_SAVE = 0, OP_LOAD = 1, N_OPS = 2 };
static const char *const op_names[N_OPS] = { "save", "load" };

struct cside {
	kvt_store *st;
	kvt_ns ns;
	kvt_conn *c;
	uint8_t *pool;
	uint32_t *table;
	uint32_t chunks;
	kvt_key held[8];
	uint64_t seq, req;
};

struct pyside {
	pid_t pid;
	FILE *in, *out; /* its stdin (we write), its stdout (we read) */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The shuffle python_bench.py repeats: the same LCG Fisher-Yates. */
static void shuffle(uint32_t *t, uint32_t n)
{
	uint32_t seed = 7;

	for (uint32_t i = 0; i < n; i++)
		t[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (seed = seed * 1103515245u + 12345u) % (i + 1), x = t[i];
		t[i] = t[j];
		t[j] = x;
	}
}

static int fresh_keys(struct cside *x, kvt_key *keys)
{
	x->seq++;
	for (uint32_t i = 0; i < x->chunks; i++) {
		uint8_t h[32] = { 0 };
		int rc;

		memcpy(h, &x->seq, 8); /* little-endian, as python_bench.py's */
		memcpy(h + 8, &i, 4);
		if ((rc = kvt_key_from_engine_hash(&x->ns, h, sizeof(h), &keys[i])))
			return rc;
	}
	return 0;
}

static int c_save(struct cside *x, const kvt_key *keys)
{
	uint64_t req = ++x->req;
	int rc = kvt_conn_save_keys(x->c, req, keys, x->chunks, x->table, x->chunks * (CT / BT));

	if (rc != (int)x->chunks)
		return rc < 0 ? rc : KVT_EEXIST;
	for (uint32_t l = 0; l < LAYERS; l++)
		if ((rc = kvt_conn_save_layer(x->c, req, l)))
			return rc;
	if ((rc = kvt_conn_wait(x->c, req, -1)))
		return rc;
	return kvt_conn_end(x->c, req);
}

static int c_load(struct cside *x)
{
	uint64_t req = ++x->req;
	int rc = kvt_conn_load_keys(x->c, req, x->held, x->chunks, x->table,
				    x->chunks * (CT / BT), (size_t)x->chunks * CT, -1);

	for (uint32_t l = 0; !rc && l < LAYERS; l++) {
		rc = kvt_conn_wait_layer(x->c, req, l, -1);
		if (rc > 0)
			rc = KVT_ENOTFOUND; /* blocks left invalid */
	}
	return rc ? rc : kvt_conn_end(x->c, req);
}

static int c_run(struct cside *x, int op, long n, double *secs)
{
	kvt_key keys[8];
	double t0 = now_s();
	int rc = 0;

	for (long k = 0; k < n && !rc; k++) {
		if (op == OP_LOAD)
			rc = c_load(x);
		else if ((rc = fresh_keys(x, keys)) == 0)
			rc = c_save(x, keys);
	}
	*secs = now_s() - t0;
	return rc ? bench_fail(CMD, op_names[op], rc) : 0;
}

static int c_open(struct cside *x, uint32_t chunks)
{
	kvt_ns_desc nd = { 0 };
	kvt_paged_layer L[LAYERS];
	kvt_conn_desc d = { 0 };
	kvt_config *cfg = kvt_config_new();
	char dram[32];
	const char *const kv[][2] = { { "max_local_cpu_size", dram },
				      { "dram_lock_memory", "false" } };
	uint32_t nb = chunks * (CT / BT);
	uint64_t plane = (uint64_t)nb * BT * HEADS * DIM * 2;
	int rc;

	memset(x, 0, sizeof(*x));
	x->chunks = chunks;
	snprintf(dram, sizeof(dram), "%uMiB", chunks * DRAM_MIB_PER_CHUNK);
	if (!cfg)
		return bench_fail(CMD, "configuration", KVT_ENOMEM);
	if (bench_store_open(CMD, "store", cfg, bench_config_set_all(cfg, kv, 2), 0, &x->st))
		return 1;
	nd.model = "bench/python";
	nd.layout = (kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16, 2, 0, BT, CT };
	if ((rc = kvt_ns_init(x->st, &nd, &x->ns)))
		return bench_fail(CMD, "namespace", rc);
	x->pool = bench_buffer(plane * 2 * LAYERS);
	x->table = malloc(nb * sizeof(*x->table));
	if (!x->pool || !x->table)
		return bench_fail(CMD, "engine pool", KVT_ENOMEM);
	bench_fill_random(x->pool, plane * 2 * LAYERS, 42);
	/* Per layer a (2, nb, 16, 8, 128) tensor, as the Python side's. */
	memset(L, 0, sizeof(L));
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t p = 0; p < 2; p++) {
			kvt_paged_plane *pl = &L[l].plane[p];
			pl->base = x->pool + (l * 2 + p) * plane;
			pl->block_stride = (uint64_t)BT * HEADS * DIM * 2;
			pl->token_stride = (uint64_t)HEADS * DIM * 2;
			pl->head_stride = (uint64_t)DIM * 2;
			pl->elem_stride = 2;
		}
	shuffle(x->table, nb);
	d.layers = L;
	d.n_layer_descs = LAYERS;
	d.num_blocks = nb;
	d.threads = 1;
	if ((rc = kvt_conn_open(x->st, &x->ns, &d, &x->c)))
		return bench_fail(CMD, "kvt_conn_open", rc);
	if ((rc = fresh_keys(x, x->held)) || (rc = c_save(x, x->held)))
		return bench_fail(CMD, "save of the loads' chunks", rc);
	/* The saves' new chunks must not evict what the loads read. */
	for (uint32_t i = 0; i < chunks; i++)
		if ((rc = kvt_pin(x->st, &x->ns, &x->held[i], 1)))
			return bench_fail(CMD, "pin", rc);
	return 0;
}

static void c_close(struct cside *x)
{
	kvt_conn_close(x->c);
	kvt_store_close(x->st);
	free(x->pool);
	free(x->table);
}

/* Start python_bench.py and wait for its READY. */
static int py_open(struct pyside *p, const char *python, uint32_t chunks)
{
	char script[4096], pkg[4096], libp[4200], nchunks[16], dram[32], line[256];
	int in[2], out[2];

	memset(p, 0, sizeof(*p));
	if (!bench_data_path("python_bench.py", script, sizeof(script)) ||
	    !bench_data_path("python/kvtier/__init__.py", pkg, sizeof(pkg))) {
		fprintf(stderr, "kvtier-bench " CMD ": %s or the package is missing (the build "
				"copies them into bench-data)\n", script);
		return 1;
	}
	pkg[strlen(pkg) - strlen("/kvtier/__init__.py")] = '\0';
	if (bench_beside_exe("libkvtier.so", libp, sizeof(libp)))
		return bench_fail(CMD, "its own path", -ENAMETOOLONG);
	if (access(libp, R_OK)) {
		fprintf(stderr, "kvtier-bench " CMD ": %s missing (build the kvtier target)\n", libp);
		return 1;
	}
	snprintf(nchunks, sizeof(nchunks), "%u", chunks);
	snprintf(dram, sizeof(dram), "%uMiB", chunks * DRAM_MIB_PER_CHUNK);
	if (pipe(in) || pipe(out))
		return bench_fail(CMD, "pipe", -errno);
	p->pid = fork();
	if (p->pid < 0)
		return bench_fail(CMD, "fork", -errno);
	if (p->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		setenv("KVTIER_LIB", libp, 1);
		setenv("PYTHONPATH", pkg, 1);
		setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
		execlp(python, python, script, "32", "8", "128", nchunks, dram, (char *)NULL);
		fprintf(stderr, "kvtier-bench " CMD ": cannot run %s: %s\n", python,
			strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	p->in = fdopen(in[1], "w");
	p->out = fdopen(out[0], "r");
	if (!p->in || !p->out || !fgets(line, sizeof(line), p->out) ||
	    strncmp(line, "READY", 5)) {
		fprintf(stderr, "kvtier-bench " CMD ": %s %s did not start (needs torch: "
				"scripts/install-deps.sh makes .venv with it, or --python PATH)\n",
			python, script);
		return 1;
	}
	return 0;
}

static int py_run(struct pyside *p, int op, long n, double *secs)
{
	char line[128];

	fprintf(p->in, "%s %ld\n", op_names[op], n);
	fflush(p->in);
	if (!fgets(line, sizeof(line), p->out) || sscanf(line, "%lf", secs) != 1) {
		fprintf(stderr, "kvtier-bench " CMD ": the Python side failed during %s\n",
			op_names[op]);
		return 1;
	}
	return 0;
}

static void py_close(struct pyside *p)
{
	if (p->in) {
		fprintf(p->in, "quit\n");
		fclose(p->in);
	}
	if (p->out)
		fclose(p->out);
	if (p->pid > 0)
		waitpid(p->pid, NULL, 0);
}

struct figure {
	int op;
	long n;
	uint64_t bytes_per_op;
	double c[MAX_ROUNDS], py[MAX_ROUNDS];
};

static struct summary gb_sum(const struct figure *f, const double *v, int rounds)
{
	double g[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++)
		g[r] = (double)f->bytes_per_op * f->n / v[r] / 1e9;
	return bench_summarize(g, rounds);
}

static struct summary ratio_sum(const struct figure *f, int rounds)
{
	double g[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++)
		g[r] = f->c[r] / f->py[r];
	return bench_summarize(g, rounds);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench python [--json] [--quick] [--python PATH]\n"
		"\n"
		"A request's save and load through the Python binding (torch CPU tensors\n"
		"in vLLM's FlashAttention NHD layout, Llama-3.1-8B's shape) against the\n"
		"C connector on the same blocks, rounds interleaved in one run.\n"
		"  --json         every figure as JSON; ratios in ratio_vs_c_connector\n"
		"  --quick        3 rounds of >= 50 ms, 2 chunks (default 11, 300 ms, 4)\n"
		"  --python PATH  the interpreter with torch (default " KVT_BENCH_PYTHON ")\n");
}

int bench_python(int argc, char **argv)
{
	struct figure fig[N_OPS];
	const char *python = KVT_BENCH_PYTHON;
	int json = 0, quick = 0, rc = 0;
	struct cside x;
	struct pyside p;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--quick")) {
			quick = 1;
		} else if (!strcmp(argv[i], "--python")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "kvtier-bench " CMD ": --python needs a path\n");
				return 2;
			}
			python = argv[++i];
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			return bench_unknown_opt(CMD, argv[i], usage);
		}
	}
	int rounds = quick ? 3 : MAX_ROUNDS;
	double min_s = quick ? 0.05 : 0.3;
	uint32_t chunks = quick ? 2 : 4;

	signal(SIGPIPE, SIG_IGN);
	if (c_open(&x, chunks)) {
		c_close(&x);
		return 1;
	}
	if (py_open(&p, python, chunks)) {
		py_close(&p);
		c_close(&x);
		return 1;
	}
	for (int op = 0; op < N_OPS && !rc; op++) {
		struct figure *f = &fig[op];
		double s = 0;

		memset(f, 0, sizeof(*f));
		f->op = op;
		f->bytes_per_op = kvt_layout_payload_bytes(&x.ns.layout) * chunks;
		/* Warm both, then size a run from the C side. */
		if ((rc = c_run(&x, op, 2, &s)) || (rc = py_run(&p, op, 2, &s)) ||
		    (rc = c_run(&x, op, 1, &s)))
			break;
		f->n = (long)ceil(min_s / (s > 1e-9 ? s : 1e-9));
		if (f->n < 1)
			f->n = 1;
		for (int r = 0; r < rounds && !rc; r++)
			for (int k = 0; k < 2 && !rc; k++)
				rc = (k ^ (r & 1)) ? py_run(&p, op, f->n, &f->py[r])
						   : c_run(&x, op, f->n, &f->c[r]);
	}
	py_close(&p);
	c_close(&x);
	if (rc)
		return 1;
	if (json) {
		printf("{\"bench\":\"python\",\"version\":\"%s\",\"rounds\":%d,\"quick\":%s,"
		       "\"min_run_seconds\":%g,\"gbps\":\"1e9 bytes/s\",\"results\":[",
		       KVT_VERSION_STRING, rounds, quick ? "true" : "false", min_s);
		for (int i = 0; i < N_OPS; i++) {
			struct summary r = ratio_sum(&fig[i], rounds);

			printf("%s\n{\"op\":\"%s\",\"layout\":\"vllm-flash-attn-nhd\",\"layers\":%d,"
			       "\"kv_heads\":%d,\"head_dim\":%d,\"chunks\":%u,\"bytes_per_op\":%llu,"
			       "\"ops_per_run\":%ld,",
			       i ? "," : "", op_names[i], LAYERS, HEADS, DIM, chunks,
			       (unsigned long long)fig[i].bytes_per_op, fig[i].n);
			bench_json_summary("c_connector_gbps", gb_sum(&fig[i], fig[i].c, rounds));
			printf(",");
			bench_json_summary("python_gbps", gb_sum(&fig[i], fig[i].py, rounds));
			printf(",\"ratio_vs_c_connector\":%.6g,", r.median);
			bench_json_summary("ratio_range", r);
			printf(",\"target\":%g,\"better\":\"higher\",\"pass\":%s}", TARGET,
			       r.median >= TARGET ? "true" : "false");
		}
		printf("]}\n");
		return 0;
	}
	char b1[64], b2[64], b3[64];

	printf("kvtier-bench python: %d rounds, >= %.0f ms per timed run; GB/s = 1e9 B/s\n"
	       "  %-6s %-24s %-24s %-22s %s\n", rounds, min_s * 1e3, "op", "C connector GB/s",
	       "Python binding GB/s", "ratio_vs_c_connector", "target");
	for (int i = 0; i < N_OPS; i++) {
		struct summary r = ratio_sum(&fig[i], rounds);

		printf("  %-6s %-24s %-24s %-22s %.2fx %s\n", op_names[i],
		       bench_fmt_summary(gb_sum(&fig[i], fig[i].c, rounds), b1, sizeof(b1)),
		       bench_fmt_summary(gb_sum(&fig[i], fig[i].py, rounds), b2, sizeof(b2)),
		       bench_fmt_summary(r, b3, sizeof(b3)), TARGET,
		       r.median >= TARGET ? "ok" : "BELOW");
	}
	return 0;
}
