/*
 * kvt_llama.c — the llama.cpp adapter: llama.cpp's sequence state blob cut
 * into kvtier chunks, and any cached prefix of them assembled back into a
 * blob llama.cpp restores.
 *
 * The blob (llama_state_seq_get_data of one sequence, llama.cpp's
 * src/llama-context.cpp state_seq_get_data and src/llama-kv-cache.cpp
 * state_write / state_write_meta / state_write_data; docs/LLAMA.md):
 *
 *   u32 magic 0xaf143cd8, i32 seq_id, u32 n_stream (1),
 *   u32 cell_count, then per cell: i32 pos, u32 n_seq_id (1), i32 seq_id,
 *   u32 v_trans, u32 n_layer,
 *   per layer: i32 k_type, u64 k_row_bytes, cell_count rows of K,
 *   per layer, V not transposed: i32 v_type, u64 v_row_bytes, cell_count rows;
 *   V transposed: i32 v_type, u32 v_el_bytes, u32 n_embd_v, then for each
 *   of the n_embd_v elements its cell_count values.
 *
 * Chunks are cut and assembled by the engine connector's gather and scatter
 * (kll_conn_open): the blob is engine memory with strides like any other.
 *
 * The adapter knows that layout for a one-stream cache whose cells are the
 * sequence's positions 0..n-1 in order (what a prefill from empty makes), K
 * and V in f32, f16 or bf16, no per-cell extension (M-RoPE and PLE models
 * write one); anything else is "not known": it is neither cut nor
 * assembled, and the prompt is recomputed.
 */
#include "kvt_llama.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KLL_MAGIC 0xaf143cd8u
#define KLL_CELL_BYTES 12u /* pos, n_seq_id, seq_id */

struct kvt_llama {
	kvt_store *st;
	struct llama_context *ctx;
	kvt_ns ns;
	kvt_llama_opts o;
	uint32_t n_layer, n_embd_k, n_embd_v; /* K and V row elements */
	uint32_t el;                          /* bytes per element */
	int32_t ggml_type;
	int v_trans;
	int known;
	uint32_t chunk;                       /* tokens per chunk */
	uint64_t layer_bytes;                 /* of one chunk */
	char model_id[256], revision[512];
	/* Kept across prefills: the blob a restore assembles (fresh memory of
	 * its size faults in page by page, which cost more than the copies)
	 * and one chunk layer, loaded and verified on its way there. */
	uint8_t *blob, *layer;
	size_t blob_cap;
};

/* Where each layer's K and V lie in one blob. */
typedef struct kll_map {
	uint32_t cells;
	uint64_t *k_off, *v_off; /* n_layer entries each: first row's offset */
} kll_map;

static double kll_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void kll_log(const kvt_llama *a, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (a->o.log)
		a->o.log(a->o.log_arg, line);
	else
		fprintf(stderr, "kvtier-llama: %s\n", line);
}

static int kll_dtype(int32_t ggml_type, uint32_t *kvt, uint32_t *el)
{
	switch (ggml_type) {
	case GGML_TYPE_F16: *kvt = KVT_DTYPE_F16; *el = 2; return 0;
	case GGML_TYPE_BF16: *kvt = KVT_DTYPE_BF16; *el = 2; return 0;
	case GGML_TYPE_F32: *kvt = KVT_DTYPE_F32; *el = 4; return 0;
	default: return -1;
	}
}

/* A bounds-checked reader over a blob. */
typedef struct kll_rd {
	const uint8_t *p;
	size_t len, at;
	int bad;
} kll_rd;

static uint32_t kll_u32(kll_rd *r)
{
	uint32_t v = 0;

	if (r->bad || r->len - r->at < 4) {
		r->bad = 1;
		return 0;
	}
	memcpy(&v, r->p + r->at, 4);
	r->at += 4;
	return v;
}

static uint64_t kll_u64(kll_rd *r)
{
	uint64_t v = 0;

	if (r->bad || r->len - r->at < 8) {
		r->bad = 1;
		return 0;
	}
	memcpy(&v, r->p + r->at, 8);
	r->at += 8;
	return v;
}

static void kll_skip(kll_rd *r, uint64_t n)
{
	if (r->bad || r->len - r->at < n)
		r->bad = 1;
	else
		r->at += n;
}

/*
 * Check that `b` is a blob of the layout above for the sequence's positions
 * 0..cells-1, and map it.  On the probe (`learn`), take the types and the
 * V orientation from it; afterwards they must be the ones learnt.  0, or -1
 * with the reason in `why`.
 */
static int kll_parse(kvt_llama *a, const uint8_t *b, size_t len, int learn, kll_map *m,
		     char *why, size_t why_len)
{
	kll_rd r = { b, len, 0, 0 };
	uint32_t i, n_layer, v_trans, kvt, el;

	if (kll_u32(&r) != KLL_MAGIC) {
		snprintf(why, why_len, "state magic is not llama.cpp's 0x%08x", KLL_MAGIC);
		return -1;
	}
	kll_u32(&r); /* the sequence it was taken from: restore names its own */
	if (kll_u32(&r) != 1) {
		snprintf(why, why_len, "state has more than one KV stream");
		return -1;
	}
	m->cells = kll_u32(&r);
	for (i = 0; i < m->cells && !r.bad; i++) {
		int32_t pos = (int32_t)kll_u32(&r);
		uint32_t n_seq = kll_u32(&r);

		kll_u32(&r);
		if (pos != (int32_t)i || n_seq != 1) {
			snprintf(why, why_len, "cell %u holds position %d of %u sequences, "
				 "not position %u of one", i, pos, n_seq, i);
			return -1;
		}
	}
	v_trans = kll_u32(&r);
	n_layer = kll_u32(&r);
	if (r.bad || v_trans > 1 || n_layer != a->n_layer) {
		snprintf(why, why_len, "state has %u layers (v_trans %u), the model %u",
			 n_layer, v_trans, a->n_layer);
		return -1;
	}
	for (i = 0; i < n_layer; i++) {
		int32_t t = (int32_t)kll_u32(&r);
		uint64_t row = kll_u64(&r);

		if (learn && i == 0 && !kll_dtype(t, &kvt, &el)) {
			a->ggml_type = t;
			a->el = el;
		}
		if (kll_dtype(t, &kvt, &el) || t != a->ggml_type ||
		    row != (uint64_t)a->n_embd_k * el) {
			snprintf(why, why_len, "layer %u: K of ggml type %d, rows of %llu bytes "
				 "(known: f32, f16, bf16 rows of %u elements, one type)", i, t,
				 (unsigned long long)row, a->n_embd_k);
			return -1;
		}
		m->k_off[i] = r.at;
		kll_skip(&r, (uint64_t)m->cells * row);
	}
	for (i = 0; i < n_layer; i++) {
		int32_t t = (int32_t)kll_u32(&r);

		if (t != a->ggml_type) {
			snprintf(why, why_len, "layer %u: V of ggml type %d, K of %d", i, t,
				 a->ggml_type);
			return -1;
		}
		if (!v_trans) {
			if (kll_u64(&r) != (uint64_t)a->n_embd_v * a->el) {
				snprintf(why, why_len, "layer %u: V rows not of %u elements", i,
					 a->n_embd_v);
				return -1;
			}
		} else if (kll_u32(&r) != a->el || kll_u32(&r) != a->n_embd_v) {
			snprintf(why, why_len, "layer %u: transposed V not %u elements of %u bytes",
				 i, a->n_embd_v, a->el);
			return -1;
		}
		m->v_off[i] = r.at;
		kll_skip(&r, (uint64_t)m->cells * a->n_embd_v * a->el);
	}
	if (r.bad || r.at != len) {
		snprintf(why, why_len, "state is %zu bytes, its layout accounts for %zu", len,
			 r.bad ? (size_t)0 : r.at);
		return -1;
	}
	if (learn)
		a->v_trans = (int)v_trans;
	else if ((int)v_trans != a->v_trans) {
		snprintf(why, why_len, "V transposition changed (%u)", v_trans);
		return -1;
	}
	return 0;
}

/*
 * The blob mapped by `m`, described to kvtier's engine connector as if it
 * were the engine's KV memory (kvtier.h, "Engine connector"): block b is
 * tokens [b·chunk, (b+1)·chunk), K rows (and V rows when not transposed)
 * hold n_head_kv × head_dim elements, and transposed V is one row of
 * m->cells values per element (token stride one element, element stride a
 * row).  kvt_conn_gather and kvt_conn_scatter then move a chunk's layer in
 * kvtier's payload order.  The blob's offsets depend on its cell count, so
 * each blob gets its connector, closed with it.
 */
static int kll_conn_open(const kvt_llama *a, uint8_t *blob, const kll_map *m, kvt_conn **c)
{
	uint64_t el = a->el, hd = a->ns.layout.head_dim, row = (uint64_t)a->n_embd_k * el;
	kvt_paged_layer *pl = calloc(a->n_layer, sizeof(*pl));
	kvt_conn_desc d;
	uint32_t l;
	int rc;

	if (!pl)
		return KVT_ENOMEM;
	for (l = 0; l < a->n_layer; l++) {
		pl[l].plane[0] = (kvt_paged_plane){ blob + m->k_off[l], a->chunk * row, row,
						    hd * el, el };
		if (a->v_trans)
			pl[l].plane[1] = (kvt_paged_plane){ blob + m->v_off[l], a->chunk * el, el,
							    hd * m->cells * el, m->cells * el };
		else
			pl[l].plane[1] = (kvt_paged_plane){ blob + m->v_off[l], a->chunk * row, row,
							    hd * el, el };
	}
	memset(&d, 0, sizeof(d));
	d.layers = pl;
	d.n_layer_descs = a->n_layer;
	d.num_blocks = (m->cells + a->chunk - 1) / a->chunk;
	d.block_tokens = a->chunk;
	d.threads = 1;
	d.durability = a->o.durability;
	rc = kvt_conn_open(a->st, &a->ns, &d, c);
	free(pl);
	return rc;
}

/* The header and cells of a blob for positions 0..cells-1 of `seq`, and its
 * map; the K and V bytes are left for the connector (kll_conn_open). */
static uint8_t *kll_blob_new(kvt_llama *a, llama_seq_id seq, uint32_t cells, kll_map *m,
			     size_t *len)
{
	uint64_t krow = (uint64_t)a->n_embd_k * a->el, vrow = (uint64_t)a->n_embd_v * a->el;
	size_t n = 16 + (size_t)cells * KLL_CELL_BYTES + 8, at;
	uint8_t *b;
	uint32_t i, v;

	n += a->n_layer * (12 + cells * krow);
	n += a->n_layer * (12 + cells * vrow); /* both V forms: 12 bytes of header */
	if (n > a->blob_cap) {
		free(a->blob);
		a->blob_cap = 0;
		if (!(a->blob = malloc(n)))
			return NULL;
		a->blob_cap = n;
	}
	b = a->blob;
	m->cells = cells;
#define KLL_W32(x) do { v = (uint32_t)(x); memcpy(b + at, &v, 4); at += 4; } while (0)
	at = 0;
	KLL_W32(KLL_MAGIC);
	KLL_W32(seq);
	KLL_W32(1);
	KLL_W32(cells);
	for (i = 0; i < cells; i++) {
		KLL_W32(i);
		KLL_W32(1);
		KLL_W32(seq);
	}
	KLL_W32(a->v_trans);
	KLL_W32(a->n_layer);
	for (i = 0; i < a->n_layer; i++) {
		KLL_W32(a->ggml_type);
		memcpy(b + at, &krow, 8);
		at += 8;
		m->k_off[i] = at;
		at += cells * krow;
	}
	for (i = 0; i < a->n_layer; i++) {
		KLL_W32(a->ggml_type);
		if (a->v_trans) {
			KLL_W32(a->el);
			KLL_W32(a->n_embd_v);
		} else {
			memcpy(b + at, &vrow, 8);
			at += 8;
		}
		m->v_off[i] = at;
		at += cells * vrow;
	}
#undef KLL_W32
	*len = at;
	return b;
}

static int kll_map_alloc(const kvt_llama *a, kll_map *m)
{
	m->k_off = calloc(2 * (size_t)a->n_layer, sizeof(uint64_t));
	m->v_off = m->k_off ? m->k_off + a->n_layer : NULL;
	return m->k_off ? 0 : KVT_ENOMEM;
}

int kvt_llama_decode(struct llama_context *ctx, llama_seq_id seq, const llama_token *tokens,
		     size_t n, llama_pos pos0, int logits_all)
{
	size_t step = llama_n_batch(ctx), i, k;
	struct llama_batch b = llama_batch_init((int32_t)(n < step ? n : step), 0, 1);
	int rc = 0;

	for (i = 0; i < n && !rc; i += step) {
		size_t m = n - i < step ? n - i : step;

		b.n_tokens = (int32_t)m;
		for (k = 0; k < m; k++) {
			b.token[k] = tokens[i + k];
			b.pos[k] = pos0 + (llama_pos)(i + k);
			b.n_seq_id[k] = 1;
			b.seq_id[k][0] = seq;
			b.logits[k] = logits_all || i + k == n - 1;
		}
		if (llama_decode(ctx, b))
			rc = -EIO;
	}
	llama_batch_free(b);
	return rc;
}

/* Learn the context's state layout from one decoded token (see the header). */
static void kll_probe(kvt_llama *a)
{
	struct llama_context *ctx = a->ctx;
	llama_memory_t mem = llama_get_memory(ctx);
	llama_token t = 0;
	uint8_t *blob = NULL;
	size_t len;
	kll_map m = { 0 };
	char why[256] = "";

	llama_memory_seq_rm(mem, 0, -1, -1);
	if (kvt_llama_decode(ctx, 0, &t, 1, 0, 0)) {
		snprintf(why, sizeof(why), "llama_decode of one token failed");
		goto out;
	}
	len = llama_state_seq_get_size(ctx, 0);
	blob = len ? malloc(len) : NULL;
	if (!blob || kll_map_alloc(a, &m) ||
	    llama_state_seq_get_data(ctx, blob, len, 0) != len) {
		snprintf(why, sizeof(why), "could not read the sequence state (%zu bytes)", len);
		goto out;
	}
	if (kll_parse(a, blob, len, 1, &m, why, sizeof(why)))
		goto out;
	a->known = 1;
out:
	llama_memory_seq_rm(mem, 0, -1, -1);
	if (!a->known)
		kll_log(a, "llama.cpp state layout not known (%s): recomputing every prompt", why);
	free(m.k_off);
	free(blob);
}

int kvt_llama_open(kvt_store *st, struct llama_context *ctx, const kvt_llama_opts *o,
		   kvt_llama **out)
{
	const struct llama_model *model;
	kvt_llama *a;
	kvt_ns_desc d;
	uint32_t kvt = 0, el;
	int n_head, rc;

	if (!st || !ctx || !o || !o->model_id || !out)
		return KVT_EINVAL;
	*out = NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return KVT_ENOMEM;
	model = llama_get_model(ctx);
	a->st = st;
	a->ctx = ctx;
	a->o = *o;
	a->n_layer = (uint32_t)llama_model_n_layer(model);
	n_head = llama_model_n_head(model);
	a->n_embd_k = (uint32_t)(llama_model_n_head_kv(model) *
				 (llama_model_n_embd(model) / (n_head ? n_head : 1)));
	a->n_embd_v = a->n_embd_k;
	kll_probe(a);
	if (!a->known || kll_dtype(a->ggml_type, &kvt, &el))
		kvt = KVT_DTYPE_F16; /* a namespace nothing is stored in */
	snprintf(a->model_id, sizeof(a->model_id), "%s", o->model_id);
	/* The attention mode is part of what the KV is (see the header). */
	snprintf(a->revision, sizeof(a->revision), "%s;llama.cpp;flash_attn=%s",
		 o->revision ? o->revision : "", a->v_trans ? "off" : "on");
	memset(&d, 0, sizeof(d));
	d.model = a->model_id;
	d.revision = a->revision;
	d.layout = (kvt_layout){ .num_layers = a->n_layer,
				 .num_kv_heads = (uint32_t)llama_model_n_head_kv(model),
				 .head_dim = a->n_embd_k / (uint32_t)llama_model_n_head_kv(model),
				 .dtype = kvt, .kv_planes = 2,
				 .chunk_tokens = o->chunk_tokens };
	d.tp_size = 1;
	d.pp_size = 1;
	rc = kvt_ns_init(st, &d, &a->ns);
	if (rc) {
		free(a);
		return rc;
	}
	a->chunk = a->ns.layout.chunk_tokens;
	a->layer_bytes = kvt_layout_layer_bytes(&a->ns.layout);
	*out = a;
	return 0;
}

void kvt_llama_close(kvt_llama *a)
{
	if (!a)
		return;
	free(a->blob);
	free(a->layer);
	free(a);
}

int kvt_llama_layout_known(const kvt_llama *a)
{
	return a && a->known;
}

int kvt_llama_v_transposed(const kvt_llama *a)
{
	return a && a->v_trans;
}

const kvt_ns *kvt_llama_ns(const kvt_llama *a)
{
	return a ? &a->ns : NULL;
}

/*
 * Load chunks [0, n_chunks) and restore the first `cells` tokens they hold
 * into `seq`.  A chunk that fails to load ends the prefix there.  Returns
 * the tokens restored, 0 when llama.cpp refuses the blob.
 */
static uint32_t kll_restore(kvt_llama *a, llama_seq_id seq, const kvt_key *keys,
			    uint32_t n_chunks, uint32_t cells, kvt_llama_result *res)
{
	kll_map m = { 0 };
	kvt_conn *conn = NULL;
	uint8_t *blob = NULL;
	uint32_t c = 0, l, got = 0;
	size_t len = 0;
	int rc = 0, short_load = 0;

	if (!a->layer && !(a->layer = malloc(a->layer_bytes)))
		goto out;
	got = cells;
	if (kll_map_alloc(a, &m) || !(blob = kll_blob_new(a, seq, got, &m, &len)) ||
	    kll_conn_open(a, blob, &m, &conn)) {
		got = 0;
		goto out;
	}
	/* Each chunk is borrowed once (no copy from a DRAM tier) and read
	 * layer by layer, verified, into a buffer that stays in cache, then
	 * scattered from there into its rows of the blob: the chunk crosses
	 * memory once on its way to llama.cpp's blob. */
	for (c = 0; !rc && c < n_chunks && c * a->chunk < got; c++) {
		uint32_t t0 = c * a->chunk;
		uint32_t nt = got - t0 < a->chunk ? got - t0 : a->chunk;
		kvt_ref *ref = NULL;

		rc = kvt_borrow(a->st, &a->ns, &keys[c], &ref);
		if (rc)
			short_load = 1;
		for (l = 0; !rc && l < a->n_layer; l++) {
			rc = ref ? kvt_ref_read_layer(ref, l, a->layer, a->layer_bytes)
				 : kvt_get_layer(a->st, &a->ns, &keys[c], l, a->layer,
						 a->layer_bytes);
			if (rc == KVT_ECORRUPT && ref) {
				/* Let go of the damaged copy; the store drops it and
				 * serves this chunk's layers from below, if any. */
				kvt_release(ref);
				ref = NULL;
				rc = kvt_get_layer(a->st, &a->ns, &keys[c], l, a->layer,
						   a->layer_bytes);
			}
			if (!rc)
				rc = kvt_conn_scatter(conn, l, &c, 1, nt, a->layer,
						      a->layer_bytes);
			else
				short_load = 1;
		}
		if (short_load)
			kll_log(a, "chunk %u of the prefix did not load (%s: %s): the prefix "
				"ends there", c, kvt_strerror(rc), kvt_errmsg());
		kvt_release(ref);
		if (rc)
			break;
	}
	kvt_conn_close(conn);
	res->loaded_chunks = c;
	if (short_load) {
		/* The prefix ends at chunk c (gone or damaged since the lookup):
		 * the blob is built again for the c chunks before it. */
		free(m.k_off);
		return c ? kll_restore(a, seq, keys, c, c * a->chunk, res) : 0;
	}
	if (rc) {
		kll_log(a, "assembling the state of %u tokens failed (%s: %s): recomputing", got,
			kvt_strerror(rc), kvt_errmsg());
		res->fallback = 1;
		got = 0;
	}
	if (!rc && llama_state_seq_set_data(a->ctx, blob, len, seq) != len) {
		kll_log(a, "llama.cpp refused the assembled state of %u tokens: recomputing",
			got);
		res->fallback = 1;
		llama_memory_seq_rm(llama_get_memory(a->ctx), seq, -1, -1);
		got = 0;
	}
out:
	free(m.k_off);
	return got;
}

/* Cut chunks [first, last) out of the sequence's state and put them. */
static void kll_save(kvt_llama *a, llama_seq_id seq, const kvt_key *keys, uint32_t first,
		     uint32_t last, kvt_llama_result *res)
{
	size_t len = llama_state_seq_get_size(a->ctx, seq);
	uint64_t payload = a->layer_bytes * a->n_layer;
	uint8_t *blob = malloc(len ? len : 1), *chunk = malloc(payload);
	kll_map m = { 0 };
	kvt_conn *conn = NULL;
	char why[256];
	uint32_t c, l;
	int rc, put;

	if (!blob || !chunk || kll_map_alloc(a, &m) ||
	    llama_state_seq_get_data(a->ctx, blob, len, seq) != len) {
		kll_log(a, "could not read the sequence state (%zu bytes): nothing stored", len);
		goto out;
	}
	if (kll_parse(a, blob, len, 0, &m, why, sizeof(why))) {
		kll_log(a, "llama.cpp state layout not known (%s): nothing stored", why);
		goto out;
	}
	if (m.cells < last * a->chunk) {
		kll_log(a, "the sequence holds %u tokens, not the %u decoded: nothing stored",
			m.cells, last * a->chunk);
		goto out;
	}
	rc = kll_conn_open(a, blob, &m, &conn);
	for (c = first; !rc && c < last; c++) {
		for (l = 0; !rc && l < a->n_layer; l++)
			rc = kvt_conn_gather(conn, l, &c, 1, a->chunk, chunk + l * a->layer_bytes,
					     a->layer_bytes);
		if (rc) {
			kll_log(a, "chunk %u not cut from the state: %s (%s)", c,
				kvt_strerror(rc), kvt_errmsg());
			break;
		}
		put = kvt_put(a->st, &a->ns, &keys[c], chunk, payload, a->o.durability);
		if (put == 0 || put == KVT_EEXIST)
			res->stored++;
		else
			kll_log(a, "chunk %u not stored: %s (%s)", c, kvt_strerror(put),
				kvt_errmsg());
	}
out:
	kvt_conn_close(conn);
	free(m.k_off);
	free(chunk);
	free(blob);
}

int kvt_llama_prefill(kvt_llama *a, llama_seq_id seq, const llama_token *tokens, size_t n,
		      kvt_llama_result *res)
{
	kvt_llama_result local;
	kvt_key *keys = NULL;
	uint32_t n_keys, hit = 0, restored = 0;
	double t;
	int rc;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	if (!a || !tokens || !n || n > llama_n_ctx(a->ctx))
		return KVT_EINVAL;
	res->n_tokens = (uint32_t)n;
	llama_memory_seq_rm(llama_get_memory(a->ctx), seq, -1, -1);
	n_keys = (uint32_t)(n / a->chunk);
	if (a->known && n_keys) {
		keys = malloc(n_keys * sizeof(*keys));
		if (!keys)
			return KVT_ENOMEM;
		t = kll_now();
		/* llama_token is int32_t; kvtier keys token ids as uint32_t. */
		rc = kvt_lookup_tokens(a->st, &a->ns, (const uint32_t *)tokens, n, NULL, keys,
				       n_keys, NULL);
		hit = rc > 0 ? (uint32_t)rc : 0;
		res->hit_chunks = hit;
		res->lookup_s = kll_now() - t;
		if (hit) {
			uint32_t cells = hit * a->chunk;

			if (cells >= n)
				cells = (uint32_t)n - 1;
			t = kll_now();
			restored = cells ? kll_restore(a, seq, keys, (cells + a->chunk - 1) / a->chunk,
						       cells, res) : 0;
			res->load_s = kll_now() - t;
		}
	}
	res->restored = restored;
	res->computed = (uint32_t)n - restored;
	t = kll_now();
	rc = kvt_llama_decode(a->ctx, seq, tokens + restored, n - restored, (llama_pos)restored,
			      a->o.logits_all);
	res->decode_s = kll_now() - t;
	/* Chunks [0, loaded) are in the store; a chunk that failed to load
	 * (gone, corrupt) is put again with those after it. */
	if (!rc && keys && res->loaded_chunks < n_keys) {
		t = kll_now();
		kll_save(a, seq, keys, res->loaded_chunks, n_keys, res);
		res->save_s = kll_now() - t;
	}
	free(keys);
	return rc;
}
