/*
 * test.h — the little harness every C test uses.
 *
 * A test is a program: exit 0 pass, 1 fail, 77 skip.  CHECK records a
 * failure with its line and carries on, so one run reports every broken
 * expectation; TEST_DONE() turns the tally into the exit code.
 */
#ifndef KVT_TEST_H
#define KVT_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"

static int test_failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                            \
			test_failures++;                                     \
		}                                                            \
	} while (0)

/* Compare two ints and show both when they differ (error codes mostly). */
#define CHECK_EQ(a, b)                                                       \
	do {                                                                 \
		long long _a = (long long)(a), _b = (long long)(b);          \
		if (_a != _b) {                                              \
			fprintf(stderr,                                      \
				"%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld; %s | %s) %s\n", \
				__FILE__, __LINE__, #a, #b, _a, _b,          \
				kvt_strerror((int)_a), kvt_strerror((int)_b), \
				kvt_errmsg());                               \
			test_failures++;                                     \
		}                                                            \
	} while (0)

/* Skip what the machine cannot do; checks that already failed are not
 * hidden by the skip: the test then fails. */
#define SKIP(...)                                                            \
	do {                                                                 \
		fprintf(stderr, "SKIP: " __VA_ARGS__);                       \
		fputc('\n', stderr);                                         \
		if (test_failures) {                                         \
			fprintf(stderr, "%d check(s) failed before the skip\n", \
				test_failures);                              \
			exit(1);                                             \
		}                                                            \
		exit(77);                                                    \
	} while (0)

#define TEST_DONE()                                                          \
	do {                                                                 \
		if (test_failures) {                                         \
			fprintf(stderr, "%d check(s) failed\n", test_failures); \
			return 1;                                            \
		}                                                            \
		return 0;                                                    \
	} while (0)

/* A deterministic byte pattern for payloads: every chunk distinct. */
static inline void test_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	unsigned char *p = buf;
	size_t i;
	for (i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (; i < len; i++)
		p[i] = (unsigned char)(x >> (8 * (i & 7)));
}

#endif
