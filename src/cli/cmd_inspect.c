/*
 * cmd_inspect.c — `kvtier inspect FILE...`: decode and verify object files.
 *
 * The reading and verifying is the library's (kvt_object_inspect_fd):
 * a file is read in the order its own header allows, so that what is read
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

#include "cli.h"

static int report_bad(const char *path, int json, const char *what, const char *detail)
{
	if (json)
		cli_json_print(json_pack("{s:s, s:b, s:s, s:s}", "file", path, "ok", 0, "error", what,
					 "detail", detail));
	fprintf(stderr, "kvtier inspect: %s: %s%s%s%s\n", path, what, *detail ? " (" : "",
		detail, *detail ? ")" : "");
	return 1;
}

static const char *const sig_text[] = {
	[KVT_SIG_NONE] = "unsigned",
	[KVT_SIG_VERIFIED] = "signed, HMAC verified",
	[KVT_SIG_UNCHECKED] = ("signed (32-byte HMAC trailer), key not given: tag not checked "
			       "(--set object_auth_key=HEX)"),
	[KVT_SIG_MISSING] = "unsigned (no HMAC trailer; a tier with object_auth_key refuses it)",
};
static const char *const sig_json[] = {
	[KVT_SIG_NONE] = "none", [KVT_SIG_VERIFIED] = "verified",
	[KVT_SIG_UNCHECKED] = "not checked", [KVT_SIG_MISSING] = "none",
};

static int inspect_one(const char *path, int json, const kvt_config *cfg)
{
	char hex[65], ns[65];
	kvt_object_info in;
	kvt_key nsk;
	struct stat st;
	int fd, rc;

	fd = strcmp(path, "-") ? open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC) : 0;
	if (fd < 0)
		return report_bad(path, json, strerror(errno), "");
	if (!fstat(fd, &st) && S_ISDIR(st.st_mode)) {
		close(fd);
		return report_bad(path, json, "a directory, not an object file", "");
	}
	rc = kvt_object_inspect_fd(fd, cfg, &in);
	if (fd > 0)
		close(fd);
	if (rc == KVT_EMALFORMED && *kvt_errmsg()) /* the sentence says it all: */
		return report_bad(path, json, kvt_errmsg(), ""); /* "malformed header" would mislead on trailing bytes */
	if (rc)
		return report_bad(path, json, kvt_strerror(rc), kvt_errmsg());

	const kvt_layout *l = &in.layout;
	int signed_ = in.signature == KVT_SIG_VERIFIED || in.signature == KVT_SIG_UNCHECKED;
	kvt_key_hex(&in.key, hex);
	memcpy(nsk.b, in.ns_digest, sizeof(nsk.b));
	kvt_key_hex(&nsk, ns);
	if (json) {
		cli_json_print(json_pack("{s:s, s:b, s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:i, s:I, s:b, s:s}",
					 "file", path, "ok", 1, "key", hex, "namespace", ns,
					 "version", (int)in.version, "layers", (int)l->num_layers,
					 "kv_heads", (int)l->num_kv_heads, "head_dim", (int)l->head_dim,
					 "dtype", kvt_dtype_name(l->dtype), "tokens", (int)l->chunk_tokens,
					 "payload_bytes", (json_int_t)in.payload_bytes, "signed", signed_,
					 "signature", sig_json[in.signature]));
	} else {
		printf("%s: kvtier object v%u, verified\n"
		       "  key        %s\n  namespace  %s\n"
		       "  layout     %u layers x %u KV heads x %u dims, %s, %u plane(s), %u scale bytes\n"
		       "  tokens     %u (engine block %u)\n  payload    %llu bytes in %u layers\n"
		       "  signature  %s\n",
		       path, in.version, hex, ns, l->num_layers, l->num_kv_heads, l->head_dim,
		       kvt_dtype_name(l->dtype), l->kv_planes, l->scale_bytes, l->chunk_tokens,
		       l->block_size, (unsigned long long)in.payload_bytes, in.n_layers,
		       sig_text[in.signature]);
	}
	return 0;
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

static void inspect_usage(FILE *f)
{
	fputs(inspect_help, f);
}

static int inspect_opt(void *arg, int id, const char *v)
{
	(void)id; /* --json, the only option of its own */
	(void)v;
	*(int *)arg = 1;
	return -1;
}

int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = { { "json", no_argument, NULL, 0x100 }, { 0 } };
	cli_common cc;
	kvt_config *cfg = NULL;
	int json = 0, bad = 0, first;

	memset(&cc, 0, sizeof(cc));
	int rc = cli_getopt("inspect", argc, argv, NULL, opts, &cc, inspect_opt, &json,
			    inspect_usage, &first);
	if (rc >= 0)
		return rc;
	if (first == argc) {
		inspect_usage(stderr);
		return 2;
	}
	/* Only the key is taken from the configuration: no store is opened. */
	if (cli_config(&cc, &cfg))
		return 2;
	for (int i = first; i < argc; i++)
		bad |= inspect_one(argv[i], json, cfg);
	kvt_config_free(cfg);
	return bad;
}
