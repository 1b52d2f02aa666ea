/*
 * config_yaml.c — configuration files: a YAML mapping of the keys
 * kvt_config_set takes (docs/CONFIG.md), with the tenants as a list and
 * kv_events as a mapping.  Built with libyaml (CMake KVT_YAML, on by
 * default); without it kvt_config_parse refuses every document with a
 * message saying so, and a store is configured with kvt_config_set and
 * KVTIER_* variables alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "store/config.h"
#include "store/config_int.h"

#ifdef KVT_HAVE_YAML
#include <yaml.h>

/* A key given twice in one mapping is refused: libyaml keeps both pairs,
 * and whichever a reader takes, one of the two lines the user wrote is
 * silently ignored.  `p` is a pair of mapping `map`; the earlier pairs are
 * compared with it (configurations are a few dozen keys). */
static int yaml_no_duplicate(yaml_document_t *doc, yaml_node_t *map,
			     yaml_node_pair_t *p, const char *name)
{
	yaml_node_t *k = yaml_document_get_node(doc, p->key);

	for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
		yaml_node_t *e = yaml_document_get_node(doc, q->key);
		if (e && e->type == YAML_SCALAR_NODE &&
		    !strcmp((char *)e->data.scalar.value, (char *)k->data.scalar.value))
			return kvt_err(KVT_ECONFIG,
				       "%s:%zu: %s: given twice (first on line %zu); each key once",
				       name, k->start_mark.line + 1,
				       (char *)k->data.scalar.value, e->start_mark.line + 1);
	}
	return 0;
}

/* One key: value pair of the configuration, `key` a row's name. */
static int yaml_scalar(kvt_config *c, const char *key, size_t line, yaml_node_t *v,
		       const char *name)
{
	struct config_found f;
	int rc;

	if (!config_find(key, &f))
		return kvt_err(KVT_ECONFIG, "%s:%zu: unknown key \"%s\"", name, line, key);
	if (v->type != YAML_SCALAR_NODE)
		return kvt_err(KVT_ECONFIG, "%s:%zu: %s: expected %s, not a %s",
			       name, v->start_mark.line + 1, key, config_expect(&f),
			       v->type == YAML_MAPPING_NODE ? "mapping" : "list");
	/* A quoted "\0" would cut the value short unseen: "/tmp/a\0/../x"
	 * is not "/tmp/a". */
	if (strlen((const char *)v->data.scalar.value) != v->data.scalar.length)
		return kvt_err(KVT_ECONFIG, "%s:%zu: %s: the value holds a NUL byte",
			       name, v->start_mark.line + 1, key);
	if ((rc = config_apply(&f, c, (const char *)v->data.scalar.value)))
		return kvt_err_prefix(rc, "%s:%zu: %s: ", name, v->start_mark.line + 1, key);
	return 0;
}

/* kv_events: {publisher: zmq, endpoint: ..., ...}, vLLM's --kv-events-config
 * as a mapping: each key is the row kv_events_<key>. */
static int yaml_kv_events(kvt_config *c, yaml_document_t *doc, yaml_node_t *map,
			  const char *name)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(doc, p->key);
		yaml_node_t *v = yaml_document_get_node(doc, p->value);
		char key[64];
		int rc;

		if (!k || !v || k->type != YAML_SCALAR_NODE)
			return kvt_err(KVT_ECONFIG, "%s: kv_events: keys must be plain scalars", name);
		if ((rc = yaml_no_duplicate(doc, map, p, name)))
			return rc;
		if (snprintf(key, sizeof(key), "kv_events_%s", (const char *)k->data.scalar.value) >=
		    (int)sizeof(key))
			return kvt_err(KVT_ECONFIG, "%s:%zu: kv_events: unknown key \"%s\"", name,
				       k->start_mark.line + 1, (const char *)k->data.scalar.value);
		if ((rc = yaml_scalar(c, key, k->start_mark.line + 1, v, name)))
			return rc;
	}
	return 0;
}

static int yaml_tenants(kvt_config *c, yaml_document_t *doc, yaml_node_t *seq,
			const char *name)
{
	if (seq->type != YAML_SEQUENCE_NODE)
		return kvt_err(KVT_ECONFIG,
			       "%s:%zu: tenants: expected a list of {name, secret}",
			       name, seq->start_mark.line + 1);
	for (yaml_node_item_t *it = seq->data.sequence.items.start;
	     it < seq->data.sequence.items.top; it++) {
		yaml_node_t *t = yaml_document_get_node(doc, *it);
		const char *tname = NULL, *secret = NULL;
		int rc;

		if (!t || t->type != YAML_MAPPING_NODE)
			return kvt_err(KVT_ECONFIG,
				       "%s:%zu: tenant: expected a mapping {name, secret}",
				       name, t ? t->start_mark.line + 1 : 0);
		for (yaml_node_pair_t *p = t->data.mapping.pairs.start;
		     p < t->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);
			yaml_node_t *v = yaml_document_get_node(doc, p->value);
			if (!k || !v || k->type != YAML_SCALAR_NODE ||
			    v->type != YAML_SCALAR_NODE)
				return kvt_err(KVT_ECONFIG, "%s:%zu: tenant: expected scalars",
					       name, t->start_mark.line + 1);
			if ((rc = yaml_no_duplicate(doc, t, p, name)))
				return rc;
			if (!strcmp((char *)k->data.scalar.value, "name"))
				tname = (char *)v->data.scalar.value;
			else if (!strcmp((char *)k->data.scalar.value, "secret"))
				secret = (char *)v->data.scalar.value;
			else
				return kvt_err(KVT_ECONFIG,
					       "%s:%zu: tenant: unknown key \"%s\" (expected name, secret)",
					       name, k->start_mark.line + 1,
					       (char *)k->data.scalar.value);
		}
		if ((rc = config_add_tenant(c, tname, secret)))
			return kvt_err_prefix(rc, "%s:%zu: ", name, t->start_mark.line + 1);
	}
	return 0;
}

static int yaml_apply(kvt_config *c, yaml_document_t *doc, const char *name)
{
	yaml_node_t *root = yaml_document_get_root_node(doc);

	if (!root)
		return 0; /* an empty file: every default */
	if (root->type != YAML_MAPPING_NODE)
		return kvt_err(KVT_ECONFIG, "%s:%zu: expected a mapping of key: value",
			       name, root->start_mark.line + 1);
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
	     p < root->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(doc, p->key);
		yaml_node_t *v = yaml_document_get_node(doc, p->value);
		const char *key;
		size_t line;
		int rc;

		if (!k || !v || k->type != YAML_SCALAR_NODE)
			return kvt_err(KVT_ECONFIG, "%s: keys must be plain scalars", name);
		key = (const char *)k->data.scalar.value;
		line = k->start_mark.line + 1;
		if ((rc = yaml_no_duplicate(doc, root, p, name)))
			return rc;
		if (!strcmp(key, "tenants")) {
			if ((rc = yaml_tenants(c, doc, v, name)))
				return rc;
			continue;
		}
		if (!strcmp(key, "kv_events") && v->type == YAML_MAPPING_NODE) {
			if ((rc = yaml_kv_events(c, doc, v, name)))
				return rc;
			continue;
		}
		if ((rc = yaml_scalar(c, key, line, v, name)))
			return rc;
	}
	return 0;
}

kvt_config *kvt_config_parse(const char *yaml, size_t len, const char *name,
			     int *err)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	kvt_config *c;
	int rc = 0;

	if (!name)
		name = "(config)";
	c = kvt_config_new();
	if (!c) {
		rc = kvt_err(KVT_ENOMEM, "out of memory");
		goto out;
	}
	if (!yaml_parser_initialize(&parser)) {
		rc = kvt_err(KVT_ENOMEM, "cannot initialise the YAML parser");
		goto out;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
	if (!yaml_parser_load(&parser, &doc)) {
		rc = kvt_err(KVT_ECONFIG, "%s:%zu:%zu: YAML: %s", name,
			     parser.problem_mark.line + 1,
			     parser.problem_mark.column + 1,
			     parser.problem ? parser.problem : "syntax error");
		yaml_parser_delete(&parser);
		goto out;
	}
	/* A configuration is one document: a "---" starting a second one is
	 * usually two files pasted together, and the second would be ignored. */
	{
		yaml_document_t next;
		if (!yaml_parser_load(&parser, &next)) {
			rc = kvt_err(KVT_ECONFIG, "%s:%zu:%zu: YAML: %s", name,
				     parser.problem_mark.line + 1,
				     parser.problem_mark.column + 1,
				     parser.problem ? parser.problem : "syntax error");
		} else {
			if (yaml_document_get_root_node(&next))
				rc = kvt_err(KVT_ECONFIG,
					     "%s:%zu: a second YAML document; a configuration is one mapping",
					     name, next.start_mark.line + 1);
			yaml_document_delete(&next);
		}
	}
	if (!rc)
		rc = yaml_apply(c, &doc, name);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
out:
	if (rc) {
		kvt_config_free(c);
		c = NULL;
	}
	if (err)
		*err = rc;
	return c;
}

#else /* !KVT_HAVE_YAML */

kvt_config *kvt_config_parse(const char *yaml, size_t len, const char *name,
			     int *err)
{
	int rc = kvt_err(KVT_ENOTSUP, "%s: this kvtier was built without configuration files "
			 "(CMake KVT_YAML=OFF): set keys with kvt_config_set or KVTIER_* variables",
			 name ? name : "configuration");

	(void)yaml;
	(void)len;
	if (err)
		*err = rc;
	return NULL;
}

#endif
