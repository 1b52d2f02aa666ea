/*
 * tier_test_util.h — what the tests of the file tiers (crash, power loss,
 * rebuild, nvme, fsdir) share: namespaces, counter-derived keys, building
 * and checking an image, and walking or removing a directory tree.
 * Include after test.h.
 */
#ifndef KVT_TIER_TEST_UTIL_H
#define KVT_TIER_TEST_UTIL_H

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "format/object.h"
#include "kvtier.h"
#include "test.h"
#include "tier/tier.h"

/* A namespace of the given shape (2 planes, blocks of 16 tokens). */
static inline void tt_ns_make(kvt_ns *ns, uint32_t layers, uint32_t heads,
			      uint32_t dim, uint32_t tokens, uint32_t dtype,
			      uint32_t scale, uint64_t seed)
{
	memset(ns, 0, sizeof(*ns));
	test_fill(ns->digest, sizeof(ns->digest), seed);
	ns->layout = (kvt_layout){ .num_layers = layers, .num_kv_heads = heads,
				   .head_dim = dim, .dtype = dtype,
				   .kv_planes = 2, .scale_bytes = scale,
				   .block_size = 16, .chunk_tokens = tokens };
	ns->hash_scheme = KVT_HASH_SHA256;
	ns->tp_size = ns->pp_size = 1;
}

static inline uint64_t tt_mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static inline uint64_t tt_img_len(const kvt_ns *ns)
{
	return KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout);
}

/* A key for counter c: random-looking bytes (uniform fan-out) with the
 * counter in the last 8.  With fan >= 0, bytes 0..1 are fan instead, so a
 * put can be aimed at a chosen fan-out directory <k0>/<k1>. */
static inline kvt_key tt_key_of(uint64_t c, int fan)
{
	kvt_key k;
	int i;

	test_fill(k.b, sizeof(k.b), tt_mix64(c) | 1);
	for (i = 0; i < 8; i++)
		k.b[24 + i] = (uint8_t)(c >> (8 * i));
	if (fan >= 0) {
		k.b[0] = (uint8_t)(fan >> 8);
		k.b[1] = (uint8_t)fan;
	}
	return k;
}

/* The counter below `n` that tt_key_of made `k` from (its fan-out bytes
 * free if `fan_free`), or UINT64_MAX if none did. */
static inline uint64_t tt_counter_of(const kvt_key *k, uint64_t n,
				     int fan_free)
{
	uint64_t c = 0;
	kvt_key e;
	int i;

	for (i = 0; i < 8; i++)
		c |= (uint64_t)k->b[24 + i] << (8 * i);
	if (c >= n)
		return UINT64_MAX;
	e = tt_key_of(c, fan_free ? (k->b[0] << 8) | k->b[1] : -1);
	return memcmp(e.b, k->b, KVT_KEY_BYTES) ? UINT64_MAX : c;
}

/* Put the image of `key` in `ns` whose payload is test_fill(seed), built
 * in `payload` (room for the payload); `copy`, if given, gets the whole
 * image as written.  The tier's code. */
static inline int tt_put_image_copy(kvt_tier *t, const kvt_ns *ns,
				    const kvt_key *key, uint64_t seed,
				    uint8_t *payload, int dur, uint8_t *copy)
{
	uint64_t len = tt_img_len(ns), lb = kvt_layout_layer_bytes(&ns->layout);
	const void *layers[KVT_MAX_LAYERS];
	kvt_obj_hdr *h = malloc(sizeof(*h));
	kvt_tier_wbuf *w;
	uint64_t off;
	uint32_t i;
	int rc;

	if (!h || !payload) {
		free(h);
		return KVT_ENOMEM;
	}
	test_fill(payload, len - KVT_OBJ_HEADER_BYTES, seed);
	for (i = 0; i < ns->layout.num_layers; i++)
		layers[i] = payload + i * lb;
	rc = t->ops->put_begin(t, key, len, &w);
	if (!rc) {
		rc = kvt_obj_hdr_init(h, ns, key);
		if (!rc)
			rc = kvt_obj_write_iov(h, layers, w->iov, w->n_iov);
		for (i = 0, off = 0; !rc && copy && i < (uint32_t)w->n_iov; i++) {
			memcpy(copy + off, w->iov[i].iov_base, w->iov[i].iov_len);
			off += w->iov[i].iov_len;
		}
		if (rc)
			t->ops->put_abort(t, w);
		else
			rc = t->ops->put_commit(t, w, dur);
	}
	free(h);
	return rc;
}

static inline int tt_put_image(kvt_tier *t, const kvt_ns *ns,
			       const kvt_key *key, uint64_t seed,
			       uint8_t *payload, int dur)
{
	return tt_put_image_copy(t, ns, key, seed, payload, dur, NULL);
}

/* Get `key` and check its image bit for bit against what tt_put_image
 * wrote; `expect` has room for the payload.  0, the tier's code, or -101
 * (wrong length) / -102 (payload differs). */
static inline int tt_get_verify(kvt_tier *t, const kvt_ns *ns,
				const kvt_key *key, uint64_t seed,
				uint8_t *expect)
{
	uint64_t len = tt_img_len(ns);
	kvt_tier_rbuf *r;
	kvt_obj_hdr *h;
	const uint8_t *img;
	int rc = t->ops->get(t, key, &r);

	if (rc)
		return rc;
	h = malloc(sizeof(*h));
	img = r->iov[0].iov_base;
	if (!h)
		rc = KVT_ENOMEM;
	else if (r->n_iov != 1 || r->len != len)
		rc = -101;
	else if ((rc = kvt_obj_decode(img, (size_t)len, h)))
		;
	else if ((rc = kvt_obj_hdr_expect(h, ns, key)))
		;
	else {
		test_fill(expect, len - KVT_OBJ_HEADER_BYTES, seed);
		if (memcmp(img + KVT_OBJ_HEADER_BYTES, expect,
			   len - KVT_OBJ_HEADER_BYTES))
			rc = -102;
	}
	free(h);
	t->ops->release(t, r);
	return rc;
}

/* --- files ------------------------------------------------------------------ */

static inline int tt_rm_one(const char *p, const struct stat *st, int flag,
			    struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static inline void tt_rm_rf(const char *root)
{
	nftw(root, tt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Skip the test unless /var/tmp has `need` bytes free; then make the
 * directory `base` (a mkdtemp template) and name <base>/tier in `root`. */
static inline void tt_var_tmp(char *base, char *root, size_t root_size,
			      uint64_t need)
{
	struct statvfs sv;
	uint64_t free_b;

	if (statvfs("/var/tmp", &sv))
		SKIP("cannot statvfs /var/tmp");
	free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (free_b < need)
		SKIP("/var/tmp has %llu MiB free; this test needs %llu MiB",
		     (unsigned long long)(free_b >> 20),
		     (unsigned long long)(need >> 20));
	if (!mkdtemp(base))
		SKIP("cannot create a directory under /var/tmp");
	snprintf(root, root_size, "%s/tier", base);
}

/* Entries of `dir` other than dot files, or -1 if it cannot be read. */
static inline int tt_count_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static inline int tt_is_hex2(const char *s)
{
	return strlen(s) == 2 && strspn(s, "0123456789abcdef") == 2;
}

/* Call fn for every name (dot files aside) in the fan-out directories
 * <root>/<k0>/<k1>/ of a file tier. */
static inline void tt_walk_leaves(const char *root,
				  void (*fn)(void *arg, const char *name),
				  void *arg)
{
	char p1[PATH_MAX], p2[PATH_MAX + 264]; /* room for any d_name */
	DIR *d0, *d1, *d2;
	struct dirent *e0, *e1, *e2;

	if (!(d0 = opendir(root)))
		return;
	while ((e0 = readdir(d0))) {
		if (!tt_is_hex2(e0->d_name))
			continue;
		snprintf(p1, sizeof(p1), "%s/%s", root, e0->d_name);
		if (!(d1 = opendir(p1)))
			continue;
		while ((e1 = readdir(d1))) {
			if (!tt_is_hex2(e1->d_name))
				continue;
			snprintf(p2, sizeof(p2), "%s/%s", p1, e1->d_name);
			if (!(d2 = opendir(p2)))
				continue;
			while ((e2 = readdir(d2)))
				if (e2->d_name[0] != '.')
					fn(arg, e2->d_name);
			closedir(d2);
		}
		closedir(d1);
	}
	closedir(d0);
}


/* --- what a test checks of a tier's medium ------------------------------- */

static inline int tt_count_bad_one(void *arg, const kvt_key *key, const char *where,
				   int proven, const char *why)
{
	(void)key;
	(void)proven;
	CHECK(strstr(where, ".kvt") != NULL);
	CHECK(why[0] != '\0');
	(*(int *)arg)++;
	return 0;
}

/* How many objects the tier lists as bad (each with a path and a reason). */
static inline int tt_count_bad(kvt_tier *t)
{
	int n = 0;

	CHECK_EQ(t->ops->bad_iterate(t, tt_count_bad_one, &n), 0);
	return n;
}

static uint64_t tt_fp_acc;

static inline int tt_fp_one(const char *p, const struct stat *st, int flag,
			    struct FTW *f)
{
	uint64_t h = 1469598103934665603ull;

	(void)f;
	for (const char *c = p; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	h ^= (uint64_t)st->st_size * 31 + (uint64_t)st->st_mtim.tv_sec * 7 +
	     (uint64_t)st->st_mtim.tv_nsec;
	if (flag == FTW_F) {
		FILE *fp = fopen(p, "rb");
		int c;
		while (fp && (c = fgetc(fp)) != EOF)
			h = (h ^ (uint8_t)c) * 1099511628211ull;
		if (fp)
			fclose(fp);
	}
	tt_fp_acc += tt_mix64(h); /* order-free */
	return 0;
}

/* Names, sizes, mtimes and contents of every file and directory below
 * root: equal before and after means the tree did not change. */
static inline uint64_t tt_tree_fingerprint(const char *root)
{
	tt_fp_acc = 0;
	nftw(root, tt_fp_one, 16, FTW_PHYS);
	return tt_fp_acc;
}

#endif
