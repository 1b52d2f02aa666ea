/*
 * test_sharedfs.c — the directory tier as a shared file-system tier: several
 * processes acting as nodes on one directory, garbage collection, and object
 * authentication.
 *
 * Nodes are separate processes: this binary re-executes itself
 * (/proc/self/exe) with a role as argv[1] ("writer", "racer", "crasher",
 * "gc"), so every node has its own tier instance, index and refresh thread,
 * as on separate hosts sharing one mount.
 *
 * Covers: a node opened before another node writes finds that node's chain
 * within the refresh staleness bound and loads it bit-exact, and sees a
 * deletion within the same bound; a get of an unindexed key makes no system
 * call; two processes racing on the same keys publish exactly one version
 * of each, never a mix; SIGKILL of a writer during publication, many times,
 * leaves no visible partial object; GC removes oldest first and by TTL while
 * a reader holding an unlinked file reads it whole; two concurrent
 * collectors leave what one would; the soft-budget overshoot bound under
 * concurrent writers and collectors; HMAC authentication rejects planted,
 * altered and wrongly signed objects as corrupt.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "format/auth.h"
#include "format/object.h"
#include "tier/fsdir.h"
#include "test.h"

static kvt_ns small_ns, big_ns;

static void ns_setup(void)
{
	memset(&small_ns, 0, sizeof(small_ns));
	test_fill(small_ns.digest, sizeof(small_ns.digest), 77);
	/* 2 layers x 2 planes x 16 tokens x 2 heads x 8 dim x f16: 2 KiB */
	small_ns.layout = (kvt_layout){ .num_layers = 2, .num_kv_heads = 2,
					.head_dim = 8, .dtype = KVT_DTYPE_F16,
					.kv_planes = 2, .block_size = 16,
					.chunk_tokens = 16 };
	small_ns.hash_scheme = KVT_HASH_SHA256;
	small_ns.tp_size = small_ns.pp_size = 1;
	/* 2 layers x 2 planes x 256 tokens x 4 heads x 64 dim x f16: 1 MiB
	 * with the header past FSDIR_DIRECT_MIN, so O_DIRECT plus the
	 * buffered tail (the tag) is exercised where the fs supports it */
	big_ns = small_ns;
	big_ns.layout.num_kv_heads = 4;
	big_ns.layout.head_dim = 64;
	big_ns.layout.block_size = 256;
	big_ns.layout.chunk_tokens = 256;
}

static uint64_t img_len(const kvt_ns *ns)
{
	return KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout);
}

static kvt_key key_of(uint64_t i)
{
	kvt_key k;

	test_fill(k.b, sizeof(k.b), 7919 * (i + 1));
	return k;
}

static const uint8_t auth_key[32] = "0123456789abcdef-test-auth-key!";

/* Payload seed of chunk `i` written by writer `seed`. */
static uint64_t pseed(uint64_t seed, uint64_t i)
{
	return seed * 1000003 + i;
}

/* A whole image of `key` in a fresh buffer; payload from `seed`. */
static uint8_t *make_image(const kvt_ns *ns, const kvt_key *key, uint64_t seed)
{
	uint64_t lb = kvt_layout_layer_bytes(&ns->layout), n = img_len(ns);
	uint8_t *img = malloc(n), *payload = malloc(2 * lb);
	const void *layers[2] = { payload, payload + lb };
	struct iovec dst = { img, n };
	kvt_obj_hdr h;

	test_fill(payload, 2 * lb, seed);
	if (kvt_obj_hdr_init(&h, ns, key) ||
	    kvt_obj_write_iov(&h, layers, &dst, 1)) {
		fprintf(stderr, "make_image: %s\n", kvt_errmsg());
		exit(1);
	}
	free(payload);
	return img;
}

static int put_img(kvt_tier *t, const kvt_ns *ns, const kvt_key *key,
		   uint64_t seed, int dur)
{
	uint8_t *img = make_image(ns, key, seed);
	kvt_tier_wbuf *w;
	int rc = t->ops->put_begin(t, key, img_len(ns), &w);

	if (!rc) {
		memcpy(w->iov[0].iov_base, img, img_len(ns));
		rc = t->ops->put_commit(t, w, dur);
	}
	free(img);
	return rc;
}

/* Which seed's payload `key` holds in t: decoded whole (checksums), key and
 * namespace checked, compared with each candidate bit for bit.  Returns the
 * matching candidate's index, -1 for none (mixed or wrong), or the get's
 * error code. */
static int get_which(kvt_tier *t, const kvt_ns *ns, const kvt_key *key,
		     const uint64_t *seeds, int n)
{
	uint64_t lb = kvt_layout_layer_bytes(&ns->layout);
	uint8_t *want = malloc(2 * lb);
	kvt_tier_rbuf *r;
	kvt_obj_hdr h;
	int rc = t->ops->get(t, key, &r), i, found = -1;

	if (rc) {
		free(want);
		return rc;
	}
	if (r->n_iov != 1 || r->len != img_len(ns) ||
	    kvt_obj_decode(r->iov[0].iov_base, r->iov[0].iov_len, &h) ||
	    kvt_obj_hdr_expect(&h, ns, key)) {
		t->ops->release(t, r);
		free(want);
		return -1;
	}
	for (i = 0; i < n && found < 0; i++) {
		test_fill(want, 2 * lb, seeds[i]);
		if (!memcmp((uint8_t *)r->iov[0].iov_base + KVT_OBJ_HEADER_BYTES,
			    want, 2 * lb))
			found = i;
	}
	t->ops->release(t, r);
	free(want);
	return found;
}

static kvt_tier *open_node(const char *dir, int refresh_ms, int auth)
{
	kvt_fsdir_opts o = { .path = dir, .capacity = 1ull << 40,
			     .refresh_ms = refresh_ms };
	kvt_tier *t = NULL;

	if (auth) {
		o.auth_key = auth_key;
		o.auth_key_len = sizeof(auth_key);
	}
	if (kvt_fsdir_open(&o, &t)) {
		fprintf(stderr, "open %s: %s\n", dir, kvt_errmsg());
		exit(1);
	}
	return t;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int rm_one(const char *p, const struct stat *st, int flag,
		  struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(p);
	return 0;
}

static void rm_rf(const char *root)
{
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *new_dir(void)
{
	char d[] = "/tmp/kvt_sharedfs_XXXXXX";

	if (!mkdtemp(d)) {
		perror("mkdtemp");
		exit(1);
	}
	return strdup(d);
}

static char path_buf[PATH_MAX];

static const char *final_path(const char *root, const kvt_key *k)
{
	static const char digits[] = "0123456789abcdef";
	char hex[65];
	int i;

	for (i = 0; i < 32; i++) {
		hex[2 * i] = digits[k->b[i] >> 4];
		hex[2 * i + 1] = digits[k->b[i] & 15];
	}
	hex[64] = '\0';
	snprintf(path_buf, sizeof(path_buf), "%s/%.2s/%.2s/%s.kvt", root, hex,
		 hex + 2, hex);
	return path_buf;
}

/* Bytes and count of published images under root (what GC sees). */
static uint64_t du_bytes, du_files;
static int du_one(const char *p, const struct stat *st, int flag,
		  struct FTW *f)
{
	size_t n = strlen(p);

	(void)f;
	if (flag == FTW_F && n > 4 && !strcmp(p + n - 4, ".kvt")) {
		du_bytes += (uint64_t)st->st_size;
		du_files++;
	}
	return 0;
}

static uint64_t du(const char *root)
{
	du_bytes = du_files = 0;
	nftw(root, du_one, 16, FTW_PHYS);
	return du_bytes;
}

/* Run this binary as another node; returns the pid. */
static pid_t spawn(char *const argv[])
{
	pid_t pid = fork();

	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0) {
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	return pid;
}

static int wait_ok(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void wait_go(const char *dir)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/go", dir);
	while (stat(p, &st))
		usleep(200);
}

/* --- roles run in child processes --------------------------------------- */

/* writer DIR N SEED BIG: put chunks 0..N-1, power safe, then exit. */
static int role_writer(char **argv)
{
	uint64_t n = strtoull(argv[3], NULL, 10), seed = strtoull(argv[4], NULL, 10);
	const kvt_ns *ns = atoi(argv[5]) ? &big_ns : &small_ns;
	kvt_tier *t = open_node(argv[2], -1, 1);
	uint64_t i;
	int rc = 0;

	for (i = 0; i < n && !rc; i++) {
		kvt_key k = key_of(i);
		rc = put_img(t, ns, &k, pseed(seed, i), KVT_DUR_POWER_SAFE);
	}
	t->ops->close(t);
	return rc ? 1 : 0;
}

/* racer DIR N SEED: wait for DIR/go, put keys 0..N-1 (same keys as the
 * other racer), write one byte per key ('1' won, '0' lost) to
 * DIR/wins.SEED. */
static int role_racer(char **argv)
{
	uint64_t n = strtoull(argv[3], NULL, 10), seed = strtoull(argv[4], NULL, 10);
	kvt_tier *t = open_node(argv[2], -1, 0);
	char *wins = calloc(n + 1, 1), p[PATH_MAX];
	uint64_t i;
	FILE *f;

	wait_go(argv[2]);
	for (i = 0; i < n; i++) {
		kvt_key k = key_of(i);
		int rc = put_img(t, &small_ns, &k, pseed(seed, i),
				 KVT_DUR_CRASH_SAFE);
		if (rc != 0 && rc != KVT_EEXIST)
			return 1;
		wins[i] = rc == 0 ? '1' : '0';
	}
	t->ops->close(t);
	snprintf(p, sizeof(p), "%s/wins.%llu", argv[2], (unsigned long long)seed);
	f = fopen(p, "w");
	if (!f || fwrite(wins, 1, n, f) != n || fclose(f))
		return 1;
	free(wins);
	return 0;
}

/* crasher DIR BASE: put big images with keys BASE, BASE+1, ... until
 * killed. */
static int role_crasher(char **argv)
{
	uint64_t i = strtoull(argv[3], NULL, 10);
	kvt_tier *t = open_node(argv[2], -1, 1);

	for (;; i++) {
		kvt_key k = key_of(i);
		put_img(t, &big_ns, &k, pseed(5, i), KVT_DUR_POWER_SAFE);
	}
	return 0;
}

/* gc DIR BUDGET: wait for DIR/go, one pass; result to DIR/gc.PID. */
static int role_gc(char **argv)
{
	kvt_fsdir_gc_opts o = { .budget = strtoull(argv[3], NULL, 10) };
	kvt_fsdir_gc_result r;
	char p[PATH_MAX];
	FILE *f;

	wait_go(argv[2]);
	if (kvt_fsdir_gc(argv[2], &o, &r))
		return 1;
	snprintf(p, sizeof(p), "%s/gc.%ld", argv[2], (long)getpid());
	f = fopen(p, "w");
	if (!f)
		return 1;
	fprintf(f, "%llu %llu %llu %llu\n", (unsigned long long)r.removed,
		(unsigned long long)r.raced, (unsigned long long)r.errors,
		(unsigned long long)r.bytes_left);
	return fclose(f) ? 1 : 0;
}

/* --- counting I/O: proves a miss makes no system call --------------------- */

static atomic_int io_calls;
static kvt_io count_io;

static int c_open(kvt_io *io, const char *p, int fl, mode_t m)
{
	(void)io;
	atomic_fetch_add(&io_calls, 1);
	return kvt_io_posix()->open(kvt_io_posix(), p, fl, m);
}

static int c_stat(kvt_io *io, const char *p, struct stat *st)
{
	(void)io;
	atomic_fetch_add(&io_calls, 1);
	return kvt_io_posix()->stat(kvt_io_posix(), p, st);
}

/* --- tests ---------------------------------------------------------------- */

/* Node B is open (refresh 100 ms) before node A, another process, writes a
 * chain; B must see all of it within the bound and load it bit-exact. */
static void test_two_nodes(void)
{
	char *dir = new_dir();
	const int n = 6, refresh_ms = 100;
	kvt_tier *b = open_node(dir, refresh_ms, 1), *quiet;
	char nbuf[16];
	char *argv[] = { "test_sharedfs", "writer", dir, nbuf, "11", "1", NULL };
	double t0, seen_after = -1;
	kvt_fsdir_opts qo = { .path = dir, .capacity = 1ull << 40,
			      .refresh_ms = -1, .auth_key = auth_key,
			      .auth_key_len = sizeof(auth_key) };
	kvt_tier_rbuf *r;
	int i, present, direct = -1;
	uint64_t seed;

	kvt_fsdir_info(b, &direct, NULL);
	fprintf(stderr, "two nodes: O_DIRECT %s on %s\n", direct ? "on" : "off",
		dir);
	/* A node with no refresh and a counting I/O table. */
	count_io = *kvt_io_posix();
	count_io.open = c_open;
	count_io.stat = c_stat;
	qo.io = &count_io;
	CHECK_EQ(kvt_fsdir_open(&qo, &quiet), 0);

	snprintf(nbuf, sizeof(nbuf), "%d", n);
	CHECK_EQ(wait_ok(spawn(argv)), 0);
	/* Published: node B learns of it by its refresh only. */
	t0 = now_s();
	while (now_s() - t0 < 5) {
		kvt_key k;
		for (present = 0; present < n; present++) {
			k = key_of((uint64_t)present);
			if (!b->ops->exists(b, &k))
				break;
		}
		if (present == n) {
			seen_after = now_s() - t0;
			break;
		}
		usleep(5000);
	}
	fprintf(stderr, "two nodes: chain of %d visible after %.3f s "
		"(refresh %d ms)\n", n, seen_after, refresh_ms);
	CHECK(seen_after >= 0);
	/* Bound: refresh_ms x ceil(D / refresh_dirs) + a scan; D <= 6 here.
	 * Generous for loaded CI machines. */
	CHECK(seen_after < 2.0);
	for (i = 0; i < n; i++) {
		kvt_key k = key_of((uint64_t)i);
		seed = pseed(11, (uint64_t)i);
		CHECK_EQ(get_which(b, &big_ns, &k, &seed, 1), 0);
	}

	/* The quiet node: a key it has not indexed is a miss without a
	 * system call, however present on disk. */
	{
		kvt_key k = key_of(0);
		int before = atomic_load(&io_calls);
		CHECK_EQ(quiet->ops->get(quiet, &k, &r), KVT_ENOTFOUND);
		CHECK_EQ(atomic_load(&io_calls), before);
		CHECK_EQ(quiet->ops->exists(quiet, &k), 0);
		CHECK_EQ(kvt_fsdir_probe(quiet, &k), 1);
		CHECK_EQ(quiet->ops->exists(quiet, &k), 1);
		CHECK_EQ(kvt_fsdir_refresh(quiet), 0);
		k = key_of((uint64_t)n - 1);
		CHECK_EQ(quiet->ops->exists(quiet, &k), 1);
		seed = pseed(11, (uint64_t)n - 1);
		CHECK_EQ(get_which(quiet, &big_ns, &k, &seed, 1), 0);
	}

	/* Another node's GC removes a chunk: gone from B within the bound. */
	{
		kvt_key k = key_of(2);
		CHECK_EQ(unlink(final_path(dir, &k)), 0);
		t0 = now_s();
		while (b->ops->exists(b, &k) && now_s() - t0 < 5)
			usleep(5000);
		fprintf(stderr, "two nodes: deletion seen after %.3f s\n",
			now_s() - t0);
		CHECK_EQ(b->ops->exists(b, &k), 0);
		CHECK(now_s() - t0 < 2.0);
		k = key_of(3);
		CHECK_EQ(b->ops->exists(b, &k), 1);
	}
	quiet->ops->close(quiet);
	b->ops->close(b);
	rm_rf(dir);
	free(dir);
}

/* Two processes put the same keys with different bytes at once. */
static void test_racing_writers(void)
{
	char *dir = new_dir(), p[PATH_MAX], nbuf[16];
	const int n = 200;
	char *a1[] = { "test_sharedfs", "racer", dir, nbuf, "1", NULL };
	char *a2[] = { "test_sharedfs", "racer", dir, nbuf, "2", NULL };
	char wins[2][200];
	pid_t p1, p2;
	kvt_tier *t;
	int i, winner_ok = 1, one_winner = 1, split[2] = { 0, 0 };
	FILE *f;

	snprintf(nbuf, sizeof(nbuf), "%d", n);
	p1 = spawn(a1);
	p2 = spawn(a2);
	usleep(50000); /* both open */
	snprintf(p, sizeof(p), "%s/go", dir);
	f = fopen(p, "w");
	fclose(f);
	CHECK_EQ(wait_ok(p1), 0);
	CHECK_EQ(wait_ok(p2), 0);
	for (i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/wins.%d", dir, i + 1);
		f = fopen(p, "r");
		CHECK(f && fread(wins[i], 1, n, f) == (size_t)n);
		if (f)
			fclose(f);
	}
	t = open_node(dir, -1, 0);
	for (i = 0; i < n; i++) {
		kvt_key k = key_of((uint64_t)i);
		uint64_t seeds[2] = { pseed(1, (uint64_t)i), pseed(2, (uint64_t)i) };
		int w = get_which(t, &small_ns, &k, seeds, 2);
		if ((wins[0][i] == '1') + (wins[1][i] == '1') != 1)
			one_winner = 0;
		else if (w < 0 || wins[w][i] != '1')
			winner_ok = 0;
		if (w >= 0)
			split[w]++;
	}
	fprintf(stderr, "racing writers: %d keys, won %d / %d\n", n, split[0],
		split[1]);
	CHECK(one_winner);
	CHECK(winner_ok);
	t->ops->close(t);
	rm_rf(dir);
	free(dir);
}

/* SIGKILL a writer mid-publication again and again: every visible object
 * must decode whole. */
static int decode_one(const char *p, const struct stat *st, int flag,
		      struct FTW *f);
static int decode_bad, decode_good;
static int decode_one(const char *p, const struct stat *st, int flag,
		      struct FTW *f)
{
	size_t n = strlen(p);
	uint8_t *buf;
	int fd;
	kvt_obj_hdr h;
	struct iovec img;

	(void)f;
	if (flag != FTW_F || n < 4 || strcmp(p + n - 4, ".kvt"))
		return 0;
	buf = malloc((size_t)st->st_size + 1);
	fd = open(p, O_RDONLY);
	if (fd < 0 || read(fd, buf, (size_t)st->st_size) != st->st_size ||
	    st->st_size < (off_t)(KVT_OBJ_HEADER_BYTES + 32) ||
	    kvt_obj_decode(buf, (size_t)st->st_size - 32, &h)) {
		decode_bad++;
	} else {
		img.iov_base = buf;
		img.iov_len = (size_t)st->st_size - 32;
		if (kvt_obj_auth_verify(&img, 1, auth_key, sizeof(auth_key),
					buf + img.iov_len))
			decode_bad++;
		else
			decode_good++;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return 0;
}

static void test_kill9(void)
{
	char *dir = new_dir(), base[32];
	char *argv[] = { "test_sharedfs", "crasher", dir, base, NULL };
	kvt_tier *t;
	kvt_tier_stats st;
	int i;

	srand(42);
	for (i = 0; i < 30; i++) {
		pid_t pid;
		snprintf(base, sizeof(base), "%d", i * 1000);
		pid = spawn(argv);
		usleep(20000 + (useconds_t)(rand() % 60000));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	/* A slow machine (a sanitizer, a loaded host) may kill every writer
	 * before its first publication: more writers, living longer, until
	 * one has published. */
	for (int ms = 200; ms <= 6400; ms *= 2, i++) {
		pid_t pid;
		decode_bad = decode_good = 0;
		nftw(dir, decode_one, 16, FTW_PHYS);
		if (decode_good > 0)
			break;
		snprintf(base, sizeof(base), "%d", i * 1000);
		pid = spawn(argv);
		usleep((useconds_t)ms * 1000);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	decode_bad = decode_good = 0;
	nftw(dir, decode_one, 16, FTW_PHYS);
	fprintf(stderr, "kill -9: %d writers killed, %d objects visible, %d bad\n", i,
		decode_good, decode_bad);
	CHECK_EQ(decode_bad, 0);
	CHECK(decode_good > 0);
	/* A node opening the directory drops nothing either. */
	{
		kvt_fsdir_opts o = { .path = dir, .capacity = 1ull << 40,
				     .refresh_ms = -1, .verify_on_open = 1,
				     .auth_key = auth_key,
				     .auth_key_len = sizeof(auth_key) };
		CHECK_EQ(kvt_fsdir_open(&o, &t), 0);
		t->ops->stats(t, &st);
		CHECK_EQ(st.corrupt, 0);
		CHECK_EQ(st.chunks, (uint64_t)decode_good);
		t->ops->close(t);
	}
	rm_rf(dir);
	free(dir);
}

static void set_mtime(const char *p, time_t when)
{
	struct timespec ts[2] = { { when, 0 }, { when, 0 } };

	if (utimensat(AT_FDCWD, p, ts, 0))
		perror("utimensat");
}

/* GC: TTL, then budget oldest first, while a reader holds the oldest open;
 * a dry run removes nothing; stale temporaries go. */
static void test_gc_basic(void)
{
	char *dir = new_dir(), p[PATH_MAX];
	kvt_tier *t = open_node(dir, -1, 0);
	uint64_t len = img_len(&small_ns), i, n = 20;
	time_t now = time(NULL);
	kvt_fsdir_gc_opts o;
	kvt_fsdir_gc_result r;
	uint8_t *img, *back;
	int fd;

	for (i = 0; i < n; i++) {
		kvt_key k = key_of(i);
		CHECK_EQ(put_img(t, &small_ns, &k, pseed(3, i), KVT_DUR_CRASH_SAFE), 0);
		/* chunk i was last used i minutes after chunk 0; 0..4 are
		 * over a day old */
		set_mtime(final_path(dir, &k),
			  now - (time_t)(i < 5 ? 2 * 86400 : 3600) + (time_t)i * 60);
	}
	t->ops->close(t);
	/* A stale and a fresh temporary. */
	snprintf(p, sizeof(p), "%s/tmp/stale.1.1.tmp", dir);
	close(open(p, O_WRONLY | O_CREAT, 0644));
	set_mtime(p, now - 3600);
	snprintf(p, sizeof(p), "%s/tmp/fresh.1.2.tmp", dir);
	close(open(p, O_WRONLY | O_CREAT, 0644));

	/* A reader is in the middle of the oldest chunk. */
	{
		kvt_key k = key_of(0);
		img = malloc(len);
		back = malloc(len);
		fd = open(final_path(dir, &k), O_RDONLY);
		CHECK(fd >= 0);
		CHECK_EQ(pread(fd, back, len / 2, 0), (ssize_t)(len / 2));
	}

	memset(&o, 0, sizeof(o));
	o.ttl_s = 86400;
	o.budget = 10 * len;
	o.tmp_grace_s = 600;
	o.dry_run = 1;
	CHECK_EQ(kvt_fsdir_gc(dir, &o, &r), 0);
	CHECK_EQ(r.files, n);
	CHECK_EQ(r.removed, n - 10);
	CHECK_EQ(du(dir), n * len); /* nothing removed */

	o.dry_run = 0;
	CHECK_EQ(kvt_fsdir_gc(dir, &o, &r), 0);
	CHECK_EQ(r.removed, n - 10);
	CHECK_EQ(r.expired, 5);
	CHECK_EQ(r.bytes_left, 10 * len);
	CHECK_EQ(r.tmp_removed, 1);
	CHECK_EQ(r.errors, 0);
	CHECK_EQ(du(dir), 10 * len);
	for (i = 0; i < n; i++) {
		kvt_key k = key_of(i);
		struct stat st;
		CHECK_EQ(stat(final_path(dir, &k), &st) == 0, i >= 10);
	}
	snprintf(p, sizeof(p), "%s/tmp/fresh.1.2.tmp", dir);
	CHECK(access(p, F_OK) == 0);

	/* The reader finishes the unlinked file: whole and the same bytes. */
	CHECK_EQ(pread(fd, back + len / 2, len - len / 2, (off_t)(len / 2)),
		 (ssize_t)(len - len / 2));
	close(fd);
	{
		kvt_obj_hdr h;
		uint8_t *want = malloc(len - KVT_OBJ_HEADER_BYTES);
		CHECK_EQ(kvt_obj_decode(back, len, &h), 0);
		test_fill(want, len - KVT_OBJ_HEADER_BYTES, pseed(3, 0));
		CHECK(!memcmp(back + KVT_OBJ_HEADER_BYTES, want,
			      len - KVT_OBJ_HEADER_BYTES));
		free(want);
	}
	/* A node opened on the directory afterwards serves what is left. */
	t = open_node(dir, -1, 0);
	{
		kvt_tier_stats st;
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 10);
	}
	t->ops->close(t);
	free(img);
	free(back);
	rm_rf(dir);
	free(dir);
}

/* Two collectors at once leave what one would, without errors. */
static void test_gc_concurrent(void)
{
	char *dir = new_dir(), p[PATH_MAX], budget[32];
	kvt_tier *t = open_node(dir, -1, 0);
	uint64_t len = img_len(&small_ns), i, n = 400, keep = 150;
	char *argv[] = { "test_sharedfs", "gc", dir, budget, NULL };
	time_t now = time(NULL);
	pid_t pid[2];
	uint64_t removed = 0, raced = 0;
	FILE *f;

	for (i = 0; i < n; i++) {
		kvt_key k = key_of(i);
		CHECK_EQ(put_img(t, &small_ns, &k, pseed(4, i), KVT_DUR_CRASH_SAFE), 0);
		set_mtime(final_path(dir, &k), now - 100000 + (time_t)i);
	}
	t->ops->close(t);
	snprintf(budget, sizeof(budget), "%llu",
		 (unsigned long long)(keep * len + len / 2));
	pid[0] = spawn(argv);
	pid[1] = spawn(argv);
	usleep(20000);
	snprintf(p, sizeof(p), "%s/go", dir);
	f = fopen(p, "w");
	fclose(f);
	for (i = 0; i < 2; i++) {
		unsigned long long a = 0, b = 0, c = 1, d = 0;
		CHECK_EQ(wait_ok(pid[i]), 0);
		snprintf(p, sizeof(p), "%s/gc.%ld", dir, (long)pid[i]);
		f = fopen(p, "r");
		CHECK(f && fscanf(f, "%llu %llu %llu %llu", &a, &b, &c, &d) == 4);
		if (f)
			fclose(f);
		CHECK_EQ(c, 0);                   /* no errors */
		CHECK(d <= keep * len + len / 2); /* each thinks it is done */
		removed += a;
		raced += b;
	}
	fprintf(stderr, "two collectors: removed %llu, raced %llu\n",
		(unsigned long long)removed, (unsigned long long)raced);
	CHECK_EQ(removed, n - keep); /* each file removed exactly once */
	CHECK_EQ(du(dir), keep * len);
	for (i = 0; i < n; i++) {
		kvt_key k = key_of(i);
		struct stat st;
		if ((stat(final_path(dir, &k), &st) == 0) != (i >= n - keep)) {
			CHECK(!"survivors are not the newest");
			break;
		}
	}
	rm_rf(dir);
	free(dir);
}

/* The soft budget: writers keep publishing while two collectors loop.  Right
 * after a pass, bytes on disk <= budget + bytes whose put began during the
 * pass + one object per writer (puts in flight when it began). */
enum { OV_WRITERS = 3, OV_COLLECTORS = 2 };
static atomic_uint_fast64_t ov_begun, ov_seq;
static atomic_int ov_stop;
static const char *ov_dir;
static uint64_t ov_budget;
static atomic_int ov_violations, ov_passes;
static uint64_t ov_worst;

static void *ov_writer(void *arg)
{
	kvt_tier *t = arg;

	while (!atomic_load(&ov_stop)) {
		uint64_t i = atomic_fetch_add(&ov_seq, 1);
		kvt_key k = key_of(1000000 + i);
		atomic_fetch_add(&ov_begun, img_len(&small_ns));
		put_img(t, &small_ns, &k, pseed(9, i), KVT_DUR_CRASH_SAFE);
	}
	return NULL;
}

static pthread_mutex_t ov_mu = PTHREAD_MUTEX_INITIALIZER;

static void *ov_collector(void *arg)
{
	kvt_fsdir_gc_opts o = { .budget = ov_budget };
	kvt_fsdir_gc_result r;

	(void)arg;
	while (!atomic_load(&ov_stop)) {
		uint64_t b0 = atomic_load(&ov_begun), b1, present;
		if (kvt_fsdir_gc(ov_dir, &o, &r)) {
			atomic_fetch_add(&ov_violations, 1);
			break;
		}
		pthread_mutex_lock(&ov_mu); /* du() uses globals */
		present = du(ov_dir);
		b1 = atomic_load(&ov_begun);
		if (present > ov_budget + (b1 - b0) + OV_WRITERS * img_len(&small_ns))
			atomic_fetch_add(&ov_violations, 1);
		if (present > ov_budget && present - ov_budget > ov_worst)
			ov_worst = present - ov_budget;
		pthread_mutex_unlock(&ov_mu);
		atomic_fetch_add(&ov_passes, 1);
	}
	return NULL;
}

static void test_gc_overshoot(void)
{
	char *dir = new_dir();
	kvt_tier *t = open_node(dir, -1, 0);
	pthread_t w[OV_WRITERS], c[OV_COLLECTORS];
	int i;

	ov_dir = dir;
	ov_budget = 100 * img_len(&small_ns);
	atomic_store(&ov_stop, 0);
	for (i = 0; i < OV_WRITERS; i++)
		pthread_create(&w[i], NULL, ov_writer, t);
	for (i = 0; i < OV_COLLECTORS; i++)
		pthread_create(&c[i], NULL, ov_collector, NULL);
	sleep(2);
	atomic_store(&ov_stop, 1);
	for (i = 0; i < OV_WRITERS; i++)
		pthread_join(w[i], NULL);
	for (i = 0; i < OV_COLLECTORS; i++)
		pthread_join(c[i], NULL);
	fprintf(stderr, "overshoot: %d passes, %llu bytes published, worst "
		"overshoot %llu bytes (%.1f objects) over a budget of %llu\n",
		atomic_load(&ov_passes), (unsigned long long)atomic_load(&ov_begun),
		(unsigned long long)ov_worst,
		(double)ov_worst / (double)img_len(&small_ns),
		(unsigned long long)ov_budget);
	CHECK(atomic_load(&ov_passes) > 2);
	CHECK_EQ(atomic_load(&ov_violations), 0);
	/* Quiet now: one more pass meets the budget exactly. */
	{
		kvt_fsdir_gc_opts o = { .budget = ov_budget };
		kvt_fsdir_gc_result r;
		CHECK_EQ(kvt_fsdir_gc(dir, &o, &r), 0);
		CHECK(du(dir) <= ov_budget);
	}
	t->ops->close(t);
	rm_rf(dir);
	free(dir);
}

/* Rewrite a whole image so its payload differs but every checksum and the
 * header checksum are right again: what an attacker without the key can
 * do. */
static void forge_payload(uint8_t *img, size_t len)
{
	kvt_obj_hdr h;
	uint32_t l;

	if (kvt_obj_hdr_decode(img, len, &h)) {
		CHECK(!"forge: decode");
		return;
	}
	img[KVT_OBJ_HEADER_BYTES + 5] ^= 0x40;
	for (l = 0; l < h.n_layers; l++)
		h.layers[l].csum = kvt_obj_layer_csum(
			img + KVT_OBJ_HEADER_BYTES + h.layers[l].offset,
			h.layers[l].length);
	kvt_obj_hdr_encode(&h, img);
	CHECK_EQ(kvt_obj_decode(img, len, &h), 0);
}

static void write_file(const char *p, const void *buf, size_t len)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
	close(fd);
}

static void test_auth(void)
{
	char *dir = new_dir(), dirs[PATH_MAX];
	kvt_tier *t = open_node(dir, -1, 1), *plain;
	uint64_t len = img_len(&small_ns), seed;
	kvt_tier_stats st;
	kvt_tier_rbuf *r;
	kvt_key k0 = key_of(0), k1 = key_of(1), k2 = key_of(2), k3 = key_of(3);
	uint8_t *img, *file, tag[32];
	struct iovec iov;
	int fd;

	/* The primitives. */
	img = make_image(&small_ns, &k0, 1);
	iov.iov_base = img;
	iov.iov_len = len;
	CHECK_EQ(kvt_obj_auth_sign(&iov, 1, auth_key, sizeof(auth_key), tag), 0);
	CHECK_EQ(kvt_obj_auth_verify(&iov, 1, auth_key, sizeof(auth_key), tag), 0);
	CHECK_EQ(kvt_obj_auth_verify(&iov, 1, (const uint8_t *)"another key of 32 bytes........", 32, tag),
		 KVT_ECORRUPT);
	CHECK_EQ(kvt_obj_auth_sign(&iov, 1, auth_key, 8, tag), KVT_EINVAL);
	img[100] ^= 1;
	CHECK_EQ(kvt_obj_auth_verify(&iov, 1, auth_key, sizeof(auth_key), tag),
		 KVT_ECORRUPT);
	free(img);

	/* A signed round trip. */
	CHECK_EQ(put_img(t, &small_ns, &k0, 100, KVT_DUR_POWER_SAFE), 0);
	seed = 100;
	CHECK_EQ(get_which(t, &small_ns, &k0, &seed, 1), 0);
	{
		struct stat sb;
		CHECK_EQ(stat(final_path(dir, &k0), &sb), 0);
		CHECK_EQ((uint64_t)sb.st_size, len + 32);
	}

	fprintf(stderr, "(expect warnings: 4 objects dropped)\n");
	/* Planted: a valid but unsigned object under a fresh key. */
	img = make_image(&small_ns, &k1, 101);
	snprintf(dirs, sizeof(dirs), "%s", final_path(dir, &k1));
	*strrchr(dirs, '/') = '\0';
	kvt_io_mkdirs(kvt_io_posix(), dirs, 0755);
	write_file(final_path(dir, &k1), img, len);
	CHECK_EQ(kvt_fsdir_probe(t, &k1), 0);
	CHECK_EQ(t->ops->exists(t, &k1), 0);
	/* Never served, and left in place: another node may hold a key. */
	CHECK(access(final_path(dir, &k1), F_OK) == 0);
	CHECK_EQ(t->ops->repair(t, &k1), KVT_ENOTSUP);
	CHECK(access(final_path(dir, &k1), F_OK) == 0);
	free(img);

	/* Planted with a made-up tag of the right length. */
	img = make_image(&small_ns, &k2, 102);
	file = malloc(len + 32);
	memcpy(file, img, len);
	memset(file + len, 0xAB, 32);
	snprintf(dirs, sizeof(dirs), "%s", final_path(dir, &k2));
	*strrchr(dirs, '/') = '\0';
	kvt_io_mkdirs(kvt_io_posix(), dirs, 0755);
	write_file(final_path(dir, &k2), file, len + 32);
	CHECK_EQ(kvt_fsdir_probe(t, &k2), 1); /* the header checks out... */
	CHECK_EQ(t->ops->get(t, &k2, &r), KVT_ECORRUPT); /* ...the tag not */
	CHECK_EQ(t->ops->exists(t, &k2), 0);
	free(img);
	free(file);

	/* Altered: the payload of a signed object changed, every checksum
	 * recomputed, the old tag kept. */
	CHECK_EQ(put_img(t, &small_ns, &k3, 103, KVT_DUR_POWER_SAFE), 0);
	file = malloc(len + 32);
	fd = open(final_path(dir, &k3), O_RDWR);
	CHECK(fd >= 0 && pread(fd, file, len + 32, 0) == (ssize_t)(len + 32));
	forge_payload(file, len);
	CHECK(pwrite(fd, file, len, 0) == (ssize_t)len);
	close(fd);
	CHECK_EQ(t->ops->get(t, &k3, &r), KVT_ECORRUPT);
	CHECK_EQ(t->ops->exists(t, &k3), 0);
	CHECK(access(final_path(dir, &k3), F_OK) == 0);

	/* Signed with another key: the same. */
	{
		kvt_fsdir_opts o = { .path = dir, .capacity = 1ull << 30,
				     .refresh_ms = -1,
				     .auth_key = (const uint8_t *)"another key, 24 bytes..",
				     .auth_key_len = 24 };
		kvt_tier *other;
		kvt_key k4 = key_of(4);
		CHECK_EQ(kvt_fsdir_open(&o, &other), 0);
		CHECK_EQ(put_img(other, &small_ns, &k4, 104, KVT_DUR_CRASH_SAFE), 0);
		other->ops->close(other);
		CHECK_EQ(kvt_fsdir_probe(t, &k4), 1);
		CHECK_EQ(t->ops->get(t, &k4, &r), KVT_ECORRUPT);
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.corrupt, 4);
	seed = 100;
	CHECK_EQ(get_which(t, &small_ns, &k0, &seed, 1), 0); /* still fine */
	t->ops->close(t);

	/* A short key is refused at open. */
	{
		kvt_fsdir_opts o = { .path = dir, .capacity = 1ull << 30,
				     .refresh_ms = -1, .auth_key = auth_key,
				     .auth_key_len = 8 };
		CHECK_EQ(kvt_fsdir_open(&o, &plain), KVT_EINVAL);
	}
	free(file);
	rm_rf(dir);
	free(dir);
}

int main(int argc, char **argv)
{
	double t0;

	ns_setup();
	if (argc >= 3) {
		if (!strcmp(argv[1], "writer") && argc >= 6)
			return role_writer(argv);
		if (!strcmp(argv[1], "racer") && argc >= 5)
			return role_racer(argv);
		if (!strcmp(argv[1], "crasher") && argc >= 4)
			return role_crasher(argv);
		if (!strcmp(argv[1], "gc") && argc >= 4)
			return role_gc(argv);
		fprintf(stderr, "test_sharedfs: unknown role %s\n", argv[1]);
		return 2;
	}
	if (access("/proc/self/exe", X_OK))
		SKIP("no /proc/self/exe to run other nodes");
	t0 = now_s();
	test_auth();
	test_two_nodes();
	test_racing_writers();
	test_kill9();
	test_gc_basic();
	test_gc_concurrent();
	test_gc_overshoot();
	fprintf(stderr, "test_sharedfs: %.1f s\n", now_s() - t0);
	TEST_DONE();
}
