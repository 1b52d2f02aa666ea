/*
 * nvme.c — `kvtier-bench nvme`: the NVMe tier's sequential bandwidth
 * against fio on the same directory, and its index rebuild at restart
 * against a plain header scan.
 *
 * The store under test has only the disk tier (local_cpu: false, local_disk:
 * a fresh directory), so every put writes the disk and every get reads it
 * and verifies the chunk's checksums, as a get from a disk tier always does.
 * The bounds, exactly:
 *
 *   fio        the fio binary on PATH, run as a child process, no shell:
 *                fio --name=kvtier-bound --directory=DIR/fio
 *                    --ioengine=io_uring --direct=1 --rw=write|read
 *                    --bs=<chunk payload> --iodepth=16 --numjobs=1
 *                    --size=<N x chunk payload> --output-format=json
 *                    --output=DIR/fio.json
 *              The write job creates the file (fio's defaults: fallocate'd
 *              up front, random buffer contents), the read job reads that
 *              same file back; the bound is jobs[0].<write|read>.bw_bytes.
 *              The file is deleted after the read.
 *   raw_scan   in this process: a recursive readdir walk of the rebuilt
 *              tier's directory that opens every *.kvt file (O_DIRECT where
 *              the file system allows it, as the tier reads), preads its
 *              first 4 KiB and closes it.  What any rebuild has to do at
 *              least; parsing and checking the header and building the
 *              index is what the store adds.
 *
 * Subjects:
 *
 *   write    kvt_put_async of N distinct chunks (256 bf16 tokens of K and V
 *            per rank of Qwen2.5-7B: 14 MiB, and Llama-3.1-8B: 32 MiB),
 *            16 ops outstanding, store workers 16, nvme_queue_depth 16,
 *            durability crash-safe (in the device once the put returns,
 *            not fsynced: what fio's O_DIRECT writes without fsync give).
 *   read     kvt_get_async of the same N chunks into 16 rotating caller
 *            buffers, 16 outstanding: each a full read plus verification.
 *   rebuild  kvt_store_open of a disk-only store holding 100,000 chunks
 *            (10,000 with --quick) of 8 KiB payload (1 layer x 1 head x
 *            16 dims x 256 tokens, f16, one plane; 12 KiB images), timed
 *            until it returns, in chunks per second.
 *
 * Bandwidth is payload bytes over elapsed time, GB/s = 1e9 bytes/s; the
 * subject also writes a 4 KiB header per chunk that it is not credited for.
 * fio moves exactly N x payload bytes.  Each round runs the bound's write
 * and read and the subject's write and read, the order flipping every round;
 * the subject's chunks (kvt_delete) and fio's file are deleted before the
 * other side runs, so both see the same disk fill.  3 rounds (2 with --quick
 * and a quarter of the bytes).  Figures are medians [min..max] over rounds,
 * ratios the median of the per-round ratios; ratio_vs_fio and
 * ratio_vs_raw_scan are subject over bound in bandwidth (chunks/s for the
 * rebuild), so higher is better for both.
 *
 * Free space is checked first (statvfs): the bandwidth part needs 1.2x its
 * bytes, the rebuild 16 KiB per chunk plus 20%; short of that N is scaled
 * down (to no fewer than 8 chunks per size, 1,000 for the rebuild) and the
 * output says so; if even that does not fit, the part is skipped, printed as
 * such and marked "skipped" in the JSON, and the exit code stays 0.
 *
 * A benchmark reports; it does not fail: a figure below its target is
 * printed as such and the exit code stays 0.  1 means something went wrong
 * (a call failed, a chunk read back differs from what was put, fio failed);
 * 2 a usage error or fio missing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "bench.h"
#include "cli/cli.h"
#include "fio.h"
#include "kvtier/units.h"

#define CMD "nvme"
#define MAX_ROUNDS 3
#define IN_FLIGHT 16
#define HEADER_BYTES 4096u
#define TARGET_VS_FIO 0.85
#define MIN_CHUNKS 8
#define MIN_REBUILD 1000
#define REBUILD_FILE_BYTES (16u << 10) /* 12 KiB image + inode, dirents */

#define ROW_FMT "  %-7s %-7s %-22s %-22s %-8s %-8s %s"

static const char *const chunk_models[] = {
	"qwen2.5-7b",  /* 14 MiB */
	"llama3.1-8b", /* 32 MiB */
};
#define N_SIZES (sizeof(chunk_models) / sizeof(chunk_models[0]))

enum op { OP_WRITE, OP_READ };
static const char *const op_names[] = { "write", "read" };

struct figure {
	enum op op;
	const char *model;
	uint64_t chunk_bytes;
	long chunks;
	double bound[MAX_ROUNDS], subj[MAX_ROUNDS]; /* GB/s */
};

struct bench {
	int json, quick, rounds;
	char base[1024];   /* the directory every file of the run lives under */
	int base_made;     /* we created it: remove it after */
	char fs_type[32];
	unsigned long fs_magic;
	uint64_t free_bytes, free_inodes;
	struct bench_fio fio;

	struct figure fig[N_SIZES * 2];
	int n_fig;
	long want_chunks[N_SIZES];
	int bw_scaled;
	const char *bw_skipped; /* reason, or NULL */

	long rebuild_n, rebuild_want;
	int rebuild_scaled;
	const char *rebuild_skipped;
	double scan_s[MAX_ROUNDS], open_s[MAX_ROUNDS];
	long scan_files;
	uint64_t scan_bytes;
};

/* ------------------------------------------------------------------------ */
/* Statistics (as dram.c)                                                    */
/* ------------------------------------------------------------------------ */

static struct summary fig_ratio(const struct figure *f, int rounds)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < rounds; r++)
		v[r] = f->subj[r] / f->bound[r];
	return bench_summarize(v, rounds);
}

/* Rebuild figures in chunks per second. */
static struct summary rate_summary(const double *secs, long n, int rounds)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < rounds; r++)
		v[r] = (double)n / secs[r];
	return bench_summarize(v, rounds);
}

static struct summary rebuild_ratio(const struct bench *b)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < b->rounds; r++)
		v[r] = b->scan_s[r] / b->open_s[r];
	return bench_summarize(v, b->rounds);
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

static const char *fs_name(unsigned long magic)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} names[] = {
		{ 0xEF53, "ext4" },       { 0x58465342, "xfs" },
		{ 0x9123683E, "btrfs" },  { 0xF2F52010, "f2fs" },
		{ 0x2FC12FC1, "zfs" },    { 0x01021994, "tmpfs" },
		{ 0x794C7630, "overlayfs" }, { 0x65735546, "fuse" },
		{ 0x6969, "nfs" },        { 0xFF534D42, "cifs" },
		{ 0x00C36400, "ceph" },   { 0x0BD00BD0, "lustre" },
		{ 0x47504653, "gpfs" },   { 0x4244, "hfs" },
		{ 0x5346544E, "ntfs" },   { 0x4D44, "vfat" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].magic == magic)
			return names[i].name;
	return "unknown";
}

/* The file system under the run's directory, its free space and inodes. */
static int fs_probe(struct bench *b)
{
	struct statfs sf;
	struct statvfs sv;

	if (statfs(b->base, &sf) || statvfs(b->base, &sv)) {
		fprintf(stderr, "kvtier-bench " CMD ": %s: %s\n", b->base, strerror(errno));
		return 1;
	}
	b->fs_magic = (unsigned long)sf.f_type;
	snprintf(b->fs_type, sizeof(b->fs_type), "%s", fs_name(b->fs_magic));
	b->free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	b->free_inodes = sv.f_favail;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Store                                                                     */
/* ------------------------------------------------------------------------ */

/* A store with the disk tier alone, settings explicit so that a changed
 * default does not silently change what the figures mean. */
static int open_store(const char *dir, uint64_t capacity, kvt_store **st,
		      int quiet_fail)
{
	static const char *const fixed[][2] = {
		{ "local_cpu", "false" },
		{ "nvme_queue_depth", "16" },
		{ "nvme_io_uring", "true" },
		{ "workers", "16" },
	};
	kvt_config *cfg = kvt_config_new();
	char cap[48];
	int rc = 0;

	if (!cfg)
		return bench_fail(CMD, "kvt_config_new", KVT_ENOMEM);
	rc = bench_config_set_all(cfg, fixed, sizeof(fixed) / sizeof(fixed[0]));
	snprintf(cap, sizeof(cap), "%lluMiB",
		 (unsigned long long)((capacity + (1u << 20) - 1) >> 20));
	if (!rc)
		rc = kvt_config_set(cfg, "max_local_disk_size", cap);
	if (!rc)
		rc = kvt_config_set(cfg, "local_disk", dir);
	return bench_store_open(CMD, "kvt_store_open", cfg, rc, quiet_fail, st);
}

/* n puts (bufs == NULL) or gets of keys tag/seq0.., IN_FLIGHT outstanding,
 * oldest waited for first.  Gets rotate through bufs[IN_FLIGHT]. */
static int delete_all(kvt_store *st, const kvt_ns *ns, uint32_t tag,
		      uint8_t kind, uint64_t seq0, long n)
{
	for (long i = 0; i < n; i++) {
		kvt_key k;
		int rc;

		bench_chunk_key(&k, tag, kind, seq0 + (uint64_t)i, "kvtnvme!");
		if ((rc = kvt_delete(st, ns, &k)) && rc != KVT_ENOTFOUND)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Bandwidth                                                                 */
/* ------------------------------------------------------------------------ */

static int subject_round(struct bench *b, kvt_store *st, const kvt_ns *ns,
			 uint32_t tag, uint64_t seq0, struct figure *fw,
			 struct figure *fr, int r, const uint8_t *src,
			 uint8_t *const *bufs)
{
	size_t bytes = (size_t)fw->chunk_bytes;
	double ws = 0, rs = 0;
	int rc;

	(void)b;
	if ((rc = bench_async_run(st, ns, tag, 'W', seq0, fw->chunks, src, NULL, bytes, "kvtnvme!", &ws)))
		return bench_fail(CMD, "kvt_put_async (write)", rc);
	if ((rc = bench_async_run(st, ns, tag, 'W', seq0, fw->chunks, NULL, bufs, bytes, "kvtnvme!", &rs)))
		return bench_fail(CMD, "kvt_get_async (read)", rc);
	/* Untimed: the last chunk read is what was put. */
	if (memcmp(bufs[(fw->chunks - 1) % IN_FLIGHT], src, bytes)) {
		fprintf(stderr, "kvtier-bench " CMD ": a chunk read back differs from the "
			"one put\n");
		return 1;
	}
	if ((rc = delete_all(st, ns, tag, 'W', seq0, fw->chunks)))
		return bench_fail(CMD, "kvt_delete", rc);
	fw->subj[r] = (double)fw->chunks * (double)bytes / ws / 1e9;
	fr->subj[r] = (double)fr->chunks * (double)bytes / rs / 1e9;
	return 0;
}

static int bound_round(struct bench *b, struct figure *fw, struct figure *fr, int r)
{
	uint64_t size = (uint64_t)fw->chunks * fw->chunk_bytes;
	int rc;

	rc = bench_fio_run(&b->fio, CMD, b->base, op_names[OP_WRITE], fw->chunk_bytes, size,
			   &fw->bound[r]);
	if (!rc)
		rc = bench_fio_run(&b->fio, CMD, b->base, op_names[OP_READ], fw->chunk_bytes,
				   size, &fr->bound[r]);
	bench_fio_clean(b->base);
	return rc;
}

static int bench_bandwidth(struct bench *b)
{
	kvt_ns_desc d[N_SIZES];
	uint64_t max = 0, need = 0, image[N_SIZES];
	uint8_t *src = NULL, *bufs[IN_FLIGHT] = { 0 };
	char dir[1100];
	kvt_store *st = NULL;
	int ret = 1, rc;

	for (size_t i = 0; i < N_SIZES; i++) {
		uint64_t n;

		if (bench_chunk_desc(CMD, chunk_models[i], &d[i]))
			return 1;
		n = kvt_layout_payload_bytes(&d[i].layout);
		if (n == 0)
			return bench_fail(CMD, d[i].model, kvt_layout_check(&d[i].layout));
		image[i] = n + HEADER_BYTES;
		if (n > max)
			max = n;
		/* About 1.75 GiB per size (quarter with --quick), >= 8. */
		b->want_chunks[i] = (long)((b->quick ? 448ull << 20 : 1792ull << 20) / n);
		if (b->want_chunks[i] < MIN_CHUNKS)
			b->want_chunks[i] = MIN_CHUNKS;
	}

	/* Sizes run one at a time and clean up after themselves, so the disk
	 * must hold the largest one once, with 20% to spare. */
	for (size_t i = 0; i < N_SIZES; i++) {
		uint64_t room = (uint64_t)((double)b->free_bytes / 1.2);
		long n = b->want_chunks[i];

		if ((uint64_t)n * image[i] > room) {
			n = (long)(room / image[i]);
			b->bw_scaled = 1;
		}
		if (n < MIN_CHUNKS) {
			b->bw_skipped = "not enough free space for 8 chunks of each size "
					"with 20% to spare";
			return 0;
		}
		b->fig[b->n_fig++] = (struct figure){ .op = OP_WRITE, .model = d[i].model,
			.chunk_bytes = image[i] - HEADER_BYTES, .chunks = n };
		b->fig[b->n_fig++] = (struct figure){ .op = OP_READ, .model = d[i].model,
			.chunk_bytes = image[i] - HEADER_BYTES, .chunks = n };
		if ((uint64_t)n * image[i] > need)
			need = (uint64_t)n * image[i];
	}

	src = bench_buffer((size_t)max);
	for (int i = 0; i < IN_FLIGHT; i++)
		bufs[i] = bench_buffer((size_t)max);
	if (!src || !bufs[IN_FLIGHT - 1]) {
		bench_fail(CMD, "buffers", KVT_ENOMEM);
		goto out;
	}
	bench_fill_random(src, (size_t)max, 0x9e3779b97f4a7c15ull);
	if (bench_path_join(dir, sizeof(dir), b->base, "store")) {
		bench_fail(CMD, "store path", KVT_EINVAL);
		goto out;
	}
	if (open_store(dir, need + (need >> 3) + (64u << 20), &st, 0))
		goto out;

	for (size_t i = 0; i < N_SIZES; i++) {
		struct figure *fw = &b->fig[2 * i], *fr = &b->fig[2 * i + 1];
		kvt_ns ns;

		if ((rc = kvt_ns_init(st, &d[i], &ns))) {
			bench_fail(CMD, d[i].model, rc);
			goto out;
		}
		/* Warm-up, untimed: the first files of a store create its
		 * directories, and the first fio run loads fio's pages. */
		if ((rc = bench_async_run(st, &ns, (uint32_t)i, 'U', 0, IN_FLIGHT, src, NULL,
				    (size_t)fw->chunk_bytes, "kvtnvme!", &(double){ 0 })) ||
		    (rc = delete_all(st, &ns, (uint32_t)i, 'U', 0, IN_FLIGHT))) {
			bench_fail(CMD, "warm-up", rc);
			goto out;
		}
		for (int r = 0; r < b->rounds; r++) {
			uint64_t seq0 = (uint64_t)r << 32;

			if (r % 2 == 0) {
				if (bound_round(b, fw, fr, r) ||
				    subject_round(b, st, &ns, (uint32_t)i, seq0, fw, fr, r,
						  src, bufs))
					goto out;
			} else {
				if (subject_round(b, st, &ns, (uint32_t)i, seq0, fw, fr, r,
						  src, bufs) ||
				    bound_round(b, fw, fr, r))
					goto out;
			}
		}
	}
	ret = 0;
out:
	kvt_store_close(st);
	free(src);
	for (int i = 0; i < IN_FLIGHT; i++)
		free(bufs[i]);
	if (bench_path_join(dir, sizeof(dir), b->base, "store") == 0)
		bench_remove_tree(dir);
	bench_fio_clean(b->base);
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Rebuild                                                                   */
/* ------------------------------------------------------------------------ */

struct scan {
	uint8_t *buf; /* 4 KiB, aligned for O_DIRECT */
	long files;
	uint64_t bytes;
};

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !memcmp(s + n - m, suffix, m);
}

/* The raw header scan: walk, open, pread 4 KiB, close. */
static int scan_dir(struct scan *s, const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int bad = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) && !bad) {
		char sub[4096];

		if (e->d_name[0] == '.')
			continue;
		if (bench_path_join(sub, sizeof(sub), path, e->d_name)) {
			bad = 1;
			break;
		}
		if (e->d_type == DT_DIR) {
			bad = scan_dir(s, sub) != 0;
		} else if ((e->d_type == DT_REG || e->d_type == DT_UNKNOWN) &&
			   ends_with(e->d_name, ".kvt")) {
			int fd = open(sub, O_RDONLY | O_DIRECT | O_CLOEXEC);
			ssize_t n;

			if (fd < 0 && errno == EINVAL)
				fd = open(sub, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				bad = 1;
				break;
			}
			n = pread(fd, s->buf, HEADER_BYTES, 0);
			close(fd);
			if (n < 0) {
				bad = 1;
				break;
			}
			s->files++;
			s->bytes += (uint64_t)n;
		}
	}
	closedir(d);
	return bad ? -1 : 0;
}

static int bench_rebuild(struct bench *b)
{
	kvt_ns_desc d = {
		.model = "kvtier/bench-rebuild",
		.layout = { .num_layers = 1, .num_kv_heads = 1, .head_dim = 16,
			    .dtype = KVT_DTYPE_F16, .kv_planes = 1, .block_size = 16,
			    .chunk_tokens = 256 },
		.tp_size = 1,
		.pp_size = 1,
		.hash_scheme = KVT_HASH_SHA256,
	};
	uint8_t payload[8192];
	char dir[1100];
	struct scan s = { 0 };
	kvt_store *st = NULL;
	kvt_ns ns;
	uint64_t capacity, room;
	long n = b->rebuild_want;
	int rc, ret = 1;

	room = (uint64_t)((double)b->free_bytes / 1.2);
	if ((uint64_t)n * REBUILD_FILE_BYTES > room) {
		n = (long)(room / REBUILD_FILE_BYTES);
		b->rebuild_scaled = 1;
	}
	if (b->free_inodes && (uint64_t)n + 1000 > b->free_inodes) {
		n = b->free_inodes > 1000 ? (long)(b->free_inodes - 1000) : 0;
		b->rebuild_scaled = 1;
	}
	if (n < MIN_REBUILD) {
		b->rebuild_skipped = "not enough free space or inodes for 1000 chunks";
		return 0;
	}
	b->rebuild_n = n;
	if (kvt_layout_payload_bytes(&d.layout) != sizeof(payload)) {
		fprintf(stderr, "kvtier-bench " CMD ": rebuild layout is not 8 KiB\n");
		return 1;
	}
	bench_fill_random(payload, sizeof(payload), 0x2545f4914f6cdd1dull);
	if (bench_path_join(dir, sizeof(dir), b->base, "rebuild"))
		return bench_fail(CMD, "rebuild path", KVT_EINVAL);
	capacity = (uint64_t)n * REBUILD_FILE_BYTES + (64u << 20);
	if (open_store(dir, capacity, &st, 0))
		goto out;
	if ((rc = kvt_ns_init(st, &d, &ns))) {
		bench_fail(CMD, "rebuild namespace", rc);
		goto out;
	}
	if ((rc = bench_async_run(st, &ns, 99, 'R', 0, n, payload, NULL, sizeof(payload),
				  "kvtnvme!", &(double){ 0 }))) {
		bench_fail(CMD, "kvt_put_async (rebuild chunks)", rc);
		goto out;
	}
	kvt_store_close(st);
	st = NULL;

	if (posix_memalign((void **)&s.buf, 4096, HEADER_BYTES)) {
		bench_fail(CMD, "scan buffer", KVT_ENOMEM);
		goto out;
	}
	for (int r = 0; r < b->rounds; r++) {
		for (int k = 0; k < 2; k++) {
			int scan_now = (k == 0) == (r % 2 == 0);
			double t0 = cli_now();

			if (scan_now) {
				s.files = 0;
				s.bytes = 0;
				if (scan_dir(&s, dir)) {
					fprintf(stderr, "kvtier-bench " CMD ": raw scan of %s: %s\n",
						dir, strerror(errno));
					goto out;
				}
				b->scan_s[r] = cli_now() - t0;
				if (s.files != n) {
					fprintf(stderr, "kvtier-bench " CMD ": raw scan found %ld "
						"files, %ld were put\n", s.files, n);
					goto out;
				}
			} else {
				kvt_tier_stats ts;

				if ((rc = open_store(dir, capacity, &st, 1))) {
					bench_fail(CMD, "kvt_store_open (rebuild)", rc);
					goto out;
				}
				b->open_s[r] = cli_now() - t0;
				if ((rc = kvt_store_stats(st, 0, &ts))) {
					bench_fail(CMD, "kvt_store_stats", rc);
					goto out;
				}
				if (ts.chunks != (uint64_t)n) {
					fprintf(stderr, "kvtier-bench " CMD ": the reopened store "
						"holds %llu chunks, %ld were put\n",
						(unsigned long long)ts.chunks, n);
					goto out;
				}
				kvt_store_close(st);
				st = NULL;
			}
		}
	}
	b->scan_files = s.files;
	b->scan_bytes = s.bytes;
	ret = 0;
out:
	kvt_store_close(st);
	free(s.buf);
	bench_remove_tree(dir);
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Reports                                                                   */
/* ------------------------------------------------------------------------ */


static void print_table(const struct bench *b)
{
	char buf[64];

	printf("kvtier-bench nvme: %d rounds; each figure is the median [min..max]\n"
	       "over rounds, each ratio the median of the per-round ratios (bound and\n"
	       "subject alternate within a round).  GB/s = 1e9 payload bytes/s.\n"
	       "Directory: %s on %s (statfs magic 0x%lx), %s free.\n"
	       "Bound: %s (%s), io_uring, O_DIRECT, iodepth 16, bs = chunk payload.\n"
	       "Store: local_cpu false, nvme_queue_depth 16, nvme_io_uring true,\n"
	       "workers 16, 16 async ops outstanding, puts crash-safe.\n",
	       b->rounds, b->base, b->fs_type, b->fs_magic,
	       kvt_fmt_size(b->free_bytes, buf, sizeof(buf)), b->fio.path, b->fio.version);

	printf("\nsequential write (kvt_put_async) and read (kvt_get_async + verify)\n");
	if (b->bw_skipped) {
		printf("  skipped: %s\n", b->bw_skipped);
	} else {
		if (b->bw_scaled)
			printf("  (chunk counts scaled down to fit the free space)\n");
		bench_print_row(ROW_FMT, "op", "chunk", "fio GB/s", "kvtier GB/s", "ratio", "target", "");
		for (int i = 0; i < b->n_fig; i++) {
			const struct figure *f = &b->fig[i];
			struct summary r = fig_ratio(f, b->rounds);
			char c1[32], a[48], s[48], rt[24], tg[16];

			snprintf(c1, sizeof(c1), "%lluMiB",
				 (unsigned long long)(f->chunk_bytes >> 20));
			snprintf(rt, sizeof(rt), "%.3fx", r.median);
			snprintf(tg, sizeof(tg), ">=%.2fx", TARGET_VS_FIO);
			bench_print_row(ROW_FMT, op_names[f->op], c1,
				  bench_fmt_summary(bench_summarize(f->bound, b->rounds), a, sizeof(a)),
				  bench_fmt_summary(bench_summarize(f->subj, b->rounds), s, sizeof(s)),
				  rt, tg, r.median >= TARGET_VS_FIO ? "PASS" : "BELOW");
		}
		printf("  chunks per round:");
		for (int i = 0; i < b->n_fig; i += 2)
			printf("%s %ld x %llu MiB", i ? "," : "", b->fig[i].chunks,
			       (unsigned long long)(b->fig[i].chunk_bytes >> 20));
		printf("\n");
	}

	printf("\nindex rebuild: kvt_store_open over the tier's chunks (8 KiB payload)\n");
	if (b->rebuild_skipped) {
		printf("  skipped: %s\n", b->rebuild_skipped);
	} else {
		struct summary r = rebuild_ratio(b);
		char a[48], s[48], c[48], rt[24];

		if (b->rebuild_scaled)
			printf("  (chunk count scaled down to fit the free space)\n");
		bench_print_row(ROW_FMT, "chunks", "", "raw_scan chunks/s", "open chunks/s", "ratio",
			  "target", "");
		snprintf(c, sizeof(c), "%ld", b->rebuild_n);
		snprintf(rt, sizeof(rt), "%.3fx", r.median);
		bench_print_row(ROW_FMT, c, "", bench_fmt_summary(rate_summary(b->scan_s, b->rebuild_n,
							  b->rounds), a, sizeof(a)),
			  bench_fmt_summary(rate_summary(b->open_s, b->rebuild_n, b->rounds), s,
				      sizeof(s)),
			  rt, "-", "");
		printf("  open time %s s (median [min..max])\n",
		       bench_fmt_summary(bench_summarize(b->open_s, b->rounds), a, sizeof(a)));
	}
}

static void print_json(const struct bench *b)
{
	printf("{\"bench\":\"nvme\",\"version\":\"%s\",\"rounds\":%d,\"quick\":%s,"
	       "\"skipped\":%s,\"gbps\":\"1e9 payload bytes/s\",",
	       KVT_VERSION_STRING, b->rounds, b->quick ? "true" : "false",
	       b->bw_skipped && b->rebuild_skipped ? "true" : "false");
	bench_json_str("dir", b->base);
	printf(",\"fs\":{\"type\":\"%s\",\"magic\":\"0x%lx\",\"free_bytes\":%llu,"
	       "\"free_inodes\":%llu},",
	       b->fs_type, b->fs_magic, (unsigned long long)b->free_bytes,
	       (unsigned long long)b->free_inodes);
	printf("\"fio\":{");
	bench_json_str("path", b->fio.path);
	putchar(',');
	bench_json_str("version", b->fio.version);
	printf(",\"command\":\"" BENCH_FIO_COMMAND "\"},");
	printf("\"store\":{\"local_cpu\":false,\"nvme_queue_depth\":16,"
	       "\"nvme_io_uring\":true,\"workers\":16,\"in_flight\":%d,"
	       "\"durability\":\"crash_safe\"},",
	       IN_FLIGHT);
	printf("\"bandwidth_skipped\":");
	if (b->bw_skipped)
		printf("\"%s\"", b->bw_skipped);
	else
		printf("null");
	printf(",\"scaled\":%s,\"results\":[", b->bw_scaled ? "true" : "false");
	for (int i = 0; !b->bw_skipped && i < b->n_fig; i++) {
		const struct figure *f = &b->fig[i];
		struct summary r = fig_ratio(f, b->rounds);

		printf("%s{\"op\":\"%s\",\"model\":\"%s\",\"chunk_bytes\":%llu,"
		       "\"image_bytes\":%llu,\"chunks\":%ld,\"total_bytes\":%llu,",
		       i ? ",\n" : "\n", op_names[f->op], f->model,
		       (unsigned long long)f->chunk_bytes,
		       (unsigned long long)(f->chunk_bytes + HEADER_BYTES), f->chunks,
		       (unsigned long long)(f->chunk_bytes * (uint64_t)f->chunks));
		bench_json_summary("fio_gbps", bench_summarize(f->bound, b->rounds));
		putchar(',');
		bench_json_summary("subject_gbps", bench_summarize(f->subj, b->rounds));
		printf(",\"ratio_vs_fio\":%.6g,", r.median);
		bench_json_summary("ratio_range", r);
		printf(",\"target\":%.6g,\"better\":\"higher\",\"pass\":%s}",
		       TARGET_VS_FIO, r.median >= TARGET_VS_FIO ? "true" : "false");
	}
	printf("],\n\"rebuild\":");
	if (b->rebuild_skipped) {
		printf("{\"skipped\":\"%s\",\"chunks\":0}", b->rebuild_skipped);
	} else {
		struct summary r = rebuild_ratio(b);

		printf("{\"skipped\":null,\"scaled\":%s,\"chunks\":%ld,"
		       "\"payload_bytes\":8192,\"image_bytes\":12288,"
		       "\"scan_bytes_per_file\":%llu,",
		       b->rebuild_scaled ? "true" : "false", b->rebuild_n,
		       (unsigned long long)(b->scan_files
						    ? b->scan_bytes / (uint64_t)b->scan_files
						    : 0));
		bench_json_summary("raw_scan_seconds", bench_summarize(b->scan_s, b->rounds));
		putchar(',');
		bench_json_summary("open_seconds", bench_summarize(b->open_s, b->rounds));
		putchar(',');
		bench_json_summary("raw_scan_chunks_per_s",
			     rate_summary(b->scan_s, b->rebuild_n, b->rounds));
		putchar(',');
		bench_json_summary("subject_chunks_per_s",
			     rate_summary(b->open_s, b->rebuild_n, b->rounds));
		printf(",\"ratio_vs_raw_scan\":%.6g,", r.median);
		bench_json_summary("ratio_range", r);
		printf(",\"target\":null,\"better\":\"higher\",\"pass\":null}");
	}
	printf("}\n");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench nvme [--json] [--quick] [--dir DIR]\n"
		"\n"
		"Measures the NVMe (local_disk) tier alone, each figure as a ratio\n"
		"against a bound run on the same directory, interleaved round by round.\n"
		"\n"
		"  write    kvt_put_async, 16 outstanding           vs fio write  target >= 0.85x\n"
		"  read     kvt_get_async + verify, 16 outstanding  vs fio read   target >= 0.85x\n"
		"  rebuild  kvt_store_open over 100,000 chunks      vs raw scan   (no target)\n"
		"\n"
		"Chunks are 256 bf16 tokens of K and V per rank of Qwen2.5-7B (14 MiB) and\n"
		"Llama-3.1-8B (32 MiB), about 1.75 GiB of each per round; the rebuild's\n"
		"chunks have 8 KiB payloads.  Store: local_cpu false, workers 16,\n"
		"nvme_queue_depth 16, nvme_io_uring true; puts are crash-safe.\n"
		"\n"
		"The bounds, exactly:\n"
		"  fio       fio --name=kvtier-bound --directory=DIR/fio --ioengine=io_uring\n"
		"            --direct=1 --rw=write|read --bs=CHUNK --iodepth=16 --numjobs=1\n"
		"            --size=N*CHUNK --output-format=json --output=DIR/fio.json;\n"
		"            jobs[0].write|read.bw_bytes.  fio must be on PATH (Debian:\n"
		"            apt-get install fio).\n"
		"  raw_scan  readdir walk of the tier's directory, open (O_DIRECT) + pread\n"
		"            of 4 KiB + close of every *.kvt file, in this process.\n"
		"\n"
		"  --dir DIR  run in a fresh directory made under DIR (default /var/tmp);\n"
		"             it is removed afterwards.  Free space is checked first and\n"
		"             the chunk counts scaled down to fit, or the part skipped.\n"
		"  --json     print every figure as one JSON object; ratios are in fields\n"
		"             named ratio_vs_<bound> (ratio_vs_fio, ratio_vs_raw_scan)\n"
		"  --quick    2 rounds, a quarter of the bytes, 10,000 rebuild chunks\n"
		"\n"
		"Figures are medians [min..max] over rounds.  A figure short of its target\n"
		"is reported, not an error: the exit code is 0 unless something failed\n"
		"(1), or on a usage error or fio missing (2).\n");
}

int bench_nvme(int argc, char **argv)
{
	struct bench *b = calloc(1, sizeof(*b));
	const char *parent = "/var/tmp";
	int ret = 1;

	if (!b)
		return bench_fail(CMD, "setup", KVT_ENOMEM);
	struct bench_opts o = { .dir = parent };
	for (int i = 1; i < argc; i++) {
		int r = bench_common_opt(CMD, argc, argv, &i, &o, usage);
		if (r <= 0) { /* nvme has no option of its own */
			free(b);
			return r == -2 ? 0 : r < 0 ? 2 : bench_unknown_opt(CMD, argv[i], usage);
		}
	}
	b->json = o.json;
	b->quick = o.quick;
	parent = o.dir;
	b->rounds = b->quick ? 2 : MAX_ROUNDS;
	b->rebuild_want = b->quick ? 10000 : 100000;

	if (!bench_fio_find(&b->fio)) {
		fprintf(stderr, "kvtier-bench " CMD ": fio not found on PATH; this benchmark's "
			"bound is fio (Debian/Ubuntu: apt-get install fio)\n");
		free(b);
		return 2;
	}
	if ((ret = bench_scratch_dir(CMD, parent, "nvme", b->base, sizeof(b->base)))) {
		free(b);
		return ret;
	}
	ret = 1;
	b->base_made = 1;
	if (fs_probe(b))
		goto out;
	bench_fio_version(&b->fio, b->base);
	if (!b->json)
		fprintf(stderr, "kvtier-bench " CMD ": working in %s (%s)\n", b->base, b->fs_type);

	if (bench_bandwidth(b))
		goto out;
	if (fs_probe(b) || bench_rebuild(b))
		goto out;
	ret = 0;
	if (b->json)
		print_json(b);
	else
		print_table(b);
out:
	if (b->base_made && bench_remove_tree(b->base))
		fprintf(stderr, "kvtier-bench " CMD ": could not remove all of %s\n", b->base);
	free(b);
	return ret;
}
