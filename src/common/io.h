/*
 * io.h — the table of file-system calls every tier makes.
 *
 * No tier calls open(2), pwrite(2), ftruncate(2), statx(2) or fsync(2)
 * directly: it calls through a kvt_io table.  kvt_io_posix() is the real
 * one; tests build tables that fail with EIO or ENOSPC on a countdown, tear
 * or shorten writes, or drop what was not fsynced, to prove that a tier
 * reports faults and never serves a torn chunk.  Every call returns >= 0 on
 * success or a negated errno; none touches errno as its way of reporting.
 *
 * The io_uring data path.  The NVMe tier moves its data through its own
 * ring, where no table call can stand between the kernel and the buffer.
 * Instead every completion passes through the table's ring_done before the
 * tier believes it: ring_done gets what the kernel reported (bytes moved or
 * a negated errno) and returns what the tier takes as the result.  The real
 * table returns it unchanged; a test table returns -EIO or -ENOSPC to fail
 * that transfer, or fewer bytes to shorten it (the tier then moves the rest
 * with pread/pwrite through the same table, as after a real short
 * transfer).  A fault injected there looks to the tier like the kernel's
 * own: a write the kernel completed and the table failed is a failed write
 * (its temporary is removed, nothing is published), a read the table
 * failed is a failed read.  A table with ring_done NULL cannot see ring
 * transfers, so a tier given it does not use io_uring at all and moves its
 * data with pread/pwrite through the table: whatever table a tier is
 * given, every byte it moves is seen by it.
 *
 * Optional members.  ring_done and preadv may be NULL (preadv: the helper
 * kvt_io_preadv reads segment by segment through pread).  Every other
 * member is required of a table a tier writes through; a NULL ftruncate or
 * statx makes the helpers below fail with -ENOSYS rather than crash (a put
 * that must cut a pad then fails, saying so; NVMe's alignment probe takes
 * the default, as it does when the kernel lacks STATX_DIOALIGN).
 */
#ifndef KVT_IO_H
#define KVT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

struct statx;

/* What the file tiers create: readable by the daemon's user alone.  A
 * chunk's bytes and its key name another tenant's prompt; on a shared file
 * system every node's daemon runs as the same service user. */
#define KVT_FILE_MODE 0600
#define KVT_DIR_MODE 0700

typedef struct kvt_io kvt_io;

/* One directory entry handed to a readdir callback. */
typedef int (*kvt_io_dirent_fn)(void *arg, const char *name, int is_dir);

struct kvt_io {
	int (*open)(kvt_io *io, const char *path, int flags, mode_t mode);
	int (*close)(kvt_io *io, int fd);
	ssize_t (*pread)(kvt_io *io, int fd, void *buf, size_t len, off_t off);
	ssize_t (*pwrite)(kvt_io *io, int fd, const void *buf, size_t len,
			  off_t off);
	int (*fsync)(kvt_io *io, int fd);
	int (*fstat)(kvt_io *io, int fd, struct stat *st);
	int (*stat)(kvt_io *io, const char *path, struct stat *st);
	int (*link)(kvt_io *io, const char *from, const char *to);
	int (*rename)(kvt_io *io, const char *from, const char *to);
	int (*unlink)(kvt_io *io, const char *path);
	int (*mkdir)(kvt_io *io, const char *path, mode_t mode);
	/* Calls fn for every entry but "." and ".."; fn's nonzero stops. */
	int (*readdir)(kvt_io *io, const char *path, kvt_io_dirent_fn fn,
		       void *arg);
	/* Set the modification time to now (a recency signal where atime is
	 * off). */
	int (*touch)(kvt_io *io, const char *path);
	void *priv; /* for wrappers: the table they forward to, counters */
	/* Set the length of an open file (the NVMe tier cuts the pad of its
	 * last O_DIRECT block). */
	int (*ftruncate)(kvt_io *io, int fd, off_t len);
	/* statx(2) of an open file (AT_EMPTY_PATH): the NVMe tier asks its
	 * direct-I/O alignment. */
	int (*statx)(kvt_io *io, int fd, unsigned int mask, struct statx *sx);
	/* preadv(2): may come back short like it.  Optional (see above). */
	ssize_t (*preadv)(kvt_io *io, int fd, const struct iovec *iov, int n,
			  off_t off);
	/* A completion of the tier's io_uring: `len` bytes at `off` of `fd`,
	 * from `buf` (write) or into it (read); `res` is the kernel's result.
	 * Returns the result the tier acts on.  Optional: NULL keeps the tier
	 * off io_uring (see above). */
	ssize_t (*ring_done)(kvt_io *io, int fd, int write, void *buf,
			     size_t len, off_t off, ssize_t res);
};

/* The real POSIX table.  Shared, immutable; never freed. */
kvt_io *kvt_io_posix(void);

/* Write all of buf at off, retrying short writes; -EIO if the medium keeps
 * accepting nothing. */
int kvt_io_pwrite_all(kvt_io *io, int fd, const void *buf, size_t len,
		      off_t off);
/* Read exactly len bytes at off; -ENODATA if the file ends first. */
int kvt_io_pread_all(kvt_io *io, int fd, void *buf, size_t len, off_t off);

/* The same through whole blocks of `align` bytes (a power of two; 1: none)
 * read into an aligned buffer of its own, for a descriptor opened with
 * O_DIRECT: the bytes asked and no more than the blocks that hold them. */
int kvt_io_pread_blocks(kvt_io *io, int fd, size_t align, void *buf, size_t len, off_t off);
/* The optional and late members, NULL-safe: see "Optional members". */
int kvt_io_ftruncate(kvt_io *io, int fd, off_t len);
int kvt_io_statx(kvt_io *io, int fd, unsigned int mask, struct statx *sx);
ssize_t kvt_io_preadv(kvt_io *io, int fd, const struct iovec *iov, int n,
		      off_t off);
/* Whether a tier may move data through io_uring with this table. */
static inline int kvt_io_ring_ok(const kvt_io *io)
{
	return io->ring_done != NULL;
}

/* fsync the directory holding `path` (after a link/rename/unlink in it). */
int kvt_io_fsync_parent(kvt_io *io, const char *path);

/* mkdir -p. */
int kvt_io_mkdirs(kvt_io *io, const char *path, mode_t mode);

#endif
