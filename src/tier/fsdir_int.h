/*
 * fsdir_int.h — what the three files of the directory tier share.
 *
 * fsdir.c is the tier proper (put, get, the vtable, open); fsdir_refresh.c
 * keeps a shared directory's index current with what other nodes publish
 * and remove; fsdir_gc.c is kvt_fsdir_gc, the coordinator-free collector,
 * which needs no open tier.  Nothing here is exported (fsdir.h is the
 * interface).
 */
#ifndef KVT_FSDIR_INT_H
#define KVT_FSDIR_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

#include "common/abuf.h"
#include "format/object.h"
#include "tier/fanout.h"
#include "tier/findex.h"
#include "tier/fsdir.h"

#define FSDIR_ALIGN 4096u
/* A hit refreshes the file's mtime at most this often (seconds): enough for
 * a directory-wide GC ordering by age, without a metadata write per read. */
#define FSDIR_TOUCH_INTERVAL_S 60
/* Temporaries older than this (seconds, by mtime) are stale at open.  Younger
 * ones may be another process's or node's write in progress in a shared
 * directory: removing those would fail their put. */
#define FSDIR_TMP_GRACE_S (15 * 60)
/* Longest name below the root: "/tmp/" + 64 hex + "." + pid + "." + 20
 * digits + ".tmp", with room to spare. */
#define FSDIR_NAME_MAX 128u
/* Images at least this long go through O_DIRECT where it is supported:
 * below it the page cache costs less than the alignment dance. */
#define FSDIR_DIRECT_MIN (1u << 20)
/* Image buffers kept for reuse after put and release (common/abuf.h): a
 * fresh 32 MiB buffer costs 8192 page faults and zeroing, about as long as
 * reading it from a fast file system. */
#define FSDIR_POOL_SLOTS 8
#define FSDIR_POOL_BYTES (256ull << 20)
#define FSDIR_REFRESH_MS 2000
#define FSDIR_REFRESH_DIRS 4096u

/* ix.len and ix.charge are both the bytes of the file, tag included. */
typedef struct fsdir_ent {
	struct kvt_findex_ent ix; /* first: freed through either type */
	int64_t touched;  /* CLOCK_MONOTONIC s of the last mtime refresh */
	uint32_t seen;    /* refresh cycle that last found its file */
} fsdir_ent;

typedef struct fsdir {
	kvt_tier base;
	kvt_io *io;
	char *root;
	int verify_on_open;
	int read_only;      /* no put, no touch, nothing written */
	int direct;         /* O_DIRECT for images >= FSDIR_DIRECT_MIN */
	uint32_t taglen;    /* KVT_OBJ_AUTH_TAG_BYTES with a key, else 0 */
	uint8_t *auth_key;
	size_t auth_klen;
	atomic_uint_fast64_t borrowed;

	kvt_abuf_pool bufs; /* image buffers, FSDIR_ALIGN-aligned */

	/* Background refresh (see fsdir.h).  `rmu` guards stop and the
	 * thread's wait; `scan_mu` serialises refresh slices (thread and
	 * kvt_fsdir_refresh) and guards the cycle state below it. */
	int refresh_ms;
	uint32_t refresh_dirs;
	pthread_t rthread;
	int rthread_on, stop;
	pthread_mutex_t rmu;
	pthread_cond_t rcv;
	pthread_mutex_t scan_mu;
	uint16_t *leaves;   /* leaf directories (k0 << 8 | k1) of this cycle */
	size_t nleaves, cursor;
	int in_cycle, cycle_bad;
	uint32_t epoch;     /* current cycle, stamped into entries it finds */
	uint64_t cycle_gen; /* t->ix.gen when the cycle began */
	kvt_fanout durable; /* directories of the tree made durable */

	struct kvt_findex ix; /* the index, capacity and counters */
} fsdir;

typedef struct fsdir_wbuf {
	kvt_tier_wbuf w;
	struct iovec iov;
	uint64_t flen;      /* bytes reserved: the file, tag included */
	size_t cap;         /* of the buffer */
} fsdir_wbuf;

typedef struct fsdir_rbuf {
	kvt_tier_rbuf r;
	struct iovec iov;
	uint64_t gen;       /* the index entry it was read through */
	size_t cap;         /* of the buffer */
	struct stat st;     /* the file it was read from */
} fsdir_rbuf;

/* What a file at a final name is (fsdir_judge, fsdir_check). */
enum { FSDIR_GOOD = 0, FSDIR_BAD = 1, FSDIR_UNPROVEN = 2 };

static inline int64_t fsdir_mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec;
}

/* --- index (caller holds t->ix.mu) ---------------------------------------- */

static inline fsdir_ent *fsdir_find(const fsdir *t, const kvt_key *k)
{
	return (fsdir_ent *)kvt_findex_find_locked(&t->ix, k);
}

/* Insert `e` (not present) as the most recently used; capacity counts the
 * bytes of its file. */
static inline void fsdir_insert(fsdir *t, fsdir_ent *e)
{
	e->ix.charge = e->ix.len;
	kvt_findex_insert_locked(&t->ix, &e->ix);
}

/* --- reading and judging a published file: fsdir_check.c ------------------ */

/* What a file at a final name is, from its size and its decoded header
 * (hrc: kvt_obj_hdr_decode's result; h NULL: judge the size alone):
 * FSDIR_GOOD, FSDIR_BAD (damaged: the writer, repair or GC may remove it)
 * or FSDIR_UNPROVEN (this node cannot read it, but another may: a newer
 * format, a tag it has no key for, a tag under another key), with `why`.
 * Several nodes share the directory, so only what is damaged by any
 * node's reading counts as bad. */
int fsdir_judge(const fsdir *t, uint64_t size, int hrc, const kvt_obj_hdr *h,
		const kvt_key *key, char why[256]);

/* Read the whole file (`size` bytes) into `buf` (rounded up to whole
 * blocks).  Through O_DIRECT the last read asks for the whole last block
 * and comes back short at the end of the file (-ENODATA: it shrank). */
int fsdir_read_all(fsdir *t, int fd, int direct, uint8_t *buf, uint64_t size);

/* Open a published file for reading, through O_DIRECT when the tier uses
 * it for a file of `len` bytes and this file accepts it. */
int fsdir_open_read(fsdir *t, const char *path, uint64_t len, int *direct);

/* Check the published file `path` that should hold `key`: its length, its
 * header (or, with `full`, every checksum and the tag too).  FSDIR_GOOD,
 * FSDIR_BAD or FSDIR_UNPROVEN (`why` says why; *st holds its stat), or a
 * negated errno for a file that could not be read, which is not proven bad
 * (-ENOENT: gone). */
int fsdir_check(fsdir *t, const char *path, const kvt_key *key, int full,
		struct stat *st, char why[256]);

/* Index the published file of `key` if it checks out, stamped with the
 * current refresh cycle; list it if it is bad.  1 indexed (or already
 * was), 0 not.  After losing a put race to another writer (maybe another
 * node) this is how the winner's file gets served here.  fsdir_refresh.c. */
int fsdir_adopt_checked(fsdir *t, const kvt_key *key);

/* The background refresh thread (arg: the tier).  fsdir_refresh.c. */
void *fsdir_refresh_main(void *arg);

/* kvt_fsdir_refresh and kvt_fsdir_probe (fsdir.h) once fsdir.c has checked
 * that they were handed an fsdir tier.  fsdir_refresh.c. */
int fsdir_refresh_all(fsdir *t);
int fsdir_probe_key(fsdir *t, const kvt_key *key);

#endif
