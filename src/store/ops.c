/*
 * ops.c — the store's worker pool, its asynchronous operations and
 * prefetch (see store_int.h).  The pool serves three classes in order:
 * what a caller waits for (async ops, prefetch), promotions, and
 * background copies, which never take every worker.
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
#include "store/tiers.h"

/* --- async --------------------------------------------------------------------- */

static int prefetch_run(kvt_store *st, kvt_op *op);

static void op_run(kvt_store *st, struct job *j)
{
	kvt_op *op = (kvt_op *)j;
	size_t len = 0;
	int rc;

	(void)st;
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

/* Take the next job a worker may run: the most urgent class first; the
 * background class only while fewer than max_bg of them run. */
static struct job *job_take(kvt_store *st, int *prio)
{
	for (int p = 0; p < N_PRIO; p++) {
		struct job *j = st->qhead[p];
		if (!j || (p == PRIO_BACKGROUND && st->running_bg >= st->max_bg))
			continue;
		st->qhead[p] = j->next;
		if (!st->qhead[p])
			st->qtail[p] = NULL;
		if (p == PRIO_BACKGROUND) {
			st->queued_bg--;
			st->running_bg++;
		}
		*prio = p;
		return j;
	}
	return NULL;
}

static int queues_empty(const kvt_store *st)
{
	for (int p = 0; p < N_PRIO; p++)
		if (st->qhead[p])
			return 0;
	return 1;
}

void *store_worker_main(void *arg)
{
	kvt_store *st = arg;

	for (;;) {
		struct job *j;
		int prio = 0;
		pthread_mutex_lock(&st->qlock);
		while (!(j = job_take(st, &prio)) && !(st->stopping && queues_empty(st)))
			pthread_cond_wait(&st->qcond, &st->qlock);
		pthread_mutex_unlock(&st->qlock);
		if (!j) /* stopping and drained */
			return NULL;
		j->run(st, j);
		if (prio != PRIO_URGENT) {
			pthread_mutex_lock(&st->qlock);
			if (prio == PRIO_BACKGROUND)
				st->running_bg--;
			st->moves_pending--;
			pthread_cond_broadcast(&st->qcond);
			pthread_mutex_unlock(&st->qlock);
		}
	}
}

/* Queue a job.  KVT_ECANCELED once the store is closing (the job is not
 * taken; the caller still owns it). */
int store_job_submit(kvt_store *st, struct job *j, int prio)
{
	j->next = NULL;
	pthread_mutex_lock(&st->qlock);
	if (st->stopping) {
		pthread_mutex_unlock(&st->qlock);
		return kvt_err(KVT_ECANCELED, "store is closing");
	}
	if (st->qtail[prio])
		st->qtail[prio]->next = j;
	else
		st->qhead[prio] = j;
	st->qtail[prio] = j;
	if (prio == PRIO_BACKGROUND)
		st->queued_bg++;
	if (prio != PRIO_URGENT)
		st->moves_pending++;
	pthread_cond_signal(&st->qcond);
	pthread_mutex_unlock(&st->qlock);
	return 0;
}

static int op_submit(kvt_store *st, kvt_op *op, kvt_op **out)
{
	int rc;

	pthread_mutex_init(&op->lock, NULL);
	kvt_cond_init_mono(&op->cond);
	op->st = st;
	op->job.run = op_run;
	if ((rc = store_job_submit(st, &op->job, PRIO_URGENT))) {
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

/* Reads straight into DRAM pages: the reservation the tier asks for. */
struct into_ctx {
	kvt_tier *dram;
	const kvt_key *key;
	kvt_tier_wbuf *w;
	uint64_t len;
};

static int into_reserve(void *arg, uint64_t len, const struct iovec **iov,
			int *n_iov)
{
	struct into_ctx *c = arg;
	int rc = c->dram->ops->put_begin(c->dram, c->key, len, &c->w);

	if (rc)
		return rc;
	c->len = len;
	*iov = c->w->iov;
	*n_iov = c->w->n_iov;
	return 0;
}

/* Promote `key` from tier `src` by reading it into reserved DRAM pages, then
 * decoding and verifying it there before it is published: no bounce buffer,
 * no copy.  0, KVT_EEXIST (already in DRAM), or an error (a bad image is
 * dropped from `src`). */
/* The image of `key` that tier `t` read straight into DRAM failed its
 * checks (`rc`, kvt_errmsg()): report it as any failed read is, through
 * the tier's corrupt() on a borrow of it, so a disk tier stops serving it
 * and lists it for verify rather than remove it (no read removes a file). */
static void drop_bad(kvt_tier *t, const kvt_key *key, int rc)
{
	char why[256];
	kvt_tier_rbuf *rb;

	snprintf(why, sizeof(why), "%s", kvt_errmsg()[0] ? kvt_errmsg() : kvt_strerror(rc));
	if (t->ops->get(t, key, &rb))
		return; /* gone already */
	kvt_err(rc, "%s", why);
	t->ops->corrupt(t, rb);
	t->ops->release(t, rb);
}

int store_promote_into(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int src)
{
	kvt_tier *t = st->tiers[src], *dram = st->tiers[0];
	struct into_ctx c = { .dram = dram, .key = key };
	kvt_obj_hdr *h;
	double t0 = store_now_s();
	uint32_t tokens;
	int rc = t->ops->get_into(t, key, into_reserve, &c);

	if (rc) {
		if (c.w)
			dram->ops->put_abort(dram, c.w);
		return rc;
	}
	h = malloc(sizeof(*h));
	if (!h) {
		dram->ops->put_abort(dram, c.w);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	{
		kvt_tier_rbuf view = { .key = *key, .len = c.len, .iov = c.w->iov,
				       .n_iov = c.w->n_iov };
		rc = store_image_header(&view, h);
		if (rc == 0 && ns)
			rc = kvt_obj_hdr_expect(h, ns, key);
		else if (rc == 0 && memcmp(h->key.b, key->b, KVT_KEY_BYTES))
			rc = kvt_err(KVT_EMISMATCH, "the image holds another key");
		if (rc == 0 && c.len != KVT_OBJ_HEADER_BYTES + h->payload_len)
			rc = kvt_err(KVT_ETRUNCATED, "image is %llu bytes, header says %llu",
				     (unsigned long long)c.len,
				     (unsigned long long)(KVT_OBJ_HEADER_BYTES + h->payload_len));
		if (rc == 0)
			rc = kvt_obj_verify_iov(h, c.w->iov, c.w->n_iov);
	}
	free(h);
	if (rc) {
		char hex[65];
		dram->ops->put_abort(dram, c.w);
		if (rc == KVT_EMISMATCH && ns)
			return rc; /* another namespace's chunk: not ours to drop */
		kvt_key_hex(key, hex);
		kvt_log(KVT_LOG_WARN, "%s tier: not serving %s: %s (%s)", t->ops->name,
			hex, kvt_strerror(rc), kvt_errmsg());
		if (st->cls[src]->fetches) {
			/* fetched, and gone with the pages: reading it again to
			 * report it would fetch it again */
			kvt_tier_rbuf view = { .key = *key, .len = c.len };
			t->ops->corrupt(t, &view);
		} else {
			drop_bad(t, key, rc);
		}
		store_forget(st, src, key, KVT_WHY_CORRUPT);
		return rc;
	}
	tokens = store_image_tokens(c.w->iov, c.w->n_iov); /* the commit consumes c.w */
	rc = dram->ops->put_commit(dram, c.w, KVT_DUR_CACHED);
	if (rc == 0) {
		store_after_insert(st, 0, key, c.len, -1, tokens);
		hier_count(st->hier, src, HIER_PROMOTION);
		hier_hit(st->hier, src, key);
		store_perf_note(st, src, c.len, store_now_s() - t0);
	}
	return rc;
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

