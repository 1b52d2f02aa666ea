/*
 * move.c — chunks moving between tiers: promotion of a lower tier's hit
 * into the first tier (through a worker, or read straight into DRAM pages
 * by store_promote_into), demotion of a policy's victims, and the
 * write-through copies a put leaves behind.  A chunk arriving in a tier
 * (store_after_insert) tells its policy, whose victims start the next
 * moves.  Jobs run on the store's worker pool (pool.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/log.h"
#include "format/object.h"
#include "key/key.h"
#include "store/hier.h"
#include "store/pool.h"
#include "store/store_int.h"
#include "store/tiers.h"

void store_after_insert(kvt_store *st, int tier, const kvt_key *key,
			 uint64_t len, int acct, uint32_t tokens)
{
	kvt_key *v;
	size_t n;

	store_event_tokens(st, KVT_EV_STORED, tier, key, tokens);
	hier_insert(st->hier, tier, key, len, acct, &v, &n);
	if (n)
		store_evict_victims(st, tier, v, n);
	free(v);
}

/* One copy of a chunk's image from tier `src` to tier `dst`, run by a worker
 * (or inline when the background queue is long: back-pressure instead of
 * unbounded memory).  The image is borrowed from `src` when the job is made,
 * so it stays readable even if `src` drops the chunk meanwhile. */
struct move_job {
	struct job job;
	kvt_store *st;
	int kind;
	int src;
	kvt_key key;
	kvt_tier_rbuf *rb;
	int queued;    /* on the pool's queue, not run by its submitter */
	double queued_s; /* store_now_s() at submit */
};

/* A queued write-through copy starts no sooner than this after its put:
 * a chunk deleted within it is never written down (see move_run). */
#define THROUGH_SETTLE_S 0.010

static int flight_enter(kvt_store *st, const kvt_key *key)
{
	int ok = 1;

	pthread_mutex_lock(&st->flight_mu);
	for (size_t i = 0; i < st->n_flight; i++)
		if (!memcmp(&st->flight[i], key, sizeof(*key)))
			ok = 0;
	if (ok && st->n_flight == st->cap_flight) {
		size_t nc = st->cap_flight ? st->cap_flight * 2 : 16;
		kvt_key *nf = realloc(st->flight, nc * sizeof(*nf));
		if (nf) {
			st->flight = nf;
			st->cap_flight = nc;
		} else {
			ok = 0;
		}
	}
	if (ok)
		st->flight[st->n_flight++] = *key;
	pthread_mutex_unlock(&st->flight_mu);
	return ok;
}

static void flight_leave(kvt_store *st, const kvt_key *key)
{
	pthread_mutex_lock(&st->flight_mu);
	for (size_t i = 0; i < st->n_flight; i++)
		if (!memcmp(&st->flight[i], key, sizeof(*key))) {
			st->flight[i] = st->flight[--st->n_flight];
			break;
		}
	pthread_mutex_unlock(&st->flight_mu);
}

int store_copy_into(kvt_store *st, int dst, const kvt_tier_rbuf *rb, int durability)
{
	kvt_tier *t = st->tiers[dst];
	kvt_tier_wbuf *w;
	int rc;

	if (store_writes_off(st, dst))
		return store_writes_off_err(st, dst);
	rc = store_begin_copy(t, rb, &w);
	if (rc == 0)
		rc = t->ops->put_commit(t, w, durability);
	if (rc != KVT_EEXIST)
		store_note_write(st, dst, rc);
	if (rc == 0)
		store_after_insert(st, dst, &rb->key, rb->len, -1,
				   store_image_tokens(rb->iov, rb->n_iov));
	return rc;
}

/* Where a victim of tier `src` goes: the first tier below that is
 * write-back, or write-through but missing it (its write-through copy never
 * happened: the chunk was evicted first, or the copy failed).  -1: none. */
static int demote_target(kvt_store *st, int src, const kvt_key *key)
{
	struct hier_put_plan plan;

	hier_plan_put(st->hier, KVT_DUR_CACHED, &plan);
	for (int d = src + 1; d < st->n_tiers; d++) {
		if (!(plan.takes & (1u << d)))
			continue;
		if (st->tiers[d]->ops->exists(st->tiers[d], key) == 1)
			return -1; /* held below already */
		return d;
	}
	return -1;
}

/* Copy a lower tier's image into tier `dst` and verify it in the same
 * pass: the payload is re-checksummed as it is copied (kvt_obj_write_iov),
 * and the copy is published only if every layer's checksum matches the
 * header read from the source.  One pass over the bytes where verify, then
 * copy, would take two.  KVT_ECORRUPT if the source is bad. */
int store_copy_verified(kvt_store *st, int dst, const kvt_tier_rbuf *rb,
			 const kvt_obj_hdr *src_hdr)
{
	const void *layers[KVT_MAX_LAYERS];
	kvt_tier *t = st->tiers[dst];
	kvt_obj_hdr *h;
	kvt_tier_wbuf *w;
	const uint8_t *base;
	int rc;

	if (rb->n_iov != 1 || rb->iov[0].iov_len < rb->len) { /* paged source */
		rc = kvt_obj_verify_iov(src_hdr, rb->iov, rb->n_iov);
		return rc ? rc : store_copy_into(st, dst, rb, KVT_DUR_CACHED);
	}
	if (store_writes_off(st, dst))
		return -EIO;
	h = malloc(sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	*h = *src_hdr;
	base = (const uint8_t *)rb->iov[0].iov_base + KVT_OBJ_HEADER_BYTES;
	for (uint32_t i = 0; i < h->n_layers; i++)
		layers[i] = base + h->layers[i].offset;
	rc = t->ops->put_begin(t, &rb->key, rb->len, &w);
	if (rc == 0) {
		rc = kvt_obj_write_iov(h, layers, w->iov, w->n_iov);
		for (uint32_t i = 0; rc == 0 && i < h->n_layers; i++)
			if (h->layers[i].csum != src_hdr->layers[i].csum)
				rc = kvt_err(KVT_ECORRUPT, "layer %u checksum mismatch", i);
		if (rc)
			t->ops->put_abort(t, w);
		else
			rc = t->ops->put_commit(t, w, KVT_DUR_CACHED);
	}
	free(h);
	if (rc != KVT_EEXIST && rc != KVT_ECORRUPT)
		store_note_write(st, dst, rc);
	if (rc == 0)
		store_after_insert(st, dst, &rb->key, rb->len, -1,
				   store_image_tokens(rb->iov, rb->n_iov));
	return rc;
}

static void move_run(struct job *j)
{
	struct move_job *m = (struct move_job *)j;
	kvt_store *st = m->st;
	kvt_tier *src = st->tiers[m->src];

	if (m->kind == MOVE_PROMOTE) {
		/* This is a second read of the lower tier: verify it before it
		 * lands where reads are not verified. */
		kvt_obj_hdr *h = malloc(sizeof(*h));
		/* A chunk deleted since the read that asked for it is not
		 * brought back (the window left is one copy long). */
		if (h && src->ops->exists(src, &m->key) == 1 &&
		    store_image_header(m->rb, h) == 0 &&
		    store_copy_verified(st, 0, m->rb, h) == 0)
			hier_count(st->hier, m->src, HIER_PROMOTION);
		free(h);
		flight_leave(st, &m->key);
	} else if (m->kind == MOVE_DEMOTE) {
		int d = demote_target(st, m->src, &m->key);
		if (d >= 0 && hier_copy_in(st->hier, d, &m->key, m->rb->len)) {
			if (store_copy_into(st, d, m->rb, KVT_DUR_CACHED) == 0)
				hier_count(st->hier, d, HIER_DEMOTION);
		}
	} else { /* MOVE_THROUGH: every write-through tier below the first */
		/* Queued (not run inline by a writer the queue pushed back):
		 * let it settle first.  kvtierd deletes a key's version at the
		 * key's next SET; under redis-benchmark's stream of SETs of one
		 * key every version was written down and then unlinked (2,000
		 * files for 2,000 SETs of 1 MiB, making them a third of the
		 * cached daemon's CPU time: ext4 looking for a free inode among
		 * ones just freed), and the check below alone still let about
		 * half through, copies that ran before their overwrite came.
		 * With the wait: one or two.  The cost is that much longer for
		 * an acknowledged put to reach the disk, which cached promises
		 * nothing about. */
		double wait = m->queued ? m->queued_s + THROUGH_SETTLE_S - store_now_s() : 0;
		if (wait > 0) {
			struct timespec ts = { 0, (long)(wait * 1e9) };
			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}
		struct hier_put_plan plan;

		hier_plan_put(st->hier, KVT_DUR_CACHED, &plan);
		for (int d = m->src + 1; d < st->n_tiers; d++) {
			int rc;
			if (!(plan.through & (1u << d)))
				continue;
			/* Gone from the tier it was put in since it was queued:
			 * deleted (kvtierd's overwritten versions are), so a
			 * copy would be written only to be deleted again; or
			 * evicted, and then its demotion, queued with its own
			 * borrow at the eviction, carries it down.  Under a
			 * stream of overwrites this keeps the disk's work to
			 * the versions that live (docs/DAEMON.md, "Benchmark"). */
			if (src->ops->exists(src, &m->key) != 1)
				break;
			if (!hier_copy_in(st->hier, d, &m->key, m->rb->len))
				continue;
			rc = store_copy_into(st, d, m->rb, KVT_DUR_CACHED);
			if (rc == KVT_EEXIST) {
				/* Another writer (another node, on a shared tier)
				 * published first: its version wins, so ours
				 * leaves the tiers above and later reads load
				 * the winner. */
				for (int u = 0; u < d; u++) {
					if (st->tiers[u]->ops->del(st->tiers[u], &m->key) == 0)
						store_forget(st, u, &m->key, KVT_WHY_DELETED);
					else
						hier_remove(st->hier, u, &m->key);
				}
				break;
			}
		}
	}
	src->ops->release(src, m->rb);
	free(m);
}

/* Queue a move of `key` out of tier `src`; inline when the background
 * queue is full (demotions and write-through must not pile up unbounded). */
void store_move(kvt_store *st, int kind, int src, const kvt_key *key)
{
	struct move_job *m;
	kvt_tier *t = st->tiers[src];
	int prio = kind == MOVE_PROMOTE ? PRIO_PROMOTE : PRIO_BACKGROUND;

	m = calloc(1, sizeof(*m));
	if (!m || t->ops->get(t, key, &m->rb)) { /* no memory, or gone */
		free(m);
		if (kind == MOVE_PROMOTE)
			flight_leave(st, key);
		return;
	}
	m->job.run = move_run;
	m->job.bytes = m->rb->len; /* the image a queued copy holds */
	m->st = st;
	m->kind = kind;
	m->src = src;
	m->key = *key;
	m->queued_s = store_now_s();
	/* Back-pressure: queued copies hold their images (DRAM pages among
	 * them), so beyond a count or a share of the first tier the pool
	 * takes no more and the copy is made here, by the writer that is
	 * producing faster than the tiers below absorb. */
	m->queued = 1; /* before the submit: a worker may run it at once */
	if (pool_submit(&st->pool, &m->job, prio)) {
		m->queued = 0;
		move_run(&m->job);
	}
}

/* Victims the policy of `tier` chose: a write-back tier below gets a copy,
 * then the chunk leaves `tier`.  (A write-through tier below has it
 * already.) */
void store_evict_victims(kvt_store *st, int tier, kvt_key *v, size_t n)
{
	kvt_tier *t = st->tiers[tier];

	for (size_t i = 0; i < n; i++) {
		if (demote_target(st, tier, &v[i]) >= 0)
			store_move(st, MOVE_DEMOTE, tier, &v[i]);
		if (t->ops->del(t, &v[i]) == 0) /* the policy has forgotten it */
			store_lost(st, tier, &v[i], KVT_WHY_EVICTED);
	}
}

/* A hit in a lower tier: copy it up to the first tier without making the
 * reader wait, once per key however many readers ask at the same time. */
void store_promote(kvt_store *st, int tier, const kvt_key *key)
{
	if (tier == 0 || st->cls[tier]->fetches || !flight_enter(st, key))
		return;
	store_move(st, MOVE_PROMOTE, tier, key);
}

/* Reads straight into DRAM pages: the reservation the tier asks for. */
struct into_ctx {
	kvt_tier *dram;
	const kvt_key *key;
	kvt_tier_wbuf *w;
	uint64_t len;
};

static int into_reserve(void *arg, uint64_t len, const struct iovec **iov,
			int *n_iov)
{
	struct into_ctx *c = arg;
	int rc = c->dram->ops->put_begin(c->dram, c->key, len, &c->w);

	if (rc)
		return rc;
	c->len = len;
	*iov = c->w->iov;
	*n_iov = c->w->n_iov;
	return 0;
}

/* Promote `key` from tier `src` by reading it into reserved DRAM pages, then
 * decoding and verifying it there before it is published: no bounce buffer,
 * no copy.  0, KVT_EEXIST (already in DRAM), or an error (a bad image is
 * dropped from `src`). */
/* The image of `key` that tier `t` read straight into DRAM failed its
 * checks (`rc`, kvt_errmsg()): report it as any failed read is, through
 * the tier's corrupt() on a borrow of it, so a disk tier stops serving it
 * and lists it for verify rather than remove it (no read removes a file). */
static void drop_bad(kvt_tier *t, const kvt_key *key, int rc)
{
	char why[256];
	kvt_tier_rbuf *rb;

	snprintf(why, sizeof(why), "%s", kvt_errmsg()[0] ? kvt_errmsg() : kvt_strerror(rc));
	if (t->ops->get(t, key, &rb))
		return; /* gone already */
	kvt_err(rc, "%s", why);
	t->ops->corrupt(t, rb);
	t->ops->release(t, rb);
}

int store_promote_into(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int src)
{
	kvt_tier *t = st->tiers[src], *dram = st->tiers[0];
	struct into_ctx c = { .dram = dram, .key = key };
	kvt_obj_hdr *h;
	double t0 = store_now_s();
	uint32_t tokens;
	int rc = t->ops->get_into(t, key, into_reserve, &c);

	if (rc) {
		if (c.w)
			dram->ops->put_abort(dram, c.w);
		return rc;
	}
	h = malloc(sizeof(*h));
	if (!h) {
		dram->ops->put_abort(dram, c.w);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	{
		kvt_tier_rbuf view = { .key = *key, .len = c.len, .iov = c.w->iov,
				       .n_iov = c.w->n_iov };
		rc = store_image_header(&view, h);
		if (rc == 0 && ns)
			rc = kvt_obj_hdr_expect(h, ns, key);
		else if (rc == 0 && memcmp(h->key.b, key->b, KVT_KEY_BYTES))
			rc = kvt_err(KVT_EMISMATCH, "the image holds another key");
		if (rc == 0)
			rc = store_image_whole(c.len, h);
		if (rc == 0)
			rc = kvt_obj_verify_iov(h, c.w->iov, c.w->n_iov);
	}
	free(h);
	if (rc) {
		char hex[65];
		dram->ops->put_abort(dram, c.w);
		if (rc == KVT_EMISMATCH && ns)
			return rc; /* another namespace's chunk: not ours to drop */
		kvt_key_hex(key, hex);
		kvt_log(KVT_LOG_WARN, "%s tier: not serving %s: %s (%s)", t->ops->name,
			hex, kvt_strerror(rc), kvt_errmsg());
		if (st->cls[src]->fetches) {
			/* fetched, and gone with the pages: reading it again to
			 * report it would fetch it again */
			kvt_tier_rbuf view = { .key = *key, .len = c.len };
			t->ops->corrupt(t, &view);
		} else {
			drop_bad(t, key, rc);
		}
		store_forget(st, src, key, KVT_WHY_CORRUPT);
		return rc;
	}
	tokens = store_image_tokens(c.w->iov, c.w->n_iov); /* the commit consumes c.w */
	rc = dram->ops->put_commit(dram, c.w, KVT_DUR_CACHED);
	if (rc == 0) {
		store_after_insert(st, 0, key, c.len, -1, tokens);
		hier_read(st->hier, src, key, 1);
		store_perf_note(st, src, c.len, store_now_s() - t0);
	}
	return rc;
}
