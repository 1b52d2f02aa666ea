/*
 * log.c — stderr logging with a level read once from KVTIER_LOG.
 */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_level = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void)
{
	const char *v = getenv("KVTIER_LOG");
	log_level = KVT_LOG_WARN;
	if (!v)
		return;
	if (!strcmp(v, "error"))
		log_level = KVT_LOG_ERROR;
	else if (!strcmp(v, "info"))
		log_level = KVT_LOG_INFO;
	else if (!strcmp(v, "debug"))
		log_level = KVT_LOG_DEBUG;
}

int kvt_log_enabled(int level)
{
	pthread_once(&log_once, log_init);
	return level <= log_level;
}

void kvt_log(int level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	char line[1024];
	va_list ap;

	if (!kvt_log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line so concurrent threads do not interleave. */
	fprintf(stderr, "kvtier: %s: %s\n", names[level], line);
}
