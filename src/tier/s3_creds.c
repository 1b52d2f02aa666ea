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
 * ~/.aws/config).  Returns a malloc'd value or NULL. */
static char *s3_ini_get(const char *path, const char *section, const char *key)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, *val = NULL;
	size_t cap = 0;
	int in = 0;

	if (!f)
		return NULL;
	/* getline: session tokens run past a kilobyte, and a cut one only
	 * shows up later as a 403. */
	while (!val && getline(&line, &cap, f) >= 0) {
		char *s = line, *e, *eq;
		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (*s == '#' || *s == ';' || !*s)
			continue;
		if (*s == '[') {
			char *z = strchr(s, ']');
			if (z) {
				*z = '\0';
				s++;
				while (isspace((unsigned char)*s))
					s++;
				in = !strcmp(s, section);
			}
			continue;
		}
		eq = strchr(s, '=');
		if (!in || !eq)
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
		val = strdup(s);
	}
	free(line);
	fclose(f);
	return val;
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
	const char *profile = getenv("AWS_PROFILE");
	char *cred = s3_aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	char *conf = s3_aws_file("AWS_CONFIG_FILE", "config");
	char csec[256];

	if (!profile || !*profile)
		profile = "default";
	if (!strcmp(profile, "default"))
		snprintf(csec, sizeof(csec), "default");
	else
		snprintf(csec, sizeof(csec), "profile %s", profile);

	if (o->access_key && o->secret_key) {
		t->user = strdup(o->access_key);
		t->secret = strdup(o->secret_key);
		*token = o->session_token ? strdup(o->session_token) : NULL;
	} else if (getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
		t->user = s3_dup_env("AWS_ACCESS_KEY_ID");
		t->secret = s3_dup_env("AWS_SECRET_ACCESS_KEY");
		*token = s3_dup_env("AWS_SESSION_TOKEN");
	} else if (cred) {
		t->user = s3_ini_get(cred, profile, "aws_access_key_id");
		t->secret = s3_ini_get(cred, profile, "aws_secret_access_key");
		*token = s3_ini_get(cred, profile, "aws_session_token");
		if (!t->user && conf) { /* keys may live in config too */
			t->user = s3_ini_get(conf, csec, "aws_access_key_id");
			free(t->secret);
			t->secret = s3_ini_get(conf, csec, "aws_secret_access_key");
			free(*token);
			*token = s3_ini_get(conf, csec, "aws_session_token");
		}
	}
	if (o->region && *o->region)
		t->region = strdup(o->region);
	else if (getenv("AWS_REGION") && *getenv("AWS_REGION"))
		t->region = s3_dup_env("AWS_REGION");
	else if (getenv("AWS_DEFAULT_REGION") && *getenv("AWS_DEFAULT_REGION"))
		t->region = s3_dup_env("AWS_DEFAULT_REGION");
	else if (conf)
		t->region = s3_ini_get(conf, csec, "region");
	if (!t->region)
		t->region = strdup("us-east-1");
	free(cred);
	free(conf);
	if (!t->user || !t->secret || !*t->user || !*t->secret)
		return kvt_err(KVT_ECONFIG,
			       "s3: no credentials: set access/secret key, AWS_ACCESS_KEY_ID and "
			       "AWS_SECRET_ACCESS_KEY, or profile [%s] in ~/.aws/credentials",
			       profile);
	return 0;
}
