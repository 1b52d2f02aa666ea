/*
 * test_put_inplace.c — puts whose payload the caller writes where it is
 * stored (kvt_put_reserve, kvt_put_buf_iov, kvt_put_publish,
 * kvt_put_cancel), over DRAM and over DRAM + a disk tier: what is read
 * back is what was written, the checksums are those kvt_put computes (a
 * disk read verifies them), a cancelled or pending reservation is never
 * visible and gives its space back, and the first writer still wins.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

static kvt_store *open_store(const char *dir)
{
	kvt_config *c = kvt_config_new();
	kvt_store *st;
	int err;

	CHECK_EQ(kvt_config_set(c, "max_local_cpu_size", "2MiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_page_size", "16KiB"), 0);
	CHECK_EQ(kvt_config_set(c, "dram_lock_memory", "false"), 0);
	if (dir)
		CHECK_EQ(kvt_config_set(c, "local_disk", dir), 0);
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

/* Write `src` into the reservation's segments. */
static void fill(kvt_put_buf *b, const uint8_t *src, size_t len)
{
	const struct iovec *iov;
	int n;
	size_t at = 0;

	CHECK_EQ(kvt_put_buf_iov(b, &iov, &n), 0);
	for (int i = 0; i < n; i++) {
		memcpy(iov[i].iov_base, src + at, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	CHECK(at == len); /* exactly the payload */
}

static void run(const char *dir)
{
	kvt_store *st = open_store(dir);
	kvt_ns_desc d = { .model = "test/inplace",
			  .layout = { .num_layers = 3, .num_kv_heads = 2, .head_dim = 100,
				      .dtype = KVT_DTYPE_BF16, .kv_planes = 2, .block_size = 16,
				      .chunk_tokens = 32 },
			  .tp_size = 1, .pp_size = 1 };
	int dur = dir ? KVT_DUR_CRASH_SAFE : KVT_DUR_CACHED;
	kvt_ns ns;
	kvt_key k1 = { { 1 } }, k2 = { { 2 } }, k3 = { { 3 } };
	kvt_put_buf *b, *b2;
	size_t len, got = 0;
	uint8_t *src, *back;
	kvt_tier_stats s0, s1;

	if (!st) {
		test_failures++;
		return;
	}
	CHECK_EQ(kvt_ns_init(st, &d, &ns), 0);
	len = kvt_layout_payload_bytes(&ns.layout);
	src = malloc(len);
	back = malloc(len);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 131 + 7);

	/* Written in place, read back as any chunk. */
	CHECK_EQ(kvt_put_reserve(st, &ns, &k1, dur, &b), 0);
	fill(b, src, len);
	CHECK_EQ(kvt_exists(st, &ns, &k1), 0); /* not before publish */
	CHECK_EQ(kvt_put_publish(b), 0);
	CHECK_EQ(kvt_get(st, &ns, &k1, back, len, &got), 0);
	CHECK(got == len && !memcmp(src, back, len));
	if (dir) {
		/* The disk copy carries checksums a verified read accepts. */
		uint32_t mask = 0;
		CHECK_EQ(kvt_locate(st, &ns, &k1, &mask), 2);
		kvt_verify_result r;
		CHECK_EQ(kvt_store_verify(st, 1, 0, NULL, NULL, &r), 0);
		CHECK(r.checked == 1 && r.bad == 0);
	}

	/* Layers summed as they are written (kvt_put_buf_written) give the
	 * same image as summed at publish. */
	{
		kvt_key k5 = { { 5 } };
		const struct iovec *iov;
		int n, i;
		size_t at = 0;
		CHECK_EQ(kvt_put_reserve(st, &ns, &k5, dur, &b), 0);
		CHECK_EQ(kvt_put_buf_iov(b, &iov, &n), 0);
		for (i = 0; i < n; i++) {
			memcpy(iov[i].iov_base, src + at, iov[i].iov_len);
			at += iov[i].iov_len;
			CHECK_EQ(kvt_put_buf_written(b, at - (i % 2)), 0);
		}
		CHECK_EQ(kvt_put_buf_written(b, len + 100), 0);
		CHECK_EQ(kvt_put_publish(b), 0);
		memset(back, 0, len);
		CHECK_EQ(kvt_get(st, &ns, &k5, back, len, &got), 0);
		CHECK(!memcmp(src, back, len));
		CHECK_EQ(kvt_put_buf_written(NULL, 0), KVT_EINVAL);
	}

	/* The same bytes as kvt_put: one image. */
	CHECK_EQ(kvt_put(st, &ns, &k2, src, len, dur), 0);
	for (int t = 0; t < kvt_store_tiers(st); t++) {
		kvt_verify_result r = { 0 };
		CHECK_EQ(kvt_store_verify(st, t, 0, NULL, NULL, &r), 0);
		CHECK(r.bad == 0 && r.checked >= 3); /* k1, k5 (summed as written), k2 */
	}

	/* First writer wins, reserved or not. */
	CHECK_EQ(kvt_put_reserve(st, &ns, &k1, dur, &b), KVT_EEXIST);
	CHECK_EQ(kvt_put_reserve(st, &ns, &k3, dur, &b), 0);
	CHECK_EQ(kvt_put_reserve(st, &ns, &k3, dur, &b2), 0);
	fill(b, src, len);
	fill(b2, src, len);
	CHECK_EQ(kvt_put_publish(b2), 0);
	CHECK_EQ(kvt_put_publish(b), KVT_EEXIST);

	/* A cancelled reservation leaves nothing and gives its space back. */
	kvt_key k4 = { { 4 } };
	CHECK_EQ(kvt_store_stats(st, 0, &s0), 0);
	CHECK_EQ(kvt_put_reserve(st, &ns, &k4, dur, &b), 0);
	kvt_put_cancel(b);
	kvt_put_cancel(NULL);
	CHECK_EQ(kvt_exists(st, &ns, &k4), 0);
	CHECK_EQ(kvt_store_stats(st, 0, &s1), 0);
	CHECK(s1.used_bytes == s0.used_bytes && s1.chunks == s0.chunks);

	/* Wrong arguments are named. */
	CHECK_EQ(kvt_put_reserve(st, &ns, &k4, dur, NULL), KVT_EINVAL);
	CHECK_EQ(kvt_put_reserve(st, &ns, &k4, 7, &b), KVT_EINVAL);
	CHECK_EQ(kvt_put_buf_iov(NULL, NULL, NULL), KVT_EINVAL);
	CHECK_EQ(kvt_put_publish(NULL), KVT_EINVAL);
	if (!dir)
		CHECK_EQ(kvt_put_reserve(st, &ns, &k4, KVT_DUR_CRASH_SAFE, &b), KVT_ENOTSUP);
	free(src);
	free(back);
	kvt_store_close(st);
}

int main(void)
{
	char dir[] = "/tmp/kvt-inplace-XXXXXX";

	run(NULL);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	run(dir);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		test_failures++;
	TEST_DONE();
}
