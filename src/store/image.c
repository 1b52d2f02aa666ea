/*
 * image.c — a stored chunk's image as the store handles it: its header
 * decoded from however many segments a tier lent it in, its payload's
 * segments, its token count, a copy of it into another tier's write
 * buffer, and whether it is past the store's TTL.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "format/object.h"
#include "store/store_int.h"

/* The payload segments of an image: skip the header's bytes. */
int store_payload_iov(const kvt_tier_rbuf *rb, uint64_t skip,
		      struct iovec **out, int *n_out)
{
	struct iovec *v = malloc(sizeof(*v) * (size_t)(rb->n_iov ? rb->n_iov : 1));
	int n = 0;

	if (!v)
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (int i = 0; i < rb->n_iov; i++) {
		const struct iovec *s = &rb->iov[i];
		if (skip >= s->iov_len) {
			skip -= s->iov_len;
			continue;
		}
		v[n].iov_base = (char *)s->iov_base + skip;
		v[n].iov_len = s->iov_len - skip;
		skip = 0;
		n++;
	}
	*out = v;
	*n_out = n;
	return 0;
}

/* Decode the header of a borrowed image, which may span segments. */
int store_image_header(const kvt_tier_rbuf *rb, kvt_obj_hdr *h)
{
	uint8_t tmp[KVT_OBJ_HEADER_BYTES];
	size_t got = 0;

	if (rb->n_iov > 0 && rb->iov[0].iov_len >= KVT_OBJ_HEADER_BYTES)
		return kvt_obj_hdr_decode(rb->iov[0].iov_base, rb->len < rb->iov[0].iov_len
						     ? rb->len : rb->iov[0].iov_len, h);
	for (int i = 0; i < rb->n_iov && got < sizeof(tmp); i++) {
		size_t n = rb->iov[i].iov_len;
		if (n > sizeof(tmp) - got)
			n = sizeof(tmp) - got;
		memcpy(tmp + got, rb->iov[i].iov_base, n);
		got += n;
	}
	return kvt_obj_hdr_decode(tmp, got, h);
}

/* Copy a borrowed image into a write buffer of its length, whatever the
 * segments of each. */
static void image_copy(const kvt_tier_rbuf *src, kvt_tier_wbuf *dst)
{
	int si = 0, di = 0;
	size_t so = 0, dof = 0;

	while (si < src->n_iov && di < dst->n_iov) {
		size_t n = src->iov[si].iov_len - so;
		if (n > dst->iov[di].iov_len - dof)
			n = dst->iov[di].iov_len - dof;
		memcpy((char *)dst->iov[di].iov_base + dof,
		       (const char *)src->iov[si].iov_base + so, n);
		so += n;
		dof += n;
		if (so == src->iov[si].iov_len) {
			si++;
			so = 0;
		}
		if (dof == dst->iov[di].iov_len) {
			di++;
			dof = 0;
		}
	}
}

/* put_begin of tier t for the image `src` holds whole: written from there
 * at commit where the tier can (put_begin_from), else copied now into the
 * space put_begin reserves. */
int store_begin_copy(kvt_tier *t, const kvt_tier_rbuf *src, kvt_tier_wbuf **w)
{
	if (t->ops->put_begin_from) {
		int rc = t->ops->put_begin_from(t, &src->key, src->len, src->iov, src->n_iov, w);
		if (rc != KVT_ENOTSUP)
			return rc;
		kvt_err_clear();
	}
	int rc = t->ops->put_begin(t, &src->key, src->len, w);
	if (rc == 0)
		image_copy(src, *w);
	return rc;
}

uint32_t store_image_tokens(const struct iovec *iov, int n)
{
	const uint8_t *p;

	if (n < 1 || iov[0].iov_len < 116)
		return 0;
	p = (const uint8_t *)iov[0].iov_base + 112; /* token_count, docs/FORMAT.md */
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

double store_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Past the store's TTL.  Saturating: a TTL near the largest number never
 * wraps into "expired long ago". */
int store_expired(const kvt_store *st, const kvt_obj_hdr *h)
{
	struct timespec now;
	uint64_t born = h->created_ns / 1000000000ull;

	uint64_t ttl = __atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED); /* reloadable */

	if (!ttl || ttl > UINT64_MAX - born)
		return 0;
	clock_gettime(CLOCK_REALTIME, &now);
	return now.tv_sec > 0 && (uint64_t)now.tv_sec > born + ttl;
}

int store_image_whole(uint64_t len, const kvt_obj_hdr *h)
{
	if (len == KVT_OBJ_HEADER_BYTES + h->payload_len)
		return 0;
	return kvt_err(KVT_ETRUNCATED, "image is %llu bytes, header says %llu",
		       (unsigned long long)len,
		       (unsigned long long)(KVT_OBJ_HEADER_BYTES + h->payload_len));
}
