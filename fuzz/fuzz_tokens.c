/*
 * fuzz_tokens.c — libFuzzer target for the command line's token-file
 * reader (cli_read_tokens, src/cli/common.c) and its bounded file reader
 * (cli_read_file_max).
 *
 * `kvtier hash|put|get|lookup --tokens FILE` read prompts as token ids
 * from a file the user names.  The reader streams it byte by byte, so the
 * input is given to it as a file: a memfd, opened by its /proc/self/fd
 * name (nothing is written to any file system).
 *
 * The outcome is checked against the grammar cli.h states, decided here
 * independently: the file holds only ASCII digits, white space, commas
 * and brackets; every integer is below 2^32; and with the separators
 * removed it is either integers alone or '[' integers ']' (an unclosed '['
 * is refused).  Accepted, the ids are the file's runs of digits in order.
 * cli_read_file_max with a bound of the input's first byte reads the file
 * back byte for byte exactly when it is no longer than the bound.
 *
 * The CLI is not part of the library, so its one shared file is compiled
 * in, as tests/test_input.c does.  Its refusals are printed to stderr for
 * users; here the stdio stream is pointed at /dev/null (the sanitizers
 * and libFuzzer write their reports on their own).
 *
 *   ./fuzz_tokens -max_len=4096 fuzz/corpus/tokens
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_memfile.h"
#include "cli/common.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_memfile mem = { -1, "" };

static void setup(void)
{
	FILE *null = fopen("/dev/null", "w");

	if (!null)
		abort();
	stderr = null;
	fuzz_memfile_open(&mem, "fuzz_tokens");
}


static int is_sep(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' ||
	       c == ',';
}

/* 1 if `d` is a token file by the grammar above, 0 if not.  *n counts
 * its integers. */
static int grammar(const uint8_t *d, size_t len, size_t *n)
{
	int state = 0; /* 0 before anything, 1 integers alone, 2 in [, 3 after ] */

	*n = 0;
	for (size_t i = 0; i < len;) {
		uint8_t c = d[i];
		if (is_sep(c)) {
			i++;
		} else if (c >= '0' && c <= '9') {
			uint64_t v = 0;
			if (state == 3)
				return 0;
			for (; i < len && d[i] >= '0' && d[i] <= '9'; i++)
				if ((v = v * 10 + (d[i] - '0')) > UINT32_MAX)
					return 0;
			(*n)++;
			if (state == 0)
				state = 1;
		} else if (c == '[') {
			if (state != 0)
				return 0;
			state = 2;
			i++;
		} else if (c == ']') {
			if (state != 2)
				return 0;
			state = 3;
			i++;
		} else {
			return 0;
		}
	}
	return state != 2;
}

static void check_ids(const uint8_t *d, size_t len, const uint32_t *t, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < len;) {
		if (d[i] < '0' || d[i] > '9') {
			i++;
			continue;
		}
		uint64_t v = 0;
		for (; i < len && d[i] >= '0' && d[i] <= '9'; i++)
			v = v * 10 + (d[i] - '0');
		if (k >= n || t[k++] != v)
			abort();
	}
	if (k != n)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t *tok = NULL;
	uint8_t *back = NULL;
	size_t n = 0, want, blen = 0, max;
	int ok, rc;

	if (mem.fd < 0)
		setup();
	fuzz_memfile_fill(&mem, data, size);

	ok = grammar(data, size, &want);
	rc = cli_read_tokens(mem.path, &tok, &n);
	if (rc != 0 && rc != -1)
		abort();
	if (ok != (rc == 0))
		abort();
	if (rc == 0) {
		if (n != want)
			abort();
		check_ids(data, size, tok, n);
		free(tok);
	}

	max = size ? data[0] : 0;
	rc = cli_read_file_max(mem.path, max, &back, &blen);
	if ((rc == 0) != (size <= max))
		abort();
	if (rc == 0) {
		if (blen != size || (size && memcmp(back, data, size)))
			abort();
		free(back);
	}
	return 0;
}
