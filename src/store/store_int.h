/*
 * store_int.h — what the store's files share: the store, its jobs and ops,
 * and the few internal calls one part makes into another.
 *
 * store.c is the store proper (open and close, put, get, lookup, the
 * movers between tiers, statistics); ops.c the worker pool, the
 * asynchronous operations and prefetch; verify.c the fsck.  Nothing here
 * is exported: the API is include/kvtier.h.
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

/* Work for the pool, in three classes served in order: what a caller is
 * waiting for (async ops, prefetch), promotions (the next request's hits),
 * and background copies (write-through, demotion), which may also use at
 * most all workers but one, so a deadline-bound load always finds a thread. */
enum { PRIO_URGENT = 0, PRIO_PROMOTE = 1, PRIO_BACKGROUND = 2, N_PRIO = 3 };

struct job {
	struct job *next;
	void (*run)(kvt_store *st, struct job *j);
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

	/* Worker pool: FIFOs per priority, a fixed set of threads. */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct job *qhead[N_PRIO], *qtail[N_PRIO];
	uint32_t queued_bg, running_bg, max_bg;
	uint32_t moves_pending; /* promotions and background copies queued or
				 * running: what kvt_store_flush waits out */
	uint64_t queued_bg_bytes, max_bg_bytes; /* images held by queued copies */
	int stopping;
	pthread_t *workers;
	uint32_t n_workers;

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

/* --- images in segments ---------------------------------------------------- */


/* --- store.c ---------------------------------------------------------------- */

/* Decode the header of a borrowed image (its first 4 KiB, in however many
 * segments). */
int store_image_header(const kvt_tier_rbuf *rb, kvt_obj_hdr *h);
/* The image's segments from byte `skip` on, into a new array (caller
 * frees). */
int store_payload_iov(const kvt_tier_rbuf *rb, uint64_t skip, struct iovec **out,
		      int *n);

/* Argument checks every call shares: 0 or KVT_EINVAL with a message. */
int store_check_args(kvt_store *st, const kvt_ns *ns, const kvt_key *key);
/* CLOCK_MONOTONIC in s (kvt_mono_ns: in ns). */
double store_now_s(void);
/* The account chunks of `ns` are charged to (0: the default tenant's). */
int store_ns_acct(kvt_store *st, const kvt_ns *ns);
/* Tell tier `tier`'s policy that `key` (len bytes) arrived, charged to
 * account `acct` (-1: the one another tier charges it to; hier_insert);
 * demote or drop the victims it names. */
/* Tier `tier` no longer holds `key` for `reason` (enum kvt_why_reason:
 * deleted, evicted, dropped as bad, expired): its policy forgets it, the
 * history kvt_why reads remembers why, and the KV events say so.
 * store_lost does the last two, for a chunk the policy already forgot. */
void store_forget(kvt_store *st, int tier, const kvt_key *key, int reason);
void store_lost(kvt_store *st, int tier, const kvt_key *key, int reason);
/* When the copy of `key` in `tier` was made, if it is past the store's
 * TTL (a read misses it); 0 if it is not, or no TTL is set. */
double store_held_expired(kvt_store *st, int tier, const kvt_key *key);
/* A get or lookup of `key` by account `acct` (store_ns_acct) found
 * nothing: count it by reason (why.c). */
void store_count_miss(kvt_store *st, int acct, const kvt_key *key);
/* Tier `tier` now holds `key` (an image of len bytes, `tokens` tokens: its
 * header's token count, 0 if not known): policy, victims, KV events. */
void store_after_insert(kvt_store *st, int tier, const kvt_key *key, uint64_t len,
			int acct, uint32_t tokens);
/* The token count in the header of the image whose first segment is
 * iov[0], read as it lies (offset 112); 0 if the segment is too short. */
uint32_t store_image_tokens(const struct iovec *iov, int n);
/* Fold a read of `bytes` in `secs` into tier i's measured speed. */
void store_perf_note(kvt_store *st, int i, uint64_t bytes, double secs);
/* Copy a borrowed image into tier `dst`, verifying it in the copy pass. */
int store_copy_verified(kvt_store *st, int dst, const kvt_tier_rbuf *rb,
			const kvt_obj_hdr *src_hdr);
/* Drop the borrowed copy that failed verification, then let go of it. */
void store_drop_corrupt(kvt_ref *ref, const kvt_key *key);
void store_ref_free(kvt_ref *ref);

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
/* First version wins: KVT_EEXIST if a tier holds `key` (unexpired), else
 * 0 (begin's check, for a write the local server began under a key of
 * its own and publishes under the client's). */
int store_image_held(kvt_store *st, const kvt_key *key);
/* The account of a tenant name (NULL: the default tenant's, 0), or
 * KVT_ETENANT if the configuration has no such tenant. */
int store_tenant_acct(const kvt_store *st, const char *tenant);
void store_image_abort(kvt_store *st, int first, kvt_tier_wbuf *w);
int store_image_get(kvt_store *st, const kvt_key *key, kvt_tier_rbuf **rb);
int store_image_exists(kvt_store *st, const kvt_key *key);
/* How many of keys[0..n), from the first, the store holds (kvt_lookup's
 * answer, a peer tier asked once for the chain); tier_out[k] the first
 * tier holding key k, when not NULL. */
size_t store_chain_held(kvt_store *st, const kvt_key *keys, size_t n, uint8_t *tier_out);
/* The fields of kvt_object_info a decoded header gives (admin.c). */
void store_info_from_hdr(kvt_object_info *info, const kvt_obj_hdr *h);

/* Read `key` from tier `src` straight into new DRAM pages (its get_into),
 * check it (header, key, namespace when `ns` is not NULL, checksums) and
 * publish it there.  0, KVT_EEXIST (DRAM had it), or an error (a bad image
 * is reported to `src`).  ops.c. */
int store_promote_into(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int src);
int store_image_del(kvt_store *st, const kvt_key *key);

/* --- ops.c ------------------------------------------------------------------ */

/* The worker pool's thread, and queueing a job at a priority: 0, or
 * KVT_ECANCELED once the store is closing (the caller keeps the job). */
void *store_worker_main(void *arg);
int store_job_submit(kvt_store *st, struct job *j, int prio);

/* kvt_store_open with the file tiers (NVMe, shared directory) calling
 * through `io` instead of POSIX: how a test drives a whole store over a
 * table that fails on a countdown.  `io` must outlive the store. */
kvt_store *store_open_io(const kvt_config *cfg, kvt_io *io, int *err);

#endif
