/*
 * fsdir_refresh.c — the directory tier's view of what other nodes did.
 *
 * Nodes sharing a directory learn of each other's puts and removals only
 * from the directory itself.  A refresh cycle lists the fan-out
 * directories <k0>/<k1>, then reads them in slices of refresh_dirs (so
 * one pass never holds the scan for long on a large tree): a name not in
 * the index is checked (header read) and adopted; at the end of a cycle
 * that read every leaf, an entry older than the cycle whose name no
 * readdir returned has lost its file (another node's eviction or GC) and
 * is dropped.  A cycle that could not read everything drops nothing: an
 * unreadable directory proves nothing vanished.  The background thread
 * runs one slice every refresh_ms; kvt_fsdir_refresh runs a whole cycle
 * at once and kvt_fsdir_probe asks about one key.
 */
#include "tier/fsdir_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

typedef struct fsdir_ls {
	fsdir *t;
	uint8_t k0;
	uint16_t *v;
	size_t n, cap;
	int err;
} fsdir_ls;

static int fsdir_ls_k1(void *arg, const char *name, int is_dir)
{
	fsdir_ls *l = arg;
	uint8_t b;

	if (!is_dir || strlen(name) != 2 || kvt_fanout_unhex(name, &b, 1))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		uint16_t *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return l->err = KVT_ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = (uint16_t)(l->k0 << 8 | b);
	return 0;
}

static int fsdir_ls_k0(void *arg, const char *name, int is_dir)
{
	fsdir_ls *l = arg;
	char dir[PATH_MAX];
	uint8_t b;
	int rc;

	if (!is_dir || strlen(name) != 2 || kvt_fanout_unhex(name, &b, 1))
		return 0;
	snprintf(dir, sizeof(dir), "%s/%s", l->t->root, name);
	l->k0 = b;
	rc = l->t->io->readdir(l->t->io, dir, fsdir_ls_k1, l);
	if (rc && rc != -ENOENT && !l->err)
		l->err = rc;
	return l->err == KVT_ENOMEM ? l->err : 0;
}

typedef struct fsdir_leaf {
	fsdir *t;
	uint8_t k0, k1;
	kvt_key *fresh; /* names not in the index */
	size_t n, cap;
	int err;
} fsdir_leaf;

static int fsdir_leaf_one(void *arg, const char *name, int is_dir)
{
	fsdir_leaf *l = arg;
	fsdir *t = l->t;
	fsdir_ent *e;
	kvt_key k;

	if (is_dir || strlen(name) != KVT_FANOUT_HEX + 4 ||
	    strcmp(name + KVT_FANOUT_HEX, ".kvt") ||
	    kvt_fanout_unhex(name, k.b, KVT_KEY_BYTES) || k.b[0] != l->k0 ||
	    k.b[1] != l->k1)
		return 0; /* not ours (.nfsXXXX, a tool's file): leave it */
	pthread_mutex_lock(&t->ix.mu);
	e = fsdir_find(t, &k);
	if (e)
		e->seen = t->epoch;
	pthread_mutex_unlock(&t->ix.mu);
	if (e)
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		kvt_key *nk = realloc(l->fresh, cap * sizeof(*nk));
		if (!nk)
			return l->err = KVT_ENOMEM;
		l->fresh = nk;
		l->cap = cap;
	}
	l->fresh[l->n++] = k;
	return 0;
}

/* Index the published file of `key` if it checks out, stamped with the
 * current cycle; drop it if it is bad.  1 indexed (or already), 0 not. */
int fsdir_adopt_checked(fsdir *t, const kvt_key *key)
{
	char path[PATH_MAX], why[256];
	struct stat st;
	fsdir_ent *e;
	int rc;

	kvt_fanout_final_path(t->root, key, path);
	rc = fsdir_check(t, path, key, 0, &st, why);
	if (rc == FSDIR_BAD || rc == FSDIR_UNPROVEN) {
		/* Complete by construction (link publishes whole files), so
		 * planted, damaged, or another node's format or key: never
		 * served, left where it is.  Noted once per file. */
		struct kvt_findex_bad b;
		if (kvt_findex_bad_take(&t->ix, key, &b)) {
			int same = kvt_findex_bad_same(&b, &st);
			kvt_findex_bad_put(&t->ix, &b);
			if (same)
				return 0;
		}
		kvt_findex_note_bad(&t->ix, key, &st, rc == FSDIR_BAD, path, why,
				    "fsdir");
		return 0;
	}
	if (rc)
		return 0;
	e = calloc(1, sizeof(*e));
	if (!e)
		return 0;
	e->ix.key = *key;
	e->ix.len = (uint64_t)st.st_size;
	e->touched = fsdir_mono_s();
	pthread_mutex_lock(&t->ix.mu);
	if (!fsdir_find(t, key)) {
		e->seen = t->epoch;
		fsdir_insert(t, e);
		e = NULL;
	}
	pthread_mutex_unlock(&t->ix.mu);
	free(e);
	return 1;
}

/* End of a cycle that read every leaf directory: an entry older than the
 * cycle whose name no readdir returned has lost its file (another node's
 * eviction or GC). */
static void fsdir_cycle_finish(fsdir *t)
{
	struct kvt_findex_ent *x, *older, *gone = NULL;

	pthread_mutex_lock(&t->ix.mu);
	for (x = t->ix.mru; x; x = older) {
		fsdir_ent *e = (fsdir_ent *)x;
		older = x->older;
		if (e->seen != t->epoch && x->gen <= t->cycle_gen) {
			kvt_findex_remove_locked(&t->ix, x);
			x->hnext = gone;
			gone = x;
		}
	}
	pthread_mutex_unlock(&t->ix.mu);
	while (gone) {
		x = gone;
		gone = x->hnext;
		free(x);
	}
}

/* One slice of the refresh (caller holds scan_mu): start a cycle if none
 * is under way, read up to max_dirs leaf directories.  Returns 1 when the
 * slice ended a cycle. */
static int fsdir_refresh_step(fsdir *t, size_t max_dirs)
{
	fsdir_leaf l;
	size_t i, j;
	int rc;

	if (!t->in_cycle) {
		fsdir_ls ls;

		memset(&ls, 0, sizeof(ls));
		ls.t = t;
		rc = t->io->readdir(t->io, t->root[0] ? t->root : "/",
				    fsdir_ls_k0, &ls);
		if (rc || ls.err) {
			/* An unreadable root (unmounted?) proves nothing
			 * vanished: skip the cycle rather than empty the
			 * index. */
			free(ls.v);
			kvt_log(KVT_LOG_DEBUG, "fsdir: refresh of %s: %s",
				t->root, kvt_strerror(rc ? rc : ls.err));
			return 0;
		}
		free(t->leaves);
		t->leaves = ls.v;
		t->nleaves = ls.n;
		t->cursor = 0;
		t->cycle_bad = 0;
		pthread_mutex_lock(&t->ix.mu);
		t->epoch++;
		t->cycle_gen = t->ix.gen;
		pthread_mutex_unlock(&t->ix.mu);
		t->in_cycle = 1;
	}
	memset(&l, 0, sizeof(l));
	l.t = t;
	for (i = 0; i < max_dirs && t->cursor < t->nleaves; i++, t->cursor++) {
		char dir[PATH_MAX];
		uint16_t v = t->leaves[t->cursor];

		l.k0 = (uint8_t)(v >> 8);
		l.k1 = (uint8_t)v;
		l.n = 0;
		l.err = 0;
		snprintf(dir, sizeof(dir), "%s/%02x/%02x", t->root, l.k0, l.k1);
		rc = t->io->readdir(t->io, dir, fsdir_leaf_one, &l);
		if ((rc && rc != -ENOENT) || l.err)
			t->cycle_bad = 1; /* some names unseen: keep entries */
		for (j = 0; j < l.n; j++)
			fsdir_adopt_checked(t, &l.fresh[j]);
	}
	free(l.fresh);
	if (t->cursor < t->nleaves)
		return 0;
	if (!t->cycle_bad)
		fsdir_cycle_finish(t);
	t->in_cycle = 0;
	return 1;
}

void *fsdir_refresh_main(void *arg)
{
	fsdir *t = arg;
	struct timespec ts;

	pthread_mutex_lock(&t->rmu);
	while (!t->stop) {
		ts = kvt_deadline_after(t->refresh_ms);
		while (!t->stop &&
		       pthread_cond_timedwait(&t->rcv, &t->rmu, &ts) != ETIMEDOUT)
			;
		if (t->stop)
			break;
		pthread_mutex_unlock(&t->rmu);
		pthread_mutex_lock(&t->scan_mu);
		fsdir_refresh_step(t, t->refresh_dirs);
		pthread_mutex_unlock(&t->scan_mu);
		pthread_mutex_lock(&t->rmu);
	}
	pthread_mutex_unlock(&t->rmu);
	return NULL;
}

int fsdir_refresh_all(fsdir *t)
{
	pthread_mutex_lock(&t->scan_mu);
	t->in_cycle = 0; /* a fresh, whole cycle */
	while (!fsdir_refresh_step(t, (size_t)-1) && t->in_cycle)
		;
	pthread_mutex_unlock(&t->scan_mu);
	return 0;
}

int fsdir_probe_key(fsdir *t, const kvt_key *key)
{
	char path[PATH_MAX];
	struct stat st;
	fsdir_ent *e;
	uint64_t gen = 0;
	int rc;

	kvt_fanout_final_path(t->root, key, path);
	rc = t->io->stat(t->io, path, &st);
	pthread_mutex_lock(&t->ix.mu);
	e = fsdir_find(t, key);
	if (e)
		gen = e->ix.gen;
	pthread_mutex_unlock(&t->ix.mu);
	if (rc == -ENOENT) {
		if (e)
			free(kvt_findex_drop(&t->ix, key, gen, 0, NULL));
		return 0;
	}
	if (rc)
		return kvt_err(rc, "fsdir: stat %s: %s", path, kvt_strerror(rc));
	if (e)
		return 1;
	return fsdir_adopt_checked(t, key);
}
