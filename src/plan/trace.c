/*
 * trace.c — trace readers for the planner (trace.h).
 *
 * Every reader goes line by line through one checker, which validates the
 * fields the planner uses and hands each request's ids to the trace
 * builder of policy/replay.c, which renumbers them densely, so the
 * planner, the replay tool and tools/policy_compare see the same ids.  A
 * JSON record of the usual shape is read by a one-pass tokenizer exact on
 * what it takes (fast_scan); any other is parsed whole by jansson, the
 * authority on JSON and the author of every message; either way the
 * fields are taken by name.  Long traces are parsed by several threads, a
 * window of lines at a time, and committed in line order (json_window),
 * so that what is read and which error is reported are those of one
 * thread.  A regular file (read_mapped) or bytes in memory are one window,
 * read in place; a stream is a window per read, each copied.  Every refusal is
 * KVT_EINVAL naming the file, the line and the field, with the accepted
 * range where there is one.
 */
#include "plan/trace.h"
#include "plan/vllm_events.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

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
	if (!strcmp(s, "vllm"))
		return PLAN_FMT_VLLM;
	return -1;
}

const char *plan_fmt_name(enum plan_fmt f)
{
	switch (f) {
	case PLAN_FMT_MOONCAKE: return "mooncake";
	case PLAN_FMT_BAILIAN: return "bailian";
	case PLAN_FMT_TOKENS: return "tokens";
	case PLAN_FMT_VLLM: return "vllm";
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

struct jctx;

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

	/* JSON records: the first one decides an AUTO format; the calling
	 * thread's scratch for reading one (struct jctx, below). */
	int detect;
	struct jctx *jc;
	uint64_t nfast, njson; /* records read by each path (plan_trace) */

	/* Token-id lines: the namespace they are keyed in, scratch arrays. */
	int ns_ready;
	kvt_ns ns;
	uint32_t *tok;
	size_t tcap;
	kvt_key *keys;
	size_t kcap;

	/* vLLM KV events: requests are whole only at the end of the input. */
	struct plan_vllm *vl;

	/* The bytes read stay where they are until the read returns (a
	 * mapped file, a caller's buffer): windows read them in place, not
	 * from a copy. */
	int in_place;
	int long_line;         /* a line past the bound was refused */
};

/* KVT_EINVAL naming the file and line: "name:line: what". */
static int bad_vat(const char *name, uint64_t line, const char *fmt, va_list ap)
{
	char msg[400];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	return kvt_err(KVT_EINVAL, "%s:%llu: %s", name, (unsigned long long)line, msg);
}

static int bad_line(const struct reader *r, const char *fmt, ...) KVT_PRINTF(2, 3);
static int bad_line(const struct reader *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = bad_vat(r->name, r->line, fmt, ap);
	va_end(ap);
	return rc;
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

/* ---- JSON records (jansson) ------------------------------------------------ */

/* A record is read in two steps.  json_take parses it and checks each
 * field alone (anywhere: a window of lines is read by several threads);
 * json_commit then checks what relates it to the records before it
 * (arrival order, the bounds that need the block size) and adds it to the
 * trace, in line order, on the calling thread. */

/* A growable list of block ids. */
struct idvec {
	uint64_t *v;
	size_t n, cap;
};

static int idvec_push(struct idvec *iv, uint64_t id)
{
	if (iv->n == iv->cap) {
		size_t nc = iv->cap ? iv->cap * 2 : 256;
		uint64_t *v = realloc(iv->v, nc * sizeof(*v));
		if (!v)
			return KVT_ENOMEM;
		iv->v = v;
		iv->cap = nc;
	}
	iv->v[iv->n++] = id;
	return 0;
}

/* What reading one record needs, one per thread. */
struct jctx {
	const char *name;     /* for messages */
	uint64_t line;
	enum plan_fmt fmt;
	/* A copy of a record with 64-bit ids rewritten (json_fix_high). */
	char *fix;
	size_t fixlen, fixcap;
	uint8_t *high;
	size_t nhigh, highcap;
};

static void jctx_free(struct jctx *c)
{
	if (!c)
		return;
	free(c->fix);
	free(c->high);
	free(c);
}

static int bad_rec(const struct jctx *c, const char *fmt, ...) KVT_PRINTF(2, 3);
static int bad_rec(const struct jctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = bad_vat(c->name, c->line, fmt, ap);
	va_end(ap);
	return rc;
}

/* One record's fields, each checked alone; its ids are the last `nid` of
 * the list they were read into. */
struct jrec {
	uint64_t line;
	size_t nid;
	double ts;         /* in the format's unit; -1: absent */
	int64_t in, out;   /* -1: absent */
	int fast;          /* read by the fast path (fast_take), not jansson */
};

/* Where in a record a parse error lies, found by walking its text up to the
 * offending token: the top-level field whose value holds it, where that
 * value starts, and, inside an array value, which element (1-based; 0 when
 * not in one).  Only the error path walks the text. */
struct json_where {
	char key[48];     /* the field, as written ("" before the first) */
	size_t val;       /* offset of its value */
	uint64_t elem;
	int depth;        /* 1: in the record itself */
};

static void json_locate(const char *p, size_t upto, struct json_where *w)
{
	int in_str = 0, want_key = 0;
	size_t kstart = 0;

	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < upto; i++) {
		char c = p[i];
		if (in_str) {
			if (c == '\\') {
				i++;
			} else if (c == '"') {
				in_str = 0;
				if (w->depth == 1 && want_key) {
					size_t n = i - kstart;
					if (n >= sizeof(w->key))
						n = sizeof(w->key) - 1;
					memcpy(w->key, p + kstart, n);
					w->key[n] = '\0';
				}
			}
			continue;
		}
		switch (c) {
		case '"':
			in_str = 1;
			kstart = i + 1;
			break;
		case '{':
		case '[':
			if (++w->depth == 1)
				want_key = 1;
			else if (w->depth == 2)
				w->elem = c == '[';
			break;
		case '}':
		case ']':
			if (w->depth-- == 2)
				w->elem = 0;
			break;
		case ',':
			if (w->depth == 1)
				want_key = 1;
			else if (w->depth == 2 && w->elem)
				w->elem++;
			break;
		case ':':
			if (w->depth == 1) {
				want_key = 0;
				w->val = i + 1;
			}
			break;
		}
	}
}

/* The token jansson names in its message ("... near 'x'"), at most 24
 * characters of it, into buf. */
static const char *json_near(const json_error_t *e, char *buf, size_t n)
{
	const char *q = strstr(e->text, "near '");
	size_t len;

	buf[0] = '\0';
	if (!q)
		return buf;
	q += 6;
	len = strlen(q);
	if (len && q[len - 1] == '\'')
		len--;
	if (len > 24)
		len = 24;
	if (len >= n)
		len = n - 1;
	memcpy(buf, q, len);
	buf[len] = '\0';
	return buf;
}

static int is_number_field(const char *key)
{
	return !strcmp(key, "timestamp") || !strcmp(key, "input_length") ||
	       !strcmp(key, "output_length");
}

/* The accepted range of a number field, for messages. */
static const char *field_range(enum plan_fmt fmt, const char *key, char *buf, size_t n)
{
	int ms = fmt == PLAN_FMT_MOONCAKE;
	if (!strcmp(key, "timestamp"))
		snprintf(buf, n, "0..%.0f (%s)", PLAN_TRACE_MAX_SECONDS * (ms ? 1e3 : 1),
			 ms ? "milliseconds" : "seconds");
	else
		snprintf(buf, n, "(a whole number 0..%u)", PLAN_TRACE_MAX_TOKENS);
	return buf;
}

/* Digits only: 0 (the value in *v), or 1 past 64 bits. */
static int u64_digits(const char *s, size_t n, uint64_t *v)
{
	*v = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (*v > (UINT64_MAX - d) / 10)
			return 1;
		*v = *v * 10 + d;
	}
	return 0;
}

static int all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return n > 0;
}

/* jansson's integers are signed 64-bit, a trace's block ids unsigned: the
 * record's hash_ids array (its value starts at `val`) is copied into
 * c->fix with every id of 2^63 or more written less 2^63, and c->high[i]
 * set for those, so that the copy parses and the ids come back whole.  0,
 * or KVT_EINVAL for an id past 64 bits. */
static int json_fix_high(struct jctx *c, const char *p, size_t n, size_t val)
{
	size_t i = val, nel = 0;

	while (i < n && is_blank(p[i]))
		i++;
	if (i >= n || p[i] != '[')
		return bad_rec(c, "hash_ids: expected an array of block ids");
	if (c->fixcap < n + 1) {
		char *f = realloc(c->fix, n + 1);
		if (!f)
			return kvt_err(KVT_ENOMEM, "%s: out of memory", c->name);
		c->fix = f;
		c->fixcap = n + 1;
	}
	memcpy(c->fix, p, ++i);
	c->fixlen = i;
	if (c->high)
		memset(c->high, 0, c->nhigh);
	c->nhigh = 0;
	while (i < n && p[i] != ']') {
		size_t t = i;
		uint64_t v;
		while (t < n && !strchr(",] \t\r", p[t]))
			t++;
		nel += t > i;
		if (all_digits(p + i, t - i)) {
			if (u64_digits(p + i, t - i, &v))
				return bad_rec(c, "hash_ids: element %zu exceeds 64 bits", nel);
			if (v >> 63) {
				if (nel > c->highcap) {
					size_t nc = nel * 2 + 64;
					uint8_t *h = realloc(c->high, nc);
					if (!h)
						return kvt_err(KVT_ENOMEM, "%s: out of memory", c->name);
					memset(h + c->highcap, 0, nc - c->highcap);
					c->high = h;
					c->highcap = nc;
				}
				c->high[nel - 1] = 1;
				c->nhigh = nel;
				/* Never longer than the original: 2^63 and up
				 * has 19 or 20 digits, less 2^63 at most 19. */
				c->fixlen += (size_t)sprintf(c->fix + c->fixlen, "%llu",
							     (unsigned long long)(v - (1ull << 63)));
				i = t;
				continue;
			}
		}
		while (t < n && strchr(", \t\r", p[t]))
			t++;
		if (t == i)
			break; /* neither a token nor a separator: jansson says what */
		memcpy(c->fix + c->fixlen, p + i, t - i);
		c->fixlen += t - i;
		i = t;
	}
	memcpy(c->fix + c->fixlen, p + i, n - i);
	c->fixlen += n - i;
	return 0;
}

/* A record jansson refused: say where and what, as specifically as the
 * field allows.  1 when the refusal is only an id of 64 bits in hash_ids
 * (c->fix then holds a copy that parses: json_fix_high), else KVT_EINVAL. */
static int json_refused(struct jctx *c, const char *p, size_t n, const json_error_t *e,
			int may_fix)
{
	struct json_where w;
	char tok[32], range[64];
	int code = json_error_code(e);
	size_t at = e->position > 0 ? (size_t)e->position - 1 : 0;
	uint64_t v;

	json_near(e, tok, sizeof(tok));
	if (code == json_error_duplicate_key) {
		size_t len = strlen(tok);
		if (len >= 2 && tok[0] == '"')
			tok[len - 1] = '\0';
		return bad_rec(c, "%s: the field appears twice (a record names each field once)",
			       tok[0] == '"' ? tok + 1 : tok);
	}
	json_locate(p, at < n ? at : n, &w);
	if (w.depth == 2 && w.elem && !strcmp(w.key, "hash_ids")) {
		int digits = code == json_error_numeric_overflow && all_digits(tok, strlen(tok));
		if (digits && u64_digits(tok, strlen(tok), &v))
			return bad_rec(c, "hash_ids: element %llu exceeds 64 bits",
				       (unsigned long long)w.elem);
		if (digits && may_fix) {
			int rc = json_fix_high(c, p, n, w.val);
			return rc ? rc : 1;
		}
		return bad_rec(c, "hash_ids: element %llu is not a non-negative integer",
			       (unsigned long long)w.elem);
	}
	if (w.depth == 1 && w.val && is_number_field(w.key)) {
		if (code == json_error_numeric_overflow)
			return bad_rec(c, "%s: %s is out of range %s", w.key, tok,
				       field_range(c->fmt, w.key, range, sizeof(range)));
		return bad_rec(c, "%s: \"%s\" is not a number", w.key, tok);
	}
	return bad_rec(c, "not valid JSON: %s (column %d)", e->text, e->column);
}

/* Parse one record (blanks trimmed): 0 and *o, with *fixed when its ids
 * came through json_fix_high, or the error. */
static int json_parse(struct jctx *c, const char *p, size_t n, json_t **o, int *fixed)
{
	json_error_t e;
	int rc;

	*fixed = 0;
	if (!n || *p != '{')
		return bad_rec(c, "not a JSON object (a %s trace has one per line)",
			       plan_fmt_name(c->fmt));
	*o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &e);
	if (*o)
		return 0;
	rc = json_refused(c, p, n, &e, 1);
	if (rc != 1)
		return rc;
	*o = json_loadb(c->fix, c->fixlen, JSON_REJECT_DUPLICATES, &e);
	if (!*o)
		return json_refused(c, c->fix, c->fixlen, &e, 0);
	*fixed = 1;
	return 0;
}

/* An optional number field: 0 found (*v, *integral set), 1 absent, or
 * KVT_EINVAL naming the field and what it holds instead. */
static int json_number(const struct jctx *c, json_t *o, const char *field, double *v,
		       int *integral)
{
	json_t *j = json_object_get(o, field);

	*v = 0;
	*integral = 0;
	if (!j)
		return 1;
	*integral = json_is_integer(j);
	if (json_is_integer(j)) {
		*v = (double)json_integer_value(j);
		return 0;
	}
	if (json_is_real(j)) {
		*v = json_real_value(j);
		return 0;
	}
	char *d = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
	int rc = bad_rec(c, "%s: \"%.24s\" is not a number", field, d ? d : "?");
	free(d);
	return rc;
}

/* An optional length field: a whole number 0..PLAN_TRACE_MAX_TOKENS, or
 * -1 when absent. */
static int json_length(const struct jctx *c, json_t *o, const char *field, int64_t *out)
{
	double v;
	int integral;
	int rc = json_number(c, o, field, &v, &integral);
	if (rc == 1) {
		*out = -1;
		return 0;
	}
	if (rc)
		return rc;
	if (!integral || v < 0 || v > PLAN_TRACE_MAX_TOKENS)
		return bad_rec(c, "%s: %.17g is not a token count (a whole number 0..%u)", field,
			       v, PLAN_TRACE_MAX_TOKENS);
	*out = (int64_t)v;
	return 0;
}

/* The fields of a parsed record, each checked alone, into *rec; its ids
 * appended to iv. */
static int json_fields(struct jctx *c, json_t *o, int fixed, struct jrec *rec, struct idvec *iv)
{
	json_t *ids = json_object_get(o, "hash_ids");
	double max_ts = PLAN_TRACE_MAX_SECONDS * (c->fmt == PLAN_FMT_MOONCAKE ? 1e3 : 1);
	int integral, rc;

	rec->line = c->line;
	rec->fast = 0;
	if (!ids)
		return bad_rec(c, "no \"hash_ids\" field");
	if (!json_is_array(ids))
		return bad_rec(c, "hash_ids: expected an array of block ids");
	rec->nid = json_array_size(ids);
	for (size_t i = 0; i < rec->nid; i++) {
		json_t *e = json_array_get(ids, i);
		json_int_t v = json_is_integer(e) ? json_integer_value(e) : -1;
		if (v < 0)
			return bad_rec(c, "hash_ids: element %zu is not a non-negative integer", i + 1);
		uint64_t id = (uint64_t)v;
		if (fixed && i < c->nhigh && c->high[i])
			id += 1ull << 63;
		if (idvec_push(iv, id))
			return kvt_err(KVT_ENOMEM, "%s: out of memory", c->name);
	}
	rc = json_number(c, o, "timestamp", &rec->ts, &integral);
	if (rc == 1) {
		rec->ts = -1;
		rc = 0;
	} else if (!rc && (rec->ts < 0 || rec->ts > max_ts)) {
		rc = bad_rec(c, "timestamp: %.17g is out of range 0..%.0f (%s)", rec->ts, max_ts,
			     c->fmt == PLAN_FMT_MOONCAKE ? "milliseconds" : "seconds");
	}
	if (!rc)
		rc = json_length(c, o, "input_length", &rec->in);
	if (!rc)
		rc = json_length(c, o, "output_length", &rec->out);
	return rc;
}

/* The record joins the trace, after the checks that relate it to the
 * records before it.  `ids` are its rec->nid ids. */
static int json_commit(struct reader *r, const struct jrec *rec, const uint64_t *ids)
{
	const struct plan_trace *pt = r->pt;
	int ms = pt->fmt == PLAN_FMT_MOONCAKE;
	uint64_t nb = rec->nid;
	double ts;
	int rc;

	r->line = rec->line;
	if (rec->ts < 0) {
		ts = r->nreq ? r->t_prev : 0; /* absent: with the previous request */
	} else {
		ts = ms ? rec->ts * 1e-3 : rec->ts; /* Mooncake counts ms, Bailian s */
		if (r->nreq && ts < r->t_prev)
			return bad_line(r, "timestamp: %.17g is before the previous request's %.17g (a trace is in arrival order)",
					rec->ts, ms ? r->t_prev * 1e3 : r->t_prev);
	}
	if (nb * pt->block_tokens > PLAN_TRACE_MAX_TOKENS)
		return bad_line(r, "hash_ids: %llu blocks of %u tokens are more than %u tokens",
				(unsigned long long)nb, pt->block_tokens, PLAN_TRACE_MAX_TOKENS);
	rc = kvt_trace_build_add(&r->b, ids, nb);
	if (rc)
		return kvt_err(rc, "%s: out of memory", r->name);
	if (rec->fast)
		r->nfast++;
	else
		r->njson++;
	return add_request(r, ts, rec->in < 0 ? nb * pt->block_tokens : (uint64_t)rec->in,
			   rec->out < 0 ? 0 : (uint64_t)rec->out);
}

static struct jctx *reader_jctx(struct reader *r)
{
	if (!r->jc) {
		r->jc = calloc(1, sizeof(*r->jc));
		if (!r->jc)
			return NULL;
		r->jc->name = r->name;
	}
	r->jc->line = r->line;
	r->jc->fmt = r->pt->fmt;
	return r->jc;
}

/* ---- the fast path: canonical records --------------------------------------- */

/* Most records are one shape: an object of plain keys (no escapes) mapped
 * to numbers, strings, or arrays of non-negative integers.  fast_scan
 * reads that shape in one pass, skipping string values escape by escape
 * (a "hash_ids" inside one is text), and fast_rec checks its fields as
 * json_fields would.  A line it does not take whole (an escape in a key,
 * a \u escape or a non-ASCII byte in a string, a negative id, true/false/
 * null, a nested object, a duplicate key, a number jansson would read
 * differently or refuse, a field out of range, a syntax error, anything
 * else) goes to jansson, which decides and says what is wrong.  So what
 * the fast path takes is the record jansson would give (fuzz/fuzz_trace.c
 * checks it line by line), and every message is the jansson path's. */

enum { FAST_TS, FAST_IN, FAST_OUT, FAST_NFIELD };

#define FAST_MAX_KEYS 32

struct fastrec {
	int chat_id;               /* has a "chat_id" field */
	int has[FAST_NFIELD];      /* timestamp, input_length, output_length */
	int integral[FAST_NFIELD];
	double v[FAST_NFIELD];
	size_t nid;                /* elements of hash_ids (has_ids) */
	int has_ids;
};

static int fast_is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static const char *fast_ws(const char *p, const char *end)
{
	while (p < end && fast_is_ws(*p))
		p++;
	return p;
}

/* A string at p (its '"'): past its closing quote, or NULL to leave it to
 * jansson.  Printable ASCII only (jansson checks UTF-8 and \u escapes);
 * a key takes no escape at all, a value the two-character ones, so a
 * "hash_ids" inside a value is never seen as a key. */
static const char *fast_string(const char *p, const char *end, int key)
{
	for (p++; p < end; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"')
			return p + 1;
		if (c < 0x20 || c > 0x7e)
			return NULL;
		if (c == '\\') {
			if (key || ++p == end || !strchr("\"\\/bfnrt", *p) || !*p)
				return NULL;
		}
	}
	return NULL;
}

/* A number as JSON writes it, followed by a delimiter: past it (*v,
 * *integral, and *u its magnitude), or NULL.  An integer is one jansson
 * holds (magnitude below 2^63), a real one strtod reads the way jansson
 * does, finite and without ERANGE; anything else is jansson's to judge. */
static const char *fast_number(const char *p, const char *end, double *v, int *integral,
			       uint64_t *u)
{
	const char *s = p;
	int nd = 0;

	int neg = p < end && *p == '-';

	*u = 0;
	p += neg;
	if (p == end || *p < '0' || *p > '9')
		return NULL;
	if (*p == '0') {
		p++;
	} else {
		while (p < end && *p >= '0' && *p <= '9') {
			if (++nd > 19)
				return NULL;
			*u = *u * 10 + (uint64_t)(*p++ - '0');
		}
		if (*u > (uint64_t)INT64_MAX)
			return NULL;
	}
	*integral = 1;
	if (p < end && *p == '.') {
		*integral = 0;
		if (++p == end || *p < '0' || *p > '9')
			return NULL;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		*integral = 0;
		if (++p < end && (*p == '+' || *p == '-'))
			p++;
		if (p == end || *p < '0' || *p > '9')
			return NULL;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	/* A delimiter must follow (the record's '}' is always after it), so
	 * strtod below stops where the scan did. */
	if (p == end || !(fast_is_ws(*p) || *p == ',' || *p == '}' || *p == ']'))
		return NULL;
	if (*integral) {
		/* As jansson's json_int_t: -0 is the integer 0. */
		*v = (double)(neg ? -(int64_t)*u : (int64_t)*u);
		return p;
	}
	char *e;
	errno = 0;
	*v = strtod(s, &e);
	if (e != p || errno || !isfinite(*v))
		return NULL;
	return p;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FAST_DIGITS8 1
/* The decimal digits that lead the 8 bytes at p, at most 8: their count,
 * and when there are any their value in *u, all 8 bytes read at once.  A digit's
 * byte xor '0' is its value; any other's is 10 or more, and adding 0x76
 * sets its high bit (a carry out of it disturbs only the bytes after it,
 * which the count never looks at).  The digits, moved to the top bytes
 * behind zeros, are then summed in pairs, fours and eights. */
static inline unsigned fast_digits8(const char *p, uint64_t *u)
{
	uint64_t v, t, stop;

	memcpy(&v, p, sizeof(v));
	t = v ^ 0x3030303030303030ull;
	stop = ((t + 0x7676767676767676ull) | t) & 0x8080808080808080ull;
	unsigned n = stop ? (unsigned)__builtin_ctzll(stop) / 8 : 8;
	if (n) {
		t <<= 64 - 8 * n;
		t = (t * 10 + (t >> 8)) & 0x00ff00ff00ff00ffull;
		t = (t * 100 + (t >> 16)) & 0x0000ffff0000ffffull;
		*u = (t * 10000 + (t >> 32)) & 0xffffffffull;
	}
	return n;
}
#endif

/* An array of non-negative integers at p (its '['): past its ']', or
 * NULL.  With iv, its elements are appended there. */
static const char *fast_array(const char *p, const char *end, struct idvec *iv, size_t *n)
{
	double v;
	int integral;
	uint64_t u;

	*n = 0;
	p = fast_ws(p + 1, end);
	if (p < end && *p == ']')
		return p + 1;
	for (;;) {
		/* The common element, a short integer and then ',' or ']',
		 * is read here; anything longer goes through fast_number. */
		const char *s = p;
		u = 0;
#ifdef FAST_DIGITS8
		/* Up to 7 digits (a trace's ids, mostly) at once; 8 or more
		 * one by one, from the first. */
		unsigned nd;
		uint64_t u8;
		if (end - p >= 8 && (nd = fast_digits8(p, &u8)) < 8) {
			p += nd;
			u = nd ? u8 : 0;
		} else
#endif
			while (p < end && p - s < 18 && *p >= '0' && *p <= '9')
				u = u * 10 + (uint64_t)(*p++ - '0');
		if (p == s || p == end || (*s == '0' && p - s > 1) ||
		    (*p != ',' && *p != ']')) {
			if (s == end || *s == '-')
				return NULL; /* a negative id: jansson's message */
			p = s;
			if (!(p = fast_number(p, end, &v, &integral, &u)) || !integral)
				return NULL;
		}
		if (iv && idvec_push(iv, u))
			return NULL; /* out of memory: jansson's path says so */
		++*n;
		p = fast_ws(p, end);
		if (p == end)
			return NULL;
		if (*p == ']')
			return p + 1;
		if (*p != ',')
			return NULL;
		p = fast_ws(p + 1, end);
	}
}

static int fast_key_is(const char *k, size_t n, const char *name)
{
	return strlen(name) == n && !memcmp(k, name, n);
}

/* One record (blanks trimmed) of the canonical shape into *fr, its ids
 * appended to iv: 0, or 1 (iv as it was) to leave the line to jansson. */
static int fast_scan(const char *p, size_t n, struct fastrec *fr, struct idvec *iv)
{
	static const char *const field[FAST_NFIELD] = {"timestamp", "input_length",
						       "output_length"};
	const char *end = p + n, *key[FAST_MAX_KEYS];
	size_t klen[FAST_MAX_KEYS], nkeys = 0, n0 = iv->n;

	memset(fr, 0, sizeof(*fr));
	if (!n || *p != '{')
		return 1;
	p = fast_ws(p + 1, end);
	if (p < end && *p == '}')
		goto refuse; /* no hash_ids */
	for (;;) {
		const char *k = p, *q;
		size_t kl;
		int f = -1;
		if (p == end || *p != '"' || nkeys == FAST_MAX_KEYS ||
		    !(q = fast_string(p, end, 1)))
			goto refuse;
		k++;
		kl = (size_t)(q - 1 - k);
		for (size_t i = 0; i < nkeys; i++)
			if (klen[i] == kl && !memcmp(key[i], k, kl))
				goto refuse; /* named twice: jansson refuses it */
		key[nkeys] = k;
		klen[nkeys++] = kl;
		p = fast_ws(q, end);
		if (p == end || *p != ':')
			goto refuse;
		p = fast_ws(p + 1, end);
		if (p == end)
			goto refuse;
		for (int i = 0; i < FAST_NFIELD && f < 0; i++)
			if (fast_key_is(k, kl, field[i]))
				f = i;
		int ids = fast_key_is(k, kl, "hash_ids");
		if (fast_key_is(k, kl, "chat_id"))
			fr->chat_id = 1;
		if (*p == '"') {
			if (f >= 0 || ids || !(p = fast_string(p, end, 0)))
				goto refuse;
		} else if (*p == '[') {
			size_t nel;
			if (f >= 0 || !(p = fast_array(p, end, ids ? iv : NULL, &nel)))
				goto refuse;
			if (ids) {
				fr->has_ids = 1;
				fr->nid = nel;
			}
		} else {
			double v;
			int integral;
			uint64_t u;
			if (ids || !(p = fast_number(p, end, &v, &integral, &u)))
				goto refuse;
			if (f >= 0) {
				fr->has[f] = 1;
				fr->v[f] = v;
				fr->integral[f] = integral;
			}
		}
		p = fast_ws(p, end);
		if (p == end)
			goto refuse;
		if (*p == '}')
			break;
		if (*p != ',')
			goto refuse;
		p = fast_ws(p + 1, end);
	}
	if (!fr->has_ids || fast_ws(p + 1, end) != end)
		goto refuse;
	return 0;
refuse:
	iv->n = n0;
	return 1;
}

/* The fields of a scanned record as json_fields takes them, for the
 * format in c: 0 (*rec), or 1 where json_fields would refuse one. */
static int fast_rec(const struct jctx *c, const struct fastrec *fr, struct jrec *rec)
{
	double max_ts = PLAN_TRACE_MAX_SECONDS * (c->fmt == PLAN_FMT_MOONCAKE ? 1e3 : 1);
	int64_t *len[2] = {&rec->in, &rec->out};

	rec->line = c->line;
	rec->nid = fr->nid;
	rec->ts = -1;
	if (fr->has[FAST_TS]) {
		if (fr->v[FAST_TS] < 0 || fr->v[FAST_TS] > max_ts)
			return 1;
		rec->ts = fr->v[FAST_TS];
	}
	for (int i = 0; i < 2; i++) {
		double v = fr->v[FAST_IN + i];
		*len[i] = -1;
		if (!fr->has[FAST_IN + i])
			continue;
		if (!fr->integral[FAST_IN + i] || v < 0 || v > PLAN_TRACE_MAX_TOKENS)
			return 1;
		*len[i] = (int64_t)v;
	}
	return 0;
}

/* A record the fast path takes whole: 0 (*rec, its ids appended to iv),
 * or 1 (iv as it was) to leave it to jansson. */
static int fast_take(const struct jctx *c, const char *p, size_t n, struct jrec *rec,
		     struct idvec *iv)
{
	struct fastrec fr;
	size_t n0 = iv->n;

	if (fast_scan(p, n, &fr, iv))
		return 1;
	if (fast_rec(c, &fr, rec)) {
		iv->n = n0;
		return 1;
	}
	rec->fast = 1;
	return 0;
}

/* The first record of an AUTO trace decides its format: a chat_id field
 * means Bailian. */
static void json_detected(struct reader *r, struct jctx *c, int chat_id)
{
	struct plan_trace *pt = r->pt;

	r->detect = 0;
	pt->fmt = chat_id ? PLAN_FMT_BAILIAN : PLAN_FMT_MOONCAKE;
	c->fmt = pt->fmt;
	if (!pt->block_tokens)
		pt->block_tokens = pt->fmt == PLAN_FMT_MOONCAKE ? 512 : 16;
}

/* One JSON Lines record (Mooncake, Bailian) on the calling thread, parsed
 * whole by jansson: the fields are taken by name, so a string that merely
 * contains "hash_ids" is a string.  A key named twice is refused (which
 * one counts is not JSON's to say).  With the format AUTO, the first
 * record decides it. */
static int json_line(struct reader *r, const char *p, const char *end)
{
	struct plan_trace *pt = r->pt;
	struct jctx *c;
	struct jrec rec;
	json_t *o;
	int rc, fixed;

	while (p < end && is_blank(*p))
		p++;
	while (end > p && is_blank(end[-1]))
		end--;
	if (r->detect) {
		/* Until the record's fields say otherwise; a broken one still
		 * names the chat (and so the clock) it belongs to. */
		pt->fmt = find_in(p, end, "\"chat_id\"") ? PLAN_FMT_BAILIAN : PLAN_FMT_MOONCAKE;
	}
	if (!(c = reader_jctx(r)))
		return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
	r->nids = 0;
	struct idvec iv = {r->ids, 0, r->idcap};
	struct fastrec fr;
	int fast = !fast_scan(p, (size_t)(end - p), &fr, &iv);
	r->ids = iv.v;
	r->idcap = iv.cap;
	if (fast && r->detect)
		c->fmt = fr.chat_id ? PLAN_FMT_BAILIAN : PLAN_FMT_MOONCAKE;
	if (fast && !fast_rec(c, &fr, &rec)) {
		rec.fast = 1;
		if (r->detect)
			json_detected(r, c, fr.chat_id);
		return json_commit(r, &rec, r->ids);
	}
	c->fmt = pt->fmt;
	if ((rc = json_parse(c, p, (size_t)(end - p), &o, &fixed)))
		return rc;
	if (r->detect)
		json_detected(r, c, json_object_get(o, "chat_id") != NULL);
	iv.n = 0;
	rc = json_fields(c, o, fixed, &rec, &iv);
	r->ids = iv.v;
	r->idcap = iv.cap;
	json_decref(o);
	return rc ? rc : json_commit(r, &rec, r->ids);
}

/* ---- many records at once ------------------------------------------------- */

/* A window of whole lines of a JSON trace is parsed by several threads, a
 * chunk of its bytes at a time, while the calling thread commits the
 * chunks done, in order (the trace builder numbers ids in order of first
 * sight).  A chunk holds the lines that start in its bytes, so each
 * thread finds its own lines and nothing is read serially first.  Threads take chunks as they come, and the calling thread never
 * waits for one: a helper that the scheduler starts late finds the work
 * done and leaves (the window, and the copy of the lines it reads, is
 * freed by whoever leaves last).  Lines read in place (a mapped file) are
 * the caller's again once the window returns, so it does wait then for a
 * helper still inside a chunk, one chunk's work at most.
 *
 * A chunk stops at its first refused line.  Its line numbers are its own
 * (where the chunk starts in the trace is known only when the chunks
 * before it are committed), so the commit reads that one line again,
 * numbered, for the message: the one a single thread would give. */
#define PAR_MAX_THREADS 8

/* Windows of at least this many bytes of a JSON trace are read in
 * parallel (json_window); below it a thread costs more than it saves.
 * A window has at least two chunks. */
#ifndef PAR_MIN_BYTES
#define PAR_MIN_BYTES (64u << 10)
#endif
#define PAR_CHUNK_BYTES (PAR_MIN_BYTES / 2)

struct pchunk {
	size_t b0, b1;          /* its lines start in bytes [b0, b1) of the window */
	struct jrec *rec;       /* rec[i].line: the line within the chunk, from 1 */
	size_t nrec, reccap;
	struct idvec ids;
	uint64_t lines;         /* lines read, blank ones too, before any stop */
	/* Where it stopped, if it did: a refused line (stop_n bytes at
	 * stop_at, blanks trimmed), or one longer than the bound (stop_long,
	 * stop_at its start); rc: out of memory. */
	int stop, stop_long, rc;
	size_t stop_at, stop_n;
	atomic_int done;
};

/* The commit is the slower side (the trace builder): a helper runs at
 * most PAR_AHEAD chunks past the last one committed, then waits for it, so
 * that what waits to be committed stays small however long the window.  A
 * committed chunk's arrays are kept (PAR_SPARE of them) for the next
 * chunk to run: a long window writes its records into the same few blocks
 * instead of fresh memory for every chunk. */
#define PAR_AHEAD 16
#define PAR_SPARE 8

struct pspare {
	struct jrec *rec;
	size_t reccap;
	struct idvec ids;
};

struct pwin {
	atomic_int refs;
	atomic_size_t next;     /* the next chunk to take */
	atomic_int reading;     /* helpers that may be inside a chunk */
	const char *name;
	enum plan_fmt fmt;
	const char *base;       /* the window's bytes: a copy, or the caller's */
	size_t len;
	struct pchunk *ch;
	size_t nch;
	char *bytes;            /* the copy base points into, or NULL */
	pthread_mutex_t lock;   /* of what follows */
	pthread_cond_t turn;    /* committed moved, or closed */
	size_t committed;       /* chunks committed */
	int closed;             /* the caller has left: run nothing more */
	int waiting;            /* helpers waiting for their turn */
	struct pspare spare[PAR_SPARE];
	unsigned nspare;
};

/* A chunk about to run takes a spare's arrays, if there is one. */
static void pchunk_reuse(struct pwin *w, struct pchunk *k)
{
	pthread_mutex_lock(&w->lock);
	if (w->nspare) {
		struct pspare *sp = &w->spare[--w->nspare];
		k->rec = sp->rec;
		k->reccap = sp->reccap;
		k->ids = sp->ids;
		k->ids.n = 0;
	}
	pthread_mutex_unlock(&w->lock);
}

/* Chunk k committed (the next one in line, or the caller's own reading
 * of it): its arrays kept as a spare, else freed, and a helper that waits
 * for its turn told. */
static void pchunk_committed(struct pwin *w, struct pchunk *k)
{
	pthread_mutex_lock(&w->lock);
	w->committed++;
	if (w->nspare < PAR_SPARE && k->rec && k->ids.v) {
		w->spare[w->nspare++] = (struct pspare){k->rec, k->reccap, k->ids};
		k->rec = NULL;
		k->ids.v = NULL;
	}
	if (w->waiting)
		pthread_cond_broadcast(&w->turn);
	pthread_mutex_unlock(&w->lock);
	free(k->rec);
	free(k->ids.v);
	k->rec = NULL;
	k->ids.v = NULL;
}

/* A helper's chunk i: wait until it is no more than PAR_AHEAD past the
 * commit.  0 to run it, or 1 when the caller has left the window. */
static int pchunk_turn(struct pwin *w, size_t i)
{
	pthread_mutex_lock(&w->lock);
	while (!w->closed && i >= w->committed + PAR_AHEAD) {
		w->waiting++;
		pthread_cond_wait(&w->turn, &w->lock);
		w->waiting--;
	}
	int closed = w->closed;
	pthread_mutex_unlock(&w->lock);
	return closed;
}

static void pwin_put(struct pwin *w)
{
	if (atomic_fetch_sub(&w->refs, 1) != 1)
		return;
	for (size_t i = 0; i < w->nch; i++) {
		free(w->ch[i].rec);
		free(w->ch[i].ids.v);
	}
	for (unsigned i = 0; i < w->nspare; i++) {
		free(w->spare[i].rec);
		free(w->spare[i].ids.v);
	}
	pthread_cond_destroy(&w->turn);
	pthread_mutex_destroy(&w->lock);
	free(w->ch);
	free(w->bytes);
	free(w);
}

/* One record (blanks trimmed) into *rec, its ids appended to iv: the fast
 * path's, else jansson's.  0, or the refusal, c->line naming the line. */
static int take_line(struct jctx *c, const char *p, size_t n, struct jrec *rec,
		     struct idvec *iv)
{
	json_t *o;
	int fixed, rc;

	/* The fast path never takes a NUL (it is no byte of its shape). */
	if (!fast_take(c, p, n, rec, iv))
		return 0;
	if (memchr(p, '\0', n))
		return bad_rec(c, "a NUL byte: binary data, not a trace");
	rc = json_parse(c, p, n, &o, &fixed);
	if (!rc) {
		rc = json_fields(c, o, fixed, rec, iv);
		json_decref(o);
	}
	return rc;
}

static void pchunk_run(struct pwin *w, struct jctx *c, struct pchunk *k)
{
	const char *end = w->base + w->len, *lim = w->base + k->b1;
	const char *p = w->base + k->b0;

	pchunk_reuse(w, k);
	/* Past the line that started before the chunk, if one did. */
	if (k->b0 && p[-1] != '\n') {
		const char *nl = memchr(p, '\n', (size_t)(lim - p));
		p = nl ? nl + 1 : lim;
	}
	while (p < lim) {
		/* A line ends at its '\n' or the window's end, looked for no
		 * further than the bound. */
		size_t room = (size_t)(end - p);
		if (room > PLAN_TRACE_MAX_LINE)
			room = PLAN_TRACE_MAX_LINE + 1;
		const char *eol = memchr(p, '\n', room);
		const char *a = p, *b = eol ? eol : end;
		if ((size_t)(b - a) > PLAN_TRACE_MAX_LINE) {
			k->stop = k->stop_long = 1;
			k->stop_at = (size_t)(a - w->base);
			return;
		}
		p = b + 1;
		k->lines++;
		while (a < b && is_blank(*a))
			a++;
		while (b > a && is_blank(b[-1]))
			b--;
		if (a == b)
			continue;
		if (k->nrec == k->reccap) {
			size_t nc = k->reccap ? k->reccap * 2 : 128;
			struct jrec *v = realloc(k->rec, nc * sizeof(*v));
			if (!v) {
				k->lines--;
				k->rc = KVT_ENOMEM;
				return;
			}
			k->rec = v;
			k->reccap = nc;
		}
		c->line = k->lines;
		if (take_line(c, a, (size_t)(b - a), &k->rec[k->nrec], &k->ids)) {
			k->lines--; /* the commit counts it when it reads it again */
			k->stop = 1;
			k->stop_at = (size_t)(a - w->base);
			k->stop_n = (size_t)(b - a);
			return;
		}
		k->nrec++;
	}
}

/* Take chunks until none is left, each in its turn.  *c is the thread's
 * scratch.  A helper counts itself reading before it takes a chunk, so
 * that once the caller has closed the window and seen no one reading, no
 * one reads its bytes again. */
static void pwin_work(struct pwin *w, struct jctx *c)
{
	for (;;) {
		atomic_fetch_add(&w->reading, 1);
		size_t i = atomic_fetch_add(&w->next, 1);
		int stop = i >= w->nch || pchunk_turn(w, i);
		if (!stop) {
			pchunk_run(w, c, &w->ch[i]);
			atomic_store_explicit(&w->ch[i].done, 1, memory_order_release);
		}
		atomic_fetch_sub(&w->reading, 1);
		if (stop)
			return;
	}
}

static void *pwin_thread(void *arg)
{
	struct pwin *w = arg;
	struct jctx c = {.name = w->name, .fmt = w->fmt};

	pwin_work(w, &c);
	free(c.fix);
	free(c.high);
	pwin_put(w);
	return NULL;
}

/* Commit chunk k (done), its lines after the `*line` before it, stopping
 * at its stop or when max_req is met; *line then counts its lines too.  A
 * line past the bound is left to the caller: *stop is then its offset in
 * the window. */
static int pchunk_commit(struct reader *r, struct pwin *w, struct jctx *c,
			 const struct pchunk *k, uint64_t *line, size_t *stop)
{
	const uint64_t *ids = k->ids.v;
	for (size_t i = 0; i < k->nrec && !r->full; i++) {
		struct jrec rec = k->rec[i];
		rec.line += *line;
		int rc = json_commit(r, &rec, ids);
		if (rc)
			return rc;
		if (rec.nid)
			ids += rec.nid; /* NULL while every record so far was [] */
	}
	if (r->full)
		return 0;
	*line += k->lines;
	if (k->rc) {
		r->line = *line + 1;
		return kvt_err(k->rc, "%s: out of memory", r->name);
	}
	if (k->stop_long) {
		*stop = k->stop_at;
		return 0;
	}
	if (!k->stop)
		return 0;
	/* The refused line again, numbered, for its message. */
	struct idvec iv = {NULL, 0, 0};
	struct jrec rec;
	r->line = c->line = ++*line;
	int rc = take_line(c, w->base + k->stop_at, k->stop_n, &rec, &iv);
	free(iv.v);
	/* Refused once, read now: memory was short the first time. */
	return rc ? rc : kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
}

/* Threads for a window of `len` bytes: no more than the CPUs this process
 * may run on (a helper pinned to the same core as the caller only adds
 * switches), nor than its chunks make worth it. */
static unsigned par_threads(size_t len)
{
	cpu_set_t cs;
	long n = sched_getaffinity(0, sizeof(cs), &cs) == 0 ? CPU_COUNT(&cs)
							   : sysconf(_SC_NPROCESSORS_ONLN);
	size_t t = len / PAR_CHUNK_BYTES;
	if (n < 1)
		n = 1;
	if (t > (size_t)n)
		t = (size_t)n;
	return t > PAR_MAX_THREADS ? PAR_MAX_THREADS : t ? (unsigned)t : 1;
}

/* The lines of [p, end) (whole lines: end is past a '\n' or the end of
 * the input) as one window, in parallel: read in place with
 * r->in_place, else from a copy.  0, or the first error in line order; r->line
 * is then the line of the error, else the window's last.  *stop is end,
 * or the start of a line longer than the bound, for the caller to refuse
 * after the lines before it. */
static int json_window(struct reader *r, const char *p, const char *end, const char **stop)
{
	struct pwin *w = calloc(1, sizeof(*w));
	size_t len = (size_t)(end - p), at = len;
	uint64_t line = r->line;
	int rc = 0;

	*stop = end;
	if (!w)
		return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
	w->nch = (len + PAR_CHUNK_BYTES - 1) / PAR_CHUNK_BYTES;
	w->ch = calloc(w->nch ? w->nch : 1, sizeof(*w->ch));
	if (!w->ch) {
		free(w);
		return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->turn, NULL);
	for (size_t i = 0; i < w->nch; i++) {
		w->ch[i].b0 = i * PAR_CHUNK_BYTES;
		w->ch[i].b1 = i + 1 < w->nch ? (i + 1) * PAR_CHUNK_BYTES : len;
	}
	w->name = r->name;
	w->fmt = r->pt->fmt;
	w->len = len;
	if (r->in_place) {
		w->base = p;
	} else {
		/* The helpers read a copy: the caller's buffer is reused as
		 * soon as this returns, and a helper may still be reading
		 * then. */
		w->bytes = malloc(len + 1);
		if (!w->bytes) {
			w->nch = 0;
			atomic_init(&w->refs, 1);
			pwin_put(w);
			return kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
		}
		memcpy(w->bytes, p, len);
		w->base = w->bytes;
	}
	atomic_init(&w->refs, 1);
	atomic_init(&w->next, 0);
	atomic_init(&w->reading, 0);

	unsigned nt = par_threads(len);
	for (unsigned i = 1; i < nt; i++) {
		pthread_t th;
		atomic_fetch_add(&w->refs, 1);
		if (pthread_create(&th, NULL, pwin_thread, w) == 0)
			pthread_detach(th);
		else
			atomic_fetch_sub(&w->refs, 1);
	}
	struct jctx *c = reader_jctx(r);
	if (!c) {
		atomic_store(&w->next, w->nch); /* no chunk is taken after this */
		rc = kvt_err(KVT_ENOMEM, "%s: out of memory", r->name);
	}
	/* Work and commit in turn: commit the next chunk if it is done, else
	 * take one; when none is left to take and the next is still a
	 * helper's, read it again here rather than wait for a thread the
	 * scheduler may not run for a while (the helper's copy is dropped).
	 * The caller takes chunks past a helper's turn: it commits them
	 * itself, soon. */
	size_t next_commit = 0;
	while (!rc && next_commit < w->nch && !r->full && at == len) {
		struct pchunk *k = &w->ch[next_commit];
		if (atomic_load_explicit(&k->done, memory_order_acquire)) {
			rc = pchunk_commit(r, w, c, k, &line, &at);
			pchunk_committed(w, k);
			next_commit++;
			continue;
		}
		size_t i = atomic_fetch_add(&w->next, 1);
		if (i < w->nch) {
			pchunk_run(w, c, &w->ch[i]);
			atomic_store_explicit(&w->ch[i].done, 1, memory_order_release);
			continue;
		}
		struct pchunk mine;
		memset(&mine, 0, sizeof(mine));
		mine.b0 = k->b0;
		mine.b1 = k->b1;
		pchunk_run(w, c, &mine);
		rc = pchunk_commit(r, w, c, &mine, &line, &at);
		pchunk_committed(w, &mine);
		next_commit++;
	}
	pthread_mutex_lock(&w->lock);
	w->closed = 1; /* and no chunk is run after this */
	pthread_cond_broadcast(&w->turn);
	pthread_mutex_unlock(&w->lock);
	atomic_store(&w->next, w->nch); /* no chunk is taken after this */
	while (r->in_place && atomic_load(&w->reading))
		sched_yield(); /* a helper still in a chunk: its last */
	if (!rc && !r->full)
		r->line = line;
	*stop = p + at;
	pwin_put(w);
	return rc;
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

/* A line of vLLM KV events: read now, its requests given at the end. */
static int vllm_line(struct reader *r, const char *p, const char *end)
{
	char err[300];
	int rc = r->vl ? 0 : plan_vllm_new(&r->vl);
	if (rc)
		return kvt_err(rc, "%s: out of memory", r->name);
	rc = plan_vllm_line(r->vl, p, (size_t)(end - p), &r->pt->block_tokens, err, sizeof(err));
	if (rc == KVT_EINVAL)
		return bad_line(r, "%s", err);
	return rc ? kvt_err(rc, "%s: out of memory", r->name) : 0;
}

static int vllm_emit(void *arg, double ts, const uint64_t *ids, size_t n, uint64_t in,
		     uint64_t out)
{
	struct reader *r = arg;
	int rc = 0;
	if (r->full)
		return 0;
	for (size_t i = 0; !rc && i < n; i++)
		rc = line_id(r, ids[i]);
	if (!rc)
		rc = line_commit(r);
	return rc ? rc : add_request(r, ts, in, out > PLAN_TRACE_MAX_TOKENS ? PLAN_TRACE_MAX_TOKENS : out);
}

/* AUTO: a line of KV events (a batch, or one event) rather than a trace
 * record. */
static int is_vllm_line(const char *p, const char *end)
{
	if (find_in(p, end, "\"hash_ids\""))
		return 0;
	return find_in(p, end, "\"BlockStored\"") || find_in(p, end, "\"BlockRemoved\"") ||
	       find_in(p, end, "\"AllBlocksCleared\"") || find_in(p, end, "\"events\"");
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
	/* AUTO: a line that is an object is a JSON record (its fields
	 * decide which kind, json_line), anything else token ids. */
	if (pt->fmt == PLAN_FMT_AUTO && (*q == '{' || *q == '[') && is_vllm_line(q, end))
		pt->fmt = PLAN_FMT_VLLM;
	if (pt->fmt == PLAN_FMT_VLLM)
		return vllm_line(r, p, end);
	if (pt->fmt == PLAN_FMT_AUTO && *q != '{')
		pt->fmt = PLAN_FMT_TOKENS;
	if (pt->fmt == PLAN_FMT_AUTO)
		r->detect = 1;
	else if (!pt->block_tokens)
		pt->block_tokens = pt->fmt == PLAN_FMT_MOONCAKE ? 512
				 : pt->fmt == PLAN_FMT_BAILIAN ? 16 : 256;
	return pt->fmt == PLAN_FMT_TOKENS ? token_line(r, p, end) : json_line(r, p, end);
}

/* The lines of [p, end), each without its '\n': end is just past a '\n',
 * or the end of the input (its last line).  A line longer than the bound
 * is refused where it stands. */
static int reader_lines(struct reader *r, const char *p, const char *end)
{
	const struct plan_trace *pt = r->pt;
	int rc = 0;

	while (!rc && !r->full && p < end) {
		if ((pt->fmt == PLAN_FMT_MOONCAKE || pt->fmt == PLAN_FMT_BAILIAN) &&
		    pt->block_tokens && r->b_open && (size_t)(end - p) >= PAR_MIN_BYTES) {
			const char *stop;
			if ((rc = json_window(r, p, end, &stop)) || r->full || stop == end)
				break;
			p = stop;
		}
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > PLAN_TRACE_MAX_LINE) {
			r->line++;
			r->long_line = 1;
			return bad_line(r, "longer than %u MiB, the bound on a trace line",
					PLAN_TRACE_MAX_LINE >> 20);
		}
		rc = reader_line(r, p, (size_t)(eol - p));
		p = eol + 1;
	}
	return rc;
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
	plan_vllm_free(r->vl);
	r->vl = NULL;
	jctx_free(r->jc);
	r->jc = NULL;
}

/* The trace is built; hand the side arrays to pt. */
static int reader_finish(struct reader *r)
{
	struct plan_trace *pt = r->pt;
	int rc = 0;

	if (r->vl && (rc = plan_vllm_finish(r->vl, vllm_emit, r)))
		goto out;
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
	pt->nrec_fast = r->nfast;
	pt->nrec_json = r->njson;
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
	int rc;

	reader_init(&r, "trace", fmt, block_tokens, max_req, pt);
	r.in_place = 1;
	rc = reader_lines(&r, buf, buf + len);
	if (rc) {
		reader_free(&r);
		plan_trace_free(pt);
		return rc;
	}
	return reader_finish(&r);
}

/* A regular file is read mapped whole: no copy of its bytes, and each
 * thread finds its own lines in them (json_window).  What it reads, and
 * what it refuses, are the stream's below, but for a line past the bound:
 * the stream looks for a NUL a read ahead of its lines, so it may name one
 * in that line first; the caller then reads the file again as a stream.
 * 0, an error, or 1 (nothing read) when the file cannot be mapped (a pipe,
 * a terminal, an empty file): then it is streamed.  Like any reader of a
 * mapping, it assumes the file is not cut short while it is read. */
static int read_mapped(struct reader *r, int fd, const struct stat *st)
{
	size_t len = (size_t)st->st_size;
	void *m;
	int rc;

	if (!S_ISREG(st->st_mode) || st->st_size <= 0 || (uint64_t)st->st_size > SIZE_MAX)
		return 1;
	m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return 1;
	r->in_place = 1;
	rc = reader_lines(r, m, (const char *)m + len);
	r->in_place = 0;
	munmap(m, len);
	return rc;
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
	int stat_ok = fstat(fileno(f), &st) == 0;
	if (stat_ok && S_ISDIR(st.st_mode)) {
		rc = kvt_err(KVT_EINVAL, "%s: a directory, not a trace", path);
		goto out;
	}
	if (stat_ok && f != stdin) {
		rc = read_mapped(&r, fileno(f), &st);
		if (rc == 1 || (rc && r.long_line)) {
			if (rc != 1) {
				/* As a stream, for the stream's message. */
				reader_free(&r);
				plan_trace_free(pt);
				reader_init(&r, path, fmt, block_tokens, max_req, pt);
			}
			rc = 0;
		} else {
			goto out;
		}
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
		/* The whole lines before the NUL, if any, then the NUL. */
		const char *lim = nul ? nul : end;
		const char *last = memrchr(p, '\n', (size_t)(lim - p));
		if (last) {
			rc = reader_lines(&r, p, last + 1);
			p = last + 1;
		}
		if (!rc && !r.full && nul) {
			r.line++;
			rc = bad_line(&r, "a NUL byte: binary data, not a trace");
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
