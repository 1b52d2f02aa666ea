/*
 * kvtier/errors.h — the error codes, their names and the calling
 * thread's last error in words.
 *
 * kvtier.h includes it; its conventions (errors, ownership, threads) are
 * kvtier.h's.
 */
#ifndef KVTIER_ERRORS_H
#define KVTIER_ERRORS_H

#include "../kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_ERRORS_H */
