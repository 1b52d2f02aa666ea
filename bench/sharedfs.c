/*
 * sharedfs.c — `kvtier-bench sharedfs`: the shared file-system tier
 * (src/tier/fsdir.c) against a raw C loop doing the least any safe
 * publication must, on the same directory.
 *
 * Objects are whole chunk images (4 KiB header + payload) of 256 bf16
 * tokens of K and V per rank: Qwen2.5-7B (14 MiB payload) and Llama-3.1-8B
 * (32 MiB).  Per round and size, N objects (8; 4 with --quick):
 *
 *   tier write  put_begin, copy the prepared image into the tier's buffer,
 *               put_commit at KVT_DUR_POWER_SAFE: write a temporary (O_DIRECT
 *               for the bulk where the file system takes it), fsync, link(2)
 *               to the final name, unlink the temporary, fsync the directory.
 *   raw write   open(O_CREAT|O_EXCL) a temporary, write(2) the same bytes
 *               (buffered), fsync, close, rename(2) to a final name in the
 *               same directory, fsync the directory: the same durability
 *               (power safe, name included) by the cheapest route.
 *   tier read   get + release: open (O_DIRECT where used), fstat, read the
 *               whole file, check the header (key, lengths).
 *   raw read    open, read(2) the whole file into an aligned buffer, close.
 *
 * Reads are cold on both sides: before the read phase every file's clean
 * pages are dropped (fsync + posix_fadvise DONTNEED, no root needed), as a
 * chunk another node wrote is not in this node's page cache.  Each round
 * runs both sides, the order flipping every round, and deletes both sides'
 * files at its end.  Bandwidth is image bytes over elapsed time (GB/s = 1e9
 * B/s); ratio_vs_raw is tier over raw per round, medians [min..max] over 5
 * rounds (3 with --quick).  A benchmark reports; it does not fail.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cli/cli.h"
#include "format/object.h"
#include "tier/fsdir.h"

#define CMD "sharedfs"
#define SF_SIZES 2

static const struct {
	const char *model;
	uint32_t layers, heads;
} sf_models[SF_SIZES] = {
	{ "Qwen2.5-7B", 28, 4 },   /* 14 MiB */
	{ "Llama-3.1-8B", 32, 8 }, /* 32 MiB */
};

struct sf_fig {
	double tier_w[BENCH_MAX_ROUNDS], raw_w[BENCH_MAX_ROUNDS];
	double tier_r[BENCH_MAX_ROUNDS], raw_r[BENCH_MAX_ROUNDS];
	double ratio_w[BENCH_MAX_ROUNDS], ratio_r[BENCH_MAX_ROUNDS];
	uint64_t img;
};

static int sf_ns(int i, kvt_ns *ns)
{
	memset(ns, 0, sizeof(*ns));
	memset(ns->digest, 0x5f, sizeof(ns->digest));
	ns->digest[0] = (uint8_t)i;
	ns->layout = (kvt_layout){ .num_layers = sf_models[i].layers,
				   .num_kv_heads = sf_models[i].heads,
				   .head_dim = 128, .dtype = KVT_DTYPE_BF16,
				   .kv_planes = 2, .block_size = 256,
				   .chunk_tokens = 256 };
	ns->hash_scheme = KVT_HASH_SHA256;
	ns->tp_size = ns->pp_size = 1;
	return 0;
}

static void sf_key(kvt_key *k, int size, int round, int i)
{
	bench_chunk_key(k, (uint32_t)(size << 16 | round), 7, (uint64_t)i,
			"SHAREDFS");
}

/* Flush and drop the page cache of one file: a cold read follows. */
static void sf_drop_cache(const char *path)
{
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return;
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

static int sf_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY), rc;

	if (fd < 0)
		return -errno;
	rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

static int sf_write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* <dir>/r<round>.<i>.<ext>; -1 if it does not fit. */
static int sf_name(char *out, size_t cap, const char *dir, int round, int i,
		   const char *ext)
{
	return snprintf(out, cap, "%s/r%d.%d.%s", dir, round, i, ext) >= (int)cap
		       ? -1 : 0;
}

static int sf_raw_write(const char *dir, int round, int i, const uint8_t *img,
			size_t len)
{
	char tmp[PATH_MAX], fin[PATH_MAX];
	int fd;

	if (sf_name(tmp, sizeof(tmp), dir, round, i, "tmp"))
		return -1;
	if (sf_name(fin, sizeof(fin), dir, round, i, "obj"))
		return -1;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return -1;
	if (sf_write_all(fd, img, len) || fsync(fd)) {
		close(fd);
		return -1;
	}
	if (close(fd) || rename(tmp, fin))
		return -1;
	return sf_fsync_dir(dir) ? -1 : 0;
}

static int sf_raw_read(const char *dir, int round, int i, uint8_t *buf,
		       size_t len)
{
	char fin[PATH_MAX];
	size_t got = 0;
	int fd;

	if (sf_name(fin, sizeof(fin), dir, round, i, "obj"))
		return -1;
	fd = open(fin, O_RDONLY);
	if (fd < 0)
		return -1;
	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return got == len ? 0 : -1;
}

static void sf_tier_path(const char *root, const kvt_key *k, char *out,
			 size_t cap)
{
	static const char d[] = "0123456789abcdef";
	char hex[65];
	int i;

	for (i = 0; i < 32; i++) {
		hex[2 * i] = d[k->b[i] >> 4];
		hex[2 * i + 1] = d[k->b[i] & 15];
	}
	hex[64] = '\0';
	if (snprintf(out, cap, "%s/%.2s/%.2s/%s.kvt", root, hex, hex + 2, hex) >=
	    (int)cap)
		out[0] = '\0';
}

/* One side of one round; returns GB/s of writes in *w and reads in *r. */
static int sf_side(int tier_side, kvt_tier *t, const char *tier_dir,
		   const char *raw_dir, int size, int round, int n,
		   const uint8_t *const *imgs, uint64_t len, uint8_t *rbuf,
		   double *w, double *r)
{
	char path[PATH_MAX];
	double t0;
	int i, rc = 0;

	t0 = cli_now();
	for (i = 0; i < n && !rc; i++) {
		if (tier_side) {
			kvt_key k;
			kvt_tier_wbuf *wb;
			sf_key(&k, size, round, i);
			rc = t->ops->put_begin(t, &k, len, &wb);
			if (!rc) {
				memcpy(wb->iov[0].iov_base, imgs[i], (size_t)len);
				rc = t->ops->put_commit(t, wb, KVT_DUR_POWER_SAFE);
			}
		} else {
			rc = sf_raw_write(raw_dir, round, i, imgs[i], (size_t)len);
		}
	}
	if (rc)
		return rc;
	*w = (double)len * n / (cli_now() - t0) / 1e9;
	for (i = 0; i < n; i++) {
		if (tier_side) {
			kvt_key k;
			sf_key(&k, size, round, i);
			sf_tier_path(tier_dir, &k, path, sizeof(path));
		} else if (sf_name(path, sizeof(path), raw_dir, round, i, "obj")) {
			return -1;
		}
		sf_drop_cache(path);
	}
	t0 = cli_now();
	for (i = 0; i < n && !rc; i++) {
		if (tier_side) {
			kvt_key k;
			kvt_tier_rbuf *rb;
			sf_key(&k, size, round, i);
			rc = t->ops->get(t, &k, &rb);
			if (!rc) {
				if (rb->len != len)
					rc = -1;
				t->ops->release(t, rb);
			}
		} else {
			rc = sf_raw_read(raw_dir, round, i, rbuf, (size_t)len);
		}
	}
	if (rc)
		return rc;
	*r = (double)len * n / (cli_now() - t0) / 1e9;
	/* Clean up: both sides start each round with the same disk fill. */
	for (i = 0; i < n; i++) {
		if (tier_side) {
			kvt_key k;
			sf_key(&k, size, round, i);
			t->ops->del(t, &k);
		} else {
			if (!sf_name(path, sizeof(path), raw_dir, round, i, "obj"))
				unlink(path);
		}
	}
	return 0;
}

static void sf_usage(FILE *f)
{
	fprintf(f, "usage: kvtier-bench sharedfs [--json] [--quick] [--dir DIR] [--buffered]\n\n"
		   "The shared file-system tier's power-safe put and cold get of 14 and\n"
		   "32 MiB chunk images against a raw write+fsync+rename+dir fsync and a\n"
		   "raw read of the same bytes in the same directory (default: the\n"
		   "current directory; point it at the shared mount).  Prints\n"
		   "ratio_vs_raw (tier over raw bandwidth; the target is >= 0.85).\n"
		   "--buffered: the tier without O_DIRECT even where it is supported.\n");
}

int bench_sharedfs(int argc, char **argv)
{
	const char *base = ".";
	char root[PATH_MAX], tier_dir[PATH_MAX], raw_dir[PATH_MAX], buf[64];
	int json = 0, quick = 0, buffered = 0, rounds, n, s, r, i, direct = 0, rc = 0;
	struct sf_fig *fig;
	kvt_tier *t = NULL;
	uint8_t *rbuf, *payload = NULL;

	struct bench_opts bo = { .dir = base };
	for (i = 1; i < argc; i++) {
		int taken = bench_common_opt(CMD, argc, argv, &i, &bo, sf_usage);
		if (taken < 0)
			return taken == -2 ? 0 : 2;
		if (taken) {
			json = bo.json;
			quick = bo.quick;
			base = bo.dir;
		} else if (!strcmp(argv[i], "--buffered")) {
			buffered = 1;
		} else {
			return bench_unknown_opt(CMD, argv[i], sf_usage);
		}
	}
	rounds = quick ? 3 : 5;
	n = quick ? 4 : 8;
	if ((rc = bench_scratch_dir(CMD, base, "sharedfs", root, sizeof(root))))
		return rc;
	if (bench_path_join(tier_dir, sizeof(tier_dir), root, "tier") ||
	    bench_path_join(raw_dir, sizeof(raw_dir), root, "raw")) {
		fprintf(stderr, "kvtier-bench " CMD ": --dir is too long\n");
		bench_remove_tree(root);
		return 2;
	}
	if (mkdir(raw_dir, 0755)) {
		fprintf(stderr, "kvtier-bench " CMD ": cannot create %s: %s\n", raw_dir,
			strerror(errno));
		bench_remove_tree(root);
		return 1;
	}
	{
		kvt_fsdir_opts o = { .path = tier_dir, .capacity = 1ull << 40,
				     .direct = buffered ? -1 : 0 };
		if ((rc = kvt_fsdir_open(&o, &t))) {
			bench_remove_tree(root);
			return bench_fail(CMD, tier_dir, rc);
		}
		kvt_fsdir_info(t, &direct, NULL);
	}
	fig = calloc(SF_SIZES, sizeof(*fig));
	rbuf = bench_buffer(33u << 20);
	payload = bench_buffer(40u << 20);
	if (!fig || !rbuf || !payload) {
		rc = 1;
		goto out;
	}
	{
		uint64_t x = 0x9E3779B97F4A7C15ull, *p = (uint64_t *)payload;
		size_t j;
		for (j = 0; j < (40u << 20) / 8; j++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			p[j] = x;
		}
	}
	for (s = 0; s < SF_SIZES && !rc; s++) {
		kvt_ns ns;
		uint8_t **imgs = calloc((size_t)n, sizeof(*imgs));
		uint64_t len;

		sf_ns(s, &ns);
		len = KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns.layout);
		fig[s].img = len;
		for (i = 0; imgs && i < n; i++)
			imgs[i] = bench_buffer((size_t)len);
		for (r = 0; r < rounds && !rc; r++) {
			int first_tier = r & 1, side;
			double w[2] = { 0, 0 }, rd[2] = { 0, 0 };

			for (i = 0; i < n; i++) {
				uint64_t lb = kvt_layout_layer_bytes(&ns.layout), l;
				kvt_obj_hdr h;
				kvt_key k;
				const void **layers = calloc(ns.layout.num_layers,
							     sizeof(*layers));
				struct iovec dst = { imgs[i], (size_t)len };
				sf_key(&k, s, r, i);
				/* every image distinct: layer l of image i
				 * starts i x 4 KiB into the pattern */
				for (l = 0; l < ns.layout.num_layers; l++)
					layers[l] = payload + (uint64_t)i * 4096 +
						    (l * lb) % (len - lb);
				if (kvt_obj_hdr_init(&h, &ns, &k) ||
				    kvt_obj_write_iov(&h, layers, &dst, 1))
					rc = 1;
				free(layers);
			}
			for (side = 0; side < 2 && !rc; side++) {
				int tier_side = side == 0 ? first_tier : !first_tier;
				rc = sf_side(tier_side, t, tier_dir, raw_dir, s, r, n,
					     (const uint8_t *const *)imgs, len, rbuf,
					     &w[tier_side], &rd[tier_side]);
				if (rc)
					fprintf(stderr, "kvtier-bench " CMD ": %s side failed: %s\n",
						tier_side ? "tier" : "raw", kvt_errmsg());
			}
			fig[s].tier_w[r] = w[1];
			fig[s].raw_w[r] = w[0];
			fig[s].tier_r[r] = rd[1];
			fig[s].raw_r[r] = rd[0];
			fig[s].ratio_w[r] = w[0] > 0 ? w[1] / w[0] : 0;
			fig[s].ratio_r[r] = rd[0] > 0 ? rd[1] / rd[0] : 0;
		}
		for (i = 0; imgs && i < n; i++)
			free(imgs[i]);
		free(imgs);
	}
	if (rc)
		goto out;
	if (json) {
		printf("{\"bench\":\"sharedfs\",");
		bench_json_str("dir", base);
		printf(",\"o_direct\":%s,\"durability\":\"power_safe\",\"rounds\":%d,"
		       "\"objects\":%d,\"sizes\":[", direct ? "true" : "false", rounds, n);
		for (s = 0; s < SF_SIZES; s++) {
			printf("%s{\"model\":\"%s\",\"image_bytes\":%llu,\"write\":{",
			       s ? "," : "", sf_models[s].model,
			       (unsigned long long)fig[s].img);
			bench_json_summary("tier_gbps", bench_summarize(fig[s].tier_w, rounds));
			printf(",");
			bench_json_summary("raw_gbps", bench_summarize(fig[s].raw_w, rounds));
			printf(",");
			bench_json_summary("ratio_vs_raw", bench_summarize(fig[s].ratio_w, rounds));
			printf("},\"read\":{");
			bench_json_summary("tier_gbps", bench_summarize(fig[s].tier_r, rounds));
			printf(",");
			bench_json_summary("raw_gbps", bench_summarize(fig[s].raw_r, rounds));
			printf(",");
			bench_json_summary("ratio_vs_raw", bench_summarize(fig[s].ratio_r, rounds));
			printf("}}");
		}
		printf("]}\n");
	} else {
		printf("kvtier-bench sharedfs: %s (O_DIRECT %s), %d x image per size, "
		       "%d rounds, medians [min..max]\n"
		       "write: power-safe put vs write+fsync+rename+dir fsync; "
		       "read: cold get vs cold read\n\n",
		       base, direct ? "on" : "off", n, rounds);
		printf("%-14s %-6s %-22s %-22s %s\n", "chunk", "op", "tier GB/s",
		       "raw GB/s", "ratio_vs_raw (>= 0.85)");
		for (s = 0; s < SF_SIZES; s++) {
			char a[64], b[64];
			snprintf(buf, sizeof(buf), "%s %lluM", sf_models[s].model,
				 (unsigned long long)(fig[s].img >> 20));
			printf("%-14s %-6s %-22s %-22s %s\n", sf_models[s].model, "write",
			       bench_fmt_summary(bench_summarize(fig[s].tier_w, rounds), a, sizeof(a)),
			       bench_fmt_summary(bench_summarize(fig[s].raw_w, rounds), b, sizeof(b)),
			       bench_fmt_summary(bench_summarize(fig[s].ratio_w, rounds), buf, sizeof(buf)));
			printf("%-14s %-6s %-22s %-22s %s\n", "", "read",
			       bench_fmt_summary(bench_summarize(fig[s].tier_r, rounds), a, sizeof(a)),
			       bench_fmt_summary(bench_summarize(fig[s].raw_r, rounds), b, sizeof(b)),
			       bench_fmt_summary(bench_summarize(fig[s].ratio_r, rounds), buf, sizeof(buf)));
		}
	}
out:
	if (t)
		t->ops->close(t);
	free(fig);
	free(rbuf);
	free(payload);
	bench_remove_tree(root);
	return rc ? 1 : 0;
}
