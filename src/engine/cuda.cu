/*
 * cuda.cu — the connector's CUDA backend (cuda.h).
 *
 * One layer of one chunk at a time, on a stream of the connector's own:
 * host segments → device staging (cudaMemcpyAsync, one per segment), then
 * one kernel that spreads the staging over the blocks by the descriptor's
 * strides (or the reverse for a gather), then an event the caller waits on:
 * the layer is in the engine's blocks when the call returns.  The kernel
 * moves 16-byte units when a head's elements are adjacent and every stride
 * is 16-byte aligned (NHD, HND, MLA in bf16), and single elements otherwise
 * (a transposed V).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "common/err.h"
#include "common/log.h"
#include "engine/cuda.h"
}

struct conn_cuda {
	int device;
	cudaStream_t stream;
	void *pinned;            /* host memory this backend registered */
	cudaEvent_t done;
	uint8_t *staging;   /* one layer */
	uint32_t *d_blocks; /* one chunk's block ids */
	uint64_t layer_bytes;
	uint32_t max_blocks;
	pthread_mutex_t mu;
};

static int cuda_fail(cudaError_t e, const char *what)
{
	return kvt_err(-EIO, "CUDA %s: %s", what, cudaGetErrorString(e));
}

/* One plane: element i of the chunk's (token, head, unit) order. */
template <typename U>
__global__ void k_plane(uint8_t *base, uint64_t bs, uint64_t ts, uint64_t hs, uint64_t us,
			const uint32_t *blocks, uint32_t bt, uint32_t ntok, uint32_t heads,
			uint32_t units, U *chunk, int scatter)
{
	uint64_t n = (uint64_t)ntok * heads * units;

	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint32_t u = (uint32_t)(i % units);
		uint64_t r = i / units;
		uint32_t h = (uint32_t)(r % heads);
		uint32_t t = (uint32_t)(r / heads);
		uint32_t b = blocks[t / bt];

		if (b == KVT_CONN_NO_BLOCK)
			continue; /* a load's block the engine holds already */
		U *p = (U *)(base + b * bs + (t % bt) * ts + h * hs + u * us);

		if (scatter)
			*p = chunk[i];
		else
			chunk[i] = *p;
	}
}

struct plane_args {
	uint8_t *base;
	uint64_t bs, ts, hs, us;
	uint32_t units;
};

template <typename U>
static void launch(cudaStream_t s, const plane_args &a, const uint32_t *blocks, uint32_t bt,
		   uint32_t ntok, uint32_t heads, uint8_t *chunk, int scatter)
{
	uint64_t n = (uint64_t)ntok * heads * a.units;
	unsigned grid = (unsigned)((n + 255) / 256);

	if (grid > 4096)
		grid = 4096;
	k_plane<U><<<grid ? grid : 1, 256, 0, s>>>(a.base, a.bs, a.ts, a.hs, a.us, blocks, bt, ntok,
						    heads, a.units, (U *)chunk, scatter);
}

/* The unit a plane moves in: 16 bytes where everything lines up. */
static plane_args plane_of(const struct conn_geom *g, const kvt_paged_plane *p, uint32_t *usz)
{
	plane_args a = { (uint8_t *)p->base, p->block_stride, p->token_stride, p->head_stride,
			 p->elem_stride, g->dim };
	uint64_t row = (uint64_t)g->dim * g->esz;
	uint64_t all = (uintptr_t)p->base | p->block_stride | p->token_stride | p->head_stride | row;

	*usz = g->esz;
	if ((p->elem_stride == g->esz || g->dim == 1) && row % 16 == 0 && all % 16 == 0) {
		*usz = 16;
		a.us = 16;
		a.units = (uint32_t)(row / 16);
	}
	return a;
}

extern "C" int conn_cuda_open(int device, const struct conn_geom *g, struct conn_cuda **out)
{
	struct conn_cuda *cu;
	int n = 0;
	cudaError_t e;

	*out = NULL;
	if ((e = cudaGetDeviceCount(&n)) != cudaSuccess || device < 0 || device >= n)
		return kvt_err(KVT_ENOTSUP, "CUDA device %d: %s", device,
			       e != cudaSuccess ? cudaGetErrorString(e) : "no such device");
	if (!(cu = (struct conn_cuda *)calloc(1, sizeof(*cu))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	cu->device = device;
	cu->layer_bytes = g->layer_bytes;
	cu->max_blocks = g->blocks_per_chunk;
	pthread_mutex_init(&cu->mu, NULL);
	if ((e = cudaSetDevice(device)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaEventCreateWithFlags(&cu->done, cudaEventDisableTiming)) != cudaSuccess ||
	    (e = cudaMalloc((void **)&cu->staging, g->layer_bytes)) != cudaSuccess ||
	    (e = cudaMalloc((void **)&cu->d_blocks, g->blocks_per_chunk * sizeof(uint32_t))) !=
		    cudaSuccess) {
		int rc = cuda_fail(e, "set-up");
		conn_cuda_close(cu);
		return rc;
	}
	*out = cu;
	return 0;
}

extern "C" void conn_cuda_close(struct conn_cuda *cu)
{
	if (!cu)
		return;
	cudaSetDevice(cu->device);
	if (cu->stream)
		cudaStreamSynchronize(cu->stream);
	if (cu->pinned)
		cudaHostUnregister(cu->pinned);
	cudaFree(cu->staging);
	cudaFree(cu->d_blocks);
	if (cu->done)
		cudaEventDestroy(cu->done);
	if (cu->stream)
		cudaStreamDestroy(cu->stream);
	pthread_mutex_destroy(&cu->mu);
	free(cu);
}

extern "C" void conn_cuda_pin(struct conn_cuda *cu, void *base, size_t len)
{
	cudaError_t e;

	if (cu->pinned || !base || !len)
		return;
	cudaSetDevice(cu->device);
	e = cudaHostRegister(base, len, cudaHostRegisterDefault);
	if (e == cudaSuccess) {
		cu->pinned = base;
		return;
	}
	cudaGetLastError(); /* clear it: the backend goes on */
	if (e != cudaErrorHostMemoryAlreadyRegistered)
		kvt_log(KVT_LOG_WARN, "connector: cannot page-lock %zu bytes of DRAM tier for "
			"CUDA copies (%s); copies from it go through pageable memory", len,
			cudaGetErrorString(e));
}

/* Host segments from `pos` <-> the staging buffer from `soff`, `len`
 * bytes. */
static int move_segments(struct conn_cuda *cu, const struct iovec *iov, int n_iov, uint64_t pos,
			 uint64_t soff, uint64_t len, int to_device)
{
	struct conn_cur cur;
	uint64_t off = 0;
	int rc;

	if ((rc = conn_cur_init(&cur, iov, n_iov, pos)))
		return rc;
	while (off < len) {
		uint8_t *p;
		size_t n = conn_cur_take(&cur, len - off, &p);
		cudaError_t e;

		if (!n)
			return kvt_err(KVT_ETRUNCATED, "chunk segments end inside the layer");
		/* Default: a segment may be host memory or the device
		 * tier's pages on this device (unified addressing). */
		e = to_device ? cudaMemcpyAsync(cu->staging + soff + off, p, n,
						cudaMemcpyDefault, cu->stream)
			      : cudaMemcpyAsync(p, cu->staging + soff + off, n,
						cudaMemcpyDefault, cu->stream);
		if (e != cudaSuccess)
			return cuda_fail(e, "cudaMemcpyAsync");
		off += n;
	}
	return 0;
}

static int copy_locked(struct conn_cuda *cu, const struct conn_geom *g, const kvt_paged_layer *L,
		       const uint32_t *blocks, uint32_t ntok, const struct iovec *iov, int n_iov,
		       uint64_t pos, int dir)
{
	uint32_t nblk = (ntok + g->block_tokens - 1) / g->block_tokens;
	uint64_t scale_off = (uint64_t)g->planes * g->plane_bytes;
	int scatter = dir == CONN_SCATTER, rc;
	cudaError_t e;

	if (nblk > cu->max_blocks || g->layer_bytes > cu->layer_bytes)
		return kvt_err(KVT_EINVAL, "chunk larger than the backend was opened for");
	if ((e = cudaSetDevice(cu->device)) != cudaSuccess)
		return cuda_fail(e, "cudaSetDevice");
	if ((e = cudaMemcpyAsync(cu->d_blocks, blocks, nblk * sizeof(uint32_t),
				 cudaMemcpyHostToDevice, cu->stream)) != cudaSuccess)
		return cuda_fail(e, "block ids");
	if (scatter && (rc = move_segments(cu, iov, n_iov, pos, 0, g->layer_bytes, 1)))
		return rc;
	for (uint32_t p = 0; p < g->planes; p++) {
		uint32_t usz;
		plane_args a = plane_of(g, &L->plane[p], &usz);
		uint8_t *chunk = cu->staging + p * g->plane_bytes;

		void (*fn)(cudaStream_t, const plane_args &, const uint32_t *, uint32_t, uint32_t,
			   uint32_t, uint8_t *, int) = usz == 16 ? launch<uint4>
						 : usz == 4  ? launch<uint32_t>
						 : usz == 2  ? launch<uint16_t>
							     : launch<uint8_t>;

		fn(cu->stream, a, cu->d_blocks, g->block_tokens, ntok, g->heads, chunk, scatter);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return cuda_fail(e, "kernel launch");
	}
	if (g->scale_bytes) {
		e = scatter ? cudaMemcpyAsync(L->scale, cu->staging + scale_off, g->scale_bytes,
					      cudaMemcpyDeviceToDevice, cu->stream)
			    : cudaMemcpyAsync(cu->staging + scale_off, L->scale, g->scale_bytes,
					      cudaMemcpyDeviceToDevice, cu->stream);
		if (e != cudaSuccess)
			return cuda_fail(e, "scale bytes");
	}
	if (!scatter) {
		/* Only the rows gathered go back: the rest of the caller's
		 * chunk is left alone, as on the CPU. */
		for (uint32_t p = 0; p < g->planes; p++)
			if ((rc = move_segments(cu, iov, n_iov, pos + p * g->plane_bytes,
						p * g->plane_bytes, (uint64_t)ntok * g->row_bytes, 0)))
				return rc;
		if (g->scale_bytes && (rc = move_segments(cu, iov, n_iov, pos + scale_off, scale_off,
							  g->scale_bytes, 0)))
			return rc;
	}
	if ((e = cudaEventRecord(cu->done, cu->stream)) != cudaSuccess ||
	    (e = cudaEventSynchronize(cu->done)) != cudaSuccess)
		return cuda_fail(e, "layer completion");
	return 0;
}

extern "C" int conn_cuda_copy(struct conn_cuda *cu, const struct conn_geom *g,
			      const kvt_paged_layer *L, const uint32_t *blocks, uint32_t ntok,
			      const struct iovec *iov, int n_iov, uint64_t pos, int dir)
{
	int rc;

	pthread_mutex_lock(&cu->mu);
	rc = copy_locked(cu, g, L, blocks, ntok, iov, n_iov, pos, dir);
	pthread_mutex_unlock(&cu->mu);
	return rc;
}
