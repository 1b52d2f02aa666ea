/*
 * fuzz_vllm_events.c — libFuzzer target for the vLLM KV-events reader.
 *
 * Event logs come from someone else's fleet (vLLM's KVEventBatch exported
 * as JSON lines, plan/vllm_events.h): every byte is outside input.
 *
 * Input: one byte of parameters, then the log.
 *   bits 0-2  block_tokens: 0 (the events' own), 1, 2, 3, 16, 64, 256, 512
 *   bits 3-5  max_req 0..7 (0 = all)
 *
 * Checked for every input:
 *  - plan_vllm_line on each line answers 0, KVT_EINVAL with a reason, or
 *    KVT_ENOMEM, and a block size once set never changes;
 *  - the requests given at the end are in order of arrival, each with
 *    blocks, its prompt exactly its blocks' tokens, within the bounds;
 *  - plan_trace_parse of the same bytes as PLAN_FMT_VLLM either refuses
 *    with a message naming a line, or gives a well-formed trace: arrivals
 *    from 0 in order, every request's prompt its blocks' tokens, no more
 *    requests than max_req, and the requests the reader itself gave.
 *
 * The reader is compiled into this file rather than linked from the
 * library archive, so that libFuzzer sees its branches.
 *
 *   ./fuzz_vllm_events -max_len=4096 fuzz/corpus/vllm_events
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/vllm_events.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint32_t block_choice[8] = { 0, 1, 2, 3, 16, 64, 256, 512 };

struct seen {
	uint64_t n;
	double ts;
	uint32_t block;
};

static int on_req(void *arg, double ts, const uint64_t *ids, size_t n, uint64_t in, uint64_t out)
{
	struct seen *s = arg;
	(void)ids;
	(void)out;
	if (!n || (s->n && ts < s->ts) || in != (uint64_t)n * s->block || in > PLAN_TRACE_MAX_TOKENS)
		abort();
	s->n++;
	s->ts = ts;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	uint32_t block = block_choice[data[0] & 7];
	uint64_t max_req = (data[0] >> 3) & 7;
	const char *buf = (const char *)data + 1, *end = buf + size - 1;

	struct plan_vllm *v;
	if (plan_vllm_new(&v))
		return 0;
	uint32_t bt = block, first = 0;
	int refused = 0;
	for (const char *p = buf; p < end && !refused;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		char err[300] = "";
		size_t n = (size_t)(eol - p);
		size_t lead = 0;
		while (lead < n && (p[lead] == ' ' || p[lead] == '\t' || p[lead] == '\r'))
			lead++;
		if (lead < n && !memchr(p, '\0', n)) {
			int rc = plan_vllm_line(v, p, n, &bt, err, sizeof(err));
			if (rc == KVT_EINVAL && !err[0])
				abort();
			if (rc && rc != KVT_EINVAL && rc != KVT_ENOMEM)
				abort();
			refused = rc != 0;
			if (bt && !first)
				first = bt;
			if (first && bt != first)
				abort();
		}
		p = eol + 1;
	}
	struct seen s = { 0, 0, bt };
	if (!refused && bt)
		plan_vllm_finish(v, on_req, &s);
	plan_vllm_free(v);

	struct plan_trace pt;
	int rc = plan_trace_parse(buf, size - 1, PLAN_FMT_VLLM, block, max_req, &pt);
	if (rc) {
		if (rc != KVT_EINVAL && rc != KVT_ENOMEM)
			abort();
		if (rc == KVT_EINVAL && strncmp(kvt_errmsg(), "trace", 5))
			abort();
		return 0;
	}
	const struct kvt_trace *t = &pt.t;
	if (pt.fmt != PLAN_FMT_VLLM || !pt.block_tokens || (block && pt.block_tokens != block) ||
	    !t->nreq || (max_req && t->nreq > max_req))
		abort();
	for (uint64_t q = 0; q < t->nreq; q++) {
		double a = pt.arrive_s[q];
		if (!isfinite(a) || a < 0 || (!q && a != 0) || (q && a < pt.arrive_s[q - 1]))
			abort();
		if ((uint64_t)pt.in_len[q] != (t->off[q + 1] - t->off[q]) * pt.block_tokens)
			abort();
	}
	/* Blank lines and NULs aside, the reader gave these requests. */
	if (!refused && s.n && t->nreq > s.n)
		abort();
	plan_trace_free(&pt);
	return 0;
}
