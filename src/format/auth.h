/*
 * auth.h — optional authentication of object images (HMAC-SHA-256).
 *
 * A shared tier whose writers are not all trusted (a shared file system
 * many tenants' nodes mount, a bucket others can write) can sign every image
 * with a key from configuration and reject, like a corrupt object, any image
 * whose tag does not verify: a planted object, or one whose payload was
 * altered and its checksums recomputed, needs the key to pass.
 *
 * The tag is not part of the 4 KiB header (whose reserved bytes stay zero, so
 * docs/FORMAT.md and the decoder are unchanged): the tier stores it as a
 * 32-byte trailer right after the payload, so an authenticated file is
 * header_len + payload_len + KVT_OBJ_AUTH_TAG_BYTES long and an unsigned one
 * is refused by its length alone.  The MAC covers a domain-separation label,
 * then the whole image (header, which names the key and namespace, then the
 * payload), in the order of the segments given.
 */
#ifndef KVT_AUTH_H
#define KVT_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define KVT_OBJ_AUTH_TAG_BYTES 32u
/* Keys shorter than this are refused: a guessable key protects nothing. */
#define KVT_OBJ_AUTH_MIN_KEY 16u

/* Compute the tag of the image held in img[0..n) (header first, then the
 * payload; exactly the image's bytes) into `tag`.  0, KVT_EINVAL for a key
 * shorter than KVT_OBJ_AUTH_MIN_KEY, KVT_ENOMEM if OpenSSL fails. */
int kvt_obj_auth_sign(const struct iovec *img, int n, const uint8_t *key,
		      size_t klen, uint8_t tag[KVT_OBJ_AUTH_TAG_BYTES]);

/* 0 if `tag` is the image's tag under `key` (compared in constant time),
 * KVT_ECORRUPT if not, or sign's errors. */
int kvt_obj_auth_verify(const struct iovec *img, int n, const uint8_t *key,
			size_t klen, const uint8_t tag[KVT_OBJ_AUTH_TAG_BYTES]);

#endif
