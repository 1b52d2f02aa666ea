/*
 * resp.c — RESP request parser and reply encoders (resp.h).
 */
#include "proto/resp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_START, ST_BULKHDR, ST_BULK, ST_BIG, ST_DONE };

static void *plain_get(void *ctx, size_t n, size_t *cap)
{
	(void)ctx;
	*cap = n;
	return malloc(n);
}

static void plain_put(void *ctx, void *p, size_t cap)
{
	(void)ctx;
	(void)cap;
	free(p);
}

void resp_parser_init(struct resp_parser *p, uint64_t max_bulk, uint64_t max_cmd,
		      size_t big_slack)
{
	memset(p, 0, sizeof(*p));
	p->max_bulk = max_bulk;
	p->max_cmd = max_cmd;
	p->max_args = RESP_MAX_ARGS;
	p->big_slack = big_slack;
	p->alloc = (struct resp_alloc){ .get = plain_get, .put = plain_put };
}

static void give_back(struct resp_parser *p, struct resp_arg *a)
{
	if (a->big == 1)
		p->alloc.put(p->alloc.ctx, a->p, a->cap);
	else if (a->big == 3)
		p->alloc.unplace(p->alloc.place_ctx, a->placed);
	a->big = 0;
}

/* Forget the command built so far, freeing the big buffers not taken. */
static void reset_cmd(struct resp_parser *p)
{
	for (size_t i = 0; i < p->argc; i++)
		give_back(p, &p->argv[i]);
	/* An argument being read into its own buffer is not counted in argc. */
	if (p->state == ST_BIG && p->argc < p->argv_cap)
		give_back(p, &p->argv[p->argc]);
	p->argc = 0;
	p->arena_len = 0;
	p->cmd_bytes = 0;
	p->state = ST_START;
	p->inline_cmd = 0;
	/* Large tables from one huge command are not kept for the life of
	 * an idle connection. */
	if (p->arena_cap > 1024 * 1024) {
		free(p->arena);
		p->arena = NULL;
		p->arena_cap = 0;
	}
	if (p->argv_cap > 4096) {
		free(p->argv);
		p->argv = NULL;
		p->argv_cap = 0;
	}
}

void resp_parser_free(struct resp_parser *p)
{
	reset_cmd(p);
	free(p->arena);
	free(p->argv);
	memset(p, 0, sizeof(*p));
}

uint64_t resp_held(const struct resp_parser *p)
{
	uint64_t n = p->arena_cap + p->argv_cap * sizeof(struct resp_arg);
	for (size_t i = 0; i < p->argc; i++)
		if (p->argv[i].big == 1 || p->argv[i].big == 3)
			n += p->argv[i].cap;
	if (p->state == ST_BIG)
		n += p->argv[p->argc].cap;
	return n;
}

static int perr(struct resp_parser *p, const char *what)
{
	snprintf(p->err, sizeof(p->err), "Protocol error: %s", what);
	return RESP_PERR;
}

/* Room for one more argument in the table. */
static int arg_slot(struct resp_parser *p)
{
	if (p->argc < p->argv_cap)
		return 0;
	size_t n = p->argv_cap ? p->argv_cap * 2 : 8;
	struct resp_arg *a = realloc(p->argv, n * sizeof(*a));
	if (!a)
		return RESP_NOMEM;
	p->argv = a;
	p->argv_cap = n;
	return 0;
}

static int arena_reserve(struct resp_parser *p, size_t more)
{
	if (p->arena_len + more <= p->arena_cap)
		return 0;
	size_t n = p->arena_cap ? p->arena_cap : 256;
	while (n < p->arena_len + more)
		n *= 2;
	char *a = realloc(p->arena, n);
	if (!a)
		return RESP_NOMEM;
	p->arena = a;
	p->arena_cap = n;
	return 0;
}

/* Arena arguments get their pointers once the arena stops moving. */
static int finish_cmd(struct resp_parser *p)
{
	for (size_t i = 0; i < p->argc; i++)
		if (!p->argv[i].big)
			p->argv[i].p = p->arena + p->argv[i].off;
	p->state = ST_DONE;
	return RESP_CMD;
}

/* A strictly decimal integer of [s, e), with an optional minus. */
static int parse_ll(const char *s, const char *e, int64_t *out)
{
	int neg = 0;
	uint64_t v = 0;

	if (s < e && *s == '-') {
		neg = 1;
		s++;
	}
	if (s == e || e - s > 18)
		return -1;
	for (; s < e; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

static const char *find_crlf(const char *s, size_t n)
{
	const char *r = memchr(s, '\r', n);
	while (r && (size_t)(r - s) + 1 < n && r[1] != '\n')
		r = memchr(r + 1, '\r', n - (size_t)(r + 1 - s));
	return r && (size_t)(r - s) + 1 < n ? r : NULL;
}

/* The inline form: one line of words separated by blanks. */
static int parse_inline(struct resp_parser *p, const char *s, const char *e)
{
	int rc;

	if (e > s && e[-1] == '\r')
		e--;
	while (s < e) {
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		if (s == e)
			break;
		const char *w = s;
		while (s < e && *s != ' ' && *s != '\t')
			s++;
		if ((rc = arg_slot(p)) || (rc = arena_reserve(p, (size_t)(s - w) + 1)))
			return rc;
		p->argv[p->argc] = (struct resp_arg){ .len = (size_t)(s - w), .off = p->arena_len };
		memcpy(p->arena + p->arena_len, w, (size_t)(s - w));
		p->arena_len += (size_t)(s - w);
		p->arena[p->arena_len++] = 0;
		p->argc++;
	}
	p->inline_cmd = 1;
	return p->argc ? finish_cmd(p) : RESP_NEED;
}

/* A bulk's last bytes are its CRLF; the argument is then complete. */
static int end_bulk(struct resp_parser *p, const char *tail)
{
	if (tail[0] != '\r' || tail[1] != '\n')
		return perr(p, "bulk not followed by CRLF");
	p->argc++;
	if ((int64_t)p->argc == p->nargs)
		return finish_cmd(p);
	p->state = ST_BULKHDR;
	return RESP_NEED;
}

/* Announced bulk `n`: an arena argument, or a buffer of its own. */
static int begin_bulk(struct resp_parser *p, int64_t n)
{
	int rc;

	if (n < 0 || (uint64_t)n > p->max_bulk)
		return perr(p, n >= 0 && p->max_args < RESP_MAX_ARGS ? "unauthenticated bulk length"
								     : "invalid bulk length");
	/* Every argument costs its bytes and its slot of the table: a
	 * million empty ones are 48 MiB of table for 6 MiB sent. */
	p->cmd_bytes += (uint64_t)n + sizeof(struct resp_arg);
	if (p->cmd_bytes > p->max_cmd)
		return perr(p, "command too large");
	if ((rc = arg_slot(p)))
		return rc;
	p->bulk = n;
	p->got = 0;
	if (n >= RESP_BIG_ARG && p->alloc.place) {
		const struct iovec *iov;
		int ni;
		void *h = p->alloc.place(p->alloc.place_ctx, p, (size_t)n, &iov, &ni);
		if (h) {
			p->argv[p->argc] = (struct resp_arg){ .p = (char *)"", .len = (size_t)n,
							      .big = 3, .cap = (size_t)n + 2,
							      .placed = h, .piov = iov, .pn = ni };
			p->seg_i = 0;
			p->seg_off = 0;
			p->state = ST_BIG;
			return 0;
		}
	}
	if (n >= RESP_BIG_ARG) {
		/* Allocated at its declared size: untouched pages cost nothing,
		 * so a lie about the length costs the liar's bytes alone. */
		size_t cap;
		char *b = p->alloc.get(p->alloc.ctx, (size_t)n + 2 + p->big_slack, &cap);
		if (!b)
			return RESP_NOMEM;
		p->argv[p->argc] = (struct resp_arg){ .p = b, .len = (size_t)n, .big = 1,
						      .cap = cap };
		p->state = ST_BIG;
		return 0;
	}
	if ((rc = arena_reserve(p, (size_t)n + 2)))
		return rc;
	p->argv[p->argc] = (struct resp_arg){ .len = (size_t)n, .off = p->arena_len };
	p->state = ST_BULK;
	return 0;
}

int resp_feed(struct resp_parser *p, const char *buf, size_t len, size_t *used)
{
	size_t pos = 0;
	int rc = RESP_NEED;

	if (p->state == ST_DONE)
		reset_cmd(p);
	while (rc == RESP_NEED && pos < len) {
		const char *s = buf + pos, *e;
		size_t avail = len - pos;
		int64_t n;

		switch (p->state) {
		case ST_START:
			if (*s != '*') {
				const char *nl = memchr(s, '\n', avail);
				/* The bounds hold however TCP split the line:
				 * too long is too long, found or not. */
				if (!nl || nl - s > RESP_MAX_LINE) {
					if (nl || avail > RESP_MAX_LINE)
						rc = perr(p, "too big inline request");
					goto out;
				}
				pos += (size_t)(nl - s) + 1;
				rc = parse_inline(p, s, nl);
				break;
			}
			if (!(e = find_crlf(s, avail)) || e - s > RESP_MAX_LINE) {
				if (e || avail > RESP_MAX_LINE + 1)
					rc = perr(p, "too big mbulk count string");
				goto out;
			}
			if (parse_ll(s + 1, e, &n) || n > RESP_MAX_ARGS) {
				rc = perr(p, "invalid multibulk length");
				break;
			}
			if (n > p->max_args) {
				rc = perr(p, "unauthenticated multibulk length");
				break;
			}
			pos += (size_t)(e - s) + 2;
			if (n > 0) {
				p->nargs = n;
				p->state = ST_BULKHDR;
			}
			break;
		case ST_BULKHDR:
			if (*s != '$') {
				char m[64];
				snprintf(m, sizeof(m), "expected '$', got '%c'",
					 *s >= 32 && *s < 127 ? *s : '?');
				rc = perr(p, m);
				break;
			}
			if (!(e = find_crlf(s, avail)) || e - s > RESP_MAX_LINE) {
				if (e || avail > RESP_MAX_LINE + 1)
					rc = perr(p, "too big bulk count string");
				goto out;
			}
			if (parse_ll(s + 1, e, &n)) {
				rc = perr(p, "invalid bulk length");
				break;
			}
			pos += (size_t)(e - s) + 2;
			rc = begin_bulk(p, n);
			break;
		case ST_BULK: {
			struct resp_arg *a = &p->argv[p->argc];
			uint64_t want = (uint64_t)p->bulk + 2 - p->got;
			size_t take = avail < want ? avail : (size_t)want;
			memcpy(p->arena + a->off + p->got, s, take);
			p->got += take;
			pos += take;
			if (p->got == (uint64_t)p->bulk + 2) {
				char *tail = p->arena + a->off + p->bulk;
				p->arena_len += (size_t)p->bulk + 1;
				rc = end_bulk(p, tail);
				tail[0] = 0; /* the NUL after the argument */
			}
			break;
		}
		case ST_BIG: {
			size_t room;
			char *dst = resp_direct(p, &room);
			size_t take = avail < room ? avail : room;
			memcpy(dst, s, take);
			pos += take;
			rc = resp_direct_done(p, take);
			break;
		}
		}
	}
out:
	*used = pos;
	return rc;
}

char *resp_direct(struct resp_parser *p, size_t *room)
{
	struct resp_arg *a;
	size_t left;

	if (p->state != ST_BIG) {
		*room = 0;
		return NULL;
	}
	a = &p->argv[p->argc];
	left = (size_t)((uint64_t)p->bulk + 2 - p->got);
	if (a->big != 3) {
		*room = left;
		return a->p + p->got;
	}
	/* Placed: the segment being filled, as far as it goes. */
	while (p->seg_i < a->pn && p->seg_off == a->piov[p->seg_i].iov_len) {
		p->seg_i++;
		p->seg_off = 0;
	}
	if (p->seg_i == a->pn) { /* not reached: the segments hold n + 2 */
		*room = 0;
		return NULL;
	}
	*room = a->piov[p->seg_i].iov_len - p->seg_off;
	if (*room > left)
		*room = left;
	return (char *)a->piov[p->seg_i].iov_base + p->seg_off;
}

/* Byte `at` of a placed argument. */
static char placed_byte(const struct resp_arg *a, uint64_t at)
{
	for (int i = 0; i < a->pn; i++) {
		if (at < a->piov[i].iov_len)
			return ((const char *)a->piov[i].iov_base)[at];
		at -= a->piov[i].iov_len;
	}
	return 0;
}

int resp_direct_iov(struct resp_parser *p, struct iovec *iov, int max, size_t max_bytes,
		    size_t *room)
{
	struct resp_arg *a;
	size_t left, off;
	int n = 0;

	*room = 0;
	if (p->state != ST_BIG || max < 1 || max_bytes == 0)
		return 0;
	a = &p->argv[p->argc];
	left = (size_t)((uint64_t)p->bulk + 2 - p->got);
	if (left > max_bytes)
		left = max_bytes;
	if (a->big != 3) {
		iov[0] = (struct iovec){ a->p + p->got, left };
		*room = left;
		return 1;
	}
	off = p->seg_off;
	for (int i = p->seg_i; i < a->pn && n < max && left; i++, off = 0) {
		size_t k = a->piov[i].iov_len - off;
		if (k == 0)
			continue;
		if (k > left)
			k = left;
		iov[n++] = (struct iovec){ (char *)a->piov[i].iov_base + off, k };
		*room += k;
		left -= k;
	}
	return n;
}

int resp_direct_done(struct resp_parser *p, size_t n)
{
	struct resp_arg *a = &p->argv[p->argc];
	int rc;

	p->got += n;
	if (a->big == 3) {
		/* n may run over several segments (resp_direct_iov) */
		p->seg_off += n;
		while (p->seg_i < a->pn && p->seg_off >= a->piov[p->seg_i].iov_len) {
			p->seg_off -= a->piov[p->seg_i].iov_len;
			p->seg_i++;
		}
	}
	if (p->got < (uint64_t)p->bulk + 2)
		return RESP_NEED;
	if (a->big == 3) {
		char tail[2] = { placed_byte(a, (uint64_t)p->bulk),
				 placed_byte(a, (uint64_t)p->bulk + 1) };
		return end_bulk(p, tail);
	}
	rc = end_bulk(p, a->p + p->bulk);
	if (rc != RESP_PERR)
		a->p[p->bulk] = 0;
	return rc;
}

char *resp_take_big(struct resp_parser *p, size_t i)
{
	if (i >= p->argc || p->argv[i].big != 1)
		return NULL;
	p->argv[i].big = 2; /* the caller's now */
	return p->argv[i].p;
}

int resp_placed_progress(const struct resp_parser *p, void **handle, uint64_t *got)
{
	if (p->state != ST_BIG || p->argv[p->argc].big != 3)
		return 0;
	*handle = p->argv[p->argc].placed;
	*got = p->got;
	return 1;
}

void *resp_take_placed(struct resp_parser *p, size_t i)
{
	if (i >= p->argc || p->argv[i].big != 3)
		return NULL;
	p->argv[i].big = 4;
	return p->argv[i].placed;
}

const char *resp_arg_bytes(const struct resp_parser *p, size_t i, size_t *len)
{
	const struct resp_arg *a;

	if (i >= p->argc)
		return NULL;
	a = &p->argv[i];
	*len = a->len;
	if (a->big == 3 || a->big == 4)
		return NULL;
	return a->big ? a->p : p->arena + a->off;
}

/* --- replies --------------------------------------------------------------- */

void resp_buf_free(struct resp_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void resp_put(struct resp_buf *b, const void *s, size_t n)
{
	if (b->oom || n == 0)
		return;
	if (b->len + n > b->cap) {
		size_t c = b->cap ? b->cap : 512;
		while (c < b->len + n)
			c *= 2;
		char *p = realloc(b->p, c);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = c;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void put_line(struct resp_buf *b, char type, const char *s, size_t n)
{
	resp_put(b, &type, 1);
	resp_put(b, s, n);
	resp_put(b, "\r\n", 2);
}

void resp_simple(struct resp_buf *b, const char *s)
{
	put_line(b, '+', s, strlen(s));
}

void resp_error(struct resp_buf *b, const char *fmt, ...)
{
	char m[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(m))
		n = sizeof(m) - 1;
	/* An error is one line: a CR or LF from an argument would end it. */
	for (int i = 0; i < n; i++)
		if (m[i] == '\r' || m[i] == '\n')
			m[i] = ' ';
	put_line(b, '-', m, (size_t)n);
}

static void put_num(struct resp_buf *b, char type, long long v)
{
	char m[24];
	int n = snprintf(m, sizeof(m), "%lld", v);
	put_line(b, type, m, (size_t)n);
}

void resp_int(struct resp_buf *b, long long v)
{
	put_num(b, ':', v);
}

void resp_bulk_hdr(struct resp_buf *b, uint64_t n)
{
	put_num(b, '$', (long long)n);
}

void resp_bulk(struct resp_buf *b, const void *s, size_t n)
{
	resp_bulk_hdr(b, n);
	resp_put(b, s, n);
	resp_put(b, "\r\n", 2);
}

void resp_null(struct resp_buf *b, int proto)
{
	resp_put(b, proto == 3 ? "_\r\n" : "$-1\r\n", proto == 3 ? 3 : 5);
}

void resp_nil_array(struct resp_buf *b, int proto)
{
	resp_put(b, proto == 3 ? "_\r\n" : "*-1\r\n", proto == 3 ? 3 : 5);
}

void resp_array(struct resp_buf *b, long long n)
{
	put_num(b, '*', n);
}

void resp_map(struct resp_buf *b, int proto, long long n)
{
	put_num(b, proto == 3 ? '%' : '*', proto == 3 ? n : 2 * n);
}

int resp_busy(const struct resp_parser *p)
{
	return p->state != ST_START && p->state != ST_DONE;
}
