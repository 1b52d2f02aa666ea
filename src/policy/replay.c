/*
 * replay.c — the trace builder (dense block ids) and the reference replay.
 */
#include "policy/replay.h"
#include "common/hex.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- building ------------------------------------------------------------- */

/* The id map (struct kvt_trace_idmap, replay.h): traces number their
 * blocks densely (Mooncake's ids count up from 0), so ids that fall in a
 * table no sparser than 1 slot in 4 of the ids seen are looked up by
 * index; others go to open addressing over the 64-bit ids.  An id is in
 * one of the two: a lookup in the table's range that finds nothing there
 * still asks the hash, which may have taken it before the table grew. */
#define idmap kvt_trace_idmap

#define mix64 kvt_mix64

static int idmap_grow(struct idmap *m)
{
	uint64_t nsl = m->keys ? (m->mask + 1) * 2 : 1024;
	uint64_t *k = malloc(nsl * sizeof(*k));
	uint32_t *v = calloc(nsl, sizeof(*v));
	if (!k || !v) {
		free(k);
		free(v);
		return KVT_ENOMEM;
	}
	for (uint64_t i = 0; m->keys && i <= m->mask; i++) {
		if (!m->vals[i])
			continue;
		uint64_t j = mix64(m->keys[i]) & (nsl - 1);
		while (v[j])
			j = (j + 1) & (nsl - 1);
		k[j] = m->keys[i];
		v[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = k;
	m->vals = v;
	m->mask = nsl - 1;
	return 0;
}

/* Grow the direct table to cover `key` if it stays dense enough: 0 if it
 * covers it now, 1 if the key is for the hash, or KVT_ENOMEM. */
static int idmap_direct_cover(struct idmap *m, uint64_t key)
{
	if (key < m->direct_cap)
		return 0;
	if (key >= 4 * (m->n + 4096))
		return 1;
	uint64_t nc = m->direct_cap ? m->direct_cap : 4096;
	while (nc <= key)
		nc *= 2;
	uint32_t *d = realloc(m->direct, nc * sizeof(*d));
	if (!d)
		return KVT_ENOMEM;
	memset(d + m->direct_cap, 0, (nc - m->direct_cap) * sizeof(*d));
	m->direct = d;
	m->direct_cap = nc;
	return 0;
}

static int idmap_hash_get(struct idmap *m, uint64_t key, uint32_t *out, int *fresh, int insert)
{
	if (!m->keys || (m->hashed + 1) * 2 > m->mask + 1) {
		int rc = idmap_grow(m);
		if (rc)
			return rc;
	}
	uint64_t j = mix64(key) & m->mask;
	while (m->vals[j]) {
		if (m->keys[j] == key) {
			*out = m->vals[j] - 1;
			*fresh = 0;
			return 0;
		}
		j = (j + 1) & m->mask;
	}
	if (!insert)
		return 1;
	if (m->n >= UINT32_MAX - 1)
		return KVT_ENOMEM;
	m->keys[j] = key;
	m->vals[j] = (uint32_t)++m->n;
	m->hashed++;
	*out = (uint32_t)(m->n - 1);
	*fresh = 1;
	return 0;
}

/* Dense id of `key`, assigning the next one on first sight (*fresh = 1). */
static int idmap_get(struct idmap *m, uint64_t key, uint32_t *out, int *fresh)
{
	int rc = idmap_direct_cover(m, key);
	if (rc < 0)
		return rc;
	if (rc == 1)
		return idmap_hash_get(m, key, out, fresh, 1);
	uint32_t v = m->direct[key];
	if (v) {
		*out = v - 1;
		*fresh = 0;
		return 0;
	}
	if (m->hashed && (rc = idmap_hash_get(m, key, out, fresh, 0)) <= 0)
		return rc; /* taken by the hash before the table reached it */
	if (m->n >= UINT32_MAX - 1)
		return KVT_ENOMEM;
	m->direct[key] = (uint32_t)++m->n;
	*out = (uint32_t)(m->n - 1);
	*fresh = 1;
	return 0;
}

/* Make a growable array hold at least `need` elem-sized items. */
static int grow_to(void **arr, uint64_t *cap, uint64_t need, size_t elem)
{
	uint64_t nc = *cap ? *cap : 1024;
	void *p;

	if (need <= *cap)
		return 0;
	while (nc < need)
		nc *= 2;
	if (!(p = realloc(*arr, nc * elem)))
		return KVT_ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

/* Append to a growable array of elem-sized items. */
static int push(void **arr, uint64_t *cap, uint64_t n, size_t elem, const void *v)
{
	if (n == *cap) {
		uint64_t nc = *cap ? *cap * 2 : 1024;
		void *p = realloc(*arr, nc * elem);
		if (!p)
			return KVT_ENOMEM;
		*arr = p;
		*cap = nc;
	}
	memcpy((char *)*arr + n * elem, v, elem);
	return 0;
}

int kvt_trace_build_begin(struct kvt_trace_builder *b, struct kvt_trace *t)
{
	uint64_t zero = 0;

	memset(t, 0, sizeof(*t));
	memset(b, 0, sizeof(*b));
	b->t = t;
	return push((void **)&t->off, &b->off_cap, 0, sizeof(uint64_t), &zero);
}

int kvt_trace_build_add(struct kvt_trace_builder *b, const uint64_t *ids, size_t n)
{
	struct kvt_trace *t = b->t;
	struct idmap *m = &b->map;
	int rc = 0;

	/* Room for the whole request at once: one check, not one per id. */
	if (grow_to((void **)&t->ids, &b->ids_cap, t->nblocks + n, sizeof(uint32_t)) ||
	    grow_to((void **)&t->pos, &b->pos_cap, m->n + n, sizeof(uint32_t)))
		return KVT_ENOMEM;
	for (size_t i = 0; !rc && i < n; i++) {
		uint32_t d;
		int fresh;
		rc = idmap_get(m, ids[i], &d, &fresh);
		if (rc)
			break;
		t->ids[t->nblocks++] = d;
		/* Prefix hashes: an id's position never changes, so the first
		 * one seen is the one. */
		if (fresh)
			t->pos[d] = (uint32_t)i;
	}
	if (!rc) {
		t->nreq++;
		rc = push((void **)&t->off, &b->off_cap, t->nreq, sizeof(uint64_t), &t->nblocks);
	}
	t->nids = m->n;
	return rc;
}

void kvt_trace_build_end(struct kvt_trace_builder *b)
{
	free(b->map.keys);
	free(b->map.vals);
	free(b->map.direct);
	memset(&b->map, 0, sizeof(b->map));
}

void kvt_trace_free(struct kvt_trace *t)
{
	if (!t)
		return;
	free(t->off);
	free(t->ids);
	free(t->pos);
	memset(t, 0, sizeof(*t));
}

/* ---- replay --------------------------------------------------------------- */

struct sim {
	const struct kvt_trace *t;
	const struct kvt_replay_conf *c;
	struct kvt_replay_result *r;
	kvt_evict *ev[2];
	kvt_admit *ad[2];
	int err;
};

/* Offer a block to tier `k`: its filter, then its policy. */
static void offer(struct sim *s, unsigned k, uint32_t id)
{
	if (s->ad[k]) {
		struct kvt_admit_query q = {.id = id, .pos = s->t->pos[id]};
		if (kvt_evict_used(s->ev[k]) + 1 > kvt_evict_capacity(s->ev[k]))
			q.has_victim = kvt_evict_peek_victim(s->ev[k], &q.victim) == 0;
		if (!kvt_admit_check(s->ad[k], &q)) {
			s->r->rejects[k]++;
			return;
		}
	}
	int rc = kvt_evict_insert(s->ev[k], id, 1);
	if (rc == 0)
		s->r->inserts[k]++;
	else if (rc != KVT_EEXIST && !s->err)
		s->err = rc;
}

/* T0's victims: demoted into T1 (exclusive), or rewritten there if T1 lost
 * its copy (inclusive). */
static void t0_victim(void *arg, uint64_t id, uint64_t size)
{
	struct sim *s = arg;
	(void)size;
	if (s->c->ntiers < 2)
		return;
	if (kvt_evict_contains(s->ev[1], id))
		return;
	uint64_t before = s->r->inserts[1];
	offer(s, 1, (uint32_t)id);
	if (s->r->inserts[1] != before)
		s->r->demotions++;
}

int kvt_replay_run(const struct kvt_trace *t, const struct kvt_replay_conf *c,
		   struct kvt_replay_result *r)
{
	memset(r, 0, sizeof(*r));
	if (c->ntiers < 1 || c->ntiers > 2)
		return kvt_err(KVT_EINVAL, "replay: %u tiers (1 or 2)", c->ntiers);
	struct sim s = {.t = t, .c = c, .r = r};
	int rc = 0;
	for (unsigned k = 0; k < c->ntiers && !rc; k++) {
		struct kvt_evict_conf ec = {
			.kind = c->tier[k].kind,
			.capacity = c->tier[k].capacity,
			/* An "unbounded" capacity must not size the table. */
			.expected_objects = c->tier[k].capacity < t->nids ? c->tier[k].capacity
									  : t->nids,
			.on_victim = k == 0 ? t0_victim : NULL,
			.victim_arg = &s,
		};
		rc = kvt_evict_create(&ec, &s.ev[k]);
		if (!rc && c->tier[k].admit.rules)
			rc = kvt_admit_create(&c->tier[k].admit, &s.ad[k]);
	}
	int excl = c->mode == KVT_REPLAY_EXCLUSIVE;
	for (uint64_t q = 0; !rc && q < t->nreq; q++) {
		uint64_t n = t->off[q + 1] - t->off[q];
		if (!n)
			continue; /* a request with no whole block (t->ids may be NULL) */
		const uint32_t *b = t->ids + t->off[q];
		for (uint64_t i = 0; i < n; i++) {
			int in0 = kvt_evict_contains(s.ev[0], b[i]);
			int in1 = !in0 && c->ntiers > 1 && kvt_evict_contains(s.ev[1], b[i]);
			if (!in0 && !in1)
				break;
			r->hit_blocks++;
			r->hit_tier[in0 ? 0 : 1]++;
		}
		for (unsigned k = 0; k < c->ntiers; k++)
			for (uint64_t i = 0; s.ad[k] && i < n; i++)
				kvt_admit_record(s.ad[k], b[i]);
		for (uint64_t i = 0; i < n && !s.err; i++) {
			uint32_t id = b[i];
			if (kvt_evict_lookup(s.ev[0], id))
				continue;
			if (c->ntiers > 1 && kvt_evict_lookup(s.ev[1], id)) {
				/* Promote: take it out of T1 first when exclusive, so
				 * T0's victims may take its place there. */
				if (excl)
					kvt_evict_remove(s.ev[1], id);
				uint64_t before = r->inserts[0];
				offer(&s, 0, id);
				if (r->inserts[0] != before)
					r->promotions++;
				else if (excl)
					offer(&s, 1, id); /* T0 refused: keep it below */
				continue;
			}
			uint64_t before = r->inserts[0];
			offer(&s, 0, id);
			if (c->ntiers > 1 && (!excl || r->inserts[0] == before))
				offer(&s, 1, id);
		}
		r->blocks += n;
		rc = s.err;
	}
	for (unsigned k = 0; k < 2; k++) {
		kvt_evict_destroy(s.ev[k]);
		kvt_admit_destroy(s.ad[k]);
	}
	return rc;
}
