/*
 * guard.c — failed AUTH attempts per source address (guard.h).
 */
#include "daemon/guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_SLOTS 1024
#define GUARD_PROBE 8 /* slots looked at for an address */

struct guard_slot {
	char ip[48];
	int64_t window_start; /* 0: free */
	int64_t last_fail;
	unsigned fails;
};

struct kvtd_guard {
	pthread_mutex_t mu;
	struct guard_slot s[GUARD_SLOTS];
};

struct kvtd_guard *kvtd_guard_new(void)
{
	struct kvtd_guard *g = calloc(1, sizeof(*g));

	if (g)
		pthread_mutex_init(&g->mu, NULL);
	return g;
}

void kvtd_guard_free(struct kvtd_guard *g)
{
	if (!g)
		return;
	pthread_mutex_destroy(&g->mu);
	free(g);
}

static uint32_t ip_hash(const char *ip)
{
	uint32_t h = 2166136261u; /* FNV-1a: the slot, not a secret */

	for (; *ip; ip++)
		h = (h ^ (unsigned char)*ip) * 16777619u;
	return h;
}

/* The slot of ip, its window ended or not; NULL if none holds it.  With
 * `make`, a free or expired slot, or else the least recently failed one
 * of those probed, is taken for it. */
static struct guard_slot *slot(struct kvtd_guard *g, const char *ip, int64_t now, int make)
{
	uint32_t h = ip_hash(ip);
	struct guard_slot *spare = NULL;
	int64_t spare_rank = INT64_MAX;

	for (int i = 0; i < GUARD_PROBE; i++) {
		struct guard_slot *s = &g->s[(h + (uint32_t)i) % GUARD_SLOTS];
		int over = !s->window_start || now - s->window_start >= KVTD_GUARD_WINDOW_MS;
		if (s->window_start && !strcmp(s->ip, ip)) {
			if (over) { /* a new window */
				s->window_start = now;
				s->fails = 0;
			}
			return s;
		}
		int64_t rank = over ? INT64_MIN : s->last_fail; /* the lowest goes */
		if (rank < spare_rank || !spare) {
			spare = s;
			spare_rank = rank;
		}
	}
	if (!make)
		return NULL;
	memset(spare, 0, sizeof(*spare));
	strncpy(spare->ip, ip, sizeof(spare->ip) - 1);
	spare->window_start = now;
	return spare;
}

int64_t kvtd_guard_refused_ms(struct kvtd_guard *g, const char *ip, int64_t now_ms)
{
	int64_t left = 0;

	if (!g || !ip || !*ip)
		return 0;
	pthread_mutex_lock(&g->mu);
	struct guard_slot *s = slot(g, ip, now_ms, 0);
	if (s && s->fails >= KVTD_GUARD_FAILS)
		left = s->window_start + KVTD_GUARD_WINDOW_MS - now_ms;
	pthread_mutex_unlock(&g->mu);
	return left > 0 ? left : 0;
}

unsigned kvtd_guard_fail(struct kvtd_guard *g, const char *ip, int64_t now_ms)
{
	unsigned n;

	if (!g || !ip || !*ip)
		return 0;
	pthread_mutex_lock(&g->mu);
	struct guard_slot *s = slot(g, ip, now_ms, 1);
	s->last_fail = now_ms;
	n = ++s->fails;
	pthread_mutex_unlock(&g->mu);
	return n;
}

int64_t kvtd_guard_hold_ms(unsigned n)
{
	int64_t ms = KVTD_GUARD_DELAY_MS;

	while (n-- > 1 && ms < KVTD_GUARD_DELAY_MAX_MS)
		ms *= 2;
	return ms < KVTD_GUARD_DELAY_MAX_MS ? ms : KVTD_GUARD_DELAY_MAX_MS;
}
