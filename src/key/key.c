/*
 * key.c — namespace digests and chain keys.
 *
 * key(i) = H("kvtier/chunk/v1" | ns digest | key(i-1) or 32 zero bytes |
 *            u32 n_tokens | tokens as u32 LE | extra keys)
 *
 * H is SHA-256 by default: a shared cache must resist forged collisions (a
 * tenant that could make two prefixes collide could feed another tenant's
 * request its KV).  KVT_HASH_XXH3 uses XXH3-128 for trusted single-tenant
 * deployments; its 16 bytes are zero-padded to 32 and the scheme is part of
 * the namespace digest, so keys of the two schemes never name the same
 * namespace.  Every variable-length field is length-prefixed so that no two
 * different inputs encode to the same bytes.
 */
#include "key/key.h"
#include "common/hex.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/err.h"

static const char CHUNK_TAG[] = "kvtier/chunk/v1";
static const char NS_TAG[] = "kvtier/ns/v1";
static const char ENGINE_TAG[] = "kvtier/engine/v1";

enum { EXTRA_LORA = 1, EXTRA_MM = 2, EXTRA_SALT = 3 };

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

/* Fetching the implementation once avoids a provider lookup per digest,
 * which costs more than hashing a 256-token chunk. */
static void sha256_init(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static const EVP_MD *sha256(void)
{
	pthread_once(&sha256_once, sha256_init);
	return sha256_md ? sha256_md : EVP_sha256();
}

void kvt_sha256(const void *data, size_t len, uint8_t out[32])
{
	unsigned int n = 32;
	EVP_Digest(data, len, out, &n, sha256(), NULL);
}

/* A hash being fed: SHA-256 or XXH3-128 behind one face. */
typedef struct hasher {
	uint32_t scheme;
	EVP_MD_CTX *md;
	XXH3_state_t xx;
} hasher;

static int hasher_init(hasher *h, uint32_t scheme)
{
	h->scheme = scheme;
	h->md = NULL;
	if (scheme == KVT_HASH_XXH3) {
		XXH3_128bits_reset(&h->xx);
		return 0;
	}
	h->md = EVP_MD_CTX_new();
	if (!h->md || !EVP_DigestInit_ex(h->md, sha256(), NULL)) {
		EVP_MD_CTX_free(h->md);
		h->md = NULL;
		return kvt_err(KVT_ENOMEM, "cannot initialise SHA-256");
	}
	return 0;
}

static void hasher_reset(hasher *h)
{
	if (h->scheme == KVT_HASH_XXH3)
		XXH3_128bits_reset(&h->xx);
	else
		EVP_DigestInit_ex(h->md, NULL, NULL);
}

static void hasher_update(hasher *h, const void *p, size_t n)
{
	if (h->scheme == KVT_HASH_XXH3)
		XXH3_128bits_update(&h->xx, p, n);
	else
		EVP_DigestUpdate(h->md, p, n);
}

static void hasher_final(hasher *h, uint8_t out[32])
{
	if (h->scheme == KVT_HASH_XXH3) {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&h->xx));
		memcpy(out, c.digest, 16);
		memset(out + 16, 0, 16);
	} else {
		unsigned int n = 32;
		EVP_DigestFinal_ex(h->md, out, &n);
	}
}

static void hasher_free(hasher *h)
{
	EVP_MD_CTX_free(h->md);
	h->md = NULL;
}

static void put_u32(hasher *h, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
			 (uint8_t)(v >> 24) };
	hasher_update(h, b, 4);
}

static void put_str(hasher *h, uint8_t tag, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	hasher_update(h, &tag, 1);
	put_u32(h, (uint32_t)n);
	if (n)
		hasher_update(h, s, n);
}

static void put_tokens(hasher *h, const uint32_t *tokens, size_t n)
{
	put_u32(h, (uint32_t)n);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	hasher_update(h, tokens, n * sizeof(uint32_t));
#else
	for (size_t i = 0; i < n; i++)
		put_u32(h, tokens[i]);
#endif
}

static void put_extra(hasher *h, const kvt_extra_keys *x, int first)
{
	if (!x)
		return;
	if (x->lora)
		put_str(h, EXTRA_LORA, x->lora);
	for (size_t i = 0; i < x->n_mm; i++) {
		uint64_t off = (uint64_t)x->mm[i].offset;
		put_str(h, EXTRA_MM, x->mm[i].hash);
		put_u32(h, (uint32_t)off);
		put_u32(h, (uint32_t)(off >> 32));
	}
	if (first && x->cache_salt)
		put_str(h, EXTRA_SALT, x->cache_salt);
}

static int check_ns(const kvt_ns *ns)
{
	if (!ns)
		return kvt_err(KVT_EINVAL, "namespace missing");
	if (ns->hash_scheme != KVT_HASH_SHA256 && ns->hash_scheme != KVT_HASH_XXH3)
		return kvt_err(KVT_EINVAL,
			       "namespace hash scheme %u unknown (kvt_ns_init not called?)",
			       ns->hash_scheme);
	return 0;
}

static int check_extra(const kvt_extra_keys *x)
{
	if (!x)
		return 0;
	if (x->n_mm && !x->mm)
		return kvt_err(KVT_EINVAL, "%zu multimodal hashes but no array", x->n_mm);
	for (size_t i = 0; i < x->n_mm; i++)
		if (!x->mm[i].hash)
			return kvt_err(KVT_EINVAL, "multimodal item %zu has no hash", i);
	return 0;
}

static void chunk_key(hasher *h, const kvt_ns *ns, const kvt_key *parent,
		      const uint32_t *tokens, size_t n,
		      const kvt_extra_keys *extra, int first, kvt_key *out)
{
	static const uint8_t zero[KVT_KEY_BYTES];

	hasher_reset(h);
	hasher_update(h, CHUNK_TAG, sizeof(CHUNK_TAG) - 1);
	hasher_update(h, ns->digest, sizeof(ns->digest));
	hasher_update(h, parent ? parent->b : zero, KVT_KEY_BYTES);
	put_tokens(h, tokens, n);
	put_extra(h, extra, first);
	hasher_final(h, out->b);
}

int kvt_key_chunk(const kvt_ns *ns, const kvt_key *parent,
		  const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, kvt_key *out)
{
	hasher h;
	int rc;

	if ((rc = check_ns(ns)) || (rc = check_extra(extra)))
		return rc;
	if (!out || (!tokens && n_tokens))
		return kvt_err(KVT_EINVAL, "tokens or output missing");
	if (n_tokens != ns->layout.chunk_tokens)
		return kvt_err(KVT_EINVAL, "chunk has %zu tokens, namespace chunks are %u",
			       n_tokens, ns->layout.chunk_tokens);
	if ((rc = hasher_init(&h, ns->hash_scheme)))
		return rc;
	chunk_key(&h, ns, parent, tokens, n_tokens, extra, parent == NULL, out);
	hasher_free(&h);
	return 0;
}

int kvt_key_chain(const kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, kvt_key *keys, size_t max_keys)
{
	size_t per, whole, n, i;
	hasher h;
	int rc;

	if ((rc = check_ns(ns)) || (rc = check_extra(extra)))
		return rc;
	if (!tokens && n_tokens)
		return kvt_err(KVT_EINVAL, "tokens missing");
	per = ns->layout.chunk_tokens;
	if (per == 0)
		return kvt_err(KVT_EINVAL, "namespace has chunk_tokens 0");
	whole = n_tokens / per;
	if (whole > (size_t)INT32_MAX)
		return kvt_err(KVT_EINVAL, "prompt of %zu tokens is too long", n_tokens);
	n = whole < max_keys ? whole : max_keys;
	if (n && !keys)
		return kvt_err(KVT_EINVAL, "keys array missing");
	if (n == 0)
		return (int)whole;
	if ((rc = hasher_init(&h, ns->hash_scheme)))
		return rc;
	for (i = 0; i < n; i++)
		chunk_key(&h, ns, i ? &keys[i - 1] : NULL, tokens + i * per, per,
			  extra, i == 0, &keys[i]);
	hasher_free(&h);
	return (int)whole;
}

int kvt_key_from_engine_hash(const kvt_ns *ns, const uint8_t *engine_hash,
			     size_t len, kvt_key *out)
{
	hasher h;
	int rc;

	if ((rc = check_ns(ns)))
		return rc;
	if (!engine_hash || len == 0 || len > 64 || !out)
		return kvt_err(KVT_EINVAL, "engine hash of %zu bytes (need 1..64)", len);
	/* Always SHA-256: the engine hash comes from outside kvtier. */
	if ((rc = hasher_init(&h, KVT_HASH_SHA256)))
		return rc;
	hasher_update(&h, ENGINE_TAG, sizeof(ENGINE_TAG) - 1);
	hasher_update(&h, ns->digest, sizeof(ns->digest));
	put_u32(&h, (uint32_t)len);
	hasher_update(&h, engine_hash, len);
	hasher_final(&h, out->b);
	hasher_free(&h);
	return 0;
}

int kvt_ns_derive(const kvt_ns_desc *d, const uint8_t *secret,
		  size_t secret_len, kvt_ns *out)
{
	static const uint8_t no_secret[1];
	uint8_t buf[8192];
	size_t n = 0;
	unsigned int dlen = 32;
	uint32_t scheme;
	int rc;

	if (!d || !out)
		return kvt_err(KVT_EINVAL, "namespace description missing");
	if (!d->model || !*d->model)
		return kvt_err(KVT_EINVAL, "namespace needs a model id");
	if ((rc = kvt_layout_check(&d->layout)))
		return rc;
	scheme = d->hash_scheme ? d->hash_scheme : KVT_HASH_SHA256;
	if (scheme != KVT_HASH_SHA256 && scheme != KVT_HASH_XXH3)
		return kvt_err(KVT_EINVAL, "hash scheme %u unknown", d->hash_scheme);
	if (d->tp_size == 0 || d->tp_rank >= d->tp_size)
		return kvt_err(KVT_EINVAL, "tensor-parallel rank %u of size %u",
			       d->tp_rank, d->tp_size);
	if (d->pp_size == 0 || d->pp_rank >= d->pp_size)
		return kvt_err(KVT_EINVAL, "pipeline-parallel rank %u of size %u",
			       d->pp_rank, d->pp_size);

#define PUT(p, len)                                                          \
	do {                                                                 \
		if (n + (len) > sizeof(buf))                                 \
			return kvt_err(KVT_EINVAL, "namespace strings too long"); \
		memcpy(buf + n, (p), (len));                                 \
		n += (len);                                                  \
	} while (0)
#define PUT32(v)                                                             \
	do {                                                                 \
		uint32_t _v = (v);                                           \
		uint8_t _b[4] = { (uint8_t)_v, (uint8_t)(_v >> 8),           \
				  (uint8_t)(_v >> 16), (uint8_t)(_v >> 24) }; \
		PUT(_b, 4);                                                  \
	} while (0)
	/* A string: present flag, length, bytes — NULL and "" differ. */
#define PUTS(s)                                                              \
	do {                                                                 \
		const char *_s = (s);                                        \
		uint8_t _p = _s != NULL;                                     \
		size_t _l = _s ? strlen(_s) : 0;                             \
		PUT(&_p, 1);                                                 \
		PUT32((uint32_t)_l);                                         \
		if (_l)                                                      \
			PUT(_s, _l);                                         \
	} while (0)

	PUT(NS_TAG, sizeof(NS_TAG) - 1);
	PUTS(d->model);
	PUTS(d->revision);
	PUT32(d->layout.num_layers);
	PUT32(d->layout.num_kv_heads);
	PUT32(d->layout.head_dim);
	PUT32(d->layout.dtype);
	PUT32(d->layout.kv_planes);
	PUT32(d->layout.scale_bytes);
	PUT32(d->layout.block_size);
	PUT32(d->layout.chunk_tokens);
	/* Rank-shared KV names one copy for all tensor-parallel ranks. */
	PUT32(d->rank_shared ? 0xffffffffu : d->tp_rank);
	PUT32(d->rank_shared ? 0xffffffffu : d->tp_size);
	PUT32(d->pp_rank);
	PUT32(d->pp_size);
	PUTS(d->lora);
	PUTS(d->tenant);
	PUT32(scheme);
#undef PUTS
#undef PUT32
#undef PUT

	memset(out, 0, sizeof(*out));
	if (!HMAC(EVP_sha256(), secret_len ? secret : no_secret, (int)secret_len,
		  buf, n, out->digest, &dlen))
		return kvt_err(KVT_ENOMEM, "HMAC-SHA-256 failed");
	out->layout = d->layout;
	out->hash_scheme = scheme;
	out->tp_rank = d->tp_rank;
	out->tp_size = d->tp_size;
	out->pp_rank = d->pp_rank;
	out->pp_size = d->pp_size;
	return 0;
}

void kvt_key_hex(const kvt_key *key, char out[65])
{
	kvt_hex_encode(key->b, KVT_KEY_BYTES, out);
}

int kvt_key_parse(const char *s, kvt_key *key)
{
	if (!s || strlen(s) != 64)
		return kvt_err(KVT_EINVAL, "a key is 64 hex digits, got \"%.80s\"",
			       s ? s : "(null)");
	for (int i = 0; i < KVT_KEY_BYTES; i++) {
		int hi = kvt_hex_nibble(s[2 * i], 1), lo = kvt_hex_nibble(s[2 * i + 1], 1);
		if (hi < 0 || lo < 0)
			return kvt_err(KVT_EINVAL, "key \"%s\": not a hex digit at %d",
				       s, 2 * i + (hi < 0 ? 0 : 1));
		key->b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}
