/*
 * resp.h — the Redis serialization protocol, both sides.  The server's
 * (resp.c, kvtierd's): an incremental request parser and the reply
 * encoders (RESP2, and RESP3 after HELLO 3).  The client's (resp_client.c,
 * the peer tier's): command heads and a reader of replies.
 *
 * The parser is fed whatever the socket gave, in any split, and keeps its
 * place between feeds, so a command is never re-parsed from its start and
 * a client cannot make the daemon do quadratic work by dribbling bytes.
 * Small arguments are copied into the command's arena; an argument of
 * RESP_BIG_ARG bytes or more gets a buffer of its own, of exactly its
 * declared length plus the slack the caller asked for, which the caller
 * may fill straight from the socket (resp_direct) and may take over
 * (resp_take_big): a value is received once, into where it is stored from.
 *
 * Limits, each a protocol error that costs the client its connection, as
 * in Redis: a header or inline line longer than RESP_MAX_LINE, more than
 * RESP_MAX_ARGS arguments, a bulk longer than the parser's max_bulk, a
 * command whose arguments total more than max_cmd bytes.
 */
#ifndef KVT_RESP_H
#define KVT_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define RESP_MAX_LINE (64 * 1024)
#define RESP_MAX_ARGS (1024 * 1024)
/* Before AUTH, as Redis: HELLO 3 AUTH user pass SETNAME name fits, and a
 * password; a client that has not authenticated allocates no more. */
#define RESP_UNAUTH_ARGS 10
#define RESP_UNAUTH_BULK (16 * 1024)
#define RESP_BIG_ARG (32 * 1024)

struct resp_arg {
	char *p;       /* NUL-terminated after len bytes (arena or big buffer) */
	size_t len;
	size_t off;    /* arena offset while the command is being built */
	int big;       /* 1: p is its own allocation, of cap >= len + 2 + slack
			* bytes (2 once taken); 3: placed (4 once taken) */
	size_t cap;
	void *placed;  /* the placement's handle; p is "" then */
	const struct iovec *piov; /* where its bytes went, len + 2 in all */
	int pn;
};

struct resp_parser;

/* Where big arguments' buffers come from: by default malloc and free; the
 * server keeps a few per worker, so that a stream of large SETs reuses
 * pages already faulted in.  get returns a buffer of at least n bytes
 * (its size in *cap) or NULL; put takes one back. */
struct resp_alloc {
	void *(*get)(void *ctx, size_t n, size_t *cap);
	void (*put)(void *ctx, void *p, size_t cap);
	void *ctx;
	/* Optional: a big argument may be received straight into memory of
	 * the caller's choosing, segments of at least n + 2 bytes (its CRLF
	 * included), known by an opaque handle, or NULL (a buffer of its
	 * own then).  The command so far is argument 0 .. p->argc - 1
	 * (resp_arg_bytes).  An argument placed and not taken by the
	 * command is given back with unplace. */
	void *(*place)(void *ctx, struct resp_parser *p, size_t n,
		       const struct iovec **iov, int *n_iov);
	void (*unplace)(void *ctx, void *handle);
	void *place_ctx;
};

struct resp_parser {
	/* settings */
	uint64_t max_bulk;     /* the largest bulk accepted */
	uint64_t max_cmd;      /* the most bytes one command takes: its
				* arguments and its argument table */
	int64_t max_args;      /* the most arguments one command has
				* (RESP_MAX_ARGS; fewer before AUTH) */
	size_t big_slack;      /* extra bytes allocated after a big argument */
	struct resp_alloc alloc;
	/* the command being built, complete when resp_feed says so */
	struct resp_arg *argv;
	size_t argc, argv_cap;
	char *arena;
	size_t arena_len, arena_cap;
	uint64_t cmd_bytes;
	/* where the parser is */
	int state;
	int64_t nargs;         /* multibulk: arguments announced */
	int64_t bulk;          /* the bulk being read: bytes announced */
	uint64_t got;          /* of it (and its CRLF), bytes already read */
	int inline_cmd;        /* the command came as an inline line */
	int seg_i;             /* a placed argument: the segment being filled */
	size_t seg_off;
	char err[128];         /* the protocol error, for the -ERR reply */
};

enum resp_status {
	RESP_NEED = 0,   /* everything fed was consumed; a command is not complete */
	RESP_CMD = 1,    /* a command is complete: argv[0 .. argc) */
	RESP_PERR = -1,  /* protocol error: reply err, then close */
	RESP_NOMEM = -2, /* out of memory: close */
};

void resp_parser_init(struct resp_parser *p, uint64_t max_bulk, uint64_t max_cmd,
		      size_t big_slack);
/* Frees the command being built too (its big buffers included). */
void resp_parser_free(struct resp_parser *p);

/* Parse from buf[0 .. len).  *used gets the bytes consumed (all of them
 * unless a command completed first).  After RESP_CMD the command stays in
 * p->argv until the next call (which drops it, big buffers not taken
 * included). */
int resp_feed(struct resp_parser *p, const char *buf, size_t len, size_t *used);

/* While a big argument is being read: where its remaining bytes go, so the
 * caller can recv() straight into them (NULL when no big argument is being
 * read).  resp_direct_done then accounts for n bytes written there and may
 * complete the command, like resp_feed. */
char *resp_direct(struct resp_parser *p, size_t *room);
int resp_direct_done(struct resp_parser *p, size_t n);
/* The same room as up to `max` segments of at most `max_bytes` together
 * (a placed argument spans pages), so that one readv() takes more than a
 * page's worth: how many were filled (0: no big argument is being read),
 * their bytes in *room.  resp_direct_done accounts for what was read
 * across them. */
int resp_direct_iov(struct resp_parser *p, struct iovec *iov, int max, size_t max_bytes,
		    size_t *room);

/* Take argument i's big buffer: the caller owns it (to give back through
 * p->alloc.put), of argv[i].cap >= argv[i].len + 2 + big_slack bytes.
 * NULL for an argument in the arena. */
char *resp_take_big(struct resp_parser *p, size_t i);

/* While a placed argument is being received: 1 with its handle and the
 * bytes received so far (its CRLF counted), else 0. */
int resp_placed_progress(const struct resp_parser *p, void **handle, uint64_t *got);

/* Take argument i's placement (its handle); NULL if it was not placed. */
void *resp_take_placed(struct resp_parser *p, size_t i);

/* The bytes of argument i of the command being built (its length in
 * *len), for a placement hook; NULL for a placed one. */
const char *resp_arg_bytes(const struct resp_parser *p, size_t i, size_t *len);

/* 1 while a command has been begun and not finished. */
int resp_busy(const struct resp_parser *p);

/* Bytes the parser holds now (arena, argument table and big buffers). */
uint64_t resp_held(const struct resp_parser *p);

/* --- replies ------------------------------------------------------------- */

/* A growable byte buffer that replies are encoded into. */
struct resp_buf {
	char *p;
	size_t len, cap;
	int oom;          /* an append failed: the connection is closed */
};

void resp_buf_free(struct resp_buf *b);
void resp_put(struct resp_buf *b, const void *s, size_t n);
void resp_simple(struct resp_buf *b, const char *s);        /* +s */
void resp_error(struct resp_buf *b, const char *fmt, ...)   /* -fmt */
	__attribute__((format(printf, 2, 3)));
void resp_int(struct resp_buf *b, long long v);             /* :v */
void resp_bulk(struct resp_buf *b, const void *s, size_t n); /* $n s */
void resp_bulk_hdr(struct resp_buf *b, uint64_t n);          /* $n, no body */
void resp_null(struct resp_buf *b, int proto);              /* $-1 or _ */
void resp_array(struct resp_buf *b, long long n);           /* *n */
void resp_map(struct resp_buf *b, int proto, long long n);   /* %n or *2n */
void resp_nil_array(struct resp_buf *b, int proto);         /* *-1 or _ */

/* --- the client's side (resp_client.c): a peer tier's -------------------- */

/* The head of a command of `n` arguments, "*<n>\r\n", and of one bulk
 * argument of `len` bytes, "$<len>\r\n", into `buf` (24 bytes hold
 * either); the bytes written. */
size_t resp_array_head(char *buf, size_t n);
size_t resp_bulk_head(char *buf, size_t len);


/* Where a reply's bytes come from: read up to `len` bytes into `buf`,
 * returning how many (> 0), 0 at end of stream, or a negative errno. */
typedef long (*resp_src)(void *arg, void *buf, size_t len);

struct resp_reply {
	char type;               /* '$' bulk, ':' integer, '+' status, '-' error */
	int64_t num;             /* ':' the integer; '$' the length, -1 null */
	void *data;              /* '$' with num >= 0: num bytes (free()) */
	char text[160];          /* '+' / '-': the line */
};

/* Where a bulk goes instead of a malloc'd buffer (the tier's get_into):
 * segments at least `len` bytes long, or an error. */
typedef int (*resp_reserve)(void *arg, uint64_t len, const struct iovec **iov, int *n_iov);

/* Read one reply, a bulk of at most `max_bulk` bytes: into r->data, or,
 * with `reserve`, into the segments it gives (r->data stays NULL).  0, or
 * KVT_EMALFORMED (not a RESP reply, a bulk over the cap, a bulk not ended
 * by CRLF), KVT_ENOMEM, reserve's error, or the source's error (-EPIPE for
 * an early end); kvt_errmsg() says what.  `stash` is the reader's buffer of
 * `stash_cap` bytes and `*stash_len` what it holds: bytes read past one
 * reply start the next. */
int resp_read_reply(resp_src src, void *arg, char *stash, size_t stash_cap, size_t *stash_len,
		    uint64_t max_bulk, resp_reserve reserve, void *reserve_arg, struct resp_reply *r);


#endif
