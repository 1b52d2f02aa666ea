/*
 * daemon.c — kvtier-bench daemon: kvtierd over TCP loopback against
 * Debian's redis-server (persistence off), both started here, driven by
 * the same clients with the same settings in interleaved rounds:
 *
 *   resp     redis-benchmark, 4 clients, SET and GET of 1, 4 and 32 MiB
 *            values: ratio_vs_redis of requests per second (target >= 1.2),
 *            and of the CPU time each server spent per request, its
 *            threads and the kernel's work in them (/proc/PID/stat):
 *            ratio_vs_redis_cpu, redis-server's over kvtierd's, which the
 *            other work of a shared machine moves less than the rates;
 *   lmcache  LMCache's command pattern from 8 redis-py processes, 3 and
 *            14 MiB values: ratio_vs_redis of keys per second (>= 1.0);
 *   idle     4 busy redis-benchmark clients (GET 1 MiB) with 1,000 idle
 *            connections open against 4 alone: ratio_vs_busy_alone
 *            (>= 0.9), and the daemon's resident memory with and without.
 *
 * kvtierd serves a DRAM tier only, as redis-server keeps its data in
 * memory only: the comparison is of the two servers, not of a disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "bench.h"

#define CMD "daemon"
#define ROUNDS 3
#define N_IDLE 1000

struct server {
	const char *name;
	pid_t pid;
	int port;
};

static const struct {
	int mib;
	int n, n_quick; /* redis-benchmark requests per run */
} resp_sizes[] = { { 1, 240, 80 }, { 4, 64, 24 }, { 32, 12, 6 } };
#define N_RESP (sizeof(resp_sizes) / sizeof(resp_sizes[0]))
static const int lm_sizes[] = { 3, 14 };
#define N_LM 2

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *b = calloc(1, 65536);
	if (f && b) {
		size_t n = fread(b, 1, 65535, f);
		b[n] = 0;
	}
	if (f)
		fclose(f);
	return b;
}

/* Up within 20 s: a PING answered. */
static int wait_up(int port)
{
	for (int i = 0; i < 400; i++) {
		int fd = bench_connect(port);
		char b[16];
		if (fd >= 0 && write(fd, "PING\r\n", 6) == 6 && read(fd, b, sizeof(b)) >= 5) {
			close(fd);
			return 0;
		}
		if (fd >= 0)
			close(fd);
		usleep(50000);
	}
	return -1;
}

static long rss_kib(pid_t pid)
{
	char p[64], *s, *b;
	long v = -1;

	snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
	b = slurp(p);
	if (b && (s = strstr(b, "VmRSS:")))
		v = strtol(s + 6, NULL, 10);
	free(b);
	return v;
}

/* CPU seconds a process has spent, user and system, or -1. */
static double cpu_s(pid_t pid)
{
	char p[64], *b, *s;
	unsigned long long ut, st;
	double v = -1;

	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	b = slurp(p);
	/* the fields after the command name, which may hold spaces */
	if (b && (s = strrchr(b, ')')) &&
	    sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
		v = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	free(b);
	return v;
}

static void stop(struct server *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
	}
	s->pid = 0;
}

/* redis-benchmark's --csv line for the test: requests per second, or -1. */
static double resp_rps(const char *bench, int port, const char *test, int mib, int n,
		       const char *out)
{
	char p[16], nn[16], d[16];
	char *argv[] = { (char *)bench, "-h", "127.0.0.1", "-p", p, "-c", "4", "-n", nn,
			 "-d", d, "-t", (char *)test, "--csv", NULL };
	double rps = -1;

	snprintf(p, sizeof(p), "%d", port);
	snprintf(nn, sizeof(nn), "%d", n);
	snprintf(d, sizeof(d), "%d", mib << 20);
	if (bench_run(argv, out, "/dev/null"))
		return -1;
	char *b = slurp(out), *s = b ? strstr(b, "\n\"") : NULL;
	if (s && (s = strchr(s + 2, ',')))
		rps = strtod(s + 2, NULL);
	free(b);
	return rps;
}

static double lm_keys(const char *py, const char *script, int port, int mib, int n,
		      const char *out)
{
	char p[16], m[16], nn[16];
	char *argv[] = { (char *)py, (char *)script, p, m, nn, "8", NULL };
	double v = -1;

	snprintf(p, sizeof(p), "%d", port);
	snprintf(m, sizeof(m), "%d", mib);
	snprintf(nn, sizeof(nn), "%d", n);
	if (bench_run(argv, out, "/dev/null"))
		return -1;
	char *b = slurp(out), *s = b ? strstr(b, "\"keys_per_s\":") : NULL;
	if (s)
		v = strtod(s + 13, NULL);
	free(b);
	return v;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench daemon [--json] [--quick]\n"
		"kvtierd (DRAM tier) against redis-server (persistence off), both started\n"
		"here, same clients and settings, %d interleaved rounds (1 with --quick):\n"
		"  resp     redis-benchmark -c 4, SET and GET of 1, 4, 32 MiB: ratio_vs_redis\n"
		"           of requests/s (target >= 1.2), and ratio_vs_redis_cpu: the\n"
		"           servers' CPU time per request, redis-server's over kvtierd's\n"
		"  lmcache  LMCache's SET kv_bytes + SET metadata, EXISTS, GET + GET from 8\n"
		"           redis-py processes, 3 and 14 MiB: ratio_vs_redis of keys/s (>= 1.0)\n"
		"  idle     4 busy clients with %d idle connections against 4 alone:\n"
		"           ratio_vs_busy_alone (>= 0.9), and kvtierd's resident memory\n"
		"  --json   every figure as JSON\n", ROUNDS, N_IDLE);
}

struct ratio3 {
	double a[BENCH_MAX_ROUNDS], b[BENCH_MAX_ROUNDS], r[BENCH_MAX_ROUNDS];
};

static void put3(struct ratio3 *x, int round, double subj, double bound)
{
	x->a[round] = subj;
	x->b[round] = bound;
	x->r[round] = bound > 0 ? subj / bound : 0;
}

static void json3(const struct ratio3 *x, int rounds, const char *subj, const char *bound,
		  const char *ratio)
{
	bench_json_summary(subj, bench_summarize(x->a, rounds));
	printf(",");
	bench_json_summary(bound, bench_summarize(x->b, rounds));
	printf(",");
	bench_json_summary(ratio, bench_summarize(x->r, rounds));
}

static void row3(const char *what, const char *op, const struct ratio3 *x, int rounds)
{
	char a[64], b[64], c[64];
	printf("%-18s %-5s %-24s %-24s %s\n", what, op,
	       bench_fmt_summary(bench_summarize(x->a, rounds), a, sizeof(a)),
	       bench_fmt_summary(bench_summarize(x->b, rounds), b, sizeof(b)),
	       bench_fmt_summary(bench_summarize(x->r, rounds), c, sizeof(c)));
}

int bench_daemon(int argc, char **argv)
{
	struct bench_opts o = { 0 };
	char dir[1024], kvtierd[4200], rs[1024], rb[1024], py[] = "/usr/bin/python3";
	char script[1200], out[1200], log[1200];
	struct server srv[2] = { { "redis-server", 0, 0 }, { "kvtierd", 0, 0 } };
	static struct ratio3 resp[N_RESP][2], cpu[N_RESP][2], lm[N_LM], idle;
	long rss_before = -1, rss_idle = -1;
	int rounds, rc = 1, *idle_fd = NULL;

	if ((rc = bench_opts_only(CMD, argc, argv, &o, usage)) >= 0)
		return rc;
	rc = 1;
	rounds = o.quick ? 1 : ROUNDS;
	if (bench_beside_exe("kvtierd", kvtierd, sizeof(kvtierd)))
		kvtierd[0] = '\0';
	if (access(kvtierd, X_OK) || !bench_which("redis-server", rs, sizeof(rs)) ||
	    !bench_which("redis-benchmark", rb, sizeof(rb)) || access(py, X_OK) ||
	    !bench_data_path("daemon_lmcache.py", script, sizeof(script))) {
		fprintf(stderr, "kvtier-bench daemon: needs %s, redis-server, redis-benchmark, "
				"%s with redis-py and bench-data/daemon_lmcache.py "
				"(scripts/install-deps.sh, a full build)\n", kvtierd, py);
		return 1;
	}
	if (bench_scratch_dir(CMD, "/tmp", "daemon", dir, sizeof(dir)))
		return 1;
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(log, sizeof(log), "%s/kvtierd.out", dir);

	/* The idle connections need descriptors. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < N_IDLE + 256) {
		rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	char rport[16], kport[16];
	srv[0].port = bench_free_port();
	snprintf(rport, sizeof(rport), "%d", srv[0].port);
	char *rargv[] = { rs, "--port", rport, "--bind", "127.0.0.1", "--save", "",
			  "--appendonly", "no", "--daemonize", "no", NULL };
	srv[0].pid = bench_spawn(rargv, NULL, "/dev/null");
	srv[1].port = bench_free_port();
	snprintf(kport, sizeof(kport), "%d", srv[1].port);
	char *kargv[] = { kvtierd, "--port", kport, "--threads", "4", "--set",
			  "max_local_cpu_size=2GiB", "--log-level", "warn", NULL };
	srv[1].pid = bench_spawn(kargv, log, "/dev/null");
	if (srv[0].pid < 0 || srv[1].pid < 0 || wait_up(srv[0].port) || wait_up(srv[1].port)) {
		fprintf(stderr, "kvtier-bench daemon: a server did not start\n");
		goto out;
	}

	for (int r = 0; r < rounds; r++) {
		for (size_t s = 0; s < N_RESP; s++) {
			int nreq = o.quick ? resp_sizes[s].n_quick : resp_sizes[s].n;
			double v[2][2], c[2][2];
			for (int k = 0; k < 2; k++) {
				int w = (r + k) % 2; /* who goes first alternates */
				double c0 = cpu_s(srv[w].pid), c1, c2;
				v[w][0] = resp_rps(rb, srv[w].port, "set", resp_sizes[s].mib, nreq, out);
				c1 = cpu_s(srv[w].pid);
				v[w][1] = resp_rps(rb, srv[w].port, "get", resp_sizes[s].mib, nreq, out);
				c2 = cpu_s(srv[w].pid);
				c[w][0] = (c1 - c0) * 1e3 / nreq; /* ms per request */
				c[w][1] = (c2 - c1) * 1e3 / nreq;
				if (v[w][0] < 0 || v[w][1] < 0) {
					fprintf(stderr, "kvtier-bench daemon: redis-benchmark against "
							"%s failed\n", srv[w].name);
					goto out;
				}
			}
			put3(&resp[s][0], r, v[1][0], v[0][0]);
			put3(&resp[s][1], r, v[1][1], v[0][1]);
			/* the bound over the subject: above 1, kvtierd spends less */
			put3(&cpu[s][0], r, c[1][0], c[0][0]);
			put3(&cpu[s][1], r, c[1][1], c[0][1]);
			for (int op = 0; op < 2; op++)
				cpu[s][op].r[r] = c[1][op] > 0 ? c[0][op] / c[1][op] : 0;
		}
		for (int s = 0; s < N_LM; s++) {
			double v[2];
			int nk = o.quick ? 2 : (lm_sizes[s] > 8 ? 3 : 6);
			for (int k = 0; k < 2; k++) {
				int w = (r + k) % 2;
				v[w] = lm_keys(py, script, srv[w].port, lm_sizes[s], nk, out);
				if (v[w] < 0) {
					fprintf(stderr, "kvtier-bench daemon: the LMCache pattern "
							"against %s failed\n", srv[w].name);
					goto out;
				}
			}
			put3(&lm[s], r, v[1], v[0]);
		}
		/* Busy alone, then with the idle crowd: GETs of a 1 MiB value. */
		if (resp_rps(rb, srv[1].port, "set", 1, 8, out) < 0)
			goto out;
		double alone = resp_rps(rb, srv[1].port, "get", 1, o.quick ? 80 : 240, out);
		if (!idle_fd)
			idle_fd = malloc(N_IDLE * sizeof(int));
		if (rss_before < 0)
			rss_before = rss_kib(srv[1].pid);
		for (int i = 0; idle_fd && i < N_IDLE; i++)
			idle_fd[i] = bench_connect(srv[1].port);
		usleep(200000);
		rss_idle = rss_kib(srv[1].pid);
		double crowd = resp_rps(rb, srv[1].port, "get", 1, o.quick ? 80 : 240, out);
		for (int i = 0; idle_fd && i < N_IDLE; i++)
			if (idle_fd[i] >= 0)
				close(idle_fd[i]);
		put3(&idle, r, crowd, alone);
	}
	rc = 0;

	if (o.json) {
		printf("{\"bench\":\"daemon\",\"rounds\":%d,\"quick\":%s,\"tiers\":\"dram\",\"resp\":[",
		       rounds, o.quick ? "true" : "false");
		for (size_t s = 0; s < N_RESP; s++)
			for (int op = 0; op < 2; op++) {
				printf("%s{\"value_mib\":%d,\"op\":\"%s\",\"clients\":4,", s || op ? "," : "",
				       resp_sizes[s].mib, op ? "get" : "set");
				json3(&resp[s][op], rounds, "kvtierd_rps", "redis_rps", "ratio_vs_redis");
				printf(",");
				json3(&cpu[s][op], rounds, "kvtierd_cpu_ms_per_req", "redis_cpu_ms_per_req",
				      "ratio_vs_redis_cpu");
				printf("}");
			}
		printf("],\"lmcache\":[");
		for (int s = 0; s < N_LM; s++) {
			printf("%s{\"value_mib\":%d,\"clients\":8,", s ? "," : "", lm_sizes[s]);
			json3(&lm[s], rounds, "kvtierd_keys_per_s", "redis_keys_per_s", "ratio_vs_redis");
			/* What each side copies per value in user space (the
			 * kernel's socket copies aside): kvtierd receives a
			 * SET's value straight into the DRAM tier's pages
			 * (checksummed there) and sends a GET from them;
			 * redis-server keeps a large argument's receive buffer
			 * as the value and sends from it. */
			printf(",\"kvtierd_copies\":{\"set\":0,\"get\":0},"
			       "\"redis_copies\":{\"set\":0,\"get\":0}}");
		}
		printf("],\"idle\":{\"idle_connections\":%d,\"busy_clients\":4,\"value_mib\":1,",
		       N_IDLE);
		json3(&idle, rounds, "busy_rps_with_idle", "busy_rps_alone", "ratio_vs_busy_alone");
		printf(",\"kvtierd_rss_mib\":%.1f,\"kvtierd_rss_mib_with_idle\":%.1f}}\n",
		       rss_before / 1024.0, rss_idle / 1024.0);
	} else {
		printf("kvtier-bench daemon: kvtierd (DRAM tier) vs redis-server (persistence off), "
		       "%d rounds, medians [min..max]\n\n", rounds);
		printf("%-18s %-5s %-24s %-24s %s\n", "redis-benchmark", "op", "kvtierd req/s",
		       "redis req/s", "ratio_vs_redis (>= 1.2)");
		for (size_t s = 0; s < N_RESP; s++) {
			char w[32];
			snprintf(w, sizeof(w), "%d MiB, 4 clients", resp_sizes[s].mib);
			row3(w, "set", &resp[s][0], rounds);
			row3("", "get", &resp[s][1], rounds);
		}
		printf("\n%-18s %-5s %-24s %-24s %s\n", "CPU per request", "op", "kvtierd ms",
		       "redis ms", "ratio_vs_redis_cpu (redis/kvtierd)");
		for (size_t s = 0; s < N_RESP; s++) {
			char w[32];
			snprintf(w, sizeof(w), "%d MiB, 4 clients", resp_sizes[s].mib);
			row3(w, "set", &cpu[s][0], rounds);
			row3("", "get", &cpu[s][1], rounds);
		}
		printf("\n%-18s %-5s %-24s %-24s %s\n", "LMCache pattern", "", "kvtierd keys/s",
		       "redis keys/s", "ratio_vs_redis (>= 1.0)");
		for (int s = 0; s < N_LM; s++) {
			char w[32];
			snprintf(w, sizeof(w), "%d MiB, 8 clients", lm_sizes[s]);
			row3(w, "", &lm[s], rounds);
		}
		printf("\n%-18s %-5s %-24s %-24s %s\n", "1000 idle + 4 busy", "", "busy req/s",
		       "4 alone req/s", "ratio_vs_busy_alone (>= 0.9)");
		row3("GET 1 MiB", "", &idle, rounds);
		printf("kvtierd resident memory: %.1f MiB, %.1f MiB with %d idle connections\n",
		       rss_before / 1024.0, rss_idle / 1024.0, N_IDLE);
	}
out:
	free(idle_fd);
	stop(&srv[0]);
	stop(&srv[1]);
	bench_remove_tree(dir);
	return rc;
}
