/*
 * io.c — the POSIX kvt_io table and the helpers every tier shares.
 *
 * Each call returns >= 0 or a negated errno and restores errno to what it
 * was on entry, so that errno is never the report and a caller's own errno
 * is never clobbered behind its back.  Interrupted calls (EINTR) are retried
 * here, once and for all, except close(2): on Linux the descriptor is gone
 * even when close reports EINTR, and retrying could close someone else's.
 */
#include "common/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* How many times in a row a write may accept nothing before we call the
 * medium broken.  pwrite(2) returning 0 for a non-empty buffer is not a
 * POSIX error, but a loop that waits for it to change would spin forever. */
#define KVT_IO_ZERO_RETRIES 3

static int posix_open(kvt_io *io, const char *path, int flags, mode_t mode)
{
	int saved = errno, fd;

	(void)io;
	do
		fd = open(path, flags | O_CLOEXEC, mode);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		fd = -errno;
	errno = saved;
	return fd;
}

static int posix_close(kvt_io *io, int fd)
{
	int saved = errno, rc;

	(void)io;
	rc = close(fd) < 0 && errno != EINTR ? -errno : 0;
	errno = saved;
	return rc;
}

static ssize_t posix_pread(kvt_io *io, int fd, void *buf, size_t len,
			   off_t off)
{
	int saved = errno;
	ssize_t n;

	(void)io;
	do
		n = pread(fd, buf, len, off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		n = -errno;
	errno = saved;
	return n;
}

static ssize_t posix_pwrite(kvt_io *io, int fd, const void *buf, size_t len,
			    off_t off)
{
	int saved = errno;
	ssize_t n;

	(void)io;
	do
		n = pwrite(fd, buf, len, off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		n = -errno;
	errno = saved;
	return n;
}

static int posix_fsync(kvt_io *io, int fd)
{
	int saved = errno, rc;

	(void)io;
	do
		rc = fsync(fd);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		rc = -errno;
	errno = saved;
	return rc;
}

static int posix_fstat(kvt_io *io, int fd, struct stat *st)
{
	int saved = errno;
	int rc = fstat(fd, st) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static int posix_stat(kvt_io *io, const char *path, struct stat *st)
{
	int saved = errno;
	int rc = stat(path, st) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static int posix_link(kvt_io *io, const char *from, const char *to)
{
	int saved = errno;
	int rc = link(from, to) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static int posix_rename(kvt_io *io, const char *from, const char *to)
{
	int saved = errno;
	int rc = rename(from, to) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static int posix_unlink(kvt_io *io, const char *path)
{
	int saved = errno;
	int rc = unlink(path) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static int posix_mkdir(kvt_io *io, const char *path, mode_t mode)
{
	int saved = errno;
	int rc = mkdir(path, mode) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

/* d_type is DT_UNKNOWN on some file systems (XFS without ftype, many network
 * and parallel file systems); ask the inode then. */
static int posix_entry_is_dir(DIR *d, const struct dirent *e)
{
	struct stat st;

	if (e->d_type != DT_UNKNOWN)
		return e->d_type == DT_DIR;
	if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	return S_ISDIR(st.st_mode);
}

static int posix_readdir(kvt_io *io, const char *path, kvt_io_dirent_fn fn,
			 void *arg)
{
	int saved = errno, rc = 0;
	struct dirent *e;
	DIR *d;

	(void)io;
	d = opendir(path);
	if (!d) {
		rc = -errno;
		errno = saved;
		return rc;
	}
	for (;;) {
		errno = 0;
		e = readdir(d);
		if (!e) {
			if (errno)
				rc = -errno;
			break;
		}
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		rc = fn(arg, e->d_name, posix_entry_is_dir(d, e));
		if (rc)
			break;
	}
	closedir(d);
	errno = saved;
	return rc;
}

static int posix_touch(kvt_io *io, const char *path)
{
	/* mtime only: atime is often off (noatime) and means nothing to us. */
	const struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
					{ .tv_nsec = UTIME_NOW } };
	int saved = errno;
	int rc = utimensat(AT_FDCWD, path, ts, 0) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static int posix_ftruncate(kvt_io *io, int fd, off_t len)
{
	int saved = errno, rc;

	(void)io;
	do
		rc = ftruncate(fd, len);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		rc = -errno;
	errno = saved;
	return rc;
}

static int posix_statx(kvt_io *io, int fd, unsigned int mask, struct statx *sx)
{
	int saved = errno;
	int rc = statx(fd, "", AT_EMPTY_PATH, mask, sx) < 0 ? -errno : 0;

	(void)io;
	errno = saved;
	return rc;
}

static ssize_t posix_preadv(kvt_io *io, int fd, const struct iovec *iov,
			    int n, off_t off)
{
	int saved = errno;
	ssize_t r;

	(void)io;
	do
		r = preadv(fd, iov, n, off);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		r = -errno;
	errno = saved;
	return r;
}

/* The kernel's word is final: the real table changes nothing. */
static ssize_t posix_ring_done(kvt_io *io, int fd, int write, void *buf,
			       size_t len, off_t off, ssize_t res)
{
	(void)io, (void)fd, (void)write, (void)buf, (void)len, (void)off;
	return res;
}

static kvt_io kvt_io_posix_table = {
	.open = posix_open,
	.close = posix_close,
	.pread = posix_pread,
	.pwrite = posix_pwrite,
	.fsync = posix_fsync,
	.fstat = posix_fstat,
	.stat = posix_stat,
	.link = posix_link,
	.rename = posix_rename,
	.unlink = posix_unlink,
	.mkdir = posix_mkdir,
	.readdir = posix_readdir,
	.touch = posix_touch,
	.priv = NULL,
	.ftruncate = posix_ftruncate,
	.statx = posix_statx,
	.preadv = posix_preadv,
	.ring_done = posix_ring_done,
};

kvt_io *kvt_io_posix(void)
{
	return &kvt_io_posix_table;
}

int kvt_io_pwrite_all(kvt_io *io, int fd, const void *buf, size_t len,
		      off_t off)
{
	const unsigned char *p = buf;
	int zeros = 0;

	while (len > 0) {
		ssize_t n = io->pwrite(io, fd, p, len, off);
		if (n < 0)
			return (int)n;
		if ((size_t)n > len)
			return -EIO; /* a table that claims more than it was given */
		if (n == 0) {
			if (++zeros >= KVT_IO_ZERO_RETRIES)
				return -EIO;
			continue;
		}
		zeros = 0;
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

int kvt_io_pread_all(kvt_io *io, int fd, void *buf, size_t len, off_t off)
{
	unsigned char *p = buf;

	while (len > 0) {
		ssize_t n = io->pread(io, fd, p, len, off);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -ENODATA;
		if ((size_t)n > len)
			return -EIO;
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

int kvt_io_pread_blocks(kvt_io *io, int fd, size_t align, void *buf, size_t len, off_t off)
{
	off_t lo = off & ~(off_t)(align - 1);
	size_t need = (size_t)(off - lo) + len, span = (need + align - 1) & ~(align - 1), got = 0;
	unsigned char *b;
	int rc = 0;

	if (align <= 1 || !len)
		return kvt_io_pread_all(io, fd, buf, len, off);
	if (posix_memalign((void **)&b, align, span))
		return -ENOMEM;
	/* Whole blocks, as O_DIRECT wants them; the file's last one comes
	 * back short, and nothing follows it. */
	while (!rc && got < need) {
		ssize_t n = io->pread(io, fd, b + got, span - got, lo + (off_t)got);
		if (n < 0)
			rc = (int)n;
		else if (n == 0 || (size_t)n > span - got)
			rc = n ? -EIO : -ENODATA;
		else if ((got += (size_t)n) < need && (got & (align - 1)))
			rc = -ENODATA;
	}
	if (!rc)
		memcpy(buf, b + (off - lo), len);
	free(b);
	return rc;
}

int kvt_io_ftruncate(kvt_io *io, int fd, off_t len)
{
	return io->ftruncate ? io->ftruncate(io, fd, len) : -ENOSYS;
}

int kvt_io_statx(kvt_io *io, int fd, unsigned int mask, struct statx *sx)
{
	return io->statx ? io->statx(io, fd, mask, sx) : -ENOSYS;
}

ssize_t kvt_io_preadv(kvt_io *io, int fd, const struct iovec *iov, int n,
		      off_t off)
{
	ssize_t done = 0;
	int i;

	if (io->preadv)
		return io->preadv(io, fd, iov, n, off);
	/* One segment at a time, stopping where a read comes back short:
	 * what preadv(2) would have returned. */
	for (i = 0; i < n; i++) {
		ssize_t r = io->pread(io, fd, iov[i].iov_base, iov[i].iov_len,
				      off + done);
		if (r < 0)
			return r; /* an error wins over what came before it */
		done += r;
		if ((size_t)r < iov[i].iov_len)
			break;
	}
	return done;
}

int kvt_io_fsync_parent(kvt_io *io, const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t n;
	int fd, rc, rc2;

	if (!slash) {
		dir[0] = '.';
		n = 1;
	} else {
		n = slash == path ? 1 : (size_t)(slash - path); /* "/x" -> "/" */
		if (n >= sizeof(dir))
			return -ENAMETOOLONG;
		memcpy(dir, path, n);
	}
	dir[n] = '\0';
	fd = io->open(io, dir, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	rc = io->fsync(io, fd);
	rc2 = io->close(io, fd);
	return rc ? rc : rc2;
}

int kvt_io_mkdirs(kvt_io *io, const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(path), i;
	struct stat st;
	int rc;

	if (len == 0)
		return -ENOENT;
	if (len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	/* Create each prefix in turn; EEXIST is success only for a directory
	 * (another process or node may be creating the same path). */
	for (i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		if (buf[i - 1] == '/')
			continue; /* "a//b" */
		buf[i] = '\0';
		rc = io->mkdir(io, buf, mode);
		/* An existing prefix is fine whatever mkdir said about it:
		 * some systems report EACCES or EROFS before EEXIST. */
		if (rc && io->stat(io, buf, &st) == 0)
			rc = S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
		if (rc)
			return rc;
		if (i < len)
			buf[i] = '/';
	}
	return 0;
}
