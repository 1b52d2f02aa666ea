/*
 * hier.c — per-tier eviction, admission, pins and budgets for the store.
 *
 * One mutex per tier guards its policy objects; it is held for O(1)
 * bookkeeping only, never across I/O or a copy.  Policies name objects by a
 * 64-bit id: the whole key (already a hash for real chunks) is
 * folded to 64 bits; a small map turns a victim's id back into its full key.
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
	struct idmap_ent *next;
};

struct hier_tier {
	pthread_mutex_t mu;
	struct hier_tier_conf conf;
	kvt_evict *ev;      /* NULL: the tier's own LRU decides */
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

static int map_put(struct hier_tier *t, const kvt_key *k)
{
	uint64_t id = key_id(k);
	struct idmap_ent *e;

	for (e = t->map[map_slot(t, id)]; e; e = e->next)
		if (e->id == id)
			return 0;
	if (t->map_n > t->map_mask && map_grow(t))
		return KVT_ENOMEM;
	e = malloc(sizeof(*e));
	if (!e)
		return KVT_ENOMEM;
	e->id = id;
	e->key = *k;
	e->next = t->map[map_slot(t, id)];
	t->map[map_slot(t, id)] = e;
	t->map_n++;
	return 0;
}

/* Remove id; copy its key to *out when asked.  1 if it was there. */
static int map_take(struct hier_tier *t, uint64_t id, kvt_key *out)
{
	struct idmap_ent **pp = &t->map[map_slot(t, id)], *e;

	for (; (e = *pp); pp = &e->next)
		if (e->id == id) {
			*pp = e->next;
			if (out)
				*out = e->key;
			free(e);
			t->map_n--;
			return 1;
		}
	return 0;
}

static void on_victim(void *arg, uint64_t id, uint64_t size)
{
	struct hier_tier *t = arg;
	kvt_key k;

	(void)size;
	if (!map_take(t, id, &k))
		return;
	if (t->n_vict == t->cap_vict) {
		size_t nc = t->cap_vict ? t->cap_vict * 2 : 16;
		kvt_key *nv = realloc(t->vict, nc * sizeof(*nv));
		if (!nv)
			return; /* the tier's own LRU remains the backstop */
		t->vict = nv;
		t->cap_vict = nc;
	}
	t->vict[t->n_vict++] = k;
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
		if (conf[i].eviction && conf[i].capacity >= conf[i].round) {
			struct kvt_evict_conf ec = {
				.kind = conf[i].eviction,
				.capacity = conf[i].capacity / t->conf.round,
				.on_victim = on_victim,
				.victim_arg = t,
			};
			if ((rc = kvt_evict_create(&ec, &t->ev))) {
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
					map_take(t, t->map[s]->id, NULL);
		free(t->map);
		free(t->vict);
		kvt_evict_destroy(t->ev);
		kvt_admit_destroy(t->adm);
		pthread_mutex_destroy(&t->mu);
		pthread_mutex_destroy(&t->tb_mu);
	}
	free(h);
}

int hier_write_mode(const kvt_hier *h, int tier)
{
	return tier < h->n ? (int)h->t[tier].conf.write : KVT_WRITE_NONE;
}

void hier_seen(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	if (!t->adm)
		return;
	pthread_mutex_lock(&t->mu);
	kvt_admit_record(t->adm, key_id(key));
	pthread_mutex_unlock(&t->mu);
}

int hier_admit(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	struct kvt_admit_query q = { .id = key_id(key), .pos = UINT32_MAX };
	int ok;

	if (!t->adm)
		return 1;
	pthread_mutex_lock(&t->mu);
	if (t->ev)
		q.has_victim = kvt_evict_peek_victim(t->ev, &q.victim) == 0;
	ok = kvt_admit_check(t->adm, &q);
	pthread_mutex_unlock(&t->mu);
	if (!ok)
		atomic_fetch_add(&t->admit_rejects, 1);
	return ok;
}

void hier_hit(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	if (!t->ev)
		return;
	pthread_mutex_lock(&t->mu);
	(void)kvt_evict_lookup(t->ev, key_id(key));
	pthread_mutex_unlock(&t->mu);
}

int hier_insert(kvt_hier *h, int tier, const kvt_key *key, uint64_t bytes,
		kvt_key **victims, size_t *n)
{
	struct hier_tier *t = &h->t[tier];
	uint64_t units;
	int rc = 0;

	*victims = NULL;
	*n = 0;
	if (!t->ev)
		return 0;
	units = (bytes + t->conf.round - 1) / t->conf.round;
	pthread_mutex_lock(&t->mu);
	t->n_vict = 0;
	if (map_put(t, key) == 0) {
		rc = kvt_evict_insert(t->ev, key_id(key), units ? units : 1);
		if (rc == KVT_EEXIST)
			rc = 0;
		else if (rc)
			map_take(t, key_id(key), NULL);
	}
	if (t->n_vict) {
		*victims = malloc(t->n_vict * sizeof(kvt_key));
		if (*victims) {
			memcpy(*victims, t->vict, t->n_vict * sizeof(kvt_key));
			*n = t->n_vict;
		}
		atomic_fetch_add(&t->policy_evictions, t->n_vict);
		t->n_vict = 0;
	}
	pthread_mutex_unlock(&t->mu);
	return rc;
}

void hier_remove(kvt_hier *h, int tier, const kvt_key *key)
{
	struct hier_tier *t = &h->t[tier];
	if (!t->ev)
		return;
	pthread_mutex_lock(&t->mu);
	if (map_take(t, key_id(key), NULL)) {
		while (kvt_evict_unpin(t->ev, key_id(key)) == 0)
			atomic_fetch_sub(&t->pinned, 1);
		(void)kvt_evict_remove(t->ev, key_id(key));
	}
	pthread_mutex_unlock(&t->mu);
}

int hier_pin(kvt_hier *h, int tier, const kvt_key *key, int pin)
{
	struct hier_tier *t = &h->t[tier];
	int rc;

	if (!t->ev)
		return kvt_err(KVT_ENOTSUP, "tier %d has no eviction policy to pin in", tier);
	pthread_mutex_lock(&t->mu);
	rc = pin ? kvt_evict_pin(t->ev, key_id(key)) : kvt_evict_unpin(t->ev, key_id(key));
	pthread_mutex_unlock(&t->mu);
	if (rc == 0) {
		if (pin)
			atomic_fetch_add(&t->pinned, 1);
		else
			atomic_fetch_sub(&t->pinned, 1);
	}
	return rc;
}

void hier_throttle(kvt_hier *h, int tier, uint64_t bytes)
{
	struct hier_tier *t = &h->t[tier];
	double rate = (double)t->conf.background_bps, wait_s;
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
