/*
 * main.c — `kvtier-bench WHAT`: kvtier's benchmarks, a program of their own
 * (as redis-benchmark is to redis): built next to `kvtier` in the build
 * directory, run from there, never installed, and never reading the source
 * tree at run time (what they need is copied into <build>/bench-data).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
} benches[] = {
	{ "dram", bench_dram, "[--json] [--quick]" },
	{ "nvme", bench_nvme, "[--json] [--quick] [--dir DIR]" },
	{ "sharedfs", bench_sharedfs, "[--json] [--quick] [--dir DIR] [--buffered]" },
	{ "s3", bench_s3, "[--json] [--quick] [--endpoint URL]" },
	{ "plan", bench_plan, "[TRACE] [--caps LIST] [--repeat N] [--rounds N] [--scale N] [--json]" },
	{ "hierarchy", bench_hier, "[--json] [--quick] [--dir DIR] [--trace PATH]" },
	{ "connector", bench_connector, "[--json] [--quick] [--device]" },
	{ "python", bench_python, "[--json] [--quick] [--python PATH]" },
	{ "vllm", bench_vllm, "[--json] [--quick] [--no-lmcache] [--python PATH]" },
	{ "lmcache", bench_lmcache, "[--json] [--quick] [--python PATH]" },
	{ "peers", bench_peers, "[--json] [--quick] [--python PATH]" },
	{ "daemon", bench_daemon, "[--json] [--quick]" },
	{ "daemon-local", bench_daemon_local, "[--json] [--quick]" },
	{ "daemon-peer", bench_daemon_peer, "[--json] [--quick]" },
	{ "daemon-rebuild", bench_daemon_rebuild, "[--json] [--quick]" },
	{ "events", bench_events, "[--json] [--quick] [--dir DIR]" },
	{ "warm", bench_warm, "[--json] [--quick] [--python PATH]" },
#ifdef KVT_BENCH_LLAMA
	{ "llama", bench_llama, "[--json] [--quick] [--dir DIR] [--threads N] [--rounds N]" },
#endif
};
#define N_BENCHES (sizeof(benches) / sizeof(benches[0]))

static void usage(FILE *f)
{
	for (size_t i = 0; i < N_BENCHES; i++)
		fprintf(f, "%s kvtier-bench %s %s\n", i ? "      " : "usage:", benches[i].name,
			benches[i].usage);
	fprintf(f, "\nBenchmarks print each figure as a ratio against a bound measured in\n"
		   "the same run (memcpy, hashing alone, fio, ...); --json prints every\n"
		   "figure with ratios in fields named ratio_vs_<bound>.  WHAT --help\n"
		   "says what each measures.  Data they need (the shared trace, the plan\n"
		   "reference, the S3 test server) is found in bench-data/ next to this\n"
		   "program, where the build puts it.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvtier-bench %s\n", KVT_VERSION_STRING);
		return 0;
	}
	for (size_t i = 0; i < N_BENCHES; i++)
		if (!strcmp(argv[1], benches[i].name))
			return benches[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "kvtier-bench: unknown benchmark \"%s\" (known:", argv[1]);
	for (size_t i = 0; i < N_BENCHES; i++)
		fprintf(stderr, " %s", benches[i].name);
	fprintf(stderr, ")\n");
	return 2;
}
