/*
 * peers.c — `kvtier-bench peers`: the same KV-chunk work (put, get, and a
 * 128-chunk prefix lookup) through each store's own client in one run,
 * rounds interleaved: kvtierd through kvtier's Python binding (its local,
 * shared-memory path) and through redis-py, redis-server through redis-py,
 * Mooncake Store through its own Python client (TCP transport, and its
 * shared-memory dummy client), and LMCache's server through
 * bench-data/lmcache_bench.py's client where that is built.
 *
 * The clients are processes of the venv's interpreter (KVT_BENCH_PYTHON;
 * --python PATH), Mooncake's client library among them; the orchestration
 * is bench-data/peers_bench.py (its docstring says what is measured and
 * how), run with this build's library, kvtierd and Python package.  This
 * program prepares that environment and runs it.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define CMD "peers"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench peers [--json] [--quick] [--python PATH]\n\n"
		"The same chunks through each store's own client, one run, rounds\n"
		"interleaved: kvtierd through kvtier's binding (shared memory) and through\n"
		"redis-py, redis-server through redis-py, Mooncake Store through its\n"
		"MooncakeDistributedStore (TCP transport, zero-copy calls; and its\n"
		"shared-memory dummy client), and LMCache's server where\n"
		"bench-data/lmcache_bench.py is built.  Put and get of one 256-token chunk\n"
		"of Qwen2.5-0.5B (3 MiB), Llama-3.1-8B (32 MiB) and a 70B shape (80 MiB)\n"
		"by 1, 4 and 16 client processes: throughput, p50/p99 latency and each\n"
		"server's CPU time per request; ratio_vs_redis, ratio_vs_mooncake,\n"
		"ratio_vs_lmcache (kvtier's throughput over the peer's, target 1.2).  Then\n"
		"a 128-chunk prefix lookup in each (ratio_vs_<peer>, target 10).  A store\n"
		"that cannot run here is named in the JSON with its error.  About 10\n"
		"minutes on two cores (--quick: 3 MiB, 1 and 4 clients, under a minute).\n"
		"  --json          every figure as JSON; ratios in ratio_vs_<peer> fields\n"
		"  --quick         the short run\n"
		"  --python PATH   the interpreter with redis-py and Mooncake (default\n"
		"                  " KVT_BENCH_PYTHON ")\n");
}

int bench_peers(int argc, char **argv)
{
	static const char *const flags[] = { "--json", "--quick", NULL };

	return bench_script_main(CMD, "peers_bench.py", argc, argv, usage, flags);
}
