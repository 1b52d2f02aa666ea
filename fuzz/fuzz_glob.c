/*
 * fuzz_glob.c — libFuzzer target for the readers of kvtierd's command
 * arguments that values.c holds: the glob matcher (SCAN MATCH;
 * vals_glob), whose patterns come from clients, and the expiry arithmetic
 * (SET EX/PX/EXAT/PXAT, EXPIRE, PEXPIRE; vals_expiry_ms).
 *
 * The input is a pattern and a subject, split at the first 0 byte.
 * Checked for every input:
 *  - the answer equals the plain recursive matcher's below (Redis's
 *    semantics: * ? [..] [^..] ranges, \ escapes, an unclosed class running
 *    to the end), where the subject and pattern are short enough for that
 *    one to finish;
 *  - the steps the matcher may take stay within |p|·|s| + |p| + |s|: no
 *    input makes it exponential (a pattern of many stars over a long key is
 *    the case CVE-2022-36021 was about), checked by the wall clock on long
 *    inputs.
 *
 *  - an expiry is the exact product and sum (checked in 128 bits) when
 *    both fit in 64 bits, else INT64_MIN (refused): the first 17 bytes of
 *    an input are also read as (t, now, sec and at), and UBSan stops any
 *    overflow.
 *
 *   ./fuzz_glob -max_len=4096 fuzz/corpus/glob
 */
#include <time.h>

#include "daemon/log.c"
#include "daemon/values.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The reference: the obvious recursion, exponential on adversarial input
 * and therefore only run on short ones. */
static int ref_glob(const char *p, size_t pl, const char *s, size_t sl)
{
	while (pl) {
		if (*p == '*') {
			for (size_t i = 0; i <= sl; i++)
				if (ref_glob(p + 1, pl - 1, s + i, sl - i))
					return 1;
			return 0;
		}
		if (!sl)
			return 0;
		size_t len;
		if (!glob_token(p, pl, (unsigned char)*s, &len))
			return 0;
		p += len;
		pl -= len;
		s++;
		sl--;
	}
	return sl == 0;
}

static void check_expiry(const uint8_t *data, size_t size)
{
	long long t;
	int64_t now;

	if (size < 17)
		return;
	memcpy(&t, data, 8);
	memcpy(&now, data + 8, 8);
	now &= INT64_MAX; /* a clock reading: not negative */
	int sec = data[16] & 1, at = (data[16] >> 1) & 1;
	__int128 ms = (__int128)t * (sec ? 1000 : 1), want = ms + (at ? 0 : now);
	int64_t got = vals_expiry_ms(t, sec, at, now);
	int fits = ms >= INT64_MIN && ms <= INT64_MAX && want >= INT64_MIN && want <= INT64_MAX;
	if (fits ? got != (int64_t)want : got != INT64_MIN)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_expiry(data, size);
	const uint8_t *zero = memchr(data, 0, size);
	size_t pl = zero ? (size_t)(zero - data) : size;
	const char *p = (const char *)data, *s = zero ? (const char *)zero + 1 : "";
	size_t sl = zero ? size - pl - 1 : 0;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	int got = vals_glob(p, pl, s, sl);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* |p|·|s| steps of a few ns; a second is far past any of them. */
	if (t1.tv_sec - t0.tv_sec > 1 && (double)pl * sl < 1e7)
		abort();
	if (pl <= 12 && sl <= 24 && ref_glob(p, pl, s, sl) != got) {
		fprintf(stderr, "glob \"%.*s\" on \"%.*s\": %d, the reference says %d\n", (int)pl,
			p, (int)sl, s, got, !got);
		abort();
	}
	return 0;
}
