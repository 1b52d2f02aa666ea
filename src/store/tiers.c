/*
 * tiers.c — the registry of tier kinds; see tiers.h.
 */
#include "store/tiers.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/err.h"
#include "tier/local_client.h"
#include "tier/device.h"
#include "tier/dram.h"
#include "tier/fsdir.h"
#include "tier/nvme.h"
#include "tier/peer.h"
#include "tier/s3.h"
#include "tier/speeds.h"

#define KiB KVT_KiB
#define MiB KVT_MiB
#define GiB KVT_GiB

static int always(const kvt_config *c) { (void)c; return 1; }
static uint32_t grain_byte(const kvt_config *c) { (void)c; return 1; }
static uint32_t grain_block(const kvt_config *c) { (void)c; return 4096; }

/* --- host DRAM -------------------------------------------------------------- */

static int dram_configured(const kvt_config *c) { return c->local_cpu; }
static int dram_verify(const kvt_config *c) { return c->verify_dram_reads; }
static uint32_t dram_grain(const kvt_config *c) { return c->dram_page_size; }

static int dram_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	kvt_dram_opts o = {
		.capacity = c->max_local_cpu_size,
		.page_size = c->dram_page_size,
		.hugepages = c->dram_hugepages,
		.lock_memory = c->dram_lock_memory,
		/* an inspection reserves the arena, it does not touch it */
		.prefault = c->dram_prefault && !c->read_only,
		.shared = c->dram_shared,
	};
	int rc;

	(void)io; /* memory: no files */
	if (c->max_local_cpu_size < (uint64_t)c->dram_page_size * 2)
		return kvt_err(KVT_ECONFIG,
			       "max_local_cpu_size %llu is smaller than two %u-byte pages",
			       (unsigned long long)c->max_local_cpu_size, c->dram_page_size);
	if ((rc = kvt_dram_open(&o, out)))
		kvt_err_prefix(rc, "DRAM tier: ");
	return rc;
}

/* A tier's page: a power of two from 4 KiB to 64 MiB. */
static int parse_page_size(const char *v, uint32_t *out)
{
	uint64_t n = 0;
	int rc = kvt_config_size_min(v, 1, 4 * KiB, &n);
	if (rc)
		return rc;
	if (n > 64 * MiB || (n & (n - 1)))
		return kvt_err(KVT_ECONFIG,
			       "\"%s\": page size must be a power of two from 4KiB to 64MiB", v);
	*out = (uint32_t)n;
	return 0;
}

static int dram_set_page_size(kvt_config *c, const char *v)
{
	return parse_page_size(v, &c->dram_page_size);
}

static const kvt_config_key dram_keys[] = {
	KVT_CKEY_BOOL("local_cpu", local_cpu),
	KVT_CKEY_SIZE("max_local_cpu_size", max_local_cpu_size, 1 * MiB, GiB,
		      "a size; bare numbers are GiB"),
	KVT_CKEY_FN("dram_page_size", dram_set_page_size, "a power of two, 4KiB..64MiB"),
	KVT_CKEY_BOOL("dram_hugepages", dram_hugepages),
	KVT_CKEY_BOOL("dram_lock_memory", dram_lock_memory),
	KVT_CKEY_BOOL("dram_prefault", dram_prefault),
	KVT_CKEY_BOOL("dram_shared", dram_shared),
	KVT_CKEY_BOOL("verify_dram_reads", verify_dram_reads),
};

static void dram_defaults(kvt_config *c)
{
	c->local_cpu = 1;
	c->max_local_cpu_size = 1 * GiB;
	c->dram_page_size = 64 * KiB;
	c->dram_hugepages = 1;
	c->dram_lock_memory = 1;
	c->dram_prefault = 1;
}

static const kvt_tier_class dram_class = {
	.name = "dram", .kind = KVT_CT_DRAM, .configured = dram_configured,
	.open = dram_open_cfg, .verify = dram_verify,
	.gbps = KVT_SPEED_DRAM_GBPS, .lat_us = KVT_SPEED_DRAM_LAT_US, .round = dram_grain,
	.persistent = 0, .key_prefix = "dram", .enable_hint = "local_cpu: true",
	.keys = dram_keys, .n_keys = sizeof(dram_keys) / sizeof(dram_keys[0]),
	.defaults = dram_defaults,
};

/* --- device memory (spare HBM) -------------------------------------------------- */

static int device_configured(const kvt_config *c) { return c->device_capacity > 0; }
static uint32_t device_grain(const kvt_config *c) { return c->device_page_size; }

static int device_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	kvt_device_opts o = {
		.capacity = c->device_capacity,
		.page_size = c->device_page_size,
		.backend = c->device_backend,
		.device = (int)c->device_id,
	};
	int rc;

	(void)io; /* memory: no files */
	if ((rc = kvt_device_open(&o, out)))
		kvt_err_prefix(rc, "device tier: ");
	return rc;
}

static int device_set_page_size(kvt_config *c, const char *v)
{
	return parse_page_size(v, &c->device_page_size);
}

static int device_set_backend(kvt_config *c, const char *v)
{
	if (strcmp(v, "cuda") && strcmp(v, "host"))
		return kvt_err(KVT_ECONFIG, "\"%s\": device_backend must be cuda or host", v);
	snprintf(c->device_backend, sizeof(c->device_backend), "%s", v);
	return 0;
}

static const kvt_config_key device_keys[] = {
	KVT_CKEY_SIZE("device_capacity", device_capacity, 0, GiB,
		      "a size; bare numbers are GiB; 0 turns the tier off"),
	KVT_CKEY_FN("device_page_size", device_set_page_size, "a power of two, 4KiB..64MiB"),
	KVT_CKEY_FN("device_backend", device_set_backend, "cuda or host"),
	KVT_CKEY_U32("device_id", device_id, 0, 1023, "a CUDA device ordinal"),
};

static void device_defaults(kvt_config *c)
{
	c->device_capacity = 0;
	c->device_page_size = 2 * MiB;
	c->device_id = 0;
	snprintf(c->device_backend, sizeof(c->device_backend), "cuda");
}

static const kvt_tier_class device_class = {
	.name = "device", .kind = KVT_CT_DEVICE, .configured = device_configured,
	.open = device_open_cfg, .verify = dram_verify,
	.gbps = KVT_SPEED_DEVICE_GBPS, .lat_us = KVT_SPEED_DEVICE_LAT_US, .round = device_grain,
	.persistent = 0, .key_prefix = "device", .enable_hint = "device_capacity",
	.keys = device_keys, .n_keys = sizeof(device_keys) / sizeof(device_keys[0]),
	.defaults = device_defaults,
};

/* --- local NVMe ---------------------------------------------------------------- */

static int nvme_configured(const kvt_config *c) { return c->local_disk[0] != '\0'; }

static int nvme_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	kvt_nvme_opts o = {
		.path = c->local_disk,
		.capacity = c->max_local_disk_size,
		.queue_depth = c->nvme_queue_depth,
		.use_io_uring = c->nvme_io_uring,
		.read_only = c->read_only,
		.io = io,
	};
	int rc = kvt_nvme_open(&o, out);

	if (rc)
		kvt_err_prefix(rc, "local disk tier %s: ", c->local_disk);
	return rc;
}

static const kvt_config_key nvme_keys[] = {
	KVT_CKEY_DIR("local_disk", local_disk),
	KVT_CKEY_SIZE("max_local_disk_size", max_local_disk_size, 1 * MiB, GiB,
		      "a size; bare numbers are GiB"),
	KVT_CKEY_U32("nvme_queue_depth", nvme_queue_depth, 1, 4096, "1..4096"),
	KVT_CKEY_BOOL("nvme_io_uring", nvme_io_uring),
};

static void nvme_defaults(kvt_config *c)
{
	c->max_local_disk_size = 16 * GiB;
	c->nvme_queue_depth = 16;
	c->nvme_io_uring = 1;
}

static const kvt_tier_class nvme_class = {
	.name = "nvme", .kind = KVT_CT_NVME, .configured = nvme_configured,
	.open = nvme_open_cfg, .verify = always,
	.gbps = KVT_SPEED_NVME_GBPS, .lat_us = KVT_SPEED_NVME_LAT_US, .round = grain_block,
	.persistent = 1, .key_prefix = "nvme", .enable_hint = "local_disk",
	.keys = nvme_keys, .n_keys = sizeof(nvme_keys) / sizeof(nvme_keys[0]),
	.defaults = nvme_defaults,
};

/* --- other nodes' daemons ------------------------------------------------------ */

static int peer_configured(const kvt_config *c) { return c->peers[0] != '\0'; }

static int peer_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	kvt_peer_opts o = {
		.peers = c->peers,
		.user = c->peer_user,
		.password = c->peer_password,
		.timeout_ms = (int)c->peer_timeout_ms,
		/* What a peer announces is allocated before it arrives: no
		 * more than the first tier could take it up into. */
		.max_image = c->local_cpu && c->max_local_cpu_size < 4 * GiB
				? c->max_local_cpu_size : 4 * GiB,
	};
	int rc;

	(void)io; /* sockets: no files */
	if ((rc = kvt_peer_open(&o, out)))
		kvt_err_prefix(rc, "peer tier: ");
	return rc;
}

static int peer_set_list(kvt_config *c, const char *v)
{
	int rc;

	if (!*v || !strcasecmp(v, "null") || !strcasecmp(v, "none")) {
		c->peers[0] = '\0';
		return 0;
	}
	if (strlen(v) >= sizeof(c->peers))
		return kvt_err(KVT_ECONFIG, "longer than %zu bytes", sizeof(c->peers) - 1);
	if ((rc = kvt_peer_list_check(v)))
		return rc;
	snprintf(c->peers, sizeof(c->peers), "%s", v);
	return 0;
}

static const kvt_config_key peer_keys[] = {
	KVT_CKEY_FN("peers", peer_set_list, "host:port,host:port (other nodes' kvtierd)"),
	KVT_CKEY_STR("peer_user", peer_user, "the ACL user peers know this node as"),
	KVT_CKEY_STR("peer_password", peer_password, "that user's password"),
	KVT_CKEY_U32("peer_timeout_ms", peer_timeout_ms, 1, 600000, "1..600000"),
};

static void peer_defaults(kvt_config *c)
{
	/* Another node's chunks are read, never written or evicted here. */
	c->tier[KVT_CT_PEER].eviction = 0;
	c->tier[KVT_CT_PEER].admit_rules = 0;
	c->tier[KVT_CT_PEER].write = KVT_WRITE_NONE;
	c->peer_timeout_ms = 2000;
}

static const kvt_tier_class peer_class = {
	.name = "peer", .kind = KVT_CT_PEER, .configured = peer_configured,
	.open = peer_open_cfg, .verify = always,
	.gbps = KVT_SPEED_PEER_GBPS, .lat_us = KVT_SPEED_PEER_LAT_US, .round = grain_byte,
	.persistent = 0, .key_prefix = "peer", .enable_hint = "peers",
	.keys = peer_keys, .n_keys = sizeof(peer_keys) / sizeof(peer_keys[0]),
	.defaults = peer_defaults, .remote = 1, .fetches = 1,
};

/* --- a shared file system ------------------------------------------------------- */

static int fsdir_configured(const kvt_config *c) { return c->shared_fs[0] != '\0'; }

static int fsdir_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	kvt_fsdir_opts o = {
		.path = c->shared_fs,
		.capacity = c->max_shared_fs_size,
		.refresh_ms = (int)c->shared_fs_refresh_ms,
		.auth_key = c->object_auth_key_len ? c->object_auth_key : NULL,
		.auth_key_len = c->object_auth_key_len,
		.read_only = c->read_only,
		.io = io,
	};
	int rc = kvt_fsdir_open(&o, out);

	if (rc)
		kvt_err_prefix(rc, "shared file system tier %s: ", c->shared_fs);
	return rc;
}

static const kvt_config_key fsdir_keys[] = {
	KVT_CKEY_DIR("shared_fs", shared_fs),
	KVT_CKEY_SIZE("max_shared_fs_size", max_shared_fs_size, 1 * MiB, GiB,
		      "a size; bare numbers are GiB"),
	KVT_CKEY_U32("shared_fs_refresh_ms", shared_fs_refresh_ms, 10, 3600000, "10..3600000"),
};

static void fsdir_defaults(kvt_config *c)
{
	c->max_shared_fs_size = 64 * GiB;
	c->shared_fs_refresh_ms = 2000;
}

static const kvt_tier_class fsdir_class = {
	.name = "fsdir", .kind = KVT_CT_SHARED, .configured = fsdir_configured,
	.open = fsdir_open_cfg, .verify = always,
	.gbps = KVT_SPEED_FS_GBPS, .lat_us = KVT_SPEED_FS_LAT_US, .round = grain_byte,
	.persistent = 1, .key_prefix = "shared_fs", .enable_hint = "shared_fs",
	.keys = fsdir_keys, .n_keys = sizeof(fsdir_keys) / sizeof(fsdir_keys[0]),
	.defaults = fsdir_defaults, .remote = 1,
};

/* --- S3 ------------------------------------------------------------------------- */

static int s3_configured(const kvt_config *c) { return c->s3_bucket[0] != '\0'; }

static int s3_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	kvt_s3_opts o = {
		.endpoint = c->s3_endpoint[0] ? c->s3_endpoint : NULL,
		.region = c->s3_region[0] ? c->s3_region : NULL,
		.bucket = c->s3_bucket,
		.prefix = c->s3_prefix,
		.path_style = c->s3_path_style,
		.capacity = c->max_remote_size,
		.max_parallel = c->s3_max_parallel,
		.part_bytes = c->s3_part_size,
		.multipart_bytes = c->s3_multipart_size,
		.timeout_ms = (int)c->s3_timeout_ms,
		.refresh_s = (int)c->s3_refresh_s,
		.list_timeout_ms = (int)c->s3_list_timeout_ms,
		.list_max_pages = c->s3_list_max_pages,
		.hmac_key = c->object_auth_key_len ? c->object_auth_key : NULL,
		.hmac_key_len = c->object_auth_key_len,
	};
	int rc;

	(void)io; /* HTTP, not files: test_s3_faults' proxy faults it */
#ifdef KVT_HAVE_S3
	rc = kvt_s3_open(&o, out);
#else
	(void)o;
	(void)out;
	rc = kvt_err(KVT_ENOTSUP, "this libkvtier was built without the S3 tier "
		     "(-DKVT_S3=OFF; it needs libcurl and expat)");
#endif

	if (rc)
		kvt_err_prefix(rc, "S3 tier s3://%s/%s: ", c->s3_bucket, c->s3_prefix);
	return rc;
}

/* LMCache's remote_url: "s3://bucket/prefix" (other schemes are not
 * kvtier's; "" or null turns the tier off). */
static int s3_set_remote_url(kvt_config *c, const char *v)
{
	const char *b, *slash;
	size_t bl;

	if (!*v || !strcasecmp(v, "null") || !strcasecmp(v, "none")) {
		c->s3_bucket[0] = c->s3_prefix[0] = '\0';
		return 0;
	}
	if (strncmp(v, "s3://", 5))
		return kvt_err(KVT_ECONFIG, "\"%s\": remote_url must be s3://bucket[/prefix]", v);
	b = v + 5;
	slash = strchr(b, '/');
	bl = slash ? (size_t)(slash - b) : strlen(b);
	if (bl == 0 || bl >= sizeof(c->s3_bucket))
		return kvt_err(KVT_ECONFIG, "\"%s\": bucket name must be 1..255 bytes", v);
	memcpy(c->s3_bucket, b, bl);
	c->s3_bucket[bl] = '\0';
	snprintf(c->s3_prefix, sizeof(c->s3_prefix), "%s", slash ? slash + 1 : "");
	return 0;
}

/* http://host[:port][/path] or https://…; "" = AWS for the region.  libcurl
 * would happily speak ftp, file or gopher to whatever this names, so any
 * other scheme is refused here, where the key can be named. */
static int s3_set_endpoint(kvt_config *c, const char *v)
{
	size_t skip = !strncasecmp(v, "http://", 7) ? 7 : !strncasecmp(v, "https://", 8) ? 8 : 0;

	if (*v && (!skip || !v[skip] || v[skip] == '/'))
		return kvt_err(KVT_ECONFIG,
			       "\"%s\": expected http://host[:port] or https://host[:port] (or empty for AWS)",
			       v);
	for (const char *p = v; *p; p++)
		if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
			return kvt_err(KVT_ECONFIG, "\"%s\": a URL has no spaces or control characters", v);
	if (strlen(v) >= sizeof(c->s3_endpoint))
		return kvt_err(KVT_ECONFIG, "longer than %zu bytes", sizeof(c->s3_endpoint) - 1);
	snprintf(c->s3_endpoint, sizeof(c->s3_endpoint), "%s", v);
	return 0;
}

static const kvt_config_key s3_keys[] = {
	KVT_CKEY_FN("remote_url", s3_set_remote_url, "s3://bucket[/prefix]"),
	KVT_CKEY_SIZE("max_remote_size", max_remote_size, 0, GiB,
		      "a size; bare numbers are GiB; 0 = unbounded"),
	KVT_CKEY_FN("s3_endpoint", s3_set_endpoint,
		    "an http:// or https:// URL, e.g. http://127.0.0.1:9000"),
	KVT_CKEY_STR("s3_region", s3_region, "an AWS region, e.g. us-east-1"),
	KVT_CKEY_BOOL("s3_path_style", s3_path_style),
	KVT_CKEY_U32("s3_max_parallel", s3_max_parallel, 1, 1024, "1..1024"),
	KVT_CKEY_SIZE("s3_part_size", s3_part_size, 5 * MiB, 1, "a size of at least 5MiB"),
	KVT_CKEY_SIZE("s3_multipart_size", s3_multipart_size, 1 * MiB, 1,
		      "objects above this go multipart; at least 1MiB"),
	KVT_CKEY_U32("s3_timeout_ms", s3_timeout_ms, 1, 3600000, "1..3600000"),
	KVT_CKEY_U32("s3_refresh_s", s3_refresh_s, 0, 86400, "0..86400"),
	KVT_CKEY_U32("s3_list_timeout_ms", s3_list_timeout_ms, 0, 86400000,
		     "0..86400000 (0: 10 x s3_timeout_ms)"),
	KVT_CKEY_U32("s3_list_max_pages", s3_list_max_pages, 0, 10000000, "0..10000000 (0: 10000)"),
};

static void s3_defaults(kvt_config *c)
{
	/* S3 is paid per request: write what has been asked for twice
	 * (docs/POLICIES.md), and let its listing, not an LRU, decide. */
	c->tier[KVT_CT_S3].eviction = 0;
	c->tier[KVT_CT_S3].admit_rules = 1u << 1;
	c->tier[KVT_CT_S3].admit_seen = 2;
	c->s3_path_style = 1;
	c->s3_max_parallel = 16;
	c->s3_part_size = 8 * MiB;
	c->s3_multipart_size = 64 * MiB;
	c->s3_timeout_ms = 30000;
}

static const kvt_tier_class s3_class = {
	.name = "s3", .kind = KVT_CT_S3, .configured = s3_configured,
	.open = s3_open_cfg, .verify = always,
	.gbps = KVT_SPEED_S3_GBPS, .lat_us = KVT_SPEED_S3_LAT_US, .round = grain_byte,
	.persistent = 1, .key_prefix = "s3", .enable_hint = "remote_url",
	.keys = s3_keys, .n_keys = sizeof(s3_keys) / sizeof(s3_keys[0]),
	.defaults = s3_defaults, .remote = 1,
};

/* --- kvtierd: the store is the node daemon's client ------------------------------ */

static int daemon_configured(const kvt_config *c) { return c->daemon[0] != '\0'; }

static int daemon_open_cfg(const kvt_config *c, kvt_io *io, kvt_tier **out)
{
	(void)io; /* a socket and shared memory: no files */
	return kvt_local_client_open(c->daemon, out);
}

const char *kvt_config_daemon(const kvt_config *cfg)
{
	return cfg && daemon_configured(cfg) ? cfg->daemon : NULL;
}

int kvt_config_durable(const kvt_config *cfg)
{
	for (int i = 0; cfg && kvt_tier_classes[i]; i++)
		if (kvt_tier_classes[i]->persistent && kvt_tier_classes[i]->configured(cfg))
			return 1;
	return 0;
}

/* unix:///path or /path; "" or null: no daemon. */
static int daemon_set(kvt_config *c, const char *v)
{
	const char *p = !strncmp(v, "unix://", 7) ? v + 7 : v;

	if (!*v || !strcasecmp(v, "null") || !strcasecmp(v, "none")) {
		c->daemon[0] = '\0';
		return 0;
	}
	if (p[0] != '/')
		return kvt_err(KVT_ECONFIG, "\"%s\": expected unix:///path/to/kvtierd.sock "
			       "(an absolute path)", v);
	if (strlen(p) >= sizeof(c->daemon))
		return kvt_err(KVT_ECONFIG, "\"%s\": a socket path has at most %zu bytes", v,
			       sizeof(c->daemon) - 1);
	snprintf(c->daemon, sizeof(c->daemon), "%s", p);
	return 0;
}

static const kvt_config_key daemon_keys[] = {
	KVT_CKEY_FN("daemon", daemon_set, "unix:///path of kvtierd's --local socket"),
};

static void daemon_defaults(kvt_config *c)
{
	/* The daemon's own policies decide what it keeps: the client's
	 * view of it evicts nothing and admits everything. */
	c->tier[KVT_CT_DAEMON].eviction = 0;
	c->tier[KVT_CT_DAEMON].admit_rules = 0;
}

static const kvt_tier_class daemon_class = {
	.name = "daemon", .kind = KVT_CT_DAEMON, .configured = daemon_configured,
	.open = daemon_open_cfg, .verify = dram_verify,
	.gbps = KVT_SPEED_DRAM_GBPS, .lat_us = KVT_SPEED_DRAM_LAT_US, .round = grain_byte,
	/* durability is the daemon's to give or refuse (it says which) */
	.persistent = 1, .key_prefix = "daemon", .enable_hint = "daemon",
	.keys = daemon_keys, .n_keys = sizeof(daemon_keys) / sizeof(daemon_keys[0]),
	.defaults = daemon_defaults, .alone = 1,
};

const kvt_tier_class *const kvt_tier_classes[] = {
	&device_class, &dram_class, &nvme_class, &peer_class, &fsdir_class, &s3_class, &daemon_class, NULL,
};

const char *kvt_tier_enable_hint(char *buf, size_t len)
{
	size_t n = 0;

	while (kvt_tier_classes[n])
		n++;
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		size_t at = strlen(buf);
		snprintf(buf + at, len - at, "%s%s", i == 0 ? "" : i + 1 < n ? ", " : " or ",
			 kvt_tier_classes[i]->enable_hint);
	}
	return buf;
}

/* --- what tools call without a store ------------------------------------ */

/* kvt_shared_gc: the shared directory tier's coordinator-free collector
 * (tier/fsdir_gc.c) in the public shape. */
int kvt_shared_gc(const char *dir, const kvt_gc_opts *o, kvt_gc_result *res)
{
	kvt_fsdir_gc_opts fo;
	kvt_fsdir_gc_result fr;

	if (!dir || !o || !res)
		return kvt_err(KVT_EINVAL, "kvt_shared_gc: %s is NULL",
			       !dir ? "dir" : !o ? "the options" : "the result");
	memset(&fo, 0, sizeof(fo));
	fo.budget = o->budget;
	fo.ttl_s = o->ttl_s;
	fo.tmp_grace_s = o->tmp_grace_s;
	fo.dry_run = o->dry_run;
	int rc = kvt_fsdir_gc(dir, &fo, &fr);
	memset(res, 0, sizeof(*res));
	if (rc)
		return rc;
	res->files = fr.files;
	res->bytes = fr.bytes;
	res->removed = fr.removed;
	res->removed_bytes = fr.removed_bytes;
	res->expired = fr.expired;
	res->raced = fr.raced;
	res->tmp_removed = fr.tmp_removed;
	res->errors = fr.errors;
	res->bytes_left = fr.bytes_left;
	res->seconds = fr.seconds;
	return 0;
}
