/*
 * fuzz_local.c — libFuzzer target for the local protocol
 * (src/proto/local_msg.c, the daemon's side in src/store/local_server.c).
 *
 * Every request the daemon reads came from another process on the node,
 * every reply the client reads names memory it will write into.  The
 * first byte of an input picks the side:
 *
 *  - even: the input is a stream of requests sent to a live local server
 *    (a store with a small shared DRAM tier, started once), each built
 *    from 40 bytes of input: a well-formed header with the input's op
 *    (LOOKUP, WHY and NAME followed by the message they announce, of the
 *    length they say or, by the input, another),
 *    id (or the id of the last reply, to reach real borrows and writes),
 *    size and key, or, when the block says so, 64 raw bytes (a commit's
 *    size asks for the next write to be reserved, whose id the next
 *    block may commit under its own key).  The server must answer every
 *    request that has a reply or close the connection, never crash, and
 *    once the connection is closed hold no borrow of it: the store's
 *    borrowed count goes back to 0.
 *  - odd: the input is a reply to the op its second byte names; when the
 *    check accepts segments (GET, PUT_BEGIN, a commit's reservation),
 *    they lie inside the arena size the input gives and add up to the
 *    image's size.
 *
 *   ./fuzz_local -max_len=4096 fuzz/corpus/local
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"
#include "proto/local_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvt_store *st;
static char sock_path[64];

static void setup(void)
{
	static char dir[] = "/tmp/kvt-fuzz-local-XXXXXX";
	kvt_local_opts o = { 0 };
	kvt_local_server *srv;
	kvt_config *c = kvt_config_new();
	int err;

	if (!mkdtemp(dir))
		abort();
	snprintf(sock_path, sizeof(sock_path), "%s/s", dir);
	kvt_config_set(c, "max_local_cpu_size", "16MiB");
	kvt_config_set(c, "dram_page_size", "64KiB");
	kvt_config_set(c, "dram_prefault", "false");
	kvt_config_set(c, "dram_lock_memory", "false");
	kvt_config_set(c, "dram_shared", "true");
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	o.path = sock_path;
	if (!st || kvt_local_serve(st, &o, &srv)) {
		fprintf(stderr, "fuzz_local: cannot start the server: %s\n", kvt_errmsg());
		abort();
	}
}

static int has_reply(int op)
{
	return op != KVT_LP_RELEASE && op != KVT_LP_PUT_ABORT && op != KVT_LP_CORRUPT;
}

/* One reply (closing any fd it carries): its length, 0 when the server
 * closed the connection. */
static ssize_t recv_reply(int fd, uint8_t *buf, size_t cap)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { buf, cap };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			    .msg_controllen = sizeof(u.b) };
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, 5000) != 1) {
		fprintf(stderr, "fuzz_local: no reply and no close within 5 s\n");
		abort();
	}
	n = recvmsg(fd, &m, 0);
	if (n > 0 && CMSG_FIRSTHDR(&m) && CMSG_FIRSTHDR(&m)->cmsg_type == SCM_RIGHTS) {
		int got;
		memcpy(&got, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(got));
		close(got);
	}
	return n < 0 ? 0 : n;
}

static void server_side(const uint8_t *data, size_t size)
{
	static uint8_t buf[KVT_LP_MAX_MSG];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	uint64_t last_id = 0;
	kvt_tier_stats s;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		abort();
	for (size_t at = 0; at + 40 <= size; at += 40) {
		const uint8_t *b = data + at;
		uint8_t raw[KVT_LP_MAX_REQ] = { 0 };
		struct kvt_lp_req q = { .magic = KVT_LP_MAGIC, .version = KVT_LP_VERSION,
					.len = sizeof(q) };
		size_t n = sizeof(q);
		uint32_t sz;
		ssize_t got;

		q.op = (uint16_t)(b[0] % (KVT_LP_OP_MAX + 1));
		memcpy(&q.id, b + 4, 8);
		if (b[1] & 1)
			q.id = last_id;
		memcpy(&sz, b + 12, 4);
		q.size = q.op == KVT_LP_LOOKUP || q.op == KVT_LP_WHY ? sz % 10
			 : q.op == KVT_LP_NAME ? sz % 18
					       : sz % (20u << 20); /* around the arena */
		if (q.op == KVT_LP_NAME && !(b[1] & 4)) /* a hash length that exists */
			q.id = (b[5] & 1 ? 8u : 32u) | (b[5] & 2 ? 256u : 0u);
		memcpy(&q.arg, b + 16, 4);
		if (b[1] & 2)
			q.arg &= 3; /* a durability that exists */
		q.key[0] = b[2] & 7; /* few keys: hits, first writer wins */
		memcpy(raw, &q, sizeof(q));
		if (b[1] & 0x40) { /* the last id released on top */
			memcpy(raw + sizeof(q), &last_id, 8);
			n += 8;
			q.len = (uint32_t)n;
			memcpy(raw, &q, sizeof(q));
		}
		if (b[1] & 0x80) { /* raw bytes, of the input's length */
			memcpy(raw, b + 20, 20);
			n = b[3] % (sizeof(struct kvt_lp_req) + 24);
		}
		if (send(fd, raw, n, MSG_NOSIGNAL) < 0)
			break;
		if (!(b[1] & 0x80) && q.op == KVT_LP_NAME) {
			/* its parent and hashes: as long as it says, or (by the
			 * input) not; a refused header is never followed */
			uint8_t body[18 * 32] = { 0 };
			size_t hl = (size_t)(q.id & 255), bn = (b[1] & 8) ? (size_t)b[3] % sizeof(body)
								: (q.size + 1) * hl;
			if (bn > sizeof(body))
				bn = sizeof(body);
			for (size_t i = 0; i < bn; i++)
				body[i] = b[20 + i % 20];
			if (send(fd, body, bn, MSG_NOSIGNAL) < 0)
				break;
		}
		if (!(b[1] & 0x80) && (q.op == KVT_LP_LOOKUP || q.op == KVT_LP_WHY)) {
			/* its keys: as many as it says, or (by the input) not */
			uint8_t keys[8 * KVT_KEY_BYTES] = { 0 };
			size_t kn = (b[1] & 8) ? (size_t)(b[3] % 9) * KVT_KEY_BYTES
					       : (size_t)(q.size < 8 ? q.size : 8) * KVT_KEY_BYTES;
			for (size_t i = 0; i < kn; i += KVT_KEY_BYTES)
				keys[i] = b[20 + (i / KVT_KEY_BYTES) % 20] & 7;
			if (send(fd, keys, kn, MSG_NOSIGNAL) < 0)
				break;
		}
		if (!(b[1] & 0x80) && !has_reply(q.op))
			continue;
		got = recv_reply(fd, buf, sizeof(buf));
		if (got == 0)
			break; /* refused: the connection is closed */
		if (got >= (ssize_t)sizeof(struct kvt_lp_rep)) {
			struct kvt_lp_rep r;
			memcpy(&r, buf, sizeof(r));
			if (r.status == 0 && r.id)
				last_id = r.id;
		}
	}
	close(fd);
	/* The server lets go of all the connection held once it sees the
	 * close; its thread may take a moment. */
	for (int i = 0; i < 500; i++) {
		if (kvt_store_stats(st, 0, &s) == 0 && s.borrowed == 0)
			return;
		nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
	}
	fprintf(stderr, "fuzz_local: %llu borrows outlived their connection\n",
		(unsigned long long)s.borrowed);
	abort();
}

static void client_side(const uint8_t *data, size_t size)
{
	struct kvt_lp_rep rep;
	const void *body;
	size_t blen;
	uint64_t arena;

	if (size < 10)
		return;
	memcpy(&arena, data + 2, 8);
	arena %= 1ull << 40;
	if (kvt_lp_rep_check(data + 10, size - 10, data[1] % (KVT_LP_OP_MAX + 1), &rep, &body,
			     &blen))
		return;
	if (rep.status >= 0 &&
	    (rep.op == KVT_LP_GET || rep.op == KVT_LP_PUT_BEGIN ||
	     (rep.op == KVT_LP_PUT_COMMIT && rep.n)) &&
	    kvt_lp_segs_check(body, rep.n, rep.size, arena) == 0) {
		uint64_t sum = 0;
		for (uint32_t i = 0; i < rep.n; i++) {
			uint64_t off, len;
			kvt_lp_seg_at(body, i, &off, &len);
			if (off + len > arena || off + len < off)
				abort();
			sum += len;
		}
		if (sum != rep.size)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!st)
		setup();
	if (size == 0)
		return 0;
	if (data[0] & 1)
		client_side(data, size);
	else
		server_side(data + 1, size - 1);
	return 0;
}
