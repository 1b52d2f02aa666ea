/*
 * nvme.h — a tier on a local NVMe disk: one object image per file, written
 * and read with O_DIRECT through io_uring.
 *
 * It is fsdir's sibling for the fast local disk of one node.  Same layout:
 *
 *   <path>/<k0>/<k1>/<64 hex of the key>.kvt   published images
 *   <path>/tmp/<64 hex>.<pid>.<counter>.tmp     writes in progress
 *   <path>/tmp/spare.<pid>.<counter>.tmp        files of deleted images
 *
 * and the same publication rule (write a temporary, link(2) it to its final
 * name: the first writer wins, a name appears only once its image is whole).
 * A del keeps the file it removes as a spare that a later put overwrites
 * in place of a fresh temporary (no file made, no blocks allocated or
 * freed); nvme.c's "Spares" says when that is safe.
 * What differs is the data path: files are opened with O_DIRECT so that
 * chunks bypass the page cache (the DRAM tier above already caches them),
 * buffers are aligned to the device's direct-I/O alignment, and a large image
 * is cut into segments (1 MiB by default) that are all kept in flight on one
 * io_uring ring, so one 32 MiB chunk uses the whole queue depth.
 *
 * Fallbacks, each announced by one log line: a file system that refuses
 * O_DIRECT (tmpfs, some FUSE) gets buffered I/O; a kernel or container that
 * refuses io_uring (EPERM, ENOSYS) gets pread/pwrite through the kvt_io
 * table.  docs/NVME.md gives the details and the durability levels.
 */
#ifndef KVT_NVME_H
#define KVT_NVME_H

#include "common/io.h"
#include "tier/tier.h"

#define KVT_NVME_DEFAULT_QD 16u
#define KVT_NVME_DEFAULT_SEGMENT (1u << 20)

typedef struct kvt_nvme_opts {
	const char *path;      /* directory; created (mkdir -p) if missing */
	uint64_t capacity;     /* bytes on disk (images rounded up to the
				* alignment) plus writes in flight */
	uint32_t queue_depth;  /* io_uring entries; 0 = KVT_NVME_DEFAULT_QD */
	int use_io_uring;      /* 1: try io_uring; 0: force pread/pwrite */
	uint32_t segment_bytes; /* largest single submission; 0 = 1 MiB.
				 * Rounded down to the alignment. */
	int read_only;         /* 1: read what is there, write nothing (no
				* directory made, no temporary cleaned, no
				* put).  Also chosen, with a log line, when
				* the directory is not writable (a
				* read-only mount). */
	kvt_io *io;            /* NULL = kvt_io_posix(); must outlive the tier.
				* Used for every file call; every io_uring
				* completion passes through its ring_done,
				* and a table without one keeps the data on
				* pread/pwrite through it (common/io.h). */
} kvt_nvme_opts;

/* Open (or create) the tier at o->path and rebuild its index from the first
 * 4 KiB of every published file.  Nothing is removed at open: files that
 * fail their checks (header, name, length) are logged, counted and left
 * in place unserved (verify lists them, verify --repair moves them into
 * <path>/quarantine, a put of their key replaces them); a tree over the
 * capacity is logged and trimmed by the next put that needs room.  A
 * writable open removes its own temporaries older than a grace period.  KVT_EINVAL names a bad
 * option; a negated errno (path and call in kvt_errmsg()) if the directory
 * cannot be created or read.  The caller owns *out and frees it with
 * (*out)->ops->close. */
int kvt_nvme_open(const kvt_nvme_opts *o, kvt_tier **out);

/* What an open tier ended up using, for tests and diagnostics: 1 if
 * io_uring is in use, 1 if files are opened with O_DIRECT, and the
 * alignment in bytes.  Any pointer may be NULL.  `t` must be an nvme tier. */
void kvt_nvme_info(kvt_tier *t, int *io_uring, int *direct, uint32_t *align);

#endif
