/*
 * common.c — what every kvtier subcommand shares.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* DESIGN.md's reference models (fp16/bf16, K and V). */
const cli_model *cli_model_find(const char *name)
{
	return kvt_model_preset_find(name);
}

void cli_models_print(FILE *f)
{
	const kvt_model_preset *m;
	for (size_t i = 0; (m = kvt_model_preset_at(i)); i++) {
		fprintf(f, "  %-14s %-36s %3u layers x %u KV heads x %u dims\n", m->name,
			m->model_id, m->layers, m->kv_heads, m->head_dim);
	}
}

void cli_json_print(json_t *v)
{
	if (!v) { /* json_pack failed: out of memory or a string not UTF-8 */
		puts("{\"error\": \"could not build the JSON output\"}");
		return;
	}
	char *text = json_dumps(v, JSON_ENSURE_ASCII);
	if (text)
		puts(text);
	free(text);
	json_decref(v);
}

const char cli_common_help[] =
	"  --config FILE        YAML configuration (default: embedded, DRAM only)\n"
	"  --set KEY=VALUE      override one configuration key (repeatable)\n"
	"  --dir PATH           shorthand for --set local_disk=PATH\n"
	"  --model NAME         model preset (default qwen2.5-0.5b; see kvtier hash --models)\n"
	"  --tenant NAME        tenant configured in the store (default: none)\n"
	"  --chunk-tokens N     tokens per chunk (default: the config's chunk_size)\n";

/* The common options, as getopt_long rows. */
enum { O_CONFIG = CLI_OPT_COMMON, O_SET, O_DIR, O_MODEL, O_TENANT, O_CHUNK, O_HELP };
static const struct option common_opts[] = {
	{ "config", required_argument, NULL, O_CONFIG },
	{ "set", required_argument, NULL, O_SET },
	{ "dir", required_argument, NULL, O_DIR },
	{ "model", required_argument, NULL, O_MODEL },
	{ "tenant", required_argument, NULL, O_TENANT },
	{ "chunk-tokens", required_argument, NULL, O_CHUNK },
};
#define N_COMMON (sizeof(common_opts) / sizeof(common_opts[0]))

/* One common option `id` with its value: 0, or -1 after saying why. */
static int common_opt(cli_common *c, int id, const char *v)
{
	switch (id) {
	case O_CONFIG:
		c->config = v;
		return 0;
	case O_MODEL:
		c->model = v;
		return 0;
	case O_TENANT:
		c->tenant = v;
		return 0;
	case O_CHUNK:
		return cli_parse_u32("", "--chunk-tokens", v, 1, 1u << 20, &c->chunk);
	}
	if (c->n_sets == (int)(sizeof(c->sets) / sizeof(c->sets[0]))) {
		fprintf(stderr, "kvtier: too many --set/--dir options\n");
		return -1;
	}
	if (id == O_SET) {
		c->sets[c->n_sets++] = v;
		return 0;
	}
	/* --dir: a directory named on the command line is relative to where
	 * the command runs; the configuration wants it absolute (a daemon's
	 * working directory is not the user's). */
	char cwd[PATH_MAX] = "";
	if (v[0] != '/' && !getcwd(cwd, sizeof(cwd))) {
		fprintf(stderr, "kvtier: --dir %s: cannot resolve: %s\n", v, strerror(errno));
		return -1;
	}
	if (snprintf(c->dir_set, sizeof(c->dir_set), "local_disk=%s%s%s", cwd, cwd[0] ? "/" : "",
		     v) >= (int)sizeof(c->dir_set)) {
		fprintf(stderr, "kvtier: --dir %s: path too long\n", v);
		return -1;
	}
	c->sets[c->n_sets++] = c->dir_set;
	return 0;
}

int cli_common_arg(cli_common *c, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	for (size_t k = 0; k < N_COMMON; k++) {
		if (strncmp(a, "--", 2) || strcmp(a + 2, common_opts[k].name))
			continue;
		if (*i + 1 >= argc) {
			fprintf(stderr, "kvtier: %s needs a value\n", a);
			return -1;
		}
		(*i)++;
		return common_opt(c, common_opts[k].val, argv[*i]) ? -1 : 1;
	}
	return 0;
}

int cli_getopt(const char *cmd, int argc, char **argv, const char *shorts,
	       const struct option *own, cli_common *c, cli_opt_fn fn, void *arg,
	       void (*usage)(FILE *f), int *first_arg)
{
	struct option opts[96];
	char optstring[32];
	size_t n = 0;

	snprintf(optstring, sizeof(optstring), ":h%s", shorts ? shorts : "");

	for (; own && own[n].name; n++) {
		if (n + N_COMMON + 2 > sizeof(opts) / sizeof(opts[0]))
			abort(); /* a table this long is a bug in the command */
		opts[n] = own[n];
	}
	if (c)
		for (size_t k = 0; k < N_COMMON; k++)
			opts[n++] = common_opts[k];
	opts[n++] = (struct option){ "help", no_argument, NULL, O_HELP };
	opts[n] = (struct option){ 0 };

	opterr = 0; /* our own messages, naming the command */
	optind = 0; /* a fresh scan */
	for (;;) {
		int prev = optind ? optind : 1;
		int id = getopt_long(argc, argv, optstring, opts, NULL);
		if (id == -1)
			break;
		const char *seen = prev < argc ? argv[prev] : "";
		if (id == O_HELP || id == 'h') {
			usage(stdout);
			return 0;
		}
		if (id == '?' || id == ':') {
			fprintf(stderr, id == ':' ? "kvtier %s: option \"%s\" needs a value\n"
						  : "kvtier %s: unknown option \"%s\"\n",
				cmd, seen);
			usage(stderr);
			return 2;
		}
		if (id >= CLI_OPT_COMMON && id < O_HELP) {
			if (common_opt(c, id, optarg))
				return 2;
			continue;
		}
		int rc = fn ? fn(arg, id, optarg) : 2;
		if (rc >= 0)
			return rc;
	}
	*first_arg = optind;
	return -1;
}

int cli_fail(const char *cmd, const char *what, int rc)
{
	const char *d = kvt_errmsg();
	fprintf(stderr, "kvtier %s: %s: %s%s%s%s\n", cmd, what, kvt_strerror(rc),
		*d ? " (" : "", d, *d ? ")" : "");
	return 1;
}

int cli_config(const cli_common *c, kvt_config **out)
{
	kvt_config *cfg;
	int rc = 0;

	cfg = c->config ? kvt_config_load(c->config, &rc) : kvt_config_new();
	if (!cfg)
		return cli_fail("config", c->config ? c->config : "defaults",
				rc ? rc : KVT_ENOMEM);
	/* A one-shot command touches a few chunks: populating a whole default
	 * arena would cost more than the command.  A config file decides. */
	if (!c->config)
		kvt_config_set(cfg, "dram_prefault", "false");
	if ((rc = kvt_config_apply_env(cfg))) {
		kvt_config_free(cfg);
		return cli_fail("config", "environment", rc);
	}
	for (int i = 0; i < c->n_sets; i++) {
		char key[128];
		const char *eq = strchr(c->sets[i], '=');
		if (!eq || (size_t)(eq - c->sets[i]) >= sizeof(key)) {
			fprintf(stderr, "kvtier: --set \"%s\": expected KEY=VALUE\n",
				c->sets[i]);
			kvt_config_free(cfg);
			return 1;
		}
		memcpy(key, c->sets[i], (size_t)(eq - c->sets[i]));
		key[eq - c->sets[i]] = '\0';
		if ((rc = kvt_config_set(cfg, key, eq + 1))) {
			kvt_config_free(cfg);
			return cli_fail("config", c->sets[i], rc);
		}
	}
	/* Inspection changes nothing, whatever the configuration says. */
	if (c->read_only)
		kvt_config_set(cfg, "read_only", "true");
	*out = cfg;
	return 0;
}

#define CLI_DEFAULT_MODEL "qwen2.5-0.5b"

void cli_model_label(const cli_common *c, char *buf, size_t len)
{
	const cli_model *m = cli_model_find(c->model ? c->model : CLI_DEFAULT_MODEL);

	if (m)
		snprintf(buf, len, "%s (preset %s)", m->model_id, m->name);
	else
		snprintf(buf, len, "%s", c->model);
}

int cli_desc(const cli_common *c, kvt_ns_desc *d)
{
	const cli_model *m = cli_model_find(c->model ? c->model : CLI_DEFAULT_MODEL);

	if (!m) {
		fprintf(stderr, "kvtier: unknown model \"%s\"; known presets:\n", c->model);
		cli_models_print(stderr);
		return 1;
	}
	kvt_model_preset_desc(m, d);
	d->layout.block_size = 0; /* the library's default (kvt_config_ns) */
	d->layout.chunk_tokens = c->chunk;
	d->tenant = c->tenant;
	return 0;
}

int cli_open(const cli_common *c, kvt_store **st, kvt_ns *ns)
{
	kvt_config *cfg;
	kvt_ns_desc d;
	int rc = 0;

	if (cli_desc(c, &d) || cli_config(c, &cfg))
		return 1;
	*st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (!*st)
		return cli_fail("store", "open", rc);
	if ((rc = kvt_ns_init(*st, &d, ns))) {
		kvt_store_close(*st);
		*st = NULL;
		return cli_fail("namespace", d.model, rc);
	}
	return 0;
}

/* Open `path` for one of the readers below ("-" = stdin).  A directory is
 * refused by name: fopen takes it and only the first read fails, with a
 * message ("Is a directory") that does not say which option was wrong. */
static FILE *open_input(const char *path)
{
	struct stat st;
	FILE *f;

	if (!strcmp(path, "-"))
		return stdin;
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "kvtier: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fprintf(stderr, "kvtier: %s: is a directory, not a file\n", path);
		fclose(f);
		return NULL;
	}
	return f;
}

static void close_input(FILE *f)
{
	if (f && f != stdin)
		fclose(f);
}

int cli_read_file_max(const char *path, size_t max, uint8_t **buf, size_t *len)
{
	FILE *f = open_input(path);
	uint8_t *b = NULL;
	size_t n = 0, cap = 0, r;

	if (!f)
		return -1;
	do {
		if (n == cap) {
			uint8_t *nb;
			if (cap > max) {
				fprintf(stderr, "kvtier: %s: larger than %zu bytes, the most this reads\n",
					path, max);
				free(b);
				close_input(f);
				return -1;
			}
			/* Grow to at most max + 1: one byte past the bound is
			 * how a file that is too large is told apart. */
			cap = cap ? cap * 2 : 1 << 16;
			if (cap > max)
				cap = max + 1;
			nb = realloc(b, cap);
			if (!nb) {
				free(b);
				close_input(f);
				fprintf(stderr, "kvtier: %s: out of memory\n", path);
				return -1;
			}
			b = nb;
		}
		r = fread(b + n, 1, cap - n, f);
		n += r;
	} while (r > 0);
	if (ferror(f)) {
		fprintf(stderr, "kvtier: %s: read error\n", path);
		free(b);
		close_input(f);
		return -1;
	}
	close_input(f);
	if (n > max) {
		fprintf(stderr, "kvtier: %s: larger than %zu bytes, the most this reads\n", path, max);
		free(b);
		return -1;
	}
	*buf = b;
	*len = n;
	return 0;
}

int cli_read_file(const char *path, uint8_t **buf, size_t *len)
{
	return cli_read_file_max(path, SIZE_MAX - 1, buf, len);
}

#define PAST_BOUND (-2)

/* The next byte of a token file, or PAST_BOUND once more than
 * CLI_TOKENS_MAX_BYTES have been read. */
static int next_byte(FILE *f, uint64_t *count)
{
	int ch = getc(f);
	if (ch != EOF && ++*count > CLI_TOKENS_MAX_BYTES)
		return PAST_BOUND;
	return ch;
}

/* Streamed byte by byte (stdio buffers it), so that a wrong file fails at
 * its first wrong byte: /dev/zero is refused after one byte, not after it
 * has filled memory; a stream of valid ids stops at CLI_TOKENS_MAX_BYTES. */
int cli_read_tokens(const char *path, uint32_t **tokens, size_t *n_out)
{
	FILE *f = open_input(path);
	size_t n = 0, cap = 0, line = 1;
	uint64_t count = 0;
	uint32_t *t = NULL;
	int in_array = 0, ch;

	if (!f)
		return -1;
	ch = next_byte(f, &count);
	while (ch != EOF) {
		if (ch == PAST_BOUND) {
			fprintf(stderr, "kvtier: %s: larger than %u MiB, the bound on a token file\n",
				path, CLI_TOKENS_MAX_BYTES >> 20);
			goto bad;
		}
		if (ch == '\n')
			line++;
		if (isspace(ch) || ch == ',') {
			ch = next_byte(f, &count);
		} else if (ch == '[' && !in_array && n == 0) {
			in_array = 1;
			ch = next_byte(f, &count);
		} else if (ch == ']' && in_array == 1) {
			in_array = 2;
			ch = next_byte(f, &count);
		} else if (isdigit(ch) && in_array != 2) {
			uint64_t v = 0;
			for (; ch >= '0' && ch <= '9'; ch = next_byte(f, &count)) {
				v = v * 10 + (unsigned)(ch - '0');
				if (v > UINT32_MAX) {
					fprintf(stderr, "kvtier: %s:%zu: token id exceeds 32 bits\n",
						path, line);
					goto bad;
				}
			}
			if (n == cap) {
				uint32_t *nt;
				cap = cap ? cap * 2 : 1024;
				nt = realloc(t, cap * sizeof(*t));
				if (!nt) {
					fprintf(stderr, "kvtier: %s: out of memory\n", path);
					goto bad;
				}
				t = nt;
			}
			t[n++] = (uint32_t)v;
		} else {
			if (isprint(ch))
				fprintf(stderr,
					"kvtier: %s:%zu: unexpected '%c' (expected token ids: a JSON array or whitespace-separated integers)\n",
					path, line, ch);
			else
				fprintf(stderr,
					"kvtier: %s:%zu: unexpected byte 0x%02x (expected token ids: a JSON array or whitespace-separated integers)\n",
					path, line, (unsigned)ch);
			goto bad;
		}
	}
	if (ferror(f)) {
		fprintf(stderr, "kvtier: %s: read error\n", path);
		goto bad;
	}
	if (in_array == 1) {
		fprintf(stderr, "kvtier: %s: JSON array not closed\n", path);
		goto bad;
	}
	close_input(f);
	*tokens = t;
	*n_out = n;
	return 0;
bad:
	close_input(f);
	free(t);
	return -1;
}

/* --- strict option values ------------------------------------------------ */

/* "kvtier CMD: OPT \"V\": " — cmd "" for the options every command shares. */
static void opt_err(const char *cmd, const char *opt, const char *v, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void opt_err(const char *cmd, const char *opt, const char *v, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvtier%s%s: %s \"%s\": ", *cmd ? " " : "", cmd, opt, v);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_parse_u64(const char *cmd, const char *opt, const char *v, uint64_t lo, uint64_t hi,
		  uint64_t *out)
{
	uint64_t n = 0;
	const char *p = v;

	/* Digits only: strtoull would take "-1" (as 2^64 - 1), " 7", "+7", and
	 * stop quietly at "1abc"; atoi reads "abc" as 0. */
	if (!isdigit((unsigned char)*p) || (p[0] == '0' && p[1]))
		goto bad;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (n > (UINT64_MAX - d) / 10) {
			opt_err(cmd, opt, v, "out of range %llu..%llu", (unsigned long long)lo,
				(unsigned long long)hi);
			return -1;
		}
		n = n * 10 + d;
	}
	if (*p)
		goto bad;
	if (n < lo || n > hi) {
		opt_err(cmd, opt, v, "out of range %llu..%llu", (unsigned long long)lo,
			(unsigned long long)hi);
		return -1;
	}
	*out = n;
	return 0;
bad:
	opt_err(cmd, opt, v, "expected a whole number %llu..%llu (decimal digits only)",
		(unsigned long long)lo, (unsigned long long)hi);
	return -1;
}

int cli_parse_u32(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi,
		  uint32_t *out)
{
	uint64_t n;

	if (cli_parse_u64(cmd, opt, v, lo, hi, &n))
		return -1;
	*out = (uint32_t)n;
	return 0;
}

int cli_parse_double(const char *cmd, const char *opt, const char *v, double lo, double hi,
		     double *out)
{
	const char *p = v;
	char *end;
	double d;

	/* DIGITS [. DIGITS] [e [+-] DIGITS]: strtod alone would also take
	 * hex ("0x1p3"), "inf", "nan" and leading space. */
	if (!isdigit((unsigned char)*p))
		goto bad;
	while (isdigit((unsigned char)*p))
		p++;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			goto bad;
		while (isdigit((unsigned char)*p))
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!isdigit((unsigned char)*p))
			goto bad;
		while (isdigit((unsigned char)*p))
			p++;
	}
	if (*p)
		goto bad;
	errno = 0;
	d = strtod(v, &end);
	if (*end)
		goto bad;
	if (errno == ERANGE || !isfinite(d) || d < lo || d > hi) {
		opt_err(cmd, opt, v, "out of range %g..%g", lo, hi);
		return -1;
	}
	*out = d;
	return 0;
bad:
	opt_err(cmd, opt, v, "expected a decimal number %g..%g (e.g. 0.5, 800, 1e-3)", lo, hi);
	return -1;
}

int cli_parse_size(const char *cmd, const char *opt, const char *v, uint64_t lo, uint64_t hi,
		   uint64_t *out)
{
	char a[32], b[32];
	uint64_t n;

	if (kvt_parse_size(v, 1, &n)) {
		/* The library's sentence already names the value and the forms. */
		fprintf(stderr, "kvtier%s%s: %s: %s\n", *cmd ? " " : "", cmd, opt, kvt_errmsg());
		return -1;
	}
	if (n < lo || n > hi) {
		opt_err(cmd, opt, v, "out of range %s..%s", kvt_fmt_size(lo, a, sizeof(a)),
			kvt_fmt_size(hi, b, sizeof(b)));
		return -1;
	}
	*out = n;
	return 0;
}

int cli_parse_duration(const char *cmd, const char *opt, const char *v, uint64_t *out)
{
	/* One grammar with the configuration's ttl. */
	if (kvt_parse_duration(v, out)) {
		fprintf(stderr, "kvtier%s%s: %s: %s\n", *cmd ? " " : "", cmd, opt, kvt_errmsg());
		return -1;
	}
	return 0;
}

int cli_fail_detail(const char *cmd, int rc)
{
	const char *d = kvt_errmsg();
	fprintf(stderr, "kvtier %s: %s\n", cmd, *d ? d : kvt_strerror(rc));
	return 1;
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
