/*
 * put.c — writing a chunk: the payload is encoded into an object image
 * straight in the first tier's memory (checksums in the same pass), then
 * published there and copied to the tiers below as the durability asked
 * for demands; the rest goes write-through in the background (move.c).
 * Also the in-place puts (kvt_put_reserve) and the images the local
 * server's clients write (store_image_begin/commit).
 */
#include <errno.h>
#include <stdlib.h>

#include "common/err.h"
#include "format/object.h"
#include "store/hier.h"
#include "store/store_int.h"
#include "store/tiers.h"

/* Whether some tier survives the process (a durability beyond cached). */
static int store_has_persistent(const kvt_store *st)
{
	for (int i = 0; i < st->n_tiers; i++)
		if (st->cls[i]->persistent)
			return 1;
	return 0;
}

/* Durability each tier is asked for: memory gives "cached" only, so a
 * stronger level is the disk tiers' (and the daemon's) to give. */
static int tier_durability(kvt_store *st, int i, int want)
{
	return st->cls[i]->persistent ? want : KVT_DUR_CACHED;
}

/* Copy the image a tier already holds into tiers that can give
 * `durability` and lack it: a put asked to make a cached chunk crash- or
 * power-safe writes the first version down, never the caller's bytes, so
 * every tier keeps holding the same version. */
static int store_harden(kvt_store *st, const kvt_key *key, int holder,
			int durability)
{
	kvt_tier *src = st->tiers[holder];
	kvt_tier_rbuf *rb;
	struct hier_put_plan plan;
	int rc, done = 0, err = 0;

	hier_plan_put(st->hier, durability, &plan);
	if ((rc = src->ops->get(src, key, &rb)))
		return rc == KVT_ENOTFOUND ? kvt_err(KVT_ENOTFOUND, "chunk vanished") : rc;
	for (int i = st->n_tiers - 1; i >= 0; i--) {
		if (tier_durability(st, i, durability) < durability ||
		    !(plan.takes & (1u << i)))
			continue;
		rc = store_copy_into(st, i, rb, durability);
		if (rc == 0 || rc == KVT_EEXIST)
			done = 1;
		else if (!err)
			err = rc;
	}
	src->ops->release(src, rb);
	if (done)
		return kvt_err(KVT_EEXIST, "key already stored; made %s",
			       durability == KVT_DUR_POWER_SAFE ? "power-safe" : "crash-safe");
	return err ? err : kvt_err(KVT_ENOTSUP, "no tier can give that durability");
}

/* The writer's side of the TTL: a key held past it in tier i is removed
 * there, so that a put of it stores anew instead of reporting "already
 * stored" for a chunk every read misses.  1 if it was removed. */
static int drop_expired(kvt_store *st, int i, const kvt_key *key)
{
	kvt_tier *t = st->tiers[i];
	kvt_tier_rbuf *rb;
	kvt_obj_hdr h;
	int old;

	if (t->ops->get(t, key, &rb))
		return 0;
	old = store_image_header(rb, &h) == 0 && store_expired(st, &h);
	t->ops->release(t, rb);
	if (!old || t->ops->del(t, key))
		return 0;
	store_forget(st, i, key, KVT_WHY_EXPIRED);
	return 1;
}

/* A put's second half, once the image is in tier `first`'s wbuf and
 * copied into the others' (w[i] valid where rc[i] == 0): publish, or give
 * back.  `lost`: another writer was first somewhere; `err`: the first error
 * so far. */
static int put_publish(kvt_store *st, const kvt_key *key, uint64_t len,
		       kvt_tier_wbuf **w, int *rc, int first, int lost, int err,
		       int durability, int acct)
{
	int stored = 0, durable = 0;
	/* read before any commit consumes the wbuf that holds the image */
	uint32_t tokens = first >= 0 ? store_image_tokens(w[first]->iov, w[first]->n_iov) : 0;

	if (err && first < 0 && !lost) {
		/* Nothing reserved anywhere, or the image could not be
		 * written: give back what was taken. */
		for (int i = 0; i < st->n_tiers; i++)
			if (rc[i] == 0 && w[i])
				st->tiers[i]->ops->put_abort(st->tiers[i], w[i]);
		return err;
	}
	/* Publish from the bottom up.  The lowest tier is the most widely
	 * shared, so it arbitrates a race: if another writer published the
	 * key there first, our image is withdrawn from every tier above.  A
	 * durable put whose durable tiers all failed is withdrawn from the
	 * memory tier too: the caller is told it failed, and a retry must not
	 * find a cached copy and call it stored. */
	for (int i = st->n_tiers - 1; i >= 0; i--) {
		kvt_tier *t = st->tiers[i];
		int want = tier_durability(st, i, durability);
		if (rc[i] != 0)
			continue;
		if (lost || (want < durability && !durable)) {
			t->ops->put_abort(t, w[i]);
			continue;
		}
		rc[i] = t->ops->put_commit(t, w[i], want);
		store_note_write(st, i, rc[i]);
		if (rc[i] == 0) {
			store_after_insert(st, i, key, len, acct, tokens);
			stored++;
			if (want >= durability)
				durable = 1;
		} else if (rc[i] == KVT_EEXIST) {
			lost = 1;
		} else if (!err) {
			err = rc[i];
		}
	}
	if (lost)
		return kvt_err(KVT_EEXIST, "another writer published the key first");
	if (stored && durable)
		return 0;
	if (!err)
		err = kvt_err(KVT_EFULL, "no tier accepted the chunk");
	return err;
}

static int store_put(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		     const void *const *layers, int durability, unsigned mask)
{
	kvt_tier_wbuf *w[KVT_MAX_TIERS] = { 0 };
	int rc[KVT_MAX_TIERS];
	kvt_obj_hdr *h;
	uint64_t len;
	int first = -1, lost = 0, err = 0, holder = -1;
	int acct = store_ns_acct(st, ns);

	for (int i = 0; i < KVT_MAX_TIERS; i++)
		rc[i] = 1; /* not begun */

	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE)
		return kvt_err(KVT_EINVAL, "durability %d unknown", durability);
	if (durability > KVT_DUR_CACHED && !store_has_persistent(st))
		return kvt_err(KVT_ENOTSUP,
			       "%s asked but the store has no disk tier",
			       durability == KVT_DUR_POWER_SAFE ? "power-safe" : "crash-safe");
	/* First version wins in every tier: a key held anywhere is not
	 * written again, or two tiers could serve different bytes for it.  A
	 * key held only where the asked durability is not given is written
	 * down from the copy that exists. */
	if (st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only (read_only: true)");
	for (int i = 0; i < st->n_tiers; i++) {
		if (st->tiers[i]->ops->put_unprobed ||
		    st->tiers[i]->ops->exists(st->tiers[i], key) != 1)
			continue;
		if (__atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED) && drop_expired(st, i, key))
			continue;
		if (tier_durability(st, i, durability) >= durability)
			return kvt_err(KVT_EEXIST, "key already stored in the %s tier",
				       st->tiers[i]->ops->name);
		holder = i;
	}
	if (holder >= 0)
		return store_harden(st, key, holder, durability);
	h = malloc(sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if ((err = kvt_obj_hdr_init(h, ns, key))) {
		free(h);
		return err;
	}
	len = KVT_OBJ_HEADER_BYTES + h->payload_len;

	for (int i = 0; i < st->n_tiers; i++) {
		kvt_tier *t = st->tiers[i];
		if (!(mask & (1u << i)))
			continue;
		if (store_writes_off(st, i)) {
			rc[i] = store_writes_off_err(st, i);
			if (!err)
				err = rc[i];
			continue;
		}
		if (first < 0) {
			rc[i] = t->ops->put_begin(t, key, len, &w[i]);
		} else { /* the image is whole in the first tier's space */
			kvt_tier_rbuf src = { .key = *key, .len = len, .iov = w[first]->iov,
					      .n_iov = w[first]->n_iov };
			rc[i] = store_begin_copy(t, &src, &w[i]);
		}
		if (rc[i] != 0) /* success is judged at commit */
			store_note_write(st, i, rc[i]);
		if (rc[i] == KVT_EEXIST) {
			lost = 1; /* published by someone else meanwhile */
		} else if (rc[i] == 0 && first < 0) {
			int e = kvt_obj_write_iov(h, layers, w[i]->iov, w[i]->n_iov);
			if (e) {
				t->ops->put_abort(t, w[i]);
				rc[i] = e;
				if (!err)
					err = e;
				break;
			}
			first = i;
		} else if (rc[i] != 0 && !err) {
			err = rc[i];
		}
	}
	free(h);
	return put_publish(st, key, len, w, rc, first, lost, err, durability, acct);
}

static int put_chunk(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		     const void *const *layers, int durability)
{
	struct hier_put_plan plan;
	int rc;

	hier_plan_put(st->hier, durability, &plan);
	if (!plan.now)
		return kvt_err(KVT_ENOTSUP, "no tier takes puts (every tier's write is none)");
	rc = store_put(st, ns, key, layers, durability, plan.now);
	if (rc == 0 && plan.through)
		store_move(st, MOVE_THROUGH, __builtin_ctz(plan.now), key);
	return rc;
}

int store_image_held(kvt_store *st, const kvt_key *key)
{
	for (int i = 0; i < st->n_tiers; i++)
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1 &&
		    !(__atomic_load_n(&st->cfg.ttl_s, __ATOMIC_RELAXED) && drop_expired(st, i, key)))
			return kvt_err(KVT_EEXIST, "key already stored in the %s tier",
				       st->tiers[i]->ops->name);
	return 0;
}

int store_image_begin(kvt_store *st, const kvt_key *key, uint64_t len,
		      kvt_tier_wbuf **w, int *first)
{
	struct hier_put_plan plan;
	int rc;

	hier_plan_put(st->hier, KVT_DUR_CACHED, &plan);
	*w = NULL;
	if (st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only (read_only: true)");
	if (len < KVT_OBJ_HEADER_BYTES)
		return kvt_err(KVT_EINVAL, "an image of %llu bytes has no room for its header",
			       (unsigned long long)len);
	if ((rc = store_image_held(st, key)))
		return rc;
	*first = plan.now ? __builtin_ctz(plan.now) : -1;
	if (*first != 0)
		return kvt_err(KVT_ENOTSUP, "the first tier takes no puts");
	if (store_writes_off(st, 0))
		return store_writes_off_err(st, 0);
	rc = st->tiers[0]->ops->put_begin(st->tiers[0], key, len, w);
	if (rc)
		store_note_write(st, 0, rc);
	return rc;
}

int store_image_commit(kvt_store *st, int first, kvt_tier_wbuf *w0, int durability,
		       int acct)
{
	kvt_tier_wbuf *w[KVT_MAX_TIERS] = { 0 };
	int rc[KVT_MAX_TIERS];
	struct hier_put_plan plan;
	int lost = 0, err = 0;
	kvt_key key = w0->key;
	uint64_t len = w0->len;

	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE ||
	    (durability > KVT_DUR_CACHED && !store_has_persistent(st))) {
		st->tiers[first]->ops->put_abort(st->tiers[first], w0);
		return kvt_err(durability > KVT_DUR_POWER_SAFE || durability < 0 ? KVT_EINVAL
										 : KVT_ENOTSUP,
			       "durability %d: unknown, or the daemon has no disk tier",
			       durability);
	}
	hier_plan_put(st->hier, durability, &plan);
	for (int i = 0; i < KVT_MAX_TIERS; i++)
		rc[i] = 1; /* not begun */
	rc[first] = 0;
	w[first] = w0;
	for (int i = first + 1; i < st->n_tiers; i++) {
		kvt_tier_rbuf src = { .key = key, .len = len, .iov = w0->iov, .n_iov = w0->n_iov };
		if (!(plan.now & (1u << i)))
			continue;
		if (store_writes_off(st, i)) {
			if (!err)
				err = store_writes_off_err(st, i);
			continue;
		}
		rc[i] = store_begin_copy(st->tiers[i], &src, &w[i]);
		if (rc[i] != 0)
			store_note_write(st, i, rc[i]);
		if (rc[i] == KVT_EEXIST)
			lost = 1;
		else if (rc[i] && !err)
			err = rc[i];
	}
	err = put_publish(st, &key, len, w, rc, first, lost, err, durability, acct);
	if (err == 0 && plan.through)
		store_move(st, MOVE_THROUGH, first, &key);
	return err;
}

void store_image_abort(kvt_store *st, int first, kvt_tier_wbuf *w)
{
	st->tiers[first]->ops->put_abort(st->tiers[first], w);
}

struct kvt_put_buf {
	kvt_store *st;
	kvt_obj_hdr h;
	kvt_tier_wbuf *w;
	int first, durability, acct;
	uint32_t summed;        /* layers whose checksum is computed */
	struct iovec *iov;
	int n_iov;
};

int kvt_put_reserve(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int durability,
		    kvt_put_buf **out)
{
	kvt_put_buf *b;
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	if (!out)
		return kvt_err(KVT_EINVAL, "output missing");
	if (durability < KVT_DUR_CACHED || durability > KVT_DUR_POWER_SAFE)
		return kvt_err(KVT_EINVAL, "durability %d unknown", durability);
	if (durability > KVT_DUR_CACHED && !store_has_persistent(st))
		return kvt_err(KVT_ENOTSUP, "%s asked but the store has no disk tier",
			       durability == KVT_DUR_POWER_SAFE ? "power-safe" : "crash-safe");
	b = calloc(1, sizeof(*b));
	if (!b)
		return kvt_err(KVT_ENOMEM, "out of memory");
	if ((rc = kvt_obj_hdr_init(&b->h, ns, key)) ||
	    (rc = store_image_begin(st, key, KVT_OBJ_HEADER_BYTES + b->h.payload_len, &b->w,
				    &b->first))) {
		free(b);
		return rc;
	}
	kvt_tier_rbuf img = { .key = *key, .len = b->w->len, .iov = b->w->iov,
			      .n_iov = b->w->n_iov };
	if ((rc = store_payload_iov(&img, KVT_OBJ_HEADER_BYTES, &b->iov, &b->n_iov))) {
		store_image_abort(st, b->first, b->w);
		free(b);
		return rc;
	}
	/* The space may be rounded up (pages, O_DIRECT): the caller sees the
	 * payload's bytes alone. */
	uint64_t left = b->h.payload_len;
	for (int i = 0; i < b->n_iov; i++) {
		if (b->iov[i].iov_len > left)
			b->iov[i].iov_len = (size_t)left;
		left -= b->iov[i].iov_len;
		if (!left) {
			b->n_iov = i + 1;
			break;
		}
	}
	b->st = st;
	b->durability = durability;
	b->acct = store_ns_acct(st, ns);
	*out = b;
	return 0;
}

int kvt_put_buf_iov(const kvt_put_buf *b, const struct iovec **iov, int *n_iov)
{
	if (!b || !iov || !n_iov)
		return kvt_err(KVT_EINVAL, "put buffer or outputs missing");
	*iov = b->iov;
	*n_iov = b->n_iov;
	return 0;
}

int kvt_put_buf_written(kvt_put_buf *b, uint64_t bytes)
{
	if (!b)
		return kvt_err(KVT_EINVAL, "put buffer missing");
	while (b->summed < b->h.n_layers &&
	       b->h.layers[b->summed].offset + b->h.layers[b->summed].length <= bytes) {
		int rc = kvt_obj_layer_sum_iov(&b->h, b->w->iov, b->w->n_iov, b->summed);
		if (rc)
			return rc;
		b->summed++;
	}
	return 0;
}

int kvt_put_publish(kvt_put_buf *b)
{
	int rc;

	kvt_err_clear();
	if (!b)
		return kvt_err(KVT_EINVAL, "put buffer missing");
	rc = kvt_obj_seal_iov(&b->h, b->w->iov, b->w->n_iov, b->summed);
	if (rc)
		store_image_abort(b->st, b->first, b->w);
	else
		rc = store_image_commit(b->st, b->first, b->w, b->durability, b->acct);
	free(b->iov);
	free(b);
	return rc;
}

void kvt_put_cancel(kvt_put_buf *b)
{
	if (!b)
		return;
	store_image_abort(b->st, b->first, b->w);
	free(b->iov);
	free(b);
}

int kvt_put_layers(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		   const void *const *layers, uint32_t n_layers, int durability)
{
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	if (!layers || n_layers != ns->layout.num_layers)
		return kvt_err(KVT_ELAYOUT, "%u layers given, namespace has %u",
			       n_layers, ns->layout.num_layers);
	for (uint32_t i = 0; i < n_layers; i++)
		if (!layers[i])
			return kvt_err(KVT_EINVAL, "layer %u missing", i);
	return put_chunk(st, ns, key, layers, durability);
}

int kvt_put(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	    const void *payload, size_t len, int durability)
{
	const void *layers[KVT_MAX_LAYERS];
	uint64_t want, per;
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	want = kvt_layout_payload_bytes(&ns->layout);
	if (want == 0)
		return KVT_ELAYOUT;
	if (!payload || len != want)
		return kvt_err(KVT_ELAYOUT,
			       "payload is %zu bytes, the namespace's layout needs %llu",
			       len, (unsigned long long)want);
	per = kvt_layout_layer_bytes(&ns->layout);
	for (uint32_t i = 0; i < ns->layout.num_layers; i++)
		layers[i] = (const char *)payload + i * per;
	return put_chunk(st, ns, key, layers, durability);
}

int kvt_put_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  const void *const *payloads, size_t n, int durability,
		  int *results)
{
	size_t len = ns ? kvt_layout_payload_bytes(&ns->layout) : 0;
	int ok = 0;

	if (!keys || !payloads)
		return kvt_err(KVT_EINVAL, "keys or payloads missing");
	for (size_t i = 0; i < n; i++) {
		int rc = kvt_put(st, ns, &keys[i], payloads[i], len, durability);
		if (results)
			results[i] = rc;
		if (rc == 0 || rc == KVT_EEXIST)
			ok++;
	}
	return ok;
}
