/*
 * kvtier.h — the public interface of libkvtier, and its manual.
 *
 * kvtier keeps the attention key/value tensors (the "KV cache") of prompts an
 * inference engine has already computed, so that a later request that shares
 * a prefix with them loads them instead of running prefill again.
 *
 * DESIGN IN ONE PAGE
 *
 * A *chunk* is the KV of a fixed number of consecutive tokens (the namespace's
 * chunk_tokens, default 256) for every layer of one model rank.  Chunks are
 * immutable.  A chunk is named by a 32-byte *key*: a chain hash over the
 * namespace digest, the previous chunk's key, this chunk's token ids and the
 * extra keys (LoRA, multimodal hashes, cache salt).  Equal keys mean equal
 * prefixes, so "how much of this prompt is cached" is "how many leading keys
 * of its chain are present" — answered from memory, in microseconds.
 *
 * A *namespace* (kvt_ns) is everything that must match for two chunks to be
 * interchangeable: model and revision, KV layout, parallel rank and size,
 * LoRA adapter and tenant.  The tenant enters the namespace digest through a
 * secret the store holds (an HMAC key from its configuration), never through
 * a value a client picks: no client can compute, probe or aim at another
 * tenant's keys.
 *
 * A *store* (kvt_store) is an ordered list of tiers, fastest first, any
 * subset of: host DRAM (an arena reserved once, cut into fixed pages, with
 * reference counts so that a chunk being read is never freed under its
 * reader), local NVMe (one O_DIRECT file per chunk through io_uring, warm
 * after a restart), a directory on a shared file system that a fleet mounts,
 * and an S3 bucket.  Per tier an eviction policy, an admission filter and a
 * write policy decide what lives where; hits below the first tier are
 * promoted in the background.  Every tier fills one vtable
 * (src/tier/tier.h).
 *
 * Every stored chunk is an *object*: a 4 KiB self-describing header (magic,
 * version, key, namespace digest, layout, per-layer offsets and XXH3
 * checksums, header checksum) followed by the payload in layer-major order.
 * The same image goes to memory, to disk with O_DIRECT and to S3
 * (docs/FORMAT.md).
 *
 * CONVENTIONS
 *
 * - Functions that can fail return an int: 0 (or a count) on success, a
 *   negative code on failure.  Codes are either KVT_E* below or a negated
 *   errno value; kvt_strerror() names both.  kvt_errmsg() gives the detail of
 *   the calling thread's last failure ("payload is 1000 bytes, layout needs
 *   33554432").  errno is never the way an error is reported.
 * - Handles are opaque.  Every *_open has a *_close; close of NULL is a no-op.
 * - Ownership is stated on each call.  Unless a call says otherwise, the
 *   library copies what it needs from its arguments before returning and the
 *   caller keeps ownership of its buffers.
 * - Thread safety: a kvt_store may be used by any number of threads at once.
 *   A kvt_ns is immutable after kvt_ns_init and may be shared freely.  A
 *   kvt_ref and a kvt_op belong to the thread that holds them until released.
 *   A kvt_config is not locked: one thread builds it, then any number may
 *   read it (kvt_store_open, kvt_config_ns).
 * - Pointers: a NULL store, namespace, key or output pointer is KVT_EINVAL,
 *   unless the call says the pointer may be NULL.  A namespace must have
 *   been filled by kvt_ns_init or kvt_config_ns (else KVT_EINVAL).
 * - Errors: each call lists the codes it returns for its own reasons; any
 *   call that allocates may also return KVT_ENOMEM.  Where a call reads or
 *   writes a medium before it returns, that medium's failure comes back as
 *   a negated errno (-EIO, -ENOSPC, -EROFS, -EDQUOT).
 * - Callbacks (kvt_store_iterate, kvt_store_verify) run on the calling
 *   thread with no lock of the store held (the tier's list is copied
 *   first): they may call any kvtier function on the same store except
 *   kvt_store_close.
 *
 * CAVEATS
 *
 * - A put of a key that is already present keeps the first version and
 *   returns KVT_EEXIST: two writers of one key may hold different bytes (GPU
 *   kernels are not bit-deterministic across batch shapes), and a reader
 *   must never see a mix of the two.
 * - KVT_DUR_CACHED promises the first tier only; copies below follow in the
 *   background (see enum kvt_durability).  In a DRAM-first store such a
 *   chunk may be evicted at any time and is lost on exit unless a lower tier
 *   took it.
 * - Reads never change a tier: a copy that fails verification is no longer
 *   served, and on a disk tier it stays on the medium, listed by
 *   kvt_store_verify, until that call's repair or the next put of its key
 *   moves it aside.
 * - With a TTL (`ttl` in the configuration), a chunk older than it is a
 *   miss for kvt_get and kvt_borrow; kvt_lookup and kvt_exists answer from
 *   memory and may still count it until a put of its key replaces it, or
 *   eviction or GC removes it.
 * - Keys computed with KVT_HASH_XXH3 are not collision-resistant against an
 *   adversary; use them only in trusted, single-tenant deployments.
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the library exports: every function declared KVT_API here, in the
 * files below and in kvtier/units.h, and nothing else (it is built with
 * -fvisibility=hidden; tests/cli_symbols.sh checks the export list). */
#if defined(__GNUC__) || defined(__clang__)
#define KVT_API __attribute__((visibility("default")))
#else
#define KVT_API
#endif

/* The project's one version number: CMake, the Python wheel and the
 * programs all read it from here (CMakeLists.txt checks that the three
 * numbers spell the string). */
#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 2
#define KVT_VERSION_PATCH 0
#define KVT_VERSION_STRING "0.2.0"

/* The version of the library actually loaded, KVT_VERSION_STRING as it was
 * built; a program or binding compares it with the header it was built
 * against.  A static string, never freed. */
KVT_API const char *kvt_version(void);

#ifdef __cplusplus
}
#endif

/* The calls, by subject; each file is its part of this manual. */
#include "kvtier/errors.h"    /* codes, kvt_strerror, kvt_errmsg */
#include "kvtier/keys.h"      /* namespaces, layouts, chain keys, engines' hashes */
#include "kvtier/config.h"    /* configurations, model presets, object files */
#include "kvtier/store.h"     /* the store: put, get, borrow, lookup, stats */
#include "kvtier/connector.h" /* an engine's paged KV blocks <-> chunks */

#endif /* KVTIER_H */
