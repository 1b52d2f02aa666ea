/*
 * test_data.h — where a C test finds the data the repository ships.
 *
 * Everything a test reads lives under tests/data/ (its provenance in a
 * README beside it).  CTest passes the directory as $KVT_TEST_DATA; a test
 * run by hand from the source tree finds it next to this header.  Data that
 * is missing is a broken checkout, not a machine without a capability: the
 * test fails, it does not skip.
 */
#ifndef KVT_TEST_DATA_H
#define KVT_TEST_DATA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* <data dir>/<rel> into buf. */
static inline const char *test_data_path(const char *rel, char *buf, size_t len)
{
	const char *env = getenv("KVT_TEST_DATA");
	const char *here = __FILE__, *slash = strrchr(here, '/');

	if (env && env[0])
		snprintf(buf, len, "%s/%s", env, rel);
	else if (slash)
		snprintf(buf, len, "%.*s/data/%s", (int)(slash - here), here, rel);
	else
		snprintf(buf, len, "data/%s", rel);
	return buf;
}

/* The whole of <data dir>/<rel>, NUL-terminated (caller frees); exits 1
 * naming the path if it cannot be read. */
static inline char *test_data_read(const char *rel, size_t *len)
{
	char path[4096];
	FILE *f = fopen(test_data_path(rel, path, sizeof(path)), "rb");
	char *buf = NULL;
	long n;

	if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = '\0';
		*len = (size_t)n;
		fclose(f);
		return buf;
	}
	fprintf(stderr, "FAIL: test data %s cannot be read: the repository ships it under tests/data\n",
		path);
	free(buf);
	if (f)
		fclose(f);
	exit(1);
}

#endif
