/*
 * fuzz_acl.c — libFuzzer target for kvtierd's ACL file reader
 * (src/daemon/acl.c, format in acl.h and docs/DAEMON_OPS.md).
 *
 * The file is outside bytes: an operator writes it, and SIGHUP rereads it
 * while clients are connected.  Checked for every input:
 *  - the parse either returns a list and no error, or no list and an error
 *    that starts with the file name and a line number within the input;
 *  - a list it returns holds only what the format allows: names of 1..63
 *    of [A-Za-z0-9_.@-], each user with passwords or nopass (not both),
 *    quotas with the reservation under the quota, shared prefixes whose
 *    recorded length is theirs;
 *  - every user of the list authenticates with nothing but its own
 *    passwords: AUTH with its name and a password hashing to something
 *    else fails unless it is nopass, and AUTH never returns another user;
 *  - every shared prefix matches itself, and the match is the longest.
 *
 * acl.c is compiled into this file rather than linked from the library
 * archive, which is built without coverage instrumentation.
 *
 *   ./fuzz_acl -max_len=4096 fuzz/corpus/acl
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/acl.c"

static int name_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= KVTD_NAME_MAX)
		return 0;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.@", *s))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];
	kvtd_acl *a = (kvtd_acl *)1;
	int rc = kvtd_acl_parse((const char *)data, size, "f", &a, err, sizeof(err));

	if (rc) {
		long line = 0;
		size_t lines = 1;
		if (a || strncmp(err, "f:", 2))
			abort();
		for (size_t i = 0; i < size; i++)
			lines += data[i] == '\n';
		line = strtol(err + 2, NULL, 10);
		if (line < 0 || (size_t)line > lines)
			abort();
		return 0;
	}
	if (!a || err[0])
		abort();
	for (int i = 0; i < a->n_users; i++) {
		const struct kvtd_user *u = &a->users[i], *got;
		if (!name_valid(u->name) || !name_valid(u->tenant))
			abort();
		if (u->nopass == (u->n_pass > 0))
			abort();
		for (int j = 0; j < i; j++)
			if (!strcmp(a->users[j].name, u->name))
				abort();
		/* "x" hashes to none of the few stored hashes (a SHA-256
		 * preimage would be a find of its own). */
		got = kvtd_acl_auth(a, u->name, strlen(u->name), "x", 1);
		if (got != (u->nopass ? u : NULL))
			abort();
	}
	for (int i = 0; i < a->n_quotas; i++) {
		const struct kvtd_quota *q = &a->quotas[i];
		if (!name_valid(q->tenant) || !name_valid(q->tier) ||
		    (q->quota && q->reserve > q->quota))
			abort();
	}
	for (int i = 0; i < a->n_shared; i++) {
		const struct kvtd_shared *s = &a->shared[i], *m;
		if (s->prefix_len != strlen(s->prefix) || !name_valid(s->tenant))
			abort();
		m = kvtd_acl_shared(a, s->prefix, s->prefix_len);
		if (!m || m->prefix_len != s->prefix_len)
			abort();
	}
	kvtd_acl_free(a);
	return 0;
}
