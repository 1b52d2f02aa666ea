/*
 * cmd_bench.c — `kvtier bench WHAT`: dispatch to the benchmarks.
 */
#include <string.h>

#include "cli/cli.h"


int cmd_bench(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		printf("usage: kvtier bench dram [--json] [--quick]\n"
		       "       kvtier bench nvme [--json] [--quick] [--dir DIR]\n"
		       "       kvtier bench s3 [--json] [--quick] [--endpoint URL]\n"
		       "       kvtier bench plan [TRACE] [--caps LIST] [--repeat N] [--json]\n"
		       "       kvtier bench hierarchy [--json] [--quick] [--dir DIR] [--trace PATH]\n\n"
		       "Benchmarks print each figure as a ratio against a bound measured in\n"
		       "the same run (memcpy, hashing alone, ...); --json prints every figure\n"
		       "with ratios in fields named ratio_vs_<bound>.\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "dram"))
		return bench_dram(argc - 1, argv + 1);
	if (!strcmp(argv[1], "sharedfs"))
		return bench_sharedfs(argc - 1, argv + 1);
	if (!strcmp(argv[1], "nvme"))
		return bench_nvme(argc - 1, argv + 1);
	if (!strcmp(argv[1], "s3"))
		return bench_s3(argc - 1, argv + 1);
	if (!strcmp(argv[1], "plan"))
		return bench_plan(argc - 1, argv + 1);
	if (!strcmp(argv[1], "hierarchy"))
		return bench_hier(argc - 1, argv + 1);
	fprintf(stderr, "kvtier bench: unknown benchmark \"%s\" (known: dram, nvme, s3, hierarchy)\n", argv[1]);
	return 2;
}
