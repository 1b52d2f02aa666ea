/*
 * vllm_events.c — requests out of vLLM's KV-cache events (vllm_events.h).
 *
 * jansson reads each line whole: these are the bytes of someone else's
 * fleet, so every field is checked by name and type before it is used,
 * and what is wrong is named ("event 2: block_hashes[3]: ...").
 */
#include "plan/vllm_events.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "plan/trace.h"

/* uint64 -> uint64 open-addressing map (block -> parent, tail -> request). */
struct u64map {
	uint64_t *key, *val;
	uint8_t *used;
	size_t cap, n;
};

static size_t slot_of(uint64_t k, size_t cap)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static int map_put(struct u64map *m, uint64_t k, uint64_t v);

static int map_grow(struct u64map *m)
{
	struct u64map o = *m;
	size_t cap = o.cap ? o.cap * 2 : 1024;
	m->key = calloc(cap, sizeof(uint64_t));
	m->val = calloc(cap, sizeof(uint64_t));
	m->used = calloc(cap, 1);
	m->cap = cap;
	m->n = 0;
	if (!m->key || !m->val || !m->used) {
		free(m->key);
		free(m->val);
		free(m->used);
		*m = o;
		return KVT_ENOMEM;
	}
	for (size_t i = 0; i < o.cap; i++)
		if (o.used[i])
			map_put(m, o.key[i], o.val[i]);
	free(o.key);
	free(o.val);
	free(o.used);
	return 0;
}

static int map_put(struct u64map *m, uint64_t k, uint64_t v)
{
	if ((m->n + 1) * 2 > m->cap && map_grow(m))
		return KVT_ENOMEM;
	size_t i = slot_of(k, m->cap);
	while (m->used[i] && m->key[i] != k)
		i = (i + 1) & (m->cap - 1);
	if (!m->used[i]) {
		m->used[i] = 1;
		m->key[i] = k;
		m->n++;
	}
	m->val[i] = v;
	return 0;
}

static int map_get(const struct u64map *m, uint64_t k, uint64_t *v)
{
	if (!m->cap)
		return 0;
	size_t i = slot_of(k, m->cap);
	while (m->used[i]) {
		if (m->key[i] == k) {
			*v = m->val[i];
			return 1;
		}
		i = (i + 1) & (m->cap - 1);
	}
	return 0;
}

static void map_free(struct u64map *m)
{
	free(m->key);
	free(m->val);
	free(m->used);
	memset(m, 0, sizeof(*m));
}

struct vreq {
	double ts, last;      /* first and latest event */
	uint64_t *ids;
	size_t n, cap;
	uint64_t in, out;     /* tokens */
};

/* A block's parent is kept as parent + 1 (0: a root, no parent). */
struct plan_vllm {
	struct u64map parent;
	struct u64map tail;   /* last block of a request -> its index */
	struct vreq *req;
	size_t nreq, rcap;
	double ts_prev;
	int have_ts;
	uint64_t *chain;      /* scratch: one chain, root first */
	size_t ccap;
	char *err;
	size_t errlen;
};

int plan_vllm_new(struct plan_vllm **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : KVT_ENOMEM;
}

void plan_vllm_free(struct plan_vllm *v)
{
	if (!v)
		return;
	map_free(&v->parent);
	map_free(&v->tail);
	for (size_t i = 0; i < v->nreq; i++)
		free(v->req[i].ids);
	free(v->req);
	free(v->chain);
	free(v);
}

static int bad(struct plan_vllm *v, const char *fmt, ...) KVT_PRINTF(2, 3);
static int bad(struct plan_vllm *v, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->err, v->errlen, fmt, ap);
	va_end(ap);
	return KVT_EINVAL;
}

/* A block hash: an integer (vLLM's 64-bit hashes; Python's signed ones
 * are taken modulo 2^64) or a string (the base64 of a bytes hash), folded
 * to 64 bits with FNV-1a. */
static int block_hash(struct plan_vllm *v, json_t *j, const char *what, size_t ev, size_t i,
		      uint64_t *out)
{
	if (json_is_integer(j)) {
		*out = (uint64_t)json_integer_value(j);
		return 0;
	}
	if (json_is_string(j) && json_string_length(j) > 0) {
		const unsigned char *s = (const unsigned char *)json_string_value(j);
		uint64_t h = 0xcbf29ce484222325ull;
		for (size_t k = 0; k < json_string_length(j); k++)
			h = (h ^ s[k]) * 0x100000001b3ull;
		*out = h;
		return 0;
	}
	return bad(v, "event %zu: %s[%zu]: expected an integer or a non-empty string (a block hash)",
		   ev, what, i);
}

/* An event's field, by name in its object form, by position in msgspec's
 * array form (["BlockStored", block_hashes, parent_block_hash, token_ids,
 * block_size, ...]). */
static json_t *field(json_t *e, const char *name, size_t pos)
{
	return json_is_array(e) ? json_array_get(e, pos) : json_object_get(e, name);
}

static int grow(void **p, size_t *cap, size_t want, size_t elem)
{
	if (want <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64;
	while (c < want)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (!q)
		return KVT_ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static int req_append(struct vreq *r, const uint64_t *ids, size_t n)
{
	if (grow((void **)&r->ids, &r->cap, r->n + n, sizeof(uint64_t)))
		return KVT_ENOMEM;
	memcpy(r->ids + r->n, ids, n * sizeof(uint64_t));
	r->n += n;
	return 0;
}

static int stored(struct plan_vllm *v, json_t *e, size_t ev, double ts, uint32_t *block_tokens)
{
	json_t *hs = field(e, "block_hashes", 1), *par = field(e, "parent_block_hash", 2);
	json_t *bs = field(e, "block_size", 4);
	if (!json_is_array(hs))
		return bad(v, "event %zu: BlockStored without a block_hashes array", ev);
	if (!json_is_integer(bs) || json_integer_value(bs) < 1 || json_integer_value(bs) > (1 << 20))
		return bad(v, "event %zu: block_size: expected a whole number 1..1048576", ev);
	uint32_t size = (uint32_t)json_integer_value(bs);
	if (!*block_tokens)
		*block_tokens = size;
	else if (size != *block_tokens)
		return bad(v, "event %zu: block_size %u, but the trace's blocks are %u tokens", ev,
			   size, *block_tokens);
	size_t nb = json_array_size(hs);
	if (!nb)
		return 0;
	uint64_t parent = 0, p;
	int has_parent = par && !json_is_null(par);
	if (has_parent && block_hash(v, par, "parent_block_hash", ev, 0, &parent))
		return KVT_EINVAL;
	uint64_t *ids = malloc(nb * sizeof(*ids));
	if (!ids)
		return KVT_ENOMEM;
	int rc = 0;
	for (size_t i = 0; !rc && i < nb; i++)
		rc = block_hash(v, json_array_get(hs, i), "block_hashes", ev, i, &ids[i]);
	/* Parents: the first block's is the event's, each next one's the
	 * block before it. */
	for (size_t i = 0; !rc && i < nb; i++)
		rc = map_put(&v->parent, ids[i], i ? ids[i - 1] + 1 : has_parent ? parent + 1 : 0);
	if (rc)
		goto out;

	uint64_t idx;
	struct vreq *r = NULL;
	if (has_parent && map_get(&v->tail, parent, &idx) && v->req[idx].last + PLAN_VLLM_GAP_S >= ts) {
		/* The next chunk of a prefill, or a block a decode filled. */
		r = &v->req[idx];
		if (nb == 1) {
			r->out += size; /* in the chain for later turns, not read now */
		} else {
			if ((rc = req_append(r, ids, nb)))
				goto out;
			r->in += (uint64_t)nb * size;
		}
	} else {
		/* A new request: its parent's chain, root first, then these. */
		/* A chain longer than the blocks known goes round a cycle. */
		size_t nc = 0, max = PLAN_TRACE_MAX_TOKENS / size;
		for (uint64_t b = parent; has_parent;) {
			if (nc > v->parent.n) {
				rc = bad(v, "event %zu: parent_block_hash: its chain of parents is a cycle", ev);
				goto out;
			}
			if (nc + nb >= max) {
				rc = bad(v, "event %zu: the chain behind parent_block_hash is longer than "
					 "%u tokens", ev, PLAN_TRACE_MAX_TOKENS);
				goto out;
			}
			if ((rc = grow((void **)&v->chain, &v->ccap, nc + 1, sizeof(uint64_t))))
				goto out;
			v->chain[nc++] = b;
			if (!map_get(&v->parent, b, &p) || !p)
				break;
			b = p - 1;
		}
		if ((rc = grow((void **)&v->req, &v->rcap, v->nreq + 1, sizeof(*v->req))))
			goto out;
		r = &v->req[v->nreq];
		memset(r, 0, sizeof(*r));
		idx = v->nreq++;
		r->ts = ts;
		for (size_t i = 0; !rc && i < nc; i++)
			rc = req_append(r, &v->chain[nc - 1 - i], 1);
		if (!rc)
			rc = req_append(r, ids, nb);
		if (rc)
			goto out;
		r->in = (uint64_t)r->n * size;
	}
	if (r->in > PLAN_TRACE_MAX_TOKENS) {
		rc = bad(v, "event %zu: a prompt of more than %u tokens", ev, PLAN_TRACE_MAX_TOKENS);
		goto out;
	}
	r->last = ts;
	rc = map_put(&v->tail, ids[nb - 1], idx);
out:
	free(ids);
	return rc;
}

/* One event (object or array form). */
static int event(struct plan_vllm *v, json_t *e, size_t ev, double ts, uint32_t *block_tokens)
{
	json_t *t = json_is_array(e) ? json_array_get(e, 0) : json_object_get(e, "type");
	if (!json_is_object(e) && !json_is_array(e))
		return bad(v, "event %zu: expected an object or an array", ev);
	if (!json_is_string(t))
		return bad(v, "event %zu: no \"type\" (BlockStored, BlockRemoved, AllBlocksCleared)", ev);
	const char *ty = json_string_value(t);
	if (!strcmp(ty, "BlockStored"))
		return stored(v, e, ev, ts, block_tokens);
	if (!strcmp(ty, "BlockRemoved") || !strcmp(ty, "AllBlocksCleared"))
		return 0; /* the GPU's own evictions: not the traffic */
	return bad(v, "event %zu: type \"%.40s\": expected BlockStored, BlockRemoved or AllBlocksCleared",
		   ev, ty);
}

int plan_vllm_line(struct plan_vllm *v, const char *p, size_t n, uint32_t *block_tokens,
		   char *err, size_t errlen)
{
	json_error_t je;
	json_t *o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
	v->err = err;
	v->errlen = errlen;
	if (!o)
		return bad(v, "not JSON: %s (column %d)", je.text, je.column);
	int rc = 0;
	json_t *ts = NULL, *evs = NULL;
	int single = 0;
	if (json_is_object(o)) {
		ts = json_object_get(o, "ts");
		evs = json_object_get(o, "events");
		single = !evs;
	} else if (json_is_array(o) && json_is_string(json_array_get(o, 0))) {
		single = 1; /* one event in array form */
	} else if (json_is_array(o)) {
		ts = json_array_get(o, 0); /* [ts, events, data_parallel_rank] */
		evs = json_array_get(o, 1);
	}
	double t = v->ts_prev;
	if (ts) {
		if (!json_is_number(ts) || !isfinite(json_number_value(ts)) ||
		    json_number_value(ts) < 0 || json_number_value(ts) > PLAN_TRACE_MAX_SECONDS) {
			rc = bad(v, "ts: expected seconds 0..1e10");
			goto out;
		}
		t = json_number_value(ts);
		if (v->have_ts && t < v->ts_prev) {
			rc = bad(v, "ts: %.17g is earlier than the line before's %.17g (events are in order)",
				 t, v->ts_prev);
			goto out;
		}
		v->have_ts = 1;
		v->ts_prev = t;
	}
	if (single) {
		rc = event(v, o, 1, t, block_tokens);
	} else if (!json_is_array(evs)) {
		rc = bad(v, "expected a batch {\"ts\", \"events\": [...]} or one event with a \"type\"");
	} else {
		for (size_t i = 0; !rc && i < json_array_size(evs); i++)
			rc = event(v, json_array_get(evs, i), i + 1, t, block_tokens);
	}
out:
	json_decref(o);
	return rc;
}

int plan_vllm_finish(struct plan_vllm *v, plan_vllm_emit emit, void *arg)
{
	int rc = 0;
	for (size_t i = 0; !rc && i < v->nreq; i++) {
		const struct vreq *r = &v->req[i];
		rc = emit(arg, r->ts, r->ids, r->n, r->in, r->out);
	}
	return rc;
}
