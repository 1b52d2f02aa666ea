/*
 * fuzz_s3_list.c — libFuzzer target for the S3 tier's ListObjectsV2 page
 * parser (kvt_s3_parse_list_page, src/tier/s3_list.c).
 *
 * A listing page is bytes an endpoint chose: the bucket's lookup index is
 * built from them.  The input is one page; each object handed back must
 * lie inside the page, be named below the prefix, and a truncated page
 * must come with a non-empty token that fits.  Errors are fine; crashes,
 * overruns and leaks are not.
 *
 *   ./fuzz_s3_list -max_len=16384 fuzz/corpus/s3_list
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier/s3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
	size_t n;
	uint64_t bytes;
};

static int one(void *arg, const char *key, size_t klen, uint64_t size, int64_t mtime_s)
{
	struct seen *s = arg;

	(void)mtime_s;
	if (strlen(key) != klen)
		abort(); /* the name handed back is exactly klen bytes */
	s->n++;
	s->bytes += size;
	return s->n > 100000; /* a stop from fn is returned as it is */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *xml = malloc(size + 1), token[256];
	struct seen s = { 0, 0 };
	int truncated = -1, rc;

	if (!xml)
		return 0;
	memcpy(xml, data, size);
	xml[size] = '\0';
	rc = kvt_s3_parse_list_page(xml, size, "kv/", one, &s, &truncated, token,
				    sizeof(token), "fuzz", 1);
	if (rc == 0 && truncated && (!token[0] || strlen(token) >= sizeof(token)))
		abort(); /* a page that goes on says where */
	if (truncated != 0 && truncated != 1)
		abort();
	free(xml);
	return 0;
}
