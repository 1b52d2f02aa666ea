/*
 * cuda.h — the connector's CUDA backend: gather and scatter between a
 * chunk in host memory and paged blocks in device memory.  Built only when
 * CMake finds nvcc (KVT_HAVE_CUDA); conn.c calls it for a connector opened
 * with KVT_CONN_MEM_CUDA.
 */
#ifndef KVT_CONN_CUDA_H
#define KVT_CONN_CUDA_H

#include <stdint.h>
#include <sys/uio.h>

#include "engine/paged.h"

#ifdef __cplusplus
extern "C" {
#endif

struct conn_cuda;

/* Select `device`, make a dedicated stream, a device staging buffer of one
 * layer and room for a chunk's block ids.  0, KVT_ENOTSUP (no such device,
 * or no driver), KVT_ENOMEM; the CUDA error in kvt_errmsg(). */
int conn_cuda_open(int device, const struct conn_geom *g, struct conn_cuda **out);
void conn_cuda_close(struct conn_cuda *cu);

/* Register host memory `base`..+len (the DRAM tier's arena) as
 * page-locked with the driver, so copies from it run at the link's speed
 * and truly asynchronously; undone at close if this backend did it.  A
 * refusal (too much to pin, already registered) is logged, not an error:
 * copies from pageable memory are slower, not wrong. */
void conn_cuda_pin(struct conn_cuda *cu, void *base, size_t len);

/* conn_paged_copy's job with the planes on the device: the layer's bytes
 * are segments `iov` from byte `pos` (host memory), the blocks device
 * memory.  A scatter copies the layer to the staging buffer
 * (cudaMemcpyAsync) and spreads it with a kernel; a gather runs the kernel,
 * then copies back.  Returns when the layer is complete on the stream (its
 * event has fired).  Calls are serialised per backend.  0, KVT_EINVAL,
 * KVT_ETRUNCATED, or -EIO for a CUDA failure (named in kvt_errmsg()). */
int conn_cuda_copy(struct conn_cuda *cu, const struct conn_geom *g, const kvt_paged_layer *L,
		   const uint32_t *blocks, uint32_t ntok, const struct iovec *iov, int n_iov,
		   uint64_t pos, int dir);

#ifdef __cplusplus
}
#endif
#endif
