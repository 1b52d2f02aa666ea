/*
 * pool.c — the store's worker pool (pool.h): FIFOs per class, a fixed set
 * of threads, and the background queue's bounds.
 */
#include "store/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"

/* Queued background jobs beyond this many are run by their submitter. */
#define MAX_QUEUED_BG 64

void pool_init(struct kvt_pool *p, uint32_t workers, uint64_t max_bg_bytes)
{
	pthread_mutex_init(&p->lock, NULL);
	kvt_cond_init_mono(&p->cond); /* drain waits on it with a deadline */
	p->max_bg = workers > 1 ? workers - 1 : 1;
	p->max_bg_bytes = max_bg_bytes;
}

/* Take the next job a worker may run: the most urgent class first; the
 * background class only while fewer than max_bg of them run. */
static struct job *job_take(struct kvt_pool *p, int *prio)
{
	for (int c = 0; c < N_PRIO; c++) {
		struct job *j = p->head[c];
		if (!j || (c == PRIO_BACKGROUND && p->running_bg >= p->max_bg))
			continue;
		p->head[c] = j->next;
		if (!p->head[c])
			p->tail[c] = NULL;
		if (c == PRIO_BACKGROUND) {
			p->queued_bg--;
			p->running_bg++;
		}
		*prio = c;
		return j;
	}
	return NULL;
}

static int queues_empty(const struct kvt_pool *p)
{
	for (int c = 0; c < N_PRIO; c++)
		if (p->head[c])
			return 0;
	return 1;
}

static void *worker_main(void *arg)
{
	struct kvt_pool *p = arg;

	for (;;) {
		struct job *j;
		uint64_t bytes;
		int prio = 0;
		pthread_mutex_lock(&p->lock);
		while (!(j = job_take(p, &prio)) && !(p->stopping && queues_empty(p)))
			pthread_cond_wait(&p->cond, &p->lock);
		pthread_mutex_unlock(&p->lock);
		if (!j) /* stopping and drained */
			return NULL;
		bytes = j->bytes; /* the job may free itself */
		j->run(j);
		if (prio != PRIO_URGENT) {
			pthread_mutex_lock(&p->lock);
			if (prio == PRIO_BACKGROUND) {
				p->running_bg--;
				p->bg_bytes -= bytes;
			}
			p->pending--;
			pthread_cond_broadcast(&p->cond);
			pthread_mutex_unlock(&p->lock);
		}
	}
}

int pool_start(struct kvt_pool *p, uint32_t workers)
{
	p->threads = calloc(workers ? workers : 1, sizeof(pthread_t));
	if (!p->threads)
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < workers; i++) {
		if (pthread_create(&p->threads[i], NULL, worker_main, p))
			return kvt_err(-EAGAIN, "cannot start worker thread %u", i);
		p->n_threads++;
	}
	return 0;
}

void pool_fini(struct kvt_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (uint32_t i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
}

int pool_submit(struct kvt_pool *p, struct job *j, int prio)
{
	j->next = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		return kvt_err(KVT_ECANCELED, "store is closing");
	}
	if (prio == PRIO_BACKGROUND) {
		if (p->queued_bg >= MAX_QUEUED_BG || p->bg_bytes + j->bytes > p->max_bg_bytes) {
			pthread_mutex_unlock(&p->lock);
			return KVT_EFULL; /* not an error: the caller runs it */
		}
		p->queued_bg++;
		p->bg_bytes += j->bytes;
	} else {
		j->bytes = 0;
	}
	if (p->tail[prio])
		p->tail[prio]->next = j;
	else
		p->head[prio] = j;
	p->tail[prio] = j;
	if (prio != PRIO_URGENT)
		p->pending++;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int pool_drain(struct kvt_pool *p, int timeout_ms, uint32_t *left)
{
	struct timespec until = kvt_deadline_after(timeout_ms);
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	while (!rc && p->pending) {
		if (timeout_ms < 0)
			pthread_cond_wait(&p->cond, &p->lock);
		else if (pthread_cond_timedwait(&p->cond, &p->lock, &until))
			rc = KVT_ETIMEDOUT;
	}
	*left = p->pending;
	pthread_mutex_unlock(&p->lock);
	return rc;
}
