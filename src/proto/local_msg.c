/*
 * local_msg.c — the local protocol's checks and its receive
 * (local_msg.h).
 *
 * Everything here reads bytes another process wrote: a request from any
 * process allowed on the daemon's socket, a reply that names memory the
 * client is about to write into.  Each check names what was wrong, for the
 * daemon's log and the client's kvt_errmsg().
 */
#include "proto/local_msg.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "common/err.h"

int kvt_lp_req_check(const void *buf, size_t n, struct kvt_lp_req *out, uint32_t *n_rel)
{
	if (n < sizeof(*out) || n > KVT_LP_MAX_REQ || (n - sizeof(*out)) % sizeof(uint64_t))
		return kvt_err(-EPROTO, "local request of %zu bytes, expected %zu and at most "
			       "%u released ids", n, sizeof(*out), KVT_LP_MAX_REL);
	memcpy(out, buf, sizeof(*out));
	if (out->magic != KVT_LP_MAGIC)
		return kvt_err(-EPROTO, "local request without the protocol's magic");
	if (out->version != KVT_LP_VERSION)
		return kvt_err(-EPROTO, "local protocol version %u, this daemon speaks %u",
			       out->version, KVT_LP_VERSION);
	if (out->len != n)
		return kvt_err(-EPROTO, "local request declares %" PRIu32 " bytes, has %zu",
			       out->len, n);
	*n_rel = (uint32_t)((n - sizeof(*out)) / sizeof(uint64_t));
	if (out->op < KVT_LP_HELLO || out->op > KVT_LP_OP_MAX)
		return kvt_err(-EPROTO, "local request op %u unknown", out->op);
	return 0;
}

int kvt_lp_rep_check(const void *buf, size_t n, int op, struct kvt_lp_rep *rep,
		     const void **body, size_t *body_len)
{
	size_t each, rest;

	if (n < sizeof(*rep) || n > KVT_LP_MAX_MSG)
		return kvt_err(-EPROTO, "reply of %zu bytes from kvtierd", n);
	memcpy(rep, buf, sizeof(*rep));
	if (rep->magic != KVT_LP_MAGIC || rep->op != op)
		return kvt_err(-EPROTO, "kvtierd's reply is not one to op %d", op);
	*body = (const char *)buf + sizeof(*rep);
	*body_len = rest = n - sizeof(*rep);
	if (rep->status < 0) {
		/* the message: text the daemon NUL-terminated */
		if (rest == 0 || rest > KVT_LP_ERRMSG_MAX || ((const char *)*body)[rest - 1])
			return kvt_err(-EPROTO, "kvtierd's error reply has no message");
		return 0;
	}
	switch (op) {
	case KVT_LP_GET:
	case KVT_LP_PUT_BEGIN:
	case KVT_LP_PUT_COMMIT: /* with the next write reserved, or none */
		each = sizeof(struct kvt_lp_seg);
		break;
	case KVT_LP_ITER:
		each = sizeof(struct kvt_lp_item);
		break;
	case KVT_LP_WHY:
		each = sizeof(kvt_why_chunk);
		break;
	case KVT_LP_STATS:
		if (rest != sizeof(kvt_tier_stats) || rep->n != 1)
			return kvt_err(-EPROTO, "kvtierd's statistics are %zu bytes, not %zu "
				       "(another build of the library?)", rest,
				       sizeof(kvt_tier_stats));
		return 0;
	default:
		each = 0;
	}
	if ((each == 0 && (rest || rep->n)) || (each && rest != (size_t)rep->n * each))
		return kvt_err(-EPROTO, "kvtierd's reply to op %d: %" PRIu32
			       " entries in %zu bytes", op, rep->n, rest);
	return 0;
}

int kvt_lp_segs_check(const void *segs, uint32_t n, uint64_t size, uint64_t arena_len)
{
	uint64_t sum = 0;

	if (n == 0)
		return kvt_err(-EPROTO, "kvtierd named an image of no segment");
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off, len;

		kvt_lp_seg_at(segs, i, &off, &len);
		if (len == 0 || off >= arena_len || len > arena_len - off)
			return kvt_err(-EPROTO, "segment %" PRIu32 " [%" PRIu64 ", +%" PRIu64
				       ") is outside the %" PRIu64 "-byte arena", i, off, len,
				       arena_len);
		if (len > size - sum)
			return kvt_err(-EPROTO, "segments exceed the %" PRIu64 "-byte image", size);
		sum += len;
	}
	if (sum != size)
		return kvt_err(-EPROTO, "segments hold %" PRIu64 " of the %" PRIu64
			       "-byte image", sum, size);
	return 0;
}

static int64_t lp_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

ssize_t kvt_lp_recvmsg(int fd, struct msghdr *m, int flags)
{
	size_t ctl = m->msg_controllen;
	int64_t until = lp_ns() + KVT_LP_SPIN_NS;
	ssize_t n;

	do {
		m->msg_controllen = ctl;
		n = recvmsg(fd, m, flags | MSG_DONTWAIT);
		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return n;
		/* Yielding, not spinning on the CPU: where threads wait for
		 * a CPU (the peer may be one of them), the poll gives its
		 * turn away; where CPUs are idle it stays awake. */
		sched_yield();
	} while (lp_ns() < until);
	do {
		m->msg_controllen = ctl;
		n = recvmsg(fd, m, flags);
	} while (n < 0 && errno == EINTR);
	return n;
}
