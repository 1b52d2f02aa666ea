/*
 * config.c — defaults, YAML files, single keys and KVTIER_* overrides.
 *
 * Every key is a row of a table: the store's own here (config_keys), each
 * tier kind's in its registry entry (store/tiers.h), and the policy knobs
 * every tier has (<tier>_eviction, ...), so that the YAML file,
 * kvt_config_set and the environment accept exactly the same keys and give
 * exactly the same errors, and this file names no tier.
 */
#include "store/config.h"
#include "store/config_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/err.h"
#include "common/units.h"
#include "key/key.h"
#include "store/tiers.h"
#include "kvtier/units.h"


kvt_config *kvt_config_new(void)
{
	kvt_config *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->chunk_size = 256;
	c->hash_scheme = KVT_HASH_SHA256;
	c->workers = 4;
	/* vLLM's --kv-events-config defaults */
	snprintf(c->kv_events.endpoint, sizeof(c->kv_events.endpoint), "tcp://*:5557");
	c->kv_events.buffer_steps = 10000;
	c->kv_events.hwm = 100000;
	c->kv_events.max_queue = 100000;
	for (int i = 0; i < KVT_CT_KINDS; i++) {
		c->tier[i].eviction = 1; /* LRU: docs/POLICIES.md */
		c->tier[i].write = KVT_WRITE_THROUGH;
	}
	for (int i = 0; kvt_tier_classes[i]; i++) /* each kind's own defaults */
		kvt_tier_classes[i]->defaults(c);
	return c;
}

void kvt_config_free(kvt_config *cfg)
{
	if (cfg) /* tenant secrets, the object authentication key */
		OPENSSL_cleanse(cfg, sizeof(*cfg));
	free(cfg);
}

static int parse_bool(const char *v, int *out)
{
	if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
	    !strcasecmp(v, "on") || !strcmp(v, "1"))
		*out = 1;
	else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") ||
		 !strcasecmp(v, "off") || !strcmp(v, "0"))
		*out = 0;
	else
		return kvt_err(KVT_ECONFIG, "\"%s\" is not a boolean (true or false)", v);
	return 0;
}

static int hex_decode(const char *s, uint8_t *out, size_t max, uint32_t *len)
{
	size_t n = strlen(s);
	if (n % 2 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned int b;
		if (!isxdigit((unsigned char)s[2 * i]) ||
		    !isxdigit((unsigned char)s[2 * i + 1]) ||
		    sscanf(s + 2 * i, "%2x", &b) != 1)
			return -1;
		out[i] = (uint8_t)b;
	}
	*len = (uint32_t)(n / 2);
	return 0;
}

const kvt_tenant *kvt_config_tenant(const kvt_config *cfg, const char *name)
{
	for (uint32_t i = 0; i < cfg->n_tenants; i++)
		if (!strcmp(cfg->tenants[i].name, name))
			return &cfg->tenants[i];
	return NULL;
}

/* Add a tenant: a name and a secret of 16..64 bytes given in hex.  Secrets
 * shorter than 128 bits would let a tenant's keys be brute-forced. */
int config_add_tenant(kvt_config *c, const char *name, const char *hex)
{
	kvt_tenant *t;

	if (!name || !*name || strlen(name) >= KVT_TENANT_NAME_MAX)
		return kvt_err(KVT_ECONFIG, "tenant name must be 1..%d bytes",
			       KVT_TENANT_NAME_MAX - 1);
	if (kvt_config_tenant(c, name))
		return kvt_err(KVT_ECONFIG, "tenant \"%s\" defined twice", name);
	if (c->n_tenants == KVT_MAX_TENANTS)
		return kvt_err(KVT_ECONFIG, "more than %d tenants", KVT_MAX_TENANTS);
	t = &c->tenants[c->n_tenants];
	if (!hex || hex_decode(hex, t->secret, sizeof(t->secret), &t->secret_len) ||
	    t->secret_len < 16)
		return kvt_err(KVT_ECONFIG,
			       "tenant \"%s\": secret must be 32..128 hex digits (16..64 bytes)",
			       name);
	snprintf(t->name, sizeof(t->name), "%s", name);
	c->n_tenants++;
	return 0;
}

/* "name=hexsecret,name2=hexsecret" — the form KVTIER_TENANTS takes. */
static int set_tenants(kvt_config *c, const char *v)
{
	char *copy = strdup(v), *save = NULL, *item;
	uint32_t before = c->n_tenants;
	int rc = 0;

	if (!copy)
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (item = strtok_r(copy, ",", &save); item && !rc;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		if (!eq) {
			rc = kvt_err(KVT_ECONFIG, "tenant \"%s\": expected name=hexsecret",
				     item);
			break;
		}
		*eq = '\0';
		rc = config_add_tenant(c, item, eq + 1);
	}
	memset(copy, 0, strlen(v));
	free(copy);
	if (rc) { /* all or nothing: forget the tenants this value added */
		memset(&c->tenants[before], 0,
		       sizeof(c->tenants[0]) * (c->n_tenants - before));
		c->n_tenants = before;
	}
	return rc;
}

int kvt_config_size_min(const char *v, uint64_t bare_unit, uint64_t lo, uint64_t *out)
{
	uint64_t n = 0;
	int rc = kvt_parse_size(v, bare_unit, &n);
	char a[32];
	if (rc)
		return rc;
	if (n < lo)
		return kvt_err(KVT_ECONFIG, "\"%s\" is below the minimum of %s", v,
			       kvt_fmt_size(lo, a, sizeof(a)));
	*out = n;
	return 0;
}

/* An absolute directory, or "file:///path" as LMCache writes it; "" or
 * "null" turns the tier off. */
static int parse_dir(const char *v, char *out, size_t len)
{
	const char *p = strncmp(v, "file://", 7) ? v : v + 7;
	if (!strcasecmp(v, "null") || !strcasecmp(v, "none") || !*v) {
		out[0] = '\0';
		return 0;
	}
	if (*p != '/')
		return kvt_err(KVT_ECONFIG, "\"%s\" must be an absolute path", v);
	if (strlen(p) >= len)
		return kvt_err(KVT_ECONFIG, "path longer than %zu bytes", len - 1);
	snprintf(out, len, "%s", p);
	return 0;
}

int kvt_config_key_set(const kvt_config_key *k, kvt_config *c, const char *v)
{
	char *f = (char *)c + k->off;
	uint32_t u;

	/* A row whose field is not of its type is a bug in a table, caught
	 * by the first use of the key (test_config sets every key). */
	switch (k->type) {
	case KVT_CK_BOOL:
		if (k->len != sizeof(int))
			break;
		return parse_bool(v, (int *)(void *)f);
	case KVT_CK_U32:
		if (k->len != sizeof(uint32_t))
			break;
		if (kvt_parse_u32(v, (uint32_t)k->lo, (uint32_t)k->hi, &u))
			return KVT_ECONFIG;
		memcpy(f, &u, sizeof(u));
		return 0;
	case KVT_CK_SIZE:
		if (k->len != sizeof(uint64_t))
			break;
		return kvt_config_size_min(v, k->hi, k->lo, (uint64_t *)(void *)f);
	case KVT_CK_DIR:
		return parse_dir(v, f, k->len);
	case KVT_CK_STR:
		if (strlen(v) >= k->len)
			return kvt_err(KVT_ECONFIG, "longer than %zu bytes", k->len - 1);
		snprintf(f, k->len, "%s", v);
		return 0;
	case KVT_CK_FN:
		return k->set(c, v);
	}
	return kvt_err(KVT_EINVAL, "%s: the key table gives a field of the wrong type", k->name);
}


/* The key every node sharing a tier must hold: hex, 16..64 bytes. */
static int set_object_auth_key(kvt_config *c, const char *v)
{
	if (!*v || !strcasecmp(v, "none") || !strcasecmp(v, "null")) {
		c->object_auth_key_len = 0;
		return 0;
	}
	if (hex_decode(v, c->object_auth_key, sizeof(c->object_auth_key),
		       &c->object_auth_key_len) ||
	    c->object_auth_key_len < 16) {
		c->object_auth_key_len = 0;
		return kvt_err(KVT_ECONFIG, "object_auth_key must be 32..128 hex digits (16..64 bytes)");
	}
	return 0;
}

static int set_hash(kvt_config *c, const char *v)
{
	if (!strcasecmp(v, "sha256"))
		c->hash_scheme = KVT_HASH_SHA256;
	else if (!strcasecmp(v, "xxh3"))
		c->hash_scheme = KVT_HASH_XXH3;
	else
		return kvt_err(KVT_ECONFIG, "\"%s\": hash must be sha256 or xxh3", v);
	return 0;
}

/* --- the hierarchy: the same policy knobs for every tier ------------------ */

static int parse_eviction(const char *v, uint32_t *out)
{
	if (!strcasecmp(v, "lru"))
		*out = 1;
	else if (!strcasecmp(v, "s3fifo") || !strcasecmp(v, "s3-fifo"))
		*out = 2;
	else
		return kvt_err(KVT_ECONFIG, "\"%s\": eviction must be lru or s3fifo", v);
	return 0;
}

/* always | never | tinylfu | seen:N (admit on the N-th sighting, 2..15) */
static int parse_admission(const char *v, struct kvt_tier_conf *t)
{
	uint32_t n;

	t->admit_seen = 0;
	if (!strcasecmp(v, "always")) {
		t->admit_rules = 0;
	} else if (!strcasecmp(v, "never")) {
		t->admit_rules = 1u << 0;
	} else if (!strcasecmp(v, "tinylfu")) {
		t->admit_rules = 1u << 2;
	} else if (!strncasecmp(v, "seen:", 5)) {
		if (kvt_parse_u32(v + 5, 2, 15, &n))
			return kvt_err(KVT_ECONFIG,
				       "\"%s\": seen:N needs N from 2 to 15", v);
		t->admit_rules = 1u << 1;
		t->admit_seen = n;
	} else {
		return kvt_err(KVT_ECONFIG,
			       "\"%s\": admission must be always, never, tinylfu or seen:N", v);
	}
	return 0;
}

static int parse_write(const char *v, uint32_t *out)
{
	if (!strcasecmp(v, "through") || !strcasecmp(v, "write-through"))
		*out = KVT_WRITE_THROUGH;
	else if (!strcasecmp(v, "back") || !strcasecmp(v, "write-back"))
		*out = KVT_WRITE_BACK;
	else if (!strcasecmp(v, "none"))
		*out = KVT_WRITE_NONE;
	else
		return kvt_err(KVT_ECONFIG, "\"%s\": write must be through, back or none", v);
	return 0;
}

static int set_eviction(struct kvt_tier_conf *t, const char *v)
{
	return parse_eviction(v, &t->eviction);
}
/* A whole number lo..hi for the knob `what`. */
static int knob_u32(const char *v, const char *what, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, 10);
	if (!*v || *end || v[0] == '-' || v[0] == '+' || errno || n < lo || n > hi)
		return kvt_err(KVT_ECONFIG, "\"%s\": %s must be a whole number %u..%u", v, what,
			       lo, hi);
	*out = (uint32_t)n;
	return 0;
}
static int set_s3fifo_small(struct kvt_tier_conf *t, const char *v)
{
	return knob_u32(v, "the S3-FIFO small queue's percent", 1, 90, &t->s3_small_pct);
}
static int set_s3fifo_promote(struct kvt_tier_conf *t, const char *v)
{
	return knob_u32(v, "the S3-FIFO promotion's hits", 1, 3, &t->s3_promote);
}
static int set_admission(struct kvt_tier_conf *t, const char *v)
{
	return parse_admission(v, t);
}
static int set_write(struct kvt_tier_conf *t, const char *v)
{
	return parse_write(v, &t->write);
}
static int set_background_bandwidth(struct kvt_tier_conf *t, const char *v)
{
	return kvt_parse_size(v, 1, &t->background_bps);
}


static int set_ttl(kvt_config *c, const char *v)
{
	return kvt_parse_duration(v, &c->ttl_s);
}

/* The store's own keys; each tier kind brings its own (store/tiers.h). */
static int set_kv_events_publisher(kvt_config *c, const char *v)
{
	if (!strcmp(v, "zmq"))
		c->kv_events_on = 1;
	else if (!strcmp(v, "null") || !*v)
		c->kv_events_on = 0;
	else
		return kvt_err(KVT_ECONFIG, "\"%s\": the publisher is zmq or null", v);
	return 0;
}

static const kvt_config_key config_keys[] = {
	KVT_CKEY_U32("chunk_size", chunk_size, 1, 1u << 20, "tokens per chunk, 1..1048576"),
	KVT_CKEY_BOOL("read_only", read_only),
	KVT_CKEY_FN("hash", set_hash, "sha256 or xxh3"),
	KVT_CKEY_U32("workers", workers, 1, 256, "1..256"),
	KVT_CKEY_FN("tenants", set_tenants, "name=hexsecret,..."),
	KVT_CKEY_FN("ttl", set_ttl, "a duration: 3600, 90s, 30m, 1.5h, 7d, 2w, at most 36500d; 0 = none"),
	KVT_CKEY_FN("object_auth_key", set_object_auth_key, "32..128 hex digits"),
	KVT_CKEY_FN("kv_events_publisher", set_kv_events_publisher, "zmq or null"),
	KVT_CKEY_STR("kv_events_endpoint", kv_events.endpoint,
		     "a ZeroMQ address: tcp://*:5557 (bound), tcp://host:port (connected), ipc://path"),
	KVT_CKEY_STR("kv_events_replay_endpoint", kv_events.replay_endpoint,
		     "a ZeroMQ address the replay socket binds; \"\" = no replay"),
	KVT_CKEY_STR("kv_events_topic", kv_events.topic, "the topic every message is sent under"),
	KVT_CKEY_U32("kv_events_buffer_steps", kv_events.buffer_steps, 1, 10000000,
		     "batches kept for replay, 1..10000000"),
	KVT_CKEY_U32("kv_events_hwm", kv_events.hwm, 0, 100000000,
		     "the PUB socket's high-water mark in messages, 0..100000000 (0: none)"),
	KVT_CKEY_U32("kv_events_max_queue_size", kv_events.max_queue, 1, 100000000,
		     "events waiting for the publisher thread, 1..100000000"),
};
#define N_KEYS (sizeof(config_keys) / sizeof(config_keys[0]))

/* The knobs every tier has, as <prefix>_<knob> (dram_eviction, ...). */
static const struct policy_knob {
	const char *suffix;
	int (*set)(struct kvt_tier_conf *t, const char *v);
	const char *expect;
} policy_knobs[] = {
	{ "eviction", set_eviction, "lru or s3fifo" },
	{ "s3fifo_small", set_s3fifo_small, "percent of the tier in S3-FIFO's small queue, 1..90" },
	{ "s3fifo_promote", set_s3fifo_promote,
	  "hits in S3-FIFO's small queue that move a chunk to the main one, 1..3" },
	{ "admission", set_admission, "always, never, tinylfu or seen:N" },
	{ "write", set_write, "through, back or none" },
	{ "background_bandwidth", set_background_bandwidth,
	  "bytes per second, e.g. 500MB; 0 = unlimited" },
};
#define N_KNOBS (sizeof(policy_knobs) / sizeof(policy_knobs[0]))


int config_find(const char *name, struct config_found *f)
{
	memset(f, 0, sizeof(*f));
	for (size_t i = 0; i < N_KEYS; i++)
		if (!strcmp(config_keys[i].name, name)) {
			f->key = &config_keys[i];
			return 1;
		}
	for (int c = 0; kvt_tier_classes[c]; c++) {
		const kvt_tier_class *cls = kvt_tier_classes[c];
		size_t pl = strlen(cls->key_prefix);
		for (size_t i = 0; i < cls->n_keys; i++)
			if (!strcmp(cls->keys[i].name, name)) {
				f->key = &cls->keys[i];
				return 1;
			}
		if (strncmp(name, cls->key_prefix, pl) || name[pl] != '_')
			continue;
		for (size_t i = 0; i < N_KNOBS; i++)
			if (!strcmp(name + pl + 1, policy_knobs[i].suffix)) {
				f->knob = &policy_knobs[i];
				f->tier = cls->kind;
				return 1;
			}
	}
	return 0;
}

const char *config_expect(const struct config_found *f)
{
	return f->key ? f->key->expect : f->knob->expect;
}

int config_apply(const struct config_found *f, kvt_config *c, const char *v)
{
	return f->key ? kvt_config_key_set(f->key, c, v) : f->knob->set(&c->tier[f->tier], v);
}

int kvt_config_set(kvt_config *cfg, const char *key, const char *value)
{
	struct config_found f;

	if (!cfg || !key || !value)
		return kvt_err(KVT_EINVAL, "config, key or value missing");
	if (!config_find(key, &f))
		return kvt_err(KVT_ECONFIG, "unknown key \"%s\"", key);
	int rc = config_apply(&f, cfg, value);
	return rc ? kvt_err_prefix(rc, "%s: ", key) : 0;
}

/* Append `name` to the list in out. */
static void list_add(char *out, size_t len, const char *name)
{
	size_t at = strlen(out);
	snprintf(out + at, len - at, "%s%s", at ? ", " : "", name);
}

static int row_differs(const kvt_config_key *k, const kvt_config *a, const kvt_config *b)
{
	return k->len && memcmp((const char *)a + k->off, (const char *)b + k->off, k->len);
}

void kvt_config_changed_later(const kvt_config *cur, const kvt_config *next, char *out,
			      size_t len)
{
	kvt_config *rest = malloc(sizeof(*rest));

	out[0] = '\0';
	for (size_t i = 0; i < N_KEYS; i++)
		if (row_differs(&config_keys[i], cur, next))
			list_add(out, len, config_keys[i].name);
	for (int c = 0; kvt_tier_classes[c]; c++)
		for (size_t i = 0; i < kvt_tier_classes[c]->n_keys; i++)
			if (row_differs(&kvt_tier_classes[c]->keys[i], cur, next))
				list_add(out, len, kvt_tier_classes[c]->keys[i].name);
	if (!rest)
		return;
	/* Rows with a parser of their own name no field: whatever else
	 * differs once the live knobs and the rows named are set aside. */
	*rest = *next;
	memcpy(rest->tier, cur->tier, sizeof(rest->tier));
	rest->ttl_s = cur->ttl_s;
	for (size_t i = 0; i < N_KEYS; i++)
		if (config_keys[i].len)
			memcpy((char *)rest + config_keys[i].off,
			       (const char *)cur + config_keys[i].off, config_keys[i].len);
	for (int c = 0; kvt_tier_classes[c]; c++)
		for (size_t i = 0; i < kvt_tier_classes[c]->n_keys; i++) {
			const kvt_config_key *k = &kvt_tier_classes[c]->keys[i];
			if (k->len)
				memcpy((char *)rest + k->off, (const char *)cur + k->off, k->len);
		}
	if (memcmp(rest, cur, sizeof(*rest)))
		list_add(out, len, "keys with a parser of their own (page sizes, URLs, "
			 "peers, tenants, hash, object_auth_key)");
	OPENSSL_cleanse(rest, sizeof(*rest));
	free(rest);
}

/* KVTIER_<NAME> for the key `name`, if the environment sets it. */
static int env_one(kvt_config *cfg, const char *name)
{
	struct config_found f;
	char env[96];
	size_t j;

	snprintf(env, sizeof(env), "KVTIER_%s", name);
	for (j = 7; env[j]; j++)
		env[j] = (char)toupper((unsigned char)env[j]);
	const char *v = getenv(env);
	if (!v || !config_find(name, &f))
		return 0;
	int rc = config_apply(&f, cfg, v);
	return rc ? kvt_err_prefix(rc, "environment %s: ", env) : 0;
}

int kvt_config_apply_env(kvt_config *cfg)
{
	char name[64];
	int rc;

	for (int c = 0; kvt_tier_classes[c]; c++) {
		const kvt_tier_class *cls = kvt_tier_classes[c];
		for (size_t i = 0; i < cls->n_keys; i++)
			if ((rc = env_one(cfg, cls->keys[i].name)))
				return rc;
		for (size_t i = 0; i < N_KNOBS; i++) {
			snprintf(name, sizeof(name), "%s_%s", cls->key_prefix, policy_knobs[i].suffix);
			if ((rc = env_one(cfg, name)))
				return rc;
		}
	}
	/* The store's keys last: KVTIER_TENANTS adds to what a file gave. */
	for (size_t i = 0; i < N_KEYS; i++)
		if ((rc = env_one(cfg, config_keys[i].name)))
			return rc;
	return 0;
}

/* A configuration is a small regular file: reading more than this is a
 * wrong path (a log, an image, /dev/zero), not a configuration. */
#define CONFIG_MAX_BYTES (16u << 20)

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a pipe" :
	       S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Only a regular file is read: a directory, /dev/null, a pipe or a device
 * is refused by name (a typo in --config must not mean "all defaults").  An
 * empty regular file is every default, as an empty mapping would be. */
kvt_config *kvt_config_load(const char *path, int *err)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	kvt_config *c;
	int fd, rc = 0;

	if (!path) {
		rc = kvt_err(KVT_ECONFIG, "no configuration path");
		goto fail;
	}
	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		rc = kvt_err(KVT_ECONFIG, "%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(fd, &st)) {
		rc = kvt_err(KVT_ECONFIG, "%s: stat: %s", path, strerror(errno));
		close(fd);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = kvt_err(KVT_ECONFIG, "%s: %s, not a configuration file (expected a regular YAML file)",
			     path, file_kind(st.st_mode));
		close(fd);
		goto fail;
	}
	if (st.st_size > (off_t)CONFIG_MAX_BYTES) {
		rc = kvt_err(KVT_ECONFIG, "%s: %lld bytes, larger than the 16 MiB a configuration may be",
			     path, (long long)st.st_size);
		close(fd);
		goto fail;
	}
	/* One byte more than the size seen, to notice a file still growing. */
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = kvt_err(KVT_ENOMEM, "%s: out of memory", path);
		close(fd);
		goto fail;
	}
	while (len <= (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = kvt_err(KVT_ECONFIG, "%s: read: %s", path, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (!rc && len > (size_t)st.st_size)
		rc = kvt_err(KVT_ECONFIG, "%s: changed while it was read", path);
	if (rc) {
		free(buf);
		goto fail;
	}
	c = kvt_config_parse(buf, len, path, err);
	free(buf);
	return c;
fail:
	if (err)
		*err = rc;
	return NULL;
}

int kvt_config_ns(const kvt_config *cfg, const kvt_ns_desc *desc, kvt_ns *ns)
{
	kvt_ns_desc d;
	const uint8_t *secret = NULL;
	size_t secret_len = 0;

	kvt_err_clear();
	if (!cfg || !desc || !ns)
		return kvt_err(KVT_EINVAL, "configuration, description or output missing");
	d = *desc;
	if (d.layout.chunk_tokens == 0)
		d.layout.chunk_tokens = cfg->chunk_size;
	/* An unnamed engine block size is vLLM's default, 16 tokens, when it
	 * divides the chunk; otherwise the chunk is its own block. */
	if (d.layout.block_size == 0)
		d.layout.block_size = d.layout.chunk_tokens % 16 ? d.layout.chunk_tokens : 16;
	if (d.hash_scheme == 0)
		d.hash_scheme = cfg->hash_scheme;
	if (d.tp_size == 0)
		d.tp_size = 1;
	if (d.pp_size == 0)
		d.pp_size = 1;
	if (d.tenant) {
		const kvt_tenant *t = kvt_config_tenant(cfg, d.tenant);
		if (!t)
			return kvt_err(KVT_ETENANT, "tenant \"%s\" is not configured",
				       d.tenant);
		secret = t->secret;
		secret_len = t->secret_len;
	}
	return kvt_ns_derive(&d, secret, secret_len, ns);
}
