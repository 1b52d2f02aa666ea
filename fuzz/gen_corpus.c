/*
 * gen_corpus.c — writes the seed corpus of fuzz_object.c.
 *
 * Small images of tiny layouts, valid and broken one way each, so the fuzzer
 * starts next to every check of the decoder.  The output is deterministic
 * (fixed key, digest and created_ns): regenerating changes nothing unless
 * the format did.
 *
 *   cc -std=gnu11 -D_GNU_SOURCE -Iinclude -Isrc src/common/err.c \
 *      src/format/layout.c src/format/object.c fuzz/gen_corpus.c -lxxhash \
 *      -o gen_corpus && ./gen_corpus fuzz/corpus/object
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/object.h"

#define HDR KVT_OBJ_HEADER_BYTES

struct img {
	uint8_t *buf;
	size_t len;
};

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void rehash(uint8_t *buf)
{
	put64(buf + HDR - 8, kvt_obj_layer_csum(buf, HDR - 8));
}

static int make(const kvt_layout *l, uint8_t seed, struct img *im)
{
	kvt_ns ns;
	kvt_key key;
	kvt_obj_hdr h;
	const void *layers[KVT_MAX_LAYERS];
	uint8_t *payload;
	struct iovec v;
	int rc;

	memset(&ns, 0, sizeof(ns));
	for (int i = 0; i < 32; i++) {
		ns.digest[i] = (uint8_t)(0xA0 + i);
		key.b[i] = (uint8_t)(seed + 3 * i);
	}
	ns.layout = *l;
	rc = kvt_obj_hdr_init(&h, &ns, &key);
	if (rc)
		return rc;
	h.created_ns = 1700000000000000000ull;
	payload = malloc(h.payload_len);
	if (!payload)
		return KVT_ENOMEM;
	for (uint64_t i = 0; i < h.payload_len; i++)
		payload[i] = (uint8_t)(i * 7 + seed);
	for (uint32_t i = 0; i < h.n_layers; i++)
		layers[i] = payload + h.layers[i].offset;
	im->len = HDR + h.payload_len;
	im->buf = malloc(im->len);
	if (!im->buf) {
		free(payload);
		return KVT_ENOMEM;
	}
	v.iov_base = im->buf;
	v.iov_len = im->len;
	rc = kvt_obj_write_iov(&h, layers, &v, 1);
	free(payload);
	return rc;
}

static int save(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		perror(path);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	/* 2 layers × 2 × 4 tokens × 1 head × 4 dims × f16: 64-byte layers. */
	static const kvt_layout tiny = {
		.num_layers = 2, .num_kv_heads = 1, .head_dim = 4,
		.dtype = KVT_DTYPE_F16, .kv_planes = 2, .block_size = 4,
		.chunk_tokens = 4,
	};
	/* 3 layers of MLA-style int8 with 5 bytes of scales: 37-byte layers. */
	static const kvt_layout scaled = {
		.num_layers = 3, .num_kv_heads = 1, .head_dim = 8,
		.dtype = KVT_DTYPE_INT8, .kv_planes = 1, .scale_bytes = 5,
		.block_size = 2, .chunk_tokens = 4,
	};
	struct img a, b;
	uint8_t *t;
	int bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	if (make(&tiny, 1, &a) || make(&scaled, 2, &b)) {
		fprintf(stderr, "gen_corpus: %s\n", kvt_errmsg());
		return 1;
	}
	t = malloc(a.len);
	if (!t)
		return 1;

	bad |= save(argv[1], "valid_tiny", a.buf, a.len);
	bad |= save(argv[1], "valid_scaled", b.buf, b.len);
	bad |= save(argv[1], "truncated_payload", a.buf, a.len - 17);
	bad |= save(argv[1], "truncated_header", a.buf, 1000);

	memcpy(t, a.buf, a.len);
	t[0] = 'X';
	bad |= save(argv[1], "bad_magic", t, a.len);

	memcpy(t, a.buf, a.len);
	t[8] = 2;
	rehash(t);
	bad |= save(argv[1], "bad_version", t, a.len);

	memcpy(t, a.buf, a.len);
	t[HDR - 1] ^= 0xFF;
	bad |= save(argv[1], "bad_header_csum", t, a.len);

	memcpy(t, a.buf, a.len);
	put64(t + 192 + 24, 65); /* layer 1 offset, one past contiguous */
	rehash(t);
	bad |= save(argv[1], "bad_layer_table", t, a.len);

	memcpy(t, a.buf, a.len);
	t[10] = KVT_OBJ_F_COMPRESSED; /* u16 flags */
	rehash(t);
	bad |= save(argv[1], "flags_compressed", t, a.len);

	memcpy(t, a.buf, a.len);
	put32(t + 136, 3); /* n_layers disagrees with the layout */
	rehash(t);
	bad |= save(argv[1], "bad_n_layers", t, a.len);

	memcpy(t, a.buf, a.len);
	t[4000] = 1;
	rehash(t);
	bad |= save(argv[1], "nonzero_padding", t, a.len);

	memcpy(t, a.buf, a.len);
	t[HDR + 70] ^= 0x01; /* layer 1 */
	bad |= save(argv[1], "corrupt_payload", t, a.len);

	free(t);
	free(a.buf);
	free(b.buf);
	return bad;
}
