/*
 * daemon_peer.c — kvtier-bench daemon-peer: a decode node loading what a
 * prefill node computed straight from that node's kvtierd (the peer tier,
 * docs/DAEMON.md "Nodes and peers"), in interleaved rounds:
 *
 *   fetch   kvt_get of 8 MiB chunks on a store whose DRAM is cold and whose
 *           `peers` names a kvtierd (started here, --serve-peers) holding
 *           them: each chunk crosses TCP loopback (KVTIER.FETCH), is
 *           verified as it is copied up into the decode store's DRAM, and
 *           is copied out to the caller; against a plain TCP transfer of
 *           the same bytes between two processes over loopback, with
 *           nothing done to them: ratio_vs_tcp (target >= 0.5: the fetch
 *           also copies each chunk twice and checksums it).
 *
 * The prefill daemon has a 1 GiB DRAM tier alone; the chunks are stored
 * through the library's `daemon` key.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CMD "daemon-peer"
#define ROUNDS 5
#define CHUNKS 16          /* per round: 128 MiB */

static const char magic[8] = "DMNPEER ";

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench daemon-peer [--json] [--quick]\n"
		"A decode node's store loading 8 MiB chunks from a prefill node's kvtierd\n"
		"(started here, --serve-peers) through the peer tier, against a plain TCP\n"
		"loopback transfer of the same bytes (ratio_vs_tcp, target >= 0.5).\n");
}

/* A listening TCP socket on 127.0.0.1 and its port. */
static int listen_any(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4) ||
	    getsockname(fd, (struct sockaddr *)&a, &al)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

/* The bound: `total` bytes sent by a child process over loopback in writes
 * of `len`, received here into one buffer of `len`.  GB/s, or -1. */
static double tcp_gbps(uint8_t *buf, size_t len, size_t total)
{
	int port, lfd = listen_any(&port), cfd;
	size_t got = 0;
	double t0;
	pid_t pid;

	if (lfd < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		size_t sent = 0;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
			_exit(1);
		while (sent < total) {
			ssize_t n = send(fd, buf, total - sent < len ? total - sent : len, 0);
			if (n <= 0)
				_exit(1);
			sent += (size_t)n;
		}
		_exit(0);
	}
	cfd = accept(lfd, NULL, NULL);
	close(lfd);
	t0 = now_s();
	while (cfd >= 0 && got < total) {
		ssize_t n = recv(cfd, buf, len, MSG_WAITALL);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	t0 = now_s() - t0;
	if (cfd >= 0)
		close(cfd);
	waitpid(pid, NULL, 0);
	return got == total ? (double)total / t0 / 1e9 : -1;
}

/* A cold decode store reading from the prefill node at `port`. */
static int open_decode(int port, kvt_store **st)
{
	char peers[32];
	kvt_config *cfg = kvt_config_new();
	const char *const kv[][2] = {
		{ "max_local_cpu_size", "256MiB" }, { "dram_page_size", "2MiB" },
		{ "dram_lock_memory", "false" }, { "peers", peers },
	};
	int err;

	snprintf(peers, sizeof(peers), "127.0.0.1:%d", port);
	err = cfg ? bench_config_set_all(cfg, kv, sizeof(kv) / sizeof(kv[0])) : KVT_ENOMEM;
	return bench_store_open(CMD, "the decode node's store", cfg, err, 0, st);
}

int bench_daemon_peer(int argc, char **argv)
{
	struct bench_opts o = { 0 };
	char dir[80], sock[100], log[100], port_s[16];
	const char *const serve[] = { "--port", port_s, "--serve-peers", NULL };
	double bound[BENCH_MAX_ROUNDS], subj[BENCH_MAX_ROUNDS], ratio[BENCH_MAX_ROUNDS];
	kvt_ns_desc nd = { .model = "bench/daemon-peer",
			   /* 8 layers of 1 MiB: 8 KV heads of 128, bf16, 256 tokens */
			   .layout = { 8, 8, 128, KVT_DTYPE_BF16, 2, 0, 16, 256 } };
	kvt_store *pre = NULL, *dec = NULL;
	kvt_key k[CHUNKS];
	uint8_t *src = NULL, *dst = NULL;
	size_t len;
	kvt_ns ns;
	pid_t pid = -1;
	int rounds, rc = 1, err, port;

	if ((rc = bench_opts_only(CMD, argc, argv, &o, usage)) >= 0)
		return rc;
	rc = 1;
	rounds = o.quick ? 2 : ROUNDS;
	if (bench_scratch_dir(CMD, "/tmp", "daemon-peer", dir, sizeof(dir)))
		return 1;
	snprintf(sock, sizeof(sock), "%s/prefill.sock", dir);
	snprintf(log, sizeof(log), "%s/kvtierd.out", dir);
	if ((port = bench_free_port()) < 0)
		goto out;
	snprintf(port_s, sizeof(port_s), "%d", port);
	if ((pid = bench_kvtierd_local(CMD, sock, log, serve)) < 0 ||
	    bench_kvtierd_store(CMD, "the prefill node's store", sock, &pre))
		goto out;
	if ((err = kvt_ns_init(pre, &nd, &ns))) {
		rc = bench_fail(CMD, "namespace", err);
		goto out;
	}
	len = kvt_layout_payload_bytes(&ns.layout);
	if (bench_src_dst(CMD, len, &src, &dst))
		goto out;
	for (int i = 0; i < CHUNKS; i++) {
		bench_chunk_key(&k[i], 1, 1, (uint64_t)i, magic);
		if ((err = kvt_put(pre, &ns, &k[i], src, len, KVT_DUR_CACHED))) {
			rc = bench_fail(CMD, "kvt_put on the prefill node", err);
			goto out;
		}
	}

	for (int r = 0; r < rounds; r++) {
		double t0, b1, b2;

		if (open_decode(port, &dec))
			goto out;
		b1 = tcp_gbps(dst, len, len * CHUNKS);
		t0 = now_s();
		for (int i = 0; i < CHUNKS; i++)
			if ((err = kvt_get(dec, &ns, &k[i], dst, len, NULL))) {
				rc = bench_fail(CMD, "kvt_get on the decode node", err);
				goto out;
			}
		subj[r] = (double)len * CHUNKS / (now_s() - t0) / 1e9;
		if (memcmp(dst, src, len)) {
			fprintf(stderr, "kvtier-bench %s: the decode node read other bytes\n", CMD);
			goto out;
		}
		kvt_store_close(dec);
		dec = NULL;
		b2 = tcp_gbps(dst, len, len * CHUNKS);
		if (b1 < 0 || b2 < 0) {
			fprintf(stderr, "kvtier-bench %s: the loopback transfer failed\n", CMD);
			goto out;
		}
		bound[r] = (b1 + b2) / 2;
		ratio[r] = subj[r] / bound[r];
	}

	struct summary sr = bench_summarize(ratio, rounds);
	if (o.json) {
		printf("{\"bench\":\"daemon-peer\",\"version\":\"%s\",\"rounds\":%d,"
		       "\"quick\":%s,\"chunk_bytes\":%zu,\"chunks_per_round\":%d,"
		       "\"gbps\":\"1e9 bytes/s\",\"fetch\":{",
		       KVT_VERSION_STRING, rounds, o.quick ? "true" : "false", len, CHUNKS);
		bench_json_summary("tcp_gbps", bench_summarize(bound, rounds));
		putchar(',');
		bench_json_summary("fetch_gbps", bench_summarize(subj, rounds));
		printf(",\"ratio_vs_tcp\":%.6g,", sr.median);
		bench_json_summary("ratio_range", sr);
		printf(",\"target\":0.5,\"pass\":%s}}\n", sr.median >= 0.5 ? "true" : "false");
	} else {
		char a[48], b[48], c[48];
		printf("kvtier-bench daemon-peer: %d rounds of %d chunks of %zu MiB fetched from "
		       "another node's kvtierd;\nmedian [min..max] over rounds\n\n",
		       rounds, CHUNKS, len >> 20);
		printf("%-8s %-26s %-26s %-22s %s\n", "op", "tcp GB/s", "fetch GB/s", "ratio",
		       "target");
		printf("%-8s %-26s %-26s %-22s %s\n", "fetch",
		       bench_fmt_summary(bench_summarize(bound, rounds), a, sizeof(a)),
		       bench_fmt_summary(bench_summarize(subj, rounds), b, sizeof(b)),
		       bench_fmt_summary(sr, c, sizeof(c)), ">= 0.5");
	}
	rc = 0;
out:
	kvt_store_close(dec);
	kvt_store_close(pre);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	free(src);
	free(dst);
	bench_remove_tree(dir);
	return rc;
}
