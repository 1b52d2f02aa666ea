/*
 * conn.c — the engine connector: per-request, layer-by-layer loads and
 * saves between a store and the engine's paged KV memory (docs/CONNECTOR.md).
 *
 * A connector has its own few worker threads, apart from the store's pool:
 * a load holds one worker for its whole run (fetch every chunk, then write
 * the blocks layer by layer, waking the engine as each layer lands), and
 * must not wait behind the store's background copies, while the fetching
 * itself goes through kvt_prefetch so that the store's pool brings chunks up
 * from the lower tiers in parallel and the deadline is the store's.  A save
 * is one job per layer (the gathers of different layers write disjoint
 * parts of the staging), and the job that gathers the last layer puts the
 * chunks.
 *
 * Loads verify each layer's checksum just before writing it (on tiers whose
 * reads are verified), so layer 0 is trusted without hashing layer 31 first.
 * A chunk that fails at layer l leaves layers < l written: the engine is told
 * its blocks are invalid as a whole, and the store stops serving that copy.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "engine/paged.h"
#include "store/store.h"
#ifdef KVT_HAVE_CUDA
#include "engine/cuda.h"

static void pin_arena(void *cu, void *base, size_t len)
{
	conn_cuda_pin(cu, base, len);
}
#endif

#define CONN_MAX_THREADS 64

enum { JOB_LOAD = 1, JOB_SAVE_LAYER = 2 };

struct conn_req {
	struct conn_req *next;
	uint64_t id;
	int busy; /* jobs queued or running for it */

	/* load */
	int has_load, load_done, load_reported, load_rc;
	kvt_key *lkeys;
	uint32_t n_lchunks;
	uint32_t *lblocks;    /* the blocks the load covers */
	size_t n_lblocks;
	uint64_t n_load;      /* tokens */
	int64_t deadline_ns;  /* CLOCK_MONOTONIC; -1: none */
	uint32_t layers_done; /* layers [0, layers_done) are written */
	uint8_t *lbad;        /* per chunk: not loaded whole */
	uint32_t n_bad_blocks, n_bad_chunks;

	/* save */
	int has_save, save_done, save_reported, save_rc;
	kvt_key *skeys;
	uint32_t n_schunks;
	uint32_t *sblocks;    /* blocks_per_chunk per saved chunk */
	uint8_t *staging;     /* one payload per saved chunk */
	uint8_t *squeued;     /* per layer */
	uint32_t layers_queued, layers_gathered, stored;
};

struct conn_job {
	struct conn_job *next;
	struct conn_req *r;
	int kind;
	uint32_t layer;
};

struct kvt_conn {
	kvt_store *st;
	kvt_ns ns;
	struct conn_geom g;
	kvt_paged_layer *layers; /* num_layers, expanded */
#ifdef KVT_HAVE_CUDA
	struct conn_cuda *cuda;  /* engine memory on a device; else NULL */
#endif
	int durability;
	double recompute_s;

	pthread_mutex_t mu;
	pthread_cond_t work;    /* a job was queued, or stopping */
	pthread_cond_t changed; /* a layer landed, a job ended (monotonic) */
	struct conn_job *qh, *qt;
	int stopping;
	pthread_t *thr;
	uint32_t n_thr;         /* workers to run */
	uint32_t n_started;     /* workers started: at the first queued job */
	struct conn_req *reqs;
};

/* Whether the engine's blocks are on a device (the device tier may then
 * hand out its pages as they are). */
static int conn_on_device(const kvt_conn *c)
{
#ifdef KVT_HAVE_CUDA
	return c->cuda != NULL;
#else
	(void)c;
	return 0;
#endif
}

/* One layer of one chunk between the segments `iov` (from byte `pos`) and
 * the blocks, on the CPU or, for device memory, through the CUDA backend. */
static int conn_copy(kvt_conn *c, uint32_t l, const uint32_t *blocks, uint32_t ntok,
		     const struct iovec *iov, int n_iov, uint64_t pos, int dir)
{
	struct conn_cur cur;
	int rc;

#ifdef KVT_HAVE_CUDA
	if (c->cuda)
		return conn_cuda_copy(c->cuda, &c->g, &c->layers[l], blocks, ntok, iov, n_iov, pos,
				      dir);
#endif
	if ((rc = conn_cur_init(&cur, iov, n_iov, pos)))
		return rc;
	return conn_paged_copy(&c->g, &c->layers[l], blocks, ntok, &cur, dir);
}

/* --- requests ------------------------------------------------------------ */

static struct conn_req *req_find(kvt_conn *c, uint64_t id)
{
	for (struct conn_req *r = c->reqs; r; r = r->next)
		if (r->id == id)
			return r;
	return NULL;
}

/* The request `id`, created if absent; under c->mu. */
static struct conn_req *req_get(kvt_conn *c, uint64_t id)
{
	struct conn_req *r = req_find(c, id);

	if (r)
		return r;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->id = id;
	r->next = c->reqs;
	c->reqs = r;
	return r;
}

static void req_free_load(struct conn_req *r)
{
	free(r->lkeys);
	free(r->lblocks);
	free(r->lbad);
	r->lkeys = NULL;
	r->lblocks = NULL;
	r->lbad = NULL;
	r->has_load = 0;
}

static void req_free_save(struct conn_req *r)
{
	free(r->skeys);
	free(r->sblocks);
	free(r->staging);
	free(r->squeued);
	r->skeys = NULL;
	r->sblocks = NULL;
	r->staging = NULL;
	r->squeued = NULL;
	r->has_save = 0;
}

static void req_unlink(kvt_conn *c, struct conn_req *r)
{
	struct conn_req **pp = &c->reqs;

	while (*pp != r)
		pp = &(*pp)->next;
	*pp = r->next;
	req_free_load(r);
	req_free_save(r);
	free(r);
}

static void *worker(void *arg);

/* The workers, started by the first job: a connector used only for its
 * synchronous gather and scatter (an adapter assembling one state) never
 * pays for threads.  Under c->mu.  0, or the error of the first that did
 * not start (the ones started run the queue). */
static int workers_start(kvt_conn *c)
{
	while (c->n_started < c->n_thr) {
		int rc = pthread_create(&c->thr[c->n_started], NULL, worker, c);
		if (rc)
			return c->n_started ? 0 : kvt_err(-rc, "connector worker: %s", strerror(rc));
		c->n_started++;
	}
	return 0;
}

/* Queue a job for `r`; under c->mu.  0, KVT_ENOMEM, or no worker could
 * start. */
static int job_queue(kvt_conn *c, struct conn_req *r, int kind, uint32_t layer)
{
	struct conn_job *j;
	int rc = workers_start(c);

	if (rc)
		return rc;
	if (!(j = malloc(sizeof(*j))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	j->next = NULL;
	j->r = r;
	j->kind = kind;
	j->layer = layer;
	if (c->qt)
		c->qt->next = j;
	else
		c->qh = j;
	c->qt = j;
	r->busy++;
	pthread_cond_signal(&c->work);
	return 0;
}

/* Wait on c->changed until `deadline` (NULL: forever); under c->mu.
 * 0 or ETIMEDOUT. */
static int wait_changed(kvt_conn *c, const struct timespec *deadline)
{
	if (!deadline) {
		pthread_cond_wait(&c->changed, &c->mu);
		return 0;
	}
	return pthread_cond_timedwait(&c->changed, &c->mu, deadline);
}

/* --- loads --------------------------------------------------------------- */

static uint32_t chunk_tokens_of(const kvt_conn *c, const struct conn_req *r, uint32_t i)
{
	uint64_t left = r->n_load - (uint64_t)i * c->g.chunk_tokens;
	return left < c->g.chunk_tokens ? (uint32_t)left : c->g.chunk_tokens;
}

static uint32_t chunk_blocks_of(const kvt_conn *c, const struct conn_req *r, uint32_t i)
{
	return (chunk_tokens_of(c, r, i) + c->g.block_tokens - 1) / c->g.block_tokens;
}

/* The blocks of load chunk i the engine asked to be written (not
 * KVT_CONN_NO_BLOCK): what a failed chunk leaves invalid. */
static uint32_t chunk_written_blocks(const kvt_conn *c, const struct conn_req *r, uint32_t i)
{
	const uint32_t *b = r->lblocks + (size_t)i * c->g.blocks_per_chunk;
	uint32_t n = 0;

	for (uint32_t k = 0; k < chunk_blocks_of(c, r, i); k++)
		n += b[k] != KVT_CONN_NO_BLOCK;
	return n;
}

/* Chunk i of the load is not loaded whole, for reason `rc`. */
static void load_bad(kvt_conn *c, struct conn_req *r, uint32_t i, int rc)
{
	char hex[65];

	pthread_mutex_lock(&c->mu);
	if (!r->lbad[i]) {
		r->lbad[i] = 1;
		r->n_bad_chunks++;
		r->n_bad_blocks += chunk_written_blocks(c, r, i);
		if (!r->load_rc)
			r->load_rc = rc;
	}
	pthread_mutex_unlock(&c->mu);
	kvt_key_hex(&r->lkeys[i], hex);
	kvt_log(KVT_LOG_INFO, "connector: request %llu chunk %u (%s) not loaded: %s",
		(unsigned long long)r->id, i, hex, kvt_strerror(rc));
}

/* Bring the chunks up by the deadline, borrow each, into refs[] (NULL for
 * a chunk that is not loaded, marked bad). */
static void load_fetch(kvt_conn *c, struct conn_req *r, kvt_ref **refs, int *tier)
{
	int k = 0, ms = INT_MAX, rc;
	kvt_op *op;

	if (r->deadline_ns >= 0) {
		int64_t left = r->deadline_ns - kvt_mono_ns();
		ms = left <= 0 ? 0 : (int)(left / 1000000);
	}
	if (kvt_prefetch(c->st, &c->ns, r->lkeys, r->n_lchunks, ms, &op) == 0) {
		k = kvt_op_wait(op, -1);
		kvt_op_free(op);
		if (k < 0)
			k = 0;
	}
	for (uint32_t i = 0; i < r->n_lchunks; i++) {
		if ((uint32_t)k <= i && r->deadline_ns >= 0 &&
		    kvt_mono_ns() >= r->deadline_ns) {
			uint32_t mask = 0;
			/* Past the deadline only what the first tier holds
			 * is worth reading. */
			if (kvt_locate(c->st, &c->ns, &r->lkeys[i], &mask) <= 0 || !(mask & 1)) {
				store_note_deadline(c->st, &r->lkeys[i], mask);
				load_bad(c, r, i, KVT_ETIMEDOUT);
				continue;
			}
		}
		rc = store_borrow(c->st, &c->ns, &r->lkeys[i], &refs[i], &tier[i], conn_on_device(c));
		if (rc) {
			refs[i] = NULL;
			load_bad(c, r, i, rc);
		}
	}
}

static void load_run(kvt_conn *c, struct conn_req *r)
{
	uint32_t n = r->n_lchunks, bpc = c->g.blocks_per_chunk;
	kvt_ref **refs = calloc(n ? n : 1, sizeof(*refs));
	int *tier = calloc(n ? n : 1, sizeof(*tier));
	const struct iovec *iov;
	int rc, n_iov;

	if (!refs || !tier) {
		for (uint32_t i = 0; i < n; i++)
			load_bad(c, r, i, KVT_ENOMEM);
		n = 0;
	} else {
		load_fetch(c, r, refs, tier);
	}
	for (uint32_t l = 0; l < c->g.num_layers; l++) {
		for (uint32_t i = 0; i < n; i++) {
			if (!refs[i])
				continue;
			rc = store_ref_check_layer(refs[i], tier[i], &r->lkeys[i], l);
			if (rc == KVT_ECORRUPT) {
				refs[i] = NULL;
				load_bad(c, r, i, rc);
				continue;
			}
			if (rc == 0)
				rc = kvt_ref_iov(refs[i], &iov, &n_iov);
			if (rc == 0)
				rc = conn_copy(c, l, r->lblocks + (size_t)i * bpc,
					       chunk_tokens_of(c, r, i), iov, n_iov,
					       (uint64_t)l * c->g.layer_bytes, CONN_SCATTER);
			if (rc)
				load_bad(c, r, i, rc);
			if (rc || l + 1 == c->g.num_layers) {
				kvt_release(refs[i]);
				refs[i] = NULL;
			}
		}
		/* The last layer and the end of the load are one event: an
		 * engine woken by it may reuse the blocks at once. */
		pthread_mutex_lock(&c->mu);
		r->layers_done = l + 1;
		if (l + 1 == c->g.num_layers)
			r->load_done = 1;
		pthread_cond_broadcast(&c->changed);
		pthread_mutex_unlock(&c->mu);
	}
	free(refs);
	free(tier);
}

/* --- saves --------------------------------------------------------------- */

static void save_put(kvt_conn *c, struct conn_req *r)
{
	uint64_t per = (uint64_t)c->g.num_layers * c->g.layer_bytes;
	uint32_t stored = 0;
	int first = 0;

	for (uint32_t i = 0; i < r->n_schunks; i++) {
		int rc = kvt_put(c->st, &c->ns, &r->skeys[i], r->staging + i * per, per,
				 c->durability);
		if (rc == 0 || rc == KVT_EEXIST) {
			stored++;
		} else {
			kvt_log(KVT_LOG_WARN, "connector: request %llu chunk %u not saved: %s (%s)",
				(unsigned long long)r->id, i, kvt_strerror(rc), kvt_errmsg());
			if (!first)
				first = rc;
		}
	}
	pthread_mutex_lock(&c->mu);
	free(r->staging);
	r->staging = NULL;
	r->stored = stored;
	r->save_rc = first;
	r->save_done = 1;
	pthread_mutex_unlock(&c->mu);
}

static void save_layer_run(kvt_conn *c, struct conn_req *r, uint32_t l)
{
	uint64_t per = (uint64_t)c->g.num_layers * c->g.layer_bytes;
	int rc = 0, last;

	for (uint32_t i = 0; i < r->n_schunks && !rc; i++) {
		struct iovec v = { r->staging + i * per, per };

		rc = conn_copy(c, l, r->sblocks + (size_t)i * c->g.blocks_per_chunk,
			       c->g.chunk_tokens, &v, 1, (uint64_t)l * c->g.layer_bytes, CONN_GATHER);
	}
	pthread_mutex_lock(&c->mu);
	if (rc && !r->save_rc)
		r->save_rc = rc;
	last = ++r->layers_gathered == c->g.num_layers;
	pthread_mutex_unlock(&c->mu);
	if (!last)
		return;
	if (r->save_rc) {
		/* A gather cannot fail on memory the descriptor checked; if
		 * it did, nothing half-gathered is published. */
		pthread_mutex_lock(&c->mu);
		r->save_done = 1;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	save_put(c, r);
}

/* --- workers ------------------------------------------------------------- */

static void *worker(void *arg)
{
	kvt_conn *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		struct conn_job *j;

		while (!c->qh && !c->stopping)
			pthread_cond_wait(&c->work, &c->mu);
		if (!c->qh)
			break;
		j = c->qh;
		c->qh = j->next;
		if (!c->qh)
			c->qt = NULL;
		pthread_mutex_unlock(&c->mu);
		if (j->kind == JOB_LOAD)
			load_run(c, j->r);
		else
			save_layer_run(c, j->r, j->layer);
		pthread_mutex_lock(&c->mu);
		j->r->busy--;
		pthread_cond_broadcast(&c->changed);
		free(j);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* --- open and close -------------------------------------------------------- */

int kvt_conn_open(kvt_store *st, const kvt_ns *ns, const kvt_conn_desc *d, kvt_conn **out)
{
	kvt_conn *c;
	int rc;

	kvt_err_clear();
	if (out)
		*out = NULL;
	if (!st || !ns || !d || !out)
		return kvt_err(KVT_EINVAL, "store, namespace, descriptor or output missing");
	if (d->durability < KVT_DUR_CACHED || d->durability > KVT_DUR_POWER_SAFE)
		return kvt_err(KVT_EINVAL, "durability %d is not a kvt_durability", d->durability);
	if (d->threads > CONN_MAX_THREADS)
		return kvt_err(KVT_EINVAL, "threads %u exceeds %u", d->threads, CONN_MAX_THREADS);
#ifndef KVT_HAVE_CUDA
	if (d->memory == KVT_CONN_MEM_CUDA)
		return kvt_err(KVT_ENOTSUP,
			       "engine memory on CUDA device %d: this build has no CUDA backend",
			       d->cuda_device);
#endif
	if (d->memory != KVT_CONN_MEM_HOST && d->memory != KVT_CONN_MEM_CUDA)
		return kvt_err(KVT_EINVAL, "memory %u is not a kvt_conn_memory", d->memory);
	if (!(d->recompute_s >= 0))
		return kvt_err(KVT_EINVAL, "recompute_s must be 0 or more");
	c = calloc(1, sizeof(*c));
	if (!c || !(c->layers = calloc(ns->layout.num_layers ? ns->layout.num_layers : 1,
				       sizeof(*c->layers)))) {
		free(c);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	if ((rc = conn_paged_check(&ns->layout, d, &c->g, c->layers))) {
		free(c->layers);
		free(c);
		return rc;
	}
#ifdef KVT_HAVE_CUDA
	if (d->memory == KVT_CONN_MEM_CUDA &&
	    (rc = conn_cuda_open(d->cuda_device, &c->g, &c->cuda))) {
		free(c->layers);
		free(c);
		return rc;
	}
	if (c->cuda)
		store_each_arena(st, pin_arena, c->cuda);
#endif
	c->st = st;
	c->ns = *ns;
	c->durability = d->durability;
	c->recompute_s = d->recompute_s;
	c->n_thr = d->threads ? d->threads : 2;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work, NULL);
	kvt_cond_init_mono(&c->changed);
	c->thr = calloc(c->n_thr, sizeof(*c->thr));
	if (!c->thr) {
		c->n_thr = 0;
		kvt_conn_close(c);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	*out = c;
	return 0;
}

void kvt_conn_close(kvt_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stopping = 1;
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->mu);
	for (uint32_t i = 0; i < c->n_started; i++)
		pthread_join(c->thr[i], NULL);
	while (c->reqs)
		req_unlink(c, c->reqs);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->changed);
	free(c->thr);
	free(c->layers);
#ifdef KVT_HAVE_CUDA
	conn_cuda_close(c->cuda);
#endif
	free(c);
}

/* --- synchronous copies ----------------------------------------------------- */

static int copy_args(kvt_conn *c, uint32_t layer, const uint32_t *ids, size_t n_blocks,
		     uint32_t n_tokens, const void *chunk, size_t cap)
{
	if (!c || !ids || !chunk)
		return kvt_err(KVT_EINVAL, "connector, block ids or chunk missing");
	if (layer >= c->g.num_layers)
		return kvt_err(KVT_EINVAL, "layer %u of %u", layer, c->g.num_layers);
	if (n_tokens == 0 || n_tokens > c->g.chunk_tokens)
		return kvt_err(KVT_EINVAL, "n_tokens %u out of range 1..%u", n_tokens,
			       c->g.chunk_tokens);
	if (n_blocks < (n_tokens + c->g.block_tokens - 1) / c->g.block_tokens)
		return kvt_err(KVT_EINVAL, "%u tokens need %u blocks of %u, %zu given", n_tokens,
			       (n_tokens + c->g.block_tokens - 1) / c->g.block_tokens,
			       c->g.block_tokens, n_blocks);
	if (cap < c->g.layer_bytes)
		return kvt_err(KVT_ESMALL, "chunk buffer of %zu bytes, a layer is %llu", cap,
			       (unsigned long long)c->g.layer_bytes);
	return conn_paged_check_blocks(&c->g, ids,
				       (n_tokens + c->g.block_tokens - 1) / c->g.block_tokens, 0);
}

static int copy_one(kvt_conn *c, uint32_t layer, const uint32_t *ids, uint32_t n_tokens,
		    void *chunk, int dir)
{
	struct iovec v = { chunk, c->g.layer_bytes };

	return conn_copy(c, layer, ids, n_tokens, &v, 1, 0, dir);
}

int kvt_conn_gather(kvt_conn *c, uint32_t layer, const uint32_t *block_ids,
		    size_t n_blocks, uint32_t n_tokens, void *chunk, size_t cap)
{
	int rc = copy_args(c, layer, block_ids, n_blocks, n_tokens, chunk, cap);

	return rc ? rc : copy_one(c, layer, block_ids, n_tokens, chunk, CONN_GATHER);
}

int kvt_conn_scatter(kvt_conn *c, uint32_t layer, const uint32_t *block_ids,
		     size_t n_blocks, uint32_t n_tokens, const void *chunk, size_t len)
{
	int rc = copy_args(c, layer, block_ids, n_blocks, n_tokens, chunk, len);

	return rc ? rc : copy_one(c, layer, block_ids, n_tokens, (void *)chunk, CONN_SCATTER);
}

/* --- the per-request API --------------------------------------------------- */

int kvt_conn_lookup(kvt_conn *c, const uint32_t *tokens, size_t n_tokens,
		    const kvt_extra_keys *extra)
{
	size_t n_chunks;
	kvt_lookup_result res = { 0 };
	int hit;

	kvt_err_clear();
	if (!c || (!tokens && n_tokens))
		return kvt_err(KVT_EINVAL, "connector or tokens missing");
	n_chunks = n_tokens / c->g.chunk_tokens;
	if (!n_chunks)
		return 0;
	if (!(res.tier = malloc(n_chunks)))
		return kvt_err(KVT_ENOMEM, "out of memory");
	hit = kvt_lookup_tokens(c->st, &c->ns, tokens, n_tokens, extra, NULL, 0, &res);
	if (hit > 0 && c->recompute_s > 0)
		hit = kvt_lookup_worth(c->st, &c->ns, &res, c->recompute_s);
	free(res.tier);
	if (hit <= 0)
		return hit;
	if ((uint64_t)hit * c->g.chunk_tokens == n_tokens)
		return (int)(n_tokens - 1);
	return (int)((uint64_t)hit * c->g.chunk_tokens);
}

/* The checks load and save share: enough blocks, each inside the pool
 * (a load's may also be KVT_CONN_NO_BLOCK). */
static int req_blocks_check(kvt_conn *c, const uint32_t *ids, size_t n_blocks,
			    size_t need_blocks, int load)
{
	if (n_blocks < need_blocks)
		return kvt_err(KVT_EINVAL, "%zu blocks of %u tokens needed, %zu given",
			       need_blocks, c->g.block_tokens, n_blocks);
	return conn_paged_check_blocks(&c->g, ids, need_blocks, load);
}

/* After those checks, the prompt's keys for n_chunks chunks into a new
 * array. */
static int req_keys(kvt_conn *c, const uint32_t *tokens, const kvt_extra_keys *extra,
		    const uint32_t *ids, size_t n_blocks, size_t need_blocks,
		    uint32_t n_chunks, int load, kvt_key **keys)
{
	int rc;

	*keys = NULL;
	if ((rc = req_blocks_check(c, ids, n_blocks, need_blocks, load)))
		return rc;
	if (!(*keys = malloc((n_chunks ? n_chunks : 1) * sizeof(kvt_key))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	rc = kvt_key_chain(&c->ns, tokens, (size_t)n_chunks * c->g.chunk_tokens, extra,
			   *keys, n_chunks);
	if (rc < 0) {
		free(*keys);
		*keys = NULL;
		return rc;
	}
	return 0;
}

/* The same for chunks the engine names by key: a copy of keys[0 .. n). */
static int req_keys_copy(kvt_conn *c, const kvt_key *given, const uint32_t *ids,
			 size_t n_blocks, size_t need_blocks, uint32_t n, int load,
			 kvt_key **keys)
{
	int rc;

	*keys = NULL;
	if ((rc = req_blocks_check(c, ids, n_blocks, need_blocks, load)))
		return rc;
	if (!(*keys = malloc((n ? n : 1) * sizeof(kvt_key))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	memcpy(*keys, given, n * sizeof(kvt_key));
	return 0;
}

static uint32_t *dup_ids(const uint32_t *ids, size_t n)
{
	uint32_t *d = malloc((n ? n : 1) * sizeof(*d));

	if (d)
		memcpy(d, ids, n * sizeof(*d));
	return d;
}

/* Register request `req`'s load of n_chunks chunks named by `keys` (taken
 * over: freed here on failure) into the first `need` of block_ids. */
static int load_register(kvt_conn *c, uint64_t req, kvt_key *keys, uint32_t n_chunks,
			 const uint32_t *block_ids, size_t need, size_t n_load,
			 int deadline_ms)
{
	struct conn_req *r;
	uint32_t *ids;
	uint8_t *bad;
	int rc = 0;

	ids = dup_ids(block_ids, need);
	bad = calloc(n_chunks ? n_chunks : 1, 1);
	pthread_mutex_lock(&c->mu);
	r = ids && bad ? req_get(c, req) : NULL;
	if (!r) {
		rc = kvt_err(KVT_ENOMEM, "out of memory");
	} else if (r->has_load) {
		rc = kvt_err(KVT_EINVAL, "request %llu already has a load; end it first",
			     (unsigned long long)req);
	} else if (c->stopping) {
		rc = kvt_err(KVT_ECANCELED, "connector closing");
	} else {
		r->has_load = 1;
		r->load_done = r->load_reported = r->load_rc = 0;
		r->lkeys = keys;
		r->lblocks = ids;
		r->lbad = bad;
		r->n_lchunks = n_chunks;
		r->n_lblocks = need;
		r->n_load = n_load;
		r->layers_done = 0;
		r->n_bad_blocks = r->n_bad_chunks = 0;
		r->deadline_ns = deadline_ms < 0 ? -1
						 : kvt_mono_ns() + (int64_t)deadline_ms * 1000000;
		if (n_chunks == 0) {
			r->load_done = 1;
			r->layers_done = c->g.num_layers;
		} else if ((rc = job_queue(c, r, JOB_LOAD, 0))) {
			req_free_load(r);
		}
		keys = NULL;
		ids = NULL;
		bad = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	free(keys);
	free(ids);
	free(bad);
	return rc;
}

int kvt_conn_load(kvt_conn *c, uint64_t req, const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, const uint32_t *block_ids, size_t n_blocks,
		  size_t n_load, int deadline_ms)
{
	kvt_key *keys;
	uint32_t n_chunks;
	size_t need;
	int rc;

	kvt_err_clear();
	if (!c || !tokens || !block_ids)
		return kvt_err(KVT_EINVAL, "connector, tokens or block ids missing");
	n_chunks = (uint32_t)((n_load + c->g.chunk_tokens - 1) / c->g.chunk_tokens);
	if (n_load > n_tokens || (uint64_t)n_chunks * c->g.chunk_tokens > n_tokens)
		return kvt_err(KVT_EINVAL,
			       "a load of %zu tokens needs %u whole chunks of %u, the prompt has %zu tokens",
			       n_load, n_chunks, c->g.chunk_tokens, n_tokens);
	need = (n_load + c->g.block_tokens - 1) / c->g.block_tokens;
	if ((rc = req_keys(c, tokens, extra, block_ids, n_blocks, need, n_chunks, 1, &keys)))
		return rc;
	return load_register(c, req, keys, n_chunks, block_ids, need, n_load, deadline_ms);
}

int kvt_conn_load_keys(kvt_conn *c, uint64_t req, const kvt_key *keys, size_t n_keys,
		       const uint32_t *block_ids, size_t n_blocks, size_t n_load,
		       int deadline_ms)
{
	kvt_key *own;
	uint32_t n_chunks;
	size_t need;
	int rc;

	kvt_err_clear();
	if (!c || (!keys && n_keys) || !block_ids)
		return kvt_err(KVT_EINVAL, "connector, keys or block ids missing");
	n_chunks = (uint32_t)((n_load + c->g.chunk_tokens - 1) / c->g.chunk_tokens);
	if (n_chunks > n_keys)
		return kvt_err(KVT_EINVAL,
			       "a load of %zu tokens needs %u chunks of %u, %zu keys given",
			       n_load, n_chunks, c->g.chunk_tokens, n_keys);
	need = (n_load + c->g.block_tokens - 1) / c->g.block_tokens;
	if ((rc = req_keys_copy(c, keys, block_ids, n_blocks, need, n_chunks, 1, &own)))
		return rc;
	return load_register(c, req, own, n_chunks, block_ids, need, n_load, deadline_ms);
}

static struct timespec *deadline_of(int timeout_ms, struct timespec *ts)
{
	if (timeout_ms < 0)
		return NULL;
	*ts = kvt_deadline_after(timeout_ms);
	return ts;
}

int kvt_conn_wait_layer(kvt_conn *c, uint64_t req, uint32_t layer, int timeout_ms)
{
	struct timespec ts, *dl = deadline_of(timeout_ms, &ts);
	struct conn_req *r;
	int rc = 0;

	if (!c)
		return kvt_err(KVT_EINVAL, "connector missing");
	if (layer >= c->g.num_layers)
		return kvt_err(KVT_EINVAL, "layer %u of %u", layer, c->g.num_layers);
	pthread_mutex_lock(&c->mu);
	while ((r = req_find(c, req)) && r->has_load && !r->load_done &&
	       r->layers_done <= layer) {
		if (wait_changed(c, dl) == ETIMEDOUT) {
			rc = kvt_err(KVT_ETIMEDOUT, "layer %u of request %llu not loaded in %d ms",
				     layer, (unsigned long long)req, timeout_ms);
			break;
		}
	}
	if (!rc && r && r->has_load)
		rc = (int)r->n_bad_blocks;
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int kvt_conn_load_errors(kvt_conn *c, uint64_t req, uint32_t *blocks, size_t max)
{
	struct conn_req *r;
	size_t n = 0;
	int rc;

	if (!c || (!blocks && max))
		return kvt_err(KVT_EINVAL, "connector or block output missing");
	pthread_mutex_lock(&c->mu);
	r = req_find(c, req);
	if (!r || !r->has_load) {
		rc = kvt_err(KVT_EINVAL, "request %llu has no load", (unsigned long long)req);
	} else if (!r->load_done) {
		rc = kvt_err(KVT_EAGAIN, "request %llu is still loading", (unsigned long long)req);
	} else {
		for (uint32_t i = 0; i < r->n_lchunks; i++) {
			if (!r->lbad[i])
				continue;
			for (uint32_t b = 0; b < chunk_blocks_of(c, r, i); b++) {
				uint32_t id = r->lblocks[(size_t)i * c->g.blocks_per_chunk + b];
				if (id == KVT_CONN_NO_BLOCK)
					continue; /* the engine's own, never written */
				if (n < max)
					blocks[n] = id;
				n++;
			}
		}
		rc = (int)n;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* Register request `req`'s save of the chunks among keys[0 .. n_chunks)
 * (taken over) the store lacks, with blocks_per_chunk of block_ids each. */
static int save_register(kvt_conn *c, uint64_t req, kvt_key *keys, uint32_t n_chunks,
			 const uint32_t *block_ids)
{
	uint32_t n_save = 0, bpc = c->g.blocks_per_chunk;
	uint64_t per;
	struct conn_req *r;
	uint32_t *ids = NULL;
	uint8_t *staging = NULL, *queued = NULL;
	int rc;

	per = (uint64_t)c->g.num_layers * c->g.layer_bytes;
	ids = malloc(((size_t)n_chunks * bpc + 1) * sizeof(*ids));
	if (!ids) {
		free(keys);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	/* Only the chunks the store lacks: compact keys and blocks. */
	for (uint32_t i = 0; i < n_chunks; i++) {
		if (kvt_exists(c->st, &c->ns, &keys[i]) == 1)
			continue;
		keys[n_save] = keys[i];
		memcpy(ids + (size_t)n_save * bpc, block_ids + (size_t)i * bpc, bpc * sizeof(*ids));
		n_save++;
	}
	if (n_save == 0) {
		free(keys);
		free(ids);
		return 0;
	}
	staging = malloc(per * n_save);
	queued = calloc(c->g.num_layers, 1);
	pthread_mutex_lock(&c->mu);
	r = staging && queued ? req_get(c, req) : NULL;
	if (!r) {
		rc = kvt_err(KVT_ENOMEM, "out of memory (%u chunks of staging)", n_save);
	} else if (r->has_save) {
		rc = kvt_err(KVT_EINVAL, "request %llu already has a save; end it first",
			     (unsigned long long)req);
	} else if (c->stopping) {
		rc = kvt_err(KVT_ECANCELED, "connector closing");
	} else {
		r->has_save = 1;
		r->save_done = r->save_reported = r->save_rc = 0;
		r->skeys = keys;
		r->sblocks = ids;
		r->staging = staging;
		r->squeued = queued;
		r->n_schunks = n_save;
		r->layers_queued = r->layers_gathered = r->stored = 0;
		keys = NULL;
		ids = NULL;
		staging = queued = NULL;
		rc = (int)n_save;
	}
	pthread_mutex_unlock(&c->mu);
	free(keys);
	free(ids);
	free(staging);
	free(queued);
	return rc;
}

int kvt_conn_save(kvt_conn *c, uint64_t req, const uint32_t *tokens, size_t n_tokens,
		  const kvt_extra_keys *extra, const uint32_t *block_ids, size_t n_blocks)
{
	uint32_t n_chunks;
	kvt_key *keys;
	int rc;

	kvt_err_clear();
	if (!c || !tokens || !block_ids)
		return kvt_err(KVT_EINVAL, "connector, tokens or block ids missing");
	n_chunks = (uint32_t)(n_tokens / c->g.chunk_tokens);
	if ((rc = req_keys(c, tokens, extra, block_ids, n_blocks,
			   (size_t)n_chunks * c->g.blocks_per_chunk, n_chunks, 0, &keys)))
		return rc;
	return save_register(c, req, keys, n_chunks, block_ids);
}

int kvt_conn_save_keys(kvt_conn *c, uint64_t req, const kvt_key *keys, size_t n_keys,
		       const uint32_t *block_ids, size_t n_blocks)
{
	kvt_key *own;
	int rc;

	kvt_err_clear();
	if (!c || (!keys && n_keys) || !block_ids)
		return kvt_err(KVT_EINVAL, "connector, keys or block ids missing");
	if (n_keys > UINT32_MAX / c->g.blocks_per_chunk)
		return kvt_err(KVT_EINVAL, "%zu keys is too many", n_keys);
	if ((rc = req_keys_copy(c, keys, block_ids, n_blocks,
				n_keys * c->g.blocks_per_chunk, (uint32_t)n_keys, 0, &own)))
		return rc;
	return save_register(c, req, own, (uint32_t)n_keys, block_ids);
}

int kvt_conn_save_layer(kvt_conn *c, uint64_t req, uint32_t layer)
{
	struct conn_req *r;
	int rc = 0;

	if (!c)
		return kvt_err(KVT_EINVAL, "connector missing");
	if (layer >= c->g.num_layers && layer != KVT_CONN_ALL_LAYERS)
		return kvt_err(KVT_EINVAL, "layer %u of %u", layer, c->g.num_layers);
	pthread_mutex_lock(&c->mu);
	r = req_find(c, req);
	if (!r || !r->has_save) {
		rc = 0; /* nothing to save */
	} else if (layer != KVT_CONN_ALL_LAYERS && r->squeued[layer]) {
		rc = kvt_err(KVT_EINVAL, "layer %u of request %llu already saved", layer,
			     (unsigned long long)req);
	} else {
		uint32_t lo = layer == KVT_CONN_ALL_LAYERS ? 0 : layer;
		uint32_t hi = layer == KVT_CONN_ALL_LAYERS ? c->g.num_layers : layer + 1;

		for (uint32_t l = lo; l < hi && !rc; l++) {
			if (r->squeued[l])
				continue;
			if ((rc = job_queue(c, r, JOB_SAVE_LAYER, l)) == 0) {
				r->squeued[l] = 1;
				r->layers_queued++;
			}
		}
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int kvt_conn_finished(kvt_conn *c, kvt_conn_done *out, size_t max)
{
	size_t n = 0;

	if (!c || (!out && max))
		return kvt_err(KVT_EINVAL, "connector or output missing");
	pthread_mutex_lock(&c->mu);
	for (struct conn_req *r = c->reqs; r && n < max; r = r->next) {
		if (r->has_load && r->load_done && !r->load_reported) {
			r->load_reported = 1;
			out[n++] = (kvt_conn_done){ r->id, KVT_CONN_LOAD, r->load_rc,
						    r->n_lchunks - r->n_bad_chunks,
						    r->n_bad_blocks };
		}
		if (n < max && r->has_save && r->save_done && !r->save_reported) {
			r->save_reported = 1;
			out[n++] = (kvt_conn_done){ r->id, KVT_CONN_SAVE, r->save_rc, r->stored,
						    r->n_schunks - r->stored };
		}
	}
	pthread_mutex_unlock(&c->mu);
	return (int)n;
}

/* Whether `r` has work in flight (under c->mu).  With `all`, a save with
 * layers still to queue counts too. */
static int req_pending(const struct conn_req *r, int all)
{
	return r->busy || (r->has_load && !r->load_done) ||
	       (all && r->has_save && !r->save_done);
}

int kvt_conn_wait(kvt_conn *c, uint64_t req, int timeout_ms)
{
	struct timespec ts, *dl = deadline_of(timeout_ms, &ts);
	struct conn_req *r;
	int rc = 0;

	if (!c)
		return kvt_err(KVT_EINVAL, "connector missing");
	pthread_mutex_lock(&c->mu);
	while ((r = req_find(c, req)) && req_pending(r, 1))
		if (wait_changed(c, dl) == ETIMEDOUT) {
			rc = kvt_err(KVT_ETIMEDOUT, "request %llu still in flight after %d ms",
				     (unsigned long long)req, timeout_ms);
			break;
		}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int kvt_conn_end(kvt_conn *c, uint64_t req)
{
	struct conn_req *r;

	if (!c)
		return kvt_err(KVT_EINVAL, "connector missing");
	pthread_mutex_lock(&c->mu);
	while ((r = req_find(c, req)) && req_pending(r, 0))
		wait_changed(c, NULL);
	if (r)
		req_unlink(c, r);
	pthread_mutex_unlock(&c->mu);
	return 0;
}
