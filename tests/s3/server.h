/*
 * server.h — start and stop server.js (this directory) from C: the one
 * start-up the S3 tests (tests/test_s3_server.h) and kvtier-bench s3 share.
 *
 * The caller names the script: the tests run it where it lies in the
 * repository, the benchmark from the copy the build puts next to it.  The
 * server prints "PORT <proxy port> <s3rver port>" once both listen and exits
 * when its stdin closes, so a parent that dies takes it along.
 *
 * Every function is static inline: a program including this header and
 * using only part of it still builds with -Werror.
 */
#ifndef KVT_TESTS_S3_SERVER_H
#define KVT_TESTS_S3_SERVER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Credentials server.js checks SigV4 signatures against. */
#define S3SRV_ACCESS_KEY "kvtier-test"
#define S3SRV_SECRET_KEY "kvtier-test-secret"

typedef struct s3srv {
	pid_t pid;        /* 0: not running */
	int stdin_fd;     /* the server exits when this closes */
	FILE *out;        /* its stdout, kept open until it is stopped */
	int proxy_port;   /* the fault proxy (faultproxy.js) in front of s3rver */
	int s3rver_port;  /* s3rver itself, for clients that want no proxy */
} s3srv;

/* A server not started yet (s3srv_stop on it does nothing). */
#define S3SRV_NONE { .pid = 0, .stdin_fd = -1, .out = NULL }

/* Stop it (closing its stdin, then SIGTERM) and reap it; safe when it was
 * never started or did not start. */
static inline void s3srv_stop(s3srv *s)
{
	if (s->stdin_fd >= 0) {
		close(s->stdin_fd);
		s->stdin_fd = -1;
	}
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
	if (s->out) {
		fclose(s->out);
		s->out = NULL;
	}
}

/* `node script dir bucket...` (buckets NULL-terminated, at most 6), waiting
 * for its PORT line.  0, or -1 with the reason in why[cap] (and nothing
 * left running). */
static inline int s3srv_start(s3srv *s, const char *script, const char *dir,
			      const char *const *buckets, char *why, size_t cap)
{
	const char *argv[10];
	char line[128];
	int in[2], outp[2], n = 0;
	FILE *f;

	memset(s, 0, sizeof(*s));
	s->stdin_fd = -1;
	if (access(script, R_OK)) {
		snprintf(why, cap, "%s not found", script);
		return -1;
	}
	argv[n++] = "node";
	argv[n++] = script;
	argv[n++] = dir;
	while (*buckets && n < 9)
		argv[n++] = *buckets++;
	argv[n] = NULL;
	if (pipe(in))
		goto pipes;
	if (pipe(outp)) {
		close(in[0]);
		close(in[1]);
		goto pipes;
	}
	s->pid = fork();
	if (s->pid < 0) {
		s->pid = 0;
		close(in[0]);
		close(in[1]);
		close(outp[0]);
		close(outp[1]);
		snprintf(why, cap, "fork failed");
		return -1;
	}
	if (s->pid == 0) {
		dup2(in[0], 0);
		dup2(outp[1], 1);
		close(in[1]);
		close(outp[0]);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(outp[1]);
	s->stdin_fd = in[1];
	f = fdopen(outp[0], "r");
	if (!f)
		close(outp[0]);
	s->out = f;
	if (!f || !fgets(line, sizeof(line), f) ||
	    sscanf(line, "PORT %d %d", &s->proxy_port, &s->s3rver_port) != 2) {
		snprintf(why, cap, "node %s did not start (no PORT line)", script);
		s3srv_stop(s);
		return -1;
	}
	return 0;
pipes:
	snprintf(why, cap, "pipe failed");
	return -1;
}

#endif
