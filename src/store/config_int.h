/*
 * config_int.h — what config.c shares with the reader of configuration
 * files (config_yaml.c): finding a key by name and applying a value to it,
 * and adding a tenant.
 */
#ifndef KVT_STORE_CONFIG_INT_H
#define KVT_STORE_CONFIG_INT_H

#include "store/config.h"

/* What a key is: a row of the store's or a tier's table, or a tier's
 * policy knob. */
struct config_found {
	const kvt_config_key *key;
	const struct policy_knob *knob;
	int tier; /* KVT_CT_* of the knob */
};

/* 1 with *f if `name` is a key, else 0. */
int config_find(const char *name, struct config_found *f);
/* What a value of the key should look like, for a message. */
const char *config_expect(const struct config_found *f);
/* Set the key to `v` in `c`: 0 or KVT_ECONFIG with a message. */
int config_apply(const struct config_found *f, kvt_config *c, const char *v);
/* Add tenant `name` with a secret of 16..64 bytes given in hex. */
int config_add_tenant(kvt_config *c, const char *name, const char *hex);

#endif
