/*
 * findex.c — the index of the file-per-chunk tiers; see findex.h.
 */
#include "tier/findex.h"
#include "tier/fanout.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "format/object.h"
#include "kvtier/units.h"

#define FINDEX_MIN_BUCKETS 1024u

/* Mix the whole key: real keys are hashes, but keys built by hand (tests,
 * benchmarks: a constant prefix and a counter further on) would otherwise
 * all share one chain and make every lookup linear in the index size. */
_Static_assert(KVT_KEY_BYTES % 8 == 0, "findex_bucket reads the key in words");

static size_t findex_bucket(size_t nbuckets, const kvt_key *k)
{
	uint64_t w[KVT_KEY_BYTES / 8], h = 0;
	size_t i;

	memcpy(w, k->b, sizeof(w));
	for (i = 0; i < KVT_KEY_BYTES / 8; i++)
		h = (h ^ w[i]) * 0x9e3779b97f4a7c15ull;
	return (size_t)((h ^ (h >> 32)) & (nbuckets - 1));
}

int kvt_findex_init(struct kvt_findex *ix, uint64_t capacity)
{
	memset(ix, 0, sizeof(*ix));
	ix->nbuckets = FINDEX_MIN_BUCKETS;
	ix->buckets = calloc(ix->nbuckets, sizeof(*ix->buckets));
	if (!ix->buckets)
		return -1;
	ix->capacity = capacity;
	pthread_mutex_init(&ix->mu, NULL);
	return 0;
}

void kvt_findex_fini(struct kvt_findex *ix)
{
	struct kvt_findex_ent *e, *next;

	if (!ix->buckets)
		return;
	for (e = ix->mru; e; e = next) {
		next = e->older;
		free(e);
	}
	for (size_t i = 0; i < ix->bad_nb; i++)
		while (ix->bad[i]) {
			struct kvt_findex_bad *b = ix->bad[i];
			ix->bad[i] = b->next;
			free(b);
		}
	free(ix->bad);
	ix->bad = NULL;
	ix->bad_nb = 0;
	free(ix->buckets);
	ix->buckets = NULL;
	pthread_mutex_destroy(&ix->mu);
}

struct kvt_findex_ent *kvt_findex_find_locked(const struct kvt_findex *ix,
					      const kvt_key *k)
{
	struct kvt_findex_ent *e = ix->buckets[findex_bucket(ix->nbuckets, k)];

	while (e && memcmp(e->key.b, k->b, KVT_KEY_BYTES))
		e = e->hnext;
	return e;
}

static void findex_lru_del(struct kvt_findex *ix, struct kvt_findex_ent *e)
{
	*(e->newer ? &e->newer->older : &ix->mru) = e->older;
	*(e->older ? &e->older->newer : &ix->lru) = e->newer;
	e->newer = e->older = NULL;
}

static void findex_lru_add(struct kvt_findex *ix, struct kvt_findex_ent *e)
{
	e->newer = NULL;
	e->older = ix->mru;
	*(ix->mru ? &ix->mru->newer : &ix->lru) = e;
	ix->mru = e;
}

void kvt_findex_touch_locked(struct kvt_findex *ix, struct kvt_findex_ent *e)
{
	findex_lru_del(ix, e);
	findex_lru_add(ix, e);
}

/* Double the table when it holds as many entries as buckets.  Growing is
 * best effort: if memory is short the chains just get longer. */
static void findex_grow(struct kvt_findex *ix)
{
	size_t n = ix->nbuckets * 2, i;
	struct kvt_findex_ent **nb = calloc(n, sizeof(*nb));

	if (!nb)
		return;
	for (i = 0; i < ix->nbuckets; i++) {
		struct kvt_findex_ent *x = ix->buckets[i], *next;
		for (; x; x = next) {
			size_t b = findex_bucket(n, &x->key);
			next = x->hnext;
			x->hnext = nb[b];
			nb[b] = x;
		}
	}
	free(ix->buckets);
	ix->buckets = nb;
	ix->nbuckets = n;
}

void kvt_findex_insert_locked(struct kvt_findex *ix, struct kvt_findex_ent *e)
{
	size_t b;

	if (ix->count >= ix->nbuckets)
		findex_grow(ix);
	b = findex_bucket(ix->nbuckets, &e->key);
	e->hnext = ix->buckets[b];
	ix->buckets[b] = e;
	e->gen = ++ix->gen;
	findex_lru_add(ix, e);
	ix->count++;
	ix->used += e->charge;
}

void kvt_findex_remove_locked(struct kvt_findex *ix, struct kvt_findex_ent *e)
{
	struct kvt_findex_ent **p =
		&ix->buckets[findex_bucket(ix->nbuckets, &e->key)];

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	e->hnext = NULL;
	findex_lru_del(ix, e);
	ix->count--;
	ix->used -= e->charge;
}

void kvt_findex_evict_locked(struct kvt_findex *ix, uint64_t need,
			     const struct kvt_findex_ent *keep,
			     struct kvt_findex_ent **victims)
{
	while (ix->lru && ix->lru != keep &&
	       ix->used + ix->reserved + need > ix->capacity) {
		struct kvt_findex_ent *e = ix->lru;
		kvt_findex_remove_locked(ix, e);
		ix->st.evictions++;
		ix->st.evicted_bytes += e->len;
		e->hnext = *victims;
		*victims = e;
	}
}

void kvt_findex_insert_ordered_locked(struct kvt_findex *ix,
				      struct kvt_findex_ent *e,
				      int (*older)(const struct kvt_findex_ent *a,
						   const struct kvt_findex_ent *b))
{
	struct kvt_findex_ent *x;

	kvt_findex_insert_locked(ix, e); /* the most recent, to begin with */
	x = e->older;
	if (!x || !older(e, x))
		return;
	while (x->older && older(e, x->older))
		x = x->older;
	/* e belongs just older than x. */
	findex_lru_del(ix, e);
	e->newer = x;
	e->older = x->older;
	*(x->older ? &x->older->newer : &ix->lru) = e;
	x->older = e;
}

void kvt_findex_swap_entries_locked(struct kvt_findex *a, struct kvt_findex *b)
{
	struct kvt_findex_ent **buckets = a->buckets, *mru = a->mru, *lru = a->lru;
	size_t nbuckets = a->nbuckets;
	uint64_t count = a->count, used = a->used;

	a->buckets = b->buckets;
	a->nbuckets = b->nbuckets;
	a->mru = b->mru;
	a->lru = b->lru;
	a->count = b->count;
	a->used = b->used;
	b->buckets = buckets;
	b->nbuckets = nbuckets;
	b->mru = mru;
	b->lru = lru;
	b->count = count;
	b->used = used;
	/* Generations stay unique across both. */
	a->gen = b->gen = a->gen > b->gen ? a->gen : b->gen;
}

int kvt_findex_reserve(struct kvt_findex *ix, const kvt_key *key,
		       uint64_t charge, struct kvt_findex_ent **victims,
		       uint64_t *reserved)
{
	int rc = 0;

	pthread_mutex_lock(&ix->mu);
	if (charge > ix->capacity) {
		ix->st.put_rejects++;
		rc = KVT_ETOOBIG;
	} else if (kvt_findex_find_locked(ix, key)) {
		ix->st.put_exists++;
		rc = KVT_EEXIST;
	} else if (ix->reserved + charge > ix->capacity) {
		/* Everything published can be evicted; only writes in flight
		 * cannot. */
		ix->st.put_rejects++;
		rc = KVT_EFULL;
	} else {
		kvt_findex_evict_locked(ix, charge, NULL, victims);
		ix->reserved += charge;
	}
	*reserved = ix->reserved;
	pthread_mutex_unlock(&ix->mu);
	return rc;
}

void kvt_findex_unreserve(struct kvt_findex *ix, uint64_t charge)
{
	pthread_mutex_lock(&ix->mu);
	ix->reserved -= charge;
	pthread_mutex_unlock(&ix->mu);
}

void kvt_findex_reap(kvt_tier *t, struct kvt_findex_ent *victims, kvt_io *io,
		     const char *root, const char *tier)
{
	char path[PATH_MAX];

	while (victims) {
		struct kvt_findex_ent *e = victims;
		int rc;
		victims = e->hnext;
		kvt_tier_evicted(t, &e->key);
		kvt_fanout_final_path(root, &e->key, path);
		rc = io->unlink(io, path);
		if (rc && rc != -ENOENT)
			kvt_log(KVT_LOG_WARN, "%s: evicting %s: unlink: %s",
				tier, path, kvt_strerror(rc));
		free(e);
	}
}

/* Double the bad list's buckets (caller holds ix->mu): 0 or -1. */
static int findex_bad_grow(struct kvt_findex *ix)
{
	size_t n = ix->bad_nb ? ix->bad_nb * 2 : 64;
	struct kvt_findex_bad **nb = calloc(n, sizeof(*nb));

	if (!nb)
		return ix->bad_nb ? 0 : -1; /* longer chains, still correct */
	for (size_t i = 0; i < ix->bad_nb; i++)
		while (ix->bad[i]) {
			struct kvt_findex_bad *b = ix->bad[i];
			size_t h = findex_bucket(n, &b->key);
			ix->bad[i] = b->next;
			b->next = nb[h];
			nb[h] = b;
		}
	free(ix->bad);
	ix->bad = nb;
	ix->bad_nb = n;
	return 0;
}

void kvt_findex_bad_put(struct kvt_findex *ix, const struct kvt_findex_bad *b)
{
	struct kvt_findex_bad *c = malloc(sizeof(*c));

	if (!c)
		return;
	*c = *b;
	pthread_mutex_lock(&ix->mu);
	if (ix->nbad >= ix->bad_nb && findex_bad_grow(ix)) {
		pthread_mutex_unlock(&ix->mu);
		free(c); /* without memory it is only not listed */
		return;
	}
	size_t h = findex_bucket(ix->bad_nb, &c->key);
	c->next = ix->bad[h];
	ix->bad[h] = c;
	ix->nbad++;
	pthread_mutex_unlock(&ix->mu);
}

/* Names tried before giving up: a clash means another writer of this key
 * in this process drew the same counter, which cannot repeat for long. */
#define FINDEX_TMP_TRIES 4

int kvt_findex_tmp_open(kvt_io *io, const char *root, const kvt_key *key,
			int *direct, const char *tier, char tmp[PATH_MAX])
{
	char hex[KVT_FANOUT_HEX + 1];
	int fd = -ENOENT, rc, i;

	kvt_fanout_hex(key, hex);
	for (i = 0; i < FINDEX_TMP_TRIES; i++) {
		kvt_fanout_tmp_path(root, hex, tmp);
		fd = io->open(io, tmp, O_WRONLY | O_CREAT | O_EXCL |
			      (*direct ? O_DIRECT : 0), KVT_FILE_MODE);
		if (fd == -EINVAL && *direct) {
			/* Some file systems create the file and then refuse
			 * O_DIRECT: drop it, write this one buffered. */
			io->unlink(io, tmp);
			*direct = 0;
			continue;
		}
		if (fd == -ENOENT) {
			/* Someone removed tmp/: recreate it, but never the
			 * root (a vanished root is an unmounted device; see
			 * kvt_fanout_mktmp). */
			if ((rc = kvt_fanout_mktmp(io, root, tier)))
				return rc;
			continue;
		}
		if (fd != -EEXIST) /* EEXIST: a name clash; take another */
			break;
	}
	if (fd < 0)
		return kvt_err(fd, "%s: open %s: %s", tier, tmp, kvt_strerror(fd));
	return fd;
}

int kvt_findex_publish(struct kvt_findex *ix, kvt_io *io, const char *root,
		       const char *tmp, const char *fin, int durability,
		       int retries, int replace_unproven, const char *tier)
{
	int rc = kvt_fanout_link(io, root, tmp, fin, durability, retries, tier);
	int rc2;

	if (rc == -EEXIST && ix->nbad) {
		struct kvt_findex_bad b;
		kvt_key key;
		const char *name = strrchr(fin, '/');
		if (name && !kvt_fanout_unhex(name + 1, key.b, KVT_KEY_BYTES) &&
		    kvt_findex_bad_take(ix, &key, &b)) {
			if (b.proven || replace_unproven) {
				rc = kvt_findex_quarantine(io, root, fin, &b, tier);
				if (!rc)
					rc = kvt_fanout_link(io, root, tmp, fin,
							     durability, retries, tier);
			} else {
				/* Not ours to judge: the file stays the
				 * first version, and stays listed. */
				kvt_findex_bad_put(ix, &b);
			}
		}
	}
	rc2 = io->unlink(io, tmp);

	if (rc2 && rc2 != -ENOENT)
		kvt_log(KVT_LOG_WARN, "%s: unlink %s: %s", tier, tmp,
			kvt_strerror(rc2));
	if (rc == -EEXIST) {
		pthread_mutex_lock(&ix->mu);
		ix->st.put_exists++;
		pthread_mutex_unlock(&ix->mu);
	}
	return rc;
}

int kvt_findex_publish_durable(struct kvt_findex *ix, kvt_fanout *durable,
			       kvt_io *io, const char *root, const kvt_key *key,
			       const char *tmp, const char *fin, int durability,
			       int retries, int replace_unproven, const char *tier)
{
	int rc = kvt_findex_publish(ix, io, root, tmp, fin, durability, retries,
				    replace_unproven, tier);

	if (rc || durability != KVT_DUR_POWER_SAFE)
		return rc;
	rc = kvt_fanout_durable(durable, io, root, key, fin);
	if (!rc && (rc = kvt_io_fsync_parent(io, fin)))
		kvt_err(rc, "%s: fsync directory of %s: %s", tier, fin, kvt_strerror(rc));
	if (rc) {
		/* Published but maybe not durable: take the name back. */
		io->unlink(io, fin);
		return rc;
	}
	return 0;
}

int kvt_findex_exists(struct kvt_findex *ix, const kvt_key *key)
{
	int found;

	pthread_mutex_lock(&ix->mu);
	found = kvt_findex_find_locked(ix, key) != NULL;
	pthread_mutex_unlock(&ix->mu);
	return found;
}

struct kvt_findex_ent *kvt_findex_drop(struct kvt_findex *ix,
				       const kvt_key *key, uint64_t gen,
				       int corrupt, int *other)
{
	struct kvt_findex_ent *e;

	pthread_mutex_lock(&ix->mu);
	e = kvt_findex_find_locked(ix, key);
	if (other)
		*other = e && e->gen != gen;
	if (e && e->gen == gen)
		kvt_findex_remove_locked(ix, e);
	else
		e = NULL;
	if (corrupt > 0)
		ix->st.corrupt++;
	else if (corrupt == 0)
		ix->st.misses++;
	pthread_mutex_unlock(&ix->mu);
	return e;
}

struct kvt_findex_ent *kvt_findex_forget(struct kvt_findex *ix,
					 const kvt_key *key, int corrupt)
{
	struct kvt_findex_ent *e;

	pthread_mutex_lock(&ix->mu);
	e = kvt_findex_find_locked(ix, key);
	if (e)
		kvt_findex_remove_locked(ix, e);
	if (corrupt)
		ix->st.corrupt++;
	pthread_mutex_unlock(&ix->mu);
	return e;
}

typedef struct findex_item {
	kvt_key key;
	uint64_t len;
} findex_item;

int kvt_findex_iterate(struct kvt_findex *ix, const char *tier,
		       int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		       void *arg)
{
	findex_item *items;
	struct kvt_findex_ent *e;
	size_t n = 0, i;
	int rc = 0;

	pthread_mutex_lock(&ix->mu);
	items = malloc((ix->count ? ix->count : 1) * sizeof(*items));
	for (e = ix->mru; items && e; e = e->older) {
		items[n].key = e->key;
		items[n++].len = e->len;
	}
	pthread_mutex_unlock(&ix->mu);
	if (!items)
		return kvt_err(KVT_ENOMEM, "%s: no memory to iterate", tier);
	for (i = 0; i < n && !rc; i++)
		rc = fn(arg, &items[i].key, items[i].len);
	free(items);
	return rc;
}

void kvt_findex_stats(struct kvt_findex *ix, kvt_tier_stats *out,
		      const char *name, uint64_t borrowed)
{
	pthread_mutex_lock(&ix->mu);
	*out = ix->st;
	out->capacity_bytes = ix->capacity;
	out->used_bytes = ix->used;
	out->chunks = ix->count;
	out->bad_listed = ix->nbad;
	pthread_mutex_unlock(&ix->mu);
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->borrowed = borrowed;
}

/* --- bad files -------------------------------------------------------------- */

void kvt_findex_note_bad(struct kvt_findex *ix, const kvt_key *key,
			 const struct stat *st, int proven, const char *path,
			 const char *why, const char *tier)
{
	struct kvt_findex_bad b;

	kvt_log(KVT_LOG_WARN, "%s: %s %s: %s; not served, left in place%s", tier,
		proven ? "bad object" : "cannot verify", path, why,
		proven ? " until repaired or replaced" : "");
	memset(&b, 0, sizeof(b));
	b.key = *key;
	if (st) {
		b.dev = st->st_dev;
		b.ino = st->st_ino;
		b.ctim = st->st_ctim;
		b.size = (uint64_t)st->st_size;
	}
	b.proven = proven;
	snprintf(b.why, sizeof(b.why), "%s", why);
	kvt_findex_bad_take(ix, key, NULL);
	pthread_mutex_lock(&ix->mu);
	ix->st.corrupt++;
	pthread_mutex_unlock(&ix->mu);
	kvt_findex_bad_put(ix, &b); /* best effort: without memory, only unlisted */
}

int kvt_findex_bad_take(struct kvt_findex *ix, const kvt_key *key,
			struct kvt_findex_bad *out)
{
	struct kvt_findex_bad **p, *b = NULL;

	pthread_mutex_lock(&ix->mu);
	for (p = ix->bad_nb ? &ix->bad[findex_bucket(ix->bad_nb, key)] : &b; *p;
	     p = &(*p)->next) {
		if (!memcmp((*p)->key.b, key->b, KVT_KEY_BYTES)) {
			b = *p;
			*p = b->next;
			ix->nbad--;
			break;
		}
	}
	pthread_mutex_unlock(&ix->mu);
	if (!b)
		return 0;
	if (out) {
		*out = *b;
		out->next = NULL;
	}
	free(b);
	return 1;
}

int kvt_findex_bad_iterate(struct kvt_findex *ix, const char *tier,
			   int (*fn)(void *arg, const struct kvt_findex_bad *b),
			   void *arg)
{
	struct kvt_findex_bad *items, *b;
	size_t n = 0, i;
	int rc = 0;

	pthread_mutex_lock(&ix->mu);
	items = malloc((ix->nbad ? ix->nbad : 1) * sizeof(*items));
	for (size_t k = 0; items && k < ix->bad_nb; k++)
		for (b = ix->bad[k]; b; b = b->next)
			items[n++] = *b;
	pthread_mutex_unlock(&ix->mu);
	if (!items)
		return kvt_err(KVT_ENOMEM, "%s: no memory to list bad files", tier);
	for (i = 0; i < n && !rc; i++)
		rc = fn(arg, &items[i]);
	free(items);
	return rc;
}

int kvt_findex_bad_same(const struct kvt_findex_bad *b, const struct stat *st)
{
	/* Inode numbers are reused at once: the change time must match too. */
	return st->st_dev == b->dev && st->st_ino == b->ino &&
	       st->st_ctim.tv_sec == b->ctim.tv_sec &&
	       st->st_ctim.tv_nsec == b->ctim.tv_nsec;
}

int kvt_findex_quarantine(kvt_io *io, const char *root, const char *fin,
			  const struct kvt_findex_bad *b, const char *tier)
{
	char dir[PATH_MAX], to[PATH_MAX + 96], why[PATH_MAX + 112];
	char hex[KVT_FANOUT_HEX + 1];
	char note[512];
	struct stat st;
	time_t now = time(NULL);
	int rc, fd, len;

	rc = io->stat(io, fin, &st);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return kvt_err(rc, "%s: stat %s: %s", tier, fin, kvt_strerror(rc));
	if (b->ino && !kvt_findex_bad_same(b, &st))
		return 0; /* replaced since: not the file found bad */
	snprintf(dir, sizeof(dir), "%s/quarantine", root);
	rc = io->mkdir(io, dir, KVT_DIR_MODE);
	if (rc && rc != -EEXIST)
		return kvt_err(rc, "%s: mkdir %s: %s", tier, dir, kvt_strerror(rc));
	kvt_fanout_hex(&b->key, hex);
	snprintf(to, sizeof(to), "%s/%s.%lld.kvt", dir, hex, (long long)now);
	rc = io->rename(io, fin, to);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return kvt_err(rc, "%s: quarantine %s -> %s: %s", tier, fin, to,
			       kvt_strerror(rc));
	snprintf(why, sizeof(why), "%s.why", to);
	len = snprintf(note, sizeof(note), "%s\nwas %s\nmoved %lld\n", b->why,
		       fin, (long long)now);
	fd = io->open(io, why, O_WRONLY | O_CREAT | O_TRUNC, KVT_FILE_MODE);
	if (fd >= 0) {
		if (io->pwrite(io, fd, note, (size_t)len, 0) != len)
			kvt_log(KVT_LOG_WARN, "%s: cannot write %s", tier, why);
		io->close(io, fd);
	}
	kvt_log(KVT_LOG_WARN, "%s: moved %s to %s: %s", tier, fin, to, b->why);
	return 0;
}

typedef struct findex_bad_walk {
	const char *root;
	int (*fn)(void *arg, const kvt_key *key, const char *where, int proven,
		  const char *why);
	void *arg;
} findex_bad_walk;

static int findex_bad_one(void *arg, const struct kvt_findex_bad *b)
{
	findex_bad_walk *w = arg;
	char path[PATH_MAX];

	kvt_fanout_final_path(w->root, &b->key, path);
	return w->fn(w->arg, &b->key, path, b->proven, b->why);
}

int kvt_findex_tier_bad_iterate(struct kvt_findex *ix, const char *root,
				const char *tier,
				int (*fn)(void *arg, const kvt_key *key,
					  const char *where, int proven,
					  const char *why),
				void *arg)
{
	findex_bad_walk w = { root, fn, arg };

	return kvt_findex_bad_iterate(ix, tier, findex_bad_one, &w);
}

int kvt_findex_tier_repair(struct kvt_findex *ix, kvt_io *io, const char *root,
			   const kvt_key *key, int shared, const char *tier)
{
	struct kvt_findex_bad b;
	char path[PATH_MAX];
	int rc;

	if (!kvt_findex_bad_take(ix, key, &b))
		return KVT_ENOTFOUND;
	kvt_fanout_final_path(root, key, path);
	if (shared && !b.proven) {
		kvt_findex_bad_put(ix, &b);
		return kvt_err(KVT_ENOTSUP,
			       "%s: %s left in place: %s; another node may be able to read it",
			       tier, path, b.why);
	}
	rc = kvt_findex_quarantine(io, root, path, &b, tier);
	if (rc)
		kvt_findex_bad_put(ix, &b);
	return rc;
}

/* --- rebuild at open ------------------------------------------------------ */

typedef struct findex_found {
	kvt_key key;
	uint64_t len;
	struct timespec mtime;
} findex_found;

typedef struct findex_scan {
	struct kvt_findex *ix;
	kvt_io *io;
	const char *tier;
	const kvt_findex_scan_ops *ops;
	void *arg;
	char dir[PATH_MAX]; /* the directory being read */
	uint8_t k[2];       /* its fan-out bytes so far */
	int depth;
	findex_found *found;
	size_t n, cap;
	int err;
} findex_scan;

/* A name that is not ours to make: another tool's file.  Left alone. */
static void findex_scan_foreign(findex_scan *s, const char *path,
				const char *why)
{
	kvt_log(KVT_LOG_WARN, "%s: ignoring %s: %s", s->tier, path, why);
}

static void findex_scan_file(findex_scan *s, const char *name)
{
	char path[PATH_MAX], why[256];
	findex_found f;
	struct stat st;
	int rc;

	memset(&f, 0, sizeof(f));
	if (snprintf(path, sizeof(path), "%s/%s", s->dir, name) >=
	    (int)sizeof(path))
		return; /* not a name we would have made */
	if (strlen(name) != KVT_FANOUT_HEX + 4 ||
	    kvt_fanout_unhex(name, f.key.b, KVT_KEY_BYTES)) {
		findex_scan_foreign(s, path, "name is not <64 hex digits>.kvt");
		return;
	}
	if (f.key.b[0] != s->k[0] || f.key.b[1] != s->k[1]) {
		findex_scan_foreign(s, path, "in the wrong fan-out directory");
		return;
	}
	why[0] = '\0';
	memset(&st, 0, sizeof(st));
	rc = s->ops->check(s->arg, path, &f.key, &f.len, &st, why);
	if (rc == KVT_FINDEX_BAD || rc == KVT_FINDEX_UNVERIFIABLE)
		kvt_findex_note_bad(s->ix, &f.key, &st, rc == KVT_FINDEX_BAD,
				    path, why, s->tier);
	if (rc == KVT_FINDEX_GOOD)
		f.mtime = st.st_mtim;
	if (rc < 0)
		s->err = rc;
	if (rc)
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		findex_found *nf = realloc(s->found, cap * sizeof(*nf));
		if (!nf) {
			s->err = kvt_err(KVT_ENOMEM, "%s: no memory for the index",
					 s->tier);
			return;
		}
		s->found = nf;
		s->cap = cap;
	}
	s->found[s->n++] = f;
}

static int findex_scan_entry(void *arg, const char *name, int is_dir)
{
	findex_scan *s = arg;
	size_t n = strlen(name), dl;
	uint8_t b;
	int rc;

	if (s->depth == 2) {
		/* Only our own names: NFS leaves .nfsXXXX files of unlinked
		 * open files, and other tools may put things here. */
		if (!is_dir && n > 4 && !strcmp(name + n - 4, ".kvt"))
			findex_scan_file(s, name);
		return s->err;
	}
	if (!is_dir || n != 2 || kvt_fanout_unhex(name, &b, 1))
		return 0; /* tmp/ and anything not ours */
	dl = strlen(s->dir);
	if (dl + 3 >= sizeof(s->dir))
		return 0;
	snprintf(s->dir + dl, sizeof(s->dir) - dl, "/%s", name);
	s->k[s->depth++] = b;
	rc = s->io->readdir(s->io, s->dir, findex_scan_entry, s);
	s->depth--;
	if (rc == -ENOENT) /* removed meanwhile (another node's GC) */
		rc = 0;
	if (rc && !s->err)
		s->err = kvt_err(rc, "%s: readdir %s: %s", s->tier, s->dir,
				 kvt_strerror(rc));
	s->dir[dl] = '\0';
	return s->err;
}

static int findex_found_cmp(const void *a, const void *b)
{
	const struct timespec *x = &((const findex_found *)a)->mtime;
	const struct timespec *y = &((const findex_found *)b)->mtime;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	if (x->tv_nsec != y->tv_nsec)
		return x->tv_nsec < y->tv_nsec ? -1 : 1;
	return 0;
}

int kvt_findex_rebuild(struct kvt_findex *ix, kvt_io *io, const char *root,
		       const char *tier, const kvt_findex_scan_ops *ops,
		       void *arg)
{
	findex_scan *s = calloc(1, sizeof(*s));
	size_t i;
	int rc;

	if (!s)
		return kvt_err(KVT_ENOMEM, "%s: no memory to scan", tier);
	s->ix = ix;
	s->io = io;
	s->tier = tier;
	s->ops = ops;
	s->arg = arg;
	snprintf(s->dir, sizeof(s->dir), "%s", root);
	rc = io->readdir(io, root[0] ? root : "/", findex_scan_entry, s);
	if (rc && !s->err)
		s->err = kvt_err(rc, "%s: readdir %s/: %s", tier, root,
				 kvt_strerror(rc));
	rc = s->err;
	if (!rc && s->n)
		qsort(s->found, s->n, sizeof(*s->found), findex_found_cmp);
	for (i = 0; !rc && i < s->n; i++) {
		struct kvt_findex_ent *e = calloc(1, ops->ent_size);
		if (!e) {
			rc = kvt_err(KVT_ENOMEM, "%s: no memory for the index",
				     tier);
			break;
		}
		e->key = s->found[i].key;
		e->len = s->found[i].len;
		ops->init(arg, e);
		kvt_findex_insert_locked(ix, e);
	}
	if (!rc && ix->used > ix->capacity) {
		char a[32], b[32];
		kvt_log(KVT_LOG_WARN,
			"%s: %s holds %s, more than its capacity of %s; nothing is removed at open, the writer evicts the excess when it next needs room",
			tier, root[0] ? root : "/", kvt_fmt_size(ix->used, a, sizeof(a)),
			kvt_fmt_size(ix->capacity, b, sizeof(b)));
	}
	free(s->found);
	free(s);
	return rc;
}

int kvt_findex_peek_fd(kvt_io *io, int fd, size_t align, const char *tier, const char *path,
		       void *hdr, uint64_t off, void *buf, size_t len, uint64_t *image)
{
	struct stat st;
	int rc = io->fstat(io, fd, &st);

	if (!rc) {
		*image = (uint64_t)st.st_size;
		rc = kvt_io_pread_blocks(io, fd, align, hdr, KVT_OBJ_HEADER_BYTES, 0);
	}
	if (!rc)
		rc = kvt_io_pread_blocks(io, fd, align, buf, len, (off_t)off);
	io->close(io, fd);
	if (rc == -ENODATA)
		return kvt_err(KVT_ETRUNCATED, "%s: %s ends before byte %llu", tier, path,
			       (unsigned long long)(len ? off + len : KVT_OBJ_HEADER_BYTES));
	if (rc)
		return kvt_err(rc, "%s: read %s: %s", tier, path, kvt_strerror(rc));
	return 0;
}
