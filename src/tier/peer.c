/*
 * peer.c — other nodes' kvtierd as a tier (peer.h).
 *
 * Why a tier.  A decode node that misses in its own DRAM and disks may
 * find the chunk in three places: the prefill node that computed it
 * (still in that node's memory), the shared file system and S3.  As a
 * tier, the prefill node is one more place the store's read path looks,
 * and the store's cost model (get.c, read_order) decides from the
 * bandwidths it measures whether the other node or a shared tier is
 * asked first.  Everything the store does with an image — checking its
 * header against the namespace and key, verifying its checksums, copying
 * it up into DRAM — it does to one fetched from a peer as to one read
 * from a disk: a peer is trusted with nothing.
 *
 * The tier keeps no index of what the peers hold: exists answers 0 (it
 * must answer from memory), and a lookup asks the peers in one round
 * trip for the whole chain (exists_prefix, KVTIER.PEEK), every peer at
 * once.  A read asks the peer that last had a chunk first, then the
 * others.
 *
 * Connections: a few idle ones per peer are kept for reuse; a request
 * takes one (or connects, with AUTH when a password is configured), and
 * gives it back once its reply is whole; an idle one the peer closed (it
 * restarted) is replaced and the request sent again, once.  A peer that
 * cannot be reached or answers with an error fails the read that found
 * out (its error names the peer), then is skipped for a second, doubling
 * with each failure in a row up to 30 s: reads meanwhile are plain misses
 * here, so a node that is gone costs its peers a timeout now and then,
 * not one per read.
 */
#include "tier/peer.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/hex.h"
#include "proto/resp.h"

#define PEER_IDLE 8            /* idle connections kept per peer */
#define PEER_STASH 4096
#define PEER_DOWN_MS 1000      /* a peer that failed is skipped this long, */
#define PEER_DOWN_MAX_MS 30000 /* doubling per failure in a row up to this */
#define PEER_CONNECT_MS 1000   /* a connect waits at most this (a LAN's) */

struct peer_conn {
	int fd;
	int64_t deadline_ms;       /* the request under way ends by then */
	size_t n;                  /* bytes in stash */
	char stash[PEER_STASH];
};

struct peer_addr {
	char host[256], port[16];
	char name[280];            /* host:port, for messages */
	struct peer_conn *idle[PEER_IDLE];
	int n_idle;
	int64_t down_until_ms;     /* skipped until then */
	int fails;                 /* failures in a row */
};

struct peer_tier {
	kvt_tier base;
	struct peer_addr a[KVT_PEER_MAX];
	int n;
	char user[128], pass[256];
	int timeout_ms;
	uint64_t max_image;
	pthread_mutex_t mu;        /* idle lists, down times, state */
	char state[160];
	atomic_int last;           /* the peer that had the last chunk read */
	atomic_uint_fast64_t hits, misses, bytes_out, corrupt, read_errors;
};

struct peer_rbuf {
	kvt_tier_rbuf r;
	struct iovec iov;
	void *data;
};

static const struct kvt_tier_ops peer_ops;

static struct peer_tier *peer_of(kvt_tier *t)
{
	return (struct peer_tier *)t;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- the peer list ------------------------------------------------------------ */

/* One "host:port" or "[v6]:port" entry of `len` bytes. */
static int parse_addr(const char *s, size_t len, struct peer_addr *a)
{
	const char *colon, *host = s;
	size_t hl;
	char *end;
	long port;

	if (len && s[0] == '[') {
		const char *close = memchr(s, ']', len);
		if (!close || close + 1 >= s + len || close[1] != ':')
			goto bad;
		host = s + 1;
		hl = (size_t)(close - host);
		colon = close + 1;
	} else {
		colon = NULL;
		for (size_t i = 0; i < len; i++)
			if (s[i] == ':')
				colon = s + i;
		if (!colon)
			goto bad;
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= sizeof(a->host))
		goto bad;
	{
		char num[8];
		size_t pl = len - (size_t)(colon + 1 - s);
		if (pl == 0 || pl >= sizeof(num))
			goto bad;
		memcpy(num, colon + 1, pl);
		num[pl] = '\0';
		errno = 0;
		port = strtol(num, &end, 10);
		if (errno || *end || port < 1 || port > 65535)
			goto bad;
	}
	if (a) {
		memcpy(a->host, host, hl);
		a->host[hl] = '\0';
		snprintf(a->port, sizeof(a->port), "%ld", port);
		snprintf(a->name, sizeof(a->name), "%.*s", (int)len, s);
	}
	return 0;
bad:
	return kvt_err(KVT_ECONFIG, "\"%.*s\": a peer is host:port (port 1..65535)",
		       (int)(len > 300 ? 300 : len), s);
}

/* Walk the comma-separated list, `a` NULL to check only. */
static int parse_list(const char *peers, struct peer_addr *a, int *n_out)
{
	int n = 0, rc;
	const char *p = peers;

	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && (*p == ' ' || *p == '\t'))
			p++, len--;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len) {
			if (n == KVT_PEER_MAX)
				return kvt_err(KVT_ECONFIG, "more than %d peers", KVT_PEER_MAX);
			if ((rc = parse_addr(p, len, a ? &a[n] : NULL)))
				return rc;
			n++;
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	if (n_out)
		*n_out = n;
	return 0;
}

int kvt_peer_list_check(const char *peers)
{
	return parse_list(peers, NULL, NULL);
}

/* --- the reply reader ---------------------------------------------------------- */

/* --- connections ---------------------------------------------------------------- */

/* A reply's bytes as they come, until the request's deadline: a peer that
 * sends a byte now and then cannot hold a read for longer than that (the
 * socket's own timeout bounds each wait, not the whole). */
static long fd_src(void *arg, void *buf, size_t len)
{
	struct peer_conn *c = arg;
	for (;;) {
		ssize_t got = recv(c->fd, buf, len, MSG_DONTWAIT);
		if (got >= 0)
			return got;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		int64_t left = c->deadline_ms - now_ms();
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		if (left <= 0)
			return -ETIMEDOUT;
		int r = poll(&p, 1, left > 600000 ? 600000 : (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t put = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (put < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		}
		while (n > 0 && (size_t)put >= iov->iov_len) {
			put -= (ssize_t)iov->iov_len;
			iov++, n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + put;
			iov->iov_len -= (size_t)put;
		}
	}
	return 0;
}

static void conn_close(struct peer_conn *c)
{
	if (c) {
		close(c->fd);
		free(c);
	}
}

static int connect_timed(const struct peer_addr *a, int timeout_ms, int *fd_out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	int gai, err = -ECONNREFUSED;

	if ((gai = getaddrinfo(a->host, a->port, &hints, &res)))
		return kvt_err(-EHOSTUNREACH, "peer %s: %s", a->name, gai_strerror(gai));
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				ai->ai_protocol);
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int so = 0;
		socklen_t sl = sizeof(so);

		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
			err = -errno;
			close(fd);
			continue;
		}
		if (poll(&p, 1, timeout_ms) != 1) {
			err = -ETIMEDOUT;
			close(fd);
			continue;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) || so) {
			err = -(so ? so : errno);
			close(fd);
			continue;
		}
		freeaddrinfo(res);
		*fd_out = fd;
		return 0;
	}
	freeaddrinfo(res);
	return kvt_err(err, "peer %s: connect: %s", a->name, strerror(-err));
}

static int roundtrip(struct peer_tier *t, struct peer_conn *c, const struct peer_addr *a,
		     struct iovec *iov, int n, struct resp_reply *r);

static int conn_open(struct peer_tier *t, const struct peer_addr *a, struct peer_conn **out)
{
	struct peer_conn *c = calloc(1, sizeof(*c));
	struct timeval tv = { .tv_sec = t->timeout_ms / 1000,
			      .tv_usec = (t->timeout_ms % 1000) * 1000 };
	int one = 1, rc;

	if (!c)
		return kvt_err(KVT_ENOMEM, "out of memory");
	c->deadline_ms = now_ms() + t->timeout_ms; /* for its AUTH */
	if ((rc = connect_timed(a, t->timeout_ms < PEER_CONNECT_MS ? t->timeout_ms
							     : PEER_CONNECT_MS, &c->fd))) {
		free(c);
		return rc;
	}
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (t->pass[0]) {
		/* AUTH [user] password, as redis-cli sends it */
		char n_args[40], ul[24], pl[24];
		struct iovec v[8];
		struct resp_reply r;
		int m = 0;

		size_t h = resp_array_head(n_args, t->user[0] ? 3 : 2);

		memcpy(n_args + h, "$4\r\nAUTH\r\n", 10);
		v[m++] = (struct iovec){ n_args, h + 10 };
		if (t->user[0]) {
			v[m++] = (struct iovec){ ul, resp_bulk_head(ul, strlen(t->user)) };
			v[m++] = (struct iovec){ t->user, strlen(t->user) };
			v[m++] = (struct iovec){ "\r\n", 2 };
		}
		v[m++] = (struct iovec){ pl, resp_bulk_head(pl, strlen(t->pass)) };
		v[m++] = (struct iovec){ t->pass, strlen(t->pass) };
		v[m++] = (struct iovec){ "\r\n", 2 };
		rc = roundtrip(t, c, a, v, m, &r);
		if (rc == 0 && r.type != '+')
			rc = kvt_err(-EACCES, "peer %s: AUTH refused: %s", a->name, r.text);
		free(r.data);
		if (rc) {
			conn_close(c);
			return rc;
		}
	}
	*out = c;
	return 0;
}

static int roundtrip(struct peer_tier *t, struct peer_conn *c, const struct peer_addr *a,
		     struct iovec *iov, int n, struct resp_reply *r)
{
	int rc;

	memset(r, 0, sizeof(*r));
	if ((rc = send_all(c->fd, iov, n)))
		return kvt_err(rc, "peer %s: sending: %s", a->name,
			       rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
	rc = resp_read_reply(fd_src, c, c->stash, sizeof(c->stash), &c->n, t->max_image,
				 NULL, NULL, r);
	if (rc)
		kvt_err_prefix(rc, "peer %s: ", a->name);
	return rc;
}

/* --- requests ----------------------------------------------------------------- */

static int peer_down(struct peer_tier *t, int i)
{
	int down;

	pthread_mutex_lock(&t->mu);
	down = t->a[i].down_until_ms > now_ms();
	pthread_mutex_unlock(&t->mu);
	return down;
}

/* One request to one peer, in two steps so that a lookup asks every peer
 * at once: call_send, then call_recv. */
struct peer_call {
	int i;
	struct peer_conn *c;
	int reused;               /* c was idle: the peer may have closed it */
	const struct iovec *iov;
	int n_iov;
	resp_reserve reserve;  /* a bulk reply into these, or NULL */
	void *reserve_arg;
	int reserved;              /* reserve was called: the reply may be
				    * half in it, and no retry can follow */
	int reserve_rc;            /* what it returned */
	int64_t deadline_ms;       /* the whole request's, from its first send */
	struct resp_reply r;
};

/* The peer failed: skipped for a second, doubling with each failure in a
 * row up to half a minute, so a node that is gone costs its peers a
 * timeout now and then and not one per read. */
static int call_failed(struct peer_tier *t, struct peer_call *k, int rc)
{
	struct peer_addr *a = &t->a[k->i];
	int shift;

	conn_close(k->c);
	k->c = NULL;
	atomic_fetch_add(&t->read_errors, 1);
	pthread_mutex_lock(&t->mu);
	shift = a->fails < 5 ? a->fails : 5;
	a->fails++;
	a->down_until_ms = now_ms() + (PEER_DOWN_MS << shift < PEER_DOWN_MAX_MS
				       ? PEER_DOWN_MS << shift : PEER_DOWN_MAX_MS);
	snprintf(t->state, sizeof(t->state), "%s", kvt_errmsg());
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int call_write(struct peer_tier *t, struct peer_call *k)
{
	struct iovec v[4];
	int rc;

	memcpy(v, k->iov, (size_t)k->n_iov * sizeof(*v)); /* send_all moves them */
	k->c->deadline_ms = k->deadline_ms;
	if ((rc = send_all(k->c->fd, v, k->n_iov)))
		return kvt_err(rc, "peer %s: sending: %s", t->a[k->i].name,
			       rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
	return 0;
}

/* Send on an idle connection, or a new one (a new one also when the idle
 * one turns out closed). */
static int call_send(struct peer_tier *t, struct peer_call *k)
{
	struct peer_addr *a = &t->a[k->i];
	int rc;

	memset(&k->r, 0, sizeof(k->r));
	k->c = NULL;
	k->deadline_ms = now_ms() + t->timeout_ms;
	pthread_mutex_lock(&t->mu);
	if (a->n_idle)
		k->c = a->idle[--a->n_idle];
	pthread_mutex_unlock(&t->mu);
	k->reused = k->c != NULL;
	if (k->c && call_write(t, k) == 0)
		return 0;
	conn_close(k->c);
	k->c = NULL;
	k->reused = 0;
	if ((rc = conn_open(t, a, &k->c)) || (rc = call_write(t, k)))
		return call_failed(t, k, rc);
	return 0;
}

static int reserve_hook(void *arg, uint64_t len, const struct iovec **iov, int *n_iov)
{
	struct peer_call *k = arg;

	k->reserved = 1;
	k->reserve_rc = k->reserve(k->reserve_arg, len, iov, n_iov);
	return k->reserve_rc;
}

static int call_read(struct peer_tier *t, struct peer_call *k)
{
	return resp_read_reply(fd_src, k->c, k->c->stash, sizeof(k->c->stash), &k->c->n,
				   t->max_image, k->reserve ? reserve_hook : NULL, k, &k->r);
}

/* The reply, into k->r; the connection goes back to the idle ones.  A
 * connection the peer had closed while idle (it restarted) is found here
 * as an early end: the request is sent again, once, on a new one. */
static int call_recv(struct peer_tier *t, struct peer_call *k)
{
	struct peer_addr *a = &t->a[k->i];
	int rc;

	rc = call_read(t, k);
	if (rc && k->reused && !k->reserved && (rc == -EPIPE || rc == -ECONNRESET)) {
		conn_close(k->c);
		k->c = NULL;
		k->reused = 0;
		if ((rc = conn_open(t, a, &k->c)) == 0 && (rc = call_write(t, k)) == 0)
			rc = call_read(t, k);
	}
	if (rc && k->reserve_rc) {
		/* no room for it here (reserve's error): the peer is not at
		 * fault, but the rest of the reply is unread */
		conn_close(k->c);
		k->c = NULL;
		return rc;
	}
	if (rc) {
		kvt_err_prefix(rc, "peer %s: ", a->name);
		return call_failed(t, k, rc);
	}
	pthread_mutex_lock(&t->mu);
	a->fails = 0;
	if (a->n_idle < PEER_IDLE)
		a->idle[a->n_idle++] = k->c, k->c = NULL;
	pthread_mutex_unlock(&t->mu);
	conn_close(k->c);
	k->c = NULL;
	if (k->r.type == '-') /* a whole reply: the connection was sound */
		return call_failed(t, k, kvt_err(-EACCES, "peer %s answered: %s", a->name,
						 k->r.text));
	return 0;
}

static int request(struct peer_tier *t, int i, const struct iovec *iov, int n,
		   struct resp_reply *r)
{
	struct peer_call k = { .i = i, .iov = iov, .n_iov = n };
	int rc = call_send(t, &k);

	if (rc == 0)
		rc = call_recv(t, &k);
	*r = k.r;
	return rc;
}

/* KVTIER.FETCH of `key` from peer i: the image in r->data, or with
 * `reserve` in the segments it gives. */
static int fetch(struct peer_tier *t, int i, const kvt_key *key, resp_reserve reserve,
		 void *reserve_arg, struct resp_reply *r)
{
	static const char cmd[] = "*2\r\n$12\r\nKVTIER.FETCH\r\n$64\r\n";
	char hex[2 * KVT_KEY_BYTES + 3];
	struct iovec iov[2];
	struct peer_call k = { .i = i, .iov = iov, .n_iov = 2, .reserve = reserve,
			       .reserve_arg = reserve_arg };
	int rc;

	kvt_hex_encode(key->b, KVT_KEY_BYTES, hex);
	memcpy(hex + 2 * KVT_KEY_BYTES, "\r\n", 2);
	iov[0] = (struct iovec){ (void *)cmd, sizeof(cmd) - 1 };
	iov[1] = (struct iovec){ hex, 2 * KVT_KEY_BYTES + 2 };
	if ((rc = call_send(t, &k)) == 0)
		rc = call_recv(t, &k);
	*r = k.r;
	if (rc == 0 && r->type != '$') {
		free(r->data);
		r->data = NULL;
		rc = kvt_err(KVT_EMALFORMED, "peer %s: KVTIER.FETCH answered no bulk",
			     t->a[i].name);
	}
	return rc;
}

/* KVTIER.PEEK of keys[0..k) into iov[0..2) (head holds 48 bytes); the
 * body is malloc'd (free iov[1].iov_base), NULL if out of memory. */
static char *peek_req(const kvt_key *keys, size_t k, char *head, struct iovec *iov)
{
	size_t one = 5 + 2 * KVT_KEY_BYTES + 2;
	char *body = malloc(k * one);

	if (!body)
		return NULL;
	for (size_t j = 0; j < k; j++) {
		char *p = body + j * one;
		resp_bulk_head(p, 2 * KVT_KEY_BYTES);
		kvt_hex_encode(keys[j].b, KVT_KEY_BYTES, p + 5);
		memcpy(p + 5 + 2 * KVT_KEY_BYTES, "\r\n", 2);
	}
	static const char peek[] = "$11\r\nKVTIER.PEEK\r\n";
	size_t h = resp_array_head(head, k + 1);

	memcpy(head + h, peek, sizeof(peek) - 1);
	iov[0] = (struct iovec){ head, h + sizeof(peek) - 1 };
	iov[1] = (struct iovec){ body, k * one };
	return body;
}

/* The count a PEEK of k keys answered, or KVT_EMALFORMED. */
static int peek_count(struct peer_tier *t, int i, struct resp_reply *r, size_t k)
{
	free(r->data);
	r->data = NULL;
	if (r->type != ':' || r->num < 0 || (uint64_t)r->num > k)
		return kvt_err(KVT_EMALFORMED, "peer %s: KVTIER.PEEK answered no count",
			       t->a[i].name);
	return (int)r->num;
}

/* How many of keys[0..n) peer i holds, from the first: one PEEK per
 * KVT_PEER_MAX_PEEK keys. */
static int peek(struct peer_tier *t, int i, const kvt_key *keys, size_t n)
{
	size_t done = 0;

	while (done < n) {
		size_t k = n - done < KVT_PEER_MAX_PEEK ? n - done : KVT_PEER_MAX_PEEK;
		char head[48];
		struct iovec iov[2];
		struct resp_reply r;
		char *body = peek_req(keys + done, k, head, iov);
		int rc;

		if (!body)
			return kvt_err(KVT_ENOMEM, "out of memory");
		rc = request(t, i, iov, 2, &r);
		free(body);
		if (rc == 0)
			rc = peek_count(t, i, &r, k);
		if (rc < 0)
			return rc;
		done += (size_t)rc;
		if ((size_t)rc < k)
			break;
	}
	return (int)done;
}

/* --- the tier ------------------------------------------------------------------- */

static int peer_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len, kvt_tier_wbuf **w)
{
	(void)tt, (void)key, (void)len, (void)w;
	return kvt_err(KVT_ENOTSUP, "the peer tier reads other nodes; it takes no writes");
}

static int peer_put_commit(kvt_tier *tt, kvt_tier_wbuf *w, int durability)
{
	(void)tt, (void)w, (void)durability;
	return KVT_ENOTSUP;
}

static void peer_put_abort(kvt_tier *tt, kvt_tier_wbuf *w)
{
	(void)tt, (void)w;
}

static int peer_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **out)
{
	struct peer_tier *t = peer_of(tt);
	int first = atomic_load(&t->last), err = 0;

	for (int j = 0; j < t->n; j++) {
		int i = (first + j) % t->n;
		struct resp_reply r;
		struct peer_rbuf *b;
		int rc;

		if (peer_down(t, i))
			continue;
		if ((rc = fetch(t, i, key, NULL, NULL, &r))) {
			if (!err)
				err = rc;
			continue;
		}
		if (r.num < 0)
			continue;
		if (!(b = calloc(1, sizeof(*b)))) {
			free(r.data);
			return kvt_err(KVT_ENOMEM, "out of memory");
		}
		b->data = r.data;
		b->iov = (struct iovec){ r.data, (size_t)r.num };
		b->r = (kvt_tier_rbuf){ .key = *key, .len = (uint64_t)r.num, .iov = &b->iov,
					.n_iov = 1 };
		atomic_store(&t->last, i);
		atomic_fetch_add(&t->hits, 1);
		atomic_fetch_add(&t->bytes_out, (uint64_t)r.num);
		*out = &b->r;
		return 0;
	}
	atomic_fetch_add(&t->misses, 1);
	if (err)
		return err;
	return KVT_ENOTFOUND;
}

/* As peer_get, the image read straight into the caller's memory. */
static int peer_get_into(kvt_tier *tt, const kvt_key *key,
			 int (*reserve)(void *arg, uint64_t len, const struct iovec **iov,
					int *n_iov),
			 void *arg)
{
	struct peer_tier *t = peer_of(tt);
	int first = atomic_load(&t->last), err = 0;

	for (int j = 0; j < t->n; j++) {
		int i = (first + j) % t->n;
		struct resp_reply r;
		int rc;

		if (peer_down(t, i))
			continue;
		rc = fetch(t, i, key, reserve, arg, &r);
		if (rc == 0 && r.num >= 0) {
			atomic_store(&t->last, i);
			atomic_fetch_add(&t->hits, 1);
			atomic_fetch_add(&t->bytes_out, (uint64_t)r.num);
			return 0;
		}
		if (rc && !err)
			err = rc;
		/* reserve's error (no room) is the caller's: no other peer
		 * would do better */
		if (rc && (rc == KVT_EFULL || rc == KVT_ENOMEM || rc == KVT_ETOOBIG ||
			   rc == KVT_EEXIST))
			return rc;
	}
	atomic_fetch_add(&t->misses, 1);
	return err ? err : KVT_ENOTFOUND;
}

static void peer_release(kvt_tier *tt, kvt_tier_rbuf *r)
{
	struct peer_rbuf *b = (struct peer_rbuf *)r;

	(void)tt;
	free(b->data);
	free(b);
}

static int peer_exists(kvt_tier *tt, const kvt_key *key)
{
	(void)tt, (void)key;
	return 0; /* not known here without asking: exists_prefix asks */
}

/* Every peer is asked at once (the requests all go out, then the
 * replies are read): a lookup waits for the slowest peer, not the sum. */
static int peer_exists_prefix(kvt_tier *tt, const kvt_key *keys, size_t n)
{
	struct peer_tier *t = peer_of(tt);
	struct peer_call calls[KVT_PEER_MAX];
	size_t k = n < KVT_PEER_MAX_PEEK ? n : KVT_PEER_MAX_PEEK;
	char head[48];
	struct iovec iov[2];
	char *body;
	int n_calls = 0, best = -1, err = 0;

	if (!n)
		return 0;
	if (!(body = peek_req(keys, k, head, iov)))
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (int i = 0; i < t->n; i++) {
		int rc;
		if (peer_down(t, i))
			continue;
		calls[n_calls] = (struct peer_call){ .i = i, .iov = iov, .n_iov = 2 };
		if ((rc = call_send(t, &calls[n_calls])) == 0)
			n_calls++;
		else if (!err)
			err = rc;
	}
	for (int j = 0; j < n_calls; j++) {
		struct peer_call *c = &calls[j];
		int got = call_recv(t, c);
		if (got == 0)
			got = peek_count(t, c->i, &c->r, k);
		if (got >= 0 && (size_t)got == k && n > k) {
			int more = peek(t, c->i, keys + k, n - k); /* a chain this long is rare */
			got += more > 0 ? more : 0;
		}
		if (got < 0) {
			if (!err)
				err = got;
			continue;
		}
		if (got > best) {
			best = got;
			if (got > 0)
				atomic_store(&t->last, c->i);
		}
	}
	free(body);
	if (best < 0)
		return err ? err : 0;
	return best;
}

static int peer_del(kvt_tier *tt, const kvt_key *key)
{
	(void)tt, (void)key;
	return KVT_ENOTFOUND; /* another node's chunks are its own to delete */
}

static int peer_iterate(kvt_tier *tt, int (*fn)(void *, const kvt_key *, uint64_t), void *arg)
{
	(void)tt, (void)fn, (void)arg;
	return 0; /* nothing is held here */
}

static void peer_stats(kvt_tier *tt, kvt_tier_stats *o)
{
	struct peer_tier *t = peer_of(tt);
	int64_t now = now_ms();

	memset(o, 0, sizeof(*o));
	snprintf(o->name, sizeof(o->name), "peer");
	o->hits = atomic_load(&t->hits);
	o->misses = atomic_load(&t->misses);
	o->bytes_out = atomic_load(&t->bytes_out);
	o->corrupt = atomic_load(&t->corrupt);
	o->read_errors = atomic_load(&t->read_errors);
	o->read_only = 1;
	pthread_mutex_lock(&t->mu);
	for (int i = 0; i < t->n; i++)
		if (t->a[i].down_until_ms > now)
			o->unreachable = 1;
	if (o->unreachable)
		snprintf(o->state, sizeof(o->state), "%s", t->state);
	pthread_mutex_unlock(&t->mu);
}

static void peer_corrupt(kvt_tier *tt, kvt_tier_rbuf *r)
{
	(void)r;
	/* The other node verifies its own copies when it reads them; here
	 * the bad image is only counted and not served. */
	atomic_fetch_add(&peer_of(tt)->corrupt, 1);
}

static void peer_close(kvt_tier *tt)
{
	struct peer_tier *t = peer_of(tt);

	for (int i = 0; i < t->n; i++)
		for (int k = 0; k < t->a[i].n_idle; k++)
			conn_close(t->a[i].idle[k]);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static const struct kvt_tier_ops peer_ops = {
	.name = "peer",
	.put_begin = peer_put_begin,
	.put_commit = peer_put_commit,
	.put_abort = peer_put_abort,
	.get = peer_get,
	.get_into = peer_get_into,
	.release = peer_release,
	.exists = peer_exists,
	.exists_prefix = peer_exists_prefix,
	.del = peer_del,
	.iterate = peer_iterate,
	.stats = peer_stats,
	.corrupt = peer_corrupt,
	.close = peer_close,
};

int kvt_peer_open(const kvt_peer_opts *o, kvt_tier **out)
{
	struct peer_tier *t;
	int rc;

	if (!o || !o->peers || !out)
		return kvt_err(KVT_EINVAL, "peer options missing");
	if (strlen(o->user ? o->user : "") >= sizeof(t->user) ||
	    strlen(o->password ? o->password : "") >= sizeof(t->pass))
		return kvt_err(KVT_ECONFIG, "peer user or password too long");
	if (!(t = calloc(1, sizeof(*t))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	if ((rc = parse_list(o->peers, t->a, &t->n))) {
		free(t);
		return rc;
	}
	if (t->n == 0) {
		free(t);
		return kvt_err(KVT_ECONFIG, "no peer listed");
	}
	t->base.ops = &peer_ops;
	snprintf(t->user, sizeof(t->user), "%s", o->user ? o->user : "");
	snprintf(t->pass, sizeof(t->pass), "%s", o->password ? o->password : "");
	t->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
	t->max_image = o->max_image;
	pthread_mutex_init(&t->mu, NULL);
	*out = &t->base;
	return 0;
}
