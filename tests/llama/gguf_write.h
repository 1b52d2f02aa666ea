/*
 * gguf_write.h — a random-weight GGUF of llama.cpp's `llama` architecture,
 * for the llama.cpp adapter's tests and benchmark: no weights are
 * downloaded, and the KV a model makes is a function of its shape and seed.
 */
#ifndef KVT_LLAMA_GGUF_WRITE_H
#define KVT_LLAMA_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct lgg_shape {
	uint32_t layers, embd, heads, kv_heads, ff, vocab;
	uint32_t ctx;   /* llama.context_length */
	uint64_t seed;
	int f16;        /* matrices in f16 (norm gains stay f32) */
} lgg_shape;

/* Write the model to `path` (through a temporary renamed into place).
 * 0, or -1 with the reason in `why`. */
int lgg_write(const char *path, const lgg_shape *s, char *why, size_t why_len);

#endif
