/*
 * json.h — the one JSON reader of kvtier-bench: a number at a path in a
 * document another program printed (fio's --output-format=json).
 *
 * Not a parser to build on: it walks the text once, skipping what the path
 * does not name, and never allocates.  Strings are skipped, not decoded, so
 * a path component must match a key byte for byte (no escapes in keys).
 */
#ifndef KVT_BENCH_JSON_H
#define KVT_BENCH_JSON_H

#include <stddef.h>

/* The number at `path` in the JSON text doc[0..len): components separated
 * by '.', a decimal component indexing an array ("jobs.0.read.bw_bytes").
 * Text before the first '{' or '[' is skipped (programs print notes ahead
 * of their JSON).  0, or -1 if the path is absent, is not a number, or the
 * text is not JSON as far as the walk reads it. */
int bench_json_number(const char *doc, size_t len, const char *path, double *out);

#endif
