/*
 * verify.c — kvt_store_verify, the fsck: read every chunk of a tier and
 * check it whole, and report what the tier lists as bad (see
 * store_int.h).  Without a repair it changes nothing on any medium.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "store/store_int.h"

/* --- verification (fsck) -------------------------------------------------------- */

struct verify_ctx {
	kvt_store *st;
	kvt_tier *t;
	int tier; /* its index */
	int drop;
	void (*bad_fn)(void *arg, const kvt_key *key, int err, const char *why);
	void *arg;
	kvt_verify_result *res;
	kvt_key *keys;
	size_t n, cap;
	uint64_t recorded; /* failures the tier lists as bad itself */
};

static int verify_collect(void *arg, const kvt_key *key, uint64_t len)
{
	struct verify_ctx *c = arg;
	(void)len;
	if (c->n == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 1024;
		kvt_key *nk = realloc(c->keys, ncap * sizeof(*nk));
		if (!nk)
			return KVT_ENOMEM;
		c->keys = nk;
		c->cap = ncap;
	}
	c->keys[c->n++] = *key;
	return 0;
}

/* Verify one indexed chunk.  A copy that fails is never served again: the
 * tier stops serving it and, if it lists bad objects (bad_iterate), keeps
 * it listed with the reason, to be reported from that list; nothing on the
 * medium changes here. */
static void verify_one(struct verify_ctx *c, const kvt_key *key)
{
	kvt_tier_rbuf *rb;
	kvt_obj_hdr *h = malloc(sizeof(*h));
	int rc;

	if (!h)
		return;
	rc = c->t->ops->get(c->t, key, &rb);
	if (rc == KVT_ENOTFOUND) { /* evicted or deleted since the walk */
		free(h);
		return;
	}
	if (rc == 0) {
		rc = store_image_header(rb, h);
		if (rc == 0 && memcmp(&h->key, key, sizeof(*key)))
			rc = kvt_err(KVT_EMISMATCH, "object holds another key");
		if (rc == 0)
			rc = store_image_whole(rb->len, h);
		if (rc == 0)
			rc = kvt_obj_verify_iov(h, rb->iov, rb->n_iov);
		if (rc == 0)
			c->res->bytes += h->payload_len;
		else {
			c->t->ops->corrupt(c->t, rb);
			store_forget(c->st, c->tier, key, KVT_WHY_CORRUPT);
		}
		c->t->ops->release(c->t, rb);
	}
	c->res->checked++;
	if (rc && c->t->ops->bad_iterate && c->t->ops->exists(c->t, key) != 1) {
		c->recorded++; /* reported from the tier's list below */
	} else if (rc) {
		c->res->bad++;
		/* A tier that lists no bad objects (memory, S3) has
		 * nothing on a medium of ours to move aside. */
		if (c->bad_fn)
			c->bad_fn(c->arg, key, rc, kvt_errmsg());
	}
	free(h);
}

/* One object the tier lists as bad: report it and, asked to repair, move
 * it aside (a tier shared with other nodes keeps what is only
 * unverifiable here). */
static int verify_listed(void *arg, const kvt_key *key, const char *where,
			 int proven, const char *why)
{
	struct verify_ctx *c = arg;
	char msg[PATH_MAX + 512];
	int rc = proven ? KVT_ECORRUPT : KVT_ENOTSUP;

	c->res->checked++;
	c->res->bad++;
	if (!proven)
		c->res->unverifiable++;
	if (c->drop) {
		int r = c->t->ops->repair(c->t, key);
		if (r == 0) {
			store_forget(c->st, c->tier, key, KVT_WHY_CORRUPT);
			c->res->repaired++;
			snprintf(msg, sizeof(msg), "%s: %s; moved to the quarantine", where, why);
		} else {
			snprintf(msg, sizeof(msg), "%s: %s; left in place: %s", where, why,
				 r == KVT_ENOTSUP ? "not proven damaged, another node may read it"
						  : kvt_errmsg());
		}
	} else {
		snprintf(msg, sizeof(msg), "%s: %s", where, why);
	}
	if (c->bad_fn)
		c->bad_fn(c->arg, key, rc, msg);
	return 0;
}

int kvt_store_verify(kvt_store *st, int tier, int drop,
		     void (*bad_fn)(void *arg, const kvt_key *key, int err,
				    const char *why),
		     void *arg, kvt_verify_result *res)
{
	struct verify_ctx c = { 0 };
	kvt_verify_result dummy;
	int rc;

	kvt_err_clear();
	if (!st || tier < 0 || tier >= st->n_tiers)
		return kvt_err(KVT_EINVAL, "tier %d of %d", tier, st ? st->n_tiers : 0);
	if (!res)
		res = &dummy;
	memset(res, 0, sizeof(*res));
	if (drop && st->cfg.read_only)
		return kvt_err(-EROFS, "the store is open read-only: repair needs a writable open");
	c.st = st;
	c.t = st->tiers[tier];
	c.tier = tier;
	c.drop = drop;
	c.bad_fn = bad_fn;
	c.arg = arg;
	c.res = res;
	/* Collect the keys first: a tier's walk holds its locks, and reading
	 * a chunk must not. */
	rc = c.t->ops->iterate(c.t, verify_collect, &c);
	for (size_t i = 0; rc == 0 && i < c.n; i++)
		verify_one(&c, &c.keys[i]);
	free(c.keys);
	if (rc == 0 && c.t->ops->bad_iterate)
		rc = c.t->ops->bad_iterate(c.t, verify_listed, &c);
	res->checked -= c.recorded; /* counted once, in the list */
	return rc;
}

