/*
 * explain.c — why a chunk is not served (kvt_why, kvt_why_tokens,
 * kvt_store_misses; docs/WHY.md).
 *
 * Peers of kvtier answer a zero hit rate with silence.  The store knows
 * more than it says: which tiers hold a key now, which chunks left a tier
 * lately and why, which namespaces it has resolved (the history, why.c),
 * and whether a tier is answering.  This file puts the answer together;
 * it decides nothing about the chunks themselves.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "key/key.h"
#include "store/store_int.h"
#include "store/why.h"

static void say(kvt_why_chunk *c, int reason, int tier, double when, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void say(kvt_why_chunk *c, int reason, int tier, double when, const char *fmt, ...)
{
	va_list ap;

	c->reason = reason;
	c->tier = tier;
	c->when = when;
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
	va_end(ap);
}

static const char *tier_name(kvt_store *st, int tier)
{
	return tier >= 0 && tier < st->n_tiers ? st->tiers[tier]->ops->name : "no";
}

/* Why no tier holds `key`: the history's word, a tier down, or never. */
static void why_absent(kvt_store *st, const kvt_key *key, int down, kvt_why_chunk *c)
{
	int reason, tier;
	double when;

	if (why_recall(&st->why, key, &reason, &tier, &when)) {
		static const char *const what[KVT_WHY_REASONS] = {
			[KVT_WHY_EVICTED] = "evicted from the %s tier to make room",
			[KVT_WHY_DELETED] = "deleted from the %s tier",
			[KVT_WHY_CORRUPT] = "dropped from the %s tier: it failed its checks",
			[KVT_WHY_EXPIRED] = "removed from the %s tier past the TTL",
			[KVT_WHY_DEADLINE] = "not loaded from the %s tier by its deadline",
		};
		const char *f = what[reason] ? what[reason] : "gone from the %s tier";
		char at[64];
		time_t t = (time_t)when;
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		say(c, reason, tier, when, f, tier_name(st, tier));
#pragma GCC diagnostic pop
		snprintf(c->detail + strlen(c->detail), sizeof(c->detail) - strlen(c->detail),
			 " at %s", at);
		return;
	}
	if (down >= 0) {
		say(c, KVT_WHY_TIER_DOWN, down, 0,
		    "the %s tier does not answer: it may hold the chunk", tier_name(st, down));
		return;
	}
	say(c, KVT_WHY_NEVER, -1, 0, "never stored under this namespace (none of the %d tiers "
	    "holds it, and no removal of it is remembered)", st->n_tiers);
}

/* A chunk a lower tier holds whose last load missed its deadline: the
 * engine recomputed it, and will again while loads take that long. */
static int deadline_missed(kvt_store *st, const kvt_key *key, kvt_why_chunk *c)
{
	int reason, tier;
	double when;

	if (!why_recall(&st->why, key, &reason, &tier, &when) || reason != KVT_WHY_DEADLINE)
		return 0;
	why_absent(st, key, -1, c);
	return 1;
}

int kvt_why(kvt_store *st, const kvt_ns *ns, const kvt_key *keys, size_t n, kvt_why_chunk *out)
{
	int down, served = -1;

	kvt_err_clear();
	if (!st || !ns || (n && (!keys || !out)))
		return kvt_err(KVT_EINVAL, "store, namespace, keys or output missing");
	if (st->n_tiers == 1 && st->tiers[0]->ops->why) /* kvtierd's client: it knows */
		return st->tiers[0]->ops->why(st->tiers[0], keys, n, out);
	down = store_tier_down(st, 0);
	for (size_t i = 0; i < n; i++) {
		kvt_why_chunk *c = &out[i];
		int held = -1;
		double born;

		memset(c, 0, sizeof(*c));
		for (int t = 0; t < st->n_tiers && held < 0; t++)
			if (st->tiers[t]->ops->exists(st->tiers[t], &keys[i]) == 1)
				held = t;
		born = held >= 0 ? store_held_expired(st, held, &keys[i]) : 0;
		if (born > 0) {
			say(c, KVT_WHY_EXPIRED, held, born, "held by the %s tier past the TTL of "
			    "%llu s: a read misses it", tier_name(st, held),
			    (unsigned long long)st->cfg.ttl_s);
			held = -1; /* not served */
		} else if (held > 0 && deadline_missed(st, &keys[i], c)) {
			held = -1; /* the engine recomputed it */
		} else if (held >= 0 && served < 0)
			say(c, KVT_WHY_HIT, held, 0, "served from the %s tier", tier_name(st, held));
		else if (held >= 0)
			say(c, KVT_WHY_PREFIX, held, 0, "held by the %s tier, not served: chunk %d "
			    "before it is missing", tier_name(st, held), served);
		else
			why_absent(st, &keys[i], down, c);
		if (held < 0 && served < 0)
			served = (int)i;
	}
	return served < 0 ? (int)n : served;
}

/* The fields in which namespace `b` differs from `a`, as a sentence. */
static void ns_diff(const struct why_ns *a, const struct why_ns *b, char *out, size_t cap)
{
	const kvt_layout *x = &a->ns.layout, *y = &b->ns.layout;
	size_t n = 0;

#define DIFF_S(name, f)                                                              \
	if (strcmp(a->f, b->f) && n < cap)                                            \
		n += (size_t)snprintf(out + n, cap - n, "%s%s '%s' here, '%s' there", \
				      n ? "; " : "", name, a->f, b->f)
#define DIFF_U(name, v, w)                                                           \
	if ((v) != (w) && n < cap)                                                    \
		n += (size_t)snprintf(out + n, cap - n, "%s%s %u here, %u there",     \
				      n ? "; " : "", name, (unsigned)(v), (unsigned)(w))
	out[0] = 0;
	DIFF_S("model", model);
	DIFF_S("revision", revision);
	DIFF_S("LoRA", lora);
	DIFF_U("dtype", x->dtype, y->dtype);
	DIFF_U("layers", x->num_layers, y->num_layers);
	DIFF_U("KV heads", x->num_kv_heads, y->num_kv_heads);
	DIFF_U("head dim", x->head_dim, y->head_dim);
	DIFF_U("KV planes", x->kv_planes, y->kv_planes);
	DIFF_U("scale bytes", x->scale_bytes, y->scale_bytes);
	DIFF_U("block size", x->block_size, y->block_size);
	DIFF_U("chunk tokens", x->chunk_tokens, y->chunk_tokens);
	DIFF_U("tp rank", a->ns.tp_rank, b->ns.tp_rank);
	DIFF_U("tp size", a->ns.tp_size, b->ns.tp_size);
	DIFF_U("pp rank", a->ns.pp_rank, b->ns.pp_rank);
	DIFF_U("pp size", a->ns.pp_size, b->ns.pp_size);
	DIFF_U("hash scheme", a->ns.hash_scheme, b->ns.hash_scheme);
	if (!n)
		snprintf(out, cap, "the tenant's secret or the rank sharing");
#undef DIFF_S
#undef DIFF_U
}

/* How many of the prompt's tokens namespace `o` holds as a prefix. */
static size_t held_tokens(kvt_store *st, const kvt_ns *o, const uint32_t *tokens, size_t n_tokens,
			  const kvt_extra_keys *extra)
{
	size_t ct = o->layout.chunk_tokens, max = ct ? n_tokens / ct : 0, hit;
	kvt_key *k;
	int m;

	if (!max || !(k = malloc(max * sizeof(*k))))
		return 0;
	m = kvt_key_chain(o, tokens, n_tokens, extra, k, max);
	hit = m > 0 ? store_chain_held(st, k, (size_t)m, NULL) : 0; /* not a counted miss */
	free(k);
	return hit * ct;
}

int kvt_why_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		   const kvt_extra_keys *extra, kvt_why_chunk *out, size_t max_out)
{
	struct why_ns self, *others;
	kvt_key *keys;
	size_t ct, n, n_others = 0;
	int m, acct, rc;

	kvt_err_clear();
	if (!st || !ns || (n_tokens && !tokens) || (max_out && !out))
		return kvt_err(KVT_EINVAL, "store, namespace, tokens or output missing");
	ct = ns->layout.chunk_tokens;
	n = ct ? n_tokens / ct : 0;
	if (n > max_out)
		n = max_out;
	if (!n)
		return 0;
	if (!(keys = malloc(n * sizeof(*keys))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	if ((m = kvt_key_chain(ns, tokens, n * ct, extra, keys, n)) < 0) {
		free(keys);
		return m;
	}
	rc = kvt_why(st, ns, keys, (size_t)m, out);
	free(keys);
	if (rc < 0 || rc == m)
		return rc < 0 ? rc : m;

	/* The chunks no tier holds: were the same tokens stored under another
	 * namespace of this tenant?  Only the namespaces this store resolved
	 * can be tried: a key is a digest of its namespace. */
	acct = store_ns_acct(st, ns);
	others = malloc(WHY_MAX_NS * sizeof(*others));
	if (!others)
		return m;
	memset(&self, 0, sizeof(self));
	self.ns = *ns;
	pthread_mutex_lock(&st->why.mu);
	for (uint32_t i = 0; i < st->why.n_ns; i++) {
		const struct why_ns *e = &st->why.ns[i];
		if (!memcmp(e->ns.digest, ns->digest, sizeof(ns->digest)))
			self = *e; /* its names, for the comparison */
		else if (e->acct == acct)
			others[n_others++] = *e;
	}
	pthread_mutex_unlock(&st->why.mu);
	for (size_t j = 0; j < n_others; j++) {
		size_t have = held_tokens(st, &others[j].ns, tokens, n_tokens, extra);
		char diff[208];
		if (!have)
			continue;
		ns_diff(&self, &others[j], diff, sizeof(diff));
		for (int i = 0; i < m; i++) {
			kvt_why_chunk *c = &out[i];
			if ((c->reason != KVT_WHY_NEVER && c->reason != KVT_WHY_EVICTED) ||
			    (size_t)(i + 1) * ct > have)
				continue;
			say(c, KVT_WHY_NAMESPACE, -1, 0, "stored under another namespace: %s", diff);
		}
	}
	free(others);
	return m;
}

uint64_t kvt_store_misses(kvt_store *st, const char *tenant, int reason, int tier)
{
	int acct;

	if (!st || reason < 0 || reason >= KVT_WHY_REASONS || tier < -1 || tier >= st->n_tiers)
		return 0;
	if ((acct = store_tenant_acct(st, tenant)) < 0 || acct >= WHY_ACCTS)
		return 0;
	return atomic_load_explicit(&st->why.misses[acct][reason][tier < 0 ? WHY_TIERS - 1 : tier],
				    memory_order_relaxed);
}
