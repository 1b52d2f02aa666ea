/*
 * fuzz_kv_events.c — libFuzzer target for `kvtier where`'s KV event
 * decoder (src/cli/where_decode.c) and the index it feeds
 * (src/cli/where_index.c).
 *
 * Every payload comes from another node of the fleet, over the network:
 * vLLM engines' and kvtier stores' KVEventBatch in msgpack.  The input is
 * one payload, as a SUB socket or a replay answer would deliver it.
 *
 * Checked for every input:
 *  - where_decode answers 0, or -1 with a sentence (non-empty, terminated)
 *    saying what was wrong, and the same answer again for the same bytes
 *    (its arrays are reused from call to call);
 *  - accepted, every event's hashes lie within the batch's, one after the
 *    other and all of them used; every hash 1..32 bytes or an integer's 8;
 *    every medium known; every BlockStored's block size at least 1;
 *  - applied to a small index over three nodes (64 entries: the LRU
 *    evicts), the index keeps its invariants (where_index_check), a block
 *    just stored is found on its medium, and a block just removed from a
 *    medium is no longer on it.
 *
 * Seeds (fuzz/corpus/kv_events): payloads of vLLM's own encoder
 * (msgspec.msgpack.encode(KVEventBatch(...)) from the installed vLLM:
 * bytes and int hashes, removals, clears, a data-parallel rank, the
 * optional fields of later versions, an unknown event type and a second
 * KV cache group), kvtier's own (captured from kvtierd's PUB socket), the
 * older array-like event form, and refusals (truncated, a bad block size,
 * a 40-byte hash, a container claiming more elements than bytes).
 *
 * The CLI is not part of the library, so its two files are compiled in.
 *
 *   ./fuzz_kv_events -max_len=65536 fuzz/corpus/kv_events
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kvtier_static brings msgpack-c when kvtier was built with events
 * (CMakeLists.txt); without, the decoder refuses every input. */
#ifdef KVT_EVENTS_LINKED
#define KVT_WHERE 1
#endif

#include "cli/where_decode.c"
#include "cli/where_index.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct where_batch batch, again;

static void check_batch(const struct where_batch *b)
{
	uint32_t next = 0;

	for (uint32_t i = 0; i < b->n_ev; i++) {
		const struct where_event *e = &b->ev[i];
		if (e->first != next || e->first + (uint64_t)e->n > b->n_h)
			abort();
		next = e->first + e->n;
		if (e->type < WHERE_EV_STORED || e->type > WHERE_EV_CLEARED ||
		    e->medium >= WHERE_N_MEDIA)
			abort();
		if (e->type == WHERE_EV_STORED && e->block_size == 0)
			abort();
		if (e->type == WHERE_EV_CLEARED && e->n)
			abort();
	}
	if (next != b->n_h)
		abort();
	for (uint32_t i = 0; i < b->n_h; i++) {
		uint8_t len = b->h[i].len;
		if (len & WHERE_HASH_INT ? len != (WHERE_HASH_INT | 8) : len < 1 || len > WHERE_HASH_MAX)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256], why2[256];
	where_index *ix;
	int rc = where_decode(&batch, data, size, why, sizeof(why));

	if (rc != 0 && rc != -1)
		abort();
	if (rc && (!why[0] || !memchr(why, '\0', sizeof(why))))
		abort();
	if (where_decode(&again, data, size, why2, sizeof(why2)) != rc ||
	    (rc && strcmp(why, why2)))
		abort();
	if (rc)
		return 0;
	check_batch(&batch);
	if (again.n_ev != batch.n_ev || again.n_h != batch.n_h ||
	    (batch.n_h && memcmp(again.h, batch.h, batch.n_h * sizeof(*batch.h))) ||
	    (batch.n_ev && memcmp(again.ev, batch.ev, batch.n_ev * sizeof(*batch.ev))))
		abort();

	ix = where_index_new(64);
	if (!ix)
		return 0;
	for (uint32_t i = 0; i < batch.n_ev; i++) {
		const struct where_event *e = &batch.ev[i];
		unsigned node = i % 3;
		if (e->type == WHERE_EV_CLEARED) {
			where_index_clear_node(ix, node);
			continue;
		}
		for (uint32_t k = 0; k < e->n; k++) {
			const struct where_hash *h = &batch.h[e->first + k];
			struct where_index_stats st;
			uint32_t bs = 0;
			if (e->type == WHERE_EV_STORED) {
				if (where_index_store(ix, node, h, e->block_size, e->medium))
					continue; /* out of memory: the index is unchanged */
				if (!(where_index_get(ix, node, h, e->block_size, &bs) & 1u << e->medium))
					abort();
			} else {
				where_index_remove(ix, node, h, e->medium);
				where_index_stats(ix, &st);
				/* Removal tries the block sizes the node has shown;
				 * past WHERE_NODE_SIZES of them a size is not kept. */
				if (!st.size_overflow && where_index_get(ix, node, h, 0, &bs) & 1u << e->medium)
					abort();
			}
		}
		if (where_index_check(ix))
			abort();
	}
	where_index_free(ix);
	return 0;
}
