/*
 * server.c — listeners, worker threads and their epoll loops, connection
 * buffers (server.h).
 */
#include "daemon/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/tls.h"

#define IN_CAP (RESP_MAX_LINE + 4096)
#define READ_BURST (8u << 20) /* bytes read from one client per wake-up */
#define MAX_IOV 512
/* A placed value is received by readv() over its pages, RECV_PLACED
 * bytes at most per call (in at most RECV_IOV segments). */
#define RECV_PLACED (256u << 10)
#define RECV_IOV 64
/* Values up to this are copied into the reply; larger ones are sent from
 * the store's pages. */
#define COPY_MAX (16 * 1024)

void kvtd_conn_hold(struct kvtd_conn *c, int64_t ms)
{
	if (!c->hold_until)
		c->w->n_held++;
	c->hold_until = kvtd_mono_ms() + (ms > 0 ? ms : 1);
}

/* One parsed command, the worker marked busy while it runs (/health). */
static void run_command(struct kvtd_conn *c)
{
	atomic_store(&c->w->busy_since_ms, kvtd_mono_ms());
	c->w->d->dispatch(c, c->parser.argv, c->parser.argc);
	atomic_store(&c->w->busy_since_ms, 0);
	c->last_in_ms = kvtd_mono_ms(); /* a command done is progress */
	c->in_since = 0;
}


int kvtd_listen(struct kvtd *d)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)d->o.port) };
	socklen_t al = sizeof(a);
	int one = 1;

	d->lfd = d->ufd = -1;
	if (inet_pton(AF_INET, d->o.bind, &a.sin_addr) != 1) {
		kvtd_log(KVTD_LOG_ERROR, "--bind %s: not an IPv4 address", d->o.bind);
		return -1;
	}
	d->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (d->lfd < 0 || setsockopt(d->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(d->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(d->lfd, 511) ||
	    getsockname(d->lfd, (struct sockaddr *)&a, &al)) {
		kvtd_log(KVTD_LOG_ERROR, "cannot listen on %s:%d: %s", d->o.bind, d->o.port,
			 strerror(errno));
		return -1;
	}
	d->port = ntohs(a.sin_port);
	if (d->o.unix_path) {
		struct sockaddr_un u = { .sun_family = AF_UNIX };
		if (strlen(d->o.unix_path) >= sizeof(u.sun_path)) {
			kvtd_log(KVTD_LOG_ERROR, "--unix %s: path too long", d->o.unix_path);
			return -1;
		}
		strcpy(u.sun_path, d->o.unix_path);
		unlink(d->o.unix_path);
		d->ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (d->ufd < 0 || bind(d->ufd, (struct sockaddr *)&u, sizeof(u)) ||
		    listen(d->ufd, 511)) {
			kvtd_log(KVTD_LOG_ERROR, "cannot listen on %s: %s", d->o.unix_path,
				 strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* --- output -------------------------------------------------------------------- */

static void seg_free(struct out_seg *s)
{
	free(s->buf);
	if (s->ref)
		kvt_release(s->ref);
	free(s->iov);
	free(s);
}

/* Move the encoded replies into the queue, ahead of what comes next. */
static int seal(struct kvtd_conn *c)
{
	struct out_seg *s;

	if (!c->rb.len)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -1;
	s->buf = c->rb.p;
	s->len = c->rb.len;
	c->out_bytes += s->len;
	c->rb.p = NULL;
	c->rb.len = c->rb.cap = 0;
	if (c->out_tail)
		c->out_tail->next = s;
	else
		c->out_head = s;
	c->out_tail = s;
	return 0;
}

void kvtd_reply_ref(struct kvtd_conn *c, kvt_ref *ref, uint64_t vlen)
{
	const struct iovec *iov;
	struct out_seg *s;
	int n;

	kvt_ref_iov(ref, &iov, &n);
	resp_bulk_hdr(&c->rb, vlen);
	if (vlen <= COPY_MAX) {
		uint64_t left = vlen;
		for (int i = 0; i < n && left; i++) {
			size_t k = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
			resp_put(&c->rb, iov[i].iov_base, k);
			left -= k;
		}
		kvt_release(ref);
		resp_put(&c->rb, "\r\n", 2);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (!s || seal(c) || !(s->iov = malloc((size_t)n * sizeof(*s->iov)))) {
		free(s);
		kvt_release(ref);
		c->dead = 1;
		return;
	}
	uint64_t left = vlen;
	for (int i = 0; i < n && left; i++) {
		size_t k = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
		s->iov[s->n_iov++] = (struct iovec){ iov[i].iov_base, k };
		left -= k;
	}
	s->ref = ref;
	s->len = vlen;
	if (c->out_tail)
		c->out_tail->next = s;
	else
		c->out_head = s;
	c->out_tail = s;
	c->out_bytes += vlen;
	resp_put(&c->rb, "\r\n", 2);
}

static uint64_t pending(const struct kvtd_conn *c)
{
	return c->out_bytes + c->rb.len;
}

/* Write what the socket takes.  0, or -1 when the connection is dead. */
static int flush_out(struct kvtd_conn *c)
{
	struct iovec v[MAX_IOV];

	for (;;) {
		int n = 0;
		for (struct out_seg *s = c->out_head; s && n < MAX_IOV; s = s->next) {
			if (s->buf) {
				v[n++] = (struct iovec){ s->buf + s->off, s->len - s->off };
				continue;
			}
			for (int i = s->iov_i; i < s->n_iov && n < MAX_IOV; i++) {
				size_t o = i == s->iov_i ? s->iov_off : 0;
				v[n++] = (struct iovec){ (char *)s->iov[i].iov_base + o,
							 s->iov[i].iov_len - o };
			}
		}
		if (n < MAX_IOV && c->rb.len)
			v[n++] = (struct iovec){ c->rb.p, c->rb.len };
		if (!n)
			return 0;
		ssize_t w = c->tls ? kvtd_tls_writev(c->tls, v, n) : writev(c->fd, v, n);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -1;
		}
		c->last_out_ms = kvtd_mono_ms();
		size_t left = (size_t)w;
		while (left && c->out_head) {
			struct out_seg *s = c->out_head;
			if (s->buf) {
				size_t k = s->len - s->off < left ? s->len - s->off : left;
				s->off += k;
				left -= k;
				c->out_bytes -= k;
				if (s->off < s->len)
					break;
			} else {
				while (left && s->iov_i < s->n_iov) {
					size_t r = s->iov[s->iov_i].iov_len - s->iov_off;
					size_t k = r < left ? r : left;
					s->iov_off += k;
					left -= k;
					c->out_bytes -= k;
					if (s->iov_off == s->iov[s->iov_i].iov_len) {
						s->iov_i++;
						s->iov_off = 0;
					}
				}
				if (s->iov_i < s->n_iov)
					break;
			}
			c->out_head = s->next;
			if (!c->out_head)
				c->out_tail = NULL;
			seg_free(s);
		}
		if (left && !c->out_head) {
			memmove(c->rb.p, c->rb.p + left, c->rb.len - left);
			c->rb.len -= left;
		}
		if (c->rb.cap > (1u << 20) && !c->rb.len) {
			resp_buf_free(&c->rb);
		}
	}
}

/* --- big-argument buffers ----------------------------------------------------------- */

#define SPARE_MAX_BYTES (256u << 20)

/* A kept buffer of at least n bytes and at most 4n (a small value does
 * not pin a huge one), else a new one. */
static void *buf_get(void *worker, size_t n, size_t *cap)
{
	struct kvtd_worker *w = worker;
	int best = -1;

	for (int i = 0; i < 4; i++)
		if (w->spare[i] && w->spare_cap[i] >= n && w->spare_cap[i] / 4 <= n &&
		    (best < 0 || w->spare_cap[i] < w->spare_cap[best]))
			best = i;
	if (best >= 0) {
		void *p = w->spare[best];
		*cap = w->spare_cap[best];
		w->spare_bytes -= *cap;
		w->spare[best] = NULL;
		return p;
	}
	*cap = n;
	return malloc(n);
}

void kvtd_buf_put(void *worker, void *p, size_t cap)
{
	struct kvtd_worker *w = worker;

	if (w->spare_bytes + cap <= SPARE_MAX_BYTES)
		for (int i = 0; i < 4; i++)
			if (!w->spare[i]) {
				w->spare[i] = p;
				w->spare_cap[i] = cap;
				w->spare_bytes += cap;
				return;
			}
	free(p);
}

/* A SET's value (or an MSET's) is received straight into the store's
 * first tier: no copy of it in the daemon (values.h, vals_put_open). */
static void *place_value(void *ctx, struct resp_parser *p, size_t n, const struct iovec **iov,
			 int *n_iov)
{
	struct kvtd_conn *c = ctx;
	size_t l0, lk, k;
	const char *name = resp_arg_bytes(p, 0, &l0), *key;
	struct vals_put *vp;

	if (!c->tenant || !name)
		return NULL;
	if (l0 == 3 && !strncasecmp(name, "set", 3) && p->argc == 2)
		k = 1;
	else if (l0 == 4 && !strncasecmp(name, "mset", 4) && p->argc % 2 == 0)
		k = p->argc - 1;
	else
		return NULL;
	key = resp_arg_bytes(p, k, &lk);
	if (!key || lk > VALS_MAX_KEY)
		return NULL;
	/* A key under a shared prefix is another tenant's to write: such a
	 * SET is refused (NOPERM) once whole, so nothing is reserved for it. */
	if (c->w->d->shared_of && c->w->d->shared_of(c->w->d, key, lk))
		return NULL;
	if (vals_put_open(c->w->d->vals, c->tenant, key, lk, n, &vp, iov, n_iov))
		return NULL;
	return vp;
}

static void unplace_value(void *ctx, void *h)
{
	(void)ctx;
	vals_put_cancel(h);
}

/* --- connections ------------------------------------------------------------------ */

static void conn_close(struct kvtd_conn *c)
{
	struct kvtd_worker *w = c->w;

	epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
	kvtd_tls_free(c->tls);
	close(c->fd);
	if (c->hold_until)
		w->n_held--;
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	w->n_conns--;
	while (c->out_head) {
		struct out_seg *s = c->out_head;
		c->out_head = s->next;
		seg_free(s);
	}
	resp_buf_free(&c->rb);
	resp_parser_free(&c->parser);
	free(c->in);
	atomic_fetch_sub(&w->d->clients, 1);
	kvtd_log(KVTD_LOG_DEBUG, "client %llu (%s) closed", (unsigned long long)c->id, c->addr);
	free(c);
}

static void update_events(struct kvtd_conn *c)
{
	/* A TLS call may wait on the other direction than its own (tls.h):
	 * a read that must send first waits for EPOLLOUT, without EPOLLIN
	 * (unread input would wake the loop with nothing it can do); a
	 * write that must receive first waits for EPOLLIN, back-pressure or
	 * not, and not for EPOLLOUT (always ready: a spin). */
	int rw = c->tls && kvtd_tls_read_wants_write(c->tls);
	int wr = c->tls && kvtd_tls_write_wants_read(c->tls);
	int want_out = (pending(c) > 0 && !wr) || rw;
	int paused = (pending(c) > KVTD_OUT_HIGH || c->closing || rw || c->hold_until) && !wr;
	struct epoll_event ev = { .data.ptr = c };

	if (want_out == c->want_out && paused == c->paused)
		return;
	/* No EPOLLRDHUP once reading stops: a peer's half-close would
	 * otherwise wake the loop without end while its replies drain. */
	ev.events = (paused ? 0 : EPOLLIN | EPOLLRDHUP) | (want_out ? EPOLLOUT : 0);
	epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &ev);
	c->want_out = want_out;
	c->paused = paused;
}

/* Run the commands complete in the input buffer, as far as output
 * back-pressure allows. */
static void process(struct kvtd_conn *c)
{
	size_t pos = 0;

	while (!c->dead && !c->closing && !c->hold_until && pos < c->in_len &&
	       pending(c) <= KVTD_OUT_HIGH) {
		size_t used;
		int rc = resp_feed(&c->parser, c->in + pos, c->in_len - pos, &used);
		pos += used;
		if (rc == RESP_CMD) {
			c->commands++;
			atomic_fetch_add(&c->w->d->total_cmds, 1);
			run_command(c);
		} else if (rc == RESP_PERR) {
			resp_error(&c->rb, "ERR %s", c->parser.err);
			kvtd_log(KVTD_LOG_INFO, "client %llu (%s): %s; closing",
				 (unsigned long long)c->id, c->addr, c->parser.err);
			c->closing = 1;
		} else if (rc == RESP_NOMEM) {
			c->dead = 1;
		} else {
			break;
		}
	}
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
	if (c->rb.oom)
		c->dead = 1;
}

static ssize_t conn_recv(struct kvtd_conn *c, void *buf, size_t len)
{
	return c->tls ? kvtd_tls_read(c->tls, buf, len) : recv(c->fd, buf, len, 0);
}

static void on_readable(struct kvtd_conn *c)
{
	size_t burst = 0;

	/* Bytes OpenSSL already decrypted wake no epoll: read them too. */
	while (!c->dead && !c->closing && !c->hold_until && pending(c) <= KVTD_OUT_HIGH &&
	       (burst < READ_BURST || (c->tls && kvtd_tls_pending(c->tls)))) {
		struct iovec dv[RECV_IOV];
		size_t room;
		int nd = c->in_len ? 0
				   : resp_direct_iov(&c->parser, dv, c->tls ? 1 : RECV_IOV,
						     c->tls ? SIZE_MAX : RECV_PLACED, &room);
		int direct = nd > 0;
		int fresh = !c->in_len && !resp_busy(&c->parser); /* a new command starts */
		size_t asked = 0;
		ssize_t n;

		for (int i = 0; i < nd; i++)
			asked += dv[i].iov_len;
		if (direct && !c->tls) {
			/* A value placed in the store's pages is read across
			 * them, RECV_PLACED bytes a call: a page at a time, a
			 * 4 MiB SET cost 64 reads and as many window updates
			 * sent back; much more at a time, and the layers are
			 * checksummed (vals_put_progress) after they have left
			 * the cache. */
			n = readv(c->fd, dv, nd);
		} else if (direct) {
			n = conn_recv(c, dv[0].iov_base, dv[0].iov_len);
		} else {
			room = IN_CAP - c->in_len;
			asked = room;
			n = conn_recv(c, c->in + c->in_len, room);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				c->dead = 1;
			else if (c->tls && kvtd_tls_read_wants_write(c->tls))
				kvtd_log(KVTD_LOG_DEBUG, "client %llu (%s): TLS read waits for "
					 "the socket to be writable", (unsigned long long)c->id,
					 c->addr);
			break;
		}
		if (n == 0) {
			/* Half-closed: answer what was sent whole, then close. */
			c->closing = 1;
			break;
		}
		c->in_since += (size_t)n;
		if (fresh || c->in_since >= KVTD_PROGRESS_BYTES) {
			c->last_in_ms = kvtd_mono_ms();
			c->in_since = 0;
		}
		burst += (size_t)n;
		if (direct) {
			int rc = resp_direct_done(&c->parser, (size_t)n);
			void *vp;
			uint64_t got;
			if (rc == RESP_NEED && resp_placed_progress(&c->parser, &vp, &got))
				vals_put_progress(vp, got);
			if (rc == RESP_CMD) {
				c->commands++;
				atomic_fetch_add(&c->w->d->total_cmds, 1);
				run_command(c);
			} else if (rc == RESP_PERR) {
				resp_error(&c->rb, "ERR %s", c->parser.err);
				c->closing = 1;
			}
		} else {
			c->in_len += (size_t)n;
			process(c);
			if (!c->closing && c->in_len == IN_CAP) { /* a line longer than the buffer */
				resp_error(&c->rb, "ERR Protocol error: too big request line");
				c->closing = 1;
			}
		}
		/* A plain socket read that came back short emptied the socket:
		 * the next would say EAGAIN, a system call per command for
		 * nothing (strace: one failed recvfrom per GET), and what
		 * comes later epoll reports.  TLS may hold decrypted bytes. */
		if (!c->tls && (size_t)n < asked)
			break;
	}
	/* Commands left in the buffer by back-pressure run once output
	 * drains (on_writable). */
}

/* Take over an accepted socket: a connection of this worker. */
static void adopt_conn(struct kvtd_worker *w, int fd)
{
	struct kvtd *d = w->d;
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	struct kvtd_conn *c = calloc(1, sizeof(*c));
	int one = 1;

	if (c)
		c->in = malloc(IN_CAP);
	if (!c || !c->in) {
		free(c);
		close(fd);
		atomic_fetch_sub(&d->clients, 1);
		return;
	}
	if (getpeername(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.ss_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&sa;
		char ip[INET_ADDRSTRLEN];
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(c->addr, sizeof(c->addr), "%s:%u", ip, ntohs(in->sin_port));
		if (d->tls && !(c->tls = kvtd_tls_new(d->tls, fd))) { /* TCP clients speak TLS */
			free(c->in);
			free(c);
			close(fd);
			atomic_fetch_sub(&d->clients, 1);
			return;
		}
	} else {
		snprintf(c->addr, sizeof(c->addr), "unix");
	}
	c->fd = fd;
	c->w = w;
	c->id = atomic_fetch_add(&d->next_id, 1) + 1;
	c->proto = 2;
	c->tenant = d->auth_required ? NULL : d->default_tenant;
	c->admin = c->tenant && d->initial_admin;
	c->created_ms = c->last_in_ms = c->last_out_ms = kvtd_mono_ms();
	resp_parser_init(&c->parser, d->o.max_value, d->o.max_cmd, VALS_SLACK);
	if (!c->tenant) {
		/* Until AUTH: commands of a few short arguments only. */
		c->parser.max_args = RESP_UNAUTH_ARGS;
		c->parser.max_bulk = RESP_UNAUTH_BULK;
	}
	c->parser.alloc = (struct resp_alloc){ buf_get, kvtd_buf_put, w, place_value,
						unplace_value, c };
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev)) {
		resp_parser_free(&c->parser);
		free(c->in);
		free(c);
		close(fd);
		atomic_fetch_sub(&d->clients, 1);
		return;
	}
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	w->n_conns++;
	kvtd_log(KVTD_LOG_DEBUG, "client %llu from %s", (unsigned long long)c->id, c->addr);
}

/* Accepted sockets go round-robin to the workers: whichever thread epoll
 * woke, the load spreads. */
/* No descriptor for a new connection: the connection waits in the
 * listen queue, which stays readable, and a worker that kept polling it
 * would spin (3 CPU-seconds in 3 s).  Its listeners leave its epoll for a
 * while instead; the failure is counted (/metrics) and logged once a
 * minute. */
#define ACCEPT_BACKOFF_MS 100

static void listeners(struct kvtd_worker *w, int op)
{
	struct kvtd *d = w->d;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE };

	ev.data.ptr = &d->lfd;
	epoll_ctl(w->ep, op, d->lfd, &ev);
	if (d->ufd >= 0) {
		ev.data.ptr = &d->ufd;
		epoll_ctl(w->ep, op, d->ufd, &ev);
	}
}

static void accept_backoff(struct kvtd_worker *w, int err)
{
	struct kvtd *d = w->d;
	int64_t now = kvtd_mono_ms(), last = atomic_load(&d->accept_fd_logged_ms);

	atomic_fetch_add(&d->accept_fd_errors, 1);
	if ((!last || now - last >= 60000) &&
	    atomic_compare_exchange_strong(&d->accept_fd_logged_ms, &last, now))
		kvtd_log(KVTD_LOG_WARN, "cannot accept a connection: %s (%ld clients; raise the "
			 "open-file limit, ulimit -n, or lower --maxclients); waiting", strerror(err),
			 (long)atomic_load(&d->clients));
	if (!w->accept_paused_until)
		listeners(w, EPOLL_CTL_DEL);
	w->accept_paused_until = now + ACCEPT_BACKOFF_MS;
}

static void accept_all(struct kvtd_worker *w, int lfd)
{
	struct kvtd *d = w->d;

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				accept_backoff(w, errno);
			return;
		}
		if (atomic_fetch_add(&d->clients, 1) >= d->o.maxclients) {
			static const char m[] = "-ERR max number of clients reached\r\n";
			ssize_t r = write(fd, m, sizeof(m) - 1);
			(void)r;
			close(fd);
			atomic_fetch_sub(&d->clients, 1);
			atomic_fetch_add(&d->rejected_conns, 1);
			continue;
		}
		atomic_fetch_add(&d->total_conns, 1);
		struct kvtd_worker *t = &d->w[atomic_fetch_add(&d->next_worker, 1) % (unsigned)d->nw];
		if (t == w) {
			adopt_conn(w, fd);
			continue;
		}
		pthread_mutex_lock(&t->inbox_mu);
		if (t->inbox_n == t->inbox_cap) {
			size_t c = t->inbox_cap ? t->inbox_cap * 2 : 64;
			int *b = realloc(t->inbox, c * sizeof(*b));
			if (!b) {
				pthread_mutex_unlock(&t->inbox_mu);
				close(fd);
				atomic_fetch_sub(&d->clients, 1);
				continue;
			}
			t->inbox = b;
			t->inbox_cap = c;
		}
		t->inbox[t->inbox_n++] = fd;
		pthread_mutex_unlock(&t->inbox_mu);
		uint64_t one = 1;
		ssize_t r = write(t->evfd, &one, sizeof(one));
		(void)r;
	}
}

static void take_inbox(struct kvtd_worker *w)
{
	uint64_t k;
	ssize_t r = read(w->evfd, &k, sizeof(k));
	(void)r;
	pthread_mutex_lock(&w->inbox_mu);
	int *fds = w->inbox;
	size_t n = w->inbox_n;
	w->inbox = NULL;
	w->inbox_n = w->inbox_cap = 0;
	pthread_mutex_unlock(&w->inbox_mu);
	for (size_t i = 0; i < n; i++)
		adopt_conn(w, fds[i]);
	free(fds);
}

/* After any event: send, then run what back-pressure held, then decide
 * whether the connection lives on. */
static void after_event(struct kvtd_conn *c)
{
	for (int rounds = 0; rounds < 64 && !c->dead; rounds++) {
		if (flush_out(c)) {
			c->dead = 1;
			break;
		}
		if (c->closing || c->hold_until || !c->in_len || pending(c) > KVTD_OUT_HIGH)
			break;
		size_t before = c->in_len;
		process(c);
		if (c->in_len == before)
			break;
	}
	if (c->dead || (c->closing && !pending(c))) {
		conn_close(c);
		return;
	}
	update_events(c);
}

/* Connections whose hold (a failed AUTH's wait) is over read and run
 * again: what they sent meanwhile first. */
static void release_holds(struct kvtd_worker *w, int64_t now)
{
	for (struct kvtd_conn *c = w->conns, *n; c && w->n_held; c = n) {
		n = c->next;
		if (!c->hold_until || now < c->hold_until)
			continue;
		c->hold_until = 0;
		w->n_held--;
		after_event(c); /* may close c; EPOLLIN is back (level-triggered) */
	}
}

/* Clients that stall (output not taken, or a command left half-sent or
 * sent a drip at a time), and clients that must AUTH and have not. */
static void reap(struct kvtd_worker *w, int64_t now)
{
	int64_t lim = (int64_t)w->d->o.client_timeout_s * 1000;

	for (struct kvtd_conn *c = w->conns, *n; c; c = n) {
		n = c->next;
		if (c->tls && !kvtd_tls_established(c->tls) &&
		    now - c->created_ms > KVTD_HANDSHAKE_DEADLINE_MS) {
			kvtd_log(KVTD_LOG_INFO, "client %llu (%s): TLS handshake not done within "
				 "%d s; closing", (unsigned long long)c->id, c->addr,
				 KVTD_HANDSHAKE_DEADLINE_MS / 1000);
			conn_close(c);
			continue;
		}
		if (!c->tenant && now - c->created_ms > KVTD_AUTH_DEADLINE_MS) {
			kvtd_log(KVTD_LOG_INFO, "client %llu (%s): not authenticated within %d s; "
				 "closing", (unsigned long long)c->id, c->addr,
				 KVTD_AUTH_DEADLINE_MS / 1000);
			conn_close(c);
			continue;
		}
		if (lim <= 0)
			continue;
		int stalled_out = pending(c) && now - c->last_out_ms > lim;
		int stalled_in = (c->in_len || resp_busy(&c->parser)) &&
				 now - c->last_in_ms > lim && !pending(c);
		if (stalled_out || stalled_in) {
			kvtd_log(KVTD_LOG_INFO, "client %llu (%s): %s for %d s; closing",
				 (unsigned long long)c->id, c->addr,
				 stalled_out ? "output not read" : "command not finished",
				 w->d->o.client_timeout_s);
			conn_close(c);
		}
	}
}

static void *worker_main(void *arg)
{
	struct kvtd_worker *w = arg;
	struct kvtd *d = w->d;
	struct epoll_event ev[128];
	int64_t last_reap = kvtd_mono_ms();

	while (!atomic_load(&d->stopping)) {
		int n = epoll_wait(w->ep, ev, 128, w->n_held ? 20
						   : w->accept_paused_until ? ACCEPT_BACKOFF_MS : 500);
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			if (p == &d->lfd || p == &d->ufd) {
				accept_all(w, *(int *)p);
				continue;
			}
			if (p == w) {
				take_inbox(w);
				continue;
			}
			struct kvtd_conn *c = p;
			/* A TLS read that waited to send is retried once the
			 * socket is writable. */
			if ((ev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ||
			    ((ev[i].events & EPOLLOUT) && c->tls &&
			     kvtd_tls_read_wants_write(c->tls)))
				on_readable(c);
			if (ev[i].events & EPOLLERR)
				c->dead = 1;
			after_event(c);
		}
		int64_t now = kvtd_mono_ms();
		if (w->n_held)
			release_holds(w, now);
		if (w->accept_paused_until && now >= w->accept_paused_until) {
			w->accept_paused_until = 0;
			listeners(w, EPOLL_CTL_ADD);
		}
		if (now - last_reap >= 1000) {
			reap(w, now);
			last_reap = now;
		}
	}
	return NULL;
}

int kvtd_start(struct kvtd *d)
{
	d->w = calloc((size_t)d->nw, sizeof(*d->w));
	if (!d->w)
		return -1;
	for (int i = 0; i < d->nw; i++) {
		struct kvtd_worker *w = &d->w[i];
		struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &d->lfd };
		w->d = d;
		w->idx = i;
		pthread_mutex_init(&w->inbox_mu, NULL);
		w->ep = epoll_create1(EPOLL_CLOEXEC);
		w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (w->ep < 0 || w->evfd < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, d->lfd, &ev))
			return -1;
		if (d->ufd >= 0) {
			ev.data.ptr = &d->ufd;
			if (epoll_ctl(w->ep, EPOLL_CTL_ADD, d->ufd, &ev))
				return -1;
		}
		ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = w };
		if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->evfd, &ev))
			return -1;
	}
	/* Every worker is ready before any runs: the first to accept may
	 * hand a connection to the last. */
	for (int i = 0; i < d->nw; i++)
		if (pthread_create(&d->w[i].th, NULL, worker_main, &d->w[i]))
			return -1;
	return 0;
}

void kvtd_stop(struct kvtd *d, int drain_ms)
{
	uint64_t one = 1;

	atomic_store(&d->stopping, 1);
	for (int i = 0; i < d->nw; i++) {
		ssize_t r = write(d->w[i].evfd, &one, sizeof(one));
		(void)r;
	}
	for (int i = 0; i < d->nw; i++)
		pthread_join(d->w[i].th, NULL);
	if (d->lfd >= 0)
		close(d->lfd);
	if (d->ufd >= 0) {
		close(d->ufd);
		unlink(d->o.unix_path);
	}
	/* Every command begun has finished (the workers ran them to the
	 * end); what their replies still hold is sent, within the drain
	 * time, before the connections close. */
	int64_t until = kvtd_mono_ms() + drain_ms;
	for (int i = 0; i < d->nw; i++) {
		struct kvtd_worker *w = &d->w[i];
		for (struct kvtd_conn *c = w->conns; c; c = c->next) {
			int fl = fcntl(c->fd, F_GETFL);
			fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
			struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
			setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
			while (pending(c) && kvtd_mono_ms() < until && !flush_out(c))
				;
		}
		while (w->conns)
			conn_close(w->conns);
		for (size_t k = 0; k < w->inbox_n; k++) {
			close(w->inbox[k]);
			atomic_fetch_sub(&d->clients, 1);
		}
		free(w->inbox);
		for (int k = 0; k < 4; k++)
			free(w->spare[k]);
		pthread_mutex_destroy(&w->inbox_mu);
		close(w->ep);
		close(w->evfd);
	}
	free(d->w);
	d->w = NULL;
}
