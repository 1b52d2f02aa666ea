/*
 * nvme.c — one object image per file on a local disk, O_DIRECT + io_uring.
 *
 * Publication is fsdir's: write <root>/tmp/<hex>.<pid>.<n>.tmp, link(2) it to
 * <root>/<k0>/<k1>/<hex>.kvt (EEXIST: another writer won, first wins),
 * unlink the temporary.  KVT_DUR_POWER_SAFE adds an fsync of the temporary
 * before the link and of the directory after it.
 *
 * O_DIRECT wants the buffer address, file offset and length aligned to the
 * device's direct-I/O alignment (statx STATX_DIOALIGN, else 4096).  Images
 * are 4096 + payload bytes, so the last block of a write is padded with
 * zeroes and the file is then truncated to the exact image length: files
 * are byte-identical to fsdir's, and readers take the length from the
 * header's payload_len, never from a rounded size.  That last block is
 * written through the page cache (a second descriptor without O_DIRECT),
 * so that the cut finds it there and does not read it back from the disk.
 *
 * The ring.  One io_uring ring per tier, shared by every calling thread.
 * The calling thread submits its own segments and waits for its own
 * completions; no thread is started.  `ring_mu` guards the submission queue
 * and the counters; it is never held while the kernel moves data.  Exactly
 * one waiting thread at a time (the "reaper") sleeps in io_uring_wait_cqe
 * with the mutex dropped, then takes the mutex, hands every completion it
 * finds to the request that owns it (user_data points at the segment) and
 * wakes the others.  So completions of many requests are reaped by whoever
 * is waiting, without a thread per request, and a 32 MiB image keeps
 * queue_depth segments in flight.  The ring-wide in-flight count never
 * exceeds queue_depth, so the completion queue (2 × depth) cannot overflow.
 *
 * The index is findex.c's (hash table + LRU list under `ix.mu`, never held
 * across a system call; files of evicted entries are unlinked after it is
 * dropped).  Capacity counts each file's length rounded up to the alignment,
 * plus the writes in flight.
 *
 * Spares.  kvtierd's SET of a key replaces a version: a put makes a file and
 * the old version's del removes one.  On ext4 making a file is the inode
 * allocator's search (find_inode_bit; without a journal, recently_deleted
 * reads the inode table for every inode freed lately) and an allocation of
 * its blocks, and removing one frees them (with -o discard and no journal,
 * discarded before unlink returns): more time than the write itself
 * (docs/DAEMON.md, "Benchmark").  So del moves the file it deletes into
 * tmp/ under a temporary's name (rename(2)) and keeps it as a spare, and
 * the next put writes its image into a spare instead of a fresh temporary:
 * no inode made or freed, and the blocks it reuses are overwritten, not
 * allocated.  From there publication is the same (write, cut to the exact
 * length, fsync for POWER_SAFE, link, unlink the temporary name), so a
 * spare gets a final name only once it holds the whole new image,
 * byte-identical to a fresh file.
 * Two hazards, both closed:
 *
 *   - a read that opened the file before its deletion would see it being
 *     overwritten.  Reads count themselves in `reading` from before their
 *     index lookup to the close of their file, and a put takes only a
 *     spare that is `clear`: every spare in the pool becomes clear when a
 *     put sees `reading` at 0 (a read that found a spare's entry began
 *     before the del, so it is counted until it closes the file);
 *   - a power loss after the overwrite began but before the rename out of
 *     the tree reached the disk would leave the old name on a torn image.
 *     A put takes only a spare that is settled: the directory it was taken
 *     from has been fsynced since.  The settlers, NV_SETTLERS threads
 *     started with the first spare, do that off every request's path, each
 *     fsyncing one directory at a time, so that the device's cache flushes
 *     serve several at once.  Torn writes stay in tmp/ (docs/NVME.md).
 *
 * Spares count against the capacity (in ix.reserved) while they wait, at
 * most NV_SPARES files and 1/NV_SPARE_SHARE of the capacity.  A put takes
 * its spare (the smallest that holds the image, else the largest) when it
 * reserves room, so the spare's room is what it uses; a put that needs
 * more unlinks the other spares before it evicts anything.  Close unlinks
 * them, and a crash leaves them in tmp/ with the temporaries.  The ring
 * below starts no thread; the settlers are the tier's only ones.
 *
 * Every put and get moves the image through one aligned buffer from the
 * tier's kvt_abuf_pool (common/abuf.h: why they are cached, and how many),
 * but a put of an image already whole in another tier's pages
 * (put_begin_from: the store's write-through and demotion from DRAM, and
 * every put after the first tier's), which is written from those pages,
 * gathered into one writev (a file being made takes its writes one at a
 * time in the kernel: a submission per page would only queue).
 */
#include "tier/nvme.h"
#include "tier/fanout.h"
#include "tier/findex.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/uio.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/abuf.h"
#include "common/err.h"
#include "common/log.h"
#include "format/object.h"

#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#endif

#define NV_DEFAULT_ALIGN 4096u
#define NV_MAX_ALIGN (1u << 16)
#define NV_NAME_MAX 128u /* "/tmp/" + 64 hex + pid + counter + ".tmp" */
/* Temporaries older than this (seconds) are left over from a crash. */
#define NV_TMP_GRACE_S (15 * 60)
/* The I/O buffers (common/abuf.h): every request in flight has one, and
 * a few more are kept for the next; at most this many bytes idle. */
#define NV_BUF_SPARE 4u
#define NV_BUF_MAX_CACHED (1ull << 30)
/* The most one submission writes (its result is an int). */
#define NV_MAX_WRITE (1ull << 30)
/* Spares (see the top): at most this many files, this share of the
 * capacity (1/n) in them, and this many threads settling them. */
#define NV_SPARES 16u
#define NV_SPARE_SHARE 16u
#define NV_SETTLERS 4u

/* The index entry: len is the exact image, charge that rounded up to the
 * alignment, which is what capacity counts. */
typedef struct kvt_findex_ent nv_ent;

typedef struct nv_req nv_req;

/* The file of a deleted image, kept in tmp/ for a put to overwrite. */
enum { NV_UNSETTLED, NV_SETTLING, NV_SETTLED };
typedef struct nv_spare {
	char name[NV_NAME_MAX]; /* below the root: "/tmp/spare.<pid>.<n>.tmp" */
	kvt_key key;            /* the image it held: whose directory to fsync */
	uint64_t id;            /* which spare, wherever it is in the array */
	uint64_t size;          /* its length */
	uint64_t charge;        /* that rounded up: in ix.reserved meanwhile */
	int state;              /* NV_UNSETTLED until its directory is fsynced */
	int clear;              /* no read that may hold it open is left */
} nv_spare;

/* One submission: `len` bytes at file offset `off` from or into `p` (a
 * slice of a request's buffer, or of the segments it writes from). */
typedef struct nv_seg {
	nv_req *req;
	uint8_t *p;
	uint64_t off;
	uint32_t len;
	int res;
	/* A write gathered from pieces (NULL: p alone): one writev. */
	const struct iovec *iov;
	int n_iov;
} nv_seg;

struct nv_req {
	int fd;
	int write;
	nv_seg *segs;
	uint32_t n, next, pending;
};

typedef struct nvme {
	kvt_tier base;
	kvt_io *io;
	char *root;
	uint32_t align, seg_bytes, qd;
	int direct;    /* files opened with O_DIRECT */
	int uring;     /* ring below is live */
	int read_only; /* opened for reading: no put, nothing written */
	atomic_uint_fast64_t borrowed;
	kvt_fanout durable; /* directories of the tree made durable */

	pthread_mutex_t ring_mu; /* guards the SQ, inflight, reaping */
	pthread_cond_t ring_cv;
	struct io_uring ring;
	uint32_t inflight;
	int reaping;

	kvt_abuf_pool bufs; /* aligned I/O buffers, align-aligned */

	struct kvt_findex ix; /* the index, capacity and counters */

	/* Spares (see the top), under ix.mu; `reading` counts the reads
	 * between their index lookup and the close of their file. */
	nv_spare spares[NV_SPARES];
	uint32_t n_spares;
	uint64_t spare_bytes; /* their charges */
	uint64_t spare_seq;   /* the last id given */
	atomic_uint reading;
	/* The settlers, started with the first spare: each fsyncs the old
	 * directory of one unsettled spare at a time (settle_cv, under
	 * ix.mu, wakes them; settle_stop ends them). */
	pthread_cond_t settle_cv;
	pthread_t settlers[NV_SETTLERS];
	uint32_t n_settlers;
	int settle_stop;
	int spares_off; /* a directory fsync failed: no more spares */
} nvme;

typedef struct nv_wbuf {
	kvt_tier_wbuf w;
	struct iovec iov;
	uint64_t disk; /* reserved bytes */
	uint8_t *buf;  /* aligned, at least disk bytes long; with src, one
			* aligned block for the image's last partial one */
	size_t cap;    /* of buf */
	/* put_begin_from: the image, written from where it lies. */
	const struct iovec *src;
	int n_src;
	nv_spare spare; /* the file to write (id 0: a fresh temporary) */
} nv_wbuf;

typedef struct nv_rbuf {
	kvt_tier_rbuf r;
	struct iovec iov;
	size_t cap;   /* of iov_base */
	uint64_t gen; /* the index entry it was read through */
} nv_rbuf;

static uint64_t nv_round(const nvme *t, uint64_t n)
{
	return (n + t->align - 1) & ~(uint64_t)(t->align - 1);
}

/* --- index ----------------------------------------------------------------- */

static void nv_reap(nvme *t, nv_ent *victims)
{
	kvt_findex_reap(&t->base, victims, t->io, t->root, "nvme");
}

/* --- data path ------------------------------------------------------------- */

/* Run every segment of `q` on the ring; see the comment at the top. */
static void nv_ring_run(nvme *t, nv_req *q)
{
	struct io_uring_cqe *cqe;

	pthread_mutex_lock(&t->ring_mu);
	for (;;) {
		int queued = 0;

		while (q->next < q->n && t->inflight < t->qd) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
			nv_seg *s = &q->segs[q->next];
			if (!sqe)
				break;
			if (q->write && s->iov)
				io_uring_prep_writev(sqe, q->fd, s->iov, (unsigned)s->n_iov,
						     s->off);
			else if (q->write)
				io_uring_prep_write(sqe, q->fd, s->p, s->len, s->off);
			else
				io_uring_prep_read(sqe, q->fd, s->p, s->len, s->off);
			io_uring_sqe_set_data(sqe, s);
			q->next++;
			q->pending++;
			t->inflight++;
			queued++;
		}
		if (queued) {
			/* Prepared entries stay in the ring until the kernel
			 * takes them, so a transient refusal (EAGAIN, EBUSY,
			 * EINTR) is retried on the next pass. */
			int rc = io_uring_submit(&t->ring);
			if (rc < 0 && rc != -EAGAIN && rc != -EBUSY &&
			    rc != -EINTR)
				kvt_log(KVT_LOG_ERROR,
					"nvme: io_uring_submit: %s",
					kvt_strerror(rc));
		}
		if (q->next == q->n && !q->pending)
			break;
		if (t->reaping) {
			pthread_cond_wait(&t->ring_cv, &t->ring_mu);
			continue;
		}
		t->reaping = 1;
		pthread_mutex_unlock(&t->ring_mu);
		/* The only consumer of the completion queue: no lock needed
		 * to wait; submitters only touch the submission queue. */
		if (io_uring_wait_cqe(&t->ring, &cqe) < 0)
			cqe = NULL;
		pthread_mutex_lock(&t->ring_mu);
		while (!io_uring_peek_cqe(&t->ring, &cqe)) {
			nv_seg *s = io_uring_cqe_get_data(cqe);
			s->res = cqe->res;
			s->req->pending--;
			t->inflight--;
			io_uring_cqe_seen(&t->ring, cqe);
		}
		t->reaping = 0;
		pthread_cond_broadcast(&t->ring_cv);
	}
	pthread_mutex_unlock(&t->ring_mu);
}

/* The pieces v[0..nv) placed one after the other from offset 0 of `fd`,
 * each cut into submissions of at most seg_bytes, on the ring.  For a
 * read, `avail` is the file size: a read stops there (the last block of
 * an image is short), and *got says how much came.  Returns 0 or a
 * negated errno. */
static int nv_ring_xfer(nvme *t, int fd, int write, const struct iovec *v, int nv,
			uint64_t avail, uint64_t *got)
{
	nv_seg stack[64], *segs = stack;
	nv_req q = { fd, write, NULL, 0, 0, 0 };
	uint64_t off = 0, done = 0;
	uint32_t i, n = 0;
	int rc = 0;

	for (int k = 0; k < nv; k++)
		q.n += (uint32_t)((v[k].iov_len + t->seg_bytes - 1) / t->seg_bytes);
	if (q.n > sizeof(stack) / sizeof(stack[0])) {
		segs = malloc(q.n * sizeof(*segs));
		if (!segs)
			return -ENOMEM;
	}
	for (int k = 0; k < nv; k++)
		for (size_t o = 0; o < v[k].iov_len; o += t->seg_bytes, n++) {
			size_t l = v[k].iov_len - o < t->seg_bytes ? v[k].iov_len - o
								   : t->seg_bytes;
			segs[n] = (nv_seg){ &q, (uint8_t *)v[k].iov_base + o, off, (uint32_t)l, 0,
					    NULL, 0 };
			off += l;
		}
	q.segs = segs;
	nv_ring_run(t, &q);
	/* Completions may come in any order: an error anywhere wins; a short
	 * segment is retried synchronously below unless it is the end of the
	 * file. */
	for (i = 0; i < q.n && !rc; i++) {
		nv_seg *s = &segs[i];
		uint64_t want = s->len;
		/* The table's word on each completion (io.h). */
		ssize_t res = t->io->ring_done(t->io, fd, write, s->p, s->len, (off_t)s->off,
					       s->res);
		if (res > (ssize_t)s->len)
			res = -EIO; /* claims more than was asked */
		s->res = (int)res;
		if (s->res < 0) {
			rc = s->res;
			break;
		}
		if (!write && s->off + want > avail)
			want = avail > s->off ? avail - s->off : 0;
		if ((uint64_t)s->res < want) {
			uint64_t o = (uint64_t)s->res;
			rc = write ? kvt_io_pwrite_all(t->io, fd, s->p + o, want - o,
						       (off_t)(s->off + o))
				   : kvt_io_pread_all(t->io, fd, s->p + o, want - o,
						      (off_t)(s->off + o));
			if (rc == -ENODATA)
				rc = -EIO; /* shrank under us */
		}
		done += want;
	}
	if (segs != stack)
		free(segs);
	if (rc)
		return rc;
	if (got)
		*got = done;
	return 0;
}

/* Read or write `len` bytes of `buf` at offset 0 of `fd`; `len` is aligned
 * for O_DIRECT.  For a read, `avail` is the file size: a read stops there
 * (the last block of an image is short), and *got says how much came.
 * Returns 0 or a negated errno. */
static int nv_xfer(nvme *t, int fd, int write, uint8_t *buf, uint64_t len,
		   uint64_t avail, uint64_t *got)
{
	uint64_t done = 0;

	if (got)
		*got = 0;
	if (t->uring && len) {
		struct iovec v = { buf, (size_t)len };
		return nv_ring_xfer(t, fd, write, &v, 1, avail, got);
	}
	if (write)
		return kvt_io_pwrite_all(t->io, fd, buf, (size_t)len, 0);
	while (done < len && done < avail) {
		ssize_t n = t->io->pread(t->io, fd, buf + done,
					 (size_t)(len - done), (off_t)done);
		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		done += (uint64_t)n;
	}
	if (got)
		*got = done;
	return 0;
}

/* pwrite what is left of the pieces v[0..nv), which start at file offset
 * `off`, from byte `done` of them on. */
static int nv_pwrite_pieces(nvme *t, int fd, const struct iovec *v, int nv, uint64_t off,
			    uint64_t done)
{
	int rc = 0;

	for (int k = 0; k < nv && !rc; k++) {
		uint64_t l = v[k].iov_len;
		if (done < l)
			rc = kvt_io_pwrite_all(t->io, fd, (uint8_t *)v[k].iov_base + done,
					       (size_t)(l - done), (off_t)(off + done));
		done = done > l ? done - l : 0;
		off += l;
	}
	return rc;
}

/* Write the pieces v[0..nv) one after the other from offset 0 of `fd`
 * (each aligned for O_DIRECT where the file is); v may be rewritten.  On
 * the ring, pieces that touch in memory are joined and the rest gathered
 * into one writev per IOV_MAX of them: writes into a file being made go
 * one at a time in the kernel's workers (extending writes take the inode's
 * lock, and io_uring hashes a file's writes to one worker), so each
 * submission is a write the file system does whole; a DRAM page apiece
 * was 65 of them for a 4 MiB value.  0 or a negated errno. */
static int nv_write_iov(nvme *t, int fd, struct iovec *v, int nv)
{
	nv_seg stack[8], *segs = stack;
	nv_req q = { fd, 1, NULL, 0, 0, 0 };
	uint64_t off = 0;
	int m = 0, rc = 0;

	if (!t->uring)
		return nv_pwrite_pieces(t, fd, v, nv, 0, 0);
	for (int k = 0; k < nv; k++) {
		if (m && (uint8_t *)v[m - 1].iov_base + v[m - 1].iov_len == v[k].iov_base &&
		    v[m - 1].iov_len + v[k].iov_len <= NV_MAX_WRITE)
			v[m - 1].iov_len += v[k].iov_len;
		else
			v[m++] = v[k];
	}
	for (int k = 0; k < m;) { /* count the submissions */
		uint64_t b = 0;
		int g = 0;
		while (k + g < m && g < IOV_MAX && b + v[k + g].iov_len <= NV_MAX_WRITE)
			b += v[k + g++].iov_len;
		k += g ? g : 1;
		q.n++;
	}
	if (q.n > sizeof(stack) / sizeof(stack[0]) && !(segs = malloc(q.n * sizeof(*segs))))
		return -ENOMEM;
	for (int k = 0, i = 0; k < m; i++) {
		uint64_t b = 0;
		int g = 0;
		while (k + g < m && g < IOV_MAX && b + v[k + g].iov_len <= NV_MAX_WRITE)
			b += v[k + g++].iov_len;
		if (!g) /* a piece alone past NV_MAX_WRITE: cannot happen (images are smaller) */
			b = v[k].iov_len, g = 1;
		segs[i] = (nv_seg){ &q, v[k].iov_base, off, (uint32_t)b, 0, &v[k], g };
		off += b;
		k += g;
	}
	q.segs = segs;
	nv_ring_run(t, &q);
	for (uint32_t i = 0; i < q.n && !rc; i++) {
		nv_seg *s = &segs[i];
		ssize_t res = t->io->ring_done(t->io, fd, 1, s->p, s->len, (off_t)s->off, s->res);
		if (res > (ssize_t)s->len)
			res = -EIO; /* claims more than was asked */
		if (res < 0)
			rc = (int)res;
		else if ((uint64_t)res < s->len) /* the rest, through the table */
			rc = nv_pwrite_pieces(t, fd, s->iov, s->n_iov, s->off, (uint64_t)res);
	}
	if (segs != stack)
		free(segs);
	return rc;
}

/* Open with O_DIRECT if this tier uses it. */
static int nv_open_file(nvme *t, const char *path, int flags, mode_t mode)
{
	return t->io->open(t->io, path, flags | (t->direct ? O_DIRECT : 0),
			   mode);
}

/* --- spares (see the top) ------------------------------------------------------ */

/* Whether a spare of `charge` bytes on disk may join the pool: a slot, its
 * share of the capacity, and the capacity itself. */
static int nv_spare_room_locked(const nvme *t, uint64_t charge)
{
	return t->n_spares < NV_SPARES &&
	       t->spare_bytes + charge <= t->ix.capacity / NV_SPARE_SHARE &&
	       t->ix.used + t->ix.reserved + charge <= t->ix.capacity;
}

/* Take spares[i] out of the pool into *s. */
static void nv_spare_pop_locked(nvme *t, uint32_t i, nv_spare *s)
{
	*s = t->spares[i];
	t->spares[i] = t->spares[--t->n_spares];
	t->spare_bytes -= s->charge;
	t->ix.reserved -= s->charge;
}

static void nv_spare_unlink(nvme *t, const nv_spare *s)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s%s", t->root, s->name);
	t->io->unlink(t->io, path);
}

/* A settler: fsync the directory an unsettled spare was taken from, so
 * that its old name is gone from the disk before any put overwrites it.
 * Several run at once because a directory fsync is mostly the wait for
 * the device's cache flush, which the block layer shares among the
 * flushes that wait together: one thread alone settled spares more slowly
 * than the SETs of four clients made them. */
static void *nv_settle_main(void *arg)
{
	nvme *t = arg;
	char fin[PATH_MAX];
	nv_spare gone;

	pthread_mutex_lock(&t->ix.mu);
	while (!t->settle_stop) {
		uint32_t i;
		uint64_t id;
		kvt_key key;
		int rc, off;

		for (i = 0; i < t->n_spares && t->spares[i].state != NV_UNSETTLED; i++)
			;
		if (i == t->n_spares) {
			pthread_cond_wait(&t->settle_cv, &t->ix.mu);
			continue;
		}
		t->spares[i].state = NV_SETTLING;
		id = t->spares[i].id;
		key = t->spares[i].key;
		pthread_mutex_unlock(&t->ix.mu);
		kvt_fanout_final_path(t->root, &key, fin);
		rc = kvt_io_fsync_parent(t->io, fin);
		pthread_mutex_lock(&t->ix.mu);
		/* Still in the pool unless a trim took it meanwhile. */
		for (i = 0; i < t->n_spares && t->spares[i].id != id; i++)
			;
		if (i == t->n_spares)
			continue;
		if (!rc) {
			t->spares[i].state = NV_SETTLED;
			continue;
		}
		/* Its old name may come back: not to be overwritten.  A file
		 * system that cannot fsync a directory (or a failing disk)
		 * gets no more spares, and one line saying so. */
		nv_spare_pop_locked(t, i, &gone);
		off = rc != -ENOENT && !t->spares_off;
		if (rc != -ENOENT)
			t->spares_off = 1;
		pthread_mutex_unlock(&t->ix.mu);
		if (off)
			kvt_log(KVT_LOG_WARN, "nvme: fsync of the directory of %s: %s; deleted "
				"files are unlinked from now on, not reused", fin,
				kvt_strerror(rc));
		nv_spare_unlink(t, &gone);
		pthread_mutex_lock(&t->ix.mu);
	}
	pthread_mutex_unlock(&t->ix.mu);
	return NULL;
}

/* Start the settlers if none runs yet: 1 if some do. */
static int nv_settlers_start_locked(nvme *t)
{
	while (t->n_settlers < NV_SETTLERS &&
	       !pthread_create(&t->settlers[t->n_settlers], NULL, nv_settle_main, t))
		t->n_settlers++;
	return t->n_settlers > 0;
}

/* Keep `fin`, the file of `key`'s image just deleted (`len` bytes,
 * `charge` on disk), as a spare if the pool has room: 1 if it left the
 * tree that way, 0 if the caller is to unlink it. */
static int nv_spare_keep(nvme *t, const kvt_key *key, const char *fin, uint64_t len,
			 uint64_t charge)
{
	kvt_io *io = t->io;
	char path[PATH_MAX];
	size_t rl = strlen(t->root);
	int room;

	if (t->read_only)
		return 0;
	pthread_mutex_lock(&t->ix.mu);
	room = !t->settle_stop && !t->spares_off && nv_spare_room_locked(t, charge) &&
	       nv_settlers_start_locked(t);
	pthread_mutex_unlock(&t->ix.mu);
	if (!room)
		return 0;
	kvt_fanout_tmp_path(t->root, "spare", path);
	if (strlen(path + rl) >= NV_NAME_MAX || io->rename(io, fin, path))
		return 0; /* the unlink says why */
	/* A fresh mtime, so that a sweep of stale temporaries (another
	 * process's open) leaves it alone. */
	if (io->touch(io, path)) {
		io->unlink(io, path);
		return 1;
	}
	pthread_mutex_lock(&t->ix.mu);
	room = !t->settle_stop && !t->spares_off &&
	       nv_spare_room_locked(t, charge); /* others came? */
	if (room) {
		nv_spare *s = &t->spares[t->n_spares++];
		memcpy(s->name, path + rl, strlen(path + rl) + 1);
		s->key = *key;
		s->id = ++t->spare_seq;
		s->size = len;
		s->charge = charge;
		s->state = NV_UNSETTLED;
		s->clear = 0;
		t->spare_bytes += charge;
		t->ix.reserved += charge;
		pthread_cond_signal(&t->settle_cv);
	}
	pthread_mutex_unlock(&t->ix.mu);
	if (!room)
		io->unlink(io, path);
	return 1;
}

/* Whether spare a suits an image of `disk` bytes on disk better than b:
 * one that holds it before one that does not, then the smaller of two
 * that hold it (less to cut off) or the larger of two that do not (less
 * to allocate). */
static int nv_spare_better(const nv_spare *a, const nv_spare *b, uint64_t disk)
{
	int fa = a->charge >= disk, fb = b->charge >= disk;

	if (fa != fb)
		return fa;
	return fa ? a->charge < b->charge : a->charge > b->charge;
}

/* Take the settled spare that suits an image of `disk` bytes best out of
 * the pool into *s for a put (s->id 0: none is settled and clear of
 * readers).  Its charge leaves ix.reserved: the put's reservation counts
 * the file from now on. */
static void nv_spare_take(nvme *t, uint64_t disk, nv_spare *s)
{
	uint32_t i, best = NV_SPARES;

	s->id = 0;
	pthread_mutex_lock(&t->ix.mu);
	/* No read in flight: none began before any spare's del. */
	if (t->n_spares && atomic_load(&t->reading) == 0)
		for (i = 0; i < t->n_spares; i++)
			t->spares[i].clear = 1;
	for (i = 0; i < t->n_spares; i++) {
		const nv_spare *c = &t->spares[i];
		if (c->state == NV_SETTLED && c->clear &&
		    (best == NV_SPARES || nv_spare_better(c, &t->spares[best], disk)))
			best = i;
	}
	if (best < NV_SPARES)
		nv_spare_pop_locked(t, best, s);
	pthread_mutex_unlock(&t->ix.mu);
}

/* A put that took *s and did not write it gives it back: into the pool as
 * it was if there is room, else unlinked. */
static void nv_spare_give_back(nvme *t, nv_spare *s)
{
	int room;

	if (!s->id)
		return;
	pthread_mutex_lock(&t->ix.mu);
	room = !t->settle_stop && nv_spare_room_locked(t, s->charge);
	if (room) {
		t->spares[t->n_spares++] = *s;
		t->spare_bytes += s->charge;
		t->ix.reserved += s->charge;
	}
	pthread_mutex_unlock(&t->ix.mu);
	if (!room)
		nv_spare_unlink(t, s);
	s->id = 0;
}

/* Unlink spares, the largest first, until `need` more bytes fit in the
 * capacity or none is left: they give their room back before anything
 * published is evicted. */
static void nv_spares_trim(nvme *t, uint64_t need)
{
	nv_spare gone[NV_SPARES];
	uint32_t n = 0, i, big;

	pthread_mutex_lock(&t->ix.mu);
	while (t->n_spares && t->ix.used + t->ix.reserved + need > t->ix.capacity) {
		for (i = 1, big = 0; i < t->n_spares; i++)
			if (t->spares[i].charge > t->spares[big].charge)
				big = i;
		nv_spare_pop_locked(t, big, &gone[n++]);
	}
	pthread_mutex_unlock(&t->ix.mu);
	for (i = 0; i < n; i++)
		nv_spare_unlink(t, &gone[i]);
}

/* Stop the settlers and unlink every spare: the tier is closing. */
static void nv_spares_end(nvme *t)
{
	uint32_t i;

	pthread_mutex_lock(&t->ix.mu);
	t->settle_stop = 1;
	pthread_cond_broadcast(&t->settle_cv);
	pthread_mutex_unlock(&t->ix.mu);
	for (i = 0; i < t->n_settlers; i++)
		pthread_join(t->settlers[i], NULL);
	t->n_settlers = 0;
	while (t->n_spares)
		nv_spare_unlink(t, &t->spares[--t->n_spares]);
}

/* --- writes ----------------------------------------------------------------- */

/* Room for an image of `len` bytes: *disk reserved in the index, and a
 * spare to write it into if one suits (*spare; id 0: none).  A spare is
 * taken first, so that its room serves the put rather than being given up
 * by a trim or made by an eviction. */
static int nv_reserve(nvme *t, const kvt_key *key, uint64_t len, uint64_t *disk,
		      nv_spare *spare)
{
	nv_ent *victims = NULL;
	uint64_t reserved;
	int rc;

	spare->id = 0;
	if (t->read_only)
		return kvt_err(-EROFS, "nvme: %s is open read-only", t->root);
	if (len < KVT_OBJ_HEADER_BYTES ||
	    len > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD)
		return kvt_err(KVT_EINVAL,
			       "nvme: an image of %llu bytes is not possible",
			       (unsigned long long)len);
	*disk = nv_round(t, len);
	nv_spare_take(t, *disk, spare);
	if (*disk <= t->ix.capacity) /* else KVT_ETOOBIG below */
		nv_spares_trim(t, *disk);
	rc = kvt_findex_reserve(&t->ix, key, *disk, &victims, &reserved);
	nv_reap(t, victims);
	if (rc)
		nv_spare_give_back(t, spare);
	if (rc == KVT_ETOOBIG)
		return kvt_err(rc, "nvme: image of %llu bytes exceeds capacity %llu",
			       (unsigned long long)len,
			       (unsigned long long)t->ix.capacity);
	if (rc == KVT_EFULL)
		return kvt_err(rc, "nvme: %llu bytes of writes in flight leave no room for %llu",
			       (unsigned long long)reserved,
			       (unsigned long long)len);
	return rc;
}

static int nv_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len,
			kvt_tier_wbuf **out)
{
	nvme *t = (nvme *)tt;
	nv_spare spare;
	nv_wbuf *w;
	void *buf = NULL;
	uint64_t disk = 0;
	int rc;

	*out = NULL;
	if ((rc = nv_reserve(t, key, len, &disk, &spare)))
		return rc;
	w = calloc(1, sizeof(*w));
	if (w)
		buf = kvt_abuf_get(&t->bufs, disk, &w->cap);
	if (!buf) {
		free(w);
		nv_spare_give_back(t, &spare);
		kvt_findex_unreserve(&t->ix, disk);
		return kvt_err(KVT_ENOMEM, "nvme: no memory for a %llu-byte buffer",
			       (unsigned long long)disk);
	}
	memset((uint8_t *)buf + len, 0, (size_t)(disk - len)); /* the pad */
	w->w.key = *key;
	w->w.len = len;
	w->disk = disk;
	w->spare = spare;
	w->buf = buf;
	w->iov.iov_base = buf;
	w->iov.iov_len = (size_t)len;
	w->w.iov = &w->iov;
	w->w.n_iov = 1;
	*out = &w->w;
	return 0;
}

/* An image already whole in memory (another tier's pages, which the
 * store copied it into first): written from there at commit.  Copying it
 * into an aligned buffer of ours first cost a crash-safe SET of kvtierd a
 * pass over the value, the most CPU of its disk write after the kernel's
 * (docs/DAEMON.md, "Benchmark").  O_DIRECT wants every piece aligned in
 * memory and length; only the last partial block is copied, into one
 * zero-padded block. */
static int nv_put_begin_from(kvt_tier *tt, const kvt_key *key, uint64_t len,
			     const struct iovec *src, int n_src, kvt_tier_wbuf **out)
{
	nvme *t = (nvme *)tt;
	uint64_t have = 0, disk = 0;
	nv_spare spare;
	nv_wbuf *w;
	void *blk = NULL;
	int rc, i;

	*out = NULL;
	for (i = 0; i < n_src && have < len; i++) {
		uint64_t l = src[i].iov_len;
		int last = have + l >= len;
		if (t->direct && (((uintptr_t)src[i].iov_base & (t->align - 1)) ||
				  (!last && (l & (t->align - 1)))))
			return kvt_err(KVT_ENOTSUP, "nvme: segments not aligned for O_DIRECT");
		have += l;
	}
	if (have < len)
		return kvt_err(KVT_EINVAL, "nvme: %llu bytes of segments for a %llu-byte image",
			       (unsigned long long)have, (unsigned long long)len);
	if ((rc = nv_reserve(t, key, len, &disk, &spare)))
		return rc;
	w = calloc(1, sizeof(*w));
	if (!w || posix_memalign(&blk, t->align, t->align)) {
		free(w);
		nv_spare_give_back(t, &spare);
		kvt_findex_unreserve(&t->ix, disk);
		return kvt_err(KVT_ENOMEM, "nvme: out of memory");
	}
	w->w.key = *key;
	w->w.len = len;
	w->disk = disk;
	w->spare = spare;
	w->buf = blk;
	w->cap = t->align;
	w->src = src;
	w->n_src = i;
	*out = &w->w;
	return 0;
}

static void nv_wbuf_free(nvme *t, nv_wbuf *w)
{
	nv_spare_give_back(t, &w->spare); /* aborted before its write */
	kvt_findex_unreserve(&t->ix, w->disk);
	if (w->src)
		free(w->buf);
	else
		kvt_abuf_put(&t->bufs, w->buf, w->cap);
	free(w);
}

static void nv_put_abort(kvt_tier *tt, kvt_tier_wbuf *ww)
{
	if (ww)
		nv_wbuf_free((nvme *)tt, (nv_wbuf *)ww);
}

/* The pieces of a put_begin_from image up to `body` (all of it without
 * O_DIRECT; with it, up to its last whole block) into v (n_src of them at
 * most), how many returned; the rest, the last block's bytes, is copied
 * into w->buf, zero-padded to a block. */
static int nv_src_pieces(const nvme *t, nv_wbuf *w, uint64_t body, struct iovec *v)
{
	uint64_t len = w->w.len, pos = 0;
	int n = 0;

	if (body < len)
		memset(w->buf, 0, t->align);
	for (int i = 0; i < w->n_src && pos < len; i++) {
		const uint8_t *p = w->src[i].iov_base;
		uint64_t l = w->src[i].iov_len < len - pos ? w->src[i].iov_len : len - pos;
		if (pos < body) /* written from where it lies */
			v[n++] = (struct iovec){ (void *)p, (size_t)(pos + l <= body ? l
										 : body - pos) };
		if (pos + l > body) { /* the last block's bytes, copied */
			uint64_t from = pos < body ? body - pos : 0;
			memcpy(w->buf + (pos + from - body), p + from, (size_t)(l - from));
		}
		pos += l;
	}
	return n;
}

/* Write the image to a temporary, a spare or a fresh one: padded aligned
 * write, then ftruncate to the exact length, fsync for POWER_SAFE.  On
 * failure the temporary is gone. */
static int nv_write_tmp(nvme *t, nv_wbuf *w, int durability,
			char tmp[PATH_MAX])
{
	kvt_io *io = t->io;
	const char *call;
	uint64_t had = 0; /* the spare's length; a fresh temporary is empty */
	int direct = t->direct, fd = -ENOENT, rc, i;

	if (w->spare.id) {
		/* From here on the spare is this put's temporary. */
		snprintf(tmp, PATH_MAX, "%s%s", t->root, w->spare.name);
		w->spare.id = 0;
		fd = nv_open_file(t, tmp, O_WRONLY, 0);
		if (fd < 0)
			io->unlink(io, tmp); /* and a fresh one instead */
		else
			had = w->spare.size;
	}
	if (fd < 0)
		fd = kvt_findex_tmp_open(io, t->root, &w->w.key, &direct, "nvme", tmp);
	if (fd < 0)
		return fd;

	/* O_DIRECT writes whole blocks: the image up to its last whole one,
	 * then that one padded, then the pad cut. */
	uint64_t len = w->w.len, body = direct ? len & ~(uint64_t)(t->align - 1) : len;
	call = t->uring ? "io_uring write" : "pwrite";
	if (w->src) {
		struct iovec *v = malloc((size_t)w->n_src * sizeof(*v));
		rc = v ? nv_write_iov(t, fd, v, nv_src_pieces(t, w, body, v)) : -ENOMEM;
		free(v);
	} else {
		rc = nv_xfer(t, fd, 1, w->buf, body, 0, NULL);
	}
	if (!rc && body < len) {
		/* The last block through the page cache, on a descriptor of
		 * its own: a cut of a block that only O_DIRECT wrote read it
		 * back from the disk first, a read per put on its path (with
		 * the truncation, 8% of a crash-safe kvtierd's CPU time in
		 * perf, 0.1 ms a put).  Without that descriptor, the block as
		 * before. */
		const uint8_t *blk = w->src ? w->buf : w->buf + body;
		int fd2 = io->open(io, tmp, O_WRONLY | O_CLOEXEC, 0);
		call = "pwrite";
		rc = kvt_io_pwrite_all(io, fd2 >= 0 ? fd2 : fd, blk, t->align, (off_t)body);
		if (fd2 >= 0 && (i = io->close(io, fd2)) && !rc) {
			call = "close";
			rc = i;
		}
	}
	/* The pad cut, or what a longer spare held past the image. */
	if (!rc && (body < len || had > len)) {
		call = "ftruncate";
		rc = kvt_io_ftruncate(io, fd, (off_t)len);
	}
	if (!rc && durability == KVT_DUR_POWER_SAFE) {
		call = "fsync";
		rc = io->fsync(io, fd);
	}
	i = io->close(io, fd);
	if (!rc && i) {
		call = "close";
		rc = i;
	}
	if (rc) {
		io->unlink(io, tmp);
		return kvt_err(rc, "nvme: %s %s: %s", call, tmp,
			       kvt_strerror(rc));
	}
	return 0;
}

static int nv_put_commit(kvt_tier *tt, kvt_tier_wbuf *ww, int durability)
{
	nvme *t = (nvme *)tt;
	nv_wbuf *w = (nv_wbuf *)ww;
	char tmp[PATH_MAX], fin[PATH_MAX];
	nv_ent *e = NULL, *victims = NULL;
	int rc;

	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE) {
		rc = kvt_err(KVT_EINVAL, "nvme: durability %d unknown",
			     durability);
		goto out;
	}
	e = calloc(1, sizeof(*e)); /* before publishing: cannot fail after */
	if (!e) {
		rc = kvt_err(KVT_ENOMEM, "nvme: no memory for an index entry");
		goto out;
	}
	kvt_fanout_final_path(t->root, &w->w.key, fin);
	rc = nv_write_tmp(t, w, durability, tmp);
	if (rc)
		goto out;
	/* The directory is this node's alone: a bad file at the name is ours
	 * to replace, whatever made it bad. */
	rc = kvt_findex_publish_durable(&t->ix, &t->durable, t->io, t->root,
					&w->w.key, tmp, fin, durability, 2, 1, "nvme");
	if (rc == -EEXIST) {
		rc = kvt_err(KVT_EEXIST, "nvme: %s was published by another writer",
			     fin);
		goto out;
	}
	if (rc)
		goto out;
	e->key = w->w.key;
	e->len = w->w.len;
	e->charge = w->disk;
	pthread_mutex_lock(&t->ix.mu);
	t->ix.reserved -= w->disk;
	w->disk = 0;
	if (kvt_findex_find_locked(&t->ix, &e->key)) {
		/* Cannot happen in one process (the name was free), but a
		 * second process sharing the directory may have raced us. */
		free(e);
	} else {
		kvt_findex_insert_locked(&t->ix, e);
	}
	e = NULL;
	t->ix.st.puts++;
	t->ix.st.bytes_in += w->w.len;
	kvt_findex_evict_locked(&t->ix, 0, NULL, &victims); /* capacity is never exceeded */
	pthread_mutex_unlock(&t->ix.mu);
	nv_reap(t, victims);
	rc = 0;
out:
	free(e);
	nv_wbuf_free(t, w);
	return rc;
}

/* --- reads ------------------------------------------------------------------ */

/* Stop serving `key` if the entry is still the one read (same
 * generation).  A file gone behind our back (`why` NULL) is a miss; any
 * other failure leaves the file where it is, recorded as bad with `why`
 * (findex.h): a read never removes, the writer replaces it. */
static void nv_drop(nvme *t, const kvt_key *key, uint64_t gen,
		    const char *path, const char *why)
{
	nv_ent *e = kvt_findex_drop(&t->ix, key, gen, why ? -1 : 0, NULL);
	struct stat st;

	if (e && why) {
		kvt_findex_note_bad(&t->ix, key,
				    t->io->stat(t->io, path, &st) ? NULL : &st,
				    1, path, why, "nvme");
	}
	free(e);
}

/* The end of a read that nv_open_read began (see "Spares" at the top). */
static void nv_read_done(nvme *t)
{
	atomic_fetch_sub(&t->reading, 1);
}

/* The start of every read: find the entry (a miss counts), refresh its
 * recency, open its file.  A file gone behind our back is a miss too.
 * Once it returns 0 the read is counted until the caller closes *fd and
 * calls nv_read_done. */
static int nv_open_read(nvme *t, const kvt_key *key, char path[PATH_MAX],
			uint64_t *gen, int *fd)
{
	nv_ent *e;

	atomic_fetch_add(&t->reading, 1); /* before the lookup */
	pthread_mutex_lock(&t->ix.mu);
	e = kvt_findex_find_locked(&t->ix, key);
	if (!e) {
		t->ix.st.misses++;
		pthread_mutex_unlock(&t->ix.mu);
		nv_read_done(t);
		return KVT_ENOTFOUND;
	}
	*gen = e->gen;
	kvt_findex_touch_locked(&t->ix, e);
	pthread_mutex_unlock(&t->ix.mu);

	kvt_fanout_final_path(t->root, key, path);
	*fd = nv_open_file(t, path, O_RDONLY, 0);
	if (*fd < 0)
		nv_read_done(t);
	if (*fd == -ENOENT) {
		nv_drop(t, key, *gen, path, NULL);
		return KVT_ENOTFOUND;
	}
	if (*fd < 0)
		return kvt_err(*fd, "nvme: open %s: %s", path, kvt_strerror(*fd));
	return 0;
}

/* Close a file nv_open_read opened, and end its read. */
static void nv_read_close(nvme *t, int fd)
{
	t->io->close(t->io, fd);
	nv_read_done(t);
}

/* Read a whole file into the caller's segments with preadv: one call moves
 * up to IOV_MAX segments, which the kernel turns into parallel direct I/O,
 * so a promotion lands in DRAM pages with no bounce buffer. */
static int nv_get_into(kvt_tier *tt, const kvt_key *key,
		       int (*reserve)(void *arg, uint64_t len,
				      const struct iovec **iov, int *n_iov),
		       void *arg)
{
	nvme *t = (nvme *)tt;
	char path[PATH_MAX];
	const struct iovec *iov;
	struct iovec *v = NULL;
	struct stat st;
	uint64_t gen, size, got = 0;
	int fd, rc, n = 0;

	if ((rc = nv_open_read(t, key, path, &gen, &fd)))
		return rc;
	rc = t->io->fstat(t->io, fd, &st);
	size = rc ? 0 : (uint64_t)st.st_size;
	if (!rc && (size < KVT_OBJ_HEADER_BYTES ||
		    size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD))
		rc = kvt_err(KVT_ECORRUPT, "nvme: %s is %llu bytes", path,
			     (unsigned long long)size);
	if (!rc)
		rc = reserve(arg, size, &iov, &n);
	if (!rc && !(v = malloc(sizeof(*v) * (size_t)(n ? n : 1))))
		rc = kvt_err(KVT_ENOMEM, "nvme: no memory to read %s", path);
	if (!rc) {
		memcpy(v, iov, sizeof(*v) * (size_t)n);
		/* O_DIRECT moves whole blocks: round the tail up (the
		 * reserve contract leaves room for it). */
		if (t->direct && n)
			v[n - 1].iov_len = (size_t)nv_round(t, v[n - 1].iov_len);
		for (int i = 0; i < n && got < size;) {
			int cnt = n - i < IOV_MAX ? n - i : IOV_MAX;
			ssize_t r = kvt_io_preadv(t->io, fd, v + i, cnt, (off_t)got);
			if (r < 0) {
				rc = (int)r;
				break;
			}
			if (r == 0)
				break;
			got += (uint64_t)r;
			/* advance past whole segments read */
			while (i < n && (uint64_t)r >= v[i].iov_len) {
				r -= (ssize_t)v[i].iov_len;
				i++;
			}
			if (i < n && r > 0) { /* a short read inside a segment */
				v[i].iov_base = (char *)v[i].iov_base + r;
				v[i].iov_len -= (size_t)r;
			}
		}
	}
	free(v);
	nv_read_close(t, fd);
	if (!rc && got < size)
		rc = kvt_err(KVT_ECORRUPT, "nvme: %s: read %llu of %llu bytes", path,
			     (unsigned long long)got, (unsigned long long)size);
	if (rc < 0 && rc > KVT_ERR_BASE) {
		/* The medium failed this read, which proves nothing about
		 * the file: keep it (the store reads the chunk from below). */
		return kvt_err(rc, "nvme: preadv %s: %s", path, kvt_strerror(rc));
	}
	if (rc == KVT_ECORRUPT) {
		nv_drop(t, key, gen, path, kvt_errmsg());
		return rc;
	}
	if (rc)
		return rc;
	pthread_mutex_lock(&t->ix.mu);
	t->ix.st.hits++;
	t->ix.st.bytes_out += size;
	pthread_mutex_unlock(&t->ix.mu);
	return 0;
}

static int nv_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **out)
{
	nvme *t = (nvme *)tt;
	char path[PATH_MAX], why[256];
	kvt_obj_hdr *h = NULL;
	nv_rbuf *r = NULL;
	struct stat st;
	uint64_t gen, size, want, got = 0;
	void *buf = NULL;
	int fd, rc;

	*out = NULL;
	if ((rc = nv_open_read(t, key, path, &gen, &fd)))
		return rc;
	rc = t->io->fstat(t->io, fd, &st);
	if (rc) {
		nv_read_close(t, fd);
		return kvt_err(rc, "nvme: fstat %s: %s", path, kvt_strerror(rc));
	}
	size = (uint64_t)st.st_size;
	if (size < KVT_OBJ_HEADER_BYTES ||
	    size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD) {
		nv_read_close(t, fd);
		snprintf(why, sizeof(why), "file is %llu bytes",
			 (unsigned long long)size);
		goto bad;
	}
	want = nv_round(t, size);
	r = calloc(1, sizeof(*r));
	h = malloc(sizeof(*h));
	if (r && h)
		buf = kvt_abuf_get(&t->bufs, want, &r->cap);
	if (!buf) {
		nv_read_close(t, fd);
		free(r);
		free(h);
		return kvt_err(KVT_ENOMEM, "nvme: no memory to read %s", path);
	}
	rc = nv_xfer(t, fd, 0, buf, want, size, &got);
	nv_read_close(t, fd);
	if (rc) {
		/* The medium failed this read, which proves nothing about
		 * the file: keep it, listed nowhere; the store reads the
		 * chunk from the tier below. */
		kvt_abuf_put(&t->bufs, buf, r->cap);
		free(r);
		free(h);
		return kvt_err(rc, "nvme: %s %s: %s",
			       t->uring ? "io_uring read" : "pread", path,
			       kvt_strerror(rc));
	}
	rc = kvt_obj_hdr_decode(buf, (size_t)got, h);
	if (rc) {
		snprintf(why, sizeof(why), "%s (%s)", kvt_strerror(rc),
			 kvt_errmsg());
		goto bad;
	}
	if (memcmp(h->key.b, key->b, KVT_KEY_BYTES)) {
		snprintf(why, sizeof(why), "header names another key");
		goto bad;
	}
	size = (uint64_t)h->header_len + h->payload_len; /* never the padded size */
	if ((uint64_t)st.st_size != size) {
		kvt_obj_size_why(why, sizeof(why), (uint64_t)st.st_size, size);
		goto bad;
	}
	free(h);

	pthread_mutex_lock(&t->ix.mu);
	t->ix.st.hits++;
	t->ix.st.bytes_out += size;
	pthread_mutex_unlock(&t->ix.mu);
	r->r.key = *key;
	r->r.len = size;
	r->iov.iov_base = buf;
	r->iov.iov_len = (size_t)size;
	r->r.iov = &r->iov;
	r->r.n_iov = 1;
	r->gen = gen;
	atomic_fetch_add(&t->borrowed, 1);
	*out = &r->r;
	return 0;

bad:
	if (buf)
		kvt_abuf_put(&t->bufs, buf, r->cap);
	free(r);
	free(h);
	nv_drop(t, key, gen, path, why);
	return kvt_err(KVT_ECORRUPT, "nvme: %s: %s", path, why);
}

/* A header and a few bytes, through the blocks that hold them (tier.h). */
static int nv_peek(kvt_tier *tt, const kvt_key *key, void *hdr, uint64_t off, void *buf,
		   size_t len, uint64_t *image)
{
	nvme *t = (nvme *)tt;
	char path[PATH_MAX];
	uint64_t gen;
	int fd, rc;

	if ((rc = nv_open_read(t, key, path, &gen, &fd)))
		return rc;
	rc = kvt_findex_peek_fd(t->io, fd, t->direct ? t->align : 1, "nvme", path, hdr, off,
				buf, len, image); /* closes fd */
	nv_read_done(t);
	return rc;
}

static void nv_release(kvt_tier *tt, kvt_tier_rbuf *rr)
{
	nv_rbuf *r = (nv_rbuf *)rr;

	if (!r)
		return;
	kvt_abuf_put(&((nvme *)tt)->bufs, r->iov.iov_base, r->cap);
	free(r);
	atomic_fetch_sub(&((nvme *)tt)->borrowed, 1);
}

/* --- the rest of the vtable --------------------------------------------------- */

static int nv_exists(kvt_tier *tt, const kvt_key *key)
{
	return kvt_findex_exists(&((nvme *)tt)->ix, key);
}

static int nv_forget(nvme *t, const kvt_key *key, int corrupt)
{
	char path[PATH_MAX];
	nv_ent *e = kvt_findex_forget(&t->ix, key, corrupt);
	uint64_t len, charge;
	int rc;

	if (!e)
		return KVT_ENOTFOUND;
	len = e->len;
	charge = e->charge;
	free(e);
	kvt_fanout_final_path(t->root, key, path);
	if (nv_spare_keep(t, key, path, len, charge))
		return 0;
	rc = t->io->unlink(t->io, path);
	if (rc && rc != -ENOENT)
		return kvt_err(rc, "nvme: unlink %s: %s", path, kvt_strerror(rc));
	return 0;
}

static int nv_del(kvt_tier *tt, const kvt_key *key)
{
	return nv_forget((nvme *)tt, key, 0);
}

static void nv_corrupt(kvt_tier *tt, kvt_tier_rbuf *rb)
{
	nvme *t = (nvme *)tt;
	char path[PATH_MAX];

	kvt_fanout_final_path(t->root, &rb->key, path);
	char why[256];

	/* The store calls this right after the check that failed: its
	 * message says what was wrong. */
	snprintf(why, sizeof(why), "failed verification: %s",
		 kvt_errmsg()[0] ? kvt_errmsg() : "payload, key or namespace");
	nv_drop(t, &rb->key, ((nv_rbuf *)rb)->gen, path, why);
}

static int nv_bad_iterate(kvt_tier *tt,
			  int (*fn)(void *arg, const kvt_key *key,
				    const char *where, int proven,
				    const char *why),
			  void *arg)
{
	nvme *t = (nvme *)tt;

	return kvt_findex_tier_bad_iterate(&t->ix, t->root, "nvme", fn, arg);
}

static int nv_repair(kvt_tier *tt, const kvt_key *key)
{
	nvme *t = (nvme *)tt;

	if (t->read_only)
		return kvt_err(-EROFS, "nvme: %s is open read-only", t->root);
	return kvt_findex_tier_repair(&t->ix, t->io, t->root, key, 0, "nvme");
}

static int nv_iterate(kvt_tier *tt,
		      int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		      void *arg)
{
	return kvt_findex_iterate(&((nvme *)tt)->ix, "nvme", fn, arg);
}

static void nv_stats(kvt_tier *tt, kvt_tier_stats *out)
{
	nvme *t = (nvme *)tt;

	kvt_findex_stats(&t->ix, out, "nvme", atomic_load(&t->borrowed));
	out->read_only = (uint32_t)t->read_only;
}

static void nv_free(nvme *t)
{
	kvt_findex_fini(&t->ix);
	if (t->uring)
		io_uring_queue_exit(&t->ring);
	kvt_abuf_fini(&t->bufs);
	free(t->root);
	pthread_cond_destroy(&t->ring_cv);
	pthread_cond_destroy(&t->settle_cv);
	pthread_mutex_destroy(&t->ring_mu);
	free(t);
}

static void nv_close(kvt_tier *tt)
{
	if (tt) {
		nv_spares_end((nvme *)tt);
		nv_free((nvme *)tt);
	}
}

static const struct kvt_tier_ops nvme_ops = {
	.name = "nvme",
	.put_begin = nv_put_begin,
	.put_commit = nv_put_commit,
	.put_abort = nv_put_abort,
	.put_begin_from = nv_put_begin_from,
	.get = nv_get,
	.peek = nv_peek,
	.get_into = nv_get_into,
	.release = nv_release,
	.exists = nv_exists,
	.del = nv_del,
	.iterate = nv_iterate,
	.stats = nv_stats,
	.corrupt = nv_corrupt,
	.bad_iterate = nv_bad_iterate,
	.repair = nv_repair,
	.close = nv_close,
};

void kvt_nvme_info(kvt_tier *tt, int *io_uring, int *direct, uint32_t *align)
{
	nvme *t = (nvme *)tt;

	if (io_uring)
		*io_uring = t->uring;
	if (direct)
		*direct = t->direct;
	if (align)
		*align = t->align;
}

/* --- open: probe, clean temporaries, rebuild ------------------------------------ */

/* Create a probe file in tmp/ with O_DIRECT: refused (EINVAL) means buffered
 * I/O; accepted, statx tells the alignment. */
static int nv_probe(nvme *t)
{
	char path[PATH_MAX];
	struct statx sx;
	int fd;

	kvt_fanout_tmp_path(t->root, "probe", path);
	fd = t->io->open(t->io, path, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT,
			 KVT_FILE_MODE);
	if (fd == -EINVAL) {
		kvt_log(KVT_LOG_WARN,
			"nvme: %s refuses O_DIRECT; using buffered I/O", t->root);
		t->direct = 0;
		t->align = NV_DEFAULT_ALIGN;
		return 0;
	}
	if (fd < 0)
		return kvt_err(fd, "nvme: open %s: %s", path, kvt_strerror(fd));
	t->direct = 1;
	t->align = NV_DEFAULT_ALIGN;
	memset(&sx, 0, sizeof(sx));
	/* A failed statx leaves the default, which every device we know of
	 * accepts; a wrong larger guess would only cost space. */
	if (!kvt_io_statx(t->io, fd, STATX_DIOALIGN, &sx) &&
	    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align) {
		uint32_t a = sx.stx_dio_offset_align > sx.stx_dio_mem_align
				     ? sx.stx_dio_offset_align
				     : sx.stx_dio_mem_align;
		/* Keep 4096 as the floor: the header is 4 KiB and a smaller
		 * unit buys nothing.  Refuse nonsense (not a power of two). */
		if (a <= NV_MAX_ALIGN && !(a & (a - 1)))
			t->align = a > NV_DEFAULT_ALIGN ? a : NV_DEFAULT_ALIGN;
	}
	t->io->close(t->io, fd);
	t->io->unlink(t->io, path);
	return 0;
}

typedef struct nv_scan {
	nvme *t;
	uint8_t *hdr; /* aligned, t->align bytes */
	kvt_obj_hdr h;
} nv_scan;

/* Read and check the header of a published file. */
static int nv_scan_check(void *arg, const char *path, const kvt_key *key,
			 uint64_t *len, struct stat *stp, char why[256])
{
	nv_scan *s = arg;
	nvme *t = s->t;
	struct stat st;
	uint64_t got = 0;
	int fd, rc, res = KVT_FINDEX_SKIP;

	fd = nv_open_file(t, path, O_RDONLY, 0);
	if (fd < 0) {
		if (fd != -ENOENT)
			kvt_log(KVT_LOG_WARN, "nvme: skipping %s: open: %s",
				path, kvt_strerror(fd));
		return KVT_FINDEX_SKIP;
	}
	rc = t->io->fstat(t->io, fd, &st);
	if (rc) {
		kvt_log(KVT_LOG_WARN, "nvme: skipping %s: fstat: %s", path,
			kvt_strerror(rc));
		goto out;
	}
	/* One aligned block holds the whole header (align >= 4096). */
	rc = nv_xfer(t, fd, 0, s->hdr, t->align, (uint64_t)st.st_size, &got);
	if (rc) {
		kvt_log(KVT_LOG_WARN, "nvme: skipping %s: read: %s", path,
			kvt_strerror(rc));
		goto out;
	}
	res = KVT_FINDEX_BAD;
	rc = kvt_obj_hdr_decode(s->hdr, (size_t)(got < KVT_OBJ_HEADER_BYTES
							 ? got
							 : KVT_OBJ_HEADER_BYTES),
				&s->h);
	*stp = st;
	if (rc) {
		snprintf(why, 256, "%s (%s)", kvt_strerror(rc), kvt_errmsg());
		if (rc == KVT_EVERSION)
			res = KVT_FINDEX_UNVERIFIABLE;
		goto out;
	}
	if (memcmp(s->h.key.b, key->b, KVT_KEY_BYTES)) {
		snprintf(why, 256, "header names another key");
		goto out;
	}
	*len = (uint64_t)s->h.header_len + s->h.payload_len;
	if ((uint64_t)st.st_size != *len) {
		kvt_obj_size_why(why, 256, (uint64_t)st.st_size, *len);
		goto out;
	}
	res = KVT_FINDEX_GOOD;
out:
	t->io->close(t->io, fd);
	return res;
}

static void nv_scan_init(void *arg, nv_ent *e)
{
	e->charge = nv_round(((nv_scan *)arg)->t, e->len);
}

static const kvt_findex_scan_ops nv_scan_ops = {
	.check = nv_scan_check,
	.init = nv_scan_init,
	.ent_size = sizeof(nv_ent),
};

/* Index every good file, oldest mtime least recently used, then evict down
 * to the capacity. */
static int nv_rebuild(nvme *t)
{
	nv_scan *s = calloc(1, sizeof(*s)); /* the header is large */
	int rc;

	if (!s || posix_memalign((void **)&s->hdr, t->align, t->align)) {
		free(s);
		return kvt_err(KVT_ENOMEM, "nvme: no memory to scan");
	}
	s->t = t;
	rc = kvt_findex_rebuild(&t->ix, t->io, t->root, "nvme", &nv_scan_ops,
				s);
	free(s->hdr);
	free(s);
	return rc;
}

/* A read-only open needs the directory to be there: it creates nothing. */
static int nv_check_root(nvme *t)
{
	struct stat st;
	int rc = t->io->stat(t->io, t->root[0] ? t->root : "/", &st);

	if (!rc && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	return rc;
}

/* The directory is there but refuses writes (a read-only mount, another
 * user's tree): serve what it holds, say so once, and refuse puts. */
static int nv_go_read_only(nvme *t, const char *call, const char *path, int why)
{
	int rc = nv_check_root(t);

	if (rc)
		return why;
	kvt_log(KVT_LOG_WARN, "nvme: %s %s: %s; serving %s read-only", call, path,
		kvt_strerror(why), t->root);
	t->read_only = 1;
	return 0;
}

/* Set up the ring; on refusal log once and stay on pread/pwrite. */
static void nv_ring_init(nvme *t)
{
	static atomic_int logged;
	int rc = io_uring_queue_init(t->qd, &t->ring, 0);

	if (rc < 0) {
		if (!atomic_exchange(&logged, 1))
			kvt_log(KVT_LOG_WARN,
				"nvme: io_uring_queue_init: %s; using pread/pwrite",
				kvt_strerror(rc));
		return;
	}
	t->uring = 1;
}

int kvt_nvme_open(const kvt_nvme_opts *o, kvt_tier **out)
{
	char tmpdir[PATH_MAX];
	size_t len;
	nvme *t;
	int rc;

	if (out)
		*out = NULL;
	if (!o || !out || !o->path || !o->path[0])
		return kvt_err(KVT_EINVAL, "nvme: a directory path is needed");
	if (o->capacity < KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_EINVAL, "nvme: capacity %llu is too small",
			       (unsigned long long)o->capacity);
	if (o->queue_depth > 4096)
		return kvt_err(KVT_EINVAL, "nvme: queue depth %u exceeds 4096",
			       o->queue_depth);
	len = strlen(o->path);
	while (len > 1 && o->path[len - 1] == '/')
		len--;
	if (len + NV_NAME_MAX >= PATH_MAX)
		return kvt_err(KVT_EINVAL, "nvme: path %s is too long", o->path);

	t = calloc(1, sizeof(*t));
	if (!t)
		return kvt_err(KVT_ENOMEM, "nvme: no memory");
	t->root = malloc(len + 1);
	if (!t->root || kvt_findex_init(&t->ix, o->capacity)) {
		free(t->root);
		kvt_findex_fini(&t->ix);
		free(t);
		return kvt_err(KVT_ENOMEM, "nvme: no memory");
	}
	pthread_mutex_init(&t->ring_mu, NULL);
	pthread_cond_init(&t->ring_cv, NULL);
	pthread_cond_init(&t->settle_cv, NULL);
	memcpy(t->root, o->path, len);
	t->root[len] = '\0';
	if (len == 1 && t->root[0] == '/')
		t->root[0] = '\0';
	t->base.ops = &nvme_ops;
	t->io = o->io ? o->io : kvt_io_posix();
	t->qd = o->queue_depth ? o->queue_depth : KVT_NVME_DEFAULT_QD;
	atomic_init(&t->borrowed, 0);
	atomic_init(&t->reading, 0);
	t->read_only = o->read_only;

	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", t->root);
	rc = t->read_only ? nv_check_root(t) : kvt_io_mkdirs(t->io, tmpdir, KVT_DIR_MODE);
	if (rc == -EROFS || rc == -EACCES)
		rc = nv_go_read_only(t, "mkdir -p", tmpdir, rc);
	if (rc) {
		rc = kvt_err(rc, "nvme: %s %s: %s",
			     t->read_only ? "stat" : "mkdir -p",
			     t->read_only ? t->root : tmpdir, kvt_strerror(rc));
		goto fail;
	}
	rc = t->read_only ? 0 : nv_probe(t);
	if (rc == -EROFS || rc == -EACCES)
		rc = nv_go_read_only(t, "probe file in", tmpdir, rc);
	if (rc)
		goto fail;
	if (t->read_only) { /* buffered reads: nothing to probe with */
		t->direct = 0;
		t->align = NV_DEFAULT_ALIGN;
	}
	t->seg_bytes = o->segment_bytes ? o->segment_bytes
					: KVT_NVME_DEFAULT_SEGMENT;
	t->seg_bytes &= ~(t->align - 1);
	if (!t->seg_bytes)
		t->seg_bytes = t->align;
	rc = kvt_abuf_init(&t->bufs, t->align, t->qd + NV_BUF_SPARE,
			   NV_BUF_MAX_CACHED);
	if (rc) {
		kvt_err_prefix(rc, "nvme: ");
		goto fail;
	}
	/* A table that cannot see ring transfers keeps the data on
	 * pread/pwrite, through it (io.h). */
	if (o->use_io_uring && kvt_io_ring_ok(t->io))
		nv_ring_init(t);
	rc = t->read_only ? 0 : kvt_fanout_clean_tmp(t->io, t->root, NV_TMP_GRACE_S);
	if (rc) {
		rc = kvt_err(rc, "nvme: readdir %s: %s", tmpdir, kvt_strerror(rc));
		goto fail;
	}
	rc = nv_rebuild(t);
	if (rc)
		goto fail;
	kvt_err_clear();
	*out = &t->base;
	return 0;
fail:
	nv_free(t);
	return rc;
}
