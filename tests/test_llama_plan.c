/*
 * test_llama_plan.c — the planner's predicted TTFT against llama.cpp's.
 *
 * A small trace of conversations (three of three turns, each turn's prompt
 * the one before it and more) runs through llama.cpp on this machine, on a
 * random-weight model written here (tests/llama/gguf_write.c), twice: every
 * prompt recomputed, and through the adapter over a DRAM store (each turn
 * restores what the one before stored).  The same run measures what `kvtier
 * plan --catalog` reads, as kvtier-bench llama writes it: llama.cpp's
 * prefill speed as a "gpu" (fitted on the last turns' recompute, as the
 * benchmark fits its longest prompt), the DRAM tier's load bandwidth and
 * latency (a line through the loads of the trace).  Then the planner simulates the trace with that
 * catalog (kvt_plan_simulate, kvt_plan_fleet_run: requests far apart, so no
 * queue) and its TTFT, summed over the trace, must agree with the measured
 * one within 15%, with the cache and without.  The fastest of five
 * rounds, in CPU time of the one thread llama.cpp runs on.
 */
#include <math.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf_write.h"
#include "kvt_llama.h"
#include "test.h"
#include "kvtier/plan.h"

#define CHUNK 64
#define N_CONV 3
#define N_TURN 3
#define N_REQ (N_CONV * N_TURN)
#define ROUNDS 5
#define MAXLEN 1024

static char root[] = "/tmp/kvt_llama_plan_XXXXXX";
static const lgg_shape shape = { .layers = 4, .embd = 256, .heads = 4, .kv_heads = 2, .ff = 768,
				 .vocab = 512, .ctx = 2048, .seed = 9, .f16 = 1 };

/* This thread's CPU seconds.  llama.cpp runs one thread, the caller's,
 * so this is its compute, whatever the machine's other load preempts:
 * the wall clock of a shared 2-core machine varies by 3x. */
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void quiet(enum ggml_log_level level, const char *text, void *arg)
{
	(void)arg;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The fastest of n: CPU time only grows with what disturbs it (cache
 * misses after a preemption), never shrinks. */
static double fastest(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[0];
}

static kvt_store *dram_store(void)
{
	kvt_config *c = kvt_config_new();
	int err = 0;
	CHECK_EQ(kvt_config_set(c, "chunk_size", "64"), 0);
	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "256MiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	kvt_store *st = kvt_store_open(c, &err);
	if (!st)
		fprintf(stderr, "store: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	kvt_config_free(c);
	return st;
}

/* The planner's parameter count of the shape: embeddings in and out, and
 * per layer attention (Q, O; K, V at kv width) and the feed-forward. */
static double params_of(const lgg_shape *m)
{
	double kv = (double)m->kv_heads * (m->embd / m->heads);
	return 2.0 * m->vocab * m->embd + m->layers * (2.0 * m->embd * m->embd + 2.0 * m->embd * kv +
						       3.0 * m->embd * m->ff);
}

int main(void)
{
	char path[512], cat[512], tr[512], why[256];
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/model.gguf", root);
	if (lgg_write(path, &shape, why, sizeof(why))) {
		fprintf(stderr, "gguf: %s\n", why);
		return 1;
	}
	llama_log_set(quiet, NULL);
	ggml_backend_load_all_from_path(KVT_LLAMA_LIBDIR);
	llama_backend_init();
	struct llama_model *model = llama_model_load_from_file(path, llama_model_default_params());
	CHECK(model != NULL);
	if (!model)
		return 1;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = shape.ctx;
	cp.n_batch = cp.n_ctx;
	cp.n_seq_max = 1;
	cp.n_threads = cp.n_threads_batch = 1; /* both sides measured alike */
	cp.no_perf = true;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;

	/* The trace: turn t of conversation c is its first 256 + 192 t + 17
	 * tokens (a partial last chunk), requests in turn order. */
	static llama_token conv[N_CONV][MAXLEN];
	uint64_t rng = 77;
	for (int c = 0; c < N_CONV; c++)
		for (int i = 0; i < MAXLEN; i++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			conv[c][i] = (llama_token)((rng >> 33) % shape.vocab);
		}
	int len[N_REQ], cv[N_REQ];
	for (int t = 0, q = 0; t < N_TURN; t++)
		for (int c = 0; c < N_CONV; c++, q++) {
			len[q] = 256 + 192 * t + 17;
			cv[q] = c;
		}
	snprintf(tr, sizeof(tr), "%s/trace.jsonl", root);
	FILE *f = fopen(tr, "w");
	for (int q = 0; f && q < N_REQ; q++) {
		fprintf(f, "{\"timestamp\": %d, \"input_length\": %d, \"hash_ids\": [", q * 100000, len[q]);
		for (int k = 0; k < len[q] / CHUNK; k++)
			fprintf(f, "%s%d", k ? ", " : "", cv[q] * 1000 + k);
		fprintf(f, "]}\n");
	}
	CHECK(f && fclose(f) == 0);

	/* Measured: every prompt recomputed; through the adapter from a DRAM
	 * store that starts empty each round; the calibration prompt. */
	double rec[N_REQ][ROUNDS], hit[N_REQ][ROUNDS], ld[N_REQ][ROUNDS], share[N_REQ][ROUNDS];
	double ldbytes[N_REQ] = {0};
	uint64_t chunk_bytes = 0;
	for (int r = 0; r < ROUNDS; r++) {
		for (int q = 0; q < N_REQ; q++) {
			llama_memory_clear(llama_get_memory(ctx), true);
			double s = now();
			CHECK_EQ(kvt_llama_decode(ctx, 0, conv[cv[q]], (size_t)len[q], 0, 0), 0);
			rec[q][r] = now() - s;
		}
		kvt_store *st = dram_store();
		kvt_llama *ad = NULL;
		kvt_llama_opts o = { .model_id = "test_llama_plan/random-seed9",
				     .chunk_tokens = CHUNK, .durability = KVT_DUR_CACHED };
		CHECK(st && kvt_llama_open(st, ctx, &o, &ad) == 0 && kvt_llama_layout_known(ad));
		if (!ad)
			return 1;
		chunk_bytes = kvt_layout_payload_bytes(&kvt_llama_ns(ad)->layout);
		for (int q = 0; q < N_REQ; q++) {
			kvt_llama_result res;
			double s0 = now();
			CHECK_EQ(kvt_llama_prefill(ad, 0, conv[cv[q]], (size_t)len[q], &res), 0);
			double cpu = now() - s0;
			/* Turn t > 0 restores the whole chunks of turn t - 1. */
			int want = q < N_CONV ? 0 : (len[q - N_CONV] / CHUNK) * CHUNK;
			CHECK_EQ(res.restored, want);
			/* The first token is out when the decode ends: the
			 * call's CPU less its save's share (the save reads the
			 * sequence's state back and puts the new chunks). */
			double wall = res.lookup_s + res.load_s + res.decode_s;
			hit[q][r] = cpu;
			share[q][r] = wall / (wall + res.save_s);
			ld[q][r] = res.load_s;
			ldbytes[q] = (double)(want / CHUNK) * (double)chunk_bytes;
		}
		kvt_llama_close(ad);
		kvt_store_close(st);
	}

	/* The catalog of this run, in kvtier-bench llama's form. */
	double P = params_of(&shape), flops = 0, secs = 0, m_rec[N_REQ], m_hit[N_REQ];
	for (int q = 0; q < N_REQ; q++) {
		double T = len[q];
		m_rec[q] = fastest(rec[q], ROUNDS);
		/* Its CPU less the save's share of its wall time (median). */
		m_hit[q] = fastest(hit[q], ROUNDS);
		qsort(share[q], ROUNDS, sizeof(double), cmp);
		m_hit[q] *= share[q][ROUNDS / 2];
		if (q >= N_REQ - N_CONV) {
			flops += 2 * P * T + 2.0 * shape.layers * shape.embd * T * T;
			secs += m_rec[q];
		}
	}
	/* The speed that makes the cost model give the recompute measured
	 * on the longest prompts (as kvtier-bench llama takes its longest):
	 * the shorter ones, and every cached one, are predicted from it. */
	double tflops = flops / secs / 1e12;
	int lo = N_CONV, hi = N_REQ - 1; /* the shortest and longest loads */
	double l_lo = fastest(ld[lo], ROUNDS), l_hi = fastest(ld[hi], ROUNDS);
	double gbps = ldbytes[hi] / l_hi / 1e9, lat = 0;
	if (l_hi > l_lo && ldbytes[hi] > ldbytes[lo]) {
		gbps = (ldbytes[hi] - ldbytes[lo]) / (l_hi - l_lo) / 1e9;
		lat = l_lo - ldbytes[lo] / (gbps * 1e9);
		if (lat < 0)
			lat = 0;
	}
	snprintf(cat, sizeof(cat), "%s/measured.cat", root);
	f = fopen(cat, "w");
	if (f) {
		fprintf(f, "# measured by test_llama_plan\n"
			   "model test-llama-plan params=%.6g layers=%u d_model=%u kv_heads=%u head_dim=%u\n"
			   "gpu   llama.cpp-here tflops=%.6g mfu=1 usd_hour=0\n"
			   "tier  dram gbps=%.6g latency_us=%.6g\n",
			P, shape.layers, shape.embd, shape.kv_heads, shape.embd / shape.heads, tflops,
			gbps, lat * 1e6);
		CHECK(fclose(f) == 0);
	}

	/* The planner's prediction from that catalog. */
	CHECK_EQ(kvt_plan_catalog_load(cat), 0);
	const kvt_plan_model *m = kvt_plan_model_find("test-llama-plan");
	const kvt_plan_gpu *g = kvt_plan_gpu_find("llama.cpp-here");
	CHECK(m && g && strcmp(kvt_plan_catalog_source("tier", "dram"), "built-in"));
	/* The planner's KV per token is bf16's; the model's chunks are its. */
	CHECK(fabs(kvt_plan_kv_bytes_per_token(m) * CHUNK - (double)chunk_bytes) <
	      0.05 * (double)chunk_bytes);
	kvt_plan_trace *pt = NULL;
	CHECK_EQ(kvt_plan_trace_read(tr, KVT_PLAN_FMT_MOONCAKE, CHUNK, 0, &pt), 0);
	if (!m || !g || !pt)
		return 1;
	kvt_plan_conf c = {.policy = KVT_PLAN_LRU, .nodes = 1};
	c.tier[KVT_PLAN_T0].capacity = KVT_PLAN_UNBOUNDED;
	kvt_plan_result res;
	kvt_plan_req_hit ph[N_REQ];
	CHECK_EQ(kvt_plan_simulate(pt, &c, &res, ph), 0);
	kvt_plan_fleet_conf fc = {.model = m, .gpu = g, .rate = 1, .nodes = 1, .gpus_per_node = 1};
	fc.tier[0] = kvt_plan_tier_find("dram");
	fc.tier[1] = kvt_plan_tier_find("nvme");
	fc.tier[2] = kvt_plan_tier_find("fs");
	kvt_plan_timing tm;
	double p_hit[N_REQ], p_rec[N_REQ];
	CHECK_EQ(kvt_plan_fleet_run(pt, ph, &fc, &tm, p_hit, NULL, NULL, 0), 0);
	CHECK_EQ(kvt_plan_fleet_run(pt, NULL, &fc, &tm, p_rec, NULL, NULL, 0), 0);
	CHECK(tm.wait_max == 0);

	double sm_hit = 0, sm_rec = 0, sp_hit = 0, sp_rec = 0;
	fprintf(stderr, "catalog: %.4g TFLOP/s, DRAM %.3g GB/s + %.0f us\n"
		"request tokens hit | measured recompute, cached | predicted recompute, cached (ms)\n",
		tflops, gbps, lat * 1e6);
	for (int q = 0; q < N_REQ; q++) {
		double mr = m_rec[q], mh = m_hit[q];
		fprintf(stderr, "  %d %5d %4u | %8.1f %8.1f | %8.1f %8.1f\n", q, len[q],
			ph[q].hit[0] * CHUNK, mr * 1e3, mh * 1e3, p_rec[q] * 1e3, p_hit[q] * 1e3);
		sm_rec += mr;
		sm_hit += mh;
		sp_rec += p_rec[q];
		sp_hit += p_hit[q];
	}
	double e_rec = sp_rec / sm_rec - 1, e_hit = sp_hit / sm_hit - 1;
	fprintf(stderr, "trace TTFT: recompute measured %.1f ms, predicted %.1f ms (%+.1f%%); "
		"with the cache measured %.1f ms, predicted %.1f ms (%+.1f%%)\n",
		sm_rec * 1e3, sp_rec * 1e3, 100 * e_rec, sm_hit * 1e3, sp_hit * 1e3, 100 * e_hit);
	CHECK(fabs(e_rec) <= 0.15);
	CHECK(fabs(e_hit) <= 0.15);
	CHECK(sm_hit < sm_rec); /* the cache is worth having on this trace */

	kvt_plan_trace_free(pt);
	llama_free(ctx);
	llama_model_free(model);
	unlink(path);
	unlink(cat);
	unlink(tr);
	rmdir(root);
	TEST_DONE();
}
