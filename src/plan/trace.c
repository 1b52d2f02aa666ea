/*
 * trace.c — trace readers for the planner (trace.h).
 */
#include "plan/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

int plan_fmt_parse(const char *s)
{
	if (!strcmp(s, "auto"))
		return PLAN_FMT_AUTO;
	if (!strcmp(s, "mooncake"))
		return PLAN_FMT_MOONCAKE;
	if (!strcmp(s, "bailian") || !strcmp(s, "qwen"))
		return PLAN_FMT_BAILIAN;
	if (!strcmp(s, "tokens"))
		return PLAN_FMT_TOKENS;
	return -1;
}

const char *plan_fmt_name(enum plan_fmt f)
{
	switch (f) {
	case PLAN_FMT_MOONCAKE: return "mooncake";
	case PLAN_FMT_BAILIAN: return "bailian";
	case PLAN_FMT_TOKENS: return "tokens";
	default: return "auto";
	}
}

static const char *find_in(const char *p, const char *end, const char *needle)
{
	size_t nl = strlen(needle);
	for (; p + nl <= end; p++)
		if (*p == needle[0] && memcmp(p, needle, nl) == 0)
			return p;
	return NULL;
}

/* The number after "field": on [p, end), or `def` if absent. */
static double field_num(const char *p, const char *end, const char *field, double def)
{
	const char *h = find_in(p, end, field);
	if (!h)
		return def;
	h += strlen(field);
	while (h < end && (*h == ' ' || *h == ':' || *h == '\t' || *h == '"'))
		h++;
	char tmp[40];
	size_t n = 0;
	while (h < end && n + 1 < sizeof(tmp) && strchr("0123456789.eE+-", *h))
		tmp[n++] = *h++;
	tmp[n] = 0;
	if (!n)
		return def;
	return strtod(tmp, NULL);
}

/* The length of buf up to and including the max_req-th line holding
 * "hash_ids" (all of it if max_req is 0 or larger than the trace). */
static size_t cut_records(const char *buf, size_t len, uint64_t max_req, const char *needle)
{
	if (!max_req)
		return len;
	const char *p = buf, *end = buf + len;
	uint64_t n = 0;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if (!needle || find_in(p, eol, needle)) {
			if (++n == max_req)
				return (size_t)(eol - buf) + (eol < end);
		}
		p = eol + 1;
	}
	return len;
}

static int parse_json(const char *buf, size_t len, struct plan_trace *pt)
{
	int rc = kvt_trace_parse_jsonl(buf, len, &pt->t);
	if (rc)
		return rc;
	uint64_t n = pt->t.nreq;
	pt->arrive_s = calloc(n + 1, sizeof(double));
	pt->in_len = calloc(n + 1, sizeof(uint32_t));
	pt->out_len = calloc(n + 1, sizeof(uint32_t));
	if (!pt->arrive_s || !pt->in_len || !pt->out_len)
		return KVT_ENOMEM;
	/* Mooncake counts milliseconds, Bailian seconds. */
	double scale = pt->fmt == PLAN_FMT_MOONCAKE ? 1e-3 : 1.0;
	const char *p = buf, *end = buf + len;
	uint64_t q = 0;
	double t0 = 0;
	while (p < end && q < n) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if (find_in(p, eol, "\"hash_ids\"")) {
			uint64_t nb = pt->t.off[q + 1] - pt->t.off[q];
			double ts = field_num(p, eol, "\"timestamp\"", 0) * scale;
			if (q == 0)
				t0 = ts;
			pt->arrive_s[q] = ts - t0;
			double in = field_num(p, eol, "\"input_length\"",
					      (double)nb * pt->block_tokens);
			pt->in_len[q] = in > 0 && in < 4e9 ? (uint32_t)in : 0;
			double out = field_num(p, eol, "\"output_length\"", 0);
			pt->out_len[q] = out > 0 && out < 4e9 ? (uint32_t)out : 0;
			q++;
		}
		p = eol + 1;
	}
	return 0;
}

/* Token-id lines -> the same JSON the other readers take, with each block
 * named by the first 8 bytes of its kvtier chain key. */
static int parse_tokens(const char *buf, size_t len, struct plan_trace *pt)
{
	kvt_config *cfg = kvt_config_new();
	if (!cfg)
		return KVT_ENOMEM;
	kvt_ns_desc d;
	memset(&d, 0, sizeof(d));
	d.model = "kvtier-plan";
	d.layout.num_layers = 1;
	d.layout.num_kv_heads = 1;
	d.layout.head_dim = 64;
	d.layout.dtype = KVT_DTYPE_BF16;
	d.layout.kv_planes = 2;
	d.layout.chunk_tokens = pt->block_tokens;
	d.tp_size = 1;
	d.pp_size = 1;
	kvt_ns ns;
	int rc = kvt_config_ns(cfg, &d, &ns);
	kvt_config_free(cfg);
	if (rc)
		return rc;
	size_t ocap = 4096, olen = 0, tcap = 1024;
	char *out = malloc(ocap);
	uint32_t *tok = malloc(tcap * sizeof(*tok));
	kvt_key *keys = NULL;
	size_t kcap = 0;
	uint32_t *lens = NULL;
	size_t lcap = 0, nlines = 0;
	const char *p = buf, *end = buf + len;
	uint64_t line = 0;
	if (!out || !tok)
		rc = KVT_ENOMEM;
	while (!rc && p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		line++;
		size_t nt = 0;
		const char *q = p;
		while (q < eol) {
			if (*q >= '0' && *q <= '9') {
				uint64_t v = 0;
				while (q < eol && *q >= '0' && *q <= '9')
					v = v * 10 + (uint64_t)(*q++ - '0');
				if (v > UINT32_MAX) {
					rc = kvt_err(KVT_EMALFORMED, "token log line %llu: id too large",
						     (unsigned long long)line);
					break;
				}
				if (nt == tcap) {
					uint32_t *t2 = realloc(tok, tcap * 2 * sizeof(*tok));
					if (!t2) {
						rc = KVT_ENOMEM;
						break;
					}
					tok = t2;
					tcap *= 2;
				}
				tok[nt++] = (uint32_t)v;
			} else if (strchr(" \t\r,[]", *q)) {
				q++;
			} else {
				rc = kvt_err(KVT_EMALFORMED, "token log line %llu: '%c' is not a token id",
					     (unsigned long long)line, *q);
				break;
			}
		}
		if (rc || !nt) {
			p = eol + 1;
			continue;
		}
		size_t nk = nt / pt->block_tokens;
		if (nk > kcap) {
			kvt_key *k2 = realloc(keys, nk * sizeof(*keys));
			if (!k2) {
				rc = KVT_ENOMEM;
				break;
			}
			keys = k2;
			kcap = nk;
		}
		if (nk) {
			int r = kvt_key_chain(&ns, tok, nt, NULL, keys, nk);
			if (r < 0) {
				rc = r;
				break;
			}
		}
		size_t need = 32 + nk * 22;
		if (olen + need > ocap) {
			size_t nc = (olen + need) * 2;
			char *o2 = realloc(out, nc);
			if (!o2) {
				rc = KVT_ENOMEM;
				break;
			}
			out = o2;
			ocap = nc;
		}
		olen += (size_t)sprintf(out + olen, "{\"hash_ids\":[");
		for (size_t i = 0; i < nk; i++) {
			uint64_t id;
			memcpy(&id, keys[i].b, sizeof(id));
			olen += (size_t)sprintf(out + olen, "%s%llu", i ? "," : "",
						(unsigned long long)id);
		}
		olen += (size_t)sprintf(out + olen, "]}\n");
		if (nlines == lcap) {
			size_t nc = lcap ? lcap * 2 : 1024;
			uint32_t *l2 = realloc(lens, nc * sizeof(*lens));
			if (!l2) {
				rc = KVT_ENOMEM;
				break;
			}
			lens = l2;
			lcap = nc;
		}
		lens[nlines++] = (uint32_t)nt;
		p = eol + 1;
	}
	if (!rc)
		rc = kvt_trace_parse_jsonl(out ? out : "", olen, &pt->t);
	if (!rc) {
		uint64_t n = pt->t.nreq;
		pt->arrive_s = calloc(n + 1, sizeof(double));
		pt->in_len = calloc(n + 1, sizeof(uint32_t));
		pt->out_len = calloc(n + 1, sizeof(uint32_t));
		if (!pt->arrive_s || !pt->in_len || !pt->out_len)
			rc = KVT_ENOMEM;
		for (uint64_t i = 0; !rc && i < n && i < nlines; i++)
			pt->in_len[i] = lens[i];
	}
	free(out);
	free(tok);
	free(keys);
	free(lens);
	return rc;
}

int plan_trace_parse(const char *buf, size_t len, enum plan_fmt fmt,
		     uint32_t block_tokens, uint64_t max_req, struct plan_trace *pt)
{
	memset(pt, 0, sizeof(*pt));
	if (fmt == PLAN_FMT_AUTO) {
		const char *eol = memchr(buf, '\n', len);
		const char *e = eol ? eol : buf + len;
		if (find_in(buf, e, "\"chat_id\""))
			fmt = PLAN_FMT_BAILIAN;
		else if (find_in(buf, e, "\"hash_ids\""))
			fmt = PLAN_FMT_MOONCAKE;
		else
			fmt = PLAN_FMT_TOKENS;
	}
	pt->fmt = fmt;
	pt->block_tokens = block_tokens ? block_tokens
			 : fmt == PLAN_FMT_MOONCAKE ? 512 : fmt == PLAN_FMT_BAILIAN ? 16 : 256;
	int rc;
	if (fmt == PLAN_FMT_TOKENS)
		rc = parse_tokens(buf, cut_records(buf, len, max_req, NULL), pt);
	else
		rc = parse_json(buf, cut_records(buf, len, max_req, "\"hash_ids\""), pt);
	if (rc)
		plan_trace_free(pt);
	return rc;
}

void plan_trace_free(struct plan_trace *pt)
{
	if (!pt)
		return;
	kvt_trace_free(&pt->t);
	free(pt->arrive_s);
	free(pt->in_len);
	free(pt->out_len);
	memset(pt, 0, sizeof(*pt));
}
