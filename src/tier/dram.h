/*
 * dram.h — the host-DRAM tier.
 *
 * One arena reserved at open at the configured capacity (2 MiB huge pages
 * when the kernel gives them, page-locked when RLIMIT_MEMLOCK allows, so a
 * GPU can DMA from it later), cut into fixed-size pages.  A chunk is a list
 * of pages: no fragmentation, and the same pages serve memcpy, DMA, O_DIRECT
 * and sockets.  The index is sharded (a mutex per shard) and the page pool
 * keeps per-thread caches off the shared free list, so many threads put and
 * get at once without a global lock on the data path; data is copied with no
 * lock held.  Eviction is LRU over unborrowed chunks; reference counts keep a
 * borrowed chunk's pages from being freed or reused until its last release.
 */
#ifndef KVT_DRAM_H
#define KVT_DRAM_H

#include "tier/tier.h"

typedef struct kvt_dram_opts {
	uint64_t capacity;  /* bytes; rounded down to whole pages */
	uint32_t page_size; /* power of two, 4 KiB .. 64 MiB */
	int hugepages;      /* nonzero: ask for transparent huge pages */
	int lock_memory;    /* nonzero: try mlock (failure is logged, not fatal) */
	int prefault;       /* nonzero: populate the whole arena at open, so no
			     * put pays a page fault on the hot path */
	uint32_t shards;    /* index shards (power of two); 0 = default */
	int shared;         /* nonzero: the arena is a memfd mapped MAP_SHARED,
			     * so another process can map the same pages
			     * (kvt_dram_arena_fd: the daemon's local clients) */
} kvt_dram_opts;

/* Open a DRAM tier.  KVT_EINVAL names a bad option; -ENOMEM if the arena
 * cannot be reserved. */
int kvt_dram_open(const kvt_dram_opts *opts, kvt_tier **out);

/* 1 if the arena is page-locked (usable for DMA without staging). */
int kvt_dram_locked(const kvt_tier *t);

/* The arena of a DRAM tier (for a device to register as page-locked
 * memory): 0, or KVT_EINVAL if `t` is not one. */
int kvt_dram_arena(const kvt_tier *t, void **base, size_t *len);

/* The memfd behind a shared arena (opts.shared), owned by the tier: the
 * caller passes it on, never closes it.  -1 if `t` is not a shared DRAM
 * tier.  Page i of the arena is at offset i * page_size of the file. */
int kvt_dram_arena_fd(const kvt_tier *t);

/* Give write `w` of this tier (put_begin's, not yet committed) another
 * key: the one its commit publishes it under.  The local server reserves
 * a client's next write before the client has named its key. */
int kvt_dram_rekey(kvt_tier *t, kvt_tier_wbuf *w, const kvt_key *key);

/* Bytes of free pages now (taken by the next put_begin without evicting);
 * 0 for a tier that is not DRAM. */
uint64_t kvt_dram_free_bytes(const kvt_tier *t);

#endif
