/*
 * test_llama.c — llama.cpp saves and reloads its KV through kvtier.
 *
 * A random-weight model of llama.cpp's `llama` architecture (written here,
 * tests/llama/gguf_write.c) runs on the CPU through the llama.cpp libraries
 * of tests/llama/node_modules, with flash attention on and off.  For each
 * tier (DRAM alone; NVMe, the shared directory and S3 below a DRAM tier the
 * chunks have been evicted from), a prompt is prefilled through the adapter
 * and stored, then requests that share a prefix with it are served from
 * that tier.  Each must give logits bit-identical to a recompute that feeds
 * llama.cpp the same batches (the restored prefix, then the rest): at a
 * chunk boundary, with a partial last chunk, on a full hit (one token
 * decoded), with a middle chunk deleted (the prefix ends there) and with a
 * chunk corrupted on the tier's medium (detected, counted, recomputed).
 * Against one single-batch prefill of the whole prompt the CPU matmuls may
 * round differently, so the largest difference is printed instead.
 *
 * The S3 tier runs against tests/s3's SigV4-checking server.  Fails when
 * the packages are missing after configuring found them; skipped (77) by
 * CMake's own test when they were not installed.
 */
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <sys/stat.h>

#include "test_s3_server.h"
#include "gguf_write.h"
#include "kvt_llama.h"

#define CHUNK 16
#define N_VOCAB 512

enum { T_DRAM, T_NVME, T_FSDIR, T_S3, T_N };
static const char *const tier_name[T_N] = { "dram", "nvme", "shared_fs", "s3" };

static char root[] = "/tmp/kvt_llama_XXXXXX";
static struct llama_model *model;
static uint64_t rng = 12345;
static int quiet_logs = 1;

static void llama_quiet(enum ggml_log_level level, const char *text, void *arg)
{
	(void)arg;
	if (!quiet_logs || level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

/* The adapter's log lines: counted, and shown. */
static int adapter_lines;
static char last_line[512];

static void adapter_log(void *arg, const char *line)
{
	(void)arg;
	adapter_lines++;
	snprintf(last_line, sizeof(last_line), "%s", line);
	fprintf(stderr, "  adapter: %s\n", line);
}

static llama_token next_token(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (llama_token)(rng % N_VOCAB);
}

static void fill_tokens(llama_token *t, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		t[i] = next_token();
}

static kvt_store *open_store(int tier, int fa)
{
	kvt_config *c = kvt_config_new();
	char path[512];
	kvt_store *st;
	int err = 0;

	/* The smallest DRAM tier, which evict_dram's filler overflows. */
	CHECK_EQ(kvt_config_set(c, "chunk_size", "16"), 0);
	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "1MiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_page_size", "4KiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_prefault", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "verify_dram_reads", "true"), 0);
	if (tier == T_NVME) {
		snprintf(path, sizeof(path), "%s/nvme-%d", root, fa);
		CHECK_EQ(kvt_config_set(c, "local_disk", path), 0);
		CHECK_EQ(kvt_config_set(c, "max_local_disk_size", "64MiB"), 0);
	} else if (tier == T_FSDIR) {
		snprintf(path, sizeof(path), "%s/shared-%d", root, fa);
		CHECK_EQ(kvt_config_set(c, "shared_fs", path), 0);
		CHECK_EQ(kvt_config_set(c, "max_shared_fs_size", "64MiB"), 0);
	} else if (tier == T_S3) {
		snprintf(path, sizeof(path), "s3://kvt/llama-%d/", fa);
		CHECK_EQ(kvt_config_set(c, "remote_url", path), 0);
		CHECK_EQ(kvt_config_set(c, "s3_endpoint", s3t_endpoint), 0);
		CHECK_EQ(kvt_config_set(c, "s3_region", "us-east-1"), 0);
		CHECK_EQ(kvt_config_set(c, "s3_admission", "always"), 0);
	}
	st = kvt_store_open(c, &err);
	if (!st)
		fprintf(stderr, "store for %s: %s (%s)\n", tier_name[tier], kvt_strerror(err),
			kvt_errmsg());
	kvt_config_free(c);
	return st;
}

static struct llama_context *new_context(int fa)
{
	struct llama_context_params cp = llama_context_default_params();

	cp.n_ctx = 256;
	cp.n_batch = 256;
	cp.n_ubatch = 256;
	cp.n_seq_max = 1;
	cp.n_threads = 1;
	cp.n_threads_batch = 1;
	cp.no_perf = true;
	cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
	return llama_init_from_model(model, cp);
}

/* Logits of the last `n` decoded tokens of the last llama_decode. */
static float *copy_logits(struct llama_context *ctx, uint32_t n)
{
	float *out = malloc((size_t)n * N_VOCAB * sizeof(float));
	uint32_t i;

	for (i = 0; out && i < n; i++)
		memcpy(out + (size_t)i * N_VOCAB, llama_get_logits_ith(ctx, (int32_t)i),
		       N_VOCAB * sizeof(float));
	return out;
}

typedef struct env {
	int fa, tier;
	kvt_store *st;
	struct llama_context *ctx;
	kvt_llama *ad;
} env;

/* Decode the prefix the way the chunks were made (`src`, one batch of
 * `src_n` tokens, cut back to `restored`; or `restored` tokens as one
 * batch when `src` is NULL), then the rest: the logits of the rest. */
static float *recompute(env *e, const llama_token *tok, size_t n, uint32_t restored,
			const llama_token *src, size_t src_n)
{
	llama_memory_t mem = llama_get_memory(e->ctx);

	llama_memory_clear(mem, true);
	if (restored && src) {
		CHECK(!memcmp(src, tok, restored * sizeof(*tok)));
		CHECK_EQ(kvt_llama_decode(e->ctx, 0, src, src_n, 0, 0), 0);
		CHECK(llama_memory_seq_rm(mem, 0, (llama_pos)restored, -1));
	} else if (restored) {
		CHECK_EQ(kvt_llama_decode(e->ctx, 0, tok, restored, 0, 0), 0);
	}
	CHECK_EQ(kvt_llama_decode(e->ctx, 0, tok + restored, n - restored,
				  (llama_pos)restored, 1), 0);
	return copy_logits(e->ctx, (uint32_t)(n - restored));
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	size_t i;

	for (i = 0; a && b && i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (d > m || isnan(d))
			m = d;
	}
	return m;
}

/*
 * Prefill `tok` through the adapter and compare its logits with
 * recomputes.  The chunks it restores were made by one batch of
 * src[0..src_n) (the request that stored them): the recompute feeds
 * llama.cpp that batch, cut back to the restored length, then the rest,
 * and the logits must be bit-identical.  Without flash attention the K and
 * V of a token do not depend on the batch it was decoded in, so a
 * recompute of just the restored prefix as one batch must match too.
 * Against one batch of the whole prompt the largest difference is printed.
 * `want_restored` is what must come from the store.  With flash attention
 * and chunks of several origins (`src` NULL) only the bound is checked.
 */
static kvt_llama_result request(env *e, const char *what, const llama_token *tok, size_t n,
				int want_restored, const llama_token *src, size_t src_n)
{
	kvt_llama_result r;
	float *got, *same, *plain, *whole;
	double d_plain, d_whole;
	size_t cnt;
	int identical;

	CHECK_EQ(kvt_llama_prefill(e->ad, 0, tok, n, &r), 0);
	if ((int)r.restored != want_restored) {
		fprintf(stderr, "%s: %s/fa=%d: restored %u tokens, want %d\n", what,
			tier_name[e->tier], e->fa, r.restored, want_restored);
		CHECK(0);
	}
	CHECK_EQ(r.computed, n - r.restored);
	cnt = (size_t)r.computed * N_VOCAB;
	got = copy_logits(e->ctx, r.computed);
	same = recompute(e, tok, n, r.restored, src, src_n);
	plain = recompute(e, tok, n, r.restored, NULL, 0);
	whole = recompute(e, tok, n, 0, NULL, 0);
	identical = got && same && !memcmp(got, same, cnt * sizeof(float));
	if (!identical && !(e->fa && !src && r.restored)) {
		fprintf(stderr, "%s: %s/fa=%d: logits differ from the recompute of the same "
			"batches by up to %.3g\n", what, tier_name[e->tier], e->fa,
			max_diff(got, same, cnt));
		CHECK(0);
	}
	d_plain = max_diff(got, plain, cnt);
	d_whole = whole ? max_diff(got, whole + (size_t)r.restored * N_VOCAB, cnt) : 1e9;
	if (!e->fa)
		CHECK(d_plain == 0);
	/* Random weights give logits of order one: rounding is far below. */
	CHECK(d_whole < 1e-2);
	fprintf(stderr, "  %-9s fa=%d %-22s hit %u, restored %2u, computed %2u, stored %u: "
		"%s; max |diff| vs prefix alone %.2g, vs one batch %.2g\n",
		tier_name[e->tier], e->fa, what, r.hit_chunks, r.restored, r.computed,
		r.stored, identical ? "bit-identical" : "n/a (mixed origins)", d_plain, d_whole);
	free(got);
	free(same);
	free(plain);
	free(whole);
	llama_memory_clear(llama_get_memory(e->ctx), true);
	return r;
}

/* Put 1.5 MiB of other chunks (a namespace of 256 KiB chunks) so that the
 * 1 MiB DRAM tier drops `keys`, which stay in the tier below. */
static void evict_dram(env *e, const kvt_key *keys, int n)
{
	kvt_ns_desc d = { .model = "kvtier-test/filler", .tp_size = 1, .pp_size = 1,
			  .layout = { .num_layers = 1, .num_kv_heads = 8, .head_dim = 128,
				      .dtype = KVT_DTYPE_F16, .kv_planes = 2,
				      .chunk_tokens = 64 } };
	kvt_ns fns;
	uint64_t len;
	uint8_t *p;
	kvt_key k;
	uint32_t mask;
	int i;

	CHECK_EQ(kvt_ns_init(e->st, &d, &fns), 0);
	len = kvt_layout_payload_bytes(&fns.layout);
	p = calloc(1, len);
	for (i = 0; i < 6 && p; i++) {
		memset(&k, 0, sizeof(k));
		k.b[0] = (uint8_t)i;
		k.b[1] = (uint8_t)(next_token() & 0xff);
		k.b[2] = (uint8_t)(next_token() & 0xff);
		CHECK_EQ(kvt_put(e->st, &fns, &k, p, len, KVT_DUR_CRASH_SAFE), 0);
	}
	free(p);
	CHECK_EQ(kvt_store_flush(e->st, 10000), 0);
	for (i = 0; i < n; i++) {
		mask = 0;
		kvt_locate(e->st, kvt_llama_ns(e->ad), &keys[i], &mask);
		if (mask != 2u) {
			fprintf(stderr, "chunk %d: in tiers 0x%x after eviction, want only %s\n",
				i, mask, tier_name[e->tier]);
			CHECK(0);
		}
	}
}

static uint64_t tier_counter(env *e, int corrupt)
{
	kvt_tier_stats s;
	int t = e->tier == T_DRAM ? 0 : 1;

	memset(&s, 0, sizeof(s));
	CHECK_EQ(kvt_store_stats(e->st, t, &s), 0);
	return corrupt ? s.corrupt + s.bad_listed : s.hits;
}

/* Flip one payload byte of every file under `dir` named after `hex`. */
static const char *flip_hex;
static int flipped;

static int flip_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
	const char *base = p + f->base;
	FILE *fp;
	int ch;

	if (flag != FTW_F || !strstr(base, flip_hex) || sb->st_size < 4096 + 200 ||
	    strstr(base, "metadata") || strstr(base, "md5"))
		return 0;
	fp = fopen(p, "r+b");
	if (!fp)
		return 0;
	fseek(fp, 4096 + 100, SEEK_SET);
	ch = fgetc(fp);
	fseek(fp, 4096 + 100, SEEK_SET);
	fputc(ch ^ 0x5a, fp);
	fclose(fp);
	flipped++;
	return 0;
}

/* Damage chunk `k` where the tier keeps it. */
static void corrupt_chunk(env *e, const kvt_key *k)
{
	char hex[65], dir[600];

	kvt_key_hex(k, hex);
	flipped = 0;
	if (e->tier == T_DRAM) {
		/* The DRAM arena's pages themselves (read-only to readers:
		 * this is the test playing a bit flip). */
		kvt_ref *ref = NULL;
		const struct iovec *iov;
		int n_iov;

		CHECK_EQ(kvt_borrow(e->st, kvt_llama_ns(e->ad), k, &ref), 0);
		if (ref && kvt_ref_iov(ref, &iov, &n_iov) == 0 && n_iov > 0) {
			((uint8_t *)iov[0].iov_base)[100] ^= 0x5a;
			flipped = 1;
		}
		kvt_release(ref);
	} else {
		if (e->tier == T_NVME)
			snprintf(dir, sizeof(dir), "%s/nvme-%d", root, e->fa);
		else if (e->tier == T_FSDIR)
			snprintf(dir, sizeof(dir), "%s/shared-%d", root, e->fa);
		else
			snprintf(dir, sizeof(dir), "%s/s3data", root);
		flip_hex = hex;
		nftw(dir, flip_one, 16, FTW_PHYS);
	}
	if (flipped != 1) {
		fprintf(stderr, "corrupting %s in %s: %d copies found\n", hex,
			tier_name[e->tier], flipped);
		CHECK(0);
	}
}

static void run_tier(int fa, int tier)
{
	env e = { .fa = fa, .tier = tier };
	kvt_llama_opts o = { .model_id = "kvtier-test/random-llama-2x128-seed7",
			     .chunk_tokens = CHUNK, .logits_all = 1,
			     .log = adapter_log };
	llama_token p[80], q[84];
	kvt_key keys[5];
	kvt_llama_result r;
	uint64_t hits, bad;
	double t0 = s3t_now();

	o.durability = tier == T_DRAM ? KVT_DUR_CACHED : KVT_DUR_CRASH_SAFE;
	e.st = open_store(tier, fa);
	e.ctx = new_context(fa);
	if (!e.st || !e.ctx) {
		CHECK(0);
		goto out;
	}
	CHECK_EQ(kvt_llama_open(e.st, e.ctx, &o, &e.ad), 0);
	if (!e.ad)
		goto out;
	CHECK_EQ(kvt_llama_layout_known(e.ad), 1);
	CHECK_EQ(kvt_llama_v_transposed(e.ad), !fa);

	fill_tokens(p, 80);
	CHECK_EQ(kvt_key_chain(kvt_llama_ns(e.ad), (const uint32_t *)p, 80, NULL, keys, 5), 5);
	/* Cold: 70 tokens, four whole chunks stored, the partial fifth not. */
	r = request(&e, "cold, partial tail", p, 70, 0, NULL, 0);
	CHECK_EQ(r.stored, 4);
	CHECK_EQ(kvt_lookup(e.st, kvt_llama_ns(e.ad), keys, 5, NULL), 4);

	/* At a chunk boundary: 64 cached tokens, 20 new. */
	memcpy(q, p, 64 * sizeof(*q));
	fill_tokens(q + 64, 20);
	if (tier != T_DRAM)
		evict_dram(&e, keys, 4);
	hits = tier_counter(&e, 0);
	r = request(&e, "chunk boundary", q, 84, 64, p, 70);
	CHECK_EQ(r.stored, 1);
	CHECK(tier_counter(&e, 0) >= hits + 4);

	/* A partial last chunk: the prompt leaves the cached one mid-chunk. */
	memcpy(q, p, 58 * sizeof(*q));
	fill_tokens(q + 58, 14);
	if (tier != T_DRAM)
		evict_dram(&e, keys, 4);
	r = request(&e, "partial chunk", q, 72, 48, p, 70);

	/* Everything cached: one token must still be decoded. */
	r = request(&e, "full hit", p, 64, 63, p, 70);
	CHECK_EQ(r.stored, 0);

	/* A middle chunk gone: the prefix ends there, and it is stored again. */
	CHECK_EQ(kvt_delete(e.st, kvt_llama_ns(e.ad), &keys[2]), 0);
	memcpy(q, p, 64 * sizeof(*q));
	fill_tokens(q + 64, 20);
	r = request(&e, "missing middle chunk", q, 84, 32, p, 70);
	CHECK_EQ(r.hit_chunks, 2);
	CHECK_EQ(r.stored, 3);
	CHECK_EQ(kvt_exists(e.st, kvt_llama_ns(e.ad), &keys[2]), 1);

	/* A corrupt chunk on the tier's medium: detected, never restored. */
	if (tier != T_DRAM)
		evict_dram(&e, keys, 4);
	corrupt_chunk(&e, &keys[1]);
	bad = tier_counter(&e, 1);
	adapter_lines = 0;
	r = request(&e, "corrupt chunk", q, 84, 16, p, 70);
	CHECK_EQ(r.hit_chunks, 5);
	CHECK_EQ(r.loaded_chunks, 1);
	CHECK(tier_counter(&e, 1) > bad);
	CHECK(adapter_lines >= 1 && strstr(last_line, "chunk 1"));
	/* Stored again, it serves the next request whole. */
	if (tier != T_DRAM)
		evict_dram(&e, keys, 2);
	/* Its chunks were made by three different requests: only without flash
	 * attention does a recompute of the prefix as one batch reproduce them. */
	r = request(&e, "after the corrupt one", q, 84, 80, NULL, 0);
out:
	kvt_llama_close(e.ad);
	if (e.ctx)
		llama_free(e.ctx);
	kvt_store_close(e.st);
	fprintf(stderr, "  %s, flash attention %s: %.1f s\n", tier_name[tier], fa ? "on" : "off",
		s3t_now() - t0);
}

/* A state layout the adapter does not know: it recomputes, and says so. */
static void unknown_layout(void)
{
	struct llama_context_params cp = llama_context_default_params();
	struct llama_context *ctx;
	kvt_store *st = open_store(T_DRAM, 0);
	kvt_llama_opts o = { .model_id = "kvtier-test/random-llama-2x128-seed7",
			     .chunk_tokens = CHUNK, .log = adapter_log };
	kvt_llama *ad = NULL;
	kvt_llama_result r;
	llama_token p[40];
	int pass;

	/* A K cache in q8_0: blocks, not rows of elements. */
	cp.n_ctx = 256;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.type_k = GGML_TYPE_Q8_0;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
	ctx = llama_init_from_model(model, cp);
	CHECK(ctx && st);
	if (!ctx || !st)
		goto out;
	adapter_lines = 0;
	CHECK_EQ(kvt_llama_open(st, ctx, &o, &ad), 0);
	CHECK_EQ(kvt_llama_layout_known(ad), 0);
	CHECK(adapter_lines == 1 && strstr(last_line, "not known"));
	fill_tokens(p, 40);
	for (pass = 0; pass < 2; pass++) {
		CHECK_EQ(kvt_llama_prefill(ad, 0, p, 40, &r), 0);
		CHECK_EQ(r.restored, 0);
		CHECK_EQ(r.computed, 40);
		CHECK_EQ(r.stored, 0);
	}
	fprintf(stderr, "  q8_0 K cache: layout not known, recomputed\n");
out:
	kvt_llama_close(ad);
	if (ctx)
		llama_free(ctx);
	kvt_store_close(st);
}

int main(void)
{
	lgg_shape shape = { .layers = 2, .embd = 128, .heads = 4, .kv_heads = 2, .ff = 256,
			    .vocab = N_VOCAB, .ctx = 1024, .seed = 7 };
	char path[600], why[300], s3dir[600];
	struct llama_model_params mp;
	int fa, tier;
	double t0 = s3t_now();

	if (!mkdtemp(root))
		return 1;
	snprintf(path, sizeof(path), "%s/model.gguf", root);
	if (lgg_write(path, &shape, why, sizeof(why))) {
		fprintf(stderr, "FAIL: %s\n", why);
		return 1;
	}
	if (getenv("KVT_TEST_VERBOSE"))
		quiet_logs = 0;
	llama_log_set(llama_quiet, NULL);
	ggml_backend_load_all_from_path(KVT_LLAMA_LIBDIR);
	llama_backend_init();
	mp = llama_model_default_params();
	model = llama_model_load_from_file(path, mp);
	if (!model) {
		fprintf(stderr, "FAIL: llama.cpp did not load %s\n", path);
		return 1;
	}
	snprintf(s3dir, sizeof(s3dir), "%s/s3data", root);
	mkdir(s3dir, 0700);
	s3t_start(s3dir, (const char *const[]){ "kvt", NULL });
	setenv("AWS_ACCESS_KEY_ID", S3T_AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", S3T_SK, 1);

	for (fa = 0; fa < 2; fa++)
		for (tier = 0; tier < T_N; tier++)
			run_tier(fa, tier);
	unknown_layout();

	llama_model_free(model);
	llama_backend_free();
	s3t_stop();
	s3t_rmdir(root);
	fprintf(stderr, "llama.cpp through kvtier: %.1f s\n", s3t_now() - t0);
	TEST_DONE();
}
