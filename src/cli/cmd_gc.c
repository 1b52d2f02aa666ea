/*
 * cmd_gc.c — `kvtier gc`: one garbage-collection pass over a shared
 * directory tier (kvt_shared_gc), with no coordinator: any number of nodes
 * may run it at once, from cron or a systemd timer, while others read and
 * write (docs/SHAREDFS.md).
 */
#include <string.h>

#include "cli.h"

static void gc_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier gc --dir PATH [--budget SIZE] [--ttl DURATION]\n"
		"                 [--tmp-grace DURATION] [--dry-run] [--json]\n\n"
		"Remove, oldest first by modification time (touched on use at most\n"
		"once a minute), every chunk older than --ttl and then more until\n"
		"the chunks left take at most --budget bytes; stale temporaries\n"
		"(older than --tmp-grace, default 15m) go too.  Safe to run on many\n"
		"nodes at once and while nodes read: an open file stays readable.\n"
		"The budget is soft: what writers publish during the pass is not\n"
		"seen by it (docs/SHAREDFS.md).\n\n"
		"  --budget SIZE       e.g. 10GiB, 500GB (0 = no budget)\n"
		"  --ttl DURATION      e.g. 3600, 90m, 1.5h, 7d, 2w; at most 36500d (0 = no TTL)\n"
		"  --dry-run           count what would go; remove nothing\n"
		"  --json              one JSON object on stdout\n");
}

enum { O_JSON = 0x100, O_DRY, O_DIR, O_BUDGET, O_TTL, O_GRACE };

struct gc_args {
	kvt_gc_opts o;
	const char *dir;
	int json;
};

static int gc_opt(void *arg, int id, const char *v)
{
	struct gc_args *g = arg;
	uint64_t s;

	switch (id) {
	case O_JSON: g->json = 1; break;
	case O_DRY: g->o.dry_run = 1; break;
	case O_DIR: g->dir = v; break;
	case O_BUDGET:
		if (cli_parse_size("gc", "--budget", v, 0, INT64_MAX, &g->o.budget))
			return 2;
		break;
	case O_TTL:
	case O_GRACE:
		/* The configuration's ttl grammar, bounded at 100 years. */
		if (cli_parse_duration("gc", id == O_TTL ? "--ttl" : "--tmp-grace", v, &s))
			return 2;
		*(id == O_TTL ? &g->o.ttl_s : &g->o.tmp_grace_s) = (int64_t)s;
		break;
	}
	return -1;
}

int cmd_gc(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, O_JSON },
		{ "dry-run", no_argument, NULL, O_DRY },
		{ "dir", required_argument, NULL, O_DIR },
		{ "budget", required_argument, NULL, O_BUDGET },
		{ "ttl", required_argument, NULL, O_TTL },
		{ "tmp-grace", required_argument, NULL, O_GRACE },
		{ 0 },
	};
	struct gc_args g = { 0 };
	kvt_gc_opts o;
	kvt_gc_result r;
	const char *dir;
	int json, first, rc;

	rc = cli_getopt("gc", argc, argv, NULL, opts, NULL, gc_opt, &g, gc_usage, &first);
	if (rc >= 0)
		return rc;
	if (first < argc) {
		fprintf(stderr, "kvtier gc: unexpected argument \"%s\"\n\n", argv[first]);
		gc_usage(stderr);
		return 2;
	}
	o = g.o;
	dir = g.dir;
	json = g.json;
	if (!dir) {
		fprintf(stderr, "kvtier gc: --dir PATH is needed\n\n");
		gc_usage(stderr);
		return 2;
	}
	if (!o.budget && !o.ttl_s)
		fprintf(stderr, "kvtier gc: neither --budget nor --ttl: only stale "
			"temporaries are removed\n");
	rc = kvt_shared_gc(dir, &o, &r);
	if (rc)
		return cli_fail("gc", dir, rc);
	if (json) {
		cli_json_print(json_pack(
			"{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}",
			"dir", dir, "dry_run", o.dry_run, "budget", (json_int_t)o.budget,
			"ttl_s", (json_int_t)o.ttl_s, "files", (json_int_t)r.files,
			"bytes", (json_int_t)r.bytes, "removed", (json_int_t)r.removed,
			"removed_bytes", (json_int_t)r.removed_bytes, "expired", (json_int_t)r.expired,
			"raced", (json_int_t)r.raced, "tmp_removed", (json_int_t)r.tmp_removed,
			"errors", (json_int_t)r.errors, "bytes_left", (json_int_t)r.bytes_left,
			"seconds", r.seconds));
	} else {
		printf("%s%s: %llu chunks, %.3f GiB; %s %llu (%.3f GiB, %llu past "
		       "the TTL), %llu already gone (another collector), %llu stale "
		       "temporaries; %.3f GiB left; %llu errors; %.2f s\n",
		       o.dry_run ? "[dry run] " : "", dir,
		       (unsigned long long)r.files, (double)r.bytes / (1 << 30),
		       o.dry_run ? "would remove" : "removed",
		       (unsigned long long)r.removed,
		       (double)r.removed_bytes / (1 << 30),
		       (unsigned long long)r.expired, (unsigned long long)r.raced,
		       (unsigned long long)r.tmp_removed,
		       (double)r.bytes_left / (1 << 30),
		       (unsigned long long)r.errors, r.seconds);
	}
	return r.errors ? 1 : 0;
}
