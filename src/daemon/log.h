/*
 * log.h — the daemon's log: one line per event on stderr, with a time and
 * a level, filtered by --log-level (error, warn, info, debug; default
 * info).  The level may change at run time (SIGHUP).
 */
#ifndef KVTD_LOG_H
#define KVTD_LOG_H

enum { KVTD_LOG_ERROR = 0, KVTD_LOG_WARN = 1, KVTD_LOG_INFO = 2, KVTD_LOG_DEBUG = 3 };

void kvtd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "error", "warn", "info", "debug" -> level, or -1. */
int kvtd_log_parse(const char *name);
void kvtd_log_set(int level);
int kvtd_log_on(int level);

#endif
