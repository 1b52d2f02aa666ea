/*
 * config.h — what a store is opened from (docs/CONFIG.md).
 *
 * Keys follow LMCache's where one exists (chunk_size, local_cpu,
 * max_local_cpu_size, local_disk, max_local_disk_size) so that its users find
 * familiar knobs; kvtier's own keys sit beside them.  Every key can be set
 * from YAML, from kvt_config_set, or from a KVTIER_<KEY> environment
 * variable; an unknown key or a bad value is an error naming the file, the
 * line and what was expected.
 */
#ifndef KVT_CONFIG_H
#define KVT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "store/events.h"

#define KVT_MAX_TENANTS 64
#define KVT_TENANT_NAME_MAX 64
#define KVT_SECRET_MAX 64
#define KVT_PATH_MAX 1024

enum { KVT_CT_DRAM = 0, KVT_CT_NVME = 1, KVT_CT_SHARED = 2, KVT_CT_S3 = 3, KVT_CT_DEVICE = 4,
       KVT_CT_DAEMON = 5, KVT_CT_PEER = 6, KVT_CT_KINDS };
enum { KVT_WRITE_THROUGH = 0, KVT_WRITE_BACK = 1, KVT_WRITE_NONE = 2 };

typedef struct kvt_tenant {
	char name[KVT_TENANT_NAME_MAX];
	uint8_t secret[KVT_SECRET_MAX];
	uint32_t secret_len;
} kvt_tenant;

struct kvt_config {
	uint32_t chunk_size;          /* tokens per chunk (LMCache chunk_size) */
	uint64_t device_capacity;     /* device tier bytes (spare HBM), 0 = off */
	uint32_t device_page_size;
	uint32_t device_id;           /* CUDA ordinal */
	char device_backend[16];      /* "cuda" or "host" */
	int local_cpu;                /* DRAM tier on (LMCache local_cpu) */
	uint64_t max_local_cpu_size;  /* DRAM tier bytes */
	uint32_t dram_page_size;
	int dram_hugepages;
	int dram_lock_memory;
	int dram_prefault;
	int dram_shared;              /* the arena is a memfd other processes map */
	int read_only;                /* inspect only: no writes, no prefault */
	int verify_dram_reads;        /* re-verify checksums on every DRAM get */
	char local_disk[KVT_PATH_MAX];/* NVMe tier directory, "" = off */
	uint64_t max_local_disk_size;
	uint32_t nvme_queue_depth;    /* io_uring entries of the NVMe tier */
	int nvme_io_uring;            /* 0: pread/pwrite even where io_uring works */
	char shared_fs[KVT_PATH_MAX]; /* shared file system directory, "" = off */
	uint64_t max_shared_fs_size;
	uint32_t shared_fs_refresh_ms; /* staleness bound of other nodes' chunks */
	uint8_t object_auth_key[64];   /* HMAC key for shared tiers' objects */
	uint32_t object_auth_key_len;  /* 0 = objects are not authenticated */
	/* S3: remote_url "s3://bucket/prefix" (LMCache's key), "" = off */
	char s3_bucket[256];
	char s3_prefix[512];
	char s3_endpoint[512];        /* "" = AWS for the region */
	char s3_region[64];           /* "" = from the environment / ~/.aws */
	int s3_path_style;
	uint64_t max_remote_size;     /* 0 = unbounded */
	uint32_t s3_max_parallel;
	uint64_t s3_part_size;
	uint64_t s3_multipart_size;   /* larger objects go multipart */
	uint32_t s3_timeout_ms;
	uint32_t s3_refresh_s;
	uint32_t s3_list_timeout_ms;  /* 0: 10 x s3_timeout_ms */
	uint32_t s3_list_max_pages;   /* 0: the tier's default (10000) */
	char peers[1024];             /* other nodes' kvtierd, host:port,... ("" = none) */
	char peer_user[128];          /* AUTH to them ("" : the password alone) */
	char peer_password[256];      /* "" : no AUTH */
	uint32_t peer_timeout_ms;
	char daemon[108];             /* kvtierd's local socket: the store is its
				       * client ("" = the store's own tiers) */
	uint32_t hash_scheme;         /* enum kvt_hash_scheme */
	uint32_t workers;             /* async worker threads */

	/* The hierarchy, per tier (index KVT_CT_DRAM, KVT_CT_NVME,
	 * KVT_CT_SHARED): eviction policy, admission, how puts reach it
	 * (lower tiers only) and the bandwidth background copies may use. */
	struct kvt_tier_conf {
		uint32_t eviction;    /* kvt_evict_kind: 1 lru, 2 s3fifo */
		uint32_t s3_small_pct; /* S3-FIFO's small queue, 1..90 %; 0 = 10 */
		uint32_t s3_promote;  /* S3-FIFO's hits in S to reach M, 1..3; 0 = 1 */
		uint32_t admit_rules; /* kvt_admit_rule flags; 0 = always */
		uint32_t admit_seen;  /* with KVT_ADMIT_SEEN */
		uint32_t write;       /* KVT_WRITE_* */
		uint64_t background_bps; /* bytes/s for write-through and
					  * demotion; 0 = unlimited */
	} tier[KVT_CT_KINDS];
	uint64_t ttl_s;               /* chunks older than this are misses; 0 = none */
	/* KV events in vLLM's format (events.h): publisher zmq or null. */
	int kv_events_on;
	struct kvt_events_conf kv_events;
	uint32_t n_tenants;
	kvt_tenant tenants[KVT_MAX_TENANTS];
};

/* kvt_parse_size and kvt_parse_duration, the one grammar of sizes and
 * durations, are public (kvtier.h). */

/* --- keys, as data ---------------------------------------------------------
 *
 * A key is a row: its name, the field it sets and that field's grammar.
 * config.c holds the rows that concern the store as a whole; each tier
 * kind brings its own rows in its registry entry (store/tiers.h), so that
 * config.c names no tier.  YAML, kvt_config_set and KVTIER_<KEY> all go
 * through kvt_config_key_set and give the same errors. */
enum kvt_ckey_type {
	KVT_CK_BOOL, /* int: true/false, yes/no, on/off, 1/0 */
	KVT_CK_U32,  /* uint32_t in lo..hi */
	KVT_CK_SIZE, /* uint64_t: kvt_parse_size in units of `hi` bytes, >= lo */
	KVT_CK_DIR,  /* char[len]: an absolute path or file:///path; "" or null = off */
	KVT_CK_STR,  /* char[len] */
	KVT_CK_FN,   /* the row's own setter */
};

typedef int (*kvt_config_setter)(kvt_config *c, const char *v);

typedef struct kvt_config_key {
	const char *name;
	int type;          /* enum kvt_ckey_type */
	size_t off, len;   /* the field: offsetof and sizeof in kvt_config */
	uint64_t lo, hi;   /* U32: the range; SIZE: the minimum and the bare unit */
	kvt_config_setter set; /* KVT_CK_FN only */
	const char *expect;    /* what the value may be, for errors and docs */
} kvt_config_key;

#define KVT_CFG_FIELD(F) offsetof(struct kvt_config, F), sizeof(((struct kvt_config *)0)->F)
#define KVT_CKEY_BOOL(N, F) { N, KVT_CK_BOOL, KVT_CFG_FIELD(F), 0, 0, NULL, "true or false" }
#define KVT_CKEY_U32(N, F, LO, HI, X) { N, KVT_CK_U32, KVT_CFG_FIELD(F), LO, HI, NULL, X }
#define KVT_CKEY_SIZE(N, F, MIN, UNIT, X) { N, KVT_CK_SIZE, KVT_CFG_FIELD(F), MIN, UNIT, NULL, X }
#define KVT_CKEY_DIR(N, F) \
	{ N, KVT_CK_DIR, KVT_CFG_FIELD(F), 0, 0, NULL, "an absolute path or file:///path" }
#define KVT_CKEY_STR(N, F, X) { N, KVT_CK_STR, KVT_CFG_FIELD(F), 0, 0, NULL, X }
#define KVT_CKEY_FN(N, FN, X) { N, KVT_CK_FN, 0, 0, 0, 0, FN, X }

/* Set the field of row `k` from `v`.  0, or KVT_ECONFIG with the reason
 * (the caller prefixes the key's name and where it came from). */
int kvt_config_key_set(const kvt_config_key *k, kvt_config *c, const char *v);

/* The keys whose values differ between `cur` and `next` other than those
 * a running store takes at once (kvt_store_reconfigure: the tiers' policy
 * knobs and ttl), as a comma-separated list in out ("" if none). */
void kvt_config_changed_later(const kvt_config *cur, const kvt_config *next, char *out,
			      size_t len);

/* kvt_parse_size with a minimum ("is below the minimum of 1.00 MiB"). */
int kvt_config_size_min(const char *v, uint64_t bare_unit, uint64_t lo, uint64_t *out);

#define KVT_KiB 1024ull
#define KVT_MiB (1024ull * KVT_KiB)
#define KVT_GiB (1024ull * KVT_MiB)

/* Find a tenant by name; NULL if absent. */
const kvt_tenant *kvt_config_tenant(const kvt_config *cfg, const char *name);

#endif
