/*
 * cmd_inspect.c — `kvtier inspect FILE...`: decode and verify object files.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "format/object.h"

static const char *dtype_name(uint32_t d)
{
	static const char *const n[] = { "?", "f16", "bf16", "f32", "fp8_e4m3",
					  "fp8_e5m2", "int8" };
	return d < sizeof(n) / sizeof(n[0]) ? n[d] : "?";
}

static int inspect_one(const char *path, int json)
{
	uint8_t *buf;
	size_t len;
	kvt_obj_hdr *h;
	char hex[65], ns[65];
	kvt_key nsk;
	int rc;

	if (cli_read_file(path, &buf, &len))
		return 1;
	h = malloc(sizeof(*h));
	if (!h) {
		free(buf);
		return 1;
	}
	rc = kvt_obj_decode(buf, len, h);
	free(buf);
	if (rc) {
		const char *d = kvt_errmsg();
		if (json)
			printf("{\"file\": \"%s\", \"ok\": false, \"error\": \"%s\"}\n", path,
			       kvt_strerror(rc));
		fprintf(stderr, "kvtier inspect: %s: %s%s%s%s\n", path, kvt_strerror(rc),
			*d ? " (" : "", d, *d ? ")" : "");
		free(h);
		return 1;
	}
	kvt_key_hex(&h->key, hex);
	memcpy(nsk.b, h->ns_digest, 32);
	kvt_key_hex(&nsk, ns);
	if (json) {
		printf("{\"file\": \"%s\", \"ok\": true, \"key\": \"%s\", \"namespace\": \"%s\", "
		       "\"version\": %u, \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
		       "\"dtype\": \"%s\", \"tokens\": %u, \"payload_bytes\": %llu}\n",
		       path, hex, ns, h->version, h->layout.num_layers, h->layout.num_kv_heads,
		       h->layout.head_dim, dtype_name(h->layout.dtype), h->token_count,
		       (unsigned long long)h->payload_len);
	} else {
		printf("%s: kvtier object v%u, verified\n"
		       "  key        %s\n  namespace  %s\n"
		       "  layout     %u layers x %u KV heads x %u dims, %s, %u plane(s), %u scale bytes\n"
		       "  tokens     %u (engine block %u)\n  payload    %llu bytes in %u layers\n",
		       path, h->version, hex, ns, h->layout.num_layers, h->layout.num_kv_heads,
		       h->layout.head_dim, dtype_name(h->layout.dtype), h->layout.kv_planes,
		       h->layout.scale_bytes, h->token_count, h->layout.block_size,
		       (unsigned long long)h->payload_len, h->n_layers);
	}
	free(h);
	return 0;
}

int cmd_inspect(int argc, char **argv)
{
	int json = 0, bad = 0, files = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: kvtier inspect [--json] FILE...\n\n"
			       "Decode each object file's header and verify every layer's checksum.\n"
			       "Exits 1 if any file is not a valid kvtier object, naming what is wrong.\n");
			return 0;
		}
		if (!strcmp(argv[i], "--json"))
			json = 1;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			continue;
		files++;
		bad |= inspect_one(argv[i], json);
	}
	if (!files) {
		fprintf(stderr, "usage: kvtier inspect [--json] FILE...\n");
		return 2;
	}
	return bad;
}
