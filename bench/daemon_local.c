/*
 * daemon_local.c — kvtier-bench daemon-local: the library opened on a
 * kvtierd through the `daemon` key, the data in the daemon's shared DRAM
 * arena (docs/DAEMON.md, "Local clients"), in interleaved rounds:
 *
 *   put     kvt_put of 32 MiB chunks (the client writes its image straight
 *           into the daemon's pages, checksummed in the same pass, then the
 *           daemon publishes it) against memcpy of the same bytes between
 *           two buffers of this process: ratio_vs_memcpy (target >= 0.8,
 *           and no round under 0.5: ratio_rounds lists them);
 *   get     kvt_get of those chunks into a buffer (read in place from the
 *           daemon's pages), the same bound and target;
 *   borrow  kvt_borrow + kvt_release of a 32 MiB chunk, in microseconds per
 *           op (target <= 10), against one bare round trip of a request
 *           and a reply between this process and a child over a
 *           SOCK_SEQPACKET socket pair (the local protocol's sizes, both
 *           ends polling first as the protocol's do): ratio_vs_roundtrip; kvt_exists (one request to the daemon,
 *           the store around it) is shown beside it;
 *   small   kvt_put of 8 KiB chunks, in microseconds per put, against the
 *           same bare round trip (ratio_vs_roundtrip): a put of one
 *           round trip, the store's image and the daemon's publish
 *           around it.
 *
 * kvtierd serves a 1 GiB DRAM tier alone, started here from beside this
 * program, its arena pre-faulted like a production one (in the daemon;
 * this process's mapping of it the library fills in, src/tier/local_client.c).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CMD "daemon-local"
#define ROUNDS 5
#define CHUNKS 8          /* per timed put or get run: 256 MiB */
#define BORROWS 2000
#define SMALL_PUTS 200

static const char magic[8] = "DMNLOCAL";

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *(*volatile bound_memcpy)(void *, const void *, size_t) = memcpy;

/* recv, polling for up to 50 us first as both ends of the local protocol
 * do (kvt_lp_recvmsg), so the bound waits as the subject does. */
static ssize_t recv_polled(int fd, void *b, size_t n)
{
	double until = now_s() + 50e-6;
	ssize_t r;

	while ((r = recv(fd, b, n, MSG_DONTWAIT)) < 0 && errno == EAGAIN && now_s() < until)
		sched_yield();
	return r >= 0 || errno != EAGAIN ? r : recv(fd, b, n, 0);
}

/* An echo child on a SOCK_SEQPACKET pair: one 64-byte request, one 32-byte
 * reply, as the local protocol's; the parent's end, or -1. */
static int echo_start(pid_t *pid)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -1;
	*pid = fork();
	if (*pid == 0) {
		char b[64];
		close(sv[0]);
		while (recv_polled(sv[1], b, sizeof(b)) > 0)
			if (send(sv[1], b, 32, 0) != 32)
				break;
		_exit(0);
	}
	close(sv[1]);
	if (*pid < 0) {
		close(sv[0]);
		return -1;
	}
	return sv[0];
}

/* Microseconds per bare round trip over n of them, or -1. */
static double echo_us(int fd, int n)
{
	char b[64] = { 0 };
	double t0 = now_s();

	for (int i = 0; i < n; i++)
		if (send(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b) || recv_polled(fd, b, 32) != 32)
			return -1;
	return (now_s() - t0) / n * 1e6;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench daemon-local [--json] [--quick]\n"
		"The library opened on a kvtierd (started here, DRAM tier alone) through\n"
		"the daemon key: put and get of 32 MiB chunks through the shared-memory\n"
		"path against memcpy (ratio_vs_memcpy, target >= 0.8), and borrow latency\n"
		"(target <= 10 us) and the put of a small chunk against one bare\n"
		"SOCK_SEQPACKET round trip (ratio_vs_roundtrip).\n");
}

struct fig {
	double bound[BENCH_MAX_ROUNDS], subj[BENCH_MAX_ROUNDS], ratio[BENCH_MAX_ROUNDS];
};

static double memcpy_gbps(uint8_t *dst, const uint8_t *src, size_t len)
{
	double t0 = now_s();
	for (int i = 0; i < CHUNKS; i++)
		bound_memcpy(dst, src, len);
	return (double)len * CHUNKS / (now_s() - t0) / 1e9;
}

static void json_fig(const char *name, const struct fig *f, int rounds, const char *bu,
		     const char *su, const char *ratio, double target, int higher)
{
	struct summary r = bench_summarize(f->ratio, rounds);

	printf("\"%s\":{", name);
	bench_json_summary(bu, bench_summarize(f->bound, rounds));
	putchar(',');
	bench_json_summary(su, bench_summarize(f->subj, rounds));
	printf(",\"%s\":%.6g,", ratio, r.median);
	bench_json_summary("ratio_range", r);
	/* each round's, in order: a slow first round shows as such */
	printf(",\"ratio_rounds\":[");
	for (int i = 0; i < rounds; i++)
		printf("%s%.4g", i ? "," : "", f->ratio[i]);
	printf("],\"target\":%.6g}", target);
	(void)higher;
}

static void row(const char *what, const struct fig *f, int rounds, const char *unit,
		const char *target)
{
	char a[48], b[48], r[48];

	printf("%-8s %-26s %-26s %-22s %s\n", what,
	       bench_fmt_summary(bench_summarize(f->bound, rounds), a, sizeof(a)),
	       bench_fmt_summary(bench_summarize(f->subj, rounds), b, sizeof(b)),
	       bench_fmt_summary(bench_summarize(f->ratio, rounds), r, sizeof(r)), target);
	(void)unit;
}

int bench_daemon_local(int argc, char **argv)
{
	struct bench_opts o = { 0 };
	static const char *const port0[] = { "--port", "0", NULL };
	char dir[80], sock[100], log[100];
	static struct fig put, get, bor, small;
	static double exists_us[BENCH_MAX_ROUNDS];
	kvt_ns_desc nd = { .model = "bench/daemon-local",
			   /* 32 layers of 1 MiB: 8 KV heads of 128, bf16, 256 tokens */
			   .layout = { 32, 8, 128, KVT_DTYPE_BF16, 2, 0, 16, 256 } };
	kvt_ns_desc sd = { .model = "bench/daemon-local-small",
			   /* 8 KiB: 1 layer, 1 KV head of 128, bf16, 16 tokens */
			   .layout = { 1, 1, 128, KVT_DTYPE_BF16, 2, 0, 16, 16 } };
	kvt_store *st = NULL;
	kvt_ns sns;
	pid_t echo_pid = -1;
	int echo_fd = -1;
	uint8_t *src = NULL, *dst = NULL;
	size_t len;
	kvt_ns ns;
	pid_t pid = -1;
	int rounds, rc = 1, err;

	if ((rc = bench_opts_only(CMD, argc, argv, &o, usage)) >= 0)
		return rc;
	rc = 1;
	rounds = o.quick ? 2 : ROUNDS;
	if (bench_scratch_dir(CMD, "/tmp", "daemon-local", dir, sizeof(dir)))
		return 1;
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	snprintf(log, sizeof(log), "%s/kvtierd.out", dir);
	if ((pid = bench_kvtierd_local(CMD, sock, log, port0)) < 0 ||
	    bench_kvtierd_store(CMD, "the store on kvtierd", sock, &st))
		goto out;
	if ((echo_fd = echo_start(&echo_pid)) < 0) {
		fprintf(stderr, "kvtier-bench %s: no socket pair for the round trip\n", CMD);
		goto out;
	}
	if ((err = kvt_ns_init(st, &nd, &ns)) || (err = kvt_ns_init(st, &sd, &sns))) {
		rc = bench_fail(CMD, "namespace", err);
		goto out;
	}
	len = kvt_layout_payload_bytes(&ns.layout);
	if (bench_src_dst(CMD, len, &src, &dst))
		goto out;

	for (int r = 0; r < rounds; r++) {
		kvt_key k[CHUNKS];
		double t0, b1, b2;

		for (int i = 0; i < CHUNKS; i++)
			bench_chunk_key(&k[i], (uint32_t)r, 1, (uint64_t)i, magic);
		b1 = memcpy_gbps(dst, src, len);
		t0 = now_s();
		for (int i = 0; i < CHUNKS; i++)
			if ((err = kvt_put(st, &ns, &k[i], src, len, KVT_DUR_CACHED))) {
				rc = bench_fail(CMD, "kvt_put", err);
				goto out;
			}
		put.subj[r] = (double)len * CHUNKS / (now_s() - t0) / 1e9;
		b2 = memcpy_gbps(dst, src, len);
		t0 = now_s();
		for (int i = 0; i < CHUNKS; i++)
			if ((err = kvt_get(st, &ns, &k[i], dst, len, NULL))) {
				rc = bench_fail(CMD, "kvt_get", err);
				goto out;
			}
		get.subj[r] = (double)len * CHUNKS / (now_s() - t0) / 1e9;
		if (memcmp(dst, src, len)) {
			fprintf(stderr, "kvtier-bench %s: kvt_get returned other bytes\n", CMD);
			goto out;
		}
		get.bound[r] = memcpy_gbps(dst, src, len);
		put.bound[r] = (b1 + b2) / 2;
		put.ratio[r] = put.subj[r] / put.bound[r];
		get.ratio[r] = get.subj[r] / get.bound[r];

		/* borrow against the bare round trip, alternating */
		kvt_ref *ref;
		t0 = now_s();
		for (int i = 0; i < BORROWS; i++)
			if (kvt_exists(st, &ns, &k[i % CHUNKS]) != 1) {
				rc = bench_fail(CMD, "kvt_exists", KVT_ENOTFOUND);
				goto out;
			}
		exists_us[r] = (now_s() - t0) / BORROWS * 1e6;
		if ((bor.bound[r] = echo_us(echo_fd, BORROWS)) < 0) {
			fprintf(stderr, "kvtier-bench %s: the echo child failed\n", CMD);
			goto out;
		}
		t0 = now_s();
		for (int i = 0; i < BORROWS; i++) {
			if ((err = kvt_borrow(st, &ns, &k[i % CHUNKS], &ref))) {
				rc = bench_fail(CMD, "kvt_borrow", err);
				goto out;
			}
			kvt_release(ref);
		}
		bor.subj[r] = (now_s() - t0) / BORROWS * 1e6;
		bor.ratio[r] = bor.bound[r] / bor.subj[r];
		for (int i = 0; i < CHUNKS; i++)
			kvt_delete(st, &ns, &k[i]);

		/* small puts against the bare round trip */
		size_t slen = kvt_layout_payload_bytes(&sns.layout);
		small.bound[r] = echo_us(echo_fd, SMALL_PUTS);
		t0 = now_s();
		for (int i = 0; i < SMALL_PUTS; i++) {
			kvt_key sk;
			bench_chunk_key(&sk, (uint32_t)r, 2, (uint64_t)i, magic);
			if ((err = kvt_put(st, &sns, &sk, src, slen, KVT_DUR_CACHED))) {
				rc = bench_fail(CMD, "kvt_put (small)", err);
				goto out;
			}
		}
		small.subj[r] = (now_s() - t0) / SMALL_PUTS * 1e6;
		small.ratio[r] = small.bound[r] / small.subj[r];
		for (int i = 0; i < SMALL_PUTS; i++) {
			kvt_key sk;
			bench_chunk_key(&sk, (uint32_t)r, 2, (uint64_t)i, magic);
			kvt_delete(st, &sns, &sk);
		}
	}

	if (o.json) {
		printf("{\"bench\":\"daemon-local\",\"version\":\"%s\",\"rounds\":%d,"
		       "\"quick\":%s,\"chunk_bytes\":%zu,\"gbps\":\"1e9 bytes/s\","
		       "\"daemon\":{\"max_local_cpu_size\":%llu,\"dram_page_size\":%u},",
		       KVT_VERSION_STRING, rounds, o.quick ? "true" : "false", len, 1ull << 30,
		       2u << 20);
		json_fig("put", &put, rounds, "memcpy_gbps", "kvt_put_gbps", "ratio_vs_memcpy",
			 0.8, 1);
		putchar(',');
		json_fig("get", &get, rounds, "memcpy_gbps", "kvt_get_gbps", "ratio_vs_memcpy",
			 0.8, 1);
		putchar(',');
		json_fig("borrow", &bor, rounds, "round_trip_us", "borrow_us",
			 "ratio_vs_roundtrip", 1.0, 1);
		putchar(',');
		bench_json_summary("exists_us", bench_summarize(exists_us, rounds));
		printf(",\"small_put_bytes\":%zu,", kvt_layout_payload_bytes(&sns.layout));
		json_fig("small_put", &small, rounds, "round_trip_us", "put_us",
			 "ratio_vs_roundtrip", 1.0, 1);
		printf(",\"borrow_target_us\":10,\"borrow_pass\":%s}\n",
		       bench_summarize(bor.subj, rounds).median <= 10 ? "true" : "false");
	} else {
		printf("kvtier-bench daemon-local: %d rounds of %d chunks of %zu MiB through "
		       "kvtierd's shared memory;\nmedian [min..max] over rounds\n\n",
		       rounds, CHUNKS, len >> 20);
		printf("%-8s %-26s %-26s %-22s %s\n", "op", "bound", "subject", "ratio", "target");
		row("put", &put, rounds, "GB/s", "memcpy GB/s vs kvt_put GB/s, >= 0.8");
		row("get", &get, rounds, "GB/s", "memcpy GB/s vs kvt_get GB/s, >= 0.8");
		row("borrow", &bor, rounds, "us", "round trip us vs borrow us, borrow <= 10 us");
		row("small", &small, rounds, "us", "round trip us vs 8 KiB put us");
		{
			char e[48];
			printf("kvt_exists through the daemon: %s us\n",
			       bench_fmt_summary(bench_summarize(exists_us, rounds), e, sizeof(e)));
		}
	}
	rc = 0;
out:
	kvt_store_close(st);
	if (echo_fd >= 0) {
		close(echo_fd); /* the child sees the close and exits */
		waitpid(echo_pid, NULL, 0);
	}
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	free(src);
	free(dst);
	bench_remove_tree(dir);
	return rc;
}
