/*
 * kvtier/connector.h — the engine connector: an engine's paged
 * KV blocks to and from chunks, per request, layer by layer.  What an
 * engine integration calls is here.
 *
 * kvtier.h includes it; its conventions (errors, ownership, threads) are
 * kvtier.h's.
 */
#ifndef KVTIER_CONNECTOR_H
#define KVTIER_CONNECTOR_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Engine connector                                                          */
/* ------------------------------------------------------------------------ */

/*
 * What an inference engine calls to move its paged KV memory in and out of
 * a store (docs/CONNECTOR.md).  The engine describes where each layer's K
 * and V live (kvt_paged_layer), opens a connector over a store and a
 * namespace, and then, per request: asks how many prompt tokens are worth
 * loading (kvt_conn_lookup), loads them into its blocks layer by layer
 * (kvt_conn_load, waiting on each layer with kvt_conn_wait_layer just before
 * that layer's attention), and saves the whole chunks it computed, layer by
 * layer as the forward pass produces them (kvt_conn_save, kvt_conn_save_layer).
 * Finished loads and saves are collected with kvt_conn_finished; a load that
 * failed part-way names exactly the blocks it left invalid
 * (kvt_conn_load_errors) so the engine recomputes those alone.
 *
 * Mapping.  A chunk of the namespace (layout.chunk_tokens tokens) is
 * chunk_tokens / block_tokens consecutive entries of the request's block
 * table: chunk i covers tokens [i·chunk_tokens, (i+1)·chunk_tokens) and the
 * blocks block_ids[i·n .. i·n + n) with n = chunk_tokens / block_tokens.  An
 * engine block size that does not divide the chunk is refused (KVT_ELAYOUT):
 * a block would then belong to two chunks, and a failed chunk could not be
 * reported as whole blocks.  A partial last chunk is never stored (it is not
 * keyed); a load may end inside its last chunk (a full hit loads one token
 * fewer), and then only those tokens are written.
 *
 * Payload order.  One layer of a chunk is plane-major (K, then V; one plane
 * for MLA), then token, then head, then head_dim elements, then the layer's
 * scale_bytes (see kvt_layout): the engine's strides are applied on the
 * engine side only, so every engine layout of the same model stores the same
 * bytes.
 */

/* One plane (K, V, or the MLA latent) of one layer in the engine's memory.
 * Element e of head h of token t of block b is the dtype-sized value at
 *     base + b·block_stride + t·token_stride + h·head_stride + e·elem_stride
 * (strides in bytes).  vLLM's FlashAttention NHD tensor (2, num_blocks,
 * block_size, kv_heads, head_size) of bf16 has, for plane p,
 * base = data + p·num_blocks·block_stride, block_stride =
 * block_size·kv_heads·head_size·2, token_stride = kv_heads·head_size·2,
 * head_stride = head_size·2, elem_stride = 2; llama.cpp's transposed V (one
 * row of kv_size cells per head element) has token_stride = the element size
 * and elem_stride = kv_size times it.  A stride may be 0 only for a
 * dimension of extent 1. */
typedef struct kvt_paged_plane {
	void *base;
	uint64_t block_stride;
	uint64_t token_stride;
	uint64_t head_stride;
	uint64_t elem_stride;
} kvt_paged_plane;

/* One layer: its planes (plane[1] unused when layout.kv_planes is 1) and
 * where the layer's layout.scale_bytes of quantisation scales live (fp8: the
 * engine's k_scale and v_scale, copied as bytes); NULL when scale_bytes is
 * 0.  A load writes the scales there. */
typedef struct kvt_paged_layer {
	kvt_paged_plane plane[2];
	void *scale;
} kvt_paged_layer;

/* How the engine's KV memory is laid out, for kvt_conn_open. */
typedef struct kvt_conn_desc {
	/* Either one entry per layer (n_layer_descs = layout.num_layers), or
	 * one entry for a tensor that holds every layer (n_layer_descs = 1):
	 * layer l is then layer 0 with layer_stride·l added to each plane's
	 * base and scale_bytes·l to its scale pointer (vLLM's cross-layer
	 * blocks, SGLang's host pool in page_first or layer_first). */
	const kvt_paged_layer *layers;
	uint32_t n_layer_descs;
	uint64_t layer_stride;  /* bytes; only with n_layer_descs 1 */
	uint32_t num_blocks;    /* block ids run 0 .. num_blocks-1 */
	uint32_t block_tokens;  /* tokens per engine block; 0: layout.block_size */
	uint32_t threads;       /* connector worker threads; 0: 2 */
	int durability;         /* of saved chunks: enum kvt_durability */
	/* Seconds the engine takes to compute one chunk's prefill: when > 0,
	 * kvt_conn_lookup loads only the prefix worth loading
	 * (kvt_lookup_worth); 0 loads every chunk found. */
	double recompute_s;
	/* Where the planes live: enum kvt_conn_memory.  Engine memory on a
	 * GPU needs a build with the CUDA backend (KVT_ENOTSUP otherwise). */
	uint32_t memory;
	int32_t cuda_device;    /* with KVT_CONN_MEM_CUDA: the device ordinal */
} kvt_conn_desc;

enum kvt_conn_memory {
	KVT_CONN_MEM_HOST = 0, /* host memory (engines on CPU, SGLang's host pool) */
	KVT_CONN_MEM_CUDA = 1, /* CUDA device memory */
};

typedef struct kvt_conn kvt_conn;

/* Open a connector of `ns` over `st`.  The descriptor and the layer array
 * are copied; the engine memory they point to is the engine's and must stay
 * mapped until kvt_conn_close.  The store must outlive the connector.  0
 * with *out set, or: KVT_EINVAL (a NULL pointer, n_layer_descs neither 1
 * nor num_layers, no blocks, a NULL base or scale pointer the layout needs,
 * a zero stride of a dimension longer than 1, an unknown durability, more
 * than 64 threads), KVT_ELAYOUT (block_tokens does not divide chunk_tokens),
 * KVT_ENOTSUP (engine memory this build or machine cannot copy: CUDA
 * memory without the CUDA backend, or no such device), -EIO (the device's
 * stream or staging could not be set up), with the field or the CUDA error
 * in kvt_errmsg().  Its worker threads start with its first load or save
 * (a connector used only for kvt_conn_gather/scatter runs none); with CUDA
 * memory, it also sets up a stream and one layer of device staging. */
KVT_API int kvt_conn_open(kvt_store *st, const kvt_ns *ns, const kvt_conn_desc *desc,
		  kvt_conn **out);

/* Wait for every load and save in flight, then free the connector and the
 * state of every request not yet ended.  No other thread may be inside a
 * call on `c`.  NULL is a no-op. */
KVT_API void kvt_conn_close(kvt_conn *c);

/* --- synchronous gather and scatter -------------------------------------- */

/* Copy one layer of one chunk between the engine's blocks and `chunk`, a
 * buffer of kvt_layout_layer_bytes() in the payload order (above).  The
 * chunk's tokens come from block_ids[0 .. n_blocks) in order, block_tokens
 * each; n_tokens (1 .. chunk_tokens) of them are copied, so a scatter may
 * stop inside the last block.  Gather writes the chunk's token rows
 * [0, n_tokens) of each plane and the scale bytes and leaves the rest of
 * the buffer alone; scatter writes the engine's blocks and scale.  0, or
 * KVT_EINVAL (a NULL pointer, a layer or token count out of range, fewer
 * blocks than n_tokens needs, a block id >= num_blocks), KVT_ESMALL (`cap`
 * or `len` below the layer's bytes).  Thread-safe: calls on disjoint
 * engine memory may run at once (the engine's memory is not locked; with
 * CUDA memory they take turns on the connector's stream), and each returns
 * with its copy complete. */
KVT_API int kvt_conn_gather(kvt_conn *c, uint32_t layer, const uint32_t *block_ids,
		    size_t n_blocks, uint32_t n_tokens, void *chunk, size_t cap);
KVT_API int kvt_conn_scatter(kvt_conn *c, uint32_t layer, const uint32_t *block_ids,
		     size_t n_blocks, uint32_t n_tokens, const void *chunk,
		     size_t len);

/* --- per request, layer by layer ----------------------------------------- */

/* How many leading tokens of the prompt `tokens` (n_tokens ids) to load
 * rather than compute: whole chunks present in the store (as far as
 * recompute_s says loading pays, when set), except that a hit on every
 * token of the prompt returns n_tokens - 1, since the engine must compute
 * at least one token to sample from.  From memory: no I/O, no side effect
 * (no promotion, no recency), as vLLM's get_num_new_matched_tokens needs.
 * `extra` (may be NULL) as in kvt_key_chain.  Returns the count (>= 0) or
 * KVT_EINVAL.  Thread-safe. */
KVT_API int kvt_conn_lookup(kvt_conn *c, const uint32_t *tokens, size_t n_tokens,
		    const kvt_extra_keys *extra);

/* Start loading the first n_load tokens of the prompt `tokens` into the
 * engine blocks block_ids[0 .. n_blocks) (the request's block table), and
 * return at once.  The worker first brings the chunks into the first tier
 * by `deadline_ms` from now (kvt_prefetch; -1: no deadline; 0: only what
 * is already in the first tier is loaded), then writes the blocks layer by
 * layer, verifying each layer's checksum (on tiers that verify reads) just
 * before it is written.  The engine waits on each layer with
 * kvt_conn_wait_layer before that layer's attention reads the blocks, and
 * must not write the blocks the load covers until kvt_conn_wait_layer of
 * the last layer, or kvt_conn_finished, says it is over.  A chunk that
 * is missing, corrupt, past the deadline or on a failed tier is not loaded;
 * its blocks are listed by kvt_conn_load_errors.  `tokens`, `extra` and
 * `block_ids` are copied.  `req` is the engine's id of the request: one
 * load and one save per id at a time, until kvt_conn_end.  0, or KVT_EINVAL
 * (a NULL pointer, n_load past the prompt's whole chunks rounded up, fewer
 * blocks than n_load needs, a block id >= num_blocks, a load already
 * registered for `req`), KVT_ECANCELED (the connector is closing).
 * Thread-safe. */
KVT_API int kvt_conn_load(kvt_conn *c, uint64_t req, const uint32_t *tokens,
		  size_t n_tokens, const kvt_extra_keys *extra,
		  const uint32_t *block_ids, size_t n_blocks, size_t n_load,
		  int deadline_ms);

/* Wait until layer `layer` of request `req`'s load is written into the
 * engine's blocks (or the load is over), at most timeout_ms (-1: no
 * limit).  Returns how many of the load's blocks are known invalid so far
 * (0: every block it covers is good up to this layer; the final list comes
 * with the last layer, and kvt_conn_load_errors names them), KVT_ETIMEDOUT,
 * or KVT_EINVAL (layer >= num_layers, NULL connector).  A request without a
 * load returns 0 at once.  Thread-safe. */
KVT_API int kvt_conn_wait_layer(kvt_conn *c, uint64_t req, uint32_t layer,
			int timeout_ms);

/* The engine blocks request `req`'s load left invalid (the blocks of every
 * chunk that was not loaded whole), in block-table order, into blocks[0 ..
 * max); `blocks` may be NULL when max is 0 (to count).  Returns how many
 * there are, KVT_EAGAIN (the load is still running) or KVT_EINVAL (no load
 * for `req`).  vLLM's get_block_ids_with_load_errors.  Thread-safe. */
KVT_API int kvt_conn_load_errors(kvt_conn *c, uint64_t req, uint32_t *blocks,
			 size_t max);

/* Register the save of the prompt's whole chunks that the store does not
 * hold yet (from memory, like kvt_exists): their blocks are gathered as the
 * engine reports each layer computed (kvt_conn_save_layer), and each chunk
 * is put once all its layers are in.  Returns the number of chunks that
 * will be saved (0: nothing to save and nothing will be reported), or
 * KVT_EINVAL (a NULL pointer, fewer blocks than the whole chunks need, a
 * block id >= num_blocks, a save already registered for `req`),
 * KVT_ECANCELED.  The blocks must not be written by the engine until the
 * save is reported by kvt_conn_finished (or kvt_conn_wait).  A partial last
 * chunk is not saved.  `tokens`, `extra` and `block_ids` are copied; the
 * staging costs one chunk payload of memory per chunk saved, until the put.
 * Thread-safe. */
KVT_API int kvt_conn_save(kvt_conn *c, uint64_t req, const uint32_t *tokens,
		  size_t n_tokens, const kvt_extra_keys *extra,
		  const uint32_t *block_ids, size_t n_blocks);

/* kvt_conn_load and kvt_conn_save for an engine that names chunks by key
 * (kvt_key_from_engine_hash over its own block hashes: vLLM's, SGLang's)
 * rather than by the prompt's tokens: keys[i] is chunk i's key, one per
 * whole chunk of the prompt.  A load of n_load tokens reads the first
 * ceil(n_load / chunk_tokens) keys (KVT_EINVAL if fewer are given); a save
 * registers every one of the n_keys chunks the store lacks, with
 * n_keys·(chunk_tokens / block_tokens) blocks.  The keys are copied.  The
 * same results, errors and reports as the token forms. */
/* A load's block id that names no block to write: the engine holds that
 * block's tokens already (its own prefix cache hit reaching into the
 * load's first chunk; such blocks may be shared with other requests and
 * read meanwhile).  The load reads the chunk whole, as it is stored, and
 * writes only the other blocks; a KVT_CONN_NO_BLOCK entry is never
 * reported invalid.  Loads only: a save or a gather/scatter refuses it. */
#define KVT_CONN_NO_BLOCK UINT32_MAX

KVT_API int kvt_conn_load_keys(kvt_conn *c, uint64_t req, const kvt_key *keys,
			       size_t n_keys, const uint32_t *block_ids, size_t n_blocks,
			       size_t n_load, int deadline_ms);
KVT_API int kvt_conn_save_keys(kvt_conn *c, uint64_t req, const kvt_key *keys,
			       size_t n_keys, const uint32_t *block_ids, size_t n_blocks);

#define KVT_CONN_ALL_LAYERS UINT32_MAX

/* Layer `layer` of request `req` is computed: gather it from the blocks, in
 * the background.  KVT_CONN_ALL_LAYERS queues every layer not yet queued
 * (an engine that saves after the whole forward pass).  0 (also for a
 * request with nothing to save), or KVT_EINVAL (a layer out of range or
 * already queued).  Thread-safe. */
KVT_API int kvt_conn_save_layer(kvt_conn *c, uint64_t req, uint32_t layer);

enum kvt_conn_what {
	KVT_CONN_LOAD = 1,
	KVT_CONN_SAVE = 2,
};

/* A finished load or save. */
typedef struct kvt_conn_done {
	uint64_t req;
	uint32_t what;      /* enum kvt_conn_what */
	int status;         /* 0, or the first failure: KVT_ENOTFOUND,
			     * KVT_ECORRUPT, KVT_ETIMEDOUT (deadline), a
			     * tier's error, or a put's */
	uint32_t chunks;    /* load: chunks loaded whole; save: chunks stored
			     * (KVT_EEXIST counts as stored) */
	uint32_t n_invalid; /* load: blocks left invalid; save: chunks not
			     * stored */
} kvt_conn_done;

/* Collect up to `max` loads and saves that finished since the last call;
 * each is reported once.  Returns how many were written to `out` (which may
 * be NULL when max is 0), or KVT_EINVAL.  Never blocks.  Thread-safe. */
KVT_API int kvt_conn_finished(kvt_conn *c, kvt_conn_done *out, size_t max);

/* Wait until request `req`'s load and save (those registered) have
 * finished, at most timeout_ms (-1: no limit).  0, KVT_ETIMEDOUT, or
 * KVT_EINVAL (NULL connector).  An unknown request returns 0.  Their
 * reports stay for kvt_conn_finished.  Thread-safe. */
KVT_API int kvt_conn_wait(kvt_conn *c, uint64_t req, int timeout_ms);

/* Forget request `req`: wait for its load and save, then free its state
 * (a report not yet collected is dropped).  The id may then be used again.
 * 0, or KVT_EINVAL.  Thread-safe. */
KVT_API int kvt_conn_end(kvt_conn *c, uint64_t req);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_CONNECTOR_H */
