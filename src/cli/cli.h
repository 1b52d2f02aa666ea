/*
 * cli.h — what the kvtier subcommands share: option helpers, token input,
 * model presets and opening a store the way every subcommand does.
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvtier.h"

/* A model whose KV layout the CLI knows by name (DESIGN.md's table). */
typedef struct cli_model {
	const char *name;
	const char *model_id;
	uint32_t layers, kv_heads, head_dim;
} cli_model;

const cli_model *cli_model_find(const char *name);
void cli_models_print(FILE *f);

/* Options every store-facing subcommand takes. */
typedef struct cli_common {
	const char *config;  /* --config FILE, or NULL for the embedded default */
	const char *model;   /* --model NAME (preset) */
	const char *tenant;  /* --tenant NAME */
	uint32_t chunk;      /* --chunk-tokens N, 0 = config's chunk_size */
	const char *sets[32]; /* --set key=value, repeated */
	int n_sets;
	char dir_set[1100];   /* --dir PATH as "local_disk=PATH" */
	int read_only;        /* set by inspection commands: read_only: true */
} cli_common;

/* If argv[*i] is a common option, consume it (and its value) and return 1;
 * return -1 on a missing value; 0 if it is not one of ours. */
int cli_common_arg(cli_common *c, int argc, char **argv, int *i);

/* The help lines for those options. */
extern const char cli_common_help[];

/* Load the configuration (file or defaults, then KVTIER_*, then --set). */
int cli_config(const cli_common *c, kvt_config **cfg);

/* The namespace description of --model/--tenant/--chunk-tokens. */
int cli_desc(const cli_common *c, kvt_ns_desc *d);

/* Open the store and resolve the namespace of --model/--tenant. */
int cli_open(const cli_common *c, kvt_store **st, kvt_ns *ns);

/* Read token ids from a file ("-" = stdin): a JSON array or whitespace/comma
 * separated integers.  Caller frees *tokens. */
int cli_read_tokens(const char *path, uint32_t **tokens, size_t *n);

/* Read a whole file into memory (caller frees). */
int cli_read_file(const char *path, uint8_t **buf, size_t *len);

/* Report a failed library call: "kvtier CMD: WHAT: reason (detail)". */
int cli_fail(const char *cmd, const char *what, int rc);

/* Monotonic seconds. */
double cli_now(void);

int cmd_hash(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_lookup(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int bench_dram(int argc, char **argv);
int bench_nvme(int argc, char **argv);
int bench_sharedfs(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int bench_s3(int argc, char **argv);
/* src/plan/bench_plan.c: plan against tests/plan_reference.py, side by side. */
int bench_plan(int argc, char **argv);
int bench_hier(int argc, char **argv);

#endif
