/*
 * object.c — encode, decode and verify object images (docs/FORMAT.md).
 *
 * HEADER LAYOUT (4096 bytes, every integer little-endian)
 *
 *   offset  size  field
 *   ------  ----  ---------------------------------------------------------
 *        0     8  magic "KVTCHUNK" (no NUL)
 *        8     2  u16 version (1)
 *       10     2  u16 flags (0; bit 0 reserved for compression)
 *       12     4  u32 header_len (4096)
 *       16    32  key
 *       48    32  namespace digest
 *       80     4  u32 layout.num_layers
 *       84     4  u32 layout.num_kv_heads
 *       88     4  u32 layout.head_dim
 *       92     4  u32 layout.dtype
 *       96     4  u32 layout.kv_planes
 *      100     4  u32 layout.scale_bytes
 *      104     4  u32 layout.block_size
 *      108     4  u32 layout.chunk_tokens
 *      112     4  u32 token_count (= chunk_tokens)
 *      116     4  u32 csum_alg (1 = XXH3-64, seed 0)
 *      120     8  u64 payload_len
 *      128     8  u64 created_ns (CLOCK_REALTIME)
 *      136     4  u32 n_layers (= layout.num_layers)
 *      140     4  u32 reserved, 0
 *      144    48  zero (room for fixed fields of a later version)
 *      192  24×n  layer table, n_layers × { u64 offset, u64 length, u64 xxh3 }
 *   192+24n  ...  zero up to 4088
 *     4088     8  u64 header checksum: XXH3-64 (seed 0) of bytes [0, 4088)
 *
 * The table starts at 192, not 256: KVT_MAX_LAYERS (160) entries of 24 bytes
 * take 3840 bytes, and 256 + 3840 = 4096 would run over the checksum, while
 * 192 + 3840 = 4032 leaves 56 bytes to spare.
 *
 * Every header has exactly one encoding: the decoder refuses nonzero
 * reserved bytes and padding, so a header that decodes re-encodes to the same
 * bytes (given the same fields), and no hidden data can ride along.
 *
 * Copies between a caller's linear buffer and an image spread over segments
 * (DRAM pages) checksum in the same pass, 64 bytes at a time: each stripe is
 * loaded once into registers, stored to the destination and folded into the
 * XXH3 accumulators from those same registers (see "Copy and checksum in
 * one pass" below).  What is hashed is exactly what was stored, so a stored
 * image always matches its checksums even if a caller scribbles on its
 * source buffer during a put, and a verified read vouches for the bytes the
 * caller actually received.
 */
#include "format/object.h"
#include "common/hex.h"

#include <stdio.h>

#include <inttypes.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "common/err.h"

/*
 * The x86-64 build of libxxhash exports *_dispatch variants that pick
 * SSE2/AVX2/AVX-512 at run time.  Measured with 0.8.1 on EPYC, the plain
 * XXH3_64bits runs at 10–14 GB/s and the dispatched one at 40+ (the header
 * checksum and whole-buffer decodes use it; copies have their own pass,
 * below).  They are weak references because the static
 * libxxhash.a of some distributions (Debian's) lacks them: then they are NULL
 * and the portable functions serve, giving the same hashes, slower.
 * KVT_NO_XXH_DISPATCH forces the portable path.
 */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_include) && \
	!defined(KVT_NO_XXH_DISPATCH)
#if __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#pragma weak XXH3_64bits_dispatch
#define KVT_XXH_DISPATCH 1
#endif
#endif

static inline uint64_t hash_oneshot(const void *p, size_t n)
{
#ifdef KVT_XXH_DISPATCH
	if (XXH3_64bits_dispatch)
		return XXH3_64bits_dispatch(p, n);
#endif
	return XXH3_64bits(p, n);
}

/* ------------------------------------------------------------------------ */
/* Header byte offsets                                                       */
/* ------------------------------------------------------------------------ */

enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 8,
	HDR_FLAGS = 10,
	HDR_HEADER_LEN = 12,
	HDR_KEY = 16,
	HDR_NS_DIGEST = 48,
	HDR_LAYOUT = 80, /* 8 × u32 in kvt_layout field order */
	HDR_TOKEN_COUNT = 112,
	HDR_CSUM_ALG = 116,
	HDR_PAYLOAD_LEN = 120,
	HDR_CREATED_NS = 128,
	HDR_N_LAYERS = 136,
	HDR_RESERVED = 140,
	HDR_FIXED_END = 144,
	HDR_TABLE = 192,
	HDR_ENTRY_BYTES = 24,
	HDR_CSUM = 4088,
};

/* The table of KVT_MAX_LAYERS entries must end before the checksum. */
#define HDR_TABLE_MAX (HDR_TABLE + KVT_MAX_LAYERS * HDR_ENTRY_BYTES)
_Static_assert(HDR_TABLE_MAX <= HDR_CSUM, "layer table overlaps the header checksum");
_Static_assert(HDR_CSUM + 8 == KVT_OBJ_HEADER_BYTES, "checksum is the header's last 8 bytes");
_Static_assert(sizeof(KVT_OBJ_MAGIC) - 1 == 8, "magic is 8 bytes");

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ------------------------------------------------------------------------ */
/* Header                                                                    */
/* ------------------------------------------------------------------------ */

int kvt_obj_hdr_init(kvt_obj_hdr *h, const kvt_ns *ns, const kvt_key *key)
{
	struct timespec ts;
	uint64_t layer_bytes, payload;
	int rc;

	if (!h || !ns || !key)
		return kvt_err(KVT_EINVAL, "kvt_obj_hdr_init: NULL argument");
	rc = kvt_layout_check(&ns->layout);
	if (rc)
		return rc;
	layer_bytes = kvt_layout_layer_bytes(&ns->layout);
	payload = layer_bytes * ns->layout.num_layers;
	if (payload > KVT_OBJ_MAX_PAYLOAD)
		return kvt_err(KVT_ELAYOUT,
			       "chunk payload of %" PRIu64 " bytes exceeds the object limit of %llu",
			       payload, KVT_OBJ_MAX_PAYLOAD);

	memset(h, 0, sizeof(*h));
	h->version = KVT_OBJ_VERSION;
	h->flags = 0;
	h->header_len = KVT_OBJ_HEADER_BYTES;
	h->key = *key;
	memcpy(h->ns_digest, ns->digest, sizeof(h->ns_digest));
	h->layout = ns->layout;
	h->token_count = ns->layout.chunk_tokens;
	h->csum_alg = KVT_OBJ_CSUM_XXH3_64;
	h->payload_len = payload;
	clock_gettime(CLOCK_REALTIME, &ts);
	h->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	h->n_layers = ns->layout.num_layers;
	for (uint32_t i = 0; i < h->n_layers; i++) {
		h->layers[i].offset = (uint64_t)i * layer_bytes;
		h->layers[i].length = layer_bytes;
	}
	return 0;
}

void kvt_obj_hdr_encode(const kvt_obj_hdr *h, uint8_t *out)
{
	const uint32_t *lf = (const uint32_t[]){
		h->layout.num_layers, h->layout.num_kv_heads, h->layout.head_dim,
		h->layout.dtype, h->layout.kv_planes, h->layout.scale_bytes,
		h->layout.block_size, h->layout.chunk_tokens,
	};
	/* The function cannot fail: a table longer than the header can hold
	 * is cut (the decoder then refuses the image for its n_layers). */
	uint32_t n = h->n_layers < KVT_MAX_LAYERS ? h->n_layers : KVT_MAX_LAYERS;

	memset(out, 0, KVT_OBJ_HEADER_BYTES);
	memcpy(out + HDR_MAGIC, KVT_OBJ_MAGIC, 8);
	put16(out + HDR_VERSION, h->version);
	put16(out + HDR_FLAGS, h->flags);
	put32(out + HDR_HEADER_LEN, h->header_len);
	memcpy(out + HDR_KEY, h->key.b, KVT_KEY_BYTES);
	memcpy(out + HDR_NS_DIGEST, h->ns_digest, 32);
	for (int i = 0; i < 8; i++)
		put32(out + HDR_LAYOUT + 4 * i, lf[i]);
	put32(out + HDR_TOKEN_COUNT, h->token_count);
	put32(out + HDR_CSUM_ALG, h->csum_alg);
	put64(out + HDR_PAYLOAD_LEN, h->payload_len);
	put64(out + HDR_CREATED_NS, h->created_ns);
	put32(out + HDR_N_LAYERS, h->n_layers);
	put32(out + HDR_RESERVED, 0);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = out + HDR_TABLE + (size_t)i * HDR_ENTRY_BYTES;
		put64(e, h->layers[i].offset);
		put64(e + 8, h->layers[i].length);
		put64(e + 16, h->layers[i].csum);
	}
	put64(out + HDR_CSUM, hash_oneshot(out, HDR_CSUM));
}

/* First nonzero byte in [from, to) of the header, or -1. */
/* Offset of the first nonzero byte of buf[from, to), or -1.  Every get
 * decodes a header, so the all-zero case (the only valid one) is one
 * vectorised memcmp against a zero page; the byte loop runs only to name
 * the offending byte of a bad header. */
static int first_nonzero(const uint8_t *buf, size_t from, size_t to)
{
	static const uint8_t zero[KVT_OBJ_HEADER_BYTES];

	if (to <= from || !memcmp(buf + from, zero, to - from))
		return -1;
	for (size_t i = from; i < to; i++)
		if (buf[i])
			return (int)i;
	return -1;
}

int kvt_obj_hdr_decode(const uint8_t *buf, size_t len, kvt_obj_hdr *h)
{
	uint64_t stored, computed, layer_bytes, want_payload, sum;
	uint32_t unknown;
	int rc, at;

	if (!buf || !h)
		return kvt_err(KVT_EINVAL, "kvt_obj_hdr_decode: NULL argument");
	if (len < KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_ETRUNCATED,
			       "object is %zu bytes, shorter than the %u-byte header",
			       len, KVT_OBJ_HEADER_BYTES);
	if (memcmp(buf + HDR_MAGIC, KVT_OBJ_MAGIC, 8))
		return kvt_err(KVT_EBADMAGIC,
			       "magic is %02x %02x %02x %02x %02x %02x %02x %02x, not \"%s\"",
			       buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6],
			       buf[7], KVT_OBJ_MAGIC);

	memset(h, 0, sizeof(*h));
	h->version = get16(buf + HDR_VERSION);
	if (h->version != KVT_OBJ_VERSION)
		return kvt_err(KVT_EVERSION,
			       "object format version %u; this build reads version %u",
			       h->version, KVT_OBJ_VERSION);
	h->header_len = get32(buf + HDR_HEADER_LEN);
	if (h->header_len != KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_EMALFORMED, "header_len %u, version %u headers are %u bytes",
			       h->header_len, KVT_OBJ_VERSION, KVT_OBJ_HEADER_BYTES);
	stored = get64(buf + HDR_CSUM);
	computed = hash_oneshot(buf, HDR_CSUM);
	if (stored != computed)
		return kvt_err(KVT_EHDRCSUM,
			       "header checksum stored 0x%016" PRIx64 ", computed 0x%016" PRIx64,
			       stored, computed);

	/* From here on the header is what some writer wrote: what fails now
	 * is a writer's bug or a hostile image, not bit rot. */
	h->flags = get16(buf + HDR_FLAGS);
	unknown = h->flags & ~KVT_OBJ_F_KNOWN;
	if (unknown)
		return kvt_err(KVT_EMALFORMED,
			       "flags 0x%04x carry bits 0x%04x this version does not know%s",
			       h->flags, unknown,
			       (unknown & KVT_OBJ_F_COMPRESSED) ? " (compression is reserved)" : "");
	h->csum_alg = get32(buf + HDR_CSUM_ALG);
	if (h->csum_alg != KVT_OBJ_CSUM_XXH3_64)
		return kvt_err(KVT_EMALFORMED, "csum_alg %u unknown (%u = XXH3-64)",
			       h->csum_alg, KVT_OBJ_CSUM_XXH3_64);

	memcpy(h->key.b, buf + HDR_KEY, KVT_KEY_BYTES);
	memcpy(h->ns_digest, buf + HDR_NS_DIGEST, 32);
	h->layout.num_layers = get32(buf + HDR_LAYOUT + 0);
	h->layout.num_kv_heads = get32(buf + HDR_LAYOUT + 4);
	h->layout.head_dim = get32(buf + HDR_LAYOUT + 8);
	h->layout.dtype = get32(buf + HDR_LAYOUT + 12);
	h->layout.kv_planes = get32(buf + HDR_LAYOUT + 16);
	h->layout.scale_bytes = get32(buf + HDR_LAYOUT + 20);
	h->layout.block_size = get32(buf + HDR_LAYOUT + 24);
	h->layout.chunk_tokens = get32(buf + HDR_LAYOUT + 28);
	rc = kvt_layout_check(&h->layout);
	if (rc)
		return kvt_err_prefix(rc, "object header layout: ");

	h->n_layers = get32(buf + HDR_N_LAYERS);
	if (h->n_layers != h->layout.num_layers)
		return kvt_err(KVT_EMALFORMED, "n_layers %u, layout num_layers %u",
			       h->n_layers, h->layout.num_layers);
	h->token_count = get32(buf + HDR_TOKEN_COUNT);
	if (h->token_count != h->layout.chunk_tokens)
		return kvt_err(KVT_EMALFORMED, "token_count %u, layout chunk_tokens %u",
			       h->token_count, h->layout.chunk_tokens);
	h->payload_len = get64(buf + HDR_PAYLOAD_LEN);
	h->created_ns = get64(buf + HDR_CREATED_NS);

	/* n_layers <= KVT_MAX_LAYERS now (layout check), so the table is
	 * inside the header. */
	layer_bytes = kvt_layout_layer_bytes(&h->layout);
	want_payload = layer_bytes * h->layout.num_layers;
	sum = 0;
	for (uint32_t i = 0; i < h->n_layers; i++) {
		const uint8_t *e = buf + HDR_TABLE + (size_t)i * HDR_ENTRY_BYTES;
		kvt_obj_layer *l = &h->layers[i];

		l->offset = get64(e);
		l->length = get64(e + 8);
		l->csum = get64(e + 16);
		if (l->offset != sum)
			return kvt_err(KVT_EMALFORMED,
				       "layer %u at payload offset %" PRIu64 ", expected %" PRIu64
				       " (layers must be contiguous and in order)",
				       i, l->offset, sum);
		if (l->length != layer_bytes)
			return kvt_err(KVT_EMALFORMED,
				       "layer %u is %" PRIu64 " bytes, layout needs %" PRIu64,
				       i, l->length, layer_bytes);
		sum += l->length;
	}
	if (sum != h->payload_len)
		return kvt_err(KVT_EMALFORMED,
			       "payload_len %" PRIu64 ", layer table sums to %" PRIu64,
			       h->payload_len, sum);
	if (h->payload_len != want_payload)
		return kvt_err(KVT_EMALFORMED, "payload_len %" PRIu64 ", layout needs %" PRIu64,
			       h->payload_len, want_payload);
	if (h->payload_len > KVT_OBJ_MAX_PAYLOAD)
		return kvt_err(KVT_EMALFORMED, "payload_len %" PRIu64 " exceeds the limit of %llu",
			       h->payload_len, KVT_OBJ_MAX_PAYLOAD);

	if (get32(buf + HDR_RESERVED))
		return kvt_err(KVT_EMALFORMED, "reserved field at offset %d is 0x%08x, must be 0",
			       HDR_RESERVED, get32(buf + HDR_RESERVED));
	at = first_nonzero(buf, HDR_FIXED_END, HDR_TABLE);
	if (at < 0)
		at = first_nonzero(buf, HDR_TABLE + (size_t)h->n_layers * HDR_ENTRY_BYTES,
				   HDR_CSUM);
	if (at >= 0)
		return kvt_err(KVT_EMALFORMED,
			       "header padding byte at offset %d is 0x%02x, must be 0",
			       at, buf[at]);
	return 0;
}

static void hex8(const uint8_t *b, char out[17])
{
	kvt_hex_encode(b, 8, out);
}

int kvt_obj_hdr_expect(const kvt_obj_hdr *h, const kvt_ns *ns,
		       const kvt_key *key)
{
	const kvt_layout *a, *b;
	char x[17], y[17];

	if (!h || !ns || !key)
		return kvt_err(KVT_EINVAL, "kvt_obj_hdr_expect: NULL argument");
	if (memcmp(h->key.b, key->b, KVT_KEY_BYTES)) {
		hex8(h->key.b, x);
		hex8(key->b, y);
		return kvt_err(KVT_EMISMATCH, "object holds key %s..., asked for %s...", x, y);
	}
	if (memcmp(h->ns_digest, ns->digest, sizeof(h->ns_digest))) {
		hex8(h->ns_digest, x);
		hex8(ns->digest, y);
		return kvt_err(KVT_EMISMATCH,
			       "object belongs to namespace %s..., asked for %s...", x, y);
	}
	/* Same digest yet another layout: the digest covers the layout, so
	 * this is a writer that disagrees with its own namespace. */
	a = &h->layout;
	b = &ns->layout;
#define KVT_EXPECT_FIELD(f)                                                    \
	if (a->f != b->f)                                                      \
		return kvt_err(KVT_ELAYOUT, "object layout " #f " %u, namespace has %u", \
			       a->f, b->f)
	KVT_EXPECT_FIELD(num_layers);
	KVT_EXPECT_FIELD(num_kv_heads);
	KVT_EXPECT_FIELD(head_dim);
	KVT_EXPECT_FIELD(dtype);
	KVT_EXPECT_FIELD(kv_planes);
	KVT_EXPECT_FIELD(scale_bytes);
	KVT_EXPECT_FIELD(block_size);
	KVT_EXPECT_FIELD(chunk_tokens);
#undef KVT_EXPECT_FIELD
	return 0;
}

uint64_t kvt_obj_layer_csum(const void *data, size_t len)
{
	return hash_oneshot(data, len);
}

static int corrupt_layer(uint32_t i, uint64_t stored, uint64_t computed)
{
	return kvt_err(KVT_ECORRUPT,
		       "layer %u checksum mismatch: stored 0x%016" PRIx64 ", computed 0x%016" PRIx64,
		       i, stored, computed);
}

int kvt_obj_decode(const uint8_t *buf, size_t len, kvt_obj_hdr *h)
{
	uint64_t want;
	int rc;

	rc = kvt_obj_hdr_decode(buf, len, h);
	if (rc)
		return rc;
	want = (uint64_t)h->header_len + h->payload_len;
	if (len < want)
		return kvt_err(KVT_ETRUNCATED, "object is %zu bytes, its header declares %" PRIu64,
			       len, want);
	if (len > want)
		return kvt_err(KVT_EMALFORMED,
			       "object is %zu bytes, its header declares %" PRIu64 " (trailing bytes)",
			       len, want);
	for (uint32_t i = 0; i < h->n_layers; i++) {
		const kvt_obj_layer *l = &h->layers[i];
		uint64_t c = hash_oneshot(buf + h->header_len + l->offset, l->length);

		if (c != l->csum)
			return corrupt_layer(i, l->csum, c);
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Images over segments                                                      */
/* ------------------------------------------------------------------------ */

/* A position in a list of segments. */
struct seg_cursor {
	const struct iovec *iov;
	int n;
	int i;      /* current segment */
	size_t off; /* bytes of iov[i] already consumed */
};

static void cursor_init(struct seg_cursor *c, const struct iovec *iov, int n)
{
	c->iov = iov;
	c->n = n;
	c->i = 0;
	c->off = 0;
}

/* The next contiguous run of at most `max` bytes, consumed; 0 at the end. */
static size_t cursor_take(struct seg_cursor *c, size_t max, uint8_t **p)
{
	while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
	if (c->i >= c->n)
		return 0;
	size_t n = c->iov[c->i].iov_len - c->off;
	if (n > max)
		n = max;
	*p = (uint8_t *)c->iov[c->i].iov_base + c->off;
	c->off += n;
	return n;
}

/* Skip `len` bytes (callers have checked that the segments hold them). */
static void cursor_skip(struct seg_cursor *c, uint64_t len)
{
	uint8_t *p;

	while (len) {
		size_t n = cursor_take(c, len > SIZE_MAX ? SIZE_MAX : (size_t)len, &p);
		if (!n)
			return;
		len -= n;
	}
}

/* Bytes in the segments, saturating (a hostile list cannot wrap it). */
static uint64_t segs_total(const struct iovec *iov, int n)
{
	uint64_t t = 0;

	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len > UINT64_MAX - t)
			return UINT64_MAX;
		t += iov[i].iov_len;
	}
	return t;
}

/* ------------------------------------------------------------------------ */
/* Copy and checksum in one pass                                             */
/* ------------------------------------------------------------------------ */

/*
 * A copy that then hashes what it copied reads every byte twice, and even
 * with the second read in L1 the two passes add up: on a core whose memcpy
 * runs at 11 GB/s and whose hash runs at 40–50 from L1, copy-then-hash in
 * 32 KiB pieces measured 0.57–0.80× of memcpy.  Here each 64-byte stripe is
 * loaded into registers once, stored, and folded into XXH3's accumulators
 * from the same registers, so the multiply-adds run in the shadow of the
 * memory traffic: one pass, the speed of the copy.  libxxhash stays the
 * reference and computes every other checksum here, but its API hashes
 * bytes already in memory and cannot share the copy's loads: copying 16 KiB
 * into an L1 buffer, hashing that with the library and streaming it out
 * measured 0.70–0.99× of memcpy, this pass 1.1–1.2×.
 *
 * The pass computes XXH3-64 with seed 0, bit for bit what XXH3_64bits()
 * returns, for inputs over 240 bytes (XXH3's "long" algorithm; shorter ones
 * are copied through a stack buffer and hashed with the library).  The long
 * algorithm, as the XXH3 specification gives it for the default 192-byte
 * secret:
 *
 *   - eight 64-bit accumulators start at fixed primes;
 *   - the input is read in stripes of 64 bytes, lanes of 8; stripe n of a
 *     block uses the secret at byte 8n, and for each lane i,
 *     k = data[i] ^ secret[i]; acc[i ^ 1] += data[i];
 *     acc[i] += (k & 0xffffffff) * (k >> 32);
 *   - a block is 16 stripes (1024 bytes); after each, every accumulator is
 *     scrambled: acc ^= acc >> 47; acc ^= secret[128 + 8i]; acc *= PRIME32_1;
 *   - the main loop takes the first (len - 1) / 64 stripes; then the last 64
 *     bytes of the input (overlapping what came before) are accumulated
 *     once more with the secret at byte 121;
 *   - the accumulators merge, pairwise folded 128-bit products with the
 *     secret at byte 11, onto len * PRIME64_1, and the sum is avalanched.
 *
 * Over segments, a stripe cut by a segment boundary is gathered into a
 * stack buffer, stored from there and hashed from there; the last 64 bytes
 * are the kept copy of the last stripe stored plus the tail.  Nothing is
 * ever read back from the destination.  test_object checks the pass against
 * libxxhash at lengths on every boundary, over segments of awkward sizes,
 * with each of the portable, AVX2 and AVX-512 stripes the CPU can run, the
 * stores streamed and not.  The widest stripes the CPU has are chosen at run
 * time on x86-64; building with -DKVT_NO_SIMD leaves them out.
 *
 * The pass is not bound by its arithmetic: from cache the hash alone runs
 * at 70-85 GB/s (AVX2, AVX-512) where the copy runs at 50-60, and fused
 * copies with either width measure the same.  What decides its speed
 * against memcpy is where the stores go; see stream_min() below.
 */
#define STRIPE 64u
#define STRIPES_PER_BLOCK 16u
#define XXH3_SHORT_MAX 240u

static uint64_t stream_min(void);

static _Alignas(64) const uint8_t xxh3_secret[192] = {
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

#define XXH_P32_1 0x9E3779B1u
#define XXH_P32_2 0x85EBCA77u
#define XXH_P32_3 0xC2B2AE3Du
#define XXH_P64_1 0x9E3779B185EBCA87ull
#define XXH_P64_2 0xC2B2AE3D27D4EB4Full
#define XXH_P64_3 0x165667B19E3779F9ull
#define XXH_P64_4 0x85EBCA77C2B2AE63ull
#define XXH_P64_5 0x27D4EB2F165667C5ull

/* The state of one layer's pass.  acc[] is in lane order, the order the
 * AVX2 stripes keep it in two registers of four. */
struct xxh_pass {
	_Alignas(32) uint64_t acc[8];
	uint32_t in_block; /* stripes of the current block accumulated */
	uint8_t last[STRIPE]; /* the last stripe accumulated, as stored */
};

static void pass_init(struct xxh_pass *x)
{
	static const uint64_t init[8] = { XXH_P32_3, XXH_P64_1, XXH_P64_2, XXH_P64_3,
					  XXH_P64_4, XXH_P32_2, XXH_P64_5, XXH_P32_1 };

	memcpy(x->acc, init, sizeof(init));
	x->in_block = 0;
}

static inline void stripe_scalar(uint64_t *acc, const uint8_t *data,
				 const uint8_t *secret)
{
	for (int i = 0; i < 8; i++) {
		uint64_t v = get64(data + 8 * i);
		uint64_t k = v ^ get64(secret + 8 * i);

		acc[i ^ 1] += v;
		acc[i] += (k & 0xffffffffu) * (k >> 32);
	}
}

/* Copy `n` whole stripes from src to dst (dst NULL: hash only) and hash
 * them, in portable C: the bytes go through a stack stripe, so what is
 * hashed is what was stored. */
static void stripes_portable(struct xxh_pass *x, uint8_t *dst, const uint8_t *src,
			     size_t n)
{
	uint8_t v[STRIPE];

	for (size_t j = 0; j < n; j++, src += STRIPE) {
		memcpy(v, src, STRIPE);
		if (dst) {
			memcpy(dst, v, STRIPE);
			dst += STRIPE;
		}
		stripe_scalar(x->acc, v, xxh3_secret + 8 * x->in_block);
		if (++x->in_block == STRIPES_PER_BLOCK) {
			for (int i = 0; i < 8; i++) {
				uint64_t a = x->acc[i];

				a ^= a >> 47;
				a ^= get64(xxh3_secret + 128 + 8 * i);
				x->acc[i] = a * XXH_P32_1;
			}
			x->in_block = 0;
		}
		if (j + 1 == n)
			memcpy(x->last, v, STRIPE);
	}
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(KVT_NO_SIMD)
#define KVT_OBJ_AVX2 1
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

AVX2 static inline void stripe_avx2(__m256i *a0, __m256i *a1, __m256i d0,
				    __m256i d1, const uint8_t *secret)
{
	__m256i k0 = _mm256_xor_si256(d0, _mm256_loadu_si256((const __m256i *)secret));
	__m256i k1 = _mm256_xor_si256(d1, _mm256_loadu_si256((const __m256i *)(secret + 32)));
	/* lo32(k) * hi32(k) per lane; data lanes swapped pairwise (i ^ 1). */
	__m256i p0 = _mm256_mul_epu32(k0, _mm256_shuffle_epi32(k0, _MM_SHUFFLE(0, 3, 0, 1)));
	__m256i p1 = _mm256_mul_epu32(k1, _mm256_shuffle_epi32(k1, _MM_SHUFFLE(0, 3, 0, 1)));

	*a0 = _mm256_add_epi64(*a0, _mm256_add_epi64(p0, _mm256_shuffle_epi32(d0, _MM_SHUFFLE(1, 0, 3, 2))));
	*a1 = _mm256_add_epi64(*a1, _mm256_add_epi64(p1, _mm256_shuffle_epi32(d1, _MM_SHUFFLE(1, 0, 3, 2))));
}

AVX2 static inline __m256i scramble_avx2(__m256i a, const uint8_t *secret)
{
	const __m256i prime = _mm256_set1_epi32((int)XXH_P32_1);
	__m256i k = _mm256_loadu_si256((const __m256i *)secret);
	__m256i x = _mm256_xor_si256(_mm256_xor_si256(a, _mm256_srli_epi64(a, 47)), k);
	/* A 64 × 32-bit multiply from two 32 × 32 halves. */
	__m256i lo = _mm256_mul_epu32(x, prime);
	__m256i hi = _mm256_mul_epu32(_mm256_shuffle_epi32(x, _MM_SHUFFLE(0, 3, 0, 1)), prime);

	return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

/* As stripes_portable, the stripe in two registers.  With `stream` and a
 * 32-byte aligned destination the stores are non-temporal: they go to
 * memory without first reading the destination's lines in (the reads a
 * plain store costs) and without pushing the caller's working set out of
 * the cache for bytes nobody reads soon. */
AVX2 static void stripes_avx2(struct xxh_pass *x, uint8_t *dst, const uint8_t *src,
			      size_t n, int stream)
{
	__m256i a0 = _mm256_load_si256((const __m256i *)x->acc);
	__m256i a1 = _mm256_load_si256((const __m256i *)(x->acc + 4));
	__m256i d0 = _mm256_setzero_si256(), d1 = d0;
	uint32_t b = x->in_block;

	stream = stream && dst && ((uintptr_t)dst & 31) == 0;
	for (size_t j = 0; j < n; j++, src += STRIPE) {
		d0 = _mm256_loadu_si256((const __m256i *)src);
		d1 = _mm256_loadu_si256((const __m256i *)(src + 32));
		if (stream) {
			_mm256_stream_si256((__m256i *)dst, d0);
			_mm256_stream_si256((__m256i *)(dst + 32), d1);
			dst += STRIPE;
		} else if (dst) {
			_mm256_storeu_si256((__m256i *)dst, d0);
			_mm256_storeu_si256((__m256i *)(dst + 32), d1);
			dst += STRIPE;
		}
		stripe_avx2(&a0, &a1, d0, d1, xxh3_secret + 8 * b);
		if (++b == STRIPES_PER_BLOCK) {
			a0 = scramble_avx2(a0, xxh3_secret + 128);
			a1 = scramble_avx2(a1, xxh3_secret + 160);
			b = 0;
		}
	}
	/* Streamed stores are weakly ordered: fence them before the image
	 * can be published to another thread. */
	if (stream)
		_mm_sfence();
	_mm256_store_si256((__m256i *)x->acc, a0);
	_mm256_store_si256((__m256i *)(x->acc + 4), a1);
	x->in_block = b;
	if (n) {
		_mm256_storeu_si256((__m256i *)x->last, d0);
		_mm256_storeu_si256((__m256i *)(x->last + 32), d1);
	}
}

#define AVX512 __attribute__((target("avx512f")))

/* As stripes_avx2, the whole stripe and all eight accumulators in one
 * register each: half the instructions per stripe.  It matters most for
 * the hash-only pass over bytes already in cache (kvtierd summing a value
 * it has just received), where the hash, not memory, is the bound. */
AVX512 static void stripes_avx512(struct xxh_pass *x, uint8_t *dst, const uint8_t *src,
				  size_t n, int stream)
{
	const __m512i prime = _mm512_set1_epi32((int)XXH_P32_1);
	const __m512i ks = _mm512_loadu_si512((const void *)(xxh3_secret + 128));
	__m512i a = _mm512_loadu_si512((const void *)x->acc);
	__m512i d = _mm512_setzero_si512();
	uint32_t b = x->in_block;

	stream = stream && dst && ((uintptr_t)dst & 63) == 0;
	for (size_t j = 0; j < n; j++, src += STRIPE) {
		d = _mm512_loadu_si512((const void *)src);
		if (stream) {
			_mm512_stream_si512((void *)dst, d);
			dst += STRIPE;
		} else if (dst) {
			_mm512_storeu_si512((void *)dst, d);
			dst += STRIPE;
		}
		__m512i k = _mm512_xor_si512(d, _mm512_loadu_si512((const void *)(xxh3_secret + 8 * b)));
		__m512i p = _mm512_mul_epu32(k, _mm512_shuffle_epi32(k, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1)));
		a = _mm512_add_epi64(a, _mm512_add_epi64(p, _mm512_shuffle_epi32(d, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2))));
		if (++b == STRIPES_PER_BLOCK) {
			__m512i y = _mm512_xor_si512(_mm512_xor_si512(a, _mm512_srli_epi64(a, 47)), ks);
			__m512i lo = _mm512_mul_epu32(y, prime);
			__m512i hi = _mm512_mul_epu32(_mm512_shuffle_epi32(y, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1)), prime);
			a = _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 32));
			b = 0;
		}
	}
	if (stream)
		_mm_sfence();
	_mm512_storeu_si512((void *)x->acc, a);
	x->in_block = b;
	if (n)
		_mm512_storeu_si512((void *)x->last, d);
}
#endif

/*
 * Non-temporal stores, and when to use them.
 *
 * A streamed store goes to memory without reading the destination's line
 * in first and without taking a place in the cache; a plain store reads
 * the line in (from memory if it is not cached) and leaves it dirty in the
 * cache.  Which is faster depends on whether the destination would have
 * stayed in the cache, and that depends on its size against the cache's:
 *
 *   - a copy whose source and destination fit in the last-level cache
 *     with room to spare runs from the cache when repeated (as memcpy of
 *     the same 3 MiB does, at 50-60 GB/s on the EPYC this was measured
 *     on); streaming it sends every byte to memory instead (40 GB/s) and
 *     evicts the destination's lines besides.  Measured per op against
 *     memcpy, put and verified get of a 3 MiB chunk ran at 0.55-0.81x
 *     with the stores streamed, 0.85-0.94x with plain ones.  A
 *     destination not cached (a put into arena pages last written long
 *     ago) costs plain stores a read from memory, but memcpy pays the
 *     same: 1.0x of it (streamed: 1.15x, what this rule gives up).
 *   - a copy too large for the cache gains from streaming: the lines are
 *     evicted before anyone reads them anyway, and the reads of the
 *     destination a plain store makes are pure cost (measured 1.07-1.32x
 *     of memcpy at 12-20 MiB, against 1.0-1.14x with plain stores).
 *
 * On a 32 MiB L3 the crossing lay between 8 MiB (plain 0.99x, streamed
 * 0.75-0.83x) and 12 MiB (plain 1.0-1.1x, streamed 1.07-1.24x): images
 * over a quarter of the last-level cache are streamed, the rule glibc's
 * memcpy adopted in 2.38.  The cache's size comes from CPUID's
 * deterministic cache parameters (leaf 4, or 0x8000001D on AMD), which
 * give one cache's size: sysconf(_SC_LEVEL3_CACHE_SIZE) and leaf
 * 0x80000006 report the L3 of the whole socket on some EPYC virtual
 * machines (384 MiB where a core sees 32), and a threshold from that
 * would never stream.  Where the size is unknown, STREAM_DEFAULT_LLC is
 * assumed.
 */
#define STREAM_DEFAULT_LLC (32ull << 20)

static uint64_t stream_min_forced; /* tests; 0: the cache decides */

#ifdef KVT_OBJ_AVX2
#include <cpuid.h>

/* Bytes of the largest data or unified cache CPUID leaf `leaf`'s
 * deterministic cache parameters describe, 0 if none. */
static uint64_t cpuid_cache_bytes(unsigned leaf)
{
	uint64_t best = 0;
	unsigned best_level = 0;

	for (unsigned i = 0; i < 16; i++) {
		unsigned a, b, c, d, type, level;
		uint64_t bytes;

		if (!__get_cpuid_count(leaf, i, &a, &b, &c, &d))
			break;
		type = a & 31;
		if (type == 0)
			break;
		if (type != 1 && type != 3) /* data or unified */
			continue;
		level = (a >> 5) & 7;
		bytes = (uint64_t)((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) *
			((b & 0xfff) + 1) * ((uint64_t)c + 1);
		if (level > best_level || (level == best_level && bytes > best)) {
			best_level = level;
			best = bytes;
		}
	}
	return best;
}

/* The last-level cache's size as one core sees it, 0 if CPUID does not
 * say. */
static uint64_t llc_bytes(void)
{
	unsigned a, b, c, d, max;

	max = (unsigned)__get_cpuid_max(0, &b); /* int in clang's cpuid.h */
	if (max == 0)
		return 0;
	__cpuid(0, a, b, c, d);
	/* "AuthenticAMD" and "HygonGenuine": leaf 0x8000001D, where the
	 * topology extensions are (CPUID 0x80000001 ECX bit 22). */
	if ((b == 0x68747541 && d == 0x69746e65) || (b == 0x6f677948 && d == 0x6e65476e)) {
		if ((unsigned)__get_cpuid_max(0x80000000, NULL) >= 0x8000001du &&
		    __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 22)))
			return cpuid_cache_bytes(0x8000001d);
		return 0;
	}
	return max >= 4 ? cpuid_cache_bytes(4) : 0;
}
#else
static uint64_t llc_bytes(void)
{
	return 0;
}
#endif

/* Images of more than this many bytes are streamed to their destination
 * (write_iov, verified read_iov).  Worked out once: every thread that
 * races to it computes the same value. */
static uint64_t stream_min(void)
{
	static uint64_t cached;
	uint64_t v = __atomic_load_n(&stream_min_forced, __ATOMIC_RELAXED);

	if (v)
		return v;
	v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (!v) {
		uint64_t llc = llc_bytes();

		v = (llc ? llc : STREAM_DEFAULT_LLC) / 4;
		__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	}
	return v;
}

void kvt_obj_force_stream_min(uint64_t bytes)
{
	__atomic_store_n(&stream_min_forced, bytes, __ATOMIC_RELAXED);
}

uint64_t kvt_obj_stream_min(void)
{
	return stream_min();
}

static int forced_stripes = KVT_OBJ_STRIPES_AUTO;

/* Whether this build and CPU can run stripes `s`. */
static int stripes_avail(int s)
{
	switch (s) {
	case KVT_OBJ_STRIPES_AUTO:
	case KVT_OBJ_STRIPES_PORTABLE:
		return 1;
#ifdef KVT_OBJ_AVX2
	case KVT_OBJ_STRIPES_AVX2:
		return __builtin_cpu_supports("avx2");
	case KVT_OBJ_STRIPES_AVX512:
		return __builtin_cpu_supports("avx512f");
#endif
	default:
		return 0;
	}
}

int kvt_obj_force_stripes(int s)
{
	if (!stripes_avail(s))
		return KVT_ENOTSUP;
	forced_stripes = s;
	return 0;
}

void kvt_obj_force_portable(int on)
{
	forced_stripes = on ? KVT_OBJ_STRIPES_PORTABLE : KVT_OBJ_STRIPES_AUTO;
}

static void stripes(struct xxh_pass *x, uint8_t *dst, const uint8_t *src,
		    size_t n, int stream)
{
#ifdef KVT_OBJ_AVX2
	int s = forced_stripes;

	if (s == KVT_OBJ_STRIPES_AVX512 ||
	    (s == KVT_OBJ_STRIPES_AUTO && __builtin_cpu_supports("avx512f"))) {
		stripes_avx512(x, dst, src, n, stream);
		return;
	}
	if (s == KVT_OBJ_STRIPES_AVX2 ||
	    (s == KVT_OBJ_STRIPES_AUTO && __builtin_cpu_supports("avx2"))) {
		stripes_avx2(x, dst, src, n, stream);
		return;
	}
#endif
	(void)stream;
	stripes_portable(x, dst, src, n);
}

/* The low and high halves of the 128-bit product, xored. */
static uint64_t fold64(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
	unsigned __int128 m = (unsigned __int128)a * b;

	return (uint64_t)m ^ (uint64_t)(m >> 64);
#else
	uint64_t ll = (a & 0xffffffffu) * (b & 0xffffffffu);
	uint64_t hl = (a >> 32) * (b & 0xffffffffu);
	uint64_t lh = (a & 0xffffffffu) * (b >> 32);
	uint64_t hh = (a >> 32) * (b >> 32);
	uint64_t mid = (ll >> 32) + (hl & 0xffffffffu) + lh;

	return ((mid << 32) | (ll & 0xffffffffu)) ^ (hh + (hl >> 32) + (mid >> 32));
#endif
}

/* The last 64 bytes, the merge and the avalanche. */
static uint64_t pass_digest(struct xxh_pass *x, const uint8_t *last64, uint64_t len)
{
	uint64_t h = len * XXH_P64_1;

	stripe_scalar(x->acc, last64, xxh3_secret + sizeof(xxh3_secret) - STRIPE - 7);
	for (int i = 0; i < 4; i++)
		h += fold64(x->acc[2 * i] ^ get64(xxh3_secret + 11 + 16 * i),
			    x->acc[2 * i + 1] ^ get64(xxh3_secret + 11 + 16 * i + 8));
	h ^= h >> 37;
	h *= 0x165667919E3779F9ull;
	return h ^ (h >> 32);
}

enum pass_mode {
	PASS_TO_SEGS,   /* lin -> segments */
	PASS_FROM_SEGS, /* segments -> lin */
	PASS_HASH_ONLY, /* the segments, nothing copied */
};

/* The source and destination of a run of `n` bytes: `seg` in the segments,
 * `lin` in the linear buffer (NULL when hashing only). */
static void pass_ends(enum pass_mode mode, uint8_t *seg, uint8_t *lin,
		      const uint8_t **src, uint8_t **dst)
{
	*src = mode == PASS_TO_SEGS ? lin : seg;
	*dst = mode == PASS_TO_SEGS ? seg : mode == PASS_FROM_SEGS ? lin : NULL;
}

/* Move `n` bytes (a cut stripe, a tail, a short layer) between the cursor
 * and `lin` through `buf`: gathered from the source, stored to the
 * destination from `buf`, so `buf` holds what was stored. */
static void pass_bytes(struct seg_cursor *c, uint8_t *lin, size_t n,
		       enum pass_mode mode, uint8_t *buf)
{
	for (size_t got = 0; got < n;) {
		const uint8_t *src;
		uint8_t *p, *dst;
		size_t k = cursor_take(c, n - got, &p);

		if (!k)
			return; /* not reached: callers check totals */
		pass_ends(mode, p, lin ? lin + got : NULL, &src, &dst);
		memcpy(buf + got, src, k);
		if (dst)
			memcpy(dst, buf + got, k);
		got += k;
	}
}

/* Move (or just hash) `len` bytes between the cursor and `lin` in one pass
 * and return the XXH3-64 of the bytes as stored.  `stream`: the destination
 * is written with non-temporal stores where the CPU has them.  The segments
 * must hold the bytes (callers check totals). */
static uint64_t seg_pass(struct seg_cursor *c, uint8_t *lin, uint64_t len,
			 enum pass_mode mode, int stream)
{
	struct xxh_pass x;
	uint8_t part[STRIPE], last[STRIPE];
	uint64_t body, done = 0;
	size_t have = 0, tail;

	if (len <= XXH3_SHORT_MAX) {
		uint8_t buf[XXH3_SHORT_MAX];

		pass_bytes(c, lin, (size_t)len, mode, buf);
		return hash_oneshot(buf, (size_t)len);
	}

	pass_init(&x);
	body = (len - 1) / STRIPE * STRIPE; /* what the main loop takes */
	while (done < body) {
		const uint8_t *src;
		uint8_t *p, *dst;
		uint64_t want = body - done;
		size_t n = cursor_take(c, want > SIZE_MAX ? SIZE_MAX : (size_t)want, &p);
		size_t k, whole;

		if (!n)
			break; /* not reached: callers check totals */
		pass_ends(mode, p, lin ? lin + done : NULL, &src, &dst);
		done += n;
		if (have) {
			/* Finish the stripe the last segment cut. */
			k = n < STRIPE - have ? n : STRIPE - have;
			memcpy(part + have, src, k);
			if (dst)
				memcpy(dst, part + have, k);
			have += k;
			src += k;
			if (dst)
				dst += k;
			n -= k;
			if (have < STRIPE)
				continue;
			stripes(&x, NULL, part, 1, 0);
			have = 0;
		}
		whole = n / STRIPE;
		stripes(&x, dst, src, whole, stream);
		whole *= STRIPE;
		have = n - whole;
		if (have) {
			memcpy(part, src + whole, have);
			if (dst)
				memcpy(dst + whole, part, have);
		}
	}

	/* 1 to 64 bytes after the main loop; the last 64 bytes of the layer
	 * are the end of the last stripe stored followed by them. */
	tail = (size_t)(len - body);
	pass_bytes(c, lin ? lin + body : NULL, tail, mode, last + STRIPE - tail);
	memcpy(last, x.last + tail, STRIPE - tail);
	return pass_digest(&x, last, len);
}

/* What the segment functions need of a header they are handed: a table
 * they can index without leaving the array, packed as hdr_init makes it, so
 * that walking the layers in order walks the payload and no offset points
 * past payload_len.  A decoded header always passes. */
static int hdr_usable(const kvt_obj_hdr *h, const char *fn)
{
	uint64_t off = 0;

	if (!h)
		return kvt_err(KVT_EINVAL, "%s: header missing", fn);
	if (h->n_layers == 0 || h->n_layers > KVT_MAX_LAYERS)
		return kvt_err(KVT_EINVAL, "%s: header n_layers %u out of range 1..%u",
			       fn, h->n_layers, KVT_MAX_LAYERS);
	if (h->header_len != KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_EINVAL, "%s: header_len %u, expected %u", fn,
			       h->header_len, KVT_OBJ_HEADER_BYTES);
	if (h->payload_len > KVT_OBJ_MAX_PAYLOAD)
		return kvt_err(KVT_EINVAL, "%s: payload_len %" PRIu64 " over the limit",
			       fn, h->payload_len);
	for (uint32_t i = 0; i < h->n_layers; i++) {
		if (h->layers[i].offset != off ||
		    h->layers[i].length > h->payload_len - off)
			return kvt_err(KVT_EINVAL,
				       "%s: layer %u (offset %" PRIu64 ", %" PRIu64
				       " bytes) breaks the packed table", fn, i,
				       h->layers[i].offset, h->layers[i].length);
		off += h->layers[i].length;
	}
	if (off != h->payload_len)
		return kvt_err(KVT_EINVAL, "%s: layers sum to %" PRIu64 ", payload_len %" PRIu64,
			       fn, off, h->payload_len);
	return 0;
}

/* The image in `src` holds at least the header and payload `h` declares. */
static int src_holds(const kvt_obj_hdr *h, const struct iovec *src, int n_src)
{
	uint64_t have = segs_total(src, n_src);
	uint64_t want = (uint64_t)h->header_len + h->payload_len;

	if (have < want)
		return kvt_err(KVT_ETRUNCATED,
			       "image segments hold %" PRIu64 " bytes, header declares %" PRIu64,
			       have, want);
	return 0;
}

/* The encoded header into the first header_len bytes of the segments
 * (their total was checked). */
static void write_header(const kvt_obj_hdr *h, const struct iovec *dst, int n_dst)
{
	uint8_t hdr[KVT_OBJ_HEADER_BYTES];
	struct seg_cursor c;

	kvt_obj_hdr_encode(h, hdr);
	cursor_init(&c, dst, n_dst);
	for (size_t done = 0; done < sizeof(hdr);) {
		uint8_t *p;
		size_t n = cursor_take(&c, sizeof(hdr) - done, &p);

		if (!n)
			break;
		memcpy(p, hdr + done, n);
		done += n;
	}
}

int kvt_obj_write_iov(kvt_obj_hdr *h, const void *const *layers,
		      const struct iovec *dst, int n_dst)
{
	struct seg_cursor c;
	uint64_t have, want;
	int rc, stream;

	rc = hdr_usable(h, "kvt_obj_write_iov");
	if (rc)
		return rc;
	if (!layers || (!dst && n_dst))
		return kvt_err(KVT_EINVAL, "kvt_obj_write_iov: NULL argument");
	for (uint32_t i = 0; i < h->n_layers; i++)
		if (!layers[i])
			return kvt_err(KVT_EINVAL, "kvt_obj_write_iov: layer %u missing", i);
	have = segs_total(dst, n_dst);
	want = (uint64_t)h->header_len + h->payload_len;
	if (have < want)
		return kvt_err(KVT_ESMALL,
			       "destination segments hold %" PRIu64 " bytes, image needs %" PRIu64,
			       have, want);

	/* An image too large to stay in the cache goes to memory with
	 * non-temporal stores, which skip reading the destination in first
	 * and leave the caller's working set in the cache; one that fits is
	 * stored plainly, as memcpy would, and a read of it (a write-through
	 * to the next tier, a get) may find it there (stream_min()). */
	stream = want > stream_min();

	/* Payload first: the header needs its checksums. */
	cursor_init(&c, dst, n_dst);
	cursor_skip(&c, h->header_len);
	for (uint32_t i = 0; i < h->n_layers; i++)
		h->layers[i].csum = seg_pass(&c, (uint8_t *)(uintptr_t)layers[i],
					     h->layers[i].length, PASS_TO_SEGS, stream);

	write_header(h, dst, n_dst);
	return 0;
}

int kvt_obj_seal_iov(kvt_obj_hdr *h, const struct iovec *dst, int n_dst, uint32_t from)
{
	struct seg_cursor c;
	int rc;

	rc = hdr_usable(h, "kvt_obj_seal_iov");
	if (rc)
		return rc;
	if (!dst && n_dst)
		return kvt_err(KVT_EINVAL, "kvt_obj_seal_iov: NULL argument");
	if (segs_total(dst, n_dst) < (uint64_t)h->header_len + h->payload_len)
		return kvt_err(KVT_ESMALL, "destination segments hold less than the image");
	cursor_init(&c, dst, n_dst);
	cursor_skip(&c, h->header_len);
	for (uint32_t i = 0; i < h->n_layers; i++) {
		if (i < from) {
			cursor_skip(&c, h->layers[i].length);
			continue;
		}
		h->layers[i].csum = seg_pass(&c, NULL, h->layers[i].length, PASS_HASH_ONLY, 0);
	}
	write_header(h, dst, n_dst);
	return 0;
}

int kvt_obj_layer_sum_iov(kvt_obj_hdr *h, const struct iovec *dst, int n_dst, uint32_t layer)
{
	struct seg_cursor c;
	int rc;

	rc = hdr_usable(h, "kvt_obj_layer_sum_iov");
	if (rc)
		return rc;
	if (layer >= h->n_layers || (!dst && n_dst))
		return kvt_err(KVT_EINVAL, "kvt_obj_layer_sum_iov: layer %u of %u", layer,
			       h->n_layers);
	cursor_init(&c, dst, n_dst);
	cursor_skip(&c, h->header_len + h->layers[layer].offset);
	h->layers[layer].csum = seg_pass(&c, NULL, h->layers[layer].length, PASS_HASH_ONLY, 0);
	return 0;
}

int kvt_obj_read_iov(const kvt_obj_hdr *h, const struct iovec *src, int n_src,
		     void *out, size_t cap, int verify)
{
	struct seg_cursor c;
	uint8_t *o = out;
	int rc, stream;

	rc = hdr_usable(h, "kvt_obj_read_iov");
	if (rc)
		return rc;
	if ((!src && n_src) || (!out && h->payload_len))
		return kvt_err(KVT_EINVAL, "kvt_obj_read_iov: NULL argument");
	if (cap < h->payload_len)
		return kvt_err(KVT_ESMALL, "buffer of %zu bytes, payload is %" PRIu64,
			       cap, h->payload_len);
	rc = src_holds(h, src, n_src);
	if (rc)
		return rc;

	cursor_init(&c, src, n_src);
	cursor_skip(&c, h->header_len);
	if (!verify) {
		/* A plain memcpy per segment: the fast path of a trusted tier. */
		uint64_t left = h->payload_len;
		uint8_t *p;

		while (left) {
			size_t n = cursor_take(&c, left > SIZE_MAX ? SIZE_MAX : (size_t)left, &p);
			if (!n)
				break;
			memcpy(o, p, n);
			o += n;
			left -= n;
		}
		return 0;
	}
	/* A verified chunk too large for the cache is streamed into the
	 * caller's buffer: plain stores would read every line of it in
	 * first, which held the verified get at 0.85-0.93x of memcpy
	 * (streamed: 1.0-1.4x from 14 MiB up).  One that fits is stored
	 * plainly, into a buffer the caller most likely reuses and that
	 * the cache holds: streamed, a 3 MiB get ran at 0.55-0.81x of a
	 * memcpy that kept it cached (stream_min()). */
	stream = h->payload_len > stream_min();
	for (uint32_t i = 0; i < h->n_layers; i++) {
		const kvt_obj_layer *l = &h->layers[i];
		uint64_t sum = seg_pass(&c, o + l->offset, l->length, PASS_FROM_SEGS,
					stream);

		if (sum != l->csum)
			return corrupt_layer(i, l->csum, sum);
	}
	return 0;
}

int kvt_obj_read_layer_iov(const kvt_obj_hdr *h, const struct iovec *src,
			   int n_src, uint32_t layer, void *out, size_t cap)
{
	const kvt_obj_layer *l;
	struct seg_cursor c;
	uint64_t sum;
	int rc;

	rc = hdr_usable(h, "kvt_obj_read_layer_iov");
	if (rc)
		return rc;
	if (layer >= h->n_layers)
		return kvt_err(KVT_EINVAL, "layer %u, the object has %u", layer,
			       h->n_layers);
	l = &h->layers[layer];
	if ((!src && n_src) || !out)
		return kvt_err(KVT_EINVAL, "kvt_obj_read_layer_iov: NULL argument");
	if (cap < l->length)
		return kvt_err(KVT_ESMALL, "buffer of %zu bytes, layer %u is %" PRIu64,
			       cap, layer, l->length);
	rc = src_holds(h, src, n_src);
	if (rc)
		return rc;

	cursor_init(&c, src, n_src);
	cursor_skip(&c, h->header_len + l->offset);
	sum = seg_pass(&c, out, l->length, PASS_FROM_SEGS, 0);
	if (sum != l->csum)
		return corrupt_layer(layer, l->csum, sum);
	return 0;
}

int kvt_obj_verify_iov(const kvt_obj_hdr *h, const struct iovec *src,
		       int n_src)
{
	struct seg_cursor c;
	int rc;

	rc = hdr_usable(h, "kvt_obj_verify_iov");
	if (rc)
		return rc;
	if (!src && n_src)
		return kvt_err(KVT_EINVAL, "kvt_obj_verify_iov: NULL argument");
	rc = src_holds(h, src, n_src);
	if (rc)
		return rc;

	cursor_init(&c, src, n_src);
	cursor_skip(&c, h->header_len);
	for (uint32_t i = 0; i < h->n_layers; i++) {
		const kvt_obj_layer *l = &h->layers[i];
		uint64_t sum = seg_pass(&c, NULL, l->length, PASS_HASH_ONLY, 0);

		if (sum != l->csum)
			return corrupt_layer(i, l->csum, sum);
	}
	return 0;
}

int kvt_obj_verify_layer_iov(const kvt_obj_hdr *h, const struct iovec *src,
			     int n_src, uint32_t layer)
{
	const kvt_obj_layer *l;
	struct seg_cursor c;
	uint64_t sum;
	int rc;

	rc = hdr_usable(h, "kvt_obj_verify_layer_iov");
	if (rc)
		return rc;
	if (layer >= h->n_layers)
		return kvt_err(KVT_EINVAL, "layer %u, the object has %u", layer,
			       h->n_layers);
	if (!src && n_src)
		return kvt_err(KVT_EINVAL, "kvt_obj_verify_layer_iov: NULL argument");
	rc = src_holds(h, src, n_src);
	if (rc)
		return rc;
	l = &h->layers[layer];
	cursor_init(&c, src, n_src);
	cursor_skip(&c, h->header_len + l->offset);
	sum = seg_pass(&c, NULL, l->length, PASS_HASH_ONLY, 0);
	if (sum != l->csum)
		return corrupt_layer(layer, l->csum, sum);
	return 0;
}

void kvt_obj_size_why(char *why, size_t len, uint64_t have, uint64_t want)
{
	snprintf(why, len, "file is %llu bytes, header says %llu (%s: %llu bytes %s)",
		 (unsigned long long)have, (unsigned long long)want,
		 have > want ? "trailing bytes" : "truncated",
		 (unsigned long long)(have > want ? have - want : want - have),
		 have > want ? "after the declared object" : "short");
}
