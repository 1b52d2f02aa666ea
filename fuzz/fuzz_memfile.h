/*
 * fuzz_memfile.h — an input as a file a reader can open by name, with
 * nothing written to any file system: a memfd, named by /proc/self/fd/N,
 * refilled for each input.  For the targets whose reader takes a path.
 */
#ifndef KVT_FUZZ_MEMFILE_H
#define KVT_FUZZ_MEMFILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct fuzz_memfile {
	int fd;
	char path[64];
} fuzz_memfile;

static inline void fuzz_memfile_open(fuzz_memfile *m, const char *name)
{
	m->fd = memfd_create(name, MFD_CLOEXEC);
	if (m->fd < 0)
		abort();
	snprintf(m->path, sizeof(m->path), "/proc/self/fd/%d", m->fd);
}

/* Make the file hold exactly buf[0..len). */
static inline void fuzz_memfile_fill(const fuzz_memfile *m, const uint8_t *buf, size_t len)
{
	if (ftruncate(m->fd, 0))
		abort();
	for (size_t off = 0; off < len;) {
		ssize_t n = pwrite(m->fd, buf + off, len - off, (off_t)off);
		if (n <= 0)
			abort();
		off += (size_t)n;
	}
}

#endif
