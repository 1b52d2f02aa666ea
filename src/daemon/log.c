/*
 * log.c — the daemon's leveled log (log.h).
 */
#include "daemon/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const names[] = { "error", "warn", "info", "debug" };
static _Atomic int level = KVTD_LOG_INFO;

int kvtd_log_parse(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

void kvtd_log_set(int l)
{
	atomic_store(&level, l);
}

int kvtd_log_on(int l)
{
	return l <= atomic_load(&level);
}

void kvtd_log(int l, const char *fmt, ...)
{
	char line[1024], when[32];
	struct timespec ts;
	struct tm tm;
	va_list ap;

	if (!kvtd_log_on(l))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One write per line: concurrent threads do not interleave. */
	fprintf(stderr, "%s.%03ldZ kvtierd %s: %s\n", when, ts.tv_nsec / 1000000, names[l], line);
}
