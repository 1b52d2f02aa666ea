/*
 * main.c — the kvtier command: a client of libkvtier like any other.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifndef KVT_PLANNER
/* A kvtier built with -DKVT_PLANNER=OFF has no plan or replay. */
static int cmd_no_planner(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "kvtier %s: this kvtier was built without the capacity planner "
			"(-DKVT_PLANNER=OFF); rebuild with it on (it needs jansson)\n",
		argv[0]);
	return 1;
}
#define cmd_plan cmd_no_planner
#define cmd_replay cmd_no_planner
#endif

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *what;
} commands[] = {
	{ "demo", cmd_demo, "store a prompt's KV, evict it, find the prefix again and reload it" },
	{ "hash", cmd_hash, "print the chain keys of a token list (kvtier, vLLM sha256_cbor)" },
	{ "put", cmd_put, "store chunks of a payload file" },
	{ "get", cmd_get, "load chunks into a file" },
	{ "lookup", cmd_lookup, "how much of a prompt is cached, and where" },
	{ "why", cmd_why, "why each chunk of a prompt is or is not served" },
	{ "ls", cmd_ls, "list the chunks of each tier" },
	{ "stat", cmd_stat, "per-tier statistics (--daemon HOST:PORT: a running kvtierd's)" },
	{ "top", cmd_top, "a running kvtierd's hit rates, bandwidth and latency, live" },
	{ "inspect", cmd_inspect, "decode and verify an object file" },
	{ "verify", cmd_verify, "check every chunk of every tier (fsck); --repair drops bad ones" },
	{ "gc", cmd_gc, "garbage-collect a shared directory tier: byte budget and TTL, no coordinator" },
	{ "plan", cmd_plan, "simulate a trace over tier sizes and policies; cost, TTFT, advice" },
	{ "replay", cmd_replay, "drive a trace through a real store; hit rates, bytes, latency" },
	{ "where", cmd_where, "which node of a fleet holds a prompt's prefix, from its KV events" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtier <command> [options]   (kvtier <command> --help)\n\n"
		   "kvtier keeps LLM KV cache in tiers so that a known prefix is loaded,\n"
		   "not recomputed.\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
	fprintf(f, "\nversion %s\n", KVT_VERSION_STRING);
}

/* The benchmarks were `kvtier bench WHAT`; they are a program of their own
 * now (bench/), built next to kvtier and not installed.  Say where. */
static int moved_bench(void)
{
	char exe[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 16);

	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/'))) {
			strcpy(slash + 1, "kvtier-bench");
			if (access(exe, X_OK) == 0) {
				fprintf(stderr, "kvtier: the benchmarks are a program of their "
						"own: %s WHAT (--help lists them)\n", exe);
				return 2;
			}
		}
	}
	fprintf(stderr, "kvtier: the benchmarks are a program of their own, kvtier-bench, "
			"built next to kvtier in the build directory (not installed)\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvtier %s (libkvtier %s)\n", KVT_VERSION_STRING, kvt_version());
		return 0;
	}
	if (!strcmp(argv[1], "bench"))
		return moved_bench();
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "kvtier: unknown command \"%s\"\n\n", argv[1]);
	usage(stderr);
	return 2;
}
