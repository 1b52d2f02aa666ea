/*
 * s3_list.c — the listing of the S3 tier's prefix (s3_int.h):
 * kvt_s3_parse_list_page reads one ListObjectsV2 page, s3_list walks the
 * pages.  A listing is bounded by a deadline, a page limit and a set of the
 * continuation tokens already given: an endpoint that answers IsTruncated
 * with a token it gave before would otherwise keep us listing forever.
 */
#include "tier/s3_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

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

/* Walk every object below the prefix, 1000 a page, within the listing's
 * deadline and page limit; *pages (may be NULL) counts the pages read.  An
 * error ends the walk: the caller must not take what it saw for the whole
 * prefix. */
int kvt_s3_parse_list_page(const char *xml, size_t len, const char *prefix,
			   s3_list_fn fn, void *arg, int *truncated, char *token,
			   size_t token_cap, const char *where, unsigned page)
{
	size_t plen = strlen(prefix);
	char trunc[16] = "";
	const char *p;
	int rc = 0;

	*truncated = 0;
	token[0] = '\0';
	/* A NUL would end every search below early and silently. */
	if (strlen(xml) != len)
		return kvt_err(-EPROTO, "%s: page %u holds a NUL byte at %zu of %zu",
			       where, page, strlen(xml), len);
	if (!strstr(xml, "<ListBucketResult"))
		return kvt_err(-EPROTO, "%s: page %u is not a ListBucketResult: '%.80s'",
			       where, page, xml);
	s3_xml_tag(xml, "IsTruncated", trunc, sizeof(trunc));
	*truncated = !strcmp(trunc, "true");
	if (*truncated) {
		int got = s3_xml_tag(xml, "NextContinuationToken", token, token_cap);
		s3_xml_unescape(token);
		if (got == -2)
			return kvt_err(-EPROTO,
				       "%s: page %u gives a NextContinuationToken longer than %zu bytes",
				       where, page, token_cap - 1);
		if (got || !token[0])
			return kvt_err(-EPROTO,
				       "%s: page %u says IsTruncated=true but gives no "
				       "NextContinuationToken: the rest cannot be listed",
				       where, page);
	}
	for (p = xml; !rc && (p = strstr(p, "<Contents>"));) {
		const char *end = strstr(p, "</Contents>");
		char blk[8192], key[1100], sz[32] = "0", lm[64] = "";
		size_t bl;
		if (!end)
			return kvt_err(-EPROTO, "%s: page %u ends inside a <Contents> element",
				       where, page);
		bl = (size_t)(end - p);
		if (bl >= sizeof(blk))
			return kvt_err(-EPROTO, "%s: page %u has a <Contents> element of %zu bytes (at most %zu)",
				       where, page, bl, sizeof(blk) - 1);
		memcpy(blk, p, bl);
		blk[bl] = '\0';
		p = end;
		if (s3_xml_tag(blk, "Key", key, sizeof(key)))
			continue;
		s3_xml_unescape(key);
		s3_xml_tag(blk, "Size", sz, sizeof(sz));
		s3_xml_tag(blk, "LastModified", lm, sizeof(lm));
		if (strncmp(key, prefix, plen))
			continue;
		rc = fn(arg, key + plen, strlen(key + plen), strtoull(sz, NULL, 10),
			s3_parse_time(lm));
	}
	return rc;
}

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
		snprintf(b->query, sizeof(b->query), "%s%s%slist-type=2&prefix=%s",
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
