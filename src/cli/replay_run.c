/*
 * replay_run.c — one request of a trace through a real store (replay_run.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "replay_run.h"

void cli_lat_add(struct cli_lat *l, double s)
{
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 4096;
		double *p = realloc(l->v, nc * sizeof(*p));
		if (!p)
			return;
		l->v = p;
		l->cap = nc;
	}
	l->v[l->n++] = s;
	l->sum += s;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void cli_lat_sort(struct cli_lat *l)
{
	if (l->n)
		qsort(l->v, l->n, sizeof(double), cmp_double);
}

double cli_lat_pct(const struct cli_lat *l, double p)
{
	if (!l->n)
		return 0;
	/* ceil(p * n) - 1, without libm */
	double x = p * (double)l->n;
	size_t i = (size_t)x;
	if ((double)i < x)
		i++;
	if (i)
		i--;
	return l->v[i < l->n ? i : l->n - 1];
}

void cli_lat_free(struct cli_lat *l)
{
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static void failed(struct cli_replay *r, const char *call, int rc)
{
	if (!r->errors++) {
		r->first_error = rc;
		r->first_error_call = call;
	}
}

uint64_t cli_replay_request(struct cli_replay *r, const uint32_t *ids, uint64_t n)
{
	kvt_lookup_result lr = { .n_hit = 0, .tier = r->tiers };
	double t0 = 0;
	uint64_t hit;
	int h;

	for (uint64_t i = 0; i < n; i++)
		r->key(&r->keys[i], ids[i]);
	if (r->l_lookup)
		t0 = cli_now();
	h = kvt_lookup(r->st, r->ns, r->keys, (size_t)n, &lr);
	if (r->l_lookup)
		cli_lat_add(r->l_lookup, cli_now() - t0);
	if (h < 0) {
		failed(r, "kvt_lookup", h);
		h = 0;
	}
	hit = (uint64_t)h;
	r->blocks += n;
	r->hit_blocks += hit;
	for (uint64_t i = 0; i < hit; i++)
		r->hit_tier[r->tiers[i] ? 1 : 0]++;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t id = ids[i], got_id;
		size_t got = 0;
		int g, p;

		if (r->l_get)
			t0 = cli_now();
		g = kvt_get(r->st, r->ns, &r->keys[i], r->back, (size_t)r->payload, &got);
		if (g == 0) {
			if (r->l_get)
				cli_lat_add(r->l_get, cli_now() - t0);
			r->gets++;
			r->gets_nonprefix += i >= hit;
			memcpy(&got_id, r->back, sizeof(got_id));
			if (got != r->payload || got_id != id)
				r->bad++;
			continue;
		}
		if (g != KVT_ENOTFOUND)
			failed(r, "kvt_get", g);
		else if (i < hit)
			r->prefix_get_missed++;
		memcpy(r->data, &id, sizeof(id));
		if (r->l_put)
			t0 = cli_now();
		p = kvt_put(r->st, r->ns, &r->keys[i], r->data, (size_t)r->payload, KVT_DUR_CACHED);
		if (r->l_put)
			cli_lat_add(r->l_put, cli_now() - t0);
		if (p == 0)
			r->puts++;
		else if (p == KVT_EEXIST)
			r->puts_exist++;
		else if (p == KVT_EFULL)
			r->puts_full++;
		else
			failed(r, "kvt_put", p);
	}
	return hit;
}
