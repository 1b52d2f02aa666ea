/*
 * where_index.h — `kvtier where`'s fleet index: which node holds which
 * block, on which media, within a bound on memory (docs/WHERE.md).
 *
 * An entry is one (node, block hash, block size): the same hash announced
 * by two nodes is two entries, and the same hash under two block sizes on
 * one node is two entries too, so blocks of another model's stream (vLLM's
 * hashes name tokens, not the model: equal tokens under another block size
 * hash alike) never answer for this one.  Each entry holds the set of
 * media the node holds the block on, one bit per medium, in the order of
 * their speed.
 *
 * The table is open addressing over the hash bytes (linear probing,
 * deletion by backward shift, at most half full), each slot a 32-bit tag
 * and the entry's index in a slab that never moves, so a miss costs one
 * cache line and a hit two.  At most `capacity` entries are kept: the one
 * least recently announced (BlockStored) is forgotten to make room, so the
 * index never grows past its bound whatever the fleet publishes.
 *
 * Not thread-safe: the caller holds one lock around every call.
 */
#ifndef KVT_CLI_WHERE_INDEX_H
#define KVT_CLI_WHERE_INDEX_H

#include <stddef.h>
#include <stdint.h>

/* A block hash as events carry it: bytes (a msgpack bin, 1..32 of them:
 * kvtier's keys and vLLM's sha256 digests are 32) or a 64-bit integer
 * (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES), kept as its 8 bytes
 * big-endian.  The two forms never compare equal. */
#define WHERE_HASH_MAX 32
#define WHERE_HASH_INT 0x80 /* in len: the 8 bytes are an integer's */

struct where_hash {
	uint8_t len; /* 1..32, or WHERE_HASH_INT | 8 */
	uint8_t b[WHERE_HASH_MAX];
};

void where_hash_from_u64(struct where_hash *h, uint64_t v);

/* The media, fastest first: the order in which a block's copies are worth
 * loading.  kvtier names GPU, DRAM, NVME, SHARED_FS, S3; vLLM GPU, CPU and
 * STORAGE; any other name is OTHER. */
enum {
	WHERE_M_GPU, WHERE_M_CPU, WHERE_M_DRAM, WHERE_M_NVME, WHERE_M_STORAGE,
	WHERE_M_SHARED_FS, WHERE_M_S3, WHERE_M_OTHER, WHERE_N_MEDIA
};

extern const char *const where_media_names[WHERE_N_MEDIA];

/* The medium named by `s` (`n` bytes, not terminated). */
int where_medium(const char *s, size_t n);

/* Nodes an index tells apart, and block sizes it remembers per node (a
 * removal names no block size, so it is tried under each). */
#define WHERE_MAX_NODES 1024
#define WHERE_NODE_SIZES 8

typedef struct where_index where_index;

struct where_index_stats {
	uint64_t entries, capacity;
	uint64_t bytes;       /* the slab and the table as allocated now */
	uint64_t bytes_full;  /* the same at capacity */
	uint64_t evicted;     /* forgotten to keep within capacity */
	uint64_t size_overflow; /* block sizes past WHERE_NODE_SIZES on a node */
};

/* An empty index of at most `capacity` entries (1..2^30); memory grows
 * with what is indexed.  NULL when out of memory. */
where_index *where_index_new(uint64_t capacity);
void where_index_free(where_index *ix);

/* Node `node` holds block (h, block_size) on `medium`.  0, or -1 out of
 * memory (the index is unchanged). */
int where_index_store(where_index *ix, unsigned node, const struct where_hash *h,
		      uint32_t block_size, int medium);

/* Node `node` no longer holds `h` on `medium`, under any block size. */
void where_index_remove(where_index *ix, unsigned node, const struct where_hash *h, int medium);

/* Forget every block of `node` (AllBlocksCleared, a publisher restart). */
void where_index_clear_node(where_index *ix, unsigned node);

/* The media bits (1 << WHERE_M_*) node `node` holds (h, block_size) on,
 * 0 for none.  block_size 0: under any block size the node has announced,
 * the first found, its size in *found_bs.  Changes nothing. */
unsigned where_index_get(const where_index *ix, unsigned node, const struct where_hash *h,
			 uint32_t block_size, uint32_t *found_bs);

void where_index_stats(const where_index *ix, struct where_index_stats *out);

/* Check every invariant (table <-> slab, LRU list, counts); 0 or -1.  For
 * the tests and the fuzz target. */
int where_index_check(const where_index *ix);

#endif
