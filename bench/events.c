/*
 * events.c — `kvtier-bench events`: what publishing KV events costs a put.
 *
 * The bound is the same store with events off, in the same process and
 * run: two stores of one configuration (a DRAM tier of 64 MiB, LRU), one
 * with `kv_events_publisher: zmq` on an ipc:// endpoint in the scratch
 * directory and a subscriber thread reading every message, as a router
 * would.  Each round puts the same number of fresh chunks into each (the
 * order flipping every round); the tier is full from the first round on,
 * so every put also evicts one chunk, and the events side publishes a
 * BlockStored and a BlockRemoved per put.  ratio_vs_put_rate is the events
 * store's puts per second over the bound's (target >= 0.95), per chunk
 * size: 64 KiB (a small model's short chunk, where the event's fixed cost
 * shows most) and Qwen2.5-0.5B's 256-token chunk (3 MiB).
 *
 * Also reported: the events the subscriber received against those the
 * store says it published (a subscriber that keeps up loses none), and
 * `kvtier where --bench`'s figures for the fleet index a router keeps from
 * such events: answers for 128-block prompts over 1M indexed blocks
 * (100k with --quick) and the bytes each indexed block costs.
 *
 * A benchmark reports; it does not fail: a figure under its target is
 * printed as such and the exit code stays 0.  1 means a call failed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli/cli.h"

#define CMD "events"
#define ROUNDS 7

#ifdef KVT_HAVE_EVENTS
#include <zmq.h>

struct sub {
	void *ctx, *sock;
	pthread_t th;
	atomic_int stop;
	int started;
	uint64_t messages;
};

static void *sub_main(void *arg)
{
	struct sub *s = arg;
	char buf[65536];
	int timeout = 100;

	zmq_setsockopt(s->sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	while (!atomic_load(&s->stop)) {
		int more = 0;
		size_t ml = sizeof(more);
		if (zmq_recv(s->sock, buf, sizeof(buf), 0) < 0)
			continue;
		zmq_getsockopt(s->sock, ZMQ_RCVMORE, &more, &ml);
		if (!more) /* the last frame of [topic, seq, payload] */
			s->messages++;
	}
	return NULL;
}
#endif

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtier-bench events [--json] [--quick] [--dir DIR]\n"
		   "  puts per second of a DRAM store publishing KV events (a subscriber\n"
		   "  reading them) against the same store without: ratio_vs_put_rate\n"
		   "  (target >= 0.95), at 64 KiB and 3 MiB chunks.\n");
}

static int open_store(const char *endpoint, kvt_store **st)
{
	static const char *const base[][2] = {
		{ "max_local_cpu_size", "64MiB" }, { "dram_page_size", "64KiB" },
		{ "dram_lock_memory", "false" },   { "workers", "2" },
	};
	kvt_config *cfg = kvt_config_new();
	int rc = cfg ? bench_config_set_all(cfg, base, sizeof(base) / sizeof(base[0])) : KVT_ENOMEM;

	if (!rc && endpoint) {
		const char *const ev[][2] = { { "kv_events_publisher", "zmq" },
					      { "kv_events_endpoint", endpoint } };
		rc = bench_config_set_all(cfg, ev, 2);
	}
	return bench_store_open(CMD, endpoint ? "store with events" : "store", cfg, rc, 0, st);
}

/* n puts of fresh keys from `src`; seconds taken. */
static int put_run(kvt_store *st, const kvt_ns *ns, const uint8_t *src, size_t len,
		   uint64_t *seq, long n, double *secs)
{
	double t0 = now_s();

	for (long i = 0; i < n; i++) {
		kvt_key k;
		int rc;
		bench_chunk_key(&k, 1, 0, (*seq)++, "kvtevbn1");
		if ((rc = kvt_put(st, ns, &k, src, len, KVT_DUR_CACHED)) && rc != KVT_EEXIST)
			return bench_fail(CMD, "kvt_put", rc);
	}
	*secs = now_s() - t0;
	return 0;
}

/* `kvtier where --bench N --json` (the fleet index: answers for 128-block
 * prompts over N indexed blocks, bytes per block) into out, one JSON
 * object; "" if the command is not beside this program or fails. */
static void where_bench(long n, char *out, size_t cap)
{
	char exe[1024], cmd[1200];
	FILE *p;
	size_t got = 0;

	out[0] = '\0';
	if (bench_beside_exe("kvtier", exe, sizeof(exe)) ||
	    snprintf(cmd, sizeof(cmd), "'%s' where --bench %ld --json", exe, n) >= (int)sizeof(cmd) ||
	    !(p = popen(cmd, "r")))
		return;
	got = fread(out, 1, cap - 1, p);
	out[got] = '\0';
	if (pclose(p) != 0 || got == 0 || out[0] != '{')
		out[0] = '\0';
	else if (out[got - 1] == '\n')
		out[got - 1] = '\0';
}

int bench_events(int argc, char **argv)
{
	struct bench_opts o = { 0, 0, NULL };
	char dir[1024], endpoint[1200], path[1100], where[2048];
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		int r = bench_common_opt(CMD, argc, argv, &i, &o, usage);
		if (r == -2)
			return 0;
		if (r < 0)
			return 2;
		if (r == 0)
			return bench_unknown_opt(CMD, argv[i], usage);
	}
#ifndef KVT_HAVE_EVENTS
	fprintf(stderr, "kvtier-bench events: this build has no KV events (libzmq and "
			"msgpack-c were not found at configure time)\n");
	return 1;
#else
	if ((rc = bench_scratch_dir(CMD, o.dir ? o.dir : "/tmp", "events", dir, sizeof(dir))))
		return rc;
	if (bench_path_join(path, sizeof(path), dir, "pub")) {
		bench_remove_tree(dir);
		return 2;
	}
	snprintf(endpoint, sizeof(endpoint), "ipc://%s", path);

	static const struct { const char *name; uint32_t heads, dim, layers; } shapes[] = {
		{ "64KiB", 1, 64, 1 },  /* 2 x 256 x 1 x 64 x 2 B = 64 KiB */
		{ "qwen2.5-0.5b", 0, 0, 0 },
	};
	double ratio[2][ROUNDS], rate_on[2][ROUNDS], rate_off[2][ROUNDS];
	uint64_t published = 0, received = 0;
	int rounds = o.quick ? 3 : ROUNDS;
	kvt_store *off = NULL, *on = NULL;
	struct sub s = { 0 };

	if ((rc = open_store(NULL, &off)) || (rc = open_store(endpoint, &on)))
		goto out;
	s.ctx = zmq_ctx_new();
	s.sock = zmq_socket(s.ctx, ZMQ_SUB);
	zmq_setsockopt(s.sock, ZMQ_SUBSCRIBE, "", 0);
	if (zmq_connect(s.sock, endpoint) || pthread_create(&s.th, NULL, sub_main, &s)) {
		fprintf(stderr, "kvtier-bench events: subscriber: %s\n", zmq_strerror(zmq_errno()));
		rc = 1;
		goto out;
	}
	s.started = 1;
	{ /* the slow joiner: let the subscription reach the publisher */
		struct timespec ts = { 0, 300 * 1000000L };
		nanosleep(&ts, NULL);
	}
	for (int sh = 0; sh < 2 && !rc; sh++) {
		kvt_ns_desc d;
		kvt_ns ns_off, ns_on;
		uint8_t *src;
		size_t len;
		uint64_t seq = (uint64_t)sh << 40;
		long n;
		double t;

		if ((rc = bench_chunk_desc(CMD, "qwen2.5-0.5b", &d)))
			break;
		if (shapes[sh].heads) {
			d.layout.num_layers = shapes[sh].layers;
			d.layout.num_kv_heads = shapes[sh].heads;
			d.layout.head_dim = shapes[sh].dim;
		}
		if ((rc = kvt_ns_init(off, &d, &ns_off)) || (rc = kvt_ns_init(on, &d, &ns_on))) {
			rc = bench_fail(CMD, "kvt_ns_init", rc);
			break;
		}
		len = kvt_layout_payload_bytes(&d.layout);
		if (!(src = bench_buffer(len))) {
			rc = bench_fail(CMD, "buffer", KVT_ENOMEM);
			break;
		}
		bench_fill_random(src, len, 7);
		/* Calibrate on the bound: puts that take >= 0.2 s (0.1 quick),
		 * after filling both tiers so every timed put evicts. */
		n = (long)(2 * (64ull << 20) / len) + 1;
		if ((rc = put_run(off, &ns_off, src, len, &seq, n, &t)) ||
		    (rc = put_run(on, &ns_on, src, len, &seq, n, &t))) {
			free(src);
			break;
		}
		n = (long)((o.quick ? 0.1 : 0.2) / (t / n)) + 1;
		for (int r = 0; r < rounds && !rc; r++) {
			double t_off = 0, t_on = 0;
			if (r & 1)
				rc = put_run(on, &ns_on, src, len, &seq, n, &t_on) ||
				     put_run(off, &ns_off, src, len, &seq, n, &t_off);
			else
				rc = put_run(off, &ns_off, src, len, &seq, n, &t_off) ||
				     put_run(on, &ns_on, src, len, &seq, n, &t_on);
			if (rc)
				break;
			rate_off[sh][r] = n / t_off;
			rate_on[sh][r] = n / t_on;
			ratio[sh][r] = rate_on[sh][r] / rate_off[sh][r];
		}
		free(src);
	}
	if (!rc)
		where_bench(o.quick ? 100000 : 1000000, where, sizeof(where));
	if (!rc) {
		kvt_events_stats es;
		struct timespec ts = { 0, 500 * 1000000L };
		nanosleep(&ts, NULL); /* the publisher and subscriber drain */
		kvt_store_events_stats(on, &es);
		published = es.batches;
		received = s.messages;
		if (o.json) {
			printf("{\"bench\":\"events\",\"rounds\":%d,", rounds);
			for (int sh = 0; sh < 2; sh++) {
				printf("\"%s\":{", shapes[sh].name);
				bench_json_summary("puts_per_s_events_off",
						   bench_summarize(rate_off[sh], rounds));
				printf(",");
				bench_json_summary("puts_per_s_events_on",
						   bench_summarize(rate_on[sh], rounds));
				printf(",");
				bench_json_summary("ratio_vs_put_rate", bench_summarize(ratio[sh], rounds));
				printf("},");
			}
			printf("\"batches_published\":%llu,\"batches_received\":%llu,"
			       "\"events_published\":%llu,\"events_dropped\":%llu,\"where\":%s}\n",
			       (unsigned long long)published, (unsigned long long)received,
			       (unsigned long long)es.events, (unsigned long long)es.dropped,
			       where[0] ? where : "null");
		} else {
			char a[64], b[64], c[64];
			printf("puts per second, DRAM tier full (each put evicts), %d interleaved "
			       "rounds: median [min..max]\n", rounds);
			for (int sh = 0; sh < 2; sh++)
				printf("  %-13s events off %s, on %s: ratio_vs_put_rate %s (target 0.95)\n",
				       shapes[sh].name,
				       bench_fmt_summary(bench_summarize(rate_off[sh], rounds), a, sizeof(a)),
				       bench_fmt_summary(bench_summarize(rate_on[sh], rounds), b, sizeof(b)),
				       bench_fmt_summary(bench_summarize(ratio[sh], rounds), c, sizeof(c)));
			printf("  batches published %llu, received by the subscriber %llu; "
			       "events %llu, dropped %llu\n",
			       (unsigned long long)published, (unsigned long long)received,
			       (unsigned long long)es.events, (unsigned long long)es.dropped);
			printf("  kvtier where --bench: %s\n", where[0] ? where : "(not run)");
		}
	}
out:
	if (s.started) {
		atomic_store(&s.stop, 1);
		pthread_join(s.th, NULL);
	}
	if (s.sock)
		zmq_close(s.sock);
	if (s.ctx)
		zmq_ctx_term(s.ctx);
	kvt_store_close(on);
	kvt_store_close(off);
	bench_remove_tree(dir);
	return rc;
#endif
}
