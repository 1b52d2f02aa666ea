/*
 * s3_creds.c — the S3 tier's credentials and region (s3_int.h): the
 * options, then AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
 * AWS_SESSION_TOKEN, then the shared credentials file
 * (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, section [PROFILE])
 * and the config file (AWS_CONFIG_FILE or ~/.aws/config, section
 * [profile PROFILE], or [default]), PROFILE being AWS_PROFILE or default.
 */
#include "tier/s3_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Find `key` in section `section` of an INI file (~/.aws/credentials,
 * ~/.aws/config): *val gets a malloc'd copy of the first match or NULL (no
 * file, no such key).  The whole file is read, so that a line that is
 * none of a comment ('#', ';'), a "[section]" or a "key = value" (or
 * "key: value") is
 * refused wherever it is, as the AWS CLI refuses it: KVT_ECONFIG naming
 * the file and the line.  An indented line is the continuation of a nested
 * value ("s3 =" then "  max_concurrent_requests = 10") and never refused.
 * 0 or KVT_ECONFIG (also KVT_ENOMEM). */
static int s3_ini_get(const char *path, const char *section, const char *key,
		      char **val)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	int in = 0, rc = 0;

	*val = NULL;
	if (!f)
		return 0;
	/* getline: session tokens run past a kilobyte, and a cut one only
	 * shows up later as a 403. */
	while (!rc && getline(&line, &cap, f) >= 0) {
		char *s = line, *e, *eq;
		int indented = isspace((unsigned char)*s);
		lineno++;
		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (*s == '#' || *s == ';' || !*s)
			continue;
		if (*s == '[') {
			char *z = strchr(s, ']');
			if (!z) {
				rc = kvt_err(KVT_ECONFIG,
					     "s3: %s line %u: '%.60s' opens a section without "
					     "closing it with ']'", path, lineno, s);
				break;
			}
			*z = '\0';
			s++;
			while (isspace((unsigned char)*s))
				s++;
			in = !strcmp(s, section);
			continue;
		}
		/* '=' or ':' splits, whichever comes first (as Python's
		 * configparser, which the AWS CLI reads these files with). */
		eq = s + strcspn(s, "=:");
		if (!*eq) {
			if (!indented)
				rc = kvt_err(KVT_ECONFIG,
					     "s3: %s line %u: '%.60s' is not a [section], a "
					     "'key = value' line or a comment", path, lineno, s);
			continue;
		}
		if (!in || *val)
			continue;
		*eq = '\0';
		e = eq;
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (strcmp(s, key))
			continue;
		s = eq + 1;
		while (isspace((unsigned char)*s))
			s++;
		if (!(*val = strdup(s)))
			rc = KVT_ENOMEM;
	}
	free(line);
	fclose(f);
	if (rc) {
		free(*val);
		*val = NULL;
	}
	return rc;
}

/* s3_ini_get of three keys into a[0..2], stopping at the first error. */
static int s3_ini_get3(const char *path, const char *section, const char *const keys[3],
		       char *a[3])
{
	int rc = 0, i;

	for (i = 0; i < 3; i++)
		a[i] = NULL;
	for (i = 0; i < 3 && !rc; i++)
		rc = s3_ini_get(path, section, keys[i], &a[i]);
	return rc;
}

static char *s3_aws_file(const char *env, const char *base)
{
	const char *p = getenv(env), *home = getenv("HOME");
	char buf[1024];

	if (p && *p)
		return strdup(p);
	if (!home)
		return NULL;
	snprintf(buf, sizeof(buf), "%s/.aws/%s", home, base);
	return strdup(buf);
}

static char *s3_dup_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? strdup(v) : NULL;
}

int s3_credentials(s3_tier *t, const kvt_s3_opts *o, char **token)
{
	static const char *const keys[3] = {
		"aws_access_key_id", "aws_secret_access_key", "aws_session_token",
	};
	const char *profile = getenv("AWS_PROFILE");
	char *cred = s3_aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	char *conf = s3_aws_file("AWS_CONFIG_FILE", "config");
	char csec[256], *v[3] = { NULL, NULL, NULL };
	int rc = 0;

	*token = NULL;
	if (!profile || !*profile)
		profile = "default";
	if (!strcmp(profile, "default"))
		snprintf(csec, sizeof(csec), "default");
	else
		snprintf(csec, sizeof(csec), "profile %s", profile);

	if (o->access_key && o->secret_key) {
		v[0] = strdup(o->access_key);
		v[1] = strdup(o->secret_key);
		v[2] = o->session_token ? strdup(o->session_token) : NULL;
	} else if (getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
		v[0] = s3_dup_env("AWS_ACCESS_KEY_ID");
		v[1] = s3_dup_env("AWS_SECRET_ACCESS_KEY");
		v[2] = s3_dup_env("AWS_SESSION_TOKEN");
	} else if (cred) {
		rc = s3_ini_get3(cred, profile, keys, v);
		if (!rc && !v[0] && conf) { /* keys may live in config too */
			for (int i = 0; i < 3; i++)
				free(v[i]);
			rc = s3_ini_get3(conf, csec, keys, v);
		}
	}
	t->user = v[0];
	t->secret = v[1];
	*token = v[2];
	if (rc)
		goto out;
	if (o->region && *o->region)
		t->region = strdup(o->region);
	else if (getenv("AWS_REGION") && *getenv("AWS_REGION"))
		t->region = s3_dup_env("AWS_REGION");
	else if (getenv("AWS_DEFAULT_REGION") && *getenv("AWS_DEFAULT_REGION"))
		t->region = s3_dup_env("AWS_DEFAULT_REGION");
	else if (conf)
		rc = s3_ini_get(conf, csec, "region", &t->region);
	if (!rc && !t->region && !(t->region = strdup("us-east-1")))
		rc = KVT_ENOMEM;
	if (!rc && (!t->user || !t->secret || !*t->user || !*t->secret))
		rc = kvt_err(KVT_ECONFIG,
			     "s3: no credentials: set access/secret key, AWS_ACCESS_KEY_ID and "
			     "AWS_SECRET_ACCESS_KEY, or both keys in profile [%s] of %s (or [%s] "
			     "of %s)",
			     profile, cred ? cred : "~/.aws/credentials", csec,
			     conf ? conf : "~/.aws/config");
out:
	free(cred);
	free(conf);
	return rc;
}
