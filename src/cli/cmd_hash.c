/*
 * cmd_hash.c — `kvtier hash`: the keys a token list would be stored under.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier hash [options] [TOKENS_FILE|-]\n\n"
		"Print one line per whole block of the token list (a JSON array or\n"
		"whitespace-separated ids below 2^32; stdin when no file; at most 64 MiB,\n"
		"read as a stream): block index, key in hex and, for sha256_cbor, the\n"
		"64-bit integer vLLM publishes in KV events.  A first line, starting\n"
		"with #, says what the keys are: the scheme and, for kvtier's keys, the\n"
		"model whose namespace they are in (--model; the same default as put\n"
		"and lookup).\n\n"
		"  --scheme S       sha256 (default) | xxh3: kvtier chain keys of the namespace\n"
		"                   sha256_cbor: vLLM's prefix-cache block hash\n"
		"  --block-size N   tokens per block, 1..1048576 (default: the config's chunk_size;\n"
		"                   16 for sha256_cbor, vLLM's default)\n"
		"  --seed S         PYTHONHASHSEED for sha256_cbor's NONE_HASH (default \"0\")\n"
		"  --salt S         cache salt (first block only)\n"
		"  --lora NAME      LoRA adapter name (an extra key of every block)\n"
		"  --models         list the model presets\n%s",
		cli_common_help);
}

enum { O_SCHEME = 0x100, O_SEED, O_SALT, O_LORA, O_BLOCK, O_MODELS };

struct hash_args {
	const char *scheme, *seed;
	kvt_extra_keys x;
	uint32_t bs;
};

static int hash_opt(void *arg, int id, const char *v)
{
	struct hash_args *h = arg;

	switch (id) {
	case O_SCHEME: h->scheme = v; break;
	case O_SEED: h->seed = v; break;
	case O_SALT: h->x.cache_salt = v; break;
	case O_LORA: h->x.lora = v; break;
	case O_BLOCK:
		if (cli_parse_u32("hash", "--block-size", v, 1, 1u << 20, &h->bs))
			return 2;
		break;
	case O_MODELS:
		cli_models_print(stdout);
		return 0;
	}
	return -1;
}

int cmd_hash(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "scheme", required_argument, NULL, O_SCHEME },
		{ "seed", required_argument, NULL, O_SEED },
		{ "salt", required_argument, NULL, O_SALT },
		{ "lora", required_argument, NULL, O_LORA },
		{ "block-size", required_argument, NULL, O_BLOCK },
		{ "models", no_argument, NULL, O_MODELS },
		{ 0 },
	};
	cli_common c = { 0 };
	struct hash_args ha = { .scheme = "sha256", .seed = "0" };
	uint32_t *tokens = NULL;
	size_t n = 0;
	int rc, first;

	rc = cli_getopt("hash", argc, argv, NULL, opts, &c, hash_opt, &ha, usage, &first);
	if (rc >= 0)
		return rc;
	if (argc - first > 1) {
		fprintf(stderr, "kvtier hash: one token file at most, not \"%s\" too\n", argv[first + 1]);
		return 2;
	}
	const char *scheme = ha.scheme, *seed = ha.seed, *path = first < argc ? argv[first] : "-";
	kvt_extra_keys x = ha.x;
	uint32_t bs = ha.bs;
	rc = 1;
	if (strcmp(scheme, "sha256") && strcmp(scheme, "xxh3") &&
	    strcmp(scheme, "sha256_cbor")) {
		fprintf(stderr, "kvtier hash: --scheme \"%s\": expected sha256, xxh3 or sha256_cbor\n",
			scheme);
		return 2;
	}
	if (cli_read_tokens(path, &tokens, &n))
		return 1;

	if (!strcmp(scheme, "sha256_cbor")) {
		uint8_t parent[32], h[32];
		if (!bs)
			bs = 16;
		kvt_vllm_none_hash(seed, parent);
		printf("# vLLM sha256_cbor block hashes, %u-token blocks, PYTHONHASHSEED \"%s\"%s%s%s: "
		       "block, hash, its 64-bit form in vLLM's KV events\n", bs, seed,
		       x.lora ? ", LoRA " : "", x.lora ? x.lora : "", x.cache_salt ? ", salted" : "");
		for (size_t b = 0; (b + 1) * bs <= n; b++) {
			kvt_key k;
			char hex[65];
			int e = kvt_vllm_block_hash(parent, tokens + b * bs, bs,
						    x.lora || x.cache_salt ? &x : NULL,
						    b == 0, h);
			if (e) {
				rc = cli_fail("hash", "sha256_cbor", e);
				goto out;
			}
			memcpy(k.b, h, 32);
			kvt_key_hex(&k, hex);
			printf("%zu %s %llu\n", b, hex,
			       (unsigned long long)kvt_vllm_hash_u64(h));
			memcpy(parent, h, 32);
		}
		rc = 0;
	} else {
		kvt_config *cfg;
		kvt_ns_desc d;
		kvt_ns ns;
		kvt_key *keys;
		int whole, e;

		if (bs)
			c.chunk = bs;
		if (cli_desc(&c, &d) || cli_config(&c, &cfg))
			goto out;
		d.hash_scheme = strcmp(scheme, "xxh3") ? KVT_HASH_SHA256 : KVT_HASH_XXH3;
		e = kvt_config_ns(cfg, &d, &ns);
		kvt_config_free(cfg);
		if (e) {
			rc = cli_fail("hash", "namespace", e);
			goto out;
		}
		keys = malloc(sizeof(*keys) * (n / ns.layout.chunk_tokens + 1));
		if (!keys)
			goto out;
		whole = kvt_key_chain(&ns, tokens, n, &x, keys, n / ns.layout.chunk_tokens + 1);
		if (whole < 0) {
			free(keys);
			rc = cli_fail("hash", "chain", whole);
			goto out;
		}
		char model[160];
		cli_model_label(&c, model, sizeof(model));
		printf("# kvtier chain keys (%s) of %s, %u-token chunks, tenant %s: chunk, key\n",
		       scheme, model, ns.layout.chunk_tokens, c.tenant ? c.tenant : "default");
		for (int b = 0; b < whole; b++) {
			char hex[65];
			kvt_key_hex(&keys[b], hex);
			printf("%d %s\n", b, hex);
		}
		free(keys);
		rc = 0;
	}
out:
	free(tokens);
	return rc;
}
