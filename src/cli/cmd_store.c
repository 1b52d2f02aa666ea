/*
 * cmd_store.c — `kvtier put|get|lookup|ls|stat`: a store from the command
 * line.  Every subcommand opens the store of --config (or the defaults), so
 * chunks outlive the process only in a disk tier (--dir PATH).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Tiers a store can have (four kinds today), for the per-tier tallies. */
#define PUT_MAX_TIERS 8

typedef struct store_args {
	cli_common c;
	const char *tokens;  /* --tokens FILE */
	const char *key;     /* --key HEX */
	const char *out;     /* -o FILE */
	const char *file;    /* positional */
	int durability;
	int json;
	int repair;          /* verify --repair */
	const char *tier;    /* verify --tier NAME */
} store_args;

enum { O_TOKENS = 0x100, O_KEY, O_DURABILITY, O_JSON, O_REPAIR, O_TIER };
static const struct option store_opts[] = {
	{ "tokens", required_argument, NULL, O_TOKENS },
	{ "key", required_argument, NULL, O_KEY },
	{ "out", required_argument, NULL, 'o' },
	{ "durability", required_argument, NULL, O_DURABILITY },
	{ "json", no_argument, NULL, O_JSON },
	{ "repair", no_argument, NULL, O_REPAIR },
	{ "tier", required_argument, NULL, O_TIER },
	{ 0 },
};

struct store_parse {
	const char *cmd;
	store_args *a;
};

static int store_opt(void *arg, int id, const char *v)
{
	const struct store_parse *p = arg;
	store_args *a = p->a;

	switch (id) {
	case O_TOKENS: a->tokens = v; break;
	case O_KEY: a->key = v; break;
	case 'o': a->out = v; break;
	case O_JSON: a->json = 1; break;
	case O_REPAIR: a->repair = 1; break;
	case O_TIER: a->tier = v; break;
	case O_DURABILITY:
		if (!strcmp(v, "cached"))
			a->durability = KVT_DUR_CACHED;
		else if (!strcmp(v, "crash-safe"))
			a->durability = KVT_DUR_CRASH_SAFE;
		else if (!strcmp(v, "power-safe"))
			a->durability = KVT_DUR_POWER_SAFE;
		else {
			fprintf(stderr, "kvtier %s: --durability \"%s\": expected cached, crash-safe or power-safe\n",
				p->cmd, v);
			return 2;
		}
		break;
	}
	return -1;
}

static int parse(const char *cmd, int argc, char **argv, store_args *a,
		 void (*usage)(FILE *))
{
	struct store_parse p = { cmd, a };
	int first, rc;

	memset(a, 0, sizeof(*a));
	rc = cli_getopt(cmd, argc, argv, "o:", store_opts, &a->c, store_opt, &p, usage, &first);
	if (rc >= 0)
		return rc;
	if (first < argc)
		a->file = argv[first++];
	if (first < argc) {
		fprintf(stderr, "kvtier %s: unexpected argument \"%s\"\n", cmd, argv[first]);
		return 2;
	}
	return -1; /* go on */
}

/* The keys a command works on: --key, or the chain of --tokens. */
static int keys_of(const char *cmd, const store_args *a, const kvt_ns *ns,
		   kvt_key **keys, size_t *n)
{
	if (a->key) {
		*keys = malloc(sizeof(kvt_key));
		*n = 1;
		if (!*keys)
			return 1;
		int rc = kvt_key_parse(a->key, *keys);
		if (rc) {
			free(*keys);
			return cli_fail(cmd, "--key", rc);
		}
		return 0;
	}
	if (a->tokens) {
		uint32_t *t;
		size_t nt;
		int whole;
		if (cli_read_tokens(a->tokens, &t, &nt))
			return 1;
		*n = nt / ns->layout.chunk_tokens;
		*keys = malloc(sizeof(kvt_key) * (*n + 1));
		if (!*keys) {
			free(t);
			return 1;
		}
		whole = kvt_key_chain(ns, t, nt, NULL, *keys, *n);
		free(t);
		if (whole < 0) {
			free(*keys);
			return cli_fail(cmd, "hash", whole);
		}
		return 0;
	}
	fprintf(stderr, "kvtier %s: give --key HEX or --tokens FILE\n", cmd);
	return 2;
}

/* Open the store and compute the keys the command works on: 0, or the
 * command's exit status with the store closed. */
static int open_keys(const char *cmd, store_args *a, kvt_store **st, kvt_ns *ns, kvt_key **keys,
		     size_t *n)
{
	int rc;
	if (cli_open(&a->c, st, ns))
		return 1;
	if ((rc = keys_of(cmd, a, ns, keys, n))) {
		kvt_store_close(*st);
		return rc;
	}
	return 0;
}

static void put_usage(FILE *f)
{
	fprintf(f, "usage: kvtier put (--key HEX | --tokens FILE) [options] PAYLOAD_FILE\n\n"
		   "Store the layer-major KV in PAYLOAD_FILE: one chunk under --key, or one\n"
		   "chunk per whole chunk of the --tokens prompt (the file then holds them\n"
		   "back to back).  Waits for the copies to lower tiers it started, then\n"
		   "prints one line per chunk: key, outcome, and the tiers that hold it.\n"
		   "Exits 1 if a disk or remote tier that should hold a chunk does not,\n"
		   "with that tier's error.\n\n"
		   "  --durability L   cached (default) | crash-safe | power-safe\n%s",
		   cli_common_help);
}

static const char *dur_name(int d)
{
	return d == KVT_DUR_POWER_SAFE ? "power-safe"
	       : d == KVT_DUR_CRASH_SAFE ? "crash-safe" : "cached";
}

/* One chunk's line: where it is and how durable there.  A tier below the
 * first that lacks it is a failure if the tier had write errors during
 * this command (its last one is named), else its policy's choice (write
 * policy none or back, admission). */
static int put_report(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		      const char *outcome, int durability,
		      const kvt_tier_stats *before)
{
	char hex[65];
	uint32_t mask = 0;
	int bad = 0, first = 1;

	kvt_key_hex(key, hex);
	kvt_locate(st, ns, key, &mask);
	printf("%s %s:", hex, outcome);
	for (int t = 0; t < kvt_store_tiers(st) && t < PUT_MAX_TIERS; t++) {
		kvt_tier_stats s;
		kvt_store_stats(st, t, &s);
		if (mask & (1u << t)) {
			int memory = !strcmp(s.name, "dram");
			printf("%s %s (%s)", first ? "" : ",", s.name,
			       memory ? "this process's memory only"
			       : dur_name(durability > KVT_DUR_CRASH_SAFE ? durability
						     : KVT_DUR_CRASH_SAFE));
			first = 0;
		} else if (s.write_errors > before[t].write_errors ||
			   s.put_rejects > before[t].put_rejects) {
			printf("%s %s FAILED", first ? "" : ",", s.name);
			fprintf(stderr, "kvtier put: %s: not in the %s tier: %s\n", hex, s.name,
				s.last_write_error[0] ? s.last_write_error : "write failed");
			first = 0;
			bad = 1;
		}
	}
	printf("%s\n", first ? " in no tier that can serve it (kvtier verify says why)" : "");
	if (!mask)
		bad = 1;
	return bad;
}

int cmd_put(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	kvt_key *keys;
	size_t n, len, per, done = 0;
	uint8_t *payload;
	const char **outcome;
	kvt_tier_stats before[PUT_MAX_TIERS];
	int rc = parse("put", argc, argv, &a, put_usage), bad = 0;

	if (rc >= 0)
		return rc;
	if (!a.file) {
		put_usage(stderr);
		return 2;
	}
	if ((rc = open_keys("put", &a, &st, &ns, &keys, &n)))
		return rc;
	per = kvt_layout_payload_bytes(&ns.layout);
	/* The payload is what n chunks hold: one byte more says "too long"
	 * without reading /dev/zero until memory runs out. */
	if (cli_read_file_max(a.file, per * (n ? n : 1) + 1, &payload, &len)) {
		free(keys);
		kvt_store_close(st);
		return 1;
	}
	outcome = calloc(n ? n : 1, sizeof(*outcome));
	if (!outcome) {
		free(payload);
		free(keys);
		kvt_store_close(st);
		return cli_fail("put", "memory", KVT_ENOMEM);
	}
	if (n == 0) {
		fprintf(stderr, "kvtier put: %s holds no whole chunk (a chunk is %u tokens)\n",
			a.tokens ? a.tokens : "--key", ns.layout.chunk_tokens);
		bad = 1;
	} else if (len != per * n) {
		fprintf(stderr,
			"kvtier put: %s is %zu bytes; %zu chunk(s) of this model's layout need %zu\n",
			a.file, len, n, per * n);
		bad = 1;
	}
	for (int t = 0; t < kvt_store_tiers(st) && t < PUT_MAX_TIERS; t++)
		kvt_store_stats(st, t, &before[t]);
	for (size_t i = 0; !bad && i < n; i++) {
		char hex[65];
		kvt_key_hex(&keys[i], hex);
		rc = kvt_put(st, &ns, &keys[i], payload + i * per, per, a.durability);
		if (rc && rc != KVT_EEXIST) {
			bad = cli_fail("put", hex, rc);
			break;
		}
		outcome[i] = rc == KVT_EEXIST ? "exists" : "stored";
		done = i + 1;
	}
	/* A cached put promised only the first tier: wait for the
	 * write-through it started, then say truly where each chunk is. */
	if (done && (rc = kvt_store_flush(st, -1)))
		bad = cli_fail("put", "flush", rc);
	if (done) {
		char model[160], sz[32];
		cli_model_label(&a.c, model, sizeof(model));
		printf("# %zu chunk(s) of %s, %u-token chunks of %s: key, the tiers that hold it\n",
		       done, model, ns.layout.chunk_tokens, kvt_fmt_size(per, sz, sizeof(sz)));
	}
	for (size_t i = 0; i < done; i++)
		bad |= put_report(st, &ns, &keys[i], outcome[i], a.durability, before);
	free(outcome);
	free(payload);
	free(keys);
	kvt_store_close(st);
	return bad;
}

static void get_usage(FILE *f)
{
	fprintf(f, "usage: kvtier get (--key HEX | --tokens FILE) -o OUT [options]\n\n"
		   "Load chunks (verifying their checksums) and write their payloads to\n"
		   "OUT back to back.  With --tokens, loads the cached prefix and says how\n"
		   "many chunks it held; a chunk that is missing ends the prefix.\n%s",
		   cli_common_help);
}

int cmd_get(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	kvt_key *keys;
	size_t n, per, got = 0;
	uint8_t *buf;
	FILE *out;
	int rc = parse("get", argc, argv, &a, get_usage), bad = 0;

	if (rc >= 0)
		return rc;
	if (!a.out) {
		get_usage(stderr);
		return 2;
	}
	a.c.read_only = 1;
	if ((rc = open_keys("get", &a, &st, &ns, &keys, &n)))
		return rc;
	per = kvt_layout_payload_bytes(&ns.layout);
	buf = malloc(per);
	out = strcmp(a.out, "-") ? fopen(a.out, "wb") : stdout;
	if (!out) {
		fprintf(stderr, "kvtier get: cannot open %s: %s\n", a.out, strerror(errno));
		bad = 1;
	} else if (!buf) {
		fprintf(stderr, "kvtier get: no memory for a %zu-byte chunk\n", per);
		bad = 1;
	}
	for (size_t i = 0; !bad && i < n; i++) {
		size_t len;
		rc = kvt_get(st, &ns, &keys[i], buf, per, &len);
		if (rc == KVT_ENOTFOUND && a.tokens && i > 0)
			break;
		if (rc) {
			char hex[65];
			kvt_key_hex(&keys[i], hex);
			bad = cli_fail("get", hex, rc);
			break;
		}
		if (fwrite(buf, 1, len, out) != len) {
			fprintf(stderr, "kvtier get: write to %s failed\n", a.out);
			bad = 1;
		}
		got++;
	}
	if (out && out != stdout && fclose(out) && !bad) {
		fprintf(stderr, "kvtier get: closing %s failed\n", a.out);
		bad = 1;
	}
	if (!bad)
		fprintf(stderr, "kvtier get: %zu of %zu chunk(s) loaded\n", got, n);
	free(buf);
	free(keys);
	kvt_store_close(st);
	return bad;
}

/* What is wrong with a tier, if anything, on lines of its own: an empty
 * listing of an unreachable tier must not read as an empty tier. */
static void tier_state(FILE *f, const kvt_tier_stats *s, const char *indent)
{
	if (s->unreachable)
		fprintf(f, "%s%s UNREACHABLE: %s; its chunks are not counted\n", indent,
			s->name, s->state[0] ? s->state : "endpoint not answering");
	else if (s->state[0])
		fprintf(f, "%s%s degraded: %s\n", indent, s->name, s->state);
	if (s->bad_listed)
		fprintf(f, "%s%s holds %llu bad object(s), not served (kvtier verify lists them)\n",
			indent, s->name, (unsigned long long)s->bad_listed);
	if (s->read_only)
		fprintf(f, "%s%s is open read-only\n", indent, s->name);
}

static void lookup_usage(FILE *f)
{
	fprintf(f, "usage: kvtier lookup --tokens FILE [options]\n\n"
		   "How many leading chunks of the prompt are cached, and in which tier.\n"
		   "  --json           machine-readable output\n%s",
		   cli_common_help);
}

int cmd_lookup(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	kvt_key *keys;
	size_t n;
	uint8_t *tiers;
	kvt_lookup_result res = { 0 };
	int rc = parse("lookup", argc, argv, &a, lookup_usage);

	if (rc >= 0)
		return rc;
	if (!a.tokens) {
		lookup_usage(stderr);
		return 2;
	}
	a.c.read_only = 1;
	if ((rc = open_keys("lookup", &a, &st, &ns, &keys, &n)))
		return rc;
	tiers = calloc(n + 1, 1);
	res.tier = tiers;
	rc = kvt_lookup(st, &ns, keys, n, &res);
	if (rc < 0) {
		rc = cli_fail("lookup", a.tokens, rc);
	} else if (a.json) {
		json_t *hit = json_array();
		for (uint32_t i = 0; hit && i < res.n_hit; i++)
			json_array_append_new(hit, json_integer(tiers[i]));
		cli_json_print(json_pack("{s:I, s:i, s:I, s:o?}", "chunks", (json_int_t)n,
					 "hit_chunks", (int)res.n_hit, "hit_tokens",
					 (json_int_t)res.n_hit * ns.layout.chunk_tokens, "tiers", hit));
		rc = 0;
	} else {
		char model[160];
		cli_model_label(&a.c, model, sizeof(model));
		printf("%u of %zu chunk(s) cached (%llu tokens) of %s, %u-token chunks\n", res.n_hit,
		       n, (unsigned long long)res.n_hit * ns.layout.chunk_tokens, model,
		       ns.layout.chunk_tokens);
		for (int t = 0; t < kvt_store_tiers(st); t++) {
			kvt_tier_stats ts;
			kvt_store_stats(st, t, &ts);
			if (ts.unreachable || ts.state[0]) /* a miss there may be false */
				tier_state(stdout, &ts, "note: ");
		}
		for (uint32_t i = 0; i < res.n_hit; i++) {
			char hex[65];
			kvt_tier_stats ts;
			kvt_key_hex(&keys[i], hex);
			kvt_store_stats(st, tiers[i], &ts);
			printf("  %u %s %s\n", i, hex, ts.name);
		}
		rc = 0;
	}
	free(tiers);
	free(keys);
	kvt_store_close(st);
	return rc;
}

static void why_usage(FILE *f)
{
	fprintf(f, "usage: kvtier why --tokens FILE [options]\n\n"
		   "Why each whole chunk of the prompt is or is not served: hit, prefix (held\n"
		   "but after a missing chunk), never stored, stored under another namespace\n"
		   "(the fields that differ), evicted, deleted, corrupt, expired, a load past\n"
		   "its deadline, or a tier that does not answer; with the tier and the time.\n"
		   "With --set daemon=unix:///PATH the running kvtierd answers.  A chunk\n"
		   "stored under another of the presets (kvtier hash --models) is named so.\n"
		   "  --json           machine-readable output\n%s",
		   cli_common_help);
}

int cmd_why(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	kvt_why_chunk *out = NULL;
	uint32_t *t = NULL;
	size_t nt, n;
	int m, rc = parse("why", argc, argv, &a, why_usage);

	if (rc >= 0)
		return rc;
	if (!a.tokens) {
		why_usage(stderr);
		return 2;
	}
	a.c.read_only = 1;
	if (cli_read_tokens(a.tokens, &t, &nt))
		return 1;
	if (cli_open(&a.c, &st, &ns)) {
		free(t);
		return 1;
	}
	/* The other namespaces a chunk of this prompt may be under: every
	 * model the CLI knows, with this tenant and chunk size.  kvt_why_tokens
	 * tries those the store has resolved; a process resolves only what it
	 * is asked, so this one resolves them all. */
	for (size_t i = 0; kvt_model_preset_at(i); i++) {
		kvt_ns_desc d;
		kvt_ns other;
		kvt_model_preset_desc(kvt_model_preset_at(i), &d);
		d.layout.block_size = 0;
		d.layout.chunk_tokens = ns.layout.chunk_tokens;
		d.tenant = a.c.tenant;
		(void)kvt_ns_init(st, &d, &other); /* a preset that does not fit is not tried */
	}
	n = nt / ns.layout.chunk_tokens;
	out = calloc(n + 1, sizeof(*out));
	m = out ? kvt_why_tokens(st, &ns, t, nt, NULL, out, n) : KVT_ENOMEM;
	if (m < 0) {
		rc = cli_fail("why", a.tokens, m);
	} else if (a.json) {
		json_t *rows = json_array();
		for (int i = 0; rows && i < m; i++) {
			kvt_tier_stats ts = { .name = "" };
			if (out[i].tier >= 0)
				kvt_store_stats(st, out[i].tier, &ts);
			json_array_append_new(rows, json_pack("{s:i, s:s, s:s, s:f, s:s}", "chunk", i,
							      "reason", kvt_why_name(out[i].reason),
							      "tier", ts.name, "when", out[i].when,
							      "detail", out[i].detail));
		}
		cli_json_print(json_pack("{s:i, s:o?}", "chunk_tokens", (int)ns.layout.chunk_tokens,
					 "chunks", rows));
		rc = 0;
	} else {
		printf("%d chunk(s) of %u tokens:\n", m, ns.layout.chunk_tokens);
		for (int i = 0; i < m; i++)
			printf("  %3d %-9s %s\n", i, kvt_why_name(out[i].reason), out[i].detail);
		rc = 0;
	}
	free(out);
	free(t);
	kvt_store_close(st);
	return rc;
}

static void ls_usage(FILE *f)
{
	fprintf(f, "usage: kvtier ls [options]\n\n"
		   "List the chunks of every tier: tier, key, bytes.\n%s",
		   cli_common_help);
}

static int ls_one(void *arg, const kvt_key *key, uint64_t len)
{
	char hex[65];
	kvt_key_hex(key, hex);
	printf("%s %s %llu\n", (const char *)arg, hex, (unsigned long long)len);
	return 0;
}

int cmd_ls(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	int rc = parse("ls", argc, argv, &a, ls_usage);

	if (rc >= 0)
		return rc;
	a.c.read_only = 1;
	if (cli_open(&a.c, &st, &ns))
		return 1;
	for (int t = 0; t < kvt_store_tiers(st); t++) {
		kvt_tier_stats s;
		kvt_store_stats(st, t, &s);
		kvt_store_iterate(st, t, ls_one, s.name);
	}
	kvt_store_close(st);
	return 0;
}

static void stat_usage(FILE *f)
{
	fprintf(f, "usage: kvtier stat [--json] [options]\n"
		   "       kvtier stat --daemon HOST:PORT [--json]\n\n"
		   "Capacity, use and counters of every tier; with --daemon, of a running\n"
		   "kvtierd's (its --metrics-port), with its tenants and clients.\n%s",
		   cli_common_help);
}

int cmd_stat(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	int rc;

	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--daemon") || !strncmp(argv[i], "--daemon=", 9))
			return cmd_stat_daemon(argc, argv);
	if ((rc = parse("stat", argc, argv, &a, stat_usage)) >= 0)
		return rc;
	a.c.read_only = 1;
	if (cli_open(&a.c, &st, &ns))
		return 1;
	json_t *tiers = a.json ? json_array() : NULL;
	for (int t = 0; t < kvt_store_tiers(st); t++) {
		kvt_tier_stats s;
		kvt_store_stats(st, t, &s);
		if (a.json) {
			json_array_append_new(tiers, json_pack(
				"{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:s}",
				"name", s.name, "capacity_bytes", (json_int_t)s.capacity_bytes,
				"used_bytes", (json_int_t)s.used_bytes, "chunks", (json_int_t)s.chunks,
				"hits", (json_int_t)s.hits, "misses", (json_int_t)s.misses,
				"evictions", (json_int_t)s.evictions, "corrupt", (json_int_t)s.corrupt,
				"bad_listed", (json_int_t)s.bad_listed, "reachable", !s.unreachable,
				"read_only", (int)s.read_only, "state", s.state));
		} else {
			printf("%-6s capacity %llu used %llu chunks %llu hits %llu misses %llu evictions %llu corrupt %llu\n",
			       s.name, (unsigned long long)s.capacity_bytes,
			       (unsigned long long)s.used_bytes, (unsigned long long)s.chunks,
			       (unsigned long long)s.hits, (unsigned long long)s.misses,
			       (unsigned long long)s.evictions, (unsigned long long)s.corrupt);
			tier_state(stdout, &s, "");
		}
	}
	if (a.json)
		cli_json_print(json_pack("{s:o?}", "tiers", tiers));
	kvt_store_close(st);
	return 0;
}

static void verify_usage(FILE *f)
{
	fprintf(f, "usage: kvtier verify [--tier NAME] [--repair] [--json] [options]\n\n"
		   "Read every chunk of every tier (or of --tier dram|nvme|fsdir) and check\n"
		   "its header, key and every layer's checksum, like fsck, and list the\n"
		   "files found bad at open.  Prints each bad object with its path and the\n"
		   "reason, and changes nothing.  --repair moves damaged objects into the\n"
		   "tier's quarantine directory (on a shared tier, never one that is only\n"
		   "unverifiable here).  Exits 1 if any was bad.\n%s",
		   cli_common_help);
}

/* One bad object: a line, or an entry of the tier's "bad_objects" (the
 * array `arg` when --json, the tier's name otherwise). */
struct verify_out {
	const char *tier;
	json_t *bad; /* NULL: print lines */
};

static void verify_bad(void *arg, const kvt_key *key, int err, const char *why)
{
	const struct verify_out *o = arg;
	char hex[65];
	kvt_key_hex(key, hex);
	if (o->bad) {
		json_array_append_new(o->bad, json_pack("{s:s, s:s, s:s}", "key", hex, "class",
							err == KVT_ENOTSUP ? "unverifiable" : "bad",
							"why", why && why[0] ? why : kvt_strerror(err)));
		return;
	}
	/* `why` names the file and what is wrong with it; the class of the
	 * error alone would mislabel a bad magic as a checksum mismatch. */
	printf("%s %s %s: %s\n", o->tier, hex,
	       err == KVT_ENOTSUP ? "UNVERIFIABLE" : "BAD",
	       why && why[0] ? why : kvt_strerror(err));
}

int cmd_verify(int argc, char **argv)
{
	store_args a;
	kvt_store *st;
	kvt_ns ns;
	uint64_t bad = 0;
	int rc = parse("verify", argc, argv, &a, verify_usage), seen = 0;

	if (rc >= 0)
		return rc;
	a.c.read_only = !a.repair; /* only a repair changes anything */
	if (cli_open(&a.c, &st, &ns))
		return 1;
	json_t *tiers = a.json ? json_array() : NULL;
	for (int t = 0; t < kvt_store_tiers(st); t++) {
		kvt_tier_stats s;
		kvt_verify_result r;
		kvt_store_stats(st, t, &s);
		if (a.tier && strcmp(a.tier, s.name))
			continue;
		struct verify_out out = { s.name, a.json ? json_array() : NULL };
		rc = kvt_store_verify(st, t, a.repair, verify_bad, &out, &r);
		if (rc) {
			json_decref(out.bad);
			json_decref(tiers);
			kvt_store_close(st);
			return cli_fail("verify", s.name, rc);
		}
		bad += r.bad;
		if (a.json)
			json_array_append_new(tiers, json_pack(
				"{s:s, s:I, s:I, s:I, s:I, s:I, s:o}", "name", s.name,
				"checked", (json_int_t)r.checked, "bad", (json_int_t)r.bad,
				"unverifiable", (json_int_t)r.unverifiable,
				"quarantined", (json_int_t)r.repaired, "bytes", (json_int_t)r.bytes,
				"bad_objects", out.bad));
		else
			printf("%s: %llu object(s) checked, %llu bad (%llu only unverifiable here), "
			       "%llu moved to quarantine, %llu payload bytes verified\n",
			       s.name, (unsigned long long)r.checked, (unsigned long long)r.bad,
			       (unsigned long long)r.unverifiable, (unsigned long long)r.repaired,
			       (unsigned long long)r.bytes);
		seen++;
	}
	if (a.json)
		cli_json_print(json_pack("{s:o?}", "tiers", tiers));
	kvt_store_close(st);
	if (a.tier && !seen) {
		fprintf(stderr, "kvtier verify: no tier named \"%s\"\n", a.tier);
		return 2;
	}
	return bad ? 1 : 0;
}
