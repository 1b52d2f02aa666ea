/*
 * hier.h — what the two parts of `kvtier-bench hierarchy` share: the run's
 * figures (hierarchy.c parses the options and prints them), the promotion
 * part (hier_promotion.c) and the trace replay (hier_replay.c).  What each
 * part measures is written at the top of its file.
 */
#ifndef KVT_BENCH_HIER_H
#define KVT_BENCH_HIER_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "bench.h"
#include "policy/replay.h"

#define HIER_CMD "hierarchy"
#define HIER_MAX_ROUNDS 3
#define HIER_IN_FLIGHT 16
#define HIER_HEADER_BYTES 4096u
#define HIER_TARGET_VS_NVME 0.8

/* Promotion: the bound and two subjects, per chunk size. */
#define HIER_N_SIZES 2
#define HIER_N_SUBJ 3
extern const char *const hier_meas_names[HIER_N_SUBJ];

struct hier_promo {
	const char *model;
	uint64_t chunk_bytes;
	long chunks;
	double gbps[HIER_N_SUBJ][HIER_MAX_ROUNDS];
};

/* Replay: 64 KiB chunks, one per 512-token block. */
#define HIER_TR_PAYLOAD (64u << 10)
#define HIER_TR_IMAGE (HIER_TR_PAYLOAD + HIER_HEADER_BYTES)
#define HIER_TR_DRAM_BLOCKS 2000
#define HIER_TR_NVME_BLOCKS 20000
#define HIER_TR_QUICK_REQ 3000

struct hier_tr_conf {
	const char *evict;  /* dram_eviction */
	const char *admit;  /* nvme_admission */
	const char *write;  /* nvme_write */
	int ev_kind;        /* enum kvt_evict_kind */
	int seen;           /* 0: always */
};

#define HIER_N_TR 6
extern const struct hier_tr_conf hier_tr_confs[HIER_N_TR];

struct hier_tr_result {
	uint64_t blocks, hit_blocks, hit_tier[2];
	uint64_t gets_ok, gets_nonprefix, puts_ok, puts_exist, puts_fail;
	uint64_t lookup_vs_get_mismatch; /* prefix hit whose get missed */
	uint64_t cap_blocks[2];          /* policy capacity in blocks */
	kvt_tier_stats ts[2];
	double wall_s, settle_s;
	int settled;
	int has_ref;
	struct kvt_replay_result ref;
};

struct hier_bench {
	int json, quick, rounds;
	char base[1024];
	int base_made;
	uint64_t free_bytes;

	struct hier_promo promo[HIER_N_SIZES];
	int n_promo;
	int promo_scaled;
	const char *promo_skipped;

	char trace[4096];
	const char *trace_skipped;
	uint64_t tr_nreq, tr_blocks, tr_ids;
	struct hier_tr_result tr[HIER_N_TR];
	int n_tr;
};

/* Free space under b->base into b->free_bytes: 0, or 1 (printed). */
static inline int hier_free_space(struct hier_bench *b)
{
	struct statvfs sv;

	if (statvfs(b->base, &sv)) {
		fprintf(stderr, "kvtier-bench " HIER_CMD ": %s: %s\n", b->base, strerror(errno));
		return 1;
	}
	b->free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

/* `bytes` as "<n>KiB", rounded up to 4 KiB. */
static inline void hier_size_kib(char *out, size_t cap, uint64_t bytes)
{
	snprintf(out, cap, "%lluKiB", (unsigned long long)(((bytes + 4095) >> 12) << 2));
}

/* Part 1 into b->promo: 0, or 1 after printing what failed. */
int hier_promotion(struct hier_bench *b);

/* The per-round ratio of subject m to the bound, summarised. */
struct summary hier_promo_ratio(const struct hier_promo *p, int m, int rounds);

/* Part 2 into b->tr; trace_opt is --trace or NULL.  0, or 1. */
int hier_replay(struct hier_bench *b, const char *trace_opt);

#endif
