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
 *
 * In time (`queueing`): the same trace on 4 nodes round-robin, LRU per
 * node, with queueing, loads and prefill (plan_sim_run + plan_fleet_run)
 * against the reference's own implementation of that model (PLAN_QUEUE),
 * TTFT percentiles equal to the microsecond; and `grid`: `kvtier plan` on
 * a 100-configuration grid with queueing (5 DRAM x 5 NVMe x 2 shared
 * sizes x 2 policies, 4 nodes), its whole process against 100 runs of the
 * reference's in-time loop (ratio_vs_python).
 * libCacheSim (`libcachesim`, PyPI's) runs beside the planner in one process
 * (bench-data/plan_libcachesim.py: its docstring says how): LRU and S3-FIFO
 * at libCacheSim's defaults, per-access hits equal to the block, and the
 * simulation loops' accesses per second (ratio_vs_libcachesim).
 * The reference script and the default trace (the repository's
 * tests/data/traces/conversation_trace.jsonl) are the copies the build puts
 * in bench-data/ next to this program; a TRACE argument overrides the trace.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "common/err.h"
#include "plan/cost.h"
#include "plan/fleet.h"
#include "plan/plan.h"
#include "kvtier/plan.h"

#define MAXCAP 16
/* The end-to-end process comparison: the trace this many times over with
 * fresh ids (--scale), three LRU capacities (1000, 5000, unbounded). */
#define E2E_SCALE 25

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
 * in *wall, and (parse_s not NULL) the time the script spent reading the
 * trace with json.loads in *parse_s.  0 or -1. */
static int run_ref(const char *py, const char *trace, const char *caps_arg, unsigned repeat,
		   struct ref_row *rows, unsigned ncap, double *wall, double *parse_s)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "PLAN_REPEAT=%u%s python3 '%s' '%s' %s", repeat,
		 parse_s ? " PLAN_PARSE_SECONDS=1" : "", py, trace, caps_arg);
	double t0 = mono();
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char line[512];
	unsigned k = 0;
	int parsed = !parse_s;
	while (k < ncap && fgets(line, sizeof(line), p)) {
		char cap[64];
		unsigned long long h, b;
		double s;
		if (parse_s && sscanf(line, "parse %lf", &s) == 1) {
			*parse_s = s;
			parsed = 1;
		} else if (sscanf(line, "%63s %llu %llu %lf", cap, &h, &b, &s) == 4) {
			rows[k].hits = h;
			rows[k].blocks = b;
			rows[k].secs = s;
			k++;
		}
	}
	int st = pclose(p);
	*wall = mono() - t0;
	return st == 0 && k == ncap && parsed ? 0 : -1;
}

/* The bound of a trace read: the file's bytes read the way the reader
 * reads them (1 MiB freads), nothing parsed.  Seconds, or -1. */
static double raw_read_s(const char *path, uint64_t *bytes)
{
	static char buf[1 << 20];
	double t0 = mono();
	FILE *f = fopen(path, "rb");
	size_t got;

	if (!f)
		return -1;
	*bytes = 0;
	while ((got = fread(buf, 1, sizeof(buf), f)) > 0)
		*bytes += got;
	fclose(f);
	return mono() - t0;
}

/* `src` (Mooncake-style JSON lines: timestamp, hash_ids) `times` times
 * over into a new file `dst`, each copy with fresh block ids (above every
 * id of the copies before) and its timestamps after the copy before: the
 * same traffic from new conversations.  0 or -1. */
static int write_repeated(const char *src, unsigned times, const char *dst)
{
	FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
	json_int_t max_id = -1, last_ts = 0;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int rc = out ? 0 : -1;

	for (unsigned r = 0; !rc && r < times + 1; r++) {
		/* Pass 0 finds the largest id and timestamp; passes 1.. write. */
		json_int_t id_off = (max_id + 1) * (json_int_t)(r ? r - 1 : 0);
		json_int_t ts_off = (last_ts + 1000) * (json_int_t)(r ? r - 1 : 0);
		rewind(in);
		while (!rc && (len = getline(&line, &cap, in)) > 0) {
			if (strspn(line, " \t\r\n") == (size_t)len)
				continue;
			json_t *o = json_loadb(line, (size_t)len, 0, NULL), *ids, *ts, *v;
			size_t i;
			ids = o ? json_object_get(o, "hash_ids") : NULL;
			ts = o ? json_object_get(o, "timestamp") : NULL;
			if (!json_is_array(ids) || !json_is_integer(ts)) {
				rc = -1;
			} else if (r == 0) {
				if (json_integer_value(ts) > last_ts)
					last_ts = json_integer_value(ts);
				json_array_foreach(ids, i, v)
					if (json_integer_value(v) > max_id)
						max_id = json_integer_value(v);
			} else {
				json_integer_set(ts, json_integer_value(ts) + ts_off);
				json_array_foreach(ids, i, v)
					json_integer_set(v, json_integer_value(v) + id_off);
				if (json_dumpf(o, out, JSON_COMPACT) || fputc('\n', out) == EOF)
					rc = -1;
			}
			json_decref(o);
		}
	}
	if (out && fclose(out))
		rc = -1;
	if (in)
		fclose(in);
	free(line);
	return rc;
}

/* Wall seconds of running argv to its exit, its output thrown away (as a
 * user's shell would start it); -1 if it could not run or failed. */
static double run_proc(char *const argv[])
{
	double t0 = mono();
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return -1;
	return mono() - t0;
}

/* Both whole processes, interleaved round by round: `kvtier plan` and the
 * reference on the trace `scale` times over with fresh ids, three LRU
 * capacities.  The per-round seconds into plan_s[] and ref_s[]; 0 or 1. */
static int process_rounds(const char *py, const char *trace, unsigned scale, unsigned rounds,
			  double *plan_s, double *ref_s)
{
	char dir[4096], head[4200], kvtier[4096];
	int rc = 1;

	if (!bench_data_path("../kvtier", kvtier, sizeof(kvtier))) {
		fprintf(stderr, "kvtier-bench plan: %s not found: it is built next to kvtier-bench\n",
			kvtier);
		return 1;
	}
	if (bench_scratch_dir("plan", "/tmp", "plan", dir, sizeof(dir)))
		return 1;
	snprintf(head, sizeof(head), "%s/head.jsonl", dir);
	if (write_repeated(trace, scale, head)) {
		fprintf(stderr, "kvtier-bench plan: %s: cannot write %s %u times over (a Mooncake "
				"trace: timestamp and hash_ids on every line)\n", head, trace, scale);
		goto out;
	}
	char *plan_argv[] = {kvtier, "plan", head, "--dram", "1000,5000,inf", "--policy", "lru",
			     "--quiet", NULL};
	char *ref_argv[] = {"/usr/bin/env", "python3", (char *)py, head, "1000", "5000", "inf",
			    NULL};
	for (unsigned r = 0; r < rounds; r++) {
		plan_s[r] = run_proc(plan_argv);
		ref_s[r] = run_proc(ref_argv);
		if (plan_s[r] < 0 || ref_s[r] < 0) {
			fprintf(stderr, "kvtier-bench plan: %s failed on %s\n",
				plan_s[r] < 0 ? "kvtier plan" : "the reference", head);
			goto out;
		}
	}
	rc = 0;
out:
	bench_remove_tree(dir);
	return rc;
}

/* The queueing model of the reference (PLAN_QUEUE): per capacity its
 * TTFT p50/p90/p99 and queue p90 (ms) and the loop's seconds.  0 or -1. */
static int run_queue_ref(const char *py, const char *trace, const char *caps_arg,
			 const char *queue, double (*rows)[5], unsigned ncap)
{
	char cmd[16384];
	snprintf(cmd, sizeof(cmd), "PLAN_QUEUE='%.500s' python3 '%s' '%s' %s", queue, py, trace, caps_arg);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char line[512], cap[64];
	unsigned k = 0;
	while (k < ncap && fgets(line, sizeof(line), p))
		if (sscanf(line, "%63s %lf %lf %lf %lf %lf", cap, &rows[k][0], &rows[k][1], &rows[k][2],
			   &rows[k][3], &rows[k][4]) == 6)
			k++;
	return pclose(p) == 0 && k == ncap ? 0 : -1;
}

#define QUEUE_NODES 4

/* The in-time comparison: plan's simulation and clock per capacity (the
 * fastest of `repeat`) against the reference's; 0 if they agree. */
static int queueing(const char *py, const struct plan_trace *pt, const char *trace,
		    const uint64_t *caps, const char *caps_arg, unsigned ncap, unsigned repeat,
		    double *plan_s, double *ref_s, int *exact)
{
	const struct plan_model *m = plan_model_find("Llama-3.1-8B");
	const struct plan_gpu *g = plan_gpu_find("H100");
	const struct plan_tier_cost *d = plan_tier_find("dram");
	const struct plan_link *pcie = plan_link_find("pcie");
	kvt_plan_fleet_conf f = {.model = m, .gpu = g, .rate = 1, .nodes = QUEUE_NODES,
				 .gpus_per_node = 1};
	f.tier[0] = d;
	f.tier[1] = plan_tier_find("nvme");
	f.tier[2] = plan_tier_find("fs");
	f.link_gbps[KVT_PLAN_LINK_PCIE] = pcie->gbps;
	char queue[512];
	snprintf(queue, sizeof(queue), "%d 1 %.17g %u %u %.17g %.17g %.17g %.17g", QUEUE_NODES,
		 m->params, m->layers, m->d_model, plan_kv_bytes_per_token(m),
		 g->tflops * 1e12 * g->mfu, d->gbps < pcie->gbps ? d->gbps : pcie->gbps,
		 d->latency_us * 1e-6);
	double rows[MAXCAP][5];
	if (run_queue_ref(py, trace, caps_arg, queue, rows, ncap)) {
		fprintf(stderr, "kvtier-bench plan: the reference's queueing (PLAN_QUEUE) failed\n");
		return 1;
	}
	kvt_plan_req_hit *ph = malloc((pt->t.nreq + 1) * sizeof(*ph));
	if (!ph)
		return 1;
	*plan_s = *ref_s = 0;
	*exact = 1;
	for (unsigned k = 0; k < ncap; k++) {
		struct plan_conf c = {.kind = KVT_EVICT_LRU, .nodes = QUEUE_NODES};
		c.tier[PLAN_T0].capacity = caps[k];
		struct plan_result r;
		kvt_plan_timing tm;
		double best = 0;
		for (unsigned i = 0; i < repeat; i++) {
			double a = mono();
			if (plan_sim_run(pt, &c, &r, ph) || plan_fleet_run(pt, ph, &f, &tm, NULL, NULL, NULL, 0)) {
				free(ph);
				fprintf(stderr, "kvtier-bench plan: %s\n", kvt_errmsg());
				return 1;
			}
			double dt = mono() - a;
			if (!i || dt < best)
				best = dt;
		}
		double got[4] = { tm.ttft_p50 * 1e3, tm.ttft_p90 * 1e3, tm.ttft_p99 * 1e3, tm.wait_p90 * 1e3 };
		for (int j = 0; j < 4; j++)
			if (got[j] - rows[k][j] > 1e-3 + 1e-6 * rows[k][j] ||
			    rows[k][j] - got[j] > 1e-3 + 1e-6 * rows[k][j])
				*exact = 0;
		*plan_s += best;
		*ref_s += rows[k][4];
	}
	free(ph);
	return 0;
}

/* `kvtier plan` on the 100-configuration grid with queueing, as a user
 * starts it (every core it wants); its wall seconds, or -1. */
/* plan_libcachesim.py on `trace` at the finite capacities of caps_arg
 * (space-separated): its JSON (malloc'd), or NULL with the reason in why. */
static char *libcachesim_run(const char *trace, const char *caps_arg, unsigned rounds,
			     char *why, size_t whylen)
{
	char script[4096], lib[4096], dir[4096], out[4200], err[4200], python[4096];
	char caps[512] = "", nr[16];
	char *res = NULL;
	int w;
	FILE *f;

	if (!bench_data_path("plan_libcachesim.py", script, sizeof(script)) ||
	    bench_beside_exe("libkvtier_plan.so", lib, sizeof(lib))) {
		w = snprintf(why, whylen, "%s or libkvtier_plan.so missing (the build puts them there)",
			     script);
		(void)w;
		return NULL;
	}
	if (strchr(KVT_BENCH_PYTHON, '/'))
		snprintf(python, sizeof(python), "%s", KVT_BENCH_PYTHON);
	else if (!bench_which(KVT_BENCH_PYTHON, python, sizeof(python))) {
		snprintf(why, whylen, "no %s in PATH", KVT_BENCH_PYTHON);
		return NULL;
	}
	for (const char *p = caps_arg; *p;) {
		size_t n = strcspn(p, " ");
		if (n && strncmp(p, "inf", n) && strlen(caps) + n + 2 < sizeof(caps))
			snprintf(caps + strlen(caps), sizeof(caps) - strlen(caps), "%s%.*s",
				 *caps ? "," : "", (int)n, p);
		p += n + (p[n] == ' ');
	}
	if (!*caps) {
		snprintf(why, whylen, "no finite capacity in --caps");
		return NULL;
	}
	if (bench_scratch_dir("plan", "/tmp", "lcs", dir, sizeof(dir))) {
		snprintf(why, whylen, "no scratch directory");
		return NULL;
	}
	snprintf(out, sizeof(out), "%s/out.json", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	snprintf(nr, sizeof(nr), "%u", rounds);
	setenv("KVTIER_LIB", lib, 1);
	char *argv[] = { python, script, (char *)trace, caps, nr, NULL };
	int rc = bench_run(argv, out, err);
	if ((f = fopen(out, "r"))) {
		char buf[65536];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
			buf[--n] = '\0';
		if (n && buf[0] == '{')
			res = strdup(buf);
	}
	if (!res && (f = fopen(err, "r"))) {
		char buf[512];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		w = snprintf(why, whylen, "%s exited %d: %s", script, rc, buf);
	} else if (!res) {
		w = snprintf(why, whylen, "%s exited %d with no output", script, rc);
	}
	(void)w; /* a long path only shortens the message */
	bench_remove_tree(dir);
	return res;
}

/* The libCacheSim side's JSON as lines of text. */
static void libcachesim_text(const char *js)
{
	json_error_t e;
	json_t *d = json_loads(js, 0, &e), *c;
	size_t i;

	if (!d) {
		printf("libCacheSim: unreadable output: %s\n", e.text);
		return;
	}
	printf("libCacheSim %s in the same process (per-access hits; simulation loops only, "
	       "median of %lld rounds):\n",
	       json_string_value(json_object_get(d, "libcachesim_version")),
	       (long long)json_integer_value(json_object_get(d, "rounds")));
	json_array_foreach(json_object_get(d, "configs"), i, c) {
		printf("  %-6s %6lld blocks: hits %lld, libCacheSim %lld %s; %.1f M accesses/s, "
		       "libCacheSim %.1f M/s: ratio_vs_libcachesim %.1fx\n",
		       json_string_value(json_object_get(c, "policy")),
		       (long long)json_integer_value(json_object_get(c, "capacity_blocks")),
		       (long long)json_integer_value(json_object_get(c, "kvtier_hits")),
		       (long long)json_integer_value(json_object_get(c, "libcachesim_hits")),
		       json_is_true(json_object_get(c, "exact")) ? "(equal)" : "DIFFER",
		       json_real_value(json_object_get(json_object_get(c, "kvtier_accesses_per_s"),
						       "median")) / 1e6,
		       json_real_value(json_object_get(json_object_get(c, "libcachesim_accesses_per_s"),
						       "median")) / 1e6,
		       json_real_value(json_object_get(c, "ratio_vs_libcachesim")));
	}
	json_decref(d);
}

static double grid_run(const char *trace)
{
	char kvtier[4096];
	if (!bench_data_path("../kvtier", kvtier, sizeof(kvtier)))
		return -1;
	char *argv[] = {kvtier, "plan", (char *)trace, "--dram", "1000,2000,5000,10000,20000",
			"--nvme", "0,10000,20000,50000,100000", "--shared", "0,inf", "--policy",
			"lru,s3fifo", "--nodes", "4", "--csv", "--quiet", NULL};
	return run_proc(argv);
}

int bench_plan(int argc, char **argv)
{
	const char *trace = NULL, *caps_s = "1000,5000,20000,inf";
	unsigned repeat = 3, rounds = 5, scale = E2E_SCALE;
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
		} else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
			uint64_t r;
			if (whole(argv[++i], 1, BENCH_MAX_ROUNDS, &r)) {
				fprintf(stderr, "kvtier-bench plan: --rounds \"%s\": expected a whole number 1..%d\n",
					argv[i], BENCH_MAX_ROUNDS);
				return 2;
			}
			rounds = (unsigned)r;
		} else if (!strcmp(argv[i], "--scale") && i + 1 < argc) {
			uint64_t v;
			if (whole(argv[++i], 1, 1000, &v)) {
				fprintf(stderr, "kvtier-bench plan: --scale \"%s\": expected a whole "
					"number 1..1000\n", argv[i]);
				return 2;
			}
			scale = (unsigned)v;
		} else if (!strcmp(argv[i], "--caps") && i + 1 < argc) {
			caps_s = argv[++i];
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: kvtier-bench plan [TRACE] [--caps 1000,5000,20000,inf] "
			       "[--repeat N] [--rounds N] [--scale N] [--json]\n"
			       "  --scale N  the whole-process comparison runs the trace N times over\n"
			       "             with fresh ids (default %d)\n", E2E_SCALE);
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

	/* plan: read the trace (the first read is the end-to-end one; the
	 * reader's speed is the fastest of `repeat`, each read after a raw
	 * read of the same bytes, its bound), then each capacity the fastest
	 * of `repeat` runs. */
	struct plan_trace pt;
	double parse_s = 0, read_best = 0, raw_best = 0;
	uint64_t trace_bytes = 0;
	int rc = 0;
	for (unsigned r = 0; r < repeat && !rc; r++) {
		double raw = raw_read_s(trace, &trace_bytes);
		if (raw < 0) {
			fprintf(stderr, "kvtier-bench plan: %s: cannot read it\n", trace);
			return 1;
		}
		if (r)
			plan_trace_free(&pt);
		double t0 = mono();
		rc = plan_trace_read(trace, PLAN_FMT_AUTO, 0, 0, &pt);
		double d = mono() - t0;
		if (!r)
			parse_s = d;
		if (!r || d < read_best)
			read_best = d;
		if (!r || raw < raw_best)
			raw_best = raw;
	}
	if (rc) {
		fprintf(stderr, "kvtier-bench plan: %s\n", kvt_errmsg());
		return 1;
	}
	double q_plan = 0, q_ref = 0;
	int q_exact = 0;
	if (!rc && queueing(py, &pt, trace, caps, caps_arg, ncap, repeat, &q_plan, &q_ref, &q_exact)) {
		plan_trace_free(&pt);
		return 1;
	}
	double grid_s = grid_run(trace);
	if (grid_s < 0) {
		fprintf(stderr, "kvtier-bench plan: kvtier plan on the 100-configuration grid failed\n");
		plan_trace_free(&pt);
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
	double ref_wall_rep, ref_wall, py_parse_rep, py_parse;
	if (run_ref(py, trace, caps_arg, repeat, ref, ncap, &ref_wall_rep, &py_parse_rep) ||
	    run_ref(py, trace, caps_arg, 1, ref1, ncap, &ref_wall, &py_parse)) {
		fprintf(stderr, "kvtier-bench plan: the reference (python3 %s) failed\n", py);
		return 1;
	}
	if (py_parse_rep < py_parse)
		py_parse = py_parse_rep;

	/* Whole processes, as a user runs them. */
	double proc_plan[BENCH_MAX_ROUNDS], proc_ref[BENCH_MAX_ROUNDS];
	if (process_rounds(py, trace, scale, rounds, proc_plan, proc_ref))
		return 1;
	struct summary sp = bench_summarize(proc_plan, (int)rounds),
		       sr = bench_summarize(proc_ref, (int)rounds);
	double ratio_proc = sr.median / sp.median;

	/* libCacheSim beside the planner, in one process. */
	char lcs_why[9000] = "";
	char *lcs = libcachesim_run(trace, caps_arg, rounds, lcs_why, sizeof(lcs_why));
	int lcs_exact = 0;
	if (lcs) {
		json_t *d = json_loads(lcs, 0, NULL);
		lcs_exact = json_is_true(json_object_get(d, "exact"));
		json_decref(d);
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
		       "\"reference_seconds\":%.6f,\"ratio_vs_reference\":%.2f},"
		       "\"trace_read\":{\"bytes\":%llu,\"seconds\":%.6f,\"mb_per_s\":%.1f,"
		       "\"raw_read_seconds\":%.6f,\"ratio_vs_raw_read\":%.3f,"
		       "\"python_json_seconds\":%.6f,\"ratio_vs_python_json\":%.2f},"
		       "\"process\":{\"trace_times\":%u,\"fresh_ids\":true,"
		       "\"dram_blocks\":\"1000,5000,inf\",\"rounds\":%u,",
		       bad ? "false" : "true", plan_sum, ref_sum, ratio, aps, ref_aps, plan_e2e,
		       parse_s, ref_wall, ratio_e2e, (unsigned long long)trace_bytes, read_best,
		       (double)trace_bytes / read_best / 1e6, raw_best, raw_best / read_best,
		       py_parse, py_parse / read_best, scale, rounds);
		bench_json_summary("plan_seconds", sp);
		putchar(',');
		bench_json_summary("reference_seconds", sr);
		printf(",\"ratio_vs_python\":%.2f},", ratio_proc);
		printf("\"queueing\":{\"nodes\":%d,\"exact\":%s,\"plan_seconds\":%.6f,"
		       "\"reference_seconds\":%.6f,\"ratio_vs_python\":%.2f},"
		       "\"grid\":{\"configs\":100,\"nodes\":%d,\"seconds\":%.3f,"
		       "\"reference_seconds_100\":%.3f,\"ratio_vs_python\":%.2f},",
		       QUEUE_NODES, q_exact ? "true" : "false", q_plan, q_ref, q_ref / q_plan,
		       QUEUE_NODES, grid_s, q_ref / ncap * 100, q_ref / ncap * 100 / grid_s);
		if (lcs) {
			printf("\"libcachesim\":%s}\n", lcs);
		} else {
			printf("\"libcachesim\":{");
			bench_json_str("error", lcs_why);
			printf("}}\n");
		}
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
		printf("trace read (fastest of %u): %.1f ms for %.1f MB (%.0f MB/s); a raw read "
		       "%.1f ms (ratio_vs_raw_read %.2f); Python's json.loads %.1f ms "
		       "(ratio_vs_python_json %.1fx)\n", repeat, read_best * 1e3,
		       (double)trace_bytes / 1e6, (double)trace_bytes / read_best / 1e6, raw_best * 1e3,
		       raw_best / read_best, py_parse * 1e3, py_parse / read_best);
		char a[64], b[64];
		printf("whole processes, the trace %u times over (fresh ids), LRU at 1000, 5000, inf "
		       "(median of %u "
		       "interleaved rounds): kvtier plan %s ms, reference %s ms: ratio_vs_python %.1fx\n",
		       scale, rounds,
		       bench_fmt_summary((struct summary){sp.median * 1e3, sp.min * 1e3, sp.max * 1e3}, a, sizeof(a)),
		       bench_fmt_summary((struct summary){sr.median * 1e3, sr.min * 1e3, sr.max * 1e3}, b, sizeof(b)),
		       ratio_proc);
		printf("in time, %d nodes, LRU at the same capacities: TTFT percentiles %s the "
		       "reference's; plan %.1f ms, reference %.1f ms: ratio_vs_python %.1fx\n",
		       QUEUE_NODES, q_exact ? "equal to" : "DIFFER from", q_plan * 1e3, q_ref * 1e3,
		       q_ref / q_plan);
		printf("grid: kvtier plan, 100 configurations with queueing (%d nodes) in %.2f s; "
		       "100 of the reference's in-time runs would take %.1f s: ratio_vs_python %.1fx\n",
		       QUEUE_NODES, grid_s, q_ref / ncap * 100, q_ref / ncap * 100 / grid_s);
		if (lcs)
			libcachesim_text(lcs);
		else
			printf("libCacheSim: not run: %s\n", lcs_why);
	}
	bad += !q_exact;
	if (!lcs_exact)
		fprintf(stderr, "kvtier-bench plan: libCacheSim %s\n",
			lcs ? "counts other hits (see \"exact\")" : "did not run");
	bad += lcs && !lcs_exact;
	free(lcs);
	if (bad)
		fprintf(stderr, "kvtier-bench plan: hit blocks differ from the reference\n");
	return bad ? 1 : 0;
}
