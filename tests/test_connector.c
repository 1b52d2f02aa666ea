/*
 * test_connector.c — the engine's paged layouts through gather (blocks →
 * chunk) and scatter (chunk → blocks), bit-exact, and the block ↔ chunk
 * mapping.
 *
 * Each layout is a real tensor in memory addressed by its own index
 * formula (the shape as the engine declares it), independently of the
 * strides the descriptor is given: the chunk must hold element (plane,
 * token, head, elem) of the tokens' blocks at
 * ((plane·chunk_tokens + token)·heads + head)·head_dim + elem, and a
 * scatter must write exactly the blocks' elements and nothing else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#define NB 12   /* engine blocks */
#define BT 16   /* tokens per block */
#define CT 64   /* tokens per chunk: 4 blocks */

struct lay {
	const char *name;
	uint32_t layers, planes, heads, dim, dtype, scale;
	uint32_t esz;
	size_t bytes; /* of the whole engine allocation */
	/* Byte offset of one element in the allocation, from the shape. */
	size_t (*off)(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		      uint32_t h, uint32_t e);
	/* Fill the connector descriptor's layers (strides) for `mem`. */
	void (*desc)(const struct lay *y, uint8_t *mem, kvt_conn_desc *d, kvt_paged_layer *L);
	size_t scale_off; /* where the scales start in the allocation */
};

#define IDX5(a, A, b, B, c, C, d, D, e, E) ((((((size_t)(a) * (B) + (b)) * (C) + (c)) * (D) + (d)) * (E)) + (e))

/* The same plane geometry for every layer of a per-layer layout. */
static void per_layer(const struct lay *y, uint8_t *mem, kvt_conn_desc *d,
		      kvt_paged_layer *L)
{
	for (uint32_t l = 0; l < y->layers; l++) {
		for (uint32_t p = 0; p < y->planes; p++) {
			size_t o0 = y->off(y, l, p, 0, 0, 0, 0);
			L[l].plane[p].base = mem + o0;
			L[l].plane[p].block_stride = y->off(y, l, p, 1, 0, 0, 0) - o0;
			L[l].plane[p].token_stride = y->off(y, l, p, 0, 1, 0, 0) - o0;
			L[l].plane[p].head_stride = y->heads > 1 ? y->off(y, l, p, 0, 0, 1, 0) - o0 : 0;
			L[l].plane[p].elem_stride = y->off(y, l, p, 0, 0, 0, 1) - o0;
		}
		L[l].scale = y->scale ? mem + y->scale_off + (size_t)l * y->scale : NULL;
	}
	d->layers = L;
	d->n_layer_descs = y->layers;
}

/* One descriptor for a tensor of every layer, with a layer stride. */
static void cross_layer(const struct lay *y, uint8_t *mem, kvt_conn_desc *d,
			kvt_paged_layer *L)
{
	per_layer(y, mem, d, L);
	d->n_layer_descs = 1;
	d->layer_stride = y->off(y, 1, 0, 0, 0, 0, 0) - y->off(y, 0, 0, 0, 0, 0, 0);
}

/* vLLM FlashAttention, per layer (2, num_blocks, block_size, kv_heads,
 * head_size); layers one after another in the allocation. */
static size_t fa_nhd(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		     uint32_t h, uint32_t e)
{
	size_t per = (size_t)2 * NB * BT * y->heads * y->dim;
	return (l * per + IDX5(p, 2, b, NB, t, BT, h, y->heads, e, y->dim)) * y->esz;
}

/* The same logical shape with the HND stride order: physically
 * (2, num_blocks, kv_heads, block_size, head_size). */
static size_t fa_hnd(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		     uint32_t h, uint32_t e)
{
	size_t per = (size_t)2 * NB * BT * y->heads * y->dim;
	return (l * per + IDX5(p, 2, b, NB, h, y->heads, t, BT, e, y->dim)) * y->esz;
}

/* FlashInfer: (num_blocks, 2, block_size, kv_heads, head_size), NHD. */
static size_t fi_nhd(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		     uint32_t h, uint32_t e)
{
	size_t per = (size_t)2 * NB * BT * y->heads * y->dim;
	return (l * per + IDX5(b, NB, p, 2, t, BT, h, y->heads, e, y->dim)) * y->esz;
}

/* FlashInfer HND: physically (num_blocks, 2, kv_heads, block_size, head_size). */
static size_t fi_hnd(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		     uint32_t h, uint32_t e)
{
	size_t per = (size_t)2 * NB * BT * y->heads * y->dim;
	return (l * per + IDX5(b, NB, p, 2, h, y->heads, t, BT, e, y->dim)) * y->esz;
}

/* vLLM's CPU attention backend: one fused tensor per layer, (num_blocks,
 * kv_heads, block_size, 2 * head_size) as it declares it, which its kernels
 * read as (num_blocks, kv_heads, 2 * block_size, head_size): per block and
 * head, block_size rows of K, then block_size rows of V. */
static size_t vllm_cpu(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		       uint32_t h, uint32_t e)
{
	size_t per = (size_t)NB * y->heads * BT * 2 * y->dim;
	return (l * per + (((size_t)b * y->heads + h) * 2 * BT + (size_t)p * BT + t) * y->dim + e) *
	       y->esz;
}

/* MLA: (num_blocks, block_size, 576), one plane, one head. */
static size_t mla(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		  uint32_t h, uint32_t e)
{
	(void)p;
	(void)h;
	return (((size_t)l * NB + b) * BT * y->dim + (size_t)t * y->dim + e) * y->esz;
}

/* Cross-layer blocks, the layer count first: (layers, 2, num_blocks,
 * block_size, kv_heads, head_size) as one tensor. */
static size_t xl_layer_first(const struct lay *y, uint32_t l, uint32_t p, uint32_t b,
			     uint32_t t, uint32_t h, uint32_t e)
{
	return (IDX5(l * 2 + p, y->layers * 2, b, NB, t, BT, h, y->heads, e, y->dim)) * y->esz;
}

/* Cross-layer blocks, each block holding every layer: (num_blocks,
 * layers, 2, block_size, kv_heads, head_size). */
static size_t xl_block_first(const struct lay *y, uint32_t l, uint32_t p, uint32_t b,
			     uint32_t t, uint32_t h, uint32_t e)
{
	return (IDX5(b * y->layers + l, NB * y->layers, p, 2, t, BT, h, y->heads, e, y->dim)) *
	       y->esz;
}

/* SGLang's MHA host pool, layer_first: (2, layer_num, size, head_num,
 * head_dim), size = tokens, page p holding tokens [p·page, (p+1)·page). */
static size_t sgl_layer_first(const struct lay *y, uint32_t l, uint32_t p, uint32_t b,
			      uint32_t t, uint32_t h, uint32_t e)
{
	return IDX5(p, 2, l, y->layers, (size_t)b * BT + t, NB * BT, h, y->heads, e, y->dim) *
	       y->esz;
}

/* SGLang's MHA host pool, page_first: (2, size, layer_num, head_num,
 * head_dim). */
static size_t sgl_page_first(const struct lay *y, uint32_t l, uint32_t p, uint32_t b,
			     uint32_t t, uint32_t h, uint32_t e)
{
	return IDX5(p, 2, (size_t)b * BT + t, NB * BT, l, y->layers, h, y->heads, e, y->dim) *
	       y->esz;
}

/* SGLang's MLA host pool, page_first: (size, layer_num, 1, kv_cache_dim). */
static size_t sgl_mla_page_first(const struct lay *y, uint32_t l, uint32_t p, uint32_t b,
				 uint32_t t, uint32_t h, uint32_t e)
{
	(void)p;
	(void)h;
	return (((size_t)b * BT + t) * y->layers * y->dim + (size_t)l * y->dim + e) * y->esz;
}

/* llama.cpp without flash attention: per layer a K tensor of kv_size rows
 * of n_embd_k_gqa (heads·dim) elements, and V transposed: n_embd_v_gqa
 * rows of kv_size cells.  Cells are the tokens; a "block" of 16 cells is
 * how the connector addresses them.  Ks of every layer first, then Vs. */
static size_t llama_kv(const struct lay *y, uint32_t l, uint32_t p, uint32_t b, uint32_t t,
		       uint32_t h, uint32_t e)
{
	size_t cells = (size_t)NB * BT, cell = (size_t)b * BT + t;
	size_t per = cells * y->heads * y->dim;
	size_t base = ((size_t)p * y->layers + l) * per;

	if (p == 0)
		return (base + cell * y->heads * y->dim + (size_t)h * y->dim + e) * y->esz;
	return (base + ((size_t)h * y->dim + e) * cells + cell) * y->esz;
}

static size_t lay_bytes(const struct lay *y)
{
	return (size_t)y->layers * y->planes * NB * BT * y->heads * y->dim * y->esz;
}

static kvt_store *small_store(void)
{
	kvt_config *c = kvt_config_new();
	kvt_store *st;
	int err;

	kvt_config_set(c, "max_local_cpu_size", "4MiB");
	kvt_config_set(c, "dram_lock_memory", "false");
	kvt_config_set(c, "dram_prefault", "false");
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

static int ns_for(kvt_store *st, const struct lay *y, kvt_ns *ns)
{
	kvt_ns_desc d = { 0 };

	d.model = "test/connector";
	d.layout = (kvt_layout){ y->layers, y->heads, y->dim, y->dtype, y->planes, y->scale,
				 BT, CT };
	return kvt_ns_init(st, &d, ns);
}

/* The chunk offset of element (p, t, h, e) in one layer's payload. */
static size_t chunk_off(const struct lay *y, uint32_t p, uint32_t t, uint32_t h, uint32_t e)
{
	return ((((size_t)p * CT + t) * y->heads + h) * y->dim + e) * y->esz;
}

/* Compare the chunk of layer l (tokens [0, ntok) from `blocks`) with the
 * engine memory, element by element.  Returns the mismatches. */
static long compare(const struct lay *y, const uint8_t *mem, const uint8_t *chunk, uint32_t l,
		    const uint32_t *blocks, uint32_t ntok)
{
	long bad = 0;

	for (uint32_t p = 0; p < y->planes; p++)
		for (uint32_t t = 0; t < ntok; t++)
			for (uint32_t h = 0; h < y->heads; h++)
				for (uint32_t e = 0; e < y->dim; e++)
					bad += memcmp(chunk + chunk_off(y, p, t, h, e),
						      mem + y->off(y, l, p, blocks[t / BT], t % BT, h, e),
						      y->esz) != 0;
	if (y->scale)
		bad += memcmp(chunk + (size_t)y->planes * CT * y->heads * y->dim * y->esz,
			      mem + y->scale_off + (size_t)l * y->scale, y->scale) != 0;
	return bad;
}

static void round_trip(const struct lay *y)
{
	static const uint32_t blocks[4] = { 7, 2, 3, 10 }; /* 2,3 adjacent: a merged run */
	size_t bytes = lay_bytes(y) + (size_t)y->layers * y->scale;
	uint8_t *mem = malloc(bytes), *back = calloc(1, bytes), *ref = calloc(1, bytes);
	kvt_paged_layer L[8];
	kvt_conn_desc d = { 0 };
	kvt_store *st = small_store();
	kvt_conn *c = NULL;
	kvt_ns ns;
	uint64_t lb;
	uint8_t *chunk;

	fprintf(stderr, "layout %s\n", y->name);
	struct lay yy = *y;
	yy.scale_off = lay_bytes(y);
	y = &yy;
	CHECK(st && mem && back && ref);
	CHECK_EQ(ns_for(st, y, &ns), 0);
	lb = kvt_layout_layer_bytes(&ns.layout);
	chunk = malloc(lb);
	test_fill(mem, bytes, 11 + y->layers * 7 + y->dim);
	y->desc(y, mem, &d, L);
	d.num_blocks = NB;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), 0);
	for (uint32_t l = 0; c && l < y->layers; l++) {
		memset(chunk, 0xEE, lb);
		CHECK_EQ(kvt_conn_gather(c, l, blocks, 4, CT, chunk, lb), 0);
		CHECK_EQ(compare(y, mem, chunk, l, blocks, CT), 0);
		/* Scatter into a zeroed copy of the engine: the blocks'
		 * elements come back, and nothing else is touched. */
		CHECK_EQ(kvt_conn_scatter(c, l, blocks, 4, CT, chunk, lb), 0);
	}
	if (c) {
		/* Scatter into another allocation: reopen over `back`. */
		kvt_conn *c2 = NULL;
		kvt_conn_desc d2 = { 0 };
		kvt_paged_layer L2[8];

		y->desc(y, back, &d2, L2);
		d2.num_blocks = NB;
		CHECK_EQ(kvt_conn_open(st, &ns, &d2, &c2), 0);
		for (uint32_t l = 0; c2 && l < y->layers; l++) {
			CHECK_EQ(kvt_conn_gather(c, l, blocks, 4, CT, chunk, lb), 0);
			CHECK_EQ(kvt_conn_scatter(c2, l, blocks, 4, CT, chunk, lb), 0);
			/* The expected image: the blocks' elements of `mem`. */
			for (uint32_t p = 0; p < y->planes; p++)
				for (uint32_t t = 0; t < CT; t++)
					for (uint32_t h = 0; h < y->heads; h++)
						for (uint32_t e = 0; e < y->dim; e++) {
							size_t o = y->off(y, l, p, blocks[t / BT],
									  t % BT, h, e);
							memcpy(ref + o, mem + o, y->esz);
						}
			if (y->scale)
				memcpy(ref + y->scale_off + (size_t)l * y->scale,
				       mem + y->scale_off + (size_t)l * y->scale, y->scale);
		}
		CHECK(memcmp(back, ref, bytes) == 0);
		kvt_conn_close(c2);
	}
	kvt_conn_close(c);
	kvt_store_close(st);
	free(chunk);
	free(mem);
	free(back);
	free(ref);
}

/* Block ↔ chunk mapping: partial scatters, block sizes, refusals. */
static void mapping(void)
{
	struct lay y = { "fa-nhd", 2, 2, 2, 8, KVT_DTYPE_BF16, 0, 2, 0, fa_nhd, per_layer, 0 };
	size_t bytes = lay_bytes(&y);
	uint8_t *mem = calloc(1, bytes), *chunk;
	kvt_paged_layer L[2];
	kvt_conn_desc d = { 0 };
	kvt_store *st = small_store();
	kvt_conn *c = NULL;
	kvt_ns ns;
	uint32_t blocks[4] = { 5, 1, 9, 0 }, bad[4] = { 5, 1, 9, 12 };
	uint64_t lb;

	CHECK_EQ(ns_for(st, &y, &ns), 0);
	lb = kvt_layout_layer_bytes(&ns.layout);
	chunk = malloc(lb);
	test_fill(chunk, lb, 3);
	y.desc(&y, mem, &d, L);
	d.num_blocks = NB;

	/* A block size that does not divide the chunk is refused. */
	d.block_tokens = 24;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_ELAYOUT);
	CHECK(strstr(kvt_errmsg(), "do not divide the chunk") != NULL);
	d.block_tokens = 0;

	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), 0);
	/* 40 tokens: blocks 5 and 1 whole, 8 tokens of block 9, block 0 not
	 * at all. */
	CHECK_EQ(kvt_conn_scatter(c, 1, blocks, 3, 40, chunk, lb), 0);
	for (uint32_t b = 0; b < NB; b++)
		for (uint32_t t = 0; t < BT; t++) {
			int want_set = b == 5 || b == 1 || (b == 9 && t < 8);
			for (uint32_t p = 0; p < 2; p++)
				for (uint32_t h = 0; h < 2; h++)
					for (uint32_t e = 0; e < 8; e++) {
						size_t o = fa_nhd(&y, 1, p, b, t, h, e);
						uint32_t tok = (b == 5 ? 0 : b == 1 ? 16 : 32) + t;
						const uint8_t *src = chunk + chunk_off(&y, p, tok, h, e);
						static const uint8_t z[2];
						if (want_set)
							CHECK(memcmp(mem + o, src, 2) == 0);
						else
							CHECK(memcmp(mem + o, z, 2) == 0);
						if (memcmp(mem + o, want_set ? src : z, 2))
							goto out; /* one report is enough */
					}
		}
out:
	/* Layer 0 is untouched. */
	for (size_t i = 0; i < bytes / 2; i++)
		if (mem[i]) {
			CHECK(!"layer 0 written");
			break;
		}
	/* Partial gathers read back what the partial scatter wrote (the
	 * gather's prefetch ahead of the copy ends inside the last block). */
	{
		static const uint32_t ntoks[] = { 1, 17, 40 };
		uint8_t *g = malloc(lb);

		for (size_t i = 0; g && i < sizeof(ntoks) / sizeof(ntoks[0]); i++) {
			memset(g, 0xEE, lb);
			CHECK_EQ(kvt_conn_gather(c, 1, blocks, 3, ntoks[i], g, lb), 0);
			CHECK_EQ(compare(&y, mem, g, 1, blocks, ntoks[i]), 0);
		}
		free(g);
	}
	/* Refusals, each with a clear message. */
	CHECK_EQ(kvt_conn_scatter(c, 1, blocks, 2, 40, chunk, lb), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "need 3 blocks") != NULL);
	CHECK_EQ(kvt_conn_scatter(c, 1, bad, 4, CT, chunk, lb), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "block_ids[3] is 12") != NULL);
	CHECK_EQ(kvt_conn_scatter(c, 2, blocks, 4, CT, chunk, lb), KVT_EINVAL);
	CHECK_EQ(kvt_conn_scatter(c, 0, blocks, 4, CT + 1, chunk, lb), KVT_EINVAL);
	CHECK_EQ(kvt_conn_scatter(c, 0, blocks, 4, 0, chunk, lb), KVT_EINVAL);
	CHECK_EQ(kvt_conn_gather(c, 0, blocks, 4, CT, chunk, lb - 1), KVT_ESMALL);
	kvt_conn_close(c);
	c = NULL;

	/* Engine blocks of 32 tokens under a namespace of 16-token blocks:
	 * a chunk is 2 of them. */
	{
		struct lay y32 = y;
		kvt_paged_layer L32[2];
		kvt_conn_desc d32 = { 0 };
		uint8_t *m32 = calloc(1, bytes), *c32 = malloc(lb);
		uint32_t b32[2] = { 3, 1 };

		y32.desc(&y32, m32, &d32, L32);
		/* The same allocation seen as 32-token blocks: block b is
		 * 16-token blocks 2b and 2b+1. */
		for (int l = 0; l < 2; l++)
			for (int p = 0; p < 2; p++)
				L32[l].plane[p].block_stride *= 2;
		d32.num_blocks = NB / 2;
		d32.block_tokens = 32;
		CHECK_EQ(kvt_conn_open(st, &ns, &d32, &c), 0);
		CHECK_EQ(kvt_conn_scatter(c, 0, b32, 2, CT, chunk, lb), 0);
		CHECK_EQ(kvt_conn_gather(c, 0, b32, 2, CT, c32, lb), 0);
		CHECK(memcmp(chunk, c32, lb) == 0);
		{
			uint32_t b16[4] = { 6, 7, 2, 3 };
			CHECK_EQ(compare(&y, m32, chunk, 0, b16, CT), 0);
		}
		kvt_conn_close(c);
		c = NULL;
		free(m32);
		free(c32);
	}

	/* Descriptor refusals. */
	d.layers = L;
	L[1].plane[1].token_stride = 0;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "layer 1 plane 1: token_stride is 0") != NULL);
	y.desc(&y, mem, &d, L);
	L[0].plane[0].base = NULL;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	y.desc(&y, mem, &d, L);
	d.n_layer_descs = 3;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	d.n_layer_descs = 1;
	d.layer_stride = 0;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "layer_stride") != NULL);
	y.desc(&y, mem, &d, L);
	d.num_blocks = 0;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	d.num_blocks = NB;
	d.durability = 7;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	d.durability = 0;
#ifndef KVT_HAVE_CUDA
	d.memory = KVT_CONN_MEM_CUDA;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_ENOTSUP);
	CHECK(strstr(kvt_errmsg(), "no CUDA backend") != NULL);
#endif
	d.memory = 9;
	CHECK_EQ(kvt_conn_open(st, &ns, &d, &c), KVT_EINVAL);
	d.memory = KVT_CONN_MEM_HOST;
	CHECK_EQ(kvt_conn_open(NULL, &ns, &d, &c), KVT_EINVAL);
	CHECK(c == NULL);
	kvt_conn_close(NULL);
	kvt_store_close(st);
	free(mem);
	free(chunk);
}

int main(void)
{
	static const struct lay lays[] = {
		{ "vllm-flash-attn-nhd", 3, 2, 2, 16, KVT_DTYPE_BF16, 0, 2, 0, fa_nhd, per_layer, 0 },
		{ "vllm-flash-attn-hnd", 3, 2, 2, 16, KVT_DTYPE_BF16, 0, 2, 0, fa_hnd, per_layer, 0 },
		{ "vllm-cpu-fused-k-then-v", 3, 2, 2, 32, KVT_DTYPE_BF16, 0, 2, 0, vllm_cpu,
		  per_layer, 0 },
		{ "flashinfer-nhd", 2, 2, 4, 8, KVT_DTYPE_F16, 0, 2, 0, fi_nhd, per_layer, 0 },
		{ "flashinfer-hnd", 2, 2, 4, 8, KVT_DTYPE_F16, 0, 2, 0, fi_hnd, per_layer, 0 },
		{ "vllm-mla-576", 2, 1, 1, 576, KVT_DTYPE_BF16, 0, 2, 0, mla, per_layer, 0 },
		{ "cross-layer-layers-first", 4, 2, 2, 8, KVT_DTYPE_F32, 0, 4, 0, xl_layer_first,
		  cross_layer, 0 },
		{ "cross-layer-blocks-first", 4, 2, 2, 8, KVT_DTYPE_BF16, 0, 2, 0, xl_block_first,
		  cross_layer, 0 },
		{ "sglang-host-layer-first", 3, 2, 2, 8, KVT_DTYPE_BF16, 0, 2, 0, sgl_layer_first,
		  cross_layer, 0 },
		{ "sglang-host-page-first", 3, 2, 2, 8, KVT_DTYPE_BF16, 0, 2, 0, sgl_page_first,
		  cross_layer, 0 },
		{ "sglang-mla-page-first", 3, 1, 1, 64, KVT_DTYPE_BF16, 0, 2, 0, sgl_mla_page_first,
		  cross_layer, 0 },
		{ "llama.cpp-k-rows-v-transposed", 2, 2, 2, 8, KVT_DTYPE_F16, 0, 2, 0, llama_kv,
		  per_layer, 0 },
		{ "llama.cpp-f32", 2, 2, 3, 4, KVT_DTYPE_F32, 0, 4, 0, llama_kv, per_layer, 0 },
		{ "vllm-fp8-e4m3-scaled", 3, 2, 2, 16, KVT_DTYPE_FP8_E4M3, 8, 1, 0, fa_nhd,
		  per_layer, 0 },
		{ "llama.cpp-fp8-e4m3-scaled", 2, 2, 2, 8, KVT_DTYPE_FP8_E4M3, 8, 1, 0, llama_kv,
		  per_layer, 0 },
	};

	for (size_t i = 0; i < sizeof(lays) / sizeof(lays[0]); i++)
		round_trip(&lays[i]);
	mapping();
	TEST_DONE();
}
