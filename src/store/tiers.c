/*
 * tiers.c — the registry of tier kinds; see tiers.h.
 */
#include "store/tiers.h"

#include "common/err.h"
#include "tier/dram.h"
#include "tier/fsdir.h"
#include "tier/nvme.h"
#include "tier/s3.h"
#include "tier/speeds.h"

const char kvt_tier_keys_hint[] = "set local_cpu: true, local_disk, shared_fs or remote_url";

static int always(const kvt_config *c) { (void)c; return 1; }
static uint32_t grain_byte(const kvt_config *c) { (void)c; return 1; }
static uint32_t grain_block(const kvt_config *c) { (void)c; return 4096; }

/* --- host DRAM -------------------------------------------------------------- */

static int dram_configured(const kvt_config *c) { return c->local_cpu; }
static int dram_verify(const kvt_config *c) { return c->verify_dram_reads; }
static uint32_t dram_grain(const kvt_config *c) { return c->dram_page_size; }

static int dram_open_cfg(const kvt_config *c, kvt_tier **out)
{
	kvt_dram_opts o = {
		.capacity = c->max_local_cpu_size,
		.page_size = c->dram_page_size,
		.hugepages = c->dram_hugepages,
		.lock_memory = c->dram_lock_memory,
		/* an inspection reserves the arena, it does not touch it */
		.prefault = c->dram_prefault && !c->read_only,
	};
	int rc;

	if (c->max_local_cpu_size < (uint64_t)c->dram_page_size * 2)
		return kvt_err(KVT_ECONFIG,
			       "max_local_cpu_size %llu is smaller than two %u-byte pages",
			       (unsigned long long)c->max_local_cpu_size, c->dram_page_size);
	if ((rc = kvt_dram_open(&o, out)))
		kvt_err_prefix(rc, "DRAM tier: ");
	return rc;
}

static const kvt_tier_class dram_class = {
	"dram", KVT_CT_DRAM, dram_configured, dram_open_cfg, dram_verify,
	KVT_SPEED_DRAM_GBPS, KVT_SPEED_DRAM_LAT_US, dram_grain,
};

/* --- local NVMe ---------------------------------------------------------------- */

static int nvme_configured(const kvt_config *c) { return c->local_disk[0] != '\0'; }

static int nvme_open_cfg(const kvt_config *c, kvt_tier **out)
{
	kvt_nvme_opts o = {
		.path = c->local_disk,
		.capacity = c->max_local_disk_size,
		.queue_depth = c->nvme_queue_depth,
		.use_io_uring = c->nvme_io_uring,
		.read_only = c->read_only,
	};
	int rc = kvt_nvme_open(&o, out);

	if (rc)
		kvt_err_prefix(rc, "local disk tier %s: ", c->local_disk);
	return rc;
}

static const kvt_tier_class nvme_class = {
	"nvme", KVT_CT_NVME, nvme_configured, nvme_open_cfg, always,
	KVT_SPEED_NVME_GBPS, KVT_SPEED_NVME_LAT_US, grain_block,
};

/* --- a shared file system ------------------------------------------------------- */

static int fsdir_configured(const kvt_config *c) { return c->shared_fs[0] != '\0'; }

static int fsdir_open_cfg(const kvt_config *c, kvt_tier **out)
{
	kvt_fsdir_opts o = {
		.path = c->shared_fs,
		.capacity = c->max_shared_fs_size,
		.refresh_ms = (int)c->shared_fs_refresh_ms,
		.auth_key = c->object_auth_key_len ? c->object_auth_key : NULL,
		.auth_key_len = c->object_auth_key_len,
		.read_only = c->read_only,
	};
	int rc = kvt_fsdir_open(&o, out);

	if (rc)
		kvt_err_prefix(rc, "shared file system tier %s: ", c->shared_fs);
	return rc;
}

static const kvt_tier_class fsdir_class = {
	"fsdir", KVT_CT_SHARED, fsdir_configured, fsdir_open_cfg, always,
	KVT_SPEED_FS_GBPS, KVT_SPEED_FS_LAT_US, grain_byte,
};

/* --- S3 ------------------------------------------------------------------------- */

static int s3_configured(const kvt_config *c) { return c->s3_bucket[0] != '\0'; }

static int s3_open_cfg(const kvt_config *c, kvt_tier **out)
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
	int rc = kvt_s3_open(&o, out);

	if (rc)
		kvt_err_prefix(rc, "S3 tier s3://%s/%s: ", c->s3_bucket, c->s3_prefix);
	return rc;
}

static const kvt_tier_class s3_class = {
	"s3", KVT_CT_S3, s3_configured, s3_open_cfg, always,
	KVT_SPEED_S3_GBPS, KVT_SPEED_S3_LAT_US, grain_byte,
};

const kvt_tier_class *const kvt_tier_classes[] = {
	&dram_class, &nvme_class, &fsdir_class, &s3_class, NULL,
};
