/*
 * bench.h — what kvtier-bench's benchmarks share: medians over interleaved
 * rounds, the chunk shapes they store, buffers laid out like the arena, one
 * scratch directory per run, the data the build copied next to the program,
 * and the JSON they print.
 *
 * kvtier-bench is a program of its own (STYLE.md, habit 12), a client of
 * libkvtier; it links the static library because some benchmarks open one
 * tier alone (the S3 and shared-FS tiers' own put/get), which the public API
 * does not offer.
 */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "kvtier.h"

#define BENCH_MAX_ROUNDS 64

/* The benchmarks, one file each (hierarchy.c with hier_*.c). */
int bench_dram(int argc, char **argv);
int bench_nvme(int argc, char **argv);
int bench_sharedfs(int argc, char **argv);
int bench_s3(int argc, char **argv);
int bench_plan(int argc, char **argv);
int bench_hier(int argc, char **argv);
int bench_connector(int argc, char **argv);
int bench_python(int argc, char **argv);   /* runs bench-data/python_bench.py */
int bench_vllm(int argc, char **argv);     /* runs bench-data/vllm_bench.py */
int bench_lmcache(int argc, char **argv);  /* runs bench-data/lmcache_bench.py */
int bench_peers(int argc, char **argv);    /* runs bench-data/peers_bench.py */
int bench_daemon(int argc, char **argv);   /* kvtierd against redis-server */
int bench_daemon_local(int argc, char **argv); /* the library on kvtierd, shared memory */
int bench_daemon_peer(int argc, char **argv); /* a decode node fetching from a prefill node */
int bench_daemon_rebuild(int argc, char **argv); /* kvtierd's start over a disk tier */
int bench_llama(int argc, char **argv); /* built with the llama.cpp adapter */
int bench_events(int argc, char **argv); /* KV events against none */
int bench_warm(int argc, char **argv);   /* runs bench-data/warm_bench.py */

/* Median, min and max of a figure over rounds. */
struct summary {
	double median, min, max;
};

/* Summarise n (1..BENCH_MAX_ROUNDS) values. */
struct summary bench_summarize(const double *v, int n);

/* "12.3 [11.9..12.8]" with as many decimals as the magnitude needs. */
const char *bench_fmt_summary(struct summary s, char *buf, size_t cap);

/* "name":{"median":..,"min":..,"max":..} on stdout. */
void bench_json_summary(const char *name, struct summary s);

/* "name":"value" on stdout, value escaped by jansson (quotes, backslashes,
 * control characters), so that a path reads back as it is; bytes of a value
 * that is not UTF-8 print as '?'; null if it cannot be encoded at all. */
void bench_json_str(const char *name, const char *value);

/* Report a failed library call: "kvtier-bench CMD: WHAT: reason (detail)";
 * returns 1. */
int bench_fail(const char *cmd, const char *what, int rc);

/* One table row: `fmt` lays out seven columns; the row ends at its last
 * character, not in padding (an empty verdict column leaves no spaces). */
void bench_print_row(const char *fmt, const char *c0, const char *c1, const char *c2,
		     const char *c3, const char *c4, const char *c5, const char *c6);

/* The options the disk benchmarks share: --json, --quick, --dir DIR (or
 * --dir=DIR), --help/-h.  1 if argv[*i] is one (its value consumed), 0 if
 * not; -1 after saying that --dir needs a value (exit 2), -2 after
 * printing `usage` for --help (exit 0). */
struct bench_opts {
	int json, quick;
	const char *dir;
};
int bench_common_opt(const char *cmd, int argc, char **argv, int *i, struct bench_opts *o,
		     void (*usage)(FILE *f));
/* Say that `arg` is not an option of `cmd`, with the usage; returns 2. */
int bench_unknown_opt(const char *cmd, const char *arg, void (*usage)(FILE *f));
/* The whole command line of a benchmark that takes --json, --quick and
 * --help alone: -1 to go on, else the status to exit with (0 after
 * --help, 2 after a bad option). */
int bench_opts_only(const char *cmd, int argc, char **argv, struct bench_opts *o,
		    void (*usage)(FILE *f));
/* The path of `name` in the directory of this executable (the build
 * directory): 0, or -1 if it cannot be known or does not fit. */
int bench_beside_exe(const char *name, char *out, size_t cap);

/* Set n key/value pairs of configuration, stopping at the first refused:
 * 0 or kvt_config_set's code. */
int bench_config_set_all(kvt_config *cfg, const char *const kv[][2], size_t n);

/* Open a store from cfg, which is freed whatever happens; `rc` is the code
 * of the configuring that came before (nonzero: no open, "configuration"
 * fails).  0, or 1 after bench_fail's message naming `what` (or, with
 * `quiet`, the open's code and no message). */
int bench_store_open(const char *cmd, const char *what, kvt_config *cfg, int rc,
		     int quiet, kvt_store **st);

/* A synthetic key: distinct per (tag, kind, seq); `magic` (8 bytes) marks
 * which benchmark made it. */
void bench_chunk_key(kvt_key *k, uint32_t tag, uint8_t kind, uint64_t seq,
		     const char magic[8]);

/* The namespace of a model preset with 256-token bf16 K/V chunks.  Prints
 * why and returns 1 if the preset is unknown. */
int bench_chunk_desc(const char *cmd, const char *preset, kvt_ns_desc *d);

/* A zeroed, pre-faulted buffer of at least `bytes`, 2 MiB aligned and
 * advised MADV_HUGEPAGE like the DRAM arena, so that a bound and a subject
 * pay the same TLB costs.  free() it. */
uint8_t *bench_buffer(size_t bytes);

/* a/b into out; -1 if it does not fit. */
int bench_path_join(char *out, size_t cap, const char *a, const char *b);

/* The run's scratch directory: a fresh "<parent>/kvtier-bench-<name>.XXXXXX"
 * (mkdtemp) into out.  0; 2 if the path does not fit; 1 if it cannot be
 * made (both printed).  Remove it with bench_remove_tree. */
int bench_scratch_dir(const char *cmd, const char *parent, const char *name, char *out,
		      size_t cap);

/* Ask the file system to place the directories made under `path` away from
 * the rest (ext4's "top directory" flag; common.c says why).  Best effort. */
void bench_spread_dir(const char *path);

/* rm -rf of a benchmark's own scratch directory; -1 if anything stayed. */
int bench_remove_tree(const char *path);

/* Remove every file under `path` and keep its directories (a store's
 * fan-out tree, for the next store to take); -1 if anything stayed. */
int bench_empty_tree(const char *path);

/* What the build copied into <dir of this program>/bench-data (CMake's
 * kvtier_bench_data target): `rel` there into out.  1 if it is readable, 0
 * if not (out still names where it was looked for). */
int bench_data_path(const char *rel, char *out, size_t cap);

/* Replace this process with `python` running bench-data/<script> with
 * `args` (NULL-terminated) after it, in the environment a benchmark script
 * expects: this build's libkvtier.so (KVTIER_LIB), its kvtierd
 * (KVTIER_KVTIERD) and the package the build copied (PYTHONPATH).  Returns
 * only on failure: 1, with a message naming what was missing. */
int bench_exec_script(const char *cmd, const char *python, const char *script,
		      const char *const *args);
/* A subcommand that is a Python script: --help/-h prints usage, --python
 * PATH picks the interpreter (default KVT_BENCH_PYTHON), each of `flags`
 * (NULL-terminated; "--catalog=" takes a value) is passed on to the script,
 * anything else is refused with usage.  Then bench_exec_script. */
int bench_script_main(const char *cmd, const char *script, int argc, char **argv,
		      void (*usage)(FILE *f), const char *const *flags);

/* n bytes of xorshift noise from seed x (payloads nothing compresses). */
void bench_fill_random(uint8_t *p, size_t n, uint64_t x);

/* `name` found in PATH (executable) into out: 1, or 0 (out ""). */
int bench_which(const char *name, char *out, size_t cap);

/* Start argv (argv[0] a path) with stdout to the file `out` (NULL:
 * /dev/null) and stderr to `err` (NULL: inherited): its pid, or -1.
 * bench_run waits for it: 0 if it exited 0. */
pid_t bench_spawn(char *const argv[], const char *out, const char *err);
int bench_run(char *const argv[], const char *out, const char *err);

/* kvtierd, from beside this program, serving the node's processes on the
 * Unix socket `sock` (a 1 GiB DRAM tier of 2 MiB pages alone, two
 * threads), `extra` (NULL-terminated: its TCP port, ...) after that; its
 * output in `log`.  Waits until the socket takes a connection (30 s at
 * most: the arena is pre-faulted).  Its pid, or -1 with a message. */
pid_t bench_kvtierd_local(const char *cmd, const char *sock, const char *log,
			  const char *const *extra);
/* The library opened as the client of the kvtierd on `sock` (the `daemon`
 * key).  0, or nonzero with a message naming `what`. */
int bench_kvtierd_store(const char *cmd, const char *what, const char *sock, kvt_store **st);

/* Two buffers of `len` bytes (bench_buffer), filled with random bytes
 * (seeds 42 and 43): a chunk's payload and where it is read back.  0, or
 * 1 with a message. */
int bench_src_dst(const char *cmd, size_t len, uint8_t **src, uint8_t **dst);

/* A TCP port on 127.0.0.1 free now (for a server to take), or -1;
 * bench_connect: a socket connected to 127.0.0.1:port, or -1. */
int bench_free_port(void);
int bench_connect(int port);

#define BENCH_IN_FLIGHT 16

/* Put (bufs NULL: `src` each time, crash-safe) or get (into bufs[slot]) n
 * chunks keyed bench_chunk_key(tag, kind, seq0 + i, magic), keeping
 * BENCH_IN_FLIGHT async ops outstanding.  *secs is the wall time. */
int bench_async_run(kvt_store *st, const kvt_ns *ns, uint32_t tag, uint8_t kind,
		    uint64_t seq0, long n, const uint8_t *src, uint8_t *const *bufs,
		    size_t bytes, const char magic[8], double *secs);

#endif
