/*
 * io.h — the table of file-system calls every tier makes.
 *
 * No tier calls open(2), pwrite(2) or fsync(2) directly: it calls through a
 * kvt_io table.  kvt_io_posix() is the real one; tests build tables that fail
 * with EIO or ENOSPC on a countdown, tear or shorten writes, or drop what was
 * not fsynced, to prove that a tier reports faults and never serves a torn
 * chunk.  Every call returns >= 0 on success or a negated errno; none touches
 * errno as its way of reporting.
 */
#ifndef KVT_IO_H
#define KVT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

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
};

/* The real POSIX table.  Shared, immutable; never freed. */
kvt_io *kvt_io_posix(void);

/* Write all of buf at off, retrying short writes; -EIO if the medium keeps
 * accepting nothing. */
int kvt_io_pwrite_all(kvt_io *io, int fd, const void *buf, size_t len,
		      off_t off);
/* Read exactly len bytes at off; -ENODATA if the file ends first. */
int kvt_io_pread_all(kvt_io *io, int fd, void *buf, size_t len, off_t off);

/* fsync the directory holding `path` (after a link/rename/unlink in it). */
int kvt_io_fsync_parent(kvt_io *io, const char *path);

/* mkdir -p. */
int kvt_io_mkdirs(kvt_io *io, const char *path, mode_t mode);

#endif
