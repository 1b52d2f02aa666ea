/*
 * common.c — helpers the benchmarks share (bench.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <time.h>

#include <jansson.h>
#include <linux/fs.h>

#include "bench.h"
#include "cli/cli.h"
#include "common/err.h"

#define HUGE_ALIGN ((size_t)2 << 20)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct summary bench_summarize(const double *v, int n)
{
	double s[BENCH_MAX_ROUNDS];
	struct summary r = { 0, 0, 0 };

	if (n <= 0)
		return r;
	if (n > BENCH_MAX_ROUNDS)
		n = BENCH_MAX_ROUNDS;
	memcpy(s, v, sizeof(*s) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	r.min = s[0];
	r.max = s[n - 1];
	r.median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	return r;
}

const char *bench_fmt_summary(struct summary s, char *buf, size_t cap)
{
	if (s.median >= 100)
		snprintf(buf, cap, "%.0f [%.0f..%.0f]", s.median, s.min, s.max);
	else if (s.median >= 1)
		snprintf(buf, cap, "%.2f [%.2f..%.2f]", s.median, s.min, s.max);
	else
		snprintf(buf, cap, "%.3f [%.3f..%.3f]", s.median, s.min, s.max);
	return buf;
}

void bench_json_summary(const char *name, struct summary s)
{
	printf("\"%s\":{\"median\":%.6g,\"min\":%.6g,\"max\":%.6g}", name, s.median,
	       s.min, s.max);
}

void bench_json_str(const char *name, const char *value)
{
	json_t *s = json_string(value);
	char *txt = NULL;

	if (!s) {
		/* Not UTF-8 (a path may be any bytes): what is not ASCII
		 * prints as '?' rather than the field going missing. */
		char *a = strdup(value);

		for (char *p = a; p && *p; p++)
			if ((unsigned char)*p >= 0x80)
				*p = '?';
		s = a ? json_string(a) : NULL;
		free(a);
	}
	if (s)
		txt = json_dumps(s, JSON_ENCODE_ANY);
	printf("\"%s\":%s", name, txt ? txt : "null");
	free(txt);
	json_decref(s);
}

int bench_fail(const char *cmd, const char *what, int rc)
{
	const char *d = kvt_errmsg();

	fprintf(stderr, "kvtier-bench %s: %s: %s%s%s%s\n", cmd, what, kvt_strerror(rc),
		*d ? " (" : "", d, *d ? ")" : "");
	return 1;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

void bench_chunk_key(kvt_key *k, uint32_t tag, uint8_t kind, uint64_t seq,
		     const char magic[8])
{
	/* Real keys are hashes: the first bytes are uniformly distributed,
	 * and indexes may lean on that.  Make synthetic ones alike. */
	uint64_t mix = splitmix64(((uint64_t)tag << 40) ^ ((uint64_t)kind << 32) ^ seq);

	memset(k, 0, sizeof(*k));
	memcpy(k->b, &mix, sizeof(mix));
	memcpy(k->b + 8, &seq, sizeof(seq));
	memcpy(k->b + 16, &tag, sizeof(tag));
	k->b[20] = kind;
	memcpy(k->b + 24, magic, 8);
}

int bench_chunk_desc(const char *cmd, const char *preset, kvt_ns_desc *d)
{
	const cli_model *m = cli_model_find(preset);

	if (!m) {
		fprintf(stderr, "kvtier-bench %s: model preset %s missing\n", cmd, preset);
		return 1;
	}
	kvt_model_preset_desc(m, d);
	d->layout.block_size = 16;
	d->layout.chunk_tokens = 256;
	d->tp_size = 1;
	d->pp_size = 1;
	d->hash_scheme = KVT_HASH_SHA256;
	return 0;
}

uint8_t *bench_buffer(size_t bytes)
{
	size_t len = (bytes + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
	void *p = NULL;

	if (posix_memalign(&p, HUGE_ALIGN, len))
		return NULL;
#ifdef MADV_HUGEPAGE
	(void)madvise(p, len, MADV_HUGEPAGE); /* advice: refusal is fine */
#endif
	memset(p, 0, len);
	return p;
}

int bench_path_join(char *out, size_t cap, const char *a, const char *b)
{
	int n = snprintf(out, cap, "%s/%s", a, b);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int bench_scratch_dir(const char *cmd, const char *parent, const char *name, char *out,
		      size_t cap)
{
	int n = snprintf(out, cap, "%s/kvtier-bench-%s.XXXXXX", parent, name);

	if (n < 0 || (size_t)n >= cap) {
		fprintf(stderr, "kvtier-bench %s: --dir path too long\n", cmd);
		return 2;
	}
	if (!mkdtemp(out)) {
		fprintf(stderr, "kvtier-bench %s: cannot create a directory under %s: %s\n",
			cmd, parent, strerror(errno));
		return 1;
	}
	return 0;
}

/* Why a benchmark's scratch directory may be marked FS_TOPDIR_FL (chattr
 * +T).  ext4 without a journal (the test machines' root) avoids handing out
 * an inode freed within the last minute (six, while its inode table block
 * is dirty): a new file or directory scans the free inodes of its block
 * group one by one, checking each one's deletion time, and takes a recent
 * one only when nothing else is free.  Where tens of thousands of files
 * were just removed (the previous configuration's store, a previous run's)
 * every create pays that scan: it was nearly half of the kernel time of
 * `hierarchy`'s trace replay.  ext4 spreads the subdirectories of a "top"
 * directory over block groups chosen from their names, so a tree made
 * under one with a fresh random name starts where nothing was recently
 * freed.  A hint: refused, or another file system, and nothing changes. */
void bench_spread_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fl = 0;

	if (fd < 0)
		return;
	if (ioctl(fd, FS_IOC_GETFLAGS, &fl) == 0 && !(fl & FS_TOPDIR_FL)) {
		fl |= FS_TOPDIR_FL;
		(void)ioctl(fd, FS_IOC_SETFLAGS, &fl);
	}
	close(fd);
}

int bench_beside_exe(const char *name, char *out, size_t cap)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return -1;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	n = snprintf(out, cap, "%s/%s", exe, name);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int bench_data_path(const char *rel, char *out, size_t cap)
{
	char name[1024];

	snprintf(name, sizeof(name), "bench-data/%s", rel);
	if (bench_beside_exe(name, out, cap)) {
		snprintf(out, cap, "%s", name);
		return 0;
	}
	return access(out, R_OK) == 0;
}

int bench_exec_script(const char *cmd, const char *python, const char *script,
		      const char *const *args)
{
	char path[4096], pkg[4096], lib[4096], daemon[4096];
	const char *argv[32] = { python, path };
	size_t n = 2;

	if (!bench_data_path(script, path, sizeof(path)) ||
	    !bench_data_path("python/kvtier/__init__.py", pkg, sizeof(pkg))) {
		fprintf(stderr, "kvtier-bench %s: %s or the kvtier package beside it is missing "
				"(the build copies them into bench-data)\n", cmd, path);
		return 1;
	}
	pkg[strlen(pkg) - strlen("/kvtier/__init__.py")] = '\0';
	if (bench_beside_exe("libkvtier.so", lib, sizeof(lib)) ||
	    bench_beside_exe("kvtierd", daemon, sizeof(daemon)) || access(daemon, X_OK)) {
		fprintf(stderr, "kvtier-bench %s: no kvtierd beside this program\n", cmd);
		return 1;
	}
	for (; args && *args && n < sizeof(argv) / sizeof(argv[0]) - 1; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	setenv("KVTIER_LIB", lib, 1);
	setenv("KVTIER_KVTIERD", daemon, 1);
	setenv("PYTHONPATH", pkg, 1);
	setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
	fflush(NULL);
	execvp(python, (char *const *)argv);
	fprintf(stderr, "kvtier-bench %s: cannot run %s: %s (scripts/install-deps.sh makes the "
			"venv with the engines, or --python PATH)\n", cmd, python, strerror(errno));
	return 1;
}

int bench_script_main(const char *cmd, const char *script, int argc, char **argv,
		      void (*usage)(FILE *f), const char *const *flags)
{
	const char *python = KVT_BENCH_PYTHON;
	const char *args[16];
	int n = 0;

	for (int i = 1; i < argc; i++) {
		const char *const *f = flags;
		size_t len = 0;

		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--python") && i + 1 < argc) {
			python = argv[++i];
			continue;
		}
		for (; f && *f; f++) {
			len = strcspn(*f, "=");
			if (!strncmp(argv[i], *f, len) && argv[i][len] == '\0')
				break;
		}
		if (!f || !*f || n + 2 >= (int)(sizeof(args) / sizeof(args[0])) ||
		    ((*f)[len] == '=' && i + 1 >= argc)) {
			fprintf(stderr, "kvtier-bench %s: unknown option \"%s\"\n\n", cmd, argv[i]);
			usage(stderr);
			return 2;
		}
		args[n++] = argv[i];
		if ((*f)[len] == '=')
			args[n++] = argv[++i];
	}
	args[n] = NULL;
	return bench_exec_script(cmd, python, script, args);
}

int bench_opts_only(const char *cmd, int argc, char **argv, struct bench_opts *o,
		    void (*usage)(FILE *f))
{
	for (int i = 1; i < argc; i++) {
		int c = bench_common_opt(cmd, argc, argv, &i, o, usage);
		if (c == -2)
			return 0;
		if (c < 0)
			return 2;
		if (c == 0 || o->dir)
			return bench_unknown_opt(cmd, argv[i], usage);
	}
	return -1;
}

/* rm -rf, one entry at a time; with keep_dirs, only what is not a
 * directory (the tree stays). */
static int remove_serial(const char *path, int keep_dirs)
{
	struct stat sb;
	DIR *d;
	struct dirent *e;
	int bad = 0;

	if (lstat(path, &sb))
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(sb.st_mode))
		return unlink(path) ? -1 : 0;
	if (!(d = opendir(path)))
		return -1;
	while ((e = readdir(d))) {
		char sub[4096];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (bench_path_join(sub, sizeof(sub), path, e->d_name) ||
		    remove_serial(sub, keep_dirs))
			bad = 1;
	}
	closedir(d);
	if (!keep_dirs && rmdir(path))
		bad = 1;
	return bad ? -1 : 0;
}

/* Why removal runs in parallel.  A file tier's directory is tens of
 * thousands of small files under a two-level fan-out of as many
 * directories, and on a file system mounted with `discard` (as the test
 * machines' root is) every unlink and rmdir waits for the device to discard
 * the freed blocks: serially, 1-7 ms each, a minute or more per directory.
 * Discards of different files do not wait on one another, so the
 * top-level entries are removed by REMOVERS threads at once.  Removal is
 * never timed and runs between measurements, when nothing else uses the
 * disk; by the time it returns every discard has completed. */
#define REMOVERS 16

struct remover {
	const char *path;
	int keep_dirs;
	char (*names)[256];
	size_t n, next;
	int bad;
	pthread_mutex_t mu;
};

static void *remover_run(void *arg)
{
	struct remover *r = arg;

	for (;;) {
		char sub[4096];
		size_t i;
		int bad;

		pthread_mutex_lock(&r->mu);
		i = r->next++;
		pthread_mutex_unlock(&r->mu);
		if (i >= r->n)
			return NULL;
		bad = bench_path_join(sub, sizeof(sub), r->path, r->names[i]) ||
		      remove_serial(sub, r->keep_dirs);
		if (bad) {
			pthread_mutex_lock(&r->mu);
			r->bad = 1;
			pthread_mutex_unlock(&r->mu);
		}
	}
}

static int remove_tree(const char *path, int keep_dirs)
{
	struct remover r = { .path = path, .keep_dirs = keep_dirs,
			     .mu = PTHREAD_MUTEX_INITIALIZER };
	pthread_t th[REMOVERS];
	size_t cap = 0;
	int nth = 0;
	struct stat sb;
	struct dirent *e;
	DIR *d;

	if (lstat(path, &sb))
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(sb.st_mode) || !(d = opendir(path)))
		return remove_serial(path, keep_dirs);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    strlen(e->d_name) >= sizeof(r.names[0]))
			continue;
		if (r.n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			void *p = realloc(r.names, nc * sizeof(r.names[0]));

			if (!p) {
				r.bad = 1;
				break;
			}
			r.names = p;
			cap = nc;
		}
		memcpy(r.names[r.n++], e->d_name, strlen(e->d_name) + 1);
	}
	closedir(d);
	while (r.n > 1 && nth < REMOVERS && (size_t)nth < r.n &&
	       pthread_create(&th[nth], NULL, remover_run, &r) == 0)
		nth++;
	remover_run(&r); /* this thread too; all of it if no thread started */
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	free(r.names);
	/* What a name too long for the list skipped, remove_serial finds. */
	return remove_serial(path, keep_dirs) || r.bad ? -1 : 0;
}

int bench_remove_tree(const char *path)
{
	return remove_tree(path, 0);
}

int bench_empty_tree(const char *path)
{
	return remove_tree(path, 1);
}

void bench_fill_random(uint8_t *p, size_t n, uint64_t x)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
}


int bench_async_run(kvt_store *st, const kvt_ns *ns, uint32_t tag, uint8_t kind,
		    uint64_t seq0, long n, const uint8_t *src, uint8_t *const *bufs,
		    size_t bytes, const char magic[8], double *secs)
{
	kvt_op *ops[BENCH_IN_FLIGHT] = { 0 };
	long next = 0, done = 0;
	int rc = 0;
	double t0 = cli_now();

	while (done < n) {
		while (next < n && next - done < BENCH_IN_FLIGHT) {
			int slot = (int)(next % BENCH_IN_FLIGHT);
			kvt_key k;

			bench_chunk_key(&k, tag, kind, seq0 + (uint64_t)next, magic);
			rc = bufs ? kvt_get_async(st, ns, &k, bufs[slot], bytes, &ops[slot])
				  : kvt_put_async(st, ns, &k, src, bytes,
						  KVT_DUR_CRASH_SAFE, &ops[slot]);
			if (rc) {
				ops[slot] = NULL;
				goto drain;
			}
			next++;
		}
		{
			int slot = (int)(done % BENCH_IN_FLIGHT);

			rc = kvt_op_wait(ops[slot], -1);
			if (rc == 0 && bufs && kvt_op_bytes(ops[slot]) != bytes)
				rc = KVT_ETRUNCATED;
			kvt_op_free(ops[slot]);
			ops[slot] = NULL;
			done++;
			if (rc)
				goto drain;
		}
	}
	*secs = cli_now() - t0;
	return 0;
drain:
	for (int i = 0; i < BENCH_IN_FLIGHT; i++)
		if (ops[i])
			kvt_op_free(ops[i]);
	return rc;
}


int bench_config_set_all(kvt_config *cfg, const char *const kv[][2], size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++)
		rc = kvt_config_set(cfg, kv[i][0], kv[i][1]);
	return rc;
}

int bench_store_open(const char *cmd, const char *what, kvt_config *cfg, int rc,
		     int quiet, kvt_store **st)
{
	*st = NULL;
	if (rc) {
		kvt_config_free(cfg);
		return bench_fail(cmd, "configuration", rc);
	}
	*st = kvt_store_open(cfg, &rc);
	kvt_config_free(cfg);
	if (*st)
		return 0;
	return quiet ? rc : bench_fail(cmd, what, rc ? rc : KVT_ENOMEM);
}

void bench_print_row(const char *fmt, const char *c0, const char *c1, const char *c2,
		     const char *c3, const char *c4, const char *c5, const char *c6)
{
	char line[256];
	size_t n;

	snprintf(line, sizeof(line), fmt, c0, c1, c2, c3, c4, c5, c6);
	n = strlen(line);
	while (n && line[n - 1] == ' ')
		line[--n] = '\0';
	puts(line);
}

int bench_unknown_opt(const char *cmd, const char *arg, void (*usage)(FILE *f))
{
	fprintf(stderr, "kvtier-bench %s: unknown option \"%s\"\n\n", cmd, arg);
	usage(stderr);
	return 2;
}

int bench_common_opt(const char *cmd, int argc, char **argv, int *i, struct bench_opts *o,
		     void (*usage)(FILE *f))
{
	const char *a = argv[*i];

	if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
		usage(stdout);
		return -2;
	} else if (!strcmp(a, "--json")) {
		o->json = 1;
	} else if (!strcmp(a, "--quick")) {
		o->quick = 1;
	} else if (!strcmp(a, "--dir")) {
		if (*i + 1 >= argc) {
			fprintf(stderr, "kvtier-bench %s: --dir needs a value\n", cmd);
			return -1;
		}
		o->dir = argv[++*i];
	} else if (!strncmp(a, "--dir=", 6) && a[6]) {
		o->dir = a + 6;
	} else {
		return 0;
	}
	return 1;
}

extern char **environ;

int bench_which(const char *name, char *out, size_t cap)
{
	const char *path = getenv("PATH");
	char dir[1024];

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");

		if (n && n < sizeof(dir)) {
			memcpy(dir, path, n);
			dir[n] = '\0';
			if (bench_path_join(out, cap, dir, name) == 0 && access(out, X_OK) == 0)
				return 1;
		}
		path += n;
		if (*path == ':')
			path++;
	}
	if (cap)
		out[0] = '\0';
	return 0;
}

pid_t bench_spawn(char *const argv[], const char *out, const char *err)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int rc;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out ? out : "/dev/null",
					 O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (err)
		posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	return rc ? -1 : pid;
}

pid_t bench_kvtierd_local(const char *cmd, const char *sock, const char *log,
			  const char *const *extra)
{
	static const char *const own[] = { "--local", NULL, "--threads", "2", "--set",
					   "max_local_cpu_size=1GiB", "--set",
					   "dram_page_size=2MiB", "--log-level", "warn" };
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char bin[4200];
	char *argv[32];
	size_t n = 0;
	pid_t pid;

	if (bench_beside_exe("kvtierd", bin, sizeof(bin)) || access(bin, X_OK)) {
		fprintf(stderr, "kvtier-bench %s: needs kvtierd beside it (a full build)\n", cmd);
		return -1;
	}
	if (strlen(sock) >= sizeof(a.sun_path))
		return -1;
	argv[n++] = bin;
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		argv[n++] = (char *)(i == 1 ? sock : own[i]);
	for (size_t i = 0; extra && extra[i] && n + 1 < sizeof(argv) / sizeof(argv[0]); i++)
		argv[n++] = (char *)extra[i];
	argv[n] = NULL;
	if ((pid = bench_spawn(argv, log, NULL)) < 0) {
		fprintf(stderr, "kvtier-bench %s: cannot start %s\n", cmd, bin);
		return -1;
	}
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	for (int i = 0; i < 600; i++) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), ok;
		ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(fd);
		if (ok)
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			break;
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	}
	fprintf(stderr, "kvtier-bench %s: kvtierd did not start (see %s)\n", cmd, log);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

int bench_src_dst(const char *cmd, size_t len, uint8_t **src, uint8_t **dst)
{
	*src = bench_buffer(len);
	*dst = bench_buffer(len);
	if (!*src || !*dst) {
		fprintf(stderr, "kvtier-bench %s: out of memory\n", cmd);
		return 1;
	}
	bench_fill_random(*src, len, 42);
	bench_fill_random(*dst, len, 43);
	return 0;
}

int bench_kvtierd_store(const char *cmd, const char *what, const char *sock, kvt_store **st)
{
	char url[120];
	kvt_config *cfg = kvt_config_new();
	int err;

	snprintf(url, sizeof(url), "unix://%s", sock);
	err = cfg ? kvt_config_set(cfg, "daemon", url) : KVT_ENOMEM;
	return bench_store_open(cmd, what, cfg, err, 0, st);
}

int bench_run(char *const argv[], const char *out, const char *err)
{
	pid_t pid = bench_spawn(argv, out, err);
	int st = 0;

	if (pid < 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int bench_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

int bench_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}
