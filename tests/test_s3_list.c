/*
 * test_s3_list.c — the S3 tier's ListObjectsV2 page parser
 * (kvt_s3_parse_list_page) on pages written out here, no server: what a
 * page hands over (names below the prefix, sizes, times, entities and
 * URL-encoded keys decoded, the token), and the pages it refuses with
 * -EPROTO and a sentence naming the page and what was wrong rather than
 * read in part.
 */
#include <errno.h>
#include <string.h>

#include "test.h"
#include "tier/s3.h"

#define HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>" \
	     "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

struct got {
	int n;
	char names[8][1100];
	uint64_t size[8];
	int64_t mtime[8];
};

static int take(void *arg, const char *key, size_t klen, uint64_t size, int64_t mtime_s)
{
	struct got *g = arg;

	if (g->n >= 8 || strlen(key) != klen)
		return -1;
	snprintf(g->names[g->n], sizeof(g->names[0]), "%s", key);
	g->size[g->n] = size;
	g->mtime[g->n++] = mtime_s;
	return 0;
}

/* Parse `xml` below "kv/" into *g: the parser's code. */
static int parse(const char *xml, struct got *g, int *tr, char *tok, size_t cap)
{
	memset(g, 0, sizeof(*g));
	return kvt_s3_parse_list_page(xml, strlen(xml), "kv/", take, g, tr, tok, cap,
				      "ListObjectsV2 of s3://b/kv/", 7);
}

/* The page is refused with -EPROTO, and the message names the page and
 * says `why`. */
static int refused(const char *xml, const char *why)
{
	struct got g;
	char tok[64];
	int tr = -1, rc = parse(xml, &g, &tr, tok, sizeof(tok));

	if (rc != -EPROTO || g.n != 0 || tr != 0) {
		fprintf(stderr, "not refused (rc %d, %d names, truncated %d): %s\n", rc, g.n,
			tr, xml);
		return 1;
	}
	if (!strstr(kvt_errmsg(), "s3://b/kv/: page 7") || !strstr(kvt_errmsg(), why)) {
		fprintf(stderr, "message '%s' lacks '%s'\n", kvt_errmsg(), why);
		return 1;
	}
	return 0;
}

int main(void)
{
	struct got g;
	char tok[64], big[9000];
	int tr, rc;

	/* A plain page, as s3rver sends it: entities decoded, names outside
	 * the prefix left out, sizes and times read, the token kept. */
	rc = parse(HEAD "<Name>b</Name><Prefix>kv/</Prefix><KeyCount>3</KeyCount>"
		   "<IsTruncated>true</IsTruncated>"
		   "<NextContinuationToken>a+b/c=&amp;d</NextContinuationToken>"
		   "<Contents><Key>kv/ab/x&amp;y.kvt</Key>"
		   "<LastModified>2026-12-01T10:00:00.000Z</LastModified>"
		   "<ETag>&quot;e&quot;</ETag><Size>5000</Size></Contents>"
		   "<Contents><Key>other/z</Key><Size>1</Size></Contents>"
		   "<Contents><Key>kv/%41</Key><Size>7</Size></Contents>"
		   "</ListBucketResult>",
		   &g, &tr, tok, sizeof(tok));
	CHECK_EQ(rc, 0);
	CHECK_EQ(g.n, 2);
	CHECK(!strcmp(g.names[0], "ab/x&y.kvt"));
	CHECK_EQ(g.size[0], 5000);
	CHECK_EQ(g.mtime[0], 1796119200); /* 2026-12-01T10:00:00Z */
	/* Without EncodingType a '%' is a '%'. */
	CHECK(!strcmp(g.names[1], "%41"));
	CHECK_EQ(tr, 1);
	CHECK(!strcmp(tok, "a+b/c=&d"));

	/* encoding-type=url honoured (AWS): keys percent-decoded, the token
	 * not (AWS does not encode it). */
	rc = parse(HEAD "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
		   "<NextContinuationToken>1%2F2</NextContinuationToken>"
		   "<Contents><Key>kv%2Fab%2Fa%20b%26c%0A.kvt</Key><Size>9</Size></Contents>"
		   "<Contents><Key>kv%2F%E2%82%AC</Key><Size>9</Size></Contents>"
		   "<Contents><Key>kv%2Fnul%00</Key><Size>9</Size></Contents>"
		   "</ListBucketResult>",
		   &g, &tr, tok, sizeof(tok));
	CHECK_EQ(rc, 0);
	CHECK_EQ(g.n, 2); /* the name with a NUL is passed over */
	CHECK(!strcmp(g.names[0], "ab/a b&c\n.kvt"));
	CHECK(!strcmp(g.names[1], "\xe2\x82\xac"));
	CHECK(!strcmp(tok, "1%2F2"));

	/* The last page: not truncated, no token needed; CDATA is text. */
	rc = parse(HEAD "<IsTruncated>false</IsTruncated>"
		   "<Contents><Key><![CDATA[kv/c<d]]></Key><Size>3</Size></Contents>"
		   "</ListBucketResult>", &g, &tr, tok, sizeof(tok));
	CHECK_EQ(rc, 0);
	CHECK_EQ(tr, 0);
	CHECK_EQ(g.n, 1);
	CHECK(!strcmp(g.names[0], "c<d"));

	/* What is refused, each naming what was wrong. */
	CHECK_EQ(refused("<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code></Error>",
			 "not a ListBucketResult"), 0);
	CHECK_EQ(refused(HEAD "<Contents><Key>kv/a</Key><Size>1</Size></Contents>",
			 "not well-formed XML"), 0);
	CHECK_EQ(refused(HEAD "<Contents><Key>kv/a</Key><Size>1</Size></Contents>"
			 "</ListBucketResult><x/>", "not well-formed XML"), 0);
	CHECK_EQ(refused(HEAD "<IsTruncated>true</IsTruncated>"
			 "<Contents><Key>kv/a</Key><Size>1</Size></Contents></ListBucketResult>",
			 "IsTruncated=true but gives no NextContinuationToken"), 0);
	CHECK_EQ(refused(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>"
			 "0123456789012345678901234567890123456789012345678901234567890123456789"
			 "</NextContinuationToken></ListBucketResult>",
			 "NextContinuationToken longer than 63 bytes"), 0);
	CHECK_EQ(refused(HEAD "<Contents><Size>1</Size></Contents></ListBucketResult>",
			 "<Contents> without a <Key>"), 0);
	CHECK_EQ(refused(HEAD "<Contents><Key>kv/a</Key><Size>12x</Size></Contents>"
			 "</ListBucketResult>", "Size '12x' that is not a byte count"), 0);
	CHECK_EQ(refused(HEAD "<Contents><Key>kv/a</Key><Size>99999999999999999999</Size>"
			 "</Contents></ListBucketResult>", "not a byte count"), 0);
	CHECK_EQ(refused(HEAD "<EncodingType>url</EncodingType><Contents><Key>kv%2Fa%G1</Key>"
			 "<Size>1</Size></Contents></ListBucketResult>",
			 "Key that is not URL-encoded"), 0);
	CHECK_EQ(refused(HEAD "<EncodingType>base64</EncodingType></ListBucketResult>",
			 "EncodingType 'base64'"), 0);
	CHECK_EQ(refused("<!DOCTYPE l [<!ENTITY a \"aaaa\">]>"
			 "<ListBucketResult><Contents><Key>&a;</Key></Contents></ListBucketResult>",
			 "DOCTYPE"), 0);
	CHECK_EQ(refused(HEAD "<Contents><Key>kv/<b>x</b></Key></Contents></ListBucketResult>",
			 "inside a text field"), 0);
	/* A key longer than S3 allows (1024 bytes) is refused, not cut. */
	{
		int o = snprintf(big, sizeof(big), HEAD "<Contents><Key>kv/");
		memset(big + o, 'k', 1100);
		o += 1100;
		snprintf(big + o, sizeof(big) - (size_t)o,
			 "</Key><Size>1</Size></Contents></ListBucketResult>");
		CHECK_EQ(refused(big, "Key of 1103 bytes (S3's longest is 1024)"), 0);
	}
	/* A NUL inside the page. */
	{
		static const char nul[] = HEAD "<Contents><Key>kv/a\0b</Key></Contents></ListBucketResult>";
		struct got g2 = { 0 };
		rc = kvt_s3_parse_list_page(nul, sizeof(nul) - 1, "kv/", take, &g2, &tr, tok,
					    sizeof(tok), "w", 2);
		CHECK_EQ(rc, -EPROTO);
		CHECK(strstr(kvt_errmsg(), "NUL byte") != NULL);
		CHECK_EQ(g2.n, 0);
	}
	/* fn's own nonzero code stops the page and is returned as it is. */
	{
		static const char one[] = HEAD "<Contents><Key>kv/a</Key><Size>1</Size>"
					  "</Contents></ListBucketResult>";
		struct got g3 = { .n = 8 }; /* take() refuses: full */
		rc = kvt_s3_parse_list_page(one, sizeof(one) - 1, "kv/", take, &g3, &tr, tok,
					    sizeof(tok), "w", 3);
		CHECK_EQ(rc, -1);
	}
	TEST_DONE();
}
