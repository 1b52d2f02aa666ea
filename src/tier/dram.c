/*
 * dram.c — the host-DRAM tier (dram.h says what it promises).
 *
 * ARENA.  One anonymous mapping, reserved at open and never grown: capacity
 * rounded down to whole pages, MAP_NORESERVE so that a 2 TiB tier costs
 * nothing until its pages are written.  Pages that were never handed out
 * are given from a bump index, so the kernel faults the arena in only as far
 * as it has been used; nothing is pre-faulted.  With hugepages the arena is
 * aligned to 2 MiB and advised MADV_HUGEPAGE.  With lock_memory it is locked
 * with mlock2(MLOCK_ONFAULT): pages are pinned as they are first touched, so
 * locking does not pre-fault either (a page is always written before it is
 * handed to a reader).  A refused lock is one line on stderr, not an error.
 * A shared arena (opts.shared) is a memfd of the arena's length mapped
 * MAP_SHARED instead: the same pages, which another process given the fd
 * maps too (kvtierd's local clients write and read chunks in place).  The
 * kernel aligns a large shared mapping for huge pages itself, so there is
 * no trimming; the file is sized with ftruncate, which reserves nothing.
 *
 * PAGES.  A chunk is ceil(len / page_size) pages, not contiguous.  Free pages
 * sit on one LIFO stack of page indices (LIFO: the most recently freed page
 * is the one most likely still in cache and TLB) behind one mutex.  The
 * mutex is taken once per chunk, never per page: put_begin takes all the
 * pages it needs in one batch and a freed chunk returns all of its pages in
 * one batch.  A chunk is megabytes, so one short critical section (copying a
 * few hundred 4-byte indices) is amortised over a copy that takes hundreds
 * of microseconds.  Per-thread page caches were rejected: pages parked in an
 * idle thread's cache are invisible to every other writer, which then evicts
 * live data or fails with KVT_EFULL while free pages exist, and thread-local
 * state outlives a tier that is closed.
 *
 * INDEX.  A power-of-two number of shards, each a mutex, a chained hash table
 * and an LRU list.  Keys are hash outputs already; the first 8 bytes are
 * still passed through a 64-bit finaliser so that a caller with structured
 * keys (tests, a future tier keyed differently) cannot pile them into one
 * shard.  The low bits pick the shard, the next bits the bucket.
 *
 * EVICTION is a true global LRU, not a per-shard approximation.  Every use
 * (publish, and the last release of a borrow) stamps the entry from one
 * global counter, taken under the shard lock, so each shard's LRU list is
 * sorted by stamp.  Each shard publishes the stamp of its oldest evictable
 * entry in an atomic; an evictor reads the shards' atomics without locks,
 * locks the shard holding the minimum and evicts its tail.  The cost is a
 * scan of `shards` words per eviction (shards are capped at 1024), paid only
 * when the arena is full, against a chunk's worth of freed memory.
 *
 * LIFE OF AN ENTRY.  WRITING (after put_begin: holds pages, not in the
 * index) -> LIVE (put_commit: in the index; on the LRU list while nobody
 * borrows it) -> DEAD (deleted, evicted or reported corrupt: out of the
 * index at once, so nobody new can find it; its pages go back to the pool
 * when its last borrower releases it).  Only LIVE entries with no borrowers
 * are on the LRU list, so eviction never has to skip a pinned entry, and a
 * borrowed entry cannot be evicted by construction.  While borrowed an
 * entry is off the list; its last release puts it at the MRU end, so recency
 * is "last use ended".
 *
 * LOCKING.  A shard lock guards its table, its LRU list and the refs/state of
 * its entries.  The refcount is a plain integer under the shard lock rather
 * than an atomic: each 0 <-> 1 transition moves the entry on or off the LRU
 * list, which needs the lock anyway.  The pool lock guards the free stack.
 * No path holds two locks at once, so there is no lock order to get wrong.
 * Callers copy data into and out of pages with no tier lock held; the shard
 * lock taken by put_commit and by get orders the writer's copy before any
 * reader's, and the pool lock orders a chunk's last reader before the next
 * writer of its pages.
 *
 * STATISTICS are per-shard relaxed atomics, updated by the thread that holds
 * that shard's lock anyway, so counting adds no shared cache line to the data
 * path; stats() sums them without locks (a snapshot, not a transaction).
 */
#include "tier/dram.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/resource.h>

#include "common/err.h"

#define DRAM_MIN_PAGE ((uint32_t)4 << 10)
#define DRAM_MAX_PAGE ((uint32_t)64 << 20)
#define DRAM_DEFAULT_SHARDS 64u
#define DRAM_MAX_SHARDS 1024u
#define DRAM_HUGE_ALIGN ((size_t)2 << 20)
/* kvt_tier_wbuf.n_iov is an int, and page indices are 32-bit. */
#define DRAM_MAX_PAGES ((uint64_t)INT32_MAX)
#define DRAM_NO_STAMP UINT64_MAX
#define DRAM_INIT_BUCKETS 16u

enum dram_state {
	DRAM_WRITING = 0, /* reserved by put_begin, not yet in the index */
	DRAM_LIVE,        /* in the index */
	DRAM_DEAD,        /* out of the index; freed at its last release */
};

struct dram_shard;

struct dram_entry {
	struct dram_entry *hnext;         /* hash chain */
	struct dram_entry *newer, *older; /* LRU list: LIVE and refs == 0 only */
	struct dram_shard *shard;
	uint64_t hash;
	uint64_t stamp;    /* global use order; valid while on the LRU list */
	uint32_t refs;     /* borrowers; under the shard lock */
	uint32_t state;    /* enum dram_state; under the shard lock */
	uint32_t n_pages;
	uint32_t *pages;   /* the page indices, kept apart from iov so that a
			    * caller scribbling on iov cannot corrupt the pool */
	kvt_tier_wbuf w;   /* handed to the writer */
	kvt_tier_rbuf r;   /* handed, shared and read-only, to every borrower;
			    * r.key and r.len are the entry's own key and len */
	struct iovec iov[]; /* n_pages segments, then n_pages uint32_t */
};

struct dram_counters {
	_Atomic uint64_t chunks;
	_Atomic uint64_t hits, misses;
	_Atomic uint64_t puts, put_exists, put_rejects;
	_Atomic uint64_t bytes_in, bytes_out;
	_Atomic uint64_t evictions, evicted_bytes;
	_Atomic uint64_t corrupt;
	_Atomic uint64_t borrowed;
};

struct dram_shard {
	alignas(64) pthread_mutex_t lock;
	struct dram_entry **buckets;
	uint64_t bucket_mask;
	struct dram_entry *mru, *lru; /* ends of the LRU list */
	/* Stamp of `lru`, or DRAM_NO_STAMP when the list is empty.  Written
	 * under the lock, read without it by evictors choosing a shard. */
	_Atomic uint64_t lru_stamp;
	struct dram_counters c;
};

struct dram_pool {
	pthread_mutex_t lock;
	uint32_t *stack;      /* freed page indices, LIFO */
	uint32_t top;         /* entries on the stack */
	uint32_t bump;        /* pages [bump, n_pages) were never handed out */
	_Atomic uint64_t used; /* pages not free: for stats without the lock */
};

struct dram_tier {
	kvt_tier base;
	unsigned char *arena;
	void *map;            /* what mmap returned (hugepage alignment trims) */
	size_t map_len;
	size_t stack_len;
	uint32_t page_size;
	unsigned page_shift;
	uint32_t n_pages;
	int locked;
	int memfd;            /* the shared arena's file, or -1 */
	uint32_t n_shards;
	unsigned shard_bits;
	struct dram_shard *shards;
	struct dram_pool pool;
	_Atomic uint64_t tick; /* source of LRU stamps */
};

static const struct kvt_tier_ops dram_ops;

#define RELAXED memory_order_relaxed
#define CNT_ADD(s, field, v) atomic_fetch_add_explicit(&(s)->c.field, (v), RELAXED)
#define CNT_SUB(s, field, v) atomic_fetch_sub_explicit(&(s)->c.field, (v), RELAXED)

static struct dram_tier *dram_of(kvt_tier *t)
{
	return (struct dram_tier *)t;
}

static struct dram_entry *entry_of_w(kvt_tier_wbuf *w)
{
	return (struct dram_entry *)((char *)w - offsetof(struct dram_entry, w));
}

static struct dram_entry *entry_of_r(kvt_tier_rbuf *r)
{
	return (struct dram_entry *)((char *)r - offsetof(struct dram_entry, r));
}

/* ---------------------------------------------------------------------- */
/* Page pool                                                               */
/* ---------------------------------------------------------------------- */

/* Take up to `want` free pages into `out`; returns how many it took.  Freed
 * pages first (warm), then never-touched ones. */
static uint32_t pool_take(struct dram_tier *t, uint32_t *out, uint32_t want)
{
	struct dram_pool *p = &t->pool;
	uint32_t got, n;

	pthread_mutex_lock(&p->lock);
	n = want < p->top ? want : p->top;
	memcpy(out, p->stack + (p->top - n), (size_t)n * sizeof(*out));
	p->top -= n;
	got = n;
	n = want - got;
	if (n > t->n_pages - p->bump)
		n = t->n_pages - p->bump;
	for (uint32_t i = 0; i < n; i++)
		out[got + i] = p->bump + i;
	p->bump += n;
	got += n;
	atomic_fetch_add_explicit(&p->used, got, RELAXED);
	pthread_mutex_unlock(&p->lock);
	return got;
}

static void pool_give(struct dram_tier *t, const uint32_t *pages, uint32_t n)
{
	struct dram_pool *p = &t->pool;

	if (n == 0)
		return;
	pthread_mutex_lock(&p->lock);
	memcpy(p->stack + p->top, pages, (size_t)n * sizeof(*pages));
	p->top += n;
	atomic_fetch_sub_explicit(&p->used, n, RELAXED);
	pthread_mutex_unlock(&p->lock);
}

/* Give an entry's pages back and free it.  The caller has made sure nobody
 * can reach it any more (not in the index, no borrowers). */
static void entry_free(struct dram_tier *t, struct dram_entry *e)
{
	pool_give(t, e->pages, e->n_pages);
	free(e);
}

/* ---------------------------------------------------------------------- */
/* Index: hash table and LRU list of one shard, all under its lock          */
/* ---------------------------------------------------------------------- */

static uint64_t key_hash(const kvt_key *key)
{
	uint64_t h;

	memcpy(&h, key->b, sizeof(h));
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

static struct dram_shard *shard_of(struct dram_tier *t, uint64_t h)
{
	return &t->shards[h & (t->n_shards - 1)];
}

static struct dram_entry **bucket_of(struct dram_tier *t, struct dram_shard *s,
				     uint64_t h)
{
	return &s->buckets[(h >> t->shard_bits) & s->bucket_mask];
}

static struct dram_entry *index_find(struct dram_tier *t, struct dram_shard *s,
				     uint64_t h, const kvt_key *key)
{
	struct dram_entry *e;

	for (e = *bucket_of(t, s, h); e; e = e->hnext)
		if (e->hash == h && memcmp(e->r.key.b, key->b, KVT_KEY_BYTES) == 0)
			return e;
	return NULL;
}

/* Double the bucket array when the load passes 1.  If memory is short the
 * table keeps working with longer chains, so failure is not reported. */
static void index_grow(struct dram_tier *t, struct dram_shard *s)
{
	uint64_t n = s->bucket_mask + 1, i;
	struct dram_entry **nb, *e, *next;

	nb = calloc(2 * n, sizeof(*nb));
	if (!nb)
		return;
	for (i = 0; i < n; i++) {
		for (e = s->buckets[i]; e; e = next) {
			next = e->hnext;
			uint64_t b = (e->hash >> t->shard_bits) & (2 * n - 1);
			e->hnext = nb[b];
			nb[b] = e;
		}
	}
	free(s->buckets);
	s->buckets = nb;
	s->bucket_mask = 2 * n - 1;
}

static void index_insert(struct dram_tier *t, struct dram_shard *s,
			 struct dram_entry *e)
{
	struct dram_entry **b;

	if (atomic_load_explicit(&s->c.chunks, RELAXED) >= s->bucket_mask + 1)
		index_grow(t, s);
	b = bucket_of(t, s, e->hash);
	e->hnext = *b;
	*b = e;
	CNT_ADD(s, chunks, 1);
}

static void index_remove(struct dram_tier *t, struct dram_shard *s,
			 struct dram_entry *e)
{
	struct dram_entry **pp;

	for (pp = bucket_of(t, s, e->hash); *pp; pp = &(*pp)->hnext) {
		if (*pp == e) {
			*pp = e->hnext;
			e->hnext = NULL;
			CNT_SUB(s, chunks, 1);
			return;
		}
	}
}

static void lru_publish_tail(struct dram_shard *s)
{
	atomic_store_explicit(&s->lru_stamp, s->lru ? s->lru->stamp : DRAM_NO_STAMP,
			      RELAXED);
}

/* Put `e` at the MRU end with a fresh stamp.  The stamp is taken under the
 * shard lock, so the list stays sorted by stamp. */
static void lru_push(struct dram_tier *t, struct dram_shard *s,
		     struct dram_entry *e)
{
	e->stamp = atomic_fetch_add_explicit(&t->tick, 1, RELAXED);
	e->newer = NULL;
	e->older = s->mru;
	if (s->mru)
		s->mru->newer = e;
	s->mru = e;
	if (!s->lru) {
		s->lru = e;
		lru_publish_tail(s);
	}
}

static void lru_unlink(struct dram_shard *s, struct dram_entry *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		s->mru = e->older;
	if (e->older) {
		e->older->newer = e->newer;
	} else {
		s->lru = e->newer;
		lru_publish_tail(s);
	}
	e->newer = e->older = NULL;
}

/* Take a LIVE entry out of the index.  Returns 1 if the caller must free it
 * now (nobody borrows it), 0 if its last release will. */
static int entry_drop(struct dram_tier *t, struct dram_shard *s,
		      struct dram_entry *e)
{
	index_remove(t, s, e);
	e->state = DRAM_DEAD;
	if (e->refs)
		return 0;
	lru_unlink(s, e);
	return 1;
}

/* ---------------------------------------------------------------------- */
/* Eviction                                                                */
/* ---------------------------------------------------------------------- */

/* Evict the globally least recently used unborrowed chunk.  Returns 1 when
 * it freed one, or when the shard it chose was emptied by someone else
 * meanwhile (pages may have come free: the caller retries taking them);
 * 0 when no shard has anything evictable. */
static int evict_one(struct dram_tier *t)
{
	uint64_t best = DRAM_NO_STAMP;
	uint32_t i, bi = 0;
	struct dram_shard *s;
	struct dram_entry *e;

	for (i = 0; i < t->n_shards; i++) {
		uint64_t st = atomic_load_explicit(&t->shards[i].lru_stamp, RELAXED);
		if (st < best) {
			best = st;
			bi = i;
		}
	}
	if (best == DRAM_NO_STAMP)
		return 0;
	s = &t->shards[bi];
	pthread_mutex_lock(&s->lock);
	e = s->lru;
	if (e) {
		entry_drop(t, s, e); /* on the LRU list, so refs == 0 */
		CNT_ADD(s, evictions, 1);
		CNT_ADD(s, evicted_bytes, e->r.len);
	}
	pthread_mutex_unlock(&s->lock);
	if (e) {
		kvt_tier_evicted(&t->base, &e->r.key);
		entry_free(t, e);
	}
	return 1;
}

/* ---------------------------------------------------------------------- */
/* Ops                                                                     */
/* ---------------------------------------------------------------------- */

static int dram_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len,
			  kvt_tier_wbuf **w)
{
	struct dram_tier *t = dram_of(tt);
	struct dram_shard *s;
	struct dram_entry *e;
	uint64_t h, n;
	uint32_t got = 0;
	int found;

	if (!key || !w)
		return kvt_err(KVT_EINVAL, "dram: put_begin without a key or wbuf");
	*w = NULL;
	if (len == 0)
		return kvt_err(KVT_EINVAL, "dram: an object image is never empty");
	h = key_hash(key);
	s = shard_of(t, h);
	n = (len >> t->page_shift) + ((len & (t->page_size - 1)) != 0);
	if (n > t->n_pages) {
		CNT_ADD(s, put_rejects, 1);
		return kvt_err(KVT_ETOOBIG,
			       "dram: image of %" PRIu64 " bytes needs %" PRIu64
			       " pages of %" PRIu32 " bytes; the arena has %" PRIu32
			       " pages (%" PRIu64 " bytes)",
			       len, n, t->page_size, t->n_pages,
			       (uint64_t)t->n_pages * t->page_size);
	}

	pthread_mutex_lock(&s->lock);
	found = index_find(t, s, h, key) != NULL;
	pthread_mutex_unlock(&s->lock);
	if (found) {
		CNT_ADD(s, put_exists, 1);
		return kvt_err(KVT_EEXIST, "dram: key already stored");
	}

	e = malloc(sizeof(*e) + n * (sizeof(struct iovec) + sizeof(uint32_t)));
	if (!e)
		return kvt_err(KVT_ENOMEM, "dram: no memory for the entry of %" PRIu64
			       " pages", n);
	memset(e, 0, sizeof(*e));
	e->shard = s;
	e->hash = h;
	e->n_pages = (uint32_t)n;
	e->pages = (uint32_t *)(e->iov + n);
	e->r.key = *key;
	e->r.len = len;

	/* Take what is free, evict for the rest.  Pages already taken stay
	 * ours while we evict, so a concurrent writer cannot starve us of
	 * the pages our own evictions free.  The price: when writers in
	 * flight together need about as many pages as the arena has, their
	 * partial reservations can leave nothing evictable and some get
	 * KVT_EFULL although each alone would fit.  Arenas are thousands of
	 * chunks in practice; a caller may retry. */
	for (;;) {
		got += pool_take(t, e->pages + got, e->n_pages - got);
		if (got == e->n_pages)
			break;
		if (!evict_one(t)) {
			uint64_t used = atomic_load_explicit(&t->pool.used, RELAXED);
			pool_give(t, e->pages, got);
			free(e);
			CNT_ADD(s, put_rejects, 1);
			return kvt_err(KVT_EFULL,
				       "dram: no room for %" PRIu64 " bytes (%" PRIu64
				       " pages): %" PRIu64 " of %" PRIu32
				       " pages are borrowed or being written",
				       len, n, used - got, t->n_pages);
		}
	}

	for (uint32_t i = 0; i < e->n_pages; i++) {
		e->iov[i].iov_base = t->arena + ((size_t)e->pages[i] << t->page_shift);
		e->iov[i].iov_len = t->page_size;
	}
	e->iov[n - 1].iov_len = len - ((n - 1) << t->page_shift);
	e->r.iov = e->iov;
	e->r.n_iov = (int)n;
	e->w.key = *key;
	e->w.len = len;
	e->w.iov = e->iov;
	e->w.n_iov = (int)n;
	*w = &e->w;
	return 0;
}

static int dram_put_commit(kvt_tier *tt, kvt_tier_wbuf *w, int durability)
{
	struct dram_tier *t = dram_of(tt);
	struct dram_entry *e;
	struct dram_shard *s;

	if (!w)
		return kvt_err(KVT_EINVAL, "dram: put_commit without a wbuf");
	e = entry_of_w(w);
	s = e->shard;
	if (durability != KVT_DUR_CACHED) {
		entry_free(t, e);
		if (durability == KVT_DUR_CRASH_SAFE || durability == KVT_DUR_POWER_SAFE)
			return kvt_err(KVT_ENOTSUP,
				       "dram: memory is not durable (asked for level %d)",
				       durability);
		return kvt_err(KVT_EINVAL, "dram: durability %d is not a kvt_durability",
			       durability);
	}

	pthread_mutex_lock(&s->lock);
	if (index_find(t, s, e->hash, &e->r.key)) {
		CNT_ADD(s, put_exists, 1);
		pthread_mutex_unlock(&s->lock);
		entry_free(t, e);
		return kvt_err(KVT_EEXIST, "dram: key published by another writer first");
	}
	index_insert(t, s, e);
	e->state = DRAM_LIVE;
	lru_push(t, s, e);
	CNT_ADD(s, puts, 1);
	CNT_ADD(s, bytes_in, e->r.len);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static void dram_put_abort(kvt_tier *tt, kvt_tier_wbuf *w)
{
	if (w)
		entry_free(dram_of(tt), entry_of_w(w));
}

/* A miss leaves no kvt_err detail: it is the common answer, not a fault. */
static int dram_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **r)
{
	struct dram_tier *t = dram_of(tt);
	uint64_t h = key_hash(key);
	struct dram_shard *s = shard_of(t, h);
	struct dram_entry *e;

	*r = NULL;
	pthread_mutex_lock(&s->lock);
	e = index_find(t, s, h, key);
	if (!e) {
		CNT_ADD(s, misses, 1);
		pthread_mutex_unlock(&s->lock);
		return KVT_ENOTFOUND;
	}
	if (e->refs++ == 0)
		lru_unlink(s, e);
	CNT_ADD(s, hits, 1);
	CNT_ADD(s, bytes_out, e->r.len);
	CNT_ADD(s, borrowed, 1);
	pthread_mutex_unlock(&s->lock);
	*r = &e->r;
	return 0;
}

static void dram_release(kvt_tier *tt, kvt_tier_rbuf *r)
{
	struct dram_tier *t = dram_of(tt);
	struct dram_entry *e;
	struct dram_shard *s;
	int dofree = 0;

	if (!r)
		return;
	e = entry_of_r(r);
	s = e->shard;
	pthread_mutex_lock(&s->lock);
	CNT_SUB(s, borrowed, 1);
	if (--e->refs == 0) {
		if (e->state == DRAM_DEAD)
			dofree = 1;
		else
			lru_push(t, s, e);
	}
	pthread_mutex_unlock(&s->lock);
	if (dofree)
		entry_free(t, e);
}

static int dram_exists(kvt_tier *tt, const kvt_key *key)
{
	struct dram_tier *t = dram_of(tt);
	uint64_t h = key_hash(key);
	struct dram_shard *s = shard_of(t, h);
	int found;

	pthread_mutex_lock(&s->lock);
	found = index_find(t, s, h, key) != NULL;
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* Shared by del and corrupt: drop the entry under `key`, count it as corrupt
 * if asked.  0 or KVT_ENOTFOUND. */
static int dram_drop_key(struct dram_tier *t, const kvt_key *key, int corrupt)
{
	uint64_t h = key_hash(key);
	struct dram_shard *s = shard_of(t, h);
	struct dram_entry *e;
	int dofree;

	pthread_mutex_lock(&s->lock);
	e = index_find(t, s, h, key);
	if (!e) {
		pthread_mutex_unlock(&s->lock);
		return KVT_ENOTFOUND;
	}
	dofree = entry_drop(t, s, e);
	if (corrupt)
		CNT_ADD(s, corrupt, 1);
	pthread_mutex_unlock(&s->lock);
	if (dofree)
		entry_free(t, e);
	return 0;
}

static int dram_del(kvt_tier *tt, const kvt_key *key)
{
	return dram_drop_key(dram_of(tt), key, 0);
}

static void dram_corrupt(kvt_tier *tt, kvt_tier_rbuf *r)
{
	struct dram_tier *t = dram_of(tt);
	struct dram_entry *e = entry_of_r(r);
	struct dram_shard *s = e->shard;
	uint64_t h = key_hash(&r->key);

	/* The caller holds a reference, so e is not freed here: only unlinked
	 * from the index if it is still the entry under its key. */
	pthread_mutex_lock(&s->lock);
	if (index_find(t, s, h, &r->key) == e)
		(void)entry_drop(t, s, e);
	CNT_ADD(s, corrupt, 1);
	pthread_mutex_unlock(&s->lock);
}

struct dram_iter_item {
	kvt_key key;
	uint64_t len;
};

/* One shard at a time: copy its keys out under the lock, then call fn with
 * no lock held, so fn may call back into the tier (get, del, ...). */
static int dram_iterate(kvt_tier *tt,
			int (*fn)(void *arg, const kvt_key *key, uint64_t len),
			void *arg)
{
	struct dram_tier *t = dram_of(tt);
	struct dram_iter_item *items = NULL;
	size_t cap = 0;
	int rc = 0;

	for (uint32_t si = 0; si < t->n_shards && rc == 0; si++) {
		struct dram_shard *s = &t->shards[si];
		size_t n = 0, want;

		pthread_mutex_lock(&s->lock);
		want = (size_t)atomic_load_explicit(&s->c.chunks, RELAXED);
		if (want > cap) {
			struct dram_iter_item *ni = realloc(items, want * sizeof(*ni));
			if (!ni) {
				pthread_mutex_unlock(&s->lock);
				free(items);
				return kvt_err(KVT_ENOMEM,
					       "dram: no memory to list %zu keys", want);
			}
			items = ni;
			cap = want;
		}
		for (uint64_t b = 0; b <= s->bucket_mask; b++) {
			for (struct dram_entry *e = s->buckets[b]; e; e = e->hnext) {
				items[n].key = e->r.key;
				items[n].len = e->r.len;
				n++;
			}
		}
		pthread_mutex_unlock(&s->lock);
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = fn(arg, &items[i].key, items[i].len);
	}
	free(items);
	return rc;
}

/* used_bytes is every page not on the free list: published chunks, writes
 * in flight, and dropped chunks still held by a borrower (the memory really
 * in use; at rest it equals the published chunks' pages). */
static void dram_stats(kvt_tier *tt, kvt_tier_stats *out)
{
	struct dram_tier *t = dram_of(tt);

	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", dram_ops.name);
	out->capacity_bytes = (uint64_t)t->n_pages * t->page_size;
	out->used_bytes = atomic_load_explicit(&t->pool.used, RELAXED) * t->page_size;
	for (uint32_t i = 0; i < t->n_shards; i++) {
		struct dram_counters *c = &t->shards[i].c;
#define SUM(f) out->f += atomic_load_explicit(&c->f, RELAXED)
		SUM(chunks);
		SUM(hits);
		SUM(misses);
		SUM(puts);
		SUM(put_exists);
		SUM(put_rejects);
		SUM(bytes_in);
		SUM(bytes_out);
		SUM(evictions);
		SUM(evicted_bytes);
		SUM(corrupt);
		SUM(borrowed);
#undef SUM
	}
}

/* Frees everything, including what was never fully set up (open's error
 * path).  Entries still borrowed or being written at close are the caller's
 * contract violation; their memory is gone with the arena. */
static void dram_destroy(struct dram_tier *t)
{
	if (t->shards) {
		for (uint32_t i = 0; i < t->n_shards; i++) {
			struct dram_shard *s = &t->shards[i];
			if (!s->buckets)
				continue;
			for (uint64_t b = 0; b <= s->bucket_mask; b++) {
				struct dram_entry *e, *next;
				for (e = s->buckets[b]; e; e = next) {
					next = e->hnext;
					free(e);
				}
			}
			free(s->buckets);
			pthread_mutex_destroy(&s->lock);
		}
		free(t->shards);
	}
	if (t->pool.stack)
		munmap(t->pool.stack, t->stack_len);
	pthread_mutex_destroy(&t->pool.lock);
	if (t->map)
		munmap(t->map, t->map_len);
	if (t->memfd >= 0)
		close(t->memfd);
	free(t);
}

static void dram_close(kvt_tier *tt)
{
	if (tt)
		dram_destroy(dram_of(tt));
}

static const struct kvt_tier_pages dram_pages = {
	.arena = kvt_dram_arena,
	.arena_fd = kvt_dram_arena_fd,
	.free_bytes = kvt_dram_free_bytes,
	.rekey = kvt_dram_rekey,
};

static const struct kvt_tier_ops dram_ops = {
	.name = "dram",
	.put_begin = dram_put_begin,
	.put_commit = dram_put_commit,
	.put_abort = dram_put_abort,
	.get = dram_get,
	.release = dram_release,
	.exists = dram_exists,
	.del = dram_del,
	.iterate = dram_iterate,
	.stats = dram_stats,
	.corrupt = dram_corrupt,
	.close = dram_close,
	.pages = &dram_pages,
};

/* ---------------------------------------------------------------------- */
/* Open                                                                    */
/* ---------------------------------------------------------------------- */

static unsigned log2_u32(uint32_t v)
{
	unsigned s = 0;
	while ((1u << s) < v)
		s++;
	return s;
}

/* A shared arena: a memfd of `len` bytes, mapped whole. */
static int arena_map_shared(struct dram_tier *t, size_t len, int hugepages)
{
	unsigned char *m;
	int e;

	t->memfd = memfd_create("kvtier-dram", MFD_CLOEXEC);
	if (t->memfd < 0) {
		e = errno;
		return kvt_err(-e, "dram: memfd_create for a shared arena: %s", strerror(e));
	}
	if (ftruncate(t->memfd, (off_t)len)) {
		e = errno;
		return kvt_err(-e, "dram: cannot size the shared arena to %zu bytes: %s",
			       len, strerror(e));
	}
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		 t->memfd, 0);
	if (m == MAP_FAILED) {
		e = errno;
		return kvt_err(-e, "dram: cannot map a shared arena of %zu bytes: %s",
			       len, strerror(e));
	}
	t->map = t->arena = m;
	t->map_len = len;
	if (hugepages)
		(void)madvise(m, len, MADV_HUGEPAGE); /* shmem_enabled=advise */
	return 0;
}

/* Reserve the arena: address space only (MAP_NORESERVE), 2 MiB aligned when
 * huge pages are wanted. */
static int arena_map(struct dram_tier *t, size_t len, int hugepages)
{
	size_t map_len = len;
	unsigned char *m;

	if (hugepages)
		map_len = ((len + DRAM_HUGE_ALIGN - 1) & ~(DRAM_HUGE_ALIGN - 1)) +
			  DRAM_HUGE_ALIGN;
	m = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		int e = errno;
		return kvt_err(-e, "dram: cannot reserve an arena of %zu bytes: %s",
			       map_len, strerror(e));
	}
	t->map = m;
	t->map_len = map_len;
	t->arena = m;
	if (hugepages) {
		/* Trim to a 2 MiB aligned start and a 2 MiB multiple long, so
		 * that every 2 MiB of the arena can be one huge page. */
		uintptr_t a = ((uintptr_t)m + DRAM_HUGE_ALIGN - 1) & ~(uintptr_t)(DRAM_HUGE_ALIGN - 1);
		size_t head = a - (uintptr_t)m;
		size_t body = map_len - DRAM_HUGE_ALIGN;
		size_t tail = map_len - head - body;

		if (head)
			munmap(m, head);
		if (tail)
			munmap((unsigned char *)a + body, tail);
		t->map = (void *)a;
		t->map_len = body;
		t->arena = (unsigned char *)a;
		/* Only advice: a kernel without THP keeps small pages. */
		(void)madvise(t->map, t->map_len, MADV_HUGEPAGE);
	}
	return 0;
}

/* Pin the arena if allowed.  MLOCK_ONFAULT pins each page as it is first
 * touched instead of faulting the whole arena in now.  Refusal is one line
 * on stderr: the tier works, only DMA straight from it does not. */
static void arena_lock(struct dram_tier *t, size_t len)
{
	const char *why;
	char buf[128];
	struct rlimit rl;

#ifdef MLOCK_ONFAULT
	if (mlock2(t->arena, len, MLOCK_ONFAULT) == 0) {
		t->locked = 1;
		return;
	}
	why = strerror(errno);
#else
	why = "mlock2(MLOCK_ONFAULT) unavailable";
#endif
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		snprintf(buf, sizeof(buf), "%s; RLIMIT_MEMLOCK is %llu bytes", why,
			 (unsigned long long)rl.rlim_cur);
	else
		snprintf(buf, sizeof(buf), "%s", why);
	fprintf(stderr,
		"kvtier: dram: mlock of %zu bytes refused (%s); pages are not pinned for DMA\n",
		len, buf);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Fault the whole arena in now (after mlock, so locked pages are populated
 * once).  MADV_POPULATE_WRITE does it in the kernel in one call; older
 * kernels get one write per base page. */
static void arena_prefault(struct dram_tier *t, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);

	if (madvise(t->arena, len, MADV_POPULATE_WRITE) == 0)
		return;
	if (pg <= 0)
		pg = 4096;
	for (size_t off = 0; off < len; off += (size_t)pg)
		((volatile unsigned char *)t->arena)[off] = 0;
}

int kvt_dram_open(const kvt_dram_opts *opts, kvt_tier **out)
{
	struct dram_tier *t;
	uint32_t ps, shards;
	uint64_t n_pages;
	size_t len;
	int rc;

	if (!out)
		return kvt_err(KVT_EINVAL, "dram: open without a place for the tier");
	*out = NULL;
	if (!opts)
		return kvt_err(KVT_EINVAL, "dram: open without options");
	ps = opts->page_size;
	if (ps < DRAM_MIN_PAGE || ps > DRAM_MAX_PAGE || (ps & (ps - 1)))
		return kvt_err(KVT_EINVAL,
			       "dram: page_size %" PRIu32
			       " is not a power of two from 4 KiB to 64 MiB", ps);
	shards = opts->shards ? opts->shards : DRAM_DEFAULT_SHARDS;
	if (shards > DRAM_MAX_SHARDS || (shards & (shards - 1)))
		return kvt_err(KVT_EINVAL,
			       "dram: shards %" PRIu32 " is not a power of two up to %u",
			       opts->shards, DRAM_MAX_SHARDS);
	n_pages = opts->capacity / ps;
	if (n_pages == 0)
		return kvt_err(KVT_EINVAL,
			       "dram: capacity %" PRIu64 " bytes is less than one page of %"
			       PRIu32 " bytes", opts->capacity, ps);
	if (n_pages > DRAM_MAX_PAGES || n_pages * ps > SIZE_MAX / 2)
		return kvt_err(KVT_EINVAL,
			       "dram: capacity %" PRIu64 " bytes is %" PRIu64
			       " pages of %" PRIu32 " bytes; at most %" PRIu64
			       " pages (use larger pages)",
			       opts->capacity, n_pages, ps, DRAM_MAX_PAGES);
	len = (size_t)(n_pages * ps);

	t = calloc(1, sizeof(*t));
	if (!t)
		return kvt_err(KVT_ENOMEM, "dram: no memory for the tier");
	t->base.ops = &dram_ops;
	t->memfd = -1;
	t->page_size = ps;
	t->page_shift = log2_u32(ps);
	t->n_pages = (uint32_t)n_pages;
	t->n_shards = shards;
	t->shard_bits = log2_u32(shards);
	atomic_init(&t->tick, 0);
	atomic_init(&t->pool.used, 0);
	pthread_mutex_init(&t->pool.lock, NULL);

	rc = opts->shared ? arena_map_shared(t, len, opts->hugepages)
			  : arena_map(t, len, opts->hugepages);
	if (rc)
		goto fail;
	/* The free stack can hold every page, but only its used part is ever
	 * touched, so it too is reserved, not allocated. */
	t->stack_len = (size_t)n_pages * sizeof(uint32_t);
	t->pool.stack = mmap(NULL, t->stack_len, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (t->pool.stack == MAP_FAILED) {
		int e = errno;
		t->pool.stack = NULL;
		rc = kvt_err(-e, "dram: cannot reserve the free list of %zu bytes: %s",
			     t->stack_len, strerror(e));
		goto fail;
	}
	t->shards = aligned_alloc(alignof(struct dram_shard),
				  shards * sizeof(struct dram_shard));
	if (!t->shards) {
		rc = kvt_err(KVT_ENOMEM, "dram: no memory for %" PRIu32 " shards", shards);
		goto fail;
	}
	memset(t->shards, 0, shards * sizeof(struct dram_shard));
	for (uint32_t i = 0; i < shards; i++) {
		struct dram_shard *s = &t->shards[i];
		s->buckets = calloc(DRAM_INIT_BUCKETS, sizeof(*s->buckets));
		if (!s->buckets) {
			rc = kvt_err(KVT_ENOMEM, "dram: no memory for the index");
			goto fail;
		}
		s->bucket_mask = DRAM_INIT_BUCKETS - 1;
		pthread_mutex_init(&s->lock, NULL);
		atomic_init(&s->lru_stamp, DRAM_NO_STAMP);
	}
	if (opts->lock_memory)
		arena_lock(t, len);
	if (opts->prefault)
		arena_prefault(t, len);
	*out = &t->base;
	return 0;
fail:
	dram_destroy(t);
	return rc;
}

int kvt_dram_locked(const kvt_tier *t)
{
	if (!t || t->ops != &dram_ops)
		return 0;
	return ((const struct dram_tier *)t)->locked;
}

int kvt_dram_arena(const kvt_tier *t, void **base, size_t *len)
{
	const struct dram_tier *d = (const struct dram_tier *)t;

	if (!t || t->ops != &dram_ops)
		return KVT_EINVAL;
	*base = d->arena;
	*len = (size_t)d->n_pages * d->page_size;
	return 0;
}

int kvt_dram_rekey(kvt_tier *tt, kvt_tier_wbuf *w, const kvt_key *key)
{
	struct dram_entry *e;

	if (!tt || tt->ops != &dram_ops || !w || !key)
		return kvt_err(KVT_EINVAL, "dram: rekey of no write, or not of a DRAM tier");
	/* A write is in no index nor list until its commit: its key is only
	 * where the commit will look (hash, shard) and what it will insert. */
	e = entry_of_w(w);
	e->hash = key_hash(key);
	e->shard = shard_of(dram_of(tt), e->hash);
	e->r.key = *key;
	e->w.key = *key;
	return 0;
}

uint64_t kvt_dram_free_bytes(const kvt_tier *tt)
{
	const struct dram_tier *t = (const struct dram_tier *)tt;

	if (!tt || tt->ops != &dram_ops)
		return 0;
	return (uint64_t)(t->n_pages - atomic_load_explicit(&t->pool.used, RELAXED)) *
	       t->page_size;
}

int kvt_dram_arena_fd(const kvt_tier *t)
{
	if (!t || t->ops != &dram_ops)
		return -1;
	return ((const struct dram_tier *)t)->memfd;
}
