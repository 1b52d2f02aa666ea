/*
 * s3_buf.c — the S3 tier's cache of image buffers (s3_int.h).
 *
 * A put's write buffer and a get's image are 14-32 MiB for real chunks.
 * Allocated per call, a 32 MiB + 4 KiB image is above the 32 MiB cap of
 * glibc's mmap threshold, so every put and every get was an mmap, 8193
 * page faults (each zeroing a page) and a munmap: on a loaded two-core host
 * 40-60 ms a chunk against 6-10 ms for the copy alone, CPU taken from the
 * server (docs/S3.md, "32 MiB").  So released buffers are kept and the next
 * put or get takes one.
 *
 * The rule is common/abuf.h's (the file tiers' cache): get takes the
 * smallest cached buffer that fits and is at most twice the size asked,
 * else maps a new one; put keeps the buffer unless the cache would then
 * hold more than S3_BUF_SLOTS buffers or S3_BUF_BYTES bytes, freeing the
 * smallest first.  What differs is the pages: abuf advises MADV_HUGEPAGE,
 * which O_DIRECT's page pinning profits from and an S3 tier never does, and
 * populating a 34 MiB huge-page buffer stalled 40-180 ms in compaction on
 * the same host against 5-22 ms with 4 KiB pages; a bench that opens a tier
 * per round, or a burst past the cache's bound, pays that per buffer.  Here
 * buffers are plain anonymous mappings, populated when mapped.
 */
#include "tier/s3_int.h"

#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define S3_BUF_GRAIN 4096ull

int s3_bufs_init(s3_bufs *b)
{
	memset(b, 0, sizeof(*b));
	if (pthread_mutex_init(&b->mu, NULL))
		return KVT_ENOMEM;
	b->live = 1;
	return 0;
}

void *s3_buf_get(s3_bufs *b, uint64_t n, size_t *cap)
{
	uint64_t want = ((n ? n : 1) + S3_BUF_GRAIN - 1) & ~(S3_BUF_GRAIN - 1);
	uint32_t i, best = UINT32_MAX;
	void *p = NULL;

	if (want < n || (uint64_t)(size_t)want != want)
		return NULL;
	pthread_mutex_lock(&b->mu);
	for (i = 0; i < b->n; i++)
		if (b->slot[i].cap >= want && b->slot[i].cap / 2 <= want &&
		    (best == UINT32_MAX || b->slot[i].cap < b->slot[best].cap))
			best = i;
	if (best != UINT32_MAX) {
		p = b->slot[best].p;
		*cap = b->slot[best].cap;
		b->bytes -= *cap;
		b->slot[best] = b->slot[--b->n];
	}
	pthread_mutex_unlock(&b->mu);
	if (p)
		return p;
	p = mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* Advisory: before Linux 5.14 the first use faults the pages in. */
	(void)madvise(p, (size_t)want, MADV_POPULATE_WRITE);
	*cap = (size_t)want;
	return p;
}

void s3_buf_put(s3_bufs *b, void *p, size_t cap)
{
	struct { void *p; size_t cap; } out[S3_BUF_SLOTS + 1];
	uint32_t n_out = 0;

	if (!p)
		return;
	pthread_mutex_lock(&b->mu);
	b->slot[b->n].p = p;
	b->slot[b->n++].cap = cap;
	b->bytes += cap;
	while (b->n > S3_BUF_SLOTS || b->bytes > S3_BUF_BYTES) {
		uint32_t i, min = 0;
		for (i = 1; i < b->n; i++)
			if (b->slot[i].cap < b->slot[min].cap)
				min = i;
		out[n_out].p = b->slot[min].p;
		out[n_out++].cap = b->slot[min].cap;
		b->bytes -= b->slot[min].cap;
		b->slot[min] = b->slot[--b->n];
	}
	pthread_mutex_unlock(&b->mu);
	while (n_out > 0) { /* never under the lock */
		n_out--;
		munmap(out[n_out].p, out[n_out].cap);
	}
}

void s3_bufs_fini(s3_bufs *b)
{
	if (!b->live)
		return;
	while (b->n > 0) {
		b->n--;
		munmap(b->slot[b->n].p, b->slot[b->n].cap);
	}
	pthread_mutex_destroy(&b->mu);
	b->live = 0;
}
