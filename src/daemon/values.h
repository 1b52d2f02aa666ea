/*
 * values.h — the daemon's mutable keys over the store's immutable objects.
 *
 * A RESP key is mutable; a stored object is not (first writer wins, and a
 * reader must never see a mix of two versions).  So every SET makes a new
 * version: the value is stored as an object under
 *     H(tenant namespace digest, sequence, boot nonce, user key)
 * (SHA-256), a name no other version, tenant or node can claim, and this
 * module maps (tenant, user key) to the current version.  The old version
 * is deleted once the new one is in the map, off the SET's path by a
 * thread of this module's (values.c, deleter_main); a reader that borrowed
 * it keeps its view until it lets go.
 *
 * Object image.  A value of any length is a payload of int8 "KV" whose
 * layout is a function of the payload length alone (vals_layout): one
 * layer up to 1 MiB, else 64 equal layers, each checksummed like a chunk's
 * and verified on every read from a disk tier (and from DRAM when
 * verify_dram_reads is set).  The payload is the value's bytes, padding,
 * then a trailer that names the version (docs/DAEMON.md):
 *     user key | klen u32 | csum u32 | vlen u64 | seq u64 | nonce u64 |
 *     expire_ms i64 | "KVTDVAL2"
 * (csum: XXH3 of the trailer with that field zero; "KVTDVAL1" objects of
 * older daemons have none), so that at start the map is rebuilt from the
 * disk tiers by reading each object's header and trailer alone
 * (kvt_store_peek; vals_rebuild): the newest version of a key wins and
 * older ones left by a crash are deleted.
 *
 * Deletions.  With cached SETs over a disk tier a version's background
 * copy may land on the disk after the DEL that deleted it, and a restart
 * would bring it back.  So a DEL (UNLINK, EXPIRE into the past) that
 * finds copies still queued once it has deleted the version writes a
 * crash-safe tombstone, an object of the same shape whose trailer
 * ends "KVTDDEL2" (FLUSHDB: one per tenant, "KVTDFLS2", klen 0): versions
 * of the key (the tenant's) numbered up to its seq are deleted, and the
 * rebuild hides them.  The key's entry stays in the map, dead (a reader
 * sees no key; a SET numbered before it loses), and once the store has no
 * background copy queued or running (vals_sweep) the version is deleted
 * again, then the tombstone, then the entry.  An overwrite needs none: the
 * newer version wins at a restart, and if its copy was lost the key reads
 * as before that SET, which is what cached promises of it.
 *
 * Thread-safe: the map is sharded, each shard under its own mutex, never
 * held across a call into the store.
 */
#ifndef KVTD_VALUES_H
#define KVTD_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include <kvtier.h>

#define VALS_MAX_KEY 8192
#define VALS_TRAILER 48
/* What a buffer needs past a value's bytes to hold the padding and the
 * trailer of any key: the slack the RESP parser allocates after a big
 * argument. */
#define VALS_SLACK (VALS_MAX_KEY + VALS_TRAILER + 64)
#define VALS_MAX_TENANTS 1024

/* A tenant: the namespace its keys live in.  `ns` is resolved through the
 * store (the tenant's secret), so a client can neither compute nor aim at
 * another tenant's object names. */
struct kvtd_tenant {
	uint32_t id;      /* index in the daemon's table, < VALS_MAX_TENANTS */
	char name[64];    /* "" for the default tenant */
	char label[16];   /* its /metrics label unless names are shown: "t" and
			   * 12 hex digits of ns.digest ("" for the default) */
	kvt_ns ns;
};

struct vals;

struct vals_opts {
	int durability;   /* enum kvt_durability of every put */
	uint64_t reserve_max; /* tier bytes SETs received in place may hold */
};

int vals_open(kvt_store *st, const struct vals_opts *o, struct vals **out);
void vals_close(struct vals *v);

/* Rebuild the map from every tier that keeps objects across a restart,
 * for the tenants listed.  Returns the number of keys found, or a negative
 * code. */
long vals_rebuild(struct vals *v, const struct kvtd_tenant *const *tenants,
		  size_t n_tenants);

enum { VALS_SET_NX = 1, VALS_SET_XX = 2, VALS_SET_KEEPTTL = 4 };

/* Store `vlen` bytes at buf[0 ..) as the new version of `key`.  `buf`
 * must have room for vals_payload_bytes(klen, vlen) bytes (VALS_SLACK past
 * the value is always enough); its bytes past the value are overwritten.
 * expire_ms: CLOCK_REALTIME milliseconds, 0 for none.  Returns 1 (stored),
 * 0 (NX or XX said no), or a negative kvtier code (kvt_errmsg says why). */
int vals_set(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
	     char *buf, uint64_t vlen, int64_t expire_ms, int flags);

uint64_t vals_payload_bytes(size_t klen, uint64_t vlen);

/* A SET received in place: the value's bytes go straight into the store's
 * first tier (kvt_put_reserve).  Open when the value's length is known:
 * *iov covers the payload, the value first (its CRLF may be received
 * after it: that room is the trailer's, written at commit).  0, or a
 * negative code (KVT_EFULL: the reserve_max share is held, receive into a
 * buffer instead).  Commit stores it as vals_set would (same results);
 * cancel gives the space back.  Either frees it. */
struct vals_put;
int vals_put_open(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
		  uint64_t vlen, struct vals_put **out, const struct iovec **iov, int *n_iov);
int vals_put_commit(struct vals_put *vp, int64_t expire_ms, int flags);
/* `got` bytes of the value have arrived: the layers they complete are
 * checksummed now, while in cache (kvt_put_buf_written). */
void vals_put_progress(struct vals_put *vp, uint64_t got);
void vals_put_cancel(struct vals_put *vp);

/* Borrow the current version of `key`: 0 with *ref (the payload's first
 * *vlen bytes are the value) or KVT_ENOTFOUND, or another negative code. */
int vals_get(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
	     kvt_ref **ref, uint64_t *vlen);

/* 1 if `key` has a live version, else 0. */
int vals_exists(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen);

/* Remove `key`: 1 if it was there, 0 if not. */
int vals_del(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen);

/* Set (expire_ms > 0) or clear (0) the expiry: 1 if the key exists, else 0,
 * or a negative code.  The expiry is kept in a new version of the value
 * (a copy of its bytes), so that a restart keeps it too.  An expiry in the
 * past deletes the key. */
int vals_expire(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
		int64_t expire_ms);

/* Milliseconds left: -2 (no key), -1 (no expiry), else >= 0. */
int64_t vals_pttl(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen);

/* Keys of tenant `t` from `cursor` on: `fn` gets each key matching the
 * glob `match` (NULL: all); at least `count` buckets' worth are visited.
 * Returns the next cursor (0: done).  A key present during the whole scan
 * is returned at least once. */
uint64_t vals_scan(struct vals *v, const struct kvtd_tenant *t, uint64_t cursor,
		   size_t count, const char *match, size_t mlen,
		   void (*fn)(void *arg, const char *key, size_t klen), void *arg);

uint64_t vals_count(struct vals *v, const struct kvtd_tenant *t);
uint64_t vals_expiring(struct vals *v, const struct kvtd_tenant *t);

/* Remove every key of tenant `t`; returns how many went. */
uint64_t vals_flush(struct vals *v, const struct kvtd_tenant *t);

/* Remove expired keys, visiting at most `budget` buckets from where the
 * last call stopped; collect the tombstones and late copies no copy can
 * follow any more. */
void vals_sweep(struct vals *v, size_t budget);

/* Redis's glob: * ? [abc] [^a-z] and \ escapes.  1 if it matches. */
int vals_glob(const char *pat, size_t plen, const char *s, size_t slen);

int64_t vals_now_ms(void);

/* The absolute expiry, in ms, of a command's expiry argument t: seconds
 * when sec, an absolute time when at, else relative to `now`.  INT64_MIN
 * when it does not fit in 64 bits of milliseconds, which Redis answers
 * "invalid expire time" (a wrapped sum would delete the key, or never
 * store it). */
int64_t vals_expiry_ms(long long t, int sec, int at, int64_t now);

#endif
