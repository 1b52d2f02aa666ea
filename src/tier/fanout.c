/*
 * fanout.c — durability of the file tiers' directory tree.
 *
 * POSIX makes a new name durable only when the directory holding it is
 * fsynced, and the same holds for each directory's own name in its parent.
 * A power-safe chunk therefore needs its file, its directory <root>/k0/k1,
 * and the entries of k1 in k0, k0 in root and root in its parent to have
 * reached the disk.  The last three rarely change, so each is fsynced once
 * per tier and remembered.
 *
 * Also the names of the tree (hex stems, final and temporary paths), the
 * clean-up of stale temporaries and publication by link(2).
 */
#include "tier/fanout.h"
#include "common/hex.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"

static int sync_parent(kvt_io *io, const char *dir)
{
	int rc = kvt_io_fsync_parent(io, dir);
	if (rc)
		return kvt_err(rc, "fsync of the directory holding %s: %s", dir,
			       kvt_strerror(rc));
	return 0;
}

int kvt_fanout_durable(kvt_fanout *f, kvt_io *io, const char *root,
		       const kvt_key *key, const char *fin)
{
	size_t rl = strlen(root);
	unsigned k0 = key->b[0], k01 = (unsigned)key->b[0] << 8 | key->b[1];
	char dir[PATH_MAX];
	int rc;

	if (rl + 7 > sizeof(dir) || strncmp(fin, root, rl))
		return kvt_err(KVT_EINVAL, "%s is not under %s", fin, root);
	if (!atomic_load(&f->root)) {
		if ((rc = sync_parent(io, root)))
			return rc;
		atomic_store(&f->root, 1);
	}
	if (!atomic_load(&f->k0[k0])) {
		memcpy(dir, fin, rl + 3); /* "<root>/k0" */
		dir[rl + 3] = '\0';
		if ((rc = sync_parent(io, dir)))
			return rc;
		atomic_store(&f->k0[k0], 1);
	}
	if (!atomic_load(&f->k1[k01])) {
		memcpy(dir, fin, rl + 6); /* "<root>/k0/k1" */
		dir[rl + 6] = '\0';
		if ((rc = sync_parent(io, dir)))
			return rc;
		atomic_store(&f->k1[k01], 1);
	}
	return 0;
}

/* --- names ------------------------------------------------------------------ */

void kvt_fanout_hex(const kvt_key *k, char out[KVT_FANOUT_HEX + 1])
{
	kvt_hex_encode(k->b, KVT_KEY_BYTES, out);
}

int kvt_fanout_unhex(const char *s, uint8_t *out, size_t n)
{
	/* We write lower case only; anything else is not ours. */
	return kvt_hex_decode(s, out, n, 0);
}

void kvt_fanout_final_path(const char *root, const kvt_key *k, char *out)
{
	char hex[KVT_FANOUT_HEX + 1];

	kvt_fanout_hex(k, hex);
	snprintf(out, PATH_MAX, "%s/%.2s/%.2s/%s.kvt", root, hex, hex + 2, hex);
}

static atomic_uint_fast64_t fanout_tmp_seq;
static pthread_once_t fanout_tmp_once = PTHREAD_ONCE_INIT;

static void fanout_tmp_seed(void)
{
	uint64_t r = 0;
	struct timespec ts;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		clock_gettime(CLOCK_REALTIME, &ts);
		r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^
		    (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
	}
	atomic_store(&fanout_tmp_seq, r >> 16); /* headroom before wrapping */
}

void kvt_fanout_tmp_path(const char *root, const char *stem, char *out)
{
	uint64_t n;

	pthread_once(&fanout_tmp_once, fanout_tmp_seed);
	n = atomic_fetch_add(&fanout_tmp_seq, 1);
	snprintf(out, PATH_MAX, "%s/tmp/%s.%ld.%llu.tmp", root, stem,
		 (long)getpid(), (unsigned long long)n);
}

/* --- temporaries ---------------------------------------------------------- */

int kvt_fanout_mktmp(kvt_io *io, const char *root, const char *tier)
{
	char dir[PATH_MAX];
	int rc;

	snprintf(dir, sizeof(dir), "%s/tmp", root);
	rc = io->mkdir(io, dir, KVT_DIR_MODE);
	if (rc == -ENOENT)
		return kvt_err(rc, "%s: directory %s has disappeared "
			       "(unmounted?); not recreating it", tier, root);
	if (rc && rc != -EEXIST)
		return kvt_err(rc, "%s: mkdir %s: %s", tier, dir,
			       kvt_strerror(rc));
	return 0;
}

typedef struct fanout_clean {
	kvt_io *io;
	const char *root;
	int64_t grace_s;
} fanout_clean;

static int fanout_clean_one(void *arg, const char *name, int is_dir)
{
	fanout_clean *c = arg;
	size_t n = strlen(name);
	char path[PATH_MAX];
	struct stat st;

	if (is_dir || n < 4 || strcmp(name + n - 4, ".tmp"))
		return 0;
	snprintf(path, sizeof(path), "%s/tmp/%s", c->root, name);
	if (!c->io->stat(c->io, path, &st) &&
	    (int64_t)time(NULL) - (int64_t)st.st_mtime >= c->grace_s)
		c->io->unlink(c->io, path);
	return 0;
}

int kvt_fanout_clean_tmp(kvt_io *io, const char *root, int64_t grace_s)
{
	fanout_clean c = {io, root, grace_s};
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s/tmp", root);
	return io->readdir(io, dir, fanout_clean_one, &c);
}

/* --- publication ------------------------------------------------------------ */

/* mkdir one fan-out level; for power safety, make a directory we created
 * durable in its parent too. */
static int fanout_mkdir_level(kvt_io *io, const char *dir, int durability,
			      const char *tier)
{
	int rc = io->mkdir(io, dir, KVT_DIR_MODE);

	if (rc == -EEXIST)
		return 0;
	if (rc)
		return kvt_err(rc, "%s: mkdir %s: %s", tier, dir,
			       kvt_strerror(rc));
	if (durability == KVT_DUR_POWER_SAFE) {
		rc = kvt_io_fsync_parent(io, dir);
		if (rc)
			return kvt_err(rc, "%s: fsync parent of %s: %s", tier,
				       dir, kvt_strerror(rc));
	}
	return 0;
}

int kvt_fanout_link(kvt_io *io, const char *root, const char *tmp,
		    const char *fin, int durability, int retries,
		    const char *tier)
{
	size_t rl = strlen(root);
	char dir[PATH_MAX];
	int rc, i;

	for (i = 0;; i++) {
		rc = io->link(io, tmp, fin);
		if (rc != -ENOENT || i == retries)
			break;
		memcpy(dir, fin, rl + 3); /* "<root>/k0" */
		dir[rl + 3] = '\0';
		if ((rc = fanout_mkdir_level(io, dir, durability, tier)))
			return rc;
		memcpy(dir, fin, rl + 6); /* "<root>/k0/k1" */
		dir[rl + 6] = '\0';
		if ((rc = fanout_mkdir_level(io, dir, durability, tier)))
			return rc;
	}
	if (rc && rc != -EEXIST)
		return kvt_err(rc, "%s: link %s -> %s: %s", tier, tmp, fin,
			       kvt_strerror(rc));
	return rc;
}
