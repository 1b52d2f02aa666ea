/*
 * fuzz_config.c — libFuzzer target for the configuration readers.
 *
 * A configuration is a YAML file a user writes (kvt_config_load reads it
 * whole and hands it to kvt_config_parse), single keys set by an
 * embedding program or `--set key=value` (kvt_config_set), and KVTIER_*
 * variables, which take the same path as kvt_config_set.
 *
 * The input is used twice:
 *  1. whole, as a YAML document: kvt_config_parse returns a configuration
 *     exactly when it reports 0, and one it returns resolves namespaces
 *     (kvt_config_ns, also under its first tenant) without crashing;
 *  2. as lines of key=value, each given to kvt_config_set on a fresh
 *     configuration and, in turn, to one configuration that keeps them all
 *     (so that tenants pile up to their bound and setters see each other's
 *     state).  Where the key is a plain name and the value printable ASCII,
 *     the same pair written as YAML (`key: "value"`) must give the same
 *     outcome: both accept and give byte-identical configurations, or both
 *     refuse with the same sentence after YAML's "name:line: " (config.c
 *     promises that the file and kvt_config_set take exactly the same
 *     keys with exactly the same errors).  `tenants` is left out of this
 *     comparison: its YAML form is a list, not name=hex.  Each value is
 *     also read as a size (kvt_parse_size): a size accepted is read back
 *     the same from its decimal byte count.
 *
 * config.c is compiled into this file rather than linked from the library
 * archive, which is built without coverage instrumentation.
 *
 *   ./fuzz_config -max_len=4096 fuzz/corpus/config
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/units.h"
#include "store/config.c"

#define GiB (1024ull * 1024 * 1024) /* LMCache's bare sizes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_PAIRS 64
#define ERR_CUT 500 /* kvt_errmsg() holds 511 characters */

static void try_ns(const kvt_config *c)
{
	kvt_ns_desc d;
	kvt_ns ns;

	memset(&d, 0, sizeof(d));
	d.model = "fuzz-model";
	d.layout.num_layers = 2;
	d.layout.num_kv_heads = 1;
	d.layout.head_dim = 64;
	d.layout.dtype = KVT_DTYPE_BF16;
	d.layout.kv_planes = 2;
	kvt_config_ns(c, &d, &ns);
	if (c->n_tenants) {
		d.tenant = c->tenants[0].name;
		if (kvt_config_ns(c, &d, &ns) == KVT_ETENANT)
			abort(); /* a tenant the configuration holds is found */
	}
}

static int plain_key(const char *k)
{
	if (!*k || strlen(k) > 63)
		return 0;
	for (; *k; k++)
		if (!((*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '_'))
			return 0;
	return 1;
}

static int printable(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 || (unsigned char)*v > 0x7e)
			return 0;
	return 1;
}

/* `key: "value"`, the value escaped for a double-quoted YAML scalar. */
static char *as_yaml(const char *key, const char *v, size_t *len)
{
	size_t cap = strlen(key) + 2 * strlen(v) + 8, n;
	char *y = malloc(cap);

	if (!y)
		abort();
	n = (size_t)sprintf(y, "%s: \"", key);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			y[n++] = '\\';
		y[n++] = *v;
	}
	y[n++] = '"';
	y[n++] = '\n';
	y[n] = '\0';
	*len = n;
	return y;
}

static void check_size(const char *v)
{
	char again[32];
	uint64_t a, b;

	if (kvt_parse_size(v, 1, &a) == 0) {
		snprintf(again, sizeof(again), "%llu", (unsigned long long)a);
		if (kvt_parse_size(again, 1, &b) || a != b)
			abort();
		kvt_fmt_size(a, again, sizeof(again));
	}
	if (kvt_parse_size(v, GiB, &a) == 0 && kvt_parse_size(v, 1, &b) == 0 && a != b &&
	    (b > UINT64_MAX / GiB || a != b * GiB))
		abort(); /* only a bare number differs, and by the bare unit */
}

static void one_pair(kvt_config *acc, const char *key, const char *value)
{
	static char msg_set[2048];
	kvt_config *c = kvt_config_new(), *y;
	int rc, ry;

	if (!c)
		abort();
	rc = kvt_config_set(c, key, value);
	if (rc && rc != KVT_ECONFIG && rc != KVT_ENOMEM)
		abort();
	snprintf(msg_set, sizeof(msg_set), "%s", rc ? kvt_errmsg() : "");
	kvt_config_set(acc, key, value);
	check_size(value);

	if (plain_key(key) && strcmp(key, "tenants") && printable(value)) {
		size_t ylen, ml, sl = strlen(msg_set);
		char *yaml = as_yaml(key, value, &ylen);
		const char *m;

		y = kvt_config_parse(yaml, ylen, "fuzz", &ry);
		if (!y != !!rc || (y && ry))
			abort();
		if (y) {
			if (memcmp(c, y, sizeof(*c)))
				abort();
			kvt_config_free(y);
		} else {
			m = kvt_errmsg();
			ml = strlen(m);
			/* "fuzz:1: " + the same sentence; kvt_config_set
			 * names the key, YAML the line too.  Unless the
			 * sentence filled the 512-byte detail and was cut. */
			if (ml < ERR_CUT && sl < ERR_CUT &&
			    (ml < sl || strcmp(m + ml - sl, msg_set) ||
			     strncmp(m, "fuzz:1: ", 8)))
				abort();
		}
		free(yaml);
	}
	kvt_config_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvt_config *c, *acc;
	char *text, *line, *save = NULL;
	int err = 1, pairs = 0;

	c = kvt_config_parse((const char *)data, size, "fuzz", &err);
	if (!c != !!err || (err && err != KVT_ECONFIG && err != KVT_ENOMEM))
		abort();
	if (c) {
		try_ns(c);
		kvt_config_free(c);
	}

	/* key=value lines, as C strings (a NUL ends a value early, as it
	 * would for a caller of kvt_config_set). */
	text = malloc(size + 1);
	acc = kvt_config_new();
	if (!text || !acc)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	for (line = strtok_r(text, "\n", &save); line && pairs < FUZZ_MAX_PAIRS;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		one_pair(acc, line, eq + 1);
		pairs++;
	}
	try_ns(acc);
	kvt_config_free(acc);
	free(text);
	return 0;
}
