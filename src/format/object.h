/*
 * object.h — the on-media format of one chunk (docs/FORMAT.md).
 *
 * Every chunk kvtier stores, in any tier, is one *object image*: a 4 KiB
 * header followed by the payload.  The header is self-describing (magic,
 * version, its own length), names what the payload is (key, namespace
 * digest, KV layout, token count) and carries one XXH3-64 checksum per layer
 * so that a connector can load and verify layer i+1 while the engine
 * computes on layer i.  The header is padded to 4 KiB so the same image goes
 * to disk with O_DIRECT and to S3 unchanged.  All integers are little-endian.
 *
 * This layer knows bytes only: no files, no tiers, no policies.  Decoding
 * bytes that came from outside never reads past the length it was given and
 * rejects every inconsistency with a precise code and kvt_errmsg() detail.
 */
#ifndef KVT_OBJECT_H
#define KVT_OBJECT_H

#include <stdint.h>
#include <sys/uio.h>

#include "kvtier.h"

#define KVT_OBJ_MAGIC "KVTCHUNK"      /* 8 bytes, no NUL */
#define KVT_OBJ_VERSION 1
#define KVT_OBJ_HEADER_BYTES 4096u
#define KVT_OBJ_CSUM_XXH3_64 1u
/* A payload larger than this is refused: no layout kvtier supports needs it,
 * and a hostile length must not drive allocations. */
#define KVT_OBJ_MAX_PAYLOAD (1ull << 34) /* 16 GiB */

/* flags */
#define KVT_OBJ_F_COMPRESSED 0x1u /* reserved: never set by this version */
#define KVT_OBJ_F_KNOWN 0x0u      /* flags this version understands */

typedef struct kvt_obj_layer {
	uint64_t offset; /* from the start of the payload */
	uint64_t length;
	uint64_t csum;   /* XXH3-64 of the layer's bytes, seed 0 */
} kvt_obj_layer;

/* The decoded header.  Fill with kvt_obj_hdr_init, then the checksums. */
typedef struct kvt_obj_hdr {
	uint16_t version;
	uint16_t flags;
	uint32_t header_len;     /* KVT_OBJ_HEADER_BYTES */
	kvt_key key;
	uint8_t ns_digest[32];
	kvt_layout layout;
	uint32_t token_count;    /* tokens the payload covers (= chunk_tokens) */
	uint32_t csum_alg;       /* KVT_OBJ_CSUM_XXH3_64 */
	uint64_t payload_len;    /* sum of the layers' lengths */
	uint64_t created_ns;     /* CLOCK_REALTIME of the put, for TTL and GC */
	uint32_t n_layers;       /* = layout.num_layers */
	kvt_obj_layer layers[KVT_MAX_LAYERS];
} kvt_obj_hdr;

/* Initialise a header for a chunk of namespace `ns` named `key`: layout,
 * layer offsets and lengths (layers packed back to back, layer-major), token
 * count, created_ns = now.  Checksums are left 0 for the writer to fill.
 * KVT_ELAYOUT if the layout is invalid or its payload exceeds
 * KVT_OBJ_MAX_PAYLOAD (the decoder would refuse the image). */
int kvt_obj_hdr_init(kvt_obj_hdr *h, const kvt_ns *ns, const kvt_key *key);

/* Serialise `h` into exactly KVT_OBJ_HEADER_BYTES bytes at `out`, computing
 * the header checksum.  Unused bytes are zero. */
void kvt_obj_hdr_encode(const kvt_obj_hdr *h, uint8_t *out);

/* Parse and validate a header from `buf` (`len` bytes available; at least
 * KVT_OBJ_HEADER_BYTES are needed).  Checks magic, version, header length,
 * header checksum, known flags, layout validity, that the layer table is
 * contiguous, in order and sums to payload_len, that payload_len matches
 * the layout, and that reserved and padding bytes are zero (docs/FORMAT.md
 * gives the order).  Returns 0 or KVT_EBADMAGIC, KVT_EVERSION,
 * KVT_ETRUNCATED, KVT_EHDRCSUM, KVT_EMALFORMED, KVT_ELAYOUT.  On failure
 * `*h` holds no meaning. */
int kvt_obj_hdr_decode(const uint8_t *buf, size_t len, kvt_obj_hdr *h);

/* 0 if the object is the chunk `key` of namespace `ns` (digest and layout),
 * else KVT_EMISMATCH or KVT_ELAYOUT. */
int kvt_obj_hdr_expect(const kvt_obj_hdr *h, const kvt_ns *ns,
		       const kvt_key *key);

/* Decode a whole image held in one buffer: header, then verify every layer.
 * `len` must be exactly header_len + payload_len (KVT_ETRUNCATED if short,
 * KVT_EMALFORMED if long).  KVT_ECORRUPT names the first bad layer. */
int kvt_obj_decode(const uint8_t *buf, size_t len, kvt_obj_hdr *h);

/* Say, into why[len], how a file of `have` bytes differs from the `want`
 * its header declares: "file is H bytes, header says W (N trailing bytes)"
 * or "(truncated: N bytes short)".  Every reader of stored files words it
 * this one way. */
void kvt_obj_size_why(char *why, size_t len, uint64_t have, uint64_t want);

/* Checksum of one layer's bytes, as stored in the table. */
uint64_t kvt_obj_layer_csum(const void *data, size_t len);

/* --- images spread over memory segments (DRAM pages, I/O buffers) ------- */

/* Write a complete image into the segments `dst` (total >= header_len +
 * payload_len): copy layer i from layers[i] and compute its checksum in the
 * same pass, then write the header (with the checksums) in front.  Fills
 * h->layers[i].csum.  Returns 0; KVT_ESMALL if the segments hold less than
 * the image, KVT_EINVAL if `h` is not a packed table as kvt_obj_hdr_init
 * makes it or a layer pointer is NULL (nothing written then).  Bytes of
 * `dst` past the image are left alone. */
int kvt_obj_write_iov(kvt_obj_hdr *h, const void *const *layers,
		      const struct iovec *dst, int n_dst);

/* Seal an image whose payload is already in the segments `dst` (after
 * header_len bytes), written there in place: compute the checksum of every
 * layer from `from` on over it (those before were summed already, by
 * kvt_obj_layer_sum_iov) and write the header in front.  Fills
 * h->layers[i].csum.  0, KVT_ESMALL or KVT_EINVAL as kvt_obj_write_iov. */
int kvt_obj_seal_iov(kvt_obj_hdr *h, const struct iovec *dst, int n_dst, uint32_t from);

/* Sum one layer of such an image into h->layers[layer].csum (the segments
 * must hold it).  0 or KVT_EINVAL. */
int kvt_obj_layer_sum_iov(kvt_obj_hdr *h, const struct iovec *dst, int n_dst, uint32_t layer);

/* Copy the payload of an image held in `src` (header first) into `out`
 * (capacity `cap`).  With `verify`, every layer's checksum is checked in the
 * same pass as the copy (KVT_ECORRUPT on mismatch; `out` then holds garbage).
 * The header is taken from `h`, already decoded.  KVT_ESMALL if cap <
 * payload_len, KVT_ETRUNCATED if the segments hold less than the image
 * (bytes past it are ignored), KVT_EINVAL if `h` is not a packed table.
 * These three also apply to read_layer_iov and verify_iov below. */
int kvt_obj_read_iov(const kvt_obj_hdr *h, const struct iovec *src, int n_src,
		     void *out, size_t cap, int verify);

/* Copy one layer (0-based) of the image in `src`, verifying its checksum.
 * KVT_EINVAL if `layer` >= n_layers; KVT_ESMALL if cap < the layer's length;
 * KVT_ECORRUPT on mismatch. */
int kvt_obj_read_layer_iov(const kvt_obj_hdr *h, const struct iovec *src,
			   int n_src, uint32_t layer, void *out, size_t cap);

/* Verify every layer of the image in `src` without copying. */
int kvt_obj_verify_iov(const kvt_obj_hdr *h, const struct iovec *src,
		       int n_src);

/* Tests: which stripes the copy-and-checksum passes use.  Every kind gives
 * the same bytes and checksums; AUTO (the default) is the widest the CPU
 * runs.  kvt_obj_force_stripes returns 0, or KVT_ENOTSUP (nothing changed)
 * where this build or CPU lacks that kind; kvt_obj_force_portable(1) is
 * kvt_obj_force_stripes(KVT_OBJ_STRIPES_PORTABLE), (0) back to AUTO.  Not
 * for use while other threads copy. */
enum {
	KVT_OBJ_STRIPES_AUTO = 0,
	KVT_OBJ_STRIPES_PORTABLE = 1,
	KVT_OBJ_STRIPES_AVX2 = 2,
	KVT_OBJ_STRIPES_AVX512 = 3,
};
int kvt_obj_force_stripes(int stripes);
void kvt_obj_force_portable(int on);

/* Images (kvt_obj_write_iov) and verified payloads (kvt_obj_read_iov) of
 * more than kvt_obj_stream_min() bytes are written with non-temporal
 * stores where the CPU has them: a quarter of the last-level cache, the
 * size above which the destination would not stay cached anyway.  Tests:
 * kvt_obj_force_stream_min(n) sets it (1 streams every image, UINT64_MAX
 * none), 0 gives it back to the cache's size. */
uint64_t kvt_obj_stream_min(void);
void kvt_obj_force_stream_min(uint64_t bytes);

/* Verify layer `layer` alone without copying it (a connector checks each
 * layer just before writing it to the engine).  KVT_EINVAL if `layer` >=
 * n_layers; KVT_ECORRUPT on mismatch. */
int kvt_obj_verify_layer_iov(const kvt_obj_hdr *h, const struct iovec *src,
			     int n_src, uint32_t layer);

#endif
