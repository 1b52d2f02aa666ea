/*
 * where_index.c — the fleet index of `kvtier where` (where_index.h).
 *
 * Memory per entry: a 48-byte slab entry (the hash, its block size, node,
 * media and the LRU links) and, with the table at most half full, at most
 * two 8-byte slots: 64 bytes at worst.  The slab grows by doubling up to
 * the capacity, so a small fleet costs little; entries never move in it,
 * which is what lets the LRU list link them by index through a rehash.
 */
#include "where_index.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

const char *const where_media_names[WHERE_N_MEDIA] = {
	"GPU", "CPU", "DRAM", "NVME", "STORAGE", "SHARED_FS", "S3", "OTHER",
};

int where_medium(const char *s, size_t n)
{
	for (int m = 0; m < WHERE_M_OTHER; m++)
		if (strlen(where_media_names[m]) == n && !memcmp(where_media_names[m], s, n))
			return m;
	return WHERE_M_OTHER;
}

void where_hash_from_u64(struct where_hash *h, uint64_t v)
{
	memset(h, 0, sizeof(*h));
	h->len = WHERE_HASH_INT | 8;
	for (int i = 7; i >= 0; i--, v >>= 8)
		h->b[i] = (uint8_t)v;
}

struct ent {
	uint8_t h[WHERE_HASH_MAX]; /* zero past len */
	uint32_t bs;
	uint32_t prev, next; /* LRU: prev is more recent; next also links the free list */
	uint16_t node;
	uint8_t len;         /* 0: free */
	uint8_t media;
};

struct where_index {
	struct ent *ent;
	uint32_t n_alloc, n_used, n_fresh; /* slab: allocated, in use, ever handed out */
	uint32_t free_head;
	uint32_t lru_head, lru_tail;       /* most and least recently announced */
	uint64_t *slot;                    /* tag << 32 | (entry + 1); 0: empty */
	uint32_t bits;                     /* the table has 1 << bits slots */
	uint32_t capacity;
	uint64_t evicted, size_overflow;
	uint32_t (*sizes)[WHERE_NODE_SIZES];
	uint8_t *n_sizes;
};

/* Every byte of the key counts: SHA-256 digests are uniform already, but
 * integer hashes and short test hashes are not, and a node or a block size
 * must move an entry to another slot, not only fail its comparison. */
static uint64_t mix(const uint8_t b[WHERE_HASH_MAX], uint8_t len, uint32_t bs, unsigned node)
{
	uint64_t w[4], x = (uint64_t)len << 56 ^ (uint64_t)bs << 16 ^ node;

	memcpy(w, b, sizeof(w));
	for (int i = 0; i < 4; i++) {
		x ^= w[i];
		x *= 0x9e3779b97f4a7c15ull;
		x ^= x >> 29;
	}
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* The slot a tag lives from: a function of the tag alone, so that the
 * backward shift of a deletion needs no slab entry (no cache miss). */
static inline uint32_t home(const where_index *ix, uint32_t tag)
{
	return (uint32_t)(tag * 0x9e3779b1u) >> (32 - ix->bits);
}

static inline uint32_t slot_tag(uint64_t s)
{
	return (uint32_t)(s >> 32);
}

static inline uint32_t slot_ent(uint64_t s)
{
	return (uint32_t)s - 1;
}

where_index *where_index_new(uint64_t capacity)
{
	where_index *ix;

	if (!capacity || capacity > (1u << 30))
		return NULL;
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return NULL;
	ix->capacity = (uint32_t)capacity;
	ix->free_head = ix->lru_head = ix->lru_tail = NONE;
	ix->bits = 4;
	ix->slot = calloc((size_t)1 << ix->bits, sizeof(*ix->slot));
	ix->sizes = calloc(WHERE_MAX_NODES, sizeof(*ix->sizes));
	ix->n_sizes = calloc(WHERE_MAX_NODES, 1);
	if (!ix->slot || !ix->sizes || !ix->n_sizes) {
		where_index_free(ix);
		return NULL;
	}
	return ix;
}

void where_index_free(where_index *ix)
{
	if (!ix)
		return;
	free(ix->ent);
	free(ix->slot);
	free(ix->sizes);
	free(ix->n_sizes);
	free(ix);
}

static uint32_t probe_find(const where_index *ix, unsigned node, const uint8_t b[WHERE_HASH_MAX],
			   uint8_t len, uint32_t bs)
{
	uint64_t x = mix(b, len, bs, node);
	uint32_t tag = (uint32_t)(x >> 32), mask = (1u << ix->bits) - 1, i = home(ix, tag);

	for (;; i = (i + 1) & mask) {
		uint64_t s = ix->slot[i];
		if (!s)
			return NONE;
		if (slot_tag(s) != tag)
			continue;
		const struct ent *e = &ix->ent[slot_ent(s)];
		if (e->node == node && e->bs == bs && e->len == len &&
		    !memcmp(e->h, b, WHERE_HASH_MAX))
			return i;
	}
}

static void table_put(where_index *ix, uint32_t idx)
{
	const struct ent *e = &ix->ent[idx];
	uint32_t tag = (uint32_t)(mix(e->h, e->len, e->bs, e->node) >> 32);
	uint32_t mask = (1u << ix->bits) - 1, i = home(ix, tag);

	while (ix->slot[i])
		i = (i + 1) & mask;
	ix->slot[i] = (uint64_t)tag << 32 | (idx + 1);
}

/* Empty slot i and shift back the run after it (Knuth's algorithm R), so
 * that no tombstone is left and a probe still ends at the first hole. */
static void table_del(where_index *ix, uint32_t i)
{
	uint32_t mask = (1u << ix->bits) - 1, j = i;

	ix->slot[i] = 0;
	for (;;) {
		j = (j + 1) & mask;
		if (!ix->slot[j])
			return;
		uint32_t k = home(ix, slot_tag(ix->slot[j]));
		/* The entry at j may fill the hole at i unless its home lies
		 * cyclically in (i, j]. */
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			ix->slot[i] = ix->slot[j];
			ix->slot[j] = 0;
			i = j;
		}
	}
}

static int table_grow(where_index *ix)
{
	uint32_t bits = ix->bits + 1;
	uint64_t *s = calloc((size_t)1 << bits, sizeof(*s));

	if (!s)
		return -1;
	free(ix->slot);
	ix->slot = s;
	ix->bits = bits;
	for (uint32_t i = 0; i < ix->n_fresh; i++)
		if (ix->ent[i].len)
			table_put(ix, i);
	return 0;
}

static void lru_unlink(where_index *ix, uint32_t i)
{
	struct ent *e = &ix->ent[i];

	if (e->prev != NONE)
		ix->ent[e->prev].next = e->next;
	else
		ix->lru_head = e->next;
	if (e->next != NONE)
		ix->ent[e->next].prev = e->prev;
	else
		ix->lru_tail = e->prev;
}

static void lru_push(where_index *ix, uint32_t i)
{
	struct ent *e = &ix->ent[i];

	e->prev = NONE;
	e->next = ix->lru_head;
	if (ix->lru_head != NONE)
		ix->ent[ix->lru_head].prev = i;
	ix->lru_head = i;
	if (ix->lru_tail == NONE)
		ix->lru_tail = i;
}

/* Drop the entry in table slot `at`. */
static void drop(where_index *ix, uint32_t at)
{
	uint32_t i = slot_ent(ix->slot[at]);

	table_del(ix, at);
	lru_unlink(ix, i);
	memset(&ix->ent[i], 0, sizeof(ix->ent[i]));
	ix->ent[i].next = ix->free_head;
	ix->free_head = i;
	ix->n_used--;
}

static uint32_t slot_of_entry(const where_index *ix, uint32_t idx)
{
	const struct ent *e = &ix->ent[idx];

	return probe_find(ix, e->node, e->h, e->len, e->bs);
}

/* A free slab entry: a freed one, a fresh one, or (the slab at capacity)
 * the least recently announced, forgotten. */
static uint32_t ent_alloc(where_index *ix)
{
	uint32_t i;

	if (ix->free_head == NONE && ix->n_fresh == ix->n_alloc && ix->n_alloc < ix->capacity) {
		uint64_t n = ix->n_alloc ? (uint64_t)ix->n_alloc * 2 : 256;
		struct ent *ne;
		if (n > ix->capacity)
			n = ix->capacity;
		ne = realloc(ix->ent, (size_t)n * sizeof(*ne));
		if (!ne)
			return NONE;
		ix->ent = ne;
		ix->n_alloc = (uint32_t)n;
	}
	if (ix->free_head == NONE && ix->n_fresh == ix->n_alloc) {
		drop(ix, slot_of_entry(ix, ix->lru_tail));
		ix->evicted++;
	}
	/* At most half full: a probe stays short however the hashes fall. */
	while ((uint64_t)(ix->n_used + 1) * 2 > (uint64_t)1 << ix->bits)
		if (table_grow(ix))
			return NONE;
	if (ix->free_head != NONE) {
		i = ix->free_head;
		ix->free_head = ix->ent[i].next;
	} else {
		i = ix->n_fresh++;
	}
	return i;
}

static void note_size(where_index *ix, unsigned node, uint32_t bs)
{
	uint8_t n = ix->n_sizes[node];

	for (uint8_t k = 0; k < n; k++)
		if (ix->sizes[node][k] == bs)
			return;
	if (n == WHERE_NODE_SIZES) {
		ix->size_overflow++;
		return;
	}
	ix->sizes[node][n] = bs;
	ix->n_sizes[node] = (uint8_t)(n + 1);
}

int where_index_store(where_index *ix, unsigned node, const struct where_hash *h,
		      uint32_t block_size, int medium)
{
	uint8_t b[WHERE_HASH_MAX] = { 0 };
	uint8_t n = h->len & 0x3f;
	uint32_t at, i;

	if (node >= WHERE_MAX_NODES || !n || n > WHERE_HASH_MAX || medium < 0 ||
	    medium >= WHERE_N_MEDIA)
		return 0; /* the decoder lets none through; nothing to index */
	memcpy(b, h->b, n);
	at = probe_find(ix, node, b, h->len, block_size);
	if (at != NONE) {
		i = slot_ent(ix->slot[at]);
		ix->ent[i].media |= (uint8_t)(1u << medium);
		lru_unlink(ix, i);
		lru_push(ix, i);
		return 0;
	}
	if ((i = ent_alloc(ix)) == NONE)
		return -1;
	struct ent *e = &ix->ent[i];
	memcpy(e->h, b, sizeof(e->h));
	e->len = h->len;
	e->bs = block_size;
	e->node = (uint16_t)node;
	e->media = (uint8_t)(1u << medium);
	table_put(ix, i);
	lru_push(ix, i);
	ix->n_used++;
	note_size(ix, node, block_size);
	return 0;
}

void where_index_remove(where_index *ix, unsigned node, const struct where_hash *h, int medium)
{
	uint8_t b[WHERE_HASH_MAX] = { 0 };
	uint8_t n = h->len & 0x3f;

	if (node >= WHERE_MAX_NODES || !n || n > WHERE_HASH_MAX || medium < 0 ||
	    medium >= WHERE_N_MEDIA)
		return;
	memcpy(b, h->b, n);
	for (uint8_t k = 0; k < ix->n_sizes[node]; k++) {
		uint32_t at = probe_find(ix, node, b, h->len, ix->sizes[node][k]);
		if (at == NONE)
			continue;
		struct ent *e = &ix->ent[slot_ent(ix->slot[at])];
		e->media &= (uint8_t)~(1u << medium);
		if (!e->media)
			drop(ix, at);
	}
}

void where_index_clear_node(where_index *ix, unsigned node)
{
	if (node >= WHERE_MAX_NODES)
		return;
	/* A walk of the slab: rare (a cleared cache, a restarted node), and
	 * cheaper than a list per node on every entry. */
	for (uint32_t i = 0; i < ix->n_fresh; i++)
		if (ix->ent[i].len && ix->ent[i].node == node)
			drop(ix, slot_of_entry(ix, i));
	ix->n_sizes[node] = 0;
}

unsigned where_index_get(const where_index *ix, unsigned node, const struct where_hash *h,
			 uint32_t block_size, uint32_t *found_bs)
{
	uint8_t b[WHERE_HASH_MAX] = { 0 };
	uint8_t n = h->len & 0x3f;

	if (node >= WHERE_MAX_NODES || !n || n > WHERE_HASH_MAX)
		return 0;
	memcpy(b, h->b, n);
	if (block_size) {
		uint32_t at = probe_find(ix, node, b, h->len, block_size);
		if (found_bs)
			*found_bs = block_size;
		return at == NONE ? 0 : ix->ent[slot_ent(ix->slot[at])].media;
	}
	for (uint8_t k = 0; k < ix->n_sizes[node]; k++) {
		uint32_t at = probe_find(ix, node, b, h->len, ix->sizes[node][k]);
		if (at != NONE) {
			if (found_bs)
				*found_bs = ix->sizes[node][k];
			return ix->ent[slot_ent(ix->slot[at])].media;
		}
	}
	return 0;
}

static uint64_t table_bytes_for(uint64_t n)
{
	uint64_t slots = 16;

	while (n * 2 > slots)
		slots *= 2;
	return slots * sizeof(uint64_t);
}

void where_index_stats(const where_index *ix, struct where_index_stats *out)
{
	uint64_t fixed = (uint64_t)WHERE_MAX_NODES * (sizeof(*ix->sizes) + 1) + sizeof(*ix);

	out->entries = ix->n_used;
	out->capacity = ix->capacity;
	out->bytes = (uint64_t)ix->n_alloc * sizeof(struct ent) +
		     ((uint64_t)1 << ix->bits) * sizeof(uint64_t) + fixed;
	out->bytes_full = (uint64_t)ix->capacity * sizeof(struct ent) +
			  table_bytes_for(ix->capacity) + fixed;
	out->evicted = ix->evicted;
	out->size_overflow = ix->size_overflow;
}

int where_index_check(const where_index *ix)
{
	uint32_t mask = (1u << ix->bits) - 1, n = 0, seen = 0;

	if (ix->n_used * 2ull > (uint64_t)mask + 1 || ix->n_used > ix->capacity ||
	    ix->n_fresh > ix->n_alloc || ix->n_alloc > ix->capacity)
		return -1;
	for (uint32_t i = 0; i <= mask; i++) {
		uint64_t s = ix->slot[i];
		if (!s)
			continue;
		uint32_t e = slot_ent(s);
		if (e >= ix->n_fresh || !ix->ent[e].len)
			return -1;
		const struct ent *p = &ix->ent[e];
		if ((uint32_t)(mix(p->h, p->len, p->bs, p->node) >> 32) != slot_tag(s))
			return -1;
		/* Reachable: no hole between its home and where it lies. */
		for (uint32_t k = home(ix, slot_tag(s)); k != i; k = (k + 1) & mask)
			if (!ix->slot[k])
				return -1;
		if (probe_find(ix, p->node, p->h, p->len, p->bs) != i)
			return -1; /* a duplicate key */
		if (!p->media)
			return -1;
		n++;
	}
	if (n != ix->n_used)
		return -1;
	for (uint32_t i = ix->lru_head, prev = NONE; i != NONE; prev = i, i = ix->ent[i].next) {
		if (i >= ix->n_fresh || !ix->ent[i].len || ix->ent[i].prev != prev || ++seen > n)
			return -1;
		if (ix->ent[i].next == NONE && ix->lru_tail != i)
			return -1;
	}
	return seen == n ? 0 : -1;
}
