/*
 * jsonw.h — writing JSON with jansson, the way `kvtier plan` and `kvtier
 * replay` report: every string escaped whatever it holds, numbers shown
 * with the decimals the text output uses.
 */
#ifndef KVT_CLI_JSONW_H
#define KVT_CLI_JSONW_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

/* A string as JSON; one that is not UTF-8 (a path can be any bytes) with
 * each byte past ASCII shown as '?': reported, not round-tripped. */
json_t *cli_json_str(const char *v);

/* v as %.<dec>f shows it: the number printf rounds it to. */
json_t *cli_json_fixed(double v, int dec);

json_t *cli_json_uint(uint64_t v);

/* Write doc compactly and a newline to f, then drop it; a NULL doc (a
 * failed json_pack) writes "{}".  0, or -1 if out of memory. */
int cli_json_write(json_t *doc, FILE *f);

/* The same into a string the caller frees (NULL: out of memory). */
char *cli_json_text(json_t *doc);

#endif
