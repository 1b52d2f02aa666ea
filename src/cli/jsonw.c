/*
 * jsonw.c — JSON output helpers (jsonw.h).
 */
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"

json_t *cli_json_str(const char *v)
{
	json_t *j = json_string(v);
	if (j)
		return j;
	char *c = strdup(v);
	for (char *p = c; p && *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = c ? json_string(c) : NULL;
	free(c);
	return j;
}

json_t *cli_json_fixed(double v, int dec)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%.*f", dec, v);
	return json_real(strtod(buf, NULL));
}

json_t *cli_json_uint(uint64_t v)
{
	return json_integer((json_int_t)v);
}

char *cli_json_text(json_t *doc)
{
	/* 15 significant digits print a number rounded to a few decimals
	 * back as written; 17 would show its binary tail. */
	char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
	json_decref(doc);
	if (!text)
		text = strdup("{}");
	if (!text)
		return NULL;
	size_t n = strlen(text);
	char *out = realloc(text, n + 2);
	if (!out) {
		free(text);
		return NULL;
	}
	memcpy(out + n, "\n", 2);
	return out;
}

int cli_json_write(json_t *doc, FILE *f)
{
	char *t = cli_json_text(doc);
	if (!t)
		return -1;
	fputs(t, f);
	free(t);
	return 0;
}
