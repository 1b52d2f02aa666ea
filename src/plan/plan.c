/*
 * plan.c — the fleet simulator (plan.h).
 */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

struct sim;

struct node {
	struct sim *s;
	kvt_evict *ev[2];   /* local T0, T1 */
};

struct sim {
	const struct plan_trace *pt;
	const struct plan_conf *c;
	struct plan_result *r;
	struct node *nodes;
	kvt_admit *ad[PLAN_NT];  /* one filter per tier kind, fleet-wide */
	kvt_evict *shared;
	int has1;
	int err;
	/* Routing: requests routed so far (the turn); balanced, each node's
	 * decayed load, their total and the decay a request. */
	uint64_t rr;
	double *load, total, decay;
};

/* Offer a block to policy `e` of tier slot `k` through its filter.  1 if
 * inserted. */
static int offer(struct sim *s, kvt_evict *e, unsigned k, uint32_t id)
{
	if (s->ad[k]) {
		struct kvt_admit_query q = {.id = id, .pos = s->pt->t.pos[id]};
		if (kvt_evict_used(e) + 1 > kvt_evict_capacity(e))
			q.has_victim = kvt_evict_peek_victim(e, &q.victim) == 0;
		if (!kvt_admit_check(s->ad[k], &q)) {
			s->r->rejects[k]++;
			return 0;
		}
	}
	int rc = kvt_evict_insert(e, id, 1);
	if (rc == 0) {
		s->r->inserts[k]++;
		return 1;
	}
	if (rc != KVT_EEXIST && !s->err)
		s->err = rc;
	return 0;
}

/* A block leaving the node's last local tier: keep it in S. */
static void to_shared(struct sim *s, uint64_t id)
{
	if (s->shared && !kvt_evict_contains(s->shared, id))
		offer(s, s->shared, PLAN_TS, (uint32_t)id);
}

static void t0_victim(void *arg, uint64_t id, uint64_t size)
{
	struct node *n = arg;
	struct sim *s = n->s;
	(void)size;
	if (n->ev[1]) {
		if (!kvt_evict_contains(n->ev[1], id) && offer(s, n->ev[1], PLAN_T1, (uint32_t)id))
			s->r->demotions++;
		return;
	}
	to_shared(s, id);
}

static void t1_victim(void *arg, uint64_t id, uint64_t size)
{
	struct node *n = arg;
	(void)size;
	to_shared(n->s, id);
}

static int make_evict(const struct plan_trace *pt, const struct plan_conf *c, uint64_t cap,
		      kvt_evict_victim_fn fn, void *arg, kvt_evict **out)
{
	if (cap == PLAN_UNBOUNDED || cap > pt->t.nids)
		cap = pt->t.nids ? pt->t.nids : 1; /* holds every block: unbounded */
	/* Trace ids are dense (0..nids-1): the policy maps them with a flat
	 * array, no hash table, and sizes its slab for `cap` objects. */
	struct kvt_evict_conf ec = {
		.kind = c->kind,
		.capacity = cap,
		.small_pct = c->s3_small_pct,
		.s3_promote = c->s3_promote,
		.s3_fill_main = c->s3_fill_main,
		.expected_objects = cap,
		.on_victim = fn,
		.victim_arg = arg,
		.id_limit = pt->t.nids ? pt->t.nids : 1,
	};
	return kvt_evict_create(&ec, out);
}

/* Leading blocks of b[0..n) held by node `nd`'s local tiers. */
static uint64_t local_prefix(const struct node *nd, const uint32_t *b, uint64_t n)
{
	uint64_t i = 0;
	for (; i < n; i++)
		if (!kvt_evict_contains(nd->ev[0], b[i]) &&
		    !(nd->ev[1] && kvt_evict_contains(nd->ev[1], b[i])))
			break;
	return i;
}

/* Request q (n blocks, h[] of them hit by tier, run on node ni) into the
 * totals and per_req. */
static void tally(const struct plan_trace *pt, uint64_t q, uint64_t n, const uint64_t h[PLAN_NT],
		  unsigned ni, struct plan_result *r, struct plan_req_hit *per_req)
{
	uint64_t hit = h[0] + h[1] + h[2];
	for (unsigned k = 0; k < PLAN_NT; k++)
		r->hit_tier[k] += h[k];
	r->hit_blocks += hit;
	r->hit_tokens += plan_hit_tokens(pt, q, hit, n);
	r->tokens += pt->in_len[q];
	if (per_req) {
		for (unsigned k = 0; k < PLAN_NT; k++)
			per_req[q].hit[k] = (uint32_t)h[k];
		per_req[q].node = ni;
	}
	r->blocks += n;
	r->requests++;
}

/* One node, one tier that holds every block of the trace (its distinct
 * blocks fit) and no admission filter: nothing is ever evicted, whatever
 * the policy, so a block is resident exactly when it was accessed before.
 * Such a run needs no policy: a bit per block says it, in one pass over
 * the ids, where the policy's bookkeeping (a flat map and a node per
 * block, the most memory of a plan) would only ever answer the same.  A
 * policy or S3-FIFO share that kvt_evict_create refuses is left to the
 * general path, which says so. */
static int holds_all(const struct plan_trace *pt, const struct plan_conf *c)
{
	return c->nodes == 1 && !c->tier[PLAN_T1].capacity && !c->tier[PLAN_TS].capacity &&
	       !c->tier[PLAN_T0].admit.rules && c->tier[PLAN_T0].capacity >= pt->t.nids &&
	       (c->kind == KVT_EVICT_LRU || c->kind == KVT_EVICT_S3FIFO) && c->s3_small_pct <= 90;
}

/* plan_sim_run when holds_all(): the same counts as the general path's
 * single-tier loop, to the block. */
static int sim_holds_all(const struct plan_trace *pt, struct plan_result *r,
			 struct plan_req_hit *per_req)
{
	const struct kvt_trace *t = &pt->t;
	uint64_t *seen = calloc(t->nids / 64 + 1, sizeof(*seen));
	int rc = 0;

	if (!seen)
		return KVT_ENOMEM;
	for (uint64_t q = 0; !rc && q < t->nreq; q++) {
		const uint32_t *b = t->ids + t->off[q];
		uint64_t n = t->off[q + 1] - t->off[q], i = 0, ah = 0;
		uint64_t h[PLAN_NT] = {0, 0, 0};
		while (i < n && b[i] < t->nids && (seen[b[i] >> 6] >> (b[i] & 63) & 1))
			i++;
		h[PLAN_T0] = i;
		for (; i < n; i++) {
			uint32_t id = b[i];
			uint64_t bit = 1ull << (id & 63);
			if (id >= t->nids) {
				/* As the policy refuses it (id_limit). */
				rc = kvt_err(KVT_EINVAL, "id %llu outside the policy's id_limit %llu",
					     (unsigned long long)id,
					     (unsigned long long)(t->nids ? t->nids : 1));
				break;
			}
			if (seen[id >> 6] & bit) {
				ah++;
			} else {
				seen[id >> 6] |= bit;
				r->inserts[PLAN_T0]++;
			}
		}
		r->access_hits[PLAN_T0] += h[PLAN_T0] + ah;
		tally(pt, q, n, h, 0, r, per_req);
	}
	free(seen);
	return rc;
}

/* Each node's policies (T0's victims to T1 or S, T1's to S), the shared
 * tier's, the admission filters and, for balanced routing, the load array.
 * What was made before a failure is left for sim_close. */
static int sim_open(struct sim *s)
{
	const struct plan_trace *pt = s->pt;
	const struct plan_conf *c = s->c;
	s->has1 = c->tier[PLAN_T1].capacity != 0;
	s->nodes = calloc(c->nodes, sizeof(*s->nodes));
	int rc = s->nodes ? 0 : KVT_ENOMEM;
	for (unsigned i = 0; !rc && i < c->nodes; i++) {
		struct node *nd = &s->nodes[i];
		nd->s = s;
		/* T0's victims go to T1 or S; with neither, nowhere. */
		rc = make_evict(pt, c, c->tier[PLAN_T0].capacity,
				s->has1 || c->tier[PLAN_TS].capacity ? t0_victim : NULL, nd,
				&nd->ev[0]);
		if (!rc && s->has1)
			rc = make_evict(pt, c, c->tier[PLAN_T1].capacity, t1_victim, nd,
					&nd->ev[1]);
	}
	if (!rc && c->tier[PLAN_TS].capacity)
		rc = make_evict(pt, c, c->tier[PLAN_TS].capacity, NULL, NULL, &s->shared);
	for (unsigned k = 0; !rc && k < PLAN_NT; k++)
		if (c->tier[k].capacity && c->tier[k].admit.rules)
			rc = kvt_admit_create(&c->tier[k].admit, &s->ad[k]);
	/* Balanced routing: each node's recent work (blocks it computed),
	 * decayed by `decay` a request; a node above PLAN_BALANCE_SLACK times
	 * the mean is passed over however long its prefix. */
	s->decay = 1 - 1.0 / (4.0 * c->nodes);
	s->total = 0;
	if (!rc && c->route == PLAN_ROUTE_BALANCED && c->nodes > 1 &&
	    !(s->load = calloc(c->nodes, sizeof(*s->load))))
		rc = KVT_ENOMEM;
	return rc;
}

/* Free what sim_open made, whether or not it all was. */
static void sim_close(struct sim *s)
{
	free(s->load);
	for (unsigned i = 0; s->nodes && i < s->c->nodes; i++) {
		kvt_evict_destroy(s->nodes[i].ev[0]);
		kvt_evict_destroy(s->nodes[i].ev[1]);
	}
	free(s->nodes);
	kvt_evict_destroy(s->shared);
	for (unsigned k = 0; k < PLAN_NT; k++)
		kvt_admit_destroy(s->ad[k]);
}

/* The node request b[0..n) runs on: the next in turn, or with affinity the
 * one holding its longest local prefix (ties to the earliest in turn), or
 * when balanced the longest prefix among the nodes not over the bound. */
static unsigned sim_route(struct sim *s, const uint32_t *b, uint64_t n)
{
	const struct plan_conf *c = s->c;
	unsigned ni = (unsigned)(s->rr++ % c->nodes);
	if (c->route == PLAN_ROUTE_AFFINITY && c->nodes > 1) {
		uint64_t best = local_prefix(&s->nodes[ni], b, n);
		for (unsigned j = 1; j < c->nodes && best < n; j++) {
			unsigned cand = (ni + j) % c->nodes;
			uint64_t h = local_prefix(&s->nodes[cand], b, n);
			if (h > best) {
				best = h;
				ni = cand;
			}
		}
	} else if (s->load) {
		double bound = PLAN_BALANCE_SLACK * s->total / c->nodes;
		int64_t best = -1;
		unsigned start = ni;
		for (unsigned j = 0; j < c->nodes; j++) {
			unsigned cand = (start + j) % c->nodes;
			if (s->load[cand] > bound)
				continue;
			int64_t h = (int64_t)local_prefix(&s->nodes[cand], b, n);
			if (h > best) {
				best = h;
				ni = cand;
			}
		}
	}
	return ni;
}

/* Request b[0..n) on a node of one tier (no T1, no S): its hit prefix into
 * h[PLAN_T0], its accesses into the policy and the counts. */
static void sim_single(struct sim *s, struct node *nd, const uint32_t *b, uint64_t n,
		       uint64_t h[PLAN_NT])
{
	struct plan_result *r = s->r;
	/* One tier: until the first miss nothing is inserted, so nothing is
	 * evicted, and a block's lookup during the accesses answers exactly
	 * what it would have before them.  So the hit prefix is counted in
	 * the same pass (half the hash probes of the general path). */
	if (!s->ad[PLAN_T0]) {
		/* Nothing between a miss and its insert: each block is one
		 * access of the policy. */
		uint64_t ah;
		s->err = kvt_evict_access_seq(nd->ev[0], b, n, &h[PLAN_T0], &ah);
		r->access_hits[PLAN_T0] += ah;
		r->inserts[PLAN_T0] += s->err ? 0 : n - ah;
		return;
	}
	for (uint64_t i = 0; i < n; i++)
		kvt_admit_record(s->ad[PLAN_T0], b[i]);
	uint64_t i = 0, ah = 0;
	while (i < n && kvt_evict_lookup(nd->ev[0], b[i]))
		i++;
	h[PLAN_T0] = i;
	for (; i < n && !s->err; i++) {
		if (kvt_evict_lookup(nd->ev[0], b[i]))
			ah++;
		else
			offer(s, nd->ev[0], PLAN_T0, b[i]);
	}
	r->access_hits[PLAN_T0] += h[PLAN_T0] + ah;
}

/* Request b[0..n) on node nd of several tiers: its hit prefix tier by tier
 * into h[], its blocks to the admission filters, then each access: a hit
 * in T1 or S promotes to T0, a miss is offered to T0 (else T1) and S. */
static void sim_tiers(struct sim *s, struct node *nd, const uint32_t *b, uint64_t n,
		      uint64_t h[PLAN_NT])
{
	struct plan_result *r = s->r;
	for (uint64_t i = 0; i < n; i++) {
		if (kvt_evict_contains(nd->ev[0], b[i]))
			h[PLAN_T0]++;
		else if (nd->ev[1] && kvt_evict_contains(nd->ev[1], b[i]))
			h[PLAN_T1]++;
		else if (s->shared && kvt_evict_contains(s->shared, b[i]))
			h[PLAN_TS]++;
		else
			break;
	}
	for (unsigned k = 0; k < PLAN_NT; k++)
		for (uint64_t i = 0; s->ad[k] && i < n; i++)
			kvt_admit_record(s->ad[k], b[i]);
	for (uint64_t i = 0; i < n && !s->err; i++) {
		uint32_t id = b[i];
		if (kvt_evict_lookup(nd->ev[0], id)) {
			r->access_hits[PLAN_T0]++;
			continue;
		}
		if (nd->ev[1] && kvt_evict_lookup(nd->ev[1], id)) {
			r->access_hits[PLAN_T1]++;
			/* Exclusive: out of T1 first, so T0's victims may
			 * take its place there. */
			kvt_evict_remove(nd->ev[1], id);
			if (offer(s, nd->ev[0], PLAN_T0, id))
				r->promotions++;
			else
				offer(s, nd->ev[1], PLAN_T1, id);
			continue;
		}
		if (s->shared && kvt_evict_lookup(s->shared, id)) {
			r->access_hits[PLAN_TS]++;
			if (offer(s, nd->ev[0], PLAN_T0, id))
				r->promotions++;
			else if (nd->ev[1])
				offer(s, nd->ev[1], PLAN_T1, id);
			continue;
		}
		if (!offer(s, nd->ev[0], PLAN_T0, id) && nd->ev[1])
			offer(s, nd->ev[1], PLAN_T1, id);
		to_shared(s, id);
	}
}

/* Balanced routing after a request on node ni that computed `computed`
 * blocks: every node's load decays, ni's grows by its work. */
static void sim_balance(struct sim *s, unsigned ni, uint64_t computed)
{
	/* In locals: the stores to load[] could alias s's doubles. */
	double *load = s->load, decay = s->decay, total = 0;
	for (unsigned i = 0; i < s->c->nodes; i++)
		total += load[i] *= decay;
	load[ni] += (double)computed + 1;
	total += (double)computed + 1;
	s->total = total;
}

int plan_sim_run(const struct plan_trace *pt, const struct plan_conf *c,
		 struct plan_result *r, struct plan_req_hit *per_req)
{
	memset(r, 0, sizeof(*r));
	if (c->nodes < 1 || c->nodes > PLAN_MAX_NODES || !c->tier[PLAN_T0].capacity)
		return kvt_err(KVT_EINVAL, "plan: %u nodes, T0 of %llu blocks", c->nodes,
			       (unsigned long long)c->tier[PLAN_T0].capacity);
	if (holds_all(pt, c))
		return sim_holds_all(pt, r, per_req);
	struct sim s = {.pt = pt, .c = c, .r = r};
	int rc = sim_open(&s);
	const struct kvt_trace *t = &pt->t;
	int single = c->nodes == 1 && !s.has1 && !s.shared;
	for (uint64_t q = 0; !rc && q < t->nreq; q++) {
		const uint32_t *b = t->ids + t->off[q];
		uint64_t n = t->off[q + 1] - t->off[q];
		unsigned ni = sim_route(&s, b, n);
		uint64_t h[PLAN_NT] = {0, 0, 0};
		if (single)
			sim_single(&s, &s.nodes[ni], b, n, h);
		else
			sim_tiers(&s, &s.nodes[ni], b, n, h);
		tally(pt, q, n, h, ni, r, per_req);
		if (s.load)
			sim_balance(&s, ni, n - (h[0] + h[1] + h[2]));
		rc = s.err;
	}
	sim_close(&s);
	return rc;
}
