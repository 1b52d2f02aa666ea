/*
 * local_msg.h — the local protocol between kvtierd and the processes of
 * its node (docs/DAEMON.md, "Local clients").
 *
 * A SOCK_SEQPACKET Unix socket: one message is one request or one reply,
 * never split nor merged, so no framing can go wrong.  The data never
 * crosses the socket: at HELLO the daemon passes the memfd of its DRAM
 * arena (SCM_RIGHTS) and every image is then named by segments, offsets
 * and lengths into that file, which the client has mapped.
 *
 * A request is one fixed 64-byte struct, whatever the op.  A reply is a
 * fixed 32-byte header followed by what the op returns: segments (GET,
 * PUT_BEGIN), (key, length) items (ITER), the statistics (STATS), or, when
 * status is negative, the daemon's error message.  Both sides decode with
 * the functions below, which check every length and offset; a daemon that
 * receives a request they refuse closes that client's connection.
 *
 * RELEASE, PUT_ABORT and CORRUPT have no reply: they are sent and
 * forgotten.  Releases cost less still: any request may carry, after its
 * 64 bytes, up to KVT_LP_MAX_REL ids of borrows the client has let go of
 * (len says how many), which the daemon releases before serving the
 * request itself.  The client holds released ids back until its next
 * request, or a few milliseconds (tier/local_client.c): a borrow then costs one round
 * trip, not a round trip and a message.
 *
 * A put costs one round trip too.  PUT_COMMIT names the key the image is
 * published under and may ask, in size, for the client's next write to be
 * reserved now; its reply then carries that write's id and segments, as
 * PUT_BEGIN's would.  The daemon reserves it under a key of its own and,
 * at its commit, checks no tier holds the key the commit names (first
 * version wins) before publishing under it.  The client's next put of
 * that size writes straight into those pages and commits: no PUT_BEGIN.
 * The daemon reserves ahead only from free pages (it evicts nothing for
 * a put that may not come), so PUT_BEGIN remains for the rest.
 */
#ifndef KVT_LOCAL_MSG_H
#define KVT_LOCAL_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "kvtier.h"

#define KVT_LP_MAGIC 0x314c564bu /* "KVL1" little-endian */
#define KVT_LP_VERSION 2 /* 2: PUT_COMMIT names its key, may reserve the next */
/* The largest reply; a request is always sizeof(struct kvt_lp_req). */
#define KVT_LP_MAX_MSG (256u * 1024u)
#define KVT_LP_MAX_SEGS ((KVT_LP_MAX_MSG - sizeof(struct kvt_lp_rep)) / sizeof(struct kvt_lp_seg))
#define KVT_LP_ITER_BATCH 4096u
#define KVT_LP_MAX_WHY 896u /* keys per WHY: their answers (272 bytes each) fill a message */
#define KVT_LP_ERRMSG_MAX 512u
#define KVT_LP_MAX_REL 64u
#define KVT_LP_MAX_LOOKUP 4096u /* keys per LOOKUP */
/* LOOKUP, NAME and WHY announce a second message that the client sends
 * straight after the request; a server waits this long for it, then
 * closes the connection. */
#define KVT_LP_FOLLOW_MS 5000
/* The longest request: the struct and its released ids. */
#define KVT_LP_MAX_REQ (sizeof(struct kvt_lp_req) + KVT_LP_MAX_REL * sizeof(uint64_t))

enum kvt_lp_op {
	KVT_LP_HELLO = 1,     /* -> size: arena bytes, id: page size; the memfd */
	KVT_LP_PUT_BEGIN = 2, /* key, size -> id, segments */
	KVT_LP_PUT_COMMIT = 3,/* id, arg: durability, key: published under,
			       * size: the next write to reserve (0: none)
			       * -> status; id, size, segments when reserved */
	KVT_LP_PUT_ABORT = 4, /* id; no reply */
	KVT_LP_GET = 5,       /* key -> id, size: image bytes, segments */
	KVT_LP_RELEASE = 6,   /* id (0: none), and the ids after; no reply */
	KVT_LP_CORRUPT = 7,   /* id: the borrow failed verification; no reply */
	KVT_LP_EXISTS = 8,    /* key -> status 1 or 0 */
	KVT_LP_DEL = 9,       /* key -> status */
	KVT_LP_ITER = 10,     /* id: cursor (0 first) -> items; status 1: more, at size */
	KVT_LP_STATS = 11,    /* -> a kvt_tier_stats */
	KVT_LP_LOOKUP = 12,   /* size: n keys, sent as the next message (n x 32
			       * bytes) -> status: how many lead present */
	KVT_LP_WHY = 13,      /* size: n keys (<= KVT_LP_MAX_WHY) as LOOKUP's ->
			       * status: how many lead served; n kvt_why_chunk */
	KVT_LP_NAME = 14,     /* key: a chunk; size: n engine block hashes; arg:
			       * their block size; id: hash length (32 or 8) |
			       * 256 if a parent is given; the next message is
			       * the parent (hash length bytes, zeros if none)
			       * and the n hashes -> status */
	KVT_LP_OP_MAX = 14,
};

struct kvt_lp_req {
	uint32_t magic;
	uint16_t op;
	uint16_t version;
	uint32_t len;  /* sizeof(struct kvt_lp_req) + 8 x released ids after it */
	int32_t arg;
	uint64_t id;
	uint64_t size;
	uint8_t key[KVT_KEY_BYTES];
};

struct kvt_lp_rep {
	uint32_t magic;
	uint16_t op;    /* the request's */
	uint16_t pad;
	int32_t status; /* 0 (1: EXISTS found, ITER more) or a negative code */
	uint32_t n;     /* segments or items that follow */
	uint64_t id;
	uint64_t size;
};

struct kvt_lp_seg {
	uint64_t off, len;
};

struct kvt_lp_item {
	uint8_t key[KVT_KEY_BYTES];
	uint64_t len;
};

/* The daemon's side: 0 if `buf` (n bytes, as received) is a well-formed
 * request, else -EPROTO with what is wrong.  *n_rel: how many released
 * ids follow the struct in buf (unaligned: read them with memcpy). */
int kvt_lp_req_check(const void *buf, size_t n, struct kvt_lp_req *out, uint32_t *n_rel);

/* The client's side: 0 if `buf` is a well-formed reply to `op`; then
 * *rep is its header and *body what follows (rep->n entries, or the error
 * message when status < 0, NUL-terminated by the daemon).  -EPROTO
 * otherwise. */
int kvt_lp_rep_check(const void *buf, size_t n, int op, struct kvt_lp_rep *rep,
		     const void **body, size_t *body_len);

/* Segments of a reply (`segs`, as received: unaligned) against the
 * mapped arena: each inside [0, arena_len), none empty, together `size`
 * bytes.  0 or -EPROTO. */
int kvt_lp_segs_check(const void *segs, uint32_t n, uint64_t size, uint64_t arena_len);

/* recvmsg(2) for either side, polling for up to KVT_LP_SPIN_NS first: a
 * reply comes microseconds after its request and the next request of a
 * busy client soon after the reply, and a thread asleep costs a wake-up
 * on each (tens of microseconds where an idle CPU must be woken, as in a
 * virtual machine), more than the round trip itself.  A peer quiet for
 * longer is waited for asleep. */
#define KVT_LP_SPIN_NS 50000
ssize_t kvt_lp_recvmsg(int fd, struct msghdr *m, int flags);

/* Segment i of `segs` as received (unaligned), read byte-wise. */
static inline void kvt_lp_seg_at(const void *segs, uint32_t i, uint64_t *off, uint64_t *len)
{
	const unsigned char *p = (const unsigned char *)segs + (size_t)i * sizeof(struct kvt_lp_seg);

	memcpy(off, p + offsetof(struct kvt_lp_seg, off), sizeof(*off));
	memcpy(len, p + offsetof(struct kvt_lp_seg, len), sizeof(*len));
}

#endif
