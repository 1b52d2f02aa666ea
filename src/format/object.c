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
 * (DRAM pages) hash in the same pass: each piece is copied, then hashed while
 * it is still in L1/L2.  The destination is what gets hashed, so a stored
 * image always matches its checksums even if a caller scribbles on its source
 * buffer during a put, and a verified read vouches for the bytes the caller
 * actually received.
 */
#include "format/object.h"
#include "common/hex.h"

#include <stdio.h>

#include <inttypes.h>
#include <string.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack, no malloc */
#include <xxhash.h>

#include "common/err.h"

/*
 * The x86-64 build of libxxhash exports *_dispatch variants that pick
 * SSE2/AVX2/AVX-512 at run time.  Measured with 0.8.1 on EPYC, the plain
 * XXH3_64bits_update runs at 10–14 GB/s and the dispatched one at 40+, which
 * is what lets a copy-and-hash pass keep up with memcpy (0.57× of memcpy
 * without, 0.9× with).  They are weak references because the static
 * libxxhash.a of some distributions (Debian's) lacks them: then they are NULL
 * and the portable functions serve, giving the same hashes, slower.
 * KVT_NO_XXH_DISPATCH forces the portable path.
 */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_include) && \
	!defined(KVT_NO_XXH_DISPATCH)
#if __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#pragma weak XXH3_64bits_update_dispatch
#pragma weak XXH3_64bits_dispatch
#define KVT_XXH_DISPATCH 1
#endif
#endif

static inline void hash_update(XXH3_state_t *st, const void *p, size_t n)
{
#ifdef KVT_XXH_DISPATCH
	if (XXH3_64bits_update_dispatch) {
		XXH3_64bits_update_dispatch(st, p, n);
		return;
	}
#endif
	XXH3_64bits_update(st, p, n);
}

static inline uint64_t hash_oneshot(const void *p, size_t n)
{
#ifdef KVT_XXH_DISPATCH
	if (XXH3_64bits_dispatch)
		return XXH3_64bits_dispatch(p, n);
#endif
	return XXH3_64bits(p, n);
}

static inline void hash_reset(XXH3_state_t *st)
{
	/* A stack state must start zeroed before a reset (xxhash.h). */
	memset(st, 0, sizeof(*st));
	XXH3_64bits_reset(st);
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

/*
 * Pieces copied then hashed while hot.  32 KiB of source plus 32 KiB of
 * destination stay in L2 (and mostly L1) between the memcpy and the hash;
 * measured on EPYC, 16–64 KiB are within noise of each other, 4 KiB is
 * markedly slower (per-call overhead), 256 KiB starts to spill.
 */
#define PIECE_BYTES (32u * 1024u)

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

enum pass_mode {
	PASS_TO_SEGS,   /* lin -> segments, hash the segments */
	PASS_FROM_SEGS, /* segments -> lin, hash lin */
	PASS_HASH_ONLY, /* hash the segments */
};

/* Move (or just hash) `len` bytes between the cursor and `lin`, piece by
 * piece, hashing each piece right after it is copied.  Returns the XXH3-64
 * of the bytes; the segments must hold them (callers check totals). */
static uint64_t seg_pass(struct seg_cursor *c, uint8_t *lin, uint64_t len,
			 enum pass_mode mode)
{
	XXH3_state_t st;
	uint8_t *p;

	hash_reset(&st);
	while (len) {
		size_t max = len < PIECE_BYTES ? (size_t)len : PIECE_BYTES;
		size_t n = cursor_take(c, max, &p);

		if (!n)
			break;
		switch (mode) {
		case PASS_TO_SEGS:
			memcpy(p, lin, n);
			hash_update(&st, p, n);
			break;
		case PASS_FROM_SEGS:
			memcpy(lin, p, n);
			hash_update(&st, lin, n);
			break;
		case PASS_HASH_ONLY:
			hash_update(&st, p, n);
			break;
		}
		if (lin)
			lin += n;
		len -= n;
	}
	return XXH3_64bits_digest(&st);
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

int kvt_obj_write_iov(kvt_obj_hdr *h, const void *const *layers,
		      const struct iovec *dst, int n_dst)
{
	uint8_t hdr[KVT_OBJ_HEADER_BYTES];
	struct seg_cursor c;
	uint64_t have, want;
	int rc;

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

	/* Payload first: the header needs its checksums. */
	cursor_init(&c, dst, n_dst);
	cursor_skip(&c, h->header_len);
	for (uint32_t i = 0; i < h->n_layers; i++)
		h->layers[i].csum = seg_pass(&c, (uint8_t *)(uintptr_t)layers[i],
					     h->layers[i].length, PASS_TO_SEGS);

	kvt_obj_hdr_encode(h, hdr);
	cursor_init(&c, dst, n_dst);
	for (size_t done = 0; done < sizeof(hdr);) {
		uint8_t *p;
		size_t n = cursor_take(&c, sizeof(hdr) - done, &p);

		if (!n)
			break; /* not reached: the total was checked */
		memcpy(p, hdr + done, n);
		done += n;
	}
	return 0;
}

int kvt_obj_read_iov(const kvt_obj_hdr *h, const struct iovec *src, int n_src,
		     void *out, size_t cap, int verify)
{
	struct seg_cursor c;
	uint8_t *o = out;
	int rc;

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
	for (uint32_t i = 0; i < h->n_layers; i++) {
		const kvt_obj_layer *l = &h->layers[i];
		uint64_t sum = seg_pass(&c, o + l->offset, l->length, PASS_FROM_SEGS);

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
	sum = seg_pass(&c, out, l->length, PASS_FROM_SEGS);
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
		uint64_t sum = seg_pass(&c, NULL, l->length, PASS_HASH_ONLY);

		if (sum != l->csum)
			return corrupt_layer(i, l->csum, sum);
	}
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
