/*
 * findex.h — the in-memory index of a file-per-chunk tier (nvme, fsdir),
 * and of the S3 tier's objects and bad list (s3.c), which need no files.
 *
 * A chained hash table of entries by key plus an LRU list, under one mutex
 * that also guards the tier's capacity accounting and counters.  A tier
 * embeds struct kvt_findex_ent as the first member of its own entry (or
 * uses it as it is), so entries are freed with free() through either type.
 * Every entry carries a generation, unique per insertion, so that a reader
 * that found a bad file drops the entry it read and not one a concurrent
 * put inserted since.
 *
 * A file at a final name that fails its checks is never removed by a
 * reader: it is kept out of the index (never served), counted, logged and
 * remembered in a list of bad files with its identity and the reason, so
 * that `verify` reports it, `verify --repair` moves it aside and the
 * tier's writer replaces it when it puts that key again.  A file this node
 * merely cannot verify (a newer format, a tag it holds no key for) is
 * remembered as unproven: on a shared tier nothing removes those.
 *
 * Functions named *_locked expect the caller to hold ix->mu; the others
 * take it themselves.  None is held across a system call: evicted entries
 * are chained by hnext and handed to kvt_findex_reap once it is dropped.
 */
#ifndef KVT_FINDEX_H
#define KVT_FINDEX_H

#include <pthread.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "common/io.h"
#include "tier/fanout.h"
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

/* A bad file at the final name of `key` (see above). */
struct kvt_findex_bad {
	kvt_key key;
	dev_t dev;
	ino_t ino;
	struct timespec ctim; /* with dev and ino: exactly the file found bad */
	uint64_t size;
	int proven;           /* damaged; 0: only unverifiable here */
	char why[200];
	struct kvt_findex_bad *next;
};

struct kvt_findex {
	pthread_mutex_t mu; /* guards everything below */
	/* Bad files at final names, chained by key hash: a directory a node
	 * cannot read may hold millions, so no lookup walks them all. */
	struct kvt_findex_bad **bad;
	size_t bad_nb; /* buckets, a power of two; 0 until the first */
	uint64_t nbad;
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

/* Insert `e` (not present; key, len and charge set) with a fresh
 * generation, where `older` puts it in a list kept in age order rather than
 * use order (the S3 tier's, by mtime): just more recent than the first
 * entry, counting from the most recent, that it is not older than; so the
 * newest costs O(1), and ties keep their order of insertion. */
void kvt_findex_insert_ordered_locked(struct kvt_findex *ix,
				      struct kvt_findex_ent *e,
				      int (*older)(const struct kvt_findex_ent *a,
						   const struct kvt_findex_ent *b));
/* Swap the entries of two indexes (table, LRU list, count, used bytes),
 * each keeping its mutex, capacity, reservations, counters and bad list:
 * a tier that built a fresh index aside (a re-listing) installs it and
 * frees the old entries with kvt_findex_fini(b).  Caller holds a->mu and
 * owns b alone. */
void kvt_findex_swap_entries_locked(struct kvt_findex *a, struct kvt_findex *b);

/* Reserve `charge` bytes for a put of `key`, evicting what must go (onto
 * *victims): 0, KVT_ETOOBIG, KVT_EEXIST or KVT_EFULL (counted), without a
 * message.  *reserved gets the bytes reserved afterwards. */
int kvt_findex_reserve(struct kvt_findex *ix, const kvt_key *key,
		       uint64_t charge, struct kvt_findex_ent **victims,
		       uint64_t *reserved);
void kvt_findex_unreserve(struct kvt_findex *ix, uint64_t charge);
/* Unlink the files of evicted entries and free them, telling `t`'s
 * listener of each (kvt_tier_evicted); no lock held.  A file already gone
 * is what we wanted anyway. */
void kvt_findex_reap(kvt_tier *t, struct kvt_findex_ent *victims, kvt_io *io,
		     const char *root, const char *tier);

/* The first step of publication: create a fresh temporary for `key`
 * under <root>/tmp (O_WRONLY | O_CREAT | O_EXCL, and O_DIRECT if *direct),
 * its name in `tmp`.  A name clash takes another name; a tmp/ removed
 * behind our back (a clean-up script) is made again, never the root; a
 * file system that creates the file and then refuses O_DIRECT gets it
 * dropped and a buffered one instead, *direct cleared.  The descriptor, or
 * a negated errno with its message. */
int kvt_findex_tmp_open(kvt_io *io, const char *root, const kvt_key *key,
			int *direct, const char *tier, char tmp[PATH_MAX]);

/* Publish the written temporary `tmp` as `fin` (kvt_fanout_link with
 * `retries`) and remove the temporary whatever happened.  A name held by a
 * file recorded bad (proven bad, or any bad file with `replace_unproven`:
 * a tier whose directory is this node's alone) is the writer's to
 * replace: that file is moved aside into the quarantine and the link
 * tried again.  0, -EEXIST when another writer published the name first
 * (counted as put_exists), or another negated errno with its message. */
int kvt_findex_publish(struct kvt_findex *ix, kvt_io *io, const char *root,
		       const char *tmp, const char *fin, int durability,
		       int retries, int replace_unproven, const char *tier);

/* kvt_findex_publish, and for KVT_DUR_POWER_SAFE then every directory on
 * the way to `fin` made durable (kvt_fanout_durable) and the one holding
 * it fsynced; if that fails the name is withdrawn, so that nothing weaker
 * than asked is acknowledged or served.  The one publication path of both
 * file tiers.  0, -EEXIST (another writer won), or a negated errno with
 * its message. */
int kvt_findex_publish_durable(struct kvt_findex *ix, kvt_fanout *durable,
			       kvt_io *io, const char *root, const kvt_key *key,
			       const char *tmp, const char *fin, int durability,
			       int retries, int replace_unproven, const char *tier);

/* The file tiers' peek (tier.h) once the file is open: its size into
 * *image, the header and the range read through blocks of `align` (1: the
 * descriptor is not O_DIRECT); `fd` is closed.  `tier` and `path` name the
 * file in kvt_errmsg(). */
int kvt_findex_peek_fd(kvt_io *io, int fd, size_t align, const char *tier, const char *path,
		       void *hdr, uint64_t off, void *buf, size_t len, uint64_t *image);

int kvt_findex_exists(struct kvt_findex *ix, const kvt_key *key);
/* Remove the entry of `key` if it is still generation `gen`; count a
 * corrupt object (`corrupt` > 0), a miss (0) or nothing (< 0: the caller
 * records it with kvt_findex_note_bad, which counts it).  Returns the removed entry (the caller frees
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

/* --- bad files -------------------------------------------------------------- */

/* Remember that the file at `path` (stat `st`, NULL if unknown) holding
 * `key` is bad: count it as corrupt, log it with the reason and say it is
 * left in place.  Replaces an older record of the key. */
void kvt_findex_note_bad(struct kvt_findex *ix, const kvt_key *key,
			 const struct stat *st, int proven, const char *path,
			 const char *why, const char *tier);
/* The bad files known, in no set order, each handed to fn (a snapshot: fn may
 * call back into the tier).  A nonzero return stops the walk and is
 * returned. */
int kvt_findex_bad_iterate(struct kvt_findex *ix, const char *tier,
			   int (*fn)(void *arg, const struct kvt_findex_bad *b),
			   void *arg);
/* The tier ops bad_iterate and repair (tier.h) over this index, for a tier
 * whose files are <root>/<k0>/<k1>/<hex>.kvt; `shared`: the directory is
 * other nodes' too, so unproven files are never repaired away. */
int kvt_findex_tier_bad_iterate(struct kvt_findex *ix, const char *root,
				const char *tier,
				int (*fn)(void *arg, const kvt_key *key,
					  const char *where, int proven,
					  const char *why),
				void *arg);
int kvt_findex_tier_repair(struct kvt_findex *ix, kvt_io *io, const char *root,
			   const kvt_key *key, int shared, const char *tier);
/* Take the record of `key` out of the list into *out: 1, or 0 if none. */
int kvt_findex_bad_take(struct kvt_findex *ix, const kvt_key *key,
			struct kvt_findex_bad *out);
/* Put a record taken with kvt_findex_bad_take back (best effort). */
void kvt_findex_bad_put(struct kvt_findex *ix, const struct kvt_findex_bad *b);
/* Whether `st` is the very file a record describes (a writer may have
 * replaced it since). */
int kvt_findex_bad_same(const struct kvt_findex_bad *b, const struct stat *st);
/* Move the bad file of `b` at `fin` aside into <root>/quarantine with a
 * <name>.why file beside it saying why and when, if it is still the file
 * found bad.  0 (moved, or already gone), or a negated errno with its
 * message. */
int kvt_findex_quarantine(kvt_io *io, const char *root, const char *fin,
			  const struct kvt_findex_bad *b, const char *tier);

/* --- rebuild at open ------------------------------------------------------ */

/* What a tier's check of one published file says. */
enum {
	KVT_FINDEX_GOOD = 0, /* index it: *len and *mtime are set */
	KVT_FINDEX_BAD = 1,  /* damaged: recorded as bad, `why` says why */
	KVT_FINDEX_UNVERIFIABLE = 3, /* not ours to judge (newer format, a
				      * tag without the key): recorded as
				      * unproven, `why` says why */
	KVT_FINDEX_SKIP = 2, /* unreadable now, or gone: leave it */
};

typedef struct kvt_findex_scan_ops {
	/* Check <path>, named for `key` in the right fan-out directory:
	 * KVT_FINDEX_GOOD, _BAD or _SKIP, or a negated error code (with its
	 * message) that stops the rebuild. */
	int (*check)(void *arg, const char *path, const kvt_key *key,
		     uint64_t *len, struct stat *st, char why[256]);
	/* Fill in the tier's part of a fresh entry (key and len are set,
	 * the rest zeroed), charge included, before it is inserted. */
	void (*init)(void *arg, struct kvt_findex_ent *e);
	size_t ent_size; /* of the tier's entry */
} kvt_findex_scan_ops;

/* Index every good <root>/<k0>/<k1>/<64 hex>.kvt, oldest mtime least
 * recently used.  Nothing is removed and nothing evicted: files check finds
 * bad are recorded (kvt_findex_note_bad); names that are not ours to make,
 * or in the wrong fan-out directory, are logged and left alone.  A tree
 * over the capacity is logged; the writer evicts the excess when it next
 * needs room.  For open, which is single-threaded.  0 or an error code
 * with its message. */
int kvt_findex_rebuild(struct kvt_findex *ix, kvt_io *io, const char *root,
		       const char *tier, const kvt_findex_scan_ops *ops,
		       void *arg);

#endif
