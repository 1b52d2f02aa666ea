/*
 * key.h — how chunks are named (docs/KEYS.md).
 *
 * Internal side of the key layer: deriving a namespace digest from a
 * description and a tenant secret, and the hash primitives the chain uses.
 * The public side (chain keys, vLLM block hashes) is in kvtier.h.
 */
#ifndef KVT_KEY_H
#define KVT_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* Namespace digest = HMAC-SHA-256(tenant secret, canonical encoding of every
 * field of `d`).  `secret` may be empty (len 0) for the default tenant of a
 * single-tenant store.  KVT_ELAYOUT / KVT_EINVAL on a bad description. */
int kvt_ns_derive(const kvt_ns_desc *d, const uint8_t *secret,
		  size_t secret_len, kvt_ns *out);

/* SHA-256 of one buffer through OpenSSL EVP. */
void kvt_sha256(const void *data, size_t len, uint8_t out[32]);

#endif
