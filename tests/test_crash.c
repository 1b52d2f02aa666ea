/*
 * test_crash.c — the NVMe tier survives a real kill -9.
 *
 * Each round forks a child that opens the tier (io_uring, O_DIRECT where the
 * disk takes it) on one directory under /var/tmp and puts chunks without
 * pause at KVT_DUR_CRASH_SAFE: mostly 64 KiB payloads, one in 16 of 2 MiB,
 * so the kill lands in small and in large writes.  After every successful
 * put_commit the child writes the chunk's counter to a pipe: that is the
 * acknowledgement.  The parent waits until the child reports the tier open,
 * sleeps a random 5-150 ms, sends SIGKILL, reads every acknowledgement and
 * reopens the tier itself:
 *
 *   (a) open succeeds, and drops nothing (a killed process cannot tear a
 *       published file: the link comes after the whole write);
 *   (b) every acknowledged chunk, of this round and all earlier ones, is
 *       present, and each new one decodes and matches its bytes exactly;
 *   (c) every chunk the tier serves is one the child could have written,
 *       intact: its key names a counter the child used, its image decodes,
 *       names that key and namespace, and holds that counter's payload; at
 *       most one unacknowledged chunk per round (the one in flight when the
 *       kill came) is present, and it is the next counter;
 *   (d) temporaries are never served: the index is exactly the set of
 *       <hex>.kvt files in the fan-out directories, and tmp/ holds at most
 *       one leftover per round.
 *
 * All rounds share the directory, so later rounds open warm on earlier data.
 * The capacity is far above what is written, so nothing is evicted.  Keys
 * and payloads derive from the counter: every chunk is self-checking.
 * Set KVT_TEST_SEED to replay a run; the seed is printed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "format/object.h"
#include "tier/nvme.h"
#include "test.h"
#include "tier_test_util.h"

#define ROUNDS 30
#define DELAY_MIN_MS 5
#define DELAY_MAX_MS 150
/* The child stops writing (and waits for the kill) after this many bytes in
 * one round, so a fast disk cannot fill /var/tmp. */
#define ROUND_BYTES_CAP (32ull << 20)
#define CAPACITY (64ull << 30) /* never reached: no eviction */
#define NEED_FREE (2ull << 30)
/* Counters of round r start at r * ROUND_SPAN. */
#define ROUND_SPAN 100000ull
#define MAX_COUNTER ((uint64_t)(ROUNDS + 1) * ROUND_SPAN)
#define READY UINT64_MAX

static kvt_ns ns_small, ns_large;

/* --- chunks derived from a counter ------------------------------------------ */

static const kvt_ns *ns_of(uint64_t c)
{
	return tt_mix64(c ^ 0x5555) % 16 == 0 ? &ns_large : &ns_small;
}

static uint64_t payload_seed(uint64_t c)
{
	return c * 31 + 17;
}

/* Put chunk c; `payload` has room for the largest payload. */
static int put_counter(kvt_tier *t, uint64_t c, uint8_t *payload, int dur)
{
	kvt_key key = tt_key_of(c, -1);

	return tt_put_image(t, ns_of(c), &key, payload_seed(c), payload, dur);
}

/* Get key (of counter c) and check the image bit for bit.  0, the tier's
 * code, or a negative step number below -100 naming what differed. */
static int get_verify(kvt_tier *t, uint64_t c, uint8_t *expect)
{
	kvt_key key = tt_key_of(c, -1);

	return tt_get_verify(t, ns_of(c), &key, payload_seed(c), expect);
}

/* --- files ------------------------------------------------------------------- */

/* Walk <root>/<k0>/<k1>/ and count each <64 hex>.kvt; count tmp/. */
typedef struct walk {
	uint64_t kvt_files, other_files, tmp_files;
	uint8_t *seen; /* per counter: 1 if a published file names it */
} walk;

static void walk_one(void *arg, const char *name)
{
	walk *w = arg;
	kvt_key k;
	uint64_t c;
	char hex[65];

	if (strlen(name) != 68 || strcmp(name + 64, ".kvt")) {
		w->other_files++;
		return;
	}
	memcpy(hex, name, 64);
	hex[64] = '\0';
	if (kvt_key_parse(hex, &k) ||
	    (c = tt_counter_of(&k, MAX_COUNTER, 0)) == UINT64_MAX) {
		w->other_files++;
		return;
	}
	w->kvt_files++;
	w->seen[c] = 1;
}

static void walk_root(const char *root, walk *w)
{
	char p[PATH_MAX];
	int n;

	snprintf(p, sizeof(p), "%s/tmp", root);
	if ((n = tt_count_dir(p)) > 0)
		w->tmp_files += (uint64_t)n;
	tt_walk_leaves(root, walk_one, w);
}

/* --- the child ---------------------------------------------------------------- */

static void write_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			_exit(4);
		b += k;
		n -= (size_t)k;
	}
}

/* Never returns: killed by the parent, or _exit(2..4) on a failure it
 * reports on stderr. */
static void child_run(const char *root, uint64_t start, int wfd)
{
	kvt_nvme_opts o = { .path = root, .capacity = CAPACITY,
			    .queue_depth = 16, .use_io_uring = 1 };
	uint8_t *payload = malloc(tt_img_len(&ns_large));
	uint64_t c, bytes = 0, ready = READY;
	kvt_tier *t = NULL;
	int rc;

	if (!payload)
		_exit(3);
	rc = kvt_nvme_open(&o, &t);
	if (rc) {
		fprintf(stderr, "child: open: %s (%s)\n", kvt_strerror(rc),
			kvt_errmsg());
		_exit(3);
	}
	write_all(wfd, &ready, sizeof(ready));
	for (c = start; bytes < ROUND_BYTES_CAP && c < start + ROUND_SPAN; c++) {
		rc = put_counter(t, c, payload, KVT_DUR_CRASH_SAFE);
		if (rc) {
			fprintf(stderr, "child: put %llu: %s (%s)\n",
				(unsigned long long)c, kvt_strerror(rc),
				kvt_errmsg());
			_exit(2);
		}
		write_all(wfd, &c, sizeof(c)); /* the acknowledgement */
		bytes += tt_img_len(ns_of(c));
	}
	for (;;)
		pause(); /* cap reached: wait for the kill */
}

/* --- the parent --------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state = tt_mix64(rng_state);
	return rng_state;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read exactly n bytes, waiting at most timeout_ms; 0, or -1 on EOF or
 * timeout. */
static int read_full(int fd, void *p, size_t n, int timeout_ms)
{
	char *b = p;

	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;
		int pr = poll(&pf, 1, timeout_ms);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		k = read(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

typedef struct state {
	uint8_t *acked;    /* per counter: acknowledged by a child */
	uint8_t *verified; /* per counter: read back bit-exact once */
	uint8_t *present;  /* per counter: in the index at the last open */
	uint8_t *prev;     /* `present` of the open before */
	uint8_t *expect;   /* a payload buffer */
	uint64_t n_acked, n_present, n_unacked_present;
	uint64_t rounds_run;
} state;

typedef struct iter_ctx {
	state *s;
	kvt_tier *t;
	uint64_t count, bad_keys, bad_len, new_verified;
	uint64_t first_bad;
	int full; /* read every chunk, not only new ones */
} iter_ctx;

static int iter_fn(void *arg, const kvt_key *key, uint64_t len)
{
	iter_ctx *x = arg;
	uint64_t c = tt_counter_of(key, MAX_COUNTER, 0);
	int rc;

	x->count++;
	if (c == UINT64_MAX) {
		char hex[65];
		kvt_key_hex(key, hex);
		fprintf(stderr, "  (c) served key %s was never written\n", hex);
		x->bad_keys++;
		return 0;
	}
	x->s->present[c] = 1;
	if (len != tt_img_len(ns_of(c))) {
		fprintf(stderr, "  (c) chunk %llu: length %llu, expected %llu\n",
			(unsigned long long)c, (unsigned long long)len,
			(unsigned long long)tt_img_len(ns_of(c)));
		x->bad_len++;
	}
	if (x->full || !x->s->verified[c]) {
		rc = get_verify(x->t, c, x->s->expect);
		if (rc) {
			fprintf(stderr,
				"  (c) chunk %llu (%s) does not verify: %d %s %s\n",
				(unsigned long long)c,
				x->s->acked[c] ? "acknowledged" : "not acknowledged",
				rc, rc < -100 ? "(bytes differ)" : kvt_strerror(rc),
				rc < -100 ? "" : kvt_errmsg());
			test_failures++;
		} else if (!x->s->verified[c]) {
			x->s->verified[c] = 1;
			x->new_verified++;
		}
	}
	return 0;
}

/* Reopen in the parent and check (a)-(d).  `start`: the first counter this
 * round's child used; `next_unacked`: the one it was putting when killed
 * (the only one that may be present unacknowledged).  `full`: read every
 * chunk back, not only those never verified. */
static void check_tier(const char *root, state *s, uint64_t start,
		       uint64_t next_unacked, int full)
{
	kvt_nvme_opts o = { .path = root, .capacity = CAPACITY,
			    .queue_depth = 16, .use_io_uring = 1 };
	kvt_tier_stats st;
	kvt_tier *t = NULL;
	iter_ctx x;
	walk w;
	uint64_t c, before = s->n_present, n_present = 0, unacked = 0;
	int rc;

	rc = kvt_nvme_open(&o, &t);
	CHECK_EQ(rc, 0); /* (a) */
	if (rc) {
		fprintf(stderr, "  (a) reopen failed: %s\n", kvt_errmsg());
		return;
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.corrupt, 0); /* a kill cannot tear a published file */

	/* (c): everything served is a chunk the child wrote, intact */
	memset(&x, 0, sizeof(x));
	x.s = s;
	x.t = t;
	x.full = full;
	memcpy(s->prev, s->present, MAX_COUNTER);
	memset(s->present, 0, MAX_COUNTER);
	CHECK_EQ(t->ops->iterate(t, iter_fn, &x), 0);
	CHECK_EQ(x.bad_keys, 0);
	CHECK_EQ(x.bad_len, 0);
	CHECK_EQ(x.count, st.chunks);

	/* (b): every acknowledged chunk is there (new ones were read above) */
	for (c = 0; c < MAX_COUNTER; c++) {
		if (s->present[c])
			n_present++;
		if (s->prev[c] && !s->present[c]) {
			fprintf(stderr, "  chunk %llu was present at the last "
				"open and is gone\n", (unsigned long long)c);
			test_failures++;
		}
		if (s->acked[c] && !s->present[c]) {
			fprintf(stderr, "  (b) acknowledged chunk %llu is missing\n",
				(unsigned long long)c);
			test_failures++;
		}
		if (s->acked[c] && !s->verified[c] && s->present[c]) {
			fprintf(stderr, "  (b) acknowledged chunk %llu not verified\n",
				(unsigned long long)c);
			test_failures++;
		}
		if (s->present[c] && !s->acked[c] && c >= start &&
		    c < start + ROUND_SPAN) {
			unacked++;
			/* only the put in flight at the kill */
			if (c != next_unacked) {
				fprintf(stderr,
					"  (c) chunk %llu present but unacknowledged; only %llu could be\n",
					(unsigned long long)c,
					(unsigned long long)next_unacked);
				test_failures++;
			}
		}
	}
	CHECK(unacked <= 1);
	CHECK(n_present >= before);
	s->n_present = n_present;
	s->n_unacked_present += unacked;

	/* (d): index == published files; temporaries never indexed */
	memset(&w, 0, sizeof(w));
	w.seen = calloc(MAX_COUNTER, 1);
	if (w.seen) {
		walk_root(root, &w);
		CHECK_EQ(w.other_files, 0);
		CHECK_EQ(w.kvt_files, n_present);
		for (c = 0; c < MAX_COUNTER; c++)
			if (w.seen[c] != s->present[c]) {
				fprintf(stderr,
					"  (d) chunk %llu: file %d, index %d\n",
					(unsigned long long)c, w.seen[c],
					s->present[c]);
				test_failures++;
			}
		/* a single-threaded writer leaves at most one temporary per
		 * kill (the grace period keeps young ones) */
		CHECK(w.tmp_files <= s->rounds_run);
		free(w.seen);
	}
	if (full)
		fprintf(stderr, "final pass: %llu chunks read back bit-exact, "
			"%llu temporaries left in tmp/ by %llu kills\n",
			(unsigned long long)x.count,
			(unsigned long long)w.tmp_files,
			(unsigned long long)s->rounds_run);
	t->ops->close(t);
}

int main(void)
{
	char base[] = "/var/tmp/kvt_crash_XXXXXX", root[PATH_MAX];
	uint64_t seed, total_acked = 0, kills_in_flight = 0;
	const char *env = getenv("KVT_TEST_SEED");
	state s;
	double t0 = now_s();
	int round;

	tt_var_tmp(base, root, sizeof(root), NEED_FREE);

	seed = env ? strtoull(env, NULL, 0)
		   : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	rng_state = seed;
	fprintf(stderr, "test_crash: %s, seed %llu (KVT_TEST_SEED to replay), "
		"%d rounds\n", root, (unsigned long long)seed, ROUNDS);

	/* 64 KiB and 2 MiB payloads */
	tt_ns_make(&ns_small, 2, 2, 64, 64, KVT_DTYPE_BF16, 0, 1);
	tt_ns_make(&ns_large, 4, 4, 128, 256, KVT_DTYPE_BF16, 0, 2);
	CHECK_EQ(tt_img_len(&ns_small), 4096 + (64u << 10));
	CHECK_EQ(tt_img_len(&ns_large), 4096 + (2u << 20));

	memset(&s, 0, sizeof(s));
	s.acked = calloc(MAX_COUNTER, 1);
	s.verified = calloc(MAX_COUNTER, 1);
	s.present = calloc(MAX_COUNTER, 1);
	s.prev = calloc(MAX_COUNTER, 1);
	s.expect = malloc(tt_img_len(&ns_large));
	if (!s.acked || !s.verified || !s.present || !s.prev || !s.expect) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}

	for (round = 0; round < ROUNDS; round++) {
		uint64_t start = (uint64_t)(round + 1) * ROUND_SPAN, c;
		uint64_t acked = 0, last = UINT64_MAX;
		unsigned delay_ms = DELAY_MIN_MS +
				    (unsigned)(rnd() % (DELAY_MAX_MS - DELAY_MIN_MS + 1));
		int pfd[2], status = 0;
		pid_t pid;

		if (pipe(pfd)) {
			perror("pipe");
			return 1;
		}
		fflush(stderr);
		pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			close(pfd[0]);
			child_run(root, start, pfd[1]);
		}
		close(pfd[1]);
		/* the delay counts from the tier being open, so that the kill
		 * lands among the writes however long the rebuild takes */
		if (read_full(pfd[0], &c, sizeof(c), 30000) || c != READY) {
			fprintf(stderr, "round %d: the child never opened the tier\n",
				round);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			close(pfd[0]);
			test_failures++;
			break;
		}
		usleep(delay_ms * 1000u);
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
			fprintf(stderr, "round %d: the child ended by itself "
				"(status 0x%x): a put failed\n", round, status);
			test_failures++;
		}
		while (!read_full(pfd[0], &c, sizeof(c), 1000)) {
			if (c < start || c >= start + ROUND_SPAN ||
			    (last != UINT64_MAX && c != last + 1) ||
			    (last == UINT64_MAX && c != start)) {
				fprintf(stderr, "round %d: bad acknowledgement %llu\n",
					round, (unsigned long long)c);
				test_failures++;
				continue;
			}
			s.acked[c] = 1;
			last = c;
			acked++;
		}
		close(pfd[0]);
		s.rounds_run++;
		total_acked += acked;
		{
			uint64_t before = s.n_unacked_present;
			check_tier(root, &s, start,
				   last == UINT64_MAX ? start : last + 1, 0);
			kills_in_flight += s.n_unacked_present - before;
		}
		fprintf(stderr, "round %2d: kill after %3u ms, %4llu acknowledged "
			"(total %llu), %llu chunks on disk%s\n",
			round, delay_ms, (unsigned long long)acked,
			(unsigned long long)total_acked,
			(unsigned long long)s.n_present,
			s.n_present > total_acked ? " (incl. published, not acked)"
						  : "");
		if (test_failures)
			break;
	}
	if (!test_failures)
		check_tier(root, &s, 0, 0, 1); /* read everything once more */
	fprintf(stderr, "test_crash: %llu rounds, %llu chunks acknowledged, "
		"%llu published but killed before the acknowledgement, %.1f s\n",
		(unsigned long long)s.rounds_run, (unsigned long long)total_acked,
		(unsigned long long)kills_in_flight, now_s() - t0);
	if (!test_failures)
		tt_rm_rf(base);
	else
		fprintf(stderr, "directory kept for inspection: %s\n", base);
	free(s.acked);
	free(s.verified);
	free(s.present);
	free(s.prev);
	free(s.expect);
	TEST_DONE();
}
