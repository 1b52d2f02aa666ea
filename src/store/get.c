/*
 * get.c — reading a chunk: take the first tier that holds the key in the
 * order the cost model prefers, check that the object is the chunk asked
 * for, verify it where the medium can tear or rot, and promote a lower
 * tier's hit (move.c).  Borrowed references (kvt_borrow), whole images
 * for other nodes (kvt_image_borrow) and batches.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "format/object.h"
#include "key/key.h"
#include "store/config.h"
#include "store/hier.h"
#include "store/store.h"
#include "store/store_int.h"
#include "store/tiers.h"

/* A tier whose reads fetch from elsewhere (peers) reads into DRAM pages
 * directly when it can: one copy fewer than into its own buffer and then
 * up. */
static int fetch_into(const kvt_store *st, int i)
{
	return i > 0 && st->cls[i]->fetches && st->tiers[i]->ops->get_into &&
	       st->kind[0] == KVT_CT_DRAM;
}

/* The order a read asks the tiers in: the node's own first, as configured
 * (fastest first), then the remote ones — another node's daemon, the
 * shared file system, S3 — cheapest first by what the cost model expects a
 * read of `bytes` to take from each: the fixed cost and bandwidth it has
 * measured (planning speeds until it has).  So a decode node fetches from
 * its prefill node when that node answers faster than the shared tiers,
 * and from the shared file system when it does not.  One such read in 32
 * asks the runner-up first, so a tier that was slow once is measured again
 * and can win its place back.  The registry lists every remote kind after
 * the others, so ord[i] == i for the node's own tiers.  `bytes` 0: the
 * caller does not know the size (the local protocol's GET). */
static void read_order(kvt_store *st, uint64_t bytes, int *ord)
{
	double est[KVT_MAX_TIERS];
	int n = 0, first;

	if (!bytes) /* not known to the caller: the last read's, or a chunk's */
		bytes = atomic_load(&st->last_read_bytes);
	if (!bytes)
		bytes = 1u << 20;

	for (int i = 0; i < st->n_tiers; i++)
		if (!st->cls[i]->remote)
			ord[n++] = i;
	first = n;
	for (int i = 0; i < st->n_tiers; i++) {
		int k;
		if (!st->cls[i]->remote)
			continue;
		pthread_mutex_lock(&st->perf[i].mu);
		est[i] = st->perf[i].lat_us * 1e-6 + (double)bytes / (st->perf[i].gbps * 1e9);
		pthread_mutex_unlock(&st->perf[i].mu);
		for (k = n; k > first && est[ord[k - 1]] > est[i]; k--)
			ord[k] = ord[k - 1];
		ord[k] = i;
		n++;
	}
	if (n - first > 1 && (atomic_fetch_add(&st->remote_reads, 1) & 31) == 31) {
		int x = ord[first];
		ord[first] = ord[first + 1];
		ord[first + 1] = x;
	}
}

int store_image_get(kvt_store *st, const kvt_key *key, kvt_tier_rbuf **rb)
{
	kvt_tier *t0 = st->tiers[0];
	int rc = t0->ops->get(t0, key, rb);

	if (rc != KVT_ENOTFOUND)
		return rc;
	/* Held below only: copied up into the first tier now, verified in
	 * the copy (a bad copy is not promoted), then served from there. */
	int ord[KVT_MAX_TIERS];
	read_order(st, 0, ord);
	for (int j = 1; j < st->n_tiers; j++) {
		int i = ord[j];
		kvt_tier *t = st->tiers[i];
		kvt_tier_rbuf *src;
		kvt_obj_hdr h;
		double t_read = store_now_s();

		if (fetch_into(st, i)) {
			rc = store_promote_into(st, NULL, key, i);
			if (rc == 0 || rc == KVT_EEXIST)
				return t0->ops->get(t0, key, rb);
			if (rc != KVT_EFULL && rc != KVT_ENOMEM && rc != KVT_ETOOBIG)
				continue; /* a miss there, or a failure it reported */
		}
		if (t->ops->get(t, key, &src))
			continue;
		if (st->cls[i]->remote)
			store_perf_note(st, i, src->len, store_now_s() - t_read);
		rc = store_image_header(src, &h);
		if (rc == 0)
			rc = store_copy_verified(st, 0, src, &h);
		if (rc <= KVT_EBADMAGIC && rc >= KVT_EMALFORMED) { /* the image is bad */
			t->ops->corrupt(t, src);
			store_forget(st, i, key, KVT_WHY_CORRUPT);
		}
		t->ops->release(t, src);
		if (rc && rc != KVT_EEXIST)
			return rc;
		hier_read(st->hier, i, key, rc == 0);
		return t0->ops->get(t0, key, rb);
	}
	return KVT_ENOTFOUND;
}

double store_held_expired(kvt_store *st, int tier, const kvt_key *key)
{
	kvt_tier *t = st->tiers[tier];
	kvt_tier_rbuf *rb;
	kvt_obj_hdr h;
	double born = 0;

	if (!__atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED) || t->ops->get(t, key, &rb))
		return 0;
	if (store_image_header(rb, &h) == 0 && store_expired(st, &h))
		born = (double)h.created_ns / 1e9;
	t->ops->release(t, rb);
	return born;
}

/* What a borrow's failed tiers said: a miss after some tier failed says
 * what failed (an unreachable endpoint or a failing disk is not "no chunk
 * under that key"), and one after bad copies says so.  `failed` and `bad`
 * hold the first such error; `why` the message of the one noted first. */
struct borrow_notes {
	char why[384];
	int failed, bad;
};

static void note_failure(struct borrow_notes *bn, int *first, int rc, const char *tier)
{
	if (*first)
		return;
	*first = rc;
	snprintf(bn->why, sizeof(bn->why), "%s tier: %s",
		 tier, kvt_errmsg()[0] ? kvt_errmsg() : kvt_strerror(rc));
}

/* A reference to the image `rb` tier t lent, its header decoded into it:
 * *rc 0, or why the header is bad.  NULL, with *rc KVT_ENOMEM and `rb`
 * given back, if there is no memory for it. */
static kvt_ref *ref_of(kvt_store *st, kvt_tier *t, kvt_tier_rbuf *rb, int *rc)
{
	kvt_ref *ref = calloc(1, sizeof(*ref));

	if (!ref) {
		t->ops->release(t, rb);
		*rc = kvt_err(KVT_ENOMEM, "out of memory");
		return NULL;
	}
	ref->st = st;
	ref->tier = t;
	ref->rb = rb;
	*rc = store_image_header(rb, &ref->hdr);
	return ref;
}

/* Tier i's copy failed its checks (`rc`): logged, noted, and no longer
 * served by the tier (unless only memory ran out). */
static void borrow_bad(kvt_store *st, int i, const kvt_key *key, kvt_tier_rbuf *rb, int rc,
		       struct borrow_notes *bn)
{
	kvt_tier *t = st->tiers[i];
	char hex[65];

	kvt_key_hex(key, hex);
	kvt_log(KVT_LOG_WARN, "%s tier: not serving %s: %s (%s)", t->ops->name, hex,
		kvt_strerror(rc), kvt_errmsg());
	if (!bn->failed)
		note_failure(bn, &bn->bad, rc, t->ops->name);
	if (rc != KVT_ENOMEM) {
		t->ops->corrupt(t, rb);
		store_forget(st, i, key, KVT_WHY_CORRUPT);
	}
}

/* Read `key` from tier i (on the device when `dev` and the tier can) and
 * check the image is the chunk asked for: 0 with *out, KVT_ENOTFOUND to
 * go on to the next tier (a miss, another namespace's chunk, one past its
 * TTL, a failed read or a bad copy, noted in bn), or KVT_ENOMEM (no
 * memory for the reference). */
static int borrow_from(kvt_store *st, int i, const kvt_ns *ns, const kvt_key *key, int dev,
		       struct borrow_notes *bn, kvt_ref **out)
{
	kvt_tier *t = st->tiers[i];
	int on_dev = dev && t->ops->get_dev, rc;
	double t0 = st->cls[i]->remote ? store_now_s() : 0;
	kvt_tier_rbuf *rb;
	kvt_ref *ref;

	rc = on_dev ? t->ops->get_dev(t, key, &rb) : t->ops->get(t, key, &rb);
	if (rc == KVT_ENOTFOUND)
		return rc;
	if (rc == 0 && st->cls[i]->remote)
		/* the read is the transfer: what the cost model learns */
		store_perf_note(st, i, rb->len, store_now_s() - t0);
	if (rc < 0) {
		kvt_log(KVT_LOG_WARN, "%s tier: read failed: %s (%s)",
			t->ops->name, kvt_strerror(rc), kvt_errmsg());
		if (rc > KVT_ERR_BASE || rc == KVT_ETIMEDOUT)
			note_failure(bn, &bn->failed, rc, t->ops->name);
		else if (!bn->failed)
			note_failure(bn, &bn->bad, rc, t->ops->name);
		return KVT_ENOTFOUND;
	}
	if (!(ref = ref_of(st, t, rb, &rc)))
		return rc;
	ref->dev = on_dev;
	if (rc == 0)
		rc = kvt_obj_hdr_expect(&ref->hdr, ns, key);
	if (rc == 0)
		rc = store_image_whole(rb->len, &ref->hdr);
	if (rc == 0)
		rc = store_payload_iov(rb, KVT_OBJ_HEADER_BYTES, &ref->iov, &ref->n_iov);
	if (rc == 0 && store_expired(st, &ref->hdr))
		/* Past its TTL: a miss.  A read removes nothing: the next put
		 * of the key replaces it (store_put), and eviction or GC
		 * reclaims it. */
		rc = KVT_ENOTFOUND;
	else if (rc && rc != KVT_EMISMATCH) /* another namespace's chunk under
					     * this key is not ours to drop */
		borrow_bad(st, i, key, rb, rc, bn);
	if (rc) {
		store_ref_free(ref);
		return KVT_ENOTFOUND;
	}
	*out = ref;
	return 0;
}

/* Tier i fetches over the network into no memory of its own: copy its
 * read up into the first tier (verified as it is copied), so the next
 * read finds it there.  1: copied (ref is let go; read again from the
 * first tier); 0: serve `ref` as it is (no room above); -1: the copy
 * failed its checks (ref is let go). */
static int borrow_copy_up(kvt_store *st, int i, const kvt_key *key, kvt_ref *ref,
			  struct borrow_notes *bn)
{
	int rc = store_copy_verified(st, 0, ref->rb, &ref->hdr);

	if (rc == 0 || rc == KVT_EEXIST) {
		hier_read(st->hier, i, key, 1);
		store_ref_free(ref);
		return 1;
	}
	if (rc == KVT_ECORRUPT) {
		borrow_bad(st, i, key, ref->rb, rc, bn);
		store_ref_free(ref);
		return -1;
	}
	return 0;
}

/* Borrow `key` from the first tier that holds a valid copy.  Bad copies are
 * dropped from their tier (counted there) and the search goes on. */
int store_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		 kvt_ref **out, int *tier_out, int dev)
{
	struct borrow_notes bn = { .why = "" };
	int ord[KVT_MAX_TIERS], ordered = 0, copied_up = 0;

	for (int j = 0; j < st->n_tiers; j++) {
		int i = ordered ? ord[j] : j, rc;
		kvt_ref *ref = NULL;

		if (!ordered && st->n_remote > 1 && st->cls[j]->remote) {
			read_order(st, KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout),
				   ord);
			ordered = 1;
			i = ord[j];
		}
		if (fetch_into(st, i) && !copied_up) {
			/* Fetched over the network straight into DRAM pages,
			 * checked there, and the read served from DRAM. */
			rc = store_promote_into(st, ns, key, i);
			if (rc == 0 || rc == KVT_EEXIST) {
				copied_up = 1;
				ordered = 0;
				j = -1;
				continue;
			}
			if (rc == KVT_ENOTFOUND)
				continue;
			if (rc != KVT_EFULL && rc != KVT_ENOMEM && rc != KVT_ETOOBIG) {
				const char *name = st->tiers[i]->ops->name;
				kvt_log(KVT_LOG_WARN, "%s tier: read failed: %s (%s)", name,
					kvt_strerror(rc), kvt_errmsg());
				if (!bn.failed && rc > KVT_ERR_BASE)
					note_failure(&bn, &bn.failed, rc, name);
				else if (!bn.failed && !bn.bad)
					note_failure(&bn, &bn.bad, rc, name);
				continue;
			}
			/* no room above: the tier's own buffer */
		}
		if ((rc = borrow_from(st, i, ns, key, dev, &bn, &ref)) == KVT_ENOTFOUND)
			continue;
		if (rc)
			return rc;
		if (st->cls[i]->fetches && i > 0 && !copied_up) {
			rc = borrow_copy_up(st, i, key, ref, &bn);
			if (rc == 1) {
				copied_up = 1;
				ordered = 0;
				j = -1;
			}
			if (rc)
				continue;
		}
		hier_read(st->hier, i, key, 0);
		*out = ref;
		*tier_out = i;
		return 0;
	}
	if (bn.failed)
		return kvt_err(bn.failed, "%s", bn.why);
	if (bn.bad)
		return kvt_err(KVT_ENOTFOUND, "no good copy under that key: %s", bn.why);
	return kvt_err(KVT_ENOTFOUND, "no chunk under that key");
}

void store_ref_free(kvt_ref *ref)
{
	ref->tier->ops->release(ref->tier, ref->rb);
	free(ref->iov);
	free(ref);
}

/* Drop the borrowed copy that failed verification (exactly that one: a
 * good copy published since stays), then let go of it. */
int store_ref_check_layer(kvt_ref *ref, int tier, const kvt_key *key, uint32_t layer)
{
	int rc;

	if (!ref->st->verify[tier] || ref->dev)
		return 0;
	rc = kvt_obj_verify_layer_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov, layer);
	if (rc == KVT_ECORRUPT)
		store_drop_corrupt(ref, key);
	return rc;
}

void store_each_arena(kvt_store *st, void (*fn)(void *arg, void *base, size_t len),
		      void *arg)
{
	for (int i = 0; i < st->n_tiers; i++) {
		const struct kvt_tier_pages *p = st->tiers[i]->ops->pages;
		void *base;
		size_t len;
		if (p && p->arena(st->tiers[i], &base, &len) == 0)
			fn(arg, base, len);
	}
}

void store_drop_corrupt(kvt_ref *ref, const kvt_key *key)
{
	char hex[65];
	kvt_tier *t = ref->tier;

	kvt_key_hex(key, hex);
	kvt_log(KVT_LOG_WARN, "%s tier: chunk %s failed verification: %s",
		t->ops->name, hex, kvt_errmsg());
	t->ops->corrupt(t, ref->rb);
	for (int i = 0; i < ref->st->n_tiers; i++)
		if (ref->st->tiers[i] == t)
			store_forget(ref->st, i, key, KVT_WHY_CORRUPT);
	store_ref_free(ref);
}

int kvt_get(kvt_store *st, const kvt_ns *ns, const kvt_key *key, void *buf,
	    size_t cap, size_t *len)
{
	kvt_ref *ref;
	int rc, tier;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	for (;;) {
		double t0 = store_now_s();
		if ((rc = store_borrow(st, ns, key, &ref, &tier, 0))) {
			if (rc == KVT_ENOTFOUND)
				store_count_miss(st, store_ns_acct(st, ns), key);
			return rc;
		}
		if (len)
			*len = ref->hdr.payload_len;
		if (!buf || cap < ref->hdr.payload_len) {
			store_ref_free(ref);
			return kvt_err(KVT_ESMALL, "buffer of %zu bytes, chunk is %llu",
				       cap, (unsigned long long)(len ? *len : 0));
		}
		rc = kvt_obj_read_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov, buf,
				      cap, st->verify[tier]);
		if (rc == KVT_ECORRUPT) {
			store_drop_corrupt(ref, key);
			continue; /* a lower tier may hold a good copy */
		}
		store_ref_free(ref);
		if (rc == 0) {
			if (!st->cls[tier]->remote) /* a remote read noted itself */
				store_perf_note(st, tier, KVT_OBJ_HEADER_BYTES + (len ? *len : 0),
						store_now_s() - t0);
			store_promote(st, tier, key);
		}
		return rc;
	}
}

int kvt_get_layer(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  uint32_t layer, void *buf, size_t cap)
{
	kvt_ref *ref;
	int rc, tier;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	for (;;) {
		if ((rc = store_borrow(st, ns, key, &ref, &tier, 0)))
			return rc;
		if (layer >= ref->hdr.n_layers) {
			uint32_t n = ref->hdr.n_layers;
			store_ref_free(ref);
			return kvt_err(KVT_EINVAL, "layer %u of a %u-layer chunk", layer, n);
		}
		rc = kvt_obj_read_layer_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov,
					    layer, buf, cap);
		if (rc == KVT_ECORRUPT) {
			store_drop_corrupt(ref, key);
			continue;
		}
		store_ref_free(ref);
		return rc;
	}
}

int kvt_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       kvt_ref **ref)
{
	int rc, tier;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	if (!ref)
		return kvt_err(KVT_EINVAL, "reference output missing");
	for (;;) {
		/* A borrow is a read served: it counts in the latency histogram
		 * (a daemon serves most reads so), but not in the bandwidth the
		 * cost model learns, since from memory it copies nothing. */
		double t0 = store_now_s();
		if ((rc = store_borrow(st, ns, key, ref, &tier, 0))) {
			*ref = NULL; /* not a dropped copy's dangling pointer */
			if (rc == KVT_ENOTFOUND)
				store_count_miss(st, store_ns_acct(st, ns), key);
			return rc;
		}
		if (st->verify[tier] &&
		    kvt_obj_verify_iov(&(*ref)->hdr, (*ref)->rb->iov, (*ref)->rb->n_iov)) {
			store_drop_corrupt(*ref, key);
			continue;
		}
		store_perf_hist(st, tier, store_now_s() - t0);
		return 0;
	}
}

int kvt_ref_iov(const kvt_ref *ref, const struct iovec **iov, int *n_iov)
{
	if (!ref || !iov || !n_iov)
		return kvt_err(KVT_EINVAL, "reference or outputs missing");
	*iov = ref->iov;
	*n_iov = ref->n_iov;
	return 0;
}

uint64_t kvt_ref_len(const kvt_ref *ref)
{
	return !ref ? 0 : ref->image ? ref->rb->len : ref->hdr.payload_len;
}

int kvt_ref_verify(const kvt_ref *ref)
{
	if (!ref)
		return kvt_err(KVT_EINVAL, "reference missing");
	return kvt_obj_verify_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov);
}

int kvt_ref_read_layer(const kvt_ref *ref, uint32_t layer, void *buf, size_t cap)
{
	if (!ref || !buf)
		return kvt_err(KVT_EINVAL, "reference or buffer missing");
	if (layer >= ref->hdr.n_layers)
		return kvt_err(KVT_EINVAL, "layer %u of a %u-layer chunk", layer, ref->hdr.n_layers);
	return kvt_obj_read_layer_iov(&ref->hdr, ref->rb->iov, ref->rb->n_iov, layer, buf, cap);
}

void kvt_release(kvt_ref *ref)
{
	if (ref)
		store_ref_free(ref);
}

int kvt_image_borrow(kvt_store *st, const kvt_key *key, kvt_ref **out)
{
	kvt_err_clear();
	if (!st || !key || !out)
		return kvt_err(KVT_EINVAL, "store, key or reference output missing");
	for (int i = 0; i < st->n_tiers; i++) {
		kvt_tier *t = st->tiers[i];
		kvt_tier_rbuf *rb;
		kvt_ref *ref;
		int rc;

		if (st->cls[i]->remote || t->ops->get(t, key, &rb))
			continue;
		if (!(ref = ref_of(st, t, rb, &rc)))
			return rc;
		ref->image = 1;
		if (rc == 0)
			rc = store_image_whole(rb->len, &ref->hdr);
		if (rc == 0 && st->verify[i])
			rc = kvt_obj_verify_iov(&ref->hdr, rb->iov, rb->n_iov);
		if (rc == 0 && !(ref->iov = malloc((size_t)rb->n_iov * sizeof(*ref->iov))))
			rc = kvt_err(KVT_ENOMEM, "out of memory");
		if (rc == KVT_ENOMEM) {
			t->ops->release(t, rb);
			free(ref);
			return rc;
		}
		if (rc) {
			char hex[65];
			kvt_key_hex(key, hex);
			kvt_log(KVT_LOG_WARN, "%s tier: not serving %s to a peer: %s (%s)",
				t->ops->name, hex, kvt_strerror(rc), kvt_errmsg());
			t->ops->corrupt(t, rb);
			store_forget(st, i, key, KVT_WHY_CORRUPT);
			t->ops->release(t, rb);
			free(ref);
			continue;
		}
		memcpy(ref->iov, rb->iov, (size_t)rb->n_iov * sizeof(*ref->iov));
		ref->n_iov = rb->n_iov;
		hier_read(st->hier, i, key, 0);
		*out = ref;
		return 0;
	}
	return kvt_err(KVT_ENOTFOUND, "no chunk under that key on this node");
}

int kvt_get_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  void *const *bufs, size_t cap, size_t n, int *results)
{
	int ok = 0;

	if (!keys || !bufs)
		return kvt_err(KVT_EINVAL, "keys or buffers missing");
	for (size_t i = 0; i < n; i++) {
		int rc = kvt_get(st, ns, &keys[i], bufs[i], cap, NULL);
		if (results)
			results[i] = rc;
		if (rc == 0)
			ok++;
	}
	return ok;
}
