/*
 * admit.c — count-min sketch with 4-bit counters, doorkeeper, and the rules.
 */
#include "policy/admit.h"
#include "common/hex.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define ROWS 4

struct kvt_admit {
	struct kvt_admit_conf conf;
	uint64_t *rows[ROWS];  /* width/16 words each: 16 nibbles per word */
	uint64_t width_mask;   /* width - 1 */
	uint64_t words;        /* per row */
	uint64_t *dk;          /* doorkeeper bits, or NULL */
	uint64_t dk_mask;      /* bits - 1 */
	uint64_t seen;         /* sightings since the last halving */
};

#define mix64 kvt_mix64

/* Double hashing (Kirsch–Mitzenmacher): ROWS independent-enough indices from
 * two 64-bit hashes, no per-row seed tables. */
static uint64_t row_index(uint64_t h1, uint64_t h2, unsigned r, uint64_t mask)
{
	return (h1 + r * h2) & mask;
}

static unsigned nib_get(const uint64_t *row, uint64_t i)
{
	return (unsigned)(row[i >> 4] >> ((i & 15) * 4)) & 15u;
}

static uint64_t pow2_at_least(uint64_t x)
{
	uint64_t p = 16;
	while (p < x && p < (1ull << 40))
		p *= 2;
	return p;
}

int kvt_admit_create(const struct kvt_admit_conf *conf, kvt_admit **out)
{
	*out = NULL;
	if (!conf)
		return kvt_err(KVT_EINVAL, "admission: no configuration");
	if ((conf->rules & KVT_ADMIT_SEEN) &&
	    (conf->seen_n < 1 || conf->seen_n > (conf->doorkeeper ? 16u : 15u)))
		return kvt_err(KVT_EINVAL, "admission seen_n %u outside 1..%u (4-bit counters)",
			       conf->seen_n, conf->doorkeeper ? 16u : 15u);
	if ((conf->rules & KVT_ADMIT_PREFIX) && conf->min_prefix < 1)
		return kvt_err(KVT_EINVAL, "admission min_prefix must be >= 1");
	kvt_admit *a = calloc(1, sizeof(*a));
	if (!a)
		return KVT_ENOMEM;
	a->conf = *conf;
	uint64_t width = pow2_at_least(conf->sketch_width ? conf->sketch_width : 4096);
	a->width_mask = width - 1;
	a->words = width / 16;
	if (!a->conf.sample)
		a->conf.sample = 10 * width;
	for (unsigned r = 0; r < ROWS; r++) {
		a->rows[r] = calloc(a->words, sizeof(uint64_t));
		if (!a->rows[r])
			goto nomem;
	}
	if (conf->doorkeeper) {
		/* ~8 bits per counter: the window holds up to `sample` ids, and
		 * most of them are one-hit wonders the doorkeeper exists for. */
		uint64_t bits = pow2_at_least(8 * width);
		a->dk = calloc(bits / 64, sizeof(uint64_t));
		if (!a->dk)
			goto nomem;
		a->dk_mask = bits - 1;
	}
	*out = a;
	return 0;
nomem:
	kvt_admit_destroy(a);
	return KVT_ENOMEM;
}

void kvt_admit_destroy(kvt_admit *a)
{
	if (!a)
		return;
	for (unsigned r = 0; r < ROWS; r++)
		free(a->rows[r]);
	free(a->dk);
	free(a);
}

static int dk_test(const kvt_admit *a, uint64_t h1, uint64_t h2)
{
	for (unsigned r = 0; r < ROWS; r++) {
		uint64_t b = row_index(h2, h1, r, a->dk_mask);
		if (!(a->dk[b >> 6] & (1ull << (b & 63))))
			return 0;
	}
	return 1;
}

static void dk_set(kvt_admit *a, uint64_t h1, uint64_t h2)
{
	for (unsigned r = 0; r < ROWS; r++) {
		uint64_t b = row_index(h2, h1, r, a->dk_mask);
		a->dk[b >> 6] |= 1ull << (b & 63);
	}
}

/* TinyLFU's reset: halve every counter at once, word-parallel (shift the
 * whole word, then drop the bit each nibble received from its neighbour). */
static void halve(kvt_admit *a)
{
	for (unsigned r = 0; r < ROWS; r++)
		for (uint64_t w = 0; w < a->words; w++)
			a->rows[r][w] = (a->rows[r][w] >> 1) & 0x7777777777777777ull;
	if (a->dk)
		memset(a->dk, 0, (a->dk_mask + 1) / 8);
	a->seen = 0;
}

void kvt_admit_record(kvt_admit *a, uint64_t id)
{
	uint64_t h1 = mix64(id), h2 = mix64(h1 ^ 0x9e3779b97f4a7c15ull) | 1;
	if (a->dk && !dk_test(a, h1, h2)) {
		dk_set(a, h1, h2);
	} else {
		for (unsigned r = 0; r < ROWS; r++) {
			uint64_t i = row_index(h1, h2, r, a->width_mask);
			if (nib_get(a->rows[r], i) < 15)
				a->rows[r][i >> 4] += 1ull << ((i & 15) * 4);
		}
	}
	if (++a->seen >= a->conf.sample)
		halve(a);
}

uint32_t kvt_admit_estimate(const kvt_admit *a, uint64_t id)
{
	uint64_t h1 = mix64(id), h2 = mix64(h1 ^ 0x9e3779b97f4a7c15ull) | 1;
	unsigned m = 15;
	for (unsigned r = 0; r < ROWS; r++) {
		unsigned c = nib_get(a->rows[r], row_index(h1, h2, r, a->width_mask));
		if (c < m)
			m = c;
	}
	if (a->dk && dk_test(a, h1, h2))
		m++;
	return m;
}

int kvt_admit_check(const kvt_admit *a, const struct kvt_admit_query *q)
{
	uint32_t rules = a->conf.rules;
	if (rules & KVT_ADMIT_NEVER)
		return 0;
	if ((rules & KVT_ADMIT_PREFIX) && (uint64_t)q->pos + 1 < a->conf.min_prefix)
		return 0;
	if ((rules & KVT_ADMIT_SEEN) && kvt_admit_estimate(a, q->id) < a->conf.seen_n)
		return 0;
	if ((rules & KVT_ADMIT_TINYLFU) && q->has_victim &&
	    kvt_admit_estimate(a, q->id) <= kvt_admit_estimate(a, q->victim))
		return 0;
	return 1;
}

int kvt_admit_access(kvt_admit *a, const struct kvt_admit_query *q)
{
	kvt_admit_record(a, q->id);
	return kvt_admit_check(a, q);
}
