/*
 * store.h — what the engine's connector (engine/conn.c) asks of the store
 * beyond kvtier.h: a borrow that says which tier served it, a borrowed
 * chunk checked layer by layer as it is copied, a load's missed deadline
 * for kvt_why, and the memory a device registers.  The store's own files
 * share more, in store_int.h, which nothing outside store/ includes.
 */
#ifndef KVT_STORE_H
#define KVT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

/* Borrow `key` from the first tier that serves a good copy; *tier_out
 * gets that tier.  `dev`: the caller copies on the device tier's device,
 * so that tier hands out its device pages rather than a host copy. */
int store_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key, kvt_ref **out,
		 int *tier_out, int dev);

/* Check layer `layer` of `ref`, borrowed from tier `tier` for `key`, where
 * that tier's reads are verified and the payload is in host memory (one in
 * device memory came through a put that hashed it).  0, or KVT_ECORRUPT:
 * the copy is then no longer served and `ref` is released. */
int store_ref_check_layer(kvt_ref *ref, int tier, const kvt_key *key, uint32_t layer);

/* A load gave `key` up at its deadline; `mask` holds bit i for each tier i
 * holding it.  kvt_why says so ("deadline"). */
void store_note_deadline(kvt_store *st, const kvt_key *key, uint32_t mask);

/* fn(arg, base, len) for each tier whose images are pages of one mapping
 * (struct kvt_tier_pages): what a device registers as page-locked. */
void store_each_arena(kvt_store *st, void (*fn)(void *arg, void *base, size_t len),
		      void *arg);

#endif
