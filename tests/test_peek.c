/*
 * test_peek.c — kvt_store_peek: a chunk's header and a few bytes of its
 * payload, from each tier of a DRAM + NVMe + shared-directory store.
 *
 * For a 64-layer chunk of 4 MiB in every tier: the header's fields, the
 * bytes of ranges at the start, across a layer boundary and at the end, the
 * header alone; the bytes the file tiers read for it (the process's rchar,
 * /proc/self/io) a few blocks, not the chunk; a range past the payload, a
 * key absent, a NULL pointer and a tier out of range refused with their
 * codes; a file with a damaged byte outside the range still peeked (nothing
 * is verified); a truncated file reported short, its other copy not.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "test.h"
#include "tier_test_util.h"

#define LAYERS 64
#define LAYER_BYTES 65536u
#define PAYLOAD ((size_t)LAYERS * LAYER_BYTES)

/* Bytes this process has read through read(2)-like calls so far. */
static long long rchar(void)
{
	char b[512];
	long long v = -1;
	FILE *f = fopen("/proc/self/io", "r");

	if (!f)
		return -1;
	while (fgets(b, sizeof(b), f))
		if (!strncmp(b, "rchar:", 6))
			v = atoll(b + 6);
	fclose(f);
	return v;
}

/* The file of `key` under a file tier's root. */
static void file_of(const char *root, const kvt_key *key, char *out, size_t cap)
{
	char hex[65];
	kvt_key_hex(key, hex);
	snprintf(out, cap, "%s/%.2s/%.2s/%s.kvt", root, hex, hex + 2, hex);
}

int main(void)
{
	char base[] = "/var/tmp/kvt-peek-XXXXXX", root[256], nvme[300], shared[300];
	char path[600];
	uint8_t *payload = malloc(PAYLOAD), *got = malloc(PAYLOAD), hb[8];
	kvt_object_info info;
	kvt_store *st;
	kvt_config *cfg;
	kvt_ns ns;
	kvt_key key = tt_key_of(1, -1), other = tt_key_of(2, -1);
	int err = 0;

	CHECK(payload && got);
	tt_var_tmp(base, root, sizeof(root), 64ull << 20);
	snprintf(nvme, sizeof(nvme), "%s/nvme", base);
	snprintf(shared, sizeof(shared), "%s/shared", base);
	cfg = kvt_config_new();
	CHECK_EQ(kvt_config_set(cfg, "max_local_cpu_size", "64MiB"), 0);
	CHECK_EQ(kvt_config_set(cfg, "dram_prefault", "false"), 0);
	CHECK_EQ(kvt_config_set(cfg, "local_disk", nvme), 0);
	CHECK_EQ(kvt_config_set(cfg, "shared_fs", shared), 0);
	st = kvt_store_open(cfg, &err);
	kvt_config_free(cfg);
	CHECK(st);
	if (!st) {
		fprintf(stderr, "open: %s\n", kvt_errmsg());
		return 1;
	}
	CHECK_EQ(kvt_store_tiers(st), 3);
	tt_ns_make(&ns, LAYERS, 1, LAYER_BYTES / 16 / 2 / 2, 16, KVT_DTYPE_BF16, 0, 9);
	CHECK_EQ(kvt_layout_payload_bytes(&ns.layout), PAYLOAD);
	test_fill(payload, PAYLOAD, 77);
	CHECK_EQ(kvt_put(st, &ns, &key, payload, PAYLOAD, KVT_DUR_CRASH_SAFE), 0);
	uint32_t mask = 0;
	CHECK_EQ(kvt_locate(st, &ns, &key, &mask), 3);

	static const struct { uint64_t off; size_t len; } ranges[] = {
		{ 0, 100 }, { LAYER_BYTES - 10, 30 }, { PAYLOAD - 48, 48 },
		{ PAYLOAD - 9000, 9000 }, { 12345, 0 },
	};
	for (int tier = 0; tier < 3; tier++) {
		for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
			long long before = rchar();
			memset(got, 0xee, ranges[r].len + 1);
			memset(&info, 0, sizeof(info));
			CHECK_EQ(kvt_store_peek(st, tier, &key, &info, ranges[r].off, got,
						ranges[r].len), 0);
			long long read = rchar() - before;
			CHECK(!memcmp(got, payload + ranges[r].off, ranges[r].len));
			CHECK_EQ(got[ranges[r].len], 0xee); /* not a byte past the range */
			CHECK(!memcmp(info.key.b, key.b, KVT_KEY_BYTES));
			CHECK(!memcmp(info.ns_digest, ns.digest, 32));
			CHECK_EQ(info.payload_bytes, PAYLOAD);
			CHECK_EQ(info.n_layers, LAYERS);
			CHECK_EQ(info.layout.num_layers, LAYERS);
			CHECK_EQ(info.layout.head_dim, ns.layout.head_dim);
			CHECK_EQ(info.signature, KVT_SIG_UNCHECKED);
			/* The file tiers: the header's 4 KiB and the blocks of the
			 * range, never the 4 MiB chunk. */
			if (tier > 0 && before >= 0)
				CHECK(read <= 4096 + 4096 + (long long)((ranges[r].len + 8191) & ~4095u));
		}
		CHECK_EQ(kvt_store_peek(st, tier, &key, &info, PAYLOAD - 10, got, 11), KVT_EINVAL);
		CHECK(strstr(kvt_errmsg(), "payload"));
		CHECK_EQ(kvt_store_peek(st, tier, &other, &info, 0, got, 8), KVT_ENOTFOUND);
	}
	CHECK_EQ(kvt_store_peek(st, 3, &key, &info, 0, got, 8), KVT_EINVAL);
	CHECK_EQ(kvt_store_peek(st, 0, &key, NULL, 0, got, 8), KVT_EINVAL);
	CHECK_EQ(kvt_store_peek(st, 0, &key, &info, 0, NULL, 8), KVT_EINVAL);
	CHECK_EQ(kvt_store_peek(NULL, 0, &key, &info, 0, got, 8), KVT_EINVAL);

	/* A damaged byte in layer 3 of the NVMe file: the range at the end is
	 * still peeked (nothing is verified). */
	file_of(nvme, &key, path, sizeof(path));
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, hb, 1, 4096 + 3 * LAYER_BYTES + 5), 1);
	hb[0] ^= 0x40;
	CHECK_EQ(pwrite(fd, hb, 1, 4096 + 3 * LAYER_BYTES + 5), 1);
	CHECK_EQ(kvt_store_peek(st, 1, &key, &info, PAYLOAD - 48, got, 48), 0);
	CHECK(!memcmp(got, payload + PAYLOAD - 48, 48));
	/* Truncated: the image is shorter than its header says. */
	CHECK_EQ(ftruncate(fd, 4096 + PAYLOAD / 2), 0);
	close(fd);
	CHECK_EQ(kvt_store_peek(st, 1, &key, &info, 0, got, 16), KVT_ETRUNCATED);
	CHECK(strstr(kvt_errmsg(), "nvme"));
	CHECK_EQ(kvt_store_peek(st, 1, &key, &info, PAYLOAD - 48, got, 48), KVT_ETRUNCATED);
	/* The shared tier's copy is whole and still served. */
	CHECK_EQ(kvt_store_peek(st, 2, &key, &info, PAYLOAD - 48, got, 48), 0);

	kvt_store_close(st);
	tt_rm_rf(base);
	free(payload);
	free(got);
	TEST_DONE();
}
