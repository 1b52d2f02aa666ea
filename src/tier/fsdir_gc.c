/*
 * fsdir_gc.c — kvt_fsdir_gc: collect a shared directory with no coordinator.
 *
 * Any node may run it, any number at once, with or without a tier open on
 * the directory: it walks <root>, removes temporaries older than the grace
 * period (younger ones may be a write in progress on some node), then
 * removes published files oldest mtime first (gets refresh the mtime of
 * what they read) while the total exceeds the budget or a file is past its
 * TTL.  Every collector sorts the same way, so concurrent ones pick the
 * same victims; a file touched since the walk is left alone.
 */
#include "tier/fsdir_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"

typedef struct gc_item {
	kvt_key key;
	uint64_t size;
	struct timespec mtime;
} gc_item;

typedef struct gc_walk {
	kvt_io *io;
	const char *root;
	char dir[PATH_MAX];
	uint8_t k[2];
	int depth;
	gc_item *v;
	size_t n, cap;
	int err;
	int64_t now, grace;
	int dry_run;
	kvt_fsdir_gc_result *r;
} gc_walk;

static int gc_tmp_one(void *arg, const char *name, int is_dir)
{
	gc_walk *g = arg;
	size_t n = strlen(name);
	char path[PATH_MAX];
	struct stat st;

	if (is_dir || n < 4 || strcmp(name + n - 4, ".tmp"))
		return 0;
	snprintf(path, sizeof(path), "%s/tmp/%s", g->root, name);
	if (g->io->stat(g->io, path, &st))
		return 0;
	if (g->now - (int64_t)st.st_mtime < g->grace)
		return 0; /* maybe a write in progress on some node */
	if (g->dry_run || g->io->unlink(g->io, path) == 0)
		g->r->tmp_removed++;
	return 0;
}

static int gc_entry(void *arg, const char *name, int is_dir)
{
	gc_walk *g = arg;
	size_t n = strlen(name), dl;
	char path[PATH_MAX];
	struct stat st;
	gc_item it;
	uint8_t b;
	int rc;

	if (g->depth == 2) {
		if (is_dir || n != KVT_FANOUT_HEX + 4 || strcmp(name + KVT_FANOUT_HEX, ".kvt") ||
		    kvt_fanout_unhex(name, it.key.b, KVT_KEY_BYTES))
			return 0; /* not ours */
		if (snprintf(path, sizeof(path), "%s/%s", g->dir, name) >=
			    (int)sizeof(path) ||
		    g->io->stat(g->io, path, &st))
			return 0; /* gone meanwhile */
		it.size = (uint64_t)st.st_size;
		it.mtime = st.st_mtim;
		if (g->n == g->cap) {
			size_t cap = g->cap ? g->cap * 2 : 1024;
			gc_item *nv = realloc(g->v, cap * sizeof(*nv));
			if (!nv)
				return g->err = kvt_err(KVT_ENOMEM, "fsdir gc: no memory");
			g->v = nv;
			g->cap = cap;
		}
		g->v[g->n++] = it;
		g->r->files++;
		g->r->bytes += it.size;
		return 0;
	}
	if (!is_dir || n != 2 || kvt_fanout_unhex(name, &b, 1))
		return 0;
	dl = strlen(g->dir);
	snprintf(g->dir + dl, sizeof(g->dir) - dl, "/%s", name);
	g->k[g->depth++] = b;
	rc = g->io->readdir(g->io, g->dir, gc_entry, g);
	g->depth--;
	if (rc && rc != -ENOENT && !g->err)
		g->err = kvt_err(rc, "fsdir gc: readdir %s: %s", g->dir,
				 kvt_strerror(rc));
	g->dir[dl] = '\0';
	return g->err;
}

static int gc_item_cmp(const void *a, const void *b)
{
	const gc_item *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	/* Same order on every collector: concurrent ones pick the same
	 * victims instead of each removing different files. */
	return memcmp(x->key.b, y->key.b, KVT_KEY_BYTES);
}

int kvt_fsdir_gc(const char *root, const kvt_fsdir_gc_opts *o,
		 kvt_fsdir_gc_result *r)
{
	gc_walk g;
	struct timespec t0, t1;
	char path[PATH_MAX], hex[KVT_FANOUT_HEX + 1];
	size_t i, rl;
	int rc;

	if (!r)
		return kvt_err(KVT_EINVAL, "fsdir gc: no result");
	memset(r, 0, sizeof(*r));
	if (!root || !root[0] || !o || o->ttl_s < 0 || o->tmp_grace_s < 0)
		return kvt_err(KVT_EINVAL, "fsdir gc: a directory and options "
			       "(ttl and grace >= 0) are needed");
	rl = strlen(root);
	while (rl > 1 && root[rl - 1] == '/')
		rl--;
	if (rl + FSDIR_NAME_MAX >= PATH_MAX)
		return kvt_err(KVT_EINVAL, "fsdir gc: path %s is too long", root);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(&g, 0, sizeof(g));
	g.io = o->io ? o->io : kvt_io_posix();
	snprintf(g.dir, sizeof(g.dir), "%.*s", (int)rl, root);
	g.now = (int64_t)time(NULL);
	g.grace = o->tmp_grace_s ? o->tmp_grace_s : FSDIR_TMP_GRACE_S;
	g.dry_run = o->dry_run;
	g.r = r;
	{
		char rootc[PATH_MAX];
		snprintf(rootc, sizeof(rootc), "%.*s", (int)rl, root);
		g.root = rootc;
		if (snprintf(path, sizeof(path), "%s/tmp", rootc) >=
		    (int)sizeof(path))
			return kvt_err(KVT_EINVAL, "fsdir gc: path too long");
		rc = g.io->readdir(g.io, path, gc_tmp_one, &g);
		if (rc && rc != -ENOENT)
			return kvt_err(rc, "fsdir gc: readdir %s: %s", path,
				       kvt_strerror(rc));
		rc = g.io->readdir(g.io, rootc, gc_entry, &g);
		if (rc && !g.err)
			g.err = kvt_err(rc, "fsdir gc: readdir %s: %s", rootc,
					kvt_strerror(rc));
		if (g.err) {
			free(g.v);
			return g.err;
		}
		if (g.n)
			qsort(g.v, g.n, sizeof(*g.v), gc_item_cmp);
		r->bytes_left = r->bytes;
		for (i = 0; i < g.n; i++) {
			gc_item *it = &g.v[i];
			int expired = o->ttl_s &&
				      g.now - (int64_t)it->mtime.tv_sec >= o->ttl_s;
			struct stat st;

			if (!expired && (!o->budget || r->bytes_left <= o->budget))
				break; /* sorted: everything after is newer */
			kvt_fanout_hex(&it->key, hex);
			if (snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s.kvt",
				     rootc, hex, hex + 2, hex) >= (int)sizeof(path))
				continue; /* rl was checked: cannot happen */
			/* Used since the walk (a get touched it): it is not
			 * the oldest any more; leave it. */
			rc = g.io->stat(g.io, path, &st);
			if (!rc && (st.st_mtim.tv_sec != it->mtime.tv_sec ||
				    st.st_mtim.tv_nsec != it->mtime.tv_nsec))
				continue;
			if (!rc && !g.dry_run)
				rc = g.io->unlink(g.io, path);
			if (rc == -ENOENT) {
				r->raced++; /* another collector, or eviction */
			} else if (rc) {
				r->errors++;
				kvt_log(KVT_LOG_WARN, "fsdir gc: unlink %s: %s",
					path, kvt_strerror(rc));
				continue;
			} else {
				r->removed++;
				r->removed_bytes += it->size;
				if (expired)
					r->expired++;
			}
			r->bytes_left -= it->size;
		}
	}
	free(g.v);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->seconds = (double)(t1.tv_sec - t0.tv_sec) +
		     (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	kvt_err_clear();
	return 0;
}
