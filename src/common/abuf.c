/*
 * abuf.c — the aligned-buffer cache of the file tiers; see abuf.h.
 *
 * The cache is a small array (max_bufs is a queue depth plus a few, or
 * eight): a linear scan under the mutex is cheaper than any structure, and
 * the scan is all the mutex covers.
 */
#include "common/abuf.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/err.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int kvt_abuf_init(kvt_abuf_pool *p, size_t align, uint32_t max_bufs,
		  uint64_t max_bytes)
{
	memset(p, 0, sizeof(*p));
	if (align < 4096 || align > 65536 || (align & (align - 1)))
		return kvt_err(KVT_EINVAL, "buffer alignment %zu is not a power of two in [4096, 65536]",
			       align);
	if (!max_bufs || !max_bytes)
		return kvt_err(KVT_EINVAL, "a buffer cache needs room for one buffer");
	p->slot = calloc((size_t)max_bufs + 1, sizeof(*p->slot));
	if (!p->slot)
		return kvt_err(KVT_ENOMEM, "no memory for a buffer cache");
	if (pthread_mutex_init(&p->mu, NULL)) {
		free(p->slot);
		p->slot = NULL;
		return kvt_err(KVT_ENOMEM, "cannot initialise a mutex");
	}
	p->align = align;
	p->max_bufs = max_bufs;
	p->max_bytes = max_bytes;
	return 0;
}

/* The size class of a request: see abuf.h.  0 if it cannot be had. */
static size_t abuf_class(const kvt_abuf_pool *p, uint64_t n)
{
	uint64_t grain = n >= KVT_ABUF_LARGE ? KVT_ABUF_HUGE : p->align;
	uint64_t c = (n + grain - 1) & ~(grain - 1);

	return c < n || (uint64_t)(size_t)c != c ? 0 : (size_t)c;
}

static void abuf_free(void *buf, size_t cap)
{
	if (cap >= KVT_ABUF_LARGE)
		munmap(buf, cap);
	else
		free(buf);
}

/* A fresh buffer of class size `cap`. */
static void *abuf_new(const kvt_abuf_pool *p, size_t cap)
{
	uint8_t *m, *a;
	size_t head;
	void *buf;

	if (cap < KVT_ABUF_LARGE)
		return posix_memalign(&buf, p->align, cap) ? NULL : buf;
	/* Over-map by one huge page and trim, so the buffer is 2 MiB
	 * aligned (and so aligned for any direct-I/O alignment). */
	m = mmap(NULL, cap + KVT_ABUF_HUGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	a = (uint8_t *)(((uintptr_t)m + KVT_ABUF_HUGE - 1) &
			~(uintptr_t)(KVT_ABUF_HUGE - 1));
	head = (size_t)(a - m);
	if (head)
		munmap(m, head);
	if (KVT_ABUF_HUGE - head)
		munmap(a + cap, KVT_ABUF_HUGE - head);
	/* Both advisory: without THP we get 4 KiB pages, without
	 * MADV_POPULATE_WRITE (Linux < 5.14) the first use faults them in. */
	(void)madvise(a, cap, MADV_HUGEPAGE);
	(void)madvise(a, cap, MADV_POPULATE_WRITE);
	return a;
}

void *kvt_abuf_get(kvt_abuf_pool *p, uint64_t n, size_t *cap)
{
	size_t want = abuf_class(p, n ? n : 1);
	void *buf = NULL;
	uint32_t i, best = UINT32_MAX;

	if (!want)
		return NULL;
	pthread_mutex_lock(&p->mu);
	for (i = 0; i < p->n; i++)
		if (p->slot[i].cap >= want && p->slot[i].cap / 2 <= want &&
		    (best == UINT32_MAX || p->slot[i].cap < p->slot[best].cap))
			best = i;
	if (best != UINT32_MAX) {
		buf = p->slot[best].p;
		*cap = p->slot[best].cap;
		p->bytes -= *cap;
		p->slot[best] = p->slot[--p->n];
	}
	pthread_mutex_unlock(&p->mu);
	if (buf)
		return buf;
	buf = abuf_new(p, want);
	if (buf)
		*cap = want;
	return buf;
}

void kvt_abuf_put(kvt_abuf_pool *p, void *buf, size_t cap)
{
	kvt_abuf_slot out[2];
	int n_out = 0;

	if (!buf)
		return;
	pthread_mutex_lock(&p->mu);
	p->slot[p->n].p = buf;
	p->slot[p->n++].cap = cap;
	p->bytes += cap;
	/* Over a bound: free the smallest (perhaps this one).  One buffer
	 * came in, so at most one goes for the count; the byte bound may
	 * take more, freed after the lock in batches of two. */
	while (p->n > p->max_bufs || p->bytes > p->max_bytes) {
		uint32_t i, min = 0;
		for (i = 1; i < p->n; i++)
			if (p->slot[i].cap < p->slot[min].cap)
				min = i;
		out[n_out++] = p->slot[min];
		p->bytes -= p->slot[min].cap;
		p->slot[min] = p->slot[--p->n];
		if (n_out == 2) {
			pthread_mutex_unlock(&p->mu);
			abuf_free(out[0].p, out[0].cap);
			abuf_free(out[1].p, out[1].cap);
			n_out = 0;
			pthread_mutex_lock(&p->mu);
		}
	}
	pthread_mutex_unlock(&p->mu);
	while (n_out > 0) {
		n_out--;
		abuf_free(out[n_out].p, out[n_out].cap);
	}
}

void kvt_abuf_fini(kvt_abuf_pool *p)
{
	if (!p->slot)
		return;
	while (p->n > 0) {
		p->n--;
		abuf_free(p->slot[p->n].p, p->slot[p->n].cap);
	}
	free(p->slot);
	p->slot = NULL;
	pthread_mutex_destroy(&p->mu);
}
