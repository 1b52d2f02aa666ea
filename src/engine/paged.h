/*
 * paged.h — the engine's paged KV memory as kvtier sees it: the checked
 * geometry of a kvt_conn_desc, and the copy between one layer of a chunk
 * (in the payload order of docs/FORMAT.md) and the engine's blocks.
 *
 * Pure memory work: no store, no threads.  The chunk side may be spread
 * over segments (a borrowed image in DRAM pages); the engine side is what
 * the strides say.
 */
#ifndef KVT_CONN_PAGED_H
#define KVT_CONN_PAGED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvtier.h"

/* What a connector's copies need, derived once at open. */
struct conn_geom {
	uint32_t num_layers, planes, heads, dim, esz;
	uint32_t block_tokens, chunk_tokens, blocks_per_chunk, num_blocks;
	uint32_t scale_bytes;
	uint64_t row_bytes;   /* one token of one plane: heads·dim·esz */
	uint64_t plane_bytes; /* chunk_tokens·row_bytes */
	uint64_t layer_bytes; /* kvt_layout_layer_bytes */
};

/* A read/write position in the chunk's segments, moving forward only. */
struct conn_cur {
	const struct iovec *iov;
	int n, i;
	size_t off; /* into iov[i] */
};

enum { CONN_GATHER = 0, CONN_SCATTER = 1 };

/* Check `d` against layout `l` and fill `g` and `layers` (num_layers
 * entries, the cross-layer form expanded).  0, KVT_EINVAL or KVT_ELAYOUT
 * with the field named in kvt_errmsg(). */
int conn_paged_check(const kvt_layout *l, const kvt_conn_desc *d,
		     struct conn_geom *g, kvt_paged_layer *layers);

/* 0 if block_ids[0 .. n) are all below num_blocks (or, with allow_none,
 * KVT_CONN_NO_BLOCK: a load's block left alone), else KVT_EINVAL naming the
 * first that is not. */
int conn_paged_check_blocks(const struct conn_geom *g, const uint32_t *ids,
			    size_t n, int allow_none);

/* Position `c` at byte `pos` of the segments.  KVT_ETRUNCATED if they are
 * shorter. */
int conn_cur_init(struct conn_cur *c, const struct iovec *iov, int n,
		  uint64_t pos);

/* Up to `want` contiguous bytes at the cursor, in *p; advances past them.
 * 0 at the end of the segments. */
size_t conn_cur_take(struct conn_cur *c, size_t want, uint8_t **p);

/* Copy one layer of one chunk: `c` at the start of the layer's bytes,
 * `blocks` the chunk's blocks (enough for ntok tokens), `dir` CONN_GATHER
 * (blocks → chunk) or CONN_SCATTER (chunk → blocks).  Planes' token rows
 * [0, ntok) then the scale bytes.  KVT_ETRUNCATED if the segments end
 * early, KVT_EINVAL if a segment boundary cuts an element. */
int conn_paged_copy(const struct conn_geom *g, const kvt_paged_layer *L,
		    const uint32_t *blocks, uint32_t ntok, struct conn_cur *c,
		    int dir);

#endif
