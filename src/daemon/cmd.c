/*
 * cmd.c — the commands kvtierd answers, with Redis's replies byte for
 * byte (clients such as LMCache's native one compare them exactly).
 *
 * Every key a command names is looked up in the connection's tenant
 * (server.h): there is no way to name a key of another tenant.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "daemon/guard.h"
#include "daemon/log.h"
#include "daemon/ops.h"
#include "daemon/server.h"

typedef void (*cmd_fn)(struct kvtd_conn *c, struct resp_arg *a, size_t n);

struct cmd {
	const char *name;
	int arity;        /* > 0 exactly, < 0 at least -arity (the name counted) */
	cmd_fn fn;
	int noauth;       /* allowed before AUTH */
	int first, last, step; /* key positions, as COMMAND reports them */
	const char *flags;     /* COMMAND's flags, space-separated */
	const char *group, *summary;
};

static const struct cmd *cmd_find(const char *name, size_t len);

#define ARG_IS(a, s) ((a).len == sizeof(s) - 1 && !strncasecmp((a).p, (s), sizeof(s) - 1))

static const struct kvtd_tenant *ten(struct kvtd_conn *c)
{
	return c->tenant;
}

static struct kvtd *dmn(struct kvtd_conn *c)
{
	return c->w->d;
}

/* The tenant key k is looked up in: a shared namespace when the key is
 * under one of its prefixes (every tenant reads it; kvtd_dispatch lets
 * only its own tenant's users write it), else the connection's. */
static const struct kvtd_tenant *key_ten(struct kvtd_conn *c, const char *k, size_t len)
{
	struct kvtd *d = dmn(c);
	const struct kvtd_tenant *s = d->shared_of ? d->shared_of(d, k, len) : NULL;

	return s ? s : c->tenant;
}

/* A strict decimal integer argument, as Redis parses one. */
static int arg_ll(const struct resp_arg *a, long long *out)
{
	char *end;
	if (a->len == 0 || a->len > 20 || isspace((unsigned char)a->p[0]))
		return -1;
	errno = 0;
	*out = strtoll(a->p, &end, 10);
	return errno || end != a->p + a->len ? -1 : 0;
}

static void not_int(struct kvtd_conn *c)
{
	resp_error(&c->rb, "ERR value is not an integer or out of range");
}

static void bad_expire(struct kvtd_conn *c, const char *cmd)
{
	resp_error(&c->rb, "ERR invalid expire time in '%s' command", cmd);
}

static void store_error(struct kvtd_conn *c, int rc)
{
	if (rc == KVT_EFULL || rc == KVT_ETOOBIG)
		resp_error(&c->rb, "OOM kvtier: %s (%s)", kvt_strerror(rc), kvt_errmsg());
	else
		resp_error(&c->rb, "ERR kvtier: %s (%s)", kvt_strerror(rc), kvt_errmsg());
}

static int key_ok(struct kvtd_conn *c, const struct resp_arg *k)
{
	if (k->len <= VALS_MAX_KEY)
		return 1;
	resp_error(&c->rb, "ERR key is %zu bytes, kvtierd takes keys of at most %d", k->len,
		   VALS_MAX_KEY);
	return 0;
}

/* --- connection ------------------------------------------------------------------ */

static void cmd_ping(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	if (n > 2)
		resp_error(&c->rb, "ERR wrong number of arguments for 'ping' command");
	else if (n == 2)
		resp_bulk(&c->rb, a[1].p, a[1].len);
	else
		resp_simple(&c->rb, "PONG");
}

static void cmd_echo(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	(void)n;
	resp_bulk(&c->rb, a[1].p, a[1].len);
}

static void cmd_quit(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	(void)a;
	(void)n;
	resp_simple(&c->rb, "OK");
	c->closing = 1;
}

/* The source address of a TCP client ("" for a Unix socket's). */
static void conn_ip(const struct kvtd_conn *c, char *ip, size_t len)
{
	const char *colon = strrchr(c->addr, ':');
	size_t n = colon ? (size_t)(colon - c->addr) : 0;

	if (n >= len)
		n = len - 1;
	memcpy(ip, c->addr, n);
	ip[n] = '\0';
}

/* A failed AUTH, in the log: the first, then at most one line every
 * KVTD_AUTH_LOG_MS with how many were not logged (a guesser fills no disk). */
static void auth_log(struct kvtd *d, const char *what, const struct resp_arg *user,
		     const char *ip, unsigned n)
{
	int64_t now = kvtd_mono_ms(), last = atomic_load(&d->auth_logged_ms);
	char u[65];
	size_t k = 0;

	if ((last && now - last < KVTD_AUTH_LOG_MS) ||
	    !atomic_compare_exchange_strong(&d->auth_logged_ms, &last, now)) {
		atomic_fetch_add(&d->auth_unlogged, 1);
		return;
	}
	for (size_t i = 0; user && i < user->len && k < sizeof(u) - 1; i++) /* printable only */
		u[k++] = user->p[i] >= ' ' && user->p[i] <= '~' ? user->p[i] : '?';
	u[k] = '\0';
	kvtd_log(KVTD_LOG_WARN, "AUTH %s: user '%s' from %s (%u failed from there in this "
		 "minute; %llu more not logged since the last line)", what, user ? u : "default",
		 *ip ? ip : "a Unix socket", n,
		 (unsigned long long)atomic_exchange(&d->auth_unlogged, 0));
}

/*
 * A failed AUTH costs the guesser time: the connection reads nothing more
 * for a while (doubling with each failure), and a source address that
 * failed KVTD_GUARD_FAILS times in a minute is refused AUTH unchecked for
 * the rest of it, however many connections it opens (guard.h).
 */
static int do_auth(struct kvtd_conn *c, const struct resp_arg *user, const struct resp_arg *pass)
{
	struct kvtd *d = dmn(c);
	const struct kvtd_tenant *t = NULL;
	char ip[64];
	int64_t now = kvtd_mono_ms(), wait;

	conn_ip(c, ip, sizeof(ip));
	if ((wait = kvtd_guard_refused_ms(d->guard, ip, now))) {
		atomic_fetch_add(&d->auth_refused, 1);
		auth_log(d, "refused unchecked", user, ip, KVTD_GUARD_FAILS);
		resp_error(&c->rb, "WRONGPASS too many failed AUTH attempts from %s: AUTH is refused "
			   "for %lld s more", ip, (long long)(wait + 999) / 1000);
		kvtd_conn_hold(c, kvtd_guard_hold_ms(++c->auth_fails));
		return -1;
	}
	int rc = d->auth(d, user ? user->p : "default", user ? user->len : 7, pass->p,
			 pass->len, &t);
	if (rc < 0) {
		unsigned n = kvtd_guard_fail(d->guard, ip, now);
		atomic_fetch_add(&d->auth_failures, 1);
		auth_log(d, "failed", user, ip, n);
		resp_error(&c->rb,
			   "WRONGPASS invalid username-password pair or user is disabled.");
		kvtd_conn_hold(c, kvtd_guard_hold_ms(++c->auth_fails));
		return -1;
	}
	c->tenant = t;
	c->parser.max_args = RESP_MAX_ARGS;
	c->parser.max_bulk = dmn(c)->o.max_value;
	c->admin = rc == 1;
	return 0;
}

static void cmd_auth(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	struct kvtd *d = dmn(c);

	if (n > 3) {
		resp_error(&c->rb, "ERR syntax error");
		return;
	}
	if (n == 2 && !d->auth_required) {
		resp_error(&c->rb, "ERR AUTH <password> called without any password configured "
				   "for the default user. Are you sure your configuration is correct?");
		return;
	}
	if (do_auth(c, n == 3 ? &a[1] : NULL, &a[n - 1]) == 0)
		resp_simple(&c->rb, "OK");
}

static void set_name(struct kvtd_conn *c, const struct resp_arg *a)
{
	size_t k = a->len < sizeof(c->name) - 1 ? a->len : sizeof(c->name) - 1;
	memcpy(c->name, a->p, k);
	c->name[k] = 0;
}

static int name_ok(struct kvtd_conn *c, const struct resp_arg *a)
{
	for (size_t i = 0; i < a->len; i++)
		if (a->p[i] < '!' || a->p[i] > '~') {
			resp_error(&c->rb, "ERR Client names cannot contain spaces, newlines or "
					   "special characters.");
			return 0;
		}
	return 1;
}

static void put_kv_str(struct resp_buf *b, const char *k, const char *v)
{
	resp_bulk(b, k, strlen(k));
	resp_bulk(b, v, strlen(v));
}

static void put_kv_int(struct resp_buf *b, const char *k, long long v)
{
	resp_bulk(b, k, strlen(k));
	resp_int(b, v);
}

static void cmd_hello(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	long long ver = c->proto;
	size_t i = 1;

	if (n >= 2) {
		if (arg_ll(&a[1], &ver)) {
			resp_error(&c->rb, "ERR Protocol version is not an integer or out of range");
			return;
		}
		i = 2;
		if (ver < 2 || ver > 3) {
			resp_error(&c->rb, "NOPROTO unsupported protocol version");
			return;
		}
	}
	for (; i < n; i++) {
		if (ARG_IS(a[i], "AUTH") && i + 2 < n) {
			if (do_auth(c, &a[i + 1], &a[i + 2]))
				return;
			i += 2;
		} else if (ARG_IS(a[i], "SETNAME") && i + 1 < n) {
			if (!name_ok(c, &a[i + 1]))
				return;
			set_name(c, &a[i + 1]);
			i++;
		} else {
			resp_error(&c->rb, "ERR Syntax error in HELLO option '%.*s'",
				   (int)(a[i].len > 64 ? 64 : a[i].len), a[i].p);
			return;
		}
	}
	if (!c->tenant) {
		resp_error(&c->rb, "NOAUTH HELLO must be called with the client already "
				   "authenticated, otherwise the HELLO <proto> AUTH <user> <pass> "
				   "option can be used to authenticate the client and select the "
				   "RESP protocol version at the same time");
		return;
	}
	c->proto = (int)ver;
	resp_map(&c->rb, c->proto, 7);
	put_kv_str(&c->rb, "server", "redis");
	put_kv_str(&c->rb, "version", KVTD_VERSION);
	put_kv_int(&c->rb, "proto", c->proto);
	put_kv_int(&c->rb, "id", (long long)c->id);
	put_kv_str(&c->rb, "mode", "standalone");
	put_kv_str(&c->rb, "role", "master");
	resp_bulk(&c->rb, "modules", 7);
	resp_array(&c->rb, 0);
}

static void cmd_select(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	long long db;
	(void)n;
	if (arg_ll(&a[1], &db))
		not_int(c);
	else if (db != 0)
		resp_error(&c->rb, "ERR DB index is out of range");
	else
		resp_simple(&c->rb, "OK");
}

static void copy_field(char *dst, size_t cap, const struct resp_arg *a)
{
	size_t k = a->len < cap - 1 ? a->len : cap - 1;
	memcpy(dst, a->p, k);
	dst[k] = 0;
}

static void cmd_client(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	if (ARG_IS(a[1], "ID") && n == 2) {
		resp_int(&c->rb, (long long)c->id);
	} else if (ARG_IS(a[1], "SETNAME") && n == 3) {
		if (name_ok(c, &a[2])) {
			set_name(c, &a[2]);
			resp_simple(&c->rb, "OK");
		}
	} else if (ARG_IS(a[1], "GETNAME") && n == 2) {
		if (c->name[0])
			resp_bulk(&c->rb, c->name, strlen(c->name));
		else
			resp_null(&c->rb, c->proto);
	} else if (ARG_IS(a[1], "SETINFO") && n == 4) {
		if (ARG_IS(a[2], "LIB-NAME"))
			copy_field(c->lib_name, sizeof(c->lib_name), &a[3]);
		else if (ARG_IS(a[2], "LIB-VER"))
			copy_field(c->lib_ver, sizeof(c->lib_ver), &a[3]);
		else {
			resp_error(&c->rb, "ERR Unrecognized option '%.*s'",
				   (int)(a[2].len > 64 ? 64 : a[2].len), a[2].p);
			return;
		}
		resp_simple(&c->rb, "OK");
	} else {
		resp_error(&c->rb, "ERR unknown subcommand or wrong number of arguments for "
				   "'%.*s'. Try CLIENT HELP.",
			   (int)(a[1].len > 64 ? 64 : a[1].len), a[1].p);
	}
}

/* --- strings ---------------------------------------------------------------------- */

/* Send a stored value, or the null reply. */
static void reply_value(struct kvtd_conn *c, const struct resp_arg *k)
{
	kvt_ref *ref;
	uint64_t vlen;
	int rc = vals_get(dmn(c)->vals, key_ten(c, k->p, k->len), k->p, k->len, &ref, &vlen);

	if (rc == 0) {
		atomic_fetch_add(&dmn(c)->keyspace_hits[ten(c)->id], 1);
		kvtd_reply_ref(c, ref, vlen);
	} else if (rc == KVT_ENOTFOUND) {
		atomic_fetch_add(&dmn(c)->keyspace_misses[ten(c)->id], 1);
		resp_null(&c->rb, c->proto);
	} else {
		store_error(c, rc);
	}
}

static void cmd_get(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	(void)n;
	if (key_ok(c, &a[1]))
		reply_value(c, &a[1]);
}

static void cmd_mget(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	resp_array(&c->rb, (long long)n - 1);
	for (size_t i = 1; i < n; i++) {
		if (a[i].len > VALS_MAX_KEY)
			resp_null(&c->rb, c->proto);
		else
			reply_value(c, &a[i]);
	}
}

/* Store argument v as key k's new version: the value's own buffer when the
 * parser gave it one (it has the slack the trailer needs), else a copy. */
static int store_value(struct kvtd_conn *c, struct resp_arg *a, size_t k, size_t v,
		       int64_t expire_ms, int flags)
{
	void *vp = resp_take_placed(&c->parser, v);
	char *buf;
	int rc;

	if (vp)
		return vals_put_commit(vp, expire_ms, flags);
	buf = resp_take_big(&c->parser, v);
	if (buf) {
		rc = vals_set(dmn(c)->vals, key_ten(c, a[k].p, a[k].len), a[k].p, a[k].len, buf,
			      a[v].len, expire_ms, flags);
		kvtd_buf_put(c->w, buf, a[v].cap);
		a[v].p = NULL; /* given back */
		return rc;
	}
	buf = malloc((size_t)vals_payload_bytes(a[k].len, a[v].len));
	if (!buf)
		return KVT_ENOMEM;
	memcpy(buf, a[v].p, a[v].len);
	rc = vals_set(dmn(c)->vals, key_ten(c, a[k].p, a[k].len), a[k].p, a[k].len, buf,
		      a[v].len, expire_ms, flags);
	free(buf);
	return rc;
}

static void cmd_set(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	int64_t expire_ms = 0;
	int flags = 0, have_exp = 0, rc;

	if (!key_ok(c, &a[1]))
		return;
	for (size_t i = 3; i < n; i++) {
		long long t;
		if (ARG_IS(a[i], "NX") && !(flags & VALS_SET_XX)) {
			flags |= VALS_SET_NX;
		} else if (ARG_IS(a[i], "XX") && !(flags & VALS_SET_NX)) {
			flags |= VALS_SET_XX;
		} else if (ARG_IS(a[i], "KEEPTTL") && !have_exp) {
			flags |= VALS_SET_KEEPTTL;
		} else if ((ARG_IS(a[i], "EX") || ARG_IS(a[i], "PX") || ARG_IS(a[i], "EXAT") ||
			    ARG_IS(a[i], "PXAT")) &&
			   !have_exp && !(flags & VALS_SET_KEEPTTL) && i + 1 < n) {
			int sec = ARG_IS(a[i], "EX") || ARG_IS(a[i], "EXAT");
			int at = ARG_IS(a[i], "EXAT") || ARG_IS(a[i], "PXAT");
			if (arg_ll(&a[i + 1], &t)) {
				not_int(c);
				return;
			}
			if (t <= 0 || (expire_ms = vals_expiry_ms(t, sec, at, vals_now_ms())) == INT64_MIN) {
				bad_expire(c, "set");
				return;
			}
			have_exp = 1;
			i++;
		} else {
			resp_error(&c->rb, "ERR syntax error");
			return;
		}
	}
	rc = store_value(c, a, 1, 2, expire_ms, flags);
	if (rc == 1)
		resp_simple(&c->rb, "OK");
	else if (rc == 0)
		resp_null(&c->rb, c->proto);
	else
		store_error(c, rc);
}

static void cmd_mset(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	if (n % 2 == 0) {
		resp_error(&c->rb, "ERR wrong number of arguments for 'mset' command");
		return;
	}
	for (size_t i = 1; i < n; i += 2)
		if (!key_ok(c, &a[i]))
			return;
	for (size_t i = 1; i < n; i += 2) {
		int rc = store_value(c, a, i, i + 1, 0, 0);
		if (rc < 0) {
			store_error(c, rc);
			return;
		}
	}
	resp_simple(&c->rb, "OK");
}

static void cmd_exists(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	long long k = 0;
	for (size_t i = 1; i < n; i++)
		k += a[i].len <= VALS_MAX_KEY &&
		     vals_exists(dmn(c)->vals, key_ten(c, a[i].p, a[i].len), a[i].p, a[i].len);
	resp_int(&c->rb, k);
}

static void cmd_del(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	long long k = 0;
	for (size_t i = 1; i < n; i++)
		k += a[i].len <= VALS_MAX_KEY &&
		     vals_del(dmn(c)->vals, key_ten(c, a[i].p, a[i].len), a[i].p, a[i].len);
	resp_int(&c->rb, k);
}

/* EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: a time in seconds or milliseconds,
 * from now or since the epoch; one that overflows is refused as Redis does,
 * not turned into a time in the past (which deleted the key). */
static void do_expire(struct kvtd_conn *c, struct resp_arg *a, size_t n, int ms, int at_abs,
		      const char *cmd)
{
	long long t;

	if (n > 3) {
		resp_error(&c->rb, "ERR Unsupported option %.*s",
			   (int)(a[3].len > 64 ? 64 : a[3].len), a[3].p);
		return;
	}
	if (arg_ll(&a[2], &t)) {
		not_int(c);
		return;
	}
	int64_t at = vals_expiry_ms(t, !ms, at_abs, vals_now_ms());
	if (at == INT64_MIN) {
		bad_expire(c, cmd);
		return;
	}
	if (at <= 0)
		at = 1; /* in the past: the key goes */
	int rc = a[1].len <= VALS_MAX_KEY
		 ? vals_expire(dmn(c)->vals, key_ten(c, a[1].p, a[1].len), a[1].p, a[1].len, at) : 0;
	if (rc < 0)
		store_error(c, rc);
	else
		resp_int(&c->rb, rc);
}

static void cmd_expire(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	do_expire(c, a, n, 0, 0, "expire");
}

static void cmd_pexpire(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	do_expire(c, a, n, 1, 0, "pexpire");
}

static void cmd_expireat(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	do_expire(c, a, n, 0, 1, "expireat");
}

static void cmd_pexpireat(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	do_expire(c, a, n, 1, 1, "pexpireat");
}

static void do_ttl(struct kvtd_conn *c, struct resp_arg *a, int ms)
{
	int64_t t = a[1].len <= VALS_MAX_KEY
		? vals_pttl(dmn(c)->vals, key_ten(c, a[1].p, a[1].len), a[1].p, a[1].len) : -2;
	if (t >= 0 && !ms)
		t = (t + 500) / 1000;
	resp_int(&c->rb, t);
}

static void cmd_ttl(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	(void)n;
	do_ttl(c, a, 0);
}

static void cmd_pttl(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	(void)n;
	do_ttl(c, a, 1);
}

/* --- keyspace ------------------------------------------------------------------------ */

struct scan_out {
	struct resp_buf b;
	long long n;
};

static void scan_one(void *arg, const char *key, size_t klen)
{
	struct scan_out *o = arg;
	resp_bulk(&o->b, key, klen);
	o->n++;
}

static void cmd_scan(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	unsigned long long cur;
	long long count = 10;
	const struct resp_arg *match = NULL;
	char *end, num[24];
	struct scan_out o = { 0 };

	errno = 0;
	cur = strtoull(a[1].p, &end, 10);
	if (errno || !a[1].len || end != a[1].p + a[1].len || a[1].p[0] == '-') {
		resp_error(&c->rb, "ERR invalid cursor");
		return;
	}
	for (size_t i = 2; i < n; i++) {
		if (ARG_IS(a[i], "MATCH") && i + 1 < n) {
			match = &a[++i];
		} else if (ARG_IS(a[i], "COUNT") && i + 1 < n) {
			if (arg_ll(&a[++i], &count)) {
				not_int(c);
				return;
			}
			if (count < 1) {
				resp_error(&c->rb, "ERR syntax error");
				return;
			}
		} else if (ARG_IS(a[i], "TYPE") && i + 1 < n) {
			i++; /* every key is a string */
			if (!ARG_IS(a[i], "string")) {
				cur = 0;
				count = 0;
			}
		} else {
			resp_error(&c->rb, "ERR syntax error");
			return;
		}
	}
	uint64_t next = 0;
	if (count > 0)
		next = vals_scan(dmn(c)->vals, ten(c), cur, (size_t)count,
				 match ? match->p : NULL, match ? match->len : 0, scan_one, &o);
	resp_array(&c->rb, 2);
	int k = snprintf(num, sizeof(num), "%llu", (unsigned long long)next);
	resp_bulk(&c->rb, num, (size_t)k);
	resp_array(&c->rb, o.n);
	if (o.b.len) /* an empty page has no buffer to copy from */
		resp_put(&c->rb, o.b.p, o.b.len);
	if (o.b.oom)
		c->rb.oom = 1;
	resp_buf_free(&o.b);
}

static void cmd_dbsize(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	(void)a;
	(void)n;
	resp_int(&c->rb, (long long)vals_count(dmn(c)->vals, ten(c)));
}

static void cmd_flushdb(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	if (n == 2 && !ARG_IS(a[1], "ASYNC") && !ARG_IS(a[1], "SYNC")) {
		resp_error(&c->rb, "ERR syntax error");
		return;
	}
	uint64_t k = vals_flush(dmn(c)->vals, ten(c));
	kvtd_log(KVTD_LOG_INFO, "FLUSHDB from client %llu: %llu keys of tenant '%s'",
		 (unsigned long long)c->id, (unsigned long long)k, ten(c)->name);
	resp_simple(&c->rb, "OK");
}

/* --- introspection --------------------------------------------------------------------- */

static void add(struct resp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct resp_buf *b, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (k > 0)
		resp_put(b, line, (size_t)k < sizeof(line) ? (size_t)k : sizeof(line) - 1);
}

static int want(const char *sec, const struct resp_arg *a, size_t n)
{
	if (n < 2)
		return 1;
	for (size_t i = 1; i < n; i++)
		if (ARG_IS(a[i], "all") || ARG_IS(a[i], "everything") ||
		    (a[i].len == strlen(sec) && !strncasecmp(a[i].p, sec, a[i].len)))
			return 1;
	return 0;
}

/* INFO's per-tier lines of the node: every tenant's figures together. */
static void info_tiers_node(struct kvtd *d, struct resp_buf *b)
{
	int nt = kvt_store_tiers(d->st);

	for (int i = 0; i < nt; i++) {
		kvt_tier_stats s;
		if (kvt_store_stats(d->st, i, &s))
			continue;
		add(b, "tier%d:name=%s,capacity_bytes=%llu,used_bytes=%llu,objects=%llu,"
		       "hits=%llu,misses=%llu,puts=%llu,bytes_in=%llu,bytes_out=%llu,"
		       "evictions=%llu,promotions=%llu,demotions=%llu,corrupt=%llu,"
		       "write_errors=%llu,read_errors=%llu,read_gbps=%.3f,state=%s\r\n",
		    i, s.name, (unsigned long long)s.capacity_bytes,
		    (unsigned long long)s.used_bytes, (unsigned long long)s.chunks,
		    (unsigned long long)s.hits, (unsigned long long)s.misses,
		    (unsigned long long)s.puts, (unsigned long long)s.bytes_in,
		    (unsigned long long)s.bytes_out, (unsigned long long)s.evictions,
		    (unsigned long long)s.promotions, (unsigned long long)s.demotions,
		    (unsigned long long)s.corrupt, (unsigned long long)s.write_errors,
		    (unsigned long long)s.read_errors, s.read_gbps,
		    s.writes_off ? "no_writes" : s.unreachable ? "unreachable"
		    : s.state[0] ? "degraded" : "ok");
		if (s.state[0]) { /* why, in words: one line, no CR or LF in it */
			for (char *p = s.state; *p; p++)
				if (*p == '\r' || *p == '\n')
					*p = ' ';
			add(b, "tier%d_state:%s\r\n", i, s.state);
		}
	}
}

/* INFO's per-tier lines of one tenant: its share of each tier against its
 * quota and reservation, and nothing that moves with other tenants' use
 * (the tier's capacity, hits and traffic are the node's).  A tier that
 * accounts no shares (an unbounded S3 tier) says so. */
static void info_tiers_tenant(struct kvtd *d, const struct kvtd_tenant *t, struct resp_buf *b)
{
	int nt = kvt_store_tiers(d->st);

	for (int i = 0; i < nt; i++) {
		kvt_tier_stats s;
		kvt_tenant_usage u;
		if (kvt_store_stats(d->st, i, &s))
			continue;
		if (kvt_store_tenant_usage(d->st, t->name[0] ? t->name : NULL, i, &u)) {
			add(b, "tier%d:name=%s,accounted=no\r\n", i, s.name);
			continue;
		}
		add(b, "tier%d:name=%s,used_bytes=%llu,objects=%llu,quota_bytes=%llu,"
		       "reserve_bytes=%llu,quota_evictions=%llu,share_evictions=%llu\r\n",
		    i, s.name, (unsigned long long)u.bytes, (unsigned long long)u.chunks,
		    (unsigned long long)u.quota, (unsigned long long)u.reserve,
		    (unsigned long long)u.quota_evictions, (unsigned long long)u.share_evictions);
	}
}

/* A tenant learns nothing from INFO of what other tenants cache or do:
 * the clients, command counts and tier figures of the node are shown to
 * an admin (the access list's +admin, or any client without a list), the
 * caller's tenant's own to every other user. */
static void cmd_info(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	struct kvtd *d = dmn(c);
	struct resp_buf b = { 0 };
	const struct kvtd_tenant *t = ten(c);
	int node = c->admin;

	if (want("server", a, n))
		add(&b, "# Server\r\nredis_version:%s\r\nkvtier_version:%s\r\nredis_mode:standalone\r\n"
			"os:Linux\r\narch_bits:64\r\nprocess_id:%ld\r\ntcp_port:%d\r\n"
			"uptime_in_seconds:%lld\r\nio_threads_active:%d\r\n\r\n",
		    KVTD_VERSION, KVT_VERSION_STRING, (long)getpid(), d->port,
		    (long long)(kvtd_mono_ms() - d->start_ms) / 1000, d->nw);
	if (want("clients", a, n)) {
		add(&b, "# Clients\r\n");
		if (node)
			add(&b, "connected_clients:%ld\r\n", atomic_load(&d->clients));
		add(&b, "maxclients:%ld\r\n\r\n", d->o.maxclients);
	}
	if (want("stats", a, n)) {
		add(&b, "# Stats\r\n");
		if (node)
			add(&b, "total_connections_received:%llu\r\n"
				"total_commands_processed:%llu\r\nrejected_connections:%llu\r\n",
			    (unsigned long long)atomic_load(&d->total_conns),
			    (unsigned long long)atomic_load(&d->total_cmds),
			    (unsigned long long)atomic_load(&d->rejected_conns));
		add(&b, "keyspace_hits:%llu\r\nkeyspace_misses:%llu\r\n\r\n",
		    (unsigned long long)kvtd_ops_keyspace(d, node ? NULL : t, 0),
		    (unsigned long long)kvtd_ops_keyspace(d, node ? NULL : t, 1));
	}
	if (want("keyspace", a, n)) {
		uint64_t keys = vals_count(d->vals, t);
		add(&b, "# Keyspace\r\n");
		if (keys)
			add(&b, "db0:keys=%llu,expires=%llu,avg_ttl=0\r\n", (unsigned long long)keys,
			    (unsigned long long)vals_expiring(d->vals, t));
		add(&b, "\r\n");
	}
	if (want("kvtier", a, n)) {
		add(&b, "# Kvtier\r\ntenant:%s\r\nscope:%s\r\ntiers:%d\r\n",
		    t->name[0] ? t->name : "default", node ? "node" : "tenant",
		    kvt_store_tiers(d->st));
		if (node)
			info_tiers_node(d, &b);
		else
			info_tiers_tenant(d, t, &b);
		add(&b, "\r\n");
	}
	if (b.len >= 2)
		b.len -= 2; /* no blank line after the last section */
	if (b.oom) {
		c->rb.oom = 1;
	} else if (c->proto == 3) {
		char hdr[32];
		int k = snprintf(hdr, sizeof(hdr), "=%zu\r\ntxt:", b.len + 4);
		resp_put(&c->rb, hdr, (size_t)k);
		resp_put(&c->rb, b.p, b.len);
		resp_put(&c->rb, "\r\n", 2);
	} else {
		resp_bulk(&c->rb, b.p, b.len);
	}
	resp_buf_free(&b);
}

static const struct cmd cmds[];
static const size_t n_cmds;

static void flags_array(struct resp_buf *b, const char *flags)
{
	char f[128];
	long long k = 0;
	snprintf(f, sizeof(f), "%s", flags);
	for (char *s = f; *s; s++)
		if (*s == ' ')
			k++;
	resp_array(b, f[0] ? k + 1 : 0);
	for (char *s = strtok(f, " "); s; s = strtok(NULL, " ")) {
		resp_put(b, "+", 1);
		resp_put(b, s, strlen(s));
		resp_put(b, "\r\n", 2);
	}
}

/* COMMAND's per-command entry, in Redis 7's ten fields. */
static void command_info(struct kvtd_conn *c, const struct cmd *m)
{
	resp_array(&c->rb, 10);
	resp_bulk(&c->rb, m->name, strlen(m->name));
	resp_int(&c->rb, m->arity);
	flags_array(&c->rb, m->flags);
	resp_int(&c->rb, m->first);
	resp_int(&c->rb, m->last);
	resp_int(&c->rb, m->step);
	resp_array(&c->rb, 0);
	resp_array(&c->rb, 0);
	resp_array(&c->rb, 0);
	resp_array(&c->rb, 0);
}

static void command_docs(struct kvtd_conn *c, const struct cmd *m)
{
	resp_bulk(&c->rb, m->name, strlen(m->name));
	resp_map(&c->rb, c->proto, 3);
	put_kv_str(&c->rb, "summary", m->summary);
	put_kv_str(&c->rb, "since", "1.0.0");
	put_kv_str(&c->rb, "group", m->group);
}

static void cmd_command(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	if (n == 1) {
		resp_array(&c->rb, (long long)n_cmds);
		for (size_t i = 0; i < n_cmds; i++)
			command_info(c, &cmds[i]);
	} else if (ARG_IS(a[1], "COUNT") && n == 2) {
		resp_int(&c->rb, (long long)n_cmds);
	} else if (ARG_IS(a[1], "INFO")) {
		if (n == 2) {
			resp_array(&c->rb, (long long)n_cmds);
			for (size_t i = 0; i < n_cmds; i++)
				command_info(c, &cmds[i]);
			return;
		}
		resp_array(&c->rb, (long long)n - 2);
		for (size_t i = 2; i < n; i++) {
			const struct cmd *m = cmd_find(a[i].p, a[i].len);
			if (m)
				command_info(c, m);
			else
				resp_nil_array(&c->rb, c->proto);
		}
	} else if (ARG_IS(a[1], "DOCS")) {
		long long k = 0;
		if (n == 2)
			k = (long long)n_cmds;
		for (size_t i = 2; i < n; i++)
			k += cmd_find(a[i].p, a[i].len) != NULL;
		resp_map(&c->rb, c->proto, k);
		if (n == 2)
			for (size_t i = 0; i < n_cmds; i++)
				command_docs(c, &cmds[i]);
		for (size_t i = 2; i < n; i++) {
			const struct cmd *m = cmd_find(a[i].p, a[i].len);
			if (m)
				command_docs(c, m);
		}
	} else {
		resp_error(&c->rb, "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
			   (int)(a[1].len > 64 ? 64 : a[1].len), a[1].p);
	}
}

/* --- other nodes ------------------------------------------------------------------ */

/* The peer commands hand out raw chunks of every tenant by their storage
 * key: only on a daemon started with --serve-peers, and only to a user
 * who sees the whole node (the access list's +admin; anyone without one). */
static int peer_ok(struct kvtd_conn *c)
{
	if (dmn(c)->serve_peers && c->tenant && c->admin)
		return 1;
	resp_error(&c->rb, "NOPERM %s", dmn(c)->serve_peers
			   ? "this user may not read other tenants' chunks (ACL: +admin)"
			   : "this daemon does not serve other nodes (--serve-peers)");
	return 0;
}

static int peer_key(struct kvtd_conn *c, const struct resp_arg *a, kvt_key *k)
{
	char hex[65];

	if (a->len == 64) {
		memcpy(hex, a->p, 64);
		hex[64] = '\0';
		if (kvt_key_parse(hex, k) == 0)
			return 0;
	}
	resp_error(&c->rb, "ERR a chunk key is 64 hex digits");
	return -1;
}

/* KVTIER.PEEK key...: how many, from the first, this node holds itself. */
static void cmd_kvtier_peek(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	kvt_key keys[64];
	size_t done = 0;

	if (!peer_ok(c))
		return;
	while (done < n - 1) {
		size_t k = n - 1 - done < 64 ? n - 1 - done : 64;
		int got;
		for (size_t i = 0; i < k; i++)
			if (peer_key(c, &a[1 + done + i], &keys[i]))
				return;
		got = kvt_image_present(dmn(c)->st, keys, k);
		done += got > 0 ? (size_t)got : 0;
		if (got < (int)k)
			break;
	}
	resp_int(&c->rb, (long long)done);
}

/* KVTIER.FETCH key: the chunk's object image, or the null reply. */
static void cmd_kvtier_fetch(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	kvt_key k;
	kvt_ref *ref;
	int rc;

	(void)n;
	if (!peer_ok(c) || peer_key(c, &a[1], &k))
		return;
	rc = kvt_image_borrow(dmn(c)->st, &k, &ref);
	if (rc == 0) {
		atomic_fetch_add(&dmn(c)->peer_fetches, 1);
		atomic_fetch_add(&dmn(c)->peer_bytes, kvt_ref_len(ref));
		kvtd_reply_ref(c, ref, kvt_ref_len(ref));
	} else if (rc == KVT_ENOTFOUND) {
		resp_null(&c->rb, 2); /* the peer tier reads RESP2's null */
	} else {
		store_error(c, rc);
	}
}

/* KVTIER.WHY key...: why each chunk is or is not served (kvt_why): per
 * key [reason, tier or "", when (seconds, "0" if none), detail].  A key is
 * its 32 bytes or 64 hex digits.  Storage keys are digests of a tenant's
 * namespace: a client asks about the keys it can compute, its own. */
static void cmd_kvtier_why(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	kvt_ns ns;
	kvt_key *keys;
	kvt_why_chunk *out;
	size_t k;
	int rc;

	if (n < 2) { /* the table's arity says so; the allocation below wants it seen */
		resp_error(&c->rb, "ERR wrong number of arguments for 'kvtier.why' command");
		return;
	}
	k = n - 1;
	for (size_t i = 1; i < n; i++)
		if (a[i].len != 32 && a[i].len != 64) {
			resp_error(&c->rb, "ERR KVTIER.WHY: key %zu is %zu bytes: a chunk key is "
				   "32 bytes or 64 hex digits", i, a[i].len);
			return;
		}
	keys = calloc(k, sizeof(*keys));
	out = calloc(k, sizeof(*out));
	if (!keys || !out) {
		free(keys);
		free(out);
		resp_error(&c->rb, "ERR out of memory");
		return;
	}
	for (size_t i = 0; i < k; i++) {
		if (a[1 + i].len == 32) {
			memcpy(keys[i].b, a[1 + i].p, 32);
		} else {
			char hex[65];
			memcpy(hex, a[1 + i].p, 64);
			hex[64] = '\0';
			if (kvt_key_parse(hex, &keys[i])) {
				resp_error(&c->rb, "ERR KVTIER.WHY: key %zu is not 64 hex digits", i + 1);
				goto out;
			}
		}
	}
	memset(&ns, 0, sizeof(ns));
	if ((rc = kvt_why(dmn(c)->st, &ns, keys, k, out)) < 0) {
		store_error(c, rc);
		goto out;
	}
	resp_array(&c->rb, (long long)k);
	for (size_t i = 0; i < k; i++) {
		kvt_tier_stats ts;
		char when[32];
		const char *r = kvt_why_name(out[i].reason);
		memset(&ts, 0, sizeof(ts));
		if (out[i].tier >= 0)
			kvt_store_stats(dmn(c)->st, out[i].tier, &ts);
		snprintf(when, sizeof(when), "%.3f", out[i].when);
		resp_array(&c->rb, 4);
		resp_bulk(&c->rb, r, strlen(r));
		resp_bulk(&c->rb, ts.name, strlen(ts.name));
		resp_bulk(&c->rb, when, strlen(when));
		resp_bulk(&c->rb, out[i].detail, strlen(out[i].detail));
	}
out:
	free(keys);
	free(out);
}

static const struct cmd cmds[] = {
	{ "ping", -1, cmd_ping, 0, 0, 0, 0, "fast", "connection", "Ping the server" },
	{ "echo", 2, cmd_echo, 0, 0, 0, 0, "fast", "connection", "Echo the given string" },
	{ "auth", -2, cmd_auth, 1, 0, 0, 0, "noscript loading stale fast no_auth", "connection",
	  "Authenticate to the server" },
	{ "hello", -1, cmd_hello, 1, 0, 0, 0, "noscript loading stale fast no_auth", "connection",
	  "Handshake with the server (protocol version, AUTH, SETNAME)" },
	{ "select", 2, cmd_select, 0, 0, 0, 0, "loading stale fast", "connection",
	  "Change the selected database (0 only)" },
	{ "client", -2, cmd_client, 0, 0, 0, 0, "noscript loading stale", "connection",
	  "CLIENT ID, SETNAME, GETNAME, SETINFO" },
	{ "command", -1, cmd_command, 0, 0, 0, 0, "loading stale", "server",
	  "Get details about the commands" },
	{ "quit", -1, cmd_quit, 1, 0, 0, 0, "noscript loading stale fast no_auth", "connection",
	  "Close the connection" },
	{ "get", 2, cmd_get, 0, 1, 1, 1, "readonly fast", "string", "Get the value of a key" },
	{ "set", -3, cmd_set, 0, 1, 1, 1, "write denyoom", "string",
	  "Set the string value of a key (EX, PX, EXAT, PXAT, NX, XX, KEEPTTL)" },
	{ "mget", -2, cmd_mget, 0, 1, -1, 1, "readonly fast", "string",
	  "Get the values of all the given keys" },
	{ "mset", -3, cmd_mset, 0, 1, -1, 2, "write denyoom", "string",
	  "Set multiple keys to multiple values" },
	{ "exists", -2, cmd_exists, 0, 1, -1, 1, "readonly fast", "generic",
	  "Determine if keys exist" },
	{ "del", -2, cmd_del, 0, 1, -1, 1, "write", "generic", "Delete keys" },
	{ "unlink", -2, cmd_del, 0, 1, -1, 1, "write fast", "generic", "Delete keys" },
	{ "expire", -3, cmd_expire, 0, 1, 1, 1, "write fast", "generic",
	  "Set a key's time to live in seconds" },
	{ "pexpire", -3, cmd_pexpire, 0, 1, 1, 1, "write fast", "generic",
	  "Set a key's time to live in milliseconds" },
	{ "expireat", -3, cmd_expireat, 0, 1, 1, 1, "write fast", "generic",
	  "Set the expiration for a key as a UNIX timestamp" },
	{ "pexpireat", -3, cmd_pexpireat, 0, 1, 1, 1, "write fast", "generic",
	  "Set the expiration for a key as a UNIX timestamp in milliseconds" },
	{ "ttl", 2, cmd_ttl, 0, 1, 1, 1, "readonly fast", "generic",
	  "Get the time to live for a key in seconds" },
	{ "pttl", 2, cmd_pttl, 0, 1, 1, 1, "readonly fast", "generic",
	  "Get the time to live for a key in milliseconds" },
	{ "scan", -2, cmd_scan, 0, 0, 0, 0, "readonly", "generic",
	  "Incrementally iterate the keys space (MATCH, COUNT)" },
	{ "dbsize", 1, cmd_dbsize, 0, 0, 0, 0, "readonly fast", "server",
	  "Return the number of keys of the caller's tenant" },
	{ "info", -1, cmd_info, 0, 0, 0, 0, "loading stale", "server",
	  "Information and statistics about the server and kvtier's tiers" },
	{ "flushdb", -1, cmd_flushdb, 0, 0, 0, 0, "write", "server",
	  "Remove all keys of the caller's tenant" },
	{ "kvtier.peek", -2, cmd_kvtier_peek, 0, 0, 0, 0, "readonly fast", "kvtier",
	  "How many of the chunk keys, from the first, this node holds (other nodes ask)" },
	{ "kvtier.fetch", 2, cmd_kvtier_fetch, 0, 0, 0, 0, "readonly", "kvtier",
	  "A chunk's object image by its key (other nodes ask)" },
	{ "kvtier.why", -2, cmd_kvtier_why, 0, 0, 0, 0, "readonly", "kvtier",
	  "Why each chunk key is or is not served: reason, tier, when, detail" },
};
static const size_t n_cmds = sizeof(cmds) / sizeof(cmds[0]);

static const struct cmd *cmd_find(const char *name, size_t len)
{
	for (size_t i = 0; i < n_cmds; i++)
		if (strlen(cmds[i].name) == len && !strncasecmp(cmds[i].name, name, len))
			return &cmds[i];
	return NULL;
}

void kvtd_dispatch(struct kvtd_conn *c, struct resp_arg *a, size_t n)
{
	const struct cmd *m = cmd_find(a[0].p, a[0].len);

	if (!m) {
		char args[256] = "";
		size_t k = 0;
		for (size_t i = 1; i < n && k < 200; i++)
			k += (size_t)snprintf(args + k, sizeof(args) - k, "'%.*s' ",
					      (int)(a[i].len > 64 ? 64 : a[i].len), a[i].p);
		resp_error(&c->rb, "ERR unknown command '%.*s', with args beginning with: %s",
			   (int)(a[0].len > 128 ? 128 : a[0].len), a[0].p, args);
		return;
	}
	if ((m->arity > 0 && (size_t)m->arity != n) || (m->arity < 0 && n < (size_t)-m->arity)) {
		resp_error(&c->rb, "ERR wrong number of arguments for '%s' command", m->name);
		return;
	}
	if (!c->tenant && !m->noauth) {
		resp_error(&c->rb, "NOAUTH Authentication required.");
		return;
	}
	if (dmn(c)->shared_of && strstr(m->flags, "write") && m->first > 0) {
		/* A write to a shared namespace is its own tenant's alone. */
		size_t last = m->last < 0 ? n - 1 : (size_t)m->last;
		for (size_t i = (size_t)m->first; i <= last && i < n; i += (size_t)m->step)
			if (key_ten(c, a[i].p, a[i].len) != c->tenant) {
				resp_error(&c->rb, "NOPERM this user has no permissions to access "
						   "one of the keys used as arguments");
				return;
			}
	}
	m->fn(c, a, n);
}
