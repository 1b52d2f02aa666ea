/*
 * daemon_rebuild.c — kvtier-bench daemon-rebuild: how long kvtierd takes to
 * start over a disk tier holding N MiB of values, against reading the same
 * files' headers raw.
 *
 * A kvtierd started here (--data-dir in the scratch directory, crash-safe)
 * is given N MiB of values over RESP (half the bytes in 512 KiB values,
 * half in 4 MiB ones) and stopped.  Then, in interleaved rounds:
 *
 *   startup      spawn to the first PING answered of a kvtierd over that
 *                directory: the disk tier's index, the key map's rebuild;
 *   empty        the same over an empty directory (what a start costs
 *                without values: exec, the DRAM arena, listening);
 *   raw_headers  in this process: every object file of the tier opened,
 *                its first 4 KiB read (O_DIRECT where the file system
 *                takes it, as the tier reads), closed: what any rebuild
 *                must do at least;
 *   whole_read   the same files read whole: what a rebuild that reads
 *                every object costs.
 *
 * Figures are seconds; ratio_vs_raw_headers and ratio_vs_whole_read are
 * bound over subject (startup less empty), so higher is better: 1 would be
 * a rebuild as cheap as the raw header scan.  Every file is read with
 * O_DIRECT, so the page cache holds none of it for anyone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CMD "daemon-rebuild"
#define ROUNDS 3
#define SMALL (512u << 10)
#define BIG (4u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench daemon-rebuild [--json] [--quick]\n"
		"kvtierd's start over a disk tier holding 256 MiB of values (32 with\n"
		"--quick; half in 512 KiB values, half in 4 MiB), %d interleaved rounds\n"
		"(1 with --quick):\n"
		"  startup      spawn to the first PING answered; empty: the same, no values\n"
		"  raw_headers  every object file's first 4 KiB read in this process\n"
		"  whole_read   every object file read whole\n"
		"  ratio_vs_raw_headers, ratio_vs_whole_read: bound / (startup - empty)\n"
		"  --json   every figure as JSON\n", ROUNDS);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Write all of buf, read the reply's first line: 0 if it is +OK. */
static int resp_set(int fd, const char *key, const uint8_t *val, size_t n)
{
	char hdr[128], rep[64];
	size_t got = 0;
	int h = snprintf(hdr, sizeof(hdr), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n",
			 strlen(key), key, n);
	const void *part[3] = { hdr, val, "\r\n" };
	size_t len[3] = { (size_t)h, n, 2 };

	for (int i = 0; i < 3; i++)
		for (size_t off = 0; off < len[i];) {
			ssize_t w = write(fd, (const char *)part[i] + off, len[i] - off);
			if (w <= 0)
				return -1;
			off += (size_t)w;
		}
	while (got < sizeof(rep) - 1 && (got < 2 || rep[got - 1] != '\n')) {
		ssize_t r = read(fd, rep + got, sizeof(rep) - 1 - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	rep[got] = 0;
	return strncmp(rep, "+OK", 3) ? -1 : 0;
}

struct server {
	pid_t pid;
	int port;
};

/* Spawn kvtierd over `data`; seconds to its first PING answered, or -1. */
static double start(const char *kvtierd, const char *data, const char *log, struct server *s)
{
	char port[16];
	char *argv[] = { (char *)kvtierd, "--port", port, "--data-dir", (char *)data,
			 "--threads", "2", "--set", "max_local_cpu_size=512MiB", "--set",
			 "dram_prefault=false", "--log-level", "warn", NULL };
	double t0 = now_s();

	s->port = bench_free_port();
	snprintf(port, sizeof(port), "%d", s->port);
	if ((s->pid = bench_spawn(argv, log, log)) < 0)
		return -1;
	while (now_s() - t0 < 120) {
		int fd = bench_connect(s->port);
		char b[16];
		if (fd >= 0) {
			int up = write(fd, "PING\r\n", 6) == 6 && read(fd, b, sizeof(b)) >= 5;
			close(fd);
			if (up)
				return now_s() - t0;
		}
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
			s->pid = 0;
			return -1;
		}
		usleep(1000);
	}
	return -1;
}

static void stop(struct server *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
	}
	s->pid = 0;
}

/* Read every "*.kvt" file under `dir`: its first 4 KiB, or (whole) all of
 * it, through `buf` (cap bytes, aligned).  Files read, or -1. */
static long read_tree(const char *dir, int whole, uint8_t *buf, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while (n >= 0 && (e = readdir(d))) {
		char p[2048];
		size_t l = strlen(e->d_name);
		if (e->d_name[0] == '.' || bench_path_join(p, sizeof(p), dir, e->d_name))
			continue;
		if (e->d_type == DT_DIR) {
			long k = read_tree(p, whole, buf, cap);
			n = k < 0 ? -1 : n + k;
			continue;
		}
		if (l < 4 || strcmp(e->d_name + l - 4, ".kvt"))
			continue;
		int fd = open(p, O_RDONLY | O_DIRECT);
		if (fd < 0)
			fd = open(p, O_RDONLY); /* a file system without O_DIRECT */
		if (fd < 0) {
			n = -1;
			break;
		}
		for (off_t off = 0;;) {
			ssize_t r = pread(fd, buf, whole ? cap : 4096, off);
			if (r <= 0 || !whole)
				break;
			off += r;
		}
		close(fd);
		n++;
	}
	closedir(d);
	return n;
}

int bench_daemon_rebuild(int argc, char **argv)
{
	struct bench_opts o = { 0 };
	char dir[1024], kvtierd[4200], data[1100], empty[1100], disk[1200], log[1100];
	double up[BENCH_MAX_ROUNDS], none[BENCH_MAX_ROUNDS], raw[BENCH_MAX_ROUNDS];
	double whole[BENCH_MAX_ROUNDS], r_raw[BENCH_MAX_ROUNDS], r_whole[BENCH_MAX_ROUNDS];
	struct server s = { 0 };
	uint8_t *val = NULL, *buf = NULL;
	int rounds, rc;
	long files = 0;

	if ((rc = bench_opts_only(CMD, argc, argv, &o, usage)) >= 0)
		return rc;
	rc = 1;
	rounds = o.quick ? 1 : ROUNDS;
	unsigned mib = o.quick ? 32 : 256;
	if (bench_beside_exe("kvtierd", kvtierd, sizeof(kvtierd)) || access(kvtierd, X_OK)) {
		fprintf(stderr, "kvtier-bench " CMD ": needs kvtierd beside it (a full build)\n");
		return 1;
	}
	if (bench_scratch_dir(CMD, "/tmp", "rebuild", dir, sizeof(dir)))
		return 1;
	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(empty, sizeof(empty), "%s/empty", dir);
	snprintf(disk, sizeof(disk), "%s/disk", data);
	snprintf(log, sizeof(log), "%s/kvtierd.log", dir);
	val = bench_buffer(BIG);
	buf = bench_buffer(BIG + 8192);
	if (!val || !buf)
		goto out;
	bench_fill_random(val, BIG, 7);

	/* The values: half the bytes small, half big. */
	if (start(kvtierd, data, log, &s) < 0) {
		fprintf(stderr, "kvtier-bench " CMD ": kvtierd did not start (%s)\n", log);
		goto out;
	}
	int fd = bench_connect(s.port);
	unsigned n_small = (mib << 19) / SMALL, n_big = (mib << 19) / BIG;
	for (unsigned i = 0; fd >= 0 && i < n_small + n_big; i++) {
		char key[32];
		snprintf(key, sizeof(key), "rebuild:%u", i);
		val[0] = (uint8_t)i; /* no two values alike */
		if (resp_set(fd, key, val, i < n_small ? SMALL : BIG)) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0) {
		fprintf(stderr, "kvtier-bench " CMD ": a SET failed (%s)\n", log);
		goto out;
	}
	close(fd);
	stop(&s);

	for (int r = 0; r < rounds; r++) {
		double t;
		/* Alternate which goes first: a loaded machine's drift hits both. */
		for (int k = 0; k < 2; k++) {
			if ((r + k) % 2 == 0) {
				if ((up[r] = start(kvtierd, data, log, &s)) < 0)
					goto dead;
				stop(&s);
				if ((none[r] = start(kvtierd, empty, log, &s)) < 0)
					goto dead;
				stop(&s);
			} else {
				t = now_s();
				files = read_tree(disk, 0, buf, BIG + 8192);
				raw[r] = now_s() - t;
				t = now_s();
				if (files <= 0 || read_tree(disk, 1, buf, BIG + 8192) != files) {
					fprintf(stderr, "kvtier-bench " CMD ": cannot read %s\n", disk);
					goto out;
				}
				whole[r] = now_s() - t;
			}
		}
		t = up[r] - none[r] > 1e-4 ? up[r] - none[r] : 1e-4;
		r_raw[r] = raw[r] / t;
		r_whole[r] = whole[r] / t;
	}
	rc = 0;
	if (o.json) {
		printf("{\"bench\":\"" CMD "\",\"rounds\":%d,\"quick\":%s,\"value_mib\":%u,"
		       "\"files\":%ld,", rounds, o.quick ? "true" : "false", mib, files);
		bench_json_summary("startup_s", bench_summarize(up, rounds));
		printf(",");
		bench_json_summary("empty_startup_s", bench_summarize(none, rounds));
		printf(",");
		bench_json_summary("raw_headers_s", bench_summarize(raw, rounds));
		printf(",");
		bench_json_summary("whole_read_s", bench_summarize(whole, rounds));
		printf(",");
		bench_json_summary("ratio_vs_raw_headers", bench_summarize(r_raw, rounds));
		printf(",");
		bench_json_summary("ratio_vs_whole_read", bench_summarize(r_whole, rounds));
		printf("}\n");
	} else {
		char a[64];
		printf("kvtierd start over %u MiB of values (%ld files), %d round(s), seconds:\n",
		       mib, files, rounds);
		printf("  startup               %s\n", bench_fmt_summary(bench_summarize(up, rounds), a, sizeof(a)));
		printf("  empty startup         %s\n", bench_fmt_summary(bench_summarize(none, rounds), a, sizeof(a)));
		printf("  raw header scan       %s\n", bench_fmt_summary(bench_summarize(raw, rounds), a, sizeof(a)));
		printf("  whole read            %s\n", bench_fmt_summary(bench_summarize(whole, rounds), a, sizeof(a)));
		printf("  ratio_vs_raw_headers  %s\n", bench_fmt_summary(bench_summarize(r_raw, rounds), a, sizeof(a)));
		printf("  ratio_vs_whole_read   %s\n", bench_fmt_summary(bench_summarize(r_whole, rounds), a, sizeof(a)));
	}
	goto out;
dead:
	fprintf(stderr, "kvtier-bench " CMD ": kvtierd did not start (%s)\n", log);
out:
	stop(&s);
	free(val);
	free(buf);
	if (rc == 0)
		bench_remove_tree(dir);
	else
		fprintf(stderr, "kvtier-bench " CMD ": left %s\n", dir);
	return rc;
}
