/*
 * test_rebuild.c — the NVMe tier rebuilds its index from many files.
 *
 * Puts N small chunks (payloads of 4 or 16 KiB) into a tier under /var/tmp
 * from four writer threads, closes it, reopens it and times the rebuild
 * (open reads the first 4 KiB of every file).  Then: the index holds exactly
 * the N keys (stats, iterate: no key twice, no key never put, lengths
 * right), exists() answers for all N from memory, 1,000 random gets decode
 * and match their payload bit for bit, nothing was dropped as corrupt and
 * tmp/ is empty.
 *
 * N is 100,000 when KVT_TEST_LARGE=1, or when /var/tmp has 4 GiB free and
 * the first 5,000 puts project the whole write phase within 40 s.  Else N is
 * what fits 40 s at the measured rate, but at least 20,000, and the reason
 * is printed.  The write phase also stops at the 40 s budget if the disk
 * slows down after the measurement (never below 20,000).  The page cache is
 * warm at the rebuild (dropping it needs root): the time is a best case.
 * Prints N, the rebuild time and chunks/s.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "format/object.h"
#include "tier/nvme.h"
#include "test.h"
#include "tier_test_util.h"

#define N_LARGE 100000u
#define N_MIN 20000u
#define N_PROBE 5000u
#define WRITE_BUDGET_S 40.0
#define FREE_LARGE (4ull << 30)
#define FREE_MIN (1ull << 30)
#define THREADS 4
#define SAMPLE 1000u
#define CAPACITY (64ull << 30)

static kvt_ns ns_4k, ns_16k;

static const kvt_ns *ns_of(uint64_t c)
{
	return tt_mix64(c ^ 0x77) % 4 == 0 ? &ns_16k : &ns_4k;
}

static uint64_t payload_seed(uint64_t c)
{
	return c * 1009 + 3;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- writers -------------------------------------------------------------------- */

typedef struct writers {
	kvt_tier *t;
	pthread_mutex_t mu;        /* guards next and end */
	uint64_t next;             /* next counter to hand out */
	uint64_t end;              /* hand out counters below this */
	uint64_t floor;            /* never stop below this ... */
	double deadline;           /* ... but stop handing out after it */
	atomic_int failed;
} writers;

/* The next counter to put, or UINT64_MAX when done.  Counters are handed
 * out in order under the mutex, so the ones put are exactly [0, next). */
static uint64_t writer_take(writers *w)
{
	uint64_t c = UINT64_MAX;

	pthread_mutex_lock(&w->mu);
	if (w->next >= w->floor && w->next < w->end && now_s() > w->deadline)
		w->end = w->next; /* out of time */
	if (w->next < w->end && !atomic_load(&w->failed))
		c = w->next++;
	pthread_mutex_unlock(&w->mu);
	return c;
}

static void *writer_run(void *arg)
{
	writers *w = arg;
	uint8_t *payload = malloc(tt_img_len(&ns_16k));

	if (!payload) {
		atomic_store(&w->failed, KVT_ENOMEM);
		goto out;
	}
	for (;;) {
		uint64_t c = writer_take(w);
		kvt_key key;
		int rc;

		if (c == UINT64_MAX)
			break;
		key = tt_key_of(c, -1);
		rc = tt_put_image(w->t, ns_of(c), &key, payload_seed(c),
				  payload, KVT_DUR_CRASH_SAFE);
		if (rc) {
			fprintf(stderr, "put %llu: %s (%s)\n",
				(unsigned long long)c, kvt_strerror(rc),
				kvt_errmsg());
			atomic_store(&w->failed, rc);
			break;
		}
	}
out:
	free(payload);
	return NULL;
}

/* Put counters [next, end) from THREADS threads, stopping early (end
 * lowered) past the deadline; returns the failure code or 0. */
static int write_phase(writers *w)
{
	pthread_t th[THREADS];
	int i, n = 0;

	for (i = 0; i < THREADS; i++)
		if (!pthread_create(&th[i], NULL, writer_run, w))
			n++;
	if (!n)
		return -EAGAIN;
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return atomic_load(&w->failed);
}

/* --- cleanup: unlink the fan-out tree from several threads ------------------------- */

typedef struct rm_job {
	const char *root;
	int id;
} rm_job;

static void rm_dir_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

static void *rm_run(void *arg)
{
	rm_job *j = arg;
	char p0[PATH_MAX], p1[PATH_MAX + 8];
	int k0, k1;

	for (k0 = j->id; k0 < 256; k0 += THREADS) {
		snprintf(p0, sizeof(p0), "%s/%02x", j->root, k0);
		for (k1 = 0; k1 < 256; k1++) {
			snprintf(p1, sizeof(p1), "%s/%02x", p0, k1);
			rm_dir_files(p1);
			rmdir(p1);
		}
		rmdir(p0);
	}
	return NULL;
}

static void rm_tree(const char *base, const char *root)
{
	pthread_t th[THREADS];
	rm_job j[THREADS];
	char p[PATH_MAX + 8];
	int i, n = 0;

	for (i = 0; i < THREADS; i++) {
		j[i] = (rm_job){ root, i };
		if (!pthread_create(&th[n], NULL, rm_run, &j[i]))
			n++;
		else
			rm_run(&j[i]);
	}
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	snprintf(p, sizeof(p), "%s/tmp", root);
	rm_dir_files(p);
	rmdir(p);
	rmdir(root);
	rmdir(base);
}

/* --- checks ----------------------------------------------------------------------- */

typedef struct iter_ctx {
	uint64_t n, count, unknown, dup, bad_len;
	uint8_t *seen;
} iter_ctx;

static int iter_fn(void *arg, const kvt_key *key, uint64_t len)
{
	iter_ctx *x = arg;
	uint64_t c = tt_counter_of(key, x->n, 0);

	x->count++;
	if (c == UINT64_MAX) {
		x->unknown++;
		return 0;
	}
	if (x->seen[c]++)
		x->dup++;
	if (len != tt_img_len(ns_of(c)))
		x->bad_len++;
	return 0;
}

/* 0 if chunk c reads back bit-exact. */
static int get_verify(kvt_tier *t, uint64_t c, uint8_t *expect)
{
	kvt_key key = tt_key_of(c, -1);

	return tt_get_verify(t, ns_of(c), &key, payload_seed(c), expect);
}

int main(void)
{
	char base[] = "/var/tmp/kvt_rebuild_XXXXXX", root[PATH_MAX];
	char tmpdir[PATH_MAX + 8];
	const char *large = getenv("KVT_TEST_LARGE");
	int force = large && !strcmp(large, "1");
	struct statvfs sv;
	uint64_t free_b, n, c, expect_used = 0;
	kvt_nvme_opts o = { .queue_depth = 16, .use_io_uring = 1,
			    .capacity = CAPACITY };
	kvt_tier_stats st;
	kvt_tier *t = NULL;
	writers w;
	iter_ctx x;
	uint8_t *expect;
	double t_start = now_s(), t0, t_probe, t_write, t_rebuild;
	uint64_t rng;
	unsigned i;
	int rc, bad = 0;

	if (statvfs("/var/tmp", &sv))
		SKIP("cannot statvfs /var/tmp");
	free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (free_b < FREE_MIN || (force && free_b < FREE_LARGE))
		SKIP("/var/tmp has %llu MiB free; this test needs %llu MiB",
		     (unsigned long long)(free_b >> 20),
		     (unsigned long long)((force ? FREE_LARGE : FREE_MIN) >> 20));
	if (!mkdtemp(base))
		SKIP("cannot create a directory under /var/tmp");
	snprintf(root, sizeof(root), "%s/tier", base);
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", root);
	o.path = root;

	tt_ns_make(&ns_4k, 1, 1, 64, 16, KVT_DTYPE_BF16, 0, 1);  /* 4 KiB payload */
	tt_ns_make(&ns_16k, 2, 1, 64, 32, KVT_DTYPE_BF16, 0, 2); /* 16 KiB payload */
	CHECK_EQ(tt_img_len(&ns_4k), 4096 + 4096);
	CHECK_EQ(tt_img_len(&ns_16k), 4096 + 16384);

	rc = kvt_nvme_open(&o, &t);
	CHECK_EQ(rc, 0);
	if (rc)
		goto done;

	/* the first 5,000 puts measure the disk */
	memset(&w, 0, sizeof(w));
	pthread_mutex_init(&w.mu, NULL);
	w.t = t;
	w.end = w.floor = N_PROBE;
	w.deadline = 1e300;
	t0 = now_s();
	rc = write_phase(&w);
	t_probe = now_s() - t0;
	CHECK_EQ(rc, 0);
	if (rc)
		goto close;
	{
		double projected = t_probe * N_LARGE / N_PROBE;
		if (force) {
			n = N_LARGE;
			fprintf(stderr, "N = %u (KVT_TEST_LARGE=1; %u puts took "
				"%.2f s, so about %.0f s to write)\n", N_LARGE,
				N_PROBE, t_probe, projected);
		} else if (free_b < FREE_LARGE) {
			n = N_MIN;
			fprintf(stderr, "N = %u, not %u: /var/tmp has %llu MiB free, "
				"under 4 GiB\n", N_MIN, N_LARGE,
				(unsigned long long)(free_b >> 20));
		} else if (projected > WRITE_BUDGET_S) {
			double fit = WRITE_BUDGET_S / t_probe * N_PROBE;
			n = fit < N_MIN ? N_MIN : (uint64_t)fit;
			fprintf(stderr, "N = %llu, not %u: %u puts took %.2f s "
				"(%.0f/s from %d threads), so %u would take "
				"about %.0f s, over the %.0f s budget "
				"(KVT_TEST_LARGE=1 forces %u)\n",
				(unsigned long long)n, N_LARGE, N_PROBE, t_probe,
				N_PROBE / t_probe, THREADS, N_LARGE, projected,
				WRITE_BUDGET_S, N_LARGE);
		} else {
			n = N_LARGE;
			fprintf(stderr, "N = %u (%u puts took %.2f s)\n", N_LARGE,
				N_PROBE, t_probe);
		}
	}
	/* the rest, within the budget unless forced */
	w.end = n;
	w.floor = N_MIN;
	w.deadline = force ? 1e300 : t0 + WRITE_BUDGET_S;
	rc = write_phase(&w);
	t_write = now_s() - t0;
	CHECK_EQ(rc, 0);
	if (rc)
		goto close;
	if (w.next < n) {
		/* the disk slowed down after the measurement */
		fprintf(stderr, "the %.0f s write budget ran out: N = %llu, "
			"not %llu\n", WRITE_BUDGET_S,
			(unsigned long long)w.next, (unsigned long long)n);
		n = w.next;
	}
	fprintf(stderr, "put %llu chunks in %.2f s (%.0f/s)\n",
		(unsigned long long)n, t_write, n / t_write);
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, n);
	t->ops->close(t);
	t = NULL;

	/* the rebuild */
	t0 = now_s();
	rc = kvt_nvme_open(&o, &t);
	t_rebuild = now_s() - t0;
	CHECK_EQ(rc, 0);
	if (rc)
		goto done;
	fprintf(stderr, "rebuild: N = %llu chunks in %.3f s, %.0f chunks/s "
		"(warm page cache)\n", (unsigned long long)n, t_rebuild,
		n / t_rebuild);

	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, n);
	CHECK_EQ(st.corrupt, 0);
	{
		uint32_t align = 4096;
		kvt_nvme_info(t, NULL, NULL, &align);
		for (c = 0; c < n; c++)
			expect_used += (tt_img_len(ns_of(c)) + align - 1) &
				       ~(uint64_t)(align - 1);
	}
	CHECK_EQ(st.used_bytes, expect_used);

	memset(&x, 0, sizeof(x));
	x.n = n;
	x.seen = calloc(n ? n : 1, 1);
	if (x.seen) {
		CHECK_EQ(t->ops->iterate(t, iter_fn, &x), 0);
		CHECK_EQ(x.count, n);
		CHECK_EQ(x.unknown, 0);
		CHECK_EQ(x.dup, 0);
		CHECK_EQ(x.bad_len, 0);
		free(x.seen);
	}
	for (c = 0; c < n; c++) {
		kvt_key k = tt_key_of(c, -1);
		if (t->ops->exists(t, &k) != 1 && bad++ < 10)
			fprintf(stderr, "chunk %llu is not in the index\n",
				(unsigned long long)c);
	}
	CHECK_EQ(bad, 0);

	expect = malloc(tt_img_len(&ns_16k));
	rng = (uint64_t)time(NULL);
	bad = 0;
	if (expect) {
		t0 = now_s();
		for (i = 0; i < SAMPLE && n; i++) {
			rng = tt_mix64(rng);
			c = rng % n;
			rc = get_verify(t, c, expect);
			if (rc && bad++ < 10)
				fprintf(stderr, "chunk %llu: %d %s\n",
					(unsigned long long)c, rc,
					rc < -100 ? "(bytes differ)"
						  : kvt_strerror(rc));
		}
		fprintf(stderr, "%u random gets verified bit-exact in %.2f s\n",
			SAMPLE, now_s() - t0);
	}
	CHECK_EQ(bad, 0);
	free(expect);
	CHECK_EQ(tt_count_dir(tmpdir), 0);
close:
	if (t)
		t->ops->close(t);
done:
	t0 = now_s();
	rm_tree(base, root);
	fprintf(stderr, "cleanup %.1f s; test_rebuild took %.1f s\n",
		now_s() - t0, now_s() - t_start);
	TEST_DONE();
}
