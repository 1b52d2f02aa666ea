/*
 * clock.h — the monotonic clock: timed waits and time stamps.
 *
 * Every deadline in kvtier is a duration from now, so it is measured on
 * CLOCK_MONOTONIC: a wall-clock step (NTP, an operator's `date`) neither
 * ends a wait early nor stretches it.  A condition variable waited on with
 * a deadline is made with kvt_cond_init_mono, and the deadline with
 * kvt_deadline_after.
 */
#ifndef KVT_CLOCK_H
#define KVT_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* pthread_cond_init on CLOCK_MONOTONIC.  0 or pthread's error number. */
int kvt_cond_init_mono(pthread_cond_t *cv);

/* The CLOCK_MONOTONIC instant `ms` milliseconds from now (ms >= 0), for
 * pthread_cond_timedwait on a condition made by kvt_cond_init_mono. */
struct timespec kvt_deadline_after(int64_t ms);

/* CLOCK_MONOTONIC now, in nanoseconds. */
int64_t kvt_mono_ns(void);

#endif
