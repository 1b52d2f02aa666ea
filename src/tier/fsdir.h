/*
 * fsdir.h — a tier that keeps one object image per file in a directory.
 *
 * The directory is any POSIX file system: a local disk, or a shared one
 * (NFS, Lustre, CephFS) that many nodes read and write with no lock server.
 * Layout:
 *
 *   <path>/<k0>/<k1>/<64 hex of the key>.kvt   published images
 *   <path>/tmp/<64 hex>.<pid>.<counter>.tmp     writes in progress
 *
 * where k0, k1 are the key's first two bytes in hex, so no directory holds
 * more than a 65536th of the chunks.  A put writes a temporary file, fsyncs
 * it when power safety is asked, and publishes it with link(2), which fails
 * if the final name exists: the first writer wins across processes and
 * nodes, and a name appears only once its whole image is written.
 *
 * Which keys are present is answered from an in-memory index (hash table +
 * LRU list) rebuilt at open by walking the directory, so exists() costs no
 * system call and a restart is warm.  Reads check the header (key, lengths)
 * and drop what fails; payload checksums are left to the store, which has
 * the decoded header.  Eviction is LRU by bytes; a hit refreshes the file's
 * mtime at most once a minute, as a recency signal for a directory-wide GC.
 *
 * Each node indexes what it wrote and what it found at open: a chunk another
 * node publishes later is not seen until it is rediscovered (reopen, or a
 * losing put of the same key, which adopts the winner's file).
 */
#ifndef KVT_FSDIR_H
#define KVT_FSDIR_H

#include "common/io.h"
#include "tier/tier.h"

typedef struct kvt_fsdir_opts {
	const char *path;   /* directory; created (mkdir -p) if missing */
	uint64_t capacity;  /* bytes of published images plus writes in flight */
	kvt_io *io;         /* NULL = kvt_io_posix(); must outlive the tier */
	int verify_on_open; /* nonzero: read whole files at open and verify
			     * every payload checksum, not just the header */
} kvt_fsdir_opts;

/* Open (or create) the tier at o->path and rebuild its index.  Stale
 * temporaries are removed, files that fail their checks are deleted with one
 * log line each, and if what is found exceeds the capacity the least
 * recently modified files are evicted.  KVT_EINVAL names a bad option; a
 * negated errno (with the path and the call in kvt_errmsg()) if the
 * directory cannot be created or read.  The caller owns *out and frees it
 * with (*out)->ops->close. */
int kvt_fsdir_open(const kvt_fsdir_opts *o, kvt_tier **out);

#endif
