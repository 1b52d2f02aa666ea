/*
 * pool.h — a fixed set of worker threads serving FIFOs of jobs in three
 * classes, in order: what a caller is waiting for, promotions (the next
 * request's hits), and background copies (write-through, demotion).
 * Background jobs never take every worker, so a deadline-bound load
 * always finds a thread, and their queue is bounded by count and by the
 * bytes its jobs hold: past either, the submitter runs the job itself
 * (back-pressure instead of unbounded memory).
 *
 * A job is a function and the struct it is embedded in; the pool knows
 * nothing of what it does.
 */
#ifndef KVT_STORE_POOL_H
#define KVT_STORE_POOL_H

#include <pthread.h>
#include <stdint.h>

enum { PRIO_URGENT = 0, PRIO_PROMOTE = 1, PRIO_BACKGROUND = 2, N_PRIO = 3 };

struct job {
	struct job *next;
	void (*run)(struct job *j); /* may free the job */
	uint64_t bytes;             /* background: what it holds until run */
};

struct kvt_pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *head[N_PRIO], *tail[N_PRIO];
	uint32_t queued_bg, running_bg, max_bg;
	uint32_t pending;             /* promotions and background jobs queued
				       * or running: what pool_drain waits out */
	uint64_t bg_bytes, max_bg_bytes;
	int stopping;
	pthread_t *threads;
	uint32_t n_threads;
};

/* Locks and limits; no threads yet.  Background jobs may use all
 * `workers` but one (one, if there is one) and hold `max_bg_bytes`. */
void pool_init(struct kvt_pool *p, uint32_t workers, uint64_t max_bg_bytes);
/* Start `workers` threads: 0, or an error (those started keep running
 * until pool_fini). */
int pool_start(struct kvt_pool *p, uint32_t workers);
/* Run what is queued, stop the threads, free the pool's resources. */
void pool_fini(struct kvt_pool *p);

/* Queue job `j` at `prio`.  0; KVT_EFULL for a background job the queue
 * has no room for (its count or bytes): run it yourself; KVT_ECANCELED
 * once the pool is stopping.  On an error the caller keeps the job. */
int pool_submit(struct kvt_pool *p, struct job *j, int prio);

/* Wait until no promotion or background job is queued or running, at
 * most timeout_ms (< 0: for ever).  0, or KVT_ETIMEDOUT with *left set
 * to how many still were. */
int pool_drain(struct kvt_pool *p, int timeout_ms, uint32_t *left);

#endif
