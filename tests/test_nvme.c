/*
 * test_nvme.c — the NVMe tier against real files with real O_DIRECT, in a
 * fresh directory under /var/tmp (a real disk where /tmp may be tmpfs).
 *
 * Covers: bit-exact round trip of a small (16 KiB) and a large (14 MiB)
 * chunk through io_uring and through the forced pread/pwrite fallback,
 * files truncated to the exact image length, first writer wins, warm
 * restart, a truncated file and a corrupted header byte dropped at open,
 * capacity with LRU eviction, ENOSPC on write and EIO on read injected
 * through a kvt_io table, the buffered fallback when O_DIRECT is refused,
 * threads sharing one small ring, and the rebuild of 1,000 chunks (timed).
 */
#include "nvme_test_util.h"

/* Objects moved into <dir>/quarantine, each with its .why beside it. */
static int count_quarantined(const char *dir)
{
	char q[1200];
	int kvt = 0, why = 0;
	DIR *d;
	struct dirent *e;

	snprintf(q, sizeof(q), "%s/quarantine", dir);
	if (!(d = opendir(q)))
		return 0;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n > 4 && !strcmp(e->d_name + n - 4, ".kvt"))
			kvt++;
		if (n > 4 && !strcmp(e->d_name + n - 4, ".why"))
			why++;
	}
	closedir(d);
	CHECK_EQ(kvt, why);
	return kvt;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- tests ------------------------------------------------------------------ */

static int uring_available;

/* Round trip, EEXIST, warm restart, in one mode. */
static void test_round_trip(int uring)
{
	char *dir = new_dir();
	uint64_t sl = img_len(&ns_small), ll = img_len(&ns_large);
	uint8_t *simg = malloc(sl), *limg = malloc(ll);
	kvt_key ks = key_of(1), kl = key_of(2);
	kvt_tier *t = open_tier(dir, 1ull << 30, uring, NULL);
	kvt_tier_wbuf *w1, *w2;
	kvt_tier_stats st;
	int u, d;
	uint32_t align;

	if (!t)
		return;
	kvt_nvme_info(t, &u, &d, &align);
	fprintf(stderr, "  mode %s: io_uring %d, O_DIRECT %d, align %u\n",
		uring ? "io_uring" : "fallback", u, d, align);
	if (!uring)
		CHECK_EQ(u, 0);
	else if (uring_available)
		CHECK_EQ(u, 1);
	CHECK_EQ(put_one(t, &ns_small, &ks, 11, KVT_DUR_CRASH_SAFE, simg), 0);
	CHECK_EQ(put_one(t, &ns_large, &kl, 12, KVT_DUR_POWER_SAFE, limg), 0);
	CHECK_EQ(get_cmp(t, &ks, simg, sl), 0);
	CHECK_EQ(get_cmp(t, &kl, limg, ll), 0);
	/* files hold the exact image, not the padded write */
	CHECK_EQ(file_size(final_path(dir, &ks)), (long long)sl);
	CHECK_EQ(file_size(final_path(dir, &kl)), (long long)ll);

	/* first writer wins: put_begin of a present key, and two writers in
	 * flight on one key */
	CHECK_EQ(put_one(t, &ns_small, &ks, 99, KVT_DUR_CACHED, NULL), KVT_EEXIST);
	{
		kvt_key k3 = key_of(3);
		uint8_t *a = malloc(sl);
		CHECK_EQ(t->ops->put_begin(t, &k3, sl, &w1), 0);
		CHECK_EQ(t->ops->put_begin(t, &k3, sl, &w2), 0);
		test_fill(w1->iov[0].iov_base, sl, 1); /* any bytes: no check */
		test_fill(w2->iov[0].iov_base, sl, 2);
		memcpy(a, w1->iov[0].iov_base, sl);
		CHECK_EQ(t->ops->put_commit(t, w1, KVT_DUR_CACHED), 0);
		CHECK_EQ(t->ops->put_commit(t, w2, KVT_DUR_CACHED), KVT_EEXIST);
		CHECK_EQ(t->ops->exists(t, &k3), 1);
		CHECK_EQ(t->ops->del(t, &k3), 0);
		CHECK_EQ(t->ops->del(t, &k3), KVT_ENOTFOUND);
		free(a);
	}
	t->ops->stats(t, &st);
	CHECK(!strcmp(st.name, "nvme"));
	CHECK_EQ(st.chunks, 2);
	CHECK_EQ(st.put_exists, 2);
	CHECK_EQ(st.borrowed, 0);
	t->ops->close(t);

	/* warm restart: everything back, bit-exact */
	t = open_tier(dir, 1ull << 30, uring, NULL);
	if (t) {
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 2);
		CHECK_EQ(st.used_bytes, ((sl + 4095) & ~4095ull) +
					((ll + 4095) & ~4095ull));
		CHECK_EQ(get_cmp(t, &ks, simg, sl), 0);
		CHECK_EQ(get_cmp(t, &kl, limg, ll), 0);
		t->ops->close(t);
	}
	{
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
		CHECK_EQ(tt_count_dir(tmp), 0);
	}
	tt_rm_rf(dir);
	free(dir);
	free(simg);
	free(limg);
}

static void test_bad_files_at_open(void)
{
	char *dir = new_dir();
	kvt_key k[3] = { key_of(10), key_of(11), key_of(12) };
	uint64_t sl = img_len(&ns_small);
	uint8_t *img = malloc(sl);
	kvt_tier_stats st;
	kvt_tier *t = open_tier(dir, 1ull << 30, 1, NULL);
	int i, fd;

	if (!t)
		return;
	for (i = 0; i < 3; i++)
		CHECK_EQ(put_one(t, &ns_small, &k[i], 20 + i, KVT_DUR_CACHED,
				 i == 2 ? img : NULL), 0);
	t->ops->close(t);
	CHECK_EQ(truncate(final_path(dir, &k[0]), 4096 + 100), 0);
	fd = open(final_path(dir, &k[1]), O_RDWR);
	CHECK(fd >= 0);
	if (fd >= 0) {
		uint8_t b;
		CHECK_EQ(pread(fd, &b, 1, 40), 1); /* inside the key field */
		b ^= 0x01;
		CHECK_EQ(pwrite(fd, &b, 1, 40), 1);
		close(fd);
	}
	t = open_tier(dir, 1ull << 30, 1, NULL);
	if (t) {
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 1);
		CHECK_EQ(st.corrupt, 2);
		CHECK_EQ(t->ops->exists(t, &k[0]), 0);
		CHECK_EQ(t->ops->exists(t, &k[1]), 0);
		CHECK_EQ(get_cmp(t, &k[2], img, sl), 0);
		/* A read never removes: both damaged files are still there,
		 * listed as bad with the reason, and never served. */
		CHECK_EQ(file_size(final_path(dir, &k[0])), 4096 + 100);
		CHECK_EQ(file_size(final_path(dir, &k[1])), (long)sl);
		CHECK_EQ(tt_count_bad(t), 2);
		/* The writer replaces a bad file when it puts that key. */
		CHECK_EQ(put_one(t, &ns_small, &k[0], 20, KVT_DUR_CACHED, NULL), 0);
		CHECK_EQ(t->ops->exists(t, &k[0]), 1);
		CHECK_EQ(file_size(final_path(dir, &k[0])), (long)sl);
		CHECK_EQ(tt_count_bad(t), 1);
		/* The explicit repair moves the other aside, with its reason. */
		CHECK_EQ(t->ops->repair(t, &k[1]), 0);
		CHECK_EQ(file_size(final_path(dir, &k[1])), -1);
		CHECK_EQ(tt_count_bad(t), 0);
		CHECK_EQ(count_quarantined(dir), 2); /* k[0]'s bad copy too */
		t->ops->close(t);
	}
	/* Opening again finds nothing bad: the quarantine is not indexed. */
	t = open_tier(dir, 1ull << 30, 1, NULL);
	if (t) {
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 2);
		CHECK_EQ(st.corrupt, 0);
		t->ops->close(t);
	}
	tt_rm_rf(dir);
	free(dir);
	free(img);
}

static void test_capacity(void)
{
	char *dir = new_dir();
	uint64_t sl = img_len(&ns_small), disk = (sl + 4095) & ~4095ull;
	kvt_tier_stats st;
	kvt_tier *t = open_tier(dir, 3 * disk + 100, 1, NULL);
	kvt_tier_rbuf *r;
	kvt_tier_wbuf *w;
	int i;

	if (!t)
		return;
	for (i = 0; i < 3; i++) {
		kvt_key k = key_of(100 + i);
		CHECK_EQ(put_one(t, &ns_small, &k, i, KVT_DUR_CACHED, NULL), 0);
	}
	/* make key 100 most recently used: 101 and 102 go first */
	{
		kvt_key k = key_of(100);
		CHECK_EQ(t->ops->get(t, &k, &r), 0);
		t->ops->release(t, r);
	}
	for (i = 3; i < 5; i++) {
		kvt_key k = key_of(100 + i);
		CHECK_EQ(put_one(t, &ns_small, &k, i, KVT_DUR_CACHED, NULL), 0);
		t->ops->stats(t, &st);
		CHECK(st.used_bytes <= st.capacity_bytes);
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 3);
	CHECK_EQ(st.evictions, 2);
	CHECK(st.used_bytes <= 3 * disk);
	{
		kvt_key k0 = key_of(100), k1 = key_of(101), k2 = key_of(102);
		CHECK_EQ(t->ops->exists(t, &k0), 1);
		CHECK_EQ(t->ops->exists(t, &k1), 0);
		CHECK_EQ(t->ops->exists(t, &k2), 0);
		CHECK_EQ(file_size(final_path(dir, &k1)), -1);
	}
	/* too big for the tier at all; and a write in flight is not evictable */
	{
		kvt_key k = key_of(200);
		CHECK_EQ(t->ops->put_begin(t, &k, 4 * disk, &w), KVT_ETOOBIG);
		CHECK_EQ(t->ops->put_begin(t, &k, 3 * disk, &w), 0);
		kvt_key k2 = key_of(201);
		kvt_tier_wbuf *w2;
		CHECK_EQ(t->ops->put_begin(t, &k2, disk, &w2), KVT_EFULL);
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 0);
		t->ops->put_abort(t, w);
	}
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir);
}

/* --- fault injection through the kvt_io table (fallback data path) ------------ */

typedef struct fault_io {
	kvt_io io; /* first */
	kvt_io *real;
	int pwrite_err, pread_err;
	int refuse_direct; /* open with O_DIRECT fails with EINVAL */
} fault_io;

#define REAL(io) (((fault_io *)(io))->real)
static int f_open(kvt_io *io, const char *p, int fl, mode_t m)
{
	if (((fault_io *)io)->refuse_direct && (fl & O_DIRECT))
		return -EINVAL;
	return REAL(io)->open(REAL(io), p, fl, m);
}
static int f_close(kvt_io *io, int fd) { return REAL(io)->close(REAL(io), fd); }
static ssize_t f_pread(kvt_io *io, int fd, void *b, size_t n, off_t off)
{
	fault_io *f = (fault_io *)io;
	return f->pread_err ? f->pread_err : f->real->pread(f->real, fd, b, n, off);
}
static ssize_t f_pwrite(kvt_io *io, int fd, const void *b, size_t n, off_t off)
{
	fault_io *f = (fault_io *)io;
	return f->pwrite_err ? f->pwrite_err
			     : f->real->pwrite(f->real, fd, b, n, off);
}
static int f_fsync(kvt_io *io, int fd) { return REAL(io)->fsync(REAL(io), fd); }
static int f_fstat(kvt_io *io, int fd, struct stat *st)
{ return REAL(io)->fstat(REAL(io), fd, st); }
static int f_stat(kvt_io *io, const char *p, struct stat *st)
{ return REAL(io)->stat(REAL(io), p, st); }
static int f_link(kvt_io *io, const char *a, const char *b)
{ return REAL(io)->link(REAL(io), a, b); }
static int f_rename(kvt_io *io, const char *a, const char *b)
{ return REAL(io)->rename(REAL(io), a, b); }
static int f_unlink(kvt_io *io, const char *p) { return REAL(io)->unlink(REAL(io), p); }
static int f_mkdir(kvt_io *io, const char *p, mode_t m)
{ return REAL(io)->mkdir(REAL(io), p, m); }
static int f_readdir(kvt_io *io, const char *p, kvt_io_dirent_fn fn, void *a)
{ return REAL(io)->readdir(REAL(io), p, fn, a); }
static int f_touch(kvt_io *io, const char *p) { return REAL(io)->touch(REAL(io), p); }
static int f_ftruncate(kvt_io *io, int fd, off_t len)
{ return REAL(io)->ftruncate(REAL(io), fd, len); }
static int f_statx(kvt_io *io, int fd, unsigned int mask, struct statx *sx)
{ return REAL(io)->statx(REAL(io), fd, mask, sx); }

/* No ring_done: the tier keeps its data on pread/pwrite through the table. */
#define FAULT_IO_INIT                                                       \
	{ f_open, f_close, f_pread, f_pwrite, f_fsync, f_fstat, f_stat,     \
	  f_link, f_rename, f_unlink, f_mkdir, f_readdir, f_touch, NULL,    \
	  f_ftruncate, f_statx, NULL, NULL }

static void test_faults(void)
{
	fault_io f = { FAULT_IO_INIT, kvt_io_posix(), 0, 0, 0 };
	char *dir = new_dir(), tmp[PATH_MAX];
	uint64_t sl = img_len(&ns_small);
	uint8_t *img = malloc(sl);
	kvt_key k1 = key_of(300), k2 = key_of(301), k3 = key_of(302);
	kvt_tier_stats st;
	kvt_tier *t = open_tier(dir, 1ull << 30, 0, &f.io);
	kvt_tier_rbuf *r;

	if (!t)
		return;
	snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
	CHECK_EQ(put_one(t, &ns_small, &k1, 1, KVT_DUR_CACHED, img), 0);

	f.pwrite_err = -ENOSPC;
	CHECK_EQ(put_one(t, &ns_large, &k2, 2, KVT_DUR_POWER_SAFE, NULL), -ENOSPC);
	CHECK(strstr(kvt_errmsg(), "pwrite") && strstr(kvt_errmsg(), dir));
	fprintf(stderr, "  ENOSPC message: %s\n", kvt_errmsg());
	f.pwrite_err = -EIO;
	CHECK_EQ(put_one(t, &ns_small, &k2, 2, KVT_DUR_CACHED, NULL), -EIO);
	f.pwrite_err = 0;
	CHECK_EQ(tt_count_dir(tmp), 0); /* no temporary left */
	CHECK_EQ(t->ops->exists(t, &k2), 0);
	CHECK_EQ(get_cmp(t, &k1, img, sl), 0); /* earlier chunk still served */
	t->ops->stats(t, &st);
	CHECK_EQ(st.used_bytes, (sl + 4095) & ~4095ull); /* reservations returned */

	/* EIO on read: reported, and the file is kept (a failed read
	 * proves nothing about it); once the medium answers it is served. */
	CHECK_EQ(put_one(t, &ns_small, &k3, 3, KVT_DUR_CACHED, NULL), 0);
	f.pread_err = -EIO;
	CHECK_EQ(t->ops->get(t, &k3, &r), -EIO);
	f.pread_err = 0;
	CHECK_EQ(t->ops->exists(t, &k3), 1);
	CHECK_EQ(tt_count_bad(t), 0);
	CHECK_EQ(t->ops->get(t, &k3, &r), 0);
	if (r)
		t->ops->release(t, r);
	CHECK_EQ(get_cmp(t, &k1, img, sl), 0);
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir);
	free(img);
}

/* A file system that refuses O_DIRECT (EINVAL at open, as tmpfs before Linux
 * 6.6 and many FUSE file systems do): the tier must say so and work
 * buffered.  The refusal is injected, since this kernel's tmpfs may accept
 * O_DIRECT. */
static void test_buffered_fallback(void)
{
	fault_io f = { FAULT_IO_INIT, kvt_io_posix(), 0, 0, 1 };
	char *dir = new_dir();
	uint64_t sl = img_len(&ns_small), ll = img_len(&ns_large);
	uint8_t *img = malloc(sl), *limg = malloc(ll);
	kvt_key k = key_of(400), kl = key_of(401);
	kvt_tier *t;
	int u, d;

	t = open_tier(dir, 1ull << 30, 1, &f.io);
	if (t) {
		kvt_nvme_info(t, &u, &d, NULL);
		fprintf(stderr, "  O_DIRECT refused: io_uring %d, O_DIRECT %d\n",
			u, d);
		CHECK_EQ(d, 0);
		CHECK_EQ(put_one(t, &ns_small, &k, 5, KVT_DUR_POWER_SAFE, img), 0);
		CHECK_EQ(put_one(t, &ns_large, &kl, 6, KVT_DUR_CACHED, limg), 0);
		CHECK_EQ(get_cmp(t, &k, img, sl), 0);
		CHECK_EQ(get_cmp(t, &kl, limg, ll), 0);
		CHECK_EQ(file_size(final_path(dir, &k)), (long long)sl);
		t->ops->close(t);
	}
	t = open_tier(dir, 1ull << 30, 0, &f.io);
	if (t) {
		CHECK_EQ(get_cmp(t, &k, img, sl), 0);
		CHECK_EQ(get_cmp(t, &kl, limg, ll), 0);
		t->ops->close(t);
	}
	tt_rm_rf(dir);
	free(dir);
	free(img);
	free(limg);
}

/* Four threads share one ring of depth 4: each puts and reads back large
 * chunks, so completions of one thread's segments are reaped by another. */
typedef struct mt_arg {
	kvt_tier *t;
	int id, fails;
} mt_arg;

static void *mt_run(void *p)
{
	mt_arg *a = p;
	uint64_t ll = img_len(&ns_large);
	uint8_t *img = malloc(ll);
	int i;

	for (i = 0; i < 2; i++) {
		kvt_key k = key_of(5000 + a->id * 10 + i);
		if (put_one(a->t, &ns_large, &k, a->id * 10 + i,
			    KVT_DUR_CACHED, img) ||
		    get_cmp(a->t, &k, img, ll))
			a->fails++;
	}
	free(img);
	return NULL;
}

static void test_threads(void)
{
	char *dir = new_dir();
	kvt_nvme_opts o = { .path = dir, .capacity = 1ull << 30,
			    .queue_depth = 4, .use_io_uring = 1,
			    .segment_bytes = 256 << 10 };
	kvt_tier *t = NULL;
	pthread_t th[4];
	mt_arg a[4];
	int i;

	CHECK_EQ(kvt_nvme_open(&o, &t), 0);
	if (!t)
		return;
	for (i = 0; i < 4; i++) {
		a[i] = (mt_arg){ t, i, 0 };
		pthread_create(&th[i], NULL, mt_run, &a[i]);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(a[i].fails, 0);
	}
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir);
}

static void test_rebuild_1000(void)
{
	char *dir = new_dir();
	kvt_tier_stats st;
	kvt_tier *t = open_tier(dir, 1ull << 30, 1, NULL);
	double t0, t1;
	int i;

	if (!t)
		return;
	t0 = now_s();
	for (i = 0; i < 1000; i++) {
		kvt_key k = key_of(10000 + i);
		CHECK_EQ(put_one(t, &ns_small, &k, i, KVT_DUR_CACHED, NULL), 0);
	}
	t1 = now_s();
	t->ops->close(t);
	fprintf(stderr, "  put 1000 x %llu B: %.3f s\n",
		(unsigned long long)img_len(&ns_small), t1 - t0);
	t0 = now_s();
	t = open_tier(dir, 1ull << 30, 1, NULL);
	t1 = now_s();
	fprintf(stderr, "  rebuild of 1000 chunks: %.1f ms\n", (t1 - t0) * 1e3);
	if (t) {
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 1000);
		CHECK_EQ(st.corrupt, 0);
		for (i = 0; i < 1000; i += 97) {
			kvt_key k = key_of(10000 + i);
			kvt_tier_rbuf *r;
			CHECK_EQ(t->ops->get(t, &k, &r), 0);
			if (r)
				t->ops->release(t, r);
		}
		t->ops->close(t);
	}
	tt_rm_rf(dir);
	free(dir);
}

/* --- the aligned-buffer pool both file tiers take their buffers from ----- */

static void *abuf_thread(void *arg)
{
	kvt_abuf_pool *p = arg;
	uint64_t x = (uint64_t)(uintptr_t)&x;

	for (int i = 0; i < 300; i++) {
		size_t cap = 0;
		uint64_t n;
		uint8_t *b;

		x = tt_mix64(x);
		n = 1 + x % (5u << 20);
		b = kvt_abuf_get(p, n, &cap);
		CHECK(b != NULL);
		if (!b)
			return NULL;
		CHECK(cap >= n && cap / 2 <= n + (2u << 20));
		CHECK(((uintptr_t)b & 4095) == 0);
		b[0] = b[cap - 1] = (uint8_t)i; /* all of it is ours */
		kvt_abuf_put(p, b, cap);
	}
	return NULL;
}

static void test_abuf(void)
{
	kvt_abuf_pool p;
	size_t c1 = 0, c2 = 0, c3 = 0, c4 = 0;
	uint8_t *a, *b, *d, *e;
	pthread_t th[4];

	CHECK_EQ(kvt_abuf_init(&p, 3000, 4, 1 << 20), KVT_EINVAL);
	CHECK_EQ(kvt_abuf_init(&p, 1 << 17, 4, 1 << 20), KVT_EINVAL);
	CHECK_EQ(kvt_abuf_init(&p, 4096, 0, 1 << 20), KVT_EINVAL);
	CHECK_EQ(kvt_abuf_init(&p, 4096, 3, 64u << 20), 0);

	/* Size classes: whole blocks below 1 MiB, whole 2 MiB from there. */
	a = kvt_abuf_get(&p, 69632 - 100, &c1);
	b = kvt_abuf_get(&p, (3u << 20) + 1, &c2);
	CHECK(a && b);
	CHECK_EQ(c1, 69632);
	CHECK_EQ(c2, 4u << 20);
	CHECK(((uintptr_t)a & 4095) == 0);
	CHECK(((uintptr_t)b & ((2u << 20) - 1)) == 0);
	memset(a, 1, c1);
	memset(b, 2, c2);

	/* Reuse: the cached 4 MiB buffer serves 3 MiB, not 100 KiB. */
	kvt_abuf_put(&p, b, c2);
	CHECK_EQ(p.n, 1);
	d = kvt_abuf_get(&p, 100u << 10, &c3);
	CHECK(d != b && c3 == (100u << 10));
	e = kvt_abuf_get(&p, 3u << 20, &c4);
	CHECK(e == b && c4 == c2);
	CHECK_EQ(p.n, 0);

	/* Bounded: a fourth buffer frees the smallest. */
	kvt_abuf_put(&p, a, c1);
	kvt_abuf_put(&p, d, c3);
	kvt_abuf_put(&p, e, c4);
	CHECK_EQ(p.n, 3);
	a = kvt_abuf_get(&p, 6u << 20, &c1);
	CHECK(a != NULL && c1 == (6u << 20));
	kvt_abuf_put(&p, a, c1);
	CHECK_EQ(p.n, 3);
	CHECK_EQ(p.bytes, (6u << 20) + (4u << 20) + (100u << 10));
	kvt_abuf_fini(&p);

	/* And by bytes: past max_bytes the smallest go first. */
	CHECK_EQ(kvt_abuf_init(&p, 4096, 8, 5u << 20), 0);
	a = kvt_abuf_get(&p, 4u << 20, &c1);
	b = kvt_abuf_get(&p, 2u << 20, &c2);
	kvt_abuf_put(&p, a, c1);
	kvt_abuf_put(&p, b, c2);
	CHECK_EQ(p.n, 1);
	CHECK_EQ(p.bytes, 4u << 20);
	kvt_abuf_fini(&p);

	/* Many threads at once; the bounds hold at the end. */
	CHECK_EQ(kvt_abuf_init(&p, 4096, 3, 12u << 20), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, abuf_thread, &p), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK(p.n <= 3 && p.bytes <= (12u << 20));
	kvt_abuf_fini(&p);
}

int main(void)
{
	struct statfs sf;
	struct statvfs sv;
	uint64_t free_b;

	if (statvfs("/var/tmp", &sv))
		SKIP("cannot statvfs /var/tmp");
	free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (free_b < (256ull << 20))
		SKIP("/var/tmp has %llu MiB free; this test needs 256 MiB",
		     (unsigned long long)(free_b >> 20));
	snprintf(base_dir, sizeof(base_dir), "/var/tmp/kvt_nvme_XXXXXX");
	if (!mkdtemp(base_dir))
		SKIP("cannot create a directory under /var/tmp");
	if (!statfs(base_dir, &sf))
		fprintf(stderr, "test dir %s: %s (f_type 0x%lx), %llu MiB free\n",
			base_dir,
			sf.f_type == TMPFS_MAGIC ? "tmpfs (no real O_DIRECT)"
			: sf.f_type == EXT4_SUPER_MAGIC ? "ext4, a real disk"
			: sf.f_type == XFS_SUPER_MAGIC ? "xfs, a real disk"
						       : "a disk file system",
			(unsigned long)sf.f_type,
			(unsigned long long)(free_b >> 20));

	ns_make(&ns_small, 2, 2, 64, 16, 1);   /* 16 KiB payload */
	ns_make(&ns_large, 28, 4, 128, 256, 2); /* 14 MiB: a Qwen2.5-7B chunk */
	CHECK_EQ(img_len(&ns_small), 4096 + (16u << 10));
	CHECK_EQ(img_len(&ns_large), 4096 + (14u << 20));

	{
		kvt_nvme_opts o = { .path = base_dir, .capacity = 1 << 20,
				    .use_io_uring = 1 };
		kvt_tier *t;
		if (!kvt_nvme_open(&o, &t)) {
			kvt_nvme_info(t, &uring_available, NULL, NULL);
			t->ops->close(t);
		}
		fprintf(stderr, "io_uring %s on this machine\n",
			uring_available ? "works" : "is refused (fallback only)");
	}
	fprintf(stderr, "aligned-buffer pool\n");
	test_abuf();
	fprintf(stderr, "round trip, io_uring\n");
	test_round_trip(1);
	fprintf(stderr, "round trip, forced pread/pwrite fallback\n");
	test_round_trip(0);
	fprintf(stderr, "bad files at open\n");
	test_bad_files_at_open();
	fprintf(stderr, "capacity\n");
	test_capacity();
	fprintf(stderr, "faults\n");
	test_faults();
	fprintf(stderr, "buffered fallback (O_DIRECT refused)\n");
	test_buffered_fallback();
	fprintf(stderr, "threads sharing one ring\n");
	test_threads();
	fprintf(stderr, "rebuild\n");
	test_rebuild_1000();
	tt_rm_rf(base_dir);
	TEST_DONE();
}
