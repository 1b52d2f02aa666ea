/*
 * cmd_inspect.c — `kvtier inspect FILE...`: decode and verify object files.
 *
 * A file is read in the order its own header allows, so that what is read
 * is bounded by what it declares, never by the file: the 4 KiB header
 * first (a file that is not an object — /dev/zero, a log — is refused
 * there), then exactly the declared payload (at most KVT_OBJ_MAX_PAYLOAD,
 * which the decoder enforces), then at most one byte more than an HMAC
 * trailer, to tell an object signed for a shared tier (docs/SHAREDFS.md)
 * from one with trailing bytes.  Regular files, pipes and "-" (stdin) are
 * read; a directory is refused by name.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/auth.h"
#include "format/object.h"
#include "store/config.h"

static const char *dtype_name(uint32_t d)
{
	static const char *const n[] = { "?", "f16", "bf16", "f32", "fp8_e4m3",
					  "fp8_e5m2", "int8" };
	return d < sizeof(n) / sizeof(n[0]) ? n[d] : "?";
}

/* Read up to n bytes (fewer only at end of file).  The count, or -1. */
static ssize_t read_upto(int fd, uint8_t *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* A JSON string of `s` (paths may hold quotes and backslashes). */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int report_bad(const char *path, int json, const char *what, const char *detail)
{
	if (json) {
		printf("{\"file\": ");
		json_str(path);
		printf(", \"ok\": false, \"error\": ");
		json_str(what);
		printf(", \"detail\": ");
		json_str(detail);
		printf("}\n");
	}
	fprintf(stderr, "kvtier inspect: %s: %s%s%s%s\n", path, what, *detail ? " (" : "",
		detail, *detail ? ")" : "");
	return 1;
}

/* The authentication key, if one is configured: `key` NULL when not. */
struct auth {
	const uint8_t *key;
	size_t klen;
};

static int inspect_one(const char *path, int json, const struct auth *au)
{
	char hex[65], ns[65], detail[256];
	uint8_t *buf = NULL;
	kvt_obj_hdr *h = NULL;
	struct stat st;
	kvt_key nsk;
	const char *sig = "unsigned";
	int fd, rc, ret = 1;

	fd = strcmp(path, "-") ? open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC) : 0;
	if (fd < 0)
		return report_bad(path, json, strerror(errno), "");
	if (fstat(fd, &st))
		memset(&st, 0, sizeof(st)); /* then read as a stream */
	if (S_ISDIR(st.st_mode)) {
		ret = report_bad(path, json, "a directory, not an object file", "");
		goto out;
	}
	h = malloc(sizeof(*h));
	buf = malloc(KVT_OBJ_HEADER_BYTES);
	if (!h || !buf) {
		ret = report_bad(path, json, "out of memory", "");
		goto out;
	}
	ssize_t got = read_upto(fd, buf, KVT_OBJ_HEADER_BYTES);
	if (got < 0) {
		ret = report_bad(path, json, strerror(errno), "");
		goto out;
	}
	rc = kvt_obj_hdr_decode(buf, (size_t)got, h);
	if (rc) {
		ret = report_bad(path, json, kvt_strerror(rc), kvt_errmsg());
		goto out;
	}

	/* The header is valid: the declared image, plus room for a trailer
	 * and one byte more. */
	uint64_t image = (uint64_t)h->header_len + h->payload_len;
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size < image) {
		kvt_obj_size_why(detail, sizeof(detail), (uint64_t)st.st_size, image);
		ret = report_bad(path, json, kvt_strerror(KVT_ETRUNCATED), detail);
		goto out;
	}
	size_t room = (size_t)image + KVT_OBJ_AUTH_TAG_BYTES + 1;
	uint8_t *nb = realloc(buf, room);
	if (!nb) {
		snprintf(detail, sizeof(detail), "the header declares %llu bytes",
			 (unsigned long long)image);
		ret = report_bad(path, json, "out of memory", detail);
		goto out;
	}
	buf = nb;
	got = read_upto(fd, buf + KVT_OBJ_HEADER_BYTES, room - KVT_OBJ_HEADER_BYTES);
	if (got < 0) {
		ret = report_bad(path, json, strerror(errno), "");
		goto out;
	}
	uint64_t len = KVT_OBJ_HEADER_BYTES + (uint64_t)got;
	if (len < image) {
		kvt_obj_size_why(detail, sizeof(detail), len, image);
		ret = report_bad(path, json, kvt_strerror(KVT_ETRUNCATED), detail);
		goto out;
	}
	uint64_t extra = len - image;
	if (extra && extra != KVT_OBJ_AUTH_TAG_BYTES) {
		/* Say exactly how many: a regular file knows, a pipe is counted
		 * to the bound read. */
		char why[160];
		if (S_ISREG(st.st_mode) && (uint64_t)st.st_size >= image)
			kvt_obj_size_why(why, sizeof(why), (uint64_t)st.st_size, image);
		else
			snprintf(why, sizeof(why),
				 "header says %llu bytes (trailing bytes: %s%llu bytes after the declared object)",
				 (unsigned long long)image,
				 extra > KVT_OBJ_AUTH_TAG_BYTES ? "more than " : "",
				 (unsigned long long)(extra > KVT_OBJ_AUTH_TAG_BYTES ? extra - 1 : extra));
		snprintf(detail, sizeof(detail), "%s; an HMAC trailer is exactly %u bytes", why,
			 KVT_OBJ_AUTH_TAG_BYTES);
		ret = report_bad(path, json, detail, "");
		goto out;
	}
	rc = kvt_obj_decode(buf, (size_t)image, h); /* every layer's checksum */
	if (rc) {
		ret = report_bad(path, json, kvt_strerror(rc), kvt_errmsg());
		goto out;
	}
	if (extra && au->key) {
		struct iovec img = { buf, (size_t)image };
		rc = kvt_obj_auth_verify(&img, 1, au->key, au->klen, buf + image);
		if (rc == KVT_ECORRUPT) {
			ret = report_bad(path, json, "HMAC tag does not verify",
					 "signed with another object_auth_key, or altered after signing");
			goto out;
		}
		if (rc) {
			ret = report_bad(path, json, kvt_strerror(rc), kvt_errmsg());
			goto out;
		}
		sig = "signed, HMAC verified";
	} else if (extra) {
		sig = "signed (32-byte HMAC trailer), key not given: tag not checked "
		      "(--set object_auth_key=HEX)";
	} else if (au->key) {
		sig = "unsigned (no HMAC trailer; a tier with object_auth_key refuses it)";
	}

	kvt_key_hex(&h->key, hex);
	memcpy(nsk.b, h->ns_digest, 32);
	kvt_key_hex(&nsk, ns);
	if (json) {
		printf("{\"file\": ");
		json_str(path);
		printf(", \"ok\": true, \"key\": \"%s\", \"namespace\": \"%s\", "
		       "\"version\": %u, \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
		       "\"dtype\": \"%s\", \"tokens\": %u, \"payload_bytes\": %llu, "
		       "\"signed\": %s, \"signature\": \"%s\"}\n",
		       hex, ns, h->version, h->layout.num_layers, h->layout.num_kv_heads,
		       h->layout.head_dim, dtype_name(h->layout.dtype), h->token_count,
		       (unsigned long long)h->payload_len, extra ? "true" : "false",
		       !extra ? "none" : au->key ? "verified" : "not checked");
	} else {
		printf("%s: kvtier object v%u, verified\n"
		       "  key        %s\n  namespace  %s\n"
		       "  layout     %u layers x %u KV heads x %u dims, %s, %u plane(s), %u scale bytes\n"
		       "  tokens     %u (engine block %u)\n  payload    %llu bytes in %u layers\n"
		       "  signature  %s\n",
		       path, h->version, hex, ns, h->layout.num_layers, h->layout.num_kv_heads,
		       h->layout.head_dim, dtype_name(h->layout.dtype), h->layout.kv_planes,
		       h->layout.scale_bytes, h->token_count, h->layout.block_size,
		       (unsigned long long)h->payload_len, h->n_layers, sig);
	}
	ret = 0;
out:
	free(buf);
	free(h);
	if (fd > 0)
		close(fd);
	return ret;
}

static const char inspect_help[] =
	"usage: kvtier inspect [--json] [--config FILE] [--set object_auth_key=HEX] FILE...\n\n"
	"Decode each object file's header and verify every layer's checksum.  An\n"
	"object signed for a shared tier (a 32-byte HMAC trailer) is verified when\n"
	"object_auth_key is given (--set, --config or KVTIER_OBJECT_AUTH_KEY), and\n"
	"reported as signed, tag not checked, otherwise.  What is read is bounded by\n"
	"the header: 4 KiB, then the declared payload (at most 16 GiB), then at most\n"
	"33 bytes.  Exits 1 if any file is not a valid kvtier object, naming what is\n"
	"wrong.\n";

int cmd_inspect(int argc, char **argv)
{
	cli_common cc;
	kvt_config *cfg = NULL;
	struct auth au = { NULL, 0 };
	int json = 0, bad = 0, files = 0;
	char **paths = calloc((size_t)argc, sizeof(*paths));

	if (!paths)
		return 1;
	memset(&cc, 0, sizeof(cc));
	for (int i = 1; i < argc; i++) {
		int r = cli_common_arg(&cc, argc, argv, &i);
		if (r < 0) {
			free(paths);
			return 2;
		}
		if (r)
			continue;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(inspect_help, stdout);
			free(paths);
			return 0;
		} else if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "kvtier inspect: unknown option \"%s\"\n\n%s", argv[i],
				inspect_help);
			free(paths);
			return 2;
		} else {
			paths[files++] = argv[i];
		}
	}
	if (!files) {
		fputs(inspect_help, stderr);
		free(paths);
		return 2;
	}
	/* Only the key is taken from the configuration: no store is opened. */
	if (cli_config(&cc, &cfg)) {
		free(paths);
		return 2;
	}
	if (cfg->object_auth_key_len) {
		au.key = cfg->object_auth_key;
		au.klen = cfg->object_auth_key_len;
	}
	for (int i = 0; i < files; i++)
		bad |= inspect_one(paths[i], json, &au);
	kvt_config_free(cfg);
	free(paths);
	return bad;
}
