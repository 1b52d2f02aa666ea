/*
 * local_server.c — serving a store to the processes of its node over a Unix
 * socket, the data in shared memory (kvt_local_serve, include/kvtier.h;
 * the protocol: src/proto/local_msg.h; the client: src/tier/local_client.c).
 *
 * The store's first tier is a DRAM tier whose arena is a memfd
 * (dram_shared).  A client gets that fd at HELLO and maps it; from then on
 * a put is PUT_BEGIN (the store reserves pages, the reply names them), the
 * client's own kvt_put writing its image straight into them (the one copy,
 * checksummed in the same pass), and PUT_COMMIT (the store publishes it,
 * copies it down, tells its policies).  A commit may ask for the client's
 * next write to be reserved ahead (reserve_next), so that the next put is
 * its commit alone: one round trip.  A get is GET (the store pins the
 * chunk's pages, promoting it from a lower tier first if need be) and the
 * client reading the pages in place, then RELEASE.  Nothing is published
 * before its commit, so no reader sees pages still being written; a page
 * goes back to the pool only at its chunk's last release, so no writer
 * reuses pages a client still reads.
 *
 * Threads.  One thread accepts; each connection has a thread of its own
 * that blocks on its socket.  Local clients are the engine processes of
 * one node (one per GPU, a few engines): tens, not thousands, and each
 * request is microseconds of index work, so a thread each is simpler than
 * an event loop and costs nothing that matters.  A connection's borrows
 * and reserved writes are its own (a table of slots, ids with a
 * generation so a stale or forged id is recognised): when the socket
 * closes (the client exited, or was killed) every borrow is released and
 * every write aborted.
 *
 * Trust.  A process that can open the socket can read and write the whole
 * arena: every chunk of every tenant in DRAM.  The socket is created with
 * mode 0660 (or what the caller asks), and each connection's peer uid
 * (SO_PEERCRED) must be the daemon's own, root's, or one the caller lists;
 * anything else is closed before HELLO.  A malformed request costs its
 * client the connection.  Each connection acts as one tenant, the one the
 * caller's tenant_of names for its uid (kvtierd: through its ACL), else
 * the default: its puts are charged to it, so its quotas and reservations
 * hold for local clients too.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "store/store_int.h"
#include "proto/local_msg.h"

#define LOCAL_MAX_SLOTS 65536u
#define SLOT_FREE 0
#define SLOT_READ 1
#define SLOT_WRITE 2

struct lslot {
	void *buf;      /* kvt_tier_rbuf or kvt_tier_wbuf */
	uint32_t gen;
	uint8_t kind;
	int8_t first;   /* a write's tier */
	uint32_t next_free;
};

struct litem {
	kvt_key key;
	uint64_t len;
};

struct lconn {
	struct lconn *next;
	struct kvt_local_server *srv;
	int fd;
	uid_t uid;
	pid_t pid;
	int acct;                   /* the tenant its puts are charged to */
	pthread_t th;
	_Atomic int done;
	struct lslot *slots;
	uint32_t n_slots, free_head; /* free list through next_free; UINT32_MAX ends */
	struct litem *iter;         /* ITER's snapshot */
	size_t n_iter;
	uint8_t *out;               /* a reply being built */
	uint64_t reserved;          /* writes reserved ahead so far */
};

struct kvt_local_server {
	kvt_store *st;
	char path[108];
	int lfd;
	int stop_pipe[2];
	const struct kvt_tier_pages *pages; /* the first tier's: the shared arena */
	int memfd;
	void *arena;
	size_t arena_len;
	uint32_t *uids;
	size_t n_uids;
	const char *(*tenant_of)(void *arg, uint32_t uid);
	void *tenant_arg;
	pthread_t acceptor;
	pthread_mutex_t mu;
	struct lconn *conns;
};

/* --- slots ------------------------------------------------------------------ */

static int slot_new(struct lconn *c, int kind, void *buf, int first, uint64_t *id)
{
	uint32_t i;

	if (c->free_head == UINT32_MAX) {
		uint32_t n = c->n_slots ? c->n_slots * 2 : 64;
		struct lslot *ns;
		if (c->n_slots >= LOCAL_MAX_SLOTS)
			return kvt_err(KVT_EFULL, "this connection holds %u borrows and writes, "
				       "the most one may", LOCAL_MAX_SLOTS);
		ns = realloc(c->slots, n * sizeof(*ns));
		if (!ns)
			return kvt_err(KVT_ENOMEM, "out of memory");
		for (i = c->n_slots; i < n; i++)
			ns[i] = (struct lslot){ .next_free = i + 1 < n ? i + 1 : UINT32_MAX };
		c->free_head = c->n_slots;
		c->slots = ns;
		c->n_slots = n;
	}
	i = c->free_head;
	c->free_head = c->slots[i].next_free;
	c->slots[i].buf = buf;
	c->slots[i].kind = (uint8_t)kind;
	c->slots[i].first = (int8_t)first;
	c->slots[i].gen++;
	*id = (uint64_t)c->slots[i].gen << 32 | i;
	return 0;
}

/* The slot `id` names, if it is live and of `kind`; NULL for an id this
 * connection was never given (a protocol error). */
static struct lslot *slot_get(struct lconn *c, uint64_t id, int kind)
{
	uint32_t i = (uint32_t)id;

	if (i >= c->n_slots || c->slots[i].kind != kind || c->slots[i].gen != (uint32_t)(id >> 32))
		return NULL;
	return &c->slots[i];
}

static void slot_free(struct lconn *c, struct lslot *s)
{
	s->kind = SLOT_FREE;
	s->buf = NULL;
	s->next_free = c->free_head;
	c->free_head = (uint32_t)(s - c->slots);
}

/* --- replies ---------------------------------------------------------------- */

static int send_msg(struct lconn *c, const void *buf, size_t n, int fd)
{
	struct iovec iov = { (void *)buf, n };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.b;
		m.msg_controllen = sizeof(u.b);
		CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), &fd, sizeof(int));
	}
	return sendmsg(c->fd, &m, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static struct kvt_lp_rep *rep_init(struct lconn *c, const struct kvt_lp_req *q, int status)
{
	struct kvt_lp_rep *r = (struct kvt_lp_rep *)c->out;

	memset(r, 0, sizeof(*r));
	r->magic = KVT_LP_MAGIC;
	r->op = q->op;
	r->status = status;
	return r;
}

static int send_status(struct lconn *c, const struct kvt_lp_req *q, int status)
{
	struct kvt_lp_rep *r = rep_init(c, q, status);
	size_t n = sizeof(*r);

	if (status < 0) {
		const char *m = kvt_errmsg();
		int l = snprintf((char *)c->out + n, KVT_LP_ERRMSG_MAX, "%s",
				 m && *m ? m : kvt_strerror(status));
		n += (size_t)(l < (int)KVT_LP_ERRMSG_MAX ? l : (int)KVT_LP_ERRMSG_MAX - 1) + 1;
	}
	return send_msg(c, c->out, n, -1);
}

/* A reply naming an image's segments as offsets into the arena, adjacent
 * pages merged. */
static int send_segs(struct lconn *c, const struct kvt_lp_req *q, uint64_t id,
		     uint64_t size, const struct iovec *iov, int n_iov)
{
	struct kvt_lp_rep *r = rep_init(c, q, 0);
	struct kvt_lp_seg *seg = (struct kvt_lp_seg *)(r + 1);
	const uint8_t *base = c->srv->arena;
	uint32_t n = 0;

	for (int i = 0; i < n_iov; i++) {
		uint64_t off = (uint64_t)((const uint8_t *)iov[i].iov_base - base);
		if (n && seg[n - 1].off + seg[n - 1].len == off) {
			seg[n - 1].len += iov[i].iov_len;
			continue;
		}
		if (n == KVT_LP_MAX_SEGS)
			return kvt_err(KVT_ETOOBIG, "the image is in more than %zu pieces",
				       (size_t)KVT_LP_MAX_SEGS);
		seg[n].off = off;
		seg[n++].len = iov[i].iov_len;
	}
	r->id = id;
	r->size = size;
	r->n = n;
	return send_msg(c, c->out, sizeof(*r) + n * sizeof(*seg), -1) ? -EPIPE : 0;
}

/* The reply to a commit that succeeded: with the client's next write of
 * q->size bytes reserved, when it asks and there are free pages enough
 * (twice that, so a reservation never makes a chunk be evicted for a put
 * that may not come), or without. */
static int reserve_next(struct lconn *c, const struct kvt_lp_req *q)
{
	kvt_store *st = c->srv->st;
	kvt_tier_wbuf *w;
	kvt_key own;
	uint64_t id, seq = ++c->reserved;
	int first, rc;

	if (!q->size || q->size > c->srv->pages->free_bytes(st->tiers[0]) / 2)
		return send_status(c, q, 0);
	/* A key of this connection's own until its commit names the real
	 * one: no client's (theirs are digests), no other connection's. */
	memset(&own, 0, sizeof(own));
	memcpy(own.b, "kvtier-local-res", 16);
	memcpy(own.b + 16, &c, sizeof(c));
	memcpy(own.b + 24, &seq, sizeof(seq));
	if (store_image_begin(st, &own, q->size, &w, &first)) {
		kvt_err_clear();
		return send_status(c, q, 0);
	}
	if (slot_new(c, SLOT_WRITE, w, first, &id)) {
		store_image_abort(st, first, w);
		kvt_err_clear();
		return send_status(c, q, 0);
	}
	rc = send_segs(c, q, id, w->len, w->iov, w->n_iov);
	if (rc == KVT_ETOOBIG) {
		store_image_abort(st, first, w);
		slot_free(c, slot_get(c, id, SLOT_WRITE));
		kvt_err_clear();
		return send_status(c, q, 0);
	}
	return rc;
}

/* --- requests --------------------------------------------------------------- */

static int iter_add(void *arg, const kvt_key *key, uint64_t len)
{
	void **a = arg;
	struct lconn *c = a[0];
	int tier = *(int *)a[1];
	kvt_store *st = c->srv->st;
	size_t *cap = a[2];

	for (int i = 0; i < tier; i++) /* listed already, from a faster tier */
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1)
			return 0;
	if (c->n_iter == *cap) {
		size_t n = *cap ? *cap * 2 : 1024;
		struct litem *ni = realloc(c->iter, n * sizeof(*ni));
		if (!ni)
			return kvt_err(KVT_ENOMEM, "out of memory listing the keys");
		c->iter = ni;
		*cap = n;
	}
	c->iter[c->n_iter].key = *key;
	c->iter[c->n_iter++].len = len;
	return 0;
}

static int do_iter(struct lconn *c, const struct kvt_lp_req *q)
{
	kvt_store *st = c->srv->st;
	struct kvt_lp_rep *r;
	struct kvt_lp_item *it;
	size_t cap = c->n_iter, n;
	int rc = 0;

	if (q->id == 0) {
		free(c->iter);
		c->iter = NULL;
		c->n_iter = cap = 0;
		for (int i = 0; i < st->n_tiers && rc == 0; i++) {
			void *a[3] = { c, &i, &cap };
			rc = st->tiers[i]->ops->iterate(st->tiers[i], iter_add, a);
		}
		if (rc)
			return send_status(c, q, rc);
	} else if (q->id > c->n_iter) {
		return kvt_err(-EPROTO, "ITER cursor %" PRIu64 " past the %zu keys listed",
			       q->id, c->n_iter);
	}
	n = c->n_iter - q->id;
	if (n > KVT_LP_ITER_BATCH)
		n = KVT_LP_ITER_BATCH;
	r = rep_init(c, q, q->id + n < c->n_iter);
	it = (struct kvt_lp_item *)(r + 1);
	for (size_t i = 0; i < n; i++) {
		memcpy(it[i].key, c->iter[q->id + i].key.b, KVT_KEY_BYTES);
		it[i].len = c->iter[q->id + i].len;
	}
	r->n = (uint32_t)n;
	r->size = q->id + n;
	return send_msg(c, c->out, sizeof(*r) + n * sizeof(*it), -1);
}

/* One request.  0 to go on; a negative value closes the connection (a
 * protocol error, logged, or the socket failing). */
/* The message a LOOKUP, NAME or WHY announced (`what`), which its client
 * sends straight after the request: its true length (MSG_TRUNC), or a
 * negative code with the error set if it does not come within
 * KVT_LP_FOLLOW_MS or the socket fails.  Without the wait, a client that
 * never sends it would hold this connection's thread for good. */
static ssize_t recv_follow(struct lconn *c, void *buf, size_t cap, const char *what)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	ssize_t n;
	int rc;

	do
		rc = poll(&p, 1, KVT_LP_FOLLOW_MS);
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		return kvt_err(-ETIMEDOUT, "%s: the message it announces did not come in %d ms",
			       what, KVT_LP_FOLLOW_MS);
	do
		n = recv(c->fd, buf, cap, MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		int e = errno;
		return kvt_err(-e, "%s: receiving the message it announces: %s", what,
			       strerror(e));
	}
	return n;
}

/* LOOKUP: how many of the keys that follow, from the first, the store
 * holds (an engine's lookup that stops short is counted by reason). */
static int do_lookup(struct lconn *c, const struct kvt_lp_req *q)
{
	kvt_store *st = c->srv->st;
	uint8_t *keys = c->out;
	ssize_t n;
	uint64_t hit = 0;

	if (q->size == 0 || q->size > KVT_LP_MAX_LOOKUP)
		return kvt_err(-EPROTO, "LOOKUP of %" PRIu64 " keys (1..%u)", q->size,
			       KVT_LP_MAX_LOOKUP);
	n = recv_follow(c, keys, KVT_LP_MAX_LOOKUP * KVT_KEY_BYTES + 1, "LOOKUP");
	if (n < 0)
		return (int)n;
	if (n != (ssize_t)(q->size * KVT_KEY_BYTES))
		return kvt_err(-EPROTO, "LOOKUP of %" PRIu64 " keys followed by %zd bytes",
			       q->size, n);
	hit = store_chain_held(st, (const kvt_key *)keys, q->size, NULL);
	if (hit < q->size) /* an engine's lookup that stops short: counted by reason */
		store_count_miss(st, c->acct, (const kvt_key *)keys + hit);
	return send_status(c, q, (int)hit);
}

/* NAME: the engine's block hashes of a chunk (kvt_store_name_chunk); the
 * parent and the hashes follow. */
static int do_name(struct lconn *c, const struct kvt_lp_req *q, const kvt_key *key)
{
	kvt_store *st = c->srv->st;
	uint32_t hl = (uint32_t)(q->id & 255), n = (uint32_t)q->size;
	uint8_t body[32 + KVT_CHUNK_NAME_MAX * 32 + 1];
	ssize_t got;

	if ((hl != 32 && hl != 8) || n == 0 || n > KVT_CHUNK_NAME_MAX ||
	    q->arg < 0 || q->id >> 9)
		return kvt_err(-EPROTO, "NAME of %u hashes of %u bytes", n, hl);
	got = recv_follow(c, body, sizeof(body), "NAME");
	if (got < 0)
		return (int)got;
	if (got != (ssize_t)((n + 1) * hl))
		return kvt_err(-EPROTO, "NAME of %u hashes followed by %zd bytes", n, got);
	return send_status(c, q, kvt_store_name_chunk(st, key, body + hl, n, hl,
						      (q->id & 256) ? body : NULL,
						      (uint32_t)q->arg));
}

/* WHY: kvt_why of the keys that follow, as LOOKUP's; the answers go after
 * the reply's header, in the same buffer. */
static int do_why(struct lconn *c, const struct kvt_lp_req *q)
{
	kvt_store *st = c->srv->st;
	int rc;
	kvt_key *keys = malloc(KVT_LP_MAX_WHY * KVT_KEY_BYTES + 1);
	struct kvt_lp_rep *r;
	kvt_ns any;
	ssize_t n;

	if (!keys)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if (q->size == 0 || q->size > KVT_LP_MAX_WHY) {
		free(keys);
		return kvt_err(-EPROTO, "WHY of %" PRIu64 " keys (1..%u)", q->size,
			       KVT_LP_MAX_WHY);
	}
	n = recv_follow(c, keys, KVT_LP_MAX_WHY * KVT_KEY_BYTES + 1, "WHY");
	if (n < 0) {
		free(keys);
		return (int)n;
	}
	if (n != (ssize_t)(q->size * KVT_KEY_BYTES)) {
		free(keys);
		return kvt_err(-EPROTO, "WHY of %" PRIu64 " keys followed by %zd bytes",
			       q->size, n);
	}
	memset(&any, 0, sizeof(any));
	r = rep_init(c, q, 0);
	rc = kvt_why(st, &any, keys, q->size, (kvt_why_chunk *)(r + 1));
	free(keys);
	if (rc < 0)
		return send_status(c, q, rc);
	r->status = rc;
	r->n = (uint32_t)q->size;
	return send_msg(c, c->out, sizeof(*r) + q->size * sizeof(kvt_why_chunk), -1);
}

static int serve_one(struct lconn *c, const struct kvt_lp_req *q)
{
	kvt_store *st = c->srv->st;
	kvt_tier *t0 = st->tiers[0];
	struct lslot *s;
	kvt_key key;
	uint64_t id;
	int rc, first;

	memcpy(key.b, q->key, KVT_KEY_BYTES);
	kvt_err_clear();
	switch (q->op) {
	case KVT_LP_HELLO: {
		struct kvt_lp_rep *r = rep_init(c, q, 0);
		r->size = c->srv->arena_len;
		return send_msg(c, r, sizeof(*r), c->srv->memfd);
	}
	case KVT_LP_PUT_BEGIN: {
		kvt_tier_wbuf *w;
		if ((rc = store_image_begin(st, &key, q->size, &w, &first)))
			return send_status(c, q, rc);
		if ((rc = slot_new(c, SLOT_WRITE, w, first, &id))) {
			store_image_abort(st, first, w);
			return send_status(c, q, rc);
		}
		rc = send_segs(c, q, id, w->len, w->iov, w->n_iov);
		if (rc == KVT_ETOOBIG) { /* then the client has nothing to write */
			store_image_abort(st, first, w);
			slot_free(c, slot_get(c, id, SLOT_WRITE));
			return send_status(c, q, rc);
		}
		return rc;
	}
	case KVT_LP_PUT_COMMIT:
	case KVT_LP_PUT_ABORT:
		if (!(s = slot_get(c, q->id, SLOT_WRITE)))
			return kvt_err(-EPROTO, "commit or abort of write %#" PRIx64
				       " this connection does not hold", q->id);
		first = s->first;
		{
			kvt_tier_wbuf *w = s->buf;
			slot_free(c, s);
			if (q->op == KVT_LP_PUT_ABORT) {
				store_image_abort(st, first, w);
				return 0;
			}
			/* A write reserved ahead is published under the key
			 * the commit names, if no tier holds it. */
			if (memcmp(w->key.b, key.b, KVT_KEY_BYTES) &&
			    ((rc = store_image_held(st, &key)) ||
			     (rc = c->srv->pages->rekey(t0, w, &key)))) {
				store_image_abort(st, first, w);
				return send_status(c, q, rc);
			}
			if ((rc = store_image_commit(st, first, w, q->arg, c->acct)))
				return send_status(c, q, rc);
			return reserve_next(c, q);
		}
	case KVT_LP_GET: {
		kvt_tier_rbuf *rb;
		if ((rc = store_image_get(st, &key, &rb)))
			return send_status(c, q, rc);
		if ((rc = slot_new(c, SLOT_READ, rb, 0, &id))) {
			t0->ops->release(t0, rb);
			return send_status(c, q, rc);
		}
		rc = send_segs(c, q, id, rb->len, rb->iov, rb->n_iov);
		if (rc == KVT_ETOOBIG) {
			t0->ops->release(t0, rb);
			slot_free(c, slot_get(c, id, SLOT_READ));
			return send_status(c, q, rc);
		}
		return rc;
	}
	case KVT_LP_RELEASE:
		if (q->id == 0)
			return 0; /* its ids were the message */
		/* fall through */
	case KVT_LP_CORRUPT:
		if (!(s = slot_get(c, q->id, SLOT_READ)))
			return kvt_err(-EPROTO, "release of borrow %#" PRIx64
				       " this connection does not hold", q->id);
		if (q->op == KVT_LP_CORRUPT) {
			/* the client found it bad: no longer served; the
			 * borrow itself ends with the RELEASE that follows */
			kvt_tier_rbuf *rb = s->buf;
			char hex[65];
			kvt_key_hex(&rb->key, hex);
			kvt_log(KVT_LOG_WARN, "local client pid %d: chunk %s failed verification",
				(int)c->pid, hex);
			t0->ops->corrupt(t0, rb);
			store_forget(st, 0, &rb->key, KVT_WHY_CORRUPT);
			return 0;
		}
		t0->ops->release(t0, s->buf);
		slot_free(c, s);
		return 0;
	case KVT_LP_EXISTS:
		return send_status(c, q, store_image_exists(st, &key));
	case KVT_LP_DEL:
		return send_status(c, q, store_image_del(st, &key));
	case KVT_LP_ITER:
		return do_iter(c, q);
	case KVT_LP_LOOKUP:
		return do_lookup(c, q);
	case KVT_LP_NAME:
		return do_name(c, q, &key);
	case KVT_LP_WHY:
		return do_why(c, q);
	case KVT_LP_STATS: {
		struct kvt_lp_rep *r = rep_init(c, q, 0);
		kvt_tier_stats ts;
		if ((rc = kvt_store_stats(st, 0, &ts)))
			return send_status(c, q, rc);
		r->n = 1;
		memcpy(r + 1, &ts, sizeof(ts));
		return send_msg(c, c->out, sizeof(*r) + sizeof(ts), -1);
	}
	}
	return kvt_err(-EPROTO, "op %u", q->op);
}

/* The client is gone: what it held goes back. */
static void conn_drop_all(struct lconn *c)
{
	kvt_store *st = c->srv->st;
	uint32_t reads = 0, writes = 0;

	for (uint32_t i = 0; i < c->n_slots; i++) {
		struct lslot *s = &c->slots[i];
		if (s->kind == SLOT_READ) {
			st->tiers[0]->ops->release(st->tiers[0], s->buf);
			reads++;
		} else if (s->kind == SLOT_WRITE) {
			store_image_abort(st, s->first, s->buf);
			writes++;
		}
	}
	if (reads || writes)
		kvt_log(KVT_LOG_INFO, "local client pid %d left holding %u borrows and %u writes: "
			"released and aborted", (int)c->pid, reads, writes);
	free(c->slots);
	free(c->iter);
	c->slots = NULL;
	c->iter = NULL;
	c->n_slots = 0;
}

/* The borrows a request says the client has let go of. */
static int release_ids(struct lconn *c, const uint8_t *ids, uint32_t n)
{
	kvt_tier *t0 = c->srv->st->tiers[0];

	for (uint32_t i = 0; i < n; i++) {
		struct lslot *s;
		uint64_t id;
		memcpy(&id, ids + i * sizeof(id), sizeof(id));
		if (!(s = slot_get(c, id, SLOT_READ)))
			return kvt_err(-EPROTO, "release of borrow %#" PRIx64
				       " this connection does not hold", id);
		t0->ops->release(t0, s->buf);
		slot_free(c, s);
	}
	return 0;
}

static void *conn_main(void *arg)
{
	struct lconn *c = arg;
	uint8_t buf[KVT_LP_MAX_REQ];
	struct kvt_lp_req q;
	uint32_t n_rel;

	for (;;) {
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		/* MSG_TRUNC: the true length of an oversized message, so it is
		 * refused rather than read in part. */
		ssize_t n = kvt_lp_recvmsg(c->fd, &m, MSG_TRUNC);
		if (n <= 0)
			break;
		if (kvt_lp_req_check(buf, (size_t)n, &q, &n_rel) ||
		    release_ids(c, buf + sizeof(q), n_rel) || serve_one(c, &q) < 0) {
			if (kvt_errmsg()[0])
				kvt_log(KVT_LOG_WARN, "local client pid %d uid %d: %s; closing it",
					(int)c->pid, (int)c->uid, kvt_errmsg());
			break;
		}
	}
	conn_drop_all(c);
	shutdown(c->fd, SHUT_RDWR);
	atomic_store(&c->done, 1);
	return NULL;
}

/* --- the listener ----------------------------------------------------------- */

static int uid_allowed(const struct kvt_local_server *s, uid_t uid)
{
	if (uid == 0 || uid == geteuid())
		return 1;
	for (size_t i = 0; i < s->n_uids; i++)
		if (s->uids[i] == uid)
			return 1;
	return 0;
}

/* Join and free the connections whose thread has ended (all when `all`,
 * after their sockets were shut down). */
static void reap(struct kvt_local_server *s, int all)
{
	struct lconn **pp, *c;

	pthread_mutex_lock(&s->mu);
	for (pp = &s->conns; (c = *pp);) {
		if (all)
			shutdown(c->fd, SHUT_RDWR);
		if (!all && !atomic_load(&c->done)) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		pthread_join(c->th, NULL);
		close(c->fd);
		free(c->out);
		free(c);
	}
	pthread_mutex_unlock(&s->mu);
}

static void accept_one(struct kvt_local_server *s)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	struct lconn *c;
	int acct, fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || !uid_allowed(s, cr.uid)) {
		kvt_log(KVT_LOG_WARN, "local socket %s: refused a client of uid %d "
			"(not the daemon's, root's nor listed)", s->path, (int)cr.uid);
		close(fd);
		return;
	}
	{
		/* the tenant the caller binds this uid to (its ACL), or the
		 * default; one the store does not know is refused */
		const char *tn = s->tenant_of ? s->tenant_of(s->tenant_arg, cr.uid) : NULL;
		acct = store_tenant_acct(s->st, tn);
		if (acct < 0) {
			kvt_log(KVT_LOG_WARN, "local socket %s: uid %d: %s; refused", s->path,
				(int)cr.uid, kvt_errmsg());
			close(fd);
			return;
		}
	}
	c = calloc(1, sizeof(*c));
	if (c)
		c->out = malloc(KVT_LP_MAX_MSG);
	if (!c || !c->out) {
		if (c)
			free(c);
		close(fd);
		return;
	}
	c->srv = s;
	c->fd = fd;
	c->uid = cr.uid;
	c->pid = cr.pid;
	c->acct = acct;
	c->free_head = UINT32_MAX;
	if (pthread_create(&c->th, NULL, conn_main, c)) {
		close(fd);
		free(c->out);
		free(c);
		return;
	}
	pthread_mutex_lock(&s->mu);
	c->next = s->conns;
	s->conns = c;
	pthread_mutex_unlock(&s->mu);
}

static void *accept_main(void *arg)
{
	struct kvt_local_server *s = arg;
	struct pollfd p[2] = { { .fd = s->lfd, .events = POLLIN },
			       { .fd = s->stop_pipe[0], .events = POLLIN } };

	for (;;) {
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents & POLLIN)
			accept_one(s);
		reap(s, 0);
	}
	return NULL;
}

void kvt_local_stop(kvt_local_server *s)
{
	if (!s)
		return;
	if (s->stop_pipe[1] >= 0) {
		(void)!write(s->stop_pipe[1], "x", 1);
		pthread_join(s->acceptor, NULL);
	}
	reap(s, 1);
	if (s->lfd >= 0) {
		close(s->lfd);
		unlink(s->path);
	}
	for (int i = 0; i < 2; i++)
		if (s->stop_pipe[i] >= 0)
			close(s->stop_pipe[i]);
	pthread_mutex_destroy(&s->mu);
	free(s->uids);
	free(s);
}

int kvt_local_serve(kvt_store *st, const kvt_local_opts *o, kvt_local_server **out)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct kvt_local_server *s;
	struct stat sb;
	const struct kvt_tier_pages *pages;
	void *base;
	size_t len;
	int e;

	kvt_err_clear();
	if (!out || !st || !o || !o->path)
		return kvt_err(KVT_EINVAL, "local server: store, options or socket path missing");
	*out = NULL;
	if (strlen(o->path) >= sizeof(a.sun_path))
		return kvt_err(KVT_EINVAL, "local socket path %s is longer than %zu bytes",
			       o->path, sizeof(a.sun_path) - 1);
	if (st->n_tiers == 0 || !(pages = st->tiers[0]->ops->pages) ||
	    pages->arena_fd(st->tiers[0]) < 0 || pages->arena(st->tiers[0], &base, &len))
		return kvt_err(KVT_ECONFIG, "local clients need the first tier to be DRAM with "
			       "dram_shared: true (its arena is what they map)");
	s = calloc(1, sizeof(*s));
	if (!s)
		return kvt_err(KVT_ENOMEM, "out of memory");
	s->st = st;
	s->lfd = s->stop_pipe[0] = s->stop_pipe[1] = -1;
	s->pages = pages;
	s->memfd = pages->arena_fd(st->tiers[0]);
	s->arena = base;
	s->arena_len = len;
	s->tenant_of = o->tenant_of;
	s->tenant_arg = o->tenant_arg;
	pthread_mutex_init(&s->mu, NULL);
	snprintf(s->path, sizeof(s->path), "%s", o->path);
	if (o->n_uids) {
		s->uids = malloc(o->n_uids * sizeof(*s->uids));
		if (!s->uids) {
			kvt_local_stop(s);
			return kvt_err(KVT_ENOMEM, "out of memory");
		}
		memcpy(s->uids, o->uids, o->n_uids * sizeof(*s->uids));
		s->n_uids = o->n_uids;
	}
	memcpy(a.sun_path, o->path, strlen(o->path) + 1);
	/* A socket left by a daemon that died is replaced; one a daemon
	 * still listens on, or anything else at the path, is not ours. */
	if (lstat(o->path, &sb) == 0 && S_ISSOCK(sb.st_mode)) {
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		int live = probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0;
		if (probe >= 0)
			close(probe);
		if (live) {
			kvt_local_stop(s);
			return kvt_err(-EADDRINUSE, "local socket %s: another server listens there",
				       o->path);
		}
		unlink(o->path);
	}
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    chmod(o->path, o->mode ? o->mode : 0660) || listen(s->lfd, 128) ||
	    pipe2(s->stop_pipe, O_CLOEXEC)) {
		e = errno;
		if (s->lfd >= 0 && e != EADDRINUSE)
			unlink(o->path);
		close(s->lfd);
		s->lfd = -1;
		kvt_local_stop(s);
		return kvt_err(-e, "local socket %s: %s", o->path, strerror(e));
	}
	if (pthread_create(&s->acceptor, NULL, accept_main, s)) {
		close(s->stop_pipe[1]);
		s->stop_pipe[1] = -1;
		kvt_local_stop(s);
		return kvt_err(-EAGAIN, "local socket %s: cannot start its thread", o->path);
	}
	*out = s;
	return 0;
}
