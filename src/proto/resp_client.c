/*
 * resp_client.c — the client's side of RESP (resp.h): the heads of the
 * commands a peer tier sends, and the reader of the replies another node's
 * kvtierd sends back, bytes no one here controls.
 */
#include "proto/resp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define RESP_REPLY_LINE_MAX 160 /* a reply's first line */

size_t resp_array_head(char *buf, size_t n)
{
	return (size_t)snprintf(buf, 24, "*%zu\r\n", n);
}

size_t resp_bulk_head(char *buf, size_t len)
{
	return (size_t)snprintf(buf, 24, "$%zu\r\n", len);
}

static int src_err(long got)
{
	if (got == 0)
		return kvt_err(-EPIPE, "the connection closed in the middle of a reply");
	if (got == -ETIMEDOUT)
		return kvt_err(-ETIMEDOUT, "no whole reply within peer_timeout_ms");
	return kvt_err((int)got, "reading the reply: %s", strerror((int)-got));
}

/* Bring the first line into the stash: its length with the CRLF. */
static int read_line(resp_src src, void *arg, char *stash, size_t cap, size_t *n,
		     size_t *line_len)
{
	for (;;) {
		for (size_t i = 1; i < *n && i < RESP_REPLY_LINE_MAX; i++)
			if (stash[i - 1] == '\r' && stash[i] == '\n') {
				*line_len = i + 1;
				return 0;
			}
		if (*n >= RESP_REPLY_LINE_MAX)
			return kvt_err(KVT_EMALFORMED, "a reply line longer than %d bytes",
				       RESP_REPLY_LINE_MAX);
		long got = src(arg, stash + *n, cap - *n);
		if (got <= 0)
			return src_err(got);
		*n += (size_t)got;
	}
}

/* Fill `len` bytes at `dst`: first from the stash, then from the source. */
static int read_exact(resp_src src, void *arg, char *stash, size_t *n, void *dst,
		      size_t len)
{
	size_t from = *n < len ? *n : len;

	memcpy(dst, stash, from);
	memmove(stash, stash + from, *n - from);
	*n -= from;
	while (from < len) {
		long got = src(arg, (char *)dst + from, len - from);
		if (got <= 0)
			return src_err(got);
		from += (size_t)got;
	}
	return 0;
}

static int parse_int(const char *s, size_t len, int64_t *out)
{
	int64_t v = 0;
	size_t i = 0;
	int neg = 0;

	if (len && s[0] == '-')
		neg = 1, i = 1;
	if (i == len || len - i > 18)
		return -1;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = neg ? -v : v;
	return 0;
}

int resp_read_reply(resp_src src, void *arg, char *stash, size_t stash_cap, size_t *stash_len,
		    uint64_t max_bulk, resp_reserve reserve, void *reserve_arg, struct resp_reply *r)
{
	size_t ll = 0;
	int rc;
	char crlf[2];

	memset(r, 0, sizeof(*r));
	if ((rc = read_line(src, arg, stash, stash_cap, stash_len, &ll)))
		return rc;
	r->type = stash[0];
	switch (r->type) {
	case '+':
	case '-':
		snprintf(r->text, sizeof(r->text), "%.*s", (int)(ll - 3), stash + 1);
		break;
	case ':':
	case '$':
		if (parse_int(stash + 1, ll - 3, &r->num) || r->num < -1)
			return kvt_err(KVT_EMALFORMED, "a reply of type '%c' with no number",
				       r->type);
		break;
	default:
		return kvt_err(KVT_EMALFORMED, "not a reply this client asks for (first byte 0x%02x)",
			       (unsigned char)r->type);
	}
	memmove(stash, stash + ll, *stash_len - ll);
	*stash_len -= ll;
	if (r->type != '$' || r->num < 0)
		return 0;
	if ((uint64_t)r->num > max_bulk)
		return kvt_err(KVT_EMALFORMED, "a reply of %lld bytes, more than the %llu a chunk may be",
			       (long long)r->num, (unsigned long long)max_bulk);
	if (reserve) {
		const struct iovec *iov;
		int n_iov;
		uint64_t left = (uint64_t)r->num;
		if ((rc = reserve(reserve_arg, left, &iov, &n_iov)))
			return rc;
		for (int i = 0; rc == 0 && i < n_iov && left; i++) {
			size_t k = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
			rc = read_exact(src, arg, stash, stash_len, iov[i].iov_base, k);
			left -= k;
		}
		if (rc == 0 && left)
			rc = kvt_err(KVT_EINVAL, "the space reserved is short of the reply");
	} else if (!(r->data = malloc(r->num ? (size_t)r->num : 1))) {
		return kvt_err(KVT_ENOMEM, "out of memory for a %lld-byte reply", (long long)r->num);
	} else {
		rc = read_exact(src, arg, stash, stash_len, r->data, (size_t)r->num);
	}
	if (rc == 0)
		rc = read_exact(src, arg, stash, stash_len, crlf, 2);
	if (rc == 0 && (crlf[0] != '\r' || crlf[1] != '\n'))
		rc = kvt_err(KVT_EMALFORMED, "a %lld-byte reply not ended by CRLF", (long long)r->num);
	if (rc) {
		free(r->data);
		r->data = NULL;
	}
	return rc;
}

