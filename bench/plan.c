/*
 * plan.c — `kvtier-bench plan`: the planner's simulator against the plain
 * reference replay (tests/plan_reference.py), side by side, in one run.
 *
 * Fair by construction, and reported both ways:
 *  - sim only: the reference times its replay loop inside the script
 *    (after Python started and parsed the JSON); plan times plan_sim_run
 *    alone (after its trace was parsed).  Both the fastest of --repeat runs.
 *  - end to end: the reference's whole process (interpreter start, JSON
 *    parse, one replay per capacity) against plan's parse plus one
 *    simulation per capacity.
 * Hit blocks must agree to the block; a mismatch is an error (exit 1).
 * The reference script and the default trace (the repository's
 * tests/data/traces/conversation_trace.jsonl) are the copies the build puts
 * in bench-data/ next to this program; a TRACE argument overrides the trace.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "common/err.h"
#include "plan/plan.h"

#define MAXCAP 16

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A whole number lo..hi, decimal digits only.  0 or -1. */
static int whole(const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t n = 0;
	if (!*v || (v[0] == '0' && v[1]))
		return -1;
	for (const char *p = v; *p; p++) {
		if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
			return -1;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	if (n < lo || n > hi)
		return -1;
	*out = n;
	return 0;
}

struct ref_row {
	uint64_t hits, blocks;
	double secs;
};

/* Run the reference; fill rows (one per capacity); the process's wall time
 * in *wall.  0 or -1. */
static int run_ref(const char *py, const char *trace, const char *caps_arg, unsigned repeat,
		   struct ref_row *rows, unsigned ncap, double *wall)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "PLAN_REPEAT=%u python3 '%s' '%s' %s", repeat, py, trace,
		 caps_arg);
	double t0 = mono();
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char line[512];
	unsigned k = 0;
	while (k < ncap && fgets(line, sizeof(line), p)) {
		char cap[64];
		unsigned long long h, b;
		double s;
		if (sscanf(line, "%63s %llu %llu %lf", cap, &h, &b, &s) == 4) {
			rows[k].hits = h;
			rows[k].blocks = b;
			rows[k].secs = s;
			k++;
		}
	}
	int st = pclose(p);
	*wall = mono() - t0;
	return st == 0 && k == ncap ? 0 : -1;
}

int bench_plan(int argc, char **argv)
{
	const char *trace = NULL, *caps_s = "1000,5000,20000,inf";
	unsigned repeat = 3;
	int json = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
			uint64_t r;
			if (whole(argv[++i], 1, 1000, &r)) {
				fprintf(stderr, "kvtier-bench plan: --repeat \"%s\": expected a whole number 1..1000\n",
					argv[i]);
				return 2;
			}
			repeat = (unsigned)r;
		} else if (!strcmp(argv[i], "--caps") && i + 1 < argc) {
			caps_s = argv[++i];
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: kvtier-bench plan [TRACE] [--caps 1000,5000,20000,inf] "
			       "[--repeat N] [--json]\n");
			return 0;
		} else if (argv[i][0] != '-' && !trace) {
			trace = argv[i];
		} else {
			fprintf(stderr, "kvtier-bench plan: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	char py[4096], deftrace[4096];
	if (!bench_data_path("plan_reference.py", py, sizeof(py))) {
		fprintf(stderr, "kvtier-bench plan: %s not found: the build copies it there "
			"(cmake --build)\n", py);
		return 1;
	}
	if (!trace) {
		if (!bench_data_path("traces/conversation_trace.jsonl", deftrace, sizeof(deftrace))) {
			fprintf(stderr, "kvtier-bench plan: %s not found: the build copies it "
				"there (cmake --build), or name a TRACE\n", deftrace);
			return 1;
		}
		trace = deftrace;
	}

	uint64_t caps[MAXCAP];
	char capnames[MAXCAP][32], caps_arg[MAXCAP * 33] = "";
	unsigned ncap = 0;
	for (const char *p = caps_s; *p;) {
		size_t n = strcspn(p, ",");
		if (ncap == MAXCAP) {
			fprintf(stderr, "kvtier-bench plan: --caps: more than %d capacities\n", MAXCAP);
			return 2;
		}
		snprintf(capnames[ncap], sizeof(capnames[ncap]), "%.*s", (int)n, p);
		if (strcmp(capnames[ncap], "inf") &&
		    (n >= sizeof(capnames[0]) || whole(capnames[ncap], 1, 1000000000000000ull, &caps[ncap]))) {
			fprintf(stderr, "kvtier-bench plan: --caps \"%s\": expected blocks 1..10^15 or inf\n",
				capnames[ncap]);
			return 2;
		}
		if (!strcmp(capnames[ncap], "inf"))
			caps[ncap] = PLAN_UNBOUNDED;
		strcat(caps_arg, capnames[ncap]);
		strcat(caps_arg, " ");
		ncap++;
		p += n + (p[n] == ',');
	}

	/* plan: parse once, then each capacity the fastest of `repeat` runs. */
	double t0 = mono();
	struct plan_trace pt;
	int rc = plan_trace_read(trace, PLAN_FMT_AUTO, 0, 0, &pt);
	double parse_s = mono() - t0;
	if (rc) {
		fprintf(stderr, "kvtier-bench plan: %s\n", kvt_errmsg());
		return 1;
	}
	struct plan_result res[MAXCAP];
	double sim_s[MAXCAP], first_s[MAXCAP];
	for (unsigned k = 0; k < ncap && !rc; k++) {
		struct plan_conf c;
		memset(&c, 0, sizeof(c));
		c.kind = KVT_EVICT_LRU;
		c.nodes = 1;
		c.tier[PLAN_T0].capacity = caps[k];
		for (unsigned r = 0; r < repeat && !rc; r++) {
			double a = mono();
			rc = plan_sim_run(&pt, &c, &res[k], NULL);
			double d = mono() - a;
			if (!r)
				first_s[k] = d;
			if (!r || d < sim_s[k])
				sim_s[k] = d;
		}
	}
	plan_trace_free(&pt);
	if (rc) {
		fprintf(stderr, "kvtier-bench plan: simulation failed: %s %s\n", kvt_strerror(rc),
			kvt_errmsg());
		return 1;
	}

	/* The reference: loop-only timings (repeat), then once end to end. */
	struct ref_row ref[MAXCAP], ref1[MAXCAP];
	double ref_wall_rep, ref_wall;
	if (run_ref(py, trace, caps_arg, repeat, ref, ncap, &ref_wall_rep) ||
	    run_ref(py, trace, caps_arg, 1, ref1, ncap, &ref_wall)) {
		fprintf(stderr, "kvtier-bench plan: the reference (python3 %s) failed\n", py);
		return 1;
	}

	int bad = 0;
	double ref_sum = 0, plan_sum = 0, plan_e2e = parse_s;
	uint64_t acc = 0;
	for (unsigned k = 0; k < ncap; k++) {
		bad += ref[k].hits != res[k].hit_blocks || ref[k].blocks != res[k].blocks;
		ref_sum += ref[k].secs;
		plan_sum += sim_s[k];
		plan_e2e += first_s[k];
		acc += res[k].blocks;
	}
	double ratio = ref_sum / plan_sum, ratio_e2e = ref_wall / plan_e2e;
	double aps = (double)acc / plan_sum, ref_aps = (double)acc / ref_sum;
	if (json) {
		printf("{\"bench\":\"plan\",\"trace\":\"%s\",\"policy\":\"lru\",\"repeat\":%u,"
		       "\"configs\":[", trace, repeat);
		for (unsigned k = 0; k < ncap; k++)
			printf("%s{\"dram_blocks\":\"%s\",\"hit_blocks\":%llu,\"reference_hit_blocks\":%llu,"
			       "\"blocks\":%llu,\"sim_seconds\":%.6f,\"reference_seconds\":%.6f,"
			       "\"ratio_vs_reference\":%.2f,\"accesses_per_s_per_core\":%.0f}",
			       k ? "," : "", capnames[k], (unsigned long long)res[k].hit_blocks,
			       (unsigned long long)ref[k].hits, (unsigned long long)res[k].blocks,
			       sim_s[k], ref[k].secs, ref[k].secs / sim_s[k],
			       (double)res[k].blocks / sim_s[k]);
		printf("],\"exact\":%s,\"sim_seconds\":%.6f,\"reference_seconds\":%.6f,"
		       "\"ratio_vs_reference\":%.2f,\"accesses_per_s_per_core\":%.0f,"
		       "\"reference_accesses_per_s\":%.0f,"
		       "\"end_to_end\":{\"plan_seconds\":%.6f,\"plan_parse_seconds\":%.6f,"
		       "\"reference_seconds\":%.6f,\"ratio_vs_reference\":%.2f}}\n",
		       bad ? "false" : "true", plan_sum, ref_sum, ratio, aps, ref_aps, plan_e2e,
		       parse_s, ref_wall, ratio_e2e);
	} else {
		printf("kvtier-bench plan: LRU on %s, fastest of %u (simulation only; both exclude\n"
		       "trace parsing; the reference times its replay loop inside the script)\n",
		       trace, repeat);
		for (unsigned k = 0; k < ncap; k++)
			printf("  %-6s %s hit blocks %llu (reference %llu) of %llu: plan %.2f ms, "
			       "reference %.2f ms, %.1fx, %.1f M accesses/s\n",
			       capnames[k],
			       ref[k].hits == res[k].hit_blocks ? "ok  " : "DIFF",
			       (unsigned long long)res[k].hit_blocks, (unsigned long long)ref[k].hits,
			       (unsigned long long)res[k].blocks, sim_s[k] * 1e3, ref[k].secs * 1e3,
			       ref[k].secs / sim_s[k], (double)res[k].blocks / sim_s[k] / 1e6);
		printf("simulation only: ratio_vs_reference %.1fx; plan %.1f M accesses/s per core, "
		       "reference %.1f M/s\n", ratio, aps / 1e6, ref_aps / 1e6);
		printf("end to end (parse + one run per capacity; the reference's whole process): "
		       "plan %.1f ms, reference %.1f ms, %.1fx\n", plan_e2e * 1e3, ref_wall * 1e3,
		       ratio_e2e);
	}
	if (bad)
		fprintf(stderr, "kvtier-bench plan: hit blocks differ from the reference\n");
	return bad ? 1 : 0;
}
