/*
 * vllm.c — vLLM's prefix-cache block hash, bit for bit (docs/KEYS.md).
 *
 * vLLM names a full KV block by sha256_cbor((parent, tokens, extra_keys)):
 * SHA-256 over the canonical CBOR (RFC 8949 §4.2) of a 3-element array —
 * the parent's 32-byte hash as a byte string, the block's token ids as an
 * array of unsigned integers, and the extra keys as an array (or null when
 * there are none).  The first block's parent is NONE_HASH, which is
 * sha256_cbor(PYTHONHASHSEED) when that variable is set.
 *
 * The CBOR is streamed straight into the digest: a 16-token block needs
 * no buffer and a 256-token chunk never allocates.
 */
#include <openssl/evp.h>
#include <string.h>

#include "common/err.h"
#include "key/key.h"

/* CBOR major types (RFC 8949 §3.1). */
enum { CBOR_UINT = 0, CBOR_NINT = 1, CBOR_BYTES = 2, CBOR_TEXT = 3, CBOR_ARRAY = 4 };
#define CBOR_NULL 0xf6

/* Buffered writer in front of an EVP digest. */
typedef struct cbor_out {
	EVP_MD_CTX *md;
	size_t n;
	uint8_t buf[1024];
} cbor_out;

static void cbor_flush(cbor_out *o)
{
	if (o->n)
		EVP_DigestUpdate(o->md, o->buf, o->n);
	o->n = 0;
}

static void cbor_raw(cbor_out *o, const void *p, size_t len)
{
	if (o->n + len > sizeof(o->buf)) {
		cbor_flush(o);
		if (len > sizeof(o->buf)) {
			EVP_DigestUpdate(o->md, p, len);
			return;
		}
	}
	memcpy(o->buf + o->n, p, len);
	o->n += len;
}

/* The head of a data item: canonical form uses the shortest argument. */
static void cbor_head(cbor_out *o, int major, uint64_t v)
{
	uint8_t b[9];
	size_t n;

	if (v < 24) {
		b[0] = (uint8_t)(major << 5 | v);
		n = 1;
	} else if (v <= 0xff) {
		b[0] = (uint8_t)(major << 5 | 24);
		b[1] = (uint8_t)v;
		n = 2;
	} else if (v <= 0xffff) {
		b[0] = (uint8_t)(major << 5 | 25);
		b[1] = (uint8_t)(v >> 8);
		b[2] = (uint8_t)v;
		n = 3;
	} else if (v <= 0xffffffffu) {
		b[0] = (uint8_t)(major << 5 | 26);
		for (int i = 0; i < 4; i++)
			b[1 + i] = (uint8_t)(v >> (24 - 8 * i));
		n = 5;
	} else {
		b[0] = (uint8_t)(major << 5 | 27);
		for (int i = 0; i < 8; i++)
			b[1 + i] = (uint8_t)(v >> (56 - 8 * i));
		n = 9;
	}
	if (o->n + n > sizeof(o->buf))
		cbor_flush(o);
	memcpy(o->buf + o->n, b, n);
	o->n += n;
}

static void cbor_text(cbor_out *o, const char *s)
{
	size_t n = strlen(s);
	cbor_head(o, CBOR_TEXT, n);
	cbor_raw(o, s, n);
}

static int cbor_begin(cbor_out *o)
{
	o->n = 0;
	o->md = EVP_MD_CTX_new();
	if (!o->md || !EVP_DigestInit_ex(o->md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(o->md);
		return kvt_err(KVT_ENOMEM, "cannot initialise SHA-256");
	}
	return 0;
}

static void cbor_end(cbor_out *o, uint8_t out[32])
{
	unsigned int len = 32;
	cbor_flush(o);
	EVP_DigestFinal_ex(o->md, out, &len);
	EVP_MD_CTX_free(o->md);
}

void kvt_vllm_none_hash(const char *seed, uint8_t out[32])
{
	cbor_out o;
	if (cbor_begin(&o)) {
		memset(out, 0, 32);
		return;
	}
	cbor_text(&o, seed ? seed : "");
	cbor_end(&o, out);
}

/* vLLM's extra keys, in its order: LoRA name, multimodal hashes, cache salt
 * (first block only).  Returns how many there are. */
static size_t extra_count(const kvt_extra_keys *x, int first)
{
	if (!x)
		return 0;
	/* vLLM drops an empty salt (it tests the string's truth). */
	return (x->lora ? 1 : 0) + x->n_mm +
	       (first && x->cache_salt && *x->cache_salt ? 1 : 0);
}

int kvt_vllm_block_hash(const uint8_t parent[32], const uint32_t *tokens,
			size_t n_tokens, const kvt_extra_keys *extra,
			int first_block, uint8_t out[32])
{
	cbor_out o;
	size_t n_extra;
	int rc;

	if (!parent || !out || (!tokens && n_tokens))
		return kvt_err(KVT_EINVAL, "parent, tokens or output missing");
	if (extra && extra->n_mm && !extra->mm)
		return kvt_err(KVT_EINVAL, "%zu multimodal hashes but no array",
			       extra->n_mm);
	if ((rc = cbor_begin(&o)))
		return rc;
	cbor_head(&o, CBOR_ARRAY, 3);
	cbor_head(&o, CBOR_BYTES, 32);
	cbor_raw(&o, parent, 32);
	cbor_head(&o, CBOR_ARRAY, n_tokens);
	for (size_t i = 0; i < n_tokens; i++)
		cbor_head(&o, CBOR_UINT, tokens[i]);
	n_extra = extra_count(extra, first_block);
	if (n_extra == 0) {
		uint8_t null = CBOR_NULL;
		cbor_raw(&o, &null, 1);
	} else {
		cbor_head(&o, CBOR_ARRAY, n_extra);
		if (extra->lora)
			cbor_text(&o, extra->lora);
		/* Each item is the pair (identifier, offset - block start). */
		for (size_t i = 0; i < extra->n_mm; i++) {
			int64_t off = extra->mm[i].offset;
			cbor_head(&o, CBOR_ARRAY, 2);
			cbor_text(&o, extra->mm[i].hash ? extra->mm[i].hash : "");
			if (off >= 0)
				cbor_head(&o, CBOR_UINT, (uint64_t)off);
			else
				cbor_head(&o, CBOR_NINT, (uint64_t)(-1 - off));
		}
		if (first_block && extra->cache_salt && *extra->cache_salt)
			cbor_text(&o, extra->cache_salt);
	}
	cbor_end(&o, out);
	return 0;
}

uint64_t kvt_vllm_hash_u64(const uint8_t hash[32])
{
	uint64_t v = 0;
	for (int i = 24; i < 32; i++)
		v = v << 8 | hash[i];
	return v;
}
