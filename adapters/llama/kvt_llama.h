/*
 * kvt_llama.h — llama.cpp's KV cache through kvtier.
 *
 * For a prompt, kvt_llama_prefill looks the cached prefix up in a kvtier
 * store, restores it into one llama.cpp sequence (llama_state_seq_set_data
 * with a state blob it assembles from the chunks), lets llama.cpp decode
 * only the rest, and stores the prompt's new whole chunks, cut from the
 * sequence's state blob (llama_state_seq_get_data).  docs/LLAMA.md gives
 * the blob's layout and the llama.cpp source it was read from.
 *
 * A chunk holds, per layer, K then V, each [chunk_tokens][n_head_kv *
 * head_dim] in the cache's type (f16 by default): the same bytes whether
 * llama.cpp keeps V transposed (flash attention off) or not.  The attention
 * mode still enters the namespace, since the KV of every layer past the
 * first is computed through attention and so rounds differently.
 *
 * A client of libkvtier's public API (kvtier.h) like any other; it is not
 * part of the library.  One kvt_llama belongs to one llama_context and is
 * used from one thread at a time, as the context is.
 */
#ifndef KVT_LLAMA_H
#define KVT_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvt_llama kvt_llama;

typedef struct kvt_llama_opts {
	const char *model_id;  /* names the model (its file's identity); required */
	const char *revision;  /* may be NULL */
	uint32_t chunk_tokens; /* 0: the store's chunk_size */
	int durability;        /* enum kvt_durability of the puts */
	int logits_all;        /* nonzero: logits for every decoded token, not
				* only the last */
	/* Where the adapter's log lines go (a fallback to recompute, a
	 * layout it does not know); NULL: stderr. */
	void (*log)(void *arg, const char *line);
	void *log_arg;
} kvt_llama_opts;

/* What one kvt_llama_prefill did. */
typedef struct kvt_llama_result {
	uint32_t n_tokens;     /* of the prompt */
	uint32_t hit_chunks;   /* leading chunks kvt_lookup found */
	uint32_t loaded_chunks;/* of those, loaded and verified */
	uint32_t restored;     /* tokens restored into the sequence */
	uint32_t computed;     /* tokens llama.cpp decoded (n_tokens - restored) */
	uint32_t stored;       /* new chunks put (KVT_EEXIST counts) */
	int fallback;          /* 1: a restore was abandoned and recomputed */
	double lookup_s, load_s, decode_s, save_s;
} kvt_llama_result;

/* Attach an adapter to `ctx` (of `model`) over `st`.  It decodes one token
 * into sequence 0 and reads the state back to learn the cache's types and
 * whether V is transposed (then removes it): a state layout it does not
 * know leaves the adapter working, but recompute-only, with a log line.
 * 0, or KVT_EINVAL (a NULL pointer, no model id), or what kvt_ns_init
 * returns for the namespace. */
int kvt_llama_open(kvt_store *st, struct llama_context *ctx, const kvt_llama_opts *o,
		   kvt_llama **out);
void kvt_llama_close(kvt_llama *a);

/* 1 if the adapter knows the context's state layout (restores and saves),
 * 0 if it only recomputes. */
int kvt_llama_layout_known(const kvt_llama *a);

/* 1 if the context keeps V transposed (flash attention off), 0 if not. */
int kvt_llama_v_transposed(const kvt_llama *a);

/* The namespace the adapter stores in (to look keys up, delete, locate). */
const kvt_ns *kvt_llama_ns(const kvt_llama *a);

/* Prefill `n` tokens into sequence `seq` (cleared first): restore the
 * cached prefix (whole chunks; at most n - 1 tokens, since llama.cpp must
 * decode one to give logits), decode the rest (kvt_llama_decode), store the
 * new whole chunks.  The logits are then llama_get_logits_ith(ctx, i) for
 * i = 0 .. res->computed - 1 (logits_all) or the last.  A chunk that fails
 * to load (corrupt, gone) ends the prefix there; a restore llama.cpp
 * refuses is recomputed whole, with a log line.  0, KVT_EINVAL (no tokens,
 * more than the context holds), or -EIO if llama_decode fails. */
int kvt_llama_prefill(kvt_llama *a, llama_seq_id seq, const llama_token *tokens, size_t n,
		      kvt_llama_result *res);

/* Decode tokens[0..n) at positions pos0.. into `seq`, in batches of the
 * context's n_batch, with logits for every token if `logits_all`, else for
 * the last.  What the adapter runs for the part it does not restore, and
 * what a recompute to compare with must run.  0 or -EIO. */
int kvt_llama_decode(struct llama_context *ctx, llama_seq_id seq, const llama_token *tokens,
		     size_t n, llama_pos pos0, int logits_all);

#ifdef __cplusplus
}
#endif
#endif /* KVT_LLAMA_H */
