/*
 * events.c — the KV event publisher (events.h; docs/EVENTS.md).
 *
 * Posters (any thread) append to a bounded queue under `mu`.  The
 * publisher thread polls its replay socket and an eventfd: while events
 * keep coming it wakes by itself every BATCH_MS and takes whatever piled
 * up as one batch, so a put pays one short critical section and no system
 * call; only a poster that finds the publisher idle (asleep for good, the
 * queue empty) or the queue half full writes the eventfd.  An event waits
 * at most BATCH_MS under load, and not at all when the store is quiet.  Encoding, sending and the
 * replay buffer belong to the thread alone: the ZeroMQ sockets are never
 * touched by two threads.
 *
 * Events are grouped as vLLM groups its own: a BlockStored per chunk (its
 * block_hashes are a chain, so unrelated chunks never share one), one
 * BlockRemoved for a run of removals from the same medium.
 */
#include "store/events.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"

const char *kvt_events_replay_parse(const void *const *frame, const size_t *len, int n,
				    uint64_t *start)
{
	const uint8_t *b;

	*start = 0;
	if (n != 2)
		return "replay request: expected two frames after the identity, an empty "
		       "delimiter and the start sequence (8 bytes, big-endian)";
	if (len[0] != 0)
		return "replay request: the first frame must be the empty delimiter";
	if (len[1] != 8)
		return "replay request: the start sequence must be 8 bytes, big-endian";
	b = frame[1];
	for (int i = 0; i < 8; i++)
		*start = *start << 8 | b[i];
	if (*start >> 63)
		return "replay request: the start sequence is negative";
	return NULL;
}

#ifdef KVT_HAVE_EVENTS

#include <msgpack.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#define MAX_BATCH_EVENTS 1024 /* events per KVEventBatch */
#define BATCH_MS 2            /* the publisher's round while events keep coming */

struct pending {
	uint8_t type;
	uint32_t block_size;
	const char *medium;
	kvt_key key;
};

/* A chunk an engine named (kvt_events_name): its blocks' hashes as the
 * engine publishes them, in a direct-mapped table (a newer name takes an
 * older one's slot; a chunk whose name is gone is published by its key). */
#define NAME_SLOTS 8192 /* a power of two: 4.4 MiB, allocated at the first name */
struct name {
	kvt_key key;
	uint8_t n;          /* 0: a free slot */
	uint8_t hash_len;   /* 32: bytes; 8: an unsigned 64-bit integer */
	uint8_t has_parent;
	uint32_t block_size;
	uint8_t parent[32];
	uint8_t hashes[KVT_CHUNK_NAME_MAX][32];
};

/* A published batch, kept for replay. */
struct sent {
	uint64_t seq;
	size_t len;
	char *payload;
};

struct kvt_events {
	struct kvt_events_conf conf;
	void *ctx, *pub, *replay;
	int efd;
	pthread_t thread;
	int started;

	pthread_mutex_t mu; /* guards q, nq, stopping, the counters, names */
	struct name *names;
	struct pending *q, *work;
	uint32_t nq;
	int idle;     /* the publisher sleeps until woken */
	int stopping;
	kvt_events_stats st;

	/* The publisher thread's own. */
	struct sent *ring; /* buffer_steps slots, oldest at ring_head */
	uint32_t ring_head, ring_n;
	uint64_t next_seq;
	msgpack_sbuffer buf;
};

void kvt_events_post(kvt_events *ev, int type, const char *medium,
		     const kvt_key *key, uint32_t block_size)
{
	int wake;

	if (!ev)
		return;
	pthread_mutex_lock(&ev->mu);
	if (ev->nq == ev->conf.max_queue) {
		ev->st.dropped++;
		pthread_mutex_unlock(&ev->mu);
		return;
	}
	ev->q[ev->nq] = (struct pending){ .type = (uint8_t)type, .block_size = block_size,
					  .medium = medium };
	if (key)
		ev->q[ev->nq].key = *key;
	ev->nq++;
	wake = (ev->idle && ev->nq == 1) || ev->nq == ev->conf.max_queue / 2;
	if (wake)
		ev->idle = 0;
	pthread_mutex_unlock(&ev->mu);
	if (wake) {
		uint64_t one = 1;
		/* Only EAGAIN can fail (the counter at its maximum): the thread
		 * is awake then anyway. */
		if (write(ev->efd, &one, sizeof(one)) < 0)
			return;
	}
}

static void pack_cstr(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static size_t name_slot(const kvt_key *key)
{
	uint64_t h;

	memcpy(&h, key->b + 16, sizeof(h));
	return (size_t)(h & (NAME_SLOTS - 1));
}

int kvt_events_name(kvt_events *ev, const kvt_key *key, const uint8_t *hashes, uint32_t n,
		    uint32_t hash_len, const uint8_t *parent, uint32_t block_size)
{
	struct name *e;

	if (!n || n > KVT_CHUNK_NAME_MAX || (hash_len != 32 && hash_len != 8))
		return kvt_err(KVT_EINVAL, "a chunk's name is 1..%d block hashes of 32 or 8 bytes, "
				    "not %u of %u", KVT_CHUNK_NAME_MAX, n, hash_len);
	if (!ev)
		return 0;
	pthread_mutex_lock(&ev->mu);
	if (!ev->names)
		ev->names = calloc(NAME_SLOTS, sizeof(*ev->names));
	if (ev->names) { /* without memory the key names it */
		e = &ev->names[name_slot(key)];
		e->key = *key;
		e->n = (uint8_t)n;
		e->hash_len = (uint8_t)hash_len;
		e->has_parent = parent != NULL;
		e->block_size = block_size;
		if (parent)
			memcpy(e->parent, parent, hash_len);
		for (uint32_t i = 0; i < n; i++)
			memcpy(e->hashes[i], hashes + (size_t)i * hash_len, hash_len);
	}
	pthread_mutex_unlock(&ev->mu);
	return 0;
}

/* The engine's name of `key` into *out, if it has one (under mu). */
static int name_of(kvt_events *ev, const kvt_key *key, struct name *out)
{
	int found = 0;

	if (!ev->names)
		return 0;
	pthread_mutex_lock(&ev->mu);
	{
		const struct name *e = &ev->names[name_slot(key)];
		if (e->n && !memcmp(&e->key, key, sizeof(*key))) {
			*out = *e;
			found = 1;
		}
	}
	pthread_mutex_unlock(&ev->mu);
	return found;
}

static void pack_one(msgpack_packer *pk, const uint8_t *h, uint32_t len)
{
	if (len == 8) { /* vLLM's integer form (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) */
		uint64_t v = 0;
		for (int i = 0; i < 8; i++)
			v = v << 8 | h[i];
		msgpack_pack_uint64(pk, v);
	} else {
		msgpack_pack_bin(pk, len);
		msgpack_pack_bin_body(pk, h, len);
	}
}

/* A chunk's block hashes: the engine's, when it named the chunk, else its
 * 32-byte key. */
static void pack_hashes(kvt_events *ev, msgpack_packer *pk, const kvt_key *key,
			const struct name *nm)
{
	(void)ev;
	if (nm) {
		for (uint32_t i = 0; i < nm->n; i++)
			pack_one(pk, nm->hashes[i], nm->hash_len);
		return;
	}
	pack_one(pk, key->b, sizeof(key->b));
}

/* How many maps (events) the pending run p[0..n) makes. */
static uint32_t count_events(const struct pending *p, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		if (p[i].type != KVT_EV_REMOVED || i == 0 || p[i - 1].type != KVT_EV_REMOVED ||
		    p[i - 1].medium != p[i].medium)
			k++;
	return k;
}

/* Encode p[0..n) as one KVEventBatch into ev->buf. */
static void encode_batch(kvt_events *ev, const struct pending *p, uint32_t n)
{
	msgpack_packer pk;
	struct timespec ts;

	msgpack_sbuffer_clear(&ev->buf);
	msgpack_packer_init(&pk, &ev->buf, msgpack_sbuffer_write);
	clock_gettime(CLOCK_REALTIME, &ts);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_double(&pk, (double)ts.tv_sec + ts.tv_nsec / 1e9);
	msgpack_pack_array(&pk, count_events(p, n));
	for (uint32_t i = 0; i < n; i++) {
		if (p[i].type == KVT_EV_STORED) {
			struct name nm;
			int named = name_of(ev, &p[i].key, &nm);
			msgpack_pack_map(&pk, 8);
			pack_cstr(&pk, "type");
			pack_cstr(&pk, "BlockStored");
			pack_cstr(&pk, "block_hashes");
			msgpack_pack_array(&pk, named ? nm.n : 1);
			pack_hashes(ev, &pk, &p[i].key, named ? &nm : NULL);
			pack_cstr(&pk, "parent_block_hash");
			if (named && nm.has_parent)
				pack_one(&pk, nm.parent, nm.hash_len);
			else
				msgpack_pack_nil(&pk);
			pack_cstr(&pk, "token_ids");
			msgpack_pack_array(&pk, 0);
			pack_cstr(&pk, "block_size");
			msgpack_pack_uint32(&pk, named && nm.block_size ? nm.block_size
								  : p[i].block_size);
			pack_cstr(&pk, "lora_id");
			msgpack_pack_nil(&pk);
			pack_cstr(&pk, "medium");
			pack_cstr(&pk, p[i].medium);
			pack_cstr(&pk, "lora_name");
			msgpack_pack_nil(&pk);
		} else if (p[i].type == KVT_EV_REMOVED) {
			uint32_t j = i + 1;
			while (j < n && p[j].type == KVT_EV_REMOVED && p[j].medium == p[i].medium)
				j++;
			uint32_t count = 0;
			for (uint32_t k = i; k < j; k++) {
				struct name nm;
				count += name_of(ev, &p[k].key, &nm) ? nm.n : 1;
			}
			msgpack_pack_map(&pk, 3);
			pack_cstr(&pk, "type");
			pack_cstr(&pk, "BlockRemoved");
			pack_cstr(&pk, "block_hashes");
			msgpack_pack_array(&pk, count);
			for (uint32_t k = i; k < j; k++) {
				struct name nm;
				int named = name_of(ev, &p[k].key, &nm);
				pack_hashes(ev, &pk, &p[k].key, named ? &nm : NULL);
			}
			pack_cstr(&pk, "medium");
			pack_cstr(&pk, p[i].medium);
			i = j - 1;
		} else {
			msgpack_pack_map(&pk, 1);
			pack_cstr(&pk, "type");
			pack_cstr(&pk, "AllBlocksCleared");
		}
	}
}

/* Send the encoded batch and keep it for replay. */
static void publish(kvt_events *ev, uint32_t n_events)
{
	uint8_t seq[8];
	struct sent *s;
	uint64_t v = ev->next_seq;
	char *copy;
	int ok;

	for (int i = 7; i >= 0; i--, v >>= 8)
		seq[i] = (uint8_t)v;
	ok = zmq_send(ev->pub, ev->conf.topic, strlen(ev->conf.topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
	     zmq_send(ev->pub, seq, sizeof(seq), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
	     zmq_send(ev->pub, ev->buf.data, ev->buf.size, ZMQ_DONTWAIT) >= 0;
	copy = malloc(ev->buf.size ? ev->buf.size : 1);
	if (copy) {
		memcpy(copy, ev->buf.data, ev->buf.size);
		if (ev->ring_n == ev->conf.buffer_steps) { /* forget the oldest */
			free(ev->ring[ev->ring_head].payload);
			ev->ring_head = (ev->ring_head + 1) % ev->conf.buffer_steps;
			ev->ring_n--;
		}
		s = &ev->ring[(ev->ring_head + ev->ring_n++) % ev->conf.buffer_steps];
		*s = (struct sent){ ev->next_seq, ev->buf.size, copy };
	}
	pthread_mutex_lock(&ev->mu);
	ev->st.batches++;
	ev->st.events += n_events;
	if (!ok)
		ev->st.send_failures++;
	ev->st.last_seq = ev->next_seq;
	pthread_mutex_unlock(&ev->mu);
	ev->next_seq++;
}

/* Drain the queue: every pending event, in batches.  When there was none
 * the publisher goes idle (posters wake it); 1 if it published. */
static int drain(kvt_events *ev)
{
	struct pending *p;
	uint32_t n;

	pthread_mutex_lock(&ev->mu);
	p = ev->q;
	n = ev->nq;
	ev->q = ev->work; /* posters fill the other buffer meanwhile */
	ev->work = p;
	ev->nq = 0;
	ev->idle = n == 0;
	pthread_mutex_unlock(&ev->mu);
	for (uint32_t at = 0; at < n; at += MAX_BATCH_EVENTS) {
		uint32_t k = n - at < MAX_BATCH_EVENTS ? n - at : MAX_BATCH_EVENTS;
		encode_batch(ev, p + at, k);
		publish(ev, k);
	}
	return n > 0;
}

static void replay_send(kvt_events *ev, zmq_msg_t *id, const void *topic, size_t tlen,
			const uint8_t seq[8], const void *payload, size_t plen)
{
	zmq_msg_t copy;

	zmq_msg_init(&copy);
	zmq_msg_copy(&copy, id);
	if (zmq_msg_send(&copy, ev->replay, ZMQ_SNDMORE) < 0)
		zmq_msg_close(&copy);
	zmq_send(ev->replay, "", 0, ZMQ_SNDMORE);
	zmq_send(ev->replay, topic, tlen, ZMQ_SNDMORE);
	zmq_send(ev->replay, seq, 8, ZMQ_SNDMORE);
	zmq_send(ev->replay, payload, plen, 0);
}

/* One replay request: [identity, "", start seq (8 bytes)] from a DEALER
 * socket (a REQ would take the first answer only).  The frames after the identity are collected (at most
 * three: more only counts) and judged by kvt_events_replay_parse. */
static void replay_serve(kvt_events *ev)
{
	static const uint8_t end[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	zmq_msg_t id, part[3];
	const void *data[3];
	size_t len[3];
	uint64_t from;
	const char *why;
	int frames = 0, more;

	zmq_msg_init(&id);
	if (zmq_msg_recv(&id, ev->replay, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&id);
		return;
	}
	more = zmq_msg_more(&id);
	while (more) { /* read the whole message, whatever it holds */
		zmq_msg_t *m = &part[frames < 3 ? frames : 2];
		if (frames >= 3)
			zmq_msg_close(m); /* keep the first two and the last */
		zmq_msg_init(m);
		if (zmq_msg_recv(m, ev->replay, 0) < 0) {
			zmq_msg_close(m);
			break;
		}
		more = zmq_msg_more(m);
		frames++;
	}
	for (int i = 0; i < frames && i < 3; i++) {
		data[i] = zmq_msg_data(&part[i]);
		len[i] = zmq_msg_size(&part[i]);
	}
	why = kvt_events_replay_parse(data, len, frames, &from);
	if (why) {
		replay_send(ev, &id, "", 0, end, why, strlen(why));
		pthread_mutex_lock(&ev->mu);
		ev->st.replay_errors++;
		pthread_mutex_unlock(&ev->mu);
	} else {
		for (uint32_t i = 0; i < ev->ring_n; i++) {
			const struct sent *s = &ev->ring[(ev->ring_head + i) % ev->conf.buffer_steps];
			uint8_t seq[8];
			uint64_t v = s->seq;
			if (s->seq < from)
				continue;
			for (int b = 7; b >= 0; b--, v >>= 8)
				seq[b] = (uint8_t)v;
			replay_send(ev, &id, ev->conf.topic, strlen(ev->conf.topic), seq,
				    s->payload, s->len);
		}
		replay_send(ev, &id, "", 0, end, "", 0);
		pthread_mutex_lock(&ev->mu);
		ev->st.replays++;
		pthread_mutex_unlock(&ev->mu);
	}
	for (int i = 0; i < frames && i < 3; i++)
		zmq_msg_close(&part[i]);
	zmq_msg_close(&id);
}

static void *publisher_main(void *arg)
{
	kvt_events *ev = arg;
	zmq_pollitem_t items[2] = {
		{ .fd = ev->efd, .events = ZMQ_POLLIN },
		{ .socket = ev->replay, .events = ZMQ_POLLIN },
	};
	int stop = 0, busy = 0;

	while (!stop) {
		uint64_t tick;
		int n = zmq_poll(items, ev->replay ? 2 : 1, busy ? BATCH_MS : 1000);
		if (n < 0 && zmq_errno() != EINTR)
			break;
		if (items[0].revents & ZMQ_POLLIN && read(ev->efd, &tick, sizeof(tick)) < 0)
			(void)0; /* EAGAIN: another read took it */
		pthread_mutex_lock(&ev->mu);
		stop = ev->stopping;
		pthread_mutex_unlock(&ev->mu);
		busy = drain(ev);
		if (ev->replay && items[1].revents & ZMQ_POLLIN)
			for (int i = 0; i < 64; i++) { /* every request waiting, within reason */
				int e = 0;
				size_t el = sizeof(e);
				replay_serve(ev);
				if (zmq_getsockopt(ev->replay, ZMQ_EVENTS, &e, &el) || !(e & ZMQ_POLLIN))
					break;
			}
	}
	return NULL;
}

/* Bind, as vLLM does, an address with a wildcard or an ipc/inproc one;
 * connect to the rest. */
static int attach(void *sock, const char *ep, int always_bind)
{
	int bind = always_bind || strchr(ep, '*') || strstr(ep, "::") ||
		   !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9);

	if ((bind ? zmq_bind(sock, ep) : zmq_connect(sock, ep)) == 0)
		return 0;
	return kvt_err(KVT_ECONFIG, "kv_events: cannot %s %s: %s", bind ? "bind" : "connect to",
		       ep, zmq_strerror(zmq_errno()));
}

int kvt_events_open(const struct kvt_events_conf *c, kvt_events **out)
{
	kvt_events *ev;
	int rc, zero = 0, hwm;

	*out = NULL;
	if (!c->endpoint[0] || !c->buffer_steps || !c->max_queue)
		return kvt_err(KVT_ECONFIG, "kv_events: an endpoint, buffer_steps and "
					    "max_queue_size are needed");
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return kvt_err(KVT_ENOMEM, "out of memory");
	ev->conf = *c;
	ev->efd = -1;
	ev->idle = 1;
	pthread_mutex_init(&ev->mu, NULL);
	msgpack_sbuffer_init(&ev->buf);
	ev->q = calloc(c->max_queue, sizeof(*ev->q));
	ev->work = calloc(c->max_queue, sizeof(*ev->work));
	ev->ring = calloc(c->buffer_steps, sizeof(*ev->ring));
	if (!ev->q || !ev->work || !ev->ring) {
		rc = kvt_err(KVT_ENOMEM, "kv_events: out of memory for a queue of %u and %u batches",
			     c->max_queue, c->buffer_steps);
		goto fail;
	}
	ev->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev->ctx = zmq_ctx_new();
	if (ev->efd < 0 || !ev->ctx || !(ev->pub = zmq_socket(ev->ctx, ZMQ_PUB))) {
		rc = kvt_err(-EMFILE, "kv_events: cannot make the publisher's socket: %s",
			     zmq_strerror(zmq_errno()));
		goto fail;
	}
	hwm = (int)(c->hwm > 0x7fffffff ? 0x7fffffff : c->hwm);
	zmq_setsockopt(ev->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(ev->pub, ZMQ_LINGER, &zero, sizeof(zero));
	if ((rc = attach(ev->pub, c->endpoint, 0)))
		goto fail;
	if (c->replay_endpoint[0]) {
		ev->replay = zmq_socket(ev->ctx, ZMQ_ROUTER);
		if (!ev->replay) {
			rc = kvt_err(-EMFILE, "kv_events: cannot make the replay socket: %s",
				     zmq_strerror(zmq_errno()));
			goto fail;
		}
		/* No send limit: a replay is up to buffer_steps messages at once,
		 * past ZeroMQ's default of 1,000, which would drop the rest (and
		 * the end marker) unseen; the buffer bounds the memory. */
		zmq_setsockopt(ev->replay, ZMQ_SNDHWM, &zero, sizeof(zero));
		zmq_setsockopt(ev->replay, ZMQ_LINGER, &zero, sizeof(zero));
		if ((rc = attach(ev->replay, c->replay_endpoint, 1)))
			goto fail;
	}
	if (pthread_create(&ev->thread, NULL, publisher_main, ev)) {
		rc = kvt_err(-EAGAIN, "kv_events: cannot start the publisher thread");
		goto fail;
	}
	ev->started = 1;
	/* The first batch of every publisher: whatever a router knew of this
	 * store's previous life (another process, numbered from 0 too) is
	 * gone; what the tiers hold now follows as BlockStored. */
	kvt_events_post(ev, KVT_EV_CLEARED, "", NULL, 0);
	*out = ev;
	return 0;
fail:
	kvt_events_close(ev);
	return rc;
}

void kvt_events_counters(kvt_events *ev, kvt_events_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!ev)
		return;
	pthread_mutex_lock(&ev->mu);
	*out = ev->st;
	out->queued = ev->nq;
	pthread_mutex_unlock(&ev->mu);
}

void kvt_events_close(kvt_events *ev)
{
	if (!ev)
		return;
	if (ev->started) {
		uint64_t one = 1;
		pthread_mutex_lock(&ev->mu);
		ev->stopping = 1;
		pthread_mutex_unlock(&ev->mu);
		if (write(ev->efd, &one, sizeof(one)) < 0)
			(void)0; /* the thread wakes within its poll timeout anyway */
		pthread_join(ev->thread, NULL);
	}
	if (ev->pub)
		zmq_close(ev->pub);
	if (ev->replay)
		zmq_close(ev->replay);
	if (ev->ctx)
		zmq_ctx_term(ev->ctx);
	if (ev->efd >= 0)
		close(ev->efd);
	for (uint32_t i = 0; ev->ring && i < ev->ring_n; i++)
		free(ev->ring[(ev->ring_head + i) % ev->conf.buffer_steps].payload);
	free(ev->ring);
	free(ev->q);
	free(ev->work);
	free(ev->names);
	msgpack_sbuffer_destroy(&ev->buf);
	pthread_mutex_destroy(&ev->mu);
	free(ev);
}

#else /* built without libzmq and msgpack-c */

int kvt_events_open(const struct kvt_events_conf *c, kvt_events **out)
{
	(void)c;
	*out = NULL;
	return kvt_err(KVT_ENOTSUP, "kv_events: this kvtier was built without libzmq and "
				    "msgpack-c (install libzmq3-dev and libmsgpack-dev, rebuild)");
}

void kvt_events_post(kvt_events *ev, int type, const char *medium, const kvt_key *key,
		     uint32_t block_size)
{
	(void)ev, (void)type, (void)medium, (void)key, (void)block_size;
}

int kvt_events_name(kvt_events *ev, const kvt_key *key, const uint8_t *hashes, uint32_t n,
		    uint32_t hash_len, const uint8_t *parent, uint32_t block_size)
{
	(void)ev, (void)key, (void)hashes, (void)n, (void)hash_len, (void)parent, (void)block_size;
	return 0;
}

void kvt_events_counters(kvt_events *ev, kvt_events_stats *out)
{
	(void)ev;
	memset(out, 0, sizeof(*out));
}

void kvt_events_close(kvt_events *ev)
{
	(void)ev;
}

#endif
