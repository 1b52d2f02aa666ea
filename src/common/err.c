/*
 * err.c — error names, the per-thread detail message, and the library's
 * version (what a caller checks first when a call fails strangely).
 */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_detail[512];

static const char *const kvt_err_names[] = {
	[0] = "success",
	[1] = "no chunk under that key",
	[2] = "key already stored (first version kept)",
	[3] = "invalid argument",
	[4] = "out of memory",
	[5] = "tier full of pinned or borrowed chunks",
	[6] = "larger than the tier can hold",
	[7] = "not a kvtier object (bad magic)",
	[8] = "unsupported object format version",
	[9] = "object truncated",
	[10] = "object header checksum mismatch",
	[11] = "payload checksum mismatch (corrupt chunk)",
	[12] = "malformed object header",
	[13] = "KV layout does not match the namespace",
	[14] = "object belongs to another key or namespace",
	[15] = "invalid configuration",
	[16] = "buffer too small",
	[17] = "operation still in flight",
	[18] = "deadline passed",
	[19] = "not supported by this tier",
	[20] = "tenant not configured",
	[21] = "operation cancelled",
};

const char *kvt_version(void)
{
	return KVT_VERSION_STRING;
}

const char *kvt_strerror(int err)
{
	if (err == 0)
		return kvt_err_names[0];
	if (err < KVT_ERR_BASE && err > KVT_ERR_LAST) {
		int i = KVT_ERR_BASE - err;
		if ((size_t)i < sizeof(kvt_err_names) / sizeof(kvt_err_names[0]) &&
		    kvt_err_names[i])
			return kvt_err_names[i];
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *kvt_errmsg(void)
{
	return err_detail;
}

void kvt_err_clear(void)
{
	err_detail[0] = '\0';
}

int kvt_err(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err_detail, sizeof(err_detail), fmt, ap);
	va_end(ap);
	return code;
}

int kvt_err_prefix(int code, const char *fmt, ...)
{
	char old[sizeof(err_detail)];
	size_t n;
	va_list ap;

	memcpy(old, err_detail, sizeof(old));
	va_start(ap, fmt);
	vsnprintf(err_detail, sizeof(err_detail), fmt, ap);
	va_end(ap);
	n = strlen(err_detail);
	snprintf(err_detail + n, sizeof(err_detail) - n, "%s", old);
	return code;
}
