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
 * The index (findex.c) is a chained hash table and an LRU list, under one
 * mutex that also guards capacity and counters.  This tier is bound by I/O, so
 * the mutex is held only to look up, insert or remove, never across a
 * system call; files of evicted entries are unlinked after it is dropped.
 * An entry carries a generation so that a reader that found a bad file
 * drops the entry it read, not one a concurrent put inserted since.
 *
 * Capacity covers published files plus the writes in flight (reserved at
 * put_begin), so temporaries never push the directory past it.
 *
 * Shared use (docs/SHAREDFS.md): a background thread refreshes the index
 * from the directory in bounded slices (readdir; a header read per new
 * name), so other nodes' chunks appear and collected ones disappear within
 * a stated staleness bound (fsdir_refresh.c); kvt_fsdir_gc is the
 * coordinator-free collector (fsdir_gc.c).
 * With an authentication key each file ends with a 32-byte HMAC-SHA-256
 * tag (format/auth.h), outside the image, so the object format is
 * unchanged.  Large images move through O_DIRECT where the file system
 * takes it; buffers come from a kvt_abuf_pool (common/abuf.h) because
 * faulting in a fresh 32 MiB buffer costs about as much as reading it.
 */
#include "tier/fsdir_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "format/auth.h"
#include "format/object.h"

static void fsdir_reap(fsdir *t, struct kvt_findex_ent *victims)
{
	kvt_findex_reap(&t->base, victims, t->io, t->root, "fsdir");
}

/* --- writes --------------------------------------------------------------- */

/* --- judging a published file -------------------------------------------- */

/* Stop serving the file of `key` read through generation `gen`, left in
 * place and recorded (findex.h), unless a newer entry replaced it. */
static void fsdir_note_bad(fsdir *t, const kvt_key *key, uint64_t gen,
			   const char *path, const struct stat *st, int proven,
			   const char *why)
{
	int newer;

	free(kvt_findex_drop(&t->ix, key, gen, -1, &newer));
	if (!newer)
		kvt_findex_note_bad(&t->ix, key, st, proven, path, why, "fsdir");
}

static int fsdir_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len,
			   kvt_tier_wbuf **out)
{
	fsdir *t = (fsdir *)tt;
	struct kvt_findex_ent *victims = NULL;
	fsdir_wbuf *w;
	void *buf = NULL;
	uint64_t reserved, ilen = len;
	int rc = 0;

	*out = NULL;
	if (t->read_only)
		return kvt_err(-EROFS, "fsdir: %s is open read-only", t->root);
	if (len < KVT_OBJ_HEADER_BYTES || len > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD ||
	    (uint64_t)(size_t)(len + FSDIR_ALIGN) != len + FSDIR_ALIGN)
		return kvt_err(KVT_EINVAL,
			       "fsdir: an image of %llu bytes is not possible",
			       (unsigned long long)len);
	len += t->taglen; /* from here on: the file's length */
	rc = kvt_findex_reserve(&t->ix, key, len, &victims, &reserved);
	fsdir_reap(t, victims);
	if (rc == KVT_ETOOBIG)
		return kvt_err(rc, "fsdir: image of %llu bytes exceeds capacity %llu",
			       (unsigned long long)len,
			       (unsigned long long)t->ix.capacity);
	if (rc == KVT_EFULL)
		return kvt_err(rc, "fsdir: %llu bytes of writes in flight leave no room for %llu",
			       (unsigned long long)reserved,
			       (unsigned long long)len);
	if (rc)
		return rc;

	w = calloc(1, sizeof(*w));
	if (!w || !(buf = kvt_abuf_get(&t->bufs, len, &w->cap))) {
		free(w);
		kvt_findex_unreserve(&t->ix, len);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory for a %llu-byte buffer",
			       (unsigned long long)len);
	}
	w->w.key = *key;
	w->w.len = ilen;
	w->flen = len;
	w->iov.iov_base = buf;
	w->iov.iov_len = (size_t)ilen;
	w->w.iov = &w->iov;
	w->w.n_iov = 1;
	*out = &w->w;
	return 0;
}

static void fsdir_wbuf_free(fsdir *t, fsdir_wbuf *w)
{
	kvt_findex_unreserve(&t->ix, w->flen);
	kvt_abuf_put(&t->bufs, w->iov.iov_base, w->cap);
	free(w);
}

static void fsdir_put_abort(kvt_tier *tt, kvt_tier_wbuf *ww)
{
	if (ww)
		fsdir_wbuf_free((fsdir *)tt, (fsdir_wbuf *)ww);
}

/* Write the whole image to a fresh temporary and close it.  On failure the
 * temporary is removed and *tmp says nothing. */
static int fsdir_write_tmp(fsdir *t, fsdir_wbuf *w, int durability,
			   char tmp[PATH_MAX])
{
	kvt_io *io = t->io;
	const char *call;
	uint8_t *buf = w->iov.iov_base;
	uint64_t flen = w->w.len + t->taglen, bulk;
	int direct = t->direct && flen >= FSDIR_DIRECT_MIN;
	int fd, fd2 = -1, rc, i;

	if (t->taglen) {
		rc = kvt_obj_auth_sign(&w->iov, 1, t->auth_key, t->auth_klen,
				       buf + w->w.len);
		if (rc)
			return rc;
	}
	fd = kvt_findex_tmp_open(io, t->root, &w->w.key, &direct, "fsdir", tmp);
	if (fd < 0)
		return fd;

	/* O_DIRECT moves whole blocks: the bulk goes direct, the unaligned
	 * tail (< 4 KiB: the tag, a short last layer) through a second,
	 * buffered descriptor. */
	bulk = direct ? flen & ~(uint64_t)(FSDIR_ALIGN - 1) : flen;
	call = "pwrite";
	rc = kvt_io_pwrite_all(io, fd, buf, (size_t)bulk, 0);
	if (!rc && bulk < flen) {
		call = "open (tail)";
		fd2 = io->open(io, tmp, O_WRONLY, 0);
		rc = fd2 < 0 ? fd2 : 0;
		if (!rc) {
			call = "pwrite";
			rc = kvt_io_pwrite_all(io, fd2, buf + bulk,
					       (size_t)(flen - bulk), (off_t)bulk);
		}
	}
	if (!rc && durability == KVT_DUR_POWER_SAFE) {
		call = "fsync"; /* either descriptor flushes the whole file */
		rc = io->fsync(io, fd2 >= 0 ? fd2 : fd);
	}
	if (fd2 >= 0) {
		i = io->close(io, fd2);
		if (!rc && i) {
			call = "close";
			rc = i;
		}
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

static int fsdir_put_commit(kvt_tier *tt, kvt_tier_wbuf *ww, int durability)
{
	fsdir *t = (fsdir *)tt;
	fsdir_wbuf *w = (fsdir_wbuf *)ww;
	char tmp[PATH_MAX], fin[PATH_MAX];
	fsdir_ent *e = NULL, *old;
	struct kvt_findex_ent *victims = NULL;
	uint64_t len = w->flen;
	int rc;

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
	kvt_fanout_final_path(t->root, &w->w.key, fin);
	rc = fsdir_write_tmp(t, w, durability, tmp);
	if (rc)
		goto out;
	/* Fan-out directories are made lazily (65536 up front would be a slow
	 * open on a shared file system); another node's GC may remove an empty
	 * one between our mkdir and link, hence the retries. */
	rc = kvt_findex_publish_durable(&t->ix, &t->durable, t->io, t->root,
					&w->w.key, tmp, fin, durability, 3, 0, "fsdir");
	if (rc == -EEXIST) {
		/* Index the winner's file, unless it is one found bad. */
		fsdir_adopt_checked(t, &w->w.key);
		rc = kvt_err(KVT_EEXIST, "fsdir: %s was published by another writer",
			     fin);
		goto out;
	}
	if (rc)
		goto out;

	e->ix.key = w->w.key;
	e->ix.len = len;
	e->touched = fsdir_mono_s();
	pthread_mutex_lock(&t->ix.mu);
	t->ix.reserved -= len;
	w->flen = 0; /* reservation released here, not in fsdir_wbuf_free */
	old = fsdir_find(t, &e->ix.key);
	if (old) /* a concurrent loser adopted our file first */
		kvt_findex_remove_locked(&t->ix, &old->ix);
	fsdir_insert(t, e);
	t->ix.st.puts++;
	t->ix.st.bytes_in += len;
	/* Adopted files are not reserved for, so this can still be over. */
	kvt_findex_evict_locked(&t->ix, 0, &e->ix, &victims);
	pthread_mutex_unlock(&t->ix.mu);
	free(old);
	fsdir_reap(t, victims);
	e = NULL;
out:
	free(e);
	fsdir_wbuf_free(t, w);
	return rc;
}

/* --- reads ---------------------------------------------------------------- */


static int fsdir_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **out)
{
	fsdir *t = (fsdir *)tt;
	char path[PATH_MAX], why[256];
	kvt_obj_hdr h;
	fsdir_rbuf *r = NULL;
	fsdir_ent *e;
	struct stat st;
	uint64_t gen, size, elen;
	int64_t now = fsdir_mono_s();
	void *buf = NULL;
	int fd, rc, touch = 0, direct, proven = FSDIR_BAD;
	size_t cap = 0;

	*out = NULL;
	pthread_mutex_lock(&t->ix.mu);
	e = fsdir_find(t, key);
	if (!e) {
		t->ix.st.misses++;
		pthread_mutex_unlock(&t->ix.mu);
		return KVT_ENOTFOUND;
	}
	gen = e->ix.gen;
	elen = e->ix.len;
	kvt_findex_touch_locked(&t->ix, &e->ix);
	if (!t->read_only && now - e->touched >= FSDIR_TOUCH_INTERVAL_S) {
		e->touched = now;
		touch = 1;
	}
	pthread_mutex_unlock(&t->ix.mu);

	kvt_fanout_final_path(t->root, key, path);
	fd = fsdir_open_read(t, path, elen, &direct);
	if (fd == -ENOENT) {
		/* Removed behind our back (another node's GC): a miss. */
		free(kvt_findex_drop(&t->ix, key, gen, 0, NULL));
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
	    size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD + KVT_OBJ_AUTH_TAG_BYTES) {
		t->io->close(t->io, fd);
		proven = fsdir_judge(t, size, 0, NULL, key, why);
		goto bad;
	}
	r = calloc(1, sizeof(*r));
	if (!r || !(buf = kvt_abuf_get(&t->bufs, size, &cap))) {
		t->io->close(t->io, fd);
		free(r);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory to read %s", path);
	}
	rc = fsdir_read_all(t, fd, direct, buf, size);
	t->io->close(t->io, fd);
	if (rc == -ENODATA) {
		snprintf(why, sizeof(why), "file shrank while read");
		goto bad;
	}
	if (rc) {
		/* A failing medium (this node's view of it), not a bad object:
		 * report, keep the entry. */
		kvt_abuf_put(&t->bufs, buf, cap);
		free(r);
		return kvt_err(rc, "fsdir: pread %s: %s", path, kvt_strerror(rc));
	}
	rc = kvt_obj_hdr_decode(buf, (size_t)size, &h);
	proven = fsdir_judge(t, size, rc, &h, key, why);
	if (proven != FSDIR_GOOD)
		goto bad;
	if (t->taglen) {
		struct iovec img = { buf, (size_t)(size - t->taglen) };
		rc = kvt_obj_auth_verify(&img, 1, t->auth_key, t->auth_klen,
					 (uint8_t *)buf + img.iov_len);
		if (rc == KVT_ECORRUPT) {
			snprintf(why, sizeof(why), "HMAC tag does not verify under this node's object_auth_key");
			proven = FSDIR_UNPROVEN; /* altered, or another key */
			goto bad;
		}
		if (rc) {
			/* OpenSSL failed, not the object: keep it. */
			kvt_abuf_put(&t->bufs, buf, cap);
			free(r);
			return rc;
		}
	}

	pthread_mutex_lock(&t->ix.mu);
	t->ix.st.hits++;
	t->ix.st.bytes_out += size;
	e = fsdir_find(t, key);
	if (e && e->ix.gen == gen && e->ix.len != size) {
		/* Indexed from a stat of another writer's file, or replaced
		 * since: account for what is really there. */
		t->ix.used = t->ix.used - e->ix.charge + size;
		e->ix.len = e->ix.charge = size;
	}
	pthread_mutex_unlock(&t->ix.mu);
	/* A hint only; failure is harmless.  The file's change time moves
	 * with it: keep the identity a later corrupt() compares current. */
	if (touch && t->io->touch(t->io, path) == 0)
		(void)t->io->stat(t->io, path, &st);

	r->r.key = *key;
	r->r.len = size - t->taglen;
	r->iov.iov_base = buf;
	r->iov.iov_len = (size_t)(size - t->taglen);
	r->r.iov = &r->iov;
	r->r.n_iov = 1;
	r->gen = gen;
	r->cap = cap;
	r->st = st;
	atomic_fetch_add(&t->borrowed, 1);
	*out = &r->r;
	return 0;

bad:
	kvt_abuf_put(&t->bufs, buf, cap);
	free(r);
	fsdir_note_bad(t, key, gen, path, &st, proven == FSDIR_BAD, why);
	return kvt_err(KVT_ECORRUPT, "fsdir: %s: %s", path, why);
}

/* A header and a few bytes, through the blocks that hold them (tier.h). */
static int fsdir_peek(kvt_tier *tt, const kvt_key *key, void *hdr, uint64_t off, void *buf,
		      size_t len, uint64_t *image)
{
	fsdir *t = (fsdir *)tt;
	char path[PATH_MAX];
	fsdir_ent *e;
	uint64_t gen, elen;
	int fd, direct;

	pthread_mutex_lock(&t->ix.mu);
	e = fsdir_find(t, key);
	gen = e ? e->ix.gen : 0;
	elen = e ? e->ix.len : 0;
	pthread_mutex_unlock(&t->ix.mu);
	if (!e)
		return KVT_ENOTFOUND;
	kvt_fanout_final_path(t->root, key, path);
	fd = fsdir_open_read(t, path, elen, &direct);
	if (fd == -ENOENT) { /* removed behind our back: a miss, as for a get */
		free(kvt_findex_drop(&t->ix, key, gen, 0, NULL));
		return KVT_ENOTFOUND;
	}
	if (fd < 0)
		return kvt_err(fd, "fsdir: open %s: %s", path, kvt_strerror(fd));
	return kvt_findex_peek_fd(t->io, fd, direct ? FSDIR_ALIGN : 1, "fsdir", path, hdr, off,
				  buf, len, image);
}

static void fsdir_release(kvt_tier *tt, kvt_tier_rbuf *rr)
{
	fsdir *t = (fsdir *)tt;
	fsdir_rbuf *r = (fsdir_rbuf *)rr;

	if (!r)
		return;
	kvt_abuf_put(&t->bufs, r->iov.iov_base, r->cap);
	free(r);
	atomic_fetch_sub(&t->borrowed, 1);
}

/* --- the rest of the vtable ------------------------------------------------ */

static int fsdir_exists(kvt_tier *tt, const kvt_key *key)
{
	return kvt_findex_exists(&((fsdir *)tt)->ix, key);
}

/* Remove the entry of `key` and its file.  Returns whether it was indexed. */
static int fsdir_forget(fsdir *t, const kvt_key *key, int corrupt, int *urc)
{
	char path[PATH_MAX];
	struct kvt_findex_ent *e = kvt_findex_forget(&t->ix, key, corrupt);

	if (!e && !corrupt)
		return 0;
	kvt_fanout_final_path(t->root, key, path);
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

	kvt_fanout_final_path(t->root, &rb->key, path);
	char why[256];

	/* The store calls this right after the check that failed: its
	 * message says what was wrong. */
	snprintf(why, sizeof(why), "failed verification: %s",
		 kvt_errmsg()[0] ? kvt_errmsg() : "payload, key or namespace");
	fsdir_note_bad(t, &rb->key, r->gen, path, &r->st, 1, why);
}

static int fsdir_bad_iterate(kvt_tier *tt,
			     int (*fn)(void *arg, const kvt_key *key,
				       const char *where, int proven,
				       const char *why),
			     void *arg)
{
	fsdir *t = (fsdir *)tt;

	return kvt_findex_tier_bad_iterate(&t->ix, t->root, "fsdir", fn, arg);
}

static int fsdir_repair(kvt_tier *tt, const kvt_key *key)
{
	fsdir *t = (fsdir *)tt;

	if (t->read_only)
		return kvt_err(-EROFS, "fsdir: %s is open read-only", t->root);
	return kvt_findex_tier_repair(&t->ix, t->io, t->root, key, 1, "fsdir");
}

static int fsdir_iterate(kvt_tier *tt,
			 int (*fn)(void *arg, const kvt_key *key, uint64_t len),
			 void *arg)
{
	return kvt_findex_iterate(&((fsdir *)tt)->ix, "fsdir", fn, arg);
}

static void fsdir_stats(kvt_tier *tt, kvt_tier_stats *out)
{
	fsdir *t = (fsdir *)tt;

	kvt_findex_stats(&t->ix, out, "fsdir", atomic_load(&t->borrowed));
	out->read_only = (uint32_t)t->read_only;
}

static void fsdir_free(fsdir *t)
{
	kvt_findex_fini(&t->ix);
	free(t->root);
	free(t->leaves);
	kvt_abuf_fini(&t->bufs);
	if (t->auth_key) {
		OPENSSL_cleanse(t->auth_key, t->auth_klen);
		free(t->auth_key);
	}
	pthread_mutex_destroy(&t->rmu);
	pthread_mutex_destroy(&t->scan_mu);
	pthread_cond_destroy(&t->rcv);
	free(t);
}

static void fsdir_close(kvt_tier *tt)
{
	fsdir *t = (fsdir *)tt;

	if (!t)
		return;
	if (t->rthread_on) {
		pthread_mutex_lock(&t->rmu);
		t->stop = 1;
		pthread_cond_signal(&t->rcv);
		pthread_mutex_unlock(&t->rmu);
		pthread_join(t->rthread, NULL);
	}
	fsdir_free(t);
}

static const struct kvt_tier_ops fsdir_ops = {
	.name = "fsdir",
	.put_begin = fsdir_put_begin,
	.put_commit = fsdir_put_commit,
	.put_abort = fsdir_put_abort,
	.get = fsdir_get,
	.peek = fsdir_peek,
	.release = fsdir_release,
	.exists = fsdir_exists,
	.del = fsdir_del,
	.iterate = fsdir_iterate,
	.stats = fsdir_stats,
	.corrupt = fsdir_corrupt,
	.bad_iterate = fsdir_bad_iterate,
	.repair = fsdir_repair,
	.close = fsdir_close,
};

/* --- open: clean temporaries, rebuild the index ---------------------------- */

/* Check one published file; append it to s->found if good, drop it if bad.
 * I/O errors other than "gone" skip the file but keep it: an unreadable
 * file is not proven bad. */
typedef struct fsdir_scan {
	fsdir *t;
	int64_t now; /* when the rebuild began: every entry's `touched` */
} fsdir_scan;

static int fsdir_scan_check(void *arg, const char *path, const kvt_key *key,
			    uint64_t *len, struct stat *st, char why[256])
{
	fsdir *t = ((fsdir_scan *)arg)->t;
	int rc = fsdir_check(t, path, key, t->verify_on_open, st, why);

	if (rc == FSDIR_BAD)
		return KVT_FINDEX_BAD;
	if (rc == FSDIR_UNPROVEN)
		return KVT_FINDEX_UNVERIFIABLE;
	if (rc == KVT_ENOMEM)
		return rc;
	if (rc)
		return KVT_FINDEX_SKIP;
	*len = (uint64_t)st->st_size;
	return KVT_FINDEX_GOOD;
}

static void fsdir_scan_init(void *arg, struct kvt_findex_ent *x)
{
	x->charge = x->len;
	((fsdir_ent *)x)->touched = ((fsdir_scan *)arg)->now;
}

static const kvt_findex_scan_ops fsdir_scan_ops = {
	.check = fsdir_scan_check,
	.init = fsdir_scan_init,
	.ent_size = sizeof(fsdir_ent),
};

static int fsdir_rebuild(fsdir *t)
{
	fsdir_scan s = { t, fsdir_mono_s() };

	return kvt_findex_rebuild(&t->ix, t->io, t->root, "fsdir",
				  &fsdir_scan_ops, &s);
}

void kvt_fsdir_info(kvt_tier *tt, int *direct, int *refresh_ms)
{
	fsdir *t = (fsdir *)tt;

	if (direct)
		*direct = t->direct;
	if (refresh_ms)
		*refresh_ms = t->refresh_ms;
}

static int fsdir_sync_init(fsdir *t)
{
	if (pthread_mutex_init(&t->rmu, NULL))
		return -1;
	if (pthread_mutex_init(&t->scan_mu, NULL))
		goto f2;
	if (kvt_abuf_init(&t->bufs, FSDIR_ALIGN, FSDIR_POOL_SLOTS, FSDIR_POOL_BYTES))
		goto f3;
	if (!kvt_cond_init_mono(&t->rcv))
		return 0;
	kvt_abuf_fini(&t->bufs);
f3:
	pthread_mutex_destroy(&t->scan_mu);
f2:
	pthread_mutex_destroy(&t->rmu);
	return -1;
}

/* Whether this file system takes O_DIRECT: create a probe in tmp/ with it.
 * Refused (EINVAL) means buffered I/O, said once. */
static void fsdir_probe_direct(fsdir *t)
{
	char path[PATH_MAX];
	int fd;

	kvt_fanout_tmp_path(t->root, "direct-probe", path);
	fd = t->io->open(t->io, path, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT,
			 KVT_FILE_MODE);
	if (fd >= 0)
		t->io->close(t->io, fd);
	t->io->unlink(t->io, path);
	t->direct = fd >= 0;
	if (!t->direct)
		kvt_log(KVT_LOG_INFO, "fsdir: %s refuses O_DIRECT (%s); using "
			"buffered I/O", t->root, kvt_strerror(fd));
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
	if (o->auth_key && o->auth_key_len < KVT_OBJ_AUTH_MIN_KEY)
		return kvt_err(KVT_EINVAL, "fsdir: an authentication key of %zu "
			       "bytes is too short (at least %u)",
			       o->auth_key_len, KVT_OBJ_AUTH_MIN_KEY);
	len = strlen(o->path);
	while (len > 1 && o->path[len - 1] == '/')
		len--; /* "dir/" -> "dir", so names are built one way */
	if (len + FSDIR_NAME_MAX >= PATH_MAX)
		return kvt_err(KVT_EINVAL, "fsdir: path %s is too long", o->path);

	t = calloc(1, sizeof(*t));
	if (!t || kvt_findex_init(&t->ix, o->capacity)) {
		free(t);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory");
	}
	t->root = malloc(len + 1);
	if (o->auth_key) {
		t->auth_key = malloc(o->auth_key_len);
		if (t->auth_key)
			memcpy(t->auth_key, o->auth_key, o->auth_key_len);
		t->auth_klen = o->auth_key_len;
		t->taglen = KVT_OBJ_AUTH_TAG_BYTES;
	}
	if (!t->root || (o->auth_key && !t->auth_key) || fsdir_sync_init(t)) {
		free(t->root);
		kvt_findex_fini(&t->ix);
		free(t->auth_key);
		free(t);
		return kvt_err(KVT_ENOMEM, "fsdir: no memory");
	}
	memcpy(t->root, o->path, len);
	t->root[len] = '\0';
	if (len == 1 && t->root[0] == '/')
		t->root[0] = '\0'; /* names are "<root>/..."; avoid "//" */
	t->base.ops = &fsdir_ops;
	t->io = o->io ? o->io : kvt_io_posix();
	t->verify_on_open = o->verify_on_open;
	t->refresh_ms = o->refresh_ms ? o->refresh_ms : FSDIR_REFRESH_MS;
	if (t->refresh_ms < 0)
		t->refresh_ms = -1;
	t->refresh_dirs = o->refresh_dirs ? o->refresh_dirs : FSDIR_REFRESH_DIRS;
	atomic_init(&t->borrowed, 0);

	t->read_only = o->read_only;
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", t->root);
	if (t->read_only) {
		struct stat st;
		rc = t->io->stat(t->io, t->root[0] ? t->root : "/", &st);
		if (!rc && !S_ISDIR(st.st_mode))
			rc = -ENOTDIR;
		if (rc) {
			rc = kvt_err(rc, "fsdir: %s: %s", t->root, kvt_strerror(rc));
			goto fail;
		}
	} else {
		rc = kvt_io_mkdirs(t->io, tmpdir, KVT_DIR_MODE);
		if (rc) {
			rc = kvt_err(rc, "fsdir: mkdir -p %s: %s", tmpdir,
				     kvt_strerror(rc));
			goto fail;
		}
	}
	rc = t->read_only ? 0 : kvt_fanout_clean_tmp(t->io, t->root, FSDIR_TMP_GRACE_S);
	if (rc) {
		rc = kvt_err(rc, "fsdir: readdir %s: %s", tmpdir,
			     kvt_strerror(rc));
		goto fail;
	}
	if (o->direct >= 0 && !t->read_only)
		fsdir_probe_direct(t);
	rc = fsdir_rebuild(t);
	if (rc)
		goto fail;
	if (t->refresh_ms > 0) {
		rc = pthread_create(&t->rthread, NULL, fsdir_refresh_main, t);
		if (rc) {
			rc = kvt_err(-rc, "fsdir: cannot start the refresh thread: %s",
				     kvt_strerror(-rc));
			goto fail;
		}
		t->rthread_on = 1;
	}
	kvt_err_clear();
	*out = &t->base;
	return 0;
fail:
	fsdir_free(t);
	return rc;
}

/* --- the refresh's entry points (fsdir_refresh.c does the work) ---------- */

int kvt_fsdir_refresh(kvt_tier *tt)
{
	if (!tt || tt->ops != &fsdir_ops)
		return kvt_err(KVT_EINVAL, "fsdir: not an fsdir tier");
	return fsdir_refresh_all((fsdir *)tt);
}

int kvt_fsdir_probe(kvt_tier *tt, const kvt_key *key)
{
	if (!tt || tt->ops != &fsdir_ops || !key)
		return kvt_err(KVT_EINVAL, "fsdir: probe needs a tier and a key");
	return fsdir_probe_key((fsdir *)tt, key);
}
