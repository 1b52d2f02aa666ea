/*
 * device.h — the device tier: chunks in accelerator memory (spare HBM
 * beyond the engine's own KV blocks), the first tier of the hierarchy.
 *
 * The tier keeps its index, its LRU and a copy of each object's 4 KiB
 * header in host memory, and the images in fixed pages of one device
 * allocation.  Its memory is reached through a small table of operations
 * (struct kvt_devmem): CUDA (device_cuda.cu, where nvcc built it) or
 * host memory, for engines whose "device" is the CPU (llama.cpp on CPU)
 * and so that the tier runs, and is tested, on any machine.
 *
 * Reads through the generic `get` hand out host memory: the pages
 * themselves where the CPU can read them, else a staging copy (one
 * device-to-host copy), so kvt_get and verification work as on any tier.
 * `get_dev` hands out the header's host copy followed by the payload's
 * device pages, with no copy at all, for a connector whose engine blocks
 * live on the same device: it scatters straight from there.
 */
#ifndef KVT_DEVICE_H
#define KVT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "tier/tier.h"

/* How the tier reaches its memory.  Every op returns 0 or a negative code
 * with kvt_errmsg() set (-EIO for a device failure, KVT_ENOMEM). */
struct kvt_devmem {
	const char *name;   /* "cuda", "host" */
	int host_visible;   /* the CPU can read and write device pointers */
	int (*alloc)(struct kvt_devmem *m, size_t len, void **p);
	void (*free)(struct kvt_devmem *m, void *p, size_t len);
	/* Synchronous copies: the data is in place when they return. */
	int (*to_dev)(struct kvt_devmem *m, void *dst, const void *src, size_t n);
	int (*to_host)(struct kvt_devmem *m, void *dst, const void *src, size_t n);
	void (*close)(struct kvt_devmem *m);
};

/* Host memory standing in for a device (an engine on the CPU). */
int kvt_devmem_host_open(struct kvt_devmem **out);
/* CUDA device `device`: KVT_ENOTSUP where kvtier was built without CUDA,
 * or no such device or driver (kvt_errmsg() says which). */
int kvt_devmem_cuda_open(int device, struct kvt_devmem **out);

typedef struct kvt_device_opts {
	uint64_t capacity;  /* bytes of device memory; whole pages */
	uint32_t page_size; /* power of two, 4 KiB .. 64 MiB */
	const char *backend;/* "cuda" or "host"; "host-staged": host memory
			     * reached only through copies, as a GPU's is */
	int device;         /* CUDA device ordinal */
} kvt_device_opts;

/* Open a device tier.  KVT_EINVAL names a bad option; the backend's error
 * when its memory cannot be had. */
int kvt_device_open(const kvt_device_opts *o, kvt_tier **out);

#endif
