/*
 * warm.h — the hot list's reader (warm.c), apart for the fuzzer.
 */
#ifndef KVT_STORE_WARM_H
#define KVT_STORE_WARM_H

#include <stddef.h>

#include "kvtier.h"

/* A hot list image (len bytes of buf, as read from its file): 0 with the
 * keys in a malloc'd *keys (free it) and their count in *n, or
 * KVT_EMALFORMED naming what is wrong, or KVT_ENOMEM. */
int kvt_hot_parse(const void *buf, size_t len, kvt_key **keys, size_t *n);

#endif
