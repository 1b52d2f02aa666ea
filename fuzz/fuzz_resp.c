/*
 * fuzz_resp.c — libFuzzer target for kvtierd's RESP request parser
 * (src/proto/resp.c).
 *
 * Every byte the parser sees came from a network client.  The input is
 * parsed twice: fed whole, and fed in pieces whose sizes the input's own
 * bytes choose (with a big argument's bytes written straight into its
 * buffer through resp_direct_iov, as the server does, or placed in
 * segments the input's bytes size, as a SET's value is placed in the
 * store's pages, and written across several of them at once).  Both must produce the
 * same commands, argument for argument, and end the same way: a parser
 * whose result depends on how TCP split the stream would be a bug.  Every
 * argument must be NUL-terminated at its length and within the limits.
 * Crashes, overruns and leaks are failures; protocol errors are fine.
 *
 * The daemon is not part of the library, so its parser is compiled in.
 *
 *   ./fuzz_resp -max_len=4096 fuzz/corpus/resp
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/resp.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BULK 100000
#define MAX_CMD 200000

/* A digest of the commands seen: each argument's length and bytes. */
struct trace {
	uint64_t h;
	size_t cmds;
	int end;
};

static void fold(struct trace *t, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		t->h = (t->h ^ b[i]) * 0x100000001b3ull;
}

/* A placement: one buffer shown as segments of sizes the input chose. */
struct placed {
	char *buf;
	struct iovec iov[64];
	int n;
};

static const uint8_t *seg_sizes;
static size_t seg_sizes_len;
static int places; /* outstanding: every one must come back */

static void *fake_place(void *ctx, struct resp_parser *p, size_t n, const struct iovec **iov,
			int *n_iov)
{
	struct placed *pl;
	size_t at = 0, left = n + 2;

	(void)ctx;
	(void)p;
	if (n % 3 == 0 || !(pl = calloc(1, sizeof(*pl))))
		return NULL; /* some go to a buffer of their own, as when the store is full */
	pl->buf = malloc(left);
	for (int i = 0; left && i < 64; i++) {
		size_t k = i == 63 ? left : 1 + seg_sizes[(size_t)i % seg_sizes_len] * 97u;
		if (k > left)
			k = left;
		pl->iov[pl->n++] = (struct iovec){ pl->buf + at, k };
		at += k;
		left -= k;
	}
	*iov = pl->iov;
	*n_iov = pl->n;
	places++;
	return pl;
}

static void fake_unplace(void *ctx, void *h)
{
	struct placed *pl = h;
	(void)ctx;
	free(pl->buf);
	free(pl);
	places--;
}

static void on_cmd(struct trace *t, struct resp_parser *p)
{
	if (p->argc == 0)
		abort(); /* a complete command has a name */
	for (size_t i = 0; i < p->argc; i++) {
		const struct resp_arg *a = &p->argv[i];
		if (!a->p || a->len > MAX_BULK)
			abort();
		fold(t, &a->len, sizeof(a->len));
		if (a->big == 3) {
			size_t left = a->len;
			for (int k = 0; k < a->pn && left; k++) {
				size_t m = a->piov[k].iov_len < left ? a->piov[k].iov_len : left;
				fold(t, a->piov[k].iov_base, m);
				left -= m;
			}
			continue;
		}
		if (a->p[a->len] != 0)
			abort();
		fold(t, a->p, a->len);
	}
	/* Take a placement now and then, as SET does. */
	if (p->argc > 2) {
		void *h = resp_take_placed(p, 2);
		if (h)
			fake_unplace(NULL, h);
	}
	t->cmds++;
	/* Take one big buffer now and then, as SET does. */
	if (p->argc > 2) {
		char *b = resp_take_big(p, 2);
		if (b) {
			/* All of it is the caller's: the slack and the rest. */
			memset(b + p->argv[2].len, 0, p->argv[2].cap - p->argv[2].len);
			p->alloc.put(p->alloc.ctx, b, p->argv[2].cap);
		}
	}
}

static void whole(const uint8_t *data, size_t size, struct trace *t)
{
	struct resp_parser p;
	size_t pos = 0;

	resp_parser_init(&p, MAX_BULK, MAX_CMD, 64);
	for (;;) {
		size_t used;
		int rc = resp_feed(&p, (const char *)data + pos, size - pos, &used);
		if (used > size - pos)
			abort();
		pos += used;
		if (rc == RESP_CMD) {
			on_cmd(t, &p);
			continue;
		}
		t->end = rc;
		break;
	}
	resp_parser_free(&p);
}

/* The server's way: a buffer that keeps what the parser did not take,
 * topped up in pieces; a big argument's bytes go straight into it. */
static void pieces(const uint8_t *data, size_t size, struct trace *t)
{
	struct resp_parser p;
	char buf[RESP_MAX_LINE + 4096];
	size_t in = 0, pos = 0, step = 0;
	int rc = RESP_NEED;

	resp_parser_init(&p, MAX_BULK, MAX_CMD, 64);
	p.alloc.place = fake_place;
	p.alloc.unplace = fake_unplace;
	seg_sizes = data;
	seg_sizes_len = size;
	while (rc != RESP_PERR && rc != RESP_NOMEM) {
		size_t k = 1 + data[step++ % size] % 97, room;
		struct iovec v[8];
		int nv = 0;
		if (pos == size)
			break;
		if (k > size - pos)
			k = size - pos;
		/* Into several of a placed argument's segments at once, as the
		 * server's readv() does, as many as the input says. */
		if (!in)
			nv = resp_direct_iov(&p, v, 1 + data[step % size] % 8, k, &room);
		if (nv > 0) {
			size_t done = 0;
			for (int i = 0; i < nv; i++) {
				memcpy(v[i].iov_base, data + pos + done, v[i].iov_len);
				done += v[i].iov_len;
			}
			if (done != room || done > k || done == 0)
				abort(); /* the segments are the room, within the limit */
			pos += done;
			rc = resp_direct_done(&p, done);
			if (rc == RESP_CMD)
				on_cmd(t, &p);
			continue;
		}
		if (k > sizeof(buf) - in)
			k = sizeof(buf) - in;
		memcpy(buf + in, data + pos, k);
		in += k;
		pos += k;
		size_t off = 0;
		for (;;) {
			size_t used;
			rc = resp_feed(&p, buf + off, in - off, &used);
			off += used;
			if (rc != RESP_CMD)
				break;
			on_cmd(t, &p);
		}
		memmove(buf, buf + off, in - off);
		in -= off;
		if (in == sizeof(buf) && rc == RESP_NEED)
			abort(); /* a full buffer must have been refused */
	}
	/* A placed argument that completes its command with the input's last
	 * byte leaves RESP_CMD as the last word; the whole feed's last call
	 * came after that command, with nothing left: RESP_NEED. */
	if (rc == RESP_CMD && pos == size && !in)
		rc = RESP_NEED;
	t->end = rc;
	resp_parser_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace a = { 0xcbf29ce484222325ull, 0, 0 }, b = a;

	if (size == 0)
		return 0;
	whole(data, size, &a);
	pieces(data, size, &b);
	if (places != 0)
		abort(); /* a placement was neither taken nor given back */
	/* The whole feed ends as the last piece does: a command not
	 * finished (RESP_NEED), or the same protocol error. */
	if (a.h != b.h || a.cmds != b.cmds || a.end != b.end) {
		fprintf(stderr, "whole: %zu commands, end %d; pieces: %zu, end %d\n", a.cmds,
			a.end, b.cmds, b.end);
		abort();
	}
	return 0;
}
