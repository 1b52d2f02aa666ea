/*
 * fio.c — run fio as the bound of a benchmark (fio.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "cli/cli.h"
#include "fio.h"

int bench_fio_find(struct bench_fio *f)
{
	return bench_which("fio", f->path, sizeof(f->path));
}

void bench_fio_version(struct bench_fio *f, const char *scratch)
{
	char out[1100];
	char *argv[] = { f->path, "--version", NULL };
	uint8_t *txt = NULL;
	size_t len = 0;

	snprintf(f->version, sizeof(f->version), "unknown");
	if (bench_path_join(out, sizeof(out), scratch, "fio.version") ||
	    bench_run(argv, out, NULL) || cli_read_file(out, &txt, &len))
		return;
	while (len && (txt[len - 1] == '\n' || txt[len - 1] == '\r'))
		len--;
	if (len >= sizeof(f->version))
		len = sizeof(f->version) - 1;
	memcpy(f->version, txt, len);
	f->version[len] = '\0';
	free(txt);
	unlink(out);
}

/* jobs[0].<op>.bw_bytes of fio's JSON report txt[0..len): bytes/s, or -1
 * after printing what was missing.  fio may print notes ahead of its JSON
 * (a warning about the ioengine, say): the document starts at the first
 * '{'. */
static double fio_bw_bytes(const char *cmd, const char *out, const char *op,
			   const char *txt, size_t len)
{
	const char *start = memchr(txt, '{', len);
	json_error_t e;
	json_t *doc, *bw;
	double v = -1;

	if (!start) {
		fprintf(stderr, "kvtier-bench %s: %s holds no JSON object\n", cmd, out);
		return -1;
	}
	doc = json_loadb(start, len - (size_t)(start - txt), 0, &e);
	if (!doc) {
		fprintf(stderr, "kvtier-bench %s: %s: line %d: %s\n", cmd, out, e.line, e.text);
		return -1;
	}
	bw = json_object_get(json_object_get(json_array_get(json_object_get(doc, "jobs"), 0),
					     op),
			     "bw_bytes");
	if (json_is_number(bw))
		v = json_number_value(bw);
	else
		fprintf(stderr, "kvtier-bench %s: %s has no number at jobs[0].%s.bw_bytes\n",
			cmd, out, op);
	json_decref(doc);
	return v;
}

int bench_fio_run(const struct bench_fio *f, const char *cmd, const char *scratch,
		  const char *op, uint64_t bs, uint64_t size, double *gbps)
{
	char dir[1100], out[1100], err[1100], a_dir[1200], a_rw[32], a_bs[48],
		a_size[48], a_out[1200];
	char *argv[] = {
		(char *)f->path, "--name=kvtier-bound", a_dir, "--ioengine=io_uring",
		"--direct=1", a_rw, a_bs, "--iodepth=16", "--numjobs=1", a_size,
		"--output-format=json", a_out, NULL,
	};
	uint8_t *txt = NULL;
	size_t len = 0;
	double bw = 0;
	int rc;

	if (bench_path_join(dir, sizeof(dir), scratch, "fio") ||
	    bench_path_join(out, sizeof(out), scratch, "fio.json") ||
	    bench_path_join(err, sizeof(err), scratch, "fio.stderr"))
		return bench_fail(cmd, "fio paths", KVT_EINVAL);
	if (mkdir(dir, 0700) && errno != EEXIST) {
		fprintf(stderr, "kvtier-bench %s: mkdir %s: %s\n", cmd, dir, strerror(errno));
		return 1;
	}
	snprintf(a_dir, sizeof(a_dir), "--directory=%s", dir);
	snprintf(a_rw, sizeof(a_rw), "--rw=%s", op);
	snprintf(a_bs, sizeof(a_bs), "--bs=%llu", (unsigned long long)bs);
	snprintf(a_size, sizeof(a_size), "--size=%llu", (unsigned long long)size);
	snprintf(a_out, sizeof(a_out), "--output=%s", out);
	unlink(out);
	rc = bench_run(argv, NULL, err);
	if (rc == 0 && cli_read_file(out, &txt, &len) == 0)
		rc = (bw = fio_bw_bytes(cmd, out, op, (const char *)txt, len)) > 0 ? 0 : -1;
	else
		rc = -1;
	free(txt);
	if (rc) {
		uint8_t *e = NULL;
		size_t el = 0;

		fprintf(stderr, "kvtier-bench %s: fio %s of %s failed or gave no "
			"bw_bytes (command: fio --name=kvtier-bound %s "
			"--ioengine=io_uring --direct=1 %s %s --iodepth=16 "
			"--numjobs=1 %s --output-format=json %s)\n",
			cmd, op, dir, a_dir, a_rw, a_bs, a_size, a_out);
		if (cli_read_file(err, &e, &el) == 0 && el)
			fprintf(stderr, "fio said: %.*s\n", (int)(el > 2000 ? 2000 : el),
				(const char *)e);
		free(e);
		return 1;
	}
	unlink(out);
	unlink(err);
	*gbps = bw / 1e9;
	return 0;
}

void bench_fio_clean(const char *scratch)
{
	char dir[1100];

	if (bench_path_join(dir, sizeof(dir), scratch, "fio") == 0)
		bench_remove_tree(dir);
}
