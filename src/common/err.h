/*
 * err.h — how kvtier reports failure.
 *
 * Every failing function returns a negative code (a KVT_E* value or a
 * negated errno) and may also leave a sentence of detail for the calling
 * thread with kvt_err(), which kvt_errmsg() hands back to the caller.  The
 * code is the contract; the sentence is for people.
 */
#ifndef KVT_ERR_H
#define KVT_ERR_H

#include "kvtier.h"

#if defined(__GNUC__)
#define KVT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KVT_PRINTF(a, b)
#endif

/* Record the detail of a failure for this thread and return `code`, so that
 * a failure path reads `return kvt_err(KVT_EINVAL, "chunk_tokens %u ...", n);` */
int kvt_err(int code, const char *fmt, ...) KVT_PRINTF(2, 3);

/* Forget this thread's detail (called on entry to public functions that
 * succeed without failing, so kvt_errmsg never reports a stale cause). */
void kvt_err_clear(void);

/* Prefix the current detail with more context ("config.yaml:12: " + old). */
int kvt_err_prefix(int code, const char *fmt, ...) KVT_PRINTF(2, 3);

#endif
