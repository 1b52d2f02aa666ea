/*
 * layout.c — the shape of a chunk's KV and how many bytes it takes.
 */
#include "common/err.h"

const char *kvt_dtype_name(uint32_t dtype)
{
	static const char *const n[] = { "?", "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2", "int8" };
	return dtype < sizeof(n) / sizeof(n[0]) ? n[dtype] : "?";
}

uint32_t kvt_dtype_size(uint32_t dtype)
{
	switch (dtype) {
	case KVT_DTYPE_F16:
	case KVT_DTYPE_BF16:
		return 2;
	case KVT_DTYPE_F32:
		return 4;
	case KVT_DTYPE_FP8_E4M3:
	case KVT_DTYPE_FP8_E5M2:
	case KVT_DTYPE_INT8:
		return 1;
	default:
		return 0;
	}
}

/* Upper bounds that no real model reaches but that keep every product below
 * in 64 bits and every allocation sane when the layout came from outside. */
#define MAX_HEADS 4096u
#define MAX_HEAD_DIM 65536u
#define MAX_CHUNK_TOKENS (1u << 20)
#define MAX_SCALE_BYTES (1u << 24)

int kvt_layout_check(const kvt_layout *l)
{
	if (!l)
		return kvt_err(KVT_ELAYOUT, "layout missing");
	if (l->num_layers == 0 || l->num_layers > KVT_MAX_LAYERS)
		return kvt_err(KVT_ELAYOUT, "num_layers %u out of range 1..%u",
			       l->num_layers, KVT_MAX_LAYERS);
	if (l->num_kv_heads == 0 || l->num_kv_heads > MAX_HEADS)
		return kvt_err(KVT_ELAYOUT, "num_kv_heads %u out of range 1..%u",
			       l->num_kv_heads, MAX_HEADS);
	if (l->head_dim == 0 || l->head_dim > MAX_HEAD_DIM)
		return kvt_err(KVT_ELAYOUT, "head_dim %u out of range 1..%u",
			       l->head_dim, MAX_HEAD_DIM);
	if (kvt_dtype_size(l->dtype) == 0)
		return kvt_err(KVT_ELAYOUT, "dtype %u is not a known kvt_dtype",
			       l->dtype);
	if (l->kv_planes != 1 && l->kv_planes != 2)
		return kvt_err(KVT_ELAYOUT, "kv_planes %u must be 1 (MLA) or 2 (K and V)",
			       l->kv_planes);
	if (l->scale_bytes > MAX_SCALE_BYTES)
		return kvt_err(KVT_ELAYOUT, "scale_bytes %u exceeds %u",
			       l->scale_bytes, MAX_SCALE_BYTES);
	if (l->block_size == 0 || l->block_size > MAX_CHUNK_TOKENS)
		return kvt_err(KVT_ELAYOUT, "block_size %u out of range 1..%u",
			       l->block_size, MAX_CHUNK_TOKENS);
	if (l->chunk_tokens == 0 || l->chunk_tokens > MAX_CHUNK_TOKENS)
		return kvt_err(KVT_ELAYOUT, "chunk_tokens %u out of range 1..%u",
			       l->chunk_tokens, MAX_CHUNK_TOKENS);
	if (l->chunk_tokens % l->block_size)
		return kvt_err(KVT_ELAYOUT,
			       "chunk_tokens %u is not a multiple of the engine block size %u",
			       l->chunk_tokens, l->block_size);
	return 0;
}

uint64_t kvt_layout_layer_bytes(const kvt_layout *l)
{
	if (kvt_layout_check(l))
		return 0;
	return (uint64_t)l->kv_planes * l->chunk_tokens * l->num_kv_heads *
		       l->head_dim * kvt_dtype_size(l->dtype) +
	       l->scale_bytes;
}

uint64_t kvt_layout_payload_bytes(const kvt_layout *l)
{
	return kvt_layout_layer_bytes(l) * (l ? l->num_layers : 0);
}
