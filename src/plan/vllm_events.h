/*
 * vllm_events.h — requests out of vLLM's KV-cache events.
 *
 * vLLM publishes, over ZMQ with msgpack, batches of KV events
 * (vllm/distributed/kv_events.py): KVEventBatch {ts, events,
 * data_parallel_rank}, each event tagged by "type": BlockStored
 * {block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
 * lora_name, ...}, BlockRemoved {block_hashes, medium}, AllBlocksCleared.
 * The planner reads their JSON export, one batch (or one event with its
 * own "ts") a line, as msgspec.json.encode gives it for a decoded batch.
 *
 * A BlockStored says which blocks the GPU just computed, behind which
 * parent.  The reader keeps every block's parent, so a chain of blocks is
 * known back to its root.  An event continues an open request when its
 * parent is the last block that request stored within the last
 * PLAN_VLLM_GAP_S seconds (a chunked prefill's next chunk, or a block its
 * decode filled); otherwise it starts a request, whose prompt is its
 * parent's whole chain and its own blocks.  Blocks added by one-block
 * continuations count as output, the others as prompt.  Requests served
 * wholly from vLLM's GPU prefix cache store nothing and are not seen: the
 * trace is the traffic below the GPU's own cache.  BlockRemoved and
 * AllBlocksCleared are the GPU's evictions and are read past.
 */
#ifndef KVT_PLAN_VLLM_EVENTS_H
#define KVT_PLAN_VLLM_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_VLLM_GAP_S 5.0

struct plan_vllm;

/* One request found: arrival (seconds, as in the events), its blocks in
 * prompt order (64-bit ids: the block hashes), prompt and output tokens. */
typedef int (*plan_vllm_emit)(void *arg, double ts, const uint64_t *ids, size_t n,
			      uint64_t in_tokens, uint64_t out_tokens);

int plan_vllm_new(struct plan_vllm **out);
void plan_vllm_free(struct plan_vllm *v);

/* Read one line (a JSON object, not NUL-terminated).  *block_tokens is
 * the block size: 0 takes the first event's; an event of another size is
 * refused.  0, KVT_ENOMEM, or KVT_EINVAL with the reason in err (no file
 * or line: the caller adds them). */
int plan_vllm_line(struct plan_vllm *v, const char *p, size_t n, uint32_t *block_tokens,
		   char *err, size_t errlen);

/* Every request read, in order of arrival, through emit (which may stop
 * the walk by returning non-zero: that is returned). */
int plan_vllm_finish(struct plan_vllm *v, plan_vllm_emit emit, void *arg);

#endif
