/*
 * kvtier/plan.h — the capacity planner and trace replay: the
 * library of `kvtier plan` and `kvtier replay`.
 *
 * Not part of libkvtier.so: these calls are the planner's own library
 * (libkvtier_plan.a), linked with the static libkvtier.a; kvtier.h does
 * not include this file.  Errors come back as kvtier.h says.
 */
#ifndef KVTIER_PLAN_H
#define KVTIER_PLAN_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Capacity planning and trace replay ================================== */

/*
 * What `kvtier plan` and `kvtier replay` are built on: read a request trace,
 * simulate a configuration of tiers over it (no data; the store's own
 * eviction and admission policies), and price the result with the cost
 * model.  docs/PLANNING.md gives the formats, the semantics and the sources
 * of every figure.
 *
 * Thread safety: a kvt_plan_trace is immutable once read; any number of
 * threads may simulate over one at once.  The catalog (models, GPUs, tiers)
 * may be read from any thread, except while kvt_plan_catalog_load runs:
 * load catalogs first, then plan.
 */

/* A request trace: per request, the prefix-block ids in prompt order (as
 * dense ids, in order of first appearance), arrival and lengths. */
typedef struct kvt_plan_trace kvt_plan_trace;

enum kvt_plan_format {
	KVT_PLAN_FMT_AUTO = 0,     /* from the first non-blank line */
	KVT_PLAN_FMT_MOONCAKE = 1, /* JSONL, timestamp in ms, 512-token blocks */
	KVT_PLAN_FMT_BAILIAN = 2,  /* JSONL (Qwen/Bailian), seconds, 16-token blocks */
	KVT_PLAN_FMT_TOKENS = 3,   /* token ids, one prompt a line, keyed by kvtier */
	KVT_PLAN_FMT_VLLM = 4,     /* vLLM KV events (BlockStored), JSON lines */
};

/* "auto", "mooncake", "bailian" (or "qwen"), "tokens", "vllm" -> enum
 * kvt_plan_format; -1 if `name` is none of them.  `name` may not be NULL. */
int kvt_plan_format_parse(const char *name);
/* The name of a format; "auto" for any other value.  Never NULL. */
const char *kvt_plan_format_name(int format);

/* Read the trace in file `path` ("-": standard input), streaming it; a JSON
 * record is parsed whole and its fields taken by name.  `format` is an enum
 * kvt_plan_format; block_tokens 0 takes the format's own; max_requests > 0
 * keeps the first max_requests requests (and reads no further).  On
 * success *out is a trace for kvt_plan_trace_free.  Returns 0; KVT_EINVAL
 * for a trace that is wrong, with kvt_errmsg() naming the file, the line
 * and the field ("t.jsonl:3: timestamp: ... is out of range 0..."), for a
 * directory, for an unknown format, and for a trace with no request or no
 * whole block; KVT_ENOMEM; or -errno when the file cannot be opened or
 * read.  *out is NULL on failure.  `path` and `out` may not be NULL. */
int kvt_plan_trace_read(const char *path, int format, uint32_t block_tokens,
				uint64_t max_requests, kvt_plan_trace **out);
/* The same for a trace held in memory (messages name it "trace"). */
int kvt_plan_trace_parse(const char *buf, size_t len, int format,
				 uint32_t block_tokens, uint64_t max_requests,
				 kvt_plan_trace **out);
/* Free a trace; NULL is a no-op. */
void kvt_plan_trace_free(kvt_plan_trace *t);

/* A read-only view of a trace; its arrays live as long as the trace. */
typedef struct kvt_plan_trace_view {
	int format;                /* enum kvt_plan_format, never AUTO */
	uint32_t block_tokens;     /* tokens per block */
	uint64_t requests;
	uint64_t blocks;           /* block references, all requests */
	uint64_t distinct_blocks;  /* dense ids are 0..distinct_blocks-1 */
	const uint64_t *off;       /* requests + 1: request q is ids[off[q]..off[q+1]) */
	const uint32_t *ids;       /* blocks */
	const double *arrive_s;    /* requests: seconds after the first */
	const uint32_t *in_len;    /* requests: prompt tokens */
	const uint32_t *out_len;   /* requests: generated tokens (0: unknown) */
} kvt_plan_trace_view;

/* Fill *out with the view of `t`.  Neither may be NULL. */
void kvt_plan_trace_view_get(const kvt_plan_trace *t, kvt_plan_trace_view *out);

/* -- simulation -- */

#define KVT_PLAN_UNBOUNDED UINT64_MAX /* a capacity with no limit */
#define KVT_PLAN_MAX_NODES 1024

/* Tier slots: each node's DRAM (T0) over its NVMe (T1), exclusive; a tier
 * shared by all nodes (a file system or S3), inclusive. */
enum { KVT_PLAN_T0 = 0, KVT_PLAN_T1 = 1, KVT_PLAN_TS = 2, KVT_PLAN_NT = 3 };

enum kvt_plan_policy { KVT_PLAN_LRU = 0, KVT_PLAN_S3FIFO = 1 };
enum kvt_plan_route {
	KVT_PLAN_ROUTE_RR = 0,       /* round-robin */
	KVT_PLAN_ROUTE_AFFINITY = 1, /* the node holding the longest prefix */
	KVT_PLAN_ROUTE_BALANCED = 2, /* ... among those not above 1.25x the mean
				      * recent work (blocks computed) */
};
enum kvt_plan_admit {
	KVT_PLAN_ADMIT_ALL = 0,
	KVT_PLAN_ADMIT_SEEN = 1,     /* on the seen_n-th sighting (1..15) */
	KVT_PLAN_ADMIT_TINYLFU = 2,  /* more often seen than the victim */
	KVT_PLAN_ADMIT_PREFIX = 3,   /* blocks at depth >= min_prefix (>= 1) */
};

typedef struct kvt_plan_tier_conf {
	uint64_t capacity;    /* blocks; 0: the tier is absent (T0 must be > 0) */
	int admit;            /* enum kvt_plan_admit */
	uint32_t seen_n;      /* KVT_PLAN_ADMIT_SEEN */
	uint32_t min_prefix;  /* KVT_PLAN_ADMIT_PREFIX */
} kvt_plan_tier_conf;

typedef struct kvt_plan_conf {
	int policy;           /* enum kvt_plan_policy, every tier */
	unsigned nodes;       /* 1..KVT_PLAN_MAX_NODES */
	int route;            /* enum kvt_plan_route */
	kvt_plan_tier_conf tier[KVT_PLAN_NT];
	/* S3-FIFO only (0: the store's defaults, 10 and 1): the small queue's
	 * share of each tier in percent (1..90), and the hits a block needs
	 * in the small queue to move to the main one (1..3; libCacheSim's
	 * move_to_main_threshold, 2 there by default).  With s3_fill_main and
	 * 2, libCacheSim's S3FIFO to the access. */
	uint32_t s3_small_pct;
	uint32_t s3_promote;
	/* S3-FIFO: nonzero = libCacheSim's variant (until the first eviction,
	 * new blocks go to the main queue once the small one holds its
	 * share); 0 = the store's rule, always the small queue first. */
	int s3_fill_main;
} kvt_plan_conf;

typedef struct kvt_plan_result {
	uint64_t requests;
	uint64_t blocks;                  /* block references */
	uint64_t hit_blocks;              /* prefix hits, any tier */
	uint64_t hit_tier[KVT_PLAN_NT];   /* ... by the tier that held them */
	uint64_t tokens, hit_tokens;      /* prompt tokens, of which cached */
	uint64_t inserts[KVT_PLAN_NT];    /* blocks written per tier */
	uint64_t rejects[KVT_PLAN_NT];    /* refused by admission */
	uint64_t demotions, promotions;
	/* Per access, as a cache simulator counts (libCacheSim's hits): of
	 * the `blocks` accesses, those that found the block in tier k,
	 * whether or not it was part of the request's hit prefix. */
	uint64_t access_hits[KVT_PLAN_NT];
} kvt_plan_result;

/* Per request: blocks hit in T0, T1, S (a prefix, looked up in that order)
 * and the node it ran on. */
typedef struct kvt_plan_req_hit {
	uint32_t hit[KVT_PLAN_NT];
	uint32_t node;
} kvt_plan_req_hit;

/* Simulate configuration `c` over trace `t` into *r; per_req (may be
 * NULL) receives one entry per request.  A request's hit is its leading
 * blocks present in the node's tiers or the shared one; then every block
 * is accessed in prompt order.  Deterministic.  0; KVT_EINVAL for a
 * configuration out of range (nodes, an absent T0, an unknown policy,
 * route or admission rule, seen_n or min_prefix out of range: kvt_errmsg
 * names it); KVT_ENOMEM.  t, c and r may not be NULL. */
int kvt_plan_simulate(const kvt_plan_trace *t, const kvt_plan_conf *c,
			      kvt_plan_result *r, kvt_plan_req_hit *per_req);

/* -- cost model -- */

typedef struct kvt_plan_model {
	char name[48];
	double params;                              /* parameters */
	uint32_t layers, d_model, kv_heads, head_dim;
} kvt_plan_model;

typedef struct kvt_plan_gpu {
	char name[48];
	double tflops;    /* dense BF16 */
	double mfu;       /* achieved share of it in prefill */
	double usd_hour;  /* one GPU-hour */
} kvt_plan_gpu;

/* A tier's speed and price.  The catalog's "dram", "nvme", "fs" and "s3"
 * carry the store's default tier speeds, the figures kvt_lookup_worth
 * starts from before it has measured its own reads. */
typedef struct kvt_plan_tier {
	char name[48];
	double gbps;            /* read bandwidth per node, 10^9 B/s */
	double latency_us;      /* first byte */
	double usd_gib_month;   /* storage */
	double usd_per_1k_get, usd_per_1k_put;
	/* What a fleet-wide tier serves all nodes together (0: no limit of
	 * its own): a parallel file system's throughput per TiB provisioned
	 * and its smallest size (FSx for Lustre: 0.125 GB/s per TiB, 1.2
	 * TiB), an object store's GET requests per second per key prefix and
	 * the prefixes the keys spread over (S3: 5,500). */
	double gbps_per_tib, min_tib;
	double get_per_s, prefixes;
} kvt_plan_tier;

/* A host link a load crosses ("pcie": host to accelerator, per
 * accelerator; "nic": node to the shared tier, per node). */
typedef struct kvt_plan_link {
	char name[48];
	double gbps;            /* 10^9 B/s, each direction */
} kvt_plan_link;

/* Where a catalog entry's figures come from: "built-in" (the planning
 * defaults of docs/PLANNING.md) or the catalog file and line that last
 * set them ("bench.cat:3").  kind is "model", "gpu", "tier" or "link";
 * NULL when there is no such entry.  Valid until the next catalog load. */
const char *kvt_plan_catalog_source(const char *kind, const char *name);

/* The catalog entry named `name` (case-insensitive), or NULL
 * when there is none.  `name` may not be NULL.  The entry stays valid
 * until the process ends (a later catalog load may change its figures). */
const kvt_plan_model *kvt_plan_model_find(const char *name);
const kvt_plan_gpu *kvt_plan_gpu_find(const char *name);
const kvt_plan_tier *kvt_plan_tier_find(const char *name);
const kvt_plan_link *kvt_plan_link_find(const char *name);
/* Entry i of the catalog, in its order; NULL past the last. */
const kvt_plan_model *kvt_plan_model_at(size_t i);
const kvt_plan_gpu *kvt_plan_gpu_at(size_t i);
const kvt_plan_tier *kvt_plan_tier_at(size_t i);
const kvt_plan_link *kvt_plan_link_at(size_t i);

/* Write the catalog as `kvtier plan --list` shows it to file descriptor
 * `fd` (the caller's; left open).  0, or -errno if it cannot be written. */
int kvt_plan_catalog_write(int fd);

/* Add (or override) catalog entries from a text file, one a line:
 *   model NAME params=8.03e9 layers=32 d_model=4096 kv_heads=8 head_dim=128
 *   gpu   NAME tflops=989 mfu=0.5 usd_hour=4.5
 *   tier  NAME gbps=50 latency_us=5 usd_gib_month=3 usd_per_1k_get=0 usd_per_1k_put=0
 * 0; KVT_ECONFIG for a wrong line (kvt_errmsg names the file, the line and
 * the setting, with its range); KVT_EIO or -errno if it cannot be read.
 * Not to be called while another thread uses the catalog. */
int kvt_plan_catalog_load(const char *path);

/* KV bytes one token takes: 2 (K, V) x layers x kv_heads x head_dim x 2. */
double kvt_plan_kv_bytes_per_token(const kvt_plan_model *m);
/* Seconds of prefill from token from_tok to to_tok on `g`:
 * [2 P (to - from) + 2 L d (to^2 - from^2)] / (F MFU); 0 when to <= from. */
double kvt_plan_prefill_seconds(const kvt_plan_model *m, const kvt_plan_gpu *g,
					double from_tok, double to_tok);
/* Seconds to load `bytes` from tier `t`: latency + bytes / bandwidth, 0
 * when nothing loads. */
double kvt_plan_load_seconds(const kvt_plan_tier *t, double bytes);

/* -- time and queueing -- */

/*
 * The trace in time, on a fleet of accelerators (docs/PLANNING.md, "Time
 * and queueing").  Request q arrives at arrive_s[q] / rate on the node the
 * cache simulation sent it to (per_req[q].node) and waits in that node's
 * queue (first come, first served) for the first of its gpus_per_node
 * accelerators to be free.  Its service is the prefill of its uncached
 * tokens (kvt_plan_prefill_seconds) overlapped layer by layer with the
 * loads of its cached blocks, tier after tier (T0, T1, S) as the engine
 * connector loads them: layer l computes once its KV has arrived and
 * layer l - 1 is done.  A load waits for the tier's first byte
 * (latency_us), then holds every link of its path at the path's slowest
 * bandwidth until it is done; a busy link is waited for (first come,
 * first served):
 *   T0: the tier (DRAM) and the accelerator's PCIe;
 *   T1: the node's NVMe (the tier's bandwidth) and PCIe;
 *   S:  the node's NIC (the link and the tier's per-node bandwidth), the
 *       shared tier's fleet-wide throughput, and PCIe.
 * A tier whose load, alone on its links, would take longer than computing
 * the tokens it holds is not read (kvt_lookup_worth's rule): those tokens
 * and the rest are computed, and the load counts as starved.  TTFT is
 * arrival to the end of the prefill.
 */
enum {
	KVT_PLAN_LINK_PCIE = 0,   /* host to accelerator, each accelerator */
	KVT_PLAN_LINK_NVME = 1,   /* the node's NVMe reads */
	KVT_PLAN_LINK_NIC = 2,    /* node to the shared tier, each node */
	KVT_PLAN_LINK_SHARED = 3, /* the shared tier, fleet-wide */
	KVT_PLAN_NLINK = 4,
};

typedef struct kvt_plan_fleet_conf {
	const kvt_plan_model *model;
	const kvt_plan_gpu *gpu;
	const kvt_plan_tier *tier[KVT_PLAN_NT];  /* T0, T1, S: latency, bandwidth */
	double link_gbps[KVT_PLAN_NLINK];        /* capacities; 0: no limit */
	double rate;              /* traffic scale: arrivals at arrive_s / rate; > 0 */
	unsigned nodes;           /* those of the simulation, 1..KVT_PLAN_MAX_NODES */
	unsigned gpus_per_node;   /* replicas serving each node's queue, 1..64 */
	unsigned tp;              /* accelerators a replica, tensor parallel, 1..64
				   * (0: 1): prefill / tp, each one's PCIe in parallel */
	double window_s;          /* bandwidth windows; 0: one second */
} kvt_plan_fleet_conf;

typedef struct kvt_plan_link_use {
	double bytes;                       /* moved over the link */
	double p50_gbps, p99_gbps, max_gbps; /* demand over the windows */
	double busy_s;                      /* link-seconds held (each instance) */
	uint64_t loads;                     /* loads whose slowest link this is */
	uint64_t starved;   /* ... that took longer than recomputing their tokens */
	uint64_t latency_bound; /* ... of which no bandwidth helps (latency alone is more) */
	double fix_gbps;    /* bandwidth at which 99% of those loads beat the recompute */
} kvt_plan_link_use;

typedef struct kvt_plan_timing {
	uint64_t requests;
	double ttft_mean, ttft_p50, ttft_p90, ttft_p99, ttft_max;  /* seconds */
	double wait_mean, wait_p50, wait_p90, wait_p99, wait_max;  /* in the queue */
	double service_p90;   /* TTFT less the queueing: what no fleet size removes */
	double span_s;        /* first arrival to last prefill's end */
	double busy_s;        /* accelerator-seconds of service */
	double compute_s;     /* of which prefill */
	double utilisation;   /* busy_s / (accelerators x span_s) */
	uint64_t windows;     /* bandwidth windows over span_s */
	kvt_plan_link_use link[KVT_PLAN_NLINK];
} kvt_plan_timing;

/* The p-quantile (0..1, nearest rank) of v[0..n), found by selection
 * without a sort (v is reordered): what the fleet figures' percentiles
 * use.  0 when n is 0. */
double kvt_plan_quantile(double *v, size_t n, double p);

/* Run trace `t` in time on fleet `f`, the cache hits and nodes from
 * kvt_plan_simulate's per_req (NULL: no cache, requests round-robin).
 * Optional outputs (each may be NULL): ttft_s and wait_s, one entry per
 * request in trace order; series, link-major, series_cap windows per
 * link, the demand of each window in 10^9 B/s (windows past series_cap
 * are counted in the figures but not written).  Deterministic.  0;
 * KVT_EINVAL for a fleet out of range (kvt_errmsg names the field);
 * KVT_ENOMEM.  t, f and out may not be NULL. */
int kvt_plan_fleet_run(const kvt_plan_trace *t, const kvt_plan_req_hit *per_req,
			       const kvt_plan_fleet_conf *f, kvt_plan_timing *out,
			       double *ttft_s, double *wait_s, double *series,
			       size_t series_cap);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_PLAN_H */
