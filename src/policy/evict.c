/*
 * evict.c — LRU and S3-FIFO over one shared core.
 *
 * The core is an id → node hash table (open addressing, linear probing,
 * backward-shift deletion so there are no tombstones to degrade probes; each
 * slot keeps its id's hash, so neither probes nor deletions read nodes), or
 * for dense ids (conf.id_limit) a flat id -> node array, over a slab of nodes
 * linked into intrusive doubly linked lists by index.  Each policy is a small vtable over that core: what a hit does, where an insert
 * goes, how to make room, where an unpinned object returns.
 *
 * Indices instead of pointers: the slab grows with realloc, and 32-bit links
 * halve the node size (a capacity planner holds millions of them).
 */
#include "policy/evict.h"
#include "common/hex.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define NIL UINT32_MAX

enum queue {
	Q_FREE = 0, /* on the slab's free list */
	Q_PINNED,   /* resident, on no list: cannot be a victim */
	Q_LRU,
	Q_SMALL,
	Q_MAIN,
	Q_GHOST,    /* S3-FIFO: id only, not resident */
};

struct node {
	uint64_t id;
	uint64_t size;
	uint32_t prev, next;
	uint32_t pins;
	uint8_t q;
	uint8_t freq;
};

struct slot {
	uint32_t idx;  /* node index, NIL if empty */
	uint32_t h;    /* hash_id() of the node's id: home slot and a filter */
};

struct list {
	uint32_t head, tail; /* head = newest */
	uint64_t units;
	uint64_t n;
};

struct evict_ops {
	const char *name;
	void (*hit)(kvt_evict *e, uint32_t x);
	/* Place a new resident node; `was_ghost` says the id was in G. */
	void (*place)(kvt_evict *e, uint32_t x, int was_ghost);
	/* Evict one object (report it); 0, or -1 when nothing is evictable. */
	int (*evict_one)(kvt_evict *e);
	void (*unpinned)(kvt_evict *e, uint32_t x);
	int (*peek)(const kvt_evict *e, uint64_t *id);
};

struct kvt_evict {
	const struct evict_ops *ops;
	uint64_t capacity;
	uint64_t used;        /* resident units, pinned included */
	uint64_t pinned;      /* units of pinned objects */
	uint64_t resident;    /* resident objects */
	kvt_evict_victim_fn on_victim;
	void *victim_arg;

	struct slot *slots;   /* node index (NIL: empty) and its id's hash */
	uint64_t mask;        /* slots - 1 (power of two) */
	uint64_t in_table;    /* nodes in the table (ghosts included) */

	uint32_t *dir;        /* id_limit mode: id -> node index or NIL */
	uint64_t id_limit;

	struct node *nodes;
	uint32_t nodes_cap;
	uint32_t nodes_hw;    /* nodes[nodes_hw..nodes_cap) never used yet */
	uint32_t free_head;   /* freed nodes, for reuse first */

	struct list lru;      /* LRU */
	struct list small, main, ghost; /* S3-FIFO */
	uint64_t small_cap;   /* S3-FIFO: units S may hold before it must give */
	uint64_t ghost_cap;   /* S3-FIFO: units of ids G remembers */
	uint32_t promote;     /* S3-FIFO: hits in S to move to M */
	int fill_main;        /* S3-FIFO: s3_fill_main (see s3_place) */
	int evicted;          /* S3-FIFO: room was ever made */
};

/* ---- hashing and the table --------------------------------------------- */

/* Trace ids are small sequential integers and key prefixes may share high
 * bits; both must spread over all slots. */
#define mix64 kvt_mix64

/* The slot hash.  Everything above the low GROUP_BITS bits is mixed, the low
 * bits are kept: GROUP consecutive ids (a trace's dense ids, first seen
 * together in one prompt, so usually accessed together again) have
 * consecutive home slots, in one cache line, while everything else spreads
 * like mix64.  Ids that differ only above the low bits (key prefixes, any
 * pattern) are spread by mix64 as before. */
#define GROUP_BITS 2
static inline uint32_t hash_id(uint64_t id)
{
	return (uint32_t)((mix64(id >> GROUP_BITS) << GROUP_BITS) | (id & ((1u << GROUP_BITS) - 1)));
}

/* Find the slot of `id`: its node index, or NIL with *pos at the empty slot
 * where it would go.  The stored hash answers almost every mismatch without
 * touching the node. */
static inline uint32_t table_probe(const kvt_evict *e, uint64_t id, uint64_t *pos)
{
	if (e->dir) {
		*pos = id;
		return id < e->id_limit ? e->dir[id] : NIL;
	}
	uint32_t h = hash_id(id);
	uint64_t mask = e->mask;
	const struct slot *slots = e->slots;
	uint64_t i = h & mask;
	for (;;) {
		const struct slot *sl = &slots[i];
		if (sl->idx == NIL)
			break;
		if (sl->h == h && e->nodes[sl->idx].id == id) {
			*pos = i;
			return sl->idx;
		}
		i = (i + 1) & mask;
	}
	*pos = i;
	return NIL;
}

static inline uint32_t table_find(const kvt_evict *e, uint64_t id)
{
	uint64_t pos;
	return table_probe(e, id, &pos);
}

static void table_put_raw(struct slot *slots, uint64_t mask, uint32_t h, uint32_t x)
{
	uint64_t i = h & mask;
	while (slots[i].idx != NIL)
		i = (i + 1) & mask;
	slots[i].idx = x;
	slots[i].h = h;
}

static int table_grow(kvt_evict *e, uint64_t nslots)
{
	/* Homes come from the 32-bit stored hash. */
	if (nslots > (1ull << 32))
		return KVT_ENOMEM;
	struct slot *s = malloc(nslots * sizeof(*s));
	if (!s)
		return KVT_ENOMEM;
	for (uint64_t i = 0; i < nslots; i++) {
		s[i].idx = NIL;
		s[i].h = 0;
	}
	if (e->slots) {
		for (uint64_t i = 0; i <= e->mask; i++)
			if (e->slots[i].idx != NIL)
				table_put_raw(s, nslots - 1, e->slots[i].h, e->slots[i].idx);
		free(e->slots);
	}
	e->slots = s;
	e->mask = nslots - 1;
	return 0;
}

/* Make room for one more node in both the table (load <= 1/2 keeps linear
 * probes short) and the slab, before anything changes, so that an insert
 * that runs out of memory leaves the policy exactly as it was.  1 if the
 * table moved (slot positions found before are stale), 0, or an error. */
static int reserve_one(kvt_evict *e)
{
	int moved = 0;
	if (!e->dir && (e->in_table + 1) * 2 > e->mask + 1) {
		int rc = table_grow(e, (e->mask + 1) * 2);
		if (rc)
			return rc;
		moved = 1;
	}
	if (e->free_head == NIL && e->nodes_hw == e->nodes_cap) {
		uint64_t ncap = e->nodes_cap ? (uint64_t)e->nodes_cap * 2 : 64;
		if (ncap > (1ull << 31))
			ncap = 1ull << 31;
		if (ncap <= e->nodes_cap)
			return KVT_ENOMEM;
		struct node *n = realloc(e->nodes, ncap * sizeof(*n));
		if (!n)
			return KVT_ENOMEM;
		e->nodes = n;
		e->nodes_cap = (uint32_t)ncap;
	}
	return moved;
}

/* Needs reserve_one() first; `pos` is the empty slot table_probe() found for
 * `id` since (no change to the table in between). */
static inline uint32_t node_new_at(kvt_evict *e, uint64_t id, uint64_t size, uint64_t pos)
{
	uint32_t x = e->free_head;
	struct node *n;
	if (x != NIL) {
		n = &e->nodes[x];
		e->free_head = n->next;
	} else {
		/* Fresh slab memory is touched only when first used. */
		x = e->nodes_hw++;
		n = &e->nodes[x];
	}
	n->id = id;
	n->size = size;
	n->prev = n->next = NIL;
	n->pins = 0;
	n->freq = 0;
	n->q = Q_FREE;
	if (e->dir) {
		e->dir[pos] = x;
	} else {
		e->slots[pos].idx = x;
		e->slots[pos].h = hash_id(id);
	}
	e->in_table++;
	return x;
}

/* Remove from the table with backward shift: later members of the probe run
 * move up into the hole if their home slot allows it.  The stored hashes
 * give the homes without touching the nodes. */
static void node_free(kvt_evict *e, uint32_t x)
{
	if (e->dir) {
		e->dir[e->nodes[x].id] = NIL;
		goto freed;
	}
	uint64_t mask = e->mask;
	struct slot *slots = e->slots;
	uint64_t i = hash_id(e->nodes[x].id) & mask;
	while (slots[i].idx != x)
		i = (i + 1) & mask;
	uint64_t hole = i;
	for (;;) {
		i = (i + 1) & mask;
		struct slot s = slots[i];
		if (s.idx == NIL)
			break;
		uint64_t home = s.h & mask;
		/* s may fill the hole only if its home is not in (hole, i]. */
		if (((i - home) & mask) >= ((i - hole) & mask)) {
			slots[hole] = s;
			hole = i;
		}
	}
	slots[hole].idx = NIL;
freed:
	e->in_table--;
	e->nodes[x].q = Q_FREE;
	e->nodes[x].next = e->free_head;
	e->free_head = x;
}

/* ---- lists --------------------------------------------------------------- */

static void list_push_head(kvt_evict *e, struct list *l, uint32_t x, uint8_t q)
{
	struct node *n = &e->nodes[x];
	n->prev = NIL;
	n->next = l->head;
	if (l->head != NIL)
		e->nodes[l->head].prev = x;
	else
		l->tail = x;
	l->head = x;
	l->units += n->size;
	l->n++;
	n->q = q;
}

static void list_unlink(kvt_evict *e, struct list *l, uint32_t x)
{
	struct node *n = &e->nodes[x];
	if (n->prev != NIL)
		e->nodes[n->prev].next = n->next;
	else
		l->head = n->next;
	if (n->next != NIL)
		e->nodes[n->next].prev = n->prev;
	else
		l->tail = n->prev;
	l->units -= n->size;
	l->n--;
	n->prev = n->next = NIL;
}

static struct list *list_of(kvt_evict *e, uint8_t q)
{
	switch (q) {
	case Q_LRU: return &e->lru;
	case Q_SMALL: return &e->small;
	case Q_MAIN: return &e->main;
	case Q_GHOST: return &e->ghost;
	default: return NULL;
	}
}

/* A resident object leaves: account, report, free. */
static void evict_node(kvt_evict *e, uint32_t x)
{
	uint64_t id = e->nodes[x].id, size = e->nodes[x].size;
	e->used -= size;
	e->resident--;
	node_free(e, x);
	if (e->on_victim)
		e->on_victim(e->victim_arg, id, size);
}

/* ---- LRU ----------------------------------------------------------------- */

static void lru_hit(kvt_evict *e, uint32_t x)
{
	if (e->nodes[x].q != Q_LRU)
		return; /* pinned: off the list until unpinned */
	list_unlink(e, &e->lru, x);
	list_push_head(e, &e->lru, x, Q_LRU);
}

static void lru_place(kvt_evict *e, uint32_t x, int was_ghost)
{
	(void)was_ghost;
	list_push_head(e, &e->lru, x, Q_LRU);
}

/* Back from a pin: it was just in use, so most recent. */
static void lru_unpinned(kvt_evict *e, uint32_t x)
{
	list_push_head(e, &e->lru, x, Q_LRU);
}

static int lru_evict_one(kvt_evict *e)
{
	uint32_t x = e->lru.tail;
	if (x == NIL)
		return -1;
	list_unlink(e, &e->lru, x);
	evict_node(e, x);
	return 0;
}

static int lru_peek(const kvt_evict *e, uint64_t *id)
{
	if (e->lru.tail == NIL)
		return KVT_ENOTFOUND;
	*id = e->nodes[e->lru.tail].id;
	return 0;
}

static const struct evict_ops lru_ops = {
	.name = "lru",
	.hit = lru_hit,
	.place = lru_place,
	.evict_one = lru_evict_one,
	.unpinned = lru_unpinned,
	.peek = lru_peek,
};

/* ---- S3-FIFO ------------------------------------------------------------- */

static void s3_hit(kvt_evict *e, uint32_t x)
{
	struct node *n = &e->nodes[x];
	if (n->freq < 3)
		n->freq++;
}

/* Forget the oldest ghosts until G fits its share; G only remembers ids. */
static void s3_trim_ghost(kvt_evict *e)
{
	while (e->ghost.units > e->ghost_cap && e->ghost.tail != NIL) {
		uint32_t g = e->ghost.tail;
		list_unlink(e, &e->ghost, g);
		node_free(e, g);
	}
}

static void s3_place(kvt_evict *e, uint32_t x, int was_ghost)
{
	e->nodes[x].freq = 0;
	/* fill_main (libCacheSim's rule): until the first eviction, a new
	 * object goes to M once S holds its share. */
	if (was_ghost || (e->fill_main && !e->evicted && e->small.units >= e->small_cap))
		list_push_head(e, &e->main, x, Q_MAIN);
	else
		list_push_head(e, &e->small, x, Q_SMALL);
}

/* Evict from M: objects hit since their last pass get another round with
 * one frequency less; the first with none left goes.  Terminates within
 * 4 passes because every reinsertion lowers a frequency <= 3. */
static int s3_evict_main(kvt_evict *e)
{
	for (;;) {
		uint32_t x = e->main.tail;
		if (x == NIL)
			return -1;
		list_unlink(e, &e->main, x);
		if (e->nodes[x].freq > 0) {
			e->nodes[x].freq--;
			list_push_head(e, &e->main, x, Q_MAIN);
			continue;
		}
		evict_node(e, x);
		return 0;
	}
}

/* Evict from S: hit objects move to M (reset: M's counter measures reuse
 * from here on), the first unhit one leaves and leaves its id in G.
 * Returns -1 if S emptied without evicting. */
static int s3_evict_small(kvt_evict *e)
{
	for (;;) {
		uint32_t x = e->small.tail;
		if (x == NIL)
			return -1;
		list_unlink(e, &e->small, x);
		struct node *n = &e->nodes[x];
		if (n->freq >= e->promote) {
			n->freq = 0;
			list_push_head(e, &e->main, x, Q_MAIN);
			continue;
		}
		uint64_t id = n->id, size = n->size;
		e->used -= size;
		e->resident--;
		/* The node stays in the table as a ghost: same id, no bytes. */
		n->freq = 0;
		list_push_head(e, &e->ghost, x, Q_GHOST);
		s3_trim_ghost(e);
		if (e->on_victim)
			e->on_victim(e->victim_arg, id, size);
		return 0;
	}
}

static int s3_evict_one(kvt_evict *e)
{
	e->evicted = 1;
	if (e->small.units >= e->small_cap || e->main.tail == NIL) {
		if (s3_evict_small(e) == 0)
			return 0;
	}
	return s3_evict_main(e);
}

static void s3_unpinned(kvt_evict *e, uint32_t x)
{
	/* It was in use long enough to be pinned: it has earned M. */
	list_push_head(e, &e->main, x, Q_MAIN);
}

static int s3_peek(const kvt_evict *e, uint64_t *id)
{
	uint32_t x;
	if ((e->small.units >= e->small_cap || e->main.tail == NIL) && e->small.tail != NIL)
		x = e->small.tail;
	else
		x = e->main.tail;
	if (x == NIL)
		return KVT_ENOTFOUND;
	*id = e->nodes[x].id;
	return 0;
}

static const struct evict_ops s3_ops = {
	.name = "s3fifo",
	.hit = s3_hit,
	.place = s3_place,
	.evict_one = s3_evict_one,
	.unpinned = s3_unpinned,
	.peek = s3_peek,
};

/* ---- the interface ------------------------------------------------------- */

static void list_init(struct list *l)
{
	l->head = l->tail = NIL;
	l->units = 0;
	l->n = 0;
}

int kvt_evict_create(const struct kvt_evict_conf *conf, kvt_evict **out)
{
	*out = NULL;
	if (!conf || conf->capacity == 0)
		return kvt_err(KVT_EINVAL, "eviction policy capacity must be > 0");
	const struct evict_ops *ops;
	if (conf->kind == KVT_EVICT_LRU)
		ops = &lru_ops;
	else if (conf->kind == KVT_EVICT_S3FIFO)
		ops = &s3_ops;
	else
		return kvt_err(KVT_EINVAL, "unknown eviction policy kind %d", (int)conf->kind);
	uint32_t pct = conf->small_pct ? conf->small_pct : 10;
	if (pct > 90)
		return kvt_err(KVT_EINVAL, "S3-FIFO small_pct %u outside 1..90", pct);

	kvt_evict *e = calloc(1, sizeof(*e));
	if (!e)
		return KVT_ENOMEM;
	e->ops = ops;
	e->capacity = conf->capacity;
	e->on_victim = conf->on_victim;
	e->victim_arg = conf->victim_arg;
	e->free_head = NIL;
	list_init(&e->lru);
	list_init(&e->small);
	list_init(&e->main);
	list_init(&e->ghost);
	/* Rounded up so a tiny cache still has a one-unit S. */
	e->small_cap = (conf->capacity * pct + 99) / 100;
	e->ghost_cap = conf->capacity - (conf->capacity * pct) / 100;
	e->promote = conf->s3_promote ? conf->s3_promote : 1;
	e->fill_main = conf->s3_fill_main != 0;

	/* Ghosts live in the table too: up to about twice the objects. */
	uint64_t hint = conf->expected_objects;
	if (hint > (1ull << 30))
		hint = 1ull << 30;
	int rc = 0;
	if (conf->id_limit) {
		if (conf->id_limit > (1ull << 32)) {
			free(e);
			return kvt_err(KVT_EINVAL, "eviction policy id_limit above 2^32");
		}
		e->id_limit = conf->id_limit;
		e->dir = malloc(conf->id_limit * sizeof(*e->dir));
		if (!e->dir)
			rc = KVT_ENOMEM;
		else
			memset(e->dir, 0xff, conf->id_limit * sizeof(*e->dir));
		if (hint > conf->id_limit)
			hint = conf->id_limit;
	} else {
		uint64_t want = 64;
		while (want < hint * 4)
			want *= 2;
		rc = table_grow(e, want);
	}
	/* The slab, sized from the hint (resident objects, and as many ghosts
	 * for S3-FIFO): no growth on the way for a hint that holds.  Untouched
	 * until used (nodes_hw). */
	uint64_t nn = hint * (ops == &s3_ops ? 2 : 1) + 1;
	if (!rc && hint) {
		if (nn > (1ull << 31))
			nn = 1ull << 31;
		e->nodes = malloc(nn * sizeof(*e->nodes));
		if (!e->nodes)
			rc = KVT_ENOMEM;
		else
			e->nodes_cap = (uint32_t)nn;
	}
	if (rc) {
		kvt_evict_destroy(e);
		return rc;
	}
	*out = e;
	return 0;
}

void kvt_evict_destroy(kvt_evict *e)
{
	if (!e)
		return;
	free(e->slots);
	free(e->dir);
	free(e->nodes);
	free(e);
}

const char *kvt_evict_name(const kvt_evict *e)
{
	return e->ops->name;
}

static inline uint32_t find_resident(const kvt_evict *e, uint64_t id)
{
	uint32_t x = table_find(e, id);
	if (x == NIL || e->nodes[x].q == Q_GHOST)
		return NIL;
	return x;
}

/* A hit on resident node x; LRU inline (the planner's hot path). */
static inline void hit_node(kvt_evict *e, uint32_t x)
{
	if (e->ops == &lru_ops) {
		if (e->nodes[x].q == Q_LRU && e->lru.head != x) {
			list_unlink(e, &e->lru, x);
			list_push_head(e, &e->lru, x, Q_LRU);
		}
		return;
	}
	e->ops->hit(e, x);
}

int kvt_evict_lookup(kvt_evict *e, uint64_t id)
{
	uint32_t x = find_resident(e, id);
	if (x == NIL)
		return 0;
	hit_node(e, x);
	return 1;
}

/* LRU over a flat map (dir), full, nothing pinned, a new id of size 1:
 * the least recent object leaves and its node takes the newcomer at the
 * head, in place.  The same victim, report (the callback cannot look at
 * this policy, evict.h), accounting and recency as evicting it and then
 * inserting, without the slab's free list, the checks, or the list's
 * totals written twice (their reload stalled on the store before): a
 * trace's misses at a small capacity, the planner's hot path. */
static inline void lru_replace_tail(kvt_evict *e, uint64_t id)
{
	struct list *l = &e->lru;
	uint32_t t = l->tail; /* used > 0 and nothing pinned: not NIL */
	struct node *n = &e->nodes[t];
	uint64_t old = n->id, osize = n->size;

	e->dir[old] = NIL;
	e->dir[id] = t;
	n->id = id;
	n->size = 1;
	n->freq = 0;
	e->used = e->used - osize + 1;
	l->units = l->units - osize + 1;
	if (t != l->head) {
		/* From the tail to the head: list_unlink and list_push_head
		 * for a node known to be last and not first. */
		e->nodes[n->prev].next = NIL;
		l->tail = n->prev;
		n->prev = NIL;
		n->next = l->head;
		e->nodes[l->head].prev = t;
		l->head = t;
	}
	if (e->on_victim)
		e->on_victim(e->victim_arg, old, osize);
}

/* kvt_evict_insert once `id` was probed: x its node (NIL: not in the table;
 * then pos is the empty slot it would take).  LRU's eviction and placing
 * are called directly (the planner's hot path), the others through ops. */
static inline int insert_probed(kvt_evict *e, uint64_t id, uint64_t size, uint32_t x,
				uint64_t pos)
{
	if (size == 0 || size > e->capacity)
		return KVT_ETOOBIG;
	if (e->dir && id >= e->id_limit)
		return kvt_err(KVT_EINVAL, "id %llu outside the policy's id_limit %llu",
			       (unsigned long long)id, (unsigned long long)e->id_limit);
	int was_ghost = 0;
	if (x != NIL) {
		if (e->nodes[x].q != Q_GHOST)
			return KVT_EEXIST;
		was_ghost = 1;
	}
	/* Refuse before evicting anything: evicting every unpinned object
	 * frees exactly used - pinned. */
	if (e->pinned + size > e->capacity)
		return KVT_EFULL;
	int lru = e->ops == &lru_ops;
	if (lru && e->dir && x == NIL && size == 1 && e->used == e->capacity && !e->pinned) {
		lru_replace_tail(e, id);
		return 0;
	}
	int rc = was_ghost ? 0 : reserve_one(e);
	if (rc < 0)
		return rc;
	if (was_ghost) {
		/* A returning id leaves G before room is made (libCacheSim's
		 * order): the ghosts that room trims are others, and G's share
		 * counts it no longer.  Off every list, eviction cannot pick it. */
		list_unlink(e, &e->ghost, x);
		e->nodes[x].q = Q_PINNED;
		e->nodes[x].size = size;
	} else {
		/* Into the table first, where the probe left off (unless the
		 * table just grew): it is on no list, so eviction cannot pick
		 * it, and evicting cannot leave a stale position behind. */
		if (rc)
			table_probe(e, id, &pos);
		x = node_new_at(e, id, size, pos);
	}
	while (e->used + size > e->capacity) {
		if ((lru ? lru_evict_one(e) : e->ops->evict_one(e)) < 0) {
			node_free(e, x); /* a returning ghost is forgotten */
			return KVT_EFULL; /* unreachable given the check above */
		}
	}
	e->used += size;
	e->resident++;
	if (lru)
		lru_place(e, x, was_ghost);
	else
		e->ops->place(e, x, was_ghost);
	return 0;
}

int kvt_evict_insert(kvt_evict *e, uint64_t id, uint64_t size)
{
	uint64_t pos;
	uint32_t x = table_probe(e, id, &pos);
	return insert_probed(e, id, size, x, pos);
}

int kvt_evict_access(kvt_evict *e, uint64_t id, uint64_t size)
{
	uint64_t pos;
	uint32_t x = table_probe(e, id, &pos);
	if (x != NIL && e->nodes[x].q != Q_GHOST) {
		hit_node(e, x);
		return 1;
	}
	return insert_probed(e, id, size, x, pos);
}

int kvt_evict_access_seq(kvt_evict *e, const uint32_t *ids, size_t n, uint64_t *lead,
			 uint64_t *hits)
{
	size_t first_miss = n;
	uint64_t h = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t pos;
		uint32_t x = table_probe(e, ids[i], &pos);
		if (x != NIL && e->nodes[x].q != Q_GHOST) {
			hit_node(e, x);
			h++;
			continue;
		}
		if (first_miss == n)
			first_miss = i;
		if ((rc = insert_probed(e, ids[i], 1, x, pos)) < 0)
			break;
	}
	*lead = first_miss;
	*hits = h;
	return rc;
}

int kvt_evict_remove(kvt_evict *e, uint64_t id)
{
	uint32_t x = find_resident(e, id);
	if (x == NIL)
		return KVT_ENOTFOUND;
	struct node *n = &e->nodes[x];
	struct list *l = list_of(e, n->q);
	if (l)
		list_unlink(e, l, x);
	if (n->pins)
		e->pinned -= n->size;
	e->used -= n->size;
	e->resident--;
	node_free(e, x);
	return 0;
}

int kvt_evict_pin(kvt_evict *e, uint64_t id)
{
	uint32_t x = find_resident(e, id);
	if (x == NIL)
		return KVT_ENOTFOUND;
	struct node *n = &e->nodes[x];
	if (n->pins++ == 0) {
		list_unlink(e, list_of(e, n->q), x);
		n->q = Q_PINNED;
		e->pinned += n->size;
	}
	return 0;
}

int kvt_evict_unpin(kvt_evict *e, uint64_t id)
{
	uint32_t x = find_resident(e, id);
	if (x == NIL)
		return KVT_ENOTFOUND;
	struct node *n = &e->nodes[x];
	if (n->pins == 0)
		return KVT_EINVAL;
	if (--n->pins == 0) {
		e->pinned -= n->size;
		e->ops->unpinned(e, x);
		/* Capacity was respected while pinned, so nothing to evict. */
	}
	return 0;
}

int kvt_evict_contains(const kvt_evict *e, uint64_t id)
{
	return find_resident(e, id) != NIL;
}

uint64_t kvt_evict_used(const kvt_evict *e)
{
	return e->used;
}

uint64_t kvt_evict_capacity(const kvt_evict *e)
{
	return e->capacity;
}

uint64_t kvt_evict_count(const kvt_evict *e)
{
	return e->resident;
}

int kvt_evict_peek_victim(const kvt_evict *e, uint64_t *id)
{
	return e->ops->peek(e, id);
}
