/*
 * test_connector_load.c — the connector's per-request protocol over a real
 * DRAM + NVMe store: lookup, a save gathered layer by layer and published
 * only when its last layer is in, a load written layer by layer into other
 * blocks, and loads that fail part-way reporting exactly the blocks they
 * left invalid: a chunk dropped from the middle, a chunk corrupt on disk,
 * a deadline of 0 with the chunks only on disk, a tier that is down (S3
 * answering 500) under chunks only it holds.  Then the device tier (over
 * host memory, as an engine on the CPU has it): saves land there, a chunk
 * it evicted is promoted back from DRAM by the load that needs it, and
 * loads from it are bit-exact.
 *
 * The engine is a vLLM FlashAttention NHD tensor per layer, (2,
 * num_blocks, 16, heads, dim) of bf16, in host memory.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_s3_server.h"

#define LAYERS 4
#define HEADS 2
#define DIM 64
#define BT 16
#define CT 64
#define NB 96
#define BPC (CT / BT)
#define N_TOK (4 * CT + 10) /* four whole chunks and a partial one */

static char dir[64];
static size_t plane_elems = (size_t)NB * BT * HEADS * DIM;

struct engine {
	uint16_t *kv[LAYERS]; /* (2, NB, BT, HEADS, DIM) */
	kvt_paged_layer L[LAYERS];
};

static void engine_init(struct engine *e)
{
	for (int l = 0; l < LAYERS; l++) {
		e->kv[l] = calloc(2 * plane_elems, 2);
		for (int p = 0; p < 2; p++) {
			kvt_paged_plane *pl = &e->L[l].plane[p];
			pl->base = e->kv[l] + p * plane_elems;
			pl->block_stride = (uint64_t)BT * HEADS * DIM * 2;
			pl->token_stride = HEADS * DIM * 2;
			pl->head_stride = DIM * 2;
			pl->elem_stride = 2;
		}
		e->L[l].scale = NULL;
	}
}

static void engine_free(struct engine *e)
{
	for (int l = 0; l < LAYERS; l++)
		free(e->kv[l]);
}

/* The bytes of block b (every plane) of layer l, to compare blocks. */
static int block_eq(const struct engine *a, uint32_t ba, const struct engine *b, uint32_t bb,
		    int l)
{
	size_t blk = (size_t)BT * HEADS * DIM;
	for (int p = 0; p < 2; p++)
		if (memcmp(a->kv[l] + p * plane_elems + ba * blk,
			   b->kv[l] + p * plane_elems + bb * blk, blk * 2))
			return 0;
	return 1;
}

enum { ST_NVME = 1, ST_DRAM = 2, ST_DEVICE = 4, ST_S3 = 8 };

/* A store of the tiers in `which` (ST_*). */
static kvt_store *open_store(int which)
{
	kvt_config *c = kvt_config_new();
	kvt_store *st;
	int err;

	if (which & ST_DRAM) {
		kvt_config_set(c, "max_local_cpu_size", "16MiB");
		kvt_config_set(c, "dram_page_size", "16KiB");
		kvt_config_set(c, "dram_lock_memory", "false");
		kvt_config_set(c, "dram_prefault", "false");
	} else {
		kvt_config_set(c, "local_cpu", "false");
	}
	if (which & ST_NVME) {
		kvt_config_set(c, "local_disk", dir);
		kvt_config_set(c, "max_local_disk_size", "64MiB");
	}
	if (which & ST_DEVICE) {
		/* 13 pages: four chunks of three (128 KiB and a header),
		 * within the 97% the policy fills, and not five */
		kvt_config_set(c, "device_capacity", "832KiB");
		kvt_config_set(c, "device_page_size", "64KiB");
		kvt_config_set(c, "device_backend", "host");
	}
	if (which & ST_S3) {
		kvt_config_set(c, "remote_url", "s3://kvt/conn/");
		kvt_config_set(c, "s3_endpoint", s3t_endpoint);
		kvt_config_set(c, "s3_region", "us-east-1");
		kvt_config_set(c, "s3_timeout_ms", "1500");
		kvt_config_set(c, "s3_admission", "always");
	}
	st = kvt_store_open(c, &err);
	kvt_config_free(c);
	if (!st)
		fprintf(stderr, "open: %s (%s)\n", kvt_strerror(err), kvt_errmsg());
	return st;
}

/* What saves ask: memory alone for a store without a disk. */
static int conn_durability = KVT_DUR_CRASH_SAFE;

static kvt_conn *open_conn(kvt_store *st, kvt_ns *ns, struct engine *e)
{
	kvt_ns_desc nd = { 0 };
	kvt_conn_desc d = { 0 };
	kvt_conn *c = NULL;

	nd.model = "test/connector";
	nd.layout = (kvt_layout){ LAYERS, HEADS, DIM, KVT_DTYPE_BF16, 2, 0, BT, CT };
	CHECK_EQ(kvt_ns_init(st, &nd, ns), 0);
	d.layers = e->L;
	d.n_layer_descs = LAYERS;
	d.num_blocks = NB;
	d.durability = conn_durability;
	CHECK_EQ(kvt_conn_open(st, ns, &d, &c), 0);
	return c;
}

/* A block table: a shuffled run of distinct ids from `first`. */
static void table(uint32_t *ids, size_t n, uint32_t first, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		ids[i] = first + (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (seed = seed * 1103515245u + 12345u) % (i + 1);
		uint32_t t = ids[i];
		ids[i] = ids[j];
		ids[j] = t;
	}
}

static kvt_conn_done finished_one(kvt_conn *c, uint64_t req, uint32_t what)
{
	kvt_conn_done d[8], none = { 0 };
	int n = kvt_conn_finished(c, d, 8);

	for (int i = 0; i < n; i++)
		if (d[i].req == req && d[i].what == what)
			return d[i];
	fprintf(stderr, "request %llu: no finished %u among %d\n", (unsigned long long)req, what, n);
	test_failures++;
	return none;
}

/* Load `n_load` tokens into `ids`, waiting on every layer in order as an
 * engine would; returns the invalid-block count of the last layer. */
static int load_layers(kvt_conn *c, uint64_t req, const uint32_t *tok, const uint32_t *ids,
		       size_t n_load, int deadline_ms)
{
	int rc = kvt_conn_load(c, req, tok, N_TOK, NULL, ids, NB / 2, n_load, deadline_ms);

	CHECK_EQ(rc, 0);
	for (uint32_t l = 0; l < LAYERS; l++) {
		rc = kvt_conn_wait_layer(c, req, l, 10000);
		CHECK(rc >= 0);
	}
	return rc;
}

static void path_of(const kvt_key *k, char *out, size_t len)
{
	char hex[65];
	kvt_key_hex(k, hex);
	snprintf(out, len, "%s/%.2s/%.2s/%s.kvt", dir, hex, hex + 2, hex);
}

/* Save request `req` of `tok` from e's blocks `ids`, all layers at once. */
static void save_all(kvt_conn *c, uint64_t req, const uint32_t *tok, const uint32_t *ids)
{
	kvt_conn_done d;

	CHECK_EQ(kvt_conn_save(c, req, tok, N_TOK, NULL, ids, NB / 2), 4);
	CHECK_EQ(kvt_conn_save_layer(c, req, KVT_CONN_ALL_LAYERS), 0);
	CHECK_EQ(kvt_conn_wait(c, req, 10000), 0);
	d = finished_one(c, req, KVT_CONN_SAVE);
	CHECK_EQ(d.status, 0);
	CHECK_EQ(kvt_conn_end(c, req), 0);
}

/* Chunks 0 and 1 only on S3, 2 and 3 also on NVMe; S3 answers every GET
 * with 500: exactly the blocks of chunks 0 and 1 are invalid, 2 and 3 are
 * loaded whole.  Once S3 is back, all four load. */
static void tier_down(const struct engine *A, struct engine *B, const uint32_t *tok,
		      const uint32_t *ta, const uint32_t *tb)
{
	char s3dir[] = "/tmp/kvt-conn-s3-XXXXXX", path[256];
	uint32_t errs[NB];
	kvt_key keys[4];
	kvt_store *st;
	kvt_conn *c;
	kvt_ns ns;
	kvt_conn_done d;

	if (!mkdtemp(s3dir)) {
		CHECK(0);
		return;
	}
	setenv("AWS_ACCESS_KEY_ID", S3T_AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", S3T_SK, 1);
	s3t_start(s3dir, (const char *const[]){ "kvt", NULL });
	snprintf(path, sizeof(path), "rm -rf %s", dir); /* a fresh NVMe tier */
	if (system(path)) {
	}
	if (!(st = open_store(ST_NVME | ST_S3)))
		goto out;
	c = open_conn(st, &ns, (struct engine *)A);
	CHECK_EQ(kvt_key_chain(&ns, tok, N_TOK, NULL, keys, 4), 4);
	save_all(c, 30, tok, ta);
	CHECK_EQ(kvt_store_flush(st, 20000), 0);
	kvt_conn_close(c);
	kvt_store_close(st);
	for (int i = 0; i < 2; i++) {
		path_of(&keys[i], path, sizeof(path));
		CHECK_EQ(unlink(path), 0);
	}
	if (!(st = open_store(ST_NVME | ST_S3)))
		goto out;
	c = open_conn(st, &ns, B);
	CHECK_EQ(kvt_conn_lookup(c, tok, N_TOK, NULL), 4 * CT);
	memset(B->kv[0], 0, 2 * plane_elems * 2);
	s3t_fault("mode=500&count=100000&method=GET");
	CHECK_EQ(load_layers(c, 31, tok, tb, 4 * CT, -1), 2 * BPC);
	s3t_fault("mode=none");
	d = finished_one(c, 31, KVT_CONN_LOAD);
	CHECK(d.status < 0);
	CHECK_EQ(d.chunks, 2);
	CHECK_EQ(kvt_conn_load_errors(c, 31, errs, NB), 2 * BPC);
	for (int i = 0; i < 2 * BPC; i++)
		CHECK_EQ(errs[i], tb[i]);
	for (int l = 0; l < LAYERS; l++)
		for (int i = 2 * BPC; i < 4 * BPC; i++)
			CHECK(block_eq(A, ta[i], B, tb[i], l));
	CHECK_EQ(kvt_conn_end(c, 31), 0);
	/* S3 is back: the same load is whole. */
	CHECK_EQ(load_layers(c, 32, tok, tb, 4 * CT, -1), 0);
	d = finished_one(c, 32, KVT_CONN_LOAD);
	CHECK_EQ(d.status, 0);
	CHECK_EQ(d.chunks, 4);
	for (int l = 0; l < LAYERS; l++)
		for (int i = 0; i < 4 * BPC; i++)
			CHECK(block_eq(A, ta[i], B, tb[i], l));
	CHECK_EQ(kvt_conn_end(c, 32), 0);
	kvt_conn_close(c);
	kvt_store_close(st);
out:
	s3t_stop();
	snprintf(path, sizeof(path), "rm -rf %s", s3dir);
	if (system(path)) {
	}
}

/* Device tier (host memory) over DRAM.  It holds four chunks: prompt P's
 * saves land there; prompt Q's push them down to DRAM alone; the load of P
 * promotes them back ahead of its layers and is bit-exact. */
static void device_tier(const struct engine *A, struct engine *B, const uint32_t *tok,
			const uint32_t *ta, const uint32_t *tb)
{
	uint32_t tq[N_TOK], mask;
	kvt_key kp[4], kq[4];
	kvt_tier_stats ds;
	kvt_store *st = open_store(ST_DEVICE | ST_DRAM);
	kvt_conn *c;
	kvt_ns ns;
	kvt_conn_done d;

	if (!st)
		return;
	conn_durability = KVT_DUR_CACHED;
	CHECK_EQ(kvt_store_stats(st, 0, &ds), 0);
	CHECK(strcmp(ds.name, "device") == 0);
	c = open_conn(st, &ns, (struct engine *)A);
	for (int i = 0; i < N_TOK; i++)
		tq[i] = 50000 + (uint32_t)i;
	CHECK_EQ(kvt_key_chain(&ns, tok, N_TOK, NULL, kp, 4), 4);
	CHECK_EQ(kvt_key_chain(&ns, tq, N_TOK, NULL, kq, 4), 4);
	save_all(c, 40, tok, ta);
	CHECK_EQ(kvt_store_flush(st, 10000), 0);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(kvt_locate(st, &ns, &kp[i], &mask), 2);
		CHECK_EQ(mask, 3u); /* device and DRAM */
	}
	save_all(c, 41, tq, ta);
	CHECK_EQ(kvt_store_flush(st, 10000), 0);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(kvt_locate(st, &ns, &kp[i], &mask), 1);
		CHECK_EQ(mask, 2u); /* DRAM alone */
	}
	kvt_conn_close(c);
	c = open_conn(st, &ns, B);
	memset(B->kv[1], 0, 2 * plane_elems * 2);
	CHECK_EQ(load_layers(c, 42, tok, tb, 4 * CT, -1), 0);
	d = finished_one(c, 42, KVT_CONN_LOAD);
	CHECK_EQ(d.status, 0);
	CHECK_EQ(d.chunks, 4);
	for (int l = 0; l < LAYERS; l++)
		for (int i = 0; i < 4 * BPC; i++)
			CHECK(block_eq(A, ta[i], B, tb[i], l));
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(kvt_locate(st, &ns, &kp[i], &mask), 2);
		CHECK_EQ(mask, 3u); /* promoted back to the device tier */
	}
	CHECK_EQ(kvt_store_stats(st, 0, &ds), 0);
	CHECK(ds.promotions + ds.hits >= 4);
	CHECK(ds.used_bytes <= ds.capacity_bytes);
	CHECK_EQ(kvt_conn_end(c, 42), 0);
	kvt_conn_close(c);
	kvt_store_close(st);
}

int main(void)
{
	struct engine A, B;
	uint32_t tok[N_TOK], ta[NB / 2], tb[NB / 2], errs[NB];
	kvt_key keys[4];
	kvt_store *st;
	kvt_conn *c;
	kvt_ns ns;
	kvt_conn_done d;
	kvt_tier_stats s0, s1;
	char cmd[128];

	snprintf(dir, sizeof(dir), "/tmp/kvt-conn-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {
	}
	engine_init(&A);
	engine_init(&B);
	for (int l = 0; l < LAYERS; l++)
		test_fill(A.kv[l], 2 * plane_elems * 2, 100 + l);
	for (int i = 0; i < N_TOK; i++)
		tok[i] = 1000 + (uint32_t)i * 7;
	table(ta, NB / 2, 0, 1);
	table(tb, NB / 2, NB / 2, 2);

	st = open_store(ST_DRAM | ST_NVME);
	if (!st)
		return 1;
	c = open_conn(st, &ns, &A);
	CHECK_EQ(kvt_key_chain(&ns, tok, N_TOK, NULL, keys, 4), 4);

	/* Nothing stored: nothing to load. */
	CHECK_EQ(kvt_conn_lookup(c, tok, N_TOK, NULL), 0);

	/* Save request 1 from A's blocks, layer by layer: no chunk is
	 * published before its last layer is in. */
	CHECK_EQ(kvt_conn_save(c, 1, tok, N_TOK, NULL, ta, NB / 2), 4);
	CHECK_EQ(kvt_conn_save(c, 1, tok, N_TOK, NULL, ta, NB / 2), KVT_EINVAL);
	for (uint32_t l = 0; l + 1 < LAYERS; l++)
		CHECK_EQ(kvt_conn_save_layer(c, 1, l), 0);
	CHECK_EQ(kvt_conn_save_layer(c, 1, 0), KVT_EINVAL); /* twice */
	CHECK_EQ(kvt_conn_wait(c, 1, 100), KVT_ETIMEDOUT);  /* a layer is missing */
	CHECK_EQ(kvt_lookup(st, &ns, keys, 4, NULL), 0);
	CHECK_EQ(kvt_conn_save_layer(c, 1, LAYERS - 1), 0);
	CHECK_EQ(kvt_conn_wait(c, 1, 10000), 0);
	d = finished_one(c, 1, KVT_CONN_SAVE);
	CHECK_EQ(d.status, 0);
	CHECK_EQ(d.chunks, 4);
	CHECK_EQ(d.n_invalid, 0);
	CHECK_EQ(kvt_conn_finished(c, &d, 1), 0); /* reported once */
	CHECK_EQ(kvt_lookup(st, &ns, keys, 4, NULL), 4);
	/* What was stored is the payload order of A's blocks. */
	{
		uint64_t lb = kvt_layout_layer_bytes(&ns.layout);
		uint8_t *buf = malloc(lb);
		CHECK_EQ(kvt_get_layer(st, &ns, &keys[2], 3, buf, lb), 0);
		for (int p = 0; p < 2; p++)
			for (int t = 0; t < CT; t++) {
				uint32_t b = ta[2 * BPC + t / BT];
				const uint16_t *row = A.kv[3] + p * plane_elems +
						      ((size_t)b * BT + t % BT) * HEADS * DIM;
				CHECK(memcmp(buf + ((size_t)p * CT + t) * HEADS * DIM * 2, row,
					     HEADS * DIM * 2) == 0);
			}
		free(buf);
	}
	/* Saving again stores nothing: every chunk is there. */
	CHECK_EQ(kvt_conn_end(c, 1), 0);
	CHECK_EQ(kvt_conn_save(c, 1, tok, N_TOK, NULL, ta, NB / 2), 0);
	CHECK_EQ(kvt_conn_save_layer(c, 1, KVT_CONN_ALL_LAYERS), 0);

	/* Lookup: whole chunks, one token fewer on a full hit, from memory. */
	CHECK_EQ(kvt_store_stats(st, 0, &s0), 0);
	CHECK_EQ(kvt_conn_lookup(c, tok, N_TOK, NULL), 4 * CT);
	CHECK_EQ(kvt_conn_lookup(c, tok, 4 * CT, NULL), 4 * CT - 1);
	CHECK_EQ(kvt_conn_lookup(c, tok, 2 * CT + 3, NULL), 2 * CT);
	CHECK_EQ(kvt_conn_lookup(c, tok, CT - 1, NULL), 0);
	CHECK_EQ(kvt_store_stats(st, 0, &s1), 0);
	CHECK_EQ(s1.hits, s0.hits);
	CHECK_EQ(s1.misses, s0.misses);

	/* Load request 2 into B's other blocks, layer by layer. */
	{
		kvt_conn *cb = open_conn(st, &ns, &B);
		CHECK_EQ(load_layers(cb, 2, tok, tb, 4 * CT, -1), 0);
		d = finished_one(cb, 2, KVT_CONN_LOAD);
		CHECK_EQ(d.status, 0);
		CHECK_EQ(d.chunks, 4);
		CHECK_EQ(kvt_conn_load_errors(cb, 2, errs, NB), 0);
		for (int l = 0; l < LAYERS; l++)
			for (int i = 0; i < 4 * BPC; i++)
				CHECK(block_eq(&A, ta[i], &B, tb[i], l));
		CHECK_EQ(kvt_conn_end(cb, 2), 0);

		/* A full hit loads one token fewer: the last token's row of
		 * the last block is left to the engine. */
		for (int l = 0; l < LAYERS; l++)
			memset(B.kv[l], 0, 2 * plane_elems * 2);
		CHECK_EQ(load_layers(cb, 3, tok, tb, 4 * CT - 1, -1), 0);
		{
			size_t last = ((size_t)tb[4 * BPC - 1] * BT + BT - 1) * HEADS * DIM;
			static const uint16_t z[HEADS * DIM];
			CHECK(memcmp(B.kv[1] + last, z, sizeof(z)) == 0);
			CHECK(memcmp(B.kv[1] + last - HEADS * DIM,
				     A.kv[1] + ((size_t)ta[4 * BPC - 1] * BT + BT - 2) * HEADS * DIM,
				     sizeof(z)) == 0);
		}
		CHECK_EQ(kvt_conn_end(cb, 3), 0);

		/* A middle chunk dropped: exactly its blocks are invalid, the
		 * others are loaded. */
		for (int l = 0; l < LAYERS; l++)
			memset(B.kv[l], 0, 2 * plane_elems * 2);
		CHECK_EQ(kvt_delete(st, &ns, &keys[2]), 0);
		CHECK_EQ(kvt_conn_lookup(c, tok, N_TOK, NULL), 2 * CT);
		CHECK_EQ(load_layers(cb, 4, tok, tb, 4 * CT, -1), BPC);
		d = finished_one(cb, 4, KVT_CONN_LOAD);
		CHECK_EQ(d.status, KVT_ENOTFOUND);
		CHECK_EQ(d.chunks, 3);
		CHECK_EQ(d.n_invalid, BPC);
		CHECK_EQ(kvt_conn_load_errors(cb, 4, NULL, 0), BPC);
		CHECK_EQ(kvt_conn_load_errors(cb, 4, errs, NB), BPC);
		for (int i = 0; i < BPC; i++)
			CHECK_EQ(errs[i], tb[2 * BPC + i]);
		for (int l = 0; l < LAYERS; l++)
			for (int i = 0; i < 4 * BPC; i++)
				if (i / BPC != 2)
					CHECK(block_eq(&A, ta[i], &B, tb[i], l));
		CHECK_EQ(kvt_conn_end(cb, 4), 0);
		CHECK_EQ(kvt_conn_load_errors(cb, 4, errs, NB), KVT_EINVAL);
		kvt_conn_close(cb);
	}
	/* Put chunk 2 back (a save of request 5 stores only it). */
	CHECK_EQ(kvt_conn_save(c, 5, tok, N_TOK, NULL, ta, NB / 2), 1);
	CHECK_EQ(kvt_conn_save_layer(c, 5, KVT_CONN_ALL_LAYERS), 0);
	CHECK_EQ(kvt_conn_wait(c, 5, 10000), 0);
	CHECK_EQ(kvt_lookup(st, &ns, keys, 4, NULL), 4);
	kvt_conn_close(c);
	CHECK_EQ(kvt_store_flush(st, 10000), 0);
	kvt_store_close(st);

	/* The chunks are on disk only now (a new store's DRAM is empty). */
	st = open_store(ST_DRAM | ST_NVME);
	if (!st)
		return 1;
	c = open_conn(st, &ns, &B);

	/* A deadline of 0: nothing is in the first tier, so nothing is
	 * loaded and every block is reported. */
	for (int l = 0; l < LAYERS; l++)
		memset(B.kv[l], 0, 2 * plane_elems * 2);
	CHECK_EQ(load_layers(c, 6, tok, tb, 4 * CT, 0), 4 * BPC);
	d = finished_one(c, 6, KVT_CONN_LOAD);
	CHECK_EQ(d.status, KVT_ETIMEDOUT);
	CHECK_EQ(d.chunks, 0);
	CHECK_EQ(kvt_conn_load_errors(c, 6, errs, NB), 4 * BPC);
	for (int i = 0; i < 4 * BPC; i++)
		CHECK_EQ(errs[i], tb[i]);
	CHECK_EQ(kvt_conn_end(c, 6), 0);

	/* Corrupt layer 2 of chunk 1 on disk: that chunk's blocks are
	 * invalid, the store stops serving it, and the file stays. */
	{
		char path[256];
		uint64_t lb = kvt_layout_layer_bytes(&ns.layout);
		int fd;
		uint8_t x = 0;

		path_of(&keys[1], path, sizeof(path));
		fd = open(path, O_RDWR);
		CHECK(fd >= 0);
		CHECK(pread(fd, &x, 1, 4096 + 2 * lb + 77) == 1);
		x ^= 0x20;
		CHECK(pwrite(fd, &x, 1, 4096 + 2 * lb + 77) == 1);
		close(fd);
		kvt_conn_close(c);
		kvt_store_close(st);
		/* DRAM is empty after the reopen: every read is from disk,
		 * and the load's prefetch reads the chunks straight into DRAM
		 * pages, where the bad layer is found. */
		st = open_store(ST_DRAM | ST_NVME);
		if (!st)
			return 1;
		c = open_conn(st, &ns, &B);
		CHECK_EQ(load_layers(c, 7, tok, tb, 4 * CT, -1), BPC);
		d = finished_one(c, 7, KVT_CONN_LOAD);
		/* The prefetch found the bad copy; the borrow after it then
		 * finds no good one. */
		CHECK_EQ(d.status, KVT_ENOTFOUND);
		CHECK_EQ(d.chunks, 3);
		CHECK_EQ(kvt_conn_load_errors(c, 7, errs, NB), BPC);
		for (int i = 0; i < BPC; i++)
			CHECK_EQ(errs[i], tb[BPC + i]);
		for (int l = 0; l < LAYERS; l++)
			for (int i = 0; i < 4 * BPC; i++)
				if (i / BPC != 1)
					CHECK(block_eq(&A, ta[i], &B, tb[i], l));
		CHECK_EQ(kvt_store_stats(st, 1, &s1), 0);
		CHECK(strcmp(s1.name, "nvme") == 0);
		CHECK_EQ(s1.corrupt, 1);
		CHECK_EQ(s1.bad_listed, 1); /* listed for verify, */
		CHECK(access(path, F_OK) == 0); /* and left in place */
		/* The bad copy is no longer served: the prefix ends there. */
		CHECK_EQ(kvt_conn_lookup(c, tok, N_TOK, NULL), CT);
		CHECK_EQ(kvt_conn_end(c, 7), 0);
	}

	/* Argument errors. */
	CHECK_EQ(kvt_conn_load(c, 8, tok, N_TOK, NULL, tb, NB / 2, N_TOK, -1), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "whole chunks") != NULL);
	CHECK_EQ(kvt_conn_load(c, 8, tok, N_TOK, NULL, tb, 3, CT, -1), KVT_EINVAL);
	CHECK_EQ(kvt_conn_wait_layer(c, 8, LAYERS, 0), KVT_EINVAL);
	CHECK_EQ(kvt_conn_wait_layer(c, 99, 0, 0), 0); /* no load: nothing to wait for */
	CHECK_EQ(kvt_conn_save_layer(c, 99, LAYERS), KVT_EINVAL);
	CHECK_EQ(kvt_conn_load(NULL, 8, tok, N_TOK, NULL, tb, NB / 2, CT, -1), KVT_EINVAL);
	CHECK_EQ(kvt_conn_finished(c, NULL, 1), KVT_EINVAL);

	/* Chunks named by key (an engine's own block hashes wrapped in the
	 * namespace) instead of by tokens: saved from A's blocks (copied into
	 * B, which `c` is over), loaded into B's other blocks once zeroed,
	 * bit-exact; a load past the keys given is refused. */
	{
		kvt_key kh[4];
		uint8_t h[32];

		for (int i = 0; i < 4; i++) {
			test_fill(h, sizeof(h), 555 + i);
			CHECK_EQ(kvt_key_from_engine_hash(&ns, h, sizeof(h), &kh[i]), 0);
		}
		for (int l = 0; l < LAYERS; l++)
			memcpy(B.kv[l], A.kv[l], 2 * plane_elems * 2);
		CHECK_EQ(kvt_conn_save_keys(c, 30, kh, 4, ta, 4 * BPC - 1), KVT_EINVAL);
		CHECK_EQ(kvt_conn_save_keys(c, 30, kh, 4, ta, NB / 2), 4);
		CHECK_EQ(kvt_conn_save_layer(c, 30, KVT_CONN_ALL_LAYERS), 0);
		CHECK_EQ(kvt_conn_wait(c, 30, 10000), 0);
		d = finished_one(c, 30, KVT_CONN_SAVE);
		CHECK_EQ(d.chunks, 4);
		CHECK_EQ(kvt_lookup(st, &ns, kh, 4, NULL), 4);
		for (int l = 0; l < LAYERS; l++)
			memset(B.kv[l], 0, 2 * plane_elems * 2);
		CHECK_EQ(kvt_conn_load_keys(c, 31, kh, 2, tb, NB / 2, 3 * CT, -1), KVT_EINVAL);
		CHECK(strstr(kvt_errmsg(), "2 keys given") != NULL);
		CHECK_EQ(kvt_conn_load_keys(c, 31, kh, 4, tb, NB / 2, 4 * CT - 1, -1), 0);
		CHECK_EQ(kvt_conn_wait_layer(c, 31, LAYERS - 1, 10000), 0);
		CHECK_EQ(kvt_conn_load_errors(c, 31, errs, NB), 0);
		for (int l = 0; l < LAYERS; l++)
			for (int i = 0; i < 4 * BPC - 1; i++)
				CHECK(block_eq(&A, ta[i], &B, tb[i], l));
		CHECK_EQ(kvt_conn_end(c, 31), 0);

		/* The engine already holds the first BPC + 1 blocks (its own
		 * prefix cache reaching into the second chunk): a load from
		 * there names them KVT_CONN_NO_BLOCK, reads the two chunks
		 * whole and writes only the blocks past them; the engine's own
		 * are never written, even when the chunk that covers them is
		 * corrupt, and are never reported invalid. */
		uint32_t skip[2 * BPC];
		static const uint16_t mark = 0x7e7e;
		for (int i = 0; i < 2 * BPC; i++)
			skip[i] = i <= BPC ? KVT_CONN_NO_BLOCK : tb[i];
		for (int l = 0; l < LAYERS; l++) {
			memset(B.kv[l], 0, 2 * plane_elems * 2);
			for (int i = 0; i <= BPC; i++)
				for (size_t k = 0; k < (size_t)BT * HEADS * DIM; k++)
					B.kv[l][tb[i] * (size_t)BT * HEADS * DIM + k] = mark;
		}
		CHECK_EQ(kvt_conn_load_keys(c, 32, kh, 2, skip, 2 * BPC, 2 * CT, -1), 0);
		CHECK_EQ(kvt_conn_wait_layer(c, 32, LAYERS - 1, 10000), 0);
		CHECK_EQ(kvt_conn_load_errors(c, 32, errs, NB), 0);
		for (int l = 0; l < LAYERS; l++) {
			for (int i = BPC + 1; i < 2 * BPC; i++)
				CHECK(block_eq(&A, ta[i], &B, tb[i], l));
			CHECK_EQ(B.kv[l][tb[0] * (size_t)BT * HEADS * DIM], mark);
			CHECK_EQ(B.kv[l][tb[BPC] * (size_t)BT * HEADS * DIM + 5], mark);
		}
		CHECK_EQ(kvt_conn_end(c, 32), 0);
		/* A chunk that fails reports only the blocks it was to write. */
		CHECK_EQ(kvt_delete(st, &ns, &kh[1]), 0);
		CHECK_EQ(kvt_conn_load_keys(c, 33, kh, 2, skip, 2 * BPC, 2 * CT, -1), 0);
		CHECK_EQ(kvt_conn_wait_layer(c, 33, LAYERS - 1, 10000), BPC - 1);
		CHECK_EQ(kvt_conn_load_errors(c, 33, errs, NB), BPC - 1);
		for (int i = 0; i < BPC - 1; i++)
			CHECK_EQ(errs[i], tb[BPC + 1 + i]);
		CHECK_EQ(B.kv[0][tb[BPC] * (size_t)BT * HEADS * DIM], mark);
		CHECK_EQ(kvt_conn_end(c, 33), 0);
		/* Saves have no use for it. */
		CHECK_EQ(kvt_conn_save_keys(c, 34, kh, 2, skip, 2 * BPC), KVT_EINVAL);
		CHECK(strstr(kvt_errmsg(), "KVT_CONN_NO_BLOCK, which only a load takes") != NULL);
		CHECK_EQ(kvt_conn_end(c, 30), 0);
	}
	/* A save abandoned before its last layer publishes nothing, and its
	 * request can be ended; a load still in flight at close is waited
	 * for. */
	{
		uint32_t tok2[N_TOK];
		kvt_key k2[4];

		for (int i = 0; i < N_TOK; i++)
			tok2[i] = 9000 + (uint32_t)i;
		CHECK_EQ(kvt_key_chain(&ns, tok2, N_TOK, NULL, k2, 4), 4);
		CHECK_EQ(kvt_conn_save(c, 20, tok2, N_TOK, NULL, tb, NB / 2), 4);
		CHECK_EQ(kvt_conn_save_layer(c, 20, 0), 0);
		CHECK_EQ(kvt_conn_end(c, 20), 0);
		CHECK_EQ(kvt_store_flush(st, 10000), 0);
		CHECK_EQ(kvt_lookup(st, &ns, k2, 4, NULL), 0);
		CHECK_EQ(kvt_conn_finished(c, &d, 1), 0);
		CHECK_EQ(kvt_conn_load(c, 21, tok, N_TOK, NULL, tb, NB / 2, 4 * CT, -1), 0);
	}
	kvt_conn_close(c);
	kvt_store_close(st);

	tier_down(&A, &B, tok, ta, tb);
	device_tier(&A, &B, tok, ta, tb);

	engine_free(&A);
	engine_free(&B);
	if (system(cmd)) {
	}
	TEST_DONE();
}
