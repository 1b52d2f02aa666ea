/*
 * device.c — the device tier (device.h says what it promises).
 *
 * MEMORY.  One allocation of the whole capacity from the backend at open,
 * cut into fixed pages; a chunk is ceil(len / page) pages, not contiguous,
 * taken from and returned to one LIFO stack of page numbers under its own
 * mutex, once per chunk.  Allocating per chunk (cudaMalloc) would
 * synchronise the device on every put and fragment what the engine may
 * want later; one reservation does neither.
 *
 * INDEX.  The file tiers' index (findex: hash, LRU, capacity accounting,
 * reservations for writes in flight), its entries extended with the
 * chunk's pages, a host copy of its header and a reference count.  An entry
 * evicted or deleted while borrowed is marked dead and keeps its pages
 * until its last release, so a reader's pointers stay valid; until then its
 * space is counted as reserved, so puts evict others rather than find the
 * pages gone.
 *
 * COPIES.  A put is written by the store into a host staging buffer (the
 * store computes the checksums while it copies) and committed with one
 * host-to-device copy per page.  A `get` reads a host-visible backend's
 * pages in place, a device's through a staging copy; `get_dev` never
 * copies.  Copies run with no tier lock held.
 */
#include "tier/device.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/err.h"
#include "format/object.h"
#include "tier/findex.h"

struct dev_ent {
	struct kvt_findex_ent fe; /* first: findex frees entries with free() */
	int refs;                 /* borrowers; under ix.mu */
	int dead;                 /* out of the index; freed at the last release */
	uint32_t npages;
	uint8_t *hdr;             /* host copy of the 4 KiB header */
	uint32_t pages[];
};

struct dev_wbuf {
	kvt_tier_wbuf w;
	struct iovec iov;
	uint64_t charge;
	struct dev_ent *e; /* pages taken, not yet indexed */
	uint8_t *stage;
};

struct dev_rbuf {
	kvt_tier_rbuf r;
	struct dev_ent *e;
	uint8_t *stage;    /* a staging copy, or NULL */
	int n;
	struct iovec iov[];
};

struct dev_tier {
	kvt_tier base;
	struct kvt_devmem *mem;
	uint8_t *arena;
	uint64_t page;
	uint32_t npages;
	pthread_mutex_t pool_mu;
	uint32_t *free_pages, nfree;
	struct kvt_findex ix;
	int ix_ok;
	atomic_uint_fast64_t borrowed;
};

static struct dev_tier *dev_of(kvt_tier *t) { return (struct dev_tier *)t; }

static uint8_t *page_ptr(const struct dev_tier *t, uint32_t p)
{
	return t->arena + (uint64_t)p * t->page;
}

/* Take `n` pages into e->pages, or none: 0 or KVT_EFULL. */
static int pool_take(struct dev_tier *t, struct dev_ent *e, uint32_t n)
{
	pthread_mutex_lock(&t->pool_mu);
	if (t->nfree < n) {
		pthread_mutex_unlock(&t->pool_mu);
		return KVT_EFULL;
	}
	t->nfree -= n;
	memcpy(e->pages, t->free_pages + t->nfree, n * sizeof(uint32_t));
	pthread_mutex_unlock(&t->pool_mu);
	e->npages = n;
	return 0;
}

static void ent_free(struct dev_tier *t, struct dev_ent *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&t->pool_mu);
	memcpy(t->free_pages + t->nfree, e->pages, e->npages * sizeof(uint32_t));
	t->nfree += e->npages;
	pthread_mutex_unlock(&t->pool_mu);
	free(e->hdr);
	free(e);
}

/* Entries removed from the index: freed now, or by their last borrower. */
static void reap(struct dev_tier *t, struct kvt_findex_ent *v)
{
	while (v) {
		struct dev_ent *e = (struct dev_ent *)v;
		int busy;

		v = v->hnext;
		pthread_mutex_lock(&t->ix.mu);
		busy = e->refs > 0;
		e->dead = busy;
		if (busy)
			t->ix.reserved += e->fe.charge;
		pthread_mutex_unlock(&t->ix.mu);
		if (!busy)
			ent_free(t, e);
	}
}

/* Segments of an image of `len` bytes in e's pages, from byte `from`. */
static int segs(const struct dev_tier *t, const struct dev_ent *e, uint64_t len,
		uint64_t from, struct iovec *iov)
{
	int n = 0;

	for (uint64_t off = from; off < len; n++) {
		uint64_t in = off % t->page, take = t->page - in;

		if (take > len - off)
			take = len - off;
		iov[n].iov_base = page_ptr(t, e->pages[off / t->page]) + in;
		iov[n].iov_len = (size_t)take;
		off += take;
	}
	return n;
}

/* The first `len` bytes of e's pages to or from the host buffer `host`,
 * a page at a time. */
static int copy_pages(struct dev_tier *t, const struct dev_ent *e, uint8_t *host, uint64_t len,
		      int to_dev)
{
	int rc = 0;

	for (uint64_t off = 0; off < len && !rc; off += t->page) {
		uint8_t *dev = page_ptr(t, e->pages[off / t->page]);
		size_t take = (size_t)(len - off < t->page ? len - off : t->page);
		rc = to_dev ? t->mem->to_dev(t->mem, dev, host + off, take)
			    : t->mem->to_host(t->mem, host + off, dev, take);
	}
	return rc;
}

/* --- writes ------------------------------------------------------------------ */

static int dev_put_begin(kvt_tier *tt, const kvt_key *key, uint64_t len, kvt_tier_wbuf **out)
{
	struct dev_tier *t = dev_of(tt);
	struct kvt_findex_ent *victims = NULL;
	struct dev_wbuf *w;
	uint64_t reserved, n;
	int rc;

	*out = NULL;
	if (len < KVT_OBJ_HEADER_BYTES || len > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD)
		return kvt_err(KVT_EINVAL, "device: an image of %llu bytes is not possible",
			       (unsigned long long)len);
	n = (len + t->page - 1) / t->page;
	rc = kvt_findex_reserve(&t->ix, key, n * t->page, &victims, &reserved);
	reap(t, victims);
	if (rc == KVT_ETOOBIG)
		return kvt_err(rc, "device: image of %llu bytes exceeds capacity %llu",
			       (unsigned long long)len, (unsigned long long)t->ix.capacity);
	if (rc == KVT_EFULL)
		return kvt_err(rc, "device: %llu bytes of writes in flight leave no room for %llu",
			       (unsigned long long)reserved, (unsigned long long)len);
	if (rc)
		return rc;
	w = calloc(1, sizeof(*w));
	if (w) {
		w->e = calloc(1, sizeof(*w->e) + n * sizeof(uint32_t));
		w->stage = malloc((size_t)len);
	}
	if (!w || !w->e || !w->stage) {
		if (w) {
			free(w->e);
			free(w->stage);
		}
		free(w);
		kvt_findex_unreserve(&t->ix, n * t->page);
		return kvt_err(KVT_ENOMEM, "device: no memory to stage %llu bytes",
			       (unsigned long long)len);
	}
	if ((rc = pool_take(t, w->e, (uint32_t)n))) {
		free(w->e);
		free(w->stage);
		free(w);
		kvt_findex_unreserve(&t->ix, n * t->page);
		return kvt_err(rc, "device: pages still held by readers of evicted chunks");
	}
	w->charge = n * t->page;
	w->w.key = *key;
	w->w.len = len;
	w->iov.iov_base = w->stage;
	w->iov.iov_len = (size_t)len;
	w->w.iov = &w->iov;
	w->w.n_iov = 1;
	*out = &w->w;
	return 0;
}

static void wbuf_free(struct dev_tier *t, struct dev_wbuf *w)
{
	kvt_findex_unreserve(&t->ix, w->charge);
	ent_free(t, w->e);
	free(w->stage);
	free(w);
}

static void dev_put_abort(kvt_tier *tt, kvt_tier_wbuf *ww)
{
	if (ww)
		wbuf_free(dev_of(tt), (struct dev_wbuf *)ww);
}

static int dev_put_commit(kvt_tier *tt, kvt_tier_wbuf *ww, int durability)
{
	struct dev_tier *t = dev_of(tt);
	struct dev_wbuf *w = (struct dev_wbuf *)ww;
	struct dev_ent *e = w->e;
	struct kvt_findex_ent *victims = NULL;
	int rc = 0;

	if (durability != KVT_DUR_CACHED) {
		wbuf_free(t, w);
		return kvt_err(KVT_ENOTSUP, "device: memory does not survive the process");
	}
	rc = copy_pages(t, e, w->stage, w->w.len, 1);
	if (!rc && !(e->hdr = malloc(KVT_OBJ_HEADER_BYTES)))
		rc = kvt_err(KVT_ENOMEM, "device: no memory for a header copy");
	if (rc) {
		wbuf_free(t, w);
		return rc;
	}
	memcpy(e->hdr, w->stage, KVT_OBJ_HEADER_BYTES);
	e->fe.key = w->w.key;
	e->fe.len = w->w.len;
	e->fe.charge = w->charge;
	pthread_mutex_lock(&t->ix.mu);
	t->ix.reserved -= w->charge;
	w->charge = 0;
	if (kvt_findex_find_locked(&t->ix, &e->fe.key)) {
		t->ix.st.put_exists++;
		rc = KVT_EEXIST;
	} else {
		kvt_findex_insert_locked(&t->ix, &e->fe);
		t->ix.st.puts++;
		t->ix.st.bytes_in += w->w.len;
		w->e = NULL;
		kvt_findex_evict_locked(&t->ix, 0, NULL, &victims);
	}
	pthread_mutex_unlock(&t->ix.mu);
	reap(t, victims);
	wbuf_free(t, w);
	return rc ? kvt_err(rc, "device: the chunk was published by another writer") : 0;
}

/* --- reads ------------------------------------------------------------------- */

/* Borrow: a reference on the entry, and room for its segments. */
static int borrow(struct dev_tier *t, const kvt_key *key, struct dev_rbuf **out)
{
	struct dev_ent *e;
	struct dev_rbuf *r;

	pthread_mutex_lock(&t->ix.mu);
	e = (struct dev_ent *)kvt_findex_find_locked(&t->ix, key);
	if (!e) {
		t->ix.st.misses++;
		pthread_mutex_unlock(&t->ix.mu);
		return KVT_ENOTFOUND;
	}
	r = calloc(1, sizeof(*r) + (e->npages + 1) * sizeof(struct iovec));
	if (!r) {
		pthread_mutex_unlock(&t->ix.mu);
		return kvt_err(KVT_ENOMEM, "device: out of memory");
	}
	e->refs++;
	kvt_findex_touch_locked(&t->ix, &e->fe);
	t->ix.st.hits++;
	t->ix.st.bytes_out += e->fe.len;
	pthread_mutex_unlock(&t->ix.mu);
	atomic_fetch_add(&t->borrowed, 1);
	r->e = e;
	r->r.key = *key;
	r->r.len = e->fe.len;
	r->r.iov = r->iov;
	*out = r;
	return 0;
}

static void dev_release(kvt_tier *tt, kvt_tier_rbuf *rb)
{
	struct dev_tier *t = dev_of(tt);
	struct dev_rbuf *r = (struct dev_rbuf *)rb;
	int last;

	if (!r)
		return;
	pthread_mutex_lock(&t->ix.mu);
	last = --r->e->refs == 0 && r->e->dead;
	if (last)
		t->ix.reserved -= r->e->fe.charge;
	pthread_mutex_unlock(&t->ix.mu);
	if (last)
		ent_free(t, r->e);
	atomic_fetch_sub(&t->borrowed, 1);
	free(r->stage);
	free(r);
}

static int dev_get(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **out)
{
	struct dev_tier *t = dev_of(tt);
	struct dev_rbuf *r;
	int rc = borrow(t, key, &r);

	*out = NULL;
	if (rc)
		return rc;
	if (t->mem->host_visible) {
		r->r.n_iov = segs(t, r->e, r->r.len, 0, r->iov);
	} else {
		if (!(r->stage = malloc((size_t)r->r.len))) {
			dev_release(tt, &r->r);
			return kvt_err(KVT_ENOMEM, "device: no memory to stage %llu bytes",
				       (unsigned long long)r->r.len);
		}
		rc = copy_pages(t, r->e, r->stage, r->r.len, 0);
		if (rc) {
			dev_release(tt, &r->r);
			return rc;
		}
		r->iov[0].iov_base = r->stage;
		r->iov[0].iov_len = (size_t)r->r.len;
		r->r.n_iov = 1;
	}
	*out = &r->r;
	return 0;
}

static int dev_get_dev(kvt_tier *tt, const kvt_key *key, kvt_tier_rbuf **out)
{
	struct dev_tier *t = dev_of(tt);
	struct dev_rbuf *r;
	int rc = borrow(t, key, &r);

	*out = NULL;
	if (rc)
		return rc;
	r->iov[0].iov_base = r->e->hdr;
	r->iov[0].iov_len = KVT_OBJ_HEADER_BYTES;
	r->r.n_iov = 1 + segs(t, r->e, r->r.len, KVT_OBJ_HEADER_BYTES, r->iov + 1);
	*out = &r->r;
	return 0;
}

/* --- the rest ---------------------------------------------------------------- */

static int dev_exists(kvt_tier *tt, const kvt_key *key)
{
	return kvt_findex_exists(&dev_of(tt)->ix, key);
}

static int dev_forget(struct dev_tier *t, const kvt_key *key, int corrupt)
{
	struct kvt_findex_ent *e = kvt_findex_forget(&t->ix, key, corrupt);

	if (!e)
		return KVT_ENOTFOUND;
	e->hnext = NULL;
	reap(t, e);
	return 0;
}

static int dev_del(kvt_tier *tt, const kvt_key *key)
{
	return dev_forget(dev_of(tt), key, 0);
}

static void dev_corrupt(kvt_tier *tt, kvt_tier_rbuf *rb)
{
	struct dev_tier *t = dev_of(tt);
	struct dev_ent *e = ((struct dev_rbuf *)rb)->e;
	struct kvt_findex_ent *gone = kvt_findex_drop(&t->ix, &rb->key, e->fe.gen, 1, NULL);

	if (gone) {
		gone->hnext = NULL;
		reap(t, gone);
	}
}

static int dev_iterate(kvt_tier *tt, int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		       void *arg)
{
	return kvt_findex_iterate(&dev_of(tt)->ix, "device", fn, arg);
}

static void dev_stats(kvt_tier *tt, kvt_tier_stats *out)
{
	struct dev_tier *t = dev_of(tt);

	kvt_findex_stats(&t->ix, out, "device", atomic_load(&t->borrowed));
}

static void dev_destroy(struct dev_tier *t)
{
	if (t->ix_ok)
		kvt_findex_fini(&t->ix); /* frees the entries; their pages go with the arena */
	if (t->arena)
		t->mem->free(t->mem, t->arena, (size_t)t->npages * t->page);
	if (t->mem)
		t->mem->close(t->mem);
	free(t->free_pages);
	pthread_mutex_destroy(&t->pool_mu);
	free(t);
}

static void dev_close(kvt_tier *tt)
{
	struct dev_tier *t = dev_of(tt);
	struct kvt_findex_ent *e;

	/* Header copies are the tier's own: findex frees only the entries. */
	pthread_mutex_lock(&t->ix.mu);
	for (e = t->ix.mru; e; e = e->older)
		free(((struct dev_ent *)e)->hdr);
	pthread_mutex_unlock(&t->ix.mu);
	dev_destroy(t);
}

static const struct kvt_tier_ops dev_ops = {
	.name = "device",
	.put_begin = dev_put_begin,
	.put_commit = dev_put_commit,
	.put_abort = dev_put_abort,
	.get = dev_get,
	.release = dev_release,
	.get_dev = dev_get_dev,
	.exists = dev_exists,
	.del = dev_del,
	.iterate = dev_iterate,
	.stats = dev_stats,
	.corrupt = dev_corrupt,
	.close = dev_close,
};

/* --- host memory as the device ------------------------------------------------ */

static int host_alloc(struct kvt_devmem *m, size_t len, void **p)
{
	void *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);

	(void)m;
	if (a == MAP_FAILED)
		return kvt_err(-errno, "device (host): cannot map %zu bytes", len);
	*p = a;
	return 0;
}

static void host_free(struct kvt_devmem *m, void *p, size_t len)
{
	(void)m;
	munmap(p, len);
}

static int host_copy(struct kvt_devmem *m, void *dst, const void *src, size_t n)
{
	(void)m;
	memcpy(dst, src, n);
	return 0;
}

static void host_close(struct kvt_devmem *m)
{
	free(m);
}

int kvt_devmem_host_open(struct kvt_devmem **out)
{
	struct kvt_devmem *m = calloc(1, sizeof(*m));

	if (!m)
		return kvt_err(KVT_ENOMEM, "out of memory");
	*m = (struct kvt_devmem){ .name = "host", .host_visible = 1, .alloc = host_alloc,
				  .free = host_free, .to_dev = host_copy, .to_host = host_copy,
				  .close = host_close };
	*out = m;
	return 0;
}

#ifndef KVT_HAVE_CUDA
int kvt_devmem_cuda_open(int device, struct kvt_devmem **out)
{
	(void)device;
	*out = NULL;
	return kvt_err(KVT_ENOTSUP, "this kvtier was built without CUDA (no nvcc found)");
}
#endif

int kvt_device_open(const kvt_device_opts *o, kvt_tier **out)
{
	struct dev_tier *t;
	int rc;

	*out = NULL;
	if (!o || !o->backend)
		return kvt_err(KVT_EINVAL, "device tier: options missing");
	if (o->page_size < 4096 || o->page_size > (64u << 20) || (o->page_size & (o->page_size - 1)))
		return kvt_err(KVT_EINVAL, "device tier: page size %u is not a power of two "
			       "from 4KiB to 64MiB", o->page_size);
	if (o->capacity / o->page_size < 2 || o->capacity / o->page_size > UINT32_MAX)
		return kvt_err(KVT_EINVAL, "device tier: capacity %llu is not 2 to 2^32 pages of %u",
			       (unsigned long long)o->capacity, o->page_size);
	t = calloc(1, sizeof(*t));
	if (!t)
		return kvt_err(KVT_ENOMEM, "out of memory");
	pthread_mutex_init(&t->pool_mu, NULL);
	t->base.ops = &dev_ops;
	t->page = o->page_size;
	t->npages = (uint32_t)(o->capacity / o->page_size);
	if (!strcmp(o->backend, "host") || !strcmp(o->backend, "host-staged")) {
		rc = kvt_devmem_host_open(&t->mem);
		if (rc == 0 && o->backend[4])
			t->mem->host_visible = 0; /* read through copies, as a GPU's */
	}
	else if (!strcmp(o->backend, "cuda"))
		rc = kvt_devmem_cuda_open(o->device, &t->mem);
	else
		rc = kvt_err(KVT_EINVAL, "device tier: backend \"%s\" is not cuda or host",
			     o->backend);
	if (rc) {
		dev_destroy(t);
		return rc;
	}
	if ((rc = t->mem->alloc(t->mem, (size_t)t->npages * t->page, (void **)&t->arena))) {
		t->arena = NULL;
		dev_destroy(t);
		return rc;
	}
	t->free_pages = malloc((size_t)t->npages * sizeof(uint32_t));
	if (t->free_pages && kvt_findex_init(&t->ix, (uint64_t)t->npages * t->page) == 0)
		t->ix_ok = 1;
	if (!t->ix_ok) {
		dev_destroy(t);
		return kvt_err(KVT_ENOMEM, "device tier: no memory for its index");
	}
	/* Highest page on the bottom of the stack: page 0 is handed out first. */
	for (uint32_t i = 0; i < t->npages; i++)
		t->free_pages[i] = t->npages - 1 - i;
	t->nfree = t->npages;
	*out = &t->base;
	return 0;
}
