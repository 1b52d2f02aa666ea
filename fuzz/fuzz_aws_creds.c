/*
 * fuzz_aws_creds.c — libFuzzer target for the reader of the AWS shared
 * credentials and config files (~/.aws/credentials, ~/.aws/config) in the
 * S3 tier (src/tier/s3_creds.c).
 *
 * Those files are outside bytes: any tool or user may have written them.
 * The reader (s3_ini_get) is static; the way in is the tier's public
 * open, kvt_s3_open, which reads them when no keys are given and none are
 * in the environment.  With an endpoint that has no scheme the open stops
 * right after reading them, before any network: KVT_EINVAL when it found
 * an access key and a secret, KVT_ECONFIG when it did not.
 *
 * Input: the first line is AWS_PROFILE (empty: unset, i.e. "default");
 * the rest, up to the first 0x1e byte (ASCII record separator), is the
 * credentials file; after it, the config file.  Both are memfds named to
 * the reader by AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE as their
 * /proc/self/fd paths; nothing is written to any file system, and every
 * other AWS_* variable is unset, so the run does not depend on the
 * machine's environment.
 *
 * Checked against a reading of the format made here independently of the
 * reader: lines trimmed of white space; '#' and ';' lines are comments;
 * "[name]" opens a section ("[profile name]" in the config file); in the
 * profile's section, "key = value" (or "key: value") with the first '='
 * or ':' splitting and the first match winning; keys come from the
 * credentials file, or from the config file when the credentials file has
 * no access key.  A file with a '[' line lacking its ']', or an unindented
 * line that is no comment and has no '=' or ':', is malformed: the open
 * fails with KVT_ECONFIG and every read of it too.  Both the outcome of
 * the open and each value read (s3_ini_get is called directly too:
 * s3_creds.c is compiled into this file, rather than linked from the
 * library archive, which is built without coverage instrumentation) must
 * agree.  The comparison leaves out files with a NUL byte (getline reads
 * past it, the string ends at it) and profile names longer than 200 bytes
 * (the config section name is cut at 255).
 *
 *   ./fuzz_aws_creds -max_len=4096 fuzz/corpus/aws_creds
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_memfile.h"
#include "tier/s3_creds.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_memfile cred_f = { -1, "" }, conf_f = { -1, "" };


static void setup(void)
{
	static const char *const unset[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
	};

	for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++)
		unsetenv(unset[i]);
	fuzz_memfile_open(&cred_f, "fuzz_aws_credentials");
	fuzz_memfile_open(&conf_f, "fuzz_aws_config");
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred_f.path, 1);
	setenv("AWS_CONFIG_FILE", conf_f.path, 1);
}


/* No NUL byte: lines read as the reader reads them. */
static int plain_file(const uint8_t *d, size_t len)
{
	return !memchr(d, 0, len);
}

static int sp(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The value of `key` in `section` of the file d[0..len), as the format
 * reads, or NULL (malloc'd). */
static char *ini_value(const uint8_t *d, size_t len, const char *section, const char *key)
{
	int in = 0;

	for (size_t i = 0; i < len;) {
		size_t a = i, b, e;
		while (i < len && d[i] != '\n')
			i++;
		b = i;
		if (i < len)
			i++;
		while (a < b && sp(d[a]))
			a++;
		while (b > a && sp(d[b - 1]))
			b--;
		if (a == b || d[a] == '#' || d[a] == ';')
			continue;
		if (d[a] == '[') {
			const uint8_t *z = memchr(d + a, ']', b - a);
			if (z) {
				size_t s = a + 1, n;
				while (s < (size_t)(z - d) && sp(d[s]))
					s++;
				n = (size_t)(z - d) - s;
				in = strlen(section) == n && !memcmp(d + s, section, n);
			}
			continue;
		}
		const uint8_t *eq = NULL;
		for (size_t j = a; j < b && !eq; j++)
			if (d[j] == '=' || d[j] == ':')
				eq = d + j;
		if (!in || !eq)
			continue;
		e = (size_t)(eq - d);
		while (e > a && sp(d[e - 1]))
			e--;
		if (e - a != strlen(key) || memcmp(d + a, key, e - a))
			continue;
		size_t v = (size_t)(eq - d) + 1;
		while (v < b && sp(d[v]))
			v++;
		char *out = malloc(b - v + 1);
		if (!out)
			abort();
		memcpy(out, d + v, b - v);
		out[b - v] = '\0';
		return out;
	}
	return NULL;
}

/* Whether the file has a line the format refuses. */
static int malformed(const uint8_t *d, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t a = i, b;
		int indented;
		while (i < len && d[i] != '\n')
			i++;
		b = i;
		if (i < len)
			i++;
		indented = a < b && sp(d[a]);
		while (a < b && sp(d[a]))
			a++;
		while (b > a && sp(d[b - 1]))
			b--;
		if (a == b || d[a] == '#' || d[a] == ';')
			continue;
		if (d[a] == '[') {
			if (!memchr(d + a, ']', b - a))
				return 1;
			continue;
		}
		if (!indented && !memchr(d + a, '=', b - a) && !memchr(d + a, ':', b - a))
			return 1;
	}
	return 0;
}

static int same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* The reader and the reading above agree on one key; the value (NULL if
 * absent) is returned for the caller to free. */
static char *lookup(const char *path, const uint8_t *d, size_t len, const char *section,
		    const char *key, int compare)
{
	char *got = NULL;
	int rc = s3_ini_get(path, section, key, &got);

	if (compare && malformed(d, len)) {
		if (rc != KVT_ECONFIG || got)
			abort(); /* a malformed file is refused, wherever the key is */
		return NULL;
	}
	if (rc != 0 && rc != KVT_ECONFIG)
		abort();
	if (compare) {
		if (rc)
			abort(); /* refused a file the format accepts */
		char *want = ini_value(d, len, section, key);
		if (!same(got, want))
			abort();
		free(want);
	}
	return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *cred, *conf, *nl, *rs;
	size_t cred_len, conf_len;
	char profile[256], csec[300];
	char *user, *secret, *token, *region;
	kvt_s3_opts o;
	kvt_tier *t = NULL;
	int compare, found, rc;

	if (cred_f.fd < 0)
		setup();
	nl = memchr(data, '\n', size);
	if (!nl)
		return 0;
	snprintf(profile, sizeof(profile), "%.*s", (int)(nl - data), (const char *)data);
	cred = nl + 1;
	rs = memchr(cred, 0x1e, size - (size_t)(cred - data));
	cred_len = rs ? (size_t)(rs - cred) : size - (size_t)(cred - data);
	conf = rs ? rs + 1 : cred + cred_len;
	conf_len = size - (size_t)(conf - data);
	fuzz_memfile_fill(&cred_f, cred, cred_len);
	fuzz_memfile_fill(&conf_f, conf, conf_len);
	if (profile[0])
		setenv("AWS_PROFILE", profile, 1);
	else
		unsetenv("AWS_PROFILE");

	memset(&o, 0, sizeof(o));
	o.bucket = "fuzz-bucket";
	o.endpoint = "fuzz-endpoint-without-scheme";
	rc = kvt_s3_open(&o, &t);
	if (rc == 0) {
		t->ops->close(t);
		abort(); /* the endpoint is not a URL */
	}
	if (rc != KVT_EINVAL && rc != KVT_ECONFIG)
		abort();

	/* What it should have found, key by key (s3_credentials' order). */
	if (!profile[0])
		snprintf(profile, sizeof(profile), "default");
	if (!strcmp(profile, "default"))
		snprintf(csec, sizeof(csec), "default");
	else
		snprintf(csec, sizeof(csec), "profile %s", profile);
	compare = plain_file(cred, cred_len) && plain_file(conf, conf_len) &&
		  strlen(profile) <= 200;
	user = lookup(cred_f.path, cred, cred_len, profile, "aws_access_key_id", compare);
	secret = lookup(cred_f.path, cred, cred_len, profile, "aws_secret_access_key", compare);
	token = lookup(cred_f.path, cred, cred_len, profile, "aws_session_token", compare);
	if (!user) {
		free(secret);
		free(token);
		user = lookup(conf_f.path, conf, conf_len, csec, "aws_access_key_id", compare);
		secret = lookup(conf_f.path, conf, conf_len, csec, "aws_secret_access_key", compare);
		token = lookup(conf_f.path, conf, conf_len, csec, "aws_session_token", compare);
	}
	region = lookup(conf_f.path, conf, conf_len, csec, "region", compare);
	found = user && secret && *user && *secret;
	if (compare && (malformed(cred, cred_len) || malformed(conf, conf_len)))
		found = 0; /* refused: s3_credentials reads both files here */
	if (compare && rc != (found ? KVT_EINVAL : KVT_ECONFIG))
		abort();
	free(user);
	free(secret);
	free(token);
	free(region);
	return 0;
}
