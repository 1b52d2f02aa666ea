/*
 * s3_list.c — the listing of the S3 tier's prefix (s3_int.h):
 * kvt_s3_parse_list_page reads one ListObjectsV2 page, s3_list walks the
 * pages.  A listing is bounded by a deadline, a page limit and a set of the
 * continuation tokens already given: an endpoint that answers IsTruncated
 * with a token it gave before would otherwise keep us listing forever.
 */
#include "tier/s3_int.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <expat.h>
#include <xxhash.h>

#include "common/hex.h"

static int64_t s3_parse_time(const char *s)
{
	struct tm tm;
	unsigned y, mo, d, h, mi, sec;

	/* Fixed-width fields, each in range: a server's bytes must not reach
	 * an int overflow or timegm's undefined corners. */
	memset(&tm, 0, sizeof(tm));
	if (strlen(s) < 19 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
	    s[13] != ':' || s[16] != ':')
		return 0;
	for (int i = 0; i < 19; i++)
		if (i != 4 && i != 7 && i != 10 && i != 13 && i != 16 &&
		    (s[i] < '0' || s[i] > '9'))
			return 0;
	if (sscanf(s, "%4u-%2u-%2uT%2u:%2u:%2u", &y, &mo, &d, &h, &mi, &sec) != 6 ||
	    y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
	    sec > 60)
		return 0;
	tm.tm_year = (int)y - 1900;
	tm.tm_mon = (int)mo - 1;
	tm.tm_mday = (int)d;
	tm.tm_hour = (int)h;
	tm.tm_min = (int)mi;
	tm.tm_sec = (int)sec;
	return (int64_t)timegm(&tm);
}

/* The continuation tokens one listing has been given, as 64-bit XXH3
 * hashes in an open-addressed set (0 marks a free slot).  A collision could
 * only end a listing early with a clear error, at odds of about n^2 / 2^65:
 * 3e-12 at the default page limit. */
typedef struct s3_tokset {
	uint64_t *h;
	uint32_t *page; /* the page that first gave each token */
	size_t cap, n;
} s3_tokset;

/* Add `tok`, given by page `page`.  0 if new, else the page that gave it
 * before (>0), or KVT_ENOMEM. */
static long s3_tokset_add(s3_tokset *s, const char *tok, uint32_t page)
{
	uint64_t h = XXH3_64bits(tok, strlen(tok));
	size_t i;

	if (!h)
		h = 1;
	if (2 * (s->n + 1) > s->cap) {
		size_t nc = s->cap ? 2 * s->cap : 64, j;
		uint64_t *nh = calloc(nc, sizeof(*nh));
		uint32_t *np = calloc(nc, sizeof(*np));
		if (!nh || !np) {
			free(nh);
			free(np);
			return KVT_ENOMEM;
		}
		for (j = 0; j < s->cap; j++) {
			if (!s->h[j])
				continue;
			for (i = s->h[j] & (nc - 1); nh[i]; i = (i + 1) & (nc - 1))
				;
			nh[i] = s->h[j];
			np[i] = s->page[j];
		}
		free(s->h);
		free(s->page);
		s->h = nh;
		s->page = np;
		s->cap = nc;
	}
	for (i = h & (s->cap - 1); s->h[i]; i = (i + 1) & (s->cap - 1))
		if (s->h[i] == h)
			return (long)s->page[i];
	s->h[i] = h;
	s->page[i] = page;
	s->n++;
	return 0;
}

/* --- one page, read with expat --------------------------------------------
 *
 * The page is parsed whole before fn sees any of it, so a page that is not
 * well-formed XML hands over nothing.  With encoding-type=url (which the
 * listing asks for: a name may hold characters XML 1.0 cannot carry) AWS
 * percent-encodes Key, Prefix, Delimiter and StartAfter and says so with
 * <EncodingType>url</EncodingType>; the token is not encoded.  An endpoint
 * that ignores the parameter (s3rver, whose getBucket leaves it
 * unimplemented) sends no EncodingType, and its keys are taken as they are.
 * Only the Key of each Contents is used here.
 */

#define S3_KEY_MAX 1024              /* S3's longest key, in bytes */
#define S3_TEXT_MAX (3 * S3_KEY_MAX) /* the same, percent-encoded */

enum { LP_NONE, LP_KEY, LP_SIZE, LP_MTIME, LP_TRUNC, LP_TOKEN, LP_ENC };

typedef struct s3_lp_obj {
	size_t off, len; /* of its Key in names */
	uint64_t size;
	int64_t mtime_s;
} s3_lp_obj;

typedef struct s3_lp {
	XML_Parser xp;
	const char *where;
	unsigned page;
	int rc;                /* the first error, with its message */
	int depth, in_contents, field;
	char text[S3_TOKEN_MAX + S3_TEXT_MAX + 1]; /* the field being read */
	size_t tlen;
	int text_long;         /* it ran past text */
	/* the Contents being read */
	int has_key, has_size;
	size_t key_off, key_len;
	uint64_t size;
	char mtime[32];
	/* the page */
	char trunc[8], enc[16];
	int has_token;
	char *token;
	size_t token_cap;
	s3_lp_obj *obj;
	size_t nobj, capobj;
	char *names;
	size_t nnames, capnames;
} s3_lp;

/* Stop the parse with -EPROTO and a sentence (the first error wins). */
KVT_PRINTF(2, 3)
static void s3_lp_fail(s3_lp *lp, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (lp->rc)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	lp->rc = kvt_err(-EPROTO, "%s: page %u %s", lp->where, lp->page, msg);
	XML_StopParser(lp->xp, XML_FALSE);
}

/* An element's name without its namespace prefix, if any. */
static const char *s3_lp_local(const XML_Char *name)
{
	const char *c = strrchr(name, ':');

	return c ? c + 1 : name;
}

static void XMLCALL s3_lp_start(void *u, const XML_Char *name, const XML_Char **attr)
{
	s3_lp *lp = u;
	const char *n = s3_lp_local(name);

	(void)attr;
	lp->depth++;
	if (lp->depth == 1) {
		if (strcmp(n, "ListBucketResult"))
			s3_lp_fail(lp, "is not a ListBucketResult: its root element is <%.80s>", n);
		return;
	}
	if (lp->field != LP_NONE) {
		s3_lp_fail(lp, "has an element <%.80s> inside a text field", n);
		return;
	}
	if (lp->depth == 2) {
		if (!strcmp(n, "Contents")) {
			lp->in_contents = 1;
			lp->has_key = lp->has_size = 0;
			lp->size = 0;
			lp->mtime[0] = '\0';
		} else if (!strcmp(n, "IsTruncated")) {
			lp->field = LP_TRUNC;
		} else if (!strcmp(n, "NextContinuationToken")) {
			lp->field = LP_TOKEN;
		} else if (!strcmp(n, "EncodingType")) {
			lp->field = LP_ENC;
		}
	} else if (lp->depth == 3 && lp->in_contents) {
		if (!strcmp(n, "Key"))
			lp->field = LP_KEY;
		else if (!strcmp(n, "Size"))
			lp->field = LP_SIZE;
		else if (!strcmp(n, "LastModified"))
			lp->field = LP_MTIME;
	}
	lp->tlen = 0;
	lp->text_long = 0;
}

static void XMLCALL s3_lp_text(void *u, const XML_Char *s, int n)
{
	s3_lp *lp = u;
	size_t room = sizeof(lp->text) - 1 - lp->tlen;

	if (lp->field == LP_NONE || n <= 0)
		return;
	if ((size_t)n > room) {
		lp->text_long = 1;
		n = (int)room;
	}
	memcpy(lp->text + lp->tlen, s, (size_t)n);
	lp->tlen += (size_t)n;
	lp->text[lp->tlen] = '\0';
}

/* Append the Key just read to names: 0, or the error recorded. */
static int s3_lp_key(s3_lp *lp)
{
	if (lp->text_long || lp->tlen > S3_TEXT_MAX) {
		s3_lp_fail(lp, "has a Key of more than %d bytes: '%.80s...'", S3_TEXT_MAX,
			   lp->text);
		return -1;
	}
	if (lp->nnames + lp->tlen + 1 > lp->capnames) {
		size_t nc = lp->capnames ? 2 * lp->capnames : 65536;
		char *nn;
		while (nc < lp->nnames + lp->tlen + 1)
			nc *= 2;
		nn = realloc(lp->names, nc);
		if (!nn) {
			lp->rc = KVT_ENOMEM;
			XML_StopParser(lp->xp, XML_FALSE);
			return -1;
		}
		lp->names = nn;
		lp->capnames = nc;
	}
	memcpy(lp->names + lp->nnames, lp->text, lp->tlen + 1);
	lp->key_off = lp->nnames;
	lp->key_len = lp->tlen;
	lp->nnames += lp->tlen + 1;
	lp->has_key = 1;
	return 0;
}

/* Copy a short field's text to out (cap bytes), refusing one longer. */
static void s3_lp_short(s3_lp *lp, const char *what, char *out, size_t cap)
{
	if (lp->text_long || lp->tlen >= cap) {
		s3_lp_fail(lp, "has a %s of more than %zu bytes: '%.40s...'", what, cap - 1,
			   lp->text);
		return;
	}
	memcpy(out, lp->text, lp->tlen + 1);
}

static void s3_lp_field_end(s3_lp *lp)
{
	char sz[24];
	size_t i;

	switch (lp->field) {
	case LP_KEY:
		s3_lp_key(lp);
		break;
	case LP_SIZE:
		s3_lp_short(lp, "Size", sz, sizeof(sz));
		if (lp->rc)
			break;
		lp->size = 0;
		for (i = 0; sz[i]; i++) {
			if (sz[i] < '0' || sz[i] > '9' || lp->size > (UINT64_MAX - 9) / 10) {
				s3_lp_fail(lp, "has a Size '%s' that is not a byte count", sz);
				return;
			}
			lp->size = lp->size * 10 + (uint64_t)(sz[i] - '0');
		}
		if (!i)
			s3_lp_fail(lp, "has an empty Size");
		lp->has_size = 1;
		break;
	case LP_MTIME:
		s3_lp_short(lp, "LastModified", lp->mtime, sizeof(lp->mtime));
		break;
	case LP_TRUNC:
		s3_lp_short(lp, "IsTruncated", lp->trunc, sizeof(lp->trunc));
		break;
	case LP_ENC:
		s3_lp_short(lp, "EncodingType", lp->enc, sizeof(lp->enc));
		break;
	case LP_TOKEN:
		if (lp->text_long || lp->tlen >= lp->token_cap) {
			s3_lp_fail(lp, "gives a NextContinuationToken longer than %zu bytes",
				   lp->token_cap - 1);
			break;
		}
		memcpy(lp->token, lp->text, lp->tlen + 1);
		lp->has_token = 1;
		break;
	}
}

static void XMLCALL s3_lp_end(void *u, const XML_Char *name)
{
	s3_lp *lp = u;

	(void)name;
	if (lp->field != LP_NONE) {
		s3_lp_field_end(lp);
		lp->field = LP_NONE;
	} else if (lp->depth == 2 && lp->in_contents) {
		lp->in_contents = 0;
		if (!lp->has_key) {
			s3_lp_fail(lp, "has a <Contents> without a <Key>");
		} else if (lp->nobj == lp->capobj) {
			size_t nc = lp->capobj ? 2 * lp->capobj : 1024;
			s3_lp_obj *no = realloc(lp->obj, nc * sizeof(*no));
			if (!no) {
				lp->rc = KVT_ENOMEM;
				XML_StopParser(lp->xp, XML_FALSE);
			} else {
				lp->obj = no;
				lp->capobj = nc;
			}
		}
		if (!lp->rc) {
			s3_lp_obj *o = &lp->obj[lp->nobj++];
			o->off = lp->key_off;
			o->len = lp->key_len;
			o->size = lp->size;
			o->mtime_s = s3_parse_time(lp->mtime);
		}
	}
	lp->depth--;
}

/* A DTD could declare entities that expand a page past any bound: an S3
 * answer has none. */
static void XMLCALL s3_lp_doctype(void *u, const XML_Char *name, const XML_Char *sysid,
				  const XML_Char *pubid, int has_internal)
{
	(void)name;
	(void)sysid;
	(void)pubid;
	(void)has_internal;
	s3_lp_fail(u, "has a DOCTYPE, which no S3 answer carries");
}

/* Percent-decode s[0..n) in place: its new length, or -1 for a '%' not
 * followed by two hex digits. */
static long s3_url_decode(char *s, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		if (s[i] == '%') {
			int hi, lo;
			if (i + 2 >= n)
				return -1;
			hi = kvt_hex_nibble(s[i + 1], 1);
			lo = kvt_hex_nibble(s[i + 2], 1);
			if (hi < 0 || lo < 0)
				return -1;
			s[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			s[o++] = s[i];
		}
	}
	s[o] = '\0';
	return (long)o;
}

int kvt_s3_parse_list_page(const char *xml, size_t len, const char *prefix,
			   s3_list_fn fn, void *arg, int *truncated, char *token,
			   size_t token_cap, const char *where, unsigned page)
{
	size_t plen = strlen(prefix), i;
	s3_lp *lp;
	int rc = 0, url;

	*truncated = 0;
	token[0] = '\0';
	/* expat would stop there too, but say so plainly. */
	if (strlen(xml) != len)
		return kvt_err(-EPROTO, "%s: page %u holds a NUL byte at %zu of %zu",
			       where, page, strlen(xml), len);
	if (len > INT_MAX)
		return kvt_err(-EPROTO, "%s: page %u is %zu bytes, too long to be one page",
			       where, page, len);
	lp = calloc(1, sizeof(*lp));
	if (!lp)
		return KVT_ENOMEM;
	lp->where = where;
	lp->page = page;
	lp->token = token;
	lp->token_cap = token_cap;
	lp->xp = XML_ParserCreate("UTF-8");
	if (!lp->xp) {
		free(lp);
		return KVT_ENOMEM;
	}
	XML_SetUserData(lp->xp, lp);
	XML_SetElementHandler(lp->xp, s3_lp_start, s3_lp_end);
	XML_SetCharacterDataHandler(lp->xp, s3_lp_text);
	XML_SetStartDoctypeDeclHandler(lp->xp, s3_lp_doctype);
	if (XML_Parse(lp->xp, xml, (int)len, XML_TRUE) == XML_STATUS_ERROR && !lp->rc)
		lp->rc = kvt_err(-EPROTO, "%s: page %u is not well-formed XML (line %lu, column %lu: %s): '%.80s'",
				 where, page, (unsigned long)XML_GetCurrentLineNumber(lp->xp),
				 (unsigned long)XML_GetCurrentColumnNumber(lp->xp),
				 XML_ErrorString(XML_GetErrorCode(lp->xp)), xml);
	rc = lp->rc;
	url = !strcmp(lp->enc, "url");
	if (!rc && lp->enc[0] && !url)
		rc = kvt_err(-EPROTO, "%s: page %u has EncodingType '%s'; only 'url' is understood",
			     where, page, lp->enc);
	if (!rc) {
		*truncated = !strcmp(lp->trunc, "true");
		if (*truncated && (!lp->has_token || !token[0]))
			rc = kvt_err(-EPROTO,
				     "%s: page %u says IsTruncated=true but gives no "
				     "NextContinuationToken: the rest cannot be listed",
				     where, page);
	}
	for (i = 0; !rc && i < lp->nobj; i++) {
		char *key = lp->names + lp->obj[i].off;
		long kl = (long)lp->obj[i].len;
		if (url && (kl = s3_url_decode(key, lp->obj[i].len)) < 0) {
			rc = kvt_err(-EPROTO, "%s: page %u has a Key that is not URL-encoded: '%.80s'",
				     where, page, key);
			break;
		}
		if ((size_t)kl > S3_KEY_MAX) {
			rc = kvt_err(-EPROTO, "%s: page %u has a Key of %ld bytes (S3's longest is %d)",
				     where, page, kl, S3_KEY_MAX);
			break;
		}
		/* A name with a NUL (%00) is not one kvtier makes, and fn takes
		 * strings: it is passed over like any foreign object. */
		if (strlen(key) != (size_t)kl)
			continue;
		if ((size_t)kl < plen || memcmp(key, prefix, plen))
			continue;
		rc = fn(arg, key + plen, (size_t)kl - plen, lp->obj[i].size, lp->obj[i].mtime_s);
	}
	if (rc) {
		*truncated = 0;
		token[0] = '\0';
	}
	XML_ParserFree(lp->xp);
	free(lp->obj);
	free(lp->names);
	free(lp);
	return rc;
}

/* Walk every object below the prefix, 1000 a page, within the listing's
 * deadline and page limit; *pages (may be NULL) counts the pages read.  An
 * error ends the walk: the caller must not take what it saw for the whole
 * prefix. */
int s3_list(s3_tier *t, s3_list_fn fn, void *arg, uint64_t *pages)
{
	/* Large buffers on the heap: tokens can be long, and percent-encoding
	 * triples them. */
	struct {
		char token[S3_TOKEN_MAX], enc_tok[3 * S3_TOKEN_MAX];
		char enc_pre[3 * S3_NAME_MAX], query[3 * S3_TOKEN_MAX + 3 * S3_NAME_MAX + 64];
		char where[S3_NAME_MAX + 256];
	} *b = calloc(1, sizeof(*b));
	int64_t deadline = s3_now_ms() + t->list_timeout_ms;
	s3_tokset seen = { 0 };
	uint32_t page;
	int rc = 0;

	if (pages)
		*pages = 0;
	if (!b)
		return KVT_ENOMEM;
	snprintf(b->where, sizeof(b->where), "S3 ListObjectsV2 of s3://%s/%s at %s",
		 t->bucket, t->prefix, t->endpoint);
	s3_uri_encode(t->prefix, b->enc_pre, sizeof(b->enc_pre));
	for (page = 1; !rc; page++) {
		int64_t now = s3_now_ms(), page_deadline = now + t->timeout_ms;
		s3_req r;
		long first = 0;
		int tr = 0;

		if (page > t->list_max_pages) {
			rc = kvt_err(KVT_ETOOBIG,
				     "%s: more than %u pages (list_max_pages): stopped at the page limit",
				     b->where, t->list_max_pages);
			break;
		}
		if (now >= deadline) {
			rc = kvt_err(KVT_ETIMEDOUT,
				     "%s: listing deadline of %d ms passed after %u page(s)",
				     b->where, t->list_timeout_ms, page - 1);
			break;
		}
		if (page_deadline > deadline)
			page_deadline = deadline;
		s3_uri_encode(b->token, b->enc_tok, sizeof(b->enc_tok));
		snprintf(b->query, sizeof(b->query), "%s%s%sencoding-type=url&list-type=2&prefix=%s",
			 b->token[0] ? "continuation-token=" : "",
			 b->token[0] ? b->enc_tok : "", b->token[0] ? "&" : "",
			 b->enc_pre);
		/* base_url has the bucket; the list goes to ".../bucket?..." */
		rc = s3_req_init(t, &r, "GET", "", b->query);
		snprintf(r.obj, sizeof(r.obj), "%s", t->prefix);
		if (!rc)
			rc = s3_one_by(t, &r, "ListObjectsV2", page_deadline);
		if (rc == KVT_ETIMEDOUT && page_deadline == deadline && page > 1)
			kvt_err_prefix(rc, "listing deadline of %d ms passed at page %u: ",
				       t->list_timeout_ms, page);
		if (!rc) {
			uint8_t *nb = realloc(r.buf, r.len + 1);
			if (nb) {
				r.buf = nb;
				r.buf[r.len] = '\0';
			} else {
				rc = KVT_ENOMEM;
			}
		}
		if (rc) {
			s3_req_fini(&r);
			break;
		}
		if (!r.buf || !strstr((char *)r.buf, "<ListBucketResult")) {
			rc = kvt_err(-EPROTO, "%s: page %u is not a ListBucketResult: '%.80s'",
				     b->where, page, r.buf ? (char *)r.buf : "");
			s3_req_fini(&r);
			break;
		}
		rc = r.buf ? kvt_s3_parse_list_page((const char *)r.buf, r.len, t->prefix, fn,
						    arg, &tr, b->token, sizeof(b->token),
						    b->where, page)
			   : kvt_err(-EPROTO, "%s: page %u is empty", b->where, page);
		if (!rc && tr && (first = s3_tokset_add(&seen, b->token, page)) > 0)
			rc = kvt_err(-EPROTO,
				     "%s: page %u repeats NextContinuationToken '%.200s' "
				     "first given by page %ld: the endpoint's listing loops; stopped",
				     b->where, page, b->token, first);
		else if (!rc && tr && first < 0)
			rc = (int)first;
		s3_req_fini(&r);
		if (pages)
			*pages = page;
		if (!tr)
			break;
	}
	free(seen.h);
	free(seen.page);
	free(b);
	return rc;
}
