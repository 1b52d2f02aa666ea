/*
 * trace.c — trace readers for the planner (trace.h).
 *
 * Every reader goes line by line through one checker (reader_line), which
 * validates the fields the planner uses and writes each request as a
 * compact {"hash_ids":[...]} line; kvt_trace_parse_jsonl (policy/replay.c)
 * then renumbers the ids of those lines, so the planner, the replay tool
 * and tools/policy_compare see the same dense ids.  Checking here, with the
 * file's name and line, is what lets a wrong trace be refused as
 * KVT_EINVAL naming the field, rather than as a "malformed object header"
 * (the meaning of KVT_EMALFORMED, which the shared parser returns) or, for
 * an id past 64 bits, not at all (it would wrap).
 */
#include "plan/trace.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* ---- the reader: one line at a time --------------------------------------- */

struct reader {
	const char *name;      /* for messages: the file, or "trace" */
	struct plan_trace *pt; /* fmt and block_tokens; filled at the end */
	uint64_t max_req;      /* 0 = all */
	uint64_t line;         /* 1-based number of the current line */
	uint64_t nreq;
	int full;              /* max_req requests read: stop */

	/* The trace being built, request by request, and one line's ids. */
	struct kvt_trace_builder b;
	int b_open;
	uint64_t *ids;
	size_t nids, idcap;

	/* Per request, in order. */
	double *arrive;
	uint32_t *in_len, *out_len;
	uint64_t mcap;
	double t_first, t_prev;

	/* Token-id lines: the namespace they are keyed in, scratch arrays. */
	int ns_ready;
	kvt_ns ns;
	uint32_t *tok;
	size_t tcap;
	kvt_key *keys;
	size_t kcap;
};

/* KVT_EINVAL naming the file and line: "name:line: what". */
static int bad_line(const struct reader *r, const char *fmt, ...) KVT_PRINTF(2, 3);
static int bad_line(const struct reader *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return kvt_err(KVT_EINVAL, "%s:%llu: %s", r->name, (unsigned long long)r->line, msg);
}

/* Append one id to the line's ids. */
static int line_id(struct reader *r, uint64_t id)
{
	if (r->nids == r->idcap) {
		size_t nc = r->idcap ? r->idcap * 2 : 256;
		uint64_t *v = realloc(r->ids, nc * sizeof(*v));
		if (!v)
			return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
		r->ids = v;
		r->idcap = nc;
	}
	r->ids[r->nids++] = id;
	return 0;
}

/* The line's ids become one request of the trace. */
static int line_commit(struct reader *r)
{
	int rc = kvt_trace_build_add(&r->b, r->ids, r->nids);

	r->nids = 0;
	return rc ? kvt_err(rc, "%s: out of memory", r->name) : 0;
}

/* Record one request's side fields (the ids are already in out). */
static int add_request(struct reader *r, double ts, uint64_t in, uint64_t outl)
{
	if (r->nreq == r->mcap) {
		uint64_t nc = r->mcap ? r->mcap * 2 : 4096;
		double *a = realloc(r->arrive, nc * sizeof(*a));
		if (a)
			r->arrive = a;
		uint32_t *i = realloc(r->in_len, nc * sizeof(*i));
		if (i)
			r->in_len = i;
		uint32_t *o = realloc(r->out_len, nc * sizeof(*o));
		if (o)
			r->out_len = o;
		if (!a || !i || !o)
			return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
		r->mcap = nc;
	}
	if (r->nreq == 0)
		r->t_first = ts;
	r->arrive[r->nreq] = ts - r->t_first;
	r->in_len[r->nreq] = (uint32_t)in;
	r->out_len[r->nreq] = (uint32_t)outl;
	r->nreq++;
	r->t_prev = ts;
	if (r->max_req && r->nreq == r->max_req)
		r->full = 1;
	return 0;
}

/* The value of "field": in [p, end) as a JSON number, strictly: an
 * optional '-', digits, optional fraction and exponent, then a delimiter.
 * 0 found (*v set), 1 absent, or KVT_EINVAL naming the field. */
static int json_number(const struct reader *r, const char *p, const char *end,
		       const char *field, double *v, int *integral)
{
	char key[40];
	snprintf(key, sizeof(key), "\"%s\"", field);
	const char *h = find_in(p, end, key);
	if (!h)
		return 1;
	h += strlen(key);
	while (h < end && is_blank(*h))
		h++;
	if (h >= end || *h != ':')
		return bad_line(r, "%s: expected ':' after the field name", field);
	h++;
	while (h < end && is_blank(*h))
		h++;
	const char *s = h;
	*integral = 1;
	if (h < end && *h == '-')
		h++;
	const char *digits = h;
	while (h < end && *h >= '0' && *h <= '9')
		h++;
	if (h == digits) {
		const char *e = s;
		while (e < end && e - s < 24 && !strchr(",}] \t", *e))
			e++;
		return bad_line(r, "%s: \"%.*s\" is not a number", field, (int)(e - s), s);
	}
	if (h < end && *h == '.') {
		*integral = 0;
		h++;
		if (h >= end || *h < '0' || *h > '9')
			return bad_line(r, "%s: a number needs digits after its '.'", field);
		while (h < end && *h >= '0' && *h <= '9')
			h++;
	}
	if (h < end && (*h == 'e' || *h == 'E')) {
		*integral = 0;
		h++;
		if (h < end && (*h == '+' || *h == '-'))
			h++;
		if (h >= end || *h < '0' || *h > '9')
			return bad_line(r, "%s: a number's exponent needs digits", field);
		while (h < end && *h >= '0' && *h <= '9')
			h++;
	}
	if (h < end && !strchr(",} \t\r", *h))
		return bad_line(r, "%s: \"%.*s\" is not a number", field,
			   (int)(h - s < 24 ? h - s + 1 : 24), s);
	char tmp[64];
	if ((size_t)(h - s) >= sizeof(tmp))
		return bad_line(r, "%s: a number of more than %zu characters", field, sizeof(tmp) - 1);
	memcpy(tmp, s, (size_t)(h - s));
	tmp[h - s] = '\0';
	errno = 0;
	*v = strtod(tmp, NULL);
	if (!isfinite(*v) || (errno == ERANGE && fabs(*v) > 1))
		return bad_line(r, "%s: %s is out of range", field, tmp);
	return 0;
}

/* An optional length field: a whole number 0..PLAN_TRACE_MAX_TOKENS. */
static int json_length(const struct reader *r, const char *p, const char *end,
		       const char *field, uint64_t def, uint64_t *out)
{
	double v;
	int integral;
	int rc = json_number(r, p, end, field, &v, &integral);
	if (rc == 1) {
		*out = def;
		return 0;
	}
	if (rc)
		return rc;
	if (!integral || v < 0 || v > PLAN_TRACE_MAX_TOKENS)
		return bad_line(r, "%s: %.17g is not a token count (a whole number 0..%u)", field, v,
			   PLAN_TRACE_MAX_TOKENS);
	*out = (uint64_t)v;
	return 0;
}

/* One JSON Lines record (Mooncake, Bailian). */
static int json_line(struct reader *r, const char *p, const char *end)
{
	const struct plan_trace *pt = r->pt;
	int rc;

	while (p < end && is_blank(*p))
		p++;
	while (end > p && is_blank(end[-1]))
		end--;
	if (*p != '{' || end[-1] != '}')
		return bad_line(r, "not a JSON object (a %s trace has one per line)",
			   plan_fmt_name(pt->fmt));
	const char *h = find_in(p, end, "\"hash_ids\"");
	if (!h)
		return bad_line(r, "no \"hash_ids\" field");
	h += 10;
	while (h < end && is_blank(*h))
		h++;
	if (h < end && *h == ':')
		h++;
	while (h < end && is_blank(*h))
		h++;
	if (h >= end || *h != '[')
		return bad_line(r, "hash_ids: expected an array of block ids");
	h++;
	r->nids = 0;
	uint64_t nb = 0;
	for (;;) {
		while (h < end && is_blank(*h))
			h++;
		if (h < end && *h == ']' && nb == 0)
			break;
		if (h >= end || *h < '0' || *h > '9')
			return bad_line(r, "hash_ids: element %llu is not a non-negative integer",
				   (unsigned long long)nb + 1);
		uint64_t v = 0;
		while (h < end && *h >= '0' && *h <= '9') {
			unsigned d = (unsigned)(*h++ - '0');
			if (v > (UINT64_MAX - d) / 10)
				return bad_line(r, "hash_ids: element %llu exceeds 64 bits",
					   (unsigned long long)nb + 1);
			v = v * 10 + d;
		}
		if ((rc = line_id(r, v)))
			return rc;
		nb++;
		while (h < end && is_blank(*h))
			h++;
		if (h < end && *h == ',') {
			h++;
			continue;
		}
		if (h < end && *h == ']')
			break;
		return bad_line(r, "hash_ids: element %llu is not a non-negative integer",
			   (unsigned long long)nb);
	}

	/* Mooncake counts milliseconds, Bailian seconds. */
	int ms = pt->fmt == PLAN_FMT_MOONCAKE;
	double ts = r->t_prev, max_ts = PLAN_TRACE_MAX_SECONDS * (ms ? 1e3 : 1);
	int integral;
	rc = json_number(r, p, end, "timestamp", &ts, &integral);
	if (rc == 1) {
		ts = r->nreq ? r->t_prev : 0; /* absent: with the previous request */
		rc = 0;
	} else if (!rc) {
		double raw = ts;
		ts = ms ? raw * 1e-3 : raw;
		if (raw < 0 || raw > max_ts)
			rc = bad_line(r, "timestamp: %.17g is out of range 0..%.0f (%s)", raw,
				      max_ts, ms ? "milliseconds" : "seconds");
		else if (r->nreq && ts < r->t_prev)
			rc = bad_line(r, "timestamp: %.17g is before the previous request's %.17g (a trace is in arrival order)",
				      raw, ms ? r->t_prev * 1e3 : r->t_prev);
	}
	uint64_t in = 0, outl = 0;
	if (!rc && nb * pt->block_tokens > PLAN_TRACE_MAX_TOKENS)
		rc = bad_line(r, "hash_ids: %llu blocks of %u tokens are more than %u tokens",
			 (unsigned long long)nb, pt->block_tokens, PLAN_TRACE_MAX_TOKENS);
	if (!rc)
		rc = json_length(r, p, end, "input_length", nb * pt->block_tokens, &in);
	if (!rc)
		rc = json_length(r, p, end, "output_length", 0, &outl);
	if (!rc)
		rc = line_commit(r);
	if (rc)
		return rc;
	return add_request(r, ts, in, outl);
}

/* One prompt as token ids, keyed with kvtier's own chain; the first 8
 * bytes of each whole chunk's key name its block. */
static int token_line(struct reader *r, const char *p, const char *end)
{
	const struct plan_trace *pt = r->pt;
	size_t nt = 0;
	int rc;

	if (!r->ns_ready) {
		kvt_config *cfg = kvt_config_new();
		if (!cfg)
			return kvt_err(KVT_ENOMEM, "out of memory");
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
		rc = kvt_config_ns(cfg, &d, &r->ns);
		kvt_config_free(cfg);
		if (rc)
			return rc;
		r->ns_ready = 1;
	}
	while (p < end) {
		if (*p >= '0' && *p <= '9') {
			uint64_t v = 0;
			while (p < end && *p >= '0' && *p <= '9') {
				v = v * 10 + (uint64_t)(*p++ - '0');
				if (v > UINT32_MAX)
					return bad_line(r, "token %zu: id exceeds 32 bits", nt + 1);
			}
			if (nt == r->tcap) {
				size_t nc = r->tcap ? r->tcap * 2 : 1024;
				uint32_t *t2 = realloc(r->tok, nc * sizeof(*t2));
				if (!t2)
					return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
				r->tok = t2;
				r->tcap = nc;
			}
			r->tok[nt++] = (uint32_t)v;
		} else if (strchr(" \t\r,[]", *p)) {
			p++;
		} else if ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f) {
			return bad_line(r, "'%c' is not a token id (a token log is one prompt per line of integers)",
				   *p);
		} else {
			return bad_line(r, "byte 0x%02x is not a token id (a token log is one prompt per line of integers)",
				   (unsigned char)*p);
		}
	}
	if (!nt)
		return 0; /* "[]": no prompt */
	/* nt <= PLAN_TRACE_MAX_LINE / 2 < PLAN_TRACE_MAX_TOKENS: fits. */
	size_t nk = nt / pt->block_tokens;
	if (nk > r->kcap) {
		kvt_key *k2 = realloc(r->keys, nk * sizeof(*k2));
		if (!k2)
			return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
		r->keys = k2;
		r->kcap = nk;
	}
	if (nk && (rc = kvt_key_chain(&r->ns, r->tok, nt, NULL, r->keys, nk)) < 0)
		return rc;
	r->nids = 0;
	for (size_t i = 0; i < nk; i++) {
		uint64_t id;
		memcpy(&id, r->keys[i].b, sizeof(id));
		if ((rc = line_id(r, id)))
			return rc;
	}
	if ((rc = line_commit(r)))
		return rc;
	return add_request(r, 0, nt, 0);
}

/* One line, without its '\n'.  Blank lines are skipped; the first other
 * line decides the format when it is AUTO. */
static int reader_line(struct reader *r, const char *p, size_t n)
{
	struct plan_trace *pt = r->pt;
	const char *end = p + n;
	const char *q = p;

	r->line++;
	if (r->full)
		return 0;
	if (!r->b_open)
		return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
	if (memchr(p, '\0', n))
		return bad_line(r, "a NUL byte: binary data, not a trace");
	while (q < end && is_blank(*q))
		q++;
	if (q == end)
		return 0;
	if (pt->fmt == PLAN_FMT_AUTO) {
		if (find_in(p, end, "\"chat_id\""))
			pt->fmt = PLAN_FMT_BAILIAN;
		else if (find_in(p, end, "\"hash_ids\""))
			pt->fmt = PLAN_FMT_MOONCAKE;
		else
			pt->fmt = PLAN_FMT_TOKENS;
	}
	if (!pt->block_tokens)
		pt->block_tokens = pt->fmt == PLAN_FMT_MOONCAKE ? 512
				 : pt->fmt == PLAN_FMT_BAILIAN ? 16 : 256;
	return pt->fmt == PLAN_FMT_TOKENS ? token_line(r, p, end) : json_line(r, p, end);
}

static void reader_free(struct reader *r)
{
	if (r->b_open)
		kvt_trace_build_end(&r->b);
	r->b_open = 0;
	free(r->ids);
	free(r->arrive);
	free(r->in_len);
	free(r->out_len);
	free(r->tok);
	free(r->keys);
}

/* The trace is built; hand the side arrays to pt. */
static int reader_finish(struct reader *r)
{
	struct plan_trace *pt = r->pt;
	int rc = 0;

	if (!r->nreq) {
		rc = kvt_err(KVT_EINVAL, "%s: no requests: an empty trace gives nothing to plan from",
			     r->name);
		goto out;
	}
	if (pt->t.nreq != r->nreq) {
		rc = kvt_err(KVT_EINVAL, "%s: %llu requests read, %llu parsed", r->name,
			     (unsigned long long)r->nreq, (unsigned long long)pt->t.nreq);
		goto out;
	}
	if (!pt->t.nblocks) {
		rc = kvt_err(KVT_EINVAL,
			     "%s: %llu request(s) but not one whole block of %u tokens: nothing to cache",
			     r->name, (unsigned long long)r->nreq, pt->block_tokens);
		goto out;
	}
	pt->arrive_s = r->arrive;
	pt->in_len = r->in_len;
	pt->out_len = r->out_len;
	r->arrive = NULL;
	r->in_len = r->out_len = NULL;
out:
	reader_free(r);
	if (rc)
		plan_trace_free(pt);
	return rc;
}

static void reader_init(struct reader *r, const char *name, enum plan_fmt fmt,
			uint32_t block_tokens, uint64_t max_req, struct plan_trace *pt)
{
	memset(pt, 0, sizeof(*pt));
	memset(r, 0, sizeof(*r));
	pt->fmt = fmt;
	pt->block_tokens = block_tokens;
	r->name = name;
	r->pt = pt;
	r->max_req = max_req;
	/* Only its first allocation can fail; reader_line then reports it. */
	r->b_open = kvt_trace_build_begin(&r->b, &pt->t) == 0;
}

int plan_trace_parse(const char *buf, size_t len, enum plan_fmt fmt,
		     uint32_t block_tokens, uint64_t max_req, struct plan_trace *pt)
{
	struct reader r;
	const char *p = buf, *end = buf + len;
	int rc = 0;

	reader_init(&r, "trace", fmt, block_tokens, max_req, pt);
	while (!rc && !r.full && p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > PLAN_TRACE_MAX_LINE) {
			r.line++;
			rc = bad_line(&r, "longer than %u MiB, the bound on a trace line",
				 PLAN_TRACE_MAX_LINE >> 20);
			break;
		}
		rc = reader_line(&r, p, (size_t)(eol - p));
		p = eol + 1;
	}
	if (rc) {
		reader_free(&r);
		plan_trace_free(pt);
		return rc;
	}
	return reader_finish(&r);
}

int plan_trace_read(const char *path, enum plan_fmt fmt, uint32_t block_tokens,
		    uint64_t max_req, struct plan_trace *pt)
{
	struct reader r;
	struct stat st;
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	/* A window of at most one line plus one read: lines are handed over
	 * as soon as they are whole, the tail waits for the next read. */
	size_t cap = 1 << 20, have = 0;
	char *buf = NULL;
	int rc = 0;

	if (!f) {
		int e = errno;
		memset(pt, 0, sizeof(*pt));
		return kvt_err(-e, "%s: %s", path, strerror(e));
	}
	reader_init(&r, path, fmt, block_tokens, max_req, pt);
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		rc = kvt_err(KVT_EINVAL, "%s: a directory, not a trace", path);
		goto out;
	}
	buf = malloc(cap);
	if (!buf) {
		rc = kvt_err(KVT_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	for (;;) {
		if (have > PLAN_TRACE_MAX_LINE) {
			r.line++;
			rc = bad_line(&r, "longer than %u MiB, the bound on a trace line",
				      PLAN_TRACE_MAX_LINE >> 20);
			break;
		}
		if (have == cap) {
			/* The line being read fills the window: grow it (the
			 * check above bounds it by twice the longest line). */
			size_t nc = cap * 2;
			char *b2 = realloc(buf, nc);
			if (!b2) {
				rc = kvt_err(KVT_ENOMEM, "%s: out of memory", path);
				break;
			}
			buf = b2;
			cap = nc;
		}
		size_t got = fread(buf + have, 1, cap - have, f);
		if (!got)
			break;
		/* A NUL is binary data: say so at once, not after a whole
		 * window (reading /dev/zero ends here, on its first read). */
		const char *nul = memchr(buf + have, '\0', got);
		const char *p = buf, *end = buf + have + got;
		have += got;
		while (!rc && !r.full) {
			const char *eol = memchr(p, '\n', (size_t)(end - p));
			if (nul && (!eol || nul < eol)) {
				r.line++;
				rc = bad_line(&r, "a NUL byte: binary data, not a trace");
				break;
			}
			if (!eol)
				break;
			rc = reader_line(&r, p, (size_t)(eol - p));
			p = eol + 1;
		}
		if (rc || r.full)
			break;
		have = (size_t)(end - p);
		memmove(buf, p, have);
	}
	if (!rc && ferror(f))
		rc = kvt_err(-EIO, "%s: read error", path);
	if (!rc && !r.full && have) {
		if (have > PLAN_TRACE_MAX_LINE) {
			r.line++;
			rc = bad_line(&r, "longer than %u MiB, the bound on a trace line",
				 PLAN_TRACE_MAX_LINE >> 20);
		} else {
			rc = reader_line(&r, buf, have); /* the last line, no '\n' */
		}
	}
out:
	free(buf);
	if (f != stdin)
		fclose(f);
	if (rc) {
		reader_free(&r);
		plan_trace_free(pt);
		return rc;
	}
	return reader_finish(&r);
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
