/*
 * admin.c — what maintenance tools call without opening a store: verify
 * one object file (kvt_object_inspect_fd).  It is thin: the object decoder
 * does the work; this file gives it the public shape (kvtier.h) so that a
 * tool links the library and nothing else.  A shared directory's garbage
 * collection (kvt_shared_gc) is the registry's (tiers.c), which alone above
 * tier/ names a tier kind.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "format/auth.h"
#include "format/object.h"
#include "store/config.h"
#include "store/store_int.h"

/* Read up to n bytes (fewer only at end of file).  The count, or a
 * negated errno. */
static ssize_t admin_read_upto(int fd, uint8_t *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* The size of what `fd` holds if it is a regular file, else -1 (a pipe:
 * read as a stream, to the bound). */
static int64_t admin_file_size(int fd)
{
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode))
		return -1;
	return (int64_t)st.st_size;
}

/* The image is valid up to the header's declared end; what follows it
 * (`extra` bytes, the whole file being `fsize` or -1) must be nothing or
 * exactly an HMAC trailer. */
static int admin_trailer_check(uint64_t image, uint64_t extra, int64_t fsize)
{
	char why[160];

	if (!extra || extra == KVT_OBJ_AUTH_TAG_BYTES)
		return 0;
	/* Say exactly how many: a regular file knows, a pipe is counted to
	 * the bound read. */
	if (fsize >= 0 && (uint64_t)fsize >= image)
		kvt_obj_size_why(why, sizeof(why), (uint64_t)fsize, image);
	else
		snprintf(why, sizeof(why),
			 "header says %llu bytes (trailing bytes: %s%llu bytes after the declared object)",
			 (unsigned long long)image, extra > KVT_OBJ_AUTH_TAG_BYTES ? "more than " : "",
			 (unsigned long long)(extra > KVT_OBJ_AUTH_TAG_BYTES ? extra - 1 : extra));
	return kvt_err(KVT_EMALFORMED, "%s; an HMAC trailer is exactly %u bytes", why,
		       KVT_OBJ_AUTH_TAG_BYTES);
}

void store_info_from_hdr(kvt_object_info *info, const kvt_obj_hdr *h)
{
	info->key = h->key;
	memcpy(info->ns_digest, h->ns_digest, sizeof(info->ns_digest));
	info->version = h->version;
	info->layout = h->layout;
	info->layout.chunk_tokens = h->token_count;
	info->n_layers = h->n_layers;
	info->payload_bytes = h->payload_len;
}

int kvt_object_inspect_fd(int fd, const kvt_config *cfg, kvt_object_info *info)
{
	kvt_obj_hdr *h = NULL;
	uint8_t *buf = NULL;
	char why[160];
	int rc;

	if (fd < 0 || !info)
		return kvt_err(KVT_EINVAL, "kvt_object_inspect_fd: %s",
			       fd < 0 ? "no file descriptor" : "info is NULL");
	memset(info, 0, sizeof(*info));
	int64_t fsize = admin_file_size(fd);
	h = malloc(sizeof(*h));
	buf = malloc(KVT_OBJ_HEADER_BYTES);
	if (!h || !buf) {
		rc = kvt_err(KVT_ENOMEM, "out of memory");
		goto out;
	}
	ssize_t got = admin_read_upto(fd, buf, KVT_OBJ_HEADER_BYTES);
	if (got < 0) {
		rc = kvt_err((int)got, "reading the header: %s", strerror((int)-got));
		goto out;
	}
	if ((rc = kvt_obj_hdr_decode(buf, (size_t)got, h)))
		goto out;

	/* The header is valid: the declared image, plus room for a trailer
	 * and one byte more. */
	uint64_t image = (uint64_t)h->header_len + h->payload_len;
	if (fsize >= 0 && (uint64_t)fsize < image) {
		kvt_obj_size_why(why, sizeof(why), (uint64_t)fsize, image);
		rc = kvt_err(KVT_ETRUNCATED, "%s", why);
		goto out;
	}
	size_t room = (size_t)image + KVT_OBJ_AUTH_TAG_BYTES + 1;
	uint8_t *nb = realloc(buf, room);
	if (!nb) {
		rc = kvt_err(KVT_ENOMEM, "out of memory for the %llu bytes the header declares",
			     (unsigned long long)image);
		goto out;
	}
	buf = nb;
	got = admin_read_upto(fd, buf + KVT_OBJ_HEADER_BYTES, room - KVT_OBJ_HEADER_BYTES);
	if (got < 0) {
		rc = kvt_err((int)got, "reading the payload: %s", strerror((int)-got));
		goto out;
	}
	uint64_t len = KVT_OBJ_HEADER_BYTES + (uint64_t)got;
	if (len < image) {
		kvt_obj_size_why(why, sizeof(why), len, image);
		rc = kvt_err(KVT_ETRUNCATED, "%s", why);
		goto out;
	}
	uint64_t extra = len - image;
	if ((rc = admin_trailer_check(image, extra, fsize)))
		goto out;
	if ((rc = kvt_obj_decode(buf, (size_t)image, h))) /* every layer's checksum */
		goto out;

	int keyed = cfg && cfg->object_auth_key_len;
	if (extra && keyed) {
		struct iovec img = { buf, (size_t)image };
		rc = kvt_obj_auth_verify(&img, 1, cfg->object_auth_key, cfg->object_auth_key_len,
					 buf + image);
		if (rc == KVT_ECORRUPT)
			rc = kvt_err(KVT_ECORRUPT, "HMAC tag does not verify: signed with another "
				     "object_auth_key, or altered after signing");
		if (rc)
			goto out;
		info->signature = KVT_SIG_VERIFIED;
	} else {
		info->signature = extra ? KVT_SIG_UNCHECKED : keyed ? KVT_SIG_MISSING : KVT_SIG_NONE;
	}
	store_info_from_hdr(info, h);
out:
	free(buf);
	free(h);
	return rc;
}
