/*
 * kvtier/units.h — sizes and durations as configurations and
 * programs' options spell them, and sizes written for people.
 *
 * For programs built on the library (kvtier, kvtierd); kvtier.h does not
 * include this file.
 */
#ifndef KVTIER_UNITS_H
#define KVTIER_UNITS_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The grammar of every size in a configuration, and of tools' size options:
 * "64GiB", "1.5GB", "512MiB", "4096" (units B, KB/MB/GB/TB in powers of
 * 1000, KiB/MiB/GiB/TiB and K/M/G/T in powers of 1024, any case; a bare
 * number counts units of `bare_unit` bytes, LMCache's sizes being GiB; a
 * fraction needs a unit of KiB/KB or more).  0 with *out set, or
 * KVT_ECONFIG with kvt_errmsg() naming the value and the accepted forms
 * (no sign, exponent, hex, leading zero or overflow).  Thread-safe; no pointer may be NULL. */
KVT_API int kvt_parse_size(const char *s, uint64_t bare_unit, uint64_t *out);

/* The grammar of every duration (ttl, gc --ttl): "3600", "90s", "90m",
 * "1.5h", "7d", "2w", in whole seconds (rounded down), at most 100 years.
 * 0 with *out set, or KVT_ECONFIG with kvt_errmsg() naming the value and
 * the forms.  Thread-safe; no pointer may be NULL. */
KVT_API int kvt_parse_duration(const char *s, uint64_t *out);

/* Format a byte count for people ("1.50 GiB") into buf; returns buf. */
KVT_API const char *kvt_fmt_size(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_UNITS_H */
