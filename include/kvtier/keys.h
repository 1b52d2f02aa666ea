/*
 * kvtier/keys.h — namespaces, layouts and the keys of chunks:
 * chain hashes over token ids, and engines' own block hashes.
 *
 * kvtier.h includes it; its conventions (errors, ownership, threads) are
 * kvtier.h's.
 */
#ifndef KVTIER_KEYS_H
#define KVTIER_KEYS_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Keys                                                                      */
/* ------------------------------------------------------------------------ */

#define KVT_KEY_BYTES 32

typedef struct kvt_key {
	uint8_t b[KVT_KEY_BYTES];
} kvt_key;

enum kvt_hash_scheme {
	KVT_HASH_SHA256 = 1, /* default: SHA-256, resists forged collisions */
	KVT_HASH_XXH3 = 2,   /* XXH3-128, opt-in for trusted single tenants */
};

enum kvt_dtype {
	KVT_DTYPE_F16 = 1,
	KVT_DTYPE_BF16 = 2,
	KVT_DTYPE_F32 = 3,
	KVT_DTYPE_FP8_E4M3 = 4,
	KVT_DTYPE_FP8_E5M2 = 5,
	KVT_DTYPE_INT8 = 6,
};

/* Bytes of one element of `dtype`, or 0 if it is not a kvt_dtype. */
KVT_API uint32_t kvt_dtype_size(uint32_t dtype);

/* The shape of one chunk's KV.  Payloads are layer-major: layer 0's bytes,
 * then layer 1's, ...; each layer holds kv_planes × chunk_tokens ×
 * num_kv_heads × head_dim elements followed by scale_bytes of quantisation
 * scales (0 unless the dtype is quantised). */
typedef struct kvt_layout {
	uint32_t num_layers;   /* 1 .. KVT_MAX_LAYERS */
	uint32_t num_kv_heads; /* KV heads held by this rank */
	uint32_t head_dim;
	uint32_t dtype;        /* enum kvt_dtype */
	uint32_t kv_planes;    /* 2 (K and V), or 1 (MLA latent) */
	uint32_t scale_bytes;  /* per layer, for fp8/int8 scales; else 0 */
	uint32_t block_size;   /* the engine's KV block, in tokens; 0 in a
				* kvt_ns_desc: 16 (vLLM's default) when it
				* divides the chunk, else the chunk */
	uint32_t chunk_tokens; /* tokens per chunk; a multiple of block_size;
				* 0 in a kvt_ns_desc: the config's chunk_size */
} kvt_layout;

#define KVT_MAX_LAYERS 160

/* Bytes of one layer of one chunk, and of a whole chunk's payload.  0 if the
 * layout is invalid (see kvt_layout_check). */
KVT_API uint64_t kvt_layout_layer_bytes(const kvt_layout *l);
KVT_API uint64_t kvt_layout_payload_bytes(const kvt_layout *l);

/* 0 if `l` is a layout kvtier can store, else KVT_ELAYOUT with the reason in
 * kvt_errmsg(). */
KVT_API int kvt_layout_check(const kvt_layout *l);

/* What names a namespace.  Strings are NUL-terminated UTF-8; NULL means
 * "none" and is distinct from "".  The tenant is a name the store knows; its
 * secret comes from the store's configuration. */
typedef struct kvt_ns_desc {
	const char *model;    /* e.g. "meta-llama/Llama-3.1-8B-Instruct" */
	const char *revision; /* model revision (commit), or NULL */
	kvt_layout layout;
	uint32_t tp_rank, tp_size; /* tensor parallel; 0, 1 when unsharded */
	uint32_t pp_rank, pp_size; /* pipeline parallel; 0, 1 when unsharded */
	const char *lora;          /* LoRA adapter name, or NULL */
	const char *tenant;        /* tenant name, or NULL for the default */
	uint32_t hash_scheme;      /* enum kvt_hash_scheme; 0 means SHA-256 */
	/* Nonzero when every tensor-parallel rank holds the same KV (MLA's
	 * latent cache, or more TP ranks than KV heads): the rank then does
	 * not enter the digest, so all ranks name, and store, one copy. */
	uint32_t rank_shared;
} kvt_ns_desc;

/* A resolved namespace: its digest and what keys are computed with.  Plain
 * data; copy it freely.  Fill it with kvt_ns_init. */
typedef struct kvt_ns {
	uint8_t digest[32];
	kvt_layout layout;
	uint32_t hash_scheme;
	uint32_t tp_rank, tp_size, pp_rank, pp_size;
} kvt_ns;

/* Extra keys of one chunk, as vLLM defines them for a block. */
/* A multimodal item (an image, an audio clip) whose placeholder tokens
 * overlap the chunk being keyed.  `offset` is the item's first token relative
 * to the chunk's first token: negative when the item began in an earlier
 * chunk.  That is how vLLM keys such items (since its fix that disambiguates
 * equal items at different positions); list the items in prompt order. */
typedef struct kvt_mm_hash {
	const char *hash;  /* content hash of the item, as text */
	int64_t offset;
} kvt_mm_hash;

typedef struct kvt_extra_keys {
	const char *lora;          /* LoRA name, or NULL */
	const kvt_mm_hash *mm;     /* items overlapping the chunk, or NULL */
	size_t n_mm;
	const char *cache_salt;    /* applies to the first chunk only, or NULL */
} kvt_extra_keys;

/* Key of a chunk: H(ns digest, parent, tokens, extra keys).  `parent` is the
 * previous chunk's key, or NULL for the first chunk.  `extra` may be NULL.
 * `tokens` must hold exactly ns->layout.chunk_tokens ids.  0, or KVT_EINVAL
 * (a NULL pointer, another token count, an uninitialised namespace).  Pure
 * and thread-safe, as every key function below. */
KVT_API int kvt_key_chunk(const kvt_ns *ns, const kvt_key *parent,
		  const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, kvt_key *out);

/* Keys of every whole chunk of a prompt.  Writes at most `max_keys` keys and
 * returns how many whole chunks the prompt has (the partial tail is not
 * keyed: it is recomputed).  `extra` applies to every chunk (cache salt to
 * the first only); may be NULL.  `keys` may be NULL when max_keys is 0 (to
 * count).  KVT_EINVAL for a NULL namespace or tokens. */
KVT_API int kvt_key_chain(const kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, kvt_key *keys, size_t max_keys);

/* Lower-case hex of a key into `out` (65 bytes with the NUL). */
KVT_API void kvt_key_hex(const kvt_key *key, char out[65]);

/* Parse 64 hex digits into `key`.  0 or KVT_EINVAL. */
KVT_API int kvt_key_parse(const char *hex, kvt_key *key);

/* --- vLLM interoperability ---------------------------------------------- */

/* vLLM's NONE_HASH for `seed` (the PYTHONHASHSEED string):
 * SHA-256(CBOR(seed as a text string)).  See docs/KEYS.md for which vLLM
 * versions use this convention. */
KVT_API void kvt_vllm_none_hash(const char *seed, uint8_t out[32]);

/* vLLM's sha256_cbor block hash: SHA-256 over canonical CBOR of
 * [parent (32-byte string), [token ids], extra keys or null].  `parent` is
 * NONE_HASH for the first block.  `extra` may be NULL (encoded as null); the
 * cache salt is included only when `first_block` is nonzero. */
KVT_API int kvt_vllm_block_hash(const uint8_t parent[32], const uint32_t *tokens,
			size_t n_tokens, const kvt_extra_keys *extra,
			int first_block, uint8_t out[32]);

/* The 64-bit integer vLLM publishes in KV events for a 32-byte block hash:
 * its last 8 bytes read big-endian. */
KVT_API uint64_t kvt_vllm_hash_u64(const uint8_t hash[32]);

/* kvtier's storage key for a chunk whose last engine block has hash
 * `engine_hash` (of `len` bytes): the engine hash wrapped with the namespace
 * digest, so an engine hash alone never names stored bytes. */
KVT_API int kvt_key_from_engine_hash(const kvt_ns *ns, const uint8_t *engine_hash,
			     size_t len, kvt_key *out);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_KEYS_H */
