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
 * kvtierd serves a DRAM tier only there, as redis-server keeps its data
 * in memory only: the comparison is of the two servers, not of a disk.
 *
 *   disk     kvtierd as a user starts it, `--data-dir` (DRAM and the disk
 *            tier, its defaults otherwise), twice: crash-safe (the
 *            default) and `--durability cached`, in the same rounds as
 *            the two above, SET and GET of 1 and 4 MiB: ratio_vs_redis
 *            (cached: target >= 1.0) and ratio_vs_dram (against the
 *            DRAM-only kvtierd); and the crash-safe SET's bytes per
 *            second against its bound, fio writing the same sizes with an
 *            fdatasync after each, four jobs as there are four clients,
 *            on the same directory (ratio_vs_fio_sync, target >= 0.85):
 *              fio --name=kvtier-sync-bound --directory=DIR/fio
 *                  --ioengine=io_uring --direct=1 --rw=write --bs=VALUE
 *                  --iodepth=1 --numjobs=4 --group_reporting --fdatasync=1
 *                  --size=N/4*VALUE --output-format=json --output=DIR/fio.json
 *            (jobs[0].write.bw_bytes).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <jansson.h>

#include "bench.h"
#include "cli/cli.h"
#include "fio.h"

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
	int n, n_quick; /* redis-benchmark requests per run (multiples of 4) */
	int disk;       /* the --data-dir kvtierds too */
} resp_sizes[] = { { 1, 240, 80, 1 }, { 4, 64, 24, 1 }, { 32, 12, 6, 0 } };
#define N_RESP (sizeof(resp_sizes) / sizeof(resp_sizes[0]))
/* The servers: redis-server, kvtierd on DRAM alone, and kvtierd with
 * --data-dir, crash-safe and cached. */
enum { SRV_REDIS, SRV_DRAM, SRV_SAFE, SRV_CACHED, N_SRV };
#define N_DISK 2 /* SRV_SAFE, SRV_CACHED */
static const char *const disk_names[N_DISK] = { "crash-safe", "cached" };
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

/* The crash-safe SET's bound (see the top): bytes/s, or -1 after saying
 * why. */
static double fio_sync_bps(const struct bench_fio *f, const char *dir, int mib, int n)
{
	char d[1100], out[1100], a_dir[1200], a_bs[48], a_size[48], a_out[1200];
	char *argv[] = { (char *)f->path, "--name=kvtier-sync-bound", a_dir, "--ioengine=io_uring",
			 "--direct=1", "--rw=write", a_bs, "--iodepth=1", "--numjobs=4",
			 "--group_reporting", "--fdatasync=1", a_size, "--output-format=json",
			 a_out, NULL };
	uint8_t *txt = NULL;
	size_t len = 0;
	double bw = -1;

	if (bench_path_join(d, sizeof(d), dir, "fio") || bench_path_join(out, sizeof(out), dir,
									 "fio.json"))
		return -1;
	snprintf(a_dir, sizeof(a_dir), "--directory=%s", d);
	snprintf(a_bs, sizeof(a_bs), "--bs=%d", mib << 20);
	snprintf(a_size, sizeof(a_size), "--size=%lld", (long long)n / 4 * ((long long)mib << 20));
	snprintf(a_out, sizeof(a_out), "--output=%s", out);
	if ((mkdir(d, 0700) && errno != EEXIST) || bench_run(argv, NULL, "/dev/null") ||
	    cli_read_file(out, &txt, &len)) {
		fprintf(stderr, "kvtier-bench daemon: fio (%s %s %s %s ...) failed\n", f->path,
			a_dir, a_bs, a_size);
	} else {
		const char *start = memchr(txt, '{', len); /* notes may come first */
		json_t *doc = start ? json_loadb(start, len - (size_t)(start - (char *)txt), 0,
						 NULL)
				    : NULL;
		json_t *v = json_object_get(
			json_object_get(json_array_get(json_object_get(doc, "jobs"), 0), "write"),
			"bw_bytes");
		if (json_is_number(v))
			bw = json_number_value(v);
		else
			fprintf(stderr, "kvtier-bench daemon: %s has no jobs[0].write.bw_bytes\n",
				out);
		json_decref(doc);
	}
	free(txt);
	unlink(out);
	bench_fio_clean(dir);
	return bw;
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
		"  disk     kvtierd --data-dir (DRAM + disk tier), crash-safe and\n"
		"           --durability cached, in the same rounds, SET and GET of 1 and\n"
		"           4 MiB: ratio_vs_redis (cached >= 1.0), ratio_vs_dram, and the\n"
		"           crash-safe SET against fio writing the same sizes with an\n"
		"           fdatasync after each, 4 jobs, same directory: ratio_vs_fio_sync\n"
		"           (>= 0.85)\n"
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

/* One SET run and one GET run of redis-benchmark against server w, with
 * the server's CPU time per request; 0, or -1 after saying which failed. */
static int resp_pair(const char *rb, const struct server *w, int mib, int n, const char *out,
		     double rps[2], double cpu[2])
{
	double c0 = cpu_s(w->pid), c1, c2;

	rps[0] = resp_rps(rb, w->port, "set", mib, n, out);
	c1 = cpu_s(w->pid);
	rps[1] = resp_rps(rb, w->port, "get", mib, n, out);
	c2 = cpu_s(w->pid);
	cpu[0] = (c1 - c0) * 1e3 / n; /* ms per request */
	cpu[1] = (c2 - c1) * 1e3 / n;
	if (rps[0] < 0 || rps[1] < 0) {
		fprintf(stderr, "kvtier-bench daemon: redis-benchmark against %s failed\n", w->name);
		return -1;
	}
	return 0;
}

int bench_daemon(int argc, char **argv)
{
	struct bench_opts o = { 0 };
	char dir[1024], kvtierd[4200], rs[1024], rb[1024], py[] = "/usr/bin/python3";
	char script[1200], out[1200], log[1200], dlog[N_DISK][1200], ddir[N_DISK][1200];
	struct server srv[N_SRV] = { { "redis-server", 0, 0 }, { "kvtierd", 0, 0 },
				     { "kvtierd --data-dir", 0, 0 },
				     { "kvtierd --data-dir --durability cached", 0, 0 } };
	static struct ratio3 resp[N_RESP][2], cpu[N_RESP][2], lm[N_LM], idle;
	/* disk[s][d][op]: against redis; vs_dram: against DRAM-only kvtierd;
	 * sync[s]: the crash-safe SET's bytes/s against fio's (GB/s). */
	static struct ratio3 disk[N_RESP][N_DISK][2], dcpu[N_RESP][N_DISK][2],
		vs_dram[N_RESP][N_DISK][2], sync[N_RESP];
	struct bench_fio fio = { { 0 }, { 0 } };
	int have_fio;
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
	have_fio = bench_fio_find(&fio);
	if (have_fio)
		bench_fio_version(&fio, dir);
	else
		fprintf(stderr, "kvtier-bench daemon: no fio on PATH: the crash-safe SET is "
				"measured without its bound (Debian: apt-get install fio)\n");
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(log, sizeof(log), "%s/kvtierd.out", dir);

	/* The idle connections need descriptors. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < N_IDLE + 256) {
		rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	char port[N_SRV][16];
	for (int i = 0; i < N_SRV; i++) {
		srv[i].port = bench_free_port();
		snprintf(port[i], sizeof(port[i]), "%d", srv[i].port);
	}
	char *rargv[] = { rs, "--port", port[SRV_REDIS], "--bind", "127.0.0.1", "--save", "",
			  "--appendonly", "no", "--daemonize", "no", NULL };
	srv[SRV_REDIS].pid = bench_spawn(rargv, NULL, "/dev/null");
	char *kargv[] = { kvtierd, "--port", port[SRV_DRAM], "--threads", "4", "--set",
			  "max_local_cpu_size=2GiB", "--log-level", "warn", NULL };
	srv[SRV_DRAM].pid = bench_spawn(kargv, log, "/dev/null");
	/* As a user starts it: the data directory and its defaults (a 1 GiB
	 * DRAM tier, the disk tier under it, 4 threads). */
	for (int d = 0; d < N_DISK; d++) {
		char *dargv[] = { kvtierd, "--port", port[SRV_SAFE + d], "--data-dir", ddir[d],
				  "--log-level", "warn", d ? "--durability" : NULL, "cached", NULL };
		snprintf(ddir[d], sizeof(ddir[d]), "%s/%s", dir, disk_names[d]);
		snprintf(dlog[d], sizeof(dlog[d]), "%s/kvtierd-%s.out", dir, disk_names[d]);
		srv[SRV_SAFE + d].pid = bench_spawn(dargv, dlog[d], "/dev/null");
	}
	for (int i = 0; i < N_SRV; i++)
		if (srv[i].pid < 0 || wait_up(srv[i].port)) {
			fprintf(stderr, "kvtier-bench daemon: %s did not start\n", srv[i].name);
			goto out;
		}

	for (int r = 0; r < rounds; r++) {
		for (size_t s = 0; s < N_RESP; s++) {
			int nreq = o.quick ? resp_sizes[s].n_quick : resp_sizes[s].n;
			int mib = resp_sizes[s].mib;
			/* who goes first turns with the round; fio is one more */
			int n_part = resp_sizes[s].disk ? N_SRV + have_fio : 2;
			double v[N_SRV][2], c[N_SRV][2], bound = -1;
			for (int k = 0; k < n_part; k++) {
				int w = (r + k) % n_part;
				if (w == N_SRV) {
					if ((bound = fio_sync_bps(&fio, dir, mib, nreq)) < 0)
						goto out;
				} else if (resp_pair(rb, &srv[w], mib, nreq, out, v[w], c[w])) {
					goto out;
				}
			}
			put3(&resp[s][0], r, v[SRV_DRAM][0], v[SRV_REDIS][0]);
			put3(&resp[s][1], r, v[SRV_DRAM][1], v[SRV_REDIS][1]);
			/* the bound over the subject: above 1, kvtierd spends less */
			for (int op = 0; op < 2; op++) {
				put3(&cpu[s][op], r, c[SRV_DRAM][op], c[SRV_REDIS][op]);
				cpu[s][op].r[r] = c[SRV_DRAM][op] > 0 ? c[SRV_REDIS][op] / c[SRV_DRAM][op]
								       : 0;
			}
			if (!resp_sizes[s].disk)
				continue;
			for (int d = 0; d < N_DISK; d++)
				for (int op = 0; op < 2; op++) {
					double kd = v[SRV_SAFE + d][op], kc = c[SRV_SAFE + d][op];
					put3(&disk[s][d][op], r, kd, v[SRV_REDIS][op]);
					put3(&vs_dram[s][d][op], r, kd, v[SRV_DRAM][op]);
					put3(&dcpu[s][d][op], r, kc, c[SRV_REDIS][op]);
					dcpu[s][d][op].r[r] = kc > 0 ? c[SRV_REDIS][op] / kc : 0;
				}
			put3(&sync[s], r, v[SRV_SAFE][0] * (double)((uint64_t)mib << 20) / 1e9,
			     bound / 1e9);
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
		printf("],\"disk\":{\"tiers\":\"dram,local_disk\",");
		bench_json_str("fio", have_fio ? fio.version : "");
		printf(",\"bound\":\"fio --rw=write --bs=VALUE --direct=1 --ioengine=io_uring "
		       "--iodepth=1 --numjobs=4 --fdatasync=1, same directory\",\"results\":[");
		int first = 1;
		for (size_t s = 0; s < N_RESP; s++)
			for (int d = 0; resp_sizes[s].disk && d < N_DISK; d++)
				for (int op = 0; op < 2; op++) {
					printf("%s{\"value_mib\":%d,\"op\":\"%s\",\"durability\":\"%s\","
					       "\"clients\":4,", first ? "" : ",", resp_sizes[s].mib,
					       op ? "get" : "set", disk_names[d]);
					first = 0;
					json3(&disk[s][d][op], rounds, "kvtierd_rps", "redis_rps",
					      "ratio_vs_redis");
					printf(",");
					bench_json_summary("ratio_vs_dram",
							   bench_summarize(vs_dram[s][d][op].r, rounds));
					printf(",");
					json3(&dcpu[s][d][op], rounds, "kvtierd_cpu_ms_per_req",
					      "redis_cpu_ms_per_req", "ratio_vs_redis_cpu");
					if (d == 0 && op == 0 && have_fio) {
						printf(",");
						json3(&sync[s], rounds, "kvtierd_gbps", "fio_sync_gbps",
						      "ratio_vs_fio_sync");
					}
					printf("}");
				}
		printf("]},\"lmcache\":[");
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
		for (int d = 0; d < N_DISK; d++) {
			printf("\n%-18s %-5s %-24s %-24s %s\n",
			       d ? "--data-dir, cached" : "--data-dir, safe", "op", "kvtierd req/s",
			       "redis req/s", d ? "ratio_vs_redis (>= 1.0)" : "ratio_vs_redis");
			for (size_t s = 0; s < N_RESP; s++) {
				char w[32];
				if (!resp_sizes[s].disk)
					continue;
				snprintf(w, sizeof(w), "%d MiB, 4 clients", resp_sizes[s].mib);
				row3(w, "set", &disk[s][d][0], rounds);
				row3("", "get", &disk[s][d][1], rounds);
			}
		}
		printf("\n%-18s %-5s %-24s %-24s %s\n", "vs DRAM-only", "op", "", "",
		       "ratio_vs_dram: crash-safe, cached");
		for (size_t s = 0; s < N_RESP; s++) {
			char w[32], a[64], b[64];
			if (!resp_sizes[s].disk)
				continue;
			snprintf(w, sizeof(w), "%d MiB, 4 clients", resp_sizes[s].mib);
			for (int op = 0; op < 2; op++)
				printf("%-18s %-5s %-24s %-24s %s, %s\n", op ? "" : w, op ? "get" : "set",
				       "", "",
				       bench_fmt_summary(bench_summarize(vs_dram[s][0][op].r, rounds),
							 a, sizeof(a)),
				       bench_fmt_summary(bench_summarize(vs_dram[s][1][op].r, rounds),
							 b, sizeof(b)));
		}
		if (have_fio) {
			printf("\n%-18s %-5s %-24s %-24s %s\n", "crash-safe SET", "", "kvtierd GB/s",
			       "fio write+fdatasync", "ratio_vs_fio_sync (>= 0.85)");
			for (size_t s = 0; s < N_RESP; s++) {
				char w[32];
				if (!resp_sizes[s].disk)
					continue;
				snprintf(w, sizeof(w), "%d MiB, 4 clients", resp_sizes[s].mib);
				row3(w, "", &sync[s], rounds);
			}
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
	for (int i = 0; i < N_SRV; i++)
		stop(&srv[i]);
	bench_remove_tree(dir);
	return rc;
}
