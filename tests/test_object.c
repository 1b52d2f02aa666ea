/*
 * test_object.c — the object image format: encoding, every rejection the
 * decoder makes, and images spread over segments of awkward sizes.
 */
#include "test.h"

#include <stdint.h>
#include <time.h>

#include "format/object.h"

/* 4 layers × 2 K/V × 16 tokens × 2 heads × 8 dims × f16 = 1 KiB a layer. */
static const kvt_layout small_layout = {
	.num_layers = 4, .num_kv_heads = 2, .head_dim = 8,
	.dtype = KVT_DTYPE_F16, .kv_planes = 2, .scale_bytes = 0,
	.block_size = 16, .chunk_tokens = 16,
};

/* Layers of an odd size (2 × 16 × 3 × 5 fp8 + 13 bytes of scales = 493),
 * so layer boundaries fall anywhere inside segments. */
static const kvt_layout odd_layout = {
	.num_layers = 5, .num_kv_heads = 3, .head_dim = 5,
	.dtype = KVT_DTYPE_FP8_E4M3, .kv_planes = 2, .scale_bytes = 13,
	.block_size = 8, .chunk_tokens = 16,
};

/* Layers of ~130 KiB: many copy pieces per layer and per segment. */
static const kvt_layout big_layout = {
	.num_layers = 3, .num_kv_heads = 8, .head_dim = 64,
	.dtype = KVT_DTYPE_BF16, .kv_planes = 2, .scale_bytes = 7,
	.block_size = 16, .chunk_tokens = 64,
};

static void make_ns(kvt_ns *ns, const kvt_layout *l, uint8_t seed)
{
	memset(ns, 0, sizeof(*ns));
	for (int i = 0; i < 32; i++)
		ns->digest[i] = (uint8_t)(seed * 31 + i);
	ns->layout = *l;
	ns->hash_scheme = KVT_HASH_SHA256;
	ns->tp_size = ns->pp_size = 1;
}

static void make_key(kvt_key *k, uint8_t seed)
{
	for (int i = 0; i < KVT_KEY_BYTES; i++)
		k->b[i] = (uint8_t)(seed ^ (i * 7));
}

/* A whole image of `l` in one malloc'd buffer of exactly its size. */
struct image {
	kvt_ns ns;
	kvt_key key;
	kvt_obj_hdr h;
	uint8_t *payload; /* the source payload, layer-major */
	uint8_t *buf;     /* the image */
	size_t len;
};

static void image_make(struct image *im, const kvt_layout *l, uint64_t seed)
{
	const void *layers[KVT_MAX_LAYERS];
	struct iovec v;

	make_ns(&im->ns, l, (uint8_t)seed);
	make_key(&im->key, (uint8_t)seed);
	CHECK_EQ(kvt_obj_hdr_init(&im->h, &im->ns, &im->key), 0);
	im->payload = malloc(im->h.payload_len);
	test_fill(im->payload, im->h.payload_len, seed);
	for (uint32_t i = 0; i < im->h.n_layers; i++)
		layers[i] = im->payload + im->h.layers[i].offset;
	im->len = KVT_OBJ_HEADER_BYTES + im->h.payload_len;
	im->buf = malloc(im->len);
	v.iov_base = im->buf;
	v.iov_len = im->len;
	CHECK_EQ(kvt_obj_write_iov(&im->h, layers, &v, 1), 0);
}

static void image_free(struct image *im)
{
	free(im->payload);
	free(im->buf);
}

/* Rewrite the header checksum after a test pokes at the header's bytes, so
 * that the decoder's later checks are the ones that fire. */
static void rehash(uint8_t *buf)
{
	uint64_t c = kvt_obj_layer_csum(buf, 4088);
	for (int i = 0; i < 8; i++)
		buf[4088 + i] = (uint8_t)(c >> (8 * i));
}

static void poke32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t peek64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Decode a header after `edit` changed h; the header checksum is valid. */
static int decode_edited(const struct image *im, void (*edit)(kvt_obj_hdr *))
{
	uint8_t buf[KVT_OBJ_HEADER_BYTES];
	kvt_obj_hdr h = im->h, out;

	edit(&h);
	kvt_obj_hdr_encode(&h, buf);
	return kvt_obj_hdr_decode(buf, sizeof(buf), &out);
}

/* Decode a header after one raw 32-bit store at `off`, with or without
 * fixing the checksum. */
static int decode_poked32(const struct image *im, size_t off, uint32_t v, int fix)
{
	uint8_t buf[KVT_OBJ_HEADER_BYTES];
	kvt_obj_hdr out;

	memcpy(buf, im->buf, sizeof(buf));
	poke32(buf + off, v);
	if (fix)
		rehash(buf);
	return kvt_obj_hdr_decode(buf, sizeof(buf), &out);
}

static int msg_has(const char *s)
{
	if (strstr(kvt_errmsg(), s))
		return 1;
	fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", kvt_errmsg(), s);
	return 0;
}

static void edit_version(kvt_obj_hdr *h) { h->version = 2; }
static void edit_header_len(kvt_obj_hdr *h) { h->header_len = 8192; }
static void edit_flags_compressed(kvt_obj_hdr *h) { h->flags = KVT_OBJ_F_COMPRESSED; }
static void edit_flags_high(kvt_obj_hdr *h) { h->flags = 0x8000; }
static void edit_csum_alg(kvt_obj_hdr *h) { h->csum_alg = 2; }
static void edit_dtype(kvt_obj_hdr *h) { h->layout.dtype = 99; }
static void edit_layers_zero(kvt_obj_hdr *h) { h->layout.num_layers = 0; }
static void edit_layers_many(kvt_obj_hdr *h) { h->layout.num_layers = KVT_MAX_LAYERS + 1; }
static void edit_block(kvt_obj_hdr *h) { h->layout.block_size = 5; }
static void edit_n_layers(kvt_obj_hdr *h) { h->n_layers = 3; }
static void edit_n_layers_huge(kvt_obj_hdr *h) { h->n_layers = 0xFFFFFFFFu; }
static void edit_tokens(kvt_obj_hdr *h) { h->token_count = 15; }
static void edit_offset(kvt_obj_hdr *h) { h->layers[1].offset += 1; }
static void edit_first_offset(kvt_obj_hdr *h) { h->layers[0].offset = 8; }
static void edit_length(kvt_obj_hdr *h) { h->layers[3].length -= 1; }
static void edit_payload_len(kvt_obj_hdr *h) { h->payload_len += 1; }

/* Every layer one byte longer and payload_len to match: a self-consistent
 * table that the layout does not produce. */
static void edit_all_lengths(kvt_obj_hdr *h)
{
	uint64_t off = 0;
	for (uint32_t i = 0; i < h->n_layers; i++) {
		h->layers[i].offset = off;
		h->layers[i].length += 1;
		off += h->layers[i].length;
	}
	h->payload_len = off;
}

static void test_csum_known_answer(void)
{
	/* XXH3-64 of nothing, seed 0: pins the algorithm and the seed. */
	CHECK(kvt_obj_layer_csum("", 0) == 0x2D06800538D394C2ull);
}

static void test_round_trip(void)
{
	struct image im;
	kvt_obj_hdr h;
	uint8_t again[KVT_OBJ_HEADER_BYTES];
	struct timespec ts;

	image_make(&im, &small_layout, 1);
	CHECK_EQ(im.len, 4096 + 4 * 1024);
	CHECK_EQ(kvt_obj_decode(im.buf, im.len, &h), 0);
	CHECK_EQ(h.version, KVT_OBJ_VERSION);
	CHECK_EQ(h.flags, 0);
	CHECK_EQ(h.header_len, 4096);
	CHECK(memcmp(h.key.b, im.key.b, 32) == 0);
	CHECK(memcmp(h.ns_digest, im.ns.digest, 32) == 0);
	CHECK(memcmp(&h.layout, &small_layout, sizeof(kvt_layout)) == 0);
	CHECK_EQ(h.token_count, 16);
	CHECK_EQ(h.csum_alg, KVT_OBJ_CSUM_XXH3_64);
	CHECK_EQ(h.payload_len, 4096);
	CHECK_EQ(h.n_layers, 4);
	CHECK(h.created_ns == im.h.created_ns);
	clock_gettime(CLOCK_REALTIME, &ts);
	CHECK(h.created_ns <= (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
	CHECK(h.created_ns > 1600000000ull * 1000000000ull);
	for (uint32_t i = 0; i < 4; i++) {
		CHECK_EQ(h.layers[i].offset, i * 1024);
		CHECK_EQ(h.layers[i].length, 1024);
		CHECK(h.layers[i].csum == kvt_obj_layer_csum(im.payload + i * 1024, 1024));
		CHECK(h.layers[i].csum == im.h.layers[i].csum);
	}
	CHECK_EQ(kvt_obj_hdr_expect(&h, &im.ns, &im.key), 0);
	/* Canonical: re-encoding the decoded header gives the same bytes. */
	kvt_obj_hdr_encode(&h, again);
	CHECK(memcmp(again, im.buf, sizeof(again)) == 0);
	CHECK(memcmp(im.buf + 4096, im.payload, 4096) == 0);

	/* The byte offsets docs/FORMAT.md promises. */
	CHECK(memcmp(im.buf, "KVTCHUNK", 8) == 0);
	CHECK(im.buf[8] == 1 && im.buf[9] == 0);     /* version */
	CHECK(im.buf[12] == 0 && im.buf[13] == 0x10); /* header_len 4096 */
	CHECK(memcmp(im.buf + 16, im.key.b, 32) == 0);
	CHECK(memcmp(im.buf + 48, im.ns.digest, 32) == 0);
	CHECK(im.buf[80] == 4 && im.buf[88] == 8 && im.buf[108] == 16);
	CHECK(im.buf[112] == 16 && im.buf[116] == 1);
	CHECK(peek64(im.buf + 120) == 4096);
	CHECK(peek64(im.buf + 128) == h.created_ns);
	CHECK(im.buf[136] == 4);
	CHECK(peek64(im.buf + 192 + 24) == 1024);      /* layer 1 offset */
	CHECK(peek64(im.buf + 192 + 24 + 8) == 1024);  /* layer 1 length */
	CHECK(peek64(im.buf + 192 + 24 + 16) == h.layers[1].csum);
	CHECK(peek64(im.buf + 4088) == kvt_obj_layer_csum(im.buf, 4088));
	image_free(&im);
}

static void test_max_layers(void)
{
	kvt_layout l = {
		.num_layers = KVT_MAX_LAYERS, .num_kv_heads = 1, .head_dim = 1,
		.dtype = KVT_DTYPE_INT8, .kv_planes = 1, .block_size = 1,
		.chunk_tokens = 1,
	};
	struct image im;
	kvt_obj_hdr h;

	image_make(&im, &l, 7);
	CHECK_EQ(kvt_obj_decode(im.buf, im.len, &h), 0);
	CHECK_EQ(h.n_layers, KVT_MAX_LAYERS);
	CHECK(h.layers[KVT_MAX_LAYERS - 1].csum ==
	      kvt_obj_layer_csum(im.payload + KVT_MAX_LAYERS - 1, 1));
	image_free(&im);
}

static void test_hdr_init(void)
{
	kvt_ns ns;
	kvt_key key;
	kvt_obj_hdr h;
	kvt_layout l = small_layout;

	make_key(&key, 3);
	l.kv_planes = 3;
	make_ns(&ns, &l, 3);
	CHECK_EQ(kvt_obj_hdr_init(&h, &ns, &key), KVT_ELAYOUT);
	CHECK_EQ(kvt_obj_hdr_init(NULL, &ns, &key), KVT_EINVAL);

	/* A layout kvt_layout_check accepts but whose payload is over the
	 * object limit: 2 × 16 × 4096 × 65536 × 4 bytes = 32 GiB. */
	l = (kvt_layout){ .num_layers = 1, .num_kv_heads = 4096, .head_dim = 65536,
			  .dtype = KVT_DTYPE_F32, .kv_planes = 2, .block_size = 16,
			  .chunk_tokens = 16 };
	make_ns(&ns, &l, 3);
	CHECK_EQ(kvt_obj_hdr_init(&h, &ns, &key), KVT_ELAYOUT);
}

/* Every rejection, in the decoder's order, with its exact code. */
static void test_decode_errors(void)
{
	struct image im;
	uint8_t buf[KVT_OBJ_HEADER_BYTES];
	kvt_obj_hdr h;

	image_make(&im, &small_layout, 2);

	CHECK_EQ(kvt_obj_hdr_decode(im.buf, 4095, &h), KVT_ETRUNCATED);
	CHECK(msg_has("4095"));
	CHECK_EQ(kvt_obj_hdr_decode(im.buf, 0, &h), KVT_ETRUNCATED);

	memcpy(buf, im.buf, sizeof(buf));
	buf[3] ^= 0x20;
	CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EBADMAGIC);
	CHECK(msg_has("magic"));
	/* Magic is checked before the truncation of the payload matters. */
	CHECK_EQ(kvt_obj_decode(buf, im.len, &h), KVT_EBADMAGIC);

	/* Version is read before the checksum: a future version's header
	 * may hash differently. */
	memcpy(buf, im.buf, sizeof(buf));
	buf[8] = 2;
	CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EVERSION);
	CHECK(msg_has("version 2"));
	CHECK_EQ(decode_edited(&im, edit_version), KVT_EVERSION);

	CHECK_EQ(decode_edited(&im, edit_header_len), KVT_EMALFORMED);
	CHECK(msg_has("header_len 8192"));
	CHECK_EQ(decode_poked32(&im, 12, 4097, 0), KVT_EMALFORMED);

	/* Header checksum: a byte of the key, of the padding, of the sum. */
	memcpy(buf, im.buf, sizeof(buf));
	buf[20] ^= 1;
	CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EHDRCSUM);
	CHECK(msg_has("header checksum"));
	memcpy(buf, im.buf, sizeof(buf));
	buf[3000] = 1;
	CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EHDRCSUM);
	memcpy(buf, im.buf, sizeof(buf));
	buf[4095] ^= 0x80;
	CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EHDRCSUM);
	/* Any unchecked field change without rehash is a checksum error. */
	CHECK_EQ(decode_poked32(&im, 116, 2, 0), KVT_EHDRCSUM);

	CHECK_EQ(decode_edited(&im, edit_flags_compressed), KVT_EMALFORMED);
	CHECK(msg_has("flags"));
	CHECK_EQ(decode_edited(&im, edit_flags_high), KVT_EMALFORMED);
	CHECK_EQ(decode_edited(&im, edit_csum_alg), KVT_EMALFORMED);
	CHECK(msg_has("csum_alg 2"));

	CHECK_EQ(decode_edited(&im, edit_dtype), KVT_ELAYOUT);
	CHECK(msg_has("dtype 99"));
	CHECK_EQ(decode_edited(&im, edit_layers_zero), KVT_ELAYOUT);
	CHECK_EQ(decode_edited(&im, edit_layers_many), KVT_ELAYOUT);
	CHECK(msg_has("num_layers 161"));
	CHECK_EQ(decode_edited(&im, edit_block), KVT_ELAYOUT);

	CHECK_EQ(decode_edited(&im, edit_n_layers), KVT_EMALFORMED);
	CHECK(msg_has("n_layers 3"));
	/* A huge n_layers must not walk off the table. */
	CHECK_EQ(decode_edited(&im, edit_n_layers_huge), KVT_EMALFORMED);
	CHECK_EQ(decode_poked32(&im, 136, 0xFFFFFFFFu, 1), KVT_EMALFORMED);
	CHECK_EQ(decode_edited(&im, edit_tokens), KVT_EMALFORMED);
	CHECK(msg_has("token_count 15"));

	CHECK_EQ(decode_edited(&im, edit_offset), KVT_EMALFORMED);
	CHECK(msg_has("layer 1"));
	CHECK_EQ(decode_edited(&im, edit_first_offset), KVT_EMALFORMED);
	CHECK(msg_has("layer 0"));
	CHECK_EQ(decode_edited(&im, edit_length), KVT_EMALFORMED);
	CHECK(msg_has("layer 3"));
	CHECK_EQ(decode_edited(&im, edit_payload_len), KVT_EMALFORMED);
	CHECK(msg_has("payload_len 4097"));
	CHECK_EQ(decode_edited(&im, edit_all_lengths), KVT_EMALFORMED);

	/* Reserved field and every stretch of padding. */
	CHECK_EQ(decode_poked32(&im, 140, 1, 1), KVT_EMALFORMED);
	CHECK(msg_has("reserved"));
	{
		static const size_t pads[] = {
			144, 191, 192 + 4 * 24, 192 + 160 * 24 - 1, 4000, 4087,
		};
		for (size_t i = 0; i < sizeof(pads) / sizeof(pads[0]); i++) {
			memcpy(buf, im.buf, sizeof(buf));
			buf[pads[i]] = 0x5a;
			rehash(buf);
			CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EMALFORMED);
			CHECK(msg_has("padding"));
		}
	}

	/* The whole-image decoder: length and payload checks. */
	CHECK_EQ(kvt_obj_decode(im.buf, im.len - 1, &h), KVT_ETRUNCATED);
	{
		uint8_t *longer = malloc(im.len + 1);
		memcpy(longer, im.buf, im.len);
		longer[im.len] = 0;
		CHECK_EQ(kvt_obj_decode(longer, im.len + 1, &h), KVT_EMALFORMED);
		longer[4096 + 2 * 1024 + 17] ^= 0x04;
		CHECK_EQ(kvt_obj_decode(longer, im.len, &h), KVT_ECORRUPT);
		CHECK(msg_has("layer 2"));
		free(longer);
	}
	image_free(&im);
}

/* A layout valid by kvt_layout_check whose payload is over the limit. */
static void test_payload_limit(void)
{
	uint8_t buf[KVT_OBJ_HEADER_BYTES];
	kvt_obj_hdr h;

	memset(&h, 0, sizeof(h));
	h.version = KVT_OBJ_VERSION;
	h.header_len = KVT_OBJ_HEADER_BYTES;
	h.csum_alg = KVT_OBJ_CSUM_XXH3_64;
	h.layout = (kvt_layout){ .num_layers = 1, .num_kv_heads = 4096,
				 .head_dim = 65536, .dtype = KVT_DTYPE_F32,
				 .kv_planes = 2, .block_size = 16, .chunk_tokens = 16 };
	h.token_count = 16;
	h.n_layers = 1;
	h.layers[0].length = 1ull << 35;
	h.payload_len = 1ull << 35;
	kvt_obj_hdr_encode(&h, buf);
	CHECK_EQ(kvt_obj_hdr_decode(buf, sizeof(buf), &h), KVT_EMALFORMED);
	CHECK(msg_has("limit"));
}

/* Every prefix of a valid image, each in a buffer of exactly that size so
 * the sanitizers see any read past it. */
static void test_truncations(void)
{
	struct image im;
	kvt_obj_hdr h;

	image_make(&im, &small_layout, 4);
	for (size_t n = 0; n <= im.len; n++) {
		uint8_t *b = malloc(n ? n : 1);
		int rc;

		memcpy(b, im.buf, n);
		rc = kvt_obj_decode(b, n, &h);
		CHECK_EQ(rc, n == im.len ? 0 : KVT_ETRUNCATED);
		rc = kvt_obj_hdr_decode(b, n, &h);
		CHECK_EQ(rc, n < 4096 ? KVT_ETRUNCATED : 0);
		free(b);
	}
	image_free(&im);
}

/* Segments of the given sizes, cycled, each its own allocation, covering at
 * least `len` bytes (the last one may run over). */
struct segs {
	struct iovec *iov;
	int n;
};

static void segs_make(struct segs *s, size_t len, const size_t *sizes,
		      size_t n_sizes)
{
	size_t have = 0, cap = 16;

	s->iov = malloc(cap * sizeof(*s->iov));
	s->n = 0;
	for (size_t i = 0; have < len; i++) {
		size_t z = sizes[i % n_sizes];
		if ((size_t)s->n == cap) {
			cap *= 2;
			s->iov = realloc(s->iov, cap * sizeof(*s->iov));
		}
		/* 64-byte aligned, as arena pages are, so that the streaming
		 * stores of a big image are taken where a layer starts
		 * aligned (and the plain ones where it does not). */
		s->iov[s->n].iov_base = NULL;
		if (z && posix_memalign(&s->iov[s->n].iov_base, 64, z))
			s->iov[s->n].iov_base = NULL;
		s->iov[s->n].iov_len = z;
		if (z)
			memset(s->iov[s->n].iov_base, 0xEE, z);
		s->n++;
		have += z;
	}
}

static void segs_free(struct segs *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->iov[i].iov_base);
	free(s->iov);
}

/* Byte `off` of the image held in `s`. */
static uint8_t *segs_at(struct segs *s, size_t off)
{
	for (int i = 0; i < s->n; i++) {
		if (off < s->iov[i].iov_len)
			return (uint8_t *)s->iov[i].iov_base + off;
		off -= s->iov[i].iov_len;
	}
	return NULL;
}

static void segs_gather(struct segs *s, uint8_t *out, size_t len)
{
	for (int i = 0; i < s->n && len; i++) {
		size_t n = s->iov[i].iov_len < len ? s->iov[i].iov_len : len;
		if (n)
			memcpy(out, s->iov[i].iov_base, n);
		out += n;
		len -= n;
	}
}

static void check_segments(const kvt_layout *l, const size_t *sizes,
			   size_t n_sizes, const char *what)
{
	struct image im;
	struct segs s;
	kvt_obj_hdr h, d;
	const void *layers[KVT_MAX_LAYERS];
	uint8_t *lin, *out;
	size_t plen;
	int failures = test_failures;

	image_make(&im, l, 5);
	plen = im.h.payload_len;
	segs_make(&s, im.len, sizes, n_sizes);
	h = im.h;
	for (uint32_t i = 0; i < h.n_layers; i++)
		layers[i] = im.payload + h.layers[i].offset;
	CHECK_EQ(kvt_obj_write_iov(&h, layers, s.iov, s.n), 0);

	/* Bit-identical to the image written in one piece. */
	lin = malloc(im.len);
	segs_gather(&s, lin, im.len);
	CHECK(memcmp(lin, im.buf, im.len) == 0);
	CHECK_EQ(kvt_obj_decode(lin, im.len, &d), 0);
	free(lin);

	out = malloc(plen);
	memset(out, 0, plen);
	CHECK_EQ(kvt_obj_read_iov(&d, s.iov, s.n, out, plen, 0), 0);
	CHECK(memcmp(out, im.payload, plen) == 0);
	memset(out, 0, plen);
	CHECK_EQ(kvt_obj_read_iov(&d, s.iov, s.n, out, plen, 1), 0);
	CHECK(memcmp(out, im.payload, plen) == 0);
	CHECK_EQ(kvt_obj_verify_iov(&d, s.iov, s.n), 0);
	for (uint32_t i = 0; i < d.n_layers; i++) {
		memset(out, 0, plen);
		CHECK_EQ(kvt_obj_read_layer_iov(&d, s.iov, s.n, i, out, d.layers[i].length), 0);
		CHECK(memcmp(out, im.payload + d.layers[i].offset, d.layers[i].length) == 0);
	}

	/* One flipped bit in the last byte of layer 1. */
	{
		size_t off = 4096 + d.layers[1].offset + d.layers[1].length - 1;
		uint8_t *p = segs_at(&s, off);

		*p ^= 0x10;
		CHECK_EQ(kvt_obj_verify_iov(&d, s.iov, s.n), KVT_ECORRUPT);
		CHECK(msg_has("layer 1"));
		CHECK_EQ(kvt_obj_read_iov(&d, s.iov, s.n, out, plen, 1), KVT_ECORRUPT);
		CHECK(msg_has("layer 1"));
		/* Without verification the bytes are copied as they are. */
		CHECK_EQ(kvt_obj_read_iov(&d, s.iov, s.n, out, plen, 0), 0);
		CHECK(out[off - 4096] == (im.payload[off - 4096] ^ 0x10));
		CHECK_EQ(kvt_obj_read_layer_iov(&d, s.iov, s.n, 1, out, plen), KVT_ECORRUPT);
		CHECK(msg_has("layer 1"));
		CHECK_EQ(kvt_obj_read_layer_iov(&d, s.iov, s.n, 0, out, plen), 0);
		CHECK_EQ(kvt_obj_read_layer_iov(&d, s.iov, s.n, 2, out, plen), 0);
		*p ^= 0x10;
		CHECK_EQ(kvt_obj_verify_iov(&d, s.iov, s.n), 0);
	}
	free(out);
	segs_free(&s);
	image_free(&im);
	if (test_failures != failures)
		fprintf(stderr, "  ... with segments %s\n", what);
}

static void test_segments(void)
{
	static const size_t one[] = { 1 }, seven[] = { 7 }, page[] = { 4096 },
			    big[] = { 65536 },
			    mixed[] = { 1, 4095, 3, 65536, 0, 7, 4096, 1000, 2 },
			    hdr_split[] = { 4000, 97, 0, 0, 500 };
	static const kvt_layout *const layouts[] = { &small_layout, &odd_layout,
						     &big_layout };

	for (size_t i = 0; i < 3; i++) {
		/* 1-byte segments for big_layout are 400k allocations: slow
		 * under ASan for no extra coverage. */
		if (layouts[i] != &big_layout)
			check_segments(layouts[i], one, 1, "of 1 byte");
		check_segments(layouts[i], seven, 1, "of 7 bytes");
		check_segments(layouts[i], page, 1, "of 4096 bytes");
		check_segments(layouts[i], big, 1, "of 65536 bytes");
		check_segments(layouts[i], mixed, 9, "mixed");
		check_segments(layouts[i], hdr_split, 5, "splitting the header");
	}
}

/*
 * Images as this version writes them, pinned by the XXH3-64 of the whole
 * image (header, layer checksums and payload): a change to how the encoder
 * copies and checksums must leave every byte as it was, or objects already
 * stored would stop decoding.  The layer lengths straddle XXH3's cases: at
 * most 240 bytes (short inputs), a stripe of 64, a block of 1024, one past
 * each, and layers of many blocks.  Everything but the lengths is fixed
 * (key, namespace, created_ns, payload bytes written byte by byte, so the
 * image is the same on any host).  The values were taken from the encoder
 * that copied and hashed with libxxhash's streaming API.
 */
static const struct {
	uint32_t layer_bytes;
	uint64_t image_xxh3;
} golden[] = {
	{ 1, 0x018cad27ddf9bd63ull },
	{ 64, 0x851042c5fe6da21aull },
	{ 200, 0xa805976bb99f7869ull },
	{ 240, 0x5ec0e157989101feull },
	{ 241, 0x3677aca241660dd5ull },
	{ 256, 0x7c74587ac0f01a2full },
	{ 1000, 0x8e8c378d757abeb0ull },
	{ 1023, 0xd8a0240dbb4002e9ull },
	{ 1024, 0x6165f83d7adcf75eull },
	{ 1025, 0x94a37f05fde1b824ull },
	{ 1087, 0x989fe89965df4f79ull },
	{ 1088, 0x1a26673ddd1005c3ull },
	{ 1089, 0xe227ec24b4aa4039ull },
	{ 4096, 0x0abc7556a4d50c2bull },
	{ 65536, 0x0011b88dcf76bc65ull },
	{ 135169, 0xe1ff1d5c54db91c3ull },
	{ 1048576, 0x547b544931545f3cull },
};

static void golden_image(uint32_t layer_bytes, const size_t *sizes, size_t n_sizes,
			 uint64_t *image_hash)
{
	kvt_layout l = {
		.num_layers = 3, .num_kv_heads = 1, .head_dim = 1,
		.dtype = KVT_DTYPE_FP8_E4M3, .kv_planes = 1,
		.scale_bytes = layer_bytes - 1, .block_size = 1, .chunk_tokens = 1,
	};
	const void *layers[3];
	kvt_ns ns;
	kvt_key key;
	kvt_obj_hdr h;
	struct segs s;
	uint8_t *payload, *img;
	size_t len;
	uint64_t x = 0x243F6A8885A308D3ull;

	make_ns(&ns, &l, 9);
	make_key(&key, 9);
	CHECK_EQ(kvt_obj_hdr_init(&h, &ns, &key), 0);
	h.created_ns = 1764547200000000000ull; /* 2025-12-01T00:00:00Z */
	payload = malloc(h.payload_len);
	for (uint64_t i = 0; i < h.payload_len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		payload[i] = (uint8_t)(x >> 24);
	}
	for (uint32_t i = 0; i < 3; i++)
		layers[i] = payload + h.layers[i].offset;
	len = KVT_OBJ_HEADER_BYTES + h.payload_len;
	segs_make(&s, len, sizes, n_sizes);
	CHECK_EQ(kvt_obj_write_iov(&h, layers, s.iov, s.n), 0);
	img = malloc(len);
	segs_gather(&s, img, len);
	*image_hash = kvt_obj_layer_csum(img, len);
	free(img);
	segs_free(&s);
	free(payload);
}

static void test_golden_images(void)
{
	static const size_t whole[] = { 8u << 20 }, mixed[] = { 4095, 1, 70, 65536, 3 };

	for (size_t i = 0; i < sizeof(golden) / sizeof(golden[0]); i++) {
		uint64_t a, b;

		golden_image(golden[i].layer_bytes, whole, 1, &a);
		golden_image(golden[i].layer_bytes, mixed, 5, &b);
		CHECK(a == golden[i].image_xxh3);
		CHECK(b == golden[i].image_xxh3);
		if (a != golden[i].image_xxh3 || b != golden[i].image_xxh3)
			fprintf(stderr, "  ... golden image of %u-byte layers: 0x%016llx "
				"(one segment), 0x%016llx (mixed), want 0x%016llx\n",
				golden[i].layer_bytes, (unsigned long long)a,
				(unsigned long long)b,
				(unsigned long long)golden[i].image_xxh3);
	}
}

/*
 * The copy-and-checksum passes against libxxhash's XXH3-64 at every layer
 * length up to a few blocks and around larger boundaries, over segments
 * that cut stripes anywhere: the checksums written, a verified read back,
 * and a verify without copying.
 */
static void check_pass_length(uint32_t layer_bytes, const size_t *sizes,
			      size_t n_sizes)
{
	kvt_layout l = {
		.num_layers = 2, .num_kv_heads = 1, .head_dim = 1,
		.dtype = KVT_DTYPE_INT8, .kv_planes = 1,
		.scale_bytes = layer_bytes - 1, .block_size = 1, .chunk_tokens = 1,
	};
	const void *layers[2];
	kvt_ns ns;
	kvt_key key;
	kvt_obj_hdr h;
	struct segs s;
	uint8_t *payload, *out;
	int failures = test_failures;

	make_ns(&ns, &l, 3);
	make_key(&key, 3);
	CHECK_EQ(kvt_obj_hdr_init(&h, &ns, &key), 0);
	payload = malloc(h.payload_len);
	/* Aligned, so that a big enough read streams into it. */
	if (posix_memalign((void **)&out, 64, h.payload_len))
		out = NULL;
	test_fill(payload, h.payload_len, layer_bytes);
	layers[0] = payload;
	layers[1] = payload + layer_bytes;
	segs_make(&s, KVT_OBJ_HEADER_BYTES + h.payload_len, sizes, n_sizes);
	CHECK_EQ(kvt_obj_write_iov(&h, layers, s.iov, s.n), 0);
	for (int i = 0; i < 2; i++)
		CHECK(h.layers[i].csum ==
		      kvt_obj_layer_csum(payload + i * layer_bytes, layer_bytes));
	memset(out, 0, h.payload_len);
	CHECK_EQ(kvt_obj_read_iov(&h, s.iov, s.n, out, h.payload_len, 1), 0);
	CHECK(memcmp(out, payload, h.payload_len) == 0);
	CHECK_EQ(kvt_obj_verify_iov(&h, s.iov, s.n), 0);
	CHECK_EQ(kvt_obj_read_layer_iov(&h, s.iov, s.n, 1, out, layer_bytes), 0);
	CHECK(memcmp(out, payload + layer_bytes, layer_bytes) == 0);
	/* The last byte of a layer is in the final stripe, the first in the
	 * main loop (or the short path): both must count. */
	*segs_at(&s, KVT_OBJ_HEADER_BYTES + 2 * (size_t)layer_bytes - 1) ^= 1;
	CHECK_EQ(kvt_obj_verify_iov(&h, s.iov, s.n), KVT_ECORRUPT);
	CHECK(msg_has("layer 1"));
	*segs_at(&s, KVT_OBJ_HEADER_BYTES + 2 * (size_t)layer_bytes - 1) ^= 1;
	*segs_at(&s, KVT_OBJ_HEADER_BYTES + layer_bytes) ^= 0x80;
	CHECK_EQ(kvt_obj_read_iov(&h, s.iov, s.n, out, h.payload_len, 1), KVT_ECORRUPT);
	CHECK(msg_has("layer 1"));
	segs_free(&s);
	free(out);
	free(payload);
	if (test_failures != failures)
		fprintf(stderr, "  ... with layers of %u bytes, segments of %zu first\n",
			layer_bytes, sizes[0]);
}

static void test_pass_lengths(void)
{
	static const size_t whole[] = { 16384 }, huge[] = { 4u << 20 }, stripe[] = { 64 }, cut[] = { 63 },
			    mixed[] = { 4095, 1, 70, 65536, 3, 200, 0, 129 };
	static const uint32_t big[] = { 4095, 4096, 4097, 16383, 16384, 16385,
					65535, 65536, 65537, 1048576 + 63 };

	for (uint32_t n = 1; n <= 2200; n++) {
		check_pass_length(n, whole, 1);
		check_pass_length(n, mixed, 8);
		if (n % 7 == 0 || (n > 230 && n < 260) || n % 1024 < 3 || n % 1024 > 1020) {
			check_pass_length(n, stripe, 1);
			check_pass_length(n, cut, 1);
		}
	}
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		check_pass_length(big[i], huge, 1);
		check_pass_length(big[i], mixed, 8);
	}
}

static void test_iov_errors(void)
{
	struct image im;
	kvt_obj_hdr h, bad;
	const void *layers[KVT_MAX_LAYERS];
	struct iovec v[2];
	uint8_t *out;

	image_make(&im, &small_layout, 6);
	CHECK_EQ(kvt_obj_decode(im.buf, im.len, &h), 0);
	out = malloc(h.payload_len);
	for (uint32_t i = 0; i < h.n_layers; i++)
		layers[i] = im.payload + h.layers[i].offset;

	/* Destination one byte short. */
	v[0].iov_base = malloc(im.len);
	v[0].iov_len = 4096;
	v[1].iov_base = (uint8_t *)v[0].iov_base + 4096;
	v[1].iov_len = im.len - 4096 - 1;
	CHECK_EQ(kvt_obj_write_iov(&h, layers, v, 2), KVT_ESMALL);
	v[1].iov_len++;
	CHECK_EQ(kvt_obj_write_iov(&h, layers, v, 2), 0);
	CHECK(memcmp(v[0].iov_base, im.buf, im.len) == 0);
	bad = h;
	bad.layers[2].offset++;
	CHECK_EQ(kvt_obj_write_iov(&bad, layers, v, 2), KVT_EINVAL);
	bad = h;
	bad.n_layers = KVT_MAX_LAYERS + 1;
	CHECK_EQ(kvt_obj_write_iov(&bad, layers, v, 2), KVT_EINVAL);
	layers[3] = NULL;
	CHECK_EQ(kvt_obj_write_iov(&h, layers, v, 2), KVT_EINVAL);

	/* Source one byte short, buffer one byte short, no such layer. */
	v[1].iov_len--;
	CHECK_EQ(kvt_obj_read_iov(&h, v, 2, out, h.payload_len, 0), KVT_ETRUNCATED);
	CHECK_EQ(kvt_obj_verify_iov(&h, v, 2), KVT_ETRUNCATED);
	CHECK_EQ(kvt_obj_read_layer_iov(&h, v, 2, 3, out, h.payload_len), KVT_ETRUNCATED);
	v[1].iov_len++;
	CHECK_EQ(kvt_obj_read_iov(&h, v, 2, out, h.payload_len - 1, 0), KVT_ESMALL);
	CHECK_EQ(kvt_obj_read_layer_iov(&h, v, 2, 0, out, 1023), KVT_ESMALL);
	CHECK_EQ(kvt_obj_read_layer_iov(&h, v, 2, 4, out, h.payload_len), KVT_EINVAL);
	CHECK_EQ(kvt_obj_read_layer_iov(&h, v, 2, 3, out, 1024), 0);
	CHECK(memcmp(out, im.payload + 3072, 1024) == 0);
	/* Trailing bytes past the image are ignored by the segment readers. */
	v[1].iov_len = 1;
	v[0].iov_len = im.len;
	CHECK_EQ(kvt_obj_verify_iov(&h, v, 2), 0);

	free(v[0].iov_base);
	free(out);
	image_free(&im);
}

static void test_expect(void)
{
	struct image im;
	kvt_obj_hdr h;
	kvt_ns ns;
	kvt_key key;

	image_make(&im, &small_layout, 8);
	CHECK_EQ(kvt_obj_decode(im.buf, im.len, &h), 0);
	CHECK_EQ(kvt_obj_hdr_expect(&h, &im.ns, &im.key), 0);

	key = im.key;
	key.b[31] ^= 1;
	CHECK_EQ(kvt_obj_hdr_expect(&h, &im.ns, &key), KVT_EMISMATCH);
	CHECK(msg_has("key"));

	ns = im.ns;
	ns.digest[0] ^= 1;
	CHECK_EQ(kvt_obj_hdr_expect(&h, &ns, &im.key), KVT_EMISMATCH);
	CHECK(msg_has("namespace"));

	ns = im.ns;
	ns.layout.head_dim = 16;
	CHECK_EQ(kvt_obj_hdr_expect(&h, &ns, &im.key), KVT_ELAYOUT);
	CHECK(msg_has("head_dim"));
	ns = im.ns;
	ns.layout.chunk_tokens = 32;
	CHECK_EQ(kvt_obj_hdr_expect(&h, &ns, &im.key), KVT_ELAYOUT);
	CHECK(msg_has("chunk_tokens"));
	CHECK_EQ(kvt_obj_hdr_expect(NULL, &ns, &im.key), KVT_EINVAL);
	image_free(&im);
}

/*
 * The threshold above which images are streamed: a quarter of the
 * last-level cache, and the override tests use.
 */
static void test_stream_min(void)
{
	uint64_t auto_min = kvt_obj_stream_min();

	/* No cache worth the name is under 1 MiB or over 4 GiB. */
	CHECK(auto_min >= (256u << 10) && auto_min <= (1ull << 30));
	kvt_obj_force_stream_min(1);
	CHECK(kvt_obj_stream_min() == 1);
	kvt_obj_force_stream_min(0);
	CHECK(kvt_obj_stream_min() == auto_min);
}

/*
 * Every pass test again with each kind of stripes this build and CPU run,
 * the stores streamed wherever the destination allows (every image over 1
 * byte) and never: the AVX-512, AVX2 and portable stripes are separate
 * code, and only the widest the CPU has runs by default.
 */
static void test_pass_variants(void)
{
	static const struct {
		int stripes;
		const char *name;
	} kinds[] = {
		{ KVT_OBJ_STRIPES_PORTABLE, "portable" },
		{ KVT_OBJ_STRIPES_AVX2, "AVX2" },
		{ KVT_OBJ_STRIPES_AVX512, "AVX-512" },
	};
	static const uint64_t streams[] = { 1, UINT64_MAX };

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		if (kvt_obj_force_stripes(kinds[k].stripes) == KVT_ENOTSUP) {
			fprintf(stderr, "note: no %s stripes in this build or CPU; "
				"not tested\n", kinds[k].name);
			continue;
		}
		for (size_t m = 0; m < 2; m++) {
			int failures = test_failures;

			kvt_obj_force_stream_min(streams[m]);
			test_segments();
			test_golden_images();
			test_pass_lengths();
			if (test_failures != failures)
				fprintf(stderr, "  ... with the %s stripes, stores %s\n",
					kinds[k].name, m ? "plain" : "streamed");
		}
	}
	kvt_obj_force_stream_min(0);
	CHECK_EQ(kvt_obj_force_stripes(KVT_OBJ_STRIPES_AUTO), 0);
	CHECK_EQ(kvt_obj_force_stripes(99), KVT_ENOTSUP);
}

int main(void)
{
	test_csum_known_answer();
	test_round_trip();
	test_max_layers();
	test_hdr_init();
	test_decode_errors();
	test_payload_limit();
	test_truncations();
	test_segments();
	test_golden_images();
	test_pass_lengths();
	test_stream_min();
	test_pass_variants();
	test_iov_errors();
	test_expect();
	TEST_DONE();
}
