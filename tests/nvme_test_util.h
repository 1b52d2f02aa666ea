/*
 * nvme_test_util.h — what the NVMe tier's tests share (test_nvme.c,
 * test_nvme_spares.c): namespaces of a small and a large chunk, an image
 * put and compared through the tier's ops, and paths in its directory.
 */
#ifndef KVT_NVME_TEST_UTIL_H
#define KVT_NVME_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/abuf.h"
#include "common/io.h"
#include "format/object.h"
#include "tier/nvme.h"
#include "test.h"
#include "tier_test_util.h"

static kvt_ns ns_small, ns_large;

static void ns_make(kvt_ns *ns, uint32_t layers, uint32_t heads,
		    uint32_t dim, uint32_t tokens, uint64_t seed)
{
	memset(ns, 0, sizeof(*ns));
	test_fill(ns->digest, sizeof(ns->digest), seed);
	ns->layout = (kvt_layout){ .num_layers = layers, .num_kv_heads = heads,
				   .head_dim = dim, .dtype = KVT_DTYPE_BF16,
				   .kv_planes = 2, .block_size = 16,
				   .chunk_tokens = tokens };
	ns->hash_scheme = KVT_HASH_SHA256;
	ns->tp_size = ns->pp_size = 1;
}

static uint64_t img_len(const kvt_ns *ns)
{
	return KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout);
}

static kvt_key key_of(uint64_t i)
{
	kvt_key k;
	test_fill(k.b, sizeof(k.b), 7777 * (i + 1));
	return k;
}

/* Put one chunk of `ns`; `copy` (img_len bytes), if given, gets the image. */
static int put_one(kvt_tier *t, const kvt_ns *ns, const kvt_key *key,
		   uint64_t seed, int dur, uint8_t *copy)
{
	uint8_t *payload = malloc(img_len(ns) - KVT_OBJ_HEADER_BYTES);
	int rc = tt_put_image_copy(t, ns, key, seed, payload, dur, copy);

	free(payload);
	return rc;
}

/* 0 if get returns exactly `img` and the image verifies; else the code or
 * -1 for different bytes. */
/* Read `key` back: one segment of `len` bytes under that key whose bytes
 * from `from` on are img's, and whose header decodes.  0, the get's error,
 * -1 (other bytes) or -2 (a bad header).  From KVT_OBJ_HEADER_BYTES on:
 * the payload alone (the header holds the time of the put). */
static int get_cmp_from(kvt_tier *t, const kvt_key *key, const uint8_t *img,
			uint64_t len, uint64_t from)
{
	kvt_tier_rbuf *r;
	kvt_obj_hdr *h;
	int rc = t->ops->get(t, key, &r);

	if (rc)
		return rc;
	h = malloc(sizeof(*h));
	rc = 0;
	if (r->len != len || r->n_iov != 1 ||
	    memcmp((const uint8_t *)r->iov[0].iov_base + from, img + from, len - from) ||
	    memcmp(r->key.b, key->b, KVT_KEY_BYTES))
		rc = -1;
	else if (kvt_obj_decode(r->iov[0].iov_base, len, h))
		rc = -2;
	free(h);
	t->ops->release(t, r);
	return rc;
}

static int get_cmp(kvt_tier *t, const kvt_key *key, const uint8_t *img,
		   uint64_t len)
{
	return get_cmp_from(t, key, img, len, 0);
}

/* --- files ---------------------------------------------------------------- */

static char path_buf[PATH_MAX];

/* Where the tier keeps `k` under `root` (in a static buffer). */
static const char *final_path(const char *root, const kvt_key *k)
{
	char hex[65];

	kvt_key_hex(k, hex);
	snprintf(path_buf, sizeof(path_buf), "%s/%.2s/%.2s/%s.kvt", root, hex,
		 hex + 2, hex);
	return path_buf;
}

static long long file_size(const char *p)
{
	struct stat st;
	return stat(p, &st) ? -1 : (long long)st.st_size;
}

/* Entries in <root>/<sub>. */
static inline int count_dir(const char *root, const char *sub)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, sub);
	return tt_count_dir(p);
}

/* A fresh directory name under base_dir (which main makes). */
static char base_dir[256];
static int dir_seq;

static char *new_dir(void)
{
	char *p = malloc(PATH_MAX);
	snprintf(p, PATH_MAX, "%s/t%d", base_dir, dir_seq++);
	return p;
}

static kvt_tier *open_tier(const char *dir, uint64_t cap, int uring,
			   kvt_io *io)
{
	kvt_nvme_opts o = { .path = dir, .capacity = cap, .queue_depth = 16,
			    .use_io_uring = uring, .io = io };
	kvt_tier *t = NULL;
	int rc = kvt_nvme_open(&o, &t);

	CHECK_EQ(rc, 0);
	return t;
}

#endif
