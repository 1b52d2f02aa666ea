/*
 * hex.h — the one hex codec (keys, file and object names, digests in
 * messages) and the one 64-bit mixer (hash tables over ids and keys).
 */
#ifndef KVT_HEX_H
#define KVT_HEX_H

#include <stddef.h>
#include <stdint.h>

/* n bytes as 2n lower-case hex digits and a NUL into out. */
void kvt_hex_encode(const uint8_t *b, size_t n, char *out);

/* The value of one hex digit, or -1; upper case only if `upper_ok` (names
 * we write are lower case: anything else is not ours). */
int kvt_hex_nibble(char c, int upper_ok);

/* 2n hex digits at s into n bytes: 0, or -1 at the first non-digit. */
int kvt_hex_decode(const char *s, uint8_t *out, size_t n, int upper_ok);

/* splitmix64's finaliser: spreads small sequential ids and keys sharing a
 * prefix over every bucket. */
static inline uint64_t kvt_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

#endif
