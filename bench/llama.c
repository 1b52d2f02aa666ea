/*
 * llama.c — `kvtier-bench llama`: time to first token on llama.cpp with
 * the prompt's prefix loaded from each tier, against llama.cpp computing it.
 *
 * The model is a random-weight GGUF of Qwen2.5-0.5B's shape in llama.cpp's
 * `llama` architecture (24 layers, 896 wide, 14 heads, 2 KV heads of 64,
 * feed-forward 4864, f16 weights; the vocabulary is cut to 8192, which only
 * the last token's logits pay for), written into the scratch directory
 * (tests/llama/gguf_write.c).  For each prefix length P (1024 and 4096
 * tokens; --quick: 1024) a prompt of P tokens and a 32-token question:
 *
 *   recompute    llama.cpp decodes all P + 32 tokens (the bound);
 *   <tier>       the prefix was stored by an earlier request with another
 *                question; kvt_llama_prefill looks it up, loads it from a
 *                store of that one tier (DRAM; NVMe, the shared FS or S3 with
 *                no DRAM tier in front), restores it and decodes the 32.
 *
 * TTFT is the prefill's wall time up to the last logits (lookup, load,
 * restore, decode); ratio_vs_recompute is the speed-up a user gets.  The
 * recompute is timed on the prefill that stores the prefix (llama.cpp
 * computes it whole) and, with --recompute-rounds N, N - 1 more times,
 * interleaved with the rounds of loads; medians are reported.  Also per tier the
 * load bandwidth (stored bytes / load time) and per prefix llama.cpp's
 * prefill seconds per token.
 *
 * The bound of a load is llama.cpp's own restore of the same state from
 * memory: the prefix's sequence state (llama_state_seq_get_data of the P
 * tokens, held in a buffer) given back to llama_state_seq_set_data on an
 * empty cache, timed in each round beside the loads.  ratio_vs_llama_restore
 * is that time over the tier's load (lookup, load and restore: everything
 * but the question's decode); 1 means kvtier adds nothing to llama.cpp's
 * own restore.  llama.cpp runs --threads threads (1 by
 * default: on a shared machine ggml's spinning barrier turns a busy core
 * into seconds of waiting; a ratio needs both sides measured alike).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "gguf_write.h"
#include "kvt_llama.h"
#include "s3/server.h"

#define LB_Q 32      /* tokens of the question after the prefix */
#define LB_VOCAB 8192
#define LB_MAX_P 4

enum { LB_DRAM, LB_NVME, LB_FSDIR, LB_S3, LB_TIERS };
static const char *const lb_tier[LB_TIERS] = { "dram", "nvme", "shared_fs", "s3" };

static double lb_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void lb_quiet(enum ggml_log_level level, const char *text, void *arg)
{
	(void)arg;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int lb_store(int tier, const char *dir, const char *endpoint, kvt_store **st)
{
	char path[4200];
	kvt_config *c = kvt_config_new();
	int rc = c ? 0 : KVT_ENOMEM;

	if (!rc && tier != LB_DRAM)
		rc = kvt_config_set(c, "local_cpu", "false");
	if (!rc && tier == LB_DRAM) {
		const char *const kv[][2] = { { "max_local_cpu_size", "512MiB" },
					      { "dram_lock_memory", "false" } };
		rc = bench_config_set_all(c, kv, 2);
	}
	if (!rc && (tier == LB_NVME || tier == LB_FSDIR)) {
		snprintf(path, sizeof(path), "%s/%s", dir, lb_tier[tier]);
		rc = kvt_config_set(c, tier == LB_NVME ? "local_disk" : "shared_fs", path);
	}
	if (!rc && tier == LB_S3) {
		const char *const kv[][2] = { { "remote_url", "s3://kvt/llama/" },
					      { "s3_endpoint", endpoint },
					      { "s3_region", "us-east-1" },
					      { "s3_admission", "always" } };
		rc = bench_config_set_all(c, kv, 4);
	}
	return bench_store_open("llama", lb_tier[tier], c, rc, 0, st);
}

static void lb_tokens(llama_token *t, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (llama_token)((seed >> 33) % LB_VOCAB);
	}
}

/* Store the prompt's chunks through the DRAM store's adapter (one prefill),
 * and copy them into the other stores. */
static int lb_store_prefix(kvt_llama *const *ad, kvt_store *const *st, const llama_token *tok,
			   size_t n, uint64_t bytes, double *decode_s)
{
	kvt_llama_result res;
	kvt_key keys[64];
	uint8_t *buf = malloc(bytes);
	int k, t, rc = kvt_llama_prefill(ad[LB_DRAM], 0, tok, n, &res);
	int n_keys = kvt_key_chain(kvt_llama_ns(ad[LB_DRAM]), (const uint32_t *)tok, n, NULL,
				   keys, 64);

	if (!rc && (n_keys < 0 || n_keys > 64 || res.stored != (uint32_t)n_keys))
		rc = KVT_EINVAL;
	*decode_s = res.decode_s; /* llama.cpp computed the whole prompt */
	for (k = 0; !rc && buf && k < n_keys; k++) {
		rc = kvt_get(st[LB_DRAM], kvt_llama_ns(ad[LB_DRAM]), &keys[k], buf, bytes, NULL);
		for (t = LB_DRAM + 1; !rc && t < LB_TIERS; t++) {
			rc = kvt_put(st[t], kvt_llama_ns(ad[t]), &keys[k], buf, bytes,
				     KVT_DUR_CRASH_SAFE);
			if (rc == KVT_EEXIST)
				rc = 0;
		}
	}
	free(buf);
	if (!buf || rc)
		return bench_fail("llama", "storing the prefix", buf ? rc : KVT_ENOMEM);
	return 0;
}

/* llama.cpp's state of the first n tokens of tok into *blob (malloc'd):
 * restored by the adapter from its DRAM store, the question's cells
 * dropped.  0 or 1. */
static int lb_prefix_state(kvt_llama *ad, struct llama_context *ctx, const llama_token *tok,
			   uint32_t n, uint8_t **blob, size_t *len)
{
	kvt_llama_result r;
	int rc = kvt_llama_prefill(ad, 0, tok, n + LB_Q, &r);

	if (rc || r.restored != n) {
		fprintf(stderr, "kvtier-bench llama: the prefix state of %u tokens: %s\n", n,
			rc ? kvt_strerror(rc) : "not restored from DRAM");
		return 1;
	}
	llama_memory_seq_rm(llama_get_memory(ctx), 0, (llama_pos)n, -1);
	free(*blob);
	*len = llama_state_seq_get_size(ctx, 0);
	*blob = malloc(*len);
	if (!*blob || llama_state_seq_get_data(ctx, *blob, *len, 0) != *len) {
		fprintf(stderr, "kvtier-bench llama: llama.cpp did not write its state\n");
		return 1;
	}
	return 0;
}

/* TTFT of one prefill through the adapter (lookup + load + decode). */
static int lb_loaded(kvt_llama *ad, const llama_token *tok, size_t n, uint32_t want,
		     double *ttft, double *load)
{
	kvt_llama_result r;
	int rc = kvt_llama_prefill(ad, 0, tok, n, &r);

	if (rc)
		return bench_fail("llama", "prefill", rc);
	if (r.restored != want) {
		fprintf(stderr, "kvtier-bench llama: restored %u tokens, expected %u\n",
			r.restored, want);
		return 1;
	}
	*ttft = r.lookup_s + r.load_s + r.decode_s;
	*load = r.load_s;
	return 0;
}

/*
 * The measured speeds in kvtier plan's catalog form (docs/PLANNING.md): the
 * model, llama.cpp on this machine as a "gpu" whose tflops (at mfu 1) make
 * the planner's prefill cost (2·params·T + 2·layers·d_model·T² flops) equal
 * the longest recompute measured, and per tier the latency and bandwidth of
 * a straight line through the loads of the shortest and longest prefix (one
 * prefix: no latency).  Tier names are the planner's, so its prices stay.
 */
static int lb_catalog(const char *path, const lgg_shape *m, const uint32_t *plen, int n_p,
		      double rec[][BENCH_MAX_ROUNDS], double ld[][LB_TIERS][BENCH_MAX_ROUNDS],
		      int rec_rounds, int rounds, uint64_t chunk_bytes, uint32_t chunk_tokens)
{
	static const char *const plan_name[LB_TIERS] = { "dram", "nvme", "fs", "s3" };
	double kv = (double)m->kv_heads * (m->embd / m->heads);
	double params = 2.0 * m->vocab * m->embd + m->embd +
			m->layers * (2.0 * m->embd * m->embd + 2.0 * m->embd * kv +
				     3.0 * m->embd * m->ff + 2.0 * m->embd);
	double tok = plen[n_p - 1] + LB_Q;
	double tsec = bench_summarize(rec[n_p - 1], rec_rounds).median;
	double flops = 2.0 * params * tok + 2.0 * m->layers * (double)m->embd * tok * tok;
	FILE *f = fopen(path, "w");
	int t;

	if (!f) {
		perror(path);
		return 1;
	}
	fprintf(f, "# kvtier-bench llama: llama.cpp prefill and kvtier loads measured here\n"
		"model Qwen2.5-0.5B-shaped-random params=%.6g layers=%u d_model=%u kv_heads=%u "
		"head_dim=%u\n", params, m->layers, m->embd, m->kv_heads, m->embd / m->heads);
	fprintf(f, "gpu   llama.cpp-cpu tflops=%.6g mfu=1 usd_hour=0\n", flops / tsec / 1e12);
	for (t = 0; t < LB_TIERS; t++) {
		double b0 = (double)(plen[0] / chunk_tokens) * chunk_bytes;
		double b1 = (double)(plen[n_p - 1] / chunk_tokens) * chunk_bytes;
		double s0 = bench_summarize(ld[0][t], rounds).median;
		double s1 = bench_summarize(ld[n_p - 1][t], rounds).median;
		double gbps = b1 / s1 / 1e9, lat = 0;

		if (n_p > 1 && s1 > s0) {
			gbps = (b1 - b0) / (s1 - s0) / 1e9;
			lat = s0 - b0 / (gbps * 1e9);
			if (lat < 0)
				lat = 0;
		}
		fprintf(f, "tier  %s gbps=%.6g latency_us=%.6g\n", plan_name[t], gbps, lat * 1e6);
	}
	if (fclose(f)) {
		perror(path);
		return 1;
	}
	return 0;
}

int bench_llama(int argc, char **argv)
{
	lgg_shape shape = { .layers = 24, .embd = 896, .heads = 14, .kv_heads = 2, .ff = 4864,
			    .vocab = LB_VOCAB, .ctx = 8192, .seed = 5, .f16 = 1 };
	int json = 0, quick = 0, threads = 1, rounds = 3, rec_rounds = 1, i, p, t, r, rc = 1;
	const char *parent = "/tmp", *catalog = NULL;
	uint32_t plen[LB_MAX_P] = { 1024, 4096 };
	int n_p = 2;
	char dir[4096], path[4200], why[4300], script[4096], endpoint[64] = "";
	s3srv srv = S3SRV_NONE;
	struct llama_model *model = NULL;
	struct llama_context *ctx = NULL;
	kvt_store *st[LB_TIERS] = { 0 };
	kvt_llama *ad[LB_TIERS] = { 0 };
	double rec[LB_MAX_P][BENCH_MAX_ROUNDS], ttft[LB_MAX_P][LB_TIERS][BENCH_MAX_ROUNDS];
	double ld[LB_MAX_P][LB_TIERS][BENCH_MAX_ROUNDS], rs[LB_MAX_P][BENCH_MAX_ROUNDS];
	uint8_t *blob = NULL;
	size_t blob_len = 0;
	uint64_t chunk_bytes = 0;
	uint32_t chunk_tokens = 256;
	llama_token *a = NULL, *b = NULL;
	double t0 = lb_now();

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			parent = argv[++i];
		else if (!strcmp(argv[i], "--catalog") && i + 1 < argc)
			catalog = argv[++i];
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc && atoi(argv[i + 1]) > 0)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0 &&
			 atoi(argv[i + 1]) <= BENCH_MAX_ROUNDS)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--recompute-rounds") && i + 1 < argc &&
			 atoi(argv[i + 1]) > 0 && atoi(argv[i + 1]) <= BENCH_MAX_ROUNDS)
			rec_rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--help")) {
			printf("usage: kvtier-bench llama [--json] [--quick] [--dir DIR] [--threads N]\n"
			       "                          [--rounds N] [--recompute-rounds N] [--catalog FILE]\n"
			       "Time to first token on llama.cpp (a random Qwen2.5-0.5B-shaped model)\n"
			       "with a 1k or 4k-token prefix loaded from DRAM, NVMe, the shared FS\n"
			       "or S3, against llama.cpp recomputing it (ratio_vs_recompute).\n"
			       "--quick: the 1k prefix alone.  Loads are timed --rounds times (3);\n"
			       "the recompute, which takes minutes for 4k tokens on one core, once\n"
			       "(the prefill that stores the prefix) unless --recompute-rounds says.\n"
			       "--catalog FILE: write the measured prefill speed (as a \"gpu\") and\n"
			       "each tier's load bandwidth and latency for kvtier plan --catalog.\n");
			return 0;
		} else {
			fprintf(stderr, "kvtier-bench llama: unknown or incomplete option \"%s\"\n",
				argv[i]);
			return 2;
		}
	}
	if (quick)
		n_p = 1;
	if (rec_rounds > rounds)
		rounds = rec_rounds;
	if (bench_scratch_dir("llama", parent, "llama", dir, sizeof(dir)))
		return 1;
	snprintf(path, sizeof(path), "%s/qwen2.5-0.5b-shaped.gguf", dir);
	if (lgg_write(path, &shape, why, sizeof(why))) {
		fprintf(stderr, "kvtier-bench llama: %s\n", why);
		goto out;
	}
	if (!bench_data_path("s3/server.js", script, sizeof(script)) ||
	    s3srv_start(&srv, script, dir, (const char *const[]){ "kvt", NULL }, why,
			sizeof(why))) {
		fprintf(stderr, "kvtier-bench llama: the S3 test server (%s) did not start: %s\n",
			script, why);
		goto out;
	}
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", srv.s3rver_port);
	setenv("AWS_ACCESS_KEY_ID", S3SRV_ACCESS_KEY, 1);
	setenv("AWS_SECRET_ACCESS_KEY", S3SRV_SECRET_KEY, 1);

	llama_log_set(lb_quiet, NULL);
	ggml_backend_load_all_from_path(KVT_LLAMA_LIBDIR);
	llama_backend_init();
	model = llama_model_load_from_file(path, llama_model_default_params());
	if (!model) {
		fprintf(stderr, "kvtier-bench llama: llama.cpp did not load %s\n", path);
		goto out;
	}
	{
		struct llama_context_params cp = llama_context_default_params();

		cp.n_ctx = plen[n_p - 1] + 2 * LB_Q;
		cp.n_batch = cp.n_ctx;
		cp.n_seq_max = 1;
		cp.n_threads = cp.n_threads_batch = threads;
		cp.no_perf = true;
		ctx = llama_init_from_model(model, cp);
	}
	if (!ctx) {
		fprintf(stderr, "kvtier-bench llama: no llama.cpp context\n");
		goto out;
	}
	for (t = 0; t < LB_TIERS; t++) {
		kvt_llama_opts o = { .model_id = "kvtier-bench/random-qwen2.5-0.5b-shaped-seed5",
				     .durability = KVT_DUR_CRASH_SAFE };

		if (t == LB_DRAM)
			o.durability = KVT_DUR_CACHED;
		if (lb_store(t, dir, endpoint, &st[t]))
			goto out;
		rc = kvt_llama_open(st[t], ctx, &o, &ad[t]);
		if (rc || !kvt_llama_layout_known(ad[t])) {
			rc = bench_fail("llama", "the adapter", rc ? rc : KVT_ENOTSUP);
			goto out;
		}
		rc = 1;
		chunk_bytes = kvt_layout_payload_bytes(&kvt_llama_ns(ad[t])->layout);
		chunk_tokens = kvt_llama_ns(ad[t])->layout.chunk_tokens;
	}
	a = malloc((plen[n_p - 1] + LB_Q) * sizeof(*a));
	b = malloc((plen[n_p - 1] + LB_Q) * sizeof(*b));
	if (!a || !b)
		goto out;

	for (p = 0; p < n_p; p++) {
		uint32_t n = plen[p];

		/* The prefix, stored by a request with question A. */
		lb_tokens(a, n + LB_Q, 1000 + p);
		memcpy(b, a, n * sizeof(*b));
		lb_tokens(b + n, LB_Q, 2000 + p);
		if (lb_store_prefix(ad, st, a, n + LB_Q, chunk_bytes, &rec[p][0]))
			goto out;
		/* The bound's state: the P tokens' state as llama.cpp writes it. */
		if (lb_prefix_state(ad[LB_DRAM], ctx, b, n, &blob, &blob_len))
			goto out;
		/* Question B: recomputed, then from each tier, round after round. */
		for (r = 0; r < rounds; r++) {
			double s = lb_now();

			if (r && r < rec_rounds) {
				llama_memory_clear(llama_get_memory(ctx), true);
				if (kvt_llama_decode(ctx, 0, b, n + LB_Q, 0, 0))
					goto out;
				rec[p][r] = lb_now() - s;
			}
			for (t = 0; t < LB_TIERS; t++)
				if (lb_loaded(ad[t], b, n + LB_Q, n, &ttft[p][t][r], &ld[p][t][r]))
					goto out;
			llama_memory_clear(llama_get_memory(ctx), true);
			s = lb_now();
			if (llama_state_seq_set_data(ctx, blob, blob_len, 0) != blob_len) {
				fprintf(stderr, "kvtier-bench llama: llama.cpp refused its own state "
						"of %u tokens\n", n);
				goto out;
			}
			rs[p][r] = lb_now() - s;
		}
	}

	if (json)
		printf("{\"bench\":\"llama\",\"model\":\"qwen2.5-0.5b-shaped (random, f16, vocab %d)\","
		       "\"threads\":%d,\"question_tokens\":%d,\"chunk_bytes\":%llu,\"results\":[",
		       LB_VOCAB, threads, LB_Q, (unsigned long long)chunk_bytes);
	else
		printf("llama.cpp TTFT, random Qwen2.5-0.5B-shaped model, %d thread(s), a %d-token "
		       "question after the prefix\n", threads, LB_Q);
	for (p = 0; p < n_p; p++) {
		struct summary sr = bench_summarize(rec[p], rec_rounds);
		struct summary srs = bench_summarize(rs[p], rounds);
		uint64_t bytes = (uint64_t)(plen[p] / chunk_tokens) * chunk_bytes;
		char b1[64], b2[64];

		if (json) {
			printf("%s{\"prefix_tokens\":%u,", p ? "," : "", plen[p]);
			bench_json_summary("recompute_s", sr);
			printf(",\"prefill_s_per_token\":%.6g,\"prefix_bytes\":%llu,",
			       sr.median / (plen[p] + LB_Q), (unsigned long long)bytes);
			bench_json_summary("llama_restore_s", srs);
			printf(",\"tiers\":{");
		} else {
			printf("  prefix %u tokens (%.1f MiB of KV): recompute %s s (%.3g ms/token); "
			       "llama.cpp's own restore from memory %s s\n",
			       plen[p], bytes / 1048576.0, bench_fmt_summary(sr, b1, sizeof(b1)),
			       1e3 * sr.median / (plen[p] + LB_Q),
			       bench_fmt_summary(srs, b2, sizeof(b2)));
		}
		for (t = 0; t < LB_TIERS; t++) {
			struct summary s = bench_summarize(ttft[p][t], rounds);
			struct summary l = bench_summarize(ld[p][t], rounds);
			double ratio = sr.median / s.median, gbps = bytes / l.median / 1e9;
			double rr[BENCH_MAX_ROUNDS];

			for (r = 0; r < rounds; r++)
				rr[r] = rs[p][r] / ld[p][t][r];
			struct summary rrs = bench_summarize(rr, rounds);

			if (json) {
				printf("%s\"%s\":{", t ? "," : "", lb_tier[t]);
				bench_json_summary("ttft_s", s);
				printf(",");
				bench_json_summary("load_s", l);
				printf(",\"load_gbps\":%.4g,\"ratio_vs_recompute\":%.4g,"
				       "\"ratio_vs_llama_restore\":%.4g,", gbps, ratio, rrs.median);
				bench_json_summary("ratio_vs_llama_restore_range", rrs);
				printf(",\"target\":0.9,\"pass\":%s}", rrs.median >= 0.9 ? "true" : "false");
			} else {
				printf("    %-9s TTFT %s s, load %s s (%.2f GB/s): %.1fx faster than "
				       "recompute; ratio_vs_llama_restore %.2f\n", lb_tier[t],
				       bench_fmt_summary(s, b1, sizeof(b1)),
				       bench_fmt_summary(l, b2, sizeof(b2)), gbps, ratio, rrs.median);
			}
		}
		if (json)
			printf("}}");
	}
	if (json)
		printf("],\"seconds\":%.1f}\n", lb_now() - t0);
	else
		printf("  (%.0f s)\n", lb_now() - t0);
	rc = catalog ? lb_catalog(catalog, &shape, plen, n_p, rec, ld, rec_rounds, rounds,
				  chunk_bytes, chunk_tokens) : 0;
out:
	for (t = 0; t < LB_TIERS; t++) {
		kvt_llama_close(ad[t]);
		kvt_store_close(st[t]);
	}
	if (ctx)
		llama_free(ctx);
	if (model)
		llama_model_free(model);
	free(a);
	free(b);
	free(blob);
	s3srv_stop(&srv);
	bench_remove_tree(dir);
	return rc;
}
