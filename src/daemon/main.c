/*
 * main.c — kvtierd: one cache per node, served over the Redis protocol.
 *
 *   kvtierd [--config FILE] [--port N] [--bind ADDR] [--data-dir DIR]
 *           [--check-config] [--log-level L] ... (--help lists them)
 *
 * The store is the library's (the YAML of docs/CONFIG.md, KVTIER_*
 * variables, --set KEY=VALUE overrides); without a configuration it is
 * the embedded default: a DRAM tier, plus a local-disk tier under
 * DIR/disk when --data-dir is given.  docs/DAEMON.md is the manual.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "daemon/guard.h"
#include "daemon/log.h"
#include "daemon/ops.h"
#include "daemon/server.h"
#include "daemon/tenant.h"
#include "kvtier/units.h"

static struct kvtd_tenant default_tenant;

/* AUTH without an ACL: the default user's password, --requirepass.  Its
 * one tenant is the whole node: it is an admin. */
static int auth_requirepass(struct kvtd *d, const char *user, size_t ulen, const char *pass,
			    size_t plen, const struct kvtd_tenant **out)
{
	const char *want = d->o.requirepass;

	if (!want || ulen != 7 || memcmp(user, "default", 7) || strlen(want) != plen ||
	    CRYPTO_memcmp(want, pass, plen))
		return -1;
	*out = d->default_tenant;
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtierd [options]\n"
		"  --config FILE        the store's YAML configuration (docs/CONFIG.md);\n"
		"                       SIGHUP puts its tier policies and ttl in force\n"
		"  --data-dir DIR       keep the local-disk tier under DIR/disk\n"
		"  --port N             TCP port (default 6379; 0: any free port)\n"
		"  --bind ADDR          IPv4 address to listen on (default 127.0.0.1)\n"
		"  --unix PATH          also serve RESP on a Unix socket\n"
		"  --local PATH         serve the node's processes (the library's `daemon`\n"
		"                       key) on a Unix socket, data in shared memory\n"
		"  --local-uid UID      a uid allowed on --local besides ours and root\n"
		"  --set KEY=VALUE      set a configuration key (repeatable)\n"
		"  --threads N          worker threads (default 4)\n"
		"  --durability D       of every SET: cached, crash-safe, power-safe\n"
		"                       (default crash-safe with a disk tier, else cached)\n"
		"  --requirepass PASS   clients must AUTH with this password\n"
		"  --maxclients N       connections at most (default 10000)\n"
		"  --max-value SIZE     the largest value or argument (default 512MiB)\n"
		"  --client-timeout S   close a client whose output or half-sent command\n"
		"                       stalls this long (default 60; 0: never)\n"
		"  --log-level L        error, warn, info (default), debug\n"
		"  --acl FILE           users, their tenants and quotas (docs/DAEMON_OPS.md);\n"
		"                       SIGHUP rereads it\n"
		"  --metrics-port N     serve /metrics and /health over HTTP (0: any free port)\n"
		"  --metrics-bind ADDR  IPv4 address for them (default 127.0.0.1)\n"
		"  --metrics-tenant-names  label tenants' samples by name, not by the id\n"
		"                       the log gives each\n"
		"  --tls-cert FILE      TCP clients speak TLS: the certificate chain (PEM)\n"
		"  --tls-key FILE       and its private key (PEM)\n"
		"  --serve-peers        other nodes' kvtierd may read this node's chunks\n"
		"                       (KVTIER.PEEK/FETCH; with --acl, +admin users)\n"
		"  --warm-start SIZE    before /ready says yes, load up to SIZE of the chunks\n"
		"                       the first tier held at the last stop (its hot list,\n"
		"                       DATA_DIR/hot.keys) from the disk and shared tiers\n"
		"  --warm-bandwidth R   at most R bytes/s for that (e.g. 500MB; default:\n"
		"                       unlimited)\n"
		"  --hot-list PATH      where the hot list is kept (default DATA_DIR/hot.keys;\n"
		"                       saved every minute and at the stop)\n"
		"  --owner-pid PID      stop (as on SIGTERM) when process PID ends: a daemon\n"
		"                       an engine starts for itself\n"
		"  --check-config       check the configuration and options, then exit\n"
		"  --version            print the version and exit\n");
}

/* --owner-pid: a pidfd of the owner where the kernel has them (it becomes
 * readable when the process ends, zombie or reaped, and a reused pid is
 * never mistaken for it); -1 to fall back on kill(pid, 0); -2 if there is
 * no such process. */
static int owner_open(pid_t pid)
{
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0)
		return fd;
	if (errno == ESRCH)
		return -2;
#endif
	return kill(pid, 0) && errno == ESRCH ? -2 : -1;
}

static int owner_gone(pid_t pid, int fd)
{
	if (fd >= 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		return poll(&p, 1, 0) > 0;
	}
	return kill(pid, 0) && errno == ESRCH;
}

/* Descriptors kept for the store's files, listeners, the metrics server and
 * peers, beyond one per client. */
#define FD_RESERVE 128

/*
 * Every client holds a descriptor: raise the soft limit so that maxclients
 * of them fit, or, where the hard limit forbids it, lower maxclients and say
 * so, rather than fail accept() once the node is busy.
 */
static int fd_limit(struct kvtd *d)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)d->o.maxclients + FD_RESERVE;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 0;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		struct rlimit up = rl;
		up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want
										 : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return 0;
	if (rl.rlim_cur <= FD_RESERVE + 1) {
		kvtd_log(KVTD_LOG_ERROR,
			 "open files limit %llu leaves no room for clients (%d kept for the "
			 "store); raise it (ulimit -n, LimitNOFILE=)",
			 (unsigned long long)rl.rlim_cur, FD_RESERVE);
		return -1;
	}
	long fit = (long)rl.rlim_cur - FD_RESERVE;
	kvtd_log(KVTD_LOG_WARN,
		 "open files limit %llu (hard %llu) fits %ld clients, not --maxclients %ld: "
		 "maxclients is now %ld; raise the limit (ulimit -n, LimitNOFILE=) for more",
		 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, fit,
		 d->o.maxclients, fit);
	d->o.maxclients = fit;
	return 0;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
	char *e;
	errno = 0;
	long v = strtol(s, &e, 10);
	if (errno || e == s || *e || v < lo || v > hi) {
		fprintf(stderr, "kvtierd: %s %s: not a number in %ld..%ld\n", opt, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static int mkdir_p(const char *path)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			if (mkdir(p, 0700) && errno != EEXIST)
				return -1;
			*s = '/';
		}
	return mkdir(p, 0700) && errno != EEXIST ? -1 : 0;
}

/* The store's configuration: the file (or the embedded default), then
 * KVTIER_* variables, --data-dir, --set.  NULL after saying what was
 * wrong. */
static kvt_config *build_config(const char *config, const char *data_dir,
				const char *const *sets, int n_sets, int check)
{
	int err = 0;
	kvt_config *cfg = config ? kvt_config_load(config, &err) : kvt_config_new();

	if (!cfg) {
		fprintf(stderr, "kvtierd: %s: %s\n", config ? config : "configuration",
			kvt_errmsg()[0] ? kvt_errmsg() : kvt_strerror(err));
		return NULL;
	}
	if (kvt_config_apply_env(cfg)) {
		fprintf(stderr, "kvtierd: %s\n", kvt_errmsg());
		goto bad;
	}
	if (data_dir) {
		char disk[4096], cwd[2048];
		/* The tier wants an absolute path; a relative --data-dir is
		 * taken from where kvtierd was started. */
		if (data_dir[0] != '/' && getcwd(cwd, sizeof(cwd)))
			snprintf(disk, sizeof(disk), "%s/%s/disk", cwd, data_dir);
		else
			snprintf(disk, sizeof(disk), "%s/disk", data_dir);
		if (!check && mkdir_p(disk)) {
			fprintf(stderr, "kvtierd: --data-dir %s: %s\n", data_dir, strerror(errno));
			goto bad;
		}
		if (kvt_config_set(cfg, "local_disk", disk)) {
			fprintf(stderr, "kvtierd: --data-dir: %s\n", kvt_errmsg());
			goto bad;
		}
	}
	for (int i = 0; i < n_sets; i++) {
		char k[128];
		const char *eq = strchr(sets[i], '=');
		snprintf(k, sizeof(k), "%.*s", (int)(eq - sets[i]), sets[i]);
		if (kvt_config_set(cfg, k, eq + 1)) {
			fprintf(stderr, "kvtierd: --set %s: %s\n", sets[i], kvt_errmsg());
			goto bad;
		}
	}
	return cfg;
bad:
	kvt_config_free(cfg);
	return NULL;
}

/* SIGHUP: the configuration is read again as at start (file, environment,
 * --data-dir, --set) and its policies put in force (kvt_store_reconfigure);
 * what takes effect at the next start only is logged by name. */
static void reload_policies(struct kvtd *d, const char *config, const char *data_dir,
			    const char *const *sets, int n_sets, int local)
{
	kvt_config *c = build_config(config, data_dir, sets, n_sets, 0);
	char later[1024];
	int rc;

	if (!c || (local && kvt_config_set(c, "dram_shared", "true"))) {
		kvtd_log(KVTD_LOG_WARN, "SIGHUP: the configuration%s%s is not valid (above): "
			 "the policies in force stay", config ? " " : "", config ? config : "");
		kvt_config_free(c);
		return;
	}
	rc = kvt_store_reconfigure(d->st, c, later, sizeof(later));
	kvt_config_free(c);
	if (rc)
		kvtd_log(KVTD_LOG_WARN, "SIGHUP: policies: %s", kvt_errmsg());
	else
		kvtd_log(KVTD_LOG_INFO, "SIGHUP: tier policies and ttl reloaded%s", config
			 ? "" : " (no --config: from the environment and --set)");
	if (later[0])
		kvtd_log(KVTD_LOG_WARN, "SIGHUP: changed, in force at the next start only: %s",
			 later);
}

/* The hot list is saved this often (and at the stop), so that a crash
 * loses at most this much of the first tier's recency. */
#define HOT_SAVE_MS (60 * 1000)

static void hot_save(struct kvtd *d)
{
	kvt_tier_stats ts;
	int rc;

	/* An empty first tier (a node up for moments, cold) says nothing
	 * about what is hot: the last list stands. */
	if (kvt_store_stats(d->st, 0, &ts) || ts.chunks == 0)
		return;
	if ((rc = kvt_store_hot_save(d->st, d->hot_path, 0)))
		kvtd_log(KVTD_LOG_WARN, "hot list: %s", kvt_errmsg());
}

/* The warm start, beside the traffic the daemon already serves: /ready
 * says no until it is done. */
static void *warm_main(void *arg)
{
	struct kvtd *d = arg;
	int64_t t0 = kvtd_mono_ms();
	char a[32];
	int rc = kvt_store_warm(d->st, d->hot_path, d->warm_bytes, d->warm_bps, &d->warm);

	if (rc == KVT_ENOTFOUND)
		kvtd_log(KVTD_LOG_INFO, "warm start: no hot list at %s: starting cold", d->hot_path);
	else if (rc)
		kvtd_log(KVTD_LOG_WARN, "warm start: %s: starting cold", kvt_errmsg());
	else
		kvtd_log(KVTD_LOG_INFO, "warm start: %llu chunks (%s) loaded in %lld ms; %llu of "
			 "the %llu listed were there already, %llu in no tier, %llu failed",
			 (unsigned long long)d->warm.loaded,
			 kvt_fmt_size(d->warm.loaded_bytes, a, sizeof(a)),
			 (long long)(kvtd_mono_ms() - t0), (unsigned long long)d->warm.already,
			 (unsigned long long)d->warm.listed, (unsigned long long)d->warm.missing,
			 (unsigned long long)d->warm.failed);
	atomic_store(&d->ready, 1);
	return NULL;
}

enum { O_CONFIG = 256, O_DATA, O_PORT, O_BIND, O_UNIX, O_SET, O_THREADS, O_DUR, O_PASS,
       O_MAXCL, O_MAXVAL, O_TIMEOUT, O_LOG, O_CHECK, O_HELP, O_LOCAL, O_LOCAL_UID, O_ACL,
       O_MPORT, O_MBIND, O_MNAMES, O_TLS_CERT, O_TLS_KEY, O_SERVE_PEERS, O_VERSION, O_OWNER,
       O_WARM, O_WARM_BW, O_HOT };

/* What the options say beyond struct kvtd itself. */
struct args {
	const char *config, *data_dir, *sets[64];
	int n_sets, check;
	pid_t owner;
	uint32_t local_uids[64];
	kvt_local_opts lopt;
	struct kvtd_ops_opts ops;
};

/* The options into d and a: -1 to go on, or the exit code. */
static int parse_args(int argc, char **argv, struct kvtd *d, struct args *a)
{
	static const struct option lo[] = {
		{ "config", 1, 0, O_CONFIG },	{ "data-dir", 1, 0, O_DATA },
		{ "port", 1, 0, O_PORT },	{ "bind", 1, 0, O_BIND },
		{ "unix", 1, 0, O_UNIX },	{ "set", 1, 0, O_SET },
		{ "threads", 1, 0, O_THREADS }, { "durability", 1, 0, O_DUR },
		{ "requirepass", 1, 0, O_PASS }, { "maxclients", 1, 0, O_MAXCL },
		{ "max-value", 1, 0, O_MAXVAL }, { "client-timeout", 1, 0, O_TIMEOUT },
		{ "log-level", 1, 0, O_LOG },	{ "check-config", 0, 0, O_CHECK },
		{ "help", 0, 0, O_HELP },	{ "local", 1, 0, O_LOCAL },
		{ "local-uid", 1, 0, O_LOCAL_UID }, { "acl", 1, 0, O_ACL },
		{ "metrics-port", 1, 0, O_MPORT }, { "metrics-bind", 1, 0, O_MBIND },
		{ "metrics-tenant-names", 0, 0, O_MNAMES },
		{ "tls-cert", 1, 0, O_TLS_CERT }, { "tls-key", 1, 0, O_TLS_KEY },
		{ "serve-peers", 0, 0, O_SERVE_PEERS }, { "version", 0, 0, O_VERSION },
		{ "owner-pid", 1, 0, O_OWNER },
		{ "warm-start", 1, 0, O_WARM }, { "warm-bandwidth", 1, 0, O_WARM_BW },
		{ "hot-list", 1, 0, O_HOT },
		{ 0, 0, 0, 0 }
	};
	int opt;
	long v;

	while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (opt) {
		case O_CONFIG: a->config = optarg; break;
		case O_DATA: a->data_dir = optarg; break;
		case O_PORT:
			if (parse_long("--port", optarg, 0, 65535, &v))
				return 2;
			d->o.port = (int)v;
			break;
		case O_BIND: d->o.bind = optarg; break;
		case O_UNIX: d->o.unix_path = optarg; break;
		case O_LOCAL: a->lopt.path = optarg; break;
		case O_LOCAL_UID:
			if (a->lopt.n_uids == 64 || parse_long("--local-uid", optarg, 0, INT32_MAX, &v))
				return 2;
			a->local_uids[a->lopt.n_uids++] = (uint32_t)v;
			break;
		case O_SET:
			if (a->n_sets == 64 || !strchr(optarg, '=')) {
				fprintf(stderr, "kvtierd: --set %s: expected KEY=VALUE (at most 64)\n",
					optarg);
				return 2;
			}
			a->sets[a->n_sets++] = optarg;
			break;
		case O_THREADS:
			if (parse_long("--threads", optarg, 1, 256, &v))
				return 2;
			d->o.threads = (int)v;
			break;
		case O_DUR:
			if (!strcmp(optarg, "cached"))
				d->durability = KVT_DUR_CACHED;
			else if (!strcmp(optarg, "crash-safe"))
				d->durability = KVT_DUR_CRASH_SAFE;
			else if (!strcmp(optarg, "power-safe"))
				d->durability = KVT_DUR_POWER_SAFE;
			else {
				fprintf(stderr, "kvtierd: --durability %s: expected cached, "
						"crash-safe or power-safe\n", optarg);
				return 2;
			}
			break;
		case O_PASS: d->o.requirepass = optarg; break;
		case O_SERVE_PEERS: d->serve_peers = 1; break;
		case O_MAXCL:
			if (parse_long("--maxclients", optarg, 1, 1000000, &v))
				return 2;
			d->o.maxclients = v;
			break;
		case O_MAXVAL: {
			uint64_t s;
			if (kvt_parse_size(optarg, 1, &s) || s < 1 || s > (4ull << 30)) {
				fprintf(stderr, "kvtierd: --max-value %s: expected a size of 1 B to "
						"4 GiB\n", optarg);
				return 2;
			}
			d->o.max_value = s;
			break;
		}
		case O_TIMEOUT:
			if (parse_long("--client-timeout", optarg, 0, 86400, &v))
				return 2;
			d->o.client_timeout_s = (int)v;
			break;
		case O_LOG:
			if (kvtd_log_parse(optarg) < 0) {
				fprintf(stderr, "kvtierd: --log-level %s: expected error, warn, info "
						"or debug\n", optarg);
				return 2;
			}
			kvtd_log_set(kvtd_log_parse(optarg));
			break;
		case O_CHECK: a->check = 1; break;
		case O_ACL: a->ops.acl = optarg; break;
		case O_MPORT:
			if (parse_long("--metrics-port", optarg, 0, 65535, &v))
				return 2;
			a->ops.metrics_port = (int)v;
			break;
		case O_MBIND: a->ops.metrics_bind = optarg; break;
		case O_MNAMES: a->ops.metrics_names = 1; break;
		case O_TLS_CERT: a->ops.tls_cert = optarg; break;
		case O_TLS_KEY: a->ops.tls_key = optarg; break;
		case O_OWNER:
			if (parse_long("--owner-pid", optarg, 1, INT32_MAX, &v))
				return 2;
			a->owner = (pid_t)v;
			break;
		case O_WARM:
		case O_WARM_BW:
			if (kvt_parse_size(optarg, 1, opt == O_WARM ? &d->warm_bytes : &d->warm_bps)) {
				fprintf(stderr, "kvtierd: %s %s: %s\n",
					opt == O_WARM ? "--warm-start" : "--warm-bandwidth", optarg,
					kvt_errmsg());
				return 2;
			}
			break;
		case O_HOT: d->hot_path = optarg; break;
		case O_HELP: case 'h': usage(stdout); return 0;
		case O_VERSION:
			/* The library loaded may not be the one built against. */
			printf("kvtierd %s (libkvtier %s)\n", KVT_VERSION_STRING, kvt_version());
			return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvtierd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	return -1;
}

/* The configuration the options make, checked: -1 to go on with *out, or
 * the exit code (--check-config's included). */
static int configure(struct kvtd *d, struct args *a, kvt_config **out)
{
	static char hot_default[4096];
	if (!d->hot_path && a->data_dir &&
	    snprintf(hot_default, sizeof(hot_default), "%s/hot.keys", a->data_dir) <
		    (int)sizeof(hot_default))
		d->hot_path = hot_default;
	if (d->warm_bytes && !d->hot_path) {
		fprintf(stderr, "kvtierd: --warm-start needs a hot list: give --data-dir or "
				"--hot-list\n");
		return 2;
	}
	d->o.max_cmd = d->o.max_value * 2 + (64u << 20);
	d->auth_required = d->o.requirepass != NULL;

	kvt_config *cfg = build_config(a->config, a->data_dir, a->sets, a->n_sets, a->check);
	if (!cfg)
		return 2;
	/* local clients map the DRAM arena: it must be a memfd */
	if (a->lopt.path && kvt_config_set(cfg, "dram_shared", "true")) {
		fprintf(stderr, "kvtierd: --local: %s\n", kvt_errmsg());
		kvt_config_free(cfg);
		return 2;
	}
	/* A SET acknowledged is on disk when there is a disk: kill -9 loses
	 * nothing, and no background copy can outlive a DEL.  Where every tier
	 * is memory (DRAM, peers) a SET is cached, and asking for more is a
	 * configuration every SET would fail on: refused here, not per SET. */
	if (d->durability < 0)
		d->durability = kvt_config_durable(cfg) ? KVT_DUR_CRASH_SAFE : KVT_DUR_CACHED;
	else if (d->durability > KVT_DUR_CACHED && !kvt_config_durable(cfg)) {
		fprintf(stderr, "kvtierd: --durability %s: no tier configured keeps a SET across "
				"a crash (DRAM and peers are memory); add local_disk, shared_fs or "
				"remote_url, or use --durability cached\n",
			d->durability == KVT_DUR_CRASH_SAFE ? "crash-safe" : "power-safe");
		kvt_config_free(cfg);
		return 2;
	}
	if (a->check) {
		kvt_config_free(cfg);
		if (kvtd_ops_check(&a->ops))
			return 2;
		printf("kvtierd: configuration OK\n");
		return 0;
	}
	*out = cfg;
	return -1;

}

/* The store (cfg is consumed) and what kvtierd keeps beside it: the
 * default tenant's namespace, the access list and endpoints, the values
 * rebuilt from the disk tiers.  0, or 1 (logged). */
static int open_store(struct kvtd *d, struct args *a, kvt_config *cfg)
{
	int err = 0;

	d->st = kvt_store_open(cfg, &err);
	kvt_config_free(cfg);
	if (!d->st) {
		kvtd_log(KVTD_LOG_ERROR, "cannot open the store: %s (%s)", kvt_strerror(err),
			 kvt_errmsg());
		return 1;
	}
	kvt_ns_desc nd = { .model = "kvtierd",
			   .layout = { .num_layers = 1, .num_kv_heads = 1, .head_dim = 1,
				       .dtype = KVT_DTYPE_INT8, .kv_planes = 1, .block_size = 1,
				       .chunk_tokens = 1 },
			   .tp_size = 1, .pp_size = 1 };
	if ((err = kvt_ns_init(d->st, &nd, &default_tenant.ns))) {
		kvtd_log(KVTD_LOG_ERROR, "default namespace: %s", kvt_errmsg());
		return 1;
	}
	d->default_tenant = &default_tenant;
	if (kvtd_ops_start(d, &a->ops, &nd))
		return 1;
	/* SETs received in place may hold an eighth of the first tier. */
	kvt_tier_stats t0;
	struct vals_opts vo = { .durability = d->durability };
	if (kvt_store_stats(d->st, 0, &t0) == 0)
		vo.reserve_max = t0.capacity_bytes / 8;
	if ((err = vals_open(d->st, &vo, &d->vals))) {
		kvtd_log(KVTD_LOG_ERROR, "out of memory");
		return 1;
	}
	const struct kvtd_tenant *tl[VALS_MAX_TENANTS];
	long found = vals_rebuild(d->vals, tl, kvtd_ops_tenants(d, tl, VALS_MAX_TENANTS));
	if (found < 0)
		kvtd_log(KVTD_LOG_ERROR, "rebuild failed: %s", kvt_strerror((int)found));
	else if (found > 0)
		kvtd_log(KVTD_LOG_INFO, "%ld keys found on the disk tiers", found);
	for (int i = 0; i < kvt_store_tiers(d->st); i++) {
		kvt_tier_stats s;
		char c1[32], c2[32];
		if (kvt_store_stats(d->st, i, &s) == 0)
			kvtd_log(KVTD_LOG_INFO, "tier %d: %s, %s of %s used, %llu objects", i,
				 s.name, kvt_fmt_size(s.used_bytes, c1, sizeof(c1)),
				 kvt_fmt_size(s.capacity_bytes, c2, sizeof(c2)),
				 (unsigned long long)s.chunks);
	}

	return 0;
}

/* Listen for clients (RESP, the local socket): 0, or 1 (logged). */
static int start_serving(struct kvtd *d, struct args *a, kvt_local_server **local)
{
	if (fd_limit(d))
		return 1;
	if (!(d->guard = kvtd_guard_new())) {
		kvtd_log(KVTD_LOG_ERROR, "out of memory");
		return 1;
	}
	d->nw = d->o.threads;
	d->start_ms = kvtd_mono_ms();
	d->config_path = a->config;
	if (kvtd_listen(d) || kvtd_start(d) || kvtd_ops_serve(d, &a->ops))
		return 1;
	if (d->auth == kvtd_tenants_auth && d->auth_ctx) { /* a local uid's tenant: its ACL user's */
		a->lopt.tenant_of = kvtd_tenants_of_uid;
		a->lopt.tenant_arg = d->auth_ctx;
	}
	if (a->lopt.path && kvt_local_serve(d->st, &a->lopt, local)) {
		kvtd_log(KVTD_LOG_ERROR, "--local: %s", kvt_errmsg());
		return 1;
	}
	return 0;
}

/* Until SIGTERM, SIGINT or the owner's end: SIGHUP reloads, the values
 * are swept, the hot list saved now and then. */
static void run(struct kvtd *d, struct args *a, const sigset_t *sigs, int owner_fd,
		int64_t *hot_saved_ms)
{
	for (;;) {
		struct timespec tick = { 0, 100 * 1000 * 1000 };
		int sig = sigtimedwait(sigs, NULL, &tick);
		if (sig == SIGTERM || sig == SIGINT)
			break;
		if (a->owner && owner_gone(a->owner, owner_fd)) {
			kvtd_log(KVTD_LOG_INFO, "owner process %ld ended", (long)a->owner);
			break;
		}
		if (sig == SIGHUP) {
			kvtd_ops_reload(d);
			reload_policies(d, a->config, a->data_dir, a->sets, a->n_sets, a->lopt.path != NULL);
			continue;
		}
		vals_sweep(d->vals, 256);
		if (d->hot_path && kvtd_mono_ms() - *hot_saved_ms >= HOT_SAVE_MS &&
		    atomic_load(&d->ready)) {
			hot_save(d);
			*hot_saved_ms = kvtd_mono_ms();
		}
	}
}

int main(int argc, char **argv)
{
	struct kvtd d = { .o = { .bind = "127.0.0.1", .port = 6379, .threads = 4,
				 .maxclients = 10000, .max_value = 512ull << 20,
				 .client_timeout_s = 60 },
			  .durability = -1, .auth = auth_requirepass, .dispatch = kvtd_dispatch };
	struct args a = { .ops = { .metrics_port = -1 } };
	kvt_local_server *local = NULL;
	kvt_config *cfg = NULL;
	int64_t hot_saved_ms;
	int rc, owner_fd = -1;

	a.lopt.uids = a.local_uids;
	if ((rc = parse_args(argc, argv, &d, &a)) >= 0 || (rc = configure(&d, &a, &cfg)) >= 0)
		return rc;
	/* Values up to 32 MiB are received into heap buffers that stay with
	 * the process once freed: the next value of that size reuses pages
	 * already faulted in, rather than mapping and zeroing fresh ones
	 * per SET (glibc's default for blocks over 128 KiB).  Larger ones
	 * are mapped, and go back to the system when freed. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);

	/* Signals are taken by the main thread alone (sigtimedwait); a
	 * client that goes away mid-write is an EPIPE, not a SIGPIPE. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (open_store(&d, &a, cfg) || start_serving(&d, &a, &local))
		return 1;
	pthread_t warm_thread;
	int warming = 0;
	/* The first save a minute from now: a node started without a warm
	 * start must not overwrite the last run's list with its empty tier. */
	hot_saved_ms = kvtd_mono_ms(); /* a clock step must not move a save */
	if (d.warm_bytes) {
		warming = pthread_create(&warm_thread, NULL, warm_main, &d) == 0;
		if (!warming)
			kvtd_log(KVTD_LOG_WARN, "warm start: cannot start its thread: starting cold");
	}
	if (!warming)
		atomic_store(&d.ready, 1);
	printf("kvtierd: listening on %s:%d", d.o.bind, d.port);
	if (d.o.unix_path)
		printf(" and %s", d.o.unix_path);
	if (a.lopt.path)
		printf(", local clients on %s", a.lopt.path);
	printf("\n");
	fflush(stdout);
	kvtd_log(KVTD_LOG_INFO, "ready: %d threads, durability %s%s", d.nw,
		 d.durability == KVT_DUR_CACHED ? "cached"
		 : d.durability == KVT_DUR_CRASH_SAFE ? "crash-safe" : "power-safe",
		 d.auth_required ? ", AUTH required" : "");

	if (a.owner && (owner_fd = owner_open(a.owner)) == -2) {
		kvtd_log(KVTD_LOG_ERROR, "--owner-pid %ld: no such process", (long)a.owner);
		return 1;
	}
	run(&d, &a, &sigs, owner_fd, &hot_saved_ms);
	kvtd_log(KVTD_LOG_INFO, "shutting down: finishing requests in flight");
	kvtd_stop(&d, 5000);
	kvtd_guard_free(d.guard);
	kvt_local_stop(local);
	if (kvt_store_flush(d.st, 60000))
		kvtd_log(KVTD_LOG_WARN, "background copies still running after 60 s");
	if (warming) {
		__atomic_store_n(&d.warm.cancel, 1, __ATOMIC_RELAXED);
		pthread_join(warm_thread, NULL);
	}
	if (d.hot_path && atomic_load(&d.ready))
		hot_save(&d);
	kvtd_ops_stop(&d);
	vals_close(d.vals);
	kvt_store_close(d.st);
	kvtd_log(KVTD_LOG_INFO, "store closed; bye");
	return 0;
}
