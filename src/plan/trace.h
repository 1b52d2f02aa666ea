/*
 * trace.h — request traces for the capacity planner and the replay tool.
 *
 * A trace is a list of requests, each a list of prefix-block ids in prompt
 * order plus what the cost model needs: arrival time, prompt and output
 * lengths.  The block ids are renumbered by policy/replay.h's trace builder
 * (dense, in order of first appearance), and this is the one reader of
 * trace files, so the planner, tools/policy_compare and the tests see the
 * same ids.
 *
 * Formats (block size is a property of the trace):
 *  - PLAN_FMT_MOONCAKE: Mooncake JSONL — timestamp (ms), input_length,
 *    output_length, hash_ids of 512-token prefix blocks.
 *  - PLAN_FMT_BAILIAN: Alibaba Qwen/Bailian JSONL — chat_id, parent_chat_id,
 *    timestamp (s), turn, type, input_length, output_length, hash_ids of
 *    16-token blocks.
 *  - PLAN_FMT_TOKENS: one prompt per line as token ids (whitespace or comma
 *    separated, optional [ ]), keyed with kvtier's own chain hash
 *    (kvt_key_chain, SHA-256, chunk = block_tokens, default 256); the first
 *    8 bytes of each key name the block.  Only whole chunks are keyed.
 *  - PLAN_FMT_VLLM: vLLM's KV-cache events exported as JSON lines (a
 *    KVEventBatch, or one event, a line): requests out of BlockStored
 *    events and their 64-bit block hashes (plan/vllm_events.h).
 */
#ifndef KVT_PLAN_TRACE_H
#define KVT_PLAN_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "policy/replay.h"

enum plan_fmt {
	PLAN_FMT_AUTO = 0,
	PLAN_FMT_MOONCAKE = 1,
	PLAN_FMT_BAILIAN = 2,
	PLAN_FMT_TOKENS = 3,
	PLAN_FMT_VLLM = 4,
};

struct plan_trace {
	struct kvt_trace t;     /* block ids per request (policy/replay.h) */
	enum plan_fmt fmt;
	uint32_t block_tokens;  /* tokens per block */
	double *arrive_s;       /* nreq: arrival, seconds from the first */
	uint32_t *in_len;       /* nreq: prompt tokens */
	uint32_t *out_len;      /* nreq: generated tokens (0 if unknown) */
	/* Of the JSON records read, how many the fast path took whole and how
	 * many jansson read (plan_trace_read): a measure for the tests. */
	uint64_t nrec_fast, nrec_json;
};

/* Bounds of what the readers accept (docs/PLANNING.md).  A trace is read
 * line by line: a line longer than PLAN_TRACE_MAX_LINE, or a NUL byte
 * anywhere, ends the read with an error naming the file and line, so a
 * wrong file (/dev/zero, a binary) is refused at once instead of being
 * read into memory.  Prompt and output lengths are at most
 * PLAN_TRACE_MAX_TOKENS; timestamps are finite, non-negative, in arrival
 * order, and at most PLAN_TRACE_MAX_SECONDS from zero in the format's unit
 * (seconds, or milliseconds for Mooncake). */
#define PLAN_TRACE_MAX_LINE (16u << 20)
#define PLAN_TRACE_MAX_TOKENS (1u << 30)
#define PLAN_TRACE_MAX_SECONDS 1e10 /* ~317 years: any epoch time fits */

/* "mooncake", "bailian", "tokens", "auto" -> enum; -1 if unknown. */
int plan_fmt_parse(const char *s);
const char *plan_fmt_name(enum plan_fmt f);

/* Read the trace in file `path` ("-" = stdin): a regular file mapped whole
 * and read in place, anything else streamed line by line (the same lines,
 * the same refusals).  fmt AUTO looks at the first non-blank line: chat_id means Bailian,
 * hash_ids means Mooncake, else token ids.  block_tokens 0 takes the
 * format's own (512, 16, 256).  max_req > 0 keeps only the first max_req
 * requests (and reads no further).  Every line of a JSON format must be an
 * object (of the usual shape, read in one pass, else parsed whole by
 * jansson, which gives every message; either way its fields are taken by
 * name, and one named twice is refused) with a hash_ids array of integers below 2^64;
 * timestamp, input_length and output_length are optional numbers within
 * the bounds above.  Long traces are parsed by several threads; what is
 * read, and which error is reported, are those of one.  A trace with no request, or with no whole block in any, is
 * refused: there is nothing to plan from.  0, KVT_ENOMEM, or KVT_EINVAL
 * with kvt_errmsg() naming the file, the line and the field ("t.jsonl:3:
 * timestamp: ..."), or -errno if the file cannot be read.  On success free
 * with plan_trace_free. */
int plan_trace_read(const char *path, enum plan_fmt fmt, uint32_t block_tokens,
		    uint64_t max_req, struct plan_trace *pt);

/* The same for a trace held in memory; messages name it "trace". */
int plan_trace_parse(const char *buf, size_t len, enum plan_fmt fmt,
		     uint32_t block_tokens, uint64_t max_req, struct plan_trace *pt);
void plan_trace_free(struct plan_trace *pt);

#endif
