/*
 * fsdir.c — one object image per file in a (possibly shared) directory.
 *
 * Publication: write <root>/tmp/<hex>.<pid>.<n>.tmp, fsync it for
 * KVT_DUR_POWER_SAFE, link(2) it to <root>/<k0>/<k1>/<hex>.kvt, unlink the
 * temporary, fsync the directory for KVT_DUR_POWER_SAFE.  link fails with
 * EEXIST when the name exists, which is what makes the first writer win
 * across threads, processes and nodes without a lock server; rename(2) would
 * silently replace.  A name appears only after its whole image is written,
 * so a reader never sees a torn chunk: CRASH_SAFE needs no fsync because the
 * page cache outlives a killed process.
 *
 * The index is a chained hash table on the key's first 8 bytes (uniformly
 * random) and an LRU list, under one mutex.  This tier is bound by I/O, so
 * the mutex is held only to look up, insert or remove, never across a
 * system call; files of evicted entries are unlinked after it is dropped.
 * An entry carries a generation so that a reader that found a bad file
 * drops the entry it read, not one a concurrent put inserted since.
 *
 * Capacity covers published files plus the writes in flight (reserved at
 * put_begin), so temporaries never push the directory past it.
 */
#include "tier/fsdir.h"
#include "tier/fanout.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "format/object.h"

#define FSDIR_ALIGN 4096u
/* A hit refreshes the file's mtime at most this often (seconds): enough for
 * a directory-wide GC ordering by age, without a metadata write per read. */
#define FSDIR_TOUCH_INTERVAL_S 60
/* Temporaries older than this (seconds, by mtime) are stale at open.  Younger
 * ones may be another process's or node's write in progress in a shared
 * directory: removing those would fail their put. */
#define FSDIR_TMP_GRACE_S (15 * 60)
#define FSDIR_MIN_BUCKETS 1024u
/* Longest name below the root: "/tmp/" + 64 hex + "." + pid + "." + 20
 * digits + ".tmp", with room to spare. */
#define FSDIR_NAME_MAX 128u
#define FSDIR_HEX 64
#define FSDIR_TMP_TRIES 4

typedef struct fsdir_ent {
	kvt_key key;
	uint64_t len;     /* bytes of the file */
	uint64_t gen;     /* unique per insertion */
	int64_t touched;  /* CLOCK_MONOTONIC s of the last mtime refresh */
	struct fsdir_ent *hnext;
	struct fsdir_ent *newer, *older; /* LRU list */
} fsdir_ent;

typedef struct fsdir {
	kvt_tier base;
	kvt_io *io;
	char *root;
	uint64_t capacity;
	int verify_on_open;
	atomic_uint_fast64_t borrowed;
	kvt_fanout durable; /* directories of the tree made durable */

	pthread_mutex_t mu; /* guards everything below */
	fsdir_ent **buckets;
	size_t nbuckets;    /* power of two */
	fsdir_ent *mru, *lru;
	uint64_t count, used, reserved, gen;
	kvt_tier_stats st;  /* counters only; the rest is filled by stats() */
} fsdir;

typedef struct fsdir_wbuf {
	kvt_tier_wbuf w;
	struct iovec iov;
} fsdir_wbuf;

typedef struct fsdir_rbuf {
	kvt_tier_rbuf r;
	struct iovec iov;
	uint64_t gen;       /* the index entry it was read through */
	struct stat st;     /* the file it was read from */
} fsdir_rbuf;

/* Temporary names must differ between every writer of one directory, and
 * pids repeat across nodes (containers often run as pid 1): the counter is
 * process-wide and starts at a random value. */
static atomic_uint_fast64_t fsdir_tmp_seq;
static pthread_once_t fsdir_tmp_once = PTHREAD_ONCE_INIT;

static void fsdir_tmp_seed(void)
{
	uint64_t r = 0;
	struct timespec ts;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		clock_gettime(CLOCK_REALTIME, &ts);
		r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^
		    (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
	}
	atomic_store(&fsdir_tmp_seq, r >> 16); /* headroom before wrapping */
}

static int64_t fsdir_mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec;
}

/* --- names ---------------------------------------------------------------- */

static void fsdir_hex(const kvt_key *k, char out[FSDIR_HEX + 1])
{
	static const char digits[] = "0123456789abcdef";
	int i;

	for (i = 0; i < KVT_KEY_BYTES; i++) {
		out[2 * i] = digits[k->b[i] >> 4];
		out[2 * i + 1] = digits[k->b[i] & 15];
	}
	out[FSDIR_HEX] = '\0';
}

static int fsdir_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* we write lower case only; anything else is not ours */
}

/* Parse `n` bytes of lower-case hex; 0 or -1. */
static int fsdir_unhex(const char *s, uint8_t *out, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int hi = fsdir_nibble(s[2 * i]), lo = fsdir_nibble(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static void fsdir_final_path(const fsdir *t, const kvt_key *k,
			     char out[PATH_MAX])
{
	char hex[FSDIR_HEX + 1];

	fsdir_hex(k, hex);
	snprintf(out, PATH_MAX, "%s/%.2s/%.2s/%s.kvt", t->root, hex, hex + 2,
		 hex);
}

static void fsdir_tmp_path(const fsdir *t, const kvt_key *k,
			   char out[PATH_MAX])
{
	char hex[FSDIR_HEX + 1];
	uint64_t n = atomic_fetch_add(&fsdir_tmp_seq, 1);

	fsdir_hex(k, hex);
	snprintf(out, PATH_MAX, "%s/tmp/%s.%ld.%llu.tmp", t->root, hex,
		 (long)getpid(), (unsigned long long)n);
}

/* --- index (caller holds t->mu) -------------------------------------------- */

static size_t fsdir_bucket(const fsdir *t, const kvt_key *k)
{
	uint64_t h;

	memcpy(&h, k->b, sizeof(h));
	return (size_t)(h & (t->nbuckets - 1));
}

static fsdir_ent *fsdir_find(const fsdir *t, const kvt_key *k)
{
	fsdir_ent *e;

	for (e = t->buckets[fsdir_bucket(t, k)]; e; e = e->hnext)
		if (!memcmp(e->key.b, k->b, KVT_KEY_BYTES))
			return e;
	return NULL;
}

static void fsdir_lru_unlink(fsdir *t, fsdir_ent *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		t->mru = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		t->lru = e->newer;
	e->newer = e->older = NULL;
}

static void fsdir_lru_push(fsdir *t, fsdir_ent *e)
{
	e->newer = NULL;
	e->older = t->mru;
	if (t->mru)
		t->mru->newer = e;
	else
		t->lru = e;
	t->mru = e;
}

/* Double the table when it holds as many entries as buckets.  Growing is
 * best effort: if memory is short the chains just get longer. */
static void fsdir_grow(fsdir *t)
{
	size_t n = t->nbuckets * 2, i;
	fsdir_ent **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (i = 0; i < t->nbuckets; i++) {
		fsdir_ent *e = t->buckets[i], *next;
		for (; e; e = next) {
			uint64_t h;
			next = e->hnext;
			memcpy(&h, e->key.b, sizeof(h));
			e->hnext = b[h & (n - 1)];
			b[h & (n - 1)] = e;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
}

/* Insert `e` (not present) as the most recently used. */
static void fsdir_insert(fsdir *t, fsdir_ent *e)
{
	size_t b;

	if (t->count >= t->nbuckets)
		fsdir_grow(t);
	b = fsdir_bucket(t, &e->key);
	e->hnext = t->buckets[b];
	t->buckets[b] = e;
	e->gen = ++t->gen;
	fsdir_lru_push(t, e);
	t->count++;
	t->used += e->len;
}

static void fsdir_remove(fsdir *t, fsdir_ent *e)
{
	fsdir_ent **p = &t->buckets[fsdir_bucket(t, &e->key)];

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	e->hnext = NULL;
	fsdir_lru_unlink(t, e);
	t->count--;
	t->used -= e->len;
}

/* Evict least recently used entries, never `keep`, until `need` more bytes
 * fit.  Evicted entries go on *victims (chained by hnext) for the caller to
 * unlink once the mutex is dropped. */
static void fsdir_evict(fsdir *t, uint64_t need, const fsdir_ent *keep,
			fsdir_ent **victims)
{
	while (t->used + t->reserved + need > t->capacity && t->lru &&
	       t->lru != keep) {
		fsdir_ent *e = t->lru;
		fsdir_remove(t, e);
		t->st.evictions++;
		t->st.evicted_bytes += e->len;
		e->hnext = *victims;
		*victims = e;
	}
}

/* Unlink and free evicted entries; no lock held.  A file already gone
 * (another node's GC) is what we wanted anyway. */
static void fsdir_reap(fsdir *t, fsdir_ent *victims)
{
	char path[PATH_MAX];

	while (victims) {
		fsdir_ent *e = victims;
		int rc;
		victims = e->hnext;
		fsdir_final_path(t, &e->key, path);
		rc = t->io->unlink(t->io, path);
		if (rc && rc != -ENOENT)
			kvt_log(KVT_LOG_WARN, "fsdir: evicting %s: unlink: %s",
				path, kvt_strerror(rc));
		free(e);
	}
}

/* --- writes --------------------------------------------------------------- */

static int fsdir_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len,
			   kvt_tier_wbuf **out)
{
	fsdir *t = (fsdir *)tt;
	fsdir_ent *victims = NULL;
	fsdir_wbuf *w;
	void *buf = NULL;
	uint64_t reserved;
	int rc = 0;

	*out = NULL;
	if (len < KVT_OBJ_HEADER_BYTES || (uint64_t)(size_t)len != len)
		return kvt_err(KVT_EINVAL,
			       "fsdir: an image of %llu bytes is not possible",
			       (unsigned long long)len);
	pthread_mutex_lock(&t->mu);
	if (len > t->capacity) {
		t->st.put_rejects++;
		rc = KVT_ETOOBIG;
	} else if (fsdir_find(t, key)) {
		t->st.put_exists++;
		rc = KVT_EEXIST;
	} else if (t->reserved + len > t->capacity) {
		/* Everything published can be evicted; only writes in flight
		 * cannot. */
		t->st.put_rejects++;
		rc = KVT_EFULL;
	} else {
		fsdir_evict(t, len, NULL, &victims);
		t->reserved += len;
	}
	reserved = t->reserved;
	pthread_mutex_unlock(&t->mu);
	fsdir_reap(t, victims);
	if (rc == KVT_ETOOBIG)
		return kvt_err(rc, "fsdir: image of %llu bytes exceeds capacity %llu",
			       (unsigned long long)len,
			       (unsigned long long)t->capacity);
	if (rc == KVT_EFULL)
		return kvt_err(rc, "fsdir: %llu bytes of writes in flight leave no room for %llu",
			       (unsigned long long)reserved,
			       (unsigned long long)len);
	if (rc)
		return rc;

	w = calloc(1, sizeof(*w));
	if (!w || posix_memalign(&buf, FSDIR_ALIGN, (size_t)len)) {
		free(w);
		pthread_mutex_lock(&t->mu);
		t->reserved -= len;
		pthread_mutex_unlock(&t->mu);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory for a %llu-byte buffer",
			       (unsigned long long)len);
	}
	w->w.key = *key;
	w->w.len = len;
	w->iov.iov_base = buf;
	w->iov.iov_len = (size_t)len;
	w->w.iov = &w->iov;
	w->w.n_iov = 1;
	*out = &w->w;
	return 0;
}

static void fsdir_wbuf_free(fsdir *t, fsdir_wbuf *w)
{
	pthread_mutex_lock(&t->mu);
	t->reserved -= w->w.len;
	pthread_mutex_unlock(&t->mu);
	free(w->iov.iov_base);
	free(w);
}

static void fsdir_put_abort(kvt_tier *tt, kvt_tier_wbuf *ww)
{
	if (ww)
		fsdir_wbuf_free((fsdir *)tt, (fsdir_wbuf *)ww);
}

/* mkdir one fan-out level; for power safety, make a directory we created
 * durable in its parent too. */
static int fsdir_mkdir_level(fsdir *t, const char *dir, int durability)
{
	int rc = t->io->mkdir(t->io, dir, 0755);

	if (rc == -EEXIST)
		return 0;
	if (rc)
		return kvt_err(rc, "fsdir: mkdir %s: %s", dir, kvt_strerror(rc));
	if (durability == KVT_DUR_POWER_SAFE) {
		rc = kvt_io_fsync_parent(t->io, dir);
		if (rc)
			return kvt_err(rc, "fsdir: fsync parent of %s: %s", dir,
				       kvt_strerror(rc));
	}
	return 0;
}

/* link(tmp, fin), creating the fan-out directories on first use.  They are
 * made lazily (65536 of them up front would be a slow open on a shared file
 * system), and another node's GC may remove an empty one between our mkdir
 * and link: retry a few times. */
static int fsdir_link(fsdir *t, const char *tmp, const char *fin,
		      int durability)
{
	size_t rl = strlen(t->root);
	char dir[PATH_MAX];
	int rc, i;

	for (i = 0;; i++) {
		rc = t->io->link(t->io, tmp, fin);
		if (rc != -ENOENT || i == 3)
			break;
		memcpy(dir, fin, rl + 3); /* "<root>/k0" */
		dir[rl + 3] = '\0';
		rc = fsdir_mkdir_level(t, dir, durability);
		if (rc)
			return rc;
		memcpy(dir, fin, rl + 6); /* "<root>/k0/k1" */
		dir[rl + 6] = '\0';
		rc = fsdir_mkdir_level(t, dir, durability);
		if (rc)
			return rc;
	}
	if (rc && rc != -EEXIST)
		return kvt_err(rc, "fsdir: link %s -> %s: %s", tmp, fin,
			       kvt_strerror(rc));
	return rc;
}

/* Write the whole image to a fresh temporary and close it.  On failure the
 * temporary is removed and *tmp says nothing. */
static int fsdir_write_tmp(fsdir *t, fsdir_wbuf *w, int durability,
			   char tmp[PATH_MAX])
{
	kvt_io *io = t->io;
	const char *call;
	int fd = -ENOENT, rc, i;

	for (i = 0; i < FSDIR_TMP_TRIES; i++) {
		fsdir_tmp_path(t, &w->w.key, tmp);
		fd = io->open(io, tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd == -ENOENT) {
			/* Someone removed tmp/ (a clean-up script): recreate
			 * it, but never the root: a root that vanished is an
			 * unmounted file system, and recreating it would put
			 * the cache on the one underneath. */
			char dir[PATH_MAX];
			snprintf(dir, sizeof(dir), "%s/tmp", t->root);
			rc = io->mkdir(io, dir, 0755);
			if (rc == -ENOENT)
				return kvt_err(rc, "fsdir: directory %s has disappeared "
					       "(unmounted?); not recreating it", t->root);
			if (rc && rc != -EEXIST)
				return kvt_err(rc, "fsdir: mkdir %s: %s", dir,
					       kvt_strerror(rc));
			continue;
		}
		if (fd != -EEXIST) /* EEXIST: a name clash; take another */
			break;
	}
	if (fd < 0)
		return kvt_err(fd, "fsdir: open %s: %s", tmp, kvt_strerror(fd));

	call = "pwrite";
	rc = kvt_io_pwrite_all(io, fd, w->iov.iov_base, w->iov.iov_len, 0);
	if (!rc && durability == KVT_DUR_POWER_SAFE) {
		call = "fsync";
		rc = io->fsync(io, fd);
	}
	i = io->close(io, fd);
	if (!rc && i) {
		call = "close"; /* NFS reports deferred write errors here */
		rc = i;
	}
	if (rc) {
		io->unlink(io, tmp);
		return kvt_err(rc, "fsdir: %s %s: %s", call, tmp,
			       kvt_strerror(rc));
	}
	return 0;
}

/* After losing the race to another writer (maybe another node), index the
 * winner's file so that this node serves it; get checks it like any other. */
static void fsdir_adopt(fsdir *t, const kvt_key *key, const char *fin)
{
	struct stat st;
	fsdir_ent *e;

	if (t->io->stat(t->io, fin, &st) || !S_ISREG(st.st_mode))
		return;
	e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->key = *key;
	e->len = (uint64_t)st.st_size;
	e->touched = fsdir_mono_s();
	pthread_mutex_lock(&t->mu);
	if (!fsdir_find(t, key)) {
		fsdir_insert(t, e);
		e = NULL;
	}
	pthread_mutex_unlock(&t->mu);
	free(e);
}

static int fsdir_put_commit(kvt_tier *tt, kvt_tier_wbuf *ww, int durability)
{
	fsdir *t = (fsdir *)tt;
	fsdir_wbuf *w = (fsdir_wbuf *)ww;
	char tmp[PATH_MAX], fin[PATH_MAX];
	fsdir_ent *e = NULL, *old, *victims = NULL;
	uint64_t len = w->w.len;
	int rc, rc2;

	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE) {
		rc = kvt_err(KVT_EINVAL, "fsdir: durability %d unknown",
			     durability);
		goto out;
	}
	/* Allocated first so that, once the name is published, nothing can
	 * keep it out of the index. */
	e = calloc(1, sizeof(*e));
	if (!e) {
		rc = kvt_err(KVT_ENOMEM, "fsdir: no memory for an index entry");
		goto out;
	}
	fsdir_final_path(t, &w->w.key, fin);
	rc = fsdir_write_tmp(t, w, durability, tmp);
	if (rc)
		goto out;
	rc = fsdir_link(t, tmp, fin, durability);
	rc2 = t->io->unlink(t->io, tmp);
	if (rc2 && rc2 != -ENOENT)
		kvt_log(KVT_LOG_WARN, "fsdir: unlink %s: %s", tmp,
			kvt_strerror(rc2));
	if (rc == -EEXIST) {
		pthread_mutex_lock(&t->mu);
		t->st.put_exists++;
		pthread_mutex_unlock(&t->mu);
		fsdir_adopt(t, &w->w.key, fin);
		rc = kvt_err(KVT_EEXIST, "fsdir: %s was published by another writer",
			     fin);
		goto out;
	}
	if (rc)
		goto out;
	if (durability == KVT_DUR_POWER_SAFE)
		rc = kvt_fanout_durable(&t->durable, t->io, t->root, &w->w.key, fin);
	if (rc) {
		t->io->unlink(t->io, fin);
		goto out;
	}
	if (durability == KVT_DUR_POWER_SAFE) {
		rc = kvt_io_fsync_parent(t->io, fin);
		if (rc) {
			/* The name may not survive a power cut: take it back,
			 * so that a failed put leaves nothing visible. */
			t->io->unlink(t->io, fin);
			rc = kvt_err(rc, "fsdir: fsync parent of %s: %s", fin,
				     kvt_strerror(rc));
			goto out;
		}
	}

	e->key = w->w.key;
	e->len = len;
	e->touched = fsdir_mono_s();
	pthread_mutex_lock(&t->mu);
	t->reserved -= len;
	w->w.len = 0; /* reservation released here, not in fsdir_wbuf_free */
	old = fsdir_find(t, &e->key);
	if (old) /* a concurrent loser adopted our file first */
		fsdir_remove(t, old);
	fsdir_insert(t, e);
	t->st.puts++;
	t->st.bytes_in += len;
	/* Adopted files are not reserved for, so this can still be over. */
	fsdir_evict(t, 0, e, &victims);
	pthread_mutex_unlock(&t->mu);
	free(old);
	fsdir_reap(t, victims);
	e = NULL;
out:
	free(e);
	fsdir_wbuf_free(t, w);
	return rc;
}

/* --- reads ---------------------------------------------------------------- */

/* Drop the entry a reader found bad (if it is still the one it read) and
 * the file (if it is still the inode it read: a writer may have published a
 * good one since). */
static void fsdir_drop_bad(fsdir *t, const kvt_key *key, uint64_t gen,
			   const char *path, const struct stat *read_st,
			   int corrupt)
{
	fsdir_ent *e;
	struct stat now;
	int newer = 0;

	pthread_mutex_lock(&t->mu);
	e = fsdir_find(t, key);
	if (e && e->gen == gen) {
		fsdir_remove(t, e);
	} else {
		newer = e != NULL; /* this node published another since */
		e = NULL;
	}
	if (corrupt)
		t->st.corrupt++;
	else
		t->st.misses++;
	pthread_mutex_unlock(&t->mu);
	free(e);
	/* Another node may have replaced the file too: unlink only the file
	 * that was read.  Inode numbers are reused at once, so the change
	 * time must match as well. */
	if (!newer && read_st && !t->io->stat(t->io, path, &now) &&
	    now.st_ino == read_st->st_ino && now.st_dev == read_st->st_dev &&
	    now.st_ctim.tv_sec == read_st->st_ctim.tv_sec &&
	    now.st_ctim.tv_nsec == read_st->st_ctim.tv_nsec)
		t->io->unlink(t->io, path);
}

static int fsdir_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **out)
{
	fsdir *t = (fsdir *)tt;
	char path[PATH_MAX], why[256];
	kvt_obj_hdr h;
	fsdir_rbuf *r = NULL;
	fsdir_ent *e;
	struct stat st;
	uint64_t gen, size;
	int64_t now = fsdir_mono_s();
	void *buf = NULL;
	int fd, rc, touch = 0;

	*out = NULL;
	pthread_mutex_lock(&t->mu);
	e = fsdir_find(t, key);
	if (!e) {
		t->st.misses++;
		pthread_mutex_unlock(&t->mu);
		return KVT_ENOTFOUND;
	}
	gen = e->gen;
	fsdir_lru_unlink(t, e);
	fsdir_lru_push(t, e);
	if (now - e->touched >= FSDIR_TOUCH_INTERVAL_S) {
		e->touched = now;
		touch = 1;
	}
	pthread_mutex_unlock(&t->mu);

	fsdir_final_path(t, key, path);
	fd = t->io->open(t->io, path, O_RDONLY, 0);
	if (fd == -ENOENT) {
		/* Removed behind our back (another node's GC): a miss. */
		fsdir_drop_bad(t, key, gen, path, NULL, 0);
		return KVT_ENOTFOUND;
	}
	if (fd < 0)
		return kvt_err(fd, "fsdir: open %s: %s", path, kvt_strerror(fd));
	rc = t->io->fstat(t->io, fd, &st);
	if (rc) {
		t->io->close(t->io, fd);
		return kvt_err(rc, "fsdir: fstat %s: %s", path, kvt_strerror(rc));
	}
	size = (uint64_t)st.st_size;
	if (size < KVT_OBJ_HEADER_BYTES ||
	    size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD ||
	    (uint64_t)(size_t)size != size) {
		t->io->close(t->io, fd);
		snprintf(why, sizeof(why), "file is %llu bytes",
			 (unsigned long long)size);
		goto bad;
	}
	r = calloc(1, sizeof(*r));
	if (!r || posix_memalign(&buf, FSDIR_ALIGN, (size_t)size)) {
		t->io->close(t->io, fd);
		free(r);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory to read %s", path);
	}
	rc = kvt_io_pread_all(t->io, fd, buf, (size_t)size, 0);
	t->io->close(t->io, fd);
	if (rc == -ENODATA) {
		snprintf(why, sizeof(why), "file shrank while read");
		goto bad;
	}
	if (rc) {
		/* A failing medium, not a bad object: report, keep the entry. */
		free(buf);
		free(r);
		return kvt_err(rc, "fsdir: pread %s: %s", path, kvt_strerror(rc));
	}
	rc = kvt_obj_hdr_decode(buf, (size_t)size, &h);
	if (rc) {
		snprintf(why, sizeof(why), "%s (%s)", kvt_strerror(rc),
			 kvt_errmsg());
		goto bad;
	}
	if (memcmp(h.key.b, key->b, KVT_KEY_BYTES)) {
		snprintf(why, sizeof(why), "header names another key");
		goto bad;
	}
	if ((uint64_t)h.header_len + h.payload_len != size) {
		snprintf(why, sizeof(why), "file is %llu bytes, header says %llu",
			 (unsigned long long)size,
			 (unsigned long long)h.header_len + h.payload_len);
		goto bad;
	}

	pthread_mutex_lock(&t->mu);
	t->st.hits++;
	t->st.bytes_out += size;
	e = fsdir_find(t, key);
	if (e && e->gen == gen && e->len != size) {
		/* Indexed from a stat of another writer's file, or replaced
		 * since: account for what is really there. */
		t->used = t->used - e->len + size;
		e->len = size;
	}
	pthread_mutex_unlock(&t->mu);
	/* A hint only; failure is harmless.  The file's change time moves
	 * with it: keep the identity a later corrupt() compares current. */
	if (touch && t->io->touch(t->io, path) == 0)
		(void)t->io->stat(t->io, path, &st);

	r->r.key = *key;
	r->r.len = size;
	r->iov.iov_base = buf;
	r->iov.iov_len = (size_t)size;
	r->r.iov = &r->iov;
	r->r.n_iov = 1;
	r->gen = gen;
	r->st = st;
	atomic_fetch_add(&t->borrowed, 1);
	*out = &r->r;
	return 0;

bad:
	free(buf);
	free(r);
	fsdir_drop_bad(t, key, gen, path, &st, 1);
	kvt_log(KVT_LOG_WARN, "fsdir: dropping %s: %s", path, why);
	return kvt_err(KVT_ECORRUPT, "fsdir: %s: %s", path, why);
}

static void fsdir_release(kvt_tier *tt, kvt_tier_rbuf *rr)
{
	fsdir *t = (fsdir *)tt;
	fsdir_rbuf *r = (fsdir_rbuf *)rr;

	if (!r)
		return;
	free(r->iov.iov_base);
	free(r);
	atomic_fetch_sub(&t->borrowed, 1);
}

/* --- the rest of the vtable ------------------------------------------------ */

static int fsdir_exists(kvt_tier *tt, const kvt_key *key)
{
	fsdir *t = (fsdir *)tt;
	int found;

	pthread_mutex_lock(&t->mu);
	found = fsdir_find(t, key) != NULL;
	pthread_mutex_unlock(&t->mu);
	return found;
}

/* Remove the entry of `key` and its file.  Returns whether it was indexed. */
static int fsdir_forget(fsdir *t, const kvt_key *key, int corrupt, int *urc)
{
	char path[PATH_MAX];
	fsdir_ent *e;

	pthread_mutex_lock(&t->mu);
	e = fsdir_find(t, key);
	if (e)
		fsdir_remove(t, e);
	if (corrupt)
		t->st.corrupt++;
	pthread_mutex_unlock(&t->mu);
	if (!e && !corrupt)
		return 0;
	fsdir_final_path(t, key, path);
	*urc = t->io->unlink(t->io, path);
	if (*urc == -ENOENT)
		*urc = 0;
	if (*urc)
		kvt_err(*urc, "fsdir: unlink %s: %s", path, kvt_strerror(*urc));
	free(e);
	return e != NULL;
}

static int fsdir_del(kvt_tier *tt, const kvt_key *key)
{
	int urc = 0;

	if (!fsdir_forget((fsdir *)tt, key, 0, &urc))
		return KVT_ENOTFOUND;
	return urc;
}

static void fsdir_corrupt(kvt_tier *tt, kvt_tier_rbuf *rb)
{
	fsdir *t = (fsdir *)tt;
	fsdir_rbuf *r = (fsdir_rbuf *)rb;
	char path[PATH_MAX];

	fsdir_final_path(t, &rb->key, path);
	fsdir_drop_bad(t, &rb->key, r->gen, path, &r->st, 1);
	kvt_log(KVT_LOG_WARN, "fsdir: dropping %s: failed verification", path);
}

typedef struct fsdir_item {
	kvt_key key;
	uint64_t len;
} fsdir_item;

static int fsdir_iterate(kvt_tier *tt,
			 int (*fn)(void *arg, const kvt_key *key, uint64_t len),
			 void *arg)
{
	fsdir *t = (fsdir *)tt;
	fsdir_item *items;
	fsdir_ent *e;
	size_t n = 0, i;
	int rc = 0;

	/* Walk a snapshot so that fn may call back into the tier. */
	pthread_mutex_lock(&t->mu);
	items = malloc((t->count ? t->count : 1) * sizeof(*items));
	if (items)
		for (e = t->mru; e; e = e->older) {
			items[n].key = e->key;
			items[n++].len = e->len;
		}
	pthread_mutex_unlock(&t->mu);
	if (!items)
		return kvt_err(KVT_ENOMEM, "fsdir: no memory to iterate");
	for (i = 0; i < n && !rc; i++)
		rc = fn(arg, &items[i].key, items[i].len);
	free(items);
	return rc;
}

static void fsdir_stats(kvt_tier *tt, kvt_tier_stats *out)
{
	fsdir *t = (fsdir *)tt;

	pthread_mutex_lock(&t->mu);
	*out = t->st;
	out->capacity_bytes = t->capacity;
	out->used_bytes = t->used;
	out->chunks = t->count;
	pthread_mutex_unlock(&t->mu);
	snprintf(out->name, sizeof(out->name), "fsdir");
	out->borrowed = atomic_load(&t->borrowed);
}

static void fsdir_free(fsdir *t)
{
	fsdir_ent *e, *next;

	for (e = t->mru; e; e = next) {
		next = e->older;
		free(e);
	}
	free(t->buckets);
	free(t->root);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static void fsdir_close(kvt_tier *tt)
{
	if (tt)
		fsdir_free((fsdir *)tt);
}

static const struct kvt_tier_ops fsdir_ops = {
	.name = "fsdir",
	.put_begin = fsdir_put_begin,
	.put_commit = fsdir_put_commit,
	.put_abort = fsdir_put_abort,
	.get = fsdir_get,
	.release = fsdir_release,
	.exists = fsdir_exists,
	.del = fsdir_del,
	.iterate = fsdir_iterate,
	.stats = fsdir_stats,
	.corrupt = fsdir_corrupt,
	.close = fsdir_close,
};

/* --- open: clean temporaries, rebuild the index ---------------------------- */

static int fsdir_clean_tmp_one(void *arg, const char *name, int is_dir)
{
	fsdir *t = arg;
	size_t n = strlen(name);
	char path[PATH_MAX];
	struct stat st;

	if (is_dir || n < 4 || strcmp(name + n - 4, ".tmp"))
		return 0;
	snprintf(path, sizeof(path), "%s/tmp/%s", t->root, name);
	if (t->io->stat(t->io, path, &st))
		return 0;
	if ((int64_t)time(NULL) - (int64_t)st.st_mtime >= FSDIR_TMP_GRACE_S)
		t->io->unlink(t->io, path);
	return 0;
}

typedef struct fsdir_found {
	kvt_key key;
	uint64_t len;
	struct timespec mtime;
} fsdir_found;

typedef struct fsdir_scan {
	fsdir *t;
	char dir[PATH_MAX]; /* the directory being read */
	uint8_t k[2];       /* its fan-out bytes so far */
	int depth;
	fsdir_found *found;
	size_t n, cap;
	int err;
} fsdir_scan;

static void fsdir_drop_file(fsdir_scan *s, const char *path,
			    const char *why)
{
	kvt_log(KVT_LOG_WARN, "fsdir: dropping %s: %s", path, why);
	s->t->io->unlink(s->t->io, path);
	s->t->st.corrupt++; /* open is single-threaded: no lock needed */
}

/* Check one published file; append it to s->found if good, drop it if bad.
 * I/O errors other than "gone" skip the file but keep it: an unreadable
 * file is not proven bad. */
static void fsdir_scan_file(fsdir_scan *s, const char *name)
{
	kvt_io *io = s->t->io;
	char path[PATH_MAX], why[256];
	fsdir_found f;
	kvt_obj_hdr h;
	struct stat st;
	size_t want;
	uint8_t *buf = NULL;
	int fd, rc;

	memset(&f, 0, sizeof(f));
	if (snprintf(path, sizeof(path), "%s/%s", s->dir, name) >=
	    (int)sizeof(path))
		return; /* not a name we would have made */
	if (strlen(name) != FSDIR_HEX + 4 ||
	    fsdir_unhex(name, f.key.b, KVT_KEY_BYTES)) {
		fsdir_drop_file(s, path, "name is not <64 hex digits>.kvt");
		return;
	}
	if (f.key.b[0] != s->k[0] || f.key.b[1] != s->k[1]) {
		fsdir_drop_file(s, path, "in the wrong fan-out directory");
		return;
	}
	fd = io->open(io, path, O_RDONLY, 0);
	if (fd < 0) {
		if (fd != -ENOENT)
			kvt_log(KVT_LOG_WARN, "fsdir: skipping %s: open: %s",
				path, kvt_strerror(fd));
		return;
	}
	rc = io->fstat(io, fd, &st);
	if (rc) {
		kvt_log(KVT_LOG_WARN, "fsdir: skipping %s: fstat: %s", path,
			kvt_strerror(rc));
		goto out;
	}
	if ((uint64_t)st.st_size < KVT_OBJ_HEADER_BYTES ||
	    (uint64_t)st.st_size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD) {
		snprintf(why, sizeof(why), "file is %llu bytes",
			 (unsigned long long)st.st_size);
		goto bad;
	}
	want = s->t->verify_on_open ? (size_t)st.st_size : KVT_OBJ_HEADER_BYTES;
	if (posix_memalign((void **)&buf, FSDIR_ALIGN, want)) {
		s->err = kvt_err(KVT_ENOMEM, "fsdir: no memory to read %s", path);
		goto out;
	}
	rc = kvt_io_pread_all(io, fd, buf, want, 0);
	if (rc == -ENODATA) {
		snprintf(why, sizeof(why), "file shrank while read");
		goto bad;
	}
	if (rc) {
		kvt_log(KVT_LOG_WARN, "fsdir: skipping %s: pread: %s", path,
			kvt_strerror(rc));
		goto out;
	}
	rc = s->t->verify_on_open ? kvt_obj_decode(buf, want, &h)
				  : kvt_obj_hdr_decode(buf, want, &h);
	if (rc) {
		snprintf(why, sizeof(why), "%s (%s)", kvt_strerror(rc),
			 kvt_errmsg());
		goto bad;
	}
	if (memcmp(h.key.b, f.key.b, KVT_KEY_BYTES)) {
		snprintf(why, sizeof(why), "header names another key");
		goto bad;
	}
	if ((uint64_t)h.header_len + h.payload_len != (uint64_t)st.st_size) {
		snprintf(why, sizeof(why), "file is %llu bytes, header says %llu",
			 (unsigned long long)st.st_size,
			 (unsigned long long)h.header_len + h.payload_len);
		goto bad;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		fsdir_found *nf = realloc(s->found, cap * sizeof(*nf));
		if (!nf) {
			s->err = kvt_err(KVT_ENOMEM, "fsdir: no memory for the index");
			goto out;
		}
		s->found = nf;
		s->cap = cap;
	}
	f.len = (uint64_t)st.st_size;
	f.mtime = st.st_mtim;
	s->found[s->n++] = f;
	goto out;
bad:
	fsdir_drop_file(s, path, why);
out:
	free(buf);
	io->close(io, fd);
}

static int fsdir_scan_entry(void *arg, const char *name, int is_dir)
{
	fsdir_scan *s = arg;
	size_t n = strlen(name), dl;
	uint8_t b;
	int rc;

	if (s->depth == 2) {
		/* Only our own names: NFS leaves .nfsXXXX files of unlinked
		 * open files, and other tools may put things here. */
		if (!is_dir && n > 4 && !strcmp(name + n - 4, ".kvt"))
			fsdir_scan_file(s, name);
		return s->err;
	}
	if (!is_dir || n != 2 || fsdir_unhex(name, &b, 1))
		return 0; /* tmp/ and anything not ours */
	dl = strlen(s->dir);
	if (dl + 3 >= sizeof(s->dir))
		return 0;
	snprintf(s->dir + dl, sizeof(s->dir) - dl, "/%s", name);
	s->k[s->depth++] = b;
	rc = s->t->io->readdir(s->t->io, s->dir, fsdir_scan_entry, s);
	s->depth--;
	s->dir[dl] = '\0';
	if (rc == -ENOENT) /* removed meanwhile by another node's GC */
		rc = 0;
	if (rc && !s->err)
		s->err = kvt_err(rc, "fsdir: readdir %s/%s: %s", s->dir, name,
				 kvt_strerror(rc));
	return s->err;
}

static int fsdir_found_cmp(const void *a, const void *b)
{
	const struct timespec *x = &((const fsdir_found *)a)->mtime;
	const struct timespec *y = &((const fsdir_found *)b)->mtime;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	if (x->tv_nsec != y->tv_nsec)
		return x->tv_nsec < y->tv_nsec ? -1 : 1;
	return 0;
}

/* Walk the fan-out directories and index every good file, oldest mtime
 * least recently used. */
static int fsdir_rebuild(fsdir *t)
{
	fsdir_scan *s = calloc(1, sizeof(*s));
	fsdir_ent *victims = NULL;
	int64_t now = fsdir_mono_s();
	size_t i;
	int rc;

	if (!s)
		return kvt_err(KVT_ENOMEM, "fsdir: no memory to scan");
	s->t = t;
	snprintf(s->dir, sizeof(s->dir), "%s", t->root);
	rc = t->io->readdir(t->io, t->root[0] ? t->root : "/",
			    fsdir_scan_entry, s);
	if (rc && !s->err)
		s->err = kvt_err(rc, "fsdir: readdir %s/: %s", t->root,
				 kvt_strerror(rc));
	rc = s->err;
	if (!rc && s->n)
		qsort(s->found, s->n, sizeof(*s->found), fsdir_found_cmp);
	for (i = 0; !rc && i < s->n; i++) {
		fsdir_ent *e = calloc(1, sizeof(*e));
		if (!e) {
			rc = kvt_err(KVT_ENOMEM, "fsdir: no memory for the index");
			break;
		}
		e->key = s->found[i].key;
		e->len = s->found[i].len;
		e->touched = now;
		fsdir_insert(t, e);
	}
	if (!rc) {
		fsdir_evict(t, 0, NULL, &victims);
		fsdir_reap(t, victims);
	}
	free(s->found);
	free(s);
	return rc;
}

int kvt_fsdir_open(const kvt_fsdir_opts *o, kvt_tier **out)
{
	char tmpdir[PATH_MAX];
	size_t len;
	fsdir *t;
	int rc;

	if (out)
		*out = NULL;
	if (!o || !out || !o->path || !o->path[0])
		return kvt_err(KVT_EINVAL, "fsdir: a directory path is needed");
	if (o->capacity < KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_EINVAL, "fsdir: capacity %llu is too small",
			       (unsigned long long)o->capacity);
	len = strlen(o->path);
	while (len > 1 && o->path[len - 1] == '/')
		len--; /* "dir/" -> "dir", so names are built one way */
	if (len + FSDIR_NAME_MAX >= PATH_MAX)
		return kvt_err(KVT_EINVAL, "fsdir: path %s is too long", o->path);

	pthread_once(&fsdir_tmp_once, fsdir_tmp_seed);
	t = calloc(1, sizeof(*t));
	if (!t)
		return kvt_err(KVT_ENOMEM, "fsdir: no memory");
	t->root = malloc(len + 1);
	t->nbuckets = FSDIR_MIN_BUCKETS;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->root || !t->buckets || pthread_mutex_init(&t->mu, NULL)) {
		free(t->root);
		free(t->buckets);
		free(t);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory");
	}
	memcpy(t->root, o->path, len);
	t->root[len] = '\0';
	if (len == 1 && t->root[0] == '/')
		t->root[0] = '\0'; /* names are "<root>/..."; avoid "//" */
	t->base.ops = &fsdir_ops;
	t->io = o->io ? o->io : kvt_io_posix();
	t->capacity = o->capacity;
	t->verify_on_open = o->verify_on_open;
	atomic_init(&t->borrowed, 0);

	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", t->root);
	rc = kvt_io_mkdirs(t->io, tmpdir, 0755);
	if (rc) {
		rc = kvt_err(rc, "fsdir: mkdir -p %s: %s", tmpdir,
			     kvt_strerror(rc));
		goto fail;
	}
	rc = t->io->readdir(t->io, tmpdir, fsdir_clean_tmp_one, t);
	if (rc) {
		rc = kvt_err(rc, "fsdir: readdir %s: %s", tmpdir,
			     kvt_strerror(rc));
		goto fail;
	}
	rc = fsdir_rebuild(t);
	if (rc)
		goto fail;
	kvt_err_clear();
	*out = &t->base;
	return 0;
fail:
	fsdir_free(t);
	return rc;
}
