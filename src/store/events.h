/*
 * events.h — KV events in vLLM's format: what the store's tiers gained and
 * lost, published for a fleet's router (docs/EVENTS.md).
 *
 * The wire is vLLM's ZmqEventPublisher's, so that a router that reads a
 * vLLM engine's events reads kvtier's unchanged:
 *
 *   PUB      [topic, sequence number (u64 big-endian), msgpack payload]
 *   payload  KVEventBatch, array-like: [ts (float seconds), [event, ...]]
 *   event    a map tagged by "type": BlockStored {block_hashes,
 *            parent_block_hash, token_ids, block_size, lora_id, medium,
 *            lora_name}, BlockRemoved {block_hashes, medium},
 *            AllBlocksCleared {}
 *   ROUTER   (replay) a request ["", start sequence (u64 big-endian)] from
 *            a DEALER socket is answered with every batch still buffered
 *            from that number on, each [topic, seq, payload], then the end
 *            marker ["", -1 (i64 big-endian), ""]; a malformed request
 *            gets the end marker alone, its last frame naming the fault.
 *
 * A chunk's block hashes are the engine's where the engine named the chunk
 * (kvt_events_name: vLLM's blocks through its connector), else the chunk's
 * 32-byte kvtier key (a msgpack bin).  The medium names the tier: "GPU",
 * "DRAM", "NVME", "SHARED_FS", "S3".
 *
 * Posting never blocks and never fails a put: an event goes into a bounded
 * queue (max_queue) or, when that is full, is counted as dropped.  One
 * thread drains the queue into batches, encodes, sends with ZMQ_DONTWAIT
 * (a subscriber past its high-water mark loses batches it can replay; no
 * one else waits) and keeps the last buffer_steps batches for replay.
 */
#ifndef KVT_STORE_EVENTS_H
#define KVT_STORE_EVENTS_H

#include <stdint.h>

#include "kvtier.h"

enum kvt_ev_type { KVT_EV_STORED = 1, KVT_EV_REMOVED = 2, KVT_EV_CLEARED = 3 };


struct kvt_events_conf {
	char endpoint[256];        /* PUB: bound if it has '*' or is ipc/inproc, else connected */
	char replay_endpoint[256]; /* ROUTER, always bound; "" = no replay */
	char topic[128];
	uint32_t buffer_steps;     /* batches kept for replay */
	uint32_t hwm;              /* the PUB socket's send high-water mark */
	uint32_t max_queue;        /* events waiting for the publisher thread */
};

typedef struct kvt_events kvt_events;

/* Bind or connect the sockets and start the publisher thread.  0, or
 * KVT_ECONFIG naming the endpoint that failed, KVT_ENOTSUP when kvtier was
 * built without libzmq and msgpack-c, KVT_ENOMEM. */
int kvt_events_open(const struct kvt_events_conf *c, kvt_events **out);

/* Queue one event (any thread).  `medium` is one of the names above (a
 * string constant: it is kept, not copied); `block_size` the tokens the
 * chunk holds (BlockStored only). */
void kvt_events_post(kvt_events *ev, int type, const char *medium,
		     const kvt_key *key, uint32_t block_size);

/* A replay request's frames after the ROUTER's identity: NULL with
 * *start set, or what is wrong with it (the text the error reply
 * carries).  Pure, for the fuzzer (fuzz/fuzz_replay.c). */
const char *kvt_events_replay_parse(const void *const *frame, const size_t *len, int n,
				    uint64_t *start);

/* Chunk `key` holds the engine's blocks hashes[0..n) (each hash_len bytes:
 * 32, or 8 for a 64-bit integer, big-endian), after `parent` (NULL: the
 * first), block_size tokens each: its events name them, as the engine's
 * own do.  0, or KVT_EINVAL for a shape past the table's. */
int kvt_events_name(kvt_events *ev, const kvt_key *key, const uint8_t *hashes, uint32_t n,
		    uint32_t hash_len, const uint8_t *parent, uint32_t block_size);

void kvt_events_counters(kvt_events *ev, kvt_events_stats *out);

/* Publish what is queued, stop the thread, close the sockets. */
void kvt_events_close(kvt_events *ev);

#endif
