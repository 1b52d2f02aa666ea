/*
 * hier.c — per-tier eviction, admission, pins and budgets for the store.
 *
 * One mutex per tier guards its policy objects; it is held for O(1)
 * bookkeeping only, never across I/O or a copy.  Policies name objects by a
 * 64-bit id: the whole key (already a hash for real chunks) is
 * folded to 64 bits; a small map turns a victim's id back into its full key
 * and says which account (tenant) the chunk is charged to.
 *
 * Accounts.  Each account has a policy object of its own in each tier, so
 * that "the least valuable chunk of tenant B" is a question its policy can
 * answer.  Account 0 (the default tenant) exists from the start and is all a
 * store without tenants ever uses: it is then the one policy over the whole
 * capacity, exactly as without accounts.  Another account's policy is made
 * at its first insert.  After an insert, two rules run in turn:
 *  - quota: while the inserting account holds more than its quota, its own
 *    policy gives up victims;
 *  - capacity: while all accounts together hold more than the tier's
 *    policy capacity, of the accounts above their reservations the one
 *    whose next victim was used least recently gives it up (for LRU that
 *    is the global LRU order, as if one policy held everything).  An
 *    account at or under its reservation is never asked, so another
 *    tenant's flood cannot push it below its share (reservations are
 *    checked to fit the capacity when they are set).
 */
#include "store/hier.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "policy/admit.h"
#include "policy/evict.h"
#include "store/config.h"

#define MAX_TIERS 8

struct idmap_ent {
	uint64_t id;
	kvt_key key;
	uint32_t acct;
	uint64_t tick;      /* the tier's clock at its last insert or hit */
	uint64_t units;     /* its size in the policy (a reconfiguration
			     * rebuilds the policy from these) */
	uint32_t pins;
	struct idmap_ent *next;
};

/* One tenant's share of one tier, in the tier's accounting units. */
struct hier_acct {
	kvt_evict *ev;           /* NULL until the account's first insert */
	uint64_t quota, reserve; /* units; quota 0 = none */
	uint64_t quota_evictions, share_evictions;
};

struct hier_tier {
	pthread_mutex_t mu;
	struct hier_tier_conf conf;
	int policy;         /* 0: the tier's own LRU decides */
	uint64_t units;     /* the policy's capacity, all accounts together */
	uint64_t clock;     /* ticks once per insert or hit (under mu) */
	struct hier_acct acct[HIER_MAX_ACCTS];
	kvt_admit *adm;     /* NULL: admit everything */
	struct idmap_ent **map;
	size_t map_mask, map_n;
	/* victims of the insert in progress (under mu) */
	kvt_key *vict;
	size_t n_vict, cap_vict;
	/* token bucket for background copies */
	pthread_mutex_t tb_mu;
	double tokens;
	struct timespec tb_last;
	_Atomic uint64_t promotions, demotions, admit_rejects, policy_evictions, pinned;
};

struct kvt_hier {
	int n;
	struct hier_tier t[MAX_TIERS];
};

/* The policies name objects by 64 bits.  Fold all 32 bytes of the key in,
 * so that keys differing anywhere get different ids (real keys are hashes,
 * but a client's own keys need not be). */
static uint64_t key_id(const kvt_key *k)
{
	uint64_t w[4], id = 0;

	memcpy(w, k->b, sizeof(w));
	for (int i = 0; i < 4; i++) {
		id ^= w[i];
		id *= 0x9E3779B97F4A7C15ull;
		id ^= id >> 29;
	}
	return id;
}

static size_t map_slot(const struct hier_tier *t, uint64_t id)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & t->map_mask;
}

static int map_grow(struct hier_tier *t)
{
	size_t n = (t->map_mask + 1) * 2;
	struct idmap_ent **nm = calloc(n, sizeof(*nm));

	if (!nm)
		return KVT_ENOMEM;
	for (size_t i = 0; i <= t->map_mask; i++) {
		struct idmap_ent *e = t->map[i], *next;
		for (; e; e = next) {
			size_t s = (size_t)((e->id * 0x9E3779B97F4A7C15ull) >> 20) & (n - 1);
			next = e->next;
			e->next = nm[s];
			nm[s] = e;
		}
	}
	free(t->map);
	t->map = nm;
	t->map_mask = n - 1;
	return 0;
}

static struct idmap_ent *map_find(const struct hier_tier *t, uint64_t id)
{
	struct idmap_ent *e;

	for (e = t->map[map_slot(t, id)]; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

/* The entry of `k`, made and charged to `acct` if it is new (a key already
 * there keeps the account it has).  NULL if out of memory. */
static struct idmap_ent *map_put(struct hier_tier *t, const kvt_key *k, uint32_t acct)
{
	uint64_t id = key_id(k);
	struct idmap_ent *e = map_find(t, id);

	if (e)
		return e;
	if (t->map_n > t->map_mask && map_grow(t))
		return NULL;
	e = malloc(sizeof(*e));
	if (!e)
		return NULL;
	e->id = id;
	e->key = *k;
	e->acct = acct;
	e->units = 1;
	e->pins = 0;
	e->next = t->map[map_slot(t, id)];
	t->map[map_slot(t, id)] = e;
	t->map_n++;
	return e;
}

/* Remove id; copy its key and account out when asked.  1 if it was there. */
static int map_take(struct hier_tier *t, uint64_t id, kvt_key *out, uint32_t *acct)
{
	struct idmap_ent **pp = &t->map[map_slot(t, id)], *e;

	for (; (e = *pp); pp = &e->next)
		if (e->id == id) {
			*pp = e->next;
			if (out)
				*out = e->key;
			if (acct)
				*acct = e->acct;
			free(e);
			t->map_n--;
			return 1;
		}
	return 0;
}

static void vict_add(struct hier_tier *t, const kvt_key *k);

static void on_victim(void *arg, uint64_t id, uint64_t size)
{
	struct hier_tier *t = arg;
	kvt_key k;

	(void)size;
	if (!map_take(t, id, &k, NULL))
		return;
	vict_add(t, &k);
}

static void vict_add(struct hier_tier *t, const kvt_key *k)
{
	if (t->n_vict == t->cap_vict) {
		size_t nc = t->cap_vict ? t->cap_vict * 2 : 16;
		kvt_key *nv = realloc(t->vict, nc * sizeof(*nv));
		if (!nv)
			return; /* the tier's own LRU remains the backstop */
		t->vict = nv;
		t->cap_vict = nc;
	}
	t->vict[t->n_vict++] = *k;
}

/* The eviction policy tier `t`'s configuration asks for (under t->mu: a
 * reload changes it), over `units`. */
static struct kvt_evict_conf evict_conf(struct hier_tier *t, uint64_t units)
{
	return (struct kvt_evict_conf){
		.kind = (int)t->conf.eviction,
		.capacity = units,
		.small_pct = t->conf.s3_small_pct,
		.s3_promote = t->conf.s3_promote,
		.on_victim = on_victim,
		.victim_arg = t,
	};
}

/* The policy of account `a`, made at its first use with the whole
 * capacity (the rules above, not its own capacity, bound what it holds). */
static kvt_evict *acct_ev(struct hier_tier *t, uint32_t a)
{
	struct kvt_evict_conf ec = evict_conf(t, t->units);

	if (!t->acct[a].ev && kvt_evict_create(&ec, &t->acct[a].ev))
		return NULL;
	return t->acct[a].ev;
}

static uint64_t tier_used(const struct hier_tier *t)
{
	uint64_t used = 0;

	for (int a = 0; a < HIER_MAX_ACCTS; a++)
		if (t->acct[a].ev)
			used += kvt_evict_used(t->acct[a].ev);
	return used;
}

/* Take account a's policy's next victim out of it as a victim of the
 * insert in progress.  0, or KVT_ENOTFOUND if nothing of it is evictable. */
static int acct_give_up(struct hier_tier *t, uint32_t a)
{
	kvt_evict *ev = t->acct[a].ev;
	uint64_t id;
	kvt_key k;

	if (!ev || kvt_evict_peek_victim(ev, &id))
		return KVT_ENOTFOUND;
	(void)kvt_evict_remove(ev, id);
	if (map_take(t, id, &k, NULL))
		vict_add(t, &k);
	return 0;
}

/* The two rules of the file's comment, after an insert charged to `a`. */
static void acct_enforce(struct hier_tier *t, uint32_t a)
{
	struct hier_acct *ac = &t->acct[a];
	uint64_t used;

	while (ac->quota && ac->ev && kvt_evict_used(ac->ev) > ac->quota &&
	       acct_give_up(t, a) == 0)
		ac->quota_evictions++;
	while ((used = tier_used(t)) > t->units) {
		uint64_t oldest = UINT64_MAX, id;
		int best = -1;

		for (int b = 0; b < HIER_MAX_ACCTS; b++) {
			struct hier_acct *x = &t->acct[b];
			struct idmap_ent *e;
			if (!x->ev || kvt_evict_used(x->ev) <= x->reserve ||
			    kvt_evict_peek_victim(x->ev, &id))
				continue;
			e = map_find(t, id);
			if (!e || e->tick < oldest) {
				oldest = e ? e->tick : 0;
				best = b;
			}
		}
		if (best < 0 || acct_give_up(t, (uint32_t)best))
			break; /* all at their reservations or pinned: the tier's
				* own LRU remains the backstop */
		t->acct[best].share_evictions++;
	}
}

int hier_open(int n_tiers, const struct hier_tier_conf *conf, kvt_hier **out)
{
	kvt_hier *h;

	if (n_tiers < 0 || n_tiers > MAX_TIERS)
		return kvt_err(KVT_EINVAL, "%d tiers", n_tiers);
	h = calloc(1, sizeof(*h));
	if (!h)
		return kvt_err(KVT_ENOMEM, "out of memory");
	h->n = n_tiers;
	for (int i = 0; i < n_tiers; i++) {
		struct hier_tier *t = &h->t[i];
		int rc;

		pthread_mutex_init(&t->mu, NULL);
		pthread_mutex_init(&t->tb_mu, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t->tb_last);
		t->conf = conf[i];
		if (!t->conf.round)
			t->conf.round = 1;
		t->map = calloc(1024, sizeof(*t->map));
		t->map_mask = 1023;
		if (!t->map) {
			hier_close(h);
			return kvt_err(KVT_ENOMEM, "out of memory");
		}
		if (conf[i].eviction && conf[i].capacity >= t->conf.round) {
			struct kvt_evict_conf ec = evict_conf(t, conf[i].capacity / t->conf.round);

			t->policy = (int)conf[i].eviction;
			t->units = ec.capacity;
			if ((rc = kvt_evict_create(&ec, &t->acct[0].ev))) {
				hier_close(h);
				return kvt_err_prefix(rc, "tier %d eviction policy: ", i);
			}
		}
		if (conf[i].admit_rules) {
			struct kvt_admit_conf ac = {
				.rules = conf[i].admit_rules,
				.seen_n = conf[i].admit_seen,
				.doorkeeper = 1,
			};
			if ((rc = kvt_admit_create(&ac, &t->adm))) {
				hier_close(h);
				return kvt_err_prefix(rc, "tier %d admission: ", i);
			}
		}
	}
	*out = h;
	return 0;
}

void hier_close(kvt_hier *h)
{
	if (!h)
		return;
	for (int i = 0; i < h->n; i++) {
		struct hier_tier *t = &h->t[i];
		if (t->map)
			for (size_t s = 0; s <= t->map_mask; s++)
				while (t->map[s])
					map_take(t, t->map[s]->id, NULL, NULL);
		free(t->map);
		free(t->vict);
		for (int a = 0; a < HIER_MAX_ACCTS; a++)
			kvt_evict_destroy(t->acct[a].ev);
		kvt_admit_destroy(t->adm);
		pthread_mutex_destroy(&t->mu);
		pthread_mutex_destroy(&t->tb_mu);
	}
	free(h);
}

int hier_write_mode(const kvt_hier *h, int tier)
{
	/* atomic: a reconfiguration may change it under a reader */
	return tier < h->n ? (int)__atomic_load_n(&h->t[tier].conf.write, __ATOMIC_RELAXED)
			   : KVT_WRITE_NONE;
}

void hier_plan_put(const kvt_hier *h, int durability, struct hier_put_plan *p)
{
	p->now = p->through = p->takes = 0;
	for (int i = 0; i < h->n; i++) {
		int w = hier_write_mode(h, i);
		if (w == KVT_WRITE_NONE)
			continue;
		p->takes |= 1u << i;
		if (durability > KVT_DUR_CACHED || !p->now)
			p->now |= 1u << i; /* write-back tiers too when asked */
		else if (w == KVT_WRITE_THROUGH)
			p->through |= 1u << i;
	}
}

/* --- reconfiguration ---------------------------------------------------------- */

static void vict_out(struct hier_tier *t, kvt_key **victims, size_t *n);

struct rebuild_ent {
	uint64_t id, tick, units;
	uint32_t acct, pins;
};

static int by_tick(const void *a, const void *b)
{
	const struct rebuild_ent *x = a, *y = b;
	return x->tick < y->tick ? -1 : x->tick > y->tick;
}

/* Replace every account's policy by the one `c` names, holding what the
 * old ones held: the chunks are inserted oldest first (by the tier's
 * clock), so recency carries over, and pinned again.  Under t->mu. */
static int rebuild_eviction(struct hier_tier *t, const struct hier_tier_conf *c)
{
	kvt_evict *fresh[HIER_MAX_ACCTS] = { 0 }, *old;
	struct hier_tier_conf keep = t->conf;
	struct kvt_evict_conf ec;

	t->conf.eviction = c->eviction;
	t->conf.s3_small_pct = c->s3_small_pct;
	t->conf.s3_promote = c->s3_promote;
	ec = evict_conf(t, t->units);
	t->conf = keep;
	struct rebuild_ent *all = malloc((t->map_n ? t->map_n : 1) * sizeof(*all));
	size_t n = 0;
	int rc = 0;

	if (!all)
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (int a = 0; a < HIER_MAX_ACCTS && rc == 0; a++)
		if (t->acct[a].ev)
			rc = kvt_evict_create(&ec, &fresh[a]);
	if (rc) {
		for (int a = 0; a < HIER_MAX_ACCTS; a++)
			kvt_evict_destroy(fresh[a]);
		free(all);
		return rc;
	}
	for (size_t s = 0; s <= t->map_mask; s++)
		for (struct idmap_ent *e = t->map[s]; e; e = e->next)
			all[n++] = (struct rebuild_ent){ e->id, e->tick, e->units, e->acct, e->pins };
	qsort(all, n, sizeof(*all), by_tick);
	for (int a = 0; a < HIER_MAX_ACCTS; a++) {
		old = t->acct[a].ev;
		t->acct[a].ev = fresh[a];
		kvt_evict_destroy(old);
	}
	/* t->policy, "has one", stays */
	t->conf.eviction = c->eviction;
	t->conf.s3_small_pct = c->s3_small_pct;
	t->conf.s3_promote = c->s3_promote;
	for (size_t i = 0; i < n; i++) {
		kvt_evict *ev = t->acct[all[i].acct].ev;
		/* A victim the new policy picks while it fills (its queues
		 * may count differently) goes out through on_victim. */
		if (!ev || kvt_evict_insert(ev, all[i].id, all[i].units))
			continue;
		for (uint32_t p = 0; p < all[i].pins; p++)
			(void)kvt_evict_pin(ev, all[i].id);
	}
	free(all);
	return 0;
}

int hier_reconfigure(kvt_hier *h, int tier, const struct hier_tier_conf *c,
		     kvt_key **victims, size_t *n)
{
	struct hier_tier *t = &h->t[tier];
	kvt_admit *adm = NULL, *old = NULL;
	int rc = 0;

	*victims = NULL;
	*n = 0;
	if (tier < 0 || tier >= h->n)
		return kvt_err(KVT_EINVAL, "tier %d", tier);
	if (c->admit_rules) {
		struct kvt_admit_conf ac = { .rules = c->admit_rules, .seen_n = c->admit_seen,
					     .doorkeeper = 1 };
		if ((rc = kvt_admit_create(&ac, &adm)))
			return kvt_err_prefix(rc, "tier %d admission: ", tier);
	}
	pthread_mutex_lock(&t->mu);
	if (c->admit_rules != t->conf.admit_rules || c->admit_seen != t->conf.admit_seen) {
		/* what the old one counted starts over */
		old = t->adm;
		__atomic_store_n(&t->adm, adm, __ATOMIC_RELEASE);
		adm = NULL;
		t->conf.admit_rules = c->admit_rules;
		t->conf.admit_seen = c->admit_seen;
	}
	__atomic_store_n(&t->conf.write, c->write, __ATOMIC_RELAXED);
	__atomic_store_n(&t->conf.background_bps, c->background_bps, __ATOMIC_RELAXED);
	if (c->eviction != t->conf.eviction ||
	    (c->eviction == KVT_EVICT_S3FIFO && (c->s3_small_pct != t->conf.s3_small_pct ||
						 c->s3_promote != t->conf.s3_promote))) {
		t->n_vict = 0;
		if (!t->policy || !c->eviction)
			rc = kvt_err(KVT_ENOTSUP, "tier %d: an eviction policy is added or "
				     "removed at the next start only", tier);
		else
			rc = rebuild_eviction(t, c);
		vict_out(t, victims, n);
	}
	pthread_mutex_unlock(&t->mu);
	kvt_admit_destroy(old);
	kvt_admit_destroy(adm);
	return rc;
}

void hier_seen(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	if (!__atomic_load_n(&t->adm, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&t->mu);
	if (t->adm) /* a reconfiguration may have taken it since */
		kvt_admit_record(t->adm, key_id(key));
	pthread_mutex_unlock(&t->mu);
}

/* May a chunk enter `tier`?  Counts a rejection. */
static int hier_admit(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	struct kvt_admit_query q = { .id = key_id(key), .pos = UINT32_MAX };
	int ok;

	if (!__atomic_load_n(&t->adm, __ATOMIC_ACQUIRE))
		return 1;
	pthread_mutex_lock(&t->mu);
	/* TinyLFU weighs a newcomer against the default account's next
	 * victim: the one a store without tenants would lose. */
	if (t->acct[0].ev)
		q.has_victim = kvt_evict_peek_victim(t->acct[0].ev, &q.victim) == 0;
	ok = t->adm ? kvt_admit_check(t->adm, &q) : 1;
	pthread_mutex_unlock(&t->mu);
	if (!ok)
		atomic_fetch_add(&t->admit_rejects, 1);
	return ok;
}

/* A read hit in `tier`: recency/frequency bookkeeping. */
static void hier_hit(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	struct idmap_ent *e;

	if (!t->policy)
		return;
	pthread_mutex_lock(&t->mu);
	if ((e = map_find(t, key_id(key))) && t->acct[e->acct].ev) {
		(void)kvt_evict_lookup(t->acct[e->acct].ev, e->id);
		e->tick = ++t->clock;
	}
	pthread_mutex_unlock(&t->mu);
}

int hier_acct_of(kvt_hier *h, const kvt_key *key)
{
	uint64_t id = key_id(key);
	int acct = -1;

	for (int i = 0; i < h->n && acct < 0; i++) {
		struct hier_tier *t = &h->t[i];
		struct idmap_ent *e;
		if (!t->policy)
			continue;
		pthread_mutex_lock(&t->mu);
		if ((e = map_find(t, id)))
			acct = (int)e->acct;
		pthread_mutex_unlock(&t->mu);
	}
	return acct;
}

/* Hand the victims gathered under t->mu to the caller. */
static void vict_out(struct hier_tier *t, kvt_key **victims, size_t *n)
{
	if (t->n_vict) {
		*victims = malloc(t->n_vict * sizeof(kvt_key));
		if (*victims) {
			memcpy(*victims, t->vict, t->n_vict * sizeof(kvt_key));
			*n = t->n_vict;
		}
		atomic_fetch_add(&t->policy_evictions, t->n_vict);
		t->n_vict = 0;
	}
}

int hier_insert(kvt_hier *h, int tier, const kvt_key *key, uint64_t bytes,
		int acct, kvt_key **victims, size_t *n)
{
	struct hier_tier *t = &h->t[tier];
	struct idmap_ent *e;
	uint64_t units;
	kvt_evict *ev;
	int rc = 0;

	*victims = NULL;
	*n = 0;
	if (!t->policy)
		return 0;
	if (acct < 0)
		acct = hier_acct_of(h, key); /* before t->mu: one tier lock at a time */
	if (acct < 0 || acct >= HIER_MAX_ACCTS)
		acct = 0;
	units = (bytes + t->conf.round - 1) / t->conf.round;
	pthread_mutex_lock(&t->mu);
	t->n_vict = 0;
	if ((e = map_put(t, key, (uint32_t)acct))) {
		uint32_t a = e->acct;
		if (!(ev = acct_ev(t, a))) {
			rc = KVT_ENOMEM;
		} else {
			rc = kvt_evict_insert(ev, e->id, units ? units : 1);
			if (rc == KVT_EEXIST)
				rc = 0;
		}
		if (rc) {
			map_take(t, key_id(key), NULL, NULL);
		} else {
			e->units = units ? units : 1;
			e->tick = ++t->clock;
			acct_enforce(t, a);
		}
	}
	vict_out(t, victims, n);
	pthread_mutex_unlock(&t->mu);
	return rc;
}

int hier_set_share(kvt_hier *h, int tier, int acct, uint64_t quota,
		   uint64_t reserve, kvt_key **victims, size_t *n)
{
	struct hier_tier *t = &h->t[tier];
	uint64_t q, r, reserved = 0;
	int rc = 0;

	*victims = NULL;
	*n = 0;
	if (!t->policy)
		return kvt_err(KVT_ENOTSUP,
			       "tier %d has no eviction policy (an unbounded tier) to share", tier);
	if (acct < 0 || acct >= HIER_MAX_ACCTS)
		return kvt_err(KVT_EINVAL, "account %d", acct);
	q = (quota + t->conf.round - 1) / t->conf.round;
	r = reserve / t->conf.round;
	if (quota && reserve > quota)
		return kvt_err(KVT_EINVAL, "reservation %llu above the quota %llu",
			       (unsigned long long)reserve, (unsigned long long)quota);
	pthread_mutex_lock(&t->mu);
	for (int a = 0; a < HIER_MAX_ACCTS; a++)
		reserved += a == acct ? r : t->acct[a].reserve;
	if (reserved > t->units) {
		rc = kvt_err(KVT_EINVAL,
			     "reservations would total %llu bytes, the tier's policy holds %llu",
			     (unsigned long long)(reserved * t->conf.round),
			     (unsigned long long)(t->units * t->conf.round));
	} else if (!acct_ev(t, (uint32_t)acct)) {
		rc = kvt_err(KVT_ENOMEM, "out of memory");
	} else {
		t->acct[acct].quota = q;
		t->acct[acct].reserve = r;
		t->n_vict = 0;
		acct_enforce(t, (uint32_t)acct); /* a lowered quota applies now */
		vict_out(t, victims, n);
	}
	pthread_mutex_unlock(&t->mu);
	return rc;
}

int hier_share(kvt_hier *h, int tier, int acct, struct hier_share *out)
{
	struct hier_tier *t = &h->t[tier];
	struct hier_acct *a;

	memset(out, 0, sizeof(*out));
	if (acct < 0 || acct >= HIER_MAX_ACCTS)
		return kvt_err(KVT_EINVAL, "account %d", acct);
	if (!t->policy)
		return kvt_err(KVT_ENOTSUP, "tier %d has no eviction policy", tier);
	a = &t->acct[acct];
	pthread_mutex_lock(&t->mu);
	if (a->ev) {
		out->bytes = kvt_evict_used(a->ev) * t->conf.round;
		out->chunks = kvt_evict_count(a->ev);
	}
	out->quota = a->quota * t->conf.round;
	out->reserve = a->reserve * t->conf.round;
	out->capacity = t->units * t->conf.round;
	out->quota_evictions = a->quota_evictions;
	out->share_evictions = a->share_evictions;
	pthread_mutex_unlock(&t->mu);
	return 0;
}

struct hot_ent {
	uint64_t tick;
	kvt_key key;
};

static int hot_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct hot_ent *)a)->tick, y = ((const struct hot_ent *)b)->tick;

	return x < y ? 1 : x > y ? -1 : 0; /* the most recent first */
}

int hier_hot(kvt_hier *h, int tier, kvt_key **keys, size_t *n)
{
	struct hier_tier *t = &h->t[tier];
	struct hot_ent *all = NULL;
	size_t k = 0;

	*keys = NULL;
	*n = 0;
	if (tier >= h->n || !t->policy)
		return 0;
	pthread_mutex_lock(&t->mu);
	if (t->map_n && !(all = malloc(t->map_n * sizeof(*all)))) {
		pthread_mutex_unlock(&t->mu);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	for (size_t s = 0; t->map && s <= t->map_mask; s++)
		for (struct idmap_ent *e = t->map[s]; e && k < t->map_n; e = e->next)
			all[k++] = (struct hot_ent){ e->tick, e->key };
	pthread_mutex_unlock(&t->mu);
	qsort(all, k, sizeof(*all), hot_cmp);
	if (k && !(*keys = malloc(k * sizeof(**keys)))) {
		free(all);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < k; i++)
		(*keys)[i] = all[i].key;
	*n = k;
	free(all);
	return 0;
}

void hier_remove(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	uint32_t a;

	if (!t->policy)
		return;
	pthread_mutex_lock(&t->mu);
	if (map_take(t, key_id(key), NULL, &a) && t->acct[a].ev) {
		kvt_evict *ev = t->acct[a].ev;
		while (kvt_evict_unpin(ev, key_id(key)) == 0)
			atomic_fetch_sub(&t->pinned, 1);
		(void)kvt_evict_remove(ev, key_id(key));
	}
	pthread_mutex_unlock(&t->mu);
}

int hier_pin(kvt_hier *h, int tier, const kvt_key *key, int pin)
{
	struct hier_tier *t = &h->t[tier];
	struct idmap_ent *e;
	int rc = KVT_ENOTFOUND;

	if (!t->policy)
		return kvt_err(KVT_ENOTSUP, "tier %d has no eviction policy to pin in", tier);
	pthread_mutex_lock(&t->mu);
	if ((e = map_find(t, key_id(key))) && t->acct[e->acct].ev) {
		kvt_evict *ev = t->acct[e->acct].ev;
		rc = pin ? kvt_evict_pin(ev, e->id) : kvt_evict_unpin(ev, e->id);
		if (rc == 0)
			e->pins = pin ? e->pins + 1 : e->pins - 1;
	}
	pthread_mutex_unlock(&t->mu);
	if (rc == 0) {
		if (pin)
			atomic_fetch_add(&t->pinned, 1);
		else
			atomic_fetch_sub(&t->pinned, 1);
	}
	return rc;
}

/* Background copies into `tier` take `bytes` of its bandwidth budget: wait
 * until the token bucket allows it. */
static void hier_throttle(kvt_hier *h, int tier, uint64_t bytes)
{
	struct hier_tier *t = &h->t[tier];
	double rate = (double)__atomic_load_n(&t->conf.background_bps, __ATOMIC_RELAXED), wait_s;
	struct timespec now;

	if (rate <= 0)
		return;
	pthread_mutex_lock(&t->tb_mu);
	clock_gettime(CLOCK_MONOTONIC, &now);
	t->tokens += rate * ((double)(now.tv_sec - t->tb_last.tv_sec) +
			     (double)(now.tv_nsec - t->tb_last.tv_nsec) * 1e-9);
	t->tb_last = now;
	if (t->tokens > rate) /* at most one second of burst */
		t->tokens = rate;
	t->tokens -= (double)bytes;
	wait_s = t->tokens < 0 ? -t->tokens / rate : 0;
	pthread_mutex_unlock(&t->tb_mu);
	if (wait_s > 0) {
		struct timespec d = { (time_t)wait_s,
				      (long)((wait_s - (double)(time_t)wait_s) * 1e9) };
		while (nanosleep(&d, &d) && errno == EINTR)
			;
	}
}

int hier_copy_in(kvt_hier *h, int tier, const kvt_key *key, uint64_t bytes)
{
	if (!hier_admit(h, tier, key))
		return 0;
	hier_throttle(h, tier, bytes);
	return 1;
}

void hier_read(kvt_hier *h, int tier, const kvt_key *key, int promoted)
{
	hier_hit(h, tier, key);
	if (promoted)
		hier_count(h, tier, HIER_PROMOTION);
}

void hier_count(kvt_hier *h, int tier, int what)
{
	if (what == HIER_PROMOTION)
		atomic_fetch_add(&h->t[tier].promotions, 1);
	else
		atomic_fetch_add(&h->t[tier].demotions, 1);
}

void hier_counters(kvt_hier *h, int tier, struct hier_counters *o)
{
	struct hier_tier *t = &h->t[tier];
	o->promotions = atomic_load(&t->promotions);
	o->demotions = atomic_load(&t->demotions);
	o->admit_rejects = atomic_load(&t->admit_rejects);
	o->policy_evictions = atomic_load(&t->policy_evictions);
	o->pinned = atomic_load(&t->pinned);
}
