/*
 * test_crash.c — the disk tiers survive kill -9, through the public store
 * API: the NVMe tier (`local_disk`) and the shared file-system tier
 * (`shared_fs`), one after the other, each on its own directory under
 * /var/tmp (a real file system, where O_DIRECT works).
 *
 * Each cycle forks one writer, or in one cycle of four two writers at once,
 * that open the store on the directory every earlier cycle wrote (so the
 * store accumulates across reopens; some writers have a DRAM tier above
 * the disk, some not) and kvt_put chunks without pause: payloads of 4 KiB
 * to about 4 MiB (one namespace per size, the size drawn per key), bytes
 * derived from the key and the writer, three puts in four at
 * KVT_DUR_CRASH_SAFE and one at KVT_DUR_POWER_SAFE, one in eight through
 * kvt_put_layers.  After every kvt_put returns, the writer sends the key and
 * the result down a pipe: that is the acknowledgement.  The parent sends
 * SIGKILL at a random moment: usually a random delay after the store is
 * open, drawn over the time a writer takes to write its share (so kills
 * land in writes and in publications alike), sometimes during the open
 * itself.  Then it reopens the store alone, without a DRAM tier, and checks
 * what a user relies on:
 *
 *   lost         a put that returned 0 (or KVT_EEXIST: "the key is
 *                stored") whose chunk kvt_get no longer returns;
 *   wrong_bytes  kvt_get returned bytes that are not exactly what one writer
 *                put under that key, or not the version the winner was told
 *                it stored, or a different version than at an earlier open;
 *   torn         a file at a final object name that fails full verification
 *                (read and decoded by the test itself: every new file the
 *                gets did not just read whole, and bad ones again at every
 *                open), a chunk kvt_store_verify (without drop) reports bad,
 *                a get that met a corrupt copy, or a bad file the open
 *                counted that none of these could name.
 *
 * Two writers share a few keys, which both put at the same moment: at most
 * one put of a key may return 0, and whatever is served is one writer's
 * whole version (that one's, if one was told it won).  Writer 0 also puts
 * again a few keys stored in earlier cycles, with other bytes: that must
 * return KVT_EEXIST and change nothing.  Published chunks nobody was
 * putting at the kill (phantoms), deleted chunks that come back, and a put
 * failing are failures too.  The parent deletes the oldest chunks between
 * cycles to keep the store within a budget (what is deleted must stay
 * gone), and removes the temporaries the kills left in tmp/ (the store's
 * own sweep waits 15 minutes, longer than this test).
 *
 * What it does not assume: that a damaged file is removed from disk, or
 * that the files on disk and the index agree (a reader may keep a bad file
 * out of the index and leave it in place).  A well-formed file the index
 * does not serve is reported (`unindexed`) but fails nothing by itself; an
 * acknowledged chunk missing from the index is `lost` whatever the disk
 * holds.
 *
 * After its cycles, each tier damages three acknowledged chunks' files by
 * hand (a payload byte, a header byte, the last byte cut off) and checks
 * that one more reopen counts exactly three torn and three lost: the
 * checks are seen to bite in every run.
 *
 * Each tier prints one summary line, e.g.
 *   crash nvme: cycles=200 acked=N lost=0 wrong_bytes=0 torn=0 reopened=200 ...
 * Cycles: 200 (NVMe) and 150 (shared FS) by default, 40 each under
 * AddressSanitizer; KVT_CRASH_CYCLES=N sets both (a soak: 1000 or more).
 * KVT_CRASH_TIERS=nvme or shared_fs runs one tier only.  KVT_TEST_SEED
 * replays a run's choices (the seed is printed; kill timing is real time);
 * KVT_CRASH_VERBOSE=1 prints a line per cycle.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format/object.h"
#include "test.h"
#include "tier_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define CRASH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CRASH_ASAN 1
#endif
#endif
#ifndef CRASH_ASAN
#define CRASH_ASAN 0
#endif

#define CYCLES_NVME 200
#define CYCLES_SHARED 150
#define CYCLES_ASAN 40

#define N_NS 40                    /* payload sizes, 4 KiB .. ~4 MiB */
#define PRIV_SPAN 512u             /* keys of one writer in one cycle, at most */
#define N_SHARED 8u                /* keys both writers of a cycle put */
#define SPAN (2 * PRIV_SPAN + N_SHARED) /* counters per cycle */
#define N_REPUT 3                  /* stored keys writer 0 puts again */
#define WRITER_BYTES_CAP (6ull << 20)  /* then the writer waits for the kill */
#define LIVE_BUDGET (48ull << 20)  /* the parent deletes down to this */
#define SAMPLE_OLD 6               /* older chunks read back per cycle */
#define FULL_EVERY 40              /* cycles between full read-backs */
#define NEED_FREE (2ull << 30)
#define MAX_FAILURES 50            /* stop early past this */
#define END UINT64_MAX

enum { MSG_READY = 1, MSG_ACK = 2, MSG_CAP = 3, MSG_FAIL = 4 };

/* One message down a writer's pipe: 16 bytes, written whole (<= PIPE_BUF). */
typedef struct msg {
	uint64_t c;   /* the key's counter (MSG_ACK) */
	int32_t rc;   /* kvt_put's result; MSG_CAP: microseconds spent */
	uint8_t kind;
	uint8_t w;    /* writer 0 or 1 */
	uint16_t dur; /* durability asked */
} msg;

/* --- keys, namespaces and payloads ---------------------------------------------- */

static kvt_ns ns_tab[N_NS];
static uint64_t max_payload;

static const kvt_ns *ns_of(uint64_t c)
{
	return &ns_tab[tt_mix64(c ^ 0xC0FFEEull) % N_NS];
}

static uint64_t payload_len(uint64_t c)
{
	return kvt_layout_payload_bytes(&ns_of(c)->layout);
}

/* Version 0 and 1: what writer 0 or 1 puts; 2: a re-put of a stored key. */
static uint64_t seed_of(uint64_t c, int v)
{
	return tt_mix64((c << 2) | (uint64_t)v) ^ 0x5EEDull;
}

/* The writer a counter belongs to, or -1 for a key both writers put. */
static int owner_of(uint64_t c)
{
	uint64_t off = c % SPAN;

	return off < PRIV_SPAN ? 0 : off < 2 * PRIV_SPAN ? 1 : -1;
}

/* Layouts whose payloads grow geometrically from 4 KiB to about 4 MiB,
 * with layer counts, heads, planes (MLA's one) and dtypes (fp8 with
 * scales) varied, so that most sizes are not multiples of the block. */
static int ns_setup(void)
{
	kvt_config *cfg = kvt_config_new();
	double target = 4096.0, step;
	int i, rc = 0;

	if (!cfg)
		return KVT_ENOMEM;
	{
		/* step = 1024^(1/(N_NS-1)), by bisection (no libm) */
		double lo = 1.0, hi = 2.0;
		for (i = 0; i < 60; i++) {
			double m = (lo + hi) / 2, p = 1.0;
			int j;
			for (j = 0; j < N_NS - 1; j++)
				p *= m;
			if (p < 1024.0)
				lo = m;
			else
				hi = m;
		}
		step = lo;
	}
	for (i = 0; i < N_NS && !rc; i++, target *= step) {
		static const uint32_t dtypes[] = { KVT_DTYPE_BF16, KVT_DTYPE_F16,
						   KVT_DTYPE_FP8_E4M3, KVT_DTYPE_F32 };
		char model[64];
		kvt_ns_desc d;
		uint32_t dt = dtypes[i % 4], planes = i % 5 == 3 ? 1 : 2;
		uint32_t layers = 1 + (uint32_t)(i * 7) % 12, heads = 1 + i % 4;
		uint32_t scale = dt == KVT_DTYPE_FP8_E4M3 ? 4u * heads : 0;
		double per = target / layers - scale;
		uint32_t dim;

		if (i == 0) { /* the smallest is exactly 4 KiB */
			layers = 1, heads = 1, planes = 2, dt = KVT_DTYPE_BF16,
			scale = 0, per = 4096;
		}
		dim = (uint32_t)(per / (planes * 16.0 * heads * kvt_dtype_size(dt)));
		if (dim < 1)
			dim = 1;
		memset(&d, 0, sizeof(d));
		snprintf(model, sizeof(model), "kvtier-crash-test/%02d", i);
		d.model = model;
		d.layout = (kvt_layout){ .num_layers = layers, .num_kv_heads = heads,
					 .head_dim = dim, .dtype = dt,
					 .kv_planes = planes, .scale_bytes = scale,
					 .block_size = 16, .chunk_tokens = 16 };
		d.tp_size = d.pp_size = 1;
		rc = kvt_config_ns(cfg, &d, &ns_tab[i]);
		if (!rc && kvt_layout_payload_bytes(&ns_tab[i].layout) > max_payload)
			max_payload = kvt_layout_payload_bytes(&ns_tab[i].layout);
	}
	kvt_config_free(cfg);
	return rc;
}

/* 0..2: the version `buf` (`len` bytes) is, whole; -1: none of them. */
static int match_version(uint64_t c, const uint8_t *buf, uint64_t len,
			 uint8_t *scratch)
{
	uint8_t pre[16];
	int v;

	if (len != payload_len(c))
		return -1;
	for (v = 0; v < 3; v++) {
		test_fill(pre, sizeof(pre), seed_of(c, v));
		if (memcmp(buf, pre, sizeof(pre)))
			continue;
		test_fill(scratch, len, seed_of(c, v));
		return memcmp(buf, scratch, len) ? -1 : v;
	}
	return -1;
}

static int version_allowed(uint64_t c, int v)
{
	int o = owner_of(c);

	if (v == 2)
		return 0; /* a re-put never replaces what was stored */
	return o < 0 ? (v == 0 || v == 1) : v == o;
}

/* --- the tiers, the plan of a cycle ------------------------------------------------ */

typedef struct tier_def {
	const char *name;     /* in the summary line */
	const char *dir_key;  /* configuration key naming the directory */
	const char *size_key; /* and its capacity */
} tier_def;

static const tier_def TIERS[] = {
	{ "nvme", "local_disk", "max_local_disk_size" },
	{ "shared_fs", "shared_fs", "max_shared_fs_size" },
};

typedef struct plan {
	uint32_t cycle;
	uint64_t base;      /* counters of this cycle: base .. base + SPAN - 1 */
	int writers;        /* 1 or 2 */
	int dram[2];        /* writer w has a DRAM tier above the disk */
	int early[2];       /* writer w is killed during its open */
	uint64_t reput[N_REPUT];
	int n_reput;        /* writer 0 puts these stored keys again first */
	uint64_t seed[2];   /* writer w's choices (durability, API) */
} plan;

/* The i-th key writer w puts, or END.  Two writers interleave the shared
 * keys with their own, in the same order, so that they race on each. */
static uint64_t seq_at(const plan *p, int w, uint64_t i)
{
	uint64_t j;

	if (w == 0) {
		if (i < (uint64_t)p->n_reput)
			return p->reput[i];
		i -= (uint64_t)p->n_reput;
	}
	if (p->writers == 2) {
		if (i < 2 * N_SHARED)
			return i % 2 == 0 ? p->base + 2 * PRIV_SPAN + i / 2
					  : p->base + (uint64_t)w * PRIV_SPAN + i / 2;
		j = i - N_SHARED;
	} else {
		j = i;
	}
	return j < PRIV_SPAN ? p->base + (uint64_t)w * PRIV_SPAN + j : END;
}

static int version_at(const plan *p, int w, uint64_t i)
{
	return w == 0 && i < (uint64_t)p->n_reput ? 2 : w;
}

/* --- what the parent knows --------------------------------------------------------- */

enum {
	K_ACKED = 1,   /* a put of it returned 0 or KVT_EEXIST */
	K_SEEN = 2,    /* read back whole at some open */
	K_LIVE = 4,    /* in the live list */
	K_DELETED = 8, /* deleted by the parent */
	K_LOST = 16,   /* counted lost or vanished (once) */
	K_BAD = 32,    /* counted torn (once) */
};

typedef struct kstate {
	uint8_t flags;
	int8_t version; /* the version stored: told to a winner, or seen */
	uint8_t wins;   /* puts of it that returned 0 */
	uint8_t pad;
	uint32_t present; /* check generation whose index listed it */
	uint32_t checked; /* check generation that read it */
	uint32_t bad_gen; /* check generation that found it bad */
	uint64_t ino;     /* the file that passed the test's own verification */
} kstate;

typedef struct tally {
	uint64_t cycles, reopened, acked, eexist, lost, wrong_bytes, torn;
	uint64_t power_safe, layered, races, race_keys, double_win, phantom;
	uint64_t published_unacked, tmp_left, deleted, resurrected;
	uint64_t reput, reput_accepted, unexpected_eexist, put_errors, bad_acks;
	uint64_t child_errors, reopen_failed, vanished, get_errors, foreign;
	uint64_t unindexed, stray, early_kills, kills, capped, verify_runs;
	uint64_t verify_checked, files_checked, gets, evictions, open_corrupt;
	uint64_t live_max;
} tally;

typedef struct run {
	const tier_def *td;
	char root[PATH_MAX];
	uint64_t n_counters;
	kstate *ks;
	uint64_t *live; /* counters in the order they became known */
	size_t n_live, live_head, cap_live;
	uint64_t live_bytes;
	uint8_t *buf, *expect, *file;
	size_t buf_cap, file_cap;
	kvt_obj_hdr *hdr;
	uint32_t gen; /* check generation */
	uint64_t bad_unindexed; /* bad chunks found this check that the
				 * open kept out of the index */
	int quiet;      /* the self-check: failures are expected */
	double window_ms, open_ms;
	tally t;
} run;

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state = tt_mix64(rng_state);
	return rng_state;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void fail_note(run *r, uint64_t *counter, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Count one failure of the kind `counter` and say what it was. */
static void fail_note(run *r, uint64_t *counter, const char *fmt, ...)
{
	va_list ap;

	(*counter)++;
	test_failures++;
	fprintf(stderr, "  %s%s cycle %llu: ", r->quiet ? "(expected) " : "",
		r->td->name, (unsigned long long)r->t.cycles);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void live_add(run *r, uint64_t c)
{
	kstate *s = &r->ks[c];

	if (s->flags & K_LIVE)
		return;
	if (r->n_live == r->cap_live) {
		size_t nc = r->cap_live ? r->cap_live * 2 : 4096;
		uint64_t *nl = realloc(r->live, nc * sizeof(*nl));
		if (!nl) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
		r->live = nl;
		r->cap_live = nc;
	}
	s->flags |= K_LIVE;
	r->live[r->n_live++] = c;
	r->live_bytes += KVT_OBJ_HEADER_BYTES + payload_len(c);
	if (r->live_bytes > r->t.live_max)
		r->t.live_max = r->live_bytes;
}

static void live_drop(run *r, uint64_t c)
{
	r->live_bytes -= KVT_OBJ_HEADER_BYTES + payload_len(c);
}

static kvt_config *make_cfg(const run *r, int dram)
{
	kvt_config *cfg = kvt_config_new();
	int rc = 0;

	if (!cfg)
		return NULL;
	rc |= kvt_config_set(cfg, "local_cpu", dram ? "true" : "false");
	if (dram) {
		rc |= kvt_config_set(cfg, "max_local_cpu_size", "64MiB");
		rc |= kvt_config_set(cfg, "dram_prefault", "false");
		rc |= kvt_config_set(cfg, "dram_lock_memory", "false");
	}
	rc |= kvt_config_set(cfg, r->td->dir_key, r->root);
	rc |= kvt_config_set(cfg, r->td->size_key, "64GiB"); /* no eviction */
	rc |= kvt_config_set(cfg, "workers", "2");
	if (rc) {
		fprintf(stderr, "configuration: %s\n", kvt_errmsg());
		kvt_config_free(cfg);
		return NULL;
	}
	return cfg;
}

/* --- a writer ------------------------------------------------------------------------ */

static void send_msg(int fd, uint8_t kind, int w, uint64_t c, int32_t rc,
		     int dur)
{
	msg m = { .c = c, .rc = rc, .kind = kind, .w = (uint8_t)w,
		  .dur = (uint16_t)dur };
	const char *b = (const char *)&m;
	size_t n = sizeof(m);

	while (n) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			_exit(4);
		b += k;
		n -= (size_t)k;
	}
}

/* Never returns: killed by the parent, or _exit(2..4) after a failure it
 * reported. */
static void writer_run(run *r, const plan *p, int w, int fd)
{
	kvt_config *cfg = make_cfg(r, p->dram[w]);
	uint64_t rng = p->seed[w], bytes = 0, i, c;
	kvt_store *st;
	double t0;
	int err = KVT_ENOMEM;

	st = cfg ? kvt_store_open(cfg, &err) : NULL;
	kvt_config_free(cfg);
	if (!st) {
		fprintf(stderr, "writer %d: open: %s (%s)\n", w, kvt_strerror(err),
			kvt_errmsg());
		send_msg(fd, MSG_FAIL, w, 0, err, 0);
		_exit(3);
	}
	send_msg(fd, MSG_READY, w, 0, 0, 0);
	t0 = now_ms();
	for (i = 0; bytes < WRITER_BYTES_CAP && (c = seq_at(p, w, i)) != END; i++) {
		const kvt_ns *ns = ns_of(c);
		kvt_key key = tt_key_of(c, -1);
		uint64_t len = payload_len(c);
		int rc, dur;

		test_fill(r->buf, len, seed_of(c, version_at(p, w, i)));
		rng = tt_mix64(rng);
		dur = rng % 4 == 0 ? KVT_DUR_POWER_SAFE : KVT_DUR_CRASH_SAFE;
		if ((rng >> 8) % 8 == 0) {
			const void *layers[KVT_MAX_LAYERS];
			uint64_t lb = kvt_layout_layer_bytes(&ns->layout);
			uint32_t l;
			for (l = 0; l < ns->layout.num_layers; l++)
				layers[l] = r->buf + l * lb;
			rc = kvt_put_layers(st, ns, &key, layers,
					    ns->layout.num_layers, dur);
			dur |= 0x100; /* tell the parent which call it was */
		} else {
			rc = kvt_put(st, ns, &key, r->buf, len, dur);
		}
		send_msg(fd, MSG_ACK, w, c, rc, dur); /* the acknowledgement */
		if (rc && rc != KVT_EEXIST) {
			fprintf(stderr, "writer %d: put %llu: %s (%s)\n", w,
				(unsigned long long)c, kvt_strerror(rc), kvt_errmsg());
			_exit(2);
		}
		bytes += len;
	}
	send_msg(fd, MSG_CAP, w, 0, (int32_t)((now_ms() - t0) * 1000), 0);
	for (;;)
		pause(); /* its share written: wait for the kill */
}

/* --- the parent: one cycle's writers --------------------------------------------------- */

typedef struct wstate {
	pid_t pid;
	int fd, eof, killed, ready, capped, failed;
	double t_fork, deadline;
	uint64_t n_acks;
	double cap_ms;
} wstate;

static void on_ack(run *r, const plan *p, wstate *ws, int w, const msg *m)
{
	uint64_t want = seq_at(p, w, ws->n_acks), c = m->c;
	int v = version_at(p, w, ws->n_acks);
	kstate *s;

	if (m->c != want) {
		fail_note(r, &r->t.bad_acks, "writer %d acknowledged %llu, expected %llu",
			  w, (unsigned long long)m->c, (unsigned long long)want);
		return;
	}
	ws->n_acks++;
	s = &r->ks[c];
	if ((m->dur & 0xff) == KVT_DUR_POWER_SAFE)
		r->t.power_safe++;
	if (m->dur & 0x100)
		r->t.layered++;
	if (v == 2)
		r->t.reput++;
	if (m->rc == 0) {
		r->t.acked++;
		if (v == 2)
			fail_note(r, &r->t.reput_accepted,
				  "a put of stored chunk %llu returned 0, not KVT_EEXIST",
				  (unsigned long long)c);
		else if (s->wins++)
			fail_note(r, &r->t.double_win,
				  "two puts of chunk %llu returned 0", (unsigned long long)c);
		else if (s->version >= 0 && s->version != v)
			fail_note(r, &r->t.double_win,
				  "chunk %llu: writer %d told it stored version %d, %d was seen",
				  (unsigned long long)c, w, v, s->version);
		else
			s->version = (int8_t)v;
	} else if (m->rc == KVT_EEXIST) {
		r->t.eexist++;
		if (v != 2 && owner_of(c) >= 0)
			fail_note(r, &r->t.unexpected_eexist,
				  "writer %d: KVT_EEXIST for its own new chunk %llu", w,
				  (unsigned long long)c);
	} else {
		fail_note(r, &r->t.put_errors, "writer %d: put of %llu failed: %s", w,
			  (unsigned long long)c, kvt_strerror(m->rc));
		return;
	}
	s->flags |= K_ACKED;
	live_add(r, c);
}

/* Fork the writers, kill them, collect every acknowledgement.  inflight[w]
 * gets the key writer w was putting at the kill (END if none). */
static void run_writers(run *r, const plan *p, uint64_t inflight[2])
{
	wstate ws[2];
	int w, open_fds = 0;

	memset(ws, 0, sizeof(ws));
	fflush(stdout);
	fflush(stderr);
	for (w = 0; w < p->writers; w++) {
		int pfd[2];
		if (pipe(pfd)) {
			perror("pipe");
			exit(1);
		}
		ws[w].t_fork = now_ms();
		ws[w].pid = fork();
		if (ws[w].pid < 0) {
			perror("fork");
			exit(1);
		}
		if (ws[w].pid == 0) {
			close(pfd[0]);
			if (w == 1)
				close(ws[0].fd);
			writer_run(r, p, w, pfd[1]);
		}
		close(pfd[1]);
		ws[w].fd = pfd[0];
		open_fds++;
		if (p->early[w]) /* during the open: rebuild, sweep, probe */
			ws[w].deadline = ws[w].t_fork +
					 (double)(rnd() % 1000) / 1000.0 * 1.5 * r->open_ms;
	}
	while (open_fds) {
		struct pollfd pf[2];
		int np = 0, idx[2], i;
		double now = now_ms(), next = now + 100;

		for (w = 0; w < p->writers; w++) {
			if (!ws[w].killed && !ws[w].ready && !ws[w].deadline &&
			    now - ws[w].t_fork > 30000) {
				fprintf(stderr, "  writer %d never opened the store\n", w);
				ws[w].deadline = now;
				test_failures++;
			}
			if (!ws[w].killed && ws[w].deadline && now >= ws[w].deadline) {
				kill(ws[w].pid, SIGKILL);
				ws[w].killed = 1;
			}
			if (!ws[w].killed && ws[w].deadline && ws[w].deadline < next)
				next = ws[w].deadline;
			if (!ws[w].eof) {
				pf[np].fd = ws[w].fd;
				pf[np].events = POLLIN;
				idx[np++] = w;
			}
		}
		if (poll(pf, (nfds_t)np, (int)(next - now) + 1) < 0 && errno != EINTR) {
			perror("poll");
			exit(1);
		}
		for (i = 0; i < np; i++) {
			msg m;
			ssize_t k;
			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			w = idx[i];
			k = read(ws[w].fd, &m, sizeof(m));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				ws[w].eof = 1;
				close(ws[w].fd);
				open_fds--;
				continue;
			}
			if (k != (ssize_t)sizeof(m)) { /* whole messages only */
				fprintf(stderr, "  writer %d: short message\n", w);
				test_failures++;
				continue;
			}
			switch (m.kind) {
			case MSG_READY:
				ws[w].ready = 1;
				r->open_ms = 0.8 * r->open_ms + 0.2 * (now_ms() - ws[w].t_fork);
				if (!p->early[w])
					ws[w].deadline = now_ms() + (double)(rnd() % 1001) /
									1000.0 * r->window_ms;
				break;
			case MSG_ACK:
				on_ack(r, p, &ws[w], w, &m);
				break;
			case MSG_CAP:
				ws[w].capped = 1;
				ws[w].cap_ms = m.rc / 1000.0;
				break;
			case MSG_FAIL:
				ws[w].failed = 1;
				fail_note(r, &r->t.child_errors,
					  "writer %d could not open the store: %s", w,
					  kvt_strerror(m.rc));
				break;
			}
		}
	}
	for (w = 0; w < p->writers; w++) {
		int status = 0;
		while (waitpid(ws[w].pid, &status, 0) < 0 && errno == EINTR)
			;
		r->t.kills++;
		if (p->early[w])
			r->t.early_kills++;
		if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) &&
		    !ws[w].failed)
			fail_note(r, &r->t.child_errors,
				  "writer %d ended by itself (status 0x%x)", w, status);
		inflight[w] = ws[w].ready ? seq_at(p, w, ws[w].n_acks) : END;
		if (ws[w].capped)
			r->t.capped++;
		/* Draw the next delays over the time a writer takes to write
		 * its share, so that kills fall among its writes. */
		if (!p->early[w] && ws[w].ready) {
			if (ws[w].capped)
				r->window_ms = 0.7 * r->window_ms + 0.3 * 0.9 * ws[w].cap_ms;
			else if (r->window_ms < 2000)
				r->window_ms *= 1.1;
			if (r->window_ms < 1)
				r->window_ms = 1;
		}
	}
}

/* --- the parent: checks ----------------------------------------------------------------- */

static void mark_bad(run *r, uint64_t c, int err, const char *why)
{
	kstate *s = &r->ks[c];

	if (s->bad_gen != r->gen) {
		s->bad_gen = r->gen;
		if (s->present != r->gen)
			r->bad_unindexed++;
	}
	if (s->flags & K_BAD)
		return;
	s->flags |= K_BAD;
	fail_note(r, &r->t.torn, "chunk %llu (%s) is torn: %s (%s)",
		  (unsigned long long)c, s->flags & K_ACKED ? "acknowledged" : "unacknowledged",
		  kvt_strerror(err), why);
}

static int is_corruption(int rc)
{
	return rc == KVT_EBADMAGIC || rc == KVT_EVERSION || rc == KVT_ETRUNCATED ||
	       rc == KVT_EHDRCSUM || rc == KVT_ECORRUPT || rc == KVT_EMALFORMED;
}

static uint64_t tier_corrupt(kvt_store *st)
{
	kvt_tier_stats ts;

	memset(&ts, 0, sizeof(ts));
	kvt_store_stats(st, 0, &ts);
	return ts.corrupt;
}

/* kvt_get chunk c and hold it to everything known about it. */
static void check_key(run *r, kvt_store *st, uint64_t c)
{
	kstate *s = &r->ks[c];
	kvt_key key = tt_key_of(c, -1);
	uint64_t corrupt0;
	size_t len = 0;
	int rc, v;

	if (s->checked == r->gen || (s->flags & K_LOST))
		return;
	s->checked = r->gen;
	r->t.gets++;
	corrupt0 = tier_corrupt(st);
	rc = kvt_get(st, ns_of(c), &key, r->buf, r->buf_cap, &len);
	if (rc == 0) {
		if (s->flags & K_DELETED) {
			fail_note(r, &r->t.resurrected, "deleted chunk %llu is served again",
				  (unsigned long long)c);
			return;
		}
		v = match_version(c, r->buf, len, r->expect);
		if (v < 0 || !version_allowed(c, v) || (s->version >= 0 && s->version != v)) {
			fail_note(r, &r->t.wrong_bytes,
				  "chunk %llu: served %zu bytes, version %d; stored version %d",
				  (unsigned long long)c, len, v, s->version);
			return;
		}
		if (s->version < 0)
			s->version = (int8_t)v;
		s->flags |= K_SEEN;
		return;
	}
	if (rc != KVT_ENOTFOUND && !is_corruption(rc)) {
		fail_note(r, &r->t.get_errors, "get of chunk %llu: %s (%s)",
			  (unsigned long long)c, kvt_strerror(rc), kvt_errmsg());
		return;
	}
	if (s->flags & K_DELETED)
		return;
	if (is_corruption(rc) || tier_corrupt(st) != corrupt0)
		mark_bad(r, c, is_corruption(rc) ? rc : KVT_ECORRUPT,
			 "the get met a corrupt copy");
	if (s->flags & K_ACKED) {
		s->flags |= K_LOST;
		live_drop(r, c);
		fail_note(r, &r->t.lost, "acknowledged chunk %llu: %s",
			  (unsigned long long)c, kvt_strerror(rc));
	} else if (s->flags & K_SEEN) {
		s->flags |= K_LOST;
		live_drop(r, c);
		fail_note(r, &r->t.vanished, "chunk %llu, read back before, is gone: %s",
			  (unsigned long long)c, kvt_strerror(rc));
	}
}

static int iter_cb(void *arg, const kvt_key *key, uint64_t len)
{
	run *r = arg;
	uint64_t c = tt_counter_of(key, r->n_counters, 0);
	char hex[65];

	if (c == UINT64_MAX) {
		kvt_key_hex(key, hex);
		fail_note(r, &r->t.foreign, "the index serves %s, which no writer put", hex);
		return 0;
	}
	r->ks[c].present = r->gen;
	if (len != payload_len(c))
		fail_note(r, &r->t.wrong_bytes, "chunk %llu indexed with %llu bytes, not %llu",
			  (unsigned long long)c, (unsigned long long)len,
			  (unsigned long long)payload_len(c));
	if (r->ks[c].flags & K_DELETED)
		fail_note(r, &r->t.resurrected, "deleted chunk %llu is indexed again",
			  (unsigned long long)c);
	return 0;
}

static void verify_cb(void *arg, const kvt_key *key, int err, const char *why)
{
	run *r = arg;
	uint64_t c = tt_counter_of(key, r->n_counters, 0);
	char hex[65];

	if (c != UINT64_MAX) {
		mark_bad(r, c, err, why);
		return;
	}
	kvt_key_hex(key, hex);
	fail_note(r, &r->t.torn, "kvt_store_verify: %s is bad: %s (%s)", hex,
		  kvt_strerror(err), why);
}

/* Read the file at `path` (`size` bytes) and verify it the way a reader
 * must: exact length, header, key, namespace, every layer, and the bytes of
 * one writer's version. */
static void check_file(run *r, const char *path, const kvt_key *k, uint64_t c,
		       uint64_t size, int indexed)
{
	kstate *s = &r->ks[c];
	uint64_t off = 0;
	int fd, rc = 0, v;
	const char *why = "";

	r->t.files_checked++;
	if (size != KVT_OBJ_HEADER_BYTES + payload_len(c)) {
		rc = size < KVT_OBJ_HEADER_BYTES + payload_len(c) ? KVT_ETRUNCATED
								  : KVT_EMALFORMED;
		why = "the file's length is not its image's";
		goto bad;
	}
	if ((fd = open(path, O_RDONLY)) < 0)
		return; /* deleted meanwhile: not ours to judge */
	while (off < size) {
		ssize_t n = pread(fd, r->file + off, size - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (uint64_t)n;
	}
	close(fd);
	if (off != size) {
		rc = KVT_ETRUNCATED;
		why = "short read";
		goto bad;
	}
	if ((rc = kvt_obj_decode(r->file, size, r->hdr)) ||
	    (rc = kvt_obj_hdr_expect(r->hdr, ns_of(c), k))) {
		why = kvt_errmsg();
		goto bad;
	}
	v = match_version(c, r->file + KVT_OBJ_HEADER_BYTES, size - KVT_OBJ_HEADER_BYTES,
			  r->expect);
	if (v < 0 || !version_allowed(c, v) || (s->version >= 0 && s->version != v)) {
		fail_note(r, &r->t.wrong_bytes,
			  "file of chunk %llu verifies but holds version %d; stored version %d",
			  (unsigned long long)c, v, s->version);
		return;
	}
	if (s->flags & K_DELETED)
		fail_note(r, &r->t.resurrected, "the file of deleted chunk %llu is back",
			  (unsigned long long)c);
	else if (!indexed) {
		r->t.unindexed++;
		fprintf(stderr, "  %s: a good file of chunk %llu is not indexed\n",
			r->td->name, (unsigned long long)c);
	}
	return;
bad:
	mark_bad(r, c, rc, why);
}

typedef struct scan_ctx {
	run *r;
	int all;
} scan_ctx;

static void scan_one(void *arg, const char *name)
{
	scan_ctx *x = arg;
	run *r = x->r;
	char hex[65], path[PATH_MAX + 300];
	struct stat sb;
	kvt_key k;
	uint64_t c;

	if (strlen(name) != 68 || strcmp(name + 64, ".kvt")) {
		r->t.stray++;
		fprintf(stderr, "  %s: stray file %s in a fan-out directory\n",
			r->td->name, name);
		return;
	}
	memcpy(hex, name, 64);
	hex[64] = '\0';
	if (kvt_key_parse(hex, &k)) {
		r->t.stray++;
		return;
	}
	snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s", r->root, hex, hex + 2, name);
	if (stat(path, &sb))
		return;
	c = tt_counter_of(&k, r->n_counters, 0);
	if (c == UINT64_MAX) {
		fail_note(r, &r->t.foreign, "file %s: no writer put that key", path);
		return;
	}
	if (!x->all && r->ks[c].ino == (uint64_t)sb.st_ino &&
	    !(r->ks[c].flags & K_BAD))
		return; /* published files never change: verified once */
	r->ks[c].ino = (uint64_t)sb.st_ino;
	if (!x->all && r->ks[c].checked == r->gen && (r->ks[c].flags & K_SEEN) &&
	    !(r->ks[c].flags & (K_BAD | K_LOST | K_DELETED)))
		return; /* kvt_get just read this very file whole and right */
	check_file(r, path, &k, c, (uint64_t)sb.st_size, r->ks[c].present == r->gen);
}

/* Count the temporaries the kills left and remove them. */
static void sweep_tmp(run *r, uint64_t kills)
{
	char dir[PATH_MAX + 8], p[PATH_MAX + 300];
	struct dirent *e;
	uint64_t n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/tmp", r->root);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (e->d_name[0] == '.')
			continue;
		n++;
		if (l > 4 && !strcmp(e->d_name + l - 4, ".tmp")) {
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
	}
	closedir(d);
	r->t.tmp_left += n;
	/* One write in flight per writer, plus the O_DIRECT probe of an open */
	if (n > 2 * kills) {
		fprintf(stderr, "  %s: %llu temporaries after %llu kills\n", r->td->name,
			(unsigned long long)n, (unsigned long long)kills);
		test_failures++;
	}
}

/* Reopen the store alone and check everything above.  `p` is the cycle
 * just run (NULL for the final pass, which reads back every chunk and
 * every file). */
static void check_store(run *r, const plan *p, const uint64_t inflight[2],
			uint64_t kills)
{
	int full = !p || r->t.cycles % FULL_EVERY == 0;
	kvt_config *cfg = make_cfg(r, 0);
	kvt_tier_stats ts;
	kvt_store *st;
	scan_ctx sx = { r, !p };
	uint64_t open_corrupt;
	size_t i;
	int err = 0;

	st = cfg ? kvt_store_open(cfg, &err) : NULL;
	kvt_config_free(cfg);
	if (!st) {
		fail_note(r, &r->t.reopen_failed, "reopen failed: %s (%s)",
			  kvt_strerror(err), kvt_errmsg());
		return;
	}
	if (p)
		r->t.reopened++;
	r->gen++;
	r->bad_unindexed = 0;
	memset(&ts, 0, sizeof(ts));
	kvt_store_stats(st, 0, &ts);
	open_corrupt = ts.corrupt;
	r->t.open_corrupt += open_corrupt;
	CHECK_EQ(kvt_store_iterate(st, 0, iter_cb, r), 0);

	if (p) {
		uint64_t c;
		/* this cycle's keys: acknowledged, or published at the kill */
		for (c = p->base; c < p->base + SPAN; c++) {
			kstate *s = &r->ks[c];
			if (s->present == r->gen && !(s->flags & K_ACKED)) {
				if (c == inflight[0] || c == inflight[1])
					r->t.published_unacked++;
				else
					fail_note(r, &r->t.phantom,
						  "chunk %llu is published but nobody was putting it",
						  (unsigned long long)c);
			}
			if ((s->flags & K_ACKED) || s->present == r->gen) {
				check_key(r, st, c);
				if (s->flags & K_SEEN)
					live_add(r, c);
			}
		}
		for (i = 0; i < (size_t)p->n_reput; i++)
			check_key(r, st, p->reput[i]);
	}
	/* every chunk known stored is still indexed; read some, or all */
	for (i = r->live_head; i < r->n_live; i++) {
		uint64_t c = r->live[i];
		if (r->ks[c].flags & (K_DELETED | K_LOST))
			continue;
		if (full || r->ks[c].present != r->gen)
			check_key(r, st, c);
	}
	for (i = 0; i < SAMPLE_OLD && r->n_live > r->live_head; i++) {
		uint64_t c = r->live[r->live_head + rnd() % (r->n_live - r->live_head)];
		if (!(r->ks[c].flags & K_DELETED))
			check_key(r, st, c);
	}
	if (full) {
		kvt_verify_result vr;
		memset(&vr, 0, sizeof(vr));
		CHECK_EQ(kvt_store_verify(st, 0, 0, verify_cb, r, &vr), 0);
		r->t.verify_runs++;
		r->t.verify_checked += vr.checked;
	}
	tt_walk_leaves(r->root, scan_one, &sx);
	/* Bad files the open kept out of the index and that neither the scan
	 * nor kvt_store_verify could name (a tier that removed them) are
	 * torn objects all the same. */
	if (open_corrupt > r->bad_unindexed) {
		r->t.torn += open_corrupt - r->bad_unindexed - 1;
		fail_note(r, &r->t.torn, "the open dropped %llu bad files",
			  (unsigned long long)(open_corrupt - r->bad_unindexed));
	}

	/* keep the store within its budget: delete the oldest chunks */
	while (p && r->live_bytes > LIVE_BUDGET && r->live_head < r->n_live) {
		uint64_t c = r->live[r->live_head++];
		kvt_key key = tt_key_of(c, -1);
		int rc;
		if (r->ks[c].flags & (K_DELETED | K_LOST))
			continue;
		rc = kvt_delete(st, ns_of(c), &key);
		if (rc && rc != KVT_ENOTFOUND) {
			fprintf(stderr, "  delete of chunk %llu: %s (%s)\n",
				(unsigned long long)c, kvt_strerror(rc), kvt_errmsg());
			test_failures++;
		}
		r->ks[c].flags |= K_DELETED;
		live_drop(r, c);
		r->t.deleted++;
	}
	memset(&ts, 0, sizeof(ts));
	kvt_store_stats(st, 0, &ts);
	r->t.evictions += ts.evictions;
	kvt_store_close(st);
	sweep_tmp(r, kills);
}

/* Show that the checks bite: damage three acknowledged chunks' files, a
 * payload byte, a header byte and the last byte cut off, as a torn write
 * or rot would, and check that a reopen counts each as torn and lost.
 * The tally is put back afterwards; a miss is a failure. */
static void self_check(run *r)
{
	tally saved = r->t;
	int failures = test_failures, n = 0, ok, tries = 0;
	uint64_t cs[3];

	while (n < 3 && r->n_live > r->live_head && tries++ < 1000) {
		uint64_t c = r->live[r->live_head + rnd() % (r->n_live - r->live_head)];
		kstate *s = &r->ks[c];
		int i, dup = 0;
		if ((s->flags & (K_DELETED | K_LOST | K_BAD)) != 0 ||
		    (s->flags & (K_ACKED | K_SEEN)) != (K_ACKED | K_SEEN))
			continue;
		for (i = 0; i < n; i++)
			dup |= cs[i] == c;
		if (!dup)
			cs[n++] = c;
	}
	if (n < 3) {
		fprintf(stderr, "  %s: self-check skipped: too few chunks\n", r->td->name);
		return;
	}
	for (int i = 0; i < 3; i++) {
		kvt_key key = tt_key_of(cs[i], -1);
		uint64_t size = KVT_OBJ_HEADER_BYTES + payload_len(cs[i]);
		char hex[65], path[PATH_MAX + 100];
		uint8_t b;
		off_t at = i == 0 ? (off_t)(KVT_OBJ_HEADER_BYTES + payload_len(cs[i]) / 2)
				  : (off_t)100;
		int fd;

		kvt_key_hex(&key, hex);
		snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s.kvt", r->root, hex,
			 hex + 2, hex);
		fd = open(path, O_RDWR);
		CHECK(fd >= 0);
		if (fd < 0)
			return;
		if (i == 2) {
			CHECK_EQ(ftruncate(fd, (off_t)size - 1), 0);
		} else {
			CHECK_EQ(pread(fd, &b, 1, at), 1);
			b ^= 0x20;
			CHECK_EQ(pwrite(fd, &b, 1, at), 1);
		}
		close(fd);
	}
	r->quiet = 1;
	check_store(r, NULL, NULL, 0);
	r->quiet = 0;
	ok = r->t.torn - saved.torn == 3 && r->t.lost - saved.lost == 3 &&
	     r->t.wrong_bytes == saved.wrong_bytes;
	fprintf(stderr, "%s self-check: payload byte, header byte and tail of three "
		"chunks damaged: torn +%llu, lost +%llu, wrong_bytes +%llu (want 3, 3, 0)%s\n",
		r->td->name, (unsigned long long)(r->t.torn - saved.torn),
		(unsigned long long)(r->t.lost - saved.lost),
		(unsigned long long)(r->t.wrong_bytes - saved.wrong_bytes),
		ok ? "" : ": THE CHECKS MISSED DAMAGE");
	r->t = saved;
	test_failures = failures + !ok;
}

/* --- one tier ---------------------------------------------------------------------------- */

static void pick_reputs(run *r, plan *p)
{
	int n = (int)(rnd() % (N_REPUT + 1)), tries = 0;

	p->n_reput = 0;
	while (p->n_reput < n && r->n_live > r->live_head && tries++ < 20) {
		uint64_t c = r->live[r->live_head + rnd() % (r->n_live - r->live_head)];
		kstate *s = &r->ks[c];
		int i, dup = 0;
		if ((s->flags & (K_DELETED | K_LOST | K_BAD)) || !(s->flags & K_SEEN) ||
		    s->version < 0)
			continue;
		for (i = 0; i < p->n_reput; i++)
			dup |= p->reput[i] == c;
		if (!dup)
			p->reput[p->n_reput++] = c;
	}
}

static void print_summary(const run *r, double secs)
{
	const tally *t = &r->t;

	printf("crash %s: cycles=%llu acked=%llu lost=%llu wrong_bytes=%llu torn=%llu "
	       "reopened=%llu | eexist=%llu power_safe=%llu put_layers=%llu "
	       "races=%llu race_keys=%llu double_win=%llu reput=%llu "
	       "published_unacked=%llu phantom=%llu tmp_left=%llu kills=%llu "
	       "early_kills=%llu capped=%llu deleted=%llu resurrected=%llu "
	       "vanished=%llu unindexed=%llu stray=%llu gets=%llu files=%llu "
	       "verified=%llu live_max=%lluMiB %.1fs\n",
	       r->td->name, (unsigned long long)t->cycles, (unsigned long long)t->acked,
	       (unsigned long long)t->lost, (unsigned long long)t->wrong_bytes,
	       (unsigned long long)t->torn, (unsigned long long)t->reopened,
	       (unsigned long long)t->eexist, (unsigned long long)t->power_safe,
	       (unsigned long long)t->layered, (unsigned long long)t->races,
	       (unsigned long long)t->race_keys, (unsigned long long)t->double_win,
	       (unsigned long long)t->reput, (unsigned long long)t->published_unacked,
	       (unsigned long long)t->phantom, (unsigned long long)t->tmp_left,
	       (unsigned long long)t->kills, (unsigned long long)t->early_kills,
	       (unsigned long long)t->capped, (unsigned long long)t->deleted,
	       (unsigned long long)t->resurrected, (unsigned long long)t->vanished,
	       (unsigned long long)t->unindexed, (unsigned long long)t->stray,
	       (unsigned long long)t->gets, (unsigned long long)t->files_checked,
	       (unsigned long long)t->verify_checked,
	       (unsigned long long)(t->live_max >> 20), secs);
	fflush(stdout);
}

static void run_tier(const tier_def *td, const char *base, uint64_t cycles,
		     int verbose)
{
	run *r = calloc(1, sizeof(*r));
	double t0 = now_ms();
	uint64_t k;

	if (!r) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	r->td = td;
	snprintf(r->root, sizeof(r->root), "%s/%s", base, td->name);
	r->n_counters = (cycles + 2) * SPAN;
	r->ks = calloc(r->n_counters, sizeof(*r->ks));
	r->buf_cap = (size_t)max_payload;
	r->file_cap = (size_t)(KVT_OBJ_HEADER_BYTES + max_payload);
	r->buf = malloc(r->buf_cap);
	r->expect = malloc(r->buf_cap);
	r->file = malloc(r->file_cap);
	r->hdr = malloc(sizeof(*r->hdr));
	if (!r->ks || !r->buf || !r->expect || !r->file || !r->hdr) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	for (k = 0; k < r->n_counters; k++)
		r->ks[k].version = -1;
	r->window_ms = 30;
	r->open_ms = 20;

	for (k = 0; k < cycles && test_failures < MAX_FAILURES; k++) {
		uint64_t inflight[2] = { END, END };
		plan p;
		int w;

		memset(&p, 0, sizeof(p));
		p.cycle = (uint32_t)k;
		p.base = (k + 1) * SPAN;
		p.writers = rnd() % 4 == 0 ? 2 : 1;
		for (w = 0; w < p.writers; w++) {
			p.dram[w] = (int)(rnd() % 2);
			p.early[w] = rnd() % 20 == 0;
			p.seed[w] = rnd();
		}
		if (p.writers == 2) {
			r->t.races++;
			r->t.race_keys += N_SHARED;
		}
		pick_reputs(r, &p);
		run_writers(r, &p, inflight);
		r->t.cycles++;
		check_store(r, &p, inflight, (uint64_t)p.writers);
		if (verbose)
			fprintf(stderr, "%s cycle %llu: %d writer(s)%s, window %.1f ms, "
				"live %llu MiB, acked %llu\n", td->name,
				(unsigned long long)k, p.writers,
				p.early[0] || p.early[1] ? " (killed in open)" : "",
				r->window_ms, (unsigned long long)(r->live_bytes >> 20),
				(unsigned long long)r->t.acked);
	}
	check_store(r, NULL, NULL, 0); /* everything read back once more */
	if (r->t.evictions) {
		fprintf(stderr, "  %s: %llu evictions; the test assumes none\n", td->name,
			(unsigned long long)r->t.evictions);
		test_failures++;
	}
	print_summary(r, (now_ms() - t0) / 1e3);
	if (!test_failures)
		self_check(r);
	free(r->ks);
	free(r->live);
	free(r->buf);
	free(r->expect);
	free(r->file);
	free(r->hdr);
	free(r);
}

int main(void)
{
	char base[] = "/var/tmp/kvt_crash_XXXXXX", unused[PATH_MAX];
	const char *env_seed = getenv("KVT_TEST_SEED");
	const char *env_cycles = getenv("KVT_CRASH_CYCLES");
	const char *env_tiers = getenv("KVT_CRASH_TIERS");
	const char *env_verbose = getenv("KVT_CRASH_VERBOSE");
	uint64_t seed;
	size_t i;

	tt_var_tmp(base, unused, sizeof(unused), NEED_FREE);
	seed = env_seed ? strtoull(env_seed, NULL, 0)
			: (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	rng_state = seed;
	if (ns_setup()) {
		fprintf(stderr, "namespaces: %s\n", kvt_errmsg());
		return 1;
	}
	fprintf(stderr, "test_crash: %s, seed %llu (KVT_TEST_SEED to replay)%s, "
		"payloads %u B .. %llu B\n", base, (unsigned long long)seed,
		CRASH_ASAN ? ", AddressSanitizer build" : "",
		(unsigned)kvt_layout_payload_bytes(&ns_tab[0].layout),
		(unsigned long long)max_payload);
	for (i = 0; i < sizeof(TIERS) / sizeof(TIERS[0]); i++) {
		uint64_t cycles = CRASH_ASAN ? CYCLES_ASAN
				  : i == 0 ? CYCLES_NVME : CYCLES_SHARED;
		if (env_tiers && !strstr(env_tiers, TIERS[i].name))
			continue;
		if (env_cycles)
			cycles = strtoull(env_cycles, NULL, 0);
		run_tier(&TIERS[i], base, cycles, env_verbose && *env_verbose == '1');
	}
	if (!test_failures)
		tt_rm_rf(base);
	else
		fprintf(stderr, "directory kept for inspection: %s\n", base);
	TEST_DONE();
}
