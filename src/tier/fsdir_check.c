/*
 * fsdir_check.c — reading a file at a final name of the directory tier and
 * judging what it is (good, damaged, or not this node's to judge): what
 * the tier's reads, its rebuild at open and its refresh share.
 */
#include "tier/fsdir_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "format/auth.h"
#include "format/object.h"

/* What a file at a final name is, from its size and its decoded header
 * (hrc: kvt_obj_hdr_decode's result; h NULL: judge the size alone): FSDIR_GOOD, FSDIR_BAD (damaged: the
 * writer, repair or GC may remove it) or FSDIR_UNPROVEN (this node cannot
 * read it, but another may: a newer format, a tag it has no key for, a tag
 * under another key), with `why`.  Several nodes share the directory, so
 * only what is damaged by any node's reading counts as bad. */

int fsdir_judge(const fsdir *t, uint64_t size, int hrc,
		       const kvt_obj_hdr *h, const kvt_key *key, char why[256])
{
	uint64_t img;

	if (size < KVT_OBJ_HEADER_BYTES ||
	    size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD + KVT_OBJ_AUTH_TAG_BYTES) {
		snprintf(why, 256, "file is %llu bytes", (unsigned long long)size);
		return FSDIR_BAD;
	}
	if (hrc) {
		snprintf(why, 256, "%s (%s)", kvt_strerror(hrc), kvt_errmsg());
		/* Another version, or not our magic at all: not ours to judge. */
		return hrc == KVT_EVERSION || hrc == KVT_EBADMAGIC ? FSDIR_UNPROVEN
								  : FSDIR_BAD;
	}
	if (!h)
		return FSDIR_GOOD; /* the size alone is plausible */
	if (memcmp(h->key.b, key->b, KVT_KEY_BYTES)) {
		snprintf(why, 256, "header names another key");
		return FSDIR_BAD;
	}
	img = (uint64_t)h->header_len + h->payload_len;
	if (size == img + t->taglen)
		return FSDIR_GOOD;
	if (!t->taglen && size == img + KVT_OBJ_AUTH_TAG_BYTES) {
		snprintf(why, 256, "signed (a %u-byte tag follows the object), and no object_auth_key is configured here",
			 KVT_OBJ_AUTH_TAG_BYTES);
		return FSDIR_UNPROVEN;
	}
	if (t->taglen && size == img) {
		snprintf(why, 256, "not signed, and this tier's object_auth_key requires a tag");
		return FSDIR_UNPROVEN;
	}
	kvt_obj_size_why(why, 256, size, img + t->taglen);
	return FSDIR_BAD;
}

/* Read the whole file (`size` bytes) into `buf` (rounded up to whole
 * blocks).  Through O_DIRECT the last read asks for the whole last block
 * and comes back short at the end of the file. */
int fsdir_read_all(fsdir *t, int fd, int direct, uint8_t *buf,
			  uint64_t size)
{
	uint64_t cap = (size + FSDIR_ALIGN - 1) & ~(uint64_t)(FSDIR_ALIGN - 1);
	uint64_t off = 0;

	if (!direct)
		return kvt_io_pread_all(t->io, fd, buf, (size_t)size, 0);
	while (off < size) {
		ssize_t n = t->io->pread(t->io, fd, buf + off, (size_t)(cap - off),
					 (off_t)off);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -ENODATA;
		off += (uint64_t)n;
		if (off < size && (off & (FSDIR_ALIGN - 1)))
			return -ENODATA; /* a short block before the end */
	}
	return 0;
}

/* Open a published file for reading, through O_DIRECT when the tier uses
 * it for a file of `len` bytes and this file accepts it. */
int fsdir_open_read(fsdir *t, const char *path, uint64_t len,
			   int *direct)
{
	int fd;

	*direct = t->direct && len >= FSDIR_DIRECT_MIN;
	if (*direct) {
		fd = t->io->open(t->io, path, O_RDONLY | O_DIRECT, 0);
		if (fd != -EINVAL)
			return fd;
		*direct = 0;
	}
	return t->io->open(t->io, path, O_RDONLY, 0);
}

/* See fsdir_int.h; the verdict is fsdir_judge's. */
int fsdir_check(fsdir *t, const char *path, const kvt_key *key, int full,
		struct stat *st, char why[256])
{
	kvt_io *io = t->io;
	kvt_obj_hdr h;
	size_t want, cap = 0;
	uint8_t *buf = NULL;
	int fd, rc, direct;

	fd = io->open(io, path, O_RDONLY, 0);
	if (fd < 0) {
		if (fd != -ENOENT)
			kvt_log(KVT_LOG_WARN, "fsdir: skipping %s: open: %s",
				path, kvt_strerror(fd));
		return fd;
	}
	rc = io->fstat(io, fd, st);
	if (rc) {
		kvt_log(KVT_LOG_WARN, "fsdir: skipping %s: fstat: %s", path,
			kvt_strerror(rc));
		goto out;
	}
	if ((rc = fsdir_judge(t, (uint64_t)st->st_size, 0, NULL, key, why)))
		goto out; /* no header to read */
	if (full && t->direct && (uint64_t)st->st_size >= FSDIR_DIRECT_MIN) {
		io->close(io, fd);
		fd = fsdir_open_read(t, path, (uint64_t)st->st_size, &direct);
		if (fd < 0)
			return fd;
	} else {
		direct = 0;
	}
	want = full ? (size_t)st->st_size : KVT_OBJ_HEADER_BYTES;
	if (!(buf = kvt_abuf_get(&t->bufs, want, &cap))) {
		rc = kvt_err(KVT_ENOMEM, "fsdir: no memory to read %s", path);
		goto out;
	}
	rc = fsdir_read_all(t, fd, direct, buf, want);
	if (rc == -ENODATA) {
		snprintf(why, 256, "file shrank while read");
		rc = FSDIR_BAD;
		goto out;
	}
	if (rc) {
		kvt_log(KVT_LOG_WARN, "fsdir: skipping %s: pread: %s", path,
			kvt_strerror(rc));
		goto out;
	}
	rc = kvt_obj_hdr_decode(buf, want, &h);
	if ((rc = fsdir_judge(t, (uint64_t)st->st_size, rc, &h, key, why)))
		goto out;
	if (full && (rc = kvt_obj_decode(buf, want - t->taglen, &h))) {
		snprintf(why, 256, "%s (%s)", kvt_strerror(rc), kvt_errmsg());
		rc = FSDIR_BAD;
		goto out;
	}
	if (full && t->taglen) {
		struct iovec img = { buf, want - t->taglen };
		rc = kvt_obj_auth_verify(&img, 1, t->auth_key, t->auth_klen,
					 buf + img.iov_len);
		if (rc == KVT_ECORRUPT) {
			snprintf(why, 256, "HMAC tag does not verify under this node's object_auth_key");
			rc = FSDIR_UNPROVEN;
		}
	}
out:
	kvt_abuf_put(&t->bufs, buf, cap);
	io->close(io, fd);
	return rc;
}
