/*
 * test_config.c — YAML, single keys, environment overrides, and the errors
 * a wrong configuration gets.
 */
#include <stdlib.h>
#include <string.h>

#include "store/config.h"
#include "test.h"

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

	/* A file that does not exist. */
	c = kvt_config_load("/nonexistent/kvtier.yaml", &err);
	CHECK(c == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "/nonexistent/kvtier.yaml") != NULL);
	TEST_DONE();
}
