/*
 * json.c — a number at a path in a JSON document (json.h).
 */
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define MAX_DEPTH 64

struct rd {
	const char *p, *end;
};

static void ws(struct rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static int at(struct rd *r, char c)
{
	ws(r);
	return r->p < r->end && *r->p == c;
}

/* At an opening quote: past the closing one.  0 or -1. */
static int skip_string(struct rd *r)
{
	for (r->p++; r->p < r->end; r->p++) {
		if (*r->p == '\\') {
			r->p++;
		} else if (*r->p == '"') {
			r->p++;
			return 0;
		}
	}
	return -1;
}

static int skip_value(struct rd *r, int depth)
{
	ws(r);
	if (r->p >= r->end || depth > MAX_DEPTH)
		return -1;
	if (*r->p == '"')
		return skip_string(r);
	if (*r->p == '{' || *r->p == '[') {
		char close = *r->p == '{' ? '}' : ']';

		r->p++;
		if (at(r, close)) {
			r->p++;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				if (!at(r, '"') || skip_string(r) || !at(r, ':'))
					return -1;
				r->p++;
			}
			if (skip_value(r, depth + 1))
				return -1;
			if (at(r, ',')) {
				r->p++;
			} else if (at(r, close)) {
				r->p++;
				return 0;
			} else {
				return -1;
			}
		}
	}
	/* A number or a literal: up to the next delimiter. */
	while (r->p < r->end && !strchr(",}] \t\r\n", *r->p))
		r->p++;
	return 0;
}

/* Step into the member (object) or element (array) `comp` names. */
static int descend(struct rd *r, const char *comp, size_t n)
{
	if (at(r, '{')) {
		r->p++;
		if (at(r, '}'))
			return -1;
		for (;;) {
			const char *key;
			int match;

			if (!at(r, '"'))
				return -1;
			key = r->p + 1;
			if (skip_string(r))
				return -1;
			match = (size_t)(r->p - 1 - key) == n && !memcmp(key, comp, n);
			if (!at(r, ':'))
				return -1;
			r->p++;
			if (match)
				return 0;
			if (skip_value(r, 0))
				return -1;
			if (!at(r, ','))
				return -1; /* '}' or junk: not there */
			r->p++;
		}
	}
	if (at(r, '[')) {
		unsigned long idx = 0;

		if (n == 0 || n > 9)
			return -1;
		for (size_t i = 0; i < n; i++) {
			if (comp[i] < '0' || comp[i] > '9')
				return -1;
			idx = idx * 10 + (unsigned long)(comp[i] - '0');
		}
		r->p++;
		if (at(r, ']'))
			return -1;
		for (unsigned long i = 0; i < idx; i++) {
			if (skip_value(r, 0) || !at(r, ','))
				return -1;
			r->p++;
		}
		return 0;
	}
	return -1;
}

int bench_json_number(const char *doc, size_t len, const char *path, double *out)
{
	struct rd r = { doc, doc + len };
	char num[64], *stop;
	size_t n;

	while (r.p < r.end && *r.p != '{' && *r.p != '[')
		r.p++;
	while (*path) {
		n = strcspn(path, ".");
		if (descend(&r, path, n))
			return -1;
		path += n + (path[n] == '.');
	}
	ws(&r);
	for (n = 0; r.p + n < r.end && n < sizeof(num) - 1 && strchr("+-.0123456789eE", r.p[n]); n++)
		num[n] = r.p[n];
	num[n] = '\0';
	if (!n || (num[0] != '-' && (num[0] < '0' || num[0] > '9')))
		return -1;
	*out = strtod(num, &stop);
	return *stop ? -1 : 0;
}
