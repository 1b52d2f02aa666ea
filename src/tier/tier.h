/*
 * tier.h — the one interface every tier fills.
 *
 * A tier stores object images (src/format/object.h) under 32-byte keys and
 * knows nothing about policies, namespaces or other tiers: the store above
 * decides what goes where.  Adding a tier (NVMe, a shared file system, S3, a
 * GPU pool) means one new file that fills struct kvt_tier_ops.
 *
 * Writes are two-phase so that the writer copies straight into the tier's
 * own memory (DRAM pages, an aligned O_DIRECT buffer) and computes checksums
 * in the same pass: put_begin reserves space and exposes it as segments,
 * the caller fills them with a complete image, put_commit publishes it
 * atomically (first writer wins) or put_abort gives the space back.
 *
 * Reads borrow: get hands out the image as read-only segments and pins it
 * until release.  A tier whose medium is not memory reads into a buffer it
 * owns and hands that out.
 *
 * Thread safety: every op may be called from many threads at once.
 */
#ifndef KVT_TIER_H
#define KVT_TIER_H

#include <stdint.h>
#include <sys/uio.h>

#include "kvtier.h"

typedef struct kvt_tier kvt_tier;

/* Space reserved for one image.  Owned by the tier; the caller writes into
 * iov[0..n_iov) and hands it back with put_commit or put_abort. */
typedef struct kvt_tier_wbuf {
	kvt_key key;
	uint64_t len;
	struct iovec *iov;
	int n_iov;
} kvt_tier_wbuf;

/* A borrowed image.  Owned by the tier; read-only; valid until release. */
typedef struct kvt_tier_rbuf {
	kvt_key key;
	uint64_t len;
	const struct iovec *iov;
	int n_iov;
} kvt_tier_rbuf;

/* Optional (the DRAM tier's): the memory a tier's images live in, one
 * mapping of fixed pages, for a caller that registers it with a device
 * (page-locked DMA: the connector) or shares it with the node's processes
 * (the local protocol's server). */
struct kvt_tier_pages {
	/* The mapping: 0, or a negative code. */
	int (*arena)(const kvt_tier *t, void **base, size_t *len);
	/* The memfd behind a mapping shared with other processes, owned by
	 * the tier (passed on, never closed); -1 if it is not shared.  Page
	 * i lies at offset i * page size of the file. */
	int (*arena_fd)(const kvt_tier *t);
	/* Bytes of free pages now: what the next put_begin takes without
	 * evicting. */
	uint64_t (*free_bytes)(const kvt_tier *t);
	/* Give write `w` (put_begin's, not yet committed) the key its commit
	 * publishes it under: a write reserved before its key was named. */
	int (*rekey)(kvt_tier *t, kvt_tier_wbuf *w, const kvt_key *key);
};

struct kvt_tier_ops {
	const char *name;

	/* Reserve `len` bytes for the image of `key`.  KVT_EEXIST if the key
	 * is already published (nothing reserved), KVT_ETOOBIG if len exceeds
	 * the tier's capacity, KVT_EFULL if eviction cannot free enough
	 * (everything left is borrowed). */
	int (*put_begin)(kvt_tier *t, const kvt_key *key, uint64_t len,
			 kvt_tier_wbuf **w);
	/* Publish.  0, or KVT_EEXIST if another writer published the key
	 * first (this image is discarded).  `durability` is enum
	 * kvt_durability; KVT_ENOTSUP if the tier cannot give it.  The wbuf
	 * is consumed whatever the result. */
	int (*put_commit)(kvt_tier *t, kvt_tier_wbuf *w, int durability);
	void (*put_abort)(kvt_tier *t, kvt_tier_wbuf *w);
	/* Optional: put_begin for an image that lies whole, already written,
	 * in the caller's memory at src[0..n_src) (another tier's pages): the
	 * wbuf has no segments to fill (n_iov 0), and put_commit writes the
	 * image from src as it is, with no copy into a buffer of the tier's.
	 * src must stay mapped and unchanged until put_commit or put_abort
	 * returns.  KVT_ENOTSUP when src is not laid out as the tier needs
	 * (O_DIRECT's alignment): the caller then copies, through put_begin. */
	int (*put_begin_from)(kvt_tier *t, const kvt_key *key, uint64_t len,
			      const struct iovec *src, int n_src, kvt_tier_wbuf **w);

	/* Borrow the image of `key`.  KVT_ENOTFOUND if absent. */
	int (*get)(kvt_tier *t, const kvt_key *key, kvt_tier_rbuf **r);
	void (*release)(kvt_tier *t, kvt_tier_rbuf *r);

	/* Optional (NULL if the tier has no such path): read the image of
	 * `key` straight into memory the caller reserves — DRAM pages, so a
	 * promotion needs no intermediate buffer and no copy.  `reserve` is
	 * called once with the image length and returns segments at least
	 * that long, the last one writable up to its length rounded up to
	 * 4 KiB.  The tier checks nothing inside the image: the caller
	 * decodes and verifies it.  0, KVT_ENOTFOUND, reserve's error, or
	 * -errno (the file is then dropped, as a failed get does). */
	int (*get_into)(kvt_tier *t, const kvt_key *key,
			int (*reserve)(void *arg, uint64_t len,
				       const struct iovec **iov, int *n_iov),
			void *arg);

	/* Optional: read the image's header (its first KVT_OBJ_HEADER_BYTES
	 * into `hdr`) and bytes [off, off + len) of it into `buf`, and
	 * nothing else the medium lets it skip (a file tier reads the blocks
	 * that hold them), for a reader that needs a header and a few bytes
	 * of the payload (kvt_store_peek); *image gets the stored length (a
	 * file's size).  Nothing is checked or verified, so nothing is
	 * judged bad either.  0, KVT_ENOTFOUND, KVT_ETRUNCATED (the image
	 * ends first) or -errno.  Without it the store borrows the image. */
	int (*peek)(kvt_tier *t, const kvt_key *key, void *hdr, uint64_t off,
		    void *buf, size_t len, uint64_t *image);

	/* Optional (the device tier's): borrow the image as `get` does, but
	 * with its payload in the tier's own device memory: the first
	 * segment is a host copy of the 4 KiB header, the rest device
	 * pointers.  Only for a caller that copies on that device (a
	 * connector whose blocks live there); released with `release`. */
	int (*get_dev)(kvt_tier *t, const kvt_key *key, kvt_tier_rbuf **r);

	/* 1 present, 0 absent.  Must answer from memory. */
	int (*exists)(kvt_tier *t, const kvt_key *key);
	/* Nonzero for a tier whose every exists is a round trip and whose
	 * put refuses a held key itself (KVT_EEXIST from put_begin or
	 * put_commit): a put asks it nothing first (the daemon's tier). */
	int put_unprobed;
	/* Optional: how many of keys[0..n) are present before the first
	 * absent one, in one go — for a tier whose every question is a round
	 * trip (the daemon's), so a lookup of a long prompt is one.  A
	 * negative code if it cannot say. */
	int (*exists_prefix)(kvt_tier *t, const kvt_key *keys, size_t n);
	/* Optional (the daemon's tier): kvt_why answered by the store behind
	 * the tier, for a store that is its client.  Returns how many lead
	 * served, or a negative code. */
	int (*why)(kvt_tier *t, const kvt_key *keys, size_t n, kvt_why_chunk *out);
	/* Optional (the daemon's tier): kvt_store_name_chunk, for the store
	 * behind the tier, whose KV events name the chunk so. */
	int (*name_chunk)(kvt_tier *t, const kvt_key *key, const uint8_t *hashes, uint32_t n,
			  uint32_t hash_len, const uint8_t *parent, uint32_t block_size);
	/* 0 or KVT_ENOTFOUND.  Borrowers keep their view until release. */
	int (*del)(kvt_tier *t, const kvt_key *key);
	/* Walk the keys; a nonzero return from fn stops and is returned. */
	int (*iterate)(kvt_tier *t,
		       int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		       void *arg);
	void (*stats)(kvt_tier *t, kvt_tier_stats *out);
	/* A borrowed image failed verification (kvt_errmsg() says how): stop serving exactly that
	 * object (not a good one another writer published under the key
	 * since) and count it.  A tier on a disk leaves the file in place,
	 * listed by bad_iterate: a read never removes anything.  Called
	 * before release. */
	void (*corrupt)(kvt_tier *t, kvt_tier_rbuf *r);
	/* Optional: walk the objects found bad and left in place, with where
	 * they are, whether they are proven damaged (else only not
	 * verifiable here: a newer format, a tag without its key) and why.
	 * A nonzero return from fn stops the walk and is returned. */
	int (*bad_iterate)(kvt_tier *t,
			   int (*fn)(void *arg, const kvt_key *key,
				     const char *where, int proven,
				     const char *why),
			   void *arg);
	/* Optional: the explicit repair of one bad object (verify --repair):
	 * move it aside into the tier's quarantine.  0 (moved, or gone
	 * since), KVT_ENOTSUP (left in place: not proven bad, on a tier other
	 * nodes share), KVT_ENOTFOUND (not listed bad), or an error. */
	int (*repair)(kvt_tier *t, const kvt_key *key);
	void (*close)(kvt_tier *t);
	/* Optional: the tier's memory, where its images are pages of one
	 * mapping (NULL for every tier but DRAM). */
	const struct kvt_tier_pages *pages;
};

struct kvt_tier {
	const struct kvt_tier_ops *ops;
	/* Set by the store once the tier is open (NULL: no one listens).  A
	 * tier that drops an object on its own to make room — not through
	 * del — says so through kvt_tier_evicted, holding no lock of its
	 * own: the listener may call into the store's policies. */
	void (*on_evict)(void *arg, const kvt_key *key);
	void *on_evict_arg;
};

static inline void kvt_tier_evicted(kvt_tier *t, const kvt_key *key)
{
	if (t->on_evict)
		t->on_evict(t->on_evict_arg, key);
}

#endif
