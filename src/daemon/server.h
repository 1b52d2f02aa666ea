/*
 * server.h — kvtierd's network core: listeners, worker threads, one epoll
 * loop per worker, connections and their buffers.
 *
 * Each worker owns the connections it accepted (EPOLLEXCLUSIVE on the
 * shared listening sockets spreads them) and runs their commands to the
 * end on its own thread: a command's store call may block for as long as
 * the store takes (a DRAM copy, a crash-safe disk write), and holds up
 * only that worker's other connections.
 *
 * Bounds, each costing the offending client its connection and nothing
 * else: the RESP parser's limits (resp.h) and max_value, an input line
 * buffer of RESP_MAX_LINE, output that a client does not read for
 * client_timeout_s, a command left half-sent for client_timeout_s.
 * Output beyond OUT_HIGH bytes pending stops the reading of that client's
 * next commands until it drains (pipelining is back-pressured, not
 * buffered without end).
 *
 * The tenant seam: every connection carries the tenant it acts as
 * (conn->tenant); commands name keys only through it.  Before AUTH it is
 * the default tenant, or none when the daemon requires authentication
 * (then every command but AUTH, HELLO and QUIT is refused with NOAUTH).
 * AUTH and HELLO's AUTH call kvtd.auth, which maps a user and password to
 * a tenant.
 */
#ifndef KVTD_SERVER_H
#define KVTD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/uio.h>

#include <kvtier.h>

#include "proto/resp.h"
#include "daemon/values.h"

#define KVTD_VERSION "7.0.0" /* the Redis version clients are told (HELLO, INFO) */
#define KVTD_OUT_HIGH (4u << 20)

struct kvtd;
struct kvtd_worker;

/* One piece of pending output: bytes the connection owns, or a borrowed
 * value sent from the store's memory as it is. */
struct out_seg {
	struct out_seg *next;
	char *buf;            /* owned bytes, or NULL */
	size_t len, off;
	kvt_ref *ref;         /* a borrowed value, or NULL */
	struct iovec *iov;    /* its segments, trimmed to the value */
	int n_iov, iov_i;
	size_t iov_off;
};

struct kvtd_conn {
	int fd;
	uint64_t id;
	struct kvtd_worker *w;
	struct kvtd_conn *prev, *next;
	struct resp_parser parser;
	char *in;                 /* RESP_MAX_LINE + 4 KiB */
	size_t in_len;
	struct resp_buf rb;       /* replies being encoded */
	struct out_seg *out_head, *out_tail;
	uint64_t out_bytes;       /* pending, rb included */
	int proto;                /* 2 or 3 */
	const struct kvtd_tenant *tenant; /* NULL: not authenticated */
	int admin;                /* sees the node: INFO's figures, peers' reads */
	struct kvtd_tls *tls;     /* a TLS session (TCP clients, --tls-cert), or NULL */
	char name[128];
	char lib_name[64], lib_ver[32];
	char addr[64];
	int closing;              /* QUIT or EOF: close once output is out */
	int dead;                 /* close now */
	int want_out;             /* EPOLLOUT registered */
	int paused;               /* EPOLLIN dropped (back-pressure, or TLS
				   * waiting to send before it reads on) */
	/* last_in_ms: when the input last made progress, a command done or
	 * KVTD_PROGRESS_BYTES more received (a byte a minute is no progress);
	 * in_since: bytes received since then. */
	int64_t last_in_ms, last_out_ms;
	uint64_t in_since;
	int64_t created_ms;
	uint64_t commands;
	/* After a failed AUTH no command is read or run until then (mono
	 * ms; 0: none), the wait doubling with each failure (guard.h). */
	int64_t hold_until;
	unsigned auth_fails;
};

struct kvtd_worker {
	struct kvtd *d;
	int idx;
	int ep;
	int evfd;                 /* wakes the loop: new connections, shutdown */
	pthread_mutex_t inbox_mu; /* accepted sockets handed to this worker */
	int *inbox;
	size_t inbox_n, inbox_cap;
	pthread_t th;
	struct kvtd_conn *conns;
	size_t n_conns;
	/* Big-argument buffers kept for reuse (resp_alloc): a few, bounded
	 * in bytes; touched only by this worker's thread. */
	void *spare[4];
	size_t spare_cap[4];
	size_t spare_bytes;
	/* When the command this worker runs began (kvtd_mono_ms: a wall-clock
	 * step must not make a worker look stuck), 0 between
	 * commands: /health names a worker held by one command too long. */
	_Atomic int64_t busy_since_ms;
	/* Out of file descriptors: the listeners are out of this worker's
	 * epoll until then (mono ms), 0 when they are in it. */
	int64_t accept_paused_until;
	size_t n_held;            /* connections with a hold_until */
};

/* Input progress that keeps a half-sent command alive (--client-timeout):
 * a slow upload of a big value moves this much a timeout; a drip does not. */
#define KVTD_PROGRESS_BYTES (64u * 1024)
/* A connection that must AUTH and has not, this long after it came, is
 * closed: unauthenticated clients hold no socket for long. */
#define KVTD_AUTH_DEADLINE_MS 10000
/* A TLS client whose handshake is not done this long after it came is
 * closed, authenticated or not: a stalled handshake is not an idle client. */
#define KVTD_HANDSHAKE_DEADLINE_MS 10000
/* Failed AUTH attempts are logged at most this often (with a count). */
#define KVTD_AUTH_LOG_MS 10000

/* A command held a worker this long: /health says the daemon is stuck. */
#define KVTD_STUCK_MS 30000

/* Give a big argument's buffer (resp_take_big) back to its worker. */
void kvtd_buf_put(void *worker, void *p, size_t cap);

struct kvtd_opts {
	const char *bind;         /* "127.0.0.1" */
	int port;                 /* 0: any free port (printed) */
	const char *unix_path;    /* a Unix socket for RESP too, or NULL */
	int threads;
	long maxclients;
	uint64_t max_value;       /* the largest bulk (proto-max-bulk-len) */
	uint64_t max_cmd;
	int client_timeout_s;     /* stalled output or half-sent command */
	const char *requirepass;  /* AUTH password of the default user, or NULL */
};

/* AUTH: 0 with *out set to the tenant the user acts as, 1 the same for a
 * user who sees the whole node (INFO; the access list's +admin), or -1
 * (wrong user or password).  `user` is "default" for the one-argument
 * form. */
typedef int (*kvtd_auth_fn)(struct kvtd *d, const char *user, size_t ulen,
			    const char *pass, size_t plen, const struct kvtd_tenant **out);

struct kvtd {
	struct kvtd_opts o;
	/* Runs one parsed command (cmd.c's kvtd_dispatch, set by main.c): the
	 * connections' loop here knows no command. */
	void (*dispatch)(struct kvtd_conn *c, struct resp_arg *argv, size_t argc);
	kvt_store *st;
	struct vals *vals;
	int lfd, ufd;
	int port;                 /* where lfd listens */
	struct kvtd_worker *w;
	int nw;
	_Atomic int stopping;
	_Atomic uint64_t next_id;
	_Atomic unsigned next_worker; /* round-robin of accepted connections */
	_Atomic long clients;
	_Atomic uint64_t total_conns, total_cmds, rejected_conns;
	/* accept() failing for want of file descriptors (EMFILE, ENFILE), and
	 * when that was last logged (mono ms; once a minute). */
	_Atomic uint64_t accept_fd_errors;
	_Atomic int64_t accept_fd_logged_ms;
	/* Failed AUTH: per source address (guard.h); counted, and logged at
	 * most once every KVTD_AUTH_LOG_MS with the number not logged. */
	struct kvtd_guard *guard;
	_Atomic uint64_t auth_failures, auth_refused, auth_unlogged;
	_Atomic int64_t auth_logged_ms;
	/* Reads of keys there and not, by the reading connection's tenant
	 * (its id): INFO tells a tenant its own; the node's is their sum. */
	_Atomic uint64_t keyspace_hits[VALS_MAX_TENANTS], keyspace_misses[VALS_MAX_TENANTS];
	const struct kvtd_tenant *default_tenant;
	int auth_required;        /* connections start without a tenant */
	int initial_admin;        /* connections start as an admin (ops.c) */
	kvtd_auth_fn auth;
	void *auth_ctx;
	/* The shared namespace `key` falls in (the access list's shared
	 * prefixes), or NULL: the connection's tenant's.  NULL: none. */
	const struct kvtd_tenant *(*shared_of)(struct kvtd *d, const char *key, size_t len);
	struct kvtd_tls_ctx *tls; /* TLS for TCP clients (ops.c), or NULL */
	struct kvtd_http *http;   /* /metrics and /health (ops.c), or NULL */
	int64_t start_ms;         /* kvtd_mono_ms at start: the uptime's origin */
	const char *config_path;
	int durability;
	int serve_peers;          /* --serve-peers: KVTIER.PEEK and FETCH */
	_Atomic uint64_t peer_fetches, peer_bytes; /* chunks served to them */
	/* Warm starts (docs/DAEMON_OPS.md): the hot list saved every minute
	 * and at the stop, the first tier filled from it before /ready says
	 * yes.  `ready` is 1 once the index is rebuilt and the warming done. */
	const char *hot_path;     /* NULL: no hot list */
	uint64_t warm_bytes;      /* --warm-start: 0 = off */
	uint64_t warm_bps;        /* --warm-bandwidth: 0 = unlimited */
	kvt_warm_progress warm;
	_Atomic int ready;
};

int kvtd_listen(struct kvtd *d);
int kvtd_start(struct kvtd *d);
/* Stop accepting, let every worker finish the command it runs and send
 * what is pending (at most drain_ms), close every connection, join. */
void kvtd_stop(struct kvtd *d, int drain_ms);

/* For commands: queue reply bytes / a borrowed value (the reference is
 * the connection's from then on; its first vlen bytes are sent). */
void kvtd_reply_ref(struct kvtd_conn *c, kvt_ref *ref, uint64_t vlen);

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t kvtd_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
/* Read and run nothing more of c's for `ms` (a failed AUTH's wait); what
 * was queued for it is still sent. */
void kvtd_conn_hold(struct kvtd_conn *c, int64_t ms);

/* The command table (cmd.c). */
void kvtd_dispatch(struct kvtd_conn *c, struct resp_arg *argv, size_t argc);

#endif
