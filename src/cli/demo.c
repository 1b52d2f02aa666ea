/*
 * demo.c — `kvtier demo`: the life of a prompt's KV in a store.
 *
 * Two requests share a system prompt.  The first stores its chunks; the
 * second finds the shared prefix, loads it and stores its own new chunks,
 * which pushes the first request's older chunks out of the DRAM tier.  When
 * the first conversation comes back, the store finds how much of its prefix
 * survived, reloads that (verifying every byte) and only the rest is
 * "recomputed".  Stand-in KV bytes are derived from each chunk's key so every
 * reload can be checked bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The embedded default configuration: the DRAM tier only, sized so one
 * prompt fits (64 chunks of 3 MiB) but not both. */
static const char demo_config[] =
	"chunk_size: 256\n"
	"local_cpu: true\n"
	"max_local_cpu_size: 256MiB\n"
	"dram_page_size: 64KiB\n"
	"dram_prefault: true\n";

static void fake_kv(const kvt_key *k, uint8_t *buf, size_t len)
{
	uint64_t x;
	memcpy(&x, k->b, 8);
	x |= 1;
	for (size_t i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
}

static void prompt(uint32_t *t, size_t n, uint32_t shared, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		t[i] = i < shared ? (uint32_t)(i * 7 + 1) % 151000
				  : (uint32_t)(i * 13 + seed * 977) % 151000;
}

typedef struct demo {
	kvt_store *st;
	kvt_ns ns;
	size_t per;
	uint8_t *buf, *check;
	int in_tier0; /* of the last lookup's hits, how many in tier 0 */
} demo;

/* Store chunks [from, to) of a chain. */
static int store_chunks(demo *d, const kvt_key *k, size_t from, size_t to,
			double *secs)
{
	double t0 = cli_now(), gen = 0;
	for (size_t i = from; i < to; i++) {
		double g0 = cli_now();
		int rc;
		fake_kv(&k[i], d->buf, d->per);
		gen += cli_now() - g0;
		rc = kvt_put(d->st, &d->ns, &k[i], d->buf, d->per, KVT_DUR_CACHED);
		if (rc && rc != KVT_EEXIST)
			return cli_fail("demo", "put", rc);
	}
	*secs = cli_now() - t0 - gen;
	return 0;
}

/* Load chunks [0, n) and check each against what was stored. */
static int load_chunks(demo *d, const kvt_key *k, size_t n, double *secs)
{
	double t0 = cli_now(), chk = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len;
		double c0;
		int rc = kvt_get(d->st, &d->ns, &k[i], d->buf, d->per, &len);
		if (rc)
			return cli_fail("demo", "get", rc);
		c0 = cli_now();
		fake_kv(&k[i], d->check, d->per);
		if (len != d->per || memcmp(d->buf, d->check, d->per)) {
			fprintf(stderr, "kvtier demo: chunk %zu came back different\n", i);
			return 1;
		}
		chk += cli_now() - c0;
	}
	*secs = cli_now() - t0 - chk;
	return 0;
}

static double gbps(size_t bytes, double secs)
{
	return secs > 0 ? (double)bytes / secs / 1e9 : 0;
}

static int lookup(demo *d, const kvt_key *k, size_t n, double *usec)
{
	uint8_t tiers[256];
	kvt_lookup_result r = { .tier = tiers };
	double t0 = cli_now();
	int hit = kvt_lookup(d->st, &d->ns, k, n < 256 ? n : 256, &r);
	*usec = (cli_now() - t0) * 1e6;
	d->in_tier0 = 0;
	for (int i = 0; i < hit; i++)
		d->in_tier0 += tiers[i] == 0;
	return hit;
}

static void demo_usage(FILE *f)
{
	fprintf(f, "usage: kvtier demo [options]\n\n"
		   "Store a prompt's KV chunks, let a second prompt evict part of them,\n"
		   "find the first prompt's cached prefix again and reload it, printing\n"
		   "what happened and the bandwidth.  Runs on an embedded configuration\n"
		   "(a 256 MiB DRAM tier) unless --config is given.\n%s",
		cli_common_help);
}

/* The demo's store (the embedded configuration, or --config's) and its
 * namespace: 0, or the exit code (printed). */
static int demo_open(cli_common *c, const kvt_ns_desc *desc, demo *d)
{
	kvt_config *cfg;
	int rc;

	if (c->config) {
		if (cli_config(c, &cfg))
			return 1;
	} else {
		cfg = kvt_config_parse(demo_config, sizeof(demo_config) - 1,
				       "(embedded demo config)", &rc);
		if (!cfg)
			return cli_fail("demo", "config", rc);
		for (int i = 0; i < c->n_sets; i++) {
			char key[128];
			const char *eq = strchr(c->sets[i], '=');
			if (!eq || (size_t)(eq - c->sets[i]) >= sizeof(key))
				return 2;
			memcpy(key, c->sets[i], (size_t)(eq - c->sets[i]));
			key[eq - c->sets[i]] = '\0';
			if ((rc = kvt_config_set(cfg, key, eq + 1)))
				return cli_fail("demo", c->sets[i], rc);
		}
	}
	d->st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!d->st)
		return cli_fail("demo", "open store", rc);
	if ((rc = kvt_ns_init(d->st, desc, &d->ns))) {
		kvt_store_close(d->st);
		return cli_fail("demo", "namespace", rc);
	}
	return 0;
}

/* Step 3: request A again, after B's chunks have pushed some of A's out
 * of DRAM: what is still cached and where, reloaded and verified, the
 * rest recomputed and stored.  0, or 1. */
static int demo_again(demo *d, const kvt_key *ka, size_t na, int via_daemon, kvt_tier_stats *s)
{
	char sz[32];
	double secs, us;
	int hit;

	printf("\n3. request A again (the conversation continues)\n");
	uint64_t evicted = s->evictions;
	hit = lookup(d, ka, na, &us);
	if (d->in_tier0 < hit)
		printf("   lookup: %d of %zu chunks still cached (%.1f us): %d in DRAM, the %d that\n"
		       "   B's chunks evicted from DRAM are still in the disk tier\n",
		       hit, na, us, d->in_tier0, hit - d->in_tier0);
	else if ((size_t)hit == na && via_daemon && evicted)
		printf("   lookup: %d of %zu chunks still cached (%.1f us): kvtierd's DRAM evicted %llu\n"
		       "   chunks for B's, but kvtierd keeps every chunk on its disk tier too\n",
		       hit, na, us, (unsigned long long)evicted);
	else if ((size_t)hit == na)
		printf("   lookup: %d of %zu chunks still cached (%.1f us): nothing of A was lost\n",
		       hit, na, us);
	else
		printf("   lookup: %d of %zu chunks still cached (%.1f us): B's new chunks evicted\n"
		       "   A's least recently used ones, which ends A's cached prefix there\n",
		       hit, na, us);
	uint64_t dram_misses = s->misses;
	if (load_chunks(d, ka, (size_t)hit, &secs))
		return 1;
	kvt_store_stats(d->st, 0, s);
	printf("   reloaded %d chunks (%s) at %.2f GB/s, every byte verified\n", hit,
	       kvt_fmt_size((size_t)hit * d->per, sz, sizeof(sz)),
	       gbps((size_t)hit * d->per, secs));
	if (s->misses > dram_misses)
		/* Reading A back in order through an LRU DRAM smaller than A and B
		 * together: each chunk read from disk goes back into DRAM and
		 * evicts A's chunks not read yet, so the misses can outnumber the
		 * chunks evicted before. */
		printf("   %llu of them were no longer in DRAM when read, and came from the disk\n"
		       "   tier: reading A back in order through a DRAM smaller than A and B\n"
		       "   together, each chunk brought back evicts one of A's not read yet\n",
		       (unsigned long long)(s->misses - dram_misses));
	if ((size_t)hit < na)
		printf("   recomputing %zu chunks (%zu tokens) and storing them again\n",
		       na - (size_t)hit, (na - (size_t)hit) * d->ns.layout.chunk_tokens);
	if (store_chunks(d, ka, (size_t)hit, na, &secs))
		return 1;
	hit = lookup(d, ka, na, &us);
	kvt_store_stats(d->st, 0, s);
	printf("   lookup now: %d of %zu chunks cached\n", hit, na);
	printf("\n%s: %llu chunks, %s used of %s; %llu hits, %llu misses, %llu evictions\n",
	       via_daemon ? "kvtierd's DRAM tier" : s->name, (unsigned long long)s->chunks, kvt_fmt_size(s->used_bytes, sz, sizeof(sz)),
	       kvt_fmt_size(s->capacity_bytes, (char[32]){ 0 }, 32),
	       (unsigned long long)s->hits, (unsigned long long)s->misses,
	       (unsigned long long)s->evictions);
	return 0;
}

int cmd_demo(int argc, char **argv)
{
	enum { SYS = 4096, A_TOK = 16384, B_TOK = 12288 };
	cli_common c = { 0 };
	uint32_t *ta, *tb;
	kvt_key ka[A_TOK / 64], kb[B_TOK / 64];
	kvt_ns_desc desc;
	kvt_tier_stats s;
	demo d = { 0 };
	double secs, us;
	size_t na, nb;
	int rc = 1, hit;
	char sz[32];

	int first;
	if ((rc = cli_getopt("demo", argc, argv, NULL, NULL, &c, NULL, NULL, demo_usage, &first)) >= 0)
		return rc;
	if (first < argc) {
		fprintf(stderr, "kvtier demo: unexpected argument \"%s\"\n", argv[first]);
		return 2;
	}
	rc = 1;
	if (cli_desc(&c, &desc))
		return 1;
	if ((rc = demo_open(&c, &desc, &d)))
		return rc;
	rc = 1;
	d.per = kvt_layout_payload_bytes(&d.ns.layout);
	d.buf = malloc(d.per);
	d.check = malloc(d.per);
	ta = malloc(sizeof(*ta) * A_TOK);
	tb = malloc(sizeof(*tb) * B_TOK);
	if (!d.buf || !d.check || !ta || !tb)
		goto out;
	prompt(ta, A_TOK, SYS, 1);
	prompt(tb, B_TOK, SYS, 2);
	{
		/* The key arrays hold prompts of 64-token chunks or larger. */
		int wa = kvt_key_chain(&d.ns, ta, A_TOK, NULL, ka, A_TOK / 64);
		int wb = kvt_key_chain(&d.ns, tb, B_TOK, NULL, kb, B_TOK / 64);
		if (wa < 0 || wb < 0) {
			rc = cli_fail("demo", "hash", wa < 0 ? wa : wb);
			goto out;
		}
		if (d.ns.layout.chunk_tokens < 64) {
			fprintf(stderr, "kvtier demo: chunks of %u tokens: the demo needs 64 or more\n",
				d.ns.layout.chunk_tokens);
			goto out;
		}
		na = (size_t)wa;
		nb = (size_t)wb;
	}
	kvt_store_stats(d.st, 0, &s);

	/* Through kvtierd the store is one tier, the daemon's (its figures are
	 * the daemon's DRAM's); in-process, lookup says which tier holds what. */
	int via_daemon = !strcmp(s.name, "daemon");
	printf("kvtier demo: %s, %u-token chunks of %s each; %s of %s\n",
	       desc.model, d.ns.layout.chunk_tokens, kvt_fmt_size(d.per, sz, sizeof(sz)),
	       via_daemon ? "the store is kvtierd's, its DRAM tier" : "tier 0 is DRAM",
	       kvt_fmt_size(s.capacity_bytes, (char[32]){ 0 }, 32));

	printf("\n1. request A: %d-token prompt (%d-token system prompt), nothing cached\n",
	       A_TOK, SYS);
	hit = lookup(&d, ka, na, &us);
	printf("   lookup: %d of %zu chunks cached (%.1f us)\n", hit, na, us);
	if (store_chunks(&d, ka, 0, na, &secs))
		goto out;
	printf("   stored %zu chunks, %s, at %.2f GB/s\n", na,
	       kvt_fmt_size(na * d.per, sz, sizeof(sz)), gbps(na * d.per, secs));

	printf("\n2. request B: %d-token prompt sharing the system prompt\n", B_TOK);
	hit = lookup(&d, kb, nb, &us);
	printf("   lookup: %d of %zu chunks cached (%.1f us): the shared system prompt\n",
	       hit, nb, us);
	if (load_chunks(&d, kb, (size_t)hit, &secs))
		goto out;
	printf("   loaded %d chunks at %.2f GB/s instead of recomputing %d tokens\n", hit,
	       gbps((size_t)hit * d.per, secs), hit * (int)d.ns.layout.chunk_tokens);
	if (store_chunks(&d, kb, (size_t)hit, nb, &secs))
		goto out;
	kvt_store_stats(d.st, 0, &s);
	printf("   stored its %zu new chunks at %.2f GB/s; %s evicted %llu chunks to stay under %s\n",
	       nb - (size_t)hit, gbps((nb - (size_t)hit) * d.per, secs),
	       via_daemon ? "kvtierd's DRAM" : "the DRAM tier",
	       (unsigned long long)s.evictions,
	       kvt_fmt_size(s.capacity_bytes, sz, sizeof(sz)));

	if (demo_again(&d, ka, na, via_daemon, &s))
		goto out;
	rc = 0;
out:
	free(d.buf);
	free(d.check);
	free(ta);
	free(tb);
	kvt_store_close(d.st);
	return rc;
}
