/*
 * replay_run.h — one request of a trace through a real store, the way
 * `kvtier replay` and `kvtier-bench hierarchy` both drive it: the reference
 * semantics of policy/replay.h on real bytes.
 *
 * Per request, in the calling thread:
 *   1. kvt_lookup of the whole chain: the prefix hit, and the tier each hit
 *      block was found in (changes nothing);
 *   2. every block in prompt order: kvt_get (a hit refreshes it, or promotes
 *      it from a lower tier) and, if missing, kvt_put of its bytes at the
 *      cached durability.
 * Nothing fails the loop: each outcome is counted, and the caller decides
 * what a count means (the command reports errors; the benchmark stops at
 * the first).  Compiled into both programs, not into the library.
 */
#ifndef KVT_CLI_REPLAY_RUN_H
#define KVT_CLI_REPLAY_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* Latencies of one kind of call, in seconds, for percentiles. */
struct cli_lat {
	double *v;
	size_t n, cap;
	double sum;
};

void cli_lat_add(struct cli_lat *l, double s);
/* Sort the samples; then cli_lat_pct(l, 0.99) is the 99th percentile. */
void cli_lat_sort(struct cli_lat *l);
double cli_lat_pct(const struct cli_lat *l, double p);
void cli_lat_free(struct cli_lat *l);

struct cli_replay {
	/* Set by the caller. */
	kvt_store *st;
	const kvt_ns *ns;
	void (*key)(kvt_key *k, uint64_t id); /* the key that names block `id` */
	uint8_t *data;    /* put source, `payload` bytes; its first 8 bytes are
			   * set to the block id before each put */
	uint8_t *back;    /* get destination, `payload` bytes */
	uint64_t payload;
	kvt_key *keys;    /* room for the longest request's blocks */
	uint8_t *tiers;   /* as many entries */
	struct cli_lat *l_lookup, *l_get, *l_put; /* NULL: not timed */

	/* Counted by cli_replay_request. */
	uint64_t blocks, hit_blocks;
	uint64_t hit_tier[2];      /* prefix hits found in the first tier, in a lower one */
	uint64_t gets;             /* gets that served the chunk */
	uint64_t gets_nonprefix;   /* of them, blocks past the lookup's prefix */
	uint64_t bad;              /* served, but not the bytes put (length or id) */
	uint64_t prefix_get_missed; /* in the lookup's prefix, yet the get missed */
	uint64_t puts, puts_exist, puts_full;
	uint64_t errors;           /* any other failed call */
	int first_error;           /* its code, and which call */
	const char *first_error_call;
};

/* Drive one request, the n block ids `ids`, through r->st.  Returns the
 * lookup's prefix hit (0 if the lookup failed, which counts an error). */
uint64_t cli_replay_request(struct cli_replay *r, const uint32_t *ids, uint64_t n);

#endif
