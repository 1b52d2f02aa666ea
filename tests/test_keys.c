/*
 * test_keys.c — chain keys, namespaces, tenants, and vLLM's sha256_cbor
 * reproduced against hashes vLLM itself published.
 */
#include <stdlib.h>
#include <string.h>

#include "key/key.h"
#include "test.h"

/* --- a scanner for the two fields we need from the KV-event JSON files --- */

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long n;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)n + 1);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	if (b)
		b[n] = '\0';
	fclose(f);
	return b;
}

/* The integers of the JSON array under "key". */
static size_t json_u64s(const char *doc, const char *key, uint64_t *out,
			size_t max)
{
	char pat[64];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": [", key);
	p = strstr(doc, pat);
	if (!p)
		return 0;
	p += strlen(pat);
	while (*p && *p != ']' && n < max) {
		char *end;
		unsigned long long v = strtoull(p, &end, 10);
		if (end == p) {
			p++;
			continue;
		}
		out[n++] = v;
		p = end;
	}
	return n;
}

static const char *json_str(const char *doc, const char *key, char *buf,
			    size_t len)
{
	char pat[64];
	const char *p, *e;
	snprintf(pat, sizeof(pat), "\"%s\": \"", key);
	p = strstr(doc, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	e = strchr(p, '"');
	if (!e || (size_t)(e - p) >= len)
		return NULL;
	memcpy(buf, p, (size_t)(e - p));
	buf[e - p] = '\0';
	return buf;
}

static void check_vllm_events(const char *file)
{
	char path[1024], seed[64], lora[64];
	const char *dir = getenv("KVT_TEST_DATA");
	uint64_t tok64[1024], want[128], bs[1];
	uint32_t tokens[1024];
	uint8_t parent[32], h[32];
	kvt_extra_keys x = { 0 };
	size_t nt, nh;
	char *doc;

	snprintf(path, sizeof(path), "%s/vllm/%s", dir ? dir : "tests/data", file);
	doc = slurp(path);
	if (!doc) {
		fprintf(stderr, "cannot read %s (set KVT_TEST_DATA)\n", path);
		test_failures++;
		return;
	}
	nt = json_u64s(doc, "token_ids", tok64, 1024);
	nh = json_u64s(doc, "block_hashes", want, 128);
	CHECK(json_str(doc, "hash_seed", seed, sizeof(seed)) != NULL);
	CHECK(sscanf(strstr(doc, "\"block_size\": ") + 14, "%lu", (unsigned long *)bs) == 1);
	CHECK(nt == 400 && nh == 25 && bs[0] == 16);
	if (json_str(doc, "lora_name", lora, sizeof(lora)))
		x.lora = lora;
	for (size_t i = 0; i < nt; i++)
		tokens[i] = (uint32_t)tok64[i];

	kvt_vllm_none_hash(seed, parent);
	for (size_t b = 0; b < nh; b++) {
		CHECK_EQ(kvt_vllm_block_hash(parent, tokens + b * bs[0], bs[0],
					     x.lora ? &x : NULL, b == 0, h), 0);
		if (kvt_vllm_hash_u64(h) != want[b]) {
			fprintf(stderr, "%s block %zu: got %llu, vLLM published %llu\n",
				file, b, (unsigned long long)kvt_vllm_hash_u64(h),
				(unsigned long long)want[b]);
			test_failures++;
		}
		memcpy(parent, h, 32); /* the chain uses the full digest */
	}
	free(doc);
}

static void hex32(const uint8_t *h, char out[65])
{
	kvt_key k;
	memcpy(k.b, h, 32);
	kvt_key_hex(&k, out);
}

/* Golden digests from other projects' vLLM compatibility tests (see
 * tests/data/vllm/README.md for provenance). */
static void check_vllm_golden(void)
{
	uint8_t none[32], h[32];
	uint32_t t[300];
	char hex[65];

	/* PYTHONHASHSEED unset on recent vLLM: seed "vllm-none-hash"; block
	 * size 128; tokens (i*7919+13) % 152064. */
	kvt_vllm_none_hash("vllm-none-hash", none);
	hex32(none, hex);
	CHECK(!strcmp(hex, "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0"));
	for (int i = 0; i < 300; i++)
		t[i] = (uint32_t)((i * 7919 + 13) % 152064);
	CHECK_EQ(kvt_vllm_block_hash(none, t, 128, NULL, 1, h), 0);
	hex32(h, hex);
	CHECK(!strcmp(hex, "3c922374e6fe67f3c64e75b88a3b8bd6185b538f7019674b72aefbf8dd8754f8"));
	CHECK(kvt_vllm_hash_u64(h) == 8263819412558533880ull);
	CHECK_EQ(kvt_vllm_block_hash(h, t + 128, 128, NULL, 0, h), 0);
	hex32(h, hex);
	CHECK(!strcmp(hex, "2e69fa8c8aebe362593b51b8b212f1aeb45f9bb56c4258c0bf2a94f1e384e2a5"));

	/* Seed "0", tokens 1..8, block size 4, LoRA on every block and the
	 * cache salt on the first only (cbor2-generated vectors). */
	{
		uint32_t s[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
		kvt_extra_keys x = { .lora = "adapter-A", .cache_salt = "tenant-salt" };
		kvt_vllm_none_hash("0", none);
		hex32(none, hex);
		CHECK(!strcmp(hex, "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"));
		CHECK_EQ(kvt_vllm_block_hash(none, s, 4, &x, 1, h), 0);
		hex32(h, hex);
		CHECK(!strcmp(hex, "22977da6c71098507264dbf4161d451c2d98494c5c146717f36787e184b36040"));
		CHECK_EQ(kvt_vllm_block_hash(h, s + 4, 4, &x, 0, h), 0);
		hex32(h, hex);
		CHECK(!strcmp(hex, "6a3cd7de2626c2d2982eb5bc9d4878a49745c3784bde8a2334ffac47286bb866"));
		/* salt only */
		x.lora = NULL;
		CHECK_EQ(kvt_vllm_block_hash(none, s, 4, &x, 1, h), 0);
		hex32(h, hex);
		CHECK(!strcmp(hex, "3be45574566e2f3c51c9f254d9627cf113382b627aeaefe8b661d66cfa089359"));
		/* 24-byte LoRA name: the first text length that needs a
		 * one-byte length argument in CBOR. */
		x.lora = "aaaaaaaaaaaaaaaaaaaaaaaa";
		x.cache_salt = NULL;
		CHECK_EQ(kvt_vllm_block_hash(none, s, 4, &x, 1, h), 0);
		hex32(h, hex);
		CHECK(!strcmp(hex, "553263ebbf33660ecba67f9fcabea06d20cca3a71c79abf6e1894d39c7fa8ff8"));
	}
	/* 24 tokens: the array length itself needs a one-byte argument. */
	{
		uint32_t s[24];
		for (int i = 0; i < 24; i++)
			s[i] = (uint32_t)i;
		CHECK_EQ(kvt_vllm_block_hash(none, s, 24, NULL, 1, h), 0);
		hex32(h, hex);
		CHECK(!strcmp(hex, "792917e681c347b21bebfdd57cabcca6b79c865f83ccd2cfbd9cb56ffed2b088"));
	}
}

static kvt_ns_desc base_desc(void)
{
	kvt_ns_desc d = { 0 };
	d.model = "m";
	d.layout = (kvt_layout){ .num_layers = 4, .num_kv_heads = 2, .head_dim = 8,
				 .dtype = KVT_DTYPE_BF16, .kv_planes = 2,
				 .block_size = 16, .chunk_tokens = 32 };
	d.tp_size = 1;
	d.pp_size = 1;
	return d;
}

static void ns_digest(const kvt_ns_desc *d, const char *secret, uint8_t out[32])
{
	kvt_ns ns;
	CHECK_EQ(kvt_ns_derive(d, (const uint8_t *)secret, strlen(secret), &ns), 0);
	memcpy(out, ns.digest, 32);
}

/* Every field of the namespace changes its digest. */
static void check_namespace(void)
{
	kvt_ns_desc d = base_desc(), v;
	uint8_t base[32], other[32];
	kvt_ns ns;

	ns_digest(&d, "", base);
#define DIFFERS(mutation)                                                    \
	do {                                                                 \
		v = d;                                                       \
		mutation;                                                    \
		ns_digest(&v, "", other);                                    \
		if (!memcmp(base, other, 32)) {                              \
			fprintf(stderr, "namespace digest ignores: %s\n", #mutation); \
			test_failures++;                                     \
		}                                                            \
	} while (0)
	DIFFERS(v.model = "m2");
	DIFFERS(v.revision = "abc");
	DIFFERS(v.revision = "");
	DIFFERS(v.layout.num_layers = 5);
	DIFFERS(v.layout.num_kv_heads = 4);
	DIFFERS(v.layout.head_dim = 16);
	DIFFERS(v.layout.dtype = KVT_DTYPE_F16);
	DIFFERS(v.layout.kv_planes = 1);
	DIFFERS(v.layout.scale_bytes = 64);
	DIFFERS(v.layout.block_size = 32);
	DIFFERS(v.layout.chunk_tokens = 64);
	DIFFERS((v.tp_size = 2, v.tp_rank = 1));
	DIFFERS(v.tp_size = 2);
	DIFFERS((v.pp_size = 2, v.pp_rank = 1));
	DIFFERS(v.lora = "adapter");
	DIFFERS(v.tenant = "t");
	DIFFERS(v.hash_scheme = KVT_HASH_XXH3);
#undef DIFFERS
	/* The same description under another tenant secret is another
	 * namespace: a client cannot reach a tenant's keys without it. */
	ns_digest(&d, "0123456789abcdef0123456789abcdef", other);
	CHECK(memcmp(base, other, 32) != 0);
	ns_digest(&d, "", other);
	CHECK(memcmp(base, other, 32) == 0);

	v = d;
	v.layout.chunk_tokens = 40; /* not a multiple of 16 */
	CHECK_EQ(kvt_ns_derive(&v, NULL, 0, &ns), KVT_ELAYOUT);
	CHECK(strstr(kvt_errmsg(), "multiple") != NULL);
	v = d;
	v.tp_rank = 1;
	CHECK_EQ(kvt_ns_derive(&v, NULL, 0, &ns), KVT_EINVAL);
	v = d;
	v.model = NULL;
	CHECK_EQ(kvt_ns_derive(&v, NULL, 0, &ns), KVT_EINVAL);
	v = d;
	v.layout.dtype = 99;
	CHECK_EQ(kvt_ns_derive(&v, NULL, 0, &ns), KVT_ELAYOUT);
}

static void check_chain(uint32_t scheme)
{
	kvt_ns_desc d = base_desc();
	kvt_ns ns, ns2;
	uint32_t t[32 * 5 + 7];
	kvt_key a[8], b[8], one;
	kvt_extra_keys x = { 0 };
	kvt_mm_hash mm = { "img-1", 3 };

	d.hash_scheme = scheme;
	CHECK_EQ(kvt_ns_derive(&d, NULL, 0, &ns), 0);
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		t[i] = (uint32_t)(i * 31 + 7);
	/* Only whole chunks are keyed: the 7-token tail is recomputed. */
	CHECK_EQ(kvt_key_chain(&ns, t, sizeof(t) / sizeof(t[0]), NULL, a, 8), 5);
	/* A prefix's keys are the first keys of the longer prompt's. */
	CHECK_EQ(kvt_key_chain(&ns, t, 64, NULL, b, 8), 2);
	CHECK(!memcmp(a, b, 2 * sizeof(kvt_key)));
	/* Chain = chunk by chunk with the parent. */
	CHECK_EQ(kvt_key_chunk(&ns, NULL, t, 32, NULL, &one), 0);
	CHECK(!memcmp(&one, &a[0], sizeof(one)));
	CHECK_EQ(kvt_key_chunk(&ns, &a[0], t + 32, 32, NULL, &one), 0);
	CHECK(!memcmp(&one, &a[1], sizeof(one)));
	CHECK_EQ(kvt_key_chunk(&ns, NULL, t, 31, NULL, &one), KVT_EINVAL);
	/* A change in chunk 1 changes key 1 and every key after it. */
	t[40] ^= 1;
	CHECK_EQ(kvt_key_chain(&ns, t, 160, NULL, b, 8), 5);
	CHECK(!memcmp(&a[0], &b[0], sizeof(kvt_key)));
	for (int i = 1; i < 5; i++)
		CHECK(memcmp(&a[i], &b[i], sizeof(kvt_key)) != 0);
	t[40] ^= 1;
	/* Extra keys: salt on the first chunk changes them all; LoRA too;
	 * a multimodal item at another offset is another key. */
	x.cache_salt = "s";
	CHECK_EQ(kvt_key_chain(&ns, t, 160, &x, b, 8), 5);
	for (int i = 0; i < 5; i++)
		CHECK(memcmp(&a[i], &b[i], sizeof(kvt_key)) != 0);
	x.cache_salt = NULL;
	x.mm = &mm;
	x.n_mm = 1;
	CHECK_EQ(kvt_key_chunk(&ns, NULL, t, 32, &x, &one), 0);
	CHECK(memcmp(&one, &a[0], sizeof(one)) != 0);
	mm.offset = 4;
	CHECK_EQ(kvt_key_chunk(&ns, NULL, t, 32, &x, &b[0]), 0);
	CHECK(memcmp(&one, &b[0], sizeof(one)) != 0);
	/* Another namespace, same tokens: other keys. */
	d.model = "other";
	CHECK_EQ(kvt_ns_derive(&d, NULL, 0, &ns2), 0);
	CHECK_EQ(kvt_key_chain(&ns2, t, 160, NULL, b, 8), 5);
	CHECK(memcmp(&a[0], &b[0], sizeof(kvt_key)) != 0);
	if (scheme == KVT_HASH_XXH3) {
		static const uint8_t zero[16];
		CHECK(!memcmp(a[0].b + 16, zero, 16));
	}
	/* Engine hashes are wrapped with the namespace. */
	{
		uint8_t eh[32] = { 1, 2, 3 };
		kvt_key k1, k2;
		CHECK_EQ(kvt_key_from_engine_hash(&ns, eh, 32, &k1), 0);
		CHECK_EQ(kvt_key_from_engine_hash(&ns2, eh, 32, &k2), 0);
		CHECK(memcmp(&k1, &k2, sizeof(k1)) != 0);
		CHECK(memcmp(k1.b, eh, 32) != 0);
		CHECK_EQ(kvt_key_from_engine_hash(&ns, eh, 0, &k1), KVT_EINVAL);
	}
}

static void check_hex(void)
{
	kvt_key k, r;
	char hex[65];
	for (int i = 0; i < 32; i++)
		k.b[i] = (uint8_t)(i * 37 + 5);
	kvt_key_hex(&k, hex);
	CHECK_EQ(kvt_key_parse(hex, &r), 0);
	CHECK(!memcmp(&k, &r, sizeof(k)));
	CHECK_EQ(kvt_key_parse("abc", &r), KVT_EINVAL);
	hex[10] = 'g';
	CHECK_EQ(kvt_key_parse(hex, &r), KVT_EINVAL);
	CHECK(strstr(kvt_errmsg(), "hex") != NULL);
}

int main(void)
{
	check_vllm_events("kv_event_base.json");
	check_vllm_events("kv_event_lora.json");
	check_vllm_golden();
	check_namespace();
	check_chain(KVT_HASH_SHA256);
	check_chain(KVT_HASH_XXH3);
	check_hex();
	TEST_DONE();
}
