/*
 * fanout.h — what the file-per-chunk tiers (nvme, fsdir) share about their
 * directory tree: <root>/<k0>/<k1>/<64 hex>.kvt, two levels of 256 named by
 * the key's first two bytes, so no directory grows past a few thousand
 * entries even at millions of chunks.
 */
#ifndef KVT_FANOUT_H
#define KVT_FANOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/io.h"
#include "kvtier.h"

/* Which directories of the tree this process has made durable (fsynced
 * into their parent): the root, <root>/k0 and <root>/k0/k1.  Lives in the
 * tier object: a reopened tier starts with nothing marked. */
typedef struct kvt_fanout {
	atomic_uchar root, k0[256], k1[65536];
} kvt_fanout;

/* Make every directory on the way to `fin` (the final name of `key` under
 * `root`) durable in its parent, fsyncing each one the first time this tier
 * needs it, whoever created it and whatever an earlier, weaker put skipped.
 * A power-safe put calls it before fsyncing the directory holding `fin`.
 * 0, or the fsync's negated errno with the path in kvt_errmsg(). */
int kvt_fanout_durable(kvt_fanout *f, kvt_io *io, const char *root,
		       const kvt_key *key, const char *fin);

/* Hex digits of a key: the stem of its file name. */
#define KVT_FANOUT_HEX (2 * KVT_KEY_BYTES)

/* The lower-case hex of `key`, NUL-terminated. */
void kvt_fanout_hex(const kvt_key *key, char out[KVT_FANOUT_HEX + 1]);
/* Parse `n` bytes of lower-case hex (what we write); 0 or -1. */
int kvt_fanout_unhex(const char *s, uint8_t *out, size_t n);
/* <root>/<k0>/<k1>/<64 hex>.kvt */
void kvt_fanout_final_path(const char *root, const kvt_key *key, char *out);
/* <root>/tmp/<stem>.<pid>.<n>.tmp, unique between every writer of one
 * directory: pids repeat across nodes (containers often run as pid 1), so
 * the counter is process-wide and starts at a random value. */
void kvt_fanout_tmp_path(const char *root, const char *stem, char *out);
/* Recreate <root>/tmp after someone removed it (a clean-up script), but
 * never the root: a root that vanished is an unmounted file system, and
 * recreating it would put the cache on the one underneath.  0 or a negated
 * errno with a message naming `tier`. */
int kvt_fanout_mktmp(kvt_io *io, const char *root, const char *tier);
/* Remove the temporaries in <root>/tmp older than `grace_s` seconds (by
 * mtime): left over from a crash.  Younger ones may be another process's
 * write in progress.  Returns readdir's result, without a message. */
int kvt_fanout_clean_tmp(kvt_io *io, const char *root, int64_t grace_s);
/* link(tmp, fin), creating the two fan-out directories of `fin` on first
 * use (made durable in their parents for KVT_DUR_POWER_SAFE).  They are
 * made lazily, and another node's GC may remove an empty one between our
 * mkdir and link: up to `retries` rounds of mkdir and link again.  0,
 * -EEXIST (the name exists: another writer won), or another negated errno
 * with a message naming `tier`. */
int kvt_fanout_link(kvt_io *io, const char *root, const char *tmp,
		    const char *fin, int durability, int retries,
		    const char *tier);

#endif
