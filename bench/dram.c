/*
 * dram.c — `kvtier-bench dram`: the DRAM tier's data path and the
 * prefix lookup, each measured against a bound run in the same process.
 *
 * A bare GB/s figure says more about the machine than about kvtier, so every
 * figure here is a ratio against the plainest way the machine does the same
 * job without kvtier (STYLE.md, habit 10).  A bound is a reference, not a
 * ceiling: a copy in page-sized pieces can beat one memcpy of the whole
 * chunk (glibc's large-copy strategy and the cache decide), so a copy ratio
 * above 1 is possible and not a bug.  The bounds, exactly:
 *
 *   memcpy  glibc memcpy(dst, src, chunk_bytes) called through a volatile
 *           pointer (so the compiler cannot drop or inline it), from one
 *           pre-faulted buffer to another of the chunk's size.  The subject
 *           copies use the same two buffers: kvt_get copies into `dst`,
 *           kvt_put copies from `src`.  Both buffers, like the DRAM arena,
 *           are 2 MiB aligned and advised MADV_HUGEPAGE, so neither side of
 *           a ratio pays TLB misses the other does not.
 *   hash    kvt_key_chain over the prompt, into a caller array of 512 keys,
 *           in the same namespace (same hash scheme) the lookup uses.
 *
 * Subjects:
 *
 *   get_copy       kvt_get of a stored chunk into `dst` (DRAM tier, no read
 *                  verification: verify_dram_reads false, the default).
 *   get_verified   the same from a second store with verify_dram_reads true:
 *                  the copy checks every layer's checksum in the same pass.
 *   put            kvt_put of a fresh key from `src`; the previous put's key
 *                  is deleted first, untimed, so the arena pages it frees are
 *                  the ones the next put reuses: warm, as in steady state.
 *   get_zero_copy  kvt_borrow + kvt_ref_iov + kvt_release; copies nothing.
 *   lookup         kvt_lookup_tokens of a 131,072-token prompt whose 512
 *                  chunks are all present, keys written to a caller array.
 *
 * Method: every measurement first warms its op (faulting every page it will
 * touch) and calibrates a fixed number of ops that lasts at least 50 ms
 * (20 ms with --quick).  Then, for 7 rounds (3), it times that many ops of
 * the bound and of each subject back to back, the order flipping every round
 * so neither side always runs on a cache the other left warm.  Each figure
 * is the median over rounds with its min and max; each ratio is the median
 * of the per-round ratios (bound and subject of one round ran under the same
 * conditions, which is the point of interleaving).
 *
 * A benchmark reports; it does not fail: a figure below its target is
 * printed as such and the exit code stays 0.  1 means something went wrong
 * (a call failed, a chunk read back differs from what was put).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "cli/cli.h"

#define CMD "dram"
#define MAX_ROUNDS 7
#define MAX_FIGURES 40

/* The lookup prompt: 512 chunks of 256 tokens. */
#define LOOKUP_CHUNK_TOKENS 256u
#define LOOKUP_CHUNKS 512u
#define LOOKUP_TOKENS (LOOKUP_CHUNK_TOKENS * LOOKUP_CHUNKS)

/* Per-rank chunks of the reference models: 256 tokens of bf16 K and V. */
#define ROW_FMT "  %-8s %-7s %-26s %-26s %-9s %-8s %s"

static const char *const chunk_models[] = {
	"qwen2.5-0.5b", /*  3 MiB */
	"qwen2.5-7b",   /* 14 MiB */
	"llama3.1-8b",  /* 32 MiB */
	"llama3.1-70b", /* 80 MiB */
};
#define N_SIZES (sizeof(chunk_models) / sizeof(chunk_models[0]))

/* The DRAM page size is a tunable; 2 MiB is the headline figure. */
static const struct {
	const char *conf;
	uint32_t bytes;
} page_sizes[] = {
	{ "2MiB", 2u << 20 },
	{ "64KiB", 64u << 10 },
};
#define N_PAGES (sizeof(page_sizes) / sizeof(page_sizes[0]))

/* Four figures per chunk size and page size, two lookups. */
_Static_assert(N_PAGES * N_SIZES * 4 + 2 <= MAX_FIGURES, "MAX_FIGURES too small");

/* glibc's memcpy, the one the library's copies call too, through a pointer
 * the compiler must load: a copy into a buffer nobody reads could otherwise
 * be dropped, and a known size could be inlined into something else. */
static void *(*volatile bound_memcpy)(void *, const void *, size_t) = memcpy;

/* Written by the zero-copy loop so the segment list is really read. */
static volatile uintptr_t zc_sink;

enum op {
	OP_GET_COPY,
	OP_GET_VERIFIED,
	OP_PUT,
	OP_GET_ZERO_COPY,
	OP_LOOKUP,
};

static const char *const op_names[] = {
	[OP_GET_COPY] = "get_copy",
	[OP_GET_VERIFIED] = "get_verified",
	[OP_PUT] = "put",
	[OP_GET_ZERO_COPY] = "get_zero_copy",
	[OP_LOOKUP] = "lookup",
};

/* One figure: seconds per op of the bound and of the subject, per round. */
struct figure {
	enum op op;
	const char *what;    /* model id, or hash scheme name for a lookup */
	uint32_t page_bytes; /* 0 for a lookup */
	uint64_t chunk_bytes;
	long n_bound, n_subj; /* ops per timed run */
	double bound[MAX_ROUNDS], subj[MAX_ROUNDS];
	double target;       /* 0: none */
	int lower_is_better; /* time ratios (subject/bound); else bandwidth */
};

struct bench {
	int json, quick, rounds;
	double min_s; /* a timed run lasts at least this */
	struct figure fig[MAX_FIGURES];
	int n_fig;
};

/* A run of `n` ops of one kind: 0 and *secs, a negative kvtier code (the
 * caller reports it), or 1 after printing what went wrong. */
typedef int (*run_fn)(void *ctx, long n, double *secs);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

/* The figure's per-round values as shown: GB/s (1e9 bytes/s) for copies,
 * microseconds per op for the rest. */
static int shows_gbps(const struct figure *f)
{
	return f->op == OP_GET_COPY || f->op == OP_GET_VERIFIED || f->op == OP_PUT;
}

static double shown(const struct figure *f, double secs)
{
	return shows_gbps(f) ? (double)f->chunk_bytes / secs / 1e9 : secs * 1e6;
}

static struct summary fig_summary(const struct figure *f, const double *secs,
				  int rounds)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < rounds; r++)
		v[r] = shown(f, secs[r]);
	return bench_summarize(v, rounds);
}

/* Ratio per round, oriented as the target is: bandwidth ratios are
 * subject/bound (higher is better), time ratios subject/bound too, but of
 * times (lower is better). */
static struct summary fig_ratio(const struct figure *f, int rounds)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < rounds; r++)
		v[r] = f->lower_is_better ? f->subj[r] / f->bound[r]
					  : f->bound[r] / f->subj[r];
	return bench_summarize(v, rounds);
}

static int fig_pass(const struct figure *f, double ratio)
{
	return f->lower_is_better ? ratio <= f->target : ratio >= f->target;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

/* The number of ops one timed run needs to last min_s.  The run before it
 * warms the op: the first put of a size faults arena pages, the first copy
 * may fault a buffer, and neither belongs in a steady-state figure. */
static int calibrate(void *ctx, run_fn fn, double min_s, long *n_out)
{
	long n = 1;
	double s = 0;
	int rc;

	if ((rc = fn(ctx, 2, &s)))
		return rc;
	for (;;) {
		if ((rc = fn(ctx, n, &s)))
			return rc;
		if (s >= min_s / 4 || n >= (1L << 28))
			break;
		n *= s < min_s / 64 ? 16 : 2;
	}
	if (s <= 0)
		s = 1e-9;
	*n_out = (long)ceil((double)n * min_s / s);
	if (*n_out < 1)
		*n_out = 1;
	return 0;
}

/* Report a run's failure: library codes through cli_fail, others were
 * printed already. */
static int run_failed(const char *what, int rc)
{
	return rc < 0 ? bench_fail(CMD, what, rc) : 1;
}

/* ------------------------------------------------------------------------ */
/* Chunk copies                                                              */
/* ------------------------------------------------------------------------ */

struct chunk_ctx {
	kvt_store *st;
	kvt_ns ns;
	kvt_store *stv;   /* verify_dram_reads true; holds get_key too */
	kvt_ns nsv;
	const uint8_t *src;
	uint8_t *dst;
	size_t bytes;
	kvt_key get_key;  /* stored once; read by get_copy and get_zero_copy */
	kvt_key put_key;  /* the last put's, deleted before the next put */
	int put_live;
	uint64_t put_seq;
	uint32_t tag;     /* keeps the keys of each size and page size apart */
};

/* Keys need not come from a token chain to be stored; a counter makes every
 * put's key fresh without hashing anything. */
static int run_memcpy(void *ctx, long n, double *secs)
{
	struct chunk_ctx *c = ctx;
	double t0 = cli_now();

	for (long i = 0; i < n; i++)
		bound_memcpy(c->dst, c->src, c->bytes);
	*secs = cli_now() - t0;
	return 0;
}

static int run_get(void *ctx, long n, double *secs)
{
	struct chunk_ctx *c = ctx;
	double t0 = cli_now();
	size_t len;
	int rc;

	for (long i = 0; i < n; i++)
		if ((rc = kvt_get(c->st, &c->ns, &c->get_key, c->dst, c->bytes, &len)))
			return rc;
	*secs = cli_now() - t0;
	return 0;
}

static int run_get_verified(void *ctx, long n, double *secs)
{
	struct chunk_ctx *c = ctx;
	double t0 = cli_now();
	size_t len;
	int rc;

	for (long i = 0; i < n; i++)
		if ((rc = kvt_get(c->stv, &c->nsv, &c->get_key, c->dst, c->bytes, &len)))
			return rc;
	*secs = cli_now() - t0;
	return 0;
}

/* Only the put is timed: the delete is how the bench keeps the arena from
 * filling, not part of what a put costs. */
static int run_put(void *ctx, long n, double *secs)
{
	struct chunk_ctx *c = ctx;
	double t = 0;
	int rc;

	for (long i = 0; i < n; i++) {
		double t0;

		if (c->put_live) {
			if ((rc = kvt_delete(c->st, &c->ns, &c->put_key)))
				return rc;
			c->put_live = 0;
		}
		bench_chunk_key(&c->put_key, c->tag, 'P', ++c->put_seq, "kvtbench");
		t0 = cli_now();
		rc = kvt_put(c->st, &c->ns, &c->put_key, c->src, c->bytes,
			     KVT_DUR_CACHED);
		t += cli_now() - t0;
		if (rc)
			return rc;
		c->put_live = 1;
	}
	*secs = t;
	return 0;
}

static int run_borrow(void *ctx, long n, double *secs)
{
	struct chunk_ctx *c = ctx;
	double t0 = cli_now();
	int rc;

	for (long i = 0; i < n; i++) {
		const struct iovec *iov;
		kvt_ref *ref;
		int n_iov;

		if ((rc = kvt_borrow(c->st, &c->ns, &c->get_key, &ref)))
			return rc;
		rc = kvt_ref_iov(ref, &iov, &n_iov);
		if (rc == 0)
			zc_sink = (uintptr_t)iov[0].iov_base;
		kvt_release(ref);
		if (rc)
			return rc;
	}
	*secs = cli_now() - t0;
	return 0;
}

/* Untimed: what the timed ops read is what was put, through both the copy
 * and the zero-copy path.  A fast wrong answer is not a result. */
static int chunk_check(struct chunk_ctx *c)
{
	const struct iovec *iov;
	kvt_ref *ref;
	size_t len = 0, off = 0;
	int n_iov, rc, bad = 0;

	for (int v = 0; v < 2; v++) {
		memset(c->dst, 0, c->bytes);
		rc = v ? kvt_get(c->stv, &c->nsv, &c->get_key, c->dst, c->bytes, &len)
		       : kvt_get(c->st, &c->ns, &c->get_key, c->dst, c->bytes, &len);
		if (rc)
			return bench_fail(CMD, "kvt_get", rc);
		if (len != c->bytes || memcmp(c->dst, c->src, c->bytes)) {
			fprintf(stderr, "kvtier-bench " CMD ": kvt_get%s returned %zu bytes that "
				"differ from the %zu put\n", v ? " (verified)" : "", len, c->bytes);
			return 1;
		}
	}
	if ((rc = kvt_borrow(c->st, &c->ns, &c->get_key, &ref)))
		return bench_fail(CMD, "kvt_borrow", rc);
	if ((rc = kvt_ref_iov(ref, &iov, &n_iov))) {
		kvt_release(ref);
		return bench_fail(CMD, "kvt_ref_iov", rc);
	}
	for (int i = 0; i < n_iov && !bad; i++) {
		if (off + iov[i].iov_len > c->bytes ||
		    memcmp(iov[i].iov_base, c->src + off, iov[i].iov_len))
			bad = 1;
		off += iov[i].iov_len;
	}
	if (off != c->bytes || kvt_ref_len(ref) != c->bytes)
		bad = 1;
	kvt_release(ref);
	if (bad) {
		fprintf(stderr, "kvtier-bench " CMD ": the borrowed segments (%zu bytes) "
			"differ from the %zu bytes put\n", off, c->bytes);
		return 1;
	}
	return 0;
}

static struct figure *fig_add(struct bench *b, enum op op, const char *what,
			      uint32_t page, uint64_t bytes, double target,
			      int lower_is_better)
{
	struct figure *f = &b->fig[b->n_fig++];

	memset(f, 0, sizeof(*f));
	f->op = op;
	f->what = what;
	f->page_bytes = page;
	f->chunk_bytes = bytes;
	f->target = target;
	f->lower_is_better = lower_is_better;
	return f;
}

/* A store whose DRAM tier has the bench's settings: explicit, so that a
 * changed default does not silently change what the figures mean. */
static int open_store(const char *size, const char *page, int verify,
		      kvt_store **st)
{
	static const char *const fixed[][2] = {
		{ "local_cpu", "true" },
		{ "dram_hugepages", "true" },
		{ "dram_lock_memory", "false" },
		{ "workers", "1" },
	};
	kvt_config *cfg = kvt_config_new();
	int rc = 0;

	if (!cfg)
		return bench_fail(CMD, "kvt_config_new", KVT_ENOMEM);
	rc = bench_config_set_all(cfg, fixed, sizeof(fixed) / sizeof(fixed[0]));
	if (!rc)
		rc = kvt_config_set(cfg, "max_local_cpu_size", size);
	if (!rc)
		rc = kvt_config_set(cfg, "dram_page_size", page);
	if (!rc)
		rc = kvt_config_set(cfg, "verify_dram_reads", verify ? "true" : "false");
	return bench_store_open(CMD, "kvt_store_open", cfg, rc, 0, st);
}

/* One chunk size on one store (and its verifying twin `stv`): get_copy,
 * get_verified, put and get_zero_copy against memcpy, interleaved over the
 * rounds. */
static int bench_size(struct bench *b, kvt_store *st, kvt_store *stv,
		      uint32_t page, const kvt_ns_desc *d, const uint8_t *src,
		      uint8_t *dst, uint32_t tag)
{
	struct chunk_ctx c = { .st = st, .stv = stv, .src = src, .dst = dst, .tag = tag };
	struct figure *fg, *fv, *fp, *fz;
	long n_mem, n_get, n_getv, n_put, n_zc;
	int rc, ret = 1;

	if ((rc = kvt_ns_init(st, d, &c.ns)) || (rc = kvt_ns_init(stv, d, &c.nsv)))
		return bench_fail(CMD, d->model, rc);
	c.bytes = (size_t)kvt_layout_payload_bytes(&d->layout);
	bench_chunk_key(&c.get_key, tag, 'G', 0, "kvtbench");
	if ((rc = kvt_put(st, &c.ns, &c.get_key, src, c.bytes, KVT_DUR_CACHED)) ||
	    (rc = kvt_put(stv, &c.nsv, &c.get_key, src, c.bytes, KVT_DUR_CACHED))) {
		bench_fail(CMD, "kvt_put", rc);
		goto out;
	}
	if (chunk_check(&c))
		goto out;

	if ((rc = calibrate(&c, run_memcpy, b->min_s, &n_mem)) ||
	    (rc = calibrate(&c, run_get, b->min_s, &n_get)) ||
	    (rc = calibrate(&c, run_get_verified, b->min_s, &n_getv)) ||
	    (rc = calibrate(&c, run_put, b->min_s, &n_put)) ||
	    (rc = calibrate(&c, run_borrow, b->min_s, &n_zc))) {
		run_failed("warm-up", rc);
		goto out;
	}
	fg = fig_add(b, OP_GET_COPY, d->model, page, c.bytes, 0.9, 0);
	fv = fig_add(b, OP_GET_VERIFIED, d->model, page, c.bytes, 0.9, 0);
	fp = fig_add(b, OP_PUT, d->model, page, c.bytes, 0.8, 0);
	/* Zero-copy has no target: the figure to read is bytes_copied 0
	 * and a time that does not grow with the chunk. */
	fz = fig_add(b, OP_GET_ZERO_COPY, d->model, page, c.bytes, 0, 1);
	fg->n_bound = fv->n_bound = fp->n_bound = fz->n_bound = n_mem;
	fg->n_subj = n_get;
	fv->n_subj = n_getv;
	fp->n_subj = n_put;
	fz->n_subj = n_zc;

	for (int r = 0; r < b->rounds; r++) {
		double s_mem = 0, s_get = 0, s_getv = 0, s_put = 0, s_zc = 0;
		int bound_last = r % 2;

		if (!bound_last && (rc = run_memcpy(&c, n_mem, &s_mem)))
			break;
		if ((rc = run_get(&c, n_get, &s_get)) ||
		    (rc = run_get_verified(&c, n_getv, &s_getv)) ||
		    (rc = run_put(&c, n_put, &s_put)) ||
		    (rc = run_borrow(&c, n_zc, &s_zc)))
			break;
		if (bound_last && (rc = run_memcpy(&c, n_mem, &s_mem)))
			break;
		fg->bound[r] = fv->bound[r] = fp->bound[r] = fz->bound[r] =
			s_mem / (double)n_mem;
		fg->subj[r] = s_get / (double)n_get;
		fv->subj[r] = s_getv / (double)n_getv;
		fp->subj[r] = s_put / (double)n_put;
		fz->subj[r] = s_zc / (double)n_zc;
	}
	if (rc) {
		run_failed("timed run", rc);
		goto out;
	}
	ret = 0;
out:
	/* Leave the arena empty for the next size. */
	kvt_delete(st, &c.ns, &c.get_key);
	kvt_delete(stv, &c.nsv, &c.get_key);
	if (c.put_live)
		kvt_delete(st, &c.ns, &c.put_key);
	return ret;
}

/* A buffer the size of the largest chunk, huge-page advised like the arena
 * and faulted in (written) before anything is timed. */
static int bench_chunks(struct bench *b)
{
	kvt_ns_desc d[N_SIZES];
	uint64_t max = 0;
	uint8_t *src = NULL, *dst = NULL;
	int ret = 1;

	for (size_t i = 0; i < N_SIZES; i++) {
		uint64_t n;
		if (bench_chunk_desc(CMD, chunk_models[i], &d[i]))
			return 1;
		n = kvt_layout_payload_bytes(&d[i].layout);
		if (n == 0)
			return bench_fail(CMD, d[i].model, kvt_layout_check(&d[i].layout));
		if (n > max)
			max = n;
	}
	src = bench_buffer((size_t)max);
	dst = bench_buffer((size_t)max);
	if (!src || !dst) {
		bench_fail(CMD, "buffers", KVT_ENOMEM);
		goto out;
	}
	/* Bytes that look like data (no run of zeros a page could share). */
	for (uint64_t i = 0, x = 0x9e3779b97f4a7c15ull; i + 8 <= max; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(src + i, &x, 8);
	}

	for (size_t p = 0; p < N_PAGES; p++) {
		kvt_store *st, *stv;
		int bad = 0;

		if (open_store("512MiB", page_sizes[p].conf, 0, &st))
			goto out;
		if (open_store("512MiB", page_sizes[p].conf, 1, &stv)) {
			kvt_store_close(st);
			goto out;
		}
		for (size_t i = 0; i < N_SIZES && !bad; i++)
			bad = bench_size(b, st, stv, page_sizes[p].bytes, &d[i], src, dst,
					 (uint32_t)(p * N_SIZES + i));
		kvt_store_close(st);
		kvt_store_close(stv);
		if (bad)
			goto out;
	}
	ret = 0;
out:
	free(src);
	free(dst);
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                    */
/* ------------------------------------------------------------------------ */

struct lookup_ctx {
	kvt_store *st;
	kvt_ns ns;
	const uint32_t *tokens;
	kvt_key *keys;
};

static int run_hash(void *ctx, long n, double *secs)
{
	struct lookup_ctx *c = ctx;
	double t0 = cli_now();

	for (long i = 0; i < n; i++) {
		int rc = kvt_key_chain(&c->ns, c->tokens, LOOKUP_TOKENS, NULL,
				       c->keys, LOOKUP_CHUNKS);
		if (rc < 0)
			return rc;
	}
	*secs = cli_now() - t0;
	return 0;
}

static int run_lookup(void *ctx, long n, double *secs)
{
	struct lookup_ctx *c = ctx;
	double t0 = cli_now();

	for (long i = 0; i < n; i++) {
		kvt_lookup_result res = { 0 };
		int rc = kvt_lookup_tokens(c->st, &c->ns, c->tokens, LOOKUP_TOKENS,
					   NULL, c->keys, LOOKUP_CHUNKS, &res);
		if (rc < 0)
			return rc;
		if (rc != (int)LOOKUP_CHUNKS) {
			fprintf(stderr, "kvtier-bench " CMD ": lookup found %d of the %u "
				"chunks stored\n", rc, LOOKUP_CHUNKS);
			return 1;
		}
	}
	*secs = cli_now() - t0;
	return 0;
}

/*
 * The lookup's cost does not depend on the chunks' size, so a tiny layout
 * (1 layer x 1 head x 8 dims x 256 tokens, f16, one plane: 4 KiB, one 8 KiB
 * page with its header) lets all 512 chunks be present in 4 MiB instead of
 * the gigabytes real chunks would take.  Both schemes are in one store and
 * run interleaved round by round.
 */
static int bench_lookup(struct bench *b)
{
	static const struct {
		uint32_t scheme;
		const char *name;
	} schemes[] = {
		{ KVT_HASH_SHA256, "sha256" },
		{ KVT_HASH_XXH3, "xxh3" },
	};
	struct lookup_ctx c[2];
	struct figure *f[2];
	uint32_t *tokens = malloc(sizeof(*tokens) * LOOKUP_TOKENS);
	kvt_key *keys = malloc(sizeof(*keys) * LOOKUP_CHUNKS);
	uint8_t payload[4096];
	kvt_store *st = NULL;
	long n_hash[2], n_look[2];
	int rc = 0, ret = 1;

	if (!tokens || !keys) {
		bench_fail(CMD, "token buffers", KVT_ENOMEM);
		goto out;
	}
	/* Token ids spread over a 152k vocabulary, fixed from run to run. */
	for (uint32_t i = 0, x = 2463534242u; i < LOOKUP_TOKENS; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		tokens[i] = x % 152064u;
	}
	memset(payload, 0x5a, sizeof(payload));
	if (open_store("32MiB", "8KiB", 0, &st))
		goto out;

	for (int s = 0; s < 2; s++) {
		kvt_ns_desc d = {
			.model = "kvtier/bench-lookup",
			.layout = { .num_layers = 1, .num_kv_heads = 1, .head_dim = 8,
				    .dtype = KVT_DTYPE_F16, .kv_planes = 1,
				    .block_size = 16,
				    .chunk_tokens = LOOKUP_CHUNK_TOKENS },
			.tp_size = 1,
			.pp_size = 1,
			.hash_scheme = schemes[s].scheme,
		};

		c[s].st = st;
		c[s].tokens = tokens;
		c[s].keys = keys;
		if ((rc = kvt_ns_init(st, &d, &c[s].ns))) {
			bench_fail(CMD, "lookup namespace", rc);
			goto out;
		}
		if (kvt_layout_payload_bytes(&d.layout) != sizeof(payload)) {
			fprintf(stderr, "kvtier-bench " CMD ": lookup layout is not 4 KiB\n");
			goto out;
		}
		rc = kvt_key_chain(&c[s].ns, tokens, LOOKUP_TOKENS, NULL, keys,
				   LOOKUP_CHUNKS);
		if (rc != (int)LOOKUP_CHUNKS) {
			bench_fail(CMD, "kvt_key_chain", rc < 0 ? rc : KVT_EINVAL);
			goto out;
		}
		for (uint32_t i = 0; i < LOOKUP_CHUNKS; i++) {
			rc = kvt_put(st, &c[s].ns, &keys[i], payload, sizeof(payload),
				     KVT_DUR_CACHED);
			if (rc && rc != KVT_EEXIST) {
				bench_fail(CMD, "kvt_put (lookup chunks)", rc);
				goto out;
			}
		}
		if ((rc = calibrate(&c[s], run_hash, b->min_s, &n_hash[s])) ||
		    (rc = calibrate(&c[s], run_lookup, b->min_s, &n_look[s]))) {
			run_failed("lookup warm-up", rc);
			goto out;
		}
		f[s] = fig_add(b, OP_LOOKUP, schemes[s].name, 0, 0, 2.0, 1);
		f[s]->n_bound = n_hash[s];
		f[s]->n_subj = n_look[s];
	}

	for (int r = 0; r < b->rounds; r++) {
		for (int s = 0; s < 2; s++) {
			double sh = 0, sl = 0;

			if (r % 2 == 0) {
				if (!(rc = run_hash(&c[s], n_hash[s], &sh)))
					rc = run_lookup(&c[s], n_look[s], &sl);
			} else {
				if (!(rc = run_lookup(&c[s], n_look[s], &sl)))
					rc = run_hash(&c[s], n_hash[s], &sh);
			}
			if (rc) {
				run_failed("lookup run", rc);
				goto out;
			}
			f[s]->bound[r] = sh / (double)n_hash[s];
			f[s]->subj[r] = sl / (double)n_look[s];
		}
	}
	ret = 0;
out:
	kvt_store_close(st);
	free(tokens);
	free(keys);
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Reports                                                                   */
/* ------------------------------------------------------------------------ */

static const char *fmt_size(uint64_t n, char *buf, size_t cap)
{
	if (n && n % (1u << 20) == 0)
		snprintf(buf, cap, "%llu MiB", (unsigned long long)(n >> 20));
	else if (n && n % 1024 == 0)
		snprintf(buf, cap, "%llu KiB", (unsigned long long)(n >> 10));
	else
		snprintf(buf, cap, "%llu B", (unsigned long long)n);
	return buf;
}


static void print_table(const struct bench *b)
{
	static const struct {
		enum op op;
		const char *title;
		const char *bound, *subj, *unit;
	} sections[] = {
		{ OP_GET_COPY, "get_copy: kvt_get into a caller buffer",
		  "memcpy", "kvt_get", "GB/s" },
		{ OP_GET_VERIFIED,
		  "get_verified: kvt_get, every layer's checksum verified as it is copied",
		  "memcpy", "kvt_get", "GB/s" },
		{ OP_PUT, "put: kvt_put (copy in + checksum) of a fresh key",
		  "memcpy", "kvt_put", "GB/s" },
		{ OP_GET_ZERO_COPY,
		  "get_zero_copy: kvt_borrow + kvt_ref_iov + kvt_release, 0 bytes copied",
		  "memcpy", "borrow", "us/op" },
		{ OP_LOOKUP,
		  "lookup: kvt_lookup_tokens, 131072 tokens, 512 chunks all present",
		  "kvt_key_chain", "lookup", "us/op" },
	};

	printf("kvtier-bench dram: %d rounds, >= %.0f ms per timed run; each figure\n"
	       "is the median [min..max] over rounds, each ratio the median of the\n"
	       "per-round ratios (bound and subject alternate within a round).\n"
	       "GB/s = 1e9 bytes/s.  Store: DRAM tier of 512 MiB, hugepages, unlocked.\n",
	       b->rounds, b->min_s * 1e3);
	for (size_t k = 0; k < sizeof(sections) / sizeof(sections[0]); k++) {
		char h1[40], h2[40];

		printf("\n%s\n", sections[k].title);
		snprintf(h1, sizeof(h1), "%s %s", sections[k].bound, sections[k].unit);
		snprintf(h2, sizeof(h2), "%s %s", sections[k].subj, sections[k].unit);
		bench_print_row(ROW_FMT, sections[k].op == OP_LOOKUP ? "hash" : "chunk",
			  sections[k].op == OP_LOOKUP ? "" : "page", h1, h2, "ratio",
			  "target", "");
		for (int i = 0; i < b->n_fig; i++) {
			const struct figure *f = &b->fig[i];
			struct summary r;
			char c1[32], c2[32], a[40], s[40], rt[24], tg[16];

			if (f->op != sections[k].op)
				continue;
			r = fig_ratio(f, b->rounds);
			snprintf(rt, sizeof(rt), r.median < 0.01 ? "%.5fx" : "%.3fx",
				 r.median);
			if (f->target > 0)
				snprintf(tg, sizeof(tg), "%s%.2fx",
					 f->lower_is_better ? "<=" : ">=", f->target);
			else
				snprintf(tg, sizeof(tg), "-");
			bench_print_row(ROW_FMT, f->op == OP_LOOKUP ? f->what
						     : fmt_size(f->chunk_bytes, c1, sizeof(c1)),
				  f->op == OP_LOOKUP ? ""
						     : fmt_size(f->page_bytes, c2, sizeof(c2)),
				  bench_fmt_summary(fig_summary(f, f->bound, b->rounds), a, sizeof(a)),
				  bench_fmt_summary(fig_summary(f, f->subj, b->rounds), s, sizeof(s)),
				  rt, tg,
				  f->target <= 0 ? ""
				  : fig_pass(f, r.median) ? "PASS"
				  : f->lower_is_better ? "ABOVE" : "BELOW");
		}
	}
}

/* Names and model ids are the bench's own constants: nothing to escape. */
static void json_figure(const struct bench *b, const struct figure *f)
{
	struct summary r = fig_ratio(f, b->rounds);
	const char *bound = f->op == OP_LOOKUP ? "hash" : "memcpy";
	char name[32];

	printf("{\"op\":\"%s\",", op_names[f->op]);
	if (f->op == OP_LOOKUP) {
		printf("\"hash\":\"%s\",\"tokens\":%u,\"chunk_tokens\":%u,"
		       "\"chunks\":%u,\"hits\":%u,",
		       f->what, LOOKUP_TOKENS, LOOKUP_CHUNK_TOKENS, LOOKUP_CHUNKS,
		       LOOKUP_CHUNKS);
	} else {
		printf("\"model\":\"%s\",\"chunk_bytes\":%llu,\"page_bytes\":%u,",
		       f->what, (unsigned long long)f->chunk_bytes, f->page_bytes);
	}
	printf("\"ops_per_run\":{\"bound\":%ld,\"subject\":%ld},", f->n_bound,
	       f->n_subj);
	snprintf(name, sizeof(name), "%s_%s", bound, shows_gbps(f) ? "gbps" : "us");
	bench_json_summary(name, fig_summary(f, f->bound, b->rounds));
	putchar(',');
	bench_json_summary(shows_gbps(f) ? "subject_gbps" : "subject_us",
		     fig_summary(f, f->subj, b->rounds));
	if (f->op == OP_GET_ZERO_COPY)
		printf(",\"bytes_copied\":0");
	if (f->op == OP_GET_VERIFIED)
		printf(",\"verify_dram_reads\":true");
	printf(",\"ratio_vs_%s\":%.6g,", bound, r.median);
	bench_json_summary("ratio_range", r);
	if (f->target > 0)
		printf(",\"target\":%.6g,\"better\":\"%s\",\"pass\":%s}", f->target,
		       f->lower_is_better ? "lower" : "higher",
		       fig_pass(f, r.median) ? "true" : "false");
	else
		printf(",\"target\":null,\"better\":\"%s\",\"pass\":null}",
		       f->lower_is_better ? "lower" : "higher");
}

static void print_json(const struct bench *b)
{
	int first = 1;

	printf("{\"bench\":\"dram\",\"version\":\"%s\",\"rounds\":%d,\"quick\":%s,"
	       "\"min_run_seconds\":%.6g,\"gbps\":\"1e9 bytes/s\","
	       "\"store\":{\"max_local_cpu_size\":%llu,\"dram_hugepages\":true,"
	       "\"dram_lock_memory\":false,\"verify_dram_reads\":false,\"workers\":1},"
	       "\"results\":[",
	       KVT_VERSION_STRING, b->rounds, b->quick ? "true" : "false", b->min_s,
	       512ull << 20);
	for (int i = 0; i < b->n_fig; i++) {
		if (b->fig[i].op == OP_LOOKUP)
			continue;
		printf("%s\n", first ? "" : ",");
		json_figure(b, &b->fig[i]);
		first = 0;
	}
	printf("]");
	/* The SHA-256 lookup is "lookup"; other schemes "lookup_<scheme>". */
	for (int i = 0; i < b->n_fig; i++) {
		const struct figure *f = &b->fig[i];

		if (f->op != OP_LOOKUP)
			continue;
		if (!strcmp(f->what, "sha256"))
			printf(",\n\"lookup\":");
		else
			printf(",\n\"lookup_%s\":", f->what);
		json_figure(b, f);
	}
	printf("}\n");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench dram [--json] [--quick]\n"
		"\n"
		"Measures the DRAM tier and the prefix lookup, each as a ratio against a\n"
		"bound timed in the same run, interleaved with it round by round.\n"
		"\n"
		"  get_copy       kvt_get into a caller buffer     vs memcpy     target >= 0.9x\n"
		"  get_verified   the same, checksums verified     vs memcpy     target >= 0.9x\n"
		"  put            kvt_put (copy + checksum)        vs memcpy     target >= 0.8x\n"
		"  get_zero_copy  kvt_borrow+kvt_ref_iov+release   vs memcpy     (no target)\n"
		"  lookup         kvt_lookup_tokens, 512 chunks    vs hashing    target <= 2x\n"
		"\n"
		"Chunks are 256 bf16 tokens of K and V per rank of Qwen2.5-0.5B (3 MiB),\n"
		"Qwen2.5-7B (14 MiB), Llama-3.1-8B (32 MiB) and Llama-3.1-70B (80 MiB), in\n"
		"a 512 MiB DRAM tier with 2 MiB pages (the headline) and 64 KiB pages.\n"
		"\n"
		"The bounds, exactly:\n"
		"  memcpy   glibc memcpy(dst, src, chunk bytes) between two pre-faulted,\n"
		"           huge-page-advised buffers; kvt_get copies into the same dst and\n"
		"           kvt_put copies from the same src.  Copy ratios are bandwidth\n"
		"           ratios (higher is better); the zero-copy ratio is a time ratio,\n"
		"           its time per call over one memcpy of the chunk.\n"
		"  hash     kvt_key_chain of the same 131072 tokens in the same namespace\n"
		"           (SHA-256, then again for XXH3); the ratio is lookup time over\n"
		"           hash time (lower is better).\n"
		"\n"
		"  --json    print every figure as one JSON object; ratios are in fields\n"
		"            named ratio_vs_<bound> (ratio_vs_memcpy, ratio_vs_hash)\n"
		"  --quick   3 rounds of >= 20 ms runs instead of 7 of >= 50 ms\n"
		"\n"
		"Figures are medians [min..max] over rounds.  A figure short of its target\n"
		"is reported, not an error: the exit code is 0 unless something failed.\n");
}

int bench_dram(int argc, char **argv)
{
	struct bench *b = calloc(1, sizeof(*b));
	int ret;

	if (!b)
		return bench_fail(CMD, "setup", KVT_ENOMEM);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			b->json = 1;
		} else if (!strcmp(argv[i], "--quick")) {
			b->quick = 1;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			free(b);
			return 0;
		} else {
			fprintf(stderr, "kvtier-bench " CMD ": unknown option \"%s\"\n\n", argv[i]);
			usage(stderr);
			free(b);
			return 2;
		}
	}
	b->rounds = b->quick ? 3 : MAX_ROUNDS;
	b->min_s = b->quick ? 0.020 : 0.050;

	ret = bench_chunks(b);
	if (!ret)
		ret = bench_lookup(b);
	if (!ret) {
		if (b->json)
			print_json(b);
		else
			print_table(b);
	}
	free(b);
	return ret;
}
