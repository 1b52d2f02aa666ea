/*
 * test_daemon_acl.c — kvtierd's access list (src/daemon/acl.c): the file
 * format, the password check, the shared prefixes, and the errors an
 * operator sees for a bad file.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/acl.h"
#include "test.h"

static char h_alice[80], h_bob[80], h_second[80];

static void sha_hex(const char *pw, char out[80])
{
	char cmd[160];
	FILE *p;

	/* The hash an operator computes with the usual tool, not with ours. */
	snprintf(cmd, sizeof(cmd), "printf '%%s' '%s' | sha256sum", pw);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	strcpy(out, "sha256:");
	CHECK(p && fread(out + 7, 1, 64, p) == 64);
	out[71] = '\0';
	if (p)
		pclose(p);
}

static kvtd_acl *parse(const char *text, char *err)
{
	kvtd_acl *a = NULL;

	if (kvtd_acl_parse(text, strlen(text), "acl.txt", &a, err, 256))
		return NULL;
	return a;
}

static void good_file(void)
{
	char text[2048], err[256];
	const struct kvtd_user *u;
	kvtd_acl *a;

	snprintf(text, sizeof(text),
		 "# tenants of node 7\n"
		 "user alice tenant a %s\n"
		 "\tuser bob   tenant b %s +admin %s\r\n"
		 "user default tenant default nopass\n"
		 "\n"
		 "quota a dram 1GiB reserve 256MiB\n"
		 "quota b nvme none reserve 10GiB\n"
		 "shared sys: tenant public\n"
		 "shared sys:long: tenant public2",
		 h_alice, h_bob, h_second);
	a = parse(text, err);
	CHECK(a != NULL);
	if (!a) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK_EQ(a->n_users, 3);
	CHECK_EQ(a->n_quotas, 2);
	CHECK_EQ(a->quotas[0].quota, 1ull << 30);
	CHECK_EQ(a->quotas[0].reserve, 256ull << 20);
	CHECK_EQ(a->quotas[1].quota, 0);
	CHECK_EQ(a->quotas[1].reserve, 10ull << 30);
	CHECK(!strcmp(a->quotas[1].tier, "nvme"));

	u = kvtd_acl_auth(a, "alice", 5, "alicepw", 7);
	CHECK(u && !strcmp(u->tenant, "a") && !u->admin);
	CHECK(kvtd_acl_auth(a, "alice", 5, "bobpw", 5) == NULL);
	CHECK(kvtd_acl_auth(a, "alice", 5, "alicepw", 6) == NULL);
	CHECK(kvtd_acl_auth(a, "alic", 4, "alicepw", 7) == NULL);
	CHECK(kvtd_acl_auth(a, "carol", 5, "alicepw", 7) == NULL);
	u = kvtd_acl_auth(a, "bob", 3, "second", 6); /* either of bob's passwords */
	CHECK(u && !strcmp(u->tenant, "b") && u->admin); /* +admin among the passwords */
	CHECK(kvtd_acl_auth(a, "bob", 3, "bobpw", 5) == u);
	/* The default user is nopass: any password, and connections start as it. */
	u = kvtd_acl_auth(a, NULL, 0, "whatever", 8);
	CHECK(u && !strcmp(u->name, "default"));
	CHECK(kvtd_acl_initial(a) == u);

	CHECK(kvtd_acl_shared(a, "sys:prompt", 10) == &a->shared[0]);
	CHECK(kvtd_acl_shared(a, "sys:long:x", 10) == &a->shared[1]); /* longest */
	CHECK(kvtd_acl_shared(a, "sys", 3) == NULL);
	CHECK(kvtd_acl_shared(a, "alice:sys:", 10) == NULL);
	kvtd_acl_free(a);

	/* Without a nopass default user a connection must AUTH first, and
	 * the one-argument AUTH checks the default user's password. */
	snprintf(text, sizeof(text), "user default tenant default %s\n", h_alice);
	CHECK((a = parse(text, err)) != NULL);
	if (a) {
		CHECK(kvtd_acl_initial(a) == NULL);
		CHECK(kvtd_acl_auth(a, NULL, 0, "alicepw", 7) != NULL);
		CHECK(kvtd_acl_auth(a, NULL, 0, "bobpw", 5) == NULL);
		kvtd_acl_free(a);
	}
	CHECK((a = parse("", err)) != NULL); /* an empty list: nobody gets in */
	if (a) {
		CHECK(kvtd_acl_initial(a) == NULL);
		CHECK(kvtd_acl_auth(a, NULL, 0, "", 0) == NULL);
		kvtd_acl_free(a);
	}
}

/* Each bad line is refused with its line number and what was wrong. */
static void bad_files(void)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "user alice tenant a\n", "acl.txt:1: expected: user <name> tenant" },
		{ "\nuser alice tenant a secret\n", "acl.txt:2: user alice: \"secret\": expected +admin, nopass" },
		{ "user alice tenant a sha256:abcd\n", "expected sha256:<64 hex digits>" },
		{ "user alice tenant a\tdefault\n", "user alice: \"default\": expected +admin, nopass" },
		{ "user alice tenant a +admin\n", "user alice: no password: give nopass or sha256" },
		{ "user alice tenant a +Admin nopass\n", "\"+Admin\": expected +admin" },
		{ "user alice tenant a nopass nopass\nuser bob tenant b\n", "acl.txt:2: expected: user" },
		{ "user alice tenant a nopass sha256:%s\n", "expected sha256:<64 hex digits>" },
		{ "user al!ce tenant a nopass\n", "user name \"al!ce\"" },
		{ "user alice tenant a nopass\nuser alice tenant b nopass\n",
		  "acl.txt:2: user alice defined twice" },
		{ "group x\n", "acl.txt:1: \"group\": expected user, quota or shared" },
		{ "quota a dram lots\n", "quota a dram: \"lots\": expected a size" },
		{ "quota a dram 1GiB reserve 2GiB\n", "the reservation is above the quota" },
		{ "quota a dram 1GiB\nquota a dram 2GiB\n", "acl.txt:2: quota of tenant a in tier dram given twice" },
		{ "quota a dram 1GiB keep 1GiB\n", "expected: quota <tenant> <tier>" },
		{ "shared sys: public\n", "expected: shared <key prefix> tenant <tenant>" },
		{ "user a tenant b nopass\0", "NUL byte" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256] = "";
		kvtd_acl *a = (kvtd_acl *)1;
		size_t len = strlen(cases[i].text) + (strstr(cases[i].want, "NUL") ? 1 : 0);
		int rc = kvtd_acl_parse(cases[i].text, len, "acl.txt", &a, err, sizeof(err));
		CHECK_EQ(rc, -1);
		CHECK(a == NULL);
		if (!strstr(err, cases[i].want)) {
			fprintf(stderr, "case %zu: got \"%s\", want \"%s\"\n", i, err, cases[i].want);
			test_failures++;
		}
	}
}

/* A user is either nopass or has passwords, not both. */
static void nopass_and_password(void)
{
	char text[256], err[256];
	kvtd_acl *a;

	snprintf(text, sizeof(text), "user alice tenant a nopass %s\n", h_alice);
	CHECK_EQ(kvtd_acl_parse(text, strlen(text), "acl.txt", &a, err, sizeof(err)), -1);
	CHECK(strstr(err, "acl.txt:1: user alice: nopass and passwords both given") != NULL);
}

static void load_file(void)
{
	char path[64], err[256], line[160];
	kvtd_acl *a;
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/kvt_acl_%d.txt", (int)getpid());
	CHECK_EQ(kvtd_acl_load(path, &a, err, sizeof(err)), -1);
	CHECK(strstr(err, path) && strstr(err, "No such file"));
	f = fopen(path, "w");
	snprintf(line, sizeof(line), "user alice tenant a %s\n", h_alice);
	fputs(line, f);
	fclose(f);
	CHECK_EQ(kvtd_acl_load(path, &a, err, sizeof(err)), 0);
	CHECK(a && a->n_users == 1 && kvtd_acl_auth(a, "alice", 5, "alicepw", 7));
	kvtd_acl_free(a);
	unlink(path);
}

int main(void)
{
	sha_hex("alicepw", h_alice);
	sha_hex("bobpw", h_bob);
	sha_hex("second", h_second);
	good_file();
	bad_files();
	nopass_and_password();
	load_file();
	TEST_DONE();
}
