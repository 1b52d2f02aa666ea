/*
 * test_local.c — the library opened on a real kvtierd through the
 * `daemon` key (docs/DAEMON.md, "Local clients").
 *
 * The test starts kvtierd (KVT_KVTIERD names it) with a DRAM tier and a
 * disk tier under a scratch data directory and --local on a socket there,
 * then, through kvt_store_open with `daemon: unix://<socket>`:
 *   - put, get, borrow, lookup, exists, delete, first writer wins, a key
 *     of another namespace a miss, the store's statistics the daemon's;
 *     a borrow let go of with no request after it is released all the
 *     same (the client's flusher), as another client sees;
 *   - puts of one round trip (the next write reserved at each commit):
 *     sizes alternating, a key held, two clients racing for a key, a
 *     client closing with a reservation, all as puts always behaved;
 *   - the engine connector's save and layer-wise load, byte-identical;
 *   - two processes sharing chunks: a child puts, the parent gets, and
 *     the parent's borrow reads the very pages the child wrote;
 *   - a child killed -9 holding a borrow and a reserved write: the
 *     daemon's borrowed count goes back to 0 and its pages come back;
 *   - clients that send a LOOKUP, NAME or WHY and never the message it
 *     announces: closed after KVT_LP_FOLLOW_MS, the others served;
 *   - a store that is not the daemon's: open fails naming the socket;
 *   - a daemon restart: the call that finds it gone fails naming the
 *     socket, the next one connects again and finds the crash-safe
 *     chunks on the daemon's disk tier;
 *   - kvt_local_serve's tenant binding, on a server of this process: a
 *     peer bound to tenant acme has its puts charged to acme, and a peer
 *     bound to a tenant the store does not know is refused; and kvtierd's:
 *     with an ACL naming this uid's login a user of tenant acme, acme's
 *     DRAM quota holds for this local client.
 */
#include <errno.h>
#include <poll.h>
#include <pwd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "proto/local_msg.h"

#define LAYERS 4
#define HEADS 2
#define DIM 64
#define BT 16
#define CT 64
#define NB 64
#define N_TOK (4 * CT)
#define N_PROMPT (N_TOK + 10) /* four whole chunks and a partial one */

static char dir[40], sock[80];
static pid_t daemon_pid = -1;

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int can_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), ok;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* A raw connection that reserves `len` bytes for `fill` key and never
 * commits: what a client killed between PUT_BEGIN and PUT_COMMIT leaves.
 * The fd, or -1. */
static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

static int raw_reserve(uint64_t len, int fill)
{
	struct kvt_lp_req q = { .magic = KVT_LP_MAGIC, .version = KVT_LP_VERSION,
				.len = sizeof(q) };
	static uint8_t rep[KVT_LP_MAX_MSG];
	struct kvt_lp_rep r;
	int fd = raw_connect();

	if (fd < 0)
		return -1;
	q.op = KVT_LP_PUT_BEGIN;
	q.size = len;
	memset(q.key, fill, sizeof(q.key));
	if (send(fd, &q, sizeof(q), 0) != sizeof(q) || recv(fd, rep, sizeof(rep), 0) < (ssize_t)sizeof(r))
		return -1;
	memcpy(&r, rep, sizeof(r));
	return r.status == 0 && r.size == len ? fd : -1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Does the daemon's log hold `what`? */
static int log_has(const char *what)
{
	char path[96], buf[1 << 16];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/kvtierd.log", dir);
	if ((fd = open(path, O_RDONLY)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, what) != NULL;
}

static const char *daemon_extra[8]; /* more options for the next start */

static int daemon_start(const char *bin)
{
	char data[96], log[96];

	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(log, sizeof(log), "%s/kvtierd.log", dir);
	daemon_pid = fork();
	if (daemon_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		const char *av[40] = { bin, "--port", "0", "--data-dir", data, "--local", sock,
				       "--threads", "2", "--set", "max_local_cpu_size=64MiB",
				       "--set", "dram_prefault=false", "--set",
				       "dram_lock_memory=false", "--set", "dram_page_size=64KiB",
				       "--set", "max_local_disk_size=256MiB" };
		int n = 19;
		for (int i = 0; i < 8 && daemon_extra[i]; i++)
			av[n++] = daemon_extra[i];
		execv(bin, (char *const *)av);
		_exit(127);
	}
	for (int i = 0; i < 400; i++) {
		int st;
		if (can_connect(sock))
			return 0;
		if (waitpid(daemon_pid, &st, WNOHANG) == daemon_pid) {
			fprintf(stderr, "kvtierd exited at start (see %s)\n", log);
			daemon_pid = -1;
			return -1;
		}
		sleep_ms(25);
	}
	fprintf(stderr, "kvtierd did not listen on %s within 10 s\n", sock);
	return -1;
}

static void daemon_stop(int sig)
{
	int st;

	if (daemon_pid <= 0)
		return;
	kill(daemon_pid, sig);
	waitpid(daemon_pid, &st, 0);
	daemon_pid = -1;
	/* a clean exit: no crash, nothing a sanitizer reported */
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static kvt_store *open_client(void)
{
	kvt_config *c = kvt_config_new();
	char url[160];
	kvt_store *st;
	int err;

	snprintf(url, sizeof(url), "unix://%s", sock);
	CHECK_EQ(kvt_config_set(c, "daemon", url), 0);
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open on the daemon: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

static kvt_layout layout(void)
{
	return (kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16, 2, 0, BT, CT };
}

static void ns_of(kvt_store *st, const char *model, kvt_ns *ns)
{
	kvt_ns_desc d = { .model = model, .layout = layout() };

	CHECK_EQ(kvt_ns_init(st, &d, ns), 0);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
}

static uint64_t daemon_borrowed(kvt_store *st)
{
	kvt_tier_stats s;

	CHECK_EQ(kvt_store_stats(st, 0, &s), 0);
	return s.borrowed;
}

/* put, get, borrow, lookup, exists, delete through the daemon. */
static void calls(kvt_store *st)
{
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	uint8_t *a = malloc(len), *b = malloc(len);
	uint32_t tok[N_TOK];
	kvt_key keys[4];
	kvt_lookup_result lr = { 0 };
	kvt_tier_stats s;
	kvt_ns ns, other;
	kvt_ref *ref;
	size_t got = 0;

	CHECK_EQ(kvt_store_tiers(st), 1);
	CHECK_EQ(kvt_store_stats(st, 0, &s), 0);
	CHECK(strcmp(s.name, "daemon") == 0);
	CHECK_EQ(s.capacity_bytes, 64ull << 20); /* the daemon's DRAM tier */
	ns_of(st, "test/local", &ns);
	ns_of(st, "test/local-other", &other);
	for (int i = 0; i < N_TOK; i++)
		tok[i] = 1000 + (uint32_t)i;
	CHECK_EQ(kvt_key_chain(&ns, tok, N_TOK, NULL, keys, 4), 4);
	for (int i = 0; i < 3; i++) {
		fill(a, len, (uint32_t)i + 1);
		CHECK_EQ(kvt_put(st, &ns, &keys[i], a, len, KVT_DUR_CRASH_SAFE), 0);
	}
	CHECK_EQ(kvt_put(st, &ns, &keys[0], a, len, KVT_DUR_CRASH_SAFE), KVT_EEXIST);
	CHECK_EQ(kvt_lookup(st, &ns, keys, 4, &lr), 3);
	CHECK_EQ(kvt_exists(st, &ns, &keys[3]), 0);
	{
		/* a chain longer than one LOOKUP message: 3 hits, then misses */
		static kvt_key chain[5000];
		uint8_t tiers[5000];
		kvt_lookup_result lt = { 0, tiers };
		memcpy(chain, keys, 3 * sizeof(*keys));
		for (int i = 3; i < 5000; i++)
			memset(&chain[i], i & 0xff, sizeof(chain[i]));
		CHECK_EQ(kvt_lookup(st, &ns, chain, 5000, &lt), 3);
		CHECK_EQ(lt.n_hit, 3);
		CHECK_EQ(tiers[2], 0);
	}
	fill(a, len, 2);
	CHECK_EQ(kvt_get(st, &ns, &keys[1], b, len, &got), 0);
	CHECK_EQ(got, len);
	CHECK(memcmp(a, b, len) == 0);
	/* the same key under another namespace is not that chunk */
	CHECK_EQ(kvt_get(st, &other, &keys[1], b, len, &got), KVT_ENOTFOUND);
	CHECK_EQ(kvt_get(st, &ns, &keys[3], b, len, &got), KVT_ENOTFOUND);

	/* a borrow is the daemon's pages, read in place */
	CHECK_EQ(kvt_borrow(st, &ns, &keys[1], &ref), 0);
	if (ref) {
		const struct iovec *iov;
		int n, off = 0;
		CHECK_EQ(kvt_ref_iov(ref, &iov, &n), 0);
		for (int i = 0; i < n; i++) {
			CHECK(memcmp((uint8_t *)iov[i].iov_base, a + off, iov[i].iov_len) == 0);
			off += (int)iov[i].iov_len;
		}
		CHECK_EQ(off, len);
		CHECK_EQ(kvt_ref_verify(ref), 0);
		CHECK_EQ(daemon_borrowed(st), 1);
		/* deleted while borrowed: the borrow keeps its view */
		CHECK_EQ(kvt_delete(st, &ns, &keys[1]), 0);
		CHECK(memcmp(iov[0].iov_base, a, iov[0].iov_len) == 0);
		kvt_release(ref);
	}
	CHECK_EQ(kvt_exists(st, &ns, &keys[1]), 0);

	/* A release rides on the client's next request; a client that makes
	 * none still lets go within milliseconds, as another client sees. */
	{
		kvt_store *other_st = open_client();
		int i = 0;
		CHECK_EQ(kvt_borrow(st, &ns, &keys[0], &ref), 0);
		kvt_release(ref);
		for (; other_st && i < 400 && daemon_borrowed(other_st); i++)
			sleep_ms(5);
		CHECK(other_st && i < 400);
		kvt_store_close(other_st);
	}
	CHECK_EQ(kvt_delete(st, &ns, &keys[1]), KVT_ENOTFOUND);
	CHECK_EQ(kvt_lookup(st, &ns, keys, 4, &lr), 1);
	for (int i = 0; i < 100 && daemon_borrowed(st); i++)
		sleep_ms(10); /* RELEASE is sent without waiting */
	CHECK_EQ(daemon_borrowed(st), 0);
	free(a);
	free(b);
}

struct engine {
	uint16_t *kv[LAYERS];
	kvt_paged_layer L[LAYERS];
};

static const size_t plane_elems = (size_t)NB * BT * HEADS * DIM;

static void engine_init(struct engine *e, uint32_t seed)
{
	for (int l = 0; l < LAYERS; l++) {
		e->kv[l] = calloc(2 * plane_elems, 2);
		if (seed)
			fill((uint8_t *)e->kv[l], 2 * plane_elems * 2, seed + (uint32_t)l);
		for (int p = 0; p < 2; p++) {
			kvt_paged_plane *pl = &e->L[l].plane[p];
			pl->base = e->kv[l] + p * plane_elems;
			pl->block_stride = (uint64_t)BT * HEADS * DIM * 2;
			pl->token_stride = HEADS * DIM * 2;
			pl->head_stride = DIM * 2;
			pl->elem_stride = 2;
		}
		e->L[l].scale = NULL;
	}
}

static kvt_conn *conn_on(kvt_store *st, kvt_ns *ns, struct engine *e)
{
	kvt_conn_desc d = { 0 };
	kvt_conn *c = NULL;

	ns_of(st, "test/local-conn", ns);
	d.layers = e->L;
	d.n_layer_descs = LAYERS;
	d.num_blocks = NB;
	d.durability = KVT_DUR_CRASH_SAFE;
	CHECK_EQ(kvt_conn_open(st, ns, &d, &c), 0);
	return c;
}

/* The connector saves from engine A's blocks and loads, layer by layer,
 * into engine B's other blocks: byte-identical. */
static void connector(kvt_store *st)
{
	struct engine A, B;
	uint32_t tok[N_PROMPT], ta[NB / 2], tb[NB / 2];
	size_t blk = (size_t)BT * HEADS * DIM;
	kvt_conn_done d[8];
	kvt_conn *ca, *cb;
	kvt_ns ns;
	int n;

	engine_init(&A, 7);
	engine_init(&B, 0);
	for (int i = 0; i < N_PROMPT; i++)
		tok[i] = 7000 + (uint32_t)i;
	for (uint32_t i = 0; i < NB / 2; i++) {
		ta[i] = (i * 7) % (NB / 2);       /* a shuffled table */
		tb[i] = NB / 2 + (i * 5) % (NB / 2);
	}
	ca = conn_on(st, &ns, &A);
	cb = conn_on(st, &ns, &B);
	if (!ca || !cb)
		goto out;
	CHECK_EQ(kvt_conn_save(ca, 1, tok, N_PROMPT, NULL, ta, NB / 2), 4);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvt_conn_save_layer(ca, 1, l), 0);
	CHECK_EQ(kvt_conn_wait(ca, 1, 10000), 0);
	n = kvt_conn_finished(ca, d, 8);
	CHECK_EQ(n, 1);
	CHECK_EQ(d[0].status, 0);
	CHECK_EQ(kvt_conn_end(ca, 1), 0);

	CHECK_EQ(kvt_conn_lookup(cb, tok, N_PROMPT, NULL), N_TOK);
	CHECK_EQ(kvt_conn_load(cb, 2, tok, N_PROMPT, NULL, tb, NB / 2, N_TOK, -1), 0);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_EQ(kvt_conn_wait_layer(cb, 2, l, 10000), 0);
	n = kvt_conn_finished(cb, d, 8);
	CHECK_EQ(n, 1);
	CHECK_EQ(d[0].status, 0);
	CHECK_EQ(d[0].chunks, 4);
	for (int l = 0; l < LAYERS; l++)
		for (int p = 0; p < 2; p++)
			for (int i = 0; i < N_TOK / BT; i++)
				CHECK(memcmp(A.kv[l] + p * plane_elems + ta[i] * blk,
					     B.kv[l] + p * plane_elems + tb[i] * blk, blk * 2) == 0);
	CHECK_EQ(kvt_conn_end(cb, 2), 0);
out:
	kvt_conn_close(ca);
	kvt_conn_close(cb);
	for (int l = 0; l < LAYERS; l++) {
		free(A.kv[l]);
		free(B.kv[l]);
	}
}

/* The other client processes: this program again (fork alone would
 * start a store's threads in a child of a threaded process), run as
 * `test_local --child MODE SOCKET FD`. */
static pid_t spawn_child(const char *mode, int fd)
{
	char fds[16];
	pid_t pid;

	snprintf(fds, sizeof(fds), "%d", fd);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "test_local", "--child", mode, sock, fds, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int child_main(const char *mode, int fd)
{
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	uint8_t *a = malloc(len);
	kvt_store *cs = open_client();
	kvt_ref *ref = NULL;
	kvt_key key;
	kvt_ns ns;
	char c = 0;

	if (!cs || !a)
		return 1;
	if (!strcmp(mode, "put")) { /* two_processes */
		ns_of(cs, "test/local-shared", &ns);
		memset(&key, 0x5a, sizeof(key));
		fill(a, len, 99);
		int rc = kvt_put(cs, &ns, &key, a, len, KVT_DUR_CACHED) != 0;
		kvt_store_close(cs);
		free(a);
		return rc;
	}
	/* killed_client: hold a borrow and a reserved write until killed */
	ns_of(cs, "test/local-killed", &ns);
	memset(&key, 0x6b, sizeof(key));
	if (kvt_borrow(cs, &ns, &key, &ref) == 0 && raw_reserve(4 << 20, 0x6c) >= 0)
		c = 'b';
	(void)!write(fd, &c, 1);
	for (;;)
		pause();
}

/* Another process puts; this one gets the same bytes, and its borrow is
 * the very memory the other wrote. */
static void two_processes(kvt_store *st)
{
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	uint8_t *a = malloc(len), *b = malloc(len);
	kvt_key key;
	kvt_ns ns;
	pid_t pid;
	int status;

	ns_of(st, "test/local-shared", &ns);
	memset(&key, 0x5a, sizeof(key));
	fill(a, len, 99);
	pid = spawn_child("put", -1);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	memset(b, 0, len);
	CHECK_EQ(kvt_get(st, &ns, &key, b, len, NULL), 0);
	CHECK(memcmp(a, b, len) == 0);
	free(a);
	free(b);
}

/* A client killed -9 while it holds a borrow and a reserved write: the
 * daemon notices the closed socket and lets go of both. */
/* A put is one round trip: each commit has the daemon reserve the next
 * write of its size, and the next put writes there and commits.  Seen
 * from outside, puts of alternating sizes, a key held already, two
 * clients racing for one key and a client closing holding a reservation
 * all behave as puts always did. */
static void reserved_ahead(kvt_store *st)
{
	kvt_layout small = { 2, 1, DIM, KVT_DTYPE_BF16, 2, 0, BT, CT };
	kvt_ns_desc ds = { .model = "test/local-small", .layout = small };
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	size_t slen = kvt_layout_payload_bytes(&small);
	uint8_t *a = malloc(len), *b = malloc(len);
	kvt_store *st2;
	kvt_tier_stats s0, s;
	kvt_key k[8];
	kvt_ns ns, sn;
	int r1, r2, i;

	ns_of(st, "test/local-ahead", &ns);
	CHECK_EQ(kvt_ns_init(st, &ds, &sn), 0);
	for (i = 0; i < 8; i++)
		memset(&k[i], 0xa0 + i, sizeof(k[i]));
	/* sizes alternating: each put of the other size than reserved */
	for (i = 0; i < 6; i++) {
		fill(a, len, 100 + (uint32_t)i);
		CHECK_EQ(kvt_put(st, i % 2 ? &sn : &ns, &k[i], a, i % 2 ? slen : len,
				 KVT_DUR_CRASH_SAFE), 0);
	}
	for (i = 0; i < 6; i++) {
		size_t got = 0, l = i % 2 ? slen : len;
		fill(a, len, 100 + (uint32_t)i);
		CHECK_EQ(kvt_get(st, i % 2 ? &sn : &ns, &k[i], b, l, &got), 0);
		CHECK_EQ(got, l);
		CHECK(memcmp(a, b, l) == 0);
	}
	/* the same size twice running, then a key held: refused at the
	 * commit of the reserved write, the first version kept */
	fill(a, len, 7);
	CHECK_EQ(kvt_put(st, &ns, &k[6], a, len, KVT_DUR_CRASH_SAFE), 0);
	fill(a, len, 8);
	CHECK_EQ(kvt_put(st, &ns, &k[0], a, len, KVT_DUR_CRASH_SAFE), KVT_EEXIST);
	CHECK_EQ(kvt_get(st, &ns, &k[0], b, len, NULL), 0);
	fill(a, len, 100);
	CHECK(memcmp(a, b, len) == 0);
	/* deleted, the key is free again (and this client holds a write
	 * reserved for the next put, as it will after its next) */
	CHECK_EQ(kvt_delete(st, &ns, &k[6]), 0);
	CHECK_EQ(kvt_put(st, &ns, &k[6], a, len, KVT_DUR_CRASH_SAFE), 0);

	/* two clients, each holding a reserved write, put one key: one
	 * wins, the other is told, the bytes are the winner's */
	CHECK_EQ(kvt_store_stats(st, 0, &s0), 0);
	st2 = open_client();
	CHECK(st2 != NULL);
	if (!st2)
		goto out;
	fill(a, len, 9);
	CHECK_EQ(kvt_put(st2, &ns, &k[7], a, len, KVT_DUR_CRASH_SAFE), 0);
	CHECK_EQ(kvt_delete(st2, &ns, &k[7]), 0);
	memset(&k[7], 0xee, sizeof(k[7]));
	fill(a, len, 10);
	r1 = kvt_put(st, &ns, &k[7], a, len, KVT_DUR_CRASH_SAFE);
	fill(b, len, 11);
	r2 = kvt_put(st2, &ns, &k[7], b, len, KVT_DUR_CRASH_SAFE);
	CHECK_EQ(r1, 0);
	CHECK_EQ(r2, KVT_EEXIST);
	CHECK_EQ(kvt_get(st2, &ns, &k[7], b, len, NULL), 0);
	CHECK(memcmp(a, b, len) == 0);
	/* the closed client's reservation goes back to the pool */
	CHECK_EQ(kvt_delete(st, &ns, &k[7]), 0);
	kvt_store_close(st2);
	for (i = 0; i < 400; i++) {
		CHECK_EQ(kvt_store_stats(st, 0, &s), 0);
		if (s.used_bytes <= s0.used_bytes)
			break;
		sleep_ms(5);
	}
	CHECK(s.used_bytes <= s0.used_bytes);
out:
	for (i = 0; i < 7; i++)
		kvt_delete(st, i % 2 ? &sn : &ns, &k[i]);
	free(a);
	free(b);
}

static void killed_client(kvt_store *st)
{
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	uint8_t *a = malloc(len);
	kvt_tier_stats before, s;
	kvt_key key;
	kvt_ns ns;
	int p[2], status;
	char c = 0;
	pid_t pid;

	ns_of(st, "test/local-killed", &ns);
	memset(&key, 0x6b, sizeof(key));
	fill(a, len, 5);
	/* crash-safe: written down now, so no background copy of the
	 * daemon's holds a borrow of it while the counts are compared */
	CHECK_EQ(kvt_put(st, &ns, &key, a, len, KVT_DUR_CRASH_SAFE), 0);
	for (int i = 0; i < 200 && daemon_borrowed(st); i++)
		sleep_ms(10); /* earlier cached puts' write-through copies */
	CHECK_EQ(kvt_store_stats(st, 0, &before), 0);
	CHECK_EQ(before.borrowed, 0);
	CHECK_EQ(pipe(p), 0);
	pid = spawn_child("borrow", p[1]);
	close(p[1]);
	CHECK_EQ(read(p[0], &c, 1), 1);
	CHECK_EQ(c, 'b');
	CHECK_EQ(daemon_borrowed(st), 1);
	CHECK_EQ(kvt_store_stats(st, 0, &s), 0);
	CHECK(s.used_bytes >= before.used_bytes + (4 << 20)); /* the reserved write */
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(p[0]);
	/* each of its two connections is let go of by its own thread */
	for (int i = 0; i < 400; i++) {
		CHECK_EQ(kvt_store_stats(st, 0, &s), 0);
		if (s.borrowed == 0 && s.used_bytes == before.used_bytes)
			break;
		sleep_ms(5);
	}
	CHECK_EQ(s.borrowed, 0);
	CHECK_EQ(s.used_bytes, before.used_bytes);
	/* still served to the living */
	CHECK_EQ(kvt_exists(st, &ns, &key), 1);
	free(a);
}

/* The daemon stops: the call that finds it gone fails naming the socket;
 * started again, the next call reconnects and the crash-safe chunks are
 * there, read back from its disk tier. */
/* LOOKUP, NAME and WHY announce a second message.  Clients that send the
 * request and never the message are closed after KVT_LP_FOLLOW_MS, with
 * the log naming what was missing, and serve the others meanwhile. */
static void silent_follow_up(kvt_store *st)
{
	static const uint8_t ops[3] = { KVT_LP_LOOKUP, KVT_LP_NAME, KVT_LP_WHY };
	int fd[3], closed[3] = { 0 }, left = 3;
	double t0 = now_s(), first = 0;
	kvt_ns ns;
	kvt_key k;

	for (int i = 0; i < 3; i++) {
		struct kvt_lp_req q = { .magic = KVT_LP_MAGIC, .version = KVT_LP_VERSION,
					.len = sizeof(q), .op = ops[i], .size = 2 };
		if (ops[i] == KVT_LP_NAME)
			q.id = 32; /* two 32-byte hashes (and the parent) to come */
		fd[i] = raw_connect();
		CHECK(fd[i] >= 0);
		CHECK_EQ(send(fd[i], &q, sizeof(q), 0), (ssize_t)sizeof(q));
	}
	/* the other clients are served meanwhile */
	ns_of(st, "silent", &ns);
	memset(&k, 0x5a, sizeof(k));
	CHECK(kvt_lookup(st, &ns, &k, 1, NULL) >= 0);
	while (left > 0 && now_s() - t0 < KVT_LP_FOLLOW_MS / 1000.0 + 20) {
		for (int i = 0; i < 3; i++) {
			struct pollfd p = { .fd = fd[i], .events = POLLIN };
			char b[64];
			if (closed[i] || poll(&p, 1, 100) <= 0)
				continue;
			CHECK(recv(fd[i], b, sizeof(b), 0) <= 0);
			closed[i] = 1;
			left--;
			if (!first)
				first = now_s() - t0;
		}
	}
	CHECK_EQ(left, 0);
	CHECK(first >= KVT_LP_FOLLOW_MS / 1000.0 * 0.9); /* waited, not refused */
	CHECK(log_has("LOOKUP: the message it announces did not come in"));
	CHECK(log_has("NAME: the message it announces did not come in"));
	CHECK(log_has("WHY: the message it announces did not come in"));
	for (int i = 0; i < 3; i++)
		close(fd[i]);
}

static void restart(kvt_store *st, const char *bin)
{
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	uint8_t *a = malloc(len), *b = malloc(len);
	kvt_key key;
	kvt_ns ns;
	int rc;

	ns_of(st, "test/local-restart", &ns);
	memset(&key, 0x7c, sizeof(key));
	fill(a, len, 11);
	CHECK_EQ(kvt_put(st, &ns, &key, a, len, KVT_DUR_CRASH_SAFE), 0);
	daemon_stop(SIGTERM);
	rc = kvt_get(st, &ns, &key, b, len, NULL);
	CHECK(rc < 0 && rc != KVT_ENOTFOUND);
	CHECK(strstr(kvt_errmsg(), sock) != NULL);
	rc = kvt_get(st, &ns, &key, b, len, NULL); /* no daemon to reconnect to */
	CHECK(rc < 0 && rc != KVT_ENOTFOUND);
	CHECK(strstr(kvt_errmsg(), "cannot connect to kvtierd") != NULL);
	CHECK(strstr(kvt_errmsg(), sock) != NULL);
	if (daemon_start(bin)) {
		CHECK(0);
		goto out;
	}
	memset(b, 0, len);
	CHECK_EQ(kvt_get(st, &ns, &key, b, len, NULL), 0);
	CHECK(memcmp(a, b, len) == 0);
out:
	free(a);
	free(b);
}

#define ACME_SECRET "00112233445566778899aabbccddeeff"

/* kvtierd with an ACL: this uid's login is a user of tenant acme, whose
 * DRAM quota is 1 MiB; a local client of this uid is acme, so its puts
 * beyond the quota push its own oldest out of DRAM (the default tenant,
 * with no quota and 64 MiB, would have kept all eight there). */
static void acl_tenant(const char *bin)
{
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	kvt_ns_desc d = { .model = "test/local-acl", .layout = layout(), .tenant = "acme" };
	char acl[96], line[256], url[120];
	struct passwd *pw = getpwuid(geteuid());
	uint8_t *a = calloc(1, len);
	kvt_config *c;
	kvt_store *st;
	kvt_key k[8];
	FILE *f;
	kvt_ns ns;
	int err;

	snprintf(acl, sizeof(acl), "%s/acl", dir);
	if (!pw || !(f = fopen(acl, "w"))) {
		CHECK(0);
		free(a);
		return;
	}
	fprintf(f, "user default tenant default nopass\nuser %s tenant acme nopass\n"
		   "quota acme dram 1MiB\n",
		pw->pw_name);
	fclose(f);
	daemon_extra[0] = "--acl";
	daemon_extra[1] = acl;
	daemon_extra[2] = "--set";
	daemon_extra[3] = "tenants=acme=" ACME_SECRET;
	if (daemon_start(bin)) {
		CHECK(0);
		goto out;
	}
	c = kvt_config_new();
	snprintf(url, sizeof(url), "unix://%s", sock);
	kvt_config_set(c, "daemon", url);
	kvt_config_set(c, "tenants", "acme=" ACME_SECRET);
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	CHECK(st != NULL);
	if (st) {
		CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
		for (int i = 0; i < 8; i++) {
			snprintf(line, sizeof(line), "acl chunk %d", i);
			memset(&k[i], 0, sizeof(k[i]));
			memcpy(k[i].b, line, strlen(line));
			CHECK_EQ(kvt_put(st, &ns, &k[i], a, len, KVT_DUR_CACHED), 0);
		}
		kvt_tier_stats ts;
		CHECK_EQ(kvt_exists(st, &ns, &k[7]), 1);
		/* the daemon's DRAM holds acme's quota, not the eight chunks
		 * (the rest went down to its disk tier) */
		for (int i = 0; i < 400; i++) {
			CHECK_EQ(kvt_store_stats(st, 0, &ts), 0);
			if (ts.used_bytes <= (1u << 20) + 5 * 65536)
				break;
			sleep_ms(5);
		}
		CHECK(ts.used_bytes <= (1u << 20) + 5 * 65536);
		CHECK(ts.used_bytes >= 5 * 65536);
		kvt_store_close(st);
	}
	daemon_stop(SIGTERM);
out:
	daemon_extra[0] = NULL;
	free(a);
}

static const char *bind_to = "acme";

static const char *tenant_of(void *arg, uint32_t uid)
{
	(void)arg;
	return uid == geteuid() ? bind_to : NULL;
}

static void tenant_bound(void)
{
	kvt_config *c = kvt_config_new();
	char path[96], url[120];
	kvt_local_opts o = { .path = path, .tenant_of = tenant_of };
	size_t len = kvt_layout_payload_bytes(&(kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16,
							     2, 0, BT, CT });
	kvt_ns_desc d = { .model = "test/local-tenant", .layout = layout(), .tenant = "acme" };
	kvt_local_server *srv = NULL;
	kvt_tenant_usage u;
	kvt_store *server, *client;
	uint8_t *a = calloc(1, len);
	kvt_key key;
	kvt_ns ns;
	int err;

	snprintf(path, sizeof(path), "%s/tenant.sock", dir);
	snprintf(url, sizeof(url), "unix://%s", path);
	kvt_config_set(c, "max_local_cpu_size", "16MiB");
	kvt_config_set(c, "dram_prefault", "false");
	kvt_config_set(c, "dram_lock_memory", "false");
	kvt_config_set(c, "tenants", "acme=" ACME_SECRET);
	/* without a shared arena there is nothing to serve */
	server = kvt_store_open(c, &err);
	CHECK(server != NULL);
	CHECK_EQ(kvt_local_serve(server, &o, &srv), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "dram_shared") != NULL);
	kvt_store_close(server);
	kvt_config_set(c, "dram_shared", "true");
	server = kvt_store_open(c, &err);
	CHECK(server != NULL);
	if (!server)
		goto out;
	CHECK_EQ(kvt_local_serve(server, &o, &srv), 0);
	{
		/* a second server on a socket one already listens on is refused */
		kvt_local_server *again = NULL;
		CHECK_EQ(kvt_local_serve(server, &o, &again), -EADDRINUSE);
		CHECK(again == NULL);
	}
	kvt_config_free(c);
	c = kvt_config_new();
	kvt_config_set(c, "tenants", "acme=" ACME_SECRET);
	kvt_config_set(c, "daemon", url);
	client = kvt_store_open(c, &err);
	CHECK(client != NULL);
	if (client) {
		CHECK_EQ(kvt_ns_init(client, &d, &ns), 0);
		memset(&key, 0x8d, sizeof(key));
		CHECK_EQ(kvt_put(client, &ns, &key, a, len, KVT_DUR_CACHED), 0);
		CHECK_EQ(kvt_store_tenant_usage(server, "acme", 0, &u), 0);
		CHECK_EQ(u.chunks, 1);
		CHECK_EQ(kvt_store_tenant_usage(server, NULL, 0, &u), 0);
		CHECK_EQ(u.chunks, 0);
		kvt_store_close(client);
	}
	bind_to = "nobody"; /* not a tenant of the server's store */
	client = kvt_store_open(c, &err);
	CHECK(client == NULL);
	CHECK_EQ(err, -EACCES);
	CHECK(strstr(kvt_errmsg(), path) != NULL);
	kvt_local_stop(srv);
	CHECK(access(path, F_OK) != 0); /* the socket is removed */
	kvt_store_close(server);
out:
	kvt_config_free(c);
	free(a);
}

int main(int argc, char **argv)
{
	const char *bin = getenv("KVT_KVTIERD");
	kvt_store *st;
	char cmd[96];

	if (argc == 5 && !strcmp(argv[1], "--child")) {
		snprintf(sock, sizeof(sock), "%s", argv[3]);
		return child_main(argv[2], atoi(argv[4]));
	}

	if (!bin || access(bin, X_OK))
		SKIP("KVT_KVTIERD does not name kvtierd (ctest sets it)");
	snprintf(dir, sizeof(dir), "/tmp/kvt-local-XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	tenant_bound();
	if (daemon_pid < 0)
		acl_tenant(bin);

	/* no daemon: open says which socket it tried */
	st = open_client();
	CHECK(st == NULL);
	CHECK(strstr(kvt_errmsg(), sock) != NULL);

	if (daemon_start(bin) == 0 && (st = open_client())) {
		calls(st);
		reserved_ahead(st);
		connector(st);
		two_processes(st);
		killed_client(st);
		silent_follow_up(st);
		restart(st, bin);
		kvt_store_close(st);
	} else {
		CHECK(0);
	}
	daemon_stop(SIGTERM);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {
	}
	TEST_DONE();
}
