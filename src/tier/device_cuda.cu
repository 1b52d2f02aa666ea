/*
 * device_cuda.cu — the device tier's memory on a CUDA device (device.h,
 * struct kvt_devmem): cudaMalloc'd pages, copies on a stream of its own.
 * Built where CMake finds nvcc (KVT_HAVE_CUDA); device.c falls back to
 * host memory without it.
 */
#include <errno.h>
#include <stdlib.h>

#include <cuda_runtime.h>

extern "C" {
#include "common/err.h"
#include "tier/device.h"
}

static int cuda_fail(cudaError_t e, const char *what)
{
	return kvt_err(-EIO, "CUDA %s: %s", what, cudaGetErrorString(e));
}

struct cuda_devmem {
	struct kvt_devmem m;
	int device;
	cudaStream_t stream;
};

static int dm_alloc(struct kvt_devmem *m, size_t len, void **p)
{
	struct cuda_devmem *d = (struct cuda_devmem *)m;
	cudaError_t e;

	if ((e = cudaSetDevice(d->device)) != cudaSuccess || (e = cudaMalloc(p, len)) != cudaSuccess)
		return cuda_fail(e, "cudaMalloc of the device tier");
	return 0;
}

static void dm_free(struct kvt_devmem *m, void *p, size_t len)
{
	(void)len;
	cudaSetDevice(((struct cuda_devmem *)m)->device);
	cudaFree(p);
}

static int dm_copy(struct kvt_devmem *m, void *dst, const void *src, size_t n)
{
	struct cuda_devmem *d = (struct cuda_devmem *)m;
	cudaError_t e;

	if ((e = cudaSetDevice(d->device)) != cudaSuccess ||
	    (e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, d->stream)) != cudaSuccess ||
	    (e = cudaStreamSynchronize(d->stream)) != cudaSuccess)
		return cuda_fail(e, "device tier copy");
	return 0;
}

static void dm_close(struct kvt_devmem *m)
{
	struct cuda_devmem *d = (struct cuda_devmem *)m;

	if (d->stream) {
		cudaSetDevice(d->device);
		cudaStreamDestroy(d->stream);
	}
	free(d);
}

extern "C" int kvt_devmem_cuda_open(int device, struct kvt_devmem **out)
{
	struct cuda_devmem *d;
	cudaError_t e;
	int n = 0;

	*out = NULL;
	if ((e = cudaGetDeviceCount(&n)) != cudaSuccess || device < 0 || device >= n)
		return kvt_err(KVT_ENOTSUP, "CUDA device %d: %s", device,
			       e != cudaSuccess ? cudaGetErrorString(e) : "no such device");
	if (!(d = (struct cuda_devmem *)calloc(1, sizeof(*d))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	d->m.name = "cuda";
	d->m.alloc = dm_alloc;
	d->m.free = dm_free;
	d->m.to_dev = dm_copy;
	d->m.to_host = dm_copy;
	d->m.close = dm_close;
	d->device = device;
	if ((e = cudaSetDevice(device)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		d->stream = NULL;
		dm_close(&d->m);
		return cuda_fail(e, "device tier set-up");
	}
	*out = &d->m;
	return 0;
}
