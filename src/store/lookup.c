/*
 * lookup.c — what the store holds: how long a prefix of a chain it can
 * serve (kvt_lookup and its token, rank and worth forms), whether and
 * where a chunk is, pins, and deletes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "format/object.h"
#include "key/key.h"
#include "store/hier.h"
#include "store/store_int.h"
#include "store/tiers.h"

int store_image_exists(kvt_store *st, const kvt_key *key)
{
	for (int i = 0; i < st->n_tiers; i++)
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1)
			return 1;
	return 0;
}

int store_image_del(kvt_store *st, const kvt_key *key)
{
	int rc, found = 0, err = 0;

	if (st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only (read_only: true)");
	for (int i = 0; i < st->n_tiers; i++) {
		rc = st->tiers[i]->ops->del(st->tiers[i], key);
		if (rc == 0)
			store_forget(st, i, key, KVT_WHY_DELETED);
		else if (rc == KVT_ENOTFOUND)
			hier_remove(st->hier, i, key);
		if (rc == 0)
			found = 1;
		else if (rc != KVT_ENOTFOUND && !err)
			err = rc; /* e.g. unlink refused: the chunk may come back */
	}
	if (err)
		return err;
	return found ? 0 : kvt_err(KVT_ENOTFOUND, "no chunk under that key");
}

int kvt_image_present(kvt_store *st, const kvt_key *keys, size_t n)
{
	size_t k;

	if (!st || (!keys && n))
		return kvt_err(KVT_EINVAL, "store or keys missing");
	for (k = 0; k < n && k < INT32_MAX; k++) {
		int held = 0;
		for (int i = 0; i < st->n_tiers && !held; i++)
			held = !st->cls[i]->remote &&
			       st->tiers[i]->ops->exists(st->tiers[i], &keys[k]) == 1;
		if (!held)
			break;
	}
	return (int)k;
}

int kvt_exists(kvt_store *st, const kvt_ns *ns, const kvt_key *key)
{
	int rc;

	if ((rc = store_check_args(st, ns, key)))
		return rc;
	return store_image_exists(st, key);
}

int kvt_delete(kvt_store *st, const kvt_ns *ns, const kvt_key *key)
{
	int rc;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	return store_image_del(st, key);
}

/* How many of keys[0..n), from the first, some tier holds; tier_out[k]
 * (when not NULL) the first tier holding key k.  A tier that knows nothing
 * from memory (another node's daemon) is asked once, for the rest of the
 * chain from the first key no other tier holds: upto[i] is where its
 * answer ends. */
size_t store_chain_held(kvt_store *st, const kvt_key *keys, size_t n_keys, uint8_t *tier_out)
{
	size_t upto[KVT_MAX_TIERS], hit = 0;
	int asked[KVT_MAX_TIERS] = { 0 };

	for (size_t k = 0; k < n_keys; k++) {
		int found = -1;
		for (int i = 0; i < st->n_tiers; i++)
			if (st->tiers[i]->ops->exists(st->tiers[i], &keys[k]) == 1) {
				found = i;
				break;
			}
		for (int i = 0; found < 0 && i < st->n_tiers; i++) {
			kvt_tier *t = st->tiers[i];
			if (!st->cls[i]->fetches || !t->ops->exists_prefix)
				continue;
			if (!asked[i]) {
				int got = t->ops->exists_prefix(t, &keys[k], n_keys - k);
				upto[i] = k + (got > 0 ? (size_t)got : 0);
				asked[i] = 1;
			}
			if (k < upto[i])
				found = i;
		}
		if (found < 0)
			break;
		if (tier_out)
			tier_out[k] = (uint8_t)found;
		hit++;
	}
	return hit;
}

int kvt_lookup(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
	       size_t n_keys, kvt_lookup_result *res)
{
	uint32_t hit = 0;

	if (!st || !ns || (!keys && n_keys))
		return kvt_err(KVT_EINVAL, "store, namespace or keys missing");
	if (st->n_tiers == 1 && st->tiers[0]->ops->exists_prefix && n_keys) {
		/* one tier that answers for the whole chain at once */
		int n = st->tiers[0]->ops->exists_prefix(st->tiers[0], keys, n_keys);
		hit = n > 0 ? (uint32_t)n : 0;
		if (res && res->tier)
			memset(res->tier, 0, hit);
		n_keys = 0; /* answered */
	} else {
		hit = (uint32_t)store_chain_held(st, keys, n_keys, res ? res->tier : NULL);
	}
	if (hit < n_keys)
		store_count_miss(st, store_ns_acct(st, ns), &keys[hit]);
	/* Admission counts one sighting per chunk per lookup, the whole chain
	 * and not only the hits: an engine asks once per request, and a chunk
	 * asked for again is one worth a slower tier. */
	for (size_t k = 0; k < n_keys; k++)
		for (int i = 1; i < st->n_tiers; i++)
			hier_seen(st->hier, i, &keys[k]);
	if (res)
		res->n_hit = hit;
	return (int)hit;
}

int kvt_lookup_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens,
		      size_t n_tokens, const kvt_extra_keys *extra,
		      kvt_key *keys, size_t max_keys, kvt_lookup_result *res)
{
	kvt_key stack[64];
	kvt_key *k = keys;
	size_t n;
	int whole, rc;

	if (!st || !ns)
		return kvt_err(KVT_EINVAL, "store or namespace missing");
	if (!ns->layout.chunk_tokens)
		return kvt_err(KVT_EINVAL, "namespace not initialised");
	n = n_tokens / ns->layout.chunk_tokens;
	if (!k) {
		max_keys = n;
		k = n <= 64 ? stack : malloc(n * sizeof(*k));
		if (!k)
			return kvt_err(KVT_ENOMEM, "out of memory");
	}
	whole = kvt_key_chain(ns, tokens, n_tokens, extra, k, max_keys);
	if (whole < 0) {
		rc = whole;
	} else {
		n = (size_t)whole < max_keys ? (size_t)whole : max_keys;
		rc = kvt_lookup(st, ns, k, n, res);
	}
	if (k != keys && k != stack)
		free(k);
	return rc;
}

int kvt_lookup_ranks(kvt_store *st, const kvt_ns *ns, size_t n_ranks,
		     const kvt_key *const *keys, size_t n_keys,
		     kvt_lookup_result *res)
{
	uint8_t *tiers = NULL;
	size_t common = n_keys;

	if (!st || !ns || !keys || n_ranks == 0)
		return kvt_err(KVT_EINVAL, "store, namespaces or keys missing");
	if (res && res->tier) {
		tiers = malloc(n_keys ? n_keys : 1);
		if (!tiers)
			return kvt_err(KVT_ENOMEM, "out of memory");
		memset(res->tier, 0, n_keys);
	}
	for (size_t r = 0; r < n_ranks && common > 0; r++) {
		kvt_lookup_result one = { .tier = tiers };
		int hit = kvt_lookup(st, &ns[r], keys[r], common, &one);
		if (hit < 0) {
			free(tiers);
			return hit;
		}
		common = (size_t)hit;
		for (size_t i = 0; tiers && i < common; i++)
			if (tiers[i] > res->tier[i])
				res->tier[i] = tiers[i];
	}
	free(tiers);
	if (res)
		res->n_hit = (uint32_t)common;
	return (int)common;
}

int kvt_lookup_worth(kvt_store *st, const kvt_ns *ns,
		     const kvt_lookup_result *res, double recompute_s)
{
	double bytes, save = 0, best = 0;
	int best_k = 0;

	if (!st || !ns || !res)
		return kvt_err(KVT_EINVAL, "store, namespace or lookup result missing");
	bytes = (double)(KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns->layout));
	/* Loading chunk i instead of recomputing it saves recompute_s minus
	 * its load time; the engine loads a prefix, so take the prefix
	 * whose savings add up to the most. */
	for (uint32_t i = 0; i < res->n_hit; i++) {
		int t = res->tier ? res->tier[i] : 0;
		double gbps, lat_us;
		if (t >= st->n_tiers)
			t = st->n_tiers - 1;
		pthread_mutex_lock(&st->perf[t].mu);
		gbps = st->perf[t].gbps;
		lat_us = st->perf[t].lat_us;
		pthread_mutex_unlock(&st->perf[t].mu);
		save += recompute_s - (lat_us * 1e-6 + bytes / (gbps * 1e9));
		if (save > best) {
			best = save;
			best_k = (int)i + 1;
		}
	}
	return best_k;
}

int kvt_pin(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int pin)
{
	int rc, held = 0, err = 0;

	kvt_err_clear();
	if ((rc = store_check_args(st, ns, key)))
		return rc;
	for (int i = 0; i < st->n_tiers; i++) {
		if (st->tiers[i]->ops->exists(st->tiers[i], key) != 1)
			continue;
		held = 1;
		rc = hier_pin(st->hier, i, key, pin);
		if (rc && !err)
			err = rc;
	}
	if (!held)
		return kvt_err(KVT_ENOTFOUND, "no chunk under that key to %s",
			       pin ? "pin" : "unpin");
	return err;
}

int kvt_locate(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       uint32_t *mask)
{
	int rc, n = 0;

	if ((rc = store_check_args(st, ns, key)))
		return rc;
	*mask = 0;
	for (int i = 0; i < st->n_tiers; i++) {
		if (st->tiers[i]->ops->exists(st->tiers[i], key) == 1) {
			*mask |= 1u << i;
			n++;
		}
	}
	return n;
}
