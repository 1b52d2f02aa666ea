/*
 * units.h — numbers, sizes and durations as configurations and programs'
 * options spell them (units.c).  kvt_parse_size, kvt_parse_duration and
 * kvt_fmt_size are declared with the rest of the library's calls.
 */
#ifndef KVT_UNITS_H
#define KVT_UNITS_H

#include <stdint.h>

#include "kvtier.h"
#include "kvtier/units.h"

/* A whole number in lo..hi: decimal digits, no sign, no leading zero, no
 * fraction.  0 with *out set, or KVT_ECONFIG with the error naming the
 * value and the range (a caller's prefix names the key). */
int kvt_parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out);

#endif
