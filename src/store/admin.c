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
/* Tiers walk object images; callers are promised payload lengths. */
struct iter_ctx {
	int (*fn)(void *arg, const kvt_key *key, uint64_t len);
	void *arg;
};

static int iter_payload(void *arg, const kvt_key *key, uint64_t len)
{
	struct iter_ctx *c = arg;
	return c->fn(c->arg, key, len >= KVT_OBJ_HEADER_BYTES ? len - KVT_OBJ_HEADER_BYTES : 0);
}

int kvt_store_iterate(kvt_store *st, int tier,
		      int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		      void *arg)
{
	struct iter_ctx c = { fn, arg };

	if (!st || !fn || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "tier %d of %d", tier, st ? st->n_tiers : 0);
	return st->tiers[tier]->ops->iterate(st->tiers[tier], iter_payload, &c);
}

/* Copy bytes [off, off + len) of a borrowed image out of its segments. */
static void rbuf_copy(const kvt_tier_rbuf *rb, uint64_t off, void *buf, size_t len)
{
	for (int i = 0; i < rb->n_iov && len; i++) {
		const struct iovec *s = &rb->iov[i];
		if (off >= s->iov_len) {
			off -= s->iov_len;
			continue;
		}
		size_t k = s->iov_len - (size_t)off < len ? s->iov_len - (size_t)off : len;
		memcpy(buf, (const char *)s->iov_base + off, k);
		buf = (char *)buf + k;
		len -= k;
		off = 0;
	}
}

int kvt_store_peek(kvt_store *st, int tier, const kvt_key *key, kvt_object_info *info,
		   uint64_t off, void *buf, size_t len)
{
	uint8_t *raw = NULL;
	kvt_obj_hdr *h = NULL;
	kvt_tier_rbuf *rb = NULL;
	kvt_tier *t;
	uint64_t image = 0;
	int rc, retried = 0;

	kvt_err_clear();
	if (!st || !key || !info || (len && !buf) || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "peek: a NULL pointer, or tier %d of %d", tier,
			       st ? st->n_tiers : 0);
	t = st->tiers[tier];
	h = malloc(sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if (t->ops->peek) {
		/* The range is asked with the header, before the header says
		 * how long the payload is: checked after. */
		if (!(raw = malloc(KVT_OBJ_HEADER_BYTES)))
			rc = kvt_err(KVT_ENOMEM, "out of memory");
		else
			rc = t->ops->peek(t, key, raw, KVT_OBJ_HEADER_BYTES + off, buf, len, &image);
		if (rc == KVT_ETRUNCATED && len) { /* short, or a range past the end? */
			rc = t->ops->peek(t, key, raw, 0, NULL, 0, &image);
			retried = 1;
		}
		if (rc == 0)
			rc = kvt_obj_hdr_decode(raw, KVT_OBJ_HEADER_BYTES, h);
	} else {
		rc = t->ops->get(t, key, &rb);
		if (rc == 0) {
			image = rb->len;
			rc = store_image_header(rb, h);
		}
	}
	if (rc == 0 && memcmp(h->key.b, key->b, KVT_KEY_BYTES))
		rc = kvt_err(KVT_EMISMATCH, "peek: the %s tier's object under that key names "
			     "another", t->ops->name);
	if (rc == 0 && (off > h->payload_len || len > h->payload_len - off))
		rc = kvt_err(KVT_EINVAL, "peek: bytes %llu..%llu of a %llu-byte payload",
			     (unsigned long long)off, (unsigned long long)(off + len),
			     (unsigned long long)h->payload_len);
	if (rc == 0 && image < (uint64_t)h->header_len + h->payload_len)
		rc = kvt_err(KVT_ETRUNCATED, "peek: the %s tier's image is %llu bytes, its "
			     "header declares %llu", t->ops->name, (unsigned long long)image,
			     (unsigned long long)(h->header_len + h->payload_len));
	if (rc == 0 && retried) /* the range was not read: the file changed between */
		rc = kvt_err(KVT_ETRUNCATED, "peek: the %s tier's image ended early",
			     t->ops->name);
	if (rc == 0 && rb)
		rbuf_copy(rb, h->header_len + off, buf, len);
	if (rc == 0) {
		memset(info, 0, sizeof(*info));
		store_info_from_hdr(info, h);
		info->signature = KVT_SIG_UNCHECKED;
	}
	if (rb)
		t->ops->release(t, rb);
	free(raw);
	free(h);
	return rc;
}
