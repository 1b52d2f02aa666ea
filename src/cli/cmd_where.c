/*
 * cmd_where.c — `kvtier where`: which node of a fleet holds the longest
 * prefix of a prompt, and on which tier, from the nodes' own KV events
 * (docs/WHERE.md).
 *
 * Every node publishes in vLLM's wire format (a vLLM engine's
 * ZmqEventPublisher, or a kvtier store with kv_events on): a PUB socket
 * sending [topic, sequence, KVEventBatch] and a ROUTER that replays what
 * it still buffers.  This command keeps one SUB and one DEALER per node,
 * so that every batch is known by the node it came from and a gap in one
 * node's sequence is asked of that node alone.  The events build one
 * index (where_index.h) of (node, block hash, block size) -> media.
 *
 * Ordering.  A node's batches are applied in its sequence order and only
 * so: a BlockRemoved overtaken by an older BlockStored would leave a block
 * the node has dropped.  So while a node's replay runs, what arrives live
 * is held (stashed) and applied after the replay, minus what the replay
 * gave.  A batch missing inside a replay's answer was dropped on the way
 * (a ROUTER drops what does not fit its peer's pipe) and is asked again;
 * one the node no longer buffers (the answer starts past it) is counted
 * as lost, never waited for.  A sequence number that goes back is either
 * a copy of a batch already applied (the same number and the same bytes:
 * it crossed a replay) or a publisher that restarted, whose blocks are
 * then forgotten and asked again from 0.
 *
 * Threads.  One thread runs the sockets; with --serve, libmicrohttpd's
 * thread answers queries.  One rwlock guards the index and the nodes'
 * state: the socket thread holds it for writing while it handles what one
 * poll returned, and a query holds it for reading.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "jsonw.h"
#include "where_decode.h"
#include "where_index.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier where --subscribe EP[,EP...] [--replay EP[,EP...]]\n"
		"                    (--tokens FILE | --hashes FILE | --serve [ADDR:]PORT) [options]\n"
		"       kvtier where --bench N [--capacity BLOCKS] [--json]\n\n"
		"Which node of a fleet holds the longest prefix of a prompt, and on which\n"
		"tier: read every node's KV events (vLLM's ZeroMQ format, as vLLM engines\n"
		"and kvtier stores with kv_events publish them), index which node holds\n"
		"which block on which medium, and answer for a prompt (docs/WHERE.md).\n\n"
		"  --subscribe LIST   the nodes' PUB endpoints, comma-separated, each\n"
		"                     optionally NAME=tcp://host:port (default name: the endpoint)\n"
		"  --replay LIST      their replay (ROUTER) endpoints, one per node in the same\n"
		"                     order, empty or - for a node without one; each is asked\n"
		"                     from sequence 0 at start and again for every gap\n"
		"  --topic T          the topic the nodes publish under (default: any)\n"
		"  --tokens FILE      the prompt's token ids (as kvtier hash reads them)\n"
		"  --hashes FILE      the prompt's block hashes, one a line: hex bytes, or a\n"
		"                     decimal 64-bit integer (0x... forces hex)\n"
		"  --vllm             with --tokens, also match vLLM's sha256_cbor block hashes\n"
		"                     and their 64-bit integer form\n"
		"  --seed S           PYTHONHASHSEED for vLLM's NONE_HASH (default\n"
		"                     \"vllm-none-hash\", vLLM's own when the variable is unset)\n"
		"  --block-size N     vLLM's block size (default 16); with --hashes, match only\n"
		"                     blocks published with this block size (default: any)\n"
		"  --scheme S         sha256 (default) | xxh3: kvtier's chain keys\n"
		"  --lora NAME        LoRA adapter name (an extra key of every block)\n"
		"  --salt S           cache salt (first block only)\n"
		"  --capacity BLOCKS  index at most this many (node, block) entries; the least\n"
		"                     recently announced is forgotten first (default 1048576)\n"
		"  --wait-ms N        listen this long after the replays have answered, before\n"
		"                     answering (default 500)\n"
		"  --replay-timeout-ms N  give up a replay silent this long before its first batch\n"
		"                     (default 2000; once batches came, 250 ms of silence ends it)\n"
		"  --serve [ADDR:]PORT  keep running and answer over HTTP (GET /where?hashes=...,\n"
		"                     POST /where {\"hashes\"|\"tokens\": [...]}, /stats, /health);\n"
		"                     ADDR defaults to 127.0.0.1, PORT 0 picks one (printed)\n"
		"  --bench N          time answers over N synthetic indexed blocks (no sockets)\n"
		"  --json             one JSON object (with the index's and nodes' figures)\n"
		"  --models           list the model presets\n%s",
		cli_common_help);
}

#ifdef KVT_WHERE

#include <arpa/inet.h>
#include <microhttpd.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <zmq.h>

#define MAX_NODES 256           /* well within WHERE_MAX_NODES */
#define STASH_MAX 100000        /* live batches held for one node while it replays */
#define STASH_BYTES (256u << 20)
#define DUP_RING 4096           /* recent batches remembered per node (seq, checksum) */
#define LOG_PER_NODE 20         /* messages printed per node; the rest are counted */
#define RECV_BURST 256          /* messages taken from one socket per poll */
#define HTTP_BODY_MAX (16u << 20)
#define QUERY_HASHES_MAX (1u << 20)
#define DEFAULT_SEED "vllm-none-hash"

enum {
	O_SUBSCRIBE = 0x100, O_REPLAY, O_TOPIC, O_TOKENS, O_HASHES, O_VLLM, O_SEED, O_BLOCK,
	O_SCHEME, O_LORA, O_SALT, O_CAPACITY, O_WAIT, O_REPLAY_TIMEOUT, O_SERVE, O_BENCH, O_JSON,
	O_MODELS,
};

struct where_opts {
	const char *subscribe, *replay, *topic, *tokens, *hashes, *seed, *scheme, *serve;
	kvt_extra_keys x;
	int vllm, json;
	uint32_t block_size, wait_ms, replay_timeout_ms;
	uint64_t capacity, bench;
};

/* A batch received live while its node replays. */
struct held {
	uint64_t seq;
	size_t len;
	uint8_t *p;
};

struct node {
	char name[256], ep[256], replay_ep[256];
	void *sub, *dealer;
	uint64_t expected;   /* the next sequence number to apply */
	int started;         /* a batch of it has been seen */
	int replaying;
	double replay_quiet; /* when the replay last said anything */
	uint64_t replay_from;
	int replay_seen;     /* this answer has given a batch */
	int replay_hole;     /* and skipped some after its first: dropped on the way */
	struct held *stash;
	uint32_t n_stash, cap_stash;
	size_t stash_bytes;
	int stash_overflow;
	uint64_t ring_seq[DUP_RING], ring_sum[DUP_RING];
	int64_t dp_rank;
	/* What happened, for --json and /stats. */
	uint64_t batches, events, stored, removed, cleared, skipped, rejected, malformed;
	uint64_t gaps, replays, replayed, lost, duplicates, restarts, replay_errors,
		 replay_timeouts;
	unsigned logged;
	char last_error[256];
};

/* One list of a prompt's block hashes, as one kind of publisher names them. */
struct form {
	const char *name;       /* "kvtier", "vllm", "vllm_int", "hashes" */
	struct where_hash *h;
	uint32_t n;
	uint32_t block_size;    /* match only this block size; 0: any */
	uint32_t unit;          /* tokens one hash stands for; 0: its block size */
};

struct query {
	struct form f[4];
	int n;
	uint64_t prompt_tokens; /* 0: not known (hashes given) */
};

struct nans {
	int form;               /* -1: nothing held */
	uint32_t blocks;
	uint64_t tokens;
	uint32_t per_medium[WHERE_N_MEDIA];
	int tier;               /* the slowest of the blocks' fastest media */
};

struct wctx {
	struct where_opts o;
	cli_common c;
	kvt_ns ns;
	where_index *ix;
	pthread_rwlock_t lock;
	struct node *nodes;
	unsigned n_nodes;
	void *zctx;
	struct where_batch batch;
	uint8_t none_hash[32];
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* --- options ------------------------------------------------------------- */

static int where_opt(void *arg, int id, const char *v)
{
	struct where_opts *o = arg;

	switch (id) {
	case O_SUBSCRIBE: o->subscribe = v; break;
	case O_REPLAY: o->replay = v; break;
	case O_TOPIC: o->topic = v; break;
	case O_TOKENS: o->tokens = v; break;
	case O_HASHES: o->hashes = v; break;
	case O_VLLM: o->vllm = 1; break;
	case O_SEED: o->seed = v; break;
	case O_SCHEME: o->scheme = v; break;
	case O_LORA: o->x.lora = v; break;
	case O_SALT: o->x.cache_salt = v; break;
	case O_SERVE: o->serve = v; break;
	case O_JSON: o->json = 1; break;
	case O_BLOCK:
		return cli_parse_u32("where", "--block-size", v, 1, 1u << 20, &o->block_size) ? 2 : -1;
	case O_CAPACITY:
		return cli_parse_u64("where", "--capacity", v, 1, 1u << 30, &o->capacity) ? 2 : -1;
	case O_WAIT:
		return cli_parse_u32("where", "--wait-ms", v, 0, 3600000, &o->wait_ms) ? 2 : -1;
	case O_REPLAY_TIMEOUT:
		return cli_parse_u32("where", "--replay-timeout-ms", v, 1, 3600000,
				     &o->replay_timeout_ms) ? 2 : -1;
	case O_BENCH:
		return cli_parse_u64("where", "--bench", v, 1, 1u << 30, &o->bench) ? 2 : -1;
	case O_MODELS:
		cli_models_print(stdout);
		return 0;
	}
	return -1;
}

/* --- hashes as text ------------------------------------------------------ */

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * One hash as text (`n` bytes of `s`): "0x" and hex digits, or decimal
 * digits of a 64-bit integer (how vLLM's integer hashes print), or hex
 * digits (how kvtier's keys print).  A run of up to 20 decimal digits is
 * an integer: a hex hash that happens to hold only digits needs its 0x.
 */
static int parse_hash(const char *s, size_t n, struct where_hash *h, char *why, size_t wl)
{
	int force_hex = n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	size_t digits = 0;

	memset(h, 0, sizeof(*h));
	if (force_hex)
		s += 2, n -= 2;
	while (digits < n && s[digits] >= '0' && s[digits] <= '9')
		digits++;
	if (!force_hex && n && digits == n && n <= 20) {
		uint64_t v = 0;
		for (size_t i = 0; i < n; i++) {
			unsigned d = (unsigned)(s[i] - '0');
			if (v > (UINT64_MAX - d) / 10) {
				snprintf(why, wl, "\"%.*s\": an integer past 2^64-1", (int)n, s);
				return -1;
			}
			v = v * 10 + d;
		}
		where_hash_from_u64(h, v);
		return 0;
	}
	if (!n || n % 2 || n / 2 > WHERE_HASH_MAX) {
		snprintf(why, wl, "\"%.*s\": expected a decimal 64-bit integer or 2..%d hex digits "
			 "(an even count)", (int)(n > 80 ? 80 : n), s, 2 * WHERE_HASH_MAX);
		return -1;
	}
	for (size_t i = 0; i < n; i += 2) {
		int hi = hexval((unsigned char)s[i]), lo = hexval((unsigned char)s[i + 1]);
		if (hi < 0 || lo < 0) {
			snprintf(why, wl, "\"%.*s\": '%c' is not a hex digit", (int)(n > 80 ? 80 : n),
				 s, hi < 0 ? s[i] : s[i + 1]);
			return -1;
		}
		h->b[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	h->len = (uint8_t)(n / 2);
	return 0;
}

static int form_push(struct form *f, uint32_t *cap, const struct where_hash *h)
{
	if (f->n == *cap) {
		uint32_t nc = *cap ? *cap * 2 : 64;
		struct where_hash *nh;
		if (nc > QUERY_HASHES_MAX)
			return -1;
		nh = realloc(f->h, (size_t)nc * sizeof(*nh));
		if (!nh)
			return -1;
		f->h = nh;
		*cap = nc;
	}
	f->h[f->n++] = *h;
	return 0;
}

/* Split `s` at commas, newlines or spaces into hashes. */
static int hashes_from_text(const char *s, size_t len, struct form *f, char *why, size_t wl)
{
	uint32_t cap = 0;
	size_t i = 0, line = 1;

	while (i < len) {
		if (s[i] == '\n')
			line++;
		if (s[i] == ',' || s[i] == '\n' || s[i] == '\r' || s[i] == ' ' || s[i] == '\t') {
			i++;
			continue;
		}
		size_t j = i;
		while (j < len && s[j] != ',' && s[j] != '\n' && s[j] != '\r' && s[j] != ' ' &&
		       s[j] != '\t')
			j++;
		struct where_hash h;
		char w2[200];
		if (parse_hash(s + i, j - i, &h, w2, sizeof(w2))) {
			snprintf(why, wl, "line %zu: %s", line, w2);
			return -1;
		}
		if (form_push(f, &cap, &h)) {
			snprintf(why, wl, "more than %u hashes", QUERY_HASHES_MAX);
			return -1;
		}
		i = j;
	}
	return 0;
}

static void query_free(struct query *q)
{
	for (int i = 0; i < q->n; i++)
		free(q->f[i].h);
	memset(q, 0, sizeof(*q));
}

/*
 * The prompt's hashes as each kind of publisher names its blocks: kvtier's
 * chain keys of the namespace (what a kvtier node's events carry for
 * chunks put under those keys) and, with --vllm, vLLM's sha256_cbor block
 * hashes as bytes and as the 64-bit integer vLLM publishes with
 * VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, and the keys kvtier's vLLM
 * connector stores chunks under: kvt_key_from_engine_hash of the hash of
 * each chunk's last block (when a chunk is whole vLLM blocks).
 */
static int query_from_tokens(const struct wctx *w, const uint32_t *t, size_t n, struct query *q,
			     char *why, size_t wl)
{
	const kvt_extra_keys *x = w->o.x.lora || w->o.x.cache_salt ? &w->o.x : NULL;
	uint32_t chunk = w->ns.layout.chunk_tokens;
	size_t whole = n / chunk;
	kvt_key *keys = NULL;
	int e;

	memset(q, 0, sizeof(*q));
	q->prompt_tokens = n;
	if (whole > QUERY_HASHES_MAX) {
		snprintf(why, wl, "%zu tokens: more than %u blocks", n, QUERY_HASHES_MAX);
		return -1;
	}
	q->f[0] = (struct form){ .name = "kvtier", .block_size = chunk, .unit = chunk };
	q->n = 1;
	if (whole) {
		keys = malloc(whole * sizeof(*keys));
		q->f[0].h = calloc(whole, sizeof(*q->f[0].h));
		if (!keys || !q->f[0].h)
			goto nomem;
		e = kvt_key_chain(&w->ns, t, n, x, keys, whole);
		if (e < 0) {
			snprintf(why, wl, "kvtier keys: %s (%s)", kvt_strerror(e), kvt_errmsg());
			goto fail;
		}
		for (size_t i = 0; i < whole; i++) {
			q->f[0].h[i].len = 32;
			memcpy(q->f[0].h[i].b, keys[i].b, 32);
		}
		q->f[0].n = (uint32_t)whole;
	}
	if (w->o.vllm) {
		uint32_t bs = w->o.block_size ? w->o.block_size : 16;
		size_t nb = n / bs;
		uint8_t parent[32], h[32];
		q->f[1] = (struct form){ .name = "vllm", .block_size = bs, .unit = bs };
		q->f[2] = (struct form){ .name = "vllm_int", .block_size = bs, .unit = bs };
		q->n = 3;
		if (nb > QUERY_HASHES_MAX) {
			snprintf(why, wl, "%zu tokens: more than %u vLLM blocks", n, QUERY_HASHES_MAX);
			goto fail;
		}
		if (nb) {
			q->f[1].h = calloc(nb, sizeof(*q->f[1].h));
			q->f[2].h = calloc(nb, sizeof(*q->f[2].h));
			if (!q->f[1].h || !q->f[2].h)
				goto nomem;
		}
		memcpy(parent, w->none_hash, 32);
		for (size_t b = 0; b < nb; b++) {
			if ((e = kvt_vllm_block_hash(parent, t + b * bs, bs, x, b == 0, h))) {
				snprintf(why, wl, "vLLM block %zu: %s (%s)", b, kvt_strerror(e),
					 kvt_errmsg());
				goto fail;
			}
			q->f[1].h[b].len = 32;
			memcpy(q->f[1].h[b].b, h, 32);
			where_hash_from_u64(&q->f[2].h[b], kvt_vllm_hash_u64(h));
			memcpy(parent, h, 32);
		}
		q->f[1].n = q->f[2].n = (uint32_t)nb;
		if (chunk % bs == 0) {
			uint32_t per = chunk / bs;
			q->f[3] = (struct form){ .name = "kvtier_engine", .block_size = chunk,
						 .unit = chunk };
			q->n = 4;
			if (whole && !(q->f[3].h = calloc(whole, sizeof(*q->f[3].h))))
				goto nomem;
			for (size_t c = 0; c < whole; c++) {
				kvt_key k;
				if ((e = kvt_key_from_engine_hash(&w->ns, q->f[1].h[(c + 1) * per - 1].b,
								  32, &k))) {
					snprintf(why, wl, "engine key %zu: %s (%s)", c, kvt_strerror(e),
						 kvt_errmsg());
					goto fail;
				}
				q->f[3].h[c].len = 32;
				memcpy(q->f[3].h[c].b, k.b, 32);
			}
			q->f[3].n = (uint32_t)whole;
		}
	}
	free(keys);
	return 0;
nomem:
	snprintf(why, wl, "out of memory for %zu tokens' hashes", n);
fail:
	free(keys);
	query_free(q);
	return -1;
}

/* --- answers ------------------------------------------------------------- */

static int lowest_bit(unsigned m)
{
	int i = 0;

	while (!(m & 1u)) {
		m >>= 1;
		i++;
	}
	return i;
}

/*
 * Per node, the longest run of the prompt's leading blocks it holds, under
 * each form; the form that covers the most tokens is the node's answer.
 * Each block counts on the fastest medium the node holds it on; the run's
 * tier is the slowest of those (what bounds loading the whole prefix).
 * The best node covers the most tokens, then has the faster tier.
 * Caller holds the lock.
 */
static int answer(const struct wctx *w, const struct query *q, struct nans *a)
{
	int best = -1;

	for (unsigned nd = 0; nd < w->n_nodes; nd++) {
		struct nans *r = &a[nd];
		memset(r, 0, sizeof(*r));
		r->form = -1;
		r->tier = -1;
		for (int fi = 0; fi < q->n; fi++) {
			const struct form *f = &q->f[fi];
			struct nans t = { .form = fi, .tier = -1 };
			for (uint32_t i = 0; i < f->n; i++) {
				uint32_t bs = 0;
				unsigned m = where_index_get(w->ix, nd, &f->h[i], f->block_size, &bs);
				if (!m)
					break;
				int fast = lowest_bit(m);
				t.per_medium[fast]++;
				if (fast > t.tier)
					t.tier = fast;
				t.blocks++;
				t.tokens += f->unit ? f->unit : bs;
			}
			if (t.blocks && t.tokens > r->tokens)
				*r = t;
		}
		if (r->form >= 0 && (best < 0 || r->tokens > a[best].tokens ||
				     (r->tokens == a[best].tokens && r->tier < a[best].tier)))
			best = (int)nd;
	}
	return best;
}

static double now_s(void)
{
	return cli_now();
}

static json_t *media_json(const struct nans *r)
{
	json_t *m = json_object();

	for (int i = 0; m && i < WHERE_N_MEDIA; i++)
		if (r->per_medium[i])
			json_object_set_new(m, where_media_names[i], json_integer(r->per_medium[i]));
	return m;
}

static json_t *answer_json(const struct wctx *w, const struct query *q, const struct nans *a,
			   int best, double us)
{
	json_t *nodes = json_array(), *forms = json_array(), *b = json_null();

	for (int i = 0; i < q->n; i++)
		json_array_append_new(forms, json_pack("{s:s, s:I, s:I}", "hashes", q->f[i].name,
						       "blocks", (json_int_t)q->f[i].n,
						       "block_size", (json_int_t)q->f[i].block_size));
	for (unsigned nd = 0; nd < w->n_nodes; nd++) {
		const struct nans *r = &a[nd];
		json_array_append_new(nodes, json_pack(
			"{s:o, s:o, s:I, s:I, s:o, s:o, s:o}",
			"node", cli_json_str(w->nodes[nd].name),
			"endpoint", cli_json_str(w->nodes[nd].ep),
			"tokens", (json_int_t)r->tokens, "blocks", (json_int_t)r->blocks,
			"hashes", r->form >= 0 ? json_string(q->f[r->form].name) : json_null(),
			"tier", r->tier >= 0 ? json_string(where_media_names[r->tier]) : json_null(),
			"media", media_json(r)));
	}
	if (best >= 0) {
		json_decref(b);
		b = json_pack("{s:o, s:o, s:I, s:I, s:I, s:s, s:s}",
			      "node", cli_json_str(w->nodes[best].name),
			      "endpoint", cli_json_str(w->nodes[best].ep),
			      "index", (json_int_t)best, "tokens", (json_int_t)a[best].tokens,
			      "blocks", (json_int_t)a[best].blocks,
			      "tier", where_media_names[a[best].tier],
			      "hashes", q->f[a[best].form].name);
	}
	return json_pack("{s:o, s:o, s:o, s:o, s:o}",
			 "prompt_tokens", q->prompt_tokens ? cli_json_uint(q->prompt_tokens) : json_null(),
			 "forms", forms, "best", b, "nodes", nodes,
			 "lookup_us", cli_json_fixed(us, 2));
}

static json_t *index_json(const struct wctx *w)
{
	struct where_index_stats s;

	where_index_stats(w->ix, &s);
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			 "blocks", cli_json_uint(s.entries), "capacity", cli_json_uint(s.capacity),
			 "bytes", cli_json_uint(s.bytes),
			 "bytes_per_block", cli_json_fixed(s.entries ? (double)s.bytes / (double)s.entries : 0, 1),
			 "bytes_per_block_at_capacity",
			 cli_json_fixed((double)s.bytes_full / (double)s.capacity, 1),
			 "evicted", cli_json_uint(s.evicted),
			 "block_sizes_past_limit", cli_json_uint(s.size_overflow));
}

static json_t *stats_json(const struct wctx *w)
{
	json_t *nodes = json_array();

	for (unsigned i = 0; i < w->n_nodes; i++) {
		const struct node *n = &w->nodes[i];
		json_t *o = json_pack(
			"{s:o, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			"node", cli_json_str(n->name), "endpoint", cli_json_str(n->ep),
			"replay_endpoint", n->replay_ep[0] ? cli_json_str(n->replay_ep) : json_null(),
			"seq", n->started && n->expected ? cli_json_uint(n->expected - 1) : json_null(),
			"state", n->replaying ? "replaying" : n->started ? "live" : "waiting",
			"batches", cli_json_uint(n->batches), "events", cli_json_uint(n->events),
			"stored_hashes", cli_json_uint(n->stored),
			"removed_hashes", cli_json_uint(n->removed),
			"cleared", cli_json_uint(n->cleared), "skipped", cli_json_uint(n->skipped),
			"rejected", cli_json_uint(n->rejected), "malformed", cli_json_uint(n->malformed));
		if (!o)
			continue;
		json_object_set_new(o, "gaps", cli_json_uint(n->gaps));
		json_object_set_new(o, "replays", cli_json_uint(n->replays));
		json_object_set_new(o, "replayed_batches", cli_json_uint(n->replayed));
		json_object_set_new(o, "lost_batches", cli_json_uint(n->lost));
		json_object_set_new(o, "duplicates", cli_json_uint(n->duplicates));
		json_object_set_new(o, "restarts", cli_json_uint(n->restarts));
		json_object_set_new(o, "replay_errors", cli_json_uint(n->replay_errors));
		json_object_set_new(o, "replay_timeouts", cli_json_uint(n->replay_timeouts));
		json_object_set_new(o, "data_parallel_rank",
				    n->dp_rank >= 0 ? json_integer(n->dp_rank) : json_null());
		json_object_set_new(o, "last_error", n->last_error[0] ? cli_json_str(n->last_error)
								      : json_null());
		json_array_append_new(nodes, o);
	}
	return json_pack("{s:o, s:o}", "index", index_json(w), "nodes", nodes);
}

static void answer_print(const struct wctx *w, const struct query *q, const struct nans *a,
			 int best, double us)
{
	struct where_index_stats s;

	if (q->prompt_tokens)
		printf("prompt: %" PRIu64 " tokens;", q->prompt_tokens);
	else
		printf("prompt:");
	for (int i = 0; i < q->n; i++)
		printf("%s %u %s hashes (%u-token blocks)", i ? "," : "", q->f[i].n, q->f[i].name,
		       q->f[i].block_size);
	printf("\n%-40s %8s %7s %-9s %-9s %s\n", "node", "tokens", "blocks", "hashes", "tier",
	       "media (blocks on each, by their fastest copy)");
	for (unsigned nd = 0; nd < w->n_nodes; nd++) {
		const struct nans *r = &a[nd];
		char media[160] = "-";
		size_t off = 0;
		for (int m = 0; m < WHERE_N_MEDIA && off < sizeof(media); m++)
			if (r->per_medium[m])
				off += (size_t)snprintf(media + off, sizeof(media) - off, "%s%s %u",
							off ? ", " : "", where_media_names[m],
							r->per_medium[m]);
		printf("%-40s %8" PRIu64 " %7u %-9s %-9s %s\n", w->nodes[nd].name, r->tokens,
		       r->blocks, r->form >= 0 ? q->f[r->form].name : "-",
		       r->tier >= 0 ? where_media_names[r->tier] : "-", media);
	}
	if (best >= 0)
		printf("best: %s: %" PRIu64 " tokens (%u blocks), slowest block on %s\n",
		       w->nodes[best].name, a[best].tokens, a[best].blocks,
		       where_media_names[a[best].tier]);
	else
		printf("best: none: no node holds the prompt's first block\n");
	where_index_stats(w->ix, &s);
	printf("index: %" PRIu64 " blocks of %" PRIu64 ", %.1f bytes each at capacity; answered in %.2f us\n",
	       s.entries, s.capacity, (double)s.bytes_full / (double)s.capacity, us);
}

/* --- events -------------------------------------------------------------- */

static void nlog(struct node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void nlog(struct node *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(n->last_error, sizeof(n->last_error), fmt, ap);
	va_end(ap);
	if (n->logged < LOG_PER_NODE)
		fprintf(stderr, "kvtier where: %s: %s\n", n->name, n->last_error);
	else if (n->logged == LOG_PER_NODE)
		fprintf(stderr, "kvtier where: %s: more faults; counted (--json, /stats), not shown\n",
			n->name);
	n->logged++;
}

/* FNV-1a: enough to tell a batch from another with the same number. */
static uint64_t checksum(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* Decode and apply batch `seq` of node `nd`; it is then the last applied. */
static void apply(struct wctx *w, unsigned nd, uint64_t seq, const uint8_t *p, size_t len)
{
	struct node *n = &w->nodes[nd];
	struct where_batch *b = &w->batch;
	char why[256];

	n->ring_seq[seq % DUP_RING] = seq;
	n->ring_sum[seq % DUP_RING] = checksum(p, len);
	n->expected = seq + 1;
	n->started = 1;
	n->batches++;
	if (where_decode(b, p, len, why, sizeof(why))) {
		n->rejected++;
		nlog(n, "batch %" PRIu64 " refused: %s", seq, why);
		return;
	}
	n->dp_rank = b->dp_rank;
	n->skipped += b->skipped;
	n->events += b->n_ev;
	for (uint32_t i = 0; i < b->n_ev; i++) {
		const struct where_event *e = &b->ev[i];
		if (e->type == WHERE_EV_CLEARED) {
			where_index_clear_node(w->ix, nd);
			n->cleared++;
			continue;
		}
		for (uint32_t k = 0; k < e->n; k++) {
			if (e->type == WHERE_EV_STORED) {
				if (where_index_store(w->ix, nd, &b->h[e->first + k], e->block_size,
						      e->medium)) {
					nlog(n, "batch %" PRIu64 ": out of memory indexing a block", seq);
					return;
				}
				n->stored++;
			} else {
				where_index_remove(w->ix, nd, &b->h[e->first + k], e->medium);
				n->removed++;
			}
		}
	}
}

static void stash_free(struct node *n)
{
	for (uint32_t i = 0; i < n->n_stash; i++)
		free(n->stash[i].p);
	n->n_stash = 0;
	n->stash_bytes = 0;
}

static void stash_push(struct node *n, uint64_t seq, const void *p, size_t len)
{
	if (n->n_stash == STASH_MAX || n->stash_bytes + len > STASH_BYTES) {
		n->stash_overflow = 1; /* asked again once this replay ends */
		return;
	}
	if (n->n_stash == n->cap_stash) {
		uint32_t cap = n->cap_stash ? n->cap_stash * 2 : 64;
		struct held *s = realloc(n->stash, (size_t)cap * sizeof(*s));
		if (!s) {
			n->stash_overflow = 1;
			return;
		}
		n->stash = s;
		n->cap_stash = cap;
	}
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy) {
		n->stash_overflow = 1;
		return;
	}
	memcpy(copy, p, len);
	n->stash[n->n_stash++] = (struct held){ seq, len, copy };
	n->stash_bytes += len;
}

static int dealer_open(struct wctx *w, struct node *n)
{
	int zero = 0, hwm = 1000000;

	n->dealer = zmq_socket(w->zctx, ZMQ_DEALER);
	if (!n->dealer)
		return -1;
	zmq_setsockopt(n->dealer, ZMQ_LINGER, &zero, sizeof(zero));
	/* A replay comes as fast as the node can send it, and a ROUTER drops
	 * what does not fit its peer's pipe: take it all in as it comes. */
	zmq_setsockopt(n->dealer, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	if (zmq_connect(n->dealer, n->replay_ep)) {
		fprintf(stderr, "kvtier where: %s: --replay %s: %s\n", n->name, n->replay_ep,
			zmq_strerror(zmq_errno()));
		zmq_close(n->dealer);
		n->dealer = NULL;
		return -1;
	}
	return 0;
}

/* Ask the node for every batch it buffers from `from` on. */
static void replay_ask(struct node *n, uint64_t from)
{
	uint8_t seq[8];
	uint64_t v = from;

	for (int i = 7; i >= 0; i--, v >>= 8)
		seq[i] = (uint8_t)v;
	if (zmq_send(n->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(n->dealer, seq, 8, ZMQ_DONTWAIT) < 0) {
		nlog(n, "replay from %" PRIu64 ": cannot ask %s: %s", from, n->replay_ep,
		     zmq_strerror(zmq_errno()));
		return;
	}
	n->replaying = 1;
	n->replay_quiet = now_s();
	n->replay_from = from;
	n->replay_seen = n->replay_hole = 0;
	n->replays++;
}

static int held_cmp(const void *a, const void *b)
{
	const struct held *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void take(struct wctx *w, unsigned nd, uint64_t seq, const uint8_t *p, size_t len,
		 int may_replay);

/* The replay has ended (answered, refused or timed out): apply what was
 * held meanwhile, in order, past what the replay gave. */
static void replay_done(struct wctx *w, unsigned nd)
{
	struct node *n = &w->nodes[nd];
	int overflow = n->stash_overflow;

	/* Batches went missing inside the answer: the node's ROUTER dropped
	 * them (past its peer's high-water mark), it did not forget them.
	 * Ask again from the first, as long as each answer gets further. */
	if (n->replay_hole && n->dealer && n->expected > n->replay_from) {
		replay_ask(n, n->expected);
		if (n->replaying)
			return;
	}
	n->replaying = 0;
	n->stash_overflow = 0;
	/* Live batches and those held from the answer, in order. */
	if (n->n_stash > 1)
		qsort(n->stash, n->n_stash, sizeof(*n->stash), held_cmp);
	for (uint32_t i = 0; i < n->n_stash; i++)
		take(w, nd, n->stash[i].seq, n->stash[i].p, n->stash[i].len, 0);
	stash_free(n);
	if (overflow && n->dealer) /* what was not held: ask for it */
		replay_ask(n, n->expected);
}

/*
 * One batch of node `nd` in arrival order.  may_replay: a gap may be asked
 * of the replay socket (live batches; not those applied after a replay,
 * whose gaps the node no longer buffers).
 */
static void take(struct wctx *w, unsigned nd, uint64_t seq, const uint8_t *p, size_t len,
		 int may_replay)
{
	struct node *n = &w->nodes[nd];

	if (seq == n->expected || (!n->started && !n->dealer)) {
		/* A node without a replay socket starts where it is met. */
		apply(w, nd, seq, p, len);
		return;
	}
	if (seq > n->expected) {
		if (may_replay && n->dealer) {
			n->gaps++;
			replay_ask(n, n->expected);
			if (n->replaying) { /* this batch waits for the ones before it */
				stash_push(n, seq, p, len);
				return;
			}
		}
		if (n->started)
			nlog(n, "batches %" PRIu64 "..%" PRIu64 " lost (%s)", n->expected, seq - 1,
			     n->dealer ? "no longer buffered by the node" : "no replay endpoint");
		n->lost += seq - n->expected;
		apply(w, nd, seq, p, len);
		return;
	}
	if (n->ring_seq[seq % DUP_RING] == seq && n->ring_sum[seq % DUP_RING] == checksum(p, len)) {
		n->duplicates++;
		return;
	}
	if (!may_replay)
		return; /* an older batch met while draining a stash: already applied */
	/* The sequence went back with other bytes: a new publisher. */
	n->restarts++;
	nlog(n, "sequence went back from %" PRIu64 " to %" PRIu64 ": the publisher restarted; "
		"its blocks are forgotten and asked again", n->expected - 1, seq);
	where_index_clear_node(w->ix, nd);
	memset(n->ring_seq, 0xff, sizeof(n->ring_seq));
	n->expected = 0;
	n->started = 0;
	take(w, nd, seq, p, len, 1);
}

#define MAX_FRAMES 4

struct frames {
	zmq_msg_t m[MAX_FRAMES];
	int n, extra;
};

/* One whole message, without waiting for the first frame: 1, or 0 none. */
static int frames_recv(void *s, struct frames *f)
{
	f->n = f->extra = 0;
	for (;;) {
		zmq_msg_t spill, *m = f->n < MAX_FRAMES ? &f->m[f->n] : &spill;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, s, f->n || f->extra ? 0 : ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(m);
			return f->n > 0;
		}
		int more = zmq_msg_more(m);
		if (m == &spill) {
			zmq_msg_close(&spill);
			f->extra++;
		} else {
			f->n++;
		}
		if (!more)
			return 1;
	}
}

static void frames_close(struct frames *f)
{
	for (int i = 0; i < f->n; i++)
		zmq_msg_close(&f->m[i]);
	f->n = 0;
}

static uint64_t seq_of(zmq_msg_t *m)
{
	const uint8_t *p = zmq_msg_data(m);
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static int topic_ok(const struct wctx *w, zmq_msg_t *m)
{
	size_t n = w->o.topic ? strlen(w->o.topic) : 0;

	return !w->o.topic || (zmq_msg_size(m) == n && !memcmp(zmq_msg_data(m), w->o.topic, n));
}

static void on_live(struct wctx *w, unsigned nd, struct frames *f)
{
	struct node *n = &w->nodes[nd];

	if (f->n != 3 || f->extra || zmq_msg_size(&f->m[1]) != 8) {
		n->malformed++;
		nlog(n, "live message refused: %d frames%s, expected 3 (topic, 8-byte sequence, "
			"payload)", f->n + f->extra,
		     f->n + f->extra == 3 ? " with a sequence that is not 8 bytes" : "");
		return;
	}
	if (!topic_ok(w, &f->m[0])) {
		n->malformed++;
		nlog(n, "live message refused: topic \"%.*s\", not \"%s\"",
		     (int)(zmq_msg_size(&f->m[0]) > 64 ? 64 : zmq_msg_size(&f->m[0])),
		     (const char *)zmq_msg_data(&f->m[0]), w->o.topic);
		return;
	}
	uint64_t seq = seq_of(&f->m[1]);
	if (n->replaying) {
		stash_push(n, seq, zmq_msg_data(&f->m[2]), zmq_msg_size(&f->m[2]));
		return;
	}
	take(w, nd, seq, zmq_msg_data(&f->m[2]), zmq_msg_size(&f->m[2]), 1);
}

static void on_replay(struct wctx *w, unsigned nd, struct frames *f)
{
	struct node *n = &w->nodes[nd];

	n->replay_quiet = now_s();
	if (f->n != 4 || f->extra || zmq_msg_size(&f->m[0]) != 0 || zmq_msg_size(&f->m[2]) != 8) {
		n->malformed++;
		nlog(n, "replay answer refused: %d frames%s, expected 4 (empty, topic, 8-byte "
			"sequence, payload)", f->n + f->extra,
		     f->n + f->extra != 4 ? "" : zmq_msg_size(&f->m[0]) ? " with a first frame not empty"
									 : " with a sequence not 8 bytes");
		return;
	}
	uint64_t seq = seq_of(&f->m[2]);
	if (seq == UINT64_MAX) { /* the end: -1, its last frame empty or why not */
		size_t el = zmq_msg_size(&f->m[3]);
		if (el) {
			n->replay_errors++;
			nlog(n, "replay from %" PRIu64 " refused by the node: %.*s", n->replay_from,
			     (int)(el > 200 ? 200 : el), (const char *)zmq_msg_data(&f->m[3]));
		}
		if (n->replaying)
			replay_done(w, nd);
		return;
	}
	if (!topic_ok(w, &f->m[1])) {
		n->malformed++;
		nlog(n, "replay answer refused: topic \"%.*s\", not \"%s\"",
		     (int)(zmq_msg_size(&f->m[1]) > 64 ? 64 : zmq_msg_size(&f->m[1])),
		     (const char *)zmq_msg_data(&f->m[1]), w->o.topic);
		return;
	}
	if (!n->replaying)
		return; /* an answer to a request given up */
	int first = !n->replay_seen;
	n->replay_seen = 1;
	if (seq < n->expected)
		return; /* applied already */
	if (seq > n->expected && (!first || n->replay_hole)) {
		/* A hole after the answer's first batch: held until the hole
		 * is asked again (replay_done). */
		n->replay_hole = 1;
		stash_push(n, seq, zmq_msg_data(&f->m[3]), zmq_msg_size(&f->m[3]));
		return;
	}
	n->replayed++;
	if (seq > n->expected) { /* the answer starts past it: the node has forgotten */
		nlog(n, "batches %" PRIu64 "..%" PRIu64 " lost (no longer buffered by the node)",
		     n->expected, seq - 1);
		n->lost += seq - n->expected;
	}
	apply(w, nd, seq, zmq_msg_data(&f->m[3]), zmq_msg_size(&f->m[3]));
}

/*
 * A replay is given up when it is silent: for --replay-timeout-ms before
 * its first batch (a node that is down), for REPLAY_TAIL_MS once batches
 * have come (a node sends its whole answer at once, so a pause is its
 * end marker dropped: a ROUTER drops what does not fit its peer's pipe,
 * the marker and any batch before it).  Given up with batches come, the
 * rest is asked again (replay_done).
 */
#define REPLAY_TAIL_MS 250

static void replay_timeouts(struct wctx *w)
{
	double now = now_s();

	for (unsigned i = 0; i < w->n_nodes; i++) {
		struct node *n = &w->nodes[i];
		uint32_t ms = w->o.replay_timeout_ms;
		if (n->replay_seen && ms > REPLAY_TAIL_MS)
			ms = REPLAY_TAIL_MS;
		if (!n->replaying || now - n->replay_quiet < ms / 1e3)
			continue;
		n->replay_timeouts++;
		if (n->replay_seen)
			n->replay_hole = 1; /* the end went missing: maybe more did */
		else if (n->started || n->n_stash)
			nlog(n, "replay from %" PRIu64 ": no answer from %s in %u ms", n->replay_from,
			     n->replay_ep, ms);
		/* A new socket: an answer to the request given up must not be
		 * taken for one to the next. */
		zmq_close(n->dealer);
		n->dealer = NULL;
		dealer_open(w, n);
		replay_done(w, i);
	}
}

/* One round: wait up to `ms` for any socket, then take what is there. */
static void pump(struct wctx *w, long ms)
{
	zmq_pollitem_t items[2 * MAX_NODES];
	int map[2 * MAX_NODES], k = 0;

	for (unsigned i = 0; i < w->n_nodes; i++) {
		items[k] = (zmq_pollitem_t){ .socket = w->nodes[i].sub, .events = ZMQ_POLLIN };
		map[k++] = (int)i;
		if (w->nodes[i].dealer) {
			items[k] = (zmq_pollitem_t){ .socket = w->nodes[i].dealer, .events = ZMQ_POLLIN };
			map[k++] = -1 - (int)i;
		}
	}
	if (zmq_poll(items, k, ms) <= 0) {
		pthread_rwlock_wrlock(&w->lock);
		replay_timeouts(w);
		pthread_rwlock_unlock(&w->lock);
		return;
	}
	pthread_rwlock_wrlock(&w->lock);
	for (int i = 0; i < k; i++) {
		if (!(items[i].revents & ZMQ_POLLIN))
			continue;
		unsigned nd = (unsigned)(map[i] >= 0 ? map[i] : -1 - map[i]);
		void *s = items[i].socket;
		for (int r = 0; r < RECV_BURST; r++) {
			struct frames f;
			/* A replay's end recreates nothing, but a timeout may
			 * have replaced the node's DEALER since the poll. */
			if (map[i] < 0 && s != w->nodes[nd].dealer)
				break;
			if (!frames_recv(s, &f))
				break;
			if (map[i] >= 0)
				on_live(w, nd, &f);
			else
				on_replay(w, nd, &f);
			frames_close(&f);
		}
	}
	replay_timeouts(w);
	pthread_rwlock_unlock(&w->lock);
}

static int any_replaying(struct wctx *w)
{
	for (unsigned i = 0; i < w->n_nodes; i++)
		if (w->nodes[i].replaying)
			return 1;
	return 0;
}

/* --- nodes --------------------------------------------------------------- */

/* The next comma-separated item of *p into buf; 0 at the end. */
static int next_item(const char **p, char *buf, size_t len, int *too_long)
{
	const char *s = *p, *e;

	if (!s)
		return 0;
	e = strchr(s, ',');
	size_t n = e ? (size_t)(e - s) : strlen(s);
	*too_long = n >= len;
	snprintf(buf, len, "%.*s", (int)(n >= len ? len - 1 : n), s);
	*p = e ? e + 1 : NULL;
	return 1;
}

static int nodes_open(struct wctx *w)
{
	const char *sp = w->o.subscribe, *rp = w->o.replay;
	char item[256];
	int too_long;
	int hwm_i = 1000000;

	unsigned count = 1;
	for (const char *c = sp; *c; c++)
		count += *c == ',';
	if (count > MAX_NODES) {
		fprintf(stderr, "kvtier where: --subscribe: %u nodes, more than %d\n", count, MAX_NODES);
		return 2;
	}
	w->nodes = calloc(count, sizeof(*w->nodes));
	if (!w->nodes) {
		fprintf(stderr, "kvtier where: out of memory\n");
		return 1;
	}
	while (next_item(&sp, item, sizeof(item), &too_long)) {
		struct node *n = &w->nodes[w->n_nodes];
		char *eq = strchr(item, '=');
		if (too_long || !item[0] || (eq && (eq == item || !eq[1]))) {
			fprintf(stderr, "kvtier where: --subscribe: \"%s\": expected [NAME=]tcp://HOST:PORT "
					"(at most %zu characters)\n", item, sizeof(n->ep) - 1);
			return 2;
		}
		if (eq) {
			*eq = '\0';
			snprintf(n->name, sizeof(n->name), "%s", item);
			snprintf(n->ep, sizeof(n->ep), "%s", eq + 1);
		} else {
			snprintf(n->name, sizeof(n->name), "%s", item);
			snprintf(n->ep, sizeof(n->ep), "%s", item);
		}
		for (unsigned i = 0; i < w->n_nodes; i++)
			if (!strcmp(w->nodes[i].name, n->name)) {
				fprintf(stderr, "kvtier where: --subscribe: node \"%s\" named twice\n",
					n->name);
				return 2;
			}
		n->dp_rank = -1;
		memset(n->ring_seq, 0xff, sizeof(n->ring_seq));
		w->n_nodes++;
	}
	if (!w->n_nodes) {
		fprintf(stderr, "kvtier where: --subscribe names no node\n");
		return 2;
	}
	if (rp) {
		unsigned i = 0;
		while (next_item(&rp, item, sizeof(item), &too_long)) {
			if (i == w->n_nodes) {
				fprintf(stderr, "kvtier where: --replay names more endpoints than "
						"--subscribe names nodes (%u): one per node, in order\n",
					w->n_nodes);
				return 2;
			}
			if (too_long) {
				fprintf(stderr, "kvtier where: --replay: \"%s...\": too long\n", item);
				return 2;
			}
			if (strcmp(item, "-"))
				snprintf(w->nodes[i].replay_ep, sizeof(w->nodes[i].replay_ep), "%s", item);
			i++;
		}
		if (i != w->n_nodes) {
			fprintf(stderr, "kvtier where: --replay names %u endpoints for %u nodes: one per "
					"node, in order (empty or - for none)\n", i, w->n_nodes);
			return 2;
		}
	}
	w->zctx = zmq_ctx_new();
	if (!w->zctx) {
		fprintf(stderr, "kvtier where: cannot start ZeroMQ: %s\n", zmq_strerror(zmq_errno()));
		return 1;
	}
	for (unsigned i = 0; i < w->n_nodes; i++) {
		struct node *n = &w->nodes[i];
		int zero = 0;
		n->sub = zmq_socket(w->zctx, ZMQ_SUB);
		if (!n->sub) {
			fprintf(stderr, "kvtier where: %s: cannot make a SUB socket: %s\n", n->name,
				zmq_strerror(zmq_errno()));
			return 1;
		}
		zmq_setsockopt(n->sub, ZMQ_LINGER, &zero, sizeof(zero));
		/* A burst held in the socket rather than dropped: a drop is
		 * a gap, and a gap a replay. */
		zmq_setsockopt(n->sub, ZMQ_RCVHWM, &hwm_i, sizeof(hwm_i));
		zmq_setsockopt(n->sub, ZMQ_SUBSCRIBE, w->o.topic ? w->o.topic : "",
			       w->o.topic ? strlen(w->o.topic) : 0);
		if (zmq_connect(n->sub, n->ep)) {
			fprintf(stderr, "kvtier where: %s: --subscribe %s: %s\n", n->name, n->ep,
				zmq_strerror(zmq_errno()));
			return 2;
		}
		if (n->replay_ep[0] && dealer_open(w, n))
			return 2;
	}
	/* What each node buffers from its start: the index is then what a
	 * subscriber from the beginning would have. */
	for (unsigned i = 0; i < w->n_nodes; i++)
		if (w->nodes[i].dealer)
			replay_ask(&w->nodes[i], 0);
	return 0;
}

static void nodes_close(struct wctx *w)
{
	for (unsigned i = 0; w->nodes && i < w->n_nodes; i++) {
		if (w->nodes[i].sub)
			zmq_close(w->nodes[i].sub);
		if (w->nodes[i].dealer)
			zmq_close(w->nodes[i].dealer);
		stash_free(&w->nodes[i]);
		free(w->nodes[i].stash);
	}
	if (w->zctx)
		zmq_ctx_term(w->zctx);
	free(w->nodes);
	w->nodes = NULL;
}

/* --- HTTP ---------------------------------------------------------------- */

struct req {
	char *body;
	size_t n, cap;
	int too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *doc)
{
	char *t = cli_json_text(doc);
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!t) {
		static const char oom[] = "{\"error\": \"out of memory\"}";
		r = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
		status = MHD_HTTP_INTERNAL_SERVER_ERROR;
	} else {
		r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
	}
	if (!r) {
		free(t);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *why)
{
	return reply(c, status, json_pack("{s:o}", "error", cli_json_str(why)));
}

/* The query of a JSON body: {"hashes": [hex or int, ...], "block_size": N}
 * or {"tokens": [ids]}. */
static int query_from_json(const struct wctx *w, const char *body, size_t n, struct query *q,
			   char *why, size_t wl)
{
	json_error_t je;
	json_t *doc = json_loadb(body, n, 0, &je), *h, *t, *bs;
	int rc = -1;

	memset(q, 0, sizeof(*q));
	if (!doc || !json_is_object(doc)) {
		snprintf(why, wl, "the body: %s", doc ? "not a JSON object" : je.text);
		goto out;
	}
	h = json_object_get(doc, "hashes");
	t = json_object_get(doc, "tokens");
	bs = json_object_get(doc, "block_size");
	if (!h == !t) {
		snprintf(why, wl, "the body: give \"hashes\" or \"tokens\" (one of them)");
		goto out;
	}
	if (t) {
		size_t nt = json_array_size(t), i;
		uint32_t *ids;
		if (!json_is_array(t)) {
			snprintf(why, wl, "tokens: not an array");
			goto out;
		}
		ids = malloc((nt ? nt : 1) * sizeof(*ids));
		if (!ids) {
			snprintf(why, wl, "out of memory");
			goto out;
		}
		for (i = 0; i < nt; i++) {
			json_t *v = json_array_get(t, i);
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > UINT32_MAX) {
				snprintf(why, wl, "tokens[%zu]: expected an integer 0..4294967295", i);
				free(ids);
				goto out;
			}
			ids[i] = (uint32_t)json_integer_value(v);
		}
		rc = query_from_tokens(w, ids, nt, q, why, wl);
		free(ids);
		goto out;
	}
	if (!json_is_array(h)) {
		snprintf(why, wl, "hashes: not an array");
		goto out;
	}
	if (bs && (!json_is_integer(bs) || json_integer_value(bs) < 0 ||
		   json_integer_value(bs) > UINT32_MAX)) {
		snprintf(why, wl, "block_size: expected an integer 0..4294967295 (0: any)");
		goto out;
	}
	q->n = 1;
	q->f[0] = (struct form){ .name = "hashes",
				 .block_size = bs ? (uint32_t)json_integer_value(bs) : 0 };
	uint32_t cap = 0;
	for (size_t i = 0; i < json_array_size(h); i++) {
		json_t *v = json_array_get(h, i);
		struct where_hash x;
		char w2[200];
		if (json_is_integer(v) && json_integer_value(v) >= 0) {
			where_hash_from_u64(&x, (uint64_t)json_integer_value(v));
		} else if (json_is_string(v)) {
			if (parse_hash(json_string_value(v), json_string_length(v), &x, w2, sizeof(w2))) {
				snprintf(why, wl, "hashes[%zu]: %s", i, w2);
				goto out_q;
			}
		} else {
			snprintf(why, wl, "hashes[%zu]: expected a string (hex, or a decimal integer) "
				 "or an integer >= 0", i);
			goto out_q;
		}
		if (form_push(&q->f[0], &cap, &x)) {
			snprintf(why, wl, "hashes: more than %u", QUERY_HASHES_MAX);
			goto out_q;
		}
	}
	q->f[0].unit = q->f[0].block_size;
	rc = 0;
	goto out;
out_q:
	query_free(q);
out:
	json_decref(doc);
	return rc;
}

static int query_from_args(const struct wctx *w, struct MHD_Connection *c, struct query *q,
			   char *why, size_t wl)
{
	const char *h = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "hashes");
	const char *t = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tokens");
	const char *bs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "block_size");
	uint64_t b = 0;

	memset(q, 0, sizeof(*q));
	if (!h == !t) {
		snprintf(why, wl, "give hashes=HEX,HEX,... or tokens=ID,ID,... (one of them)");
		return -1;
	}
	if (t) {
		uint32_t *ids = NULL;
		size_t n = 0, cap = 0;
		const char *p = t;
		int rc;
		while (*p) {
			char *end;
			if (*p == ',') {
				p++;
				continue;
			}
			errno = 0;
			if (*p < '0' || *p > '9') {
				snprintf(why, wl, "tokens: '%c' where a token id was expected", *p);
				free(ids);
				return -1;
			}
			unsigned long long v = strtoull(p, &end, 10);
			if (errno || v > UINT32_MAX || (*end && *end != ',')) {
				snprintf(why, wl, "tokens: \"%.*s\": expected an integer 0..4294967295",
					 (int)strcspn(p, ","), p);
				free(ids);
				return -1;
			}
			if (n == cap) {
				uint32_t *ni;
				cap = cap ? cap * 2 : 1024;
				ni = realloc(ids, cap * sizeof(*ni));
				if (!ni) {
					free(ids);
					snprintf(why, wl, "out of memory");
					return -1;
				}
				ids = ni;
			}
			ids[n++] = (uint32_t)v;
			p = end;
		}
		rc = query_from_tokens(w, ids, n, q, why, wl);
		free(ids);
		return rc;
	}
	if (bs) {
		/* cli_parse_u64's grammar (digits, no leading zero), without
		 * its printing: the sentence goes back to the client. */
		size_t k = strspn(bs, "0123456789");
		if (!k || bs[k] || (bs[0] == '0' && k > 1) || k > 10 ||
		    (b = strtoull(bs, NULL, 10)) > UINT32_MAX) {
			snprintf(why, wl, "block_size \"%.40s\": expected an integer 0..4294967295", bs);
			return -1;
		}
	}
	q->n = 1;
	q->f[0] = (struct form){ .name = "hashes", .block_size = (uint32_t)b, .unit = (uint32_t)b };
	if (hashes_from_text(h, strlen(h), &q->f[0], why, wl)) {
		query_free(q);
		return -1;
	}
	return 0;
}

/* A GET's request state: nothing but "headers seen" (a POST's is its body). */
static int get_marker;

static enum MHD_Result on_http(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **ctx)
{
	struct wctx *w = cls;
	struct req *rq = *ctx == &get_marker ? NULL : *ctx;
	int post = !strcmp(method, MHD_HTTP_METHOD_POST);
	char why[300];
	json_t *doc;

	(void)version;
	if (!*ctx) { /* the headers: answer on the next call, after any body */
		if (!post) {
			*ctx = &get_marker;
			return MHD_YES;
		}
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		*ctx = rq;
		return MHD_YES;
	}
	if (post && *upload_size) {
		if (!rq->too_big && rq->n + *upload_size > HTTP_BODY_MAX)
			rq->too_big = 1;
		if (!rq->too_big) {
			if (rq->n + *upload_size > rq->cap) {
				size_t cap = rq->cap ? rq->cap : 4096;
				char *nb;
				while (cap < rq->n + *upload_size)
					cap *= 2;
				nb = realloc(rq->body, cap);
				if (!nb)
					return MHD_NO;
				rq->body = nb;
				rq->cap = cap;
			}
			memcpy(rq->body + rq->n, upload, *upload_size);
			rq->n += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (!post && strcmp(method, MHD_HTTP_METHOD_GET))
		return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET or POST only");
	if (!strcmp(url, "/health")) {
		struct where_index_stats s;
		pthread_rwlock_rdlock(&w->lock);
		where_index_stats(w->ix, &s);
		doc = json_pack("{s:s, s:I, s:o, s:b}", "status", "ok", "nodes", (json_int_t)w->n_nodes,
				"blocks", cli_json_uint(s.entries), "replaying", any_replaying(w));
		pthread_rwlock_unlock(&w->lock);
		return reply(c, MHD_HTTP_OK, doc);
	}
	if (!strcmp(url, "/stats")) {
		pthread_rwlock_rdlock(&w->lock);
		doc = stats_json(w);
		pthread_rwlock_unlock(&w->lock);
		return reply(c, MHD_HTTP_OK, doc);
	}
	if (strcmp(url, "/where")) {
		snprintf(why, sizeof(why), "no %.100s here: /where, /stats or /health", url);
		return reply_error(c, MHD_HTTP_NOT_FOUND, why);
	}
	struct query q;
	if (post && rq->too_big) {
		snprintf(why, sizeof(why), "a body of more than %u bytes", HTTP_BODY_MAX);
		return reply_error(c, 413, why); /* Content Too Large */
	}
	if (post ? query_from_json(w, rq->body ? rq->body : "", rq->n, &q, why, sizeof(why))
		 : query_from_args(w, c, &q, why, sizeof(why)))
		return reply_error(c, MHD_HTTP_BAD_REQUEST, why);
	struct nans *a = calloc(w->n_nodes, sizeof(*a));
	if (!a) {
		query_free(&q);
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	}
	pthread_rwlock_rdlock(&w->lock);
	double t0 = now_s();
	int best = answer(w, &q, a);
	double us = (now_s() - t0) * 1e6;
	doc = answer_json(w, &q, a, best, us);
	pthread_rwlock_unlock(&w->lock);
	free(a);
	query_free(&q);
	return reply(c, MHD_HTTP_OK, doc);
}

static void on_http_done(void *cls, struct MHD_Connection *c, void **ctx,
			 enum MHD_RequestTerminationCode why)
{
	(void)cls, (void)c, (void)why;
	if (*ctx && *ctx != &get_marker) {
		struct req *rq = *ctx;
		free(rq->body);
		free(rq);
	}
	*ctx = NULL;
}

/* "[ADDR:]PORT" into an IPv4 address; 0 or 2 after saying why. */
static int serve_addr(const char *v, struct sockaddr_in *sa)
{
	const char *colon = strrchr(v, ':');
	char host[64] = "127.0.0.1";
	uint32_t port;

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (colon) {
		if ((size_t)(colon - v) >= sizeof(host)) {
			fprintf(stderr, "kvtier where: --serve \"%s\": address too long\n", v);
			return 2;
		}
		snprintf(host, sizeof(host), "%.*s", (int)(colon - v), v);
	}
	if (cli_parse_u32("where", "--serve (port)", colon ? colon + 1 : v, 0, 65535, &port))
		return 2;
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
		fprintf(stderr, "kvtier where: --serve \"%s\": \"%s\" is not an IPv4 address\n", v, host);
		return 2;
	}
	sa->sin_port = htons((uint16_t)port);
	return 0;
}

static int serve(struct wctx *w)
{
	struct sockaddr_in sa;
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *di;
	char host[INET_ADDRSTRLEN] = "?";
	int rc = serve_addr(w->o.serve, &sa);

	if (rc)
		return rc;
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
			     on_http, w, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
			     MHD_OPTION_NOTIFY_COMPLETED, on_http_done, NULL,
			     /* a GET of a long prompt's hashes is a long URL */
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(1u << 20),
			     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "kvtier where: --serve %s: cannot listen (%s)\n", w->o.serve,
			strerror(errno));
		return 1;
	}
	di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	inet_ntop(AF_INET, &sa.sin_addr, host, sizeof(host));
	/* One line a supervisor (or a test) reads for the port. */
	printf("kvtier where: serving http://%s:%u/where for %u nodes (POST /where, GET /stats, "
	       "GET /health)\n", host, di ? di->port : ntohs(sa.sin_port), w->n_nodes);
	fflush(stdout);
	while (!stop_flag)
		pump(w, 100);
	MHD_stop_daemon(d);
	return 0;
}

/* One answer now, after the nodes' replays and --wait-ms. */
static int answer_once(struct wctx *w, const struct query *q)
{
	double start = now_s(), settled = -1;
	double replay_s = w->o.replay_timeout_ms / 1e3, wait_s = w->o.wait_ms / 1e3;
	struct nans *a = calloc(w->n_nodes, sizeof(*a));

	if (!a) {
		fprintf(stderr, "kvtier where: out of memory\n");
		return 1;
	}
	while (!stop_flag) {
		double now;
		pump(w, 20);
		now = now_s();
		if (settled < 0 && !any_replaying(w))
			settled = now;
		/* Replays asked for gaps meanwhile are waited for, within one
		 * more replay timeout: an answer comes whatever the fleet does. */
		if (settled >= 0 && now - settled >= wait_s &&
		    (!any_replaying(w) || now - settled >= wait_s + replay_s))
			break;
		if (settled < 0 && now - start > 2 * replay_s + wait_s + 1)
			break; /* timeouts are per replay; this bounds them all */
	}
	pthread_rwlock_rdlock(&w->lock);
	double t0 = now_s();
	int best = answer(w, q, a);
	double us = (now_s() - t0) * 1e6;
	if (w->o.json) {
		json_t *doc = answer_json(w, q, a, best, us);
		if (doc)
			json_object_set_new(doc, "stats", stats_json(w));
		cli_json_write(doc, stdout);
	} else {
		answer_print(w, q, a, best, us);
	}
	pthread_rwlock_unlock(&w->lock);
	free(a);
	return 0;
}

/* --- --bench ------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void rng_hash(uint64_t *s, struct where_hash *h)
{
	memset(h, 0, sizeof(*h));
	h->len = 32;
	for (int i = 0; i < 4; i++) {
		uint64_t v = rng_next(s);
		memcpy(h->b + 8 * i, &v, 8);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median and 99th percentile of `rounds` answers of q, in microseconds. */
static void time_answers(struct wctx *w, const struct query *q, struct nans *a, double *p50,
			 double *p99)
{
	enum { ROUNDS = 20001 };
	double *t = malloc(ROUNDS * sizeof(*t));

	*p50 = *p99 = NAN;
	if (!t)
		return;
	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_s();
		answer(w, q, a);
		t[r] = (now_s() - t0) * 1e6;
	}
	qsort(t, ROUNDS, sizeof(*t), cmp_double);
	*p50 = t[ROUNDS / 2];
	*p99 = t[ROUNDS * 99 / 100];
	free(t);
}

/*
 * The index alone, without sockets: N random 32-byte hashes over four
 * nodes, then a 128-block prompt node 0 holds whole (DRAM) and node 1
 * half (NVMe), answered 20,001 times; and a batch of 1,024 BlockStored
 * events as kvtier's publisher encodes them, decoded and applied.
 */
static int run_bench(struct wctx *w)
{
	enum { PROMPT = 128, BENCH_NODES = 4, BATCH = 1024, BATCHES = 200 };
	struct node nodes[BENCH_NODES];
	struct nans a[BENCH_NODES];
	struct query hit = { .n = 1 }, miss = { .n = 1 };
	struct where_index_stats st;
	uint64_t seed = 0x9e3779b97f4a7c15ull, n = w->o.bench;
	double t0, fill_s, hit50, hit99, miss50, miss99, dec_s, app_s;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	char why[256];
	int rc = 1;

	memset(nodes, 0, sizeof(nodes));
	w->nodes = nodes;
	w->n_nodes = BENCH_NODES;
	if (n > w->o.capacity)
		w->o.capacity = n;
	w->ix = where_index_new(w->o.capacity);
	hit.f[0] = (struct form){ .name = "kvtier", .block_size = 16, .unit = 16, .n = PROMPT };
	miss.f[0] = hit.f[0];
	hit.f[0].h = calloc(PROMPT, sizeof(struct where_hash));
	miss.f[0].h = calloc(PROMPT, sizeof(struct where_hash));
	msgpack_sbuffer_init(&sb);
	if (!w->ix || !hit.f[0].h || !miss.f[0].h) {
		fprintf(stderr, "kvtier where: --bench: out of memory\n");
		goto out;
	}
	for (int i = 0; i < PROMPT; i++) {
		rng_hash(&seed, &hit.f[0].h[i]);
		rng_hash(&seed, &miss.f[0].h[i]);
	}
	t0 = now_s();
	for (int i = 0; i < PROMPT; i++) {
		where_index_store(w->ix, 0, &hit.f[0].h[i], 16, WHERE_M_DRAM);
		if (i < PROMPT / 2)
			where_index_store(w->ix, 1, &hit.f[0].h[i], 16, WHERE_M_NVME);
	}
	for (uint64_t i = PROMPT + PROMPT / 2; i < n; i++) {
		struct where_hash h;
		rng_hash(&seed, &h);
		if (where_index_store(w->ix, (unsigned)(h.b[0] % BENCH_NODES), &h, 16,
				      h.b[1] & 1 ? WHERE_M_DRAM : WHERE_M_NVME)) {
			fprintf(stderr, "kvtier where: --bench: out of memory at %" PRIu64 " blocks\n", i);
			goto out;
		}
	}
	fill_s = now_s() - t0;
	where_index_stats(w->ix, &st);
	/* The prompt refreshed last: N past the capacity evicts older blocks. */
	for (int i = 0; i < PROMPT; i++) {
		where_index_store(w->ix, 0, &hit.f[0].h[i], 16, WHERE_M_DRAM);
		if (i < PROMPT / 2)
			where_index_store(w->ix, 1, &hit.f[0].h[i], 16, WHERE_M_NVME);
	}
	time_answers(w, &hit, a, &hit50, &hit99);
	int best = answer(w, &hit, a);
	if (best != 0 || a[0].tokens != PROMPT * 16 || a[1].tokens != PROMPT / 2 * 16) {
		fprintf(stderr, "kvtier where: --bench: wrong answer (node %d, %" PRIu64 " tokens)\n",
			best, best >= 0 ? a[best].tokens : 0);
		goto out;
	}
	time_answers(w, &miss, a, &miss50, &miss99);

	/* A batch as kvtier's publisher writes it (src/store/events.c). */
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_double(&pk, 1.0);
	msgpack_pack_array(&pk, BATCH);
	for (int i = 0; i < BATCH; i++) {
		static const char *const k[] = { "type", "block_hashes", "parent_block_hash",
						 "token_ids", "block_size", "lora_id", "medium",
						 "lora_name" };
		struct where_hash h;
		rng_hash(&seed, &h);
		msgpack_pack_map(&pk, 8);
		for (int f = 0; f < 8; f++) {
			msgpack_pack_str(&pk, strlen(k[f]));
			msgpack_pack_str_body(&pk, k[f], strlen(k[f]));
			switch (f) {
			case 0: msgpack_pack_str(&pk, 11); msgpack_pack_str_body(&pk, "BlockStored", 11); break;
			case 1: msgpack_pack_array(&pk, 1); msgpack_pack_bin(&pk, 32);
				msgpack_pack_bin_body(&pk, h.b, 32); break;
			case 3: msgpack_pack_array(&pk, 0); break;
			case 4: msgpack_pack_uint32(&pk, 16); break;
			case 6: msgpack_pack_str(&pk, 4); msgpack_pack_str_body(&pk, "DRAM", 4); break;
			default: msgpack_pack_nil(&pk);
			}
		}
	}
	if (where_decode(&w->batch, (const uint8_t *)sb.data, sb.size, why, sizeof(why))) {
		fprintf(stderr, "kvtier where: --bench: own batch refused: %s\n", why);
		goto out;
	}
	t0 = now_s(); /* warm: the batch's arrays are grown */
	for (int r = 0; r < BATCHES; r++)
		if (where_decode(&w->batch, (const uint8_t *)sb.data, sb.size, why, sizeof(why))) {
			fprintf(stderr, "kvtier where: --bench: own batch refused: %s\n", why);
			goto out;
		}
	dec_s = now_s() - t0;
	t0 = now_s();
	for (int r = 0; r < BATCHES; r++) {
		where_decode(&w->batch, (const uint8_t *)sb.data, sb.size, why, sizeof(why));
		for (uint32_t i = 0; i < w->batch.n_h; i++)
			where_index_store(w->ix, 3, &w->batch.h[i], 16, WHERE_M_DRAM);
	}
	app_s = now_s() - t0;

	double per_block = (double)st.bytes / (double)(st.entries ? st.entries : 1);
	double per_block_full = (double)st.bytes_full / (double)st.capacity;
	if (w->o.json) {
		cli_json_write(json_pack(
			"{s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			"blocks", cli_json_uint(st.entries), "capacity", cli_json_uint(st.capacity),
			"nodes", (json_int_t)BENCH_NODES, "prompt_blocks", (json_int_t)PROMPT,
			"bytes_per_block", cli_json_fixed(per_block, 1),
			"bytes_per_block_at_capacity", cli_json_fixed(per_block_full, 1),
			"fill_blocks_per_s", cli_json_fixed((double)n / fill_s, 0),
			"answer_us_p50", cli_json_fixed(hit50, 2), "answer_us_p99", cli_json_fixed(hit99, 2),
			"miss_answer_us_p50", cli_json_fixed(miss50, 2),
			"miss_answer_us_p99", cli_json_fixed(miss99, 2),
			"decode_events_per_s", cli_json_fixed(BATCH * BATCHES / dec_s, 0),
			"decode_apply_events_per_s", cli_json_fixed(BATCH * BATCHES / app_s, 0)),
			stdout);
	} else {
		printf("index: %" PRIu64 " blocks over %d nodes (capacity %" PRIu64 "), %.1f bytes per "
		       "block (%.1f at capacity), filled at %.0f blocks/s\n",
		       st.entries, BENCH_NODES, st.capacity, per_block, per_block_full,
		       (double)n / fill_s);
		printf("answer, %d-block prompt, %d nodes: median %.2f us, p99 %.2f us "
		       "(a prompt no node holds: %.2f us, %.2f us)\n",
		       PROMPT, BENCH_NODES, hit50, hit99, miss50, miss99);
		printf("events: %.0f BlockStored/s decoded, %.0f/s decoded and indexed (batches of %d, "
		       "%zu bytes)\n", BATCH * BATCHES / dec_s, BATCH * BATCHES / app_s, BATCH, sb.size);
	}
	rc = 0;
out:
	msgpack_sbuffer_destroy(&sb);
	query_free(&hit);
	query_free(&miss);
	w->nodes = NULL;
	return rc;
}

/* --- the command --------------------------------------------------------- */

int cmd_where(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "subscribe", required_argument, NULL, O_SUBSCRIBE },
		{ "replay", required_argument, NULL, O_REPLAY },
		{ "topic", required_argument, NULL, O_TOPIC },
		{ "tokens", required_argument, NULL, O_TOKENS },
		{ "hashes", required_argument, NULL, O_HASHES },
		{ "vllm", no_argument, NULL, O_VLLM },
		{ "seed", required_argument, NULL, O_SEED },
		{ "block-size", required_argument, NULL, O_BLOCK },
		{ "scheme", required_argument, NULL, O_SCHEME },
		{ "lora", required_argument, NULL, O_LORA },
		{ "salt", required_argument, NULL, O_SALT },
		{ "capacity", required_argument, NULL, O_CAPACITY },
		{ "wait-ms", required_argument, NULL, O_WAIT },
		{ "replay-timeout-ms", required_argument, NULL, O_REPLAY_TIMEOUT },
		{ "serve", required_argument, NULL, O_SERVE },
		{ "bench", required_argument, NULL, O_BENCH },
		{ "json", no_argument, NULL, O_JSON },
		{ "models", no_argument, NULL, O_MODELS },
		{ 0 },
	};
	struct wctx w = { .o = { .seed = DEFAULT_SEED, .scheme = "sha256", .capacity = 1u << 20,
				 .wait_ms = 500, .replay_timeout_ms = 2000 } };
	struct query q = { 0 };
	struct sigaction sa = { .sa_handler = on_signal };
	char why[300];
	int rc, first;

	rc = cli_getopt("where", argc, argv, NULL, opts, &w.c, where_opt, &w.o, usage, &first);
	if (rc >= 0)
		return rc;
	if (first < argc) {
		fprintf(stderr, "kvtier where: unexpected argument \"%s\" (the prompt is --tokens "
				"FILE or --hashes FILE)\n", argv[first]);
		return 2;
	}
	if (pthread_rwlock_init(&w.lock, NULL)) {
		fprintf(stderr, "kvtier where: cannot make a lock\n");
		return 1;
	}
	if (w.o.bench) {
		rc = run_bench(&w);
		goto out;
	}
	rc = 2;
	if (!w.o.subscribe) {
		fprintf(stderr, "kvtier where: --subscribe names the nodes' event endpoints "
				"(kvtier where --help)\n");
		goto out;
	}
	if (!!w.o.tokens + !!w.o.hashes + !!w.o.serve != 1) {
		fprintf(stderr, "kvtier where: give one of --tokens FILE, --hashes FILE (one answer) "
				"or --serve PORT (answers over HTTP)\n");
		goto out;
	}
	if (w.o.vllm && w.o.hashes) {
		fprintf(stderr, "kvtier where: --vllm computes vLLM's hashes from --tokens; "
				"--hashes are matched as given\n");
		goto out;
	}
	if (strcmp(w.o.scheme, "sha256") && strcmp(w.o.scheme, "xxh3")) {
		fprintf(stderr, "kvtier where: --scheme \"%s\": expected sha256 or xxh3\n", w.o.scheme);
		goto out;
	}
	if (!w.o.hashes) { /* tokens, now or over HTTP: the namespace's keys */
		kvt_config *cfg;
		kvt_ns_desc d;
		int e;
		if (cli_desc(&w.c, &d) || cli_config(&w.c, &cfg)) {
			rc = 1;
			goto out;
		}
		d.hash_scheme = strcmp(w.o.scheme, "xxh3") ? KVT_HASH_SHA256 : KVT_HASH_XXH3;
		e = kvt_config_ns(cfg, &d, &w.ns);
		kvt_config_free(cfg);
		if (e) {
			rc = cli_fail("where", "namespace", e);
			goto out;
		}
		kvt_vllm_none_hash(w.o.seed, w.none_hash);
	}
	if (w.o.tokens) {
		uint32_t *t;
		size_t n;
		if (cli_read_tokens(w.o.tokens, &t, &n)) {
			rc = 1;
			goto out;
		}
		rc = query_from_tokens(&w, t, n, &q, why, sizeof(why));
		free(t);
		if (rc) {
			fprintf(stderr, "kvtier where: %s: %s\n", w.o.tokens, why);
			rc = 1;
			goto out;
		}
	} else if (w.o.hashes) {
		uint8_t *text;
		size_t n;
		if (cli_read_file_max(w.o.hashes, 64u << 20, &text, &n)) {
			rc = 1;
			goto out;
		}
		q.n = 1;
		q.f[0] = (struct form){ .name = "hashes", .block_size = w.o.block_size,
					.unit = w.o.block_size };
		rc = hashes_from_text((const char *)text, n, &q.f[0], why, sizeof(why));
		free(text);
		if (rc) {
			fprintf(stderr, "kvtier where: %s: %s\n", w.o.hashes, why);
			rc = 1;
			goto out;
		}
	}
	w.ix = where_index_new(w.o.capacity);
	if (!w.ix) {
		fprintf(stderr, "kvtier where: out of memory for an index\n");
		rc = 1;
		goto out;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if ((rc = nodes_open(&w)))
		goto out;
	rc = w.o.serve ? serve(&w) : answer_once(&w, &q);
out:
	nodes_close(&w);
	query_free(&q);
	where_index_free(w.ix);
	where_batch_free(&w.batch);
	pthread_rwlock_destroy(&w.lock);
	return rc;
}

#else /* built without libzmq, msgpack-c or libmicrohttpd */

int cmd_where(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "kvtier where: this kvtier was built without libzmq and msgpack-c "
			"(install libzmq3-dev and libmsgpack-dev, rebuild)\n");
	return 1;
}

#endif
