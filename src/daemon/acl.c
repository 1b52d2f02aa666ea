/*
 * acl.c — kvtierd's access list: the parser of the ACL file and the
 * password check (acl.h has the format).
 *
 * The file is outside bytes (an operator's, or a tool's); every line is
 * checked whole and the first fault is named with its line, so a reload
 * with a typo keeps the old list rather than half of a new one.  The
 * parser is fuzzed (fuzz/fuzz_acl.c).
 */
#include "daemon/acl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "kvtier.h"
#include "kvtier/units.h"

#define ACL_FILE_MAX (4u << 20)
#define ACL_MAX_WORDS 16

struct acl_line {
	const char *name;
	int no;
	char *err;
	size_t errlen;
};

static int acl_fail(const struct acl_line *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int acl_fail(const struct acl_line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!l->err || !l->errlen)
		return -1;
	n = snprintf(l->err, l->errlen, "%s:%d: ", l->name, l->no);
	if (n < 0 || (size_t)n >= l->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Names are what a log line and a metric label can carry as they are. */
static int name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= KVTD_NAME_MAX)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' ||
		      *s == '.' || *s == '@'))
			return 0;
	return 1;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_sha256(const char *s, uint8_t out[32])
{
	if (strncmp(s, "sha256:", 7) || strlen(s + 7) != 64)
		return -1;
	s += 7;
	for (int i = 0; i < 32; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static struct kvtd_user *user_find(kvtd_acl *a, const char *name)
{
	for (int i = 0; i < a->n_users; i++)
		if (!strcmp(a->users[i].name, name))
			return &a->users[i];
	return NULL;
}

static int parse_user(kvtd_acl *a, char **w, int n, const struct acl_line *l)
{
	struct kvtd_user *u;

	if (n < 5 || strcmp(w[2], "tenant"))
		return acl_fail(l, "expected: user <name> tenant <tenant> [+admin] "
				"(nopass | sha256:<hex>)...");
	if (!name_ok(w[1]))
		return acl_fail(l, "user name \"%.64s\": 1..%d of A-Z a-z 0-9 _ - . @",
				w[1], KVTD_NAME_MAX - 1);
	if (!name_ok(w[3]))
		return acl_fail(l, "user %s: tenant name \"%.64s\": 1..%d of A-Z a-z 0-9 _ - . @",
				w[1], w[3], KVTD_NAME_MAX - 1);
	if (user_find(a, w[1]))
		return acl_fail(l, "user %s defined twice", w[1]);
	if (a->n_users == KVTD_ACL_MAX_USERS)
		return acl_fail(l, "more than %d users", KVTD_ACL_MAX_USERS);
	u = &a->users[a->n_users];
	memset(u, 0, sizeof(*u));
	strcpy(u->name, w[1]);
	strcpy(u->tenant, w[3]);
	for (int i = 4; i < n; i++) {
		if (!strcmp(w[i], "nopass")) {
			u->nopass = 1;
		} else if (!strcmp(w[i], "+admin")) {
			u->admin = 1;
		} else if (!strncmp(w[i], "sha256:", 7)) {
			if (u->n_pass == KVTD_PASS_MAX)
				return acl_fail(l, "user %s: more than %d passwords", u->name,
						KVTD_PASS_MAX);
			if (parse_sha256(w[i], u->pass_sha256[u->n_pass]))
				return acl_fail(l, "user %s: \"%.80s\": expected sha256:<64 hex digits>",
						u->name, w[i]);
			u->n_pass++;
		} else {
			return acl_fail(l, "user %s: \"%.80s\": expected +admin, nopass or "
					"sha256:<64 hex digits>", u->name, w[i]);
		}
	}
	if (u->nopass && u->n_pass)
		return acl_fail(l, "user %s: nopass and passwords both given", u->name);
	if (!u->nopass && !u->n_pass)
		return acl_fail(l, "user %s: no password: give nopass or sha256:<64 hex digits>",
				u->name);
	a->n_users++;
	return 0;
}

static int parse_size_word(const char *w, uint64_t *out)
{
	if (!strcmp(w, "none")) {
		*out = 0;
		return 0;
	}
	return kvt_parse_size(w, 1, out) == 0 ? 0 : -1;
}

static int parse_quota(kvtd_acl *a, char **w, int n, const struct acl_line *l)
{
	struct kvtd_quota *q;

	if ((n != 4 && n != 6) || (n == 6 && strcmp(w[4], "reserve")))
		return acl_fail(l, "expected: quota <tenant> <tier> (<size> | none) [reserve <size>]");
	if (!name_ok(w[1]) || !name_ok(w[2]))
		return acl_fail(l, "quota: tenant and tier are names of 1..%d of A-Z a-z 0-9 _ - . @",
				KVTD_NAME_MAX - 1);
	for (int i = 0; i < a->n_quotas; i++)
		if (!strcmp(a->quotas[i].tenant, w[1]) && !strcmp(a->quotas[i].tier, w[2]))
			return acl_fail(l, "quota of tenant %s in tier %s given twice", w[1], w[2]);
	if (a->n_quotas == KVTD_ACL_MAX_QUOTAS)
		return acl_fail(l, "more than %d quotas", KVTD_ACL_MAX_QUOTAS);
	q = &a->quotas[a->n_quotas];
	memset(q, 0, sizeof(*q));
	strcpy(q->tenant, w[1]);
	strcpy(q->tier, w[2]);
	if (parse_size_word(w[3], &q->quota))
		return acl_fail(l, "quota %s %s: \"%.40s\": expected a size (8GiB, 512MiB) or none",
				w[1], w[2], w[3]);
	if (n == 6 && (parse_size_word(w[5], &q->reserve)))
		return acl_fail(l, "quota %s %s: reserve \"%.40s\": expected a size (1GiB)",
				w[1], w[2], w[5]);
	if (q->quota && q->reserve > q->quota)
		return acl_fail(l, "quota %s %s: the reservation is above the quota", w[1], w[2]);
	a->n_quotas++;
	return 0;
}

static int parse_shared(kvtd_acl *a, char **w, int n, const struct acl_line *l)
{
	struct kvtd_shared *s;

	if (n != 4 || strcmp(w[2], "tenant"))
		return acl_fail(l, "expected: shared <key prefix> tenant <tenant>");
	if (strlen(w[1]) >= KVTD_PREFIX_MAX)
		return acl_fail(l, "shared prefix longer than %d bytes", KVTD_PREFIX_MAX - 1);
	if (!name_ok(w[3]))
		return acl_fail(l, "shared: tenant name \"%.64s\": 1..%d of A-Z a-z 0-9 _ - . @",
				w[3], KVTD_NAME_MAX - 1);
	for (int i = 0; i < a->n_shared; i++)
		if (!strcmp(a->shared[i].prefix, w[1]))
			return acl_fail(l, "shared prefix \"%s\" given twice", w[1]);
	if (a->n_shared == KVTD_ACL_MAX_SHARED)
		return acl_fail(l, "more than %d shared prefixes", KVTD_ACL_MAX_SHARED);
	s = &a->shared[a->n_shared++];
	strcpy(s->prefix, w[1]);
	s->prefix_len = strlen(w[1]);
	strcpy(s->tenant, w[3]);
	return 0;
}

/* Split a line (NUL-terminated, writable) at spaces and tabs. */
static int split(char *s, char **w, int max)
{
	int n = 0;

	for (;;) {
		while (*s == ' ' || *s == '\t' || *s == '\r')
			*s++ = '\0';
		if (!*s)
			return n;
		if (n == max)
			return -1;
		w[n++] = s;
		while (*s && *s != ' ' && *s != '\t' && *s != '\r')
			s++;
	}
}

int kvtd_acl_parse(const char *text, size_t len, const char *name,
		   kvtd_acl **out, char *err, size_t errlen)
{
	struct acl_line l = { name ? name : "acl", 0, err, errlen };
	kvtd_acl *a;
	char *buf;
	size_t pos = 0;
	int rc = 0;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (len > ACL_FILE_MAX)
		return acl_fail(&l, "larger than %u bytes", ACL_FILE_MAX);
	if (memchr(text, '\0', len))
		return acl_fail(&l, "a NUL byte: not a text file");
	a = calloc(1, sizeof(*a));
	buf = malloc(len + 1);
	if (!a || !buf) {
		free(a);
		free(buf);
		return acl_fail(&l, "out of memory");
	}
	memcpy(buf, text, len);
	buf[len] = '\0';
	while (pos <= len && rc == 0) {
		char *line = buf + pos, *nl = strchr(line, '\n'), *w[ACL_MAX_WORDS];
		int n;

		if (nl)
			*nl = '\0';
		pos += strlen(line) + 1;
		l.no++;
		if ((n = split(line, w, ACL_MAX_WORDS)) < 0)
			rc = acl_fail(&l, "more than %d words", ACL_MAX_WORDS);
		else if (n == 0 || w[0][0] == '#')
			continue;
		else if (!strcmp(w[0], "user"))
			rc = parse_user(a, w, n, &l);
		else if (!strcmp(w[0], "quota"))
			rc = parse_quota(a, w, n, &l);
		else if (!strcmp(w[0], "shared"))
			rc = parse_shared(a, w, n, &l);
		else
			rc = acl_fail(&l, "\"%.40s\": expected user, quota or shared", w[0]);
		if (!nl)
			break;
	}
	free(buf);
	if (rc) {
		free(a);
		return rc;
	}
	*out = a;
	return 0;
}

int kvtd_acl_load(const char *path, kvtd_acl **out, char *err, size_t errlen)
{
	struct acl_line l = { path, 0, err, errlen };
	struct stat sb;
	char *buf;
	ssize_t got;
	size_t have = 0;
	int fd, rc;

	*out = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &sb) || sb.st_size > (off_t)ACL_FILE_MAX) {
		close(fd);
		return acl_fail(&l, "cannot be read, or larger than %u bytes", ACL_FILE_MAX);
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		close(fd);
		return acl_fail(&l, "out of memory");
	}
	while (have < (size_t)sb.st_size &&
	       (got = read(fd, buf + have, (size_t)sb.st_size - have)) > 0)
		have += (size_t)got;
	close(fd);
	rc = kvtd_acl_parse(buf, have, path, out, err, errlen);
	OPENSSL_cleanse(buf, have);
	free(buf);
	return rc;
}

void kvtd_acl_free(kvtd_acl *acl)
{
	free(acl);
}

const struct kvtd_user *kvtd_acl_auth(const kvtd_acl *acl, const char *user,
				      size_t user_len, const char *pass,
				      size_t pass_len)
{
	static const uint8_t decoy[32] = { 1 };
	const struct kvtd_user *found = NULL;
	uint8_t h[32];
	int ok = 0;

	if (!user) {
		user = "default";
		user_len = 7;
	}
	SHA256((const unsigned char *)pass, pass_len, h);
	/* Every user's name is compared and every hash of the one found (or
	 * of a decoy) is compared whole, so the time does not depend on
	 * whether the name exists or where the first byte differs. */
	for (int i = 0; i < acl->n_users; i++) {
		const struct kvtd_user *u = &acl->users[i];
		int same = strlen(u->name) == user_len &&
			   CRYPTO_memcmp(u->name, user, user_len) == 0;
		if (same)
			found = u;
	}
	if (found && found->nopass)
		return found;
	for (int i = 0; i < KVTD_PASS_MAX; i++) {
		const uint8_t *ref = found && i < found->n_pass ? found->pass_sha256[i] : decoy;
		ok |= CRYPTO_memcmp(ref, h, 32) == 0 && found && i < found->n_pass;
	}
	OPENSSL_cleanse(h, sizeof(h));
	return ok ? found : NULL;
}

const struct kvtd_user *kvtd_acl_initial(const kvtd_acl *acl)
{
	for (int i = 0; i < acl->n_users; i++)
		if (!strcmp(acl->users[i].name, "default"))
			return acl->users[i].nopass ? &acl->users[i] : NULL;
	return NULL;
}

const struct kvtd_shared *kvtd_acl_shared(const kvtd_acl *acl, const char *key,
					  size_t key_len)
{
	const struct kvtd_shared *best = NULL;

	for (int i = 0; i < acl->n_shared; i++) {
		const struct kvtd_shared *s = &acl->shared[i];
		if (s->prefix_len <= key_len && !memcmp(s->prefix, key, s->prefix_len) &&
		    (!best || s->prefix_len > best->prefix_len))
			best = s;
	}
	return best;
}
