/*
 * test_powerloss.c — the NVMe tier under simulated power loss.
 *
 * The tier runs in its pread/pwrite mode (use_io_uring = 0), so its data as
 * well as every file-system call goes through a kvt_io table.  This table
 * ("pl") forwards to kvt_io_posix() and keeps a model of what a power cut
 * may take back, in the worst case POSIX allows:
 *
 *   - a file's data is durable once fsync succeeds on a descriptor of it;
 *     until then every byte written since the last fsync is at risk, and a
 *     file created and never fsynced may come back empty or not at all;
 *   - a directory entry (a file created, a link, a mkdir, a rename's new
 *     name) is durable once its parent directory is fsynced (an fsync of a
 *     directory descriptor, as kvt_io_fsync_parent does); fsync of the file
 *     itself does not make its name durable;
 *   - unlinks are treated as durable at once: a removed name cannot be
 *     brought back from the real file system, so the model covers the loss
 *     of created names (the worst case for losing data) and not the return
 *     of removed ones;
 *   - the tier's ftruncate (cutting the pad of its last O_DIRECT block)
 *     counts as a write: a size change not yet fsynced may come back to
 *     the padded length the write left.
 *
 * Each round opens the tier through the table, arms it to "lose power"
 * after K operations (K drawn per round), and puts chunks at a random mix of
 * KVT_DUR_CACHED, CRASH_SAFE and POWER_SAFE, some of them into a fan-out
 * directory an earlier put of the round created.  From the K-th operation on
 * every call fails with -EIO: the machine is dead to the tier.  The test then
 * closes the tier and applies the loss to the real files: for each file with
 * unsynced data, at random keep it, drop it (truncate to the synced size;
 * a file never synced is emptied or unlinked) or garble it (overwrite random
 * 512-byte sectors of the unsynced range with junk); for each directory
 * entry change not made durable, at random keep it or undo it (unlink the
 * name; remove a directory with all it holds).  It reopens the tier with the
 * plain POSIX table and checks:
 *
 *   - every chunk acknowledged at POWER_SAFE, in this round or an earlier
 *     one, is present and bit-exact, and so is every chunk found intact
 *     after an earlier loss (what survived is on the disk now);
 *   - nothing is served with wrong bytes: each served image either verifies
 *     and holds exactly the payload its key was put with, or fails its
 *     checksums (a CRASH_SAFE or CACHED chunk whose unsynced data was torn:
 *     the store verifies every NVMe read and drops such a chunk through
 *     ops->corrupt, which the test does too) — for a POWER_SAFE chunk that
 *     is a failure;
 *   - keys that were never put are never served.
 *
 * Skipping the fsync of the temporary, or of the directory after the link,
 * in nvme.c makes this test fail.  KVT_TEST_SEED replays a run.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "format/object.h"
#include "tier/nvme.h"
#include "test.h"
#include "tier_test_util.h"

#define ROUNDS 50
#define PUTS_PER_ROUND 32
#define OPS_PER_PUT 9 /* roughly: open, pwrite, fsync, close, link, ... */
#define CAPACITY (16ull << 30)
#define NEED_FREE (1ull << 30)
#define MAX_COUNTER ((uint64_t)ROUNDS * PUTS_PER_ROUND + 16)
#define MAX_FDS 4096
#define MAX_NAMES 4

/* --- chunks -------------------------------------------------------------------- */

enum { NS_SMALL, NS_ODD, NS_MEDIUM, N_NS };
static kvt_ns nss[N_NS];

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state = tt_mix64(rng_state);
	return rng_state;
}

/* Which namespace counter c uses: mostly 16 KiB (image 4 KiB-aligned),
 * some with an odd payload (the file is truncated after the padded write),
 * a few of 1 MiB. */
static const kvt_ns *ns_of(uint64_t c)
{
	uint64_t m = tt_mix64(c ^ 0xABC) % 8;
	return &nss[m < 5 ? NS_SMALL : m < 7 ? NS_ODD : NS_MEDIUM];
}

static uint64_t payload_seed(uint64_t c)
{
	return c * 131 + 7;
}

static int put_chunk(kvt_tier *t, uint64_t c, const kvt_key *key,
		     uint8_t *payload, int dur)
{
	return tt_put_image(t, ns_of(c), key, payload_seed(c), payload, dur);
}

/* --- the power-loss table -------------------------------------------------------- */

typedef struct pl_inode {
	dev_t dev;
	ino_t ino;
	int never_synced;      /* created through us, no fsync since */
	uint64_t synced_size;  /* size at the last fsync (or when first seen) */
	int dirty;
	uint64_t lo, hi;       /* bytes written since the last fsync */
	char *names[MAX_NAMES];
	struct pl_inode *next;
} pl_inode;

enum { CH_CREATE, CH_LINK, CH_MKDIR, CH_RENAME };

typedef struct pl_change {
	int kind;
	char *path, *parent;
} pl_change;

typedef struct pl_io {
	kvt_io io; /* first */
	kvt_io *real;
	int armed;        /* counting towards the loss */
	int dead;         /* power is gone: every call fails */
	uint64_t ops, fail_at;
	pl_inode *inodes;
	struct {
		int kind;   /* 0 unused, 1 file, 2 directory */
		pl_inode *ino;
		char *path;
	} fds[MAX_FDS];
	pl_change *ch;
	size_t n_ch, cap_ch;
	uint64_t dir_fsyncs, file_fsyncs;
} pl_io;

#define PL(io) ((pl_io *)(io))

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return p;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

static char *parent_of(const char *path)
{
	char *p = xstrdup(path), *slash = strrchr(p, '/');

	if (slash && slash != p)
		*slash = '\0';
	return p;
}

/* 1 when this call is refused because the power is gone (or goes now). */
static int pl_lost(pl_io *p)
{
	if (p->dead)
		return 1;
	if (p->armed && ++p->ops >= p->fail_at) {
		p->dead = 1;
		return 1;
	}
	return 0;
}

static pl_inode *pl_find(pl_io *p, dev_t dev, ino_t ino)
{
	pl_inode *n;

	for (n = p->inodes; n; n = n->next)
		if (n->dev == dev && n->ino == ino)
			return n;
	return NULL;
}

static void pl_name_add(pl_inode *n, const char *path)
{
	int i;

	for (i = 0; i < MAX_NAMES; i++)
		if (!n->names[i]) {
			n->names[i] = xstrdup(path);
			return;
		}
}

static void pl_name_del(pl_io *p, const char *path)
{
	pl_inode *n;
	int i;

	for (n = p->inodes; n; n = n->next)
		for (i = 0; i < MAX_NAMES; i++)
			if (n->names[i] && !strcmp(n->names[i], path)) {
				free(n->names[i]);
				n->names[i] = NULL;
			}
}

static void pl_change_add(pl_io *p, int kind, const char *path)
{
	if (p->n_ch == p->cap_ch) {
		p->cap_ch = p->cap_ch ? 2 * p->cap_ch : 64;
		p->ch = realloc(p->ch, p->cap_ch * sizeof(*p->ch));
		if (!p->ch) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
	}
	p->ch[p->n_ch].kind = kind;
	p->ch[p->n_ch].path = xstrdup(path);
	p->ch[p->n_ch].parent = parent_of(path);
	p->n_ch++;
}

/* Drop pending changes matching `path` exactly (an unlink made the name's
 * fate durable) or, with `dir`, whose parent is `path` (it was fsynced). */
static void pl_change_settle(pl_io *p, const char *path, int dir)
{
	size_t i, j = 0;

	for (i = 0; i < p->n_ch; i++) {
		int match = dir ? !strcmp(p->ch[i].parent, path)
				: !strcmp(p->ch[i].path, path);
		if (match) {
			free(p->ch[i].path);
			free(p->ch[i].parent);
		} else {
			p->ch[j++] = p->ch[i];
		}
	}
	p->n_ch = j;
}

static void pl_reset(pl_io *p)
{
	pl_inode *n, *next;
	size_t i;
	int k;

	for (n = p->inodes; n; n = next) {
		next = n->next;
		for (k = 0; k < MAX_NAMES; k++)
			free(n->names[k]);
		free(n);
	}
	p->inodes = NULL;
	for (i = 0; i < p->n_ch; i++) {
		free(p->ch[i].path);
		free(p->ch[i].parent);
	}
	p->n_ch = 0;
	for (k = 0; k < MAX_FDS; k++) {
		free(p->fds[k].path);
		p->fds[k].path = NULL;
		p->fds[k].kind = 0;
		p->fds[k].ino = NULL;
	}
	p->armed = p->dead = 0;
	p->ops = 0;
}

static int pl_open(kvt_io *io, const char *path, int flags, mode_t mode)
{
	pl_io *p = PL(io);
	struct stat st;
	int existed, fd;

	if (pl_lost(p))
		return -EIO;
	existed = lstat(path, &st) == 0;
	fd = p->real->open(p->real, path, flags, mode);
	if (fd < 0)
		return fd;
	if (fd >= MAX_FDS || fstat(fd, &st)) {
		fprintf(stderr, "pl: cannot track fd %d\n", fd);
		exit(1);
	}
	if (S_ISDIR(st.st_mode)) {
		p->fds[fd].kind = 2;
		p->fds[fd].path = xstrdup(path);
		return fd;
	}
	p->fds[fd].kind = 1;
	p->fds[fd].ino = pl_find(p, st.st_dev, st.st_ino);
	if (p->fds[fd].ino && !existed) {
		/* a new file on the inode number of one removed earlier */
		pl_inode *n = p->fds[fd].ino;
		int k;
		for (k = 0; k < MAX_NAMES; k++) {
			free(n->names[k]);
			n->names[k] = NULL;
		}
		n->never_synced = 1;
		n->synced_size = 0;
		n->dirty = 0;
		pl_name_add(n, path);
	} else if (!p->fds[fd].ino) {
		pl_inode *n = calloc(1, sizeof(*n));
		if (!n)
			exit(1);
		n->dev = st.st_dev;
		n->ino = st.st_ino;
		n->never_synced = !existed;
		/* a file that existed before is durable as it is */
		n->synced_size = existed ? (uint64_t)st.st_size : 0;
		n->next = p->inodes;
		p->inodes = n;
		p->fds[fd].ino = n;
		pl_name_add(n, path);
	}
	if (!existed)
		pl_change_add(p, CH_CREATE, path);
	return fd;
}

static int pl_close(kvt_io *io, int fd)
{
	pl_io *p = PL(io);

	if (fd >= 0 && fd < MAX_FDS) {
		free(p->fds[fd].path);
		p->fds[fd].path = NULL;
		p->fds[fd].kind = 0;
		p->fds[fd].ino = NULL;
	}
	if (pl_lost(p)) {
		/* the descriptor goes anyway: a dead machine leaks nothing */
		p->real->close(p->real, fd);
		return -EIO;
	}
	return p->real->close(p->real, fd);
}

static ssize_t pl_pread(kvt_io *io, int fd, void *b, size_t n, off_t off)
{
	pl_io *p = PL(io);

	if (pl_lost(p))
		return -EIO;
	return p->real->pread(p->real, fd, b, n, off);
}

static ssize_t pl_pwrite(kvt_io *io, int fd, const void *b, size_t n,
			 off_t off)
{
	pl_io *p = PL(io);
	ssize_t k;

	if (pl_lost(p))
		return -EIO;
	k = p->real->pwrite(p->real, fd, b, n, off);
	if (k > 0 && fd >= 0 && fd < MAX_FDS && p->fds[fd].kind == 1) {
		pl_inode *ino = p->fds[fd].ino;
		uint64_t lo = (uint64_t)off, hi = (uint64_t)off + (uint64_t)k;
		if (!ino->dirty) {
			ino->lo = lo;
			ino->hi = hi;
		} else {
			ino->lo = lo < ino->lo ? lo : ino->lo;
			ino->hi = hi > ino->hi ? hi : ino->hi;
		}
		ino->dirty = 1;
	}
	return k;
}

static int pl_fsync(kvt_io *io, int fd)
{
	pl_io *p = PL(io);
	struct stat st;
	int rc;

	if (pl_lost(p))
		return -EIO;
	rc = p->real->fsync(p->real, fd);
	if (rc || fd < 0 || fd >= MAX_FDS)
		return rc;
	if (p->fds[fd].kind == 2) {
		p->dir_fsyncs++;
		pl_change_settle(p, p->fds[fd].path, 1);
	} else if (p->fds[fd].kind == 1 && !fstat(fd, &st)) {
		pl_inode *ino = p->fds[fd].ino;
		p->file_fsyncs++;
		ino->never_synced = 0;
		ino->dirty = 0;
		ino->synced_size = (uint64_t)st.st_size;
	}
	return rc;
}

static int pl_ftruncate(kvt_io *io, int fd, off_t len)
{
	pl_io *p = PL(io);
	int rc;

	if (pl_lost(p))
		return -EIO;
	/* The tier cuts right after its write, so the inode is dirty and
	 * its written range (up to the padded length) already recorded. */
	rc = p->real->ftruncate(p->real, fd, len);
	return rc;
}

static int pl_statx(kvt_io *io, int fd, unsigned int mask, struct statx *sx)
{
	pl_io *p = PL(io);

	if (pl_lost(p))
		return -EIO;
	return p->real->statx(p->real, fd, mask, sx);
}

static int pl_fstat(kvt_io *io, int fd, struct stat *st)
{
	pl_io *p = PL(io);

	if (pl_lost(p))
		return -EIO;
	return p->real->fstat(p->real, fd, st);
}

static int pl_stat(kvt_io *io, const char *path, struct stat *st)
{
	pl_io *p = PL(io);

	if (pl_lost(p))
		return -EIO;
	return p->real->stat(p->real, path, st);
}

static int pl_link(kvt_io *io, const char *from, const char *to)
{
	pl_io *p = PL(io);
	struct stat st;
	pl_inode *n;
	int rc;

	if (pl_lost(p))
		return -EIO;
	rc = p->real->link(p->real, from, to);
	if (rc)
		return rc;
	if (!lstat(to, &st) && (n = pl_find(p, st.st_dev, st.st_ino)))
		pl_name_add(n, to);
	pl_change_add(p, CH_LINK, to);
	return 0;
}

static int pl_rename(kvt_io *io, const char *from, const char *to)
{
	pl_io *p = PL(io);
	struct stat st;
	pl_inode *n;
	int rc;

	if (pl_lost(p))
		return -EIO;
	rc = p->real->rename(p->real, from, to);
	if (rc)
		return rc;
	/* the old name's removal counts as durable, like an unlink */
	pl_name_del(p, from);
	pl_change_settle(p, from, 0);
	if (!lstat(to, &st) && (n = pl_find(p, st.st_dev, st.st_ino)))
		pl_name_add(n, to);
	pl_change_add(p, CH_RENAME, to);
	return 0;
}

static int pl_unlink(kvt_io *io, const char *path)
{
	pl_io *p = PL(io);
	int rc;

	if (pl_lost(p))
		return -EIO;
	rc = p->real->unlink(p->real, path);
	if (rc)
		return rc;
	pl_name_del(p, path);
	pl_change_settle(p, path, 0);
	return 0;
}

static int pl_mkdir(kvt_io *io, const char *path, mode_t mode)
{
	pl_io *p = PL(io);
	int rc;

	if (pl_lost(p))
		return -EIO;
	rc = p->real->mkdir(p->real, path, mode);
	if (!rc)
		pl_change_add(p, CH_MKDIR, path);
	return rc;
}

static int pl_readdir(kvt_io *io, const char *path, kvt_io_dirent_fn fn,
		      void *arg)
{
	pl_io *p = PL(io);

	if (pl_lost(p))
		return -EIO;
	return p->real->readdir(p->real, path, fn, arg);
}

static int pl_touch(kvt_io *io, const char *path)
{
	pl_io *p = PL(io);

	if (pl_lost(p))
		return -EIO;
	return p->real->touch(p->real, path);
}

/* --- applying the loss to the real files ------------------------------------------ */

typedef struct loss_stats {
	uint64_t kept, dropped, garbled, unpadded, sectors;
	uint64_t names_kept, names_undone, dirs_undone;
} loss_stats;

/* What happened to a path, for the report when a chunk goes missing. */
static char loss_log[1 << 16];
static size_t loss_log_len;

/* Names and directories the loss took back, to name the cause. */
static char *undone[PUTS_PER_ROUND * 16];
static int undone_kind[PUTS_PER_ROUND * 16];
static size_t n_undone;

static void undone_clear(void)
{
	while (n_undone)
		free(undone[--n_undone]);
}

/* The undone change that removed `path` (itself or a directory above),
 * or NULL. */
static const char *undone_cause(const char *path, int *kind)
{
	size_t i, best_len = 0;
	const char *best = NULL;

	for (i = 0; i < n_undone; i++) {
		size_t n = strlen(undone[i]);
		if (!strncmp(path, undone[i], n) &&
		    (path[n] == '\0' || path[n] == '/') && n > best_len) {
			best = undone[i];
			best_len = n;
			*kind = undone_kind[i];
		}
	}
	return best;
}

static void log_loss(const char *what, const char *path)
{
	int n = snprintf(loss_log + loss_log_len,
			 sizeof(loss_log) - loss_log_len, "    %s %s\n", what,
			 path);
	if (n > 0 && loss_log_len + (size_t)n < sizeof(loss_log))
		loss_log_len += (size_t)n;
}

static const char *inode_name(const pl_inode *n)
{
	int i;

	for (i = 0; i < MAX_NAMES; i++)
		if (n->names[i])
			return n->names[i];
	return NULL;
}

static void garble(const char *path, const pl_inode *n, loss_stats *ls)
{
	struct stat st;
	uint64_t lo, hi, s, first, last, hit = 0;
	uint8_t junk[512];
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st)) {
		close(fd);
		return;
	}
	lo = n->lo;
	hi = n->hi < (uint64_t)st.st_size ? n->hi : (uint64_t)st.st_size;
	if (lo >= hi) {
		close(fd);
		return;
	}
	first = lo / 512;
	last = (hi - 1) / 512;
	for (s = first; s <= last; s++) {
		/* about one sector in four, and at least one */
		if (rnd() % 4 && !(s == last && !hit))
			continue;
		uint64_t a = s * 512 < lo ? lo : s * 512;
		uint64_t b = (s + 1) * 512 > hi ? hi : (s + 1) * 512;
		test_fill(junk, sizeof(junk), rnd());
		if (pwrite(fd, junk, (size_t)(b - a), (off_t)a) < 0)
			break;
		hit++;
	}
	ls->sectors += hit;
	close(fd);
}

static void apply_loss(pl_io *p, loss_stats *ls)
{
	pl_inode *n;
	size_t i;

	loss_log_len = 0;
	loss_log[0] = '\0';
	undone_clear();
	for (n = p->inodes; n; n = n->next) {
		const char *name = inode_name(n);
		struct stat st;
		int choice;

		if (!name || (!n->dirty && !n->never_synced))
			continue;
		if (stat(name, &st))
			continue;
		choice = (int)(rnd() % 3);
		if (choice == 0) {
			/* keep: but an unsynced ftruncate may be lost and
			 * leave the padded length of the write */
			ls->kept++;
			if (n->dirty && n->hi > (uint64_t)st.st_size &&
			    rnd() % 2) {
				if (!truncate(name, (off_t)n->hi))
					ls->unpadded++;
				log_loss("data kept, length back to the padded write:",
					 name);
			} else {
				log_loss("data kept:", name);
			}
		} else if (choice == 1) {
			ls->dropped++;
			if (n->never_synced && rnd() % 2) {
				int k;
				for (k = 0; k < MAX_NAMES; k++)
					if (n->names[k])
						unlink(n->names[k]);
				log_loss("never synced, all names removed:", name);
			} else {
				if (truncate(name, (off_t)n->synced_size))
					fprintf(stderr, "truncate %s: %s\n", name,
						strerror(errno));
				log_loss(n->never_synced
						 ? "never synced, emptied:"
						 : "unsynced writes dropped:",
					 name);
			}
		} else {
			ls->garbled++;
			if (n->dirty)
				garble(name, n, ls);
			log_loss("unsynced range garbled:", name);
		}
	}
	/* newest first, so that undoing a directory after its contents, or
	 * the contents after the directory, both end the same */
	for (i = p->n_ch; i-- > 0;) {
		pl_change *c = &p->ch[i];
		if (rnd() % 2) {
			ls->names_kept++;
			continue;
		}
		ls->names_undone++;
		if (n_undone < sizeof(undone) / sizeof(undone[0])) {
			undone_kind[n_undone] = c->kind;
			undone[n_undone++] = xstrdup(c->path);
		}
		if (c->kind == CH_MKDIR) {
			ls->dirs_undone++;
			tt_rm_rf(c->path);
			log_loss("mkdir undone (not fsynced in its parent):",
				 c->path);
		} else {
			unlink(c->path);
			log_loss("name undone (parent not fsynced):", c->path);
		}
	}
}

/* --- the test ------------------------------------------------------------------- */

enum { ST_NONE, ST_ACKED, ST_FAILED };

typedef struct model {
	uint8_t *state;     /* per counter: ST_* */
	uint8_t *dur;       /* per counter: durability asked */
	uint16_t *fan;      /* per counter: the fan-out bytes used */
	uint8_t *must;      /* per counter: must be present and intact */
	uint8_t *expect;    /* payload buffer */
	uint64_t next;      /* next counter */
	uint64_t acked[3], power_safe_total, torn_detected, torn_at_open;
	uint64_t survivors_lost;
} model;

static const char *dur_name(int d)
{
	return d == KVT_DUR_POWER_SAFE ? "POWER_SAFE"
	       : d == KVT_DUR_CRASH_SAFE ? "CRASH_SAFE" : "CACHED";
}

/* One round of puts through `p` until the power goes (or the round ends:
 * then it goes at the end). */
static void workload(kvt_tier *t, pl_io *p, model *m, uint8_t *payload)
{
	int fans[PUTS_PER_ROUND], n_fans = 0, i;

	for (i = 0; i < PUTS_PER_ROUND && !p->dead; i++) {
		uint64_t c = m->next++;
		int dur = (int)(rnd() % 3), fan, rc;
		kvt_key key;

		/* one put in three goes to a fan-out directory this round
		 * already used (maybe created by a weaker put) */
		if (n_fans && rnd() % 3 == 0)
			fan = fans[rnd() % (uint64_t)n_fans];
		else
			fan = (int)(rnd() & 0xffff);
		fans[n_fans++] = fan;
		key = tt_key_of(c, fan);
		m->dur[c] = (uint8_t)dur;
		m->fan[c] = (uint16_t)fan;
		rc = put_chunk(t, c, &key, payload, dur);
		if (!rc) {
			m->state[c] = ST_ACKED;
			m->acked[dur]++;
			if (dur == KVT_DUR_POWER_SAFE) {
				m->must[c] = 1;
				m->power_safe_total++;
			}
		} else {
			m->state[c] = ST_FAILED;
			if (!p->dead) {
				fprintf(stderr, "put %llu at %s failed before the "
					"power went: %s (%s)\n",
					(unsigned long long)c, dur_name(dur),
					kvt_strerror(rc), kvt_errmsg());
				test_failures++;
			}
		}
	}
	p->dead = 1; /* the rest of the round never happens */
}

typedef struct vctx {
	kvt_tier *t;
	model *m;
	uint64_t count, intact, torn, unknown;
} vctx;

/* Check one served chunk: 0 intact, 1 torn (fails its checks: dropped
 * through ops->corrupt, as the store does), -1 wrong bytes that pass the
 * checks, 2 not served after all. */
static int check_served(kvt_tier *t, model *m, const kvt_key *key,
			uint64_t c, int *tier_rc)
{
	const kvt_ns *ns = ns_of(c);
	uint64_t len = tt_img_len(ns);
	kvt_tier_rbuf *r;
	kvt_obj_hdr *h;
	int rc, res;

	*tier_rc = rc = t->ops->get(t, key, &r);
	if (rc == KVT_ECORRUPT)
		return 1; /* the tier's own header/length checks caught it */
	if (rc)
		return 2; /* gone (read error, vanished file): not served */
	h = xmalloc(sizeof(*h));
	if (r->n_iov != 1 || r->len != len) {
		res = 1;
	} else if ((rc = kvt_obj_decode(r->iov[0].iov_base, (size_t)len, h))) {
		*tier_rc = rc;
		res = 1;
	} else if (kvt_obj_hdr_expect(h, ns, key)) {
		res = -1;
	} else {
		test_fill(m->expect, len - KVT_OBJ_HEADER_BYTES, payload_seed(c));
		res = memcmp((const uint8_t *)r->iov[0].iov_base +
				     KVT_OBJ_HEADER_BYTES,
			     m->expect, len - KVT_OBJ_HEADER_BYTES)
			      ? -1
			      : 0;
	}
	free(h);
	/* what the store does with an image that fails verification */
	if (res == 1)
		t->ops->corrupt(t, r);
	t->ops->release(t, r);
	return res;
}

static int verify_fn(void *arg, const kvt_key *key, uint64_t len)
{
	vctx *x = arg;
	uint64_t c = tt_counter_of(key, MAX_COUNTER, 1);
	int res, trc;

	(void)len;
	x->count++;
	if (c == UINT64_MAX || c >= x->m->next ||
	    x->m->state[c] == ST_NONE) {
		char hex[65];
		kvt_key_hex(key, hex);
		fprintf(stderr, "  served key %s was never put\n", hex);
		x->unknown++;
		test_failures++;
		return 0;
	}
	res = check_served(x->t, x->m, key, c, &trc);
	if (res == 0) {
		x->intact++;
		return 0;
	}
	if (res == 2)
		return 0; /* not served after all */
	if (res < 0) {
		fprintf(stderr, "  chunk %llu (%s, %s) served with wrong bytes "
			"that pass its checks\n", (unsigned long long)c,
			dur_name(x->m->dur[c]),
			x->m->state[c] == ST_ACKED ? "acknowledged" : "failed");
		test_failures++;
		return 0;
	}
	/* torn: only allowed for what was never made power-safe */
	x->torn++;
	if (x->m->must[c]) {
		fprintf(stderr, "  chunk %llu (%s, acknowledged) is torn: %s\n",
			(unsigned long long)c, dur_name(x->m->dur[c]),
			kvt_strerror(trc));
		test_failures++;
	}
	return 0;
}

static int run_round(const char *root, pl_io *p, model *m, uint8_t *payload,
		     uint64_t round, loss_stats *ls)
{
	kvt_nvme_opts o = { .path = root, .capacity = CAPACITY,
			    .queue_depth = 8, .use_io_uring = 0,
			    .io = &p->io };
	kvt_tier_stats st;
	kvt_tier *t = NULL;
	uint64_t c, first = m->next, missing = 0, max_ops;
	vctx x;
	int rc;

	/* open through the table (its directories are tracked), then arm */
	pl_reset(p);
	rc = kvt_nvme_open(&o, &t);
	CHECK_EQ(rc, 0);
	if (rc)
		return -1;
	max_ops = (uint64_t)PUTS_PER_ROUND * OPS_PER_PUT;
	p->fail_at = 1 + rnd() % (max_ops + max_ops / 4);
	p->armed = 1;
	workload(t, p, m, payload);
	t->ops->close(t);
	apply_loss(p, ls);

	/* reboot: plain POSIX table */
	o.io = NULL;
	o.use_io_uring = (int)(round & 1);
	rc = kvt_nvme_open(&o, &t);
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "  reopen after the loss: %s\n", kvt_errmsg());
		return -1;
	}
	t->ops->stats(t, &st);
	m->torn_at_open += st.corrupt;

	memset(&x, 0, sizeof(x));
	x.t = t;
	x.m = m;
	CHECK_EQ(t->ops->iterate(t, verify_fn, &x), 0);
	m->torn_detected += x.torn;

	for (c = 0; c < m->next; c++) {
		kvt_key k = tt_key_of(c, m->fan[c]);
		if (!m->must[c] || t->ops->exists(t, &k) == 1)
			continue;
		missing++;
		fprintf(stderr, "  chunk %llu (%s, %s round %llu, fan-out %02x/%02x) "
			"is missing after the loss\n", (unsigned long long)c,
			dur_name(m->dur[c]),
			c >= first ? "acknowledged this" : "present after",
			(unsigned long long)round, m->fan[c] >> 8,
			m->fan[c] & 0xff);
		{
			char path[PATH_MAX + 80], hex[65];
			const char *why;
			int kind = 0;
			kvt_key_hex(&k, hex);
			snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s.kvt", root,
				 hex, hex + 2, hex);
			why = undone_cause(path, &kind);
			if (why && kind == CH_MKDIR)
				fprintf(stderr, "    cause: directory %s was made by "
					"an earlier put that was not POWER_SAFE "
					"and its entry in its parent was never "
					"fsynced; this put fsynced the file and "
					"%s, not the directories above\n",
					why, why);
			else if (why)
				fprintf(stderr, "    cause: its name %s was never "
					"made durable (no fsync of its "
					"directory)\n", why);
			else
				fprintf(stderr, "    cause: its file lost its "
					"unsynced data (no fsync of the file "
					"before the acknowledgement)\n");
		}
		test_failures++;
	}
	if (missing) {
		fprintf(stderr, "  what the loss did this round (%llu tracked "
			"operations, power lost at %llu):\n%s",
			(unsigned long long)p->ops,
			(unsigned long long)p->fail_at, loss_log);
	}
	/* what survived intact is on the disk now: it must stay */
	for (c = 0; c < m->next; c++) {
		kvt_key k = tt_key_of(c, m->fan[c]);
		if (!m->must[c] && m->state[c] != ST_NONE &&
		    t->ops->exists(t, &k) == 1)
			m->must[c] = 1;
	}
	t->ops->close(t);
	return missing ? -1 : 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void)
{
	char base[] = "/var/tmp/kvt_powerloss_XXXXXX", root[PATH_MAX];
	static pl_io p = {
		{ pl_open, pl_close, pl_pread, pl_pwrite, pl_fsync, pl_fstat,
		  pl_stat, pl_link, pl_rename, pl_unlink, pl_mkdir, pl_readdir,
		  pl_touch, NULL, pl_ftruncate, pl_statx },
	};
	const char *env = getenv("KVT_TEST_SEED");
	uint64_t seed, round, c, present = 0;
	loss_stats ls;
	model m;
	uint8_t *payload;
	double t0 = now_s();
	int dfd;

	/* the tier logs every torn file it drops; this test makes hundreds
	 * on purpose (KVTIER_LOG=warn shows them) */
	setenv("KVTIER_LOG", "error", 0);
	tt_var_tmp(base, root, sizeof(root), NEED_FREE);
	/* the root itself is durable before the first round */
	if (mkdir(root, 0755) || (dfd = open(base, O_RDONLY | O_DIRECTORY)) < 0) {
		fprintf(stderr, "cannot create %s\n", root);
		return 1;
	}
	fsync(dfd);
	close(dfd);

	seed = env ? strtoull(env, NULL, 0)
		   : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	rng_state = seed;
	fprintf(stderr, "test_powerloss: %s, seed %llu (KVT_TEST_SEED to replay), "
		"%d rounds\n", root, (unsigned long long)seed, ROUNDS);

	tt_ns_make(&nss[NS_SMALL], 2, 2, 64, 16, KVT_DTYPE_BF16, 0, 1); /* 16 KiB */
	/* fp8 with scales: 3 x (2*16*2*64 + 40) bytes, not 4 KiB-aligned */
	tt_ns_make(&nss[NS_ODD], 3, 2, 64, 16, KVT_DTYPE_FP8_E4M3, 40, 2);
	tt_ns_make(&nss[NS_MEDIUM], 4, 4, 64, 256, KVT_DTYPE_BF16, 0, 3); /* 1 MiB */
	CHECK_EQ(tt_img_len(&nss[NS_SMALL]), 4096 + (16u << 10));
	CHECK(tt_img_len(&nss[NS_ODD]) % 4096 != 0);
	CHECK_EQ(tt_img_len(&nss[NS_MEDIUM]), 4096 + (1u << 20));

	memset(&m, 0, sizeof(m));
	memset(&ls, 0, sizeof(ls));
	m.state = calloc(MAX_COUNTER, 1);
	m.dur = calloc(MAX_COUNTER, 1);
	m.fan = calloc(MAX_COUNTER, sizeof(uint16_t));
	m.must = calloc(MAX_COUNTER, 1);
	m.expect = xmalloc(tt_img_len(&nss[NS_MEDIUM]));
	payload = xmalloc(tt_img_len(&nss[NS_MEDIUM]));
	if (!m.state || !m.dur || !m.fan || !m.must)
		return 1;
	p.real = kvt_io_posix();

	for (round = 0; round < ROUNDS; round++) {
		if (run_round(root, &p, &m, payload, round, &ls)) {
			fprintf(stderr, "round %llu failed (replay with "
				"KVT_TEST_SEED=%llu)\n", (unsigned long long)round,
				(unsigned long long)seed);
			break;
		}
		if (test_failures)
			break;
	}
	for (c = 0; c < m.next; c++)
		present += m.must[c];
	fprintf(stderr,
		"test_powerloss: %llu rounds, %llu puts; acknowledged %llu CACHED, "
		"%llu CRASH_SAFE, %llu POWER_SAFE; %llu chunks on disk\n",
		(unsigned long long)round, (unsigned long long)m.next,
		(unsigned long long)m.acked[0], (unsigned long long)m.acked[1],
		(unsigned long long)m.acked[2], (unsigned long long)present);
	fprintf(stderr,
		"  loss applied: files kept %llu (%llu back to padded length), "
		"dropped %llu, garbled %llu (%llu sectors); names kept %llu, "
		"undone %llu (%llu directories); %llu file and %llu directory "
		"fsyncs seen\n",
		(unsigned long long)ls.kept, (unsigned long long)ls.unpadded,
		(unsigned long long)ls.dropped, (unsigned long long)ls.garbled,
		(unsigned long long)ls.sectors, (unsigned long long)ls.names_kept,
		(unsigned long long)ls.names_undone,
		(unsigned long long)ls.dirs_undone,
		(unsigned long long)p.file_fsyncs,
		(unsigned long long)p.dir_fsyncs);
	fprintf(stderr,
		"  torn chunks (never POWER_SAFE): %llu dropped by the tier at "
		"open, %llu failed verification and were dropped; %.1f s\n",
		(unsigned long long)m.torn_at_open,
		(unsigned long long)m.torn_detected, now_s() - t0);
	pl_reset(&p);
	undone_clear();
	free(p.ch);
	if (!test_failures)
		tt_rm_rf(base);
	else
		fprintf(stderr, "directory kept for inspection: %s\n", base);
	free(m.state);
	free(m.dur);
	free(m.fan);
	free(m.must);
	free(m.expect);
	free(payload);
	TEST_DONE();
}
