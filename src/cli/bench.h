/*
 * bench.h — what the kvtier benchmarks share: medians over interleaved
 * rounds, the chunk shapes they store, and buffers laid out like the arena.
 */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define BENCH_MAX_ROUNDS 64

/* Median, min and max of a figure over rounds. */
struct summary {
	double median, min, max;
};

/* Summarise n (1..BENCH_MAX_ROUNDS) values. */
struct summary bench_summarize(const double *v, int n);

/* "12.3 [11.9..12.8]" with as many decimals as the magnitude needs. */
const char *bench_fmt_summary(struct summary s, char *buf, size_t cap);

/* "name":{"median":..,"min":..,"max":..} on stdout. */
void bench_json_summary(const char *name, struct summary s);

/* A synthetic key: distinct per (tag, kind, seq); `magic` (8 bytes) marks
 * which benchmark made it. */
void bench_chunk_key(kvt_key *k, uint32_t tag, uint8_t kind, uint64_t seq,
		     const char magic[8]);

/* The namespace of a model preset with 256-token bf16 K/V chunks.  Prints
 * why and returns 1 if the preset is unknown. */
int bench_chunk_desc(const char *cmd, const char *preset, kvt_ns_desc *d);

/* A zeroed, pre-faulted buffer of at least `bytes`, 2 MiB aligned and
 * advised MADV_HUGEPAGE like the DRAM arena, so that a bound and a subject
 * pay the same TLB costs.  free() it. */
uint8_t *bench_buffer(size_t bytes);

/* a/b into out; -1 if it does not fit. */
int bench_path_join(char *out, size_t cap, const char *a, const char *b);

/* rm -rf of a benchmark's own scratch directory; -1 if anything stayed. */
int bench_remove_tree(const char *path);

/* n bytes of xorshift noise from seed x (payloads nothing compresses). */
void bench_fill_random(uint8_t *p, size_t n, uint64_t x);

#define BENCH_IN_FLIGHT 16

/* Put (bufs NULL: `src` each time, crash-safe) or get (into bufs[slot]) n
 * chunks keyed bench_chunk_key(tag, kind, seq0 + i, magic), keeping
 * BENCH_IN_FLIGHT async ops outstanding.  *secs is the wall time. */
int bench_async_run(kvt_store *st, const kvt_ns *ns, uint32_t tag, uint8_t kind,
		    uint64_t seq0, long n, const uint8_t *src, uint8_t *const *bufs,
		    size_t bytes, const char magic[8], double *secs);

#endif
