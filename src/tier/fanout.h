/*
 * fanout.h — what the file-per-chunk tiers (nvme, fsdir) share about their
 * directory tree: <root>/<k0>/<k1>/<64 hex>.kvt, two levels of 256 named by
 * the key's first two bytes, so no directory grows past a few thousand
 * entries even at millions of chunks.
 */
#ifndef KVT_FANOUT_H
#define KVT_FANOUT_H

#include <stdatomic.h>

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

#endif
