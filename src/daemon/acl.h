/*
 * acl.h — kvtierd's access list: who may connect, as which tenant, with
 * which byte quotas, and which key prefixes are the one shared namespace.
 *
 * The file is text, one directive a line (docs/DAEMON_OPS.md):
 *
 *   # comment
 *   user <name> tenant <tenant> [+admin] (nopass | sha256:<64 hex>)...
 *   quota <tenant> <tier> (<size> | none) [reserve <size>]
 *   shared <prefix> tenant <tenant>
 *
 * Passwords are never stored: a user lists the SHA-256 of each password
 * it accepts.  <tenant> is a tenant of the store's configuration (whose
 * secret keys its namespaces) or `default`.  The user named `default` is
 * the one `AUTH <password>` (one argument) authenticates; when it is
 * `nopass`, a connection starts authenticated as it, as in Redis.  A key
 * under a shared prefix lives in that line's tenant's namespace: every
 * tenant reads it, only that tenant's users write it.  `+admin` lets a
 * user see the node as a whole where others see their tenant only (INFO's
 * tier figures, clients and command counts; the peers' KVTIER commands).
 *
 * The module parses and answers questions; it holds no lock and no store.
 * An access list is immutable once parsed: a reload parses a new one and
 * swaps the pointer (tenant.c).
 */
#ifndef KVTD_ACL_H
#define KVTD_ACL_H

#include <stddef.h>
#include <stdint.h>

#define KVTD_NAME_MAX 64      /* user, tenant and tier names, with the NUL */
#define KVTD_PREFIX_MAX 128   /* a shared prefix, with the NUL */
#define KVTD_PASS_MAX 8       /* passwords a user may have */
#define KVTD_ACL_MAX_USERS 1024
#define KVTD_ACL_MAX_QUOTAS 512
#define KVTD_ACL_MAX_SHARED 8

struct kvtd_user {
	char name[KVTD_NAME_MAX];
	char tenant[KVTD_NAME_MAX];  /* "default" or a configured tenant */
	int nopass;
	int admin;                   /* +admin: INFO shows it the whole node */
	int n_pass;
	uint8_t pass_sha256[KVTD_PASS_MAX][32];
};

struct kvtd_quota {
	char tenant[KVTD_NAME_MAX];
	char tier[KVTD_NAME_MAX];    /* a tier's name: dram, nvme, shared_fs, s3 */
	uint64_t quota, reserve;     /* bytes; quota 0 = none */
};

struct kvtd_shared {
	char prefix[KVTD_PREFIX_MAX];
	size_t prefix_len;
	char tenant[KVTD_NAME_MAX];
};

typedef struct kvtd_acl {
	int n_users, n_quotas, n_shared;
	struct kvtd_user users[KVTD_ACL_MAX_USERS];
	struct kvtd_quota quotas[KVTD_ACL_MAX_QUOTAS];
	struct kvtd_shared shared[KVTD_ACL_MAX_SHARED];
} kvtd_acl;

/* Parse `len` bytes of ACL text; `name` (a path) starts error messages.
 * 0 and *out (free with kvtd_acl_free), or -1 with the reason
 * ("acl.txt:3: user bob: expected nopass or sha256:<64 hex digits>") in
 * err (errlen bytes). */
int kvtd_acl_parse(const char *text, size_t len, const char *name,
		   kvtd_acl **out, char *err, size_t errlen);
/* The same from a file (at most 4 MiB). */
int kvtd_acl_load(const char *path, kvtd_acl **out, char *err, size_t errlen);
void kvtd_acl_free(kvtd_acl *acl);

/* The user `user` (NULL: `default`) if `pass` is one of its passwords (or
 * it is nopass), else NULL.  An unknown user and a wrong password cost the
 * same time and give the same NULL: a client cannot tell which names
 * exist. */
const struct kvtd_user *kvtd_acl_auth(const kvtd_acl *acl, const char *user,
				      size_t user_len, const char *pass,
				      size_t pass_len);

/* The user a new connection starts as: `default` when it is nopass, else
 * NULL (the client must AUTH first). */
const struct kvtd_user *kvtd_acl_initial(const kvtd_acl *acl);

/* The shared namespace a key falls in (the longest prefix that matches),
 * or NULL: the key is the caller's tenant's. */
const struct kvtd_shared *kvtd_acl_shared(const kvtd_acl *acl, const char *key,
					  size_t key_len);

#endif
