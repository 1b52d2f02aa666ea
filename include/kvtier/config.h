/*
 * kvtier/config.h — configurations (YAML, single keys, the
 * environment), the model presets, object files and a shared directory's
 * garbage collection.
 *
 * kvtier.h includes it; its conventions (errors, ownership, threads) are
 * kvtier.h's.
 */
#ifndef KVTIER_CONFIG_H
#define KVTIER_CONFIG_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_CONFIG_H */
