/*
 * store_int.h — what the store's files share: the store, its ops and
 * references, and the calls one part makes into another.
 *
 * The store's files by concern, each using only those listed after it:
 *   async.c   asynchronous get and put, prefetch (kvt_op)
 *   explain.c kvt_why: why a chunk is not served
 *   lookup.c  what is held: lookup, exists, locate, pin, delete
 *   get.c     reads, borrows, whole images for other nodes
 *   put.c     writes: in one call, in place, from the local server
 *   tenant.c  namespaces, tenants' accounts and quotas, reconfiguring
 *   move.c    promotion, demotion, write-through copies; a chunk's arrival
 *   stats.c   accounting: write health, read speed, KV events, statistics
 *   image.c   an image in segments: header, payload, copy, TTL
 *   why.c     the history kvt_why reads, misses counted by reason
 *   pool.c    the worker threads (pool.h), which know nothing of the store
 * store.c opens and closes it all; verify.c is the fsck, admin.c what
 * maintenance tools call, warm.c the hot list.  Nothing here is exported:
 * the API is include/kvtier.h.
 */
#ifndef KVT_STORE_INT_H
#define KVT_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/io.h"
#include "format/object.h"
#include "kvtier.h"
#include "store/config.h"
#include "store/store.h"
#include "store/events.h"
#include "store/why.h"
#include "store/hier.h"
#include "store/pool.h"
#include "tier/tier.h"

#define KVT_MAX_TIERS 8

/* A tier whose writes fail this many times in a row (I/O errors, not a
 * full tier) is given no writes for a while: a dead disk must not make every
 * put pay its error, and reads from it keep being tried. */
#define TIER_FAIL_STREAK 3
#define TIER_WRITES_OFF_NS (30ll * 1000000000ll)

struct tier_health {
	atomic_int streak;           /* consecutive write I/O errors */
	atomic_llong off_until;      /* CLOCK_MONOTONIC ns; 0 = writes on */
	atomic_ullong errors;        /* total write I/O errors */
	char last[160];              /* the last failed write's message, under
				      * err_mu */
	atomic_int last_rc;          /* and its code (a negated errno, say) */
};

/* What reads from a tier have cost: the cost model's inputs. */
struct tier_perf {
	pthread_mutex_t mu;
	double gbps, lat_us;       /* EWMA; planning defaults until measured */
	uint64_t n_bw, n_lat;      /* measurements folded in so far */
	_Atomic uint64_t hist[24]; /* reads by log2 of their microseconds */
};

struct kvt_store {
	kvt_config cfg;
	struct tier_perf perf[KVT_MAX_TIERS];
	kvt_tier *tiers[KVT_MAX_TIERS];
	int n_tiers;
	int kind[KVT_MAX_TIERS];   /* KVT_CT_*: which configuration applies */
	const struct kvt_tier_class *cls[KVT_MAX_TIERS]; /* its registry row (tiers.h) */
	int verify[KVT_MAX_TIERS]; /* verify payload checksums on read */
	int n_remote;              /* tiers whose class is remote (tiers.h) */
	_Atomic uint32_t remote_reads; /* reads that went past the node's tiers */
	_Atomic uint64_t last_read_bytes; /* the size read_order last costed */
	struct tier_health health[KVT_MAX_TIERS];
	kvt_hier *hier;

	struct kvt_pool pool;      /* the worker threads (pool.h) */
	int pool_up;               /* pool_init ran: pool_fini must */

	/* Keys with a promotion queued or running: one transfer per key. */
	pthread_mutex_t flight_mu;
	pthread_mutex_t err_mu; /* guards health[].last */
	kvt_key *flight;
	size_t n_flight, cap_flight;

	/* Namespace digest -> account (hier.h) of the tenant kvt_ns_init
	 * resolved it for: what a put is charged to.  Open addressing, a
	 * power of two of slots; a digest of all zeros marks a free slot. */
	kvt_events *events;        /* KV events (kv_events); NULL when off */
	struct kvt_why_state why;  /* what kvt_why answers from (why.h) */
	struct tier_watch {        /* each tier's on_evict argument */
		kvt_store *st;
		int tier;
	} watch[KVT_MAX_TIERS];

	pthread_rwlock_t nsa_lock;
	struct ns_acct {
		uint8_t digest[32];
		uint32_t acct;
	} *nsa;
	size_t nsa_mask, nsa_n;
};

enum op_kind { OP_GET = 1, OP_PUT = 2, OP_PREFETCH = 3 };

struct kvt_op {
	struct job job; /* first: the pool runs ops like any job */
	kvt_store *st;
	int kind;
	kvt_ns ns;
	kvt_key key;
	void *buf;
	const void *payload;
	size_t len;
	int durability;
	kvt_key *keys;      /* prefetch: the chain, owned */
	size_t n_keys;
	int64_t deadline_ns;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
	int rc;
	uint64_t bytes;
	char msg[256]; /* kvt_errmsg() of the worker that ran it, on failure */
};

struct kvt_ref {
	kvt_store *st;
	kvt_tier *tier;
	kvt_tier_rbuf *rb;
	kvt_obj_hdr hdr;
	struct iovec *iov; /* the payload: the image less its header */
	int n_iov;
	int dev;           /* the payload is in device memory (get_dev) */
	int image;         /* kvt_image_borrow's: iov is the whole image */
};

/* --- image.c ----------------------------------------------------------------- */

/* Decode the header of a borrowed image (its first 4 KiB, in however many
 * segments). */
int store_image_header(const kvt_tier_rbuf *rb, kvt_obj_hdr *h);
/* The image's segments from byte `skip` on, into a new array (caller
 * frees). */
int store_payload_iov(const kvt_tier_rbuf *rb, uint64_t skip, struct iovec **out,
		      int *n);
/* The token count in the header of the image whose first segment is
 * iov[0], read as it lies (offset 112); 0 if the segment is too short. */
uint32_t store_image_tokens(const struct iovec *iov, int n);
/* Begin a write of the image `src` holds into tier t: from `src` at
 * commit where the tier can, else copied now. */
int store_begin_copy(kvt_tier *t, const kvt_tier_rbuf *src, kvt_tier_wbuf **w);
/* 0 if an image of `len` bytes is as long as its header `h` says, else
 * KVT_ETRUNCATED, saying both. */
int store_image_whole(uint64_t len, const kvt_obj_hdr *h);
/* The image whose header is `h` is past the store's TTL. */
int store_expired(const kvt_store *st, const kvt_obj_hdr *h);
/* CLOCK_MONOTONIC in s (kvt_mono_ns: in ns). */
double store_now_s(void);

/* --- why.c ------------------------------------------------------------------- */

/* A get or lookup of `key` by account `acct` (store_ns_acct) found
 * nothing: count it by reason. */
void store_count_miss(kvt_store *st, int acct, const kvt_key *key);
/* A tier that does not answer now, or -1; `remote_only` asks only the
 * remote tiers (peer, S3), the only ones that can be unreachable. */
int store_tier_down(kvt_store *st, int remote_only);

/* --- stats.c ----------------------------------------------------------------- */

/* Tier i takes no writes for now (its writes kept failing); _err says so
 * as an error. */
int store_writes_off(kvt_store *st, int i);
int store_writes_off_err(kvt_store *st, int i);
/* Count a write's outcome `rc` in tier i's health. */
void store_note_write(kvt_store *st, int i, int rc);
/* Fold a read of `bytes` in `secs` into tier i's measured speed; _hist
 * counts it in the latency histogram alone. */
void store_perf_note(kvt_store *st, int i, uint64_t bytes, double secs);
void store_perf_hist(kvt_store *st, int i, double secs);
/* A KV event of `type` for `key` in tier `tier` (_tokens: with the
 * chunk's token count). */
void store_event(kvt_store *st, int type, int tier, const kvt_key *key);
void store_event_tokens(kvt_store *st, int type, int tier, const kvt_key *key,
			uint32_t tokens);
/* Tier `tier` no longer holds `key` for `reason` (enum kvt_why_reason:
 * deleted, evicted, dropped as bad, expired): its policy forgets it, the
 * history kvt_why reads remembers why, and the KV events say so.
 * store_lost does the last two, for a chunk the policy already forgot. */
void store_forget(kvt_store *st, int tier, const kvt_key *key, int reason);
void store_lost(kvt_store *st, int tier, const kvt_key *key, int reason);

/* --- move.c ------------------------------------------------------------------ */

enum { MOVE_DEMOTE = 1, MOVE_THROUGH = 2, MOVE_PROMOTE = 3 };

/* Copy `key` out of tier `src` (kind MOVE_*), on the worker pool or, when
 * its background queue is full, now. */
void store_move(kvt_store *st, int kind, int src, const kvt_key *key);
/* A hit in lower tier `tier`: copy it up to the first tier without making
 * the reader wait, once per key. */
void store_promote(kvt_store *st, int tier, const kvt_key *key);
/* Read `key` from tier `src` straight into new DRAM pages (its get_into),
 * check it (header, key, namespace when `ns` is not NULL, checksums) and
 * publish it there.  0, KVT_EEXIST (DRAM had it), or an error (a bad image
 * is reported to `src`). */
int store_promote_into(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int src);
/* Copy a borrowed image into tier `dst` at `durability`, and tell its
 * policy (store_after_insert).  0, KVT_EEXIST, or an error (the tier's
 * writes are off, or its own). */
int store_copy_into(kvt_store *st, int dst, const kvt_tier_rbuf *rb, int durability);
/* Copy a borrowed image into tier `dst`, verifying it in the copy pass. */
int store_copy_verified(kvt_store *st, int dst, const kvt_tier_rbuf *rb,
			const kvt_obj_hdr *src_hdr);
/* Tier `tier` now holds `key` (an image of len bytes, `tokens` tokens: its
 * header's token count, 0 if not known), charged to account `acct` (-1:
 * the one another tier charges it to; hier_insert): policy, victims, KV
 * events. */
void store_after_insert(kvt_store *st, int tier, const kvt_key *key, uint64_t len,
			int acct, uint32_t tokens);
/* The victims v[0..n) the policy of `tier` chose: demoted or dropped. */
void store_evict_victims(kvt_store *st, int tier, kvt_key *v, size_t n);

/* --- tenant.c ---------------------------------------------------------------- */

/* Argument checks every call shares: 0 or KVT_EINVAL with a message. */
int store_check_args(kvt_store *st, const kvt_ns *ns, const kvt_key *key);
/* The account chunks of `ns` are charged to (0: the default tenant's). */
int store_ns_acct(kvt_store *st, const kvt_ns *ns);
/* The account of a tenant name (NULL: the default tenant's, 0), or
 * KVT_ETENANT if the configuration has no such tenant. */
int store_tenant_acct(const kvt_store *st, const char *tenant);

/* --- put.c ------------------------------------------------------------------- */

/* Images written and read by another process in the first tier's own
 * memory (the local server, local_server.c), with no namespace: the store checks
 * keys, the client checks what is inside.  begin reserves the image in
 * the first tier (KVT_EEXIST if any tier holds the key; KVT_ENOTSUP if the
 * first tier takes no puts); commit publishes it as kvt_put would at
 * `durability` (copies into the lower tiers, policies, write-through) and
 * consumes w; abort gives it back.  get borrows from the first tier,
 * copying a lower tier's copy up first (verified in the copy).  exists and
 * del act on every tier, as kvt_exists and kvt_delete. */
int store_image_begin(kvt_store *st, const kvt_key *key, uint64_t len,
		      kvt_tier_wbuf **w, int *first);
int store_image_commit(kvt_store *st, int first, kvt_tier_wbuf *w, int durability,
		       int acct);
void store_image_abort(kvt_store *st, int first, kvt_tier_wbuf *w);
/* First version wins: KVT_EEXIST if a tier holds `key` (unexpired), else
 * 0 (begin's check, for a write the local server began under a key of
 * its own and publishes under the client's). */
int store_image_held(kvt_store *st, const kvt_key *key);

/* --- get.c ------------------------------------------------------------------- */

int store_image_get(kvt_store *st, const kvt_key *key, kvt_tier_rbuf **rb);
/* When the copy of `key` in `tier` was made, if it is past the store's
 * TTL (a read misses it); 0 if it is not, or no TTL is set. */
double store_held_expired(kvt_store *st, int tier, const kvt_key *key);
/* Drop the borrowed copy that failed verification, then let go of it. */
void store_drop_corrupt(kvt_ref *ref, const kvt_key *key);
void store_ref_free(kvt_ref *ref);

/* --- lookup.c ---------------------------------------------------------------- */

int store_image_exists(kvt_store *st, const kvt_key *key);
int store_image_del(kvt_store *st, const kvt_key *key);
/* How many of keys[0..n), from the first, the store holds (kvt_lookup's
 * answer, a peer tier asked once for the chain); tier_out[k] the first
 * tier holding key k, when not NULL. */
size_t store_chain_held(kvt_store *st, const kvt_key *keys, size_t n, uint8_t *tier_out);

/* --- store.c, admin.c -------------------------------------------------------- */

/* kvt_store_open with the file tiers (NVMe, shared directory) calling
 * through `io` instead of POSIX: how a test drives a whole store over a
 * table that fails on a countdown.  `io` must outlive the store. */
kvt_store *store_open_io(const kvt_config *cfg, kvt_io *io, int *err);
/* The fields of kvt_object_info a decoded header gives. */
void store_info_from_hdr(kvt_object_info *info, const kvt_obj_hdr *h);

#endif
