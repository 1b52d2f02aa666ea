/*
 * evict.h — eviction policies: which resident object goes when room is needed.
 *
 * A policy is a pure bookkeeping module.  It never touches bytes, files,
 * clocks, threads or globals: it sees a stream of (id, size) accesses and
 * answers hit or miss, admits what it is told to admit and names the victims
 * it pushed out.  That is what lets the store (which moves the bytes) and a
 * capacity planner (which replays a trace) run exactly the same code and get
 * exactly the same answers.  Every call is O(1) (amortised over the growth of
 * the internal tables); the same sequence of calls always gives the same
 * results.
 *
 * Objects are named by a uint64_t id (the first 8 bytes of a kvt_key, or a
 * trace block id) and weigh `size` units of the capacity: bytes for a byte
 * capacity, 1 for a capacity counted in chunks.
 *
 * Policies (enum kvt_evict_kind):
 *
 * - LRU: one recency list.  A hit moves the object to the head; a miss
 *   inserts at the head; victims leave from the tail.
 * - S3-FIFO (Yang et al., SOSP'23): a small FIFO S (small_pct of capacity,
 *   default 10%), a main FIFO M and a ghost FIFO G that remembers only ids.
 *   A hit raises the object's 2-bit frequency (saturating at 3) and moves
 *   nothing.  A miss inserts into S, or straight into M when the id is in G
 *   (it was evicted from S recently and came back: it is not a one-hit
 *   wonder).  To make room: while S holds at least its share, the tail of S
 *   goes to M if it was hit at least `s3_promote` times since it entered S
 *   (its frequency is reset for M), else it leaves the cache and its id goes
 *   to G; otherwise the tail of M is reinserted at M's head with frequency
 *   minus one if its frequency is non-zero, else it leaves.  G keeps ids
 *   whose sizes sum to at most M's share and forgets the oldest first; an
 *   id that returns leaves G before room is made for it (as libCacheSim).
 *   With s3_fill_main, until the first eviction a new object goes to M
 *   once S holds its share (libCacheSim's S3FIFO); else always to S.
 *   One-hit wonders (a scan) pass through S and never disturb M.
 *
 * Pinning: a pinned object is never evicted and still counts against the
 * capacity.  Pins nest (pin twice, unpin twice).  An insert that could not
 * fit even after evicting every unpinned object fails with KVT_EFULL before
 * evicting anything.
 *
 * Victims are reported through the on_victim callback, synchronously, inside
 * the insert that caused them, in eviction order, so a store can demote them
 * to the tier below.  The callback must not call back into the same
 * kvt_evict (it may freely use other ones, e.g. the lower tier's).
 *
 * Thread safety: none.  A kvt_evict belongs to one thread at a time (the
 * store serialises access under its index lock).
 */
#ifndef KVT_POLICY_EVICT_H
#define KVT_POLICY_EVICT_H

#include <stdint.h>

#include "kvtier.h"

enum kvt_evict_kind {
	KVT_EVICT_LRU = 1,
	KVT_EVICT_S3FIFO = 2,
};

/* Called once per object the policy evicted, with the id and size it was
 * inserted with.  The object is already gone from the policy. */
typedef void (*kvt_evict_victim_fn)(void *arg, uint64_t id, uint64_t size);

struct kvt_evict_conf {
	enum kvt_evict_kind kind;
	uint64_t capacity;          /* units; > 0 */
	uint64_t expected_objects;  /* sizing hint for the tables; 0 = grow from small */
	uint32_t small_pct;         /* S3-FIFO: share of S in percent, 1..90; 0 = 10 */
	uint32_t s3_promote;        /* S3-FIFO: hits in S needed to move to M; 0 = 1 */
	/* S3-FIFO: 1 = until the first eviction, a new object goes to M once
	 * S holds its share (libCacheSim's S3FIFO); 0 = always to S (the
	 * paper's rule, the store's; docs/POLICIES.md says why). */
	int s3_fill_main;
	kvt_evict_victim_fn on_victim; /* may be NULL */
	void *victim_arg;
	/* > 0: every id is < id_limit (dense ids, as a parsed trace's): the
	 * id -> object map is then a flat array of id_limit entries instead of
	 * a hash table (same results, no hashing or probing).  An id outside
	 * is never resident and cannot be inserted (KVT_EINVAL).  0: any id. */
	uint64_t id_limit;
};

typedef struct kvt_evict kvt_evict;

/* Create a policy; *out owns its memory until kvt_evict_destroy.  Returns 0,
 * KVT_EINVAL (kind, capacity or small_pct out of range) or KVT_ENOMEM. */
int kvt_evict_create(const struct kvt_evict_conf *conf, kvt_evict **out);

/* Free everything; NULL is a no-op.  Reports no victims. */
void kvt_evict_destroy(kvt_evict *e);

/* The policy's name ("lru", "s3fifo"). */
const char *kvt_evict_name(const kvt_evict *e);

/* A read: 1 and the policy's hit bookkeeping (LRU: to the head; S3-FIFO:
 * frequency + 1) if `id` is resident, else 0 and no change.  Use it with
 * kvt_evict_insert when an admission filter sits between miss and insert. */
int kvt_evict_lookup(kvt_evict *e, uint64_t id);

/* Make `id` resident, evicting victims as needed.  Returns 0 on success,
 * KVT_EEXIST if it is already resident (nothing changes), KVT_ETOOBIG if size
 * exceeds the capacity or is 0, KVT_EFULL if pinned objects leave no room,
 * KVT_ENOMEM if a table could not grow (nothing was evicted). */
int kvt_evict_insert(kvt_evict *e, uint64_t id, uint64_t size);

/* lookup, then insert on a miss: 1 hit, 0 miss (now resident), or an insert
 * error (then not resident). */
int kvt_evict_access(kvt_evict *e, uint64_t id, uint64_t size);

/* kvt_evict_access(e, ids[i], 1) for each of ids[0..n) in order (a trace
 * request's blocks, in one call): the leading hits, before the first miss,
 * into *lead, and every hit into *hits.  0, or the first insert error (the
 * ids after it are not accessed). */
int kvt_evict_access_seq(kvt_evict *e, const uint32_t *ids, size_t n, uint64_t *lead,
			 uint64_t *hits);

/* Drop `id` without reporting it as a victim (the store deleted it, or moved
 * it elsewhere).  0, or KVT_ENOTFOUND if not resident.  Pinned objects are
 * removed too: the caller that deletes knows better. */
int kvt_evict_remove(kvt_evict *e, uint64_t id);

/* Pin / unpin a resident object.  0, KVT_ENOTFOUND (not resident) or
 * KVT_EINVAL (unpin of an object that is not pinned). */
int kvt_evict_pin(kvt_evict *e, uint64_t id);
int kvt_evict_unpin(kvt_evict *e, uint64_t id);

/* 1 if `id` is resident, else 0.  Changes nothing (not even recency). */
int kvt_evict_contains(const kvt_evict *e, uint64_t id);

/* Units held by resident objects (pinned included); always <= capacity. */
uint64_t kvt_evict_used(const kvt_evict *e);
uint64_t kvt_evict_capacity(const kvt_evict *e);
/* Number of resident objects. */
uint64_t kvt_evict_count(const kvt_evict *e);

/* The id the next eviction would look at first (LRU: the tail; S3-FIFO: the
 * tail of S or of M, whichever eviction would start from).  For S3-FIFO this
 * is a candidate, not a promise: a candidate that was hit gets another
 * chance.  TinyLFU admission compares a newcomer against it.  0 and *id set,
 * or KVT_ENOTFOUND if nothing is evictable. */
int kvt_evict_peek_victim(const kvt_evict *e, uint64_t *id);

#endif
