/*
 * test_config_noyaml.c — a library built without configuration files
 * (CMake KVT_YAML=OFF): a document or a file is refused with a message
 * that says how to configure instead, and a store configured through
 * kvt_config_set and KVTIER_* variables (DRAM over NVMe) stores and
 * serves chunks as any other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tier_test_util.h"

/* The refusal names the build option and the ways that remain. */
static void refused(kvt_config *c, int err)
{
	CHECK(c == NULL);
	CHECK_EQ(err, KVT_ENOTSUP);
	CHECK(strstr(kvt_errmsg(), "KVT_YAML=OFF") != NULL);
	CHECK(strstr(kvt_errmsg(), "kvt_config_set") != NULL);
}

static void files_refused(void)
{
	char path[] = "/tmp/kvt-noyaml-XXXXXX";
	const char *doc = "max_local_cpu_size: 4MiB\n";
	kvt_config *c;
	int err = 0, fd;

	c = kvt_config_parse(doc, strlen(doc), "inline", &err);
	refused(c, err);
	CHECK(strstr(kvt_errmsg(), "inline") != NULL);

	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
	close(fd);
	err = 0;
	c = kvt_config_load(path, &err);
	refused(c, err);
	CHECK(strstr(kvt_errmsg(), path) != NULL);
	/* What is not a file is still named so, before any parsing. */
	err = 0;
	CHECK(kvt_config_load("/tmp", &err) == NULL);
	CHECK_EQ(err, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "a directory") != NULL);
	unlink(path);
}

static void store_without_files(void)
{
	char dir[] = "/tmp/kvt-noyaml-store-XXXXXX";
	kvt_ns_desc d = { .model = "test/model" };
	kvt_config *c = kvt_config_new();
	uint8_t *p, *q;
	kvt_store *st;
	kvt_ns ns;
	kvt_key k;
	uint32_t tokens[64];
	size_t len = 0, per;
	int err = 0;

	CHECK(mkdtemp(dir) != NULL);
	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "4MiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_page_size", "16KiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "local_disk", dir), 0);
	/* A wrong value is named as it is with files. */
	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "lots"), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "lots") != NULL);
	setenv("KVTIER_MAX_LOCAL_DISK_SIZE", "64MiB", 1);
	CHECK_EQ(kvt_config_apply_env(c), 0);
	unsetenv("KVTIER_MAX_LOCAL_DISK_SIZE");

	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st) {
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_store_tiers(st), 2);
	d.layout = (kvt_layout){ .num_layers = 2, .num_kv_heads = 2, .head_dim = 64,
				 .dtype = KVT_DTYPE_BF16, .kv_planes = 2, .block_size = 16,
				 .chunk_tokens = 64 };
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	for (int i = 0; i < 64; i++)
		tokens[i] = (uint32_t)(i * 7 + 1);
	CHECK_EQ(kvt_key_chain(&ns, tokens, 64, NULL, &k, 1), 1);
	per = kvt_layout_payload_bytes(&ns.layout);
	p = malloc(per);
	q = malloc(per);
	test_fill(p, per, 1);
	CHECK_EQ(kvt_put(st, &ns, &k, p, per, KVT_DUR_CRASH_SAFE), 0);
	CHECK_EQ(kvt_get(st, &ns, &k, q, per, &len), 0);
	CHECK(len == per && memcmp(p, q, per) == 0);
	kvt_store_close(st);

	/* Reopened over the same directory: the chunk comes from NVMe. */
	c = kvt_config_new();
	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "4MiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_page_size", "16KiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	CHECK_EQ(kvt_config_set(c, "local_disk", dir), 0);
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	CHECK(st != NULL);
	if (st) {
		CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
		memset(q, 0, per);
		CHECK_EQ(kvt_get(st, &ns, &k, q, per, &len), 0);
		CHECK(len == per && memcmp(p, q, per) == 0);
		CHECK_EQ(kvt_delete(st, &ns, &k), 0);
		kvt_store_close(st);
	}
	free(p);
	free(q);
	tt_rm_rf(dir);
}

int main(void)
{
	files_refused();
	store_without_files();
	TEST_DONE();
}
