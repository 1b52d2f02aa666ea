/*
 * cli.h — what the kvtier subcommands share: option helpers, token input,
 * model presets and opening a store the way every subcommand does.
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <getopt.h>
#include <jansson.h>

#include "kvtier.h"
#include "kvtier/units.h"

/* A model whose KV layout the CLI knows by name (kvt_model_preset_find). */
typedef kvt_model_preset cli_model;

const cli_model *cli_model_find(const char *name);

void cli_models_print(FILE *f);

/* Print `v` (a JSON value that jansson built, NULL when it could not)
 * as one line on stdout and drop it.  Strings are escaped by jansson,
 * so paths and reasons with quotes or control characters stay valid. */
void cli_json_print(json_t *v);

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

/* Which model a command's keys belong to, for its output: the preset's
 * model id and name, "Qwen/Qwen2.5-0.5B-Instruct (preset qwen2.5-0.5b)". */
void cli_model_label(const cli_common *c, char *buf, size_t len);

/* If argv[*i] is a common option, consume it (and its value) and return 1;
 * return -1 on a missing value; 0 if it is not one of ours. */
int cli_common_arg(cli_common *c, int argc, char **argv, int *i);

/* Options are parsed with getopt_long.  A subcommand gives its own rows
 * (a table ending in a zeroed row; ids below CLI_OPT_COMMON, e.g. 'o' or
 * 0x100 and up) and a function that takes each with its value: it returns
 * -1 to go on, or the command's exit status (2 after printing why a value
 * is wrong).  cli_getopt adds the common options (when `c` is not NULL)
 * and --help/-h, prints "kvtier CMD: unknown option" or "option needs a
 * value" with the usage, and returns -1 with *first_arg the index of the
 * first positional argument (getopt_long moves them after the options),
 * or the exit status (0 after --help).  `shorts` is getopt's string of
 * the subcommand's short options ("o:"; NULL for none); -h is added. */
#define CLI_OPT_COMMON 0x1000
typedef int (*cli_opt_fn)(void *arg, int id, const char *val);
int cli_getopt(const char *cmd, int argc, char **argv, const char *shorts,
	       const struct option *own, cli_common *c, cli_opt_fn fn, void *arg,
	       void (*usage)(FILE *f), int *first_arg);

/* The help lines for those options. */
extern const char cli_common_help[];

/* Load the configuration (file or defaults, then KVTIER_*, then --set). */
int cli_config(const cli_common *c, kvt_config **cfg);

/* The namespace description of --model/--tenant/--chunk-tokens. */
int cli_desc(const cli_common *c, kvt_ns_desc *d);

/* Open the store and resolve the namespace of --model/--tenant. */
int cli_open(const cli_common *c, kvt_store **st, kvt_ns *ns);

/* The most a token file may hold: 64 MiB, some ten million token ids,
 * far past any context window.  A file is streamed, so a wrong one (say
 * /dev/zero) fails at its first wrong byte and a stream of valid ids stops
 * at the bound instead of filling memory. */
#define CLI_TOKENS_MAX_BYTES (64u << 20)

/* Read token ids from a file ("-" = stdin; a directory is refused): a JSON
 * array or whitespace/comma separated integers below 2^32, at most
 * CLI_TOKENS_MAX_BYTES.  0, or -1 with the reason (file, line) printed.
 * Caller frees *tokens. */
int cli_read_tokens(const char *path, uint32_t **tokens, size_t *n);

/* Read a whole file into memory, at most `max` bytes ("-" = stdin; a
 * directory is refused).  0, or -1 with the reason printed, naming the
 * file and the bound when it holds more.  Caller frees *buf. */
int cli_read_file_max(const char *path, size_t max, uint8_t **buf, size_t *len);

/* Read a whole file into memory with no bound but the memory (caller
 * frees).  Callers that read what a user names should bound it with
 * cli_read_file_max. */
int cli_read_file(const char *path, uint8_t **buf, size_t *len);

/* Strict option values, the one grammar of numbers on the command line:
 * the whole string must be the number (no sign, no space, no "1abc"; for
 * integers no hex, exponent or leading zero), finite and within [lo, hi].
 * 0, or -1 after printing "kvtier CMD: OPT \"VALUE\": ..." with the
 * accepted range.  `cmd` "" is for the options every subcommand shares. */
int cli_parse_u64(const char *cmd, const char *opt, const char *v, uint64_t lo, uint64_t hi,
		  uint64_t *out);
int cli_parse_u32(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi,
		  uint32_t *out);
/* DIGITS[.DIGITS][e[+-]DIGITS]: no hex, inf or nan; overflow is an error. */
int cli_parse_double(const char *cmd, const char *opt, const char *v, double lo, double hi,
		     double *out);
/* A size in bytes (kvt_parse_size's grammar: 64KiB, 1.5GB, 4096). */
int cli_parse_size(const char *cmd, const char *opt, const char *v, uint64_t lo, uint64_t hi,
		   uint64_t *out);
/* A duration in seconds, the configuration's ttl grammar (3600, 90m, 7d,
 * 2w; at most 100 years). */
int cli_parse_duration(const char *cmd, const char *opt, const char *v, uint64_t *out);

/* Report a failed library call: "kvtier CMD: WHAT: reason (detail)". */
int cli_fail(const char *cmd, const char *what, int rc);

/* Report a failure whose detail already names the file and line: "kvtier
 * CMD: detail" (the code's name when there is no detail). */
int cli_fail_detail(const char *cmd, int rc);

/* Monotonic seconds. */
double cli_now(void);

int cmd_hash(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_lookup(int argc, char **argv);
int cmd_why(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
/* kvtier stat --daemon and kvtier top: a running kvtierd (cmd_daemon.c). */
int cmd_stat_daemon(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_gc(int argc, char **argv);
/* kvtier where: a fleet's KV events, which node holds a prompt (cmd_where.c). */
int cmd_where(int argc, char **argv);

#endif
