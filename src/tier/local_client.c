/*
 * local_client.c — the tier of a store that is a client of kvtierd
 * (local_client.h).
 *
 * Why a tier.  A store opened with `daemon: unix:///path` has this one
 * tier, and everything above it — kvt_put's fused copy and checksum,
 * kvt_get's header and key checks and verification, borrows, async ops,
 * prefetch, lookups, the engine connector, the Python binding — is the
 * store's own code, unchanged: only the eight tier ops cross the socket.
 * A client store speaking a higher-level protocol (put this payload, get
 * that key) would have needed a second implementation of each of those.
 *
 * Data.  At connect the daemon passes the memfd of its DRAM arena, which
 * is mapped here shared.  put_begin's reply names the pages the daemon
 * reserved (offsets into the file), which become this tier's wbuf: the
 * store writes the image straight into the daemon's memory, and
 * put_commit asks the daemon to publish.  get's reply names the pinned
 * pages of the chunk, read in place until release.  So a put or a get
 * costs the store's one copy, and a borrow none.
 *
 * One socket, one request at a time under a mutex (a request is
 * microseconds of the daemon's index work; the bytes do not cross it).
 * PUT_ABORT and CORRUPT are sent without waiting.  A release is not sent
 * at all at first: its id rides on the next request (proto/local.h), so
 * a borrow and its release cost one round trip.  So that a client gone
 * quiet does not keep the daemon's pages pinned, a thread of this tier
 * sends the ids still held after a millisecond or two; it ticks only
 * while there are borrows, and sleeps once the client has been quiet for
 * a tenth of a second.
 *
 * First touch.  The daemon's arena is faulted in, but this process's
 * mapping of it starts with no page table entries, and the arena's pages
 * are 4 KiB ones wherever the node gives shared memory no huge pages
 * (shmem_enabled never, no hugetlb pool): the first write of each page
 * here was a fault, 8,193 for a 32 MiB put, which made a put into pages
 * this process had not used 4 to 8 times slower than memcpy on the 2-core
 * test machine (docs/DAEMON.md, "Local clients").  So the mapping is
 * filled in ahead of use, 2 MiB at a time with MADV_POPULATE_READ (a read
 * fault maps the 16 pages around it, and a shared memfd's pages are mapped
 * writable, so the writes that follow take no fault): by a thread started
 * at connect, on idle CPU time, over the whole arena in the order the
 * daemon hands pages out, and by a put or get itself for any of its 2 MiB
 * not done yet.  A bit per 2 MiB says what is done; each is done once per
 * mapping.  The price is the page tables, 2 MiB per GiB of arena, which a
 * long-lived client that is handed pages from the whole arena pays
 * anyway.
 *
 * A daemon that goes away (stopped, restarted) fails the call that finds
 * the socket closed with an error naming it; the next call connects
 * again.  Borrows and writes of the old connection were released by the
 * daemon when it closed; their old mapping stays until this tier closes,
 * so a reader still holding one reads stale but mapped memory, never a
 * fault.  A write begun before the loss fails at commit.
 */
#include "tier/local_client.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "proto/local_msg.h"

/* What a mapping's page tables are filled in by (see "First touch"). */
#define DMN_PREMAP_SHIFT 21
#define DMN_PREMAP_BYTES ((size_t)1 << DMN_PREMAP_SHIFT)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

struct dmn_map {
	void *p;
	size_t len;
	_Atomic uint64_t *premapped; /* a bit per DMN_PREMAP_BYTES done */
	atomic_int premap_stop;      /* its thread stops */
};

struct dmn_tier {
	kvt_tier base;
	char path[108];
	pthread_mutex_t mu;
	int fd;            /* -1: not connected */
	uint64_t gen;      /* connections made so far */
	uint8_t *arena;
	size_t arena_len;
	struct dmn_map **maps; /* every mapping made, unmapped at close */
	struct dmn_map *map;   /* the current one's */
	size_t n_maps;
	uint8_t *msg;      /* the reply being read, under mu */
	/* Released borrows of connection `gen` not yet told, under mu. */
	uint64_t rel[KVT_LP_MAX_REL];
	uint32_t n_rel;
	/* The next write, reserved by the daemon at the last commit, of
	 * connection `gen`, under mu: a put of its size takes it. */
	struct dmn_buf *ahead;
	pthread_cond_t cv;  /* wakes the flusher */
	pthread_t flusher;
	int flusher_on, flusher_idle, stopping;
	/* The thread filling in the current mapping's page tables; it takes
	 * no lock of this tier and touches only that mapping. */
	pthread_t premapper;
	int premapper_on;
};

struct dmn_buf {
	union {
		kvt_tier_wbuf w;
		kvt_tier_rbuf r;
	} u;
	uint64_t id, gen;
	const struct dmn_map *map; /* the mapping the segments lie in */
	struct iovec iov[];
};

static void dmn_drop_ahead(struct dmn_tier *t);

static const struct kvt_tier_ops dmn_ops;

static struct dmn_tier *dmn_of(kvt_tier *t)
{
	return (struct dmn_tier *)t;
}

/* Fill in the page tables of granule g of mapping m, once. */
static void dmn_premap_one(const struct dmn_map *m, size_t g)
{
	uint64_t bit = 1ull << (g % 64);
	uint8_t *p = (uint8_t *)m->p + (g << DMN_PREMAP_SHIFT);
	size_t n = m->len - (g << DMN_PREMAP_SHIFT);

	if (atomic_load_explicit(&m->premapped[g / 64], memory_order_relaxed) & bit)
		return;
	if (n > DMN_PREMAP_BYTES)
		n = DMN_PREMAP_BYTES;
	if (madvise(p, n, MADV_POPULATE_READ)) {
		/* A kernel before 5.14: a read per page does it, the fault of
		 * one mapping the pages around it. */
		for (size_t o = 0; o < n; o += 4096)
			(void)*(volatile uint8_t *)(p + o);
	}
	atomic_fetch_or_explicit(&m->premapped[g / 64], bit, memory_order_relaxed);
}

/* The granules segments iov[0..n) touch, filled in now where not done. */
static void dmn_premap_iov(const struct dmn_map *m, const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++) {
		size_t a = (size_t)((uint8_t *)iov[i].iov_base - (uint8_t *)m->p);
		size_t e = a + iov[i].iov_len;
		for (size_t g = a >> DMN_PREMAP_SHIFT; g << DMN_PREMAP_SHIFT < e; g++)
			dmn_premap_one(m, g);
	}
}

/* The whole mapping, from its start: a fresh daemon hands pages out
 * from there, and a put that catches up does its own granules. */
static void *dmn_premapper(void *arg)
{
	struct dmn_map *m = arg;
	size_t n = (m->len + DMN_PREMAP_BYTES - 1) >> DMN_PREMAP_SHIFT;
	struct sched_param sp = { 0 };

	/* On CPU time nobody else wants: a busy process's own puts and gets
	 * fill in what they touch themselves, at a third of a fault's cost,
	 * instead of sharing their CPU with this thread. */
	(void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	for (size_t g = 0; g < n && !atomic_load(&m->premap_stop); g++)
		dmn_premap_one(m, g);
	return NULL;
}

/* Under t->mu (or with no other thread left). */
static void dmn_premapper_stop(struct dmn_tier *t)
{
	if (!t->premapper_on)
		return;
	atomic_store(&t->map->premap_stop, 1);
	pthread_join(t->premapper, NULL);
	t->premapper_on = 0;
}

static void dmn_disconnect(struct dmn_tier *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	t->arena = NULL;
	t->n_rel = 0; /* the daemon released them all with the connection */
	free(t->ahead); /* and aborted that write */
	t->ahead = NULL;
}

/* A request, with the released ids held so far after it. */
static int dmn_send(struct dmn_tier *t, int op, uint64_t id, uint64_t size, int arg,
		    const kvt_key *key)
{
	uint8_t m[KVT_LP_MAX_REQ];
	struct kvt_lp_req q = { .magic = KVT_LP_MAGIC, .op = (uint16_t)op,
				.version = KVT_LP_VERSION, .arg = arg, .id = id, .size = size };
	size_t n = sizeof(q) + t->n_rel * sizeof(uint64_t);

	q.len = (uint32_t)n;
	if (key)
		memcpy(q.key, key->b, KVT_KEY_BYTES);
	memcpy(m, &q, sizeof(q));
	memcpy(m + sizeof(q), t->rel, t->n_rel * sizeof(uint64_t));
	t->n_rel = 0;
	if (send(t->fd, m, n, MSG_NOSIGNAL) != (ssize_t)n) {
		int e = errno;
		dmn_disconnect(t);
		return kvt_err(-EPIPE, "kvtierd at %s: connection lost (%s: the daemon stopped "
			       "or restarted); the next call connects again", t->path, strerror(e));
	}
	return 0;
}

/* Receive one reply into t->msg, with the fd it carries if `fd` asks. */
static int dmn_recv(struct dmn_tier *t, int op, struct kvt_lp_rep *rep, const void **body,
		    size_t *blen, int *fd)
{
	struct iovec iov = { t->msg, KVT_LP_MAX_MSG };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;
	int rc;

	if (fd) {
		m.msg_control = u.b;
		m.msg_controllen = sizeof(u.b);
		*fd = -1;
	}
	n = kvt_lp_recvmsg(t->fd, &m, MSG_CMSG_CLOEXEC);
	if (fd && n > 0) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	}
	if (n <= 0) {
		dmn_disconnect(t);
		return kvt_err(-EPIPE, "kvtierd at %s: connection lost (%s); the next call "
			       "connects again", t->path,
			       n == 0 ? "the daemon closed it: stopped or restarted"
				      : strerror(errno));
	}
	if ((m.msg_flags & MSG_TRUNC) ||
	    (rc = kvt_lp_rep_check(t->msg, (size_t)n, op, rep, body, blen))) {
		dmn_disconnect(t);
		return kvt_err(-EPROTO, "kvtierd at %s: %s", t->path,
			       (m.msg_flags & MSG_TRUNC) ? "a reply too long" : kvt_errmsg());
	}
	if (rep->status < 0)
		return kvt_err(rep->status, "kvtierd: %s", (const char *)*body);
	return 0;
}

static int dmn_connect(struct dmn_tier *t)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct kvt_lp_rep rep;
	const void *body;
	size_t blen;
	struct dmn_map *m;
	void *p;
	int rc, memfd = -1;

	memcpy(a.sun_path, t->path, strlen(t->path) + 1);
	t->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (t->fd < 0 || connect(t->fd, (struct sockaddr *)&a, sizeof(a))) {
		int e = errno;
		dmn_disconnect(t);
		return kvt_err(-e, "cannot connect to kvtierd at %s: %s%s", t->path, strerror(e),
			       e == ENOENT || e == ECONNREFUSED
				       ? " (is it running, with --local at that path?)"
				       : e == EACCES ? " (the socket's mode or owner excludes this user)"
						     : "");
	}
	if ((rc = dmn_send(t, KVT_LP_HELLO, 0, 0, 0, NULL)) ||
	    (rc = dmn_recv(t, KVT_LP_HELLO, &rep, &body, &blen, &memfd))) {
		if (rc == -EPIPE) /* closed before HELLO's reply: refused */
			return kvt_err(-EACCES, "kvtierd at %s closed the connection at once: "
				       "this uid is not allowed, or bound to a tenant it does not know "
				       "(its log says which)", t->path);
		return rc;
	}
	if (memfd < 0 || rep.size == 0 || rep.size > SIZE_MAX / 2) {
		if (memfd >= 0)
			close(memfd);
		dmn_disconnect(t);
		return kvt_err(-EPROTO, "kvtierd at %s passed no shared arena", t->path);
	}
	{
		struct dmn_map **nm = realloc(t->maps, (t->n_maps + 1) * sizeof(*nm));
		if (!nm) {
			close(memfd);
			dmn_disconnect(t);
			return kvt_err(KVT_ENOMEM, "out of memory");
		}
		t->maps = nm;
	}
	m = calloc(1, sizeof(*m));
	if (m)
		m->premapped = calloc(((rep.size + DMN_PREMAP_BYTES - 1) >> DMN_PREMAP_SHIFT) / 64 + 1,
				      sizeof(*m->premapped));
	if (!m || !m->premapped) {
		free(m);
		close(memfd);
		dmn_disconnect(t);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	p = mmap(NULL, rep.size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	close(memfd);
	if (p == MAP_FAILED) {
		int e = errno;
		free((void *)m->premapped);
		free(m);
		dmn_disconnect(t);
		return kvt_err(-e, "kvtierd at %s: cannot map its %" PRIu64 "-byte arena: %s",
			       t->path, rep.size, strerror(e));
	}
	/* Where the node gives shared memory huge pages on advice
	 * (shmem_enabled advise), as the daemon's arena asks for them, this
	 * mapping takes them too: 2 MiB a page table entry, not 4 KiB. */
	(void)madvise(p, rep.size, MADV_HUGEPAGE);
	m->p = p;
	m->len = rep.size;
	t->maps[t->n_maps++] = m;
	/* The last mapping's thread, if still going, gives way: that mapping
	 * takes no new requests.  Without a thread, each put and get fills in
	 * its own granules. */
	dmn_premapper_stop(t);
	t->map = m;
	if (pthread_create(&t->premapper, NULL, dmn_premapper, m) == 0)
		t->premapper_on = 1;
	t->arena = p;
	t->arena_len = rep.size;
	t->gen++;
	return 0;
}

/* One request, the message it announces (LOOKUP's and WHY's keys, NAME's
 * hashes: `follow`, flen bytes) and its reply, under t->mu (held by the
 * caller, which reads the body before letting go). */
static int dmn_call_follow(struct dmn_tier *t, int op, uint64_t id, uint64_t size, int arg,
			   const kvt_key *key, const void *follow, size_t flen,
			   struct kvt_lp_rep *rep, const void **body, size_t *blen)
{
	int rc;

	if (t->fd < 0 && (rc = dmn_connect(t)))
		return rc;
	if ((rc = dmn_send(t, op, id, size, arg, key)))
		return rc;
	if (follow && send(t->fd, follow, flen, MSG_NOSIGNAL) != (ssize_t)flen) {
		dmn_disconnect(t);
		return kvt_err(-EPIPE, "kvtierd at %s: connection lost", t->path);
	}
	return dmn_recv(t, op, rep, body, blen, NULL);
}

/* One request and its reply (dmn_call_follow with nothing announced). */
static int dmn_call(struct dmn_tier *t, int op, uint64_t id, uint64_t size, int arg,
		    const kvt_key *key, struct kvt_lp_rep *rep, const void **body, size_t *blen)
{
	return dmn_call_follow(t, op, id, size, arg, key, NULL, 0, rep, body, blen);
}

/* A request with no reply, for what the connection `gen` holds: nothing
 * to do once that connection is gone (the daemon let go of it then). */
static void dmn_post(struct dmn_tier *t, int op, uint64_t id, uint64_t gen)
{
	pthread_mutex_lock(&t->mu);
	if (t->fd >= 0 && t->gen == gen)
		(void)dmn_send(t, op, id, 0, 0, NULL);
	pthread_mutex_unlock(&t->mu);
}

/* A wbuf or rbuf over the segments of a reply, in the current mapping. */
static int dmn_buf_new(struct dmn_tier *t, const struct kvt_lp_rep *rep, const void *body,
		       const kvt_key *key, struct dmn_buf **out)
{
	struct dmn_buf *b;
	int rc;

	if ((rc = kvt_lp_segs_check(body, rep->n, rep->size, t->arena_len)))
		return kvt_err_prefix(rc, "kvtierd at %s: ", t->path);
	b = malloc(sizeof(*b) + rep->n * sizeof(struct iovec));
	if (!b)
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < rep->n; i++) {
		uint64_t off, len;
		kvt_lp_seg_at(body, i, &off, &len);
		b->iov[i].iov_base = t->arena + off;
		b->iov[i].iov_len = len;
	}
	b->id = rep->id;
	b->gen = t->gen;
	b->map = t->map;
	b->u.w.key = *key;
	b->u.w.len = rep->size;
	b->u.w.iov = b->iov;
	b->u.w.n_iov = (int)rep->n;
	*out = b;
	return 0;
}

/* The write reserved ahead is given back (a put of another size). */
static void dmn_drop_ahead(struct dmn_tier *t)
{
	struct dmn_buf *a = t->ahead;

	if (!a)
		return;
	t->ahead = NULL; /* before a send that may fail and disconnect */
	if (t->fd >= 0 && a->gen == t->gen)
		(void)dmn_send(t, KVT_LP_PUT_ABORT, a->id, 0, 0, NULL);
	free(a);
}

static int dmn_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len, kvt_tier_wbuf **w)
{
	struct dmn_tier *t = dmn_of(tt);
	struct kvt_lp_rep rep;
	struct dmn_buf *b = NULL;
	const void *body;
	size_t blen;
	int rc;

	*w = NULL;
	pthread_mutex_lock(&t->mu);
	/* No round trip when the last commit reserved this write: whether
	 * the key is held already the commit says (put_unprobed). */
	if (t->ahead && t->fd >= 0 && t->ahead->gen == t->gen && t->ahead->u.w.len == len) {
		b = t->ahead;
		t->ahead = NULL;
		b->u.w.key = *key;
		pthread_mutex_unlock(&t->mu);
		dmn_premap_iov(b->map, b->iov, b->u.w.n_iov);
		*w = &b->u.w;
		return 0;
	}
	rc = dmn_call(t, KVT_LP_PUT_BEGIN, 0, len, 0, key, &rep, &body, &blen);
	if (rc == 0 && rep.size != len)
		rc = kvt_err(-EPROTO, "kvtierd reserved %" PRIu64 " bytes for %" PRIu64,
			     rep.size, len);
	if (rc == 0 && (rc = dmn_buf_new(t, &rep, body, key, &b)))
		(void)dmn_send(t, KVT_LP_PUT_ABORT, rep.id, 0, 0, NULL);
	pthread_mutex_unlock(&t->mu);
	if (rc == 0) {
		dmn_premap_iov(b->map, b->iov, b->u.w.n_iov);
		*w = &b->u.w;
	}
	return rc;
}

static int dmn_put_commit(kvt_tier *tt, kvt_tier_wbuf *w, int durability)
{
	struct dmn_tier *t = dmn_of(tt);
	struct dmn_buf *b = (struct dmn_buf *)w;
	struct kvt_lp_rep rep;
	const void *body;
	size_t blen;
	int rc;

	pthread_mutex_lock(&t->mu);
	/* One reserved ahead of another size than this put's is given back:
	 * the next put is likely of this one's size, asked for now. */
	if (t->ahead && t->ahead->u.w.len != w->len)
		dmn_drop_ahead(t);
	if (t->fd < 0 || t->gen != b->gen)
		rc = kvt_err(-EPIPE, "kvtierd at %s: the connection this write began on was lost; "
			     "nothing was stored", t->path);
	else
		rc = dmn_call(t, KVT_LP_PUT_COMMIT, b->id, t->ahead ? 0 : w->len, durability,
			      &w->key, &rep, &body, &blen);
	if (rc == 0 && rep.n) {
		struct dmn_buf *a = NULL;
		kvt_key none = { { 0 } };
		if (rep.size != w->len || dmn_buf_new(t, &rep, body, &none, &a)) {
			/* not a reservation this put can use: given back */
			(void)dmn_send(t, KVT_LP_PUT_ABORT, rep.id, 0, 0, NULL);
			kvt_err_clear();
		} else {
			t->ahead = a;
		}
	}
	pthread_mutex_unlock(&t->mu);
	free(b);
	return rc;
}

static void dmn_put_abort(kvt_tier *tt, kvt_tier_wbuf *w)
{
	struct dmn_buf *b = (struct dmn_buf *)w;

	if (!b)
		return;
	dmn_post(dmn_of(tt), KVT_LP_PUT_ABORT, b->id, b->gen);
	free(b);
}

static int dmn_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **r)
{
	struct dmn_tier *t = dmn_of(tt);
	struct kvt_lp_rep rep;
	struct dmn_buf *b = NULL;
	const void *body;
	size_t blen;
	int rc;

	*r = NULL;
	pthread_mutex_lock(&t->mu);
	rc = dmn_call(t, KVT_LP_GET, 0, 0, 0, key, &rep, &body, &blen);
	if (rc == 0 && (rc = dmn_buf_new(t, &rep, body, key, &b)))
		(void)dmn_send(t, KVT_LP_RELEASE, rep.id, 0, 0, NULL);
	pthread_mutex_unlock(&t->mu);
	if (rc == KVT_ENOTFOUND)
		kvt_err_clear(); /* a miss is the common answer, not a fault */
	if (rc == 0) {
		dmn_premap_iov(b->map, b->iov, b->u.r.n_iov);
		*r = &b->u.r;
	}
	return rc;
}

static void dmn_release(kvt_tier *tt, kvt_tier_rbuf *r)
{
	struct dmn_tier *t = dmn_of(tt);
	struct dmn_buf *b = (struct dmn_buf *)r;

	if (!b)
		return;
	pthread_mutex_lock(&t->mu);
	if (t->fd >= 0 && t->gen == b->gen) {
		if (t->n_rel == KVT_LP_MAX_REL)
			(void)dmn_send(t, KVT_LP_RELEASE, 0, 0, 0, NULL);
		if (t->fd >= 0) {
			t->rel[t->n_rel++] = b->id;
			if (t->flusher_idle)
				pthread_cond_signal(&t->cv);
		}
	}
	pthread_mutex_unlock(&t->mu);
	free(b);
}

/* Tell the daemon of releases no request has carried for a tick. */
static void *dmn_flusher(void *arg)
{
	struct dmn_tier *t = arg;
	int quiet = 0, held = 0;

	pthread_mutex_lock(&t->mu);
	while (!t->stopping) {
		if (quiet >= 50) { /* 100 ms without a borrow let go of */
			t->flusher_idle = 1;
			while (!t->stopping && t->n_rel == 0)
				pthread_cond_wait(&t->cv, &t->mu);
			t->flusher_idle = 0;
			quiet = 0;
			continue;
		}
		struct timespec dl = kvt_deadline_after(2);
		pthread_cond_timedwait(&t->cv, &t->mu, &dl);
		if (t->n_rel && held && t->fd >= 0)
			(void)dmn_send(t, KVT_LP_RELEASE, 0, 0, 0, NULL);
		/* ids seen at this tick go at the next if no request took them */
		held = t->n_rel > 0;
		quiet = held ? 0 : quiet + 1;
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

static void dmn_corrupt(kvt_tier *tt, kvt_tier_rbuf *r)
{
	struct dmn_buf *b = (struct dmn_buf *)r;

	dmn_post(dmn_of(tt), KVT_LP_CORRUPT, b->id, b->gen);
}

/* A status-only request (EXISTS, DEL): its status, or the error. */
static int dmn_status(struct dmn_tier *t, int op, const kvt_key *key)
{
	struct kvt_lp_rep rep;
	const void *body;
	size_t blen;
	int rc;

	pthread_mutex_lock(&t->mu);
	rc = dmn_call(t, op, 0, 0, 0, key, &rep, &body, &blen);
	pthread_mutex_unlock(&t->mu);
	return rc ? rc : rep.status;
}

static int dmn_exists(kvt_tier *tt, const kvt_key *key)
{
	return dmn_status(dmn_of(tt), KVT_LP_EXISTS, key) == 1;
}

/* A lookup's whole chain in one round trip per 4096 keys. */
static int dmn_exists_prefix(kvt_tier *tt, const kvt_key *keys, size_t n)
{
	struct dmn_tier *t = dmn_of(tt);
	size_t hit = 0;
	int rc = 0;

	pthread_mutex_lock(&t->mu);
	while (hit < n) {
		size_t m = n - hit < KVT_LP_MAX_LOOKUP ? n - hit : KVT_LP_MAX_LOOKUP;
		struct kvt_lp_rep rep;
		const void *body;
		size_t blen;

		if ((rc = dmn_call_follow(t, KVT_LP_LOOKUP, 0, m, 0, NULL, keys + hit,
					  m * sizeof(*keys), &rep, &body, &blen)))
			break;
		if ((size_t)rep.status > m) {
			dmn_disconnect(t);
			rc = kvt_err(-EPROTO, "kvtierd found %d of %zu keys", rep.status, m);
			break;
		}
		hit += (size_t)rep.status;
		if ((size_t)rep.status < m)
			break;
	}
	pthread_mutex_unlock(&t->mu);
	return rc ? rc : (int)hit;
}

/* kvt_why asked of the daemon's store, KVT_LP_MAX_WHY keys a round trip. */
static int dmn_why(kvt_tier *tt, const kvt_key *keys, size_t n, kvt_why_chunk *out)
{
	struct dmn_tier *t = dmn_of(tt);
	size_t done = 0;
	int rc = 0, served = -1;

	pthread_mutex_lock(&t->mu);
	while (done < n) {
		size_t m = n - done < KVT_LP_MAX_WHY ? n - done : KVT_LP_MAX_WHY;
		struct kvt_lp_rep rep;
		const void *body;
		size_t blen;

		if ((rc = dmn_call_follow(t, KVT_LP_WHY, 0, m, 0, NULL, keys + done,
					  m * sizeof(*keys), &rep, &body, &blen)))
			break;
		if (rep.n != m || rep.status < 0 || (size_t)rep.status > m) {
			dmn_disconnect(t);
			rc = kvt_err(-EPROTO, "kvtierd answered WHY of %zu keys with %u", m, rep.n);
			break;
		}
		memcpy(out + done, body, m * sizeof(*out));
		for (size_t i = 0; i < m; i++)
			out[done + i].detail[sizeof(out->detail) - 1] = '\0';
		if (served < 0 && (size_t)rep.status < m)
			served = (int)(done + (size_t)rep.status);
		done += m;
	}
	pthread_mutex_unlock(&t->mu);
	return rc ? rc : served < 0 ? (int)n : served;
}

/* kvt_store_name_chunk, for kvtierd's store (its events name the chunk). */
static int dmn_name(kvt_tier *tt, const kvt_key *key, const uint8_t *hashes, uint32_t n,
		    uint32_t hash_len, const uint8_t *parent, uint32_t block_size)
{
	struct dmn_tier *t = dmn_of(tt);
	uint8_t body[32 + KVT_CHUNK_NAME_MAX * 32];
	size_t len = (size_t)(n + 1) * hash_len;
	struct kvt_lp_rep rep;
	const void *rbody;
	size_t blen;
	int rc;

	if (!n || n > KVT_CHUNK_NAME_MAX || (hash_len != 32 && hash_len != 8))
		return kvt_err(KVT_EINVAL, "a chunk's name is 1..%d block hashes of 32 or 8 bytes, "
				    "not %u of %u", KVT_CHUNK_NAME_MAX, n, hash_len);
	memset(body, 0, hash_len);
	if (parent)
		memcpy(body, parent, hash_len);
	memcpy(body + hash_len, hashes, (size_t)n * hash_len);
	pthread_mutex_lock(&t->mu);
	rc = dmn_call_follow(t, KVT_LP_NAME, hash_len | (parent ? 256u : 0u), n, (int)block_size,
			     key, body, len, &rep, &rbody, &blen);
	if (rc == 0)
		rc = rep.status;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int dmn_del(kvt_tier *tt, const kvt_key *key)
{
	return dmn_status(dmn_of(tt), KVT_LP_DEL, key);
}

/* Batch by batch; fn is called with no lock held (it may call back in). */
static int dmn_iterate(kvt_tier *tt, int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		       void *arg)
{
	struct dmn_tier *t = dmn_of(tt);
	struct kvt_lp_item *items = malloc(KVT_LP_ITER_BATCH * sizeof(*items));
	uint64_t cursor = 0;
	int rc = 0, more = 1;

	if (!items)
		return kvt_err(KVT_ENOMEM, "out of memory");
	while (more && rc == 0) {
		struct kvt_lp_rep rep;
		const void *body;
		size_t blen;
		uint32_t n = 0;

		pthread_mutex_lock(&t->mu);
		rc = dmn_call(t, KVT_LP_ITER, cursor, 0, 0, NULL, &rep, &body, &blen);
		if (rc == 0 && (rep.n > KVT_LP_ITER_BATCH || rep.size != cursor + rep.n))
			rc = kvt_err(-EPROTO, "kvtierd's listing skips or repeats keys");
		if (rc == 0) {
			n = rep.n;
			memcpy(items, body, n * sizeof(*items));
			more = rep.status == 1;
			cursor = rep.size;
		}
		pthread_mutex_unlock(&t->mu);
		for (uint32_t i = 0; i < n && rc == 0; i++) {
			kvt_key k;
			memcpy(k.b, items[i].key, KVT_KEY_BYTES);
			rc = fn(arg, &k, items[i].len);
		}
	}
	free(items);
	return rc;
}

/* The daemon's first tier (its shared DRAM, where borrows are pinned),
 * under this tier's name; zeros if it cannot be reached. */
static void dmn_stats(kvt_tier *tt, kvt_tier_stats *out)
{
	struct dmn_tier *t = dmn_of(tt);
	struct kvt_lp_rep rep;
	const void *body;
	size_t blen;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&t->mu);
	if (dmn_call(t, KVT_LP_STATS, 0, 0, 0, NULL, &rep, &body, &blen) == 0)
		memcpy(out, body, sizeof(*out));
	pthread_mutex_unlock(&t->mu);
	snprintf(out->name, sizeof(out->name), "%s", dmn_ops.name);
}

static void dmn_close(kvt_tier *tt)
{
	struct dmn_tier *t = dmn_of(tt);

	if (!t)
		return;
	if (t->flusher_on) {
		pthread_mutex_lock(&t->mu);
		t->stopping = 1;
		pthread_cond_signal(&t->cv);
		pthread_mutex_unlock(&t->mu);
		pthread_join(t->flusher, NULL);
	}
	dmn_disconnect(t); /* the write reserved ahead goes with it */
	dmn_premapper_stop(t);
	for (size_t i = 0; i < t->n_maps; i++) {
		munmap(t->maps[i]->p, t->maps[i]->len);
		free((void *)t->maps[i]->premapped);
		free(t->maps[i]);
	}
	free(t->maps);
	free(t->msg);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static const struct kvt_tier_ops dmn_ops = {
	.name = "daemon",
	.put_begin = dmn_put_begin,
	.put_commit = dmn_put_commit,
	.put_abort = dmn_put_abort,
	.get = dmn_get,
	.release = dmn_release,
	.exists = dmn_exists,
	.put_unprobed = 1, /* the daemon's PUT_BEGIN and PUT_COMMIT check */
	.exists_prefix = dmn_exists_prefix,
	.why = dmn_why,
	.name_chunk = dmn_name,
	.del = dmn_del,
	.iterate = dmn_iterate,
	.stats = dmn_stats,
	.corrupt = dmn_corrupt,
	.close = dmn_close,
};

int kvt_local_client_open(const char *path, kvt_tier **out)
{
	struct dmn_tier *t;
	int rc;

	*out = NULL;
	if (!path || path[0] != '/' || strlen(path) >= sizeof(t->path))
		return kvt_err(KVT_EINVAL, "daemon socket \"%s\": an absolute path of at most %zu "
			       "bytes", path ? path : "", sizeof(t->path) - 1);
	t = calloc(1, sizeof(*t));
	if (!t || !(t->msg = malloc(KVT_LP_MAX_MSG))) {
		free(t);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	t->base.ops = &dmn_ops;
	t->fd = -1;
	pthread_mutex_init(&t->mu, NULL);
	kvt_cond_init_mono(&t->cv);
	snprintf(t->path, sizeof(t->path), "%s", path);
	/* Connect now, so that a store opened on a daemon that is not there
	 * says so at open rather than at the first put. */
	if ((rc = dmn_connect(t))) {
		dmn_close(&t->base);
		return rc;
	}
	if (pthread_create(&t->flusher, NULL, dmn_flusher, t)) {
		dmn_close(&t->base);
		return kvt_err(-EAGAIN, "kvtierd at %s: cannot start the tier's thread", path);
	}
	t->flusher_on = 1;
	*out = &t->base;
	return 0;
}
