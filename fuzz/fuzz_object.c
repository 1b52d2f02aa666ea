/*
 * fuzz_object.c — libFuzzer target for the object image decoder.
 *
 * Object images come from disk and from S3: bytes anyone may have written.
 * The decoder must never read past what it was given and must accept only
 * images that re-encode to themselves.
 *
 * Random mutations almost never get past the header checksum, so each input
 * is decoded twice: as it is, and as a copy whose header checksum (and, once
 * the header decodes, whose layer checksums) the target recomputes first.
 * The second pass drives the mutations into every later check and into the
 * segment readers.
 *
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *         src/common/err.c src/format/layout.c src/format/object.c \
 *         fuzz/fuzz_object.c -lxxhash -o fuzz_object
 *   ./fuzz_object -max_len=16384 fuzz/corpus/object
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR KVT_OBJ_HEADER_BYTES
#define CSUM_AT (HDR - 8)
#define TABLE_AT 192

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_header_csum(uint8_t *buf)
{
	put64(buf + CSUM_AT, kvt_obj_layer_csum(buf, CSUM_AT));
}

/* Properties every accepted image has. */
static void check_accepted(const uint8_t *img, size_t size, const kvt_obj_hdr *h)
{
	uint8_t again[HDR];
	const void *layers[KVT_MAX_LAYERS];
	struct iovec v[3];
	uint8_t *out, *copy;
	size_t plen = (size_t)h->payload_len, a, b;
	kvt_obj_hdr w;

	/* One encoding per header. */
	kvt_obj_hdr_encode(h, again);
	if (memcmp(again, img, HDR))
		abort();

	/* The image over three segments, split where the input says. */
	a = size ? (size_t)img[size - 1] * 37 % size : 0;
	b = a + (size - a) / 2;
	v[0].iov_base = (void *)(uintptr_t)img;
	v[0].iov_len = a;
	v[1].iov_base = (void *)(uintptr_t)(img + a);
	v[1].iov_len = b - a;
	v[2].iov_base = (void *)(uintptr_t)(img + b);
	v[2].iov_len = size - b;

	out = malloc(plen ? plen : 1);
	if (!out)
		return;
	if (kvt_obj_read_iov(h, v, 3, out, plen, 0) || memcmp(out, img + HDR, plen))
		abort();
	if (kvt_obj_read_iov(h, v, 3, out, plen, 1) || memcmp(out, img + HDR, plen))
		abort();
	if (kvt_obj_verify_iov(h, v, 3))
		abort();
	for (uint32_t i = 0; i < h->n_layers; i++)
		if (kvt_obj_read_layer_iov(h, v, 3, i, out, plen))
			abort();

	/* Writing the payload back out gives the same bytes. */
	copy = malloc(size);
	if (copy) {
		w = *h;
		for (uint32_t i = 0; i < w.n_layers; i++)
			layers[i] = img + HDR + w.layers[i].offset;
		v[0].iov_base = copy;
		v[1].iov_base = copy + a;
		v[2].iov_base = copy + b;
		if (kvt_obj_write_iov(&w, layers, v, 3) || memcmp(copy, img, size))
			abort();
		/* And so do the portable stripes, and they verify the same. */
		kvt_obj_force_portable(1);
		memset(copy, 0, size);
		w = *h;
		if (kvt_obj_write_iov(&w, layers, v, 3) || memcmp(copy, img, size) ||
		    kvt_obj_read_iov(h, v, 3, out, plen, 1) || kvt_obj_verify_iov(h, v, 3))
			abort();
		kvt_obj_force_portable(0);
		free(copy);
	}
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvt_obj_hdr h;
	uint8_t *fixed;
	int rc;

	/* As given: whatever it says, it must not crash or over-read. */
	kvt_obj_hdr_decode(data, size, &h);
	if (kvt_obj_decode(data, size, &h) == 0)
		check_accepted(data, size, &h);

	if (size < HDR)
		return 0;
	/* With the checksums made right. */
	fixed = malloc(size);
	if (!fixed)
		return 0;
	memcpy(fixed, data, size);
	fix_header_csum(fixed);
	rc = kvt_obj_hdr_decode(fixed, size, &h);
	if (rc == 0 && size >= HDR + h.payload_len) {
		uint64_t want = HDR + h.payload_len;

		for (uint32_t i = 0; i < h.n_layers; i++)
			put64(fixed + TABLE_AT + 24 * i + 16,
			      kvt_obj_layer_csum(fixed + HDR + h.layers[i].offset,
						 h.layers[i].length));
		fix_header_csum(fixed);
		rc = kvt_obj_decode(fixed, size, &h);
		/* Only trailing bytes can still be wrong. */
		if (rc != 0 && size == want)
			abort();
		if (rc == 0)
			check_accepted(fixed, size, &h);
	}
	free(fixed);
	return 0;
}
