/*
 * findex.h — the in-memory index of a file-per-chunk tier (nvme, fsdir).
 *
 * A chained hash table of entries by key plus an LRU list, under one mutex
 * that also guards the tier's capacity accounting and counters.  A tier
 * embeds struct kvt_findex_ent as the first member of its own entry (or
 * uses it as it is), so entries are freed with free() through either type.
 * Every entry carries a generation, unique per insertion, so that a reader
 * that found a bad file drops the entry it read and not one a concurrent
 * put inserted since.
 *
 * Functions named *_locked expect the caller to hold ix->mu; the others
 * take it themselves.  None is held across a system call: evicted entries
 * are chained by hnext and handed to kvt_findex_reap once it is dropped.
 */
#ifndef KVT_FINDEX_H
#define KVT_FINDEX_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/io.h"
#include "kvtier.h"
#include "tier/tier.h"

struct kvt_findex_ent {
	kvt_key key;
	uint64_t len;    /* bytes reported: iterate, evicted_bytes */
	uint64_t charge; /* bytes counted against the capacity */
	uint64_t gen;    /* unique per insertion */
	struct kvt_findex_ent *hnext;
	struct kvt_findex_ent *newer, *older; /* LRU list */
};

struct kvt_findex {
	pthread_mutex_t mu; /* guards everything below */
	struct kvt_findex_ent **buckets;
	size_t nbuckets; /* power of two */
	struct kvt_findex_ent *mru, *lru;
	uint64_t capacity, count, used, reserved, gen;
	kvt_tier_stats st; /* counters only; the rest is filled by stats */
};

/* 0, or -1 when memory is short (nothing to undo then). */
int kvt_findex_init(struct kvt_findex *ix, uint64_t capacity);
/* Free every entry, the table and the mutex. */
void kvt_findex_fini(struct kvt_findex *ix);

struct kvt_findex_ent *kvt_findex_find_locked(const struct kvt_findex *ix,
					      const kvt_key *key);
/* Insert `e` (not present; key, len and charge set) as the most recently
 * used, with a fresh generation. */
void kvt_findex_insert_locked(struct kvt_findex *ix, struct kvt_findex_ent *e);
void kvt_findex_remove_locked(struct kvt_findex *ix, struct kvt_findex_ent *e);
/* Make `e` the most recently used. */
void kvt_findex_touch_locked(struct kvt_findex *ix, struct kvt_findex_ent *e);
/* Evict least recently used entries, never `keep`, until `need` more bytes
 * fit beside the used and reserved ones; victims go on *victims. */
void kvt_findex_evict_locked(struct kvt_findex *ix, uint64_t need,
			     const struct kvt_findex_ent *keep,
			     struct kvt_findex_ent **victims);

/* Reserve `charge` bytes for a put of `key`, evicting what must go (onto
 * *victims): 0, KVT_ETOOBIG, KVT_EEXIST or KVT_EFULL (counted), without a
 * message.  *reserved gets the bytes reserved afterwards. */
int kvt_findex_reserve(struct kvt_findex *ix, const kvt_key *key,
		       uint64_t charge, struct kvt_findex_ent **victims,
		       uint64_t *reserved);
void kvt_findex_unreserve(struct kvt_findex *ix, uint64_t charge);
/* Unlink the files of evicted entries and free them; no lock held.  A file
 * already gone is what we wanted anyway. */
void kvt_findex_reap(struct kvt_findex_ent *victims, kvt_io *io,
		     const char *root, const char *tier);

/* Publish the written temporary `tmp` as `fin` (kvt_fanout_link with
 * `retries`) and remove the temporary whatever happened.  0, -EEXIST when
 * another writer published the name first (counted as put_exists), or
 * another negated errno with its message. */
int kvt_findex_publish(struct kvt_findex *ix, kvt_io *io, const char *root,
		       const char *tmp, const char *fin, int durability,
		       int retries, const char *tier);

int kvt_findex_exists(struct kvt_findex *ix, const kvt_key *key);
/* Remove the entry of `key` if it is still generation `gen`; count a
 * corrupt object or a miss.  Returns the removed entry (the caller frees
 * it) or NULL; *other, if given, says whether another entry of `key` is
 * indexed. */
struct kvt_findex_ent *kvt_findex_drop(struct kvt_findex *ix,
				       const kvt_key *key, uint64_t gen,
				       int corrupt, int *other);
/* Remove the entry of `key` whatever its generation, counting a corrupt
 * object if `corrupt`; the removed entry or NULL. */
struct kvt_findex_ent *kvt_findex_forget(struct kvt_findex *ix,
					 const kvt_key *key, int corrupt);
/* Call fn on a snapshot (most recent first), so that fn may call back into
 * the tier. */
int kvt_findex_iterate(struct kvt_findex *ix, const char *tier,
		       int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		       void *arg);
/* The tier's stats: counters, capacity, used bytes and chunks from the
 * index, then `name` and `borrowed`. */
void kvt_findex_stats(struct kvt_findex *ix, kvt_tier_stats *out,
		      const char *name, uint64_t borrowed);

/* --- rebuild at open ------------------------------------------------------ */

/* What a tier's check of one published file says. */
enum {
	KVT_FINDEX_GOOD = 0, /* index it: *len and *mtime are set */
	KVT_FINDEX_BAD = 1,  /* drop it (unlink, count): `why` says why */
	KVT_FINDEX_SKIP = 2, /* not proven bad (unreadable, gone): leave it */
};

typedef struct kvt_findex_scan_ops {
	/* Check <path>, named for `key` in the right fan-out directory:
	 * KVT_FINDEX_GOOD, _BAD or _SKIP, or a negated error code (with its
	 * message) that stops the rebuild. */
	int (*check)(void *arg, const char *path, const kvt_key *key,
		     uint64_t *len, struct timespec *mtime, char why[256]);
	/* Fill in the tier's part of a fresh entry (key and len are set,
	 * the rest zeroed), charge included, before it is inserted. */
	void (*init)(void *arg, struct kvt_findex_ent *e);
	size_t ent_size; /* of the tier's entry */
} kvt_findex_scan_ops;

/* Index every good <root>/<k0>/<k1>/<64 hex>.kvt, oldest mtime least
 * recently used, then evict down to the capacity.  Files of names that are
 * not ours to make, or in the wrong fan-out directory, or that check finds
 * bad, are unlinked, logged and counted as corrupt.  For open, which is
 * single-threaded: no lock is taken.  0 or an error code with its
 * message. */
int kvt_findex_rebuild(struct kvt_findex *ix, kvt_io *io, const char *root,
		       const char *tier, const kvt_findex_scan_ops *ops,
		       void *arg);

#endif
