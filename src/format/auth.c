/*
 * auth.c — HMAC-SHA-256 tags of object images (OpenSSL 3 EVP_MAC).
 *
 * The MAC algorithm object is fetched once per process (fetching is a
 * provider lookup under a lock); a context is made per call, so any number
 * of threads sign and verify at once.
 */
#include "format/auth.h"

#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "common/err.h"

/* Binds a tag to this use: a MAC some other protocol computes with the same
 * key over the same bytes is not a valid object tag. */
static const char auth_label[] = "kvtier object auth v1";

static EVP_MAC *auth_mac;
static pthread_once_t auth_once = PTHREAD_ONCE_INIT;

static void auth_fetch(void)
{
	auth_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

int kvt_obj_auth_sign(const struct iovec *img, int n, const uint8_t *key,
		      size_t klen, uint8_t tag[KVT_OBJ_AUTH_TAG_BYTES])
{
	char digest[] = "SHA256";
	OSSL_PARAM params[2];
	EVP_MAC_CTX *ctx;
	size_t outl = 0;
	int i, ok;

	if (!key || klen < KVT_OBJ_AUTH_MIN_KEY || n < 0 || (n && !img))
		return kvt_err(KVT_EINVAL,
			       "auth: a key of at least %u bytes is needed",
			       KVT_OBJ_AUTH_MIN_KEY);
	pthread_once(&auth_once, auth_fetch);
	if (!auth_mac)
		return kvt_err(KVT_ENOMEM, "auth: OpenSSL has no HMAC");
	ctx = EVP_MAC_CTX_new(auth_mac);
	if (!ctx)
		return kvt_err(KVT_ENOMEM, "auth: no memory for an HMAC");
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
						     digest, 0);
	params[1] = OSSL_PARAM_construct_end();
	ok = EVP_MAC_init(ctx, key, klen, params) &&
	     EVP_MAC_update(ctx, (const unsigned char *)auth_label,
			    sizeof(auth_label));
	for (i = 0; ok && i < n; i++)
		ok = EVP_MAC_update(ctx, img[i].iov_base, img[i].iov_len);
	ok = ok && EVP_MAC_final(ctx, tag, &outl, KVT_OBJ_AUTH_TAG_BYTES) &&
	     outl == KVT_OBJ_AUTH_TAG_BYTES;
	EVP_MAC_CTX_free(ctx);
	if (!ok)
		return kvt_err(KVT_ENOMEM, "auth: HMAC-SHA-256 failed in OpenSSL");
	return 0;
}

int kvt_obj_auth_verify(const struct iovec *img, int n, const uint8_t *key,
			size_t klen, const uint8_t tag[KVT_OBJ_AUTH_TAG_BYTES])
{
	uint8_t want[KVT_OBJ_AUTH_TAG_BYTES];
	int rc = kvt_obj_auth_sign(img, n, key, klen, want);

	if (rc)
		return rc;
	rc = CRYPTO_memcmp(want, tag, sizeof(want)) ? KVT_ECORRUPT : 0;
	OPENSSL_cleanse(want, sizeof(want));
	if (rc)
		return kvt_err(rc, "auth: the object's HMAC tag does not verify");
	return 0;
}
