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

/* What the library exports: every function declared here and nothing else
 * (it is built with -fvisibility=hidden; a test checks the export list). */
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

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* kvtier's own codes live below KVT_ERR_BASE; anything else negative is a
 * negated errno value (-EIO, -ENOSPC, ...). */
#define KVT_ERR_BASE (-30000)
enum kvt_error {
	KVT_OK = 0,
	KVT_ENOTFOUND = KVT_ERR_BASE - 1,   /* no chunk under that key */
	KVT_EEXIST = KVT_ERR_BASE - 2,      /* key already published; first wins */
	KVT_EINVAL = KVT_ERR_BASE - 3,      /* an argument is out of its domain */
	KVT_ENOMEM = KVT_ERR_BASE - 4,      /* allocation failed */
	KVT_EFULL = KVT_ERR_BASE - 5,       /* tier full of pinned/borrowed data */
	KVT_ETOOBIG = KVT_ERR_BASE - 6,     /* larger than the tier could ever hold */
	KVT_EBADMAGIC = KVT_ERR_BASE - 7,   /* not a kvtier object */
	KVT_EVERSION = KVT_ERR_BASE - 8,    /* object format version unknown */
	KVT_ETRUNCATED = KVT_ERR_BASE - 9,  /* object shorter than it declares */
	KVT_EHDRCSUM = KVT_ERR_BASE - 10,   /* header checksum mismatch */
	KVT_ECORRUPT = KVT_ERR_BASE - 11,   /* payload checksum mismatch */
	KVT_EMALFORMED = KVT_ERR_BASE - 12, /* header fields inconsistent */
	KVT_ELAYOUT = KVT_ERR_BASE - 13,    /* layout does not match the namespace */
	KVT_EMISMATCH = KVT_ERR_BASE - 14,  /* object's key/namespace is not the one asked */
	KVT_ECONFIG = KVT_ERR_BASE - 15,    /* configuration invalid */
	KVT_ESMALL = KVT_ERR_BASE - 16,     /* caller's buffer too small */
	KVT_EAGAIN = KVT_ERR_BASE - 17,     /* async operation still in flight */
	KVT_ETIMEDOUT = KVT_ERR_BASE - 18,  /* deadline passed */
	KVT_ENOTSUP = KVT_ERR_BASE - 19,    /* operation not supported by the tier */
	KVT_ETENANT = KVT_ERR_BASE - 20,    /* tenant unknown to this store */
	KVT_ECANCELED = KVT_ERR_BASE - 21,  /* operation cancelled (store closing) */
	KVT_ERR_LAST = KVT_ERR_BASE - 22
};

/* A static string naming `err`; never NULL, even for unknown codes. */
KVT_API const char *kvt_strerror(int err);

/* Detail of the calling thread's most recent failure, or "" if none.  The
 * string is owned by the library and valid until the thread's next kvtier
 * call. */
KVT_API const char *kvt_errmsg(void);

/* ------------------------------------------------------------------------ */
/* Keys                                                                      */
/* ------------------------------------------------------------------------ */

#define KVT_KEY_BYTES 32

typedef struct kvt_key {
	uint8_t b[KVT_KEY_BYTES];
} kvt_key;

enum kvt_hash_scheme {
	KVT_HASH_SHA256 = 1, /* default: SHA-256, resists forged collisions */
	KVT_HASH_XXH3 = 2,   /* XXH3-128, opt-in for trusted single tenants */
};

enum kvt_dtype {
	KVT_DTYPE_F16 = 1,
	KVT_DTYPE_BF16 = 2,
	KVT_DTYPE_F32 = 3,
	KVT_DTYPE_FP8_E4M3 = 4,
	KVT_DTYPE_FP8_E5M2 = 5,
	KVT_DTYPE_INT8 = 6,
};

/* Bytes of one element of `dtype`, or 0 if it is not a kvt_dtype. */
KVT_API uint32_t kvt_dtype_size(uint32_t dtype);

/* The shape of one chunk's KV.  Payloads are layer-major: layer 0's bytes,
 * then layer 1's, ...; each layer holds kv_planes × chunk_tokens ×
 * num_kv_heads × head_dim elements followed by scale_bytes of quantisation
 * scales (0 unless the dtype is quantised). */
typedef struct kvt_layout {
	uint32_t num_layers;   /* 1 .. KVT_MAX_LAYERS */
	uint32_t num_kv_heads; /* KV heads held by this rank */
	uint32_t head_dim;
	uint32_t dtype;        /* enum kvt_dtype */
	uint32_t kv_planes;    /* 2 (K and V), or 1 (MLA latent) */
	uint32_t scale_bytes;  /* per layer, for fp8/int8 scales; else 0 */
	uint32_t block_size;   /* the engine's KV block, in tokens; 0 in a
				* kvt_ns_desc: 16 (vLLM's default) when it
				* divides the chunk, else the chunk */
	uint32_t chunk_tokens; /* tokens per chunk; a multiple of block_size;
				* 0 in a kvt_ns_desc: the config's chunk_size */
} kvt_layout;

#define KVT_MAX_LAYERS 160

/* Bytes of one layer of one chunk, and of a whole chunk's payload.  0 if the
 * layout is invalid (see kvt_layout_check). */
KVT_API uint64_t kvt_layout_layer_bytes(const kvt_layout *l);
KVT_API uint64_t kvt_layout_payload_bytes(const kvt_layout *l);

/* 0 if `l` is a layout kvtier can store, else KVT_ELAYOUT with the reason in
 * kvt_errmsg(). */
KVT_API int kvt_layout_check(const kvt_layout *l);

/* What names a namespace.  Strings are NUL-terminated UTF-8; NULL means
 * "none" and is distinct from "".  The tenant is a name the store knows; its
 * secret comes from the store's configuration. */
typedef struct kvt_ns_desc {
	const char *model;    /* e.g. "meta-llama/Llama-3.1-8B-Instruct" */
	const char *revision; /* model revision (commit), or NULL */
	kvt_layout layout;
	uint32_t tp_rank, tp_size; /* tensor parallel; 0, 1 when unsharded */
	uint32_t pp_rank, pp_size; /* pipeline parallel; 0, 1 when unsharded */
	const char *lora;          /* LoRA adapter name, or NULL */
	const char *tenant;        /* tenant name, or NULL for the default */
	uint32_t hash_scheme;      /* enum kvt_hash_scheme; 0 means SHA-256 */
	/* Nonzero when every tensor-parallel rank holds the same KV (MLA's
	 * latent cache, or more TP ranks than KV heads): the rank then does
	 * not enter the digest, so all ranks name, and store, one copy. */
	uint32_t rank_shared;
} kvt_ns_desc;

/* A resolved namespace: its digest and what keys are computed with.  Plain
 * data; copy it freely.  Fill it with kvt_ns_init. */
typedef struct kvt_ns {
	uint8_t digest[32];
	kvt_layout layout;
	uint32_t hash_scheme;
	uint32_t tp_rank, tp_size, pp_rank, pp_size;
} kvt_ns;

/* Extra keys of one chunk, as vLLM defines them for a block. */
/* A multimodal item (an image, an audio clip) whose placeholder tokens
 * overlap the chunk being keyed.  `offset` is the item's first token relative
 * to the chunk's first token: negative when the item began in an earlier
 * chunk.  That is how vLLM keys such items (since its fix that disambiguates
 * equal items at different positions); list the items in prompt order. */
typedef struct kvt_mm_hash {
	const char *hash;  /* content hash of the item, as text */
	int64_t offset;
} kvt_mm_hash;

typedef struct kvt_extra_keys {
	const char *lora;          /* LoRA name, or NULL */
	const kvt_mm_hash *mm;     /* items overlapping the chunk, or NULL */
	size_t n_mm;
	const char *cache_salt;    /* applies to the first chunk only, or NULL */
} kvt_extra_keys;

/* Key of a chunk: H(ns digest, parent, tokens, extra keys).  `parent` is the
 * previous chunk's key, or NULL for the first chunk.  `extra` may be NULL.
 * `tokens` must hold exactly ns->layout.chunk_tokens ids.  0, or KVT_EINVAL
 * (a NULL pointer, another token count, an uninitialised namespace).  Pure
 * and thread-safe, as every key function below. */
KVT_API int kvt_key_chunk(const kvt_ns *ns, const kvt_key *parent,
		  const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, kvt_key *out);

/* Keys of every whole chunk of a prompt.  Writes at most `max_keys` keys and
 * returns how many whole chunks the prompt has (the partial tail is not
 * keyed: it is recomputed).  `extra` applies to every chunk (cache salt to
 * the first only); may be NULL.  `keys` may be NULL when max_keys is 0 (to
 * count).  KVT_EINVAL for a NULL namespace or tokens. */
KVT_API int kvt_key_chain(const kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, kvt_key *keys, size_t max_keys);

/* Lower-case hex of a key into `out` (65 bytes with the NUL). */
KVT_API void kvt_key_hex(const kvt_key *key, char out[65]);

/* Parse 64 hex digits into `key`.  0 or KVT_EINVAL. */
KVT_API int kvt_key_parse(const char *hex, kvt_key *key);

/* --- vLLM interoperability ---------------------------------------------- */

/* vLLM's NONE_HASH for `seed` (the PYTHONHASHSEED string):
 * SHA-256(CBOR(seed as a text string)).  See docs/KEYS.md for which vLLM
 * versions use this convention. */
KVT_API void kvt_vllm_none_hash(const char *seed, uint8_t out[32]);

/* vLLM's sha256_cbor block hash: SHA-256 over canonical CBOR of
 * [parent (32-byte string), [token ids], extra keys or null].  `parent` is
 * NONE_HASH for the first block.  `extra` may be NULL (encoded as null); the
 * cache salt is included only when `first_block` is nonzero. */
KVT_API int kvt_vllm_block_hash(const uint8_t parent[32], const uint32_t *tokens,
			size_t n_tokens, const kvt_extra_keys *extra,
			int first_block, uint8_t out[32]);

/* The 64-bit integer vLLM publishes in KV events for a 32-byte block hash:
 * its last 8 bytes read big-endian. */
KVT_API uint64_t kvt_vllm_hash_u64(const uint8_t hash[32]);

/* kvtier's storage key for a chunk whose last engine block has hash
 * `engine_hash` (of `len` bytes): the engine hash wrapped with the namespace
 * digest, so an engine hash alone never names stored bytes. */
KVT_API int kvt_key_from_engine_hash(const kvt_ns *ns, const uint8_t *engine_hash,
			     size_t len, kvt_key *out);

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

typedef struct kvt_config kvt_config;

/* A configuration with every default (a DRAM tier of 1 GiB, 64 KiB pages,
 * 256-token chunks, SHA-256 keys, no tenants but the default one).  Caller
 * owns the result; free it with kvt_config_free.  NULL only if out of
 * memory. */
KVT_API kvt_config *kvt_config_new(void);

/* Parse a YAML file (a mapping of the keys of docs/CONFIG.md, each once).
 * On failure returns NULL, and *err (may be NULL) gets the code: KVT_ECONFIG
 * (a bad value, an unknown or repeated key, not a mapping) or a negated
 * errno of the file; kvt_errmsg() names the file, line and what was
 * expected. */
KVT_API kvt_config *kvt_config_load(const char *path, int *err);

/* Same, from a string; `name` is used in error messages. */
KVT_API kvt_config *kvt_config_parse(const char *yaml, size_t len, const char *name,
			     int *err);

/* Set one key as it would appear in the YAML file ("max_local_cpu_size",
 * "8GiB").  0, KVT_EINVAL (a NULL pointer), or KVT_ECONFIG (unknown key, bad
 * value) with the key and the reason in kvt_errmsg(); on failure the key
 * keeps its value. */
KVT_API int kvt_config_set(kvt_config *cfg, const char *key, const char *value);

/* Apply KVTIER_<KEY> environment variables (KVTIER_MAX_LOCAL_CPU_SIZE=...),
 * every key kvt_config_set knows.  Returns 0 or the first KVT_ECONFIG, with
 * the variable's name in kvt_errmsg().  Reads the environment: not to be
 * called while another thread calls setenv. */
KVT_API int kvt_config_apply_env(kvt_config *cfg);

/* The kvtierd socket the configuration names (the `daemon` key, as a
 * path), or NULL when a store opened on it keeps its own tiers.  An engine
 * integration asks before opening a store: a configuration with no daemon
 * may be served by one the integration starts itself.  Valid while cfg is
 * and its `daemon` key unchanged. */
KVT_API const char *kvt_config_daemon(const kvt_config *cfg);

/* 1 if a tier the configuration names keeps a put across a crash (a disk:
 * local_disk, shared_fs, remote_url; or a daemon, whose answer it is), so
 * that a put may ask KVT_DUR_CRASH_SAFE or more; 0 if every tier is memory
 * (DRAM, a device, peers) and such a put would be refused. */
KVT_API int kvt_config_durable(const kvt_config *cfg);

/* Free a configuration, wiping its secrets first; NULL is a no-op. */
KVT_API void kvt_config_free(kvt_config *cfg);

/* The grammar of every size in a configuration, and of tools' size options:
 * "64GiB", "1.5GB", "512MiB", "4096" (units B, KB/MB/GB/TB in powers of
 * 1000, KiB/MiB/GiB/TiB and K/M/G/T in powers of 1024, any case; a bare
 * number counts units of `bare_unit` bytes, LMCache's sizes being GiB; a
 * fraction needs a unit of KiB/KB or more).  0 with *out set, or
 * KVT_ECONFIG with kvt_errmsg() naming the value and the accepted forms
 * (no sign, exponent, hex, leading zero or overflow).  Thread-safe; no pointer may be NULL. */
KVT_API int kvt_parse_size(const char *s, uint64_t bare_unit, uint64_t *out);

/* The grammar of every duration (ttl, gc --ttl): "3600", "90s", "90m",
 * "1.5h", "7d", "2w", in whole seconds (rounded down), at most 100 years.
 * 0 with *out set, or KVT_ECONFIG with kvt_errmsg() naming the value and
 * the forms.  Thread-safe; no pointer may be NULL. */
KVT_API int kvt_parse_duration(const char *s, uint64_t *out);

/* Format a byte count for people ("1.50 GiB") into buf; returns buf. */
KVT_API const char *kvt_fmt_size(uint64_t bytes, char *buf, size_t len);

/* Resolve a namespace against a configuration without opening a store (the
 * tenant's secret and the default chunk size come from `cfg`).  Same results
 * and errors as kvt_ns_init. */
KVT_API int kvt_config_ns(const kvt_config *cfg, const kvt_ns_desc *desc, kvt_ns *ns);

/* --- model presets ------------------------------------------------------ */

/* A model kvtier knows by name: its KV shape (a chunk's layout) and its size
 * (what the planner's prefill cost model needs).  The table is static and
 * immutable: entries are valid for the life of the process and may be read
 * from any thread. */
typedef struct kvt_model_preset {
	const char *name;     /* short name: "llama3.1-8b" */
	const char *model_id; /* the Hugging Face id */
	const char *title;    /* the planner's catalog name: "Llama-3.1-8B" */
	double params;        /* weights; 0: not a model to plan for */
	uint32_t layers, d_model, kv_heads, head_dim;
} kvt_model_preset;

/* By short name, model id or title (titles case-insensitively); NULL if
 * none or if `name` is NULL. */
KVT_API const kvt_model_preset *kvt_model_preset_find(const char *name);

/* The i-th preset, or NULL past the last (i from 0: a loop lists them). */
KVT_API const kvt_model_preset *kvt_model_preset_at(size_t i);

/* Zero *d and fill the model id and its KV layout (bf16, K and V, the
 * default block and chunk sizes); the caller sets ranks and tenant.
 * Neither pointer may be NULL. */
KVT_API void kvt_model_preset_desc(const kvt_model_preset *m, kvt_ns_desc *d);

/* --- object files -------------------------------------------------------- */

/* How an inspected object is signed (shared tiers add an HMAC trailer). */
enum kvt_object_sig {
	KVT_SIG_NONE = 0,        /* unsigned; no key configured */
	KVT_SIG_VERIFIED = 1,    /* a trailer, verified with the key */
	KVT_SIG_UNCHECKED = 2,   /* a trailer, no key given to check it */
	KVT_SIG_MISSING = 3,     /* unsigned while a key is configured: a tier
				  * with object_auth_key refuses it */
};

/* What kvt_object_inspect_fd found in a valid object. */
typedef struct kvt_object_info {
	kvt_key key;
	uint8_t ns_digest[32];
	uint32_t version;      /* object format version */
	kvt_layout layout;     /* chunk_tokens is the object's token count */
	uint32_t n_layers;     /* layers in the payload (each checksummed) */
	uint64_t payload_bytes;
	uint32_t signature;    /* enum kvt_object_sig */
} kvt_object_info;

/* The name of a kvt_dtype ("bf16", "fp8_e4m3"), "?" for other values. */
KVT_API const char *kvt_dtype_name(uint32_t dtype);

/* Read one object image from `fd` (a file, a pipe) and verify it whole:
 * header, every layer's checksum, and the HMAC trailer when `cfg` (may be
 * NULL) has an object_auth_key.  What is read is bounded by what the header
 * declares: 4 KiB, then the declared payload (at most 16 GiB), then at most
 * one byte past an HMAC trailer, so a wrong file (/dev/zero, a log) fails
 * at its first 4 KiB.  The descriptor is read from its current offset and
 * not closed.  0 with *info filled, or: KVT_EBADMAGIC, KVT_EVERSION,
 * KVT_EHDRCSUM, KVT_EMALFORMED (not an object, or a damaged header),
 * KVT_ETRUNCATED (shorter than declared), KVT_EMALFORMED (bytes after the
 * declared object that are not a trailer), KVT_ECORRUPT (a layer's checksum,
 * or an HMAC tag that does not verify), KVT_ENOMEM, or a negated errno from
 * read(2); kvt_errmsg() says what was wrong with sizes and layer numbers.
 * Thread-safe; `info` is the caller's. */
KVT_API int kvt_object_inspect_fd(int fd, const kvt_config *cfg, kvt_object_info *info);

/* --- shared-directory garbage collection -------------------------------- */

typedef struct kvt_gc_opts {
	uint64_t budget;      /* bytes of objects to keep at most; 0 = no
			       * budget (TTL only) */
	int64_t ttl_s;        /* objects older than this go; 0 = no TTL */
	int64_t tmp_grace_s;  /* temporaries older than this go; 0 = 15 min */
	int dry_run;          /* count what would go; remove nothing */
} kvt_gc_opts;

typedef struct kvt_gc_result {
	uint64_t files, bytes;            /* objects found */
	uint64_t removed, removed_bytes;  /* removed (dry run: would be) */
	uint64_t expired;                 /* of those, for the TTL */
	uint64_t raced;                   /* already gone: another collector */
	uint64_t tmp_removed;             /* stale temporaries */
	uint64_t errors;                  /* removals that failed otherwise */
	uint64_t bytes_left;              /* bytes - removed_bytes */
	double seconds;                   /* the pass's wall time */
} kvt_gc_result;

/* One garbage-collection pass over a shared-directory tier's root `dir`,
 * with no coordinator and no store: any number of nodes may run it at once
 * while others read and write.  Oldest first by modification time (which
 * readers touch at most once a minute), every object older than ttl_s goes,
 * then more until at most `budget` bytes remain; an open file stays
 * readable to whoever holds it.  The budget is soft: what writers publish
 * during the pass is not seen by it.  0 with *res filled (failed removals
 * are counted in res->errors, not fatal); KVT_EINVAL for a NULL pointer or
 * a negative duration; a negated errno when `dir` cannot be read, with the
 * path in kvt_errmsg().  Thread-safe. */
KVT_API int kvt_shared_gc(const char *dir, const kvt_gc_opts *o, kvt_gc_result *res);

/* ------------------------------------------------------------------------ */
/* Store                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct kvt_store kvt_store;

/* Open a store: every tier the configuration names, fastest first, each
 * one's index rebuilt from its medium (a disk tier lists its directory, an
 * S3 tier its prefix; see docs/TIERS.md).  The configuration is copied; the
 * caller may free it at once.  On failure returns NULL and *err (may be
 * NULL) gets the code, kvt_errmsg() naming the tier and why: KVT_EINVAL (no
 * configuration), KVT_ECONFIG (no tier configured, a capacity below two
 * pages), a negated errno of a tier's directory or arena (-EACCES,
 * -ENOMEM for an arena that cannot be reserved), or an S3 endpoint's
 * failure.  A disk tier that refuses writes opens read-only by itself. */
KVT_API kvt_store *kvt_store_open(const kvt_config *cfg, int *err);

/* Wait for in-flight asynchronous operations and queued background copies,
 * then free everything.  Every kvt_ref must have been released and every
 * kvt_op freed before; no other thread may be inside a call on `st`.  NULL
 * is a no-op. */
KVT_API void kvt_store_close(kvt_store *st);

/* Resolve a namespace description against the store (tenant secret, chunk
 * size).  0, KVT_EINVAL (a NULL pointer, no model id, an unknown hash
 * scheme, a rank outside its size, strings too long), KVT_ETENANT (the
 * tenant is not configured) or KVT_ELAYOUT (see kvt_layout_check), with the
 * reason in kvt_errmsg().  Pure: touches no tier. */
KVT_API int kvt_ns_init(kvt_store *st, const kvt_ns_desc *desc, kvt_ns *ns);

/* How durable a put must be before it returns.  The DRAM tier only gives
 * KVT_DUR_CACHED; asking for more from a store without a disk tier is
 * KVT_ENOTSUP.
 *
 * KVT_DUR_CACHED promises the first tier that takes puts and nothing more:
 * the copies to the write-through tiers below are made in the background
 * after kvt_put returns 0, and they can fail (a full or read-only disk, a
 * dead endpoint) or be refused by admission; a process that exits at once
 * loses them.  Such failures are counted in kvt_tier_stats.write_errors
 * and last_write_error.  To know where a chunk is, call kvt_store_flush and
 * kvt_locate; to be told at put time, ask KVT_DUR_CRASH_SAFE or more, which
 * writes every tier that takes puts before returning. */
enum kvt_durability {
	KVT_DUR_CACHED = 0,     /* in memory; may be evicted or lost */
	KVT_DUR_CRASH_SAFE = 1, /* survives the process being killed */
	KVT_DUR_POWER_SAFE = 2, /* fsynced; survives power loss */
};

/* Store a chunk.  `payload` is the layer-major KV of one chunk and must be
 * exactly kvt_layout_payload_bytes(&ns->layout) long.  The payload is
 * copied before the call returns; the checksums are computed in the same
 * pass.  Returns 0, or:
 *   KVT_EEXIST    the key is already stored; nothing changed (first wins)
 *   KVT_ELAYOUT   `len` is not the namespace's chunk size
 *   KVT_EINVAL    a NULL pointer, an unknown durability
 *   KVT_ENOTSUP   a durability beyond KVT_DUR_CACHED and no disk tier
 *   KVT_ETOOBIG   larger than any tier could ever hold
 *   KVT_EFULL     no tier accepted it: full of pinned or borrowed chunks,
 *                 or every tier refused it (admission, writes off)
 *   -EROFS        the store is open read-only
 *   -EIO, -ENOSPC with KVT_DUR_CRASH_SAFE or more: a tier the durability
 *                 needs failed; kvt_errmsg() names it
 * With KVT_DUR_CACHED, failures of the copies below are not returned; see
 * enum kvt_durability. */
KVT_API int kvt_put(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	    const void *payload, size_t len, int durability);

/* Same, from one buffer per layer (`layers[i]` holds
 * kvt_layout_layer_bytes() bytes), as a connector that saves layer by layer
 * has them.  Same results; KVT_ELAYOUT if n_layers is not the namespace's,
 * KVT_EINVAL if a layer pointer is NULL. */
KVT_API int kvt_put_layers(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		   const void *const *layers, uint32_t n_layers, int durability);

/* Copy a chunk's payload into `buf` (capacity `cap`).  *len (may be NULL)
 * gets the payload length.  The fastest tier holding the key serves it; a
 * hit below the first tier is promoted in the background.  Returns 0,
 * KVT_ENOTFOUND (no tier holds a good copy, or the chunk is older than the
 * TTL), KVT_ESMALL (`buf` NULL or `cap` short; *len says what is needed).
 * A copy that fails verification is never handed out: it is no longer
 * served by its tier, counted (kvt_tier_stats.corrupt) and logged, and the
 * search goes on in the tiers below; a tier that fails to read is counted
 * (read_errors) and passed over the same way.  Either ends as a miss like
 * any other. */
KVT_API int kvt_get(kvt_store *st, const kvt_ns *ns, const kvt_key *key, void *buf,
	    size_t cap, size_t *len);

/* Copy one layer of a chunk into `buf`, verifying that layer's checksum
 * alone.  As kvt_get; KVT_EINVAL for a layer past the chunk's, KVT_ESMALL
 * if `cap` is below kvt_layout_layer_bytes(). */
KVT_API int kvt_get_layer(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  uint32_t layer, void *buf, size_t cap);

/* 1 if present in any tier, 0 if not, or KVT_EINVAL.  From memory (each
 * tier's index); may count a chunk past its TTL until a put replaces it. */
KVT_API int kvt_exists(kvt_store *st, const kvt_ns *ns, const kvt_key *key);

/* Remove a chunk from every tier.  0, KVT_ENOTFOUND (no tier held it),
 * -EROFS (read-only store), or the first tier's failure to remove it (a
 * negated errno: the chunk may still be served from there).  A reader
 * holding a kvt_ref keeps its view until it releases it. */
KVT_API int kvt_delete(kvt_store *st, const kvt_ns *ns, const kvt_key *key);

/* --- puts written in place ------------------------------------------------ */

typedef struct kvt_put_buf kvt_put_buf;

/* Reserve the space of a chunk of `ns`'s layout under `key` in the first
 * tier the put writes, for the caller to write the payload into where it
 * will be stored (from a socket, say: no copy of the caller's).  The
 * payload's memory is kvt_put_buf_iov's; kvt_put_publish then checksums it
 * where it lies and stores it as kvt_put would; kvt_put_cancel gives the
 * space back.  Until one of them the space is held: it counts against the
 * tier's capacity and is invisible to readers.  0 with *out, or kvt_put's
 * codes (KVT_EEXIST: the key is stored already, whatever the durability;
 * KVT_EFULL, ...) with nothing held. */
KVT_API int kvt_put_reserve(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
			    int durability, kvt_put_buf **out);

/* The payload's segments, in order, kvt_layout_payload_bytes() in all: the
 * caller writes every byte.  Valid until publish or cancel.  0 or
 * KVT_EINVAL (a NULL pointer). */
KVT_API int kvt_put_buf_iov(const kvt_put_buf *b, const struct iovec **iov, int *n_iov);

/* The payload's first `bytes` are written and will not change: the
 * checksums of the layers they complete are computed now, while those
 * bytes are in the cache, and publish has the rest only to do.  Optional;
 * call it as often as convenient.  0 or KVT_EINVAL. */
KVT_API int kvt_put_buf_written(kvt_put_buf *b, uint64_t bytes);

/* Checksum the payload written in place and store the chunk: kvt_put's
 * results.  `b` is freed whatever the result. */
KVT_API int kvt_put_publish(kvt_put_buf *b);

/* Give the space back; nothing is stored.  NULL is a no-op. */
KVT_API void kvt_put_cancel(kvt_put_buf *b);

/* --- zero-copy reads ----------------------------------------------------- */

typedef struct kvt_ref kvt_ref;

/* Borrow a chunk without copying it.  The returned reference pins the chunk:
 * it is neither evicted nor reused until kvt_release, and its memory stays
 * valid until then even if the chunk is deleted.  0 with *ref set, or as
 * kvt_get (KVT_ENOTFOUND, ...) with *ref NULL. */
KVT_API int kvt_borrow(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       kvt_ref **ref);

/* The payload as a list of memory segments, in order.  *iov points into the
 * reference and is valid until kvt_release; the memory is read-only.  0 or
 * KVT_EINVAL (a NULL pointer).  kvt_ref_len: the payload's bytes (0 for
 * NULL). */
KVT_API int kvt_ref_iov(const kvt_ref *ref, const struct iovec **iov, int *n_iov);
KVT_API uint64_t kvt_ref_len(const kvt_ref *ref);

/* Verify the borrowed payload's checksums (every layer).  0, KVT_ECORRUPT
 * (with the layer in kvt_errmsg()), or KVT_EINVAL. */
KVT_API int kvt_ref_verify(const kvt_ref *ref);

/* Copy one layer of the borrowed payload into `buf`, verifying that
 * layer's checksum in the same pass (kvt_get_layer without a second
 * lookup: borrow a chunk once, read its layers one by one into a buffer
 * that stays in cache).  0, KVT_ECORRUPT (nothing usable in buf),
 * KVT_EINVAL (a layer past the chunk's, a NULL pointer), KVT_ESMALL (`cap`
 * below kvt_layout_layer_bytes()). */
KVT_API int kvt_ref_read_layer(const kvt_ref *ref, uint32_t layer, void *buf, size_t cap);

/* Give a reference back; NULL is a no-op.  Any thread may release it. */
KVT_API void kvt_release(kvt_ref *ref);

/* --- whole images, between nodes ------------------------------------------ */

/* Borrow the object image stored under `key` — its 4 KiB header and
 * payload, as the tiers hold it (docs/FORMAT.md) — from this node's own
 * tiers only (device, DRAM, local disk: not the shared file system, S3 or
 * other nodes), for a node daemon to hand to another node.  No namespace
 * is checked: the key names the chunk, and the receiving store checks the
 * image against its own namespace and verifies it.  The image is checked
 * for a sound header and length, and verified where the tier's reads are
 * (a disk); a bad copy is not served (it is dropped or listed as a get
 * would).  kvt_ref_iov then gives the whole image and kvt_ref_len its
 * bytes; kvt_release gives it back.  0, KVT_ENOTFOUND, KVT_ENOMEM or
 * KVT_EINVAL. */
KVT_API int kvt_image_borrow(kvt_store *st, const kvt_key *key, kvt_ref **ref);

/* How many of keys[0..n), from the first, this node's own tiers hold (as
 * kvt_image_borrow reads them), answered from memory.  >= 0, or
 * KVT_EINVAL. */
KVT_API int kvt_image_present(kvt_store *st, const kvt_key *keys, size_t n);

/* --- lookup -------------------------------------------------------------- */

/* Where each chunk of a prefix lives: tier index (0 = fastest) per chunk. */
typedef struct kvt_lookup_result {
	uint32_t n_hit;        /* leading chunks present */
	uint8_t *tier;         /* caller's array of n_keys entries, or NULL */
} kvt_lookup_result;

/* Longest run of leading keys present in some tier.  Answers from memory,
 * never waits on I/O, changes nothing (no promotion, no recency) — except
 * that a peer tier (other nodes' daemons, `peers`) is asked over the
 * network, once per lookup, for the part of the chain the node's own
 * tiers do not hold.  `res`
 * may be NULL; res->tier, if not NULL, gets n_hit entries.  Returns n_hit
 * (>= 0) or KVT_EINVAL.  A chunk past its TTL may still count (see
 * CAVEATS); a tier whose endpoint does not answer answers from its last
 * listing. */
KVT_API int kvt_lookup(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
	       size_t n_keys, kvt_lookup_result *res);

/* Tensor- and pipeline-parallel ranks are one unit: a prefix hits only as
 * far as every rank's shard is present.  keys[r] is rank r's chain (in that
 * rank's namespace, ns[r]), each n_keys long.  Returns the common prefix
 * length; res->tier[i] (if given) is the slowest tier any rank's shard i
 * sits in, the one that bounds its load time.  KVT_EINVAL for no ranks or
 * a NULL chain.  From memory, like kvt_lookup. */
KVT_API int kvt_lookup_ranks(kvt_store *st, const kvt_ns *ns, size_t n_ranks,
		     const kvt_key *const *keys, size_t n_keys,
		     kvt_lookup_result *res);

/* How many leading chunks of a lookup are worth loading rather than
 * recomputing: the prefix that saves the most time, given that recomputing
 * one chunk takes `recompute_s` seconds and loading from each tier takes
 * the latency and bandwidth the store has measured on its reads (planning
 * defaults until it has: the same table the planner uses).  The engine
 * loads that many and recomputes the rest.  Returns the count (0..n_hit)
 * or KVT_EINVAL.  Reads only measured figures; never waits. */
KVT_API int kvt_lookup_worth(kvt_store *st, const kvt_ns *ns,
		     const kvt_lookup_result *res, double recompute_s);

/* Hash a prompt's tokens and look the chain up in one call.  `keys`, if not
 * NULL, receives the chain (at most max_keys entries); `extra` and `res` may
 * be NULL.  Returns the number of leading whole chunks present, or
 * KVT_EINVAL.  The partial last chunk is never keyed. */
KVT_API int kvt_lookup_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens,
		      size_t n_tokens, const kvt_extra_keys *extra,
		      kvt_key *keys, size_t max_keys, kvt_lookup_result *res);

/* --- why a prompt missed (docs/WHY.md) ----------------------------------- */

enum kvt_why_reason {
	KVT_WHY_HIT = 0,       /* served, from `tier` */
	KVT_WHY_PREFIX = 1,    /* held (in `tier`) but not served: an earlier chunk is missing */
	KVT_WHY_NEVER = 2,     /* never stored under this namespace, as far as the store knows */
	KVT_WHY_NAMESPACE = 3, /* stored under another namespace: `detail` names the fields */
	KVT_WHY_EVICTED = 4,   /* evicted from `tier` at `when` */
	KVT_WHY_DELETED = 5,   /* deleted (or replaced by another writer's copy) at `when` */
	KVT_WHY_CORRUPT = 6,   /* failed its checks in `tier` at `when`, dropped */
	KVT_WHY_EXPIRED = 7,   /* past the store's TTL, removed at `when` */
	KVT_WHY_DEADLINE = 8,  /* a load of it missed its deadline at `when` */
	KVT_WHY_TIER_DOWN = 9, /* `tier` does not answer: it may hold the chunk */
	KVT_WHY_REASONS = 10
};

typedef struct kvt_why_chunk {
	int32_t reason; /* enum kvt_why_reason */
	int32_t tier;   /* the tier it concerns, -1 for none */
	double when;    /* CLOCK_REALTIME seconds of the event; 0 if none */
	char detail[256]; /* a sentence saying it, with names and values */
} kvt_why_chunk;

/* Why each of keys[0..n) is or is not served: out[i] for each.  From
 * memory: the tiers' indexes, a bounded history of chunks that left a tier
 * (the most recent tens of thousands), and the tiers' health.  A key the
 * history no longer remembers and no tier holds is KVT_WHY_NEVER.  Returns
 * how many leading chunks are served (as kvt_lookup), or KVT_EINVAL. */
KVT_API int kvt_why(kvt_store *st, const kvt_ns *ns, const kvt_key *keys, size_t n,
		    kvt_why_chunk *out);

/* kvt_why over a prompt's chain (its whole chunks, at most max_out), and
 * for chunks no tier holds under `ns`: the other namespaces of the same
 * tenant this store has resolved (kvt_ns_init) are tried on the same
 * tokens, and a prefix found under one is KVT_WHY_NAMESPACE, its detail
 * naming each field that differs (model, revision, dtype and the rest of
 * the layout, ranks, LoRA, hash scheme).  Another tenant's namespaces are
 * never tried or named.  Returns the chunks written to out, or a code. */
KVT_API int kvt_why_tokens(kvt_store *st, const kvt_ns *ns, const uint32_t *tokens,
			   size_t n_tokens, const kvt_extra_keys *extra, kvt_why_chunk *out,
			   size_t max_out);

/* "hit", "prefix", "never", "namespace", "evicted", "deleted", "corrupt",
 * "expired", "deadline", "tier_down"; "?" for anything else. */
KVT_API const char *kvt_why_name(int reason);

/* Misses counted by reason (kvt_get and kvt_lookup that did not find a
 * chunk, each classified as kvt_why would), for `tenant` (NULL: the
 * default) and tier `tier` (-1: those no tier concerns).  0 for an
 * unknown tenant or a tier out of range. */
KVT_API uint64_t kvt_store_misses(kvt_store *st, const char *tenant, int reason, int tier);

/* --- warm starts (docs/DAEMON_OPS.md, "Warm starts") --------------------- */

/* Write the keys the first tier holds, the most recently used first, to
 * `path` (at most max_keys; 0: all), crash-safely (a temporary, fsync,
 * rename): the hot list a restarted node warms its first tier from.  0, or
 * a negated errno naming the file. */
KVT_API int kvt_store_hot_save(kvt_store *st, const char *path, size_t max_keys);

/* How a warm start goes; written as it goes by the thread that runs
 * kvt_store_warm, each field whole (another thread may read them). */
typedef struct kvt_warm_progress {
	uint64_t listed;       /* keys in the hot list */
	uint64_t done;         /* keys handled so far */
	uint64_t loaded;       /* chunks brought into the first tier */
	uint64_t loaded_bytes; /* their images' bytes */
	uint64_t already;      /* in the first tier already */
	uint64_t missing;      /* in no tier any more */
	uint64_t failed;       /* could not be loaded (damaged, an I/O error) */
	uint64_t budget_bytes; /* the budget in force */
	uint32_t finished;     /* 1 once kvt_store_warm has returned */
	uint32_t cancel;       /* set by another thread: stop after the chunk in hand */
} kvt_warm_progress;

/* Bring the chunks of the hot list at `path` that lower tiers hold into
 * the first tier, in the list's order, verified as they are copied, until
 * their bytes reach budget_bytes (0: the first tier's capacity less a
 * tenth) or the list ends, at most bytes_per_s (0: unlimited) so that the
 * shared tiers are not stampeded by a fleet restarting at once.  `p` (may
 * be NULL) follows the progress.  0; KVT_ENOTFOUND if there is no list;
 * KVT_EMALFORMED naming what is wrong with a damaged one (nothing is
 * loaded then); a negated errno. */
KVT_API int kvt_store_warm(kvt_store *st, const char *path, uint64_t budget_bytes,
			   uint64_t bytes_per_s, kvt_warm_progress *p);

/* --- batch forms --------------------------------------------------------- */

/* Store n chunks; results[i] (may be NULL) gets each one's kvt_put code.
 * Returns the number that were stored (KVT_EEXIST counts as stored: the
 * key is present), or KVT_EINVAL for NULL arrays. */
KVT_API int kvt_put_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  const void *const *payloads, size_t n, int durability,
		  int *results);

/* Fetch n chunks, each into bufs[i] of capacity cap; results[i] (may be
 * NULL) gets each one's kvt_get code.  Returns the number fetched, or
 * KVT_EINVAL for NULL arrays. */
KVT_API int kvt_get_batch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		  void *const *bufs, size_t cap, size_t n, int *results);

/* --- asynchronous operations --------------------------------------------- */

typedef struct kvt_op kvt_op;

/* Submit a get or a put to the store's worker pool and return at once.  The
 * buffers must stay valid (and, for a get, untouched) until the op completes.
 * The op is owned by the caller: free it with kvt_op_free once complete.
 * The call returns 0 with *op set, KVT_EINVAL (a NULL pointer, an
 * uninitialised namespace), or KVT_ECANCELED (the store is closing); the
 * op's own result (kvt_op_wait) is what kvt_get or kvt_put would return,
 * with kvt_op_errmsg() keeping the detail. */
KVT_API int kvt_get_async(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  void *buf, size_t cap, kvt_op **op);
KVT_API int kvt_put_async(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
		  const void *payload, size_t len, int durability, kvt_op **op);

/* Load the leading chunks of `keys` into the first tier before a request
 * needs them, most urgent work first (background copies never delay it).
 * The op completes when every chunk found is in the first tier, when the
 * prefix ends (a chunk in no tier), or at `deadline_ms` from now, whichever
 * comes first; its result is the number of leading chunks now in the first
 * tier (a partial hit: the engine recomputes the rest).  `keys` is copied.
 * A negative deadline is "now": only what is already in the first tier
 * counts.  Submission errors as kvt_get_async. */
KVT_API int kvt_prefetch(kvt_store *st, const kvt_ns *ns, const kvt_key *keys,
		 size_t n_keys, int deadline_ms, kvt_op **op);

/* KVT_EAGAIN while in flight; otherwise the op's result code (KVT_EINVAL
 * for NULL).  Never blocks. */
KVT_API int kvt_op_poll(kvt_op *op);

/* Wait up to timeout_ms (-1: forever; measured on CLOCK_MONOTONIC).
 * KVT_ETIMEDOUT if still in flight (the op goes on), else the op's result
 * code. */
KVT_API int kvt_op_wait(kvt_op *op, int timeout_ms);

/* The detail of a completed op's failure (what kvt_errmsg() said in the
 * worker that ran it); "" while in flight or after success.  Owned by the
 * op: valid until kvt_op_free. */
KVT_API const char *kvt_op_errmsg(kvt_op *op);

/* Bytes transferred by a completed op (0 while in flight, for NULL). */
KVT_API uint64_t kvt_op_bytes(const kvt_op *op);

/* Free an op.  Freeing an op still in flight waits for it first; NULL is a
 * no-op. */
KVT_API void kvt_op_free(kvt_op *op);

/* Pin (`pin` nonzero) or unpin a chunk in every tier that holds it: a
 * pinned chunk is never chosen for eviction (a shared system prompt).  Pins
 * nest.  0, KVT_ENOTFOUND if no tier holds it, KVT_ENOTSUP if a tier that
 * holds it has no eviction policy to pin in (S3's listing decides there).
 * In memory only: pins do not survive the process. */
KVT_API int kvt_pin(kvt_store *st, const kvt_ns *ns, const kvt_key *key, int pin);

/* --- tenants' shares ----------------------------------------------------- */

/* A store shared by tenants (the `tenants` of the configuration) charges
 * each chunk a put stores to the tenant whose namespace it was put under:
 * the tenant kvt_ns_init resolved (a namespace from kvt_config_ns, and a
 * chunk found on disk at open, are the default tenant's).  A copy of it in
 * another tier (promotion, demotion, write-through) stays charged to that
 * tenant.  Per tier, a tenant may have:
 *  - a quota: past it, the tenant's own least valuable chunks (by the
 *    tier's eviction policy, among the tenant's) leave the tier, so one
 *    tenant cannot fill it;
 *  - a reservation: when the tier is full, chunks are taken from the tenant
 *    furthest above its reservation, and never from one at or under it, so
 *    another tenant's flood cannot push it below its share.
 * Without quotas or reservations the tier evicts among all tenants' chunks
 * as each tenant's policy ranks them, the fullest tenant first.  The
 * default tenant is named NULL.
 *
 * Set tenant `tenant`'s quota (0: none) and reservation in tier `tier`, in
 * bytes, rounded to the tier's accounting unit (a DRAM page, a disk block).
 * Takes effect at once: a quota under the tenant's usage evicts down to it
 * now.  0, or KVT_EINVAL (a tier out of range, a reservation above the
 * quota, or reservations of all tenants together above what the tier's
 * policy holds: kvt_tenant_usage.capacity), KVT_ETENANT (not configured),
 * KVT_ENOTSUP (a tier without an eviction policy: unbounded S3). */
KVT_API int kvt_store_set_quota(kvt_store *st, const char *tenant, int tier,
			uint64_t quota, uint64_t reserve);

/* Put a reloaded configuration's policies in force in a running store (a
 * daemon's SIGHUP): for every tier, its admission (the counts it kept
 * start over when it changes), write mode, background bandwidth and
 * eviction policy (rebuilt over what the tier holds, recency and pins
 * carried over; chunks it then finds over capacity are evicted), and the
 * store's ttl.  Every other key — capacities, paths, endpoints, the tier
 * set, tenants — takes effect at the next open only: their names are
 * written to `later` (when not NULL; "" when none differs), for the caller
 * to say so.  0, or KVT_ENOTSUP (an eviction policy added to or removed
 * from a tier: at the next open only; the rest was applied), KVT_ENOMEM,
 * KVT_EINVAL. */
KVT_API int kvt_store_reconfigure(kvt_store *st, const kvt_config *cfg, char *later,
				  size_t later_len);

typedef struct kvt_tenant_usage {
	uint64_t bytes;           /* held in the tier, in accounting units */
	uint64_t chunks;
	uint64_t quota, reserve;  /* as set (bytes, rounded); quota 0 = none */
	uint64_t capacity;        /* what the tier's policy holds, all tenants */
	uint64_t quota_evictions; /* chunks it lost to its own quota */
	uint64_t share_evictions; /* chunks it lost to room for others (or
				   * for itself) in a full tier */
} kvt_tenant_usage;

/* Fill `out` with tenant `tenant`'s share of tier `tier`.  0, KVT_EINVAL,
 * KVT_ETENANT or KVT_ENOTSUP, as kvt_store_set_quota. */
KVT_API int kvt_store_tenant_usage(kvt_store *st, const char *tenant, int tier,
			   kvt_tenant_usage *out);

/* --- statistics ---------------------------------------------------------- */

typedef struct kvt_tier_stats {
	char name[16];            /* "dram", "nvme", ... */
	uint64_t capacity_bytes;  /* what the tier may hold */
	uint64_t used_bytes;      /* what it holds now (whole pages) */
	uint64_t chunks;          /* objects it holds */
	uint64_t hits, misses;
	uint64_t puts, put_exists, put_rejects; /* rejects: full / too big */
	uint64_t bytes_in, bytes_out;
	uint64_t evictions, evicted_bytes;
	uint64_t corrupt;         /* objects dropped because they failed checks */
	uint64_t borrowed;        /* references outstanding now */
	uint64_t promotions;      /* chunks copied from this tier up to the first */
	uint64_t demotions;       /* chunks this tier took from the tier above */
	uint64_t admit_rejects;   /* chunks its admission policy turned away */
	uint64_t policy_evictions;/* of `evictions`, those its policy chose */
	uint64_t pinned;          /* pins held now */
	uint64_t write_errors;    /* puts that failed with an I/O error */
	double read_gbps;         /* measured read bandwidth (EWMA), GB/s */
	double read_latency_us;   /* measured fixed cost of a read (EWMA) */
	uint64_t get_latency_log2_us[24]; /* reads served (gets and borrows):
					   * [i] took < 2^i us */
	uint32_t writes_off;      /* 1 while the store admits no writes to the
				   * tier after repeated I/O errors (it keeps
				   * serving reads) */
	char last_write_error[160]; /* why the last failed write to the tier
				     * failed ("" if none has) */
	uint32_t unreachable;     /* 1 while the tier's endpoint does not answer
				   * (its index is then not known to be
				   * complete: a miss may be a false one) */
	uint32_t read_only;       /* 1 if the tier was opened for reading only */
	uint64_t bad_listed;      /* objects found bad and left in place, listed
				   * by kvtier verify */
	uint64_t read_errors;     /* gets that failed other than by a miss */
	char state[160];          /* why the tier is degraded ("" if healthy) */
} kvt_tier_stats;

/* The store's KV events (the configuration's kv_events; docs/EVENTS.md). */
typedef struct kvt_events_stats {
	uint64_t batches;       /* KVEventBatch messages published */
	uint64_t events;        /* events in them */
	uint64_t dropped;       /* events dropped: the publisher's queue was full */
	uint64_t send_failures; /* batches the PUB socket refused (kept for replay) */
	uint64_t replays;       /* replay requests answered */
	uint64_t replay_errors; /* malformed replay requests (answered with an error) */
	uint64_t last_seq;      /* the last batch's sequence number */
	uint64_t queued;        /* events waiting for the publisher now */
	uint32_t enabled;       /* 1 when the store publishes events */
} kvt_events_stats;

/* Chunk `key` holds the engine's KV blocks hashes[0..n_hashes), each
 * hash_len bytes (32: vLLM's sha256_cbor digest; 8: its 64-bit integer
 * form, big-endian), following the block `parent` (NULL for a prompt's
 * first), block_size tokens each: the store's KV events then name the
 * chunk by them, as the engine's own events do, so that a router indexing
 * the engine's hashes matches the chunk (docs/EVENTS.md).  Remembered for
 * the most recent chunks named (a bounded table); a store that is
 * kvtierd's client tells the daemon.  0 (also when events are off), or
 * KVT_EINVAL for more than 16 hashes or another hash length. */
#define KVT_CHUNK_NAME_MAX 16 /* engine blocks a named chunk holds at most */
KVT_API int kvt_store_name_chunk(kvt_store *st, const kvt_key *key, const uint8_t *hashes,
				 uint32_t n_hashes, uint32_t hash_len, const uint8_t *parent,
				 uint32_t block_size);

/* Fill `out` with the store's event counters (all zero, enabled 0, when it
 * publishes none).  0 or KVT_EINVAL. */
KVT_API int kvt_store_events_stats(kvt_store *st, kvt_events_stats *out);

/* Wait until the background work queued so far (promotions of hits in lower
 * tiers, write-through to lower tiers, demotions, and what those queue in
 * turn) has run, or `timeout_ms` passes (-1: no limit).  0 or
 * KVT_ETIMEDOUT.  A copy that failed is counted in its tier's
 * write_errors and last_write_error; kvt_locate then says where each chunk
 * is.  A short-lived process that put chunks calls this before it exits. */
KVT_API int kvt_store_flush(kvt_store *st, int timeout_ms);

/* Which tiers hold `key` now: bit i of *mask for tier i.  From memory, like
 * kvt_lookup.  Returns how many, or a negative code. */
KVT_API int kvt_locate(kvt_store *st, const kvt_ns *ns, const kvt_key *key,
	       uint32_t *mask);

/* Number of tiers of the store (0 for NULL). */
KVT_API int kvt_store_tiers(const kvt_store *st);

/* Fill `out` for tier `tier` (0 = fastest).  0 or KVT_EINVAL (a tier
 * index out of range).  A snapshot: counters are read without stopping
 * the store, so two of them may be from instants a few operations apart. */
KVT_API int kvt_store_stats(kvt_store *st, int tier, kvt_tier_stats *out);

/* Call `fn` for each chunk of tier `tier` with its key and payload length.
 * A nonzero return from `fn` stops the walk and is returned.  Chunks put or
 * evicted during the walk may or may not be seen.  KVT_EINVAL for a NULL
 * `fn` or a tier out of range.  `fn` may call into the store (CONVENTIONS). */
KVT_API int kvt_store_iterate(kvt_store *st, int tier,
		      int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		      void *arg);

/* What the header of chunk `key` in tier `tier` says (*info: its key,
 * namespace digest, layout, payload length; signature KVT_SIG_UNCHECKED),
 * and bytes [off, off + len) of its payload copied into `buf`, reading
 * nothing else where the tier can: the file tiers read the header's 4 KiB
 * and the blocks that hold the range; the others borrow the image.  For a
 * reader that lists a tier and needs each chunk's header and a few bytes
 * of it (kvtierd rebuilds its keys from their last bytes) without reading
 * gigabytes.  NOTHING IS VERIFIED but the header's own checksum: neither a
 * layer's checksum nor an HMAC tag, nor the TTL; a reader that acts on the
 * bytes checks them itself, and one that needs the payload whole reads it
 * with kvt_get.  len 0 reads the header alone (`buf` may then be NULL).
 * Returns 0, or:
 *   KVT_ENOTFOUND   the tier does not hold `key`
 *   KVT_EINVAL      a NULL pointer, a tier out of range, a range past the
 *                   payload's end
 *   KVT_EBADMAGIC, KVT_EVERSION, KVT_EHDRCSUM, KVT_EMALFORMED, KVT_ELAYOUT
 *                   a damaged header (kvt_object_inspect_fd's codes)
 *   KVT_EMISMATCH   the header names another key
 *   KVT_ETRUNCATED  the stored image is shorter than its header declares
 *   a negated errno from the medium (kvt_errmsg() names the file).
 * The tier is not changed: a damaged object is reported, never dropped;
 * kvt_get or kvt_store_verify judges it. */
KVT_API int kvt_store_peek(kvt_store *st, int tier, const kvt_key *key, kvt_object_info *info,
			   uint64_t off, void *buf, size_t len);

/* --- serving the node's processes (kvtierd; docs/DAEMON.md) -------------
 *
 * A store opened with the configuration key `daemon: unix:///path` (or
 * KVTIER_DAEMON) is a client of the daemon listening there: every call
 * above works on it unchanged, its one tier being the daemon's whole
 * store, the data moving through shared memory (a put costs one copy, a
 * get one, a borrow none).  kvt_local_serve is the daemon's side: it
 * serves `st` on a Unix socket at o->path.  The store's first tier must be
 * DRAM with `dram_shared: true`: its arena is what clients map.  Every
 * process that can open the socket can read and write that arena (every
 * chunk in DRAM), so it is created with mode o->mode (0: 0660) and only
 * peers of the daemon's own uid, root, or a uid in o->uids are served.
 * A connection acts as the tenant o->tenant_of names for its peer's uid
 * (a tenant of the store's configuration; NULL, or no tenant_of: the
 * default tenant): its puts are charged to that tenant's quotas.  A name
 * the store does not know refuses the connection. */
typedef struct kvt_local_server kvt_local_server;
typedef struct kvt_local_opts {
	const char *path;
	unsigned mode;
	const uint32_t *uids;
	size_t n_uids;
	const char *(*tenant_of)(void *arg, uint32_t uid);
	void *tenant_arg;
} kvt_local_opts;

/* 0, KVT_ECONFIG (no shared DRAM tier first), KVT_EINVAL, or -errno from
 * the socket (-EADDRINUSE: another daemon listens there). */
KVT_API int kvt_local_serve(kvt_store *st, const kvt_local_opts *o, kvt_local_server **out);
/* Stop accepting, close every client (releasing what each held) and
 * remove the socket.  Before kvt_store_close. */
KVT_API void kvt_local_stop(kvt_local_server *s);

/* What kvt_store_verify found. */
typedef struct kvt_verify_result {
	uint64_t checked;      /* objects read and verified, bad ones included */
	uint64_t bad;          /* objects that failed, wherever found */
	uint64_t unverifiable; /* of `bad`, those only unverifiable here: a
				* newer format, a tag without its key */
	uint64_t repaired;     /* of `bad`, those moved into the quarantine */
	uint64_t bytes;        /* payload bytes verified */
} kvt_verify_result;

/* Read every chunk of tier `tier` and check it whole: header, key, every
 * layer's checksum (an fsck), and list the objects the tier found bad
 * before (at open, on a read) and left in place.  Each bad object is
 * reported to `bad_fn` (may be NULL) with its key, KVT_ECORRUPT (damaged)
 * or KVT_ENOTSUP (not verifiable here), and the reason with its path (a
 * string valid during the call).  Without `drop` nothing on any medium
 * changes: a bad copy is only no longer served.  With `drop` (repair) each
 * damaged object is moved into the tier's quarantine directory
 * (<dir>/quarantine/<hex>.<time>.kvt, with a .why file beside it); a
 * shared tier leaves what it merely cannot verify, since another node may
 * read it.  Chunks put or evicted meanwhile may or may not be seen.
 * Returns 0 or a negative code (-EROFS: `drop` on a read-only store;
 * KVT_EINVAL: a tier out of range, `res` NULL); the tally is in *res.
 * `bad_fn` may call into the store (CONVENTIONS). */
KVT_API int kvt_store_verify(kvt_store *st, int tier, int drop,
		     void (*bad_fn)(void *arg, const kvt_key *key, int err,
				    const char *why),
		     void *arg, kvt_verify_result *res);

/* ==== Capacity planning and trace replay ================================== */

/*
 * What `kvtier plan` and `kvtier replay` are built on: read a request trace,
 * simulate a configuration of tiers over it (no data; the store's own
 * eviction and admission policies), and price the result with the cost
 * model.  docs/PLANNING.md gives the formats, the semantics and the sources
 * of every figure.
 *
 * Thread safety: a kvt_plan_trace is immutable once read; any number of
 * threads may simulate over one at once.  The catalog (models, GPUs, tiers)
 * may be read from any thread, except while kvt_plan_catalog_load runs:
 * load catalogs first, then plan.
 */

/* A request trace: per request, the prefix-block ids in prompt order (as
 * dense ids, in order of first appearance), arrival and lengths. */
typedef struct kvt_plan_trace kvt_plan_trace;

enum kvt_plan_format {
	KVT_PLAN_FMT_AUTO = 0,     /* from the first non-blank line */
	KVT_PLAN_FMT_MOONCAKE = 1, /* JSONL, timestamp in ms, 512-token blocks */
	KVT_PLAN_FMT_BAILIAN = 2,  /* JSONL (Qwen/Bailian), seconds, 16-token blocks */
	KVT_PLAN_FMT_TOKENS = 3,   /* token ids, one prompt a line, keyed by kvtier */
	KVT_PLAN_FMT_VLLM = 4,     /* vLLM KV events (BlockStored), JSON lines */
};

/* "auto", "mooncake", "bailian" (or "qwen"), "tokens", "vllm" -> enum
 * kvt_plan_format; -1 if `name` is none of them.  `name` may not be NULL. */
KVT_API int kvt_plan_format_parse(const char *name);
/* The name of a format; "auto" for any other value.  Never NULL. */
KVT_API const char *kvt_plan_format_name(int format);

/* Read the trace in file `path` ("-": standard input), streaming it; a JSON
 * record is parsed whole and its fields taken by name.  `format` is an enum
 * kvt_plan_format; block_tokens 0 takes the format's own; max_requests > 0
 * keeps the first max_requests requests (and reads no further).  On
 * success *out is a trace for kvt_plan_trace_free.  Returns 0; KVT_EINVAL
 * for a trace that is wrong, with kvt_errmsg() naming the file, the line
 * and the field ("t.jsonl:3: timestamp: ... is out of range 0..."), for a
 * directory, for an unknown format, and for a trace with no request or no
 * whole block; KVT_ENOMEM; or -errno when the file cannot be opened or
 * read.  *out is NULL on failure.  `path` and `out` may not be NULL. */
KVT_API int kvt_plan_trace_read(const char *path, int format, uint32_t block_tokens,
				uint64_t max_requests, kvt_plan_trace **out);
/* The same for a trace held in memory (messages name it "trace"). */
KVT_API int kvt_plan_trace_parse(const char *buf, size_t len, int format,
				 uint32_t block_tokens, uint64_t max_requests,
				 kvt_plan_trace **out);
/* Free a trace; NULL is a no-op. */
KVT_API void kvt_plan_trace_free(kvt_plan_trace *t);

/* A read-only view of a trace; its arrays live as long as the trace. */
typedef struct kvt_plan_trace_view {
	int format;                /* enum kvt_plan_format, never AUTO */
	uint32_t block_tokens;     /* tokens per block */
	uint64_t requests;
	uint64_t blocks;           /* block references, all requests */
	uint64_t distinct_blocks;  /* dense ids are 0..distinct_blocks-1 */
	const uint64_t *off;       /* requests + 1: request q is ids[off[q]..off[q+1]) */
	const uint32_t *ids;       /* blocks */
	const double *arrive_s;    /* requests: seconds after the first */
	const uint32_t *in_len;    /* requests: prompt tokens */
	const uint32_t *out_len;   /* requests: generated tokens (0: unknown) */
} kvt_plan_trace_view;

/* Fill *out with the view of `t`.  Neither may be NULL. */
KVT_API void kvt_plan_trace_view_get(const kvt_plan_trace *t, kvt_plan_trace_view *out);

/* -- simulation -- */

#define KVT_PLAN_UNBOUNDED UINT64_MAX /* a capacity with no limit */
#define KVT_PLAN_MAX_NODES 1024

/* Tier slots: each node's DRAM (T0) over its NVMe (T1), exclusive; a tier
 * shared by all nodes (a file system or S3), inclusive. */
enum { KVT_PLAN_T0 = 0, KVT_PLAN_T1 = 1, KVT_PLAN_TS = 2, KVT_PLAN_NT = 3 };

enum kvt_plan_policy { KVT_PLAN_LRU = 0, KVT_PLAN_S3FIFO = 1 };
enum kvt_plan_route {
	KVT_PLAN_ROUTE_RR = 0,       /* round-robin */
	KVT_PLAN_ROUTE_AFFINITY = 1, /* the node holding the longest prefix */
	KVT_PLAN_ROUTE_BALANCED = 2, /* ... among those not above 1.25x the mean
				      * recent work (blocks computed) */
};
enum kvt_plan_admit {
	KVT_PLAN_ADMIT_ALL = 0,
	KVT_PLAN_ADMIT_SEEN = 1,     /* on the seen_n-th sighting (1..15) */
	KVT_PLAN_ADMIT_TINYLFU = 2,  /* more often seen than the victim */
	KVT_PLAN_ADMIT_PREFIX = 3,   /* blocks at depth >= min_prefix (>= 1) */
};

typedef struct kvt_plan_tier_conf {
	uint64_t capacity;    /* blocks; 0: the tier is absent (T0 must be > 0) */
	int admit;            /* enum kvt_plan_admit */
	uint32_t seen_n;      /* KVT_PLAN_ADMIT_SEEN */
	uint32_t min_prefix;  /* KVT_PLAN_ADMIT_PREFIX */
} kvt_plan_tier_conf;

typedef struct kvt_plan_conf {
	int policy;           /* enum kvt_plan_policy, every tier */
	unsigned nodes;       /* 1..KVT_PLAN_MAX_NODES */
	int route;            /* enum kvt_plan_route */
	kvt_plan_tier_conf tier[KVT_PLAN_NT];
	/* S3-FIFO only (0: the store's defaults, 10 and 1): the small queue's
	 * share of each tier in percent (1..90), and the hits a block needs
	 * in the small queue to move to the main one (1..3; libCacheSim's
	 * move_to_main_threshold, 2 there by default).  With s3_fill_main and
	 * 2, libCacheSim's S3FIFO to the access. */
	uint32_t s3_small_pct;
	uint32_t s3_promote;
	/* S3-FIFO: nonzero = libCacheSim's variant (until the first eviction,
	 * new blocks go to the main queue once the small one holds its
	 * share); 0 = the store's rule, always the small queue first. */
	int s3_fill_main;
} kvt_plan_conf;

typedef struct kvt_plan_result {
	uint64_t requests;
	uint64_t blocks;                  /* block references */
	uint64_t hit_blocks;              /* prefix hits, any tier */
	uint64_t hit_tier[KVT_PLAN_NT];   /* ... by the tier that held them */
	uint64_t tokens, hit_tokens;      /* prompt tokens, of which cached */
	uint64_t inserts[KVT_PLAN_NT];    /* blocks written per tier */
	uint64_t rejects[KVT_PLAN_NT];    /* refused by admission */
	uint64_t demotions, promotions;
	/* Per access, as a cache simulator counts (libCacheSim's hits): of
	 * the `blocks` accesses, those that found the block in tier k,
	 * whether or not it was part of the request's hit prefix. */
	uint64_t access_hits[KVT_PLAN_NT];
} kvt_plan_result;

/* Per request: blocks hit in T0, T1, S (a prefix, looked up in that order)
 * and the node it ran on. */
typedef struct kvt_plan_req_hit {
	uint32_t hit[KVT_PLAN_NT];
	uint32_t node;
} kvt_plan_req_hit;

/* Simulate configuration `c` over trace `t` into *r; per_req (may be
 * NULL) receives one entry per request.  A request's hit is its leading
 * blocks present in the node's tiers or the shared one; then every block
 * is accessed in prompt order.  Deterministic.  0; KVT_EINVAL for a
 * configuration out of range (nodes, an absent T0, an unknown policy,
 * route or admission rule, seen_n or min_prefix out of range: kvt_errmsg
 * names it); KVT_ENOMEM.  t, c and r may not be NULL. */
KVT_API int kvt_plan_simulate(const kvt_plan_trace *t, const kvt_plan_conf *c,
			      kvt_plan_result *r, kvt_plan_req_hit *per_req);

/* -- cost model -- */

typedef struct kvt_plan_model {
	char name[48];
	double params;                              /* parameters */
	uint32_t layers, d_model, kv_heads, head_dim;
} kvt_plan_model;

typedef struct kvt_plan_gpu {
	char name[48];
	double tflops;    /* dense BF16 */
	double mfu;       /* achieved share of it in prefill */
	double usd_hour;  /* one GPU-hour */
} kvt_plan_gpu;

/* A tier's speed and price.  The catalog's "dram", "nvme", "fs" and "s3"
 * carry the store's default tier speeds, the figures kvt_lookup_worth
 * starts from before it has measured its own reads. */
typedef struct kvt_plan_tier {
	char name[48];
	double gbps;            /* read bandwidth per node, 10^9 B/s */
	double latency_us;      /* first byte */
	double usd_gib_month;   /* storage */
	double usd_per_1k_get, usd_per_1k_put;
	/* What a fleet-wide tier serves all nodes together (0: no limit of
	 * its own): a parallel file system's throughput per TiB provisioned
	 * and its smallest size (FSx for Lustre: 0.125 GB/s per TiB, 1.2
	 * TiB), an object store's GET requests per second per key prefix and
	 * the prefixes the keys spread over (S3: 5,500). */
	double gbps_per_tib, min_tib;
	double get_per_s, prefixes;
} kvt_plan_tier;

/* A host link a load crosses ("pcie": host to accelerator, per
 * accelerator; "nic": node to the shared tier, per node). */
typedef struct kvt_plan_link {
	char name[48];
	double gbps;            /* 10^9 B/s, each direction */
} kvt_plan_link;

/* Where a catalog entry's figures come from: "built-in" (the planning
 * defaults of docs/PLANNING.md) or the catalog file and line that last
 * set them ("bench.cat:3").  kind is "model", "gpu", "tier" or "link";
 * NULL when there is no such entry.  Valid until the next catalog load. */
KVT_API const char *kvt_plan_catalog_source(const char *kind, const char *name);

/* The catalog entry named `name` (case-insensitive), or NULL
 * when there is none.  `name` may not be NULL.  The entry stays valid
 * until the process ends (a later catalog load may change its figures). */
KVT_API const kvt_plan_model *kvt_plan_model_find(const char *name);
KVT_API const kvt_plan_gpu *kvt_plan_gpu_find(const char *name);
KVT_API const kvt_plan_tier *kvt_plan_tier_find(const char *name);
KVT_API const kvt_plan_link *kvt_plan_link_find(const char *name);
/* Entry i of the catalog, in its order; NULL past the last. */
KVT_API const kvt_plan_model *kvt_plan_model_at(size_t i);
KVT_API const kvt_plan_gpu *kvt_plan_gpu_at(size_t i);
KVT_API const kvt_plan_tier *kvt_plan_tier_at(size_t i);
KVT_API const kvt_plan_link *kvt_plan_link_at(size_t i);

/* Write the catalog as `kvtier plan --list` shows it to file descriptor
 * `fd` (the caller's; left open).  0, or -errno if it cannot be written. */
KVT_API int kvt_plan_catalog_write(int fd);

/* Add (or override) catalog entries from a text file, one a line:
 *   model NAME params=8.03e9 layers=32 d_model=4096 kv_heads=8 head_dim=128
 *   gpu   NAME tflops=989 mfu=0.5 usd_hour=4.5
 *   tier  NAME gbps=50 latency_us=5 usd_gib_month=3 usd_per_1k_get=0 usd_per_1k_put=0
 * 0; KVT_ECONFIG for a wrong line (kvt_errmsg names the file, the line and
 * the setting, with its range); KVT_EIO or -errno if it cannot be read.
 * Not to be called while another thread uses the catalog. */
KVT_API int kvt_plan_catalog_load(const char *path);

/* KV bytes one token takes: 2 (K, V) x layers x kv_heads x head_dim x 2. */
KVT_API double kvt_plan_kv_bytes_per_token(const kvt_plan_model *m);
/* Seconds of prefill from token from_tok to to_tok on `g`:
 * [2 P (to - from) + 2 L d (to^2 - from^2)] / (F MFU); 0 when to <= from. */
KVT_API double kvt_plan_prefill_seconds(const kvt_plan_model *m, const kvt_plan_gpu *g,
					double from_tok, double to_tok);
/* Seconds to load `bytes` from tier `t`: latency + bytes / bandwidth, 0
 * when nothing loads. */
KVT_API double kvt_plan_load_seconds(const kvt_plan_tier *t, double bytes);

/* -- time and queueing -- */

/*
 * The trace in time, on a fleet of accelerators (docs/PLANNING.md, "Time
 * and queueing").  Request q arrives at arrive_s[q] / rate on the node the
 * cache simulation sent it to (per_req[q].node) and waits in that node's
 * queue (first come, first served) for the first of its gpus_per_node
 * accelerators to be free.  Its service is the prefill of its uncached
 * tokens (kvt_plan_prefill_seconds) overlapped layer by layer with the
 * loads of its cached blocks, tier after tier (T0, T1, S) as the engine
 * connector loads them: layer l computes once its KV has arrived and
 * layer l - 1 is done.  A load waits for the tier's first byte
 * (latency_us), then holds every link of its path at the path's slowest
 * bandwidth until it is done; a busy link is waited for (first come,
 * first served):
 *   T0: the tier (DRAM) and the accelerator's PCIe;
 *   T1: the node's NVMe (the tier's bandwidth) and PCIe;
 *   S:  the node's NIC (the link and the tier's per-node bandwidth), the
 *       shared tier's fleet-wide throughput, and PCIe.
 * A tier whose load, alone on its links, would take longer than computing
 * the tokens it holds is not read (kvt_lookup_worth's rule): those tokens
 * and the rest are computed, and the load counts as starved.  TTFT is
 * arrival to the end of the prefill.
 */
enum {
	KVT_PLAN_LINK_PCIE = 0,   /* host to accelerator, each accelerator */
	KVT_PLAN_LINK_NVME = 1,   /* the node's NVMe reads */
	KVT_PLAN_LINK_NIC = 2,    /* node to the shared tier, each node */
	KVT_PLAN_LINK_SHARED = 3, /* the shared tier, fleet-wide */
	KVT_PLAN_NLINK = 4,
};

typedef struct kvt_plan_fleet_conf {
	const kvt_plan_model *model;
	const kvt_plan_gpu *gpu;
	const kvt_plan_tier *tier[KVT_PLAN_NT];  /* T0, T1, S: latency, bandwidth */
	double link_gbps[KVT_PLAN_NLINK];        /* capacities; 0: no limit */
	double rate;              /* traffic scale: arrivals at arrive_s / rate; > 0 */
	unsigned nodes;           /* those of the simulation, 1..KVT_PLAN_MAX_NODES */
	unsigned gpus_per_node;   /* replicas serving each node's queue, 1..64 */
	unsigned tp;              /* accelerators a replica, tensor parallel, 1..64
				   * (0: 1): prefill / tp, each one's PCIe in parallel */
	double window_s;          /* bandwidth windows; 0: one second */
} kvt_plan_fleet_conf;

typedef struct kvt_plan_link_use {
	double bytes;                       /* moved over the link */
	double p50_gbps, p99_gbps, max_gbps; /* demand over the windows */
	double busy_s;                      /* link-seconds held (each instance) */
	uint64_t loads;                     /* loads whose slowest link this is */
	uint64_t starved;   /* ... that took longer than recomputing their tokens */
	uint64_t latency_bound; /* ... of which no bandwidth helps (latency alone is more) */
	double fix_gbps;    /* bandwidth at which 99% of those loads beat the recompute */
} kvt_plan_link_use;

typedef struct kvt_plan_timing {
	uint64_t requests;
	double ttft_mean, ttft_p50, ttft_p90, ttft_p99, ttft_max;  /* seconds */
	double wait_mean, wait_p50, wait_p90, wait_p99, wait_max;  /* in the queue */
	double service_p90;   /* TTFT less the queueing: what no fleet size removes */
	double span_s;        /* first arrival to last prefill's end */
	double busy_s;        /* accelerator-seconds of service */
	double compute_s;     /* of which prefill */
	double utilisation;   /* busy_s / (accelerators x span_s) */
	uint64_t windows;     /* bandwidth windows over span_s */
	kvt_plan_link_use link[KVT_PLAN_NLINK];
} kvt_plan_timing;

/* The p-quantile (0..1, nearest rank) of v[0..n), found by selection
 * without a sort (v is reordered): what the fleet figures' percentiles
 * use.  0 when n is 0. */
KVT_API double kvt_plan_quantile(double *v, size_t n, double p);

/* Run trace `t` in time on fleet `f`, the cache hits and nodes from
 * kvt_plan_simulate's per_req (NULL: no cache, requests round-robin).
 * Optional outputs (each may be NULL): ttft_s and wait_s, one entry per
 * request in trace order; series, link-major, series_cap windows per
 * link, the demand of each window in 10^9 B/s (windows past series_cap
 * are counted in the figures but not written).  Deterministic.  0;
 * KVT_EINVAL for a fleet out of range (kvt_errmsg names the field);
 * KVT_ENOMEM.  t, f and out may not be NULL. */
KVT_API int kvt_plan_fleet_run(const kvt_plan_trace *t, const kvt_plan_req_hit *per_req,
			       const kvt_plan_fleet_conf *f, kvt_plan_timing *out,
			       double *ttft_s, double *wait_s, double *series,
			       size_t series_cap);

/* ------------------------------------------------------------------------ */
/* Engine connector                                                          */
/* ------------------------------------------------------------------------ */

/*
 * What an inference engine calls to move its paged KV memory in and out of
 * a store (docs/CONNECTOR.md).  The engine describes where each layer's K
 * and V live (kvt_paged_layer), opens a connector over a store and a
 * namespace, and then, per request: asks how many prompt tokens are worth
 * loading (kvt_conn_lookup), loads them into its blocks layer by layer
 * (kvt_conn_load, waiting on each layer with kvt_conn_wait_layer just before
 * that layer's attention), and saves the whole chunks it computed, layer by
 * layer as the forward pass produces them (kvt_conn_save, kvt_conn_save_layer).
 * Finished loads and saves are collected with kvt_conn_finished; a load that
 * failed part-way names exactly the blocks it left invalid
 * (kvt_conn_load_errors) so the engine recomputes those alone.
 *
 * Mapping.  A chunk of the namespace (layout.chunk_tokens tokens) is
 * chunk_tokens / block_tokens consecutive entries of the request's block
 * table: chunk i covers tokens [i·chunk_tokens, (i+1)·chunk_tokens) and the
 * blocks block_ids[i·n .. i·n + n) with n = chunk_tokens / block_tokens.  An
 * engine block size that does not divide the chunk is refused (KVT_ELAYOUT):
 * a block would then belong to two chunks, and a failed chunk could not be
 * reported as whole blocks.  A partial last chunk is never stored (it is not
 * keyed); a load may end inside its last chunk (a full hit loads one token
 * fewer), and then only those tokens are written.
 *
 * Payload order.  One layer of a chunk is plane-major (K, then V; one plane
 * for MLA), then token, then head, then head_dim elements, then the layer's
 * scale_bytes (see kvt_layout): the engine's strides are applied on the
 * engine side only, so every engine layout of the same model stores the same
 * bytes.
 */

/* One plane (K, V, or the MLA latent) of one layer in the engine's memory.
 * Element e of head h of token t of block b is the dtype-sized value at
 *     base + b·block_stride + t·token_stride + h·head_stride + e·elem_stride
 * (strides in bytes).  vLLM's FlashAttention NHD tensor (2, num_blocks,
 * block_size, kv_heads, head_size) of bf16 has, for plane p,
 * base = data + p·num_blocks·block_stride, block_stride =
 * block_size·kv_heads·head_size·2, token_stride = kv_heads·head_size·2,
 * head_stride = head_size·2, elem_stride = 2; llama.cpp's transposed V (one
 * row of kv_size cells per head element) has token_stride = the element size
 * and elem_stride = kv_size times it.  A stride may be 0 only for a
 * dimension of extent 1. */
typedef struct kvt_paged_plane {
	void *base;
	uint64_t block_stride;
	uint64_t token_stride;
	uint64_t head_stride;
	uint64_t elem_stride;
} kvt_paged_plane;

/* One layer: its planes (plane[1] unused when layout.kv_planes is 1) and
 * where the layer's layout.scale_bytes of quantisation scales live (fp8: the
 * engine's k_scale and v_scale, copied as bytes); NULL when scale_bytes is
 * 0.  A load writes the scales there. */
typedef struct kvt_paged_layer {
	kvt_paged_plane plane[2];
	void *scale;
} kvt_paged_layer;

/* How the engine's KV memory is laid out, for kvt_conn_open. */
typedef struct kvt_conn_desc {
	/* Either one entry per layer (n_layer_descs = layout.num_layers), or
	 * one entry for a tensor that holds every layer (n_layer_descs = 1):
	 * layer l is then layer 0 with layer_stride·l added to each plane's
	 * base and scale_bytes·l to its scale pointer (vLLM's cross-layer
	 * blocks, SGLang's host pool in page_first or layer_first). */
	const kvt_paged_layer *layers;
	uint32_t n_layer_descs;
	uint64_t layer_stride;  /* bytes; only with n_layer_descs 1 */
	uint32_t num_blocks;    /* block ids run 0 .. num_blocks-1 */
	uint32_t block_tokens;  /* tokens per engine block; 0: layout.block_size */
	uint32_t threads;       /* connector worker threads; 0: 2 */
	int durability;         /* of saved chunks: enum kvt_durability */
	/* Seconds the engine takes to compute one chunk's prefill: when > 0,
	 * kvt_conn_lookup loads only the prefix worth loading
	 * (kvt_lookup_worth); 0 loads every chunk found. */
	double recompute_s;
	/* Where the planes live: enum kvt_conn_memory.  Engine memory on a
	 * GPU needs a build with the CUDA backend (KVT_ENOTSUP otherwise). */
	uint32_t memory;
	int32_t cuda_device;    /* with KVT_CONN_MEM_CUDA: the device ordinal */
} kvt_conn_desc;

enum kvt_conn_memory {
	KVT_CONN_MEM_HOST = 0, /* host memory (engines on CPU, SGLang's host pool) */
	KVT_CONN_MEM_CUDA = 1, /* CUDA device memory */
};

typedef struct kvt_conn kvt_conn;

/* Open a connector of `ns` over `st`.  The descriptor and the layer array
 * are copied; the engine memory they point to is the engine's and must stay
 * mapped until kvt_conn_close.  The store must outlive the connector.  0
 * with *out set, or: KVT_EINVAL (a NULL pointer, n_layer_descs neither 1
 * nor num_layers, no blocks, a NULL base or scale pointer the layout needs,
 * a zero stride of a dimension longer than 1, an unknown durability, more
 * than 64 threads), KVT_ELAYOUT (block_tokens does not divide chunk_tokens),
 * KVT_ENOTSUP (engine memory this build or machine cannot copy: CUDA
 * memory without the CUDA backend, or no such device), -EIO (the device's
 * stream or staging could not be set up), with the field or the CUDA error
 * in kvt_errmsg().  Its worker threads start with its first load or save
 * (a connector used only for kvt_conn_gather/scatter runs none); with CUDA
 * memory, it also sets up a stream and one layer of device staging. */
KVT_API int kvt_conn_open(kvt_store *st, const kvt_ns *ns, const kvt_conn_desc *desc,
		  kvt_conn **out);

/* Wait for every load and save in flight, then free the connector and the
 * state of every request not yet ended.  No other thread may be inside a
 * call on `c`.  NULL is a no-op. */
KVT_API void kvt_conn_close(kvt_conn *c);

/* --- synchronous gather and scatter -------------------------------------- */

/* Copy one layer of one chunk between the engine's blocks and `chunk`, a
 * buffer of kvt_layout_layer_bytes() in the payload order (above).  The
 * chunk's tokens come from block_ids[0 .. n_blocks) in order, block_tokens
 * each; n_tokens (1 .. chunk_tokens) of them are copied, so a scatter may
 * stop inside the last block.  Gather writes the chunk's token rows
 * [0, n_tokens) of each plane and the scale bytes and leaves the rest of
 * the buffer alone; scatter writes the engine's blocks and scale.  0, or
 * KVT_EINVAL (a NULL pointer, a layer or token count out of range, fewer
 * blocks than n_tokens needs, a block id >= num_blocks), KVT_ESMALL (`cap`
 * or `len` below the layer's bytes).  Thread-safe: calls on disjoint
 * engine memory may run at once (the engine's memory is not locked; with
 * CUDA memory they take turns on the connector's stream), and each returns
 * with its copy complete. */
KVT_API int kvt_conn_gather(kvt_conn *c, uint32_t layer, const uint32_t *block_ids,
		    size_t n_blocks, uint32_t n_tokens, void *chunk, size_t cap);
KVT_API int kvt_conn_scatter(kvt_conn *c, uint32_t layer, const uint32_t *block_ids,
		     size_t n_blocks, uint32_t n_tokens, const void *chunk,
		     size_t len);

/* --- per request, layer by layer ----------------------------------------- */

/* How many leading tokens of the prompt `tokens` (n_tokens ids) to load
 * rather than compute: whole chunks present in the store (as far as
 * recompute_s says loading pays, when set), except that a hit on every
 * token of the prompt returns n_tokens - 1, since the engine must compute
 * at least one token to sample from.  From memory: no I/O, no side effect
 * (no promotion, no recency), as vLLM's get_num_new_matched_tokens needs.
 * `extra` (may be NULL) as in kvt_key_chain.  Returns the count (>= 0) or
 * KVT_EINVAL.  Thread-safe. */
KVT_API int kvt_conn_lookup(kvt_conn *c, const uint32_t *tokens, size_t n_tokens,
		    const kvt_extra_keys *extra);

/* Start loading the first n_load tokens of the prompt `tokens` into the
 * engine blocks block_ids[0 .. n_blocks) (the request's block table), and
 * return at once.  The worker first brings the chunks into the first tier
 * by `deadline_ms` from now (kvt_prefetch; -1: no deadline; 0: only what
 * is already in the first tier is loaded), then writes the blocks layer by
 * layer, verifying each layer's checksum (on tiers that verify reads) just
 * before it is written.  The engine waits on each layer with
 * kvt_conn_wait_layer before that layer's attention reads the blocks, and
 * must not write the blocks the load covers until kvt_conn_wait_layer of
 * the last layer, or kvt_conn_finished, says it is over.  A chunk that
 * is missing, corrupt, past the deadline or on a failed tier is not loaded;
 * its blocks are listed by kvt_conn_load_errors.  `tokens`, `extra` and
 * `block_ids` are copied.  `req` is the engine's id of the request: one
 * load and one save per id at a time, until kvt_conn_end.  0, or KVT_EINVAL
 * (a NULL pointer, n_load past the prompt's whole chunks rounded up, fewer
 * blocks than n_load needs, a block id >= num_blocks, a load already
 * registered for `req`), KVT_ECANCELED (the connector is closing).
 * Thread-safe. */
KVT_API int kvt_conn_load(kvt_conn *c, uint64_t req, const uint32_t *tokens,
		  size_t n_tokens, const kvt_extra_keys *extra,
		  const uint32_t *block_ids, size_t n_blocks, size_t n_load,
		  int deadline_ms);

/* Wait until layer `layer` of request `req`'s load is written into the
 * engine's blocks (or the load is over), at most timeout_ms (-1: no
 * limit).  Returns how many of the load's blocks are known invalid so far
 * (0: every block it covers is good up to this layer; the final list comes
 * with the last layer, and kvt_conn_load_errors names them), KVT_ETIMEDOUT,
 * or KVT_EINVAL (layer >= num_layers, NULL connector).  A request without a
 * load returns 0 at once.  Thread-safe. */
KVT_API int kvt_conn_wait_layer(kvt_conn *c, uint64_t req, uint32_t layer,
			int timeout_ms);

/* The engine blocks request `req`'s load left invalid (the blocks of every
 * chunk that was not loaded whole), in block-table order, into blocks[0 ..
 * max); `blocks` may be NULL when max is 0 (to count).  Returns how many
 * there are, KVT_EAGAIN (the load is still running) or KVT_EINVAL (no load
 * for `req`).  vLLM's get_block_ids_with_load_errors.  Thread-safe. */
KVT_API int kvt_conn_load_errors(kvt_conn *c, uint64_t req, uint32_t *blocks,
			 size_t max);

/* Register the save of the prompt's whole chunks that the store does not
 * hold yet (from memory, like kvt_exists): their blocks are gathered as the
 * engine reports each layer computed (kvt_conn_save_layer), and each chunk
 * is put once all its layers are in.  Returns the number of chunks that
 * will be saved (0: nothing to save and nothing will be reported), or
 * KVT_EINVAL (a NULL pointer, fewer blocks than the whole chunks need, a
 * block id >= num_blocks, a save already registered for `req`),
 * KVT_ECANCELED.  The blocks must not be written by the engine until the
 * save is reported by kvt_conn_finished (or kvt_conn_wait).  A partial last
 * chunk is not saved.  `tokens`, `extra` and `block_ids` are copied; the
 * staging costs one chunk payload of memory per chunk saved, until the put.
 * Thread-safe. */
KVT_API int kvt_conn_save(kvt_conn *c, uint64_t req, const uint32_t *tokens,
		  size_t n_tokens, const kvt_extra_keys *extra,
		  const uint32_t *block_ids, size_t n_blocks);

/* kvt_conn_load and kvt_conn_save for an engine that names chunks by key
 * (kvt_key_from_engine_hash over its own block hashes: vLLM's, SGLang's)
 * rather than by the prompt's tokens: keys[i] is chunk i's key, one per
 * whole chunk of the prompt.  A load of n_load tokens reads the first
 * ceil(n_load / chunk_tokens) keys (KVT_EINVAL if fewer are given); a save
 * registers every one of the n_keys chunks the store lacks, with
 * n_keys·(chunk_tokens / block_tokens) blocks.  The keys are copied.  The
 * same results, errors and reports as the token forms. */
/* A load's block id that names no block to write: the engine holds that
 * block's tokens already (its own prefix cache hit reaching into the
 * load's first chunk; such blocks may be shared with other requests and
 * read meanwhile).  The load reads the chunk whole, as it is stored, and
 * writes only the other blocks; a KVT_CONN_NO_BLOCK entry is never
 * reported invalid.  Loads only: a save or a gather/scatter refuses it. */
#define KVT_CONN_NO_BLOCK UINT32_MAX

KVT_API int kvt_conn_load_keys(kvt_conn *c, uint64_t req, const kvt_key *keys,
			       size_t n_keys, const uint32_t *block_ids, size_t n_blocks,
			       size_t n_load, int deadline_ms);
KVT_API int kvt_conn_save_keys(kvt_conn *c, uint64_t req, const kvt_key *keys,
			       size_t n_keys, const uint32_t *block_ids, size_t n_blocks);

#define KVT_CONN_ALL_LAYERS UINT32_MAX

/* Layer `layer` of request `req` is computed: gather it from the blocks, in
 * the background.  KVT_CONN_ALL_LAYERS queues every layer not yet queued
 * (an engine that saves after the whole forward pass).  0 (also for a
 * request with nothing to save), or KVT_EINVAL (a layer out of range or
 * already queued).  Thread-safe. */
KVT_API int kvt_conn_save_layer(kvt_conn *c, uint64_t req, uint32_t layer);

enum kvt_conn_what {
	KVT_CONN_LOAD = 1,
	KVT_CONN_SAVE = 2,
};

/* A finished load or save. */
typedef struct kvt_conn_done {
	uint64_t req;
	uint32_t what;      /* enum kvt_conn_what */
	int status;         /* 0, or the first failure: KVT_ENOTFOUND,
			     * KVT_ECORRUPT, KVT_ETIMEDOUT (deadline), a
			     * tier's error, or a put's */
	uint32_t chunks;    /* load: chunks loaded whole; save: chunks stored
			     * (KVT_EEXIST counts as stored) */
	uint32_t n_invalid; /* load: blocks left invalid; save: chunks not
			     * stored */
} kvt_conn_done;

/* Collect up to `max` loads and saves that finished since the last call;
 * each is reported once.  Returns how many were written to `out` (which may
 * be NULL when max is 0), or KVT_EINVAL.  Never blocks.  Thread-safe. */
KVT_API int kvt_conn_finished(kvt_conn *c, kvt_conn_done *out, size_t max);

/* Wait until request `req`'s load and save (those registered) have
 * finished, at most timeout_ms (-1: no limit).  0, KVT_ETIMEDOUT, or
 * KVT_EINVAL (NULL connector).  An unknown request returns 0.  Their
 * reports stay for kvt_conn_finished.  Thread-safe. */
KVT_API int kvt_conn_wait(kvt_conn *c, uint64_t req, int timeout_ms);

/* Forget request `req`: wait for its load and save, then free its state
 * (a report not yet collected is dropped).  The id may then be used again.
 * 0, or KVT_EINVAL.  Thread-safe. */
KVT_API int kvt_conn_end(kvt_conn *c, uint64_t req);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_H */
