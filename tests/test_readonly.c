/*
 * test_readonly.c — a read never changes a tier, on both file tiers.
 *
 * Every file call goes through a guard kvt_io table that counts the calls
 * that would change the medium (mkdir, open for writing or creating,
 * pwrite, fsync, link, rename, unlink, touch) and, in "mount" mode,
 * refuses them with EROFS as a read-only mount does.  A directory holding
 * good chunks, a truncated one, one with trailing bytes and (on the shared
 * tier) one signed under a key this node lacks is then:
 *   - opened read_only, with a capacity far below what it holds, read,
 *     walked, listed and closed: not one mutating call, the directory
 *     byte-identical, every good chunk served bit-exact, no bad one served;
 *   - opened writable through the refusing table (a read-only mount): the
 *     NVMe tier says it is read-only and serves reads; puts fail with
 *     EROFS, naming the directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "format/auth.h"
#include "test.h"
#include "tier/fsdir.h"
#include "tier/nvme.h"
#include "tier_test_util.h"

#define N_GOOD 12

typedef struct guard {
	kvt_io io; /* first */
	kvt_io *real;
	int refuse;       /* 1: mutating calls fail with -EROFS */
	int mutations;    /* mutating calls that were let through */
	int refused;
} guard;

#define G(io) ((guard *)(io))
#define REAL(io) (G(io)->real)

static int g_mutate(kvt_io *io)
{
	if (G(io)->refuse) {
		G(io)->refused++;
		return -EROFS;
	}
	G(io)->mutations++;
	return 0;
}

static int g_open(kvt_io *io, const char *p, int fl, mode_t m)
{
	int rc;

	if ((fl & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) && (rc = g_mutate(io)))
		return rc;
	return REAL(io)->open(REAL(io), p, fl, m);
}
static int g_close(kvt_io *io, int fd) { return REAL(io)->close(REAL(io), fd); }
static ssize_t g_pread(kvt_io *io, int fd, void *b, size_t n, off_t off)
{
	return REAL(io)->pread(REAL(io), fd, b, n, off);
}
static ssize_t g_pwrite(kvt_io *io, int fd, const void *b, size_t n, off_t off)
{
	int rc = g_mutate(io);
	return rc ? rc : REAL(io)->pwrite(REAL(io), fd, b, n, off);
}
static int g_fsync(kvt_io *io, int fd)
{
	int rc = g_mutate(io);
	return rc ? rc : REAL(io)->fsync(REAL(io), fd);
}
static int g_fstat(kvt_io *io, int fd, struct stat *st)
{
	return REAL(io)->fstat(REAL(io), fd, st);
}
static int g_stat(kvt_io *io, const char *p, struct stat *st)
{
	return REAL(io)->stat(REAL(io), p, st);
}
static int g_link(kvt_io *io, const char *a, const char *b)
{
	int rc = g_mutate(io);
	return rc ? rc : REAL(io)->link(REAL(io), a, b);
}
static int g_rename(kvt_io *io, const char *a, const char *b)
{
	int rc = g_mutate(io);
	return rc ? rc : REAL(io)->rename(REAL(io), a, b);
}
static int g_unlink(kvt_io *io, const char *p)
{
	int rc = g_mutate(io);
	return rc ? rc : REAL(io)->unlink(REAL(io), p);
}
static int g_mkdir(kvt_io *io, const char *p, mode_t m)
{
	struct stat st;
	int rc;

	/* A read-only mount still says EEXIST for what is there. */
	if (G(io)->refuse && REAL(io)->stat(REAL(io), p, &st) == 0)
		return -EEXIST;
	rc = g_mutate(io);
	return rc ? rc : REAL(io)->mkdir(REAL(io), p, m);
}
static int g_readdir(kvt_io *io, const char *p, kvt_io_dirent_fn fn, void *a)
{
	return REAL(io)->readdir(REAL(io), p, fn, a);
}
static int g_touch(kvt_io *io, const char *p)
{
	int rc = g_mutate(io);
	return rc ? rc : REAL(io)->touch(REAL(io), p);
}

static guard guard_make(int refuse)
{
	guard g = { .real = kvt_io_posix(), .refuse = refuse };

	g.io = (kvt_io){ .open = g_open, .close = g_close, .pread = g_pread,
			 .pwrite = g_pwrite, .fsync = g_fsync, .fstat = g_fstat,
			 .stat = g_stat, .link = g_link, .rename = g_rename,
			 .unlink = g_unlink, .mkdir = g_mkdir, .readdir = g_readdir,
			 .touch = g_touch };
	return g;
}

/* --- the directory under test --------------------------------------------- */

static kvt_ns ns;
static const uint8_t other_key[32] = "a key this node was never given";

enum { KIND_NVME, KIND_FSDIR };

static kvt_tier *open_kind(int kind, const char *dir, uint64_t cap, kvt_io *io,
			   int read_only, const uint8_t *akey)
{
	kvt_tier *t = NULL;
	int rc;

	if (kind == KIND_NVME) {
		kvt_nvme_opts o = { .path = dir, .capacity = cap, .use_io_uring = 1,
				    .io = io, .read_only = read_only };
		rc = kvt_nvme_open(&o, &t);
	} else {
		kvt_fsdir_opts o = { .path = dir, .capacity = cap, .io = io,
				     .refresh_ms = -1, .read_only = read_only,
				     .auth_key = akey, .auth_key_len = akey ? 32 : 0 };
		rc = kvt_fsdir_open(&o, &t);
	}
	if (rc)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(rc), kvt_errmsg());
	return t;
}

static char *final_of(const char *dir, const kvt_key *k)
{
	static char p[1200];
	char hex[65];

	kvt_key_hex(k, hex);
	snprintf(p, sizeof(p), "%s/%.2s/%.2s/%s.kvt", dir, hex, hex + 2, hex);
	return p;
}

/* N_GOOD good chunks, then damage: key N_GOOD truncated, N_GOOD+1 with 7
 * trailing bytes; on the shared tier N_GOOD+2 signed under another key. */
static void populate(int kind, const char *dir, uint8_t *buf)
{
	kvt_tier *t = open_kind(kind, dir, 1ull << 30, NULL, 0, NULL);
	kvt_key k;

	if (!t)
		return;
	for (int i = 0; i < N_GOOD + 2; i++) {
		k = tt_key_of((uint64_t)i, -1);
		CHECK_EQ(tt_put_image(t, &ns, &k, 100 + (uint64_t)i, buf, KVT_DUR_CRASH_SAFE), 0);
	}
	t->ops->close(t);
	k = tt_key_of(N_GOOD, -1);
	CHECK_EQ(truncate(final_of(dir, &k), (off_t)(tt_img_len(&ns) - 100)), 0);
	k = tt_key_of(N_GOOD + 1, -1);
	{
		FILE *f = fopen(final_of(dir, &k), "ab");
		CHECK(f != NULL);
		if (f) {
			CHECK_EQ(fwrite("0123456", 1, 7, f), 7); /* not a tag: 7 bytes */
			fclose(f);
		}
	}
	if (kind == KIND_FSDIR) {
		t = open_kind(kind, dir, 1ull << 30, NULL, 0, other_key);
		if (t) {
			k = tt_key_of(N_GOOD + 2, -1);
			CHECK_EQ(tt_put_image(t, &ns, &k, 300, buf, KVT_DUR_CRASH_SAFE), 0);
			t->ops->close(t);
		}
	}
}

static int count_listed(void *arg, const kvt_key *key, const char *where,
			int proven, const char *why)
{
	(void)key, (void)where, (void)why;
	((int *)arg)[proven ? 0 : 1]++;
	return 0;
}

static int iter_count(void *arg, const kvt_key *key, uint64_t len)
{
	(void)key, (void)len;
	(*(int *)arg)++;
	return 0;
}

static void read_everything(int kind, kvt_tier *t, uint8_t *buf)
{
	kvt_tier_rbuf *r;
	kvt_tier_stats st;
	int n = 0, listed[2] = { 0, 0 }, nbad = kind == KIND_FSDIR ? 3 : 2;

	for (int i = 0; i < N_GOOD; i++) {
		kvt_key k = tt_key_of((uint64_t)i, -1);
		CHECK_EQ(t->ops->exists(t, &k), 1);
		CHECK_EQ(tt_get_verify(t, &ns, &k, 100 + (uint64_t)i, buf), 0);
	}
	for (int i = N_GOOD; i < N_GOOD + nbad; i++) {
		kvt_key k = tt_key_of((uint64_t)i, -1);
		CHECK_EQ(t->ops->exists(t, &k), 0);
		CHECK_EQ(t->ops->get(t, &k, &r), KVT_ENOTFOUND);
	}
	CHECK_EQ(t->ops->iterate(t, iter_count, &n), 0);
	CHECK_EQ(n, N_GOOD);
	CHECK_EQ(t->ops->bad_iterate(t, count_listed, listed), 0);
	CHECK_EQ(listed[0], 2);                        /* truncated, trailing */
	CHECK_EQ(listed[1], kind == KIND_FSDIR ? 1 : 0); /* another node's key */
	t->ops->stats(t, &st);
	CHECK_EQ(st.read_only, 1);
	CHECK_EQ(st.bad_listed, (uint64_t)nbad);
	CHECK_EQ(st.chunks, N_GOOD);
}

static void test_kind(int kind)
{
	char base[] = "/var/tmp/kvt-ro-XXXXXX", dir[1100];
	uint8_t *buf = malloc(tt_img_len(&ns));
	const char *name = kind == KIND_NVME ? "nvme" : "fsdir";
	kvt_tier *t;
	kvt_tier_wbuf *w;
	uint64_t before;
	guard g;

	tt_var_tmp(base, dir, sizeof(dir), 64ull << 20);
	populate(kind, dir, buf);
	before = tt_tree_fingerprint(dir);

	/* Inspection: read_only, a capacity far below what the tree holds. */
	g = guard_make(0);
	t = open_kind(kind, dir, 2 * tt_img_len(&ns), &g.io, 1, NULL);
	CHECK(t != NULL);
	if (t) {
		kvt_key k = tt_key_of(999, -1), kb = tt_key_of(N_GOOD, -1);
		read_everything(kind, t, buf);
		CHECK_EQ(t->ops->put_begin(t, &k, tt_img_len(&ns), &w), -EROFS);
		CHECK(strstr(kvt_errmsg(), "read-only") != NULL);
		CHECK_EQ(t->ops->repair(t, &kb), -EROFS);
		t->ops->close(t);
	}
	if (g.mutations)
		fprintf(stderr, "%s: %d mutating call(s) in a read-only open\n", name,
			g.mutations);
	CHECK_EQ(g.mutations, 0);
	CHECK(tt_tree_fingerprint(dir) == before);

	/* A read-only mount: writes refused by the file system itself. */
	g = guard_make(1);
	t = open_kind(kind, dir, 2 * tt_img_len(&ns), &g.io, 0, NULL);
	CHECK(t != NULL);
	if (t) {
		kvt_key k = tt_key_of(998, -1);
		if (kind == KIND_NVME) {
			read_everything(kind, t, buf);
		} else {
			/* The shared tier opens as it always did: its reads work. */
			kvt_key k0 = tt_key_of(0, -1);
			CHECK_EQ(tt_get_verify(t, &ns, &k0, 100, buf), 0);
		}
		CHECK_EQ(tt_put_image(t, &ns, &k, 7, buf, KVT_DUR_CRASH_SAFE), -EROFS);
		t->ops->close(t);
	}
	CHECK_EQ(g.mutations, 0);
	CHECK(tt_tree_fingerprint(dir) == before);

	tt_rm_rf(base);
	free(buf);
	fprintf(stderr, "%s: read-only opens changed nothing (%d writes refused on the mount)\n",
		name, g.refused);
}

int main(void)
{
	tt_ns_make(&ns, 2, 2, 64, 64, KVT_DTYPE_BF16, 0, 42);
	test_kind(KIND_NVME);
	test_kind(KIND_FSDIR);
	TEST_DONE();
}
