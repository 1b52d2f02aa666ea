/*
 * abuf.h — aligned I/O buffers for O_DIRECT, kept in a bounded cache.
 *
 * Every put and get of a file tier (NVMe, shared file system) moves the
 * whole image through one buffer that O_DIRECT can use: 14-32 MiB for real
 * chunks.  Allocating and freeing that much per operation is an mmap and a
 * munmap each time, and every 4 KiB page is faulted in (and zeroed) again
 * on first touch, which costs about as much as reading the image from a
 * fast disk, and contends the mmap lock across the store's workers.  So
 * each tier owns a kvt_abuf_pool and takes its buffers from it.
 *
 * The contract:
 *
 *   Alignment.  Every buffer starts on a multiple of the pool's `align` (a
 *   power of two from 4096 to 65536: the direct-I/O alignment).  Buffers of
 *   the large class are also 2 MiB aligned.
 *
 *   Size classes.  A request of n bytes gets a buffer of n rounded up to
 *   `align` below KVT_ABUF_LARGE (from posix_memalign), or rounded up to a
 *   whole 2 MiB from KVT_ABUF_LARGE on (mmap'd, advised for transparent
 *   huge pages: fewer faults and cheaper page pinning for O_DIRECT, and
 *   populated up front where the kernel can).  *cap says the size; all of
 *   it may be used (O_DIRECT reads round the last block up).
 *
 *   Reuse.  get takes the smallest cached buffer that fits and is at most
 *   twice the size asked (a 32 MiB buffer does not serve a 64 KiB header
 *   read); else it allocates.  Contents are stale: a buffer comes back with
 *   whatever its last user left, so writers fill (and pad) what they write
 *   and readers look only at what was read.
 *
 *   Bounded cache.  put keeps the buffer unless the pool would then hold
 *   more than max_bufs buffers or max_bytes bytes; past either bound the
 *   smallest cached buffers are freed first, so the cache converges on the
 *   largest images in use and idles at a bounded size.
 *
 *   Thread safety.  get and put may be called from any thread at once; one
 *   mutex guards the cache and is never held while memory is allocated,
 *   mapped or freed.  Every buffer taken must be put back (or the pool
 *   leaks it) before kvt_abuf_fini, which frees what is cached.
 */
#ifndef KVT_ABUF_H
#define KVT_ABUF_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* From this size on, buffers are mmap'd whole 2 MiB huge pages. */
#define KVT_ABUF_LARGE (1ull << 20)
#define KVT_ABUF_HUGE (2ull << 20)

typedef struct kvt_abuf_slot {
	void *p;
	size_t cap;
} kvt_abuf_slot;

typedef struct kvt_abuf_pool {
	pthread_mutex_t mu; /* guards the fields below */
	size_t align;
	uint32_t max_bufs;
	uint64_t max_bytes;
	kvt_abuf_slot *slot; /* max_bufs + 1 entries, the first n cached */
	uint32_t n;
	uint64_t bytes;      /* cached */
} kvt_abuf_pool;

/* 0, or KVT_EINVAL (an alignment that is not a power of two in
 * [4096, 65536], no buffer allowed) or KVT_ENOMEM. */
int kvt_abuf_init(kvt_abuf_pool *p, size_t align, uint32_t max_bufs,
		  uint64_t max_bytes);
void kvt_abuf_fini(kvt_abuf_pool *p);

/* A buffer of at least n bytes (n > 0); *cap gets its size.  NULL if
 * memory is short. */
void *kvt_abuf_get(kvt_abuf_pool *p, uint64_t n, size_t *cap);

/* Give back a buffer that kvt_abuf_get returned with `cap` (NULL: no-op). */
void kvt_abuf_put(kvt_abuf_pool *p, void *buf, size_t cap);

#endif
