/*
 * lmcache.c — `kvtier-bench lmcache`: kvtier beside LMCache's own storage,
 * each driven by LMCache's own client code, in one run: (a) the L2 of
 * LMCache's multiprocess server, kvtier's adapter (python/kvtier/lmcache.py)
 * against LMCache's local-disk adapter on the same file system, store and
 * retrieve bandwidth of 256-token chunks through the L2; (b) LMCache's
 * Redis connectors against kvtierd and against redis-server.
 *
 * LMCache is the project's venv's (KVT_BENCH_PYTHON; --python PATH); the
 * orchestration is bench-data/lmcache_bench.py (its docstring says what is
 * measured and how), run with this build's library, kvtierd and Python
 * package.  This program prepares that environment and runs it.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define CMD "lmcache"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench lmcache [--json] [--quick] [--python PATH]\n\n"
		"kvtier beside LMCache's own storage, through LMCache's own clients, with\n"
		"256-token chunks of a Llama-3.1-8B shape (32 MiB) and a Qwen2.5-0.5B shape\n"
		"(3 MiB), rounds interleaved, medians with min and max:\n"
		"  (a) LMCache's multiprocess server (CPU, a small L1 that hands every\n"
		"      chunk to its L2) with kvtier's L2 adapter over kvtier's disk tier,\n"
		"      against the same server with LMCache's fs_native disk adapter on\n"
		"      the same file system: store into and retrieve from the L2\n"
		"      (ratio_vs_lmcache_disk, target 1.0);\n"
		"  (b) LMCache's Redis connectors (redis-py's and its native RESP client),\n"
		"      8 requests in flight, against kvtierd and against redis-server\n"
		"      (ratio_vs_redis, target 1.2).\n"
		"About 5 minutes on two cores (--quick: one small round, under a minute\n"
		"on an idle machine).  What cannot run is reported with its error.\n"
		"  --json          every figure as JSON; ratios in ratio_vs_<bound> fields\n"
		"  --quick         the short run\n"
		"  --python PATH   the interpreter with LMCache (default " KVT_BENCH_PYTHON ")\n");
}

int bench_lmcache(int argc, char **argv)
{
	static const char *const flags[] = { "--json", "--quick", NULL };

	return bench_script_main(CMD, "lmcache_bench.py", argc, argv, usage, flags);
}
