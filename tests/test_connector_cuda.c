/*
 * test_connector_cuda.c — the connector's CUDA backend against its CPU
 * path: the same engine tensors, one copy in host memory and one on the
 * device, must gather to the same chunk bytes, scatter to the same tensor,
 * and load through a store layer by layer into the device blocks: once
 * from DRAM, once from the device tier (spare device memory), whose pages
 * are scattered from where they are.
 * Skips where the build has no CUDA backend or the machine no GPU.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifndef KVT_HAVE_CUDA
int main(void)
{
	SKIP("built without the connector's CUDA backend (no nvcc found)");
}
#else
#include <cuda_runtime_api.h>

#define NB 24
#define BT 16
#define CT 64
#define LAYERS 3
#define HEADS 2
#define DIM 64
#define KV_SIZE (NB * BT)

/* Element sizes 2; llama.cpp's transposed V on plane 1 when `transposed`. */
static void describe(uint8_t *mem, int transposed, kvt_paged_layer *L)
{
	size_t plane = (size_t)KV_SIZE * HEADS * DIM * 2;

	for (int l = 0; l < LAYERS; l++)
		for (int p = 0; p < 2; p++) {
			kvt_paged_plane *pl = &L[l].plane[p];
			pl->base = mem + ((size_t)l * 2 + p) * plane;
			if (p == 1 && transposed) {
				pl->block_stride = BT * 2;
				pl->token_stride = 2;
				pl->head_stride = (uint64_t)DIM * KV_SIZE * 2;
				pl->elem_stride = (uint64_t)KV_SIZE * 2;
			} else {
				pl->block_stride = (uint64_t)BT * HEADS * DIM * 2;
				pl->token_stride = HEADS * DIM * 2;
				pl->head_stride = DIM * 2;
				pl->elem_stride = 2;
			}
		}
}

static kvt_conn *open_conn(kvt_store *st, const kvt_ns *ns, uint8_t *mem, int transposed,
			   int device)
{
	kvt_paged_layer L[LAYERS] = { 0 };
	kvt_conn_desc d = { 0 };
	kvt_conn *c = NULL;

	describe(mem, transposed, L);
	d.layers = L;
	d.n_layer_descs = LAYERS;
	d.num_blocks = NB;
	d.memory = device ? KVT_CONN_MEM_CUDA : KVT_CONN_MEM_HOST;
	CHECK_EQ(kvt_conn_open(st, ns, &d, &c), 0);
	return c;
}

/* The whole round over a store with DRAM, and the device tier too if
 * `with_dev`. */
static void run(int with_dev)
{
	size_t bytes = (size_t)LAYERS * 2 * KV_SIZE * HEADS * DIM * 2;
	uint32_t blocks[4] = { 9, 2, 3, 17 }, load_blocks[4] = { 20, 0, 5, 6 };
	uint32_t tok[CT * 4];

	kvt_config *cfg = kvt_config_new();
	kvt_config_set(cfg, "max_local_cpu_size", "16MiB");
	kvt_config_set(cfg, "dram_lock_memory", "false");
	if (with_dev)
		kvt_config_set(cfg, "device_capacity", "64MiB");
	kvt_store *st = kvt_store_open(cfg, NULL);
	kvt_config_free(cfg);
	kvt_ns_desc nd = { 0 };
	kvt_ns ns;
	nd.model = "test/connector-cuda";
	nd.layout = (kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16, 2, 0, BT, CT };
	CHECK(st != NULL);
	CHECK_EQ(kvt_ns_init(st, &nd, &ns), 0);
	uint64_t lb = kvt_layout_layer_bytes(&ns.layout);
	uint8_t *host = malloc(bytes), *back = malloc(bytes), *zero = calloc(1, bytes);
	uint8_t *ch = malloc(lb), *cd = malloc(lb), *dev = NULL;

	for (int i = 0; i < CT * 4; i++)
		tok[i] = 50 + i;
	CHECK_EQ(cudaMalloc((void **)&dev, bytes), cudaSuccess);
	for (int transposed = 0; transposed < 2; transposed++) {
		test_fill(host, bytes, 5 + transposed);
		CHECK_EQ(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
		kvt_conn *hc = open_conn(st, &ns, host, transposed, 0);
		kvt_conn *dc = open_conn(st, &ns, dev, transposed, 1);

		for (uint32_t l = 0; l < LAYERS; l++) {
			CHECK_EQ(kvt_conn_gather(hc, l, blocks, 4, CT, ch, lb), 0);
			CHECK_EQ(kvt_conn_gather(dc, l, blocks, 4, CT, cd, lb), 0);
			CHECK(memcmp(ch, cd, lb) == 0);
		}
		/* Scatter into a zeroed device tensor and a zeroed host one. */
		CHECK_EQ(cudaMemcpy(dev, zero, bytes, cudaMemcpyHostToDevice), cudaSuccess);
		memcpy(back, zero, bytes);
		kvt_conn *bc = open_conn(st, &ns, back, transposed, 0);
		for (uint32_t l = 0; l < LAYERS; l++) {
			CHECK_EQ(kvt_conn_gather(hc, l, blocks, 4, CT, ch, lb), 0);
			CHECK_EQ(kvt_conn_scatter(dc, l, blocks, 4, CT - 5, ch, lb), 0);
			CHECK_EQ(kvt_conn_scatter(bc, l, blocks, 4, CT - 5, ch, lb), 0);
		}
		CHECK_EQ(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
		CHECK(memcmp(host, back, bytes) == 0);
		kvt_conn_close(bc);

		/* Through the store: save from the host tensor, load layer by
		 * layer into other blocks on the device. */
		test_fill(host, bytes, 9 + transposed);
		uint32_t *t = tok + transposed * CT * 2; /* a prompt per round */
		CHECK_EQ(kvt_conn_save(hc, 1, t, CT, NULL, blocks, 4), 1);
		CHECK_EQ(kvt_conn_save_layer(hc, 1, KVT_CONN_ALL_LAYERS), 0);
		CHECK_EQ(kvt_conn_wait(hc, 1, 10000), 0);
		CHECK_EQ(kvt_conn_load(dc, 2, t, CT, NULL, load_blocks, 4, CT, -1), 0);
		for (uint32_t l = 0; l < LAYERS; l++)
			CHECK_EQ(kvt_conn_wait_layer(dc, 2, l, 10000), 0);
		for (uint32_t l = 0; l < LAYERS; l++) {
			CHECK_EQ(kvt_conn_gather(hc, l, blocks, 4, CT, ch, lb), 0);
			CHECK_EQ(kvt_conn_gather(dc, l, load_blocks, 4, CT, cd, lb), 0);
			CHECK(memcmp(ch, cd, lb) == 0);
		}
		kvt_conn_close(hc);
		kvt_conn_close(dc);
	}
	if (with_dev) {
		kvt_tier_stats ds;
		CHECK_EQ(kvt_store_stats(st, 0, &ds), 0);
		CHECK(strcmp(ds.name, "device") == 0);
		CHECK(ds.hits >= 2); /* both loads were served from device pages */
	}
	cudaFree(dev);
	kvt_store_close(st);
	free(host);
	free(back);
	free(zero);
	free(ch);
	free(cd);
}

int main(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		SKIP("no CUDA device");
	run(0);
	run(1);
	TEST_DONE();
}
#endif
