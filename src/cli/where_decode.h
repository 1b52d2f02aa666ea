/*
 * where_decode.h — the KV event payload as `kvtier where` reads it: vLLM's
 * KVEventBatch in msgpack (vllm/distributed/kv_events.py; kvtier's own
 * publisher, src/store/events.h, writes the same).
 *
 *   batch    [ts (float, or int), [event, ...], data_parallel_rank (int
 *            or nil), ...]: two elements at least; more are a later
 *            version's and ignored
 *   event    a map tagged by "type" (vLLM's msgspec tag), or the older
 *            array form ["BlockStored", field, ...] in declaration order:
 *     BlockStored   block_hashes (array of bin, 1..32 bytes, or int),
 *                   block_size (int 1..2^32-1) required; parent_block_hash
 *                   (nil, bin or int), token_ids (array of ints), lora_id
 *                   (nil or int), medium and lora_name (nil or str),
 *                   group_idx (nil or int) checked when present; any other
 *                   key (extra_keys, kv_cache_spec_kind, ...) skipped
 *     BlockRemoved  block_hashes required; medium, group_idx as above
 *     AllBlocksCleared
 *   Another "type" is skipped and counted (a later vLLM's event); so is
 *   an event of a KV cache group other than the first (group_idx > 0: a
 *   hybrid model's sliding-window group evicts blocks its full-attention
 *   group keeps, and a prefix is placed by the first group).
 *
 * Anything else is refused whole, with a sentence naming the element that
 * was wrong ("event 3: block_hashes[2]: a bin of 40 bytes (at most 32)").
 * Nothing of a refused batch is applied: an index is never half-updated.
 *
 * msgpack-c's unpacker allocates a container's elements before it reads
 * them, so five bytes claiming an array of 2^31 elements would ask for
 * 48 GiB.  A scan of the bytes first checks that every container claims no
 * more elements than there are bytes left (each takes one at least): what
 * msgpack-c then allocates is bounded by a small multiple of the input.
 */
#ifndef KVT_CLI_WHERE_DECODE_H
#define KVT_CLI_WHERE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "where_index.h"

/* The largest payload read (a batch of 1024 events of 1024 hashes each is
 * some 40 MiB). */
#define WHERE_PAYLOAD_MAX (64u << 20)

enum { WHERE_EV_STORED = 1, WHERE_EV_REMOVED, WHERE_EV_CLEARED };

struct where_event {
	uint8_t type;        /* WHERE_EV_* */
	uint8_t medium;      /* WHERE_M_*: nil or absent is GPU (vLLM's own blocks
			      * before it named the medium) */
	uint32_t block_size; /* BlockStored */
	uint32_t first, n;   /* its hashes: batch->h[first .. first + n) */
};

struct where_batch {
	double ts;
	int64_t dp_rank;     /* -1: none given */
	struct where_event *ev;
	uint32_t n_ev, cap_ev;
	struct where_hash *h;
	uint32_t n_h, cap_h;
	uint32_t skipped;    /* events of another type or KV cache group */
};

/* Decode one payload into `b` (its arrays reused from call to call).  0,
 * or -1 with `why` saying what was wrong.  Never reads past p[n). */
int where_decode(struct where_batch *b, const uint8_t *p, size_t n, char *why, size_t why_len);

void where_batch_free(struct where_batch *b);

#endif
