/*
 * async.c — the asynchronous operations (kvt_get_async, kvt_put_async)
 * and prefetch (kvt_prefetch): ops the worker pool runs for a caller who
 * polls or waits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "store/config.h"
#include "store/hier.h"
#include "store/pool.h"
#include "store/store.h"
#include "store/store_int.h"
#include "store/why.h"

static int prefetch_run(kvt_store *st, kvt_op *op);

static void op_run(struct job *j)
{
	kvt_op *op = (kvt_op *)j;
	size_t len = 0;
	int rc;

	if (op->kind == OP_GET) {
		rc = kvt_get(op->st, &op->ns, &op->key, op->buf, op->len, &len);
		op->bytes = rc == 0 ? len : 0;
	} else if (op->kind == OP_PUT) {
		rc = kvt_put(op->st, &op->ns, &op->key, op->payload, op->len,
			     op->durability);
		op->bytes = rc == 0 ? op->len : 0;
	} else {
		rc = prefetch_run(op->st, op);
	}
	pthread_mutex_lock(&op->lock);
	/* The detail lives in the worker's thread: keep it with the op. */
	snprintf(op->msg, sizeof(op->msg), "%s", rc < 0 ? kvt_errmsg() : "");
	op->rc = rc;
	op->done = 1;
	pthread_cond_broadcast(&op->cond);
	pthread_mutex_unlock(&op->lock);
}

static int op_submit(kvt_store *st, kvt_op *op, kvt_op **out)
{
	int rc;

	pthread_mutex_init(&op->lock, NULL);
	kvt_cond_init_mono(&op->cond);
	op->st = st;
	op->job.run = op_run;
	if ((rc = pool_submit(&st->pool, &op->job, PRIO_URGENT))) {
		pthread_mutex_destroy(&op->lock);
		pthread_cond_destroy(&op->cond);
		free(op->keys);
		free(op);
		return rc;
	}
	*out = op;
	return 0;
}

/* A new op of `kind` on `key`, its arguments checked; NULL with *rc set
 * (and *out cleared) if they are wrong. */
static kvt_op *op_new(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		      int kind, kvt_op **out, int *rc)
{
	kvt_op *op;

	kvt_err_clear();
	if (out)
		*out = NULL;
	if ((*rc = store_check_args(st, ns, key)))
		return NULL;
	if (!out) {
		*rc = kvt_err(KVT_EINVAL, "op output missing");
		return NULL;
	}
	if (!(op = calloc(1, sizeof(*op)))) {
		*rc = kvt_err(KVT_ENOMEM, "out of memory");
		return NULL;
	}
	op->kind = kind;
	op->ns = *ns;
	op->key = *key;
	return op;
}

int kvt_get_async(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  void *buf, size_t cap, kvt_op **out)
{
	int rc;
	kvt_op *op = op_new(st, ns, key, OP_GET, out, &rc);

	if (!op)
		return rc;
	op->buf = buf;
	op->len = cap;
	return op_submit(st, op, out);
}

int kvt_put_async(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  const void *payload, size_t len, int durability, kvt_op **out)
{
	int rc;
	kvt_op *op = op_new(st, ns, key, OP_PUT, out, &rc);

	if (!op)
		return rc;
	op->payload = payload;
	op->len = len;
	op->durability = durability;
	return op_submit(st, op, out);
}

/* Prefetch, run by a worker: walk the chain; a chunk already in the first
 * tier counts; one in a lower tier is read (verified) and copied up now; the
 * first chunk in no tier ends the prefix.  The deadline is checked between
 * chunks: a load in progress finishes, the next does not start. */
static int prefetch_run(kvt_store *st, kvt_op *op)
{
	size_t i;

	for (i = 0; i < op->n_keys; i++) {
		const kvt_key *k = &op->keys[i];
		kvt_ref *ref;
		int tier;

		if (st->tiers[0]->ops->exists(st->tiers[0], k) == 1)
			continue;
		if (kvt_mono_ns() > op->deadline_ns) {
			int held = -1; /* kvt_why's answer for it */
			for (int t = 1; t < st->n_tiers && held < 0; t++)
				if (st->tiers[t]->ops->exists(st->tiers[t], k) == 1)
					held = t;
			why_record(&st->why, k, KVT_WHY_DEADLINE, held);
			break;
		}
		if (st->kind[0] == KVT_CT_DRAM) {
			int src = -1, rc;
			for (int t = 1; t < st->n_tiers && src < 0; t++)
				if (st->tiers[t]->ops->exists(st->tiers[t], k) == 1)
					src = t;
			if (src > 0 && st->tiers[src]->ops->get_into) {
				rc = store_promote_into(st, &op->ns, k, src);
				if (rc == 0 || rc == KVT_EEXIST) {
					op->bytes += kvt_layout_payload_bytes(&op->ns.layout);
					continue;
				}
				if (rc != KVT_EFULL && rc != -EIO)
					break;
				/* DRAM full of borrowed pages or I/O: the
				 * buffered path below may still manage. */
			}
		}
		if (store_borrow(st, &op->ns, k, &ref, &tier, 0))
			break;
		if (tier > 0) {
			int rc = store_copy_verified(st, 0, ref->rb, &ref->hdr);
			if (rc == KVT_ECORRUPT) {
				store_drop_corrupt(ref, k);
				break;
			}
			if (rc == 0)
				hier_count(st->hier, tier, HIER_PROMOTION);
			op->bytes += ref->hdr.payload_len;
			store_ref_free(ref);
			if (rc && rc != KVT_EEXIST)
				break;
		} else {
			store_ref_free(ref);
		}
	}
	return (int)i;
}

int kvt_prefetch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		 size_t n_keys, int deadline_ms, kvt_op **out)
{
	kvt_op *op;

	kvt_err_clear();
	if (out)
		*out = NULL;
	if (!st || !ns || (!keys && n_keys) || !out)
		return kvt_err(KVT_EINVAL, "store, namespace, keys or op output missing");
	if (n_keys > (size_t)INT32_MAX)
		return kvt_err(KVT_EINVAL, "%zu keys", n_keys);
	op = calloc(1, sizeof(*op));
	if (!op || !(op->keys = malloc((n_keys ? n_keys : 1) * sizeof(kvt_key)))) {
		free(op);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	memcpy(op->keys, keys, n_keys * sizeof(kvt_key));
	op->n_keys = n_keys;
	op->kind = OP_PREFETCH;
	op->ns = *ns;
	op->deadline_ns = kvt_mono_ns() + (int64_t)(deadline_ms < 0 ? 0 : deadline_ms) * 1000000;
	return op_submit(st, op, out);
}

int kvt_op_poll(kvt_op *op)
{
	int rc;
	if (!op)
		return KVT_EINVAL;
	pthread_mutex_lock(&op->lock);
	rc = op->done ? op->rc : KVT_EAGAIN;
	pthread_mutex_unlock(&op->lock);
	return rc;
}

int kvt_op_wait(kvt_op *op, int timeout_ms)
{
	struct timespec dl;
	int rc = 0;

	if (!op)
		return KVT_EINVAL;
	if (timeout_ms >= 0)
		dl = kvt_deadline_after(timeout_ms);
	pthread_mutex_lock(&op->lock);
	while (!op->done && rc != ETIMEDOUT)
		rc = timeout_ms < 0 ? pthread_cond_wait(&op->cond, &op->lock)
				    : pthread_cond_timedwait(&op->cond, &op->lock, &dl);
	rc = op->done ? op->rc : KVT_ETIMEDOUT;
	pthread_mutex_unlock(&op->lock);
	return rc;
}

const char *kvt_op_errmsg(kvt_op *op)
{
	const char *m = "";

	if (!op)
		return m;
	pthread_mutex_lock(&op->lock);
	if (op->done)
		m = op->msg;
	pthread_mutex_unlock(&op->lock);
	return m;
}

uint64_t kvt_op_bytes(const kvt_op *op)
{
	return op ? op->bytes : 0;
}

void kvt_op_free(kvt_op *op)
{
	if (!op)
		return;
	kvt_op_wait(op, -1);
	pthread_mutex_destroy(&op->lock);
	pthread_cond_destroy(&op->cond);
	free(op->keys);
	free(op);
}
