/*
 * test_fsdir.c — the directory tier against real files under /tmp.
 *
 * Covers: round trip, first writer wins (in one tier and between two tier
 * instances on one directory racing from two threads, as two nodes would),
 * warm restart, bad files found at open, a file corrupted after open,
 * capacity and LRU eviction, and faults injected through a kvt_io table
 * (ENOSPC on write, EIO on fsync of the file and of the directory, short
 * writes, a medium that accepts nothing).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/io.h"
#include "format/object.h"
#include "tier/fsdir.h"
#include "test.h"
#include "tier_test_util.h"

/* 2 layers x 2 planes x 16 tokens x 2 heads x 8 dim x f16 = 1 KiB a layer. */
static kvt_ns test_ns;
static uint64_t img_len; /* header + payload */

static void ns_setup(void)
{
	memset(&test_ns, 0, sizeof(test_ns));
	test_fill(test_ns.digest, sizeof(test_ns.digest), 4242);
	test_ns.layout = (kvt_layout){ .num_layers = 2, .num_kv_heads = 2,
				       .head_dim = 8, .dtype = KVT_DTYPE_F16,
				       .kv_planes = 2, .scale_bytes = 0,
				       .block_size = 16, .chunk_tokens = 16 };
	test_ns.hash_scheme = KVT_HASH_SHA256;
	test_ns.tp_size = test_ns.pp_size = 1;
	img_len = KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&test_ns.layout);
}

static kvt_key key_of(uint64_t i)
{
	kvt_key k;
	test_fill(k.b, sizeof(k.b), 1000003 * (i + 1));
	return k;
}

/* Fill a wbuf with a valid image of `key` whose payload derives from `seed`;
 * copy the image to `copy` (img_len bytes) if not NULL. */
static int fill_image(kvt_tier_wbuf *w, const kvt_key *key, uint64_t seed,
		      uint8_t *copy)
{
	uint64_t lb = kvt_layout_layer_bytes(&test_ns.layout);
	uint8_t *payload = malloc(2 * lb);
	const void *layers[2] = { payload, payload + lb };
	kvt_obj_hdr h;
	int rc;

	test_fill(payload, 2 * lb, seed);
	rc = kvt_obj_hdr_init(&h, &test_ns, key);
	if (!rc)
		rc = kvt_obj_write_iov(&h, layers, w->iov, w->n_iov);
	if (!rc && copy) {
		uint64_t off = 0;
		int i;
		for (i = 0; i < w->n_iov; i++) {
			memcpy(copy + off, w->iov[i].iov_base, w->iov[i].iov_len);
			off += w->iov[i].iov_len;
		}
	}
	free(payload);
	return rc;
}

/* A whole put; `copy` gets the image. */
static int put_one(kvt_tier *t, const kvt_key *key, uint64_t seed, int dur,
		   uint8_t *copy)
{
	kvt_tier_wbuf *w;
	int rc = t->ops->put_begin(t, key, img_len, &w);

	if (rc)
		return rc;
	rc = fill_image(w, key, seed, copy);
	if (rc) {
		t->ops->put_abort(t, w);
		return rc;
	}
	return t->ops->put_commit(t, w, dur);
}

/* 0 if get returns exactly `img`, else the code (or -1 on different bytes). */
static int get_cmp(kvt_tier *t, const kvt_key *key, const uint8_t *img)
{
	kvt_tier_rbuf *r;
	uint64_t off = 0;
	int rc = t->ops->get(t, key, &r), i, same = 1;

	if (rc)
		return rc;
	if (r->len != img_len)
		same = 0;
	for (i = 0; same && i < r->n_iov; i++) {
		if (off + r->iov[i].iov_len > img_len ||
		    memcmp(img + off, r->iov[i].iov_base, r->iov[i].iov_len))
			same = 0;
		off += r->iov[i].iov_len;
	}
	if (memcmp(r->key.b, key->b, KVT_KEY_BYTES))
		same = 0;
	t->ops->release(t, r);
	return same ? 0 : -1;
}

/* 0 if get succeeds (the read also makes `key` most recently used). */
static int get_ok(kvt_tier *t, const kvt_key *key)
{
	kvt_tier_rbuf *r;
	int rc = t->ops->get(t, key, &r);

	if (!rc)
		t->ops->release(t, r);
	return rc;
}

/* --- file helpers ---------------------------------------------------------- */

static char path_buf[PATH_MAX];

static const char *final_path(const char *root, const kvt_key *k)
{
	char hex[65];
	int i;

	for (i = 0; i < KVT_KEY_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", k->b[i]);
	snprintf(path_buf, sizeof(path_buf), "%s/%.2s/%.2s/%s.kvt", root, hex,
		 hex + 2, hex);
	return path_buf;
}

static int file_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static void write_file(const char *p, const void *buf, size_t len)
{
	char dir[PATH_MAX], *slash;
	int fd;

	snprintf(dir, sizeof(dir), "%s", p);
	slash = strrchr(dir, '/');
	*slash = '\0';
	CHECK_EQ(kvt_io_mkdirs(kvt_io_posix(), dir, 0755), 0);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, buf, len), (long long)len);
	close(fd);
}

static uint64_t du_total;
static uint64_t du_files;
static uint64_t du_tmp;
static size_t du_root_len;

static int du_one(const char *p, const struct stat *st, int flag,
		  struct FTW *f)
{
	(void)f;
	if (flag == FTW_F && S_ISREG(st->st_mode)) {
		du_total += (uint64_t)st->st_size;
		du_files++;
		if (!strncmp(p + du_root_len, "/tmp/", 5))
			du_tmp++;
	}
	return 0;
}

/* Bytes and files under root; du_tmp counts temporaries. */
static uint64_t du(const char *root)
{
	du_total = du_files = du_tmp = 0;
	du_root_len = strlen(root);
	nftw(root, du_one, 16, FTW_PHYS);
	return du_total;
}

static char *new_dir(void)
{
	char tmpl[] = "/tmp/kvt_fsdir_XXXXXX";
	char *d = mkdtemp(tmpl);
	if (!d) {
		perror("mkdtemp");
		exit(1);
	}
	return strdup(d);
}

static kvt_tier *open_tier(const char *dir, uint64_t cap, kvt_io *io,
			   int verify)
{
	kvt_fsdir_opts o = { .path = dir, .capacity = cap, .io = io,
			     .verify_on_open = verify,
			     /* no background refresh: the fault tables count
			      * calls, which a thread would make at random */
			     .refresh_ms = -1 };
	kvt_tier *t = NULL;
	int rc = kvt_fsdir_open(&o, &t);

	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "open %s: %s\n", dir, kvt_errmsg());
		exit(1);
	}
	return t;
}

static int count_cb(void *arg, const kvt_key *key, uint64_t len)
{
	(void)key;
	CHECK_EQ(len, img_len);
	(*(int *)arg)++;
	return 0;
}

/* --- tests ------------------------------------------------------------------ */

static void test_round_trip(void)
{
	char *dir = new_dir();
	kvt_tier *t = open_tier(dir, 1 << 20, NULL, 0);
	uint8_t *img[3];
	kvt_tier_stats st;
	kvt_key k;
	int i, n = 0, durs[3] = { KVT_DUR_CACHED, KVT_DUR_CRASH_SAFE,
				  KVT_DUR_POWER_SAFE };

	for (i = 0; i < 3; i++) {
		k = key_of(i);
		img[i] = malloc(img_len);
		CHECK_EQ(t->ops->exists(t, &k), 0);
		CHECK_EQ(put_one(t, &k, 10 + i, durs[i], img[i]), 0);
		CHECK_EQ(t->ops->exists(t, &k), 1);
		CHECK(file_exists(final_path(dir, &k)));
	}
	for (i = 0; i < 3; i++) {
		k = key_of(i);
		CHECK_EQ(get_cmp(t, &k, img[i]), 0);
	}
	k = key_of(99);
	CHECK_EQ(get_cmp(t, &k, img[0]), KVT_ENOTFOUND);
	CHECK_EQ(t->ops->del(t, &k), KVT_ENOTFOUND);
	CHECK_EQ(t->ops->iterate(t, count_cb, &n), 0);
	CHECK_EQ(n, 3);

	t->ops->stats(t, &st);
	CHECK(!strcmp(st.name, "fsdir"));
	CHECK_EQ(st.chunks, 3);
	CHECK_EQ(st.used_bytes, 3 * img_len);
	CHECK_EQ(st.puts, 3);
	CHECK_EQ(st.hits, 3);
	CHECK_EQ(st.misses, 1);
	CHECK_EQ(st.bytes_in, 3 * img_len);
	CHECK_EQ(st.borrowed, 0);
	CHECK_EQ(du(dir), 3 * img_len);
	CHECK_EQ(du_tmp, 0);

	/* A put abandoned half way leaves nothing. */
	{
		kvt_tier_wbuf *w;
		k = key_of(50);
		CHECK_EQ(t->ops->put_begin(t, &k, img_len, &w), 0);
		t->ops->put_abort(t, w);
		CHECK_EQ(t->ops->exists(t, &k), 0);
		CHECK_EQ(t->ops->put_begin(t, &k, 100, &w), KVT_EINVAL);
	}

	k = key_of(1);
	CHECK_EQ(t->ops->del(t, &k), 0);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	CHECK(!file_exists(final_path(dir, &k)));
	CHECK_EQ(get_cmp(t, &k, img[1]), KVT_ENOTFOUND);
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 2);
	CHECK_EQ(st.used_bytes, 2 * img_len);

	t->ops->close(t);
	for (i = 0; i < 3; i++)
		free(img[i]);
	tt_rm_rf(dir);
	free(dir);
}

static void test_duplicate(void)
{
	char *dir = new_dir();
	kvt_tier *t = open_tier(dir, 1 << 20, NULL, 0);
	uint8_t *a = malloc(img_len), *b = malloc(img_len);
	kvt_tier_stats st;
	kvt_key k = key_of(7);

	CHECK_EQ(put_one(t, &k, 1, KVT_DUR_CRASH_SAFE, a), 0);
	CHECK_EQ(put_one(t, &k, 2, KVT_DUR_CRASH_SAFE, b), KVT_EEXIST);
	CHECK_EQ(get_cmp(t, &k, a), 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.put_exists, 1);
	CHECK_EQ(st.chunks, 1);
	t->ops->close(t);
	free(a);
	free(b);
	tt_rm_rf(dir);
	free(dir);
}

#define N_RESTART 20

static void test_warm_restart(void)
{
	char *dir = new_dir();
	kvt_tier *t = open_tier(dir, 1 << 20, NULL, 0), *t2;
	uint8_t *img[N_RESTART];
	kvt_tier_stats st;
	kvt_key k;
	int i;

	for (i = 0; i < N_RESTART; i++) {
		k = key_of(i);
		img[i] = malloc(img_len);
		CHECK_EQ(put_one(t, &k, 100 + i, i % 3, img[i]), 0);
	}
	/* A second instance while the first is open (another process), then
	 * after it closed (a restart); with and without full verification. */
	t2 = open_tier(dir, 1 << 20, NULL, 1);
	t->ops->close(t);
	t = open_tier(dir, 1 << 20, NULL, 0);
	for (i = 0; i < N_RESTART; i++) {
		k = key_of(i);
		CHECK_EQ(t->ops->exists(t, &k), 1);
		CHECK_EQ(t2->ops->exists(t2, &k), 1);
		CHECK_EQ(get_cmp(t, &k, img[i]), 0);
		CHECK_EQ(get_cmp(t2, &k, img[i]), 0);
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, N_RESTART);
	CHECK_EQ(st.used_bytes, N_RESTART * img_len);
	CHECK_EQ(st.corrupt, 0);
	t->ops->close(t);
	t2->ops->close(t2);
	for (i = 0; i < N_RESTART; i++)
		free(img[i]);
	tt_rm_rf(dir);
	free(dir);
}

/* 0 if get returns a valid image of `key` whose payload derives from
 * `seed` (for images written by another process, whose headers we lack). */
static int get_payload_cmp(kvt_tier *t, const kvt_key *key, uint64_t seed)
{
	uint64_t pl = img_len - KVT_OBJ_HEADER_BYTES;
	uint8_t *want = malloc(pl), *got = malloc(pl);
	kvt_tier_rbuf *r;
	kvt_obj_hdr h;
	int rc = t->ops->get(t, key, &r);

	if (!rc) {
		rc = r->n_iov == 1 ? 0 : -1;
		if (!rc)
			rc = kvt_obj_hdr_decode(r->iov[0].iov_base, r->len, &h);
		if (!rc)
			rc = kvt_obj_read_iov(&h, r->iov, r->n_iov, got, pl, 1);
		test_fill(want, pl, seed);
		if (!rc && memcmp(want, got, pl))
			rc = -1;
		t->ops->release(t, r);
	}
	free(want);
	free(got);
	return rc;
}

/* CRASH_SAFE: what a killed process acknowledged is there after restart. */
static void test_killed_writer(void)
{
	char *dir = new_dir();
	kvt_tier *t;
	pid_t pid;
	int i, status;

	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		t = open_tier(dir, 1 << 20, NULL, 0);
		for (i = 0; i < 8; i++) {
			kvt_key k = key_of(i);
			if (put_one(t, &k, 500 + i, KVT_DUR_CRASH_SAFE, NULL))
				_exit(1);
		}
		raise(SIGKILL); /* no close, no exit handlers */
		_exit(2);
	}
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	t = open_tier(dir, 1 << 20, NULL, 1);
	for (i = 0; i < 8; i++) {
		kvt_key k = key_of(i);
		CHECK_EQ(get_payload_cmp(t, &k, 500 + i), 0);
	}
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir);
}

/* Build an image of `key` into a plain buffer. */
static uint8_t *image_of(const kvt_key *key, uint64_t seed)
{
	uint8_t *img = malloc(img_len);
	struct iovec iov = { img, img_len };
	kvt_tier_wbuf w = { .key = *key, .len = img_len, .iov = &iov,
			    .n_iov = 1 };

	CHECK_EQ(fill_image(&w, key, seed, NULL), 0);
	return img;
}

static void test_bad_files_at_open(void)
{
	char *dir = new_dir();
	kvt_tier *t = open_tier(dir, 1 << 20, NULL, 0);
	uint8_t *good = malloc(img_len), *img;
	char p[PATH_MAX], fresh_tmp[PATH_MAX], stale_tmp[PATH_MAX];
	struct timespec old[2] = { { .tv_sec = 1000 }, { .tv_sec = 1000 } };
	kvt_tier_stats st;
	kvt_key k0 = key_of(0), kt = key_of(1), kf = key_of(2), kn = key_of(3),
		kp = key_of(4);

	CHECK_EQ(put_one(t, &k0, 5, KVT_DUR_CRASH_SAFE, good), 0);
	t->ops->close(t);

	/* Truncated: a valid header, half the payload. */
	img = image_of(&kt, 6);
	snprintf(p, sizeof(p), "%s", final_path(dir, &kt));
	write_file(p, img, img_len - 1000);
	free(img);
	/* A flipped byte in the header (in the layout fields). */
	img = image_of(&kf, 7);
	img[100] ^= 0x20;
	write_file(final_path(dir, &kf), img, img_len);
	free(img);
	/* A valid image under another key's name. */
	write_file(final_path(dir, &kn), good, img_len);
	/* Payload corrupt, header intact: kept unless verify_on_open. */
	img = image_of(&kp, 8);
	img[img_len - 1] ^= 1;
	write_file(final_path(dir, &kp), img, img_len);
	free(img);
	/* A file shorter than a header, a name that is not a key, a file
	 * that is not ours, temporaries old and new. */
	snprintf(p, sizeof(p), "%s/ab/cd/short.kvt", dir);
	write_file(p, "KVTCHUNK", 8);
	snprintf(p, sizeof(p), "%s/ab/cd/.nfs000123", dir);
	write_file(p, "x", 1);
	snprintf(stale_tmp, sizeof(stale_tmp), "%s/tmp/x.1.1.tmp", dir);
	write_file(stale_tmp, "x", 1);
	CHECK_EQ(utimensat(AT_FDCWD, stale_tmp, old, 0), 0);
	snprintf(fresh_tmp, sizeof(fresh_tmp), "%s/tmp/x.1.2.tmp", dir);
	write_file(fresh_tmp, "x", 1);

	fprintf(stderr, "(expect warnings: 3 bad objects left in place, 1 foreign name ignored)\n");
	t = open_tier(dir, 1 << 20, NULL, 0);
	CHECK_EQ(t->ops->exists(t, &k0), 1);
	CHECK_EQ(get_cmp(t, &k0, good), 0);
	CHECK_EQ(t->ops->exists(t, &kt), 0);
	CHECK_EQ(t->ops->exists(t, &kf), 0);
	CHECK_EQ(t->ops->exists(t, &kn), 0);
	CHECK_EQ(t->ops->exists(t, &kp), 1); /* the store's checksum finds it */
	/* Nothing is removed at open: bad files stay, unserved and listed. */
	CHECK(file_exists(final_path(dir, &kt)));
	CHECK(file_exists(final_path(dir, &kf)));
	CHECK(file_exists(final_path(dir, &kn)));
	CHECK_EQ(tt_count_bad(t), 3);
	snprintf(p, sizeof(p), "%s/ab/cd/short.kvt", dir);
	CHECK(file_exists(p)); /* not a name we make: not ours at all */
	snprintf(p, sizeof(p), "%s/ab/cd/.nfs000123", dir);
	CHECK(file_exists(p));
	CHECK(!file_exists(stale_tmp));
	CHECK(file_exists(fresh_tmp));
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 2);
	CHECK_EQ(st.corrupt, 3);
	/* Proven damage is the repair's to move aside, on a shared tier too. */
	CHECK_EQ(t->ops->repair(t, &kt), 0);
	CHECK(!file_exists(final_path(dir, &kt)));
	CHECK_EQ(tt_count_bad(t), 2);
	t->ops->close(t);

	fprintf(stderr, "(expect a warning: payload checksum)\n");
	t = open_tier(dir, 1 << 20, NULL, 1);
	CHECK_EQ(t->ops->exists(t, &kp), 0);
	CHECK(file_exists(final_path(dir, &kp)));
	CHECK_EQ(t->ops->exists(t, &k0), 1);
	t->ops->close(t);

	free(good);
	tt_rm_rf(dir);
	free(dir);
}

static void test_corrupt_after_open(void)
{
	char *dir = new_dir();
	kvt_tier *t = open_tier(dir, 1 << 20, NULL, 0);
	uint8_t *img = malloc(img_len);
	char side[PATH_MAX];
	kvt_tier_stats st;
	kvt_tier_rbuf *r;
	kvt_key k = key_of(1), k2 = key_of(2), k3 = key_of(3);

	CHECK_EQ(put_one(t, &k, 1, KVT_DUR_CRASH_SAFE, img), 0);
	CHECK_EQ(put_one(t, &k2, 2, KVT_DUR_CRASH_SAFE, NULL), 0);
	CHECK_EQ(put_one(t, &k3, 3, KVT_DUR_CRASH_SAFE, NULL), 0);

	/* Swap in (rename over) a copy with a flipped header byte. */
	img[40] ^= 0xff;
	snprintf(side, sizeof(side), "%s/side", dir);
	write_file(side, img, img_len);
	CHECK_EQ(rename(side, final_path(dir, &k)), 0);
	fprintf(stderr, "(expect warnings: dropping 2 files)\n");
	CHECK_EQ(t->ops->get(t, &k, &r), KVT_ECORRUPT);
	CHECK(strstr(kvt_errmsg(), "fsdir") != NULL);
	CHECK_EQ(t->ops->get(t, &k, &r), KVT_ENOTFOUND);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	CHECK(file_exists(final_path(dir, &k))); /* a read never removes */

	/* Truncated behind our back. */
	CHECK_EQ(truncate(final_path(dir, &k2), 5000), 0);
	CHECK_EQ(t->ops->get(t, &k2, &r), KVT_ECORRUPT);
	CHECK_EQ(t->ops->exists(t, &k2), 0);

	/* Removed behind our back (another node's GC): a plain miss. */
	CHECK_EQ(unlink(final_path(dir, &k3)), 0);
	CHECK_EQ(t->ops->get(t, &k3, &r), KVT_ENOTFOUND);
	CHECK_EQ(t->ops->exists(t, &k3), 0);

	t->ops->stats(t, &st);
	CHECK_EQ(st.corrupt, 2);
	CHECK_EQ(st.chunks, 0);
	CHECK_EQ(st.used_bytes, 0);

	/* The store found a bad payload: corrupt() drops it for good. */
	CHECK_EQ(put_one(t, &k, 9, KVT_DUR_CRASH_SAFE, NULL), 0);
	fprintf(stderr, "(expect a warning: failed verification)\n");
	{
		kvt_tier_rbuf *rb;
		CHECK_EQ(t->ops->get(t, &k, &rb), 0);
		t->ops->corrupt(t, rb);
		t->ops->release(t, rb);
	}
	CHECK_EQ(t->ops->exists(t, &k), 0);
	CHECK(file_exists(final_path(dir, &k))); /* until the writer replaces it */
	t->ops->stats(t, &st);
	CHECK_EQ(st.corrupt, 3);

	/* A bad copy read before a good one replaced it drops only itself. */
	CHECK_EQ(put_one(t, &k, 10, KVT_DUR_CRASH_SAFE, NULL), 0);
	{
		kvt_tier_rbuf *rb;
		CHECK_EQ(t->ops->get(t, &k, &rb), 0);
		CHECK_EQ(t->ops->del(t, &k), 0);
		CHECK_EQ(put_one(t, &k, 11, KVT_DUR_CRASH_SAFE, NULL), 0);
		fprintf(stderr, "(expect a warning: failed verification)\n");
		t->ops->corrupt(t, rb);
		t->ops->release(t, rb);
	}
	CHECK_EQ(t->ops->exists(t, &k), 1);
	CHECK(file_exists(final_path(dir, &k)));

	t->ops->close(t);
	free(img);
	tt_rm_rf(dir);
	free(dir);
}

static void test_capacity(void)
{
	char *dir = new_dir();
	uint64_t cap = 5 * img_len + img_len / 2;
	kvt_tier *t = open_tier(dir, cap, NULL, 0);
	struct timespec ts[2];
	kvt_tier_stats st;
	kvt_tier_wbuf *w;
	kvt_key k;
	int i;

	for (i = 0; i < 5; i++) {
		k = key_of(i);
		CHECK_EQ(put_one(t, &k, i, KVT_DUR_CACHED, NULL), 0);
	}
	k = key_of(0);
	CHECK_EQ(get_ok(t, &k), 0); /* k0 becomes most recently used */
	for (i = 5; i < 12; i++) {
		k = key_of(i);
		CHECK_EQ(put_one(t, &k, i, KVT_DUR_CACHED, NULL), 0);
		CHECK(du(dir) <= cap);
		t->ops->stats(t, &st);
		CHECK(st.used_bytes <= cap);
		CHECK_EQ(st.chunks, 5);
		if (i == 5) {
			/* k1 was the least recently used; k0 was read. */
			kvt_key k0 = key_of(0), k1 = key_of(1);
			CHECK_EQ(t->ops->exists(t, &k0), 1);
			CHECK_EQ(t->ops->exists(t, &k1), 0);
			CHECK(!file_exists(final_path(dir, &k1)));
		}
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, 7);
	CHECK_EQ(st.evicted_bytes, 7 * img_len);
	for (i = 7; i < 12; i++) {
		k = key_of(i);
		CHECK_EQ(t->ops->exists(t, &k), 1);
	}

	t->ops->close(t);

	/* Reopen smaller: the open removes nothing (another node may have
	 * put it all, and an inspection must not trim); the next put makes
	 * room, the least recently modified files first.  Make key 11 the
	 * oldest on disk. */
	k = key_of(11);
	ts[0].tv_sec = ts[1].tv_sec = 1000000;
	ts[0].tv_nsec = ts[1].tv_nsec = 0;
	CHECK_EQ(utimensat(AT_FDCWD, final_path(dir, &k), ts, 0), 0);
	fprintf(stderr, "(expect a warning: more than its capacity)\n");
	t = open_tier(dir, 3 * img_len, NULL, 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 5);
	CHECK(file_exists(final_path(dir, &k)));
	{
		kvt_key kn = key_of(50);
		CHECK_EQ(put_one(t, &kn, 50, KVT_DUR_CACHED, NULL), 0);
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 3);
	CHECK(du(dir) <= 3 * img_len);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	CHECK(!file_exists(final_path(dir, &k)));

	/* Larger than the whole tier. */
	k = key_of(100);
	CHECK_EQ(t->ops->put_begin(t, &k, 3 * img_len + 1, &w), KVT_ETOOBIG);
	/* Writes in flight count: two reservations cannot both fit, and
	 * the first one evicts what it needs before writing. */
	{
		kvt_tier_wbuf *w1, *w2;
		kvt_key a = key_of(101), b = key_of(102);
		CHECK_EQ(t->ops->put_begin(t, &a, 2 * img_len, &w1), 0);
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 1);
		CHECK_EQ(t->ops->put_begin(t, &b, 2 * img_len, &w2), KVT_EFULL);
		t->ops->put_abort(t, w1);
		CHECK_EQ(put_one(t, &b, 1, KVT_DUR_CACHED, NULL), 0);
		CHECK_EQ(put_one(t, &a, 1, KVT_DUR_CACHED, NULL), 0);
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 3);
		CHECK_EQ(st.put_rejects, 2);
	}
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir);
}

/* --- fault injection ---------------------------------------------------------- */

typedef struct fault_io {
	kvt_io io;       /* first: the tier calls through &io */
	kvt_io *real;
	int pwrite_err;  /* nonzero: every pwrite fails with it */
	int pwrite_max;  /* nonzero: accept at most this much per call */
	int pwrite_zero; /* nonzero: accept nothing */
	int fsync_err;   /* nonzero: fail fsyncs after fsync_skip succeed */
	int fsync_skip;
	int fsyncs;      /* how many were called */
} fault_io;

static int f_open(kvt_io *io, const char *p, int fl, mode_t m)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->open(r, p, fl, m);
}
static int f_close(kvt_io *io, int fd)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->close(r, fd);
}
static ssize_t f_pread(kvt_io *io, int fd, void *b, size_t n, off_t off)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->pread(r, fd, b, n, off);
}
static ssize_t f_pwrite(kvt_io *io, int fd, const void *b, size_t n, off_t off)
{
	fault_io *f = (fault_io *)io;
	if (f->pwrite_err)
		return f->pwrite_err;
	if (f->pwrite_zero)
		return 0;
	if (f->pwrite_max && n > (size_t)f->pwrite_max)
		n = (size_t)f->pwrite_max;
	return f->real->pwrite(f->real, fd, b, n, off);
}
static int f_fsync(kvt_io *io, int fd)
{
	fault_io *f = (fault_io *)io;
	if (f->fsyncs++ >= f->fsync_skip && f->fsync_err)
		return f->fsync_err;
	return f->real->fsync(f->real, fd);
}
static int f_fstat(kvt_io *io, int fd, struct stat *st)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->fstat(r, fd, st);
}
static int f_stat(kvt_io *io, const char *p, struct stat *st)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->stat(r, p, st);
}
static int f_link(kvt_io *io, const char *a, const char *b)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->link(r, a, b);
}
static int f_rename(kvt_io *io, const char *a, const char *b)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->rename(r, a, b);
}
static int f_unlink(kvt_io *io, const char *p)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->unlink(r, p);
}
static int f_mkdir(kvt_io *io, const char *p, mode_t m)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->mkdir(r, p, m);
}
static int f_readdir(kvt_io *io, const char *p, kvt_io_dirent_fn fn, void *arg)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->readdir(r, p, fn, arg);
}
static int f_touch(kvt_io *io, const char *p)
{
	kvt_io *r = ((fault_io *)io)->real;
	return r->touch(r, p);
}

static void fault_init(fault_io *f)
{
	memset(f, 0, sizeof(*f));
	f->io = (kvt_io){ .open = f_open, .close = f_close, .pread = f_pread,
			  .pwrite = f_pwrite, .fsync = f_fsync,
			  .fstat = f_fstat, .stat = f_stat, .link = f_link,
			  .rename = f_rename, .unlink = f_unlink,
			  .mkdir = f_mkdir, .readdir = f_readdir,
			  .touch = f_touch, .priv = f };
	f->real = kvt_io_posix();
}

/* The put of `k` failed with `want`: nothing published, no temporary, and
 * the earlier chunk is still served. */
static void check_failed_put(kvt_tier *t, const char *dir, const kvt_key *k,
			     int rc, int want, const kvt_key *old,
			     const uint8_t *old_img)
{
	CHECK_EQ(rc, want);
	CHECK(strstr(kvt_errmsg(), dir) != NULL); /* names the path */
	CHECK_EQ(t->ops->exists(t, k), 0);
	CHECK(!file_exists(final_path(dir, k)));
	du(dir);
	CHECK_EQ(du_tmp, 0);
	CHECK_EQ(du_files, 1);
	CHECK_EQ(get_cmp(t, old, old_img), 0);
}

static void test_faults(void)
{
	char *dir = new_dir();
	fault_io f;
	kvt_tier *t;
	uint8_t *img = malloc(img_len), *img2 = malloc(img_len);
	kvt_tier_stats st;
	kvt_key k0 = key_of(0), k = key_of(1);
	int rc;

	fault_init(&f);
	t = open_tier(dir, 1 << 20, &f.io, 0);
	CHECK_EQ(put_one(t, &k0, 1, KVT_DUR_POWER_SAFE, img), 0);
	CHECK(f.fsyncs >= 2); /* file and directory */

	f.pwrite_err = -ENOSPC;
	rc = put_one(t, &k, 2, KVT_DUR_CRASH_SAFE, NULL);
	check_failed_put(t, dir, &k, rc, -ENOSPC, &k0, img);
	CHECK(strstr(kvt_errmsg(), "pwrite") != NULL);
	f.pwrite_err = 0;

	f.fsync_err = -EIO;
	f.fsync_skip = f.fsyncs = 0;
	rc = put_one(t, &k, 2, KVT_DUR_POWER_SAFE, NULL);
	check_failed_put(t, dir, &k, rc, -EIO, &k0, img);
	CHECK(strstr(kvt_errmsg(), "fsync") != NULL);

	/* The file's fsync passes, the final directory's fails: the name
	 * that may not survive a power cut is taken back.  The key shares
	 * k0's fan-out directories, already made durable, so the second
	 * fsync is the one of the directory holding the new name. */
	{
		kvt_key ks = k0;
		ks.b[31] ^= 1;
		f.fsync_skip = 1;
		f.fsyncs = 0;
		rc = put_one(t, &ks, 2, KVT_DUR_POWER_SAFE, NULL);
		check_failed_put(t, dir, &ks, rc, -EIO, &k0, img);
		CHECK_EQ(f.fsyncs, 2);
		CHECK(strstr(kvt_errmsg(), ".kvt") != NULL); /* the final name's parent */
	}

	/* CRASH_SAFE does not fsync, so a broken fsync does not matter. */
	f.fsync_skip = f.fsyncs = 0;
	CHECK_EQ(put_one(t, &k, 2, KVT_DUR_CRASH_SAFE, img2), 0);
	CHECK_EQ(f.fsyncs, 0);
	CHECK_EQ(get_cmp(t, &k, img2), 0);
	f.fsync_err = 0;

	/* Short writes are finished by kvt_io_pwrite_all. */
	f.pwrite_max = 1000;
	k = key_of(2);
	CHECK_EQ(put_one(t, &k, 3, KVT_DUR_CACHED, img2), 0);
	CHECK_EQ(get_cmp(t, &k, img2), 0);
	f.pwrite_max = 0;

	/* A medium that accepts nothing is an error, not a hang. */
	f.pwrite_zero = 1;
	k = key_of(3);
	CHECK_EQ(put_one(t, &k, 4, KVT_DUR_CACHED, NULL), -EIO);
	CHECK_EQ(t->ops->exists(t, &k), 0);
	f.pwrite_zero = 0;

	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 3);
	CHECK_EQ(st.puts, 3);
	du(dir);
	CHECK_EQ(du_tmp, 0);
	t->ops->close(t);
	free(img);
	free(img2);
	tt_rm_rf(dir);
	free(dir);
}

/* --- two nodes racing ------------------------------------------------------- */

#define RACE_KEYS 64

typedef struct racer {
	kvt_tier *t;
	pthread_barrier_t *bar;
	uint64_t seed;
	int rc[RACE_KEYS];
	uint8_t *img[RACE_KEYS];
} racer;

static void *race_main(void *arg)
{
	racer *r = arg;
	int i;

	for (i = 0; i < RACE_KEYS; i++) {
		kvt_key k = key_of(1000 + i);
		kvt_tier_wbuf *w;
		int rc;

		pthread_barrier_wait(r->bar);
		rc = r->t->ops->put_begin(r->t, &k, img_len, &w);
		if (!rc)
			rc = fill_image(w, &k, r->seed + i, r->img[i]);
		/* Both writers have their image ready before either commits,
		 * so link(2) really decides. */
		pthread_barrier_wait(r->bar);
		if (!rc)
			rc = r->t->ops->put_commit(r->t, w,
						   i % 2 ? KVT_DUR_POWER_SAFE
							 : KVT_DUR_CRASH_SAFE);
		r->rc[i] = rc;
	}
	return NULL;
}

static void test_race(void)
{
	char *dir = new_dir();
	pthread_barrier_t bar;
	pthread_t th[2];
	racer r[2];
	int i, j;

	pthread_barrier_init(&bar, NULL, 2);
	for (j = 0; j < 2; j++) {
		memset(&r[j], 0, sizeof(r[j]));
		r[j].t = open_tier(dir, 64 << 20, NULL, 0);
		r[j].bar = &bar;
		r[j].seed = 77777 * (j + 1);
		for (i = 0; i < RACE_KEYS; i++)
			r[j].img[i] = malloc(img_len);
	}
	for (j = 0; j < 2; j++)
		pthread_create(&th[j], NULL, race_main, &r[j]);
	for (j = 0; j < 2; j++)
		pthread_join(th[j], NULL);

	for (i = 0; i < RACE_KEYS; i++) {
		kvt_key k = key_of(1000 + i);
		int win = r[0].rc[i] == 0 ? 0 : 1;
		CHECK((r[0].rc[i] == 0) != (r[1].rc[i] == 0));
		CHECK_EQ(r[1 - win].rc[i], KVT_EEXIST);
		CHECK(memcmp(r[0].img[i] + KVT_OBJ_HEADER_BYTES,
			     r[1].img[i] + KVT_OBJ_HEADER_BYTES,
			     img_len - KVT_OBJ_HEADER_BYTES) != 0);
		/* Both nodes serve the winner's image, whole. */
		CHECK_EQ(get_cmp(r[0].t, &k, r[win].img[i]), 0);
		CHECK_EQ(get_cmp(r[1].t, &k, r[win].img[i]), 0);
	}
	du(dir);
	CHECK_EQ(du_tmp, 0);
	CHECK_EQ(du_files, RACE_KEYS);
	for (j = 0; j < 2; j++) {
		r[j].t->ops->close(r[j].t);
		for (i = 0; i < RACE_KEYS; i++)
			free(r[j].img[i]);
	}
	pthread_barrier_destroy(&bar);
	tt_rm_rf(dir);
	free(dir);
}

/* --- io helpers --------------------------------------------------------------- */

static void test_io(void)
{
	char *dir = new_dir(), p[PATH_MAX], buf[16];
	kvt_io *io = kvt_io_posix();
	int fd;

	snprintf(p, sizeof(p), "%s/a/b//c/", dir);
	CHECK_EQ(kvt_io_mkdirs(io, p, 0755), 0);
	CHECK_EQ(kvt_io_mkdirs(io, p, 0755), 0); /* again: exists */
	snprintf(p, sizeof(p), "%s/a/b/c/f", dir);
	fd = io->open(io, p, O_RDWR | O_CREAT | O_EXCL, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(io->open(io, p, O_RDWR | O_CREAT | O_EXCL, 0644), -EEXIST);
	CHECK_EQ(kvt_io_pwrite_all(io, fd, "hello", 5, 0), 0);
	CHECK_EQ(kvt_io_pread_all(io, fd, buf, 5, 0), 0);
	CHECK(!memcmp(buf, "hello", 5));
	CHECK_EQ(kvt_io_pread_all(io, fd, buf, 6, 0), -ENODATA);
	CHECK_EQ(io->fsync(io, fd), 0);
	CHECK_EQ(io->close(io, fd), 0);
	CHECK_EQ(kvt_io_fsync_parent(io, p), 0);
	CHECK_EQ(kvt_io_mkdirs(io, p, 0755), -ENOTDIR); /* a file is there */
	errno = 1234;
	CHECK_EQ(io->unlink(io, "/nonexistent/kvt"), -ENOENT);
	CHECK_EQ(errno, 1234); /* errno is never the report */
	CHECK_EQ(io->touch(io, p), 0);
	CHECK_EQ(io->unlink(io, p), 0);
	tt_rm_rf(dir);
	free(dir);
}

int main(void)
{
	ns_setup();
	test_io();
	test_round_trip();
	test_duplicate();
	test_warm_restart();
	test_killed_writer();
	test_bad_files_at_open();
	test_corrupt_after_open();
	test_capacity();
	test_faults();
	test_race();
	TEST_DONE();
}
