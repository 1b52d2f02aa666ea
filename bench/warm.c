/*
 * warm.c — `kvtier-bench warm`: a restarted kvtierd's warm start against
 * a cold restart and a new node, on the shipped conversation trace: time
 * to /ready and the first minute's hit rates (bench-data/warm_bench.py
 * says what is measured and how; this program runs it with the build's
 * library, kvtierd and package).
 */
#include <stdio.h>

#include "bench.h"

#define CMD "warm"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench warm [--json] [--quick] [--python PATH]\n\n"
		"A node serves the conversation trace's first five minutes (a lookup,\n"
		"the loads and the saves of each request, through kvtier's binding to\n"
		"its kvtierd), is stopped, and three successors serve the next minute:\n"
		"restarted with --warm-start, restarted cold, and a new node.  Time to\n"
		"/ready, hit rate and DRAM hit rate in that minute; ratio_vs_cold (the\n"
		"warm node's DRAM hit rate over the cold one's) and ratio_vs_new.  About\n"
		"three minutes on two cores (--quick: one round, two minutes of history).\n"
		"  --json          every figure as JSON\n"
		"  --quick         the short run\n"
		"  --python PATH   the interpreter (default " KVT_BENCH_PYTHON ")\n");
}

int bench_warm(int argc, char **argv)
{
	static const char *const flags[] = { "--json", "--quick", NULL };

	return bench_script_main(CMD, "warm_bench.py", argc, argv, usage, flags);
}
