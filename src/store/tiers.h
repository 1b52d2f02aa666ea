/*
 * tiers.h — the registry of the kinds of tier a store can open.
 *
 * One row per kind, fastest first: whether a configuration asks for it,
 * how to open it from that configuration, whether its reads are verified
 * (a medium that can tear or rot), its planning speeds until reads are
 * measured (tier/speeds.h, shared with the planner), and the size its
 * policy rounds objects to, and its configuration keys with their
 * defaults.  The store and config.c walk the table and name no tier; a new
 * kind of tier is its own module, its fields in struct kvt_config, and one
 * entry in tiers.c.
 */
#ifndef KVT_TIERS_H
#define KVT_TIERS_H

#include "common/io.h"
#include "store/config.h"
#include "tier/tier.h"

typedef struct kvt_tier_class {
	const char *name;   /* as kvt_tier_stats names it */
	int kind;           /* KVT_CT_*: which per-tier policy keys apply */
	/* 1 if `cfg` configures this tier. */
	int (*configured)(const kvt_config *cfg);
	/* Open it, the file tiers calling through `io` (NULL: POSIX; tests
	 * pass a faulting table); on failure a negative code, kvt_errmsg()
	 * prefixed with what the tier is ("local disk tier /path: "). */
	int (*open)(const kvt_config *cfg, kvt_io *io, kvt_tier **out);
	/* Reads are verified: always for a medium, on request for memory. */
	int (*verify)(const kvt_config *cfg);
	double gbps, lat_us; /* planning speeds */
	uint32_t (*round)(const kvt_config *cfg); /* policy's object grain */
	int persistent;     /* survives the process: durability beyond
			     * KVT_DUR_CACHED can be given by it */
	const char *key_prefix; /* its policy knobs: <prefix>_eviction, ... */
	const char *enable_hint; /* the key that turns it on, for errors */
	const kvt_config_key *keys; /* its own configuration keys */
	size_t n_keys;
	void (*defaults)(kvt_config *cfg); /* its fields in kvt_config_new */
	int alone;          /* when configured, the store has this tier only */
	/* Its data lives off this node (another node's daemon, a shared file
	 * system, S3): a read that misses the node's own tiers asks these in
	 * the order the cost model expects to be fastest (get.c), and a
	 * node serving its peers serves only from the other tiers. */
	int remote;
	/* Each read fetches the image anew and the tier keeps no copy or
	 * index of it (peers): the reader copies what it fetched up into the
	 * first tier instead of a promotion reading it a second time. */
	int fetches;
} kvt_tier_class;

/* The kinds, fastest first, NULL-terminated. */
extern const kvt_tier_class *const kvt_tier_classes[];

/* "local_cpu: true, local_disk, shared_fs or remote_url": what a
 * configuration with no tier is told to set, from the table.  Returns buf. */
const char *kvt_tier_enable_hint(char *buf, size_t len);

#endif
