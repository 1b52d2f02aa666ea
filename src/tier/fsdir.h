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
 * Other nodes' publications and deletions (their puts, evictions and GC)
 * reach this node's index through a background refresh: every refresh_ms a
 * thread reads up to refresh_dirs fan-out directories (readdir only), reads
 * the 4 KiB header of names it has not indexed yet, and at the end of each
 * full cycle drops entries whose files have vanished.  exists() never waits
 * for it.  With D fan-out directories present, what exists() answers is
 * stale by at most ceil(D / refresh_dirs) x refresh_ms plus one scan's time
 * (docs/SHAREDFS.md); a get of a key not indexed is a miss without a system
 * call, and kvt_fsdir_probe asks the directory at once.
 *
 * With an authentication key every file carries a 32-byte HMAC-SHA-256 tag
 * after the image (src/format/auth.h); a file without a valid tag is treated
 * as corrupt.  Every node sharing a directory must use the same key.
 *
 * O_DIRECT is used for images of 1 MiB or more when the file system accepts
 * it (probed at open, one log line if not).
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
			     * every payload checksum (and tag), not just the
			     * header */
	int refresh_ms;     /* period of the background refresh: 0 = 2000,
			     * negative = no refresh thread */
	uint32_t refresh_dirs; /* leaf directories read per refresh tick;
				* 0 = 4096 */
	const uint8_t *auth_key; /* NULL = no authentication; else at least
				  * 16 bytes, copied at open */
	size_t auth_key_len;
	int direct;         /* 0 = O_DIRECT for large images where supported,
			     * negative = never */
	int read_only;      /* 1: read what is there, write nothing: no
			     * directory made, no temporary cleaned, no mtime
			     * touched, no put.  (On a read-only mount a
			     * writable open serves reads too; its puts fail
			     * with EROFS.) */
} kvt_fsdir_opts;

/* Open (or create) the tier at o->path and rebuild its index.  Nothing
 * published is removed at open: files that fail their checks are logged,
 * counted and left unserved (verify lists them; verify --repair and GC
 * quarantine only those proven damaged, never one this node merely cannot
 * verify, which another node may read); a directory over this node's
 * capacity is logged, since the fleet's budget is the collector's to keep
 * (kvt_fsdir_gc).  A writable open removes stale temporaries.  KVT_EINVAL names a bad option; a
 * negated errno (with the path and the call in kvt_errmsg()) if the
 * directory cannot be created or read.  The caller owns *out and frees it
 * with (*out)->ops->close. */
int kvt_fsdir_open(const kvt_fsdir_opts *o, kvt_tier **out);

/* Ask the directory whether `key` is published (one stat, plus a header read
 * if the file is not indexed yet) and index it if so: 1 present, 0 absent,
 * or a negated errno.  For tests and tools; the store never calls it. */
int kvt_fsdir_probe(kvt_tier *t, const kvt_key *key);

/* One full refresh cycle now, in the caller's thread (what the background
 * thread does in slices): index new files, drop entries whose files
 * vanished.  0 or a negated errno. */
int kvt_fsdir_refresh(kvt_tier *t);

/* Whether the tier uses O_DIRECT for large images, and its refresh period
 * (negative: none). */
void kvt_fsdir_info(kvt_tier *t, int *direct, int *refresh_ms);

/* --- garbage collection without a coordinator ----------------------------
 *
 * kvt_fsdir_gc walks <root> (no tier need be open, any number of nodes may
 * run it at once), lists the published images with their size and
 * modification time (the recency signal: a get touches it at most once a
 * minute), and unlinks oldest first every image older than ttl_s and then
 * more until the bytes left are at most budget.  Temporaries in <root>/tmp
 * older than tmp_grace_s are removed too.  A file another collector removed
 * first (ENOENT) is not an error; a reader holding a file open keeps reading
 * it after the unlink.  The budget is soft (docs/SHAREDFS.md): what writers
 * publish while a pass runs is not seen by that pass. */
typedef struct kvt_fsdir_gc_opts {
	uint64_t budget;      /* bytes of images to keep at most; 0 = no
			       * budget (TTL only) */
	int64_t ttl_s;        /* images older than this go; 0 = no TTL */
	int64_t tmp_grace_s;  /* 0 = 15 minutes */
	int dry_run;          /* count what would go; unlink nothing */
	kvt_io *io;           /* NULL = kvt_io_posix() */
} kvt_fsdir_gc_opts;

typedef struct kvt_fsdir_gc_result {
	uint64_t files, bytes;            /* images found */
	uint64_t removed, removed_bytes;  /* images unlinked (or, dry run,
					   * that would be) */
	uint64_t expired;                 /* of those, for the TTL */
	uint64_t raced;                   /* already gone: another collector */
	uint64_t tmp_removed;             /* stale temporaries */
	uint64_t errors;                  /* unlinks that failed otherwise */
	uint64_t bytes_left;              /* bytes - removed_bytes */
	double seconds;                   /* the pass's wall time */
} kvt_fsdir_gc_result;

/* One GC pass over <root>.  0, KVT_EINVAL for bad options, or the negated
 * errno of a directory that could not be read (with the path in
 * kvt_errmsg()); unlink failures are counted, not fatal. */
int kvt_fsdir_gc(const char *root, const kvt_fsdir_gc_opts *o,
		 kvt_fsdir_gc_result *r);

#endif
