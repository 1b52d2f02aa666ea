/*
 * test_s3_creds.c — where the S3 tier finds its credentials, against the
 * real S3 test server (s3rver behind tests/s3/server.js, SigV4 checked):
 * keys from the environment with AWS_SESSION_TOKEN, from the shared
 * credentials file and the config file that AWS_SHARED_CREDENTIALS_FILE
 * and AWS_CONFIG_FILE name, the profile AWS_PROFILE picks ([name] in the
 * credentials file, [profile name] in the config file, [default] in both),
 * the region from the profile, session tokens longer than any buffer sent
 * as X-Amz-Security-Token and accepted, and malformed files refused with
 * the file and line named.  A put and get prove the keys were the
 * server's; wrong keys are refused by its signature check.  (test_s3.c
 * covers a profile only in the config file and a wrong [default].)
 */
#include "test_s3_server.h"

static char dir[] = "/tmp/kvt_s3c_XXXXXX";
static char cred[300], conf[300];
static kvt_ns ns;

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* No keys anywhere but the files. */
static void clean_env(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
	setenv("AWS_CONFIG_FILE", conf, 1);
}

/* Open with the keys left to the environment and files (and the region,
 * if `region` is NULL): the open's code; on success a put and a get of
 * key `seed` must work. */
static int open_rt(const char *region, uint64_t seed)
{
	kvt_s3_opts o = s3t_opts("creds/");
	kvt_tier *t = NULL;
	kvt_key k = s3t_key(seed);
	uint8_t *img;
	uint64_t len;
	int rc;

	o.access_key = o.secret_key = NULL;
	o.region = region;
	rc = kvt_s3_open(&o, &t);
	if (rc)
		return rc;
	img = s3t_image(&ns, &k, seed, &len);
	CHECK(img != NULL);
	if (img) {
		CHECK_EQ(s3t_put(t, &k, img, len), 0);
		CHECK_EQ(s3t_get_cmp(t, &k, img, len), 0);
	}
	free(img);
	t->ops->close(t);
	return 0;
}

int main(void)
{
	char text[8192], tok[4001];
	int rc;

	if (!mkdtemp(dir))
		return 1;
	s3t_ns(&ns, 2, 8, 16);
	s3t_start(dir, (const char *const[]){ "kvt", NULL });
	atexit(s3t_stop);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	snprintf(cred, sizeof(cred), "%s/credentials", dir);
	snprintf(conf, sizeof(conf), "%s/config", dir);
	/* A session token of 4000 characters: longer than any header or
	 * line buffer would have kept whole. */
	for (size_t i = 0; i < sizeof(tok) - 1; i++)
		tok[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64];
	tok[sizeof(tok) - 1] = '\0';

	/* The environment: keys and a session token. */
	clean_env();
	write_file(cred, "");
	write_file(conf, "");
	setenv("AWS_ACCESS_KEY_ID", S3T_AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", S3T_SK, 1);
	setenv("AWS_SESSION_TOKEN", tok, 1);
	CHECK_EQ(open_rt("us-east-1", 1), 0);
	/* The environment wins over the files. */
	write_file(cred, "[default]\naws_access_key_id = WRONGKEY\naws_secret_access_key = x\n");
	CHECK_EQ(open_rt("us-east-1", 2), 0);

	/* [default] of the credentials file, with its session token; the
	 * region from [default] of the config file. */
	clean_env();
	snprintf(text, sizeof(text),
		 "; written by hand\n[default]\naws_access_key_id = %s\n"
		 "aws_secret_access_key=%s\naws_session_token =   %s\n", S3T_AK, S3T_SK, tok);
	write_file(cred, text);
	write_file(conf, "[default]\nregion = us-east-1\n"
			 "s3 =\n    max_concurrent_requests = 10\n"
			 "[profile other]\nregion = eu-west-1\n");
	CHECK_EQ(open_rt(NULL, 3), 0);

	/* AWS_PROFILE: [name] in the credentials file; its region from
	 * [profile name] in the config file, where [name] alone is not that
	 * profile (the error names the region the keys were tried with). */
	clean_env();
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
		 "[ops]\naws_access_key_id = WRONGOPS\naws_secret_access_key = x\n",
		 S3T_AK, S3T_SK);
	write_file(cred, text);
	write_file(conf, "[ops]\nregion = ap-south-1\n[profile ops]\nregion = eu-west-1\n");
	setenv("AWS_PROFILE", "ops", 1);
	CHECK_EQ(open_rt(NULL, 4), -EACCES);
	CHECK(strstr(kvt_errmsg(), "WRONGOPS") != NULL);
	CHECK(strstr(kvt_errmsg(), "region 'eu-west-1'") != NULL);
	setenv("AWS_PROFILE", "default", 1);
	CHECK_EQ(open_rt(NULL, 5), 0);

	/* Keys only in the config file under [default]. */
	clean_env();
	write_file(cred, "[someone-else]\naws_access_key_id = X\naws_secret_access_key = Y\n");
	snprintf(text, sizeof(text),
		 "[default]\nregion: us-east-1\naws_access_key_id: %s\n"
		 "aws_secret_access_key = %s\naws_session_token = %s\n", S3T_AK, S3T_SK, tok);
	write_file(conf, text);
	CHECK_EQ(open_rt(NULL, 6), 0);

	/* A profile found nowhere: no credentials, naming both files. */
	setenv("AWS_PROFILE", "nobody", 1);
	CHECK_EQ(open_rt(NULL, 7), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "[nobody]") != NULL);
	CHECK(strstr(kvt_errmsg(), cred) != NULL);
	CHECK(strstr(kvt_errmsg(), "[profile nobody]") != NULL);

	/* Files that name no file: no credentials either. */
	clean_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	CHECK_EQ(open_rt("us-east-1", 8), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "no credentials") != NULL);

	/* Malformed files: refused, naming the file and the line, even where
	 * the keys sought come before the bad line. */
	clean_env();
	snprintf(text, sizeof(text),
		 "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
		 "aws_session_token %s\n", S3T_AK, S3T_SK, "tok");
	write_file(cred, text);
	write_file(conf, "");
	rc = open_rt("us-east-1", 9);
	CHECK_EQ(rc, KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), cred) != NULL);
	CHECK(strstr(kvt_errmsg(), "line 4") != NULL);
	CHECK(strstr(kvt_errmsg(), "not a [section], a 'key = value' line or a comment") != NULL);
	snprintf(text, sizeof(text),
		 "[default\naws_access_key_id = %s\naws_secret_access_key = %s\n", S3T_AK, S3T_SK);
	write_file(cred, text);
	CHECK_EQ(open_rt("us-east-1", 10), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), "line 1") != NULL);
	CHECK(strstr(kvt_errmsg(), "without closing it with ']'") != NULL);
	/* A malformed config file is refused when the region is read from it. */
	snprintf(text, sizeof(text), "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		 S3T_AK, S3T_SK);
	write_file(cred, text);
	write_file(conf, "[default]\nregion us-east-1\n");
	CHECK_EQ(open_rt(NULL, 11), KVT_ECONFIG);
	CHECK(strstr(kvt_errmsg(), conf) != NULL);
	CHECK(strstr(kvt_errmsg(), "line 2") != NULL);
	/* ...and not read at all when the region is given. */
	CHECK_EQ(open_rt("us-east-1", 12), 0);

	clean_env();
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	s3t_rmdir(dir);
	curl_global_cleanup();
	TEST_DONE();
}
