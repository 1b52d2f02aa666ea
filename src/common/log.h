/*
 * log.h — one line per event on stderr, filtered by KVTIER_LOG
 * (error, warn, info, debug; default warn).
 */
#ifndef KVT_LOG_H
#define KVT_LOG_H

#include "common/err.h"

enum { KVT_LOG_ERROR = 0, KVT_LOG_WARN = 1, KVT_LOG_INFO = 2, KVT_LOG_DEBUG = 3 };

void kvt_log(int level, const char *fmt, ...) KVT_PRINTF(2, 3);
int kvt_log_enabled(int level);

#endif
