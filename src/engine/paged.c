/*
 * paged.c — copying one layer of a chunk between the payload order and the
 * engine's paged blocks, for every layout the strides can say.
 *
 * The chunk side is walked strictly forward (plane, token, head, element),
 * so a chunk spread over DRAM pages costs a cursor, not a copy.  The engine
 * side is cut into the longest runs its strides make contiguous: a head's
 * elements, a token's heads (NHD), a block's tokens, and consecutive block
 * ids of a block table, so an NHD or MLA layout moves in memcpy-sized
 * pieces.  Only a layout whose elements are not adjacent (llama.cpp's
 * transposed V) is copied element by element.
 */
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/err.h"
#include "engine/paged.h"

/*
 * Runs of at least this many bytes are written with non-temporal stores.
 * A chunk (32 MiB for Llama-3.1-8B) is far larger than the cache, so the
 * destination is written once and not read back soon; glibc's memcpy does
 * the same past its own threshold, which is why one memcpy of a whole chunk
 * beats a series of block-sized memcpys by a third on a bandwidth-bound
 * machine.  Block-plane runs (18 to 32 KiB) are above it; a head row is not.
 */
#define CONN_NT_MIN 8192

/*
 * A gather reads the engine's blocks in block-table order, and a table is
 * a scattered draw from the pool: every 18 KiB (MLA) or 32 KiB (NHD plane)
 * the read jumps somewhere the hardware prefetcher has not seen, and the
 * first lines of each block wait out a whole memory latency while it
 * finds the new stream; memcpy of the same bytes from one region pays that
 * once.  Measured on a 2-vCPU EPYC VM (a dependent load from DRAM: 210 ns
 * with huge pages, 340 with 4 KiB pages), the MLA gather of a chunk ran at
 * 0.53-0.66x of memcpy with the table shuffled and at 1.04-1.14x with the
 * same blocks sorted: the jumps cost the difference, not the per-block
 * calls or the stores.  So a gather prefetches its source PF_AHEAD bytes
 * ahead along the table: the first PF_AHEAD bytes of a plane before its
 * copy starts, then one line per 64 bytes copied, which requests the next
 * block's lines while the current one is copied (0.92-1.07x of memcpy).
 * In a kernel of the same loop, 8 and 16 KiB ahead measured 0.95-1.09x,
 * 4 KiB 0.88-0.96x and 32 KiB no better (0.91-1.03x) while twice as
 * likely to outrun a small L1.
 */
#define PF_AHEAD 16384
#define PF_LINE 64

/* Where the prefetch of a plane's blocks has got to. */
struct pf_cur {
	const uint8_t *base; /* the plane */
	uint64_t stride;     /* block_stride */
	uint64_t row_bytes;
	const uint32_t *ids;
	uint32_t n_ids, j;   /* the table; the block being prefetched */
	uint32_t block_tokens, ntok;
	uint64_t off, len;   /* into block j; its bytes */
};

static void pf_block(struct pf_cur *f)
{
	for (; f->j < f->n_ids; f->j++) {
		uint64_t first = (uint64_t)f->j * f->block_tokens;

		if (first >= f->ntok) {
			f->j = f->n_ids;
			return;
		}
		if (f->ids[f->j] == KVT_CONN_NO_BLOCK)
			continue;
		f->len = (f->ntok - first < f->block_tokens ? f->ntok - first
							    : f->block_tokens) * f->row_bytes;
		f->off = 0;
		return;
	}
}

static void pf_init(struct pf_cur *f, const struct conn_geom *g, const kvt_paged_plane *pl,
		    const uint32_t *blocks, uint32_t ntok)
{
	f->base = pl->base;
	f->stride = pl->block_stride;
	f->row_bytes = g->row_bytes;
	f->ids = blocks;
	f->n_ids = (ntok + g->block_tokens - 1) / g->block_tokens;
	f->block_tokens = g->block_tokens;
	f->ntok = ntok;
	f->j = 0;
	pf_block(f);
	for (uint32_t k = 0; k < PF_AHEAD / PF_LINE && f->j < f->n_ids; k++) {
		__builtin_prefetch(f->base + f->ids[f->j] * f->stride + f->off, 0, 3);
		if ((f->off += PF_LINE) >= f->len) {
			f->j++;
			pf_block(f);
		}
	}
}

/* The next line ahead, if the plane has one left. */
static inline void pf_step(struct pf_cur *f)
{
	if (f->j >= f->n_ids)
		return;
	__builtin_prefetch(f->base + f->ids[f->j] * f->stride + f->off, 0, 3);
	if ((f->off += PF_LINE) >= f->len) {
		f->j++;
		pf_block(f);
	}
}

#if defined(__x86_64__)
/* memcpy with streaming stores for the aligned middle: SSE2, the x86-64
 * baseline, so no run-time dispatch.  The caller fences (conn_paged_copy
 * ends with an sfence) before anyone else may read the bytes.  `pf`, if
 * not NULL, is stepped once per 64 bytes. */
static void copy_nt(uint8_t *d, const uint8_t *s, size_t n, struct pf_cur *pf)
{
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		if (pf)
			pf_step(pf);
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
}

static void copy_fence(void)
{
	_mm_sfence();
}
#else
/* The prefetch runs ahead of memcpy a 4 KiB piece at a time. */
static void copy_nt(uint8_t *d, const uint8_t *s, size_t n, struct pf_cur *pf)
{
	while (n) {
		size_t k = n < 4096 ? n : 4096;

		for (size_t i = 0; pf && i < k; i += PF_LINE)
			pf_step(pf);
		memcpy(d, s, k);
		d += k;
		s += k;
		n -= k;
	}
}

static void copy_fence(void)
{
}
#endif

/* `pf`: prefetch the gather's source ahead (NULL: a scatter). */
static void copy_bytes(uint8_t *d, const uint8_t *s, size_t n, struct pf_cur *pf)
{
	if (n >= CONN_NT_MIN) {
		copy_nt(d, s, n, pf);
		return;
	}
	for (size_t i = 0; pf && i < n; i += PF_LINE)
		pf_step(pf);
	memcpy(d, s, n);
}

static int stride_check(uint32_t layer, uint32_t plane, const char *what,
			uint64_t stride, uint32_t extent)
{
	if (stride == 0 && extent > 1)
		return kvt_err(KVT_EINVAL,
			       "layer %u plane %u: %s_stride is 0 for a dimension of %u",
			       layer, plane, what, extent);
	return 0;
}

int conn_paged_check(const kvt_layout *l, const kvt_conn_desc *d,
		     struct conn_geom *g, kvt_paged_layer *layers)
{
	int rc;

	if (!d || !d->layers)
		return kvt_err(KVT_EINVAL, "connector descriptor or its layers missing");
	if ((rc = kvt_layout_check(l)))
		return rc;
	if (d->n_layer_descs != 1 && d->n_layer_descs != l->num_layers)
		return kvt_err(KVT_EINVAL,
			       "n_layer_descs is %u: give one per layer (%u) or one for a tensor of every layer",
			       d->n_layer_descs, l->num_layers);
	if (d->n_layer_descs == 1 && l->num_layers > 1 && d->layer_stride == 0)
		return kvt_err(KVT_EINVAL,
			       "one layer descriptor for %u layers needs a layer_stride",
			       l->num_layers);
	if (d->num_blocks == 0)
		return kvt_err(KVT_EINVAL, "num_blocks is 0");
	memset(g, 0, sizeof(*g));
	g->num_layers = l->num_layers;
	g->planes = l->kv_planes;
	g->heads = l->num_kv_heads;
	g->dim = l->head_dim;
	g->esz = kvt_dtype_size(l->dtype);
	g->block_tokens = d->block_tokens ? d->block_tokens : l->block_size;
	g->chunk_tokens = l->chunk_tokens;
	g->num_blocks = d->num_blocks;
	g->scale_bytes = l->scale_bytes;
	if (g->chunk_tokens % g->block_tokens)
		return kvt_err(KVT_ELAYOUT,
			       "engine blocks of %u tokens do not divide the chunk of %u tokens: a chunk must be whole blocks",
			       g->block_tokens, g->chunk_tokens);
	g->blocks_per_chunk = g->chunk_tokens / g->block_tokens;
	g->row_bytes = (uint64_t)g->heads * g->dim * g->esz;
	g->plane_bytes = g->row_bytes * g->chunk_tokens;
	g->layer_bytes = kvt_layout_layer_bytes(l);

	for (uint32_t i = 0; i < g->num_layers; i++) {
		kvt_paged_layer *L = &layers[i];

		if (d->n_layer_descs == 1) {
			*L = d->layers[0];
			for (uint32_t p = 0; p < g->planes; p++)
				if (L->plane[p].base)
					L->plane[p].base = (uint8_t *)L->plane[p].base +
							   d->layer_stride * i;
			if (L->scale)
				L->scale = (uint8_t *)L->scale + (uint64_t)g->scale_bytes * i;
		} else {
			*L = d->layers[i];
		}
		for (uint32_t p = 0; p < g->planes; p++) {
			const kvt_paged_plane *pl = &L->plane[p];
			if (!pl->base)
				return kvt_err(KVT_EINVAL, "layer %u plane %u: base is NULL", i, p);
			if ((rc = stride_check(i, p, "block", pl->block_stride, g->num_blocks)) ||
			    (rc = stride_check(i, p, "token", pl->token_stride, g->block_tokens)) ||
			    (rc = stride_check(i, p, "head", pl->head_stride, g->heads)) ||
			    (rc = stride_check(i, p, "elem", pl->elem_stride, g->dim)))
				return rc;
		}
		if (g->planes == 1)
			memset(&L->plane[1], 0, sizeof(L->plane[1]));
		if (g->scale_bytes && !L->scale)
			return kvt_err(KVT_EINVAL,
				       "layer %u: the layout has %u scale bytes per layer but scale is NULL",
				       i, g->scale_bytes);
	}
	return 0;
}

int conn_paged_check_blocks(const struct conn_geom *g, const uint32_t *ids, size_t n,
			    int allow_none)
{
	for (size_t i = 0; i < n; i++) {
		if (ids[i] == KVT_CONN_NO_BLOCK && allow_none)
			continue;
		if (ids[i] == KVT_CONN_NO_BLOCK)
			return kvt_err(KVT_EINVAL, "block_ids[%zu] is KVT_CONN_NO_BLOCK, which "
				       "only a load takes", i);
		if (ids[i] >= g->num_blocks)
			return kvt_err(KVT_EINVAL, "block_ids[%zu] is %u, the engine has %u blocks",
				       i, ids[i], g->num_blocks);
	}
	return 0;
}

int conn_cur_init(struct conn_cur *c, const struct iovec *iov, int n, uint64_t pos)
{
	c->iov = iov;
	c->n = n;
	c->i = 0;
	c->off = 0;
	while (c->i < n && pos >= iov[c->i].iov_len) {
		pos -= iov[c->i].iov_len;
		c->i++;
	}
	if (c->i == n && pos)
		return kvt_err(KVT_ETRUNCATED, "chunk segments end before the layer");
	c->off = pos;
	return 0;
}

size_t conn_cur_take(struct conn_cur *c, size_t want, uint8_t **p)
{
	size_t avail;

	while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
	if (c->i >= c->n)
		return 0;
	avail = c->iov[c->i].iov_len - c->off;
	if (avail > want)
		avail = want;
	*p = (uint8_t *)c->iov[c->i].iov_base + c->off;
	c->off += avail;
	return avail;
}

static int short_segments(void)
{
	return kvt_err(KVT_ETRUNCATED, "chunk segments end inside the layer");
}

/* `len` engine bytes at `e` <-> the next `len` bytes of the chunk; `pf`
 * as copy_bytes. */
static int copy_run(uint8_t *e, size_t len, struct conn_cur *c, int dir, struct pf_cur *pf)
{
	while (len) {
		uint8_t *p;
		size_t n = conn_cur_take(c, len, &p);

		if (!n)
			return short_segments();
		if (dir == CONN_GATHER)
			copy_bytes(p, e, n, pf);
		else
			copy_bytes(e, p, n, NULL);
		e += n;
		len -= n;
	}
	return 0;
}

/* n elements of `esz` bytes, `es` apart on the engine side, adjacent in the
 * chunk at `p`.  A constant size per case lets memcpy become one move. */
#define STRIDED_CASE(SZ)                                                     \
	case SZ:                                                             \
		for (uint32_t k = 0; k < n; k++, e += es, p += SZ) {         \
			if (dir == CONN_GATHER)                              \
				memcpy(p, e, SZ);                            \
			else                                                 \
				memcpy(e, p, SZ);                            \
		}                                                            \
		break;

static void copy_strided(uint8_t *e, uint64_t es, uint8_t *p, uint32_t n,
			 uint32_t esz, int dir)
{
	switch (esz) {
	STRIDED_CASE(1)
	STRIDED_CASE(2)
	STRIDED_CASE(4)
	default:
		for (uint32_t k = 0; k < n; k++, e += es, p += esz) {
			if (dir == CONN_GATHER)
				memcpy(p, e, esz);
			else
				memcpy(e, p, esz);
		}
	}
}

/* One head's elements of one token when they are not adjacent in the
 * engine: one span of the chunk when the segment holds it (always, unless a
 * page boundary falls inside the row), else element by element. */
static int copy_row_strided(const struct conn_geom *g, uint8_t *e, uint64_t es,
			    struct conn_cur *c, int dir)
{
	uint64_t row = (uint64_t)g->dim * g->esz;
	uint32_t done = 0;

	while (done < g->dim) {
		uint8_t *p;
		size_t n = conn_cur_take(c, row - (uint64_t)done * g->esz, &p);

		if (!n)
			return short_segments();
		if (n % g->esz)
			return kvt_err(KVT_EINVAL,
				       "a chunk segment boundary cuts a %u-byte element", g->esz);
		copy_strided(e + done * es, es, p, (uint32_t)(n / g->esz), g->esz, dir);
		done += (uint32_t)(n / g->esz);
	}
	return 0;
}

/* ntok tokens of one block of one plane, starting at engine address `e`. */
static int copy_box(const struct conn_geom *g, const kvt_paged_plane *pl, uint8_t *e,
		    uint32_t ntok, struct conn_cur *c, int dir)
{
	uint64_t row = (uint64_t)g->dim * g->esz;
	int rc = 0;

	if (pl->elem_stride == g->esz || g->dim == 1) {
		if (pl->head_stride == row || g->heads == 1) {
			if (pl->token_stride == g->row_bytes || ntok == 1)
				return copy_run(e, ntok * g->row_bytes, c, dir, NULL);
			for (uint32_t t = 0; t < ntok && !rc; t++)
				rc = copy_run(e + t * pl->token_stride, g->row_bytes, c, dir, NULL);
			return rc;
		}
		for (uint32_t t = 0; t < ntok; t++)
			for (uint32_t h = 0; h < g->heads; h++)
				if ((rc = copy_run(e + t * pl->token_stride + h * pl->head_stride,
						   row, c, dir, NULL)))
					return rc;
		return 0;
	}
	for (uint32_t t = 0; t < ntok; t++)
		for (uint32_t h = 0; h < g->heads; h++)
			if ((rc = copy_row_strided(g, e + t * pl->token_stride + h * pl->head_stride,
						   pl->elem_stride, c, dir)))
				return rc;
	return 0;
}

static int skip(struct conn_cur *c, uint64_t len)
{
	while (len) {
		uint8_t *p;
		size_t n = conn_cur_take(c, len, &p);
		if (!n)
			return short_segments();
		len -= n;
	}
	return 0;
}

static int paged_copy(const struct conn_geom *g, const kvt_paged_layer *L,
		      const uint32_t *blocks, uint32_t ntok, struct conn_cur *c, int dir)
{
	int rc;

	for (uint32_t p = 0; p < g->planes; p++) {
		const kvt_paged_plane *pl = &L->plane[p];
		uint8_t *base = pl->base;
		/* A block whose tokens are one run, and blocks that follow one
		 * another in memory: consecutive ids of the table are one run. */
		int whole = (pl->elem_stride == g->esz || g->dim == 1) &&
			    (pl->head_stride == (uint64_t)g->dim * g->esz || g->heads == 1) &&
			    pl->token_stride == g->row_bytes &&
			    pl->block_stride == g->row_bytes * g->block_tokens;
		uint32_t done = 0, j = 0;
		struct pf_cur pf = { 0 };

		if (whole && dir == CONN_GATHER)
			pf_init(&pf, g, pl, blocks, ntok);
		while (done < ntok) {
			uint32_t nt = ntok - done, run = 1;

			if (blocks[j] == KVT_CONN_NO_BLOCK) {
				/* A block the engine holds already: its tokens of
				 * the chunk pass by (a scatter only; gathers and
				 * saves refuse the id). */
				if (nt > g->block_tokens)
					nt = g->block_tokens;
				rc = dir == CONN_SCATTER ? skip(c, (uint64_t)nt * g->row_bytes)
							 : kvt_err(KVT_EINVAL, "no block to gather from");
			} else if (whole) {
				while (j + run < (ntok + g->block_tokens - 1) / g->block_tokens &&
				       blocks[j + run] != KVT_CONN_NO_BLOCK &&
				       blocks[j + run] == blocks[j] + run)
					run++;
				if (nt > run * g->block_tokens)
					nt = run * g->block_tokens;
				rc = copy_run(base + blocks[j] * pl->block_stride,
					      nt * g->row_bytes, c, dir,
					      dir == CONN_GATHER ? &pf : NULL);
			} else {
				if (nt > g->block_tokens)
					nt = g->block_tokens;
				rc = copy_box(g, pl, base + blocks[j] * pl->block_stride, nt, c, dir);
			}
			if (rc)
				return rc;
			done += nt;
			j += run;
		}
		if ((rc = skip(c, (uint64_t)(g->chunk_tokens - ntok) * g->row_bytes)))
			return rc;
	}
	if (g->scale_bytes)
		return copy_run(L->scale, g->scale_bytes, c, dir, NULL);
	return 0;
}

int conn_paged_copy(const struct conn_geom *g, const kvt_paged_layer *L,
		    const uint32_t *blocks, uint32_t ntok, struct conn_cur *c, int dir)
{
	int rc = paged_copy(g, L, blocks, ntok, c, dir);

	copy_fence();
	return rc;
}
