/*
 * test_config.c — YAML, single keys, environment overrides, and the errors
 * a wrong configuration gets.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/config.h"
#include "store/tiers.h"
#include "test.h"
#include "kvtier/units.h"

static kvt_config *parse(const char *y, int *err)
{
	return kvt_config_parse(y, strlen(y), "t.yaml", err);
}

/* The parse fails with KVT_ECONFIG and the message names `want`. */
static void bad(const char *yaml, const char *want)
{
	int err = 0;
	kvt_config *c = parse(yaml, &err);
	CHECK(c == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	if (!strstr(kvt_errmsg(), want)) {
		fprintf(stderr, "error \"%s\" does not mention \"%s\"\n", kvt_errmsg(), want);
		test_failures++;
	}
	kvt_config_free(c);
}

/* kvt_parse_size refuses `s` and says why, naming the value. */
static void bad_size(const char *s, uint64_t bare, const char *want)
{
	uint64_t v = 12345;
	CHECK_EQ(kvt_parse_size(s, bare, &v), KVT_ECONFIG);
	CHECK(v == 12345);
	if (!strstr(kvt_errmsg(), want) || !strstr(kvt_errmsg(), s)) {
		fprintf(stderr, "size \"%s\": error \"%s\" lacks \"%s\" or the value\n", s,
			kvt_errmsg(), want);
		test_failures++;
	}
}

/* The size grammar of docs/CONFIG.md: decimal, optional 1..6 decimals,
 * optional unit; nothing strtod would also take. */
static void sizes_strict(void)
{
	const uint64_t G = 1ull << 30;
	uint64_t v = 0;

	CHECK_EQ(kvt_parse_size("40", G, &v), 0); /* LMCache: bare numbers are GiB */
	CHECK(v == 40 * G);
	CHECK_EQ(kvt_parse_size("0.5", G, &v), 0);
	CHECK(v == G / 2);
	CHECK_EQ(kvt_parse_size("0", G, &v), 0);
	CHECK(v == 0);
	CHECK_EQ(kvt_parse_size("1.5KiB", 1, &v), 0);
	CHECK(v == 1536);
	CHECK_EQ(kvt_parse_size("0.3KiB", 1, &v), 0); /* 307.2: the nearest byte */
	CHECK(v == 307);
	CHECK_EQ(kvt_parse_size("2 tib", 1, &v), 0);
	CHECK(v == 2ull << 40);
	CHECK_EQ(kvt_parse_size("16777215TiB", 1, &v), 0);
	CHECK(v == 16777215ull << 40);
	CHECK_EQ(kvt_parse_size("18446744073709551615", 1, &v), 0);
	CHECK(v == UINT64_MAX);

	bad_size("0x10", G, "not a size"); /* was 16 GiB */
	bad_size("0x10", G, "a bare number is GiB");
	bad_size("010", G, "leading zero");
	bad_size("-1", G, "not a size");
	bad_size("+1", G, "not a size");
	bad_size(" 1", G, "not a size");
	bad_size("1e3", G, "not a size");
	bad_size("1E3GiB", 1, "not a size");
	bad_size("nan", G, "not a size");
	bad_size("inf", G, "not a size");
	bad_size("infinity", 1, "not a size");
	bad_size(".5", G, "not a size");
	bad_size("1.", G, "not a size");
	bad_size("1.1234567GiB", 1, "at most 6 decimals");
	bad_size("1,5GiB", 1, "not a size");
	bad_size("4 parsecs", G, "unknown unit \"parsecs\"");
	bad_size("4 parsecs", G, "KiB, MiB, GiB");
	bad_size("64GiB ", 1, "not a size");
	bad_size("4096.5", 1, "whole number of bytes");
	bad_size("0.5B", G, "whole number of bytes");
	bad_size("18446744073709551616", 1, "too large");
	bad_size("17179869184GiB", 1, "too large");
	bad_size("16777216TiB", 1, "too large");
	bad_size("99999999999999999999999", G, "too large");
	CHECK_EQ(kvt_parse_size("", G, &v), KVT_ECONFIG);

	/* Through a key: the file, the line, the key, the value, the forms. */
	bad("max_local_cpu_size: 0x10\n", "t.yaml:1: max_local_cpu_size: \"0x10\" is not a size");
	bad("chunk_size: 256\nmax_local_disk_size: 1e400\n", "t.yaml:2: max_local_disk_size: \"1e400\"");
	bad("dram_page_size: 4096.5\n", "whole number of bytes");
	bad("s3_part_size: -8MiB\n", "s3_part_size: \"-8MiB\" is not a size");
	bad("dram_background_bandwidth: 1e9\n", "dram_background_bandwidth: \"1e9\"");

	/* Whole numbers: digits only. */
	bad("chunk_size: 010\n", "t.yaml:1: chunk_size: \"010\" is not a whole number");
	bad("chunk_size: 0x100\n", "not a whole number");
	bad("chunk_size: +256\n", "not a whole number");
	bad("chunk_size: 256.0\n", "not a whole number");
	bad("workers: 99999999999999999999999\n", "out of range 1..256");
	bad("nvme_queue_depth: -1\n", "1..4096");
	bad("dram_s3fifo_small: 95\n", "t.yaml:1: dram_s3fifo_small: \"95\": the S3-FIFO small queue's percent must be a whole number 1..90");
	bad("nvme_s3fifo_promote: 0\n", "nvme_s3fifo_promote: \"0\": the S3-FIFO promotion's hits must be a whole number 1..3");
	bad("nvme_s3fifo_promote: two\n", "1..3");
	kvt_config *c = kvt_config_new();
	CHECK_EQ(kvt_config_set(c, "dram_s3fifo_small", "20"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_s3fifo_promote", "2"), 0);
	CHECK_EQ(c->tier[KVT_CT_DRAM].s3_small_pct, 20);
	CHECK_EQ(c->tier[KVT_CT_DRAM].s3_promote, 2);
	CHECK_EQ(kvt_config_set(c, "chunk_size", " 64"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "chunk_size", "64 "), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "chunk_size", "64"), 0);
	CHECK_EQ(c->chunk_size, 64);
	kvt_config_free(c);
}

/* ttl: bounded at 100 years; created + ttl can no longer wrap. */
static void durations(void)
{
	kvt_config *c = kvt_config_new();
	static const struct {
		const char *v;
		uint64_t s;
	} good[] = {
		{ "0", 0 }, { "3600", 3600 }, { "90s", 90 }, { "30m", 1800 }, { "1.5h", 5400 },
		{ "7d", 604800 }, { "2w", 1209600 }, { "0.5m", 30 }, { "36500d", 36500ull * 86400 },
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_EQ(kvt_config_set(c, "ttl", good[i].v), 0);
		CHECK(c->ttl_s == good[i].s);
	}
	static const struct {
		const char *v, *want;
	} no[] = {
		{ "213503982334601d", "at most 36500d" }, /* * 86400 * 1e9 wraps */
		{ "36501d", "at most 36500d" },
		{ "3153600001", "at most 36500d" },
		{ "99999999999999999999999", "at most 36500d" },
		{ "1e300d", "not a duration" },            /* was undefined behaviour */
		{ "nan", "not a duration" },
		{ "inf", "not a duration" },
		{ "-1", "not a duration" },
		{ "0x10", "not a duration" },
		{ "0.5", "whole number of seconds" },
		{ "1.0000001h", "not a duration" },
		{ "7 d", "not a duration" },
		{ "7y", "unknown duration unit" },
	};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		c->ttl_s = 42;
		CHECK_EQ(kvt_config_set(c, "ttl", no[i].v), KVT_ECONFIG);
		CHECK(c->ttl_s == 42);
		if (!strstr(kvt_errmsg(), no[i].want) || strncmp(kvt_errmsg(), "ttl: ", 5)) {
			fprintf(stderr, "ttl %s: error \"%s\" lacks \"%s\"\n", no[i].v,
				kvt_errmsg(), no[i].want);
			test_failures++;
		}
	}
	setenv("KVTIER_TTL", "1e300d", 1);
	CHECK_EQ(kvt_config_apply_env(c), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "KVTIER_TTL") != NULL);
	unsetenv("KVTIER_TTL");
	kvt_config_free(c);
	bad("ttl: 213503982334601d\n", "t.yaml:1: ttl: \"213503982334601d\" is too long");
}

/* One document, each key once. */
static void yaml_shape(void)
{
	int err = -1;
	kvt_config *c;

	bad("chunk_size: 128\nlocal_cpu: true\nchunk_size: 512\n",
	    "t.yaml:3: chunk_size: given twice (first on line 1)");
	bad("tenants:\n  - name: a\n    name: b\n    secret: 000102030405060708090a0b0c0d0e0f\n",
	    "t.yaml:3: name: given twice");
	bad("chunk_size: 128\n---\nchunk_size: 512\n", "t.yaml:2: a second YAML document");
	bad("chunk_size: 128\n---\n", "a second YAML document");
	bad("chunk_size: 128\n---\n: [\n", "t.yaml:3");
	c = parse("---\nchunk_size: 128\n...\n", &err); /* one explicit document */
	CHECK(c && err == 0 && c->chunk_size == 128);
	kvt_config_free(c);
	c = parse("# only a comment\n", &err);
	CHECK(c && err == 0 && c->chunk_size == 256);
	kvt_config_free(c);
}

/* --config takes a regular file only; an empty one is every default. */
static void files(void)
{
	char dir[] = "/tmp/kvt-config-XXXXXX", path[64];
	int err = 0;
	kvt_config *c;

	c = kvt_config_load("/dev/null", &err);
	CHECK(c == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "/dev/null: a character device") != NULL);
	if (!mkdtemp(dir)) {
		test_failures++;
		return;
	}
	c = kvt_config_load(dir, &err);
	CHECK(c == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "a directory") != NULL);

	snprintf(path, sizeof(path), "%s/fifo", dir);
	if (mkfifo(path, 0600) == 0) {
		/* Refused at once: opening it must not wait for a writer. */
		c = kvt_config_load(path, &err);
		CHECK(c == NULL);
		CHECK(strstr(kvt_errmsg(), "a pipe") != NULL);
		unlink(path);
	}

	snprintf(path, sizeof(path), "%s/empty.yaml", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	c = kvt_config_load(path, &err);
	CHECK(c != NULL);
	CHECK_EQ(err, 0);
	CHECK(c && c->chunk_size == 256);
	kvt_config_free(c);

	f = fopen(path, "w");
	if (f) {
		fputs("chunk_size: 64\nchunk_size: 64\n", f);
		fclose(f);
	}
	c = kvt_config_load(path, &err);
	CHECK(c == NULL);
	CHECK(strstr(kvt_errmsg(), "empty.yaml:2: chunk_size: given twice") != NULL);
	unlink(path);
	rmdir(dir);
}

static void endpoints(void)
{
	kvt_config *c = kvt_config_new();

	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "http://127.0.0.1:9000"), 0);
	CHECK(!strcmp(c->s3_endpoint, "http://127.0.0.1:9000"));
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "HTTPS://s3.us-east-1.amazonaws.com"), 0);
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", ""), 0);
	CHECK(!c->s3_endpoint[0]);
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "ftp://example.com/"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "s3_endpoint: \"ftp://example.com/\"") != NULL);
	CHECK(strstr(kvt_errmsg(), "http://host[:port] or https://") != NULL);
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "file:///etc/passwd"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "127.0.0.1:9000"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "http://"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "s3_endpoint", "http://a b"), KVT_ECONFIG);
	CHECK(!c->s3_endpoint[0]); /* a refused value changes nothing */
	kvt_config_free(c);
	bad("s3_endpoint: ftp://minio:9000\n", "t.yaml:1: s3_endpoint: \"ftp://minio:9000\"");
}

/* Every tier kind's keys and policy knobs are accepted by name, through
 * kvt_config_set and KVTIER_<KEY> alike, and land in their own field. */
static void tier_keys(void)
{
	int kinds = 0;
	for (int c = 0; kvt_tier_classes[c]; c++, kinds++) {
		const kvt_tier_class *cls = kvt_tier_classes[c];
		CHECK(cls->n_keys > 0);
		for (size_t i = 0; i < cls->n_keys; i++) {
			const kvt_config_key *k = &cls->keys[i];
			if (k->type == KVT_CK_FN || k->type == KVT_CK_STR)
				continue; /* a key with its own grammar has its own test */
			kvt_config *cfg = kvt_config_new(), *before = kvt_config_new();
			char v[32];
			int was;
			memcpy(&was, (char *)before + k->off, sizeof(was));
			if (k->type == KVT_CK_BOOL) /* the other value than the default */
				snprintf(v, sizeof(v), "%s", was ? "false" : "true");
			else if (k->type == KVT_CK_U32)
				snprintf(v, sizeof(v), "%llu", (unsigned long long)k->hi);
			else if (k->type == KVT_CK_SIZE)
				snprintf(v, sizeof(v), "96MiB");
			else
				snprintf(v, sizeof(v), "/var/tmp/kvt-key");
			if (kvt_config_set(cfg, k->name, v)) {
				fprintf(stderr, "key %s=%s: %s\n", k->name, v, kvt_errmsg());
				CHECK(0);
			}
			/* Its own field changed, and nothing else. */
			CHECK(memcmp((char *)cfg + k->off, (char *)before + k->off, k->len) != 0);
			memcpy((char *)before + k->off, (char *)cfg + k->off, k->len);
			CHECK(memcmp(cfg, before, sizeof(*cfg)) == 0);
			kvt_config_free(before);
			kvt_config_free(cfg);
		}
		char name[64];
		kvt_config *cfg = kvt_config_new();
		snprintf(name, sizeof(name), "%s_write", cls->key_prefix);
		CHECK_EQ(kvt_config_set(cfg, name, "none"), 0);
		CHECK_EQ(cfg->tier[cls->kind].write, KVT_WRITE_NONE);
		snprintf(name, sizeof(name), "KVTIER_%s_BACKGROUND_BANDWIDTH", cls->key_prefix);
		for (char *p = name; *p; p++)
			*p = (char)toupper((unsigned char)*p);
		setenv(name, "500MB", 1);
		CHECK_EQ(kvt_config_apply_env(cfg), 0);
		CHECK(cfg->tier[cls->kind].background_bps == 500000000ull);
		unsetenv(name);
		snprintf(name, sizeof(name), "%s_eviction", cls->key_prefix);
		CHECK_EQ(kvt_config_set(cfg, name, "fifo"), KVT_ECONFIG);
		CHECK(strstr(kvt_errmsg(), name) != NULL);
		kvt_config_free(cfg);
	}
	CHECK_EQ(kinds, 7);
	char hint[160];
	CHECK(strcmp(kvt_tier_enable_hint(hint, sizeof(hint)),
		     "device_capacity, local_cpu: true, local_disk, peers, shared_fs, remote_url or daemon") == 0);
}

/* `daemon`: kvtierd's local socket as unix:///path or /path, from a key or
 * KVTIER_DAEMON; anything else is refused naming the form expected. */
static void daemon_key(void)
{
	kvt_config *cfg = kvt_config_new();

	CHECK_EQ(cfg->daemon[0], '\0');
	CHECK_EQ(kvt_config_set(cfg, "daemon", "unix:///run/kvtier/kvtierd.sock"), 0);
	CHECK(strcmp(cfg->daemon, "/run/kvtier/kvtierd.sock") == 0);
	CHECK_EQ(kvt_config_set(cfg, "daemon", "null"), 0);
	CHECK_EQ(cfg->daemon[0], '\0');
	CHECK_EQ(kvt_config_set(cfg, "daemon", "unix://run/kvtierd.sock"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "unix:///path") != NULL);
	CHECK_EQ(kvt_config_set(cfg, "daemon", "tcp://node:6379"), KVT_ECONFIG);
	setenv("KVTIER_DAEMON", "/tmp/kvtierd.sock", 1);
	CHECK_EQ(kvt_config_apply_env(cfg), 0);
	CHECK(strcmp(cfg->daemon, "/tmp/kvtierd.sock") == 0);
	unsetenv("KVTIER_DAEMON");
	kvt_config_free(cfg);
}

int main(void)
{
	int err = -1;
	uint64_t v = 0;
	kvt_config *c;

	/* An LMCache-style file. */
	c = parse("# LMCache names\n"
		  "chunk_size: 512\n"
		  "local_cpu: true\n"
		  "max_local_cpu_size: 5.0\n"
		  "local_disk: \"file:///var/cache/kvtier/\"\n"
		  "max_local_disk_size: 100GiB\n"
		  "hash: xxh3\n"
		  "dram_page_size: 2MiB\n"
		  "tenants:\n"
		  "  - name: acme\n"
		  "    secret: 000102030405060708090a0b0c0d0e0f\n",
		  &err);
	CHECK(c != NULL);
	CHECK_EQ(err, 0);
	if (c) {
		CHECK_EQ(c->chunk_size, 512);
		CHECK_EQ(c->local_cpu, 1);
		CHECK(c->max_local_cpu_size == 5ull << 30); /* bare = GiB, as LMCache */
		CHECK(!strcmp(c->local_disk, "/var/cache/kvtier/"));
		CHECK(c->max_local_disk_size == 100ull << 30);
		CHECK_EQ(c->hash_scheme, KVT_HASH_XXH3);
		CHECK_EQ(c->dram_page_size, 2u << 20);
		CHECK_EQ(c->n_tenants, 1);
		CHECK(kvt_config_tenant(c, "acme") != NULL);
		CHECK(kvt_config_tenant(c, "other") == NULL);
	}
	kvt_config_free(c);

	/* Empty file: every default. */
	c = parse("", &err);
	CHECK(c && err == 0 && c->chunk_size == 256 && c->local_cpu == 1);
	kvt_config_free(c);

	/* Errors name the file, the line and what was expected. */
	bad("chunk_size: 256\nmax_local_cpu_sise: 4GiB\n", "t.yaml:2: unknown key \"max_local_cpu_sise\"");
	bad("max_local_cpu_size: lots\n", "t.yaml:1: max_local_cpu_size");
	bad("max_local_cpu_size: 4 GiBs\n", "unknown unit");
	bad("max_local_cpu_size: -4GiB\n", "not a size");
	bad("max_local_cpu_size: 1KiB\n", "below the minimum");
	bad("chunk_size: 0\n", "out of range");
	bad("chunk_size: 12x\n", "not a whole number");
	bad("local_cpu: maybe\n", "not a boolean");
	bad("hash: md5\n", "sha256 or xxh3");
	bad("dram_page_size: 3000\n", "below the minimum");
	bad("dram_page_size: 12KiB\n", "power of two");
	bad("local_disk: relative/dir\n", "absolute path");
	bad("shared_fs: relative/dir\n", "t.yaml:1: shared_fs");
	bad("nvme_queue_depth: 0\n", "out of range");
	bad("chunk_size: [1, 2]\n", "t.yaml:1: chunk_size: expected");
	bad("- a\n- b\n", "expected a mapping");
	bad("chunk_size: 256\n  bad: indent\n", "t.yaml:2");
	bad("tenants:\n  - name: a\n    secret: 00ff\n", "secret must be");
	bad("tenants:\n  - name: a\n    secret: zz0102030405060708090a0b0c0d0e0f\n", "secret must be");
	bad("tenants:\n  - name: a\n    key: x\n", "unknown key \"key\"");
	bad("tenants:\n  - {name: a, secret: 000102030405060708090a0b0c0d0e0f}\n"
	    "  - {name: a, secret: 000102030405060708090a0b0c0d0e0f}\n", "defined twice");

	/* Sizes. */
	CHECK_EQ(kvt_parse_size("64GiB", 1, &v), 0);
	CHECK(v == 64ull << 30);
	CHECK_EQ(kvt_parse_size("1.5 GB", 1, &v), 0);
	CHECK(v == 1500000000ull);
	CHECK_EQ(kvt_parse_size("4096", 1, &v), 0);
	CHECK(v == 4096);
	CHECK_EQ(kvt_parse_size("2", 1ull << 30, &v), 0);
	CHECK(v == 2ull << 30);
	CHECK_EQ(kvt_parse_size("1e30 TiB", 1, &v), KVT_ECONFIG);

	/* kvt_config_set and the environment share the same checks. */
	c = kvt_config_new();
	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "8GiB"), 0);
	CHECK(c->max_local_cpu_size == 8ull << 30);
	CHECK_EQ(kvt_config_set(c, "nonsense", "1"), KVT_ECONFIG);
	CHECK_EQ(kvt_config_set(c, "chunk_size", "x"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "chunk_size") != NULL);
	setenv("KVTIER_CHUNK_SIZE", "128", 1);
	setenv("KVTIER_TENANTS", "t1=00112233445566778899aabbccddeeff,t2=ffeeddccbbaa99887766554433221100", 1);
	CHECK_EQ(kvt_config_apply_env(c), 0);
	CHECK_EQ(c->chunk_size, 128);
	CHECK_EQ(c->n_tenants, 2);
	setenv("KVTIER_LOCAL_CPU", "perhaps", 1);
	CHECK_EQ(kvt_config_apply_env(c), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "KVTIER_LOCAL_CPU") != NULL);
	unsetenv("KVTIER_LOCAL_CPU");
	kvt_config_free(c);

	sizes_strict();
	durations();
	tier_keys();
	daemon_key();
	yaml_shape();
	files();
	endpoints();

	/* A NUL inside a quoted value is refused, not read as a shorter one. */
	{
		static const char y[] = "local_disk: \"/tmp/a\\0/../etc\"\n";
		c = kvt_config_parse(y, sizeof(y) - 1, "nul.yaml", &err);
		CHECK(c == NULL);
		CHECK(strstr(kvt_errmsg(), "NUL") != NULL);
		kvt_config_free(c);
	}

	/* The S3 listing bounds. */
	c = kvt_config_new();
	CHECK_EQ(kvt_config_set(c, "s3_list_max_pages", "5"), 0);
	CHECK_EQ(kvt_config_set(c, "s3_list_timeout_ms", "60000"), 0);
	CHECK_EQ(kvt_config_set(c, "s3_list_max_pages", "-1"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "s3_list_max_pages") != NULL);
	CHECK_EQ(kvt_config_set(c, "s3_list_timeout_ms", "86400001"), KVT_ECONFIG);
	kvt_config_free(c);

	/* A file that does not exist. */
	c = kvt_config_load("/nonexistent/kvtier.yaml", &err);
	CHECK(c == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "/nonexistent/kvtier.yaml") != NULL);
	TEST_DONE();
}
