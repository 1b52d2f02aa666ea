/*
 * hex.c — the hex codec; see hex.h.
 */
#include "common/hex.h"

void kvt_hex_encode(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int kvt_hex_nibble(char c, int upper_ok)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (upper_ok && c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int kvt_hex_decode(const char *s, uint8_t *out, size_t n, int upper_ok)
{
	for (size_t i = 0; i < n; i++) {
		int hi = kvt_hex_nibble(s[2 * i], upper_ok);
		int lo = hi < 0 ? -1 : kvt_hex_nibble(s[2 * i + 1], upper_ok);
		if (lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}
