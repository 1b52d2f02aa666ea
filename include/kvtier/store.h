/*
 * kvtier/store.h — the store: open and close, put, get and
 * borrow, lookup, why a prompt missed, asynchronous operations, tenants'
 * shares, statistics, verification, and serving the node's processes.
 *
 * kvtier.h includes it; its conventions (errors, ownership, threads) are
 * kvtier.h's.
 */
#ifndef KVTIER_STORE_H
#define KVTIER_STORE_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Store                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct kvt_store kvt_store;

/* Open a store: every tier the configuration names, fastest first, each
 * one's index rebuilt from its medium (a disk tier lists its directory, an
 * S3 tier its prefix; see docs/TIERS.md).  The configuration is copied; the
 * caller may free it at once.  On failure returns NULL and *err (may be
 * NULL) gets the code, kvt_errmsg() naming the tier and why: KVT_EINVAL (no
 * configuration), KVT_ECONFIG (no tier configured, a capacity below two
 * pages), a negated errno of a tier's directory or arena (-EACCES,
 * -ENOMEM for an arena that cannot be reserved), or an S3 endpoint's
 * failure.  A disk tier that refuses writes opens read-only by itself. */
KVT_API kvt_store *kvt_store_open(const kvt_config *cfg, int *err);

/* Wait for in-flight asynchronous operations and queued background copies,
 * then free everything.  Every kvt_ref must have been released and every
 * kvt_op freed before; no other thread may be inside a call on `st`.  NULL
 * is a no-op. */
KVT_API void kvt_store_close(kvt_store *st);

/* Resolve a namespace description against the store (tenant secret, chunk
 * size).  0, KVT_EINVAL (a NULL pointer, no model id, an unknown hash
 * scheme, a rank outside its size, strings too long), KVT_ETENANT (the
 * tenant is not configured) or KVT_ELAYOUT (see kvt_layout_check), with the
 * reason in kvt_errmsg().  Pure: touches no tier. */
KVT_API int kvt_ns_init(kvt_store *st, const kvt_ns_desc *desc, kvt_ns *ns);

/* How durable a put must be before it returns.  The DRAM tier only gives
 * KVT_DUR_CACHED; asking for more from a store without a disk tier is
 * KVT_ENOTSUP.
 *
 * KVT_DUR_CACHED promises the first tier that takes puts and nothing more:
 * the copies to the write-through tiers below are made in the background
 * after kvt_put returns 0, and they can fail (a full or read-only disk, a
 * dead endpoint) or be refused by admission; a process that exits at once
 * loses them.  Such failures are counted in kvt_tier_stats.write_errors
 * and last_write_error.  To know where a chunk is, call kvt_store_flush and
 * kvt_locate; to be told at put time, ask KVT_DUR_CRASH_SAFE or more, which
 * writes every tier that takes puts before returning. */
enum kvt_durability {
	KVT_DUR_CACHED = 0,     /* in memory; may be evicted or lost */
	KVT_DUR_CRASH_SAFE = 1, /* survives the process being killed */
	KVT_DUR_POWER_SAFE = 2, /* fsynced; survives power loss */
};

/* Store a chunk.  `payload` is the layer-major KV of one chunk and must be
 * exactly kvt_layout_payload_bytes(&ns->layout) long.  The payload is
 * copied before the call returns; the checksums are computed in the same
 * pass.  Returns 0, or:
 *   KVT_EEXIST    the key is already stored; nothing changed (first wins)
 *   KVT_ELAYOUT   `len` is not the namespace's chunk size
 *   KVT_EINVAL    a NULL pointer, an unknown durability
 *   KVT_ENOTSUP   a durability beyond KVT_DUR_CACHED and no disk tier
 *   KVT_ETOOBIG   larger than any tier could ever hold
 *   KVT_EFULL     no tier accepted it: full of pinned or borrowed chunks,
 *                 or every tier refused it (admission, writes off)
 *   -EROFS        the store is open read-only
 *   -EIO, -ENOSPC with KVT_DUR_CRASH_SAFE or more: a tier the durability
 *                 needs failed; kvt_errmsg() names it
 * With KVT_DUR_CACHED, failures of the copies below are not returned; see
 * enum kvt_durability. */
KVT_API int kvt_put(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	    const void *payload, size_t len, int durability);

/* Same, from one buffer per layer (`layers[i]` holds
 * kvt_layout_layer_bytes() bytes), as a connector that saves layer by layer
 * has them.  Same results; KVT_ELAYOUT if n_layers is not the namespace's,
 * KVT_EINVAL if a layer pointer is NULL. */
KVT_API int kvt_put_layers(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		   const void *const *layers, uint32_t n_layers, int durability);

/* Copy a chunk's payload into `buf` (capacity `cap`).  *len (may be NULL)
 * gets the payload length.  The fastest tier holding the key serves it; a
 * hit below the first tier is promoted in the background.  Returns 0,
 * KVT_ENOTFOUND (no tier holds a good copy, or the chunk is older than the
 * TTL), KVT_ESMALL (`buf` NULL or `cap` short; *len says what is needed).
 * A copy that fails verification is never handed out: it is no longer
 * served by its tier, counted (kvt_tier_stats.corrupt) and logged, and the
 * search goes on in the tiers below; a tier that fails to read is counted
 * (read_errors) and passed over the same way.  Either ends as a miss like
 * any other. */
KVT_API int kvt_get(kvt_store *st, const kvt_ns *ns, const kvt_key *key, void *buf,
	    size_t cap, size_t *len);

/* Copy one layer of a chunk into `buf`, verifying that layer's checksum
 * alone.  As kvt_get; KVT_EINVAL for a layer past the chunk's, KVT_ESMALL
 * if `cap` is below kvt_layout_layer_bytes(). */
KVT_API int kvt_get_layer(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  uint32_t layer, void *buf, size_t cap);

/* 1 if present in any tier, 0 if not, or KVT_EINVAL.  From memory (each
 * tier's index); may count a chunk past its TTL until a put replaces it. */
KVT_API int kvt_exists(kvt_store *st, const kvt_ns *ns, const kvt_key *key);

/* Remove a chunk from every tier.  0, KVT_ENOTFOUND (no tier held it),
 * -EROFS (read-only store), or the first tier's failure to remove it (a
 * negated errno: the chunk may still be served from there).  A reader
 * holding a kvt_ref keeps its view until it releases it. */
KVT_API int kvt_delete(kvt_store *st, const kvt_ns *ns, const kvt_key *key);

/* --- puts written in place ------------------------------------------------ */

typedef struct kvt_put_buf kvt_put_buf;

/* Reserve the space of a chunk of `ns`'s layout under `key` in the first
 * tier the put writes, for the caller to write the payload into where it
 * will be stored (from a socket, say: no copy of the caller's).  The
 * payload's memory is kvt_put_buf_iov's; kvt_put_publish then checksums it
 * where it lies and stores it as kvt_put would; kvt_put_cancel gives the
 * space back.  Until one of them the space is held: it counts against the
 * tier's capacity and is invisible to readers.  0 with *out, or kvt_put's
 * codes (KVT_EEXIST: the key is stored already, whatever the durability;
 * KVT_EFULL, ...) with nothing held. */
KVT_API int kvt_put_reserve(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
			    int durability, kvt_put_buf **out);

/* The payload's segments, in order, kvt_layout_payload_bytes() in all: the
 * caller writes every byte.  Valid until publish or cancel.  0 or
 * KVT_EINVAL (a NULL pointer). */
KVT_API int kvt_put_buf_iov(const kvt_put_buf *b, const struct iovec **iov, int *n_iov);

/* The payload's first `bytes` are written and will not change: the
 * checksums of the layers they complete are computed now, while those
 * bytes are in the cache, and publish has the rest only to do.  Optional;
 * call it as often as convenient.  0 or KVT_EINVAL. */
KVT_API int kvt_put_buf_written(kvt_put_buf *b, uint64_t bytes);

/* Checksum the payload written in place and store the chunk: kvt_put's
 * results.  `b` is freed whatever the result. */
KVT_API int kvt_put_publish(kvt_put_buf *b);

/* Give the space back; nothing is stored.  NULL is a no-op. */
KVT_API void kvt_put_cancel(kvt_put_buf *b);

/* --- zero-copy reads ----------------------------------------------------- */

typedef struct kvt_ref kvt_ref;

/* Borrow a chunk without copying it.  The returned reference pins the chunk:
 * it is neither evicted nor reused until kvt_release, and its memory stays
 * valid until then even if the chunk is deleted.  0 with *ref set, or as
 * kvt_get (KVT_ENOTFOUND, ...) with *ref NULL. */
KVT_API int kvt_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       kvt_ref **ref);

/* The payload as a list of memory segments, in order.  *iov points into the
 * reference and is valid until kvt_release; the memory is read-only.  0 or
 * KVT_EINVAL (a NULL pointer).  kvt_ref_len: the payload's bytes (0 for
 * NULL). */
KVT_API int kvt_ref_iov(const kvt_ref *ref, const struct iovec **iov, int *n_iov);
KVT_API uint64_t kvt_ref_len(const kvt_ref *ref);

/* Verify the borrowed payload's checksums (every layer).  0, KVT_ECORRUPT
 * (with the layer in kvt_errmsg()), or KVT_EINVAL. */
KVT_API int kvt_ref_verify(const kvt_ref *ref);

/* Copy one layer of the borrowed payload into `buf`, verifying that
 * layer's checksum in the same pass (kvt_get_layer without a second
 * lookup: borrow a chunk once, read its layers one by one into a buffer
 * that stays in cache).  0, KVT_ECORRUPT (nothing usable in buf),
 * KVT_EINVAL (a layer past the chunk's, a NULL pointer), KVT_ESMALL (`cap`
 * below kvt_layout_layer_bytes()). */
KVT_API int kvt_ref_read_layer(const kvt_ref *ref, uint32_t layer, void *buf, size_t cap);

/* Give a reference back; NULL is a no-op.  Any thread may release it. */
KVT_API void kvt_release(kvt_ref *ref);

/* --- whole images, between nodes ------------------------------------------ */

/* Borrow the object image stored under `key` — its 4 KiB header and
 * payload, as the tiers hold it (docs/FORMAT.md) — from this node's own
 * tiers only (device, DRAM, local disk: not the shared file system, S3 or
 * other nodes), for a node daemon to hand to another node.  No namespace
 * is checked: the key names the chunk, and the receiving store checks the
 * image against its own namespace and verifies it.  The image is checked
 * for a sound header and length, and verified where the tier's reads are
 * (a disk); a bad copy is not served (it is dropped or listed as a get
 * would).  kvt_ref_iov then gives the whole image and kvt_ref_len its
 * bytes; kvt_release gives it back.  0, KVT_ENOTFOUND, KVT_ENOMEM or
 * KVT_EINVAL. */
KVT_API int kvt_image_borrow(kvt_store *st, const kvt_key *key, kvt_ref **ref);

/* How many of keys[0..n), from the first, this node's own tiers hold (as
 * kvt_image_borrow reads them), answered from memory.  >= 0, or
 * KVT_EINVAL. */
KVT_API int kvt_image_present(kvt_store *st, const kvt_key *keys, size_t n);

/* --- lookup -------------------------------------------------------------- */

/* Where each chunk of a prefix lives: tier index (0 = fastest) per chunk. */
typedef struct kvt_lookup_result {
	uint32_t n_hit;        /* leading chunks present */
	uint8_t *tier;         /* caller's array of n_keys entries, or NULL */
} kvt_lookup_result;

/* Longest run of leading keys present in some tier.  Answers from memory,
 * never waits on I/O, changes nothing (no promotion, no recency) — except
 * that a peer tier (other nodes' daemons, `peers`) is asked over the
 * network, once per lookup, for the part of the chain the node's own
 * tiers do not hold.  `res`
 * may be NULL; res->tier, if not NULL, gets n_hit entries.  Returns n_hit
 * (>= 0) or KVT_EINVAL.  A chunk past its TTL may still count (see
 * CAVEATS); a tier whose endpoint does not answer answers from its last
 * listing. */
KVT_API int kvt_lookup(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
	       size_t n_keys, kvt_lookup_result *res);

/* Tensor- and pipeline-parallel ranks are one unit: a prefix hits only as
 * far as every rank's shard is present.  keys[r] is rank r's chain (in that
 * rank's namespace, ns[r]), each n_keys long.  Returns the common prefix
 * length; res->tier[i] (if given) is the slowest tier any rank's shard i
 * sits in, the one that bounds its load time.  KVT_EINVAL for no ranks or
 * a NULL chain.  From memory, like kvt_lookup. */
KVT_API int kvt_lookup_ranks(kvt_store *st, const kvt_ns *ns, size_t n_ranks,
		     const kvt_key *const *keys, size_t n_keys,
		     kvt_lookup_result *res);

/* How many leading chunks of a lookup are worth loading rather than
 * recomputing: the prefix that saves the most time, given that recomputing
 * one chunk takes `recompute_s` seconds and loading from each tier takes
 * the latency and bandwidth the store has measured on its reads (planning
 * defaults until it has: the same table the planner uses).  The engine
 * loads that many and recomputes the rest.  Returns the count (0..n_hit)
 * or KVT_EINVAL.  Reads only measured figures; never waits. */
KVT_API int kvt_lookup_worth(kvt_store *st, const kvt_ns *ns,
		     const kvt_lookup_result *res, double recompute_s);

/* Hash a prompt's tokens and look the chain up in one call.  `keys`, if not
 * NULL, receives the chain (at most max_keys entries); `extra` and `res` may
 * be NULL.  Returns the number of leading whole chunks present, or
 * KVT_EINVAL.  The partial last chunk is never keyed. */
KVT_API int kvt_lookup_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens,
		      size_t n_tokens, const kvt_extra_keys *extra,
		      kvt_key *keys, size_t max_keys, kvt_lookup_result *res);

/* --- why a prompt missed (docs/WHY.md) ----------------------------------- */

enum kvt_why_reason {
	KVT_WHY_HIT = 0,       /* served, from `tier` */
	KVT_WHY_PREFIX = 1,    /* held (in `tier`) but not served: an earlier chunk is missing */
	KVT_WHY_NEVER = 2,     /* never stored under this namespace, as far as the store knows */
	KVT_WHY_NAMESPACE = 3, /* stored under another namespace: `detail` names the fields */
	KVT_WHY_EVICTED = 4,   /* evicted from `tier` at `when` */
	KVT_WHY_DELETED = 5,   /* deleted (or replaced by another writer's copy) at `when` */
	KVT_WHY_CORRUPT = 6,   /* failed its checks in `tier` at `when`, dropped */
	KVT_WHY_EXPIRED = 7,   /* past the store's TTL, removed at `when` */
	KVT_WHY_DEADLINE = 8,  /* a load of it missed its deadline at `when` */
	KVT_WHY_TIER_DOWN = 9, /* `tier` does not answer: it may hold the chunk */
	KVT_WHY_REASONS = 10
};

typedef struct kvt_why_chunk {
	int32_t reason; /* enum kvt_why_reason */
	int32_t tier;   /* the tier it concerns, -1 for none */
	double when;    /* CLOCK_REALTIME seconds of the event; 0 if none */
	char detail[256]; /* a sentence saying it, with names and values */
} kvt_why_chunk;

/* Why each of keys[0..n) is or is not served: out[i] for each.  From
 * memory: the tiers' indexes, a bounded history of chunks that left a tier
 * (the most recent tens of thousands), and the tiers' health.  A key the
 * history no longer remembers and no tier holds is KVT_WHY_NEVER.  Returns
 * how many leading chunks are served (as kvt_lookup), or KVT_EINVAL. */
KVT_API int kvt_why(kvt_store *st, const kvt_ns *ns, const kvt_key *keys, size_t n,
		    kvt_why_chunk *out);

/* kvt_why over a prompt's chain (its whole chunks, at most max_out), and
 * for chunks no tier holds under `ns`: the other namespaces of the same
 * tenant this store has resolved (kvt_ns_init) are tried on the same
 * tokens, and a prefix found under one is KVT_WHY_NAMESPACE, its detail
 * naming each field that differs (model, revision, dtype and the rest of
 * the layout, ranks, LoRA, hash scheme).  Another tenant's namespaces are
 * never tried or named.  Returns the chunks written to out, or a code. */
KVT_API int kvt_why_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens,
			   size_t n_tokens, const kvt_extra_keys *extra, kvt_why_chunk *out,
			   size_t max_out);

/* "hit", "prefix", "never", "namespace", "evicted", "deleted", "corrupt",
 * "expired", "deadline", "tier_down"; "?" for anything else. */
KVT_API const char *kvt_why_name(int reason);

/* Misses counted by reason (kvt_get and kvt_lookup that did not find a
 * chunk, each classified as kvt_why would), for `tenant` (NULL: the
 * default) and tier `tier` (-1: those no tier concerns).  0 for an
 * unknown tenant or a tier out of range. */
KVT_API uint64_t kvt_store_misses(kvt_store *st, const char *tenant, int reason, int tier);

/* --- warm starts (docs/DAEMON_OPS.md, "Warm starts") --------------------- */

/* Write the keys the first tier holds, the most recently used first, to
 * `path` (at most max_keys; 0: all), crash-safely (a temporary, fsync,
 * rename): the hot list a restarted node warms its first tier from.  0, or
 * a negated errno naming the file. */
KVT_API int kvt_store_hot_save(kvt_store *st, const char *path, size_t max_keys);

/* How a warm start goes; written as it goes by the thread that runs
 * kvt_store_warm, each field whole (another thread may read them). */
typedef struct kvt_warm_progress {
	uint64_t listed;       /* keys in the hot list */
	uint64_t done;         /* keys handled so far */
	uint64_t loaded;       /* chunks brought into the first tier */
	uint64_t loaded_bytes; /* their images' bytes */
	uint64_t already;      /* in the first tier already */
	uint64_t missing;      /* in no tier any more */
	uint64_t failed;       /* could not be loaded (damaged, an I/O error) */
	uint64_t budget_bytes; /* the budget in force */
	uint32_t finished;     /* 1 once kvt_store_warm has returned */
	uint32_t cancel;       /* set by another thread: stop after the chunk in hand */
} kvt_warm_progress;

/* Bring the chunks of the hot list at `path` that lower tiers hold into
 * the first tier, in the list's order, verified as they are copied, until
 * their bytes reach budget_bytes (0: the first tier's capacity less a
 * tenth) or the list ends, at most bytes_per_s (0: unlimited) so that the
 * shared tiers are not stampeded by a fleet restarting at once.  `p` (may
 * be NULL) follows the progress.  0; KVT_ENOTFOUND if there is no list;
 * KVT_EMALFORMED naming what is wrong with a damaged one (nothing is
 * loaded then); a negated errno. */
KVT_API int kvt_store_warm(kvt_store *st, const char *path, uint64_t budget_bytes,
			   uint64_t bytes_per_s, kvt_warm_progress *p);

/* --- batch forms --------------------------------------------------------- */

/* Store n chunks; results[i] (may be NULL) gets each one's kvt_put code.
 * Returns the number that were stored (KVT_EEXIST counts as stored: the
 * key is present), or KVT_EINVAL for NULL arrays. */
KVT_API int kvt_put_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  const void *const *payloads, size_t n, int durability,
		  int *results);

/* Fetch n chunks, each into bufs[i] of capacity cap; results[i] (may be
 * NULL) gets each one's kvt_get code.  Returns the number fetched, or
 * KVT_EINVAL for NULL arrays. */
KVT_API int kvt_get_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  void *const *bufs, size_t cap, size_t n, int *results);

/* --- asynchronous operations --------------------------------------------- */

typedef struct kvt_op kvt_op;

/* Submit a get or a put to the store's worker pool and return at once.  The
 * buffers must stay valid (and, for a get, untouched) until the op completes.
 * The op is owned by the caller: free it with kvt_op_free once complete.
 * The call returns 0 with *op set, KVT_EINVAL (a NULL pointer, an
 * uninitialised namespace), or KVT_ECANCELED (the store is closing); the
 * op's own result (kvt_op_wait) is what kvt_get or kvt_put would return,
 * with kvt_op_errmsg() keeping the detail. */
KVT_API int kvt_get_async(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  void *buf, size_t cap, kvt_op **op);
KVT_API int kvt_put_async(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  const void *payload, size_t len, int durability, kvt_op **op);

/* Load the leading chunks of `keys` into the first tier before a request
 * needs them, most urgent work first (background copies never delay it).
 * The op completes when every chunk found is in the first tier, when the
 * prefix ends (a chunk in no tier), or at `deadline_ms` from now, whichever
 * comes first; its result is the number of leading chunks now in the first
 * tier (a partial hit: the engine recomputes the rest).  `keys` is copied.
 * A negative deadline is "now": only what is already in the first tier
 * counts.  Submission errors as kvt_get_async. */
KVT_API int kvt_prefetch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		 size_t n_keys, int deadline_ms, kvt_op **op);

/* KVT_EAGAIN while in flight; otherwise the op's result code (KVT_EINVAL
 * for NULL).  Never blocks. */
KVT_API int kvt_op_poll(kvt_op *op);

/* Wait up to timeout_ms (-1: forever; measured on CLOCK_MONOTONIC).
 * KVT_ETIMEDOUT if still in flight (the op goes on), else the op's result
 * code. */
KVT_API int kvt_op_wait(kvt_op *op, int timeout_ms);

/* The detail of a completed op's failure (what kvt_errmsg() said in the
 * worker that ran it); "" while in flight or after success.  Owned by the
 * op: valid until kvt_op_free. */
KVT_API const char *kvt_op_errmsg(kvt_op *op);

/* Bytes transferred by a completed op (0 while in flight, for NULL). */
KVT_API uint64_t kvt_op_bytes(const kvt_op *op);

/* Free an op.  Freeing an op still in flight waits for it first; NULL is a
 * no-op. */
KVT_API void kvt_op_free(kvt_op *op);

/* Pin (`pin` nonzero) or unpin a chunk in every tier that holds it: a
 * pinned chunk is never chosen for eviction (a shared system prompt).  Pins
 * nest.  0, KVT_ENOTFOUND if no tier holds it, KVT_ENOTSUP if a tier that
 * holds it has no eviction policy to pin in (S3's listing decides there).
 * In memory only: pins do not survive the process. */
KVT_API int kvt_pin(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int pin);

/* --- tenants' shares ----------------------------------------------------- */

/* A store shared by tenants (the `tenants` of the configuration) charges
 * each chunk a put stores to the tenant whose namespace it was put under:
 * the tenant kvt_ns_init resolved (a namespace from kvt_config_ns, and a
 * chunk found on disk at open, are the default tenant's).  A copy of it in
 * another tier (promotion, demotion, write-through) stays charged to that
 * tenant.  Per tier, a tenant may have:
 *  - a quota: past it, the tenant's own least valuable chunks (by the
 *    tier's eviction policy, among the tenant's) leave the tier, so one
 *    tenant cannot fill it;
 *  - a reservation: when the tier is full, chunks are taken from the tenant
 *    furthest above its reservation, and never from one at or under it, so
 *    another tenant's flood cannot push it below its share.
 * Without quotas or reservations the tier evicts among all tenants' chunks
 * as each tenant's policy ranks them, the fullest tenant first.  The
 * default tenant is named NULL.
 *
 * Set tenant `tenant`'s quota (0: none) and reservation in tier `tier`, in
 * bytes, rounded to the tier's accounting unit (a DRAM page, a disk block).
 * Takes effect at once: a quota under the tenant's usage evicts down to it
 * now.  0, or KVT_EINVAL (a tier out of range, a reservation above the
 * quota, or reservations of all tenants together above what the tier's
 * policy holds: kvt_tenant_usage.capacity), KVT_ETENANT (not configured),
 * KVT_ENOTSUP (a tier without an eviction policy: unbounded S3). */
KVT_API int kvt_store_set_quota(kvt_store *st, const char *tenant, int tier,
			uint64_t quota, uint64_t reserve);

/* Put a reloaded configuration's policies in force in a running store (a
 * daemon's SIGHUP): for every tier, its admission (the counts it kept
 * start over when it changes), write mode, background bandwidth and
 * eviction policy (rebuilt over what the tier holds, recency and pins
 * carried over; chunks it then finds over capacity are evicted), and the
 * store's ttl.  Every other key — capacities, paths, endpoints, the tier
 * set, tenants — takes effect at the next open only: their names are
 * written to `later` (when not NULL; "" when none differs), for the caller
 * to say so.  0, or KVT_ENOTSUP (an eviction policy added to or removed
 * from a tier: at the next open only; the rest was applied), KVT_ENOMEM,
 * KVT_EINVAL. */
KVT_API int kvt_store_reconfigure(kvt_store *st, const kvt_config *cfg, char *later,
				  size_t later_len);

typedef struct kvt_tenant_usage {
	uint64_t bytes;           /* held in the tier, in accounting units */
	uint64_t chunks;
	uint64_t quota, reserve;  /* as set (bytes, rounded); quota 0 = none */
	uint64_t capacity;        /* what the tier's policy holds, all tenants */
	uint64_t quota_evictions; /* chunks it lost to its own quota */
	uint64_t share_evictions; /* chunks it lost to room for others (or
				   * for itself) in a full tier */
} kvt_tenant_usage;

/* Fill `out` with tenant `tenant`'s share of tier `tier`.  0, KVT_EINVAL,
 * KVT_ETENANT or KVT_ENOTSUP, as kvt_store_set_quota. */
KVT_API int kvt_store_tenant_usage(kvt_store *st, const char *tenant, int tier,
			   kvt_tenant_usage *out);

/* --- statistics ---------------------------------------------------------- */

typedef struct kvt_tier_stats {
	char name[16];            /* "dram", "nvme", ... */
	uint64_t capacity_bytes;  /* what the tier may hold */
	uint64_t used_bytes;      /* what it holds now (whole pages) */
	uint64_t chunks;          /* objects it holds */
	uint64_t hits, misses;
	uint64_t puts, put_exists, put_rejects; /* rejects: full / too big */
	uint64_t bytes_in, bytes_out;
	uint64_t evictions, evicted_bytes;
	uint64_t corrupt;         /* objects dropped because they failed checks */
	uint64_t borrowed;        /* references outstanding now */
	uint64_t promotions;      /* chunks copied from this tier up to the first */
	uint64_t demotions;       /* chunks this tier took from the tier above */
	uint64_t admit_rejects;   /* chunks its admission policy turned away */
	uint64_t policy_evictions;/* of `evictions`, those its policy chose */
	uint64_t pinned;          /* pins held now */
	uint64_t write_errors;    /* puts that failed with an I/O error */
	double read_gbps;         /* measured read bandwidth (EWMA), GB/s */
	double read_latency_us;   /* measured fixed cost of a read (EWMA) */
	uint64_t get_latency_log2_us[24]; /* reads served (gets and borrows):
					   * [i] took < 2^i us */
	uint32_t writes_off;      /* 1 while the store admits no writes to the
				   * tier after repeated I/O errors (it keeps
				   * serving reads) */
	char last_write_error[160]; /* why the last failed write to the tier
				     * failed ("" if none has) */
	uint32_t unreachable;     /* 1 while the tier's endpoint does not answer
				   * (its index is then not known to be
				   * complete: a miss may be a false one) */
	uint32_t read_only;       /* 1 if the tier was opened for reading only */
	uint64_t bad_listed;      /* objects found bad and left in place, listed
				   * by kvtier verify */
	uint64_t read_errors;     /* gets that failed other than by a miss */
	char state[160];          /* why the tier is degraded ("" if healthy) */
} kvt_tier_stats;

/* The store's KV events (the configuration's kv_events; docs/EVENTS.md). */
typedef struct kvt_events_stats {
	uint64_t batches;       /* KVEventBatch messages published */
	uint64_t events;        /* events in them */
	uint64_t dropped;       /* events dropped: the publisher's queue was full */
	uint64_t send_failures; /* batches the PUB socket refused (kept for replay) */
	uint64_t replays;       /* replay requests answered */
	uint64_t replay_errors; /* malformed replay requests (answered with an error) */
	uint64_t last_seq;      /* the last batch's sequence number */
	uint64_t queued;        /* events waiting for the publisher now */
	uint32_t enabled;       /* 1 when the store publishes events */
} kvt_events_stats;

/* Chunk `key` holds the engine's KV blocks hashes[0..n_hashes), each
 * hash_len bytes (32: vLLM's sha256_cbor digest; 8: its 64-bit integer
 * form, big-endian), following the block `parent` (NULL for a prompt's
 * first), block_size tokens each: the store's KV events then name the
 * chunk by them, as the engine's own events do, so that a router indexing
 * the engine's hashes matches the chunk (docs/EVENTS.md).  Remembered for
 * the most recent chunks named (a bounded table); a store that is
 * kvtierd's client tells the daemon.  0 (also when events are off), or
 * KVT_EINVAL for more than 16 hashes or another hash length. */
#define KVT_CHUNK_NAME_MAX 16 /* engine blocks a named chunk holds at most */
KVT_API int kvt_store_name_chunk(kvt_store *st, const kvt_key *key, const uint8_t *hashes,
				 uint32_t n_hashes, uint32_t hash_len, const uint8_t *parent,
				 uint32_t block_size);

/* Fill `out` with the store's event counters (all zero, enabled 0, when it
 * publishes none).  0 or KVT_EINVAL. */
KVT_API int kvt_store_events_stats(kvt_store *st, kvt_events_stats *out);

/* Wait until the background work queued so far (promotions of hits in lower
 * tiers, write-through to lower tiers, demotions, and what those queue in
 * turn) has run, or `timeout_ms` passes (-1: no limit).  0 or
 * KVT_ETIMEDOUT.  A copy that failed is counted in its tier's
 * write_errors and last_write_error; kvt_locate then says where each chunk
 * is.  A short-lived process that put chunks calls this before it exits. */
KVT_API int kvt_store_flush(kvt_store *st, int timeout_ms);

/* Which tiers hold `key` now: bit i of *mask for tier i.  From memory, like
 * kvt_lookup.  Returns how many, or a negative code. */
KVT_API int kvt_locate(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       uint32_t *mask);

/* Number of tiers of the store (0 for NULL). */
KVT_API int kvt_store_tiers(const kvt_store *st);

/* Fill `out` for tier `tier` (0 = fastest).  0 or KVT_EINVAL (a tier
 * index out of range).  A snapshot: counters are read without stopping
 * the store, so two of them may be from instants a few operations apart. */
KVT_API int kvt_store_stats(kvt_store *st, int tier, kvt_tier_stats *out);

/* Call `fn` for each chunk of tier `tier` with its key and payload length.
 * A nonzero return from `fn` stops the walk and is returned.  Chunks put or
 * evicted during the walk may or may not be seen.  KVT_EINVAL for a NULL
 * `fn` or a tier out of range.  `fn` may call into the store (CONVENTIONS). */
KVT_API int kvt_store_iterate(kvt_store *st, int tier,
		      int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		      void *arg);

/* What the header of chunk `key` in tier `tier` says (*info: its key,
 * namespace digest, layout, payload length; signature KVT_SIG_UNCHECKED),
 * and bytes [off, off + len) of its payload copied into `buf`, reading
 * nothing else where the tier can: the file tiers read the header's 4 KiB
 * and the blocks that hold the range; the others borrow the image.  For a
 * reader that lists a tier and needs each chunk's header and a few bytes
 * of it (kvtierd rebuilds its keys from their last bytes) without reading
 * gigabytes.  NOTHING IS VERIFIED but the header's own checksum: neither a
 * layer's checksum nor an HMAC tag, nor the TTL; a reader that acts on the
 * bytes checks them itself, and one that needs the payload whole reads it
 * with kvt_get.  len 0 reads the header alone (`buf` may then be NULL).
 * Returns 0, or:
 *   KVT_ENOTFOUND   the tier does not hold `key`
 *   KVT_EINVAL      a NULL pointer, a tier out of range, a range past the
 *                   payload's end
 *   KVT_EBADMAGIC, KVT_EVERSION, KVT_EHDRCSUM, KVT_EMALFORMED, KVT_ELAYOUT
 *                   a damaged header (kvt_object_inspect_fd's codes)
 *   KVT_EMISMATCH   the header names another key
 *   KVT_ETRUNCATED  the stored image is shorter than its header declares
 *   a negated errno from the medium (kvt_errmsg() names the file).
 * The tier is not changed: a damaged object is reported, never dropped;
 * kvt_get or kvt_store_verify judges it. */
KVT_API int kvt_store_peek(kvt_store *st, int tier, const kvt_key *key, kvt_object_info *info,
			   uint64_t off, void *buf, size_t len);

/* --- serving the node's processes (kvtierd; docs/DAEMON.md) -------------
 *
 * A store opened with the configuration key `daemon: unix:///path` (or
 * KVTIER_DAEMON) is a client of the daemon listening there: every call
 * above works on it unchanged, its one tier being the daemon's whole
 * store, the data moving through shared memory (a put costs one copy, a
 * get one, a borrow none).  kvt_local_serve is the daemon's side: it
 * serves `st` on a Unix socket at o->path.  The store's first tier must be
 * DRAM with `dram_shared: true`: its arena is what clients map.  Every
 * process that can open the socket can read and write that arena (every
 * chunk in DRAM), so it is created with mode o->mode (0: 0660) and only
 * peers of the daemon's own uid, root, or a uid in o->uids are served.
 * A connection acts as the tenant o->tenant_of names for its peer's uid
 * (a tenant of the store's configuration; NULL, or no tenant_of: the
 * default tenant): its puts are charged to that tenant's quotas.  A name
 * the store does not know refuses the connection. */
typedef struct kvt_local_server kvt_local_server;
typedef struct kvt_local_opts {
	const char *path;
	unsigned mode;
	const uint32_t *uids;
	size_t n_uids;
	const char *(*tenant_of)(void *arg, uint32_t uid);
	void *tenant_arg;
} kvt_local_opts;

/* 0, KVT_ECONFIG (no shared DRAM tier first), KVT_EINVAL, or -errno from
 * the socket (-EADDRINUSE: another daemon listens there). */
KVT_API int kvt_local_serve(kvt_store *st, const kvt_local_opts *o, kvt_local_server **out);
/* Stop accepting, close every client (releasing what each held) and
 * remove the socket.  Before kvt_store_close. */
KVT_API void kvt_local_stop(kvt_local_server *s);

/* What kvt_store_verify found. */
typedef struct kvt_verify_result {
	uint64_t checked;      /* objects read and verified, bad ones included */
	uint64_t bad;          /* objects that failed, wherever found */
	uint64_t unverifiable; /* of `bad`, those only unverifiable here: a
				* newer format, a tag without its key */
	uint64_t repaired;     /* of `bad`, those moved into the quarantine */
	uint64_t bytes;        /* payload bytes verified */
} kvt_verify_result;

/* Read every chunk of tier `tier` and check it whole: header, key, every
 * layer's checksum (an fsck), and list the objects the tier found bad
 * before (at open, on a read) and left in place.  Each bad object is
 * reported to `bad_fn` (may be NULL) with its key, KVT_ECORRUPT (damaged)
 * or KVT_ENOTSUP (not verifiable here), and the reason with its path (a
 * string valid during the call).  Without `drop` nothing on any medium
 * changes: a bad copy is only no longer served.  With `drop` (repair) each
 * damaged object is moved into the tier's quarantine directory
 * (<dir>/quarantine/<hex>.<time>.kvt, with a .why file beside it); a
 * shared tier leaves what it merely cannot verify, since another node may
 * read it.  Chunks put or evicted meanwhile may or may not be seen.
 * Returns 0 or a negative code (-EROFS: `drop` on a read-only store;
 * KVT_EINVAL: a tier out of range, `res` NULL); the tally is in *res.
 * `bad_fn` may call into the store (CONVENTIONS). */
KVT_API int kvt_store_verify(kvt_store *st, int tier, int drop,
		     void (*bad_fn)(void *arg, const kvt_key *key, int err,
				    const char *why),
		     void *arg, kvt_verify_result *res);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_STORE_H */
