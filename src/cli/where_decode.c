/*
 * where_decode.c — vLLM's KVEventBatch out of msgpack (where_decode.h).
 *
 * The payload is someone else's bytes: every element is checked by type
 * and range before it is used, and a refusal names the element.  Built
 * only where kvtier has msgpack-c (KVT_WHERE); the fuzz target compiles
 * this file into itself.
 */
#include "where_decode.h"

#ifdef KVT_WHERE

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* msgpack elements a batch may hold: msgpack-c allocates 24 bytes for each
 * before reading it, so this bounds what one payload can make it allocate
 * (96 MiB), whatever the payload's length.  A real batch holds far fewer:
 * vLLM's largest, a step that stores a 128K-token prefill, some 140K. */
#define WHERE_ELEMENTS_MAX (1u << 22)

/* Containers deeper than this are refused by the scan; a batch is four
 * deep (batch, events, event, hashes), five with extra_keys' tuples. */
#define WHERE_DEPTH_MAX 24

static int fail(char *why, size_t wl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t wl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, wl, fmt, ap);
	va_end(ap);
	return -1;
}

/* --- the scan: bounds before msgpack-c allocates ------------------------ */

static uint64_t be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/*
 * Walk the encoding once without building anything: every length within
 * the bytes left, no container claiming more elements than bytes are left
 * (an element takes one byte at least), no more than WHERE_ELEMENTS_MAX
 * elements in all, no nesting past WHERE_DEPTH_MAX, the one reserved byte
 * 0xc1 nowhere, and nothing after the batch.  `left[d]` counts what the
 * container open at depth d still holds.
 */
static int scan(const uint8_t *p, size_t n, char *why, size_t wl)
{
	uint64_t left[WHERE_DEPTH_MAX + 1], total = 0;
	size_t off = 0;
	int depth = 0;

	left[0] = 1;
	for (;;) {
		while (depth > 0 && left[depth] == 0)
			depth--;
		if (left[depth] == 0)
			break;
		left[depth]--;
		if (off >= n)
			return fail(why, wl, "truncated: the payload ends inside an element (%zu bytes)", n);
		uint8_t c = p[off];
		size_t at = off++;
		uint64_t body = 0, elems = 0;
		int lenb = 0, container = 0;

		if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
			/* fixint, nil, bool */
		} else if (c <= 0x8f) {
			elems = 2u * (c & 0x0f), container = 1;
		} else if (c <= 0x9f) {
			elems = c & 0x0f, container = 1;
		} else if (c <= 0xbf) {
			body = c & 0x1f;
		} else {
			switch (c) {
			case 0xc1:
				return fail(why, wl, "byte %zu: 0xc1, a byte msgpack never uses", at);
			case 0xc4: case 0xd9: lenb = 1; break; /* bin 8, str 8 */
			case 0xc5: case 0xda: lenb = 2; break;
			case 0xc6: case 0xdb: lenb = 4; break;
			case 0xc7: lenb = 1, body = 1; break;  /* ext 8/16/32: + type byte */
			case 0xc8: lenb = 2, body = 1; break;
			case 0xc9: lenb = 4, body = 1; break;
			case 0xca: body = 4; break;
			case 0xcb: body = 8; break;
			case 0xcc: case 0xd0: body = 1; break;
			case 0xcd: case 0xd1: body = 2; break;
			case 0xce: case 0xd2: body = 4; break;
			case 0xcf: case 0xd3: body = 8; break;
			case 0xd4: body = 2; break;            /* fixext 1..16: + type byte */
			case 0xd5: body = 3; break;
			case 0xd6: body = 5; break;
			case 0xd7: body = 9; break;
			case 0xd8: body = 17; break;
			case 0xdc: lenb = 2, container = 1; break;
			case 0xdd: lenb = 4, container = 1; break;
			case 0xde: lenb = 2, container = 2; break;
			case 0xdf: lenb = 4, container = 2; break;
			}
			if (lenb) {
				if (n - off < (size_t)lenb)
					return fail(why, wl, "truncated: byte %zu: a length past the payload's end", at);
				uint64_t len = be(p + off, lenb);
				off += (size_t)lenb;
				if (container)
					elems = len * (uint64_t)container;
				else
					body += len;
				container = container != 0;
			}
		}
		if (body > n - off)
			return fail(why, wl, "truncated: byte %zu: an element of %llu bytes where %zu are left",
				    at, (unsigned long long)body, n - off);
		off += (size_t)body;
		if (!container)
			continue;
		if (elems > n - off)
			return fail(why, wl, "byte %zu: a container of %llu elements where %zu bytes are left",
				    at, (unsigned long long)elems, n - off);
		total += elems;
		if (total > WHERE_ELEMENTS_MAX)
			return fail(why, wl, "more than %u elements in one batch", WHERE_ELEMENTS_MAX);
		if (elems) {
			if (depth == WHERE_DEPTH_MAX)
				return fail(why, wl, "byte %zu: nested deeper than %d", at, WHERE_DEPTH_MAX);
			left[++depth] = elems;
		}
	}
	if (off != n)
		return fail(why, wl, "%zu bytes after the batch's end (byte %zu)", n - off, off);
	return 0;
}

/* --- the batch ---------------------------------------------------------- */

static const char *kind(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL: return "nil";
	case MSGPACK_OBJECT_BOOLEAN: return "a bool";
	case MSGPACK_OBJECT_POSITIVE_INTEGER: return "an int";
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "a negative int";
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: return "a float";
	case MSGPACK_OBJECT_STR: return "a str";
	case MSGPACK_OBJECT_ARRAY: return "an array";
	case MSGPACK_OBJECT_MAP: return "a map";
	case MSGPACK_OBJECT_BIN: return "a bin";
	case MSGPACK_OBJECT_EXT: return "an ext";
	}
	return "an unknown type";
}

static int str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	       !memcmp(o->via.str.ptr, s, n);
}

static int is_int(const msgpack_object *o)
{
	return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
	       o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
}

/* A block hash: bytes as they are, an int as its 64 bits (a negative one,
 * which vLLM never sends but another publisher might, as two's complement). */
static int get_hash(const msgpack_object *o, struct where_hash *h, char *why, size_t wl,
		    const char *where)
{
	memset(h, 0, sizeof(*h));
	if (o->type == MSGPACK_OBJECT_BIN) {
		if (o->via.bin.size == 0 || o->via.bin.size > WHERE_HASH_MAX)
			return fail(why, wl, "%s: a bin of %u bytes (1..%d)", where,
				    (unsigned)o->via.bin.size, WHERE_HASH_MAX);
		h->len = (uint8_t)o->via.bin.size;
		memcpy(h->b, o->via.bin.ptr, o->via.bin.size);
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		where_hash_from_u64(h, o->via.u64);
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		where_hash_from_u64(h, (uint64_t)o->via.i64);
		return 0;
	}
	return fail(why, wl, "%s: %s, expected a bin or an int", where, kind(o));
}

static int push_hash(struct where_batch *b, const struct where_hash *h)
{
	if (b->n_h == b->cap_h) {
		uint32_t cap = b->cap_h ? b->cap_h * 2 : 64;
		struct where_hash *nh = realloc(b->h, (size_t)cap * sizeof(*nh));
		if (!nh)
			return -1;
		b->h = nh;
		b->cap_h = cap;
	}
	b->h[b->n_h++] = *h;
	return 0;
}

enum field {
	F_HASHES, F_PARENT, F_TOKENS, F_BS, F_LORA_ID, F_MEDIUM, F_LORA_NAME, F_GROUP, F_OTHER
};

static const char *const field_names[F_OTHER] = {
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
	"lora_name", "group_idx",
};

/* BlockStored's fields in declaration order (the array form), then
 * BlockRemoved's and AllBlocksCleared's. */
static const enum field stored_order[] = { F_HASHES, F_PARENT, F_TOKENS, F_BS, F_LORA_ID,
					   F_MEDIUM, F_LORA_NAME };
static const enum field removed_order[] = { F_HASHES, F_MEDIUM };

/* Which fields each event type checks: the rest are skipped. */
static int checked(int type, enum field f)
{
	if (type == WHERE_EV_STORED)
		return f != F_OTHER;
	if (type == WHERE_EV_REMOVED)
		return f == F_HASHES || f == F_MEDIUM || f == F_GROUP;
	return 0;
}

struct ev_state {
	struct where_event e;
	unsigned seen;   /* 1 << field */
	int64_t group;
};

static int set_field(struct where_batch *b, struct ev_state *s, enum field f,
		     const msgpack_object *v, char *why, size_t wl, const char *where)
{
	char at[96];

	if (!checked(s->e.type, f))
		return 0;
	if (s->seen & 1u << f)
		return fail(why, wl, "%s: %s given twice", where, field_names[f]);
	s->seen |= 1u << f;
	switch (f) {
	case F_HASHES:
		if (v->type != MSGPACK_OBJECT_ARRAY)
			return fail(why, wl, "%s: block_hashes: %s, expected an array", where, kind(v));
		s->e.first = b->n_h;
		s->e.n = v->via.array.size;
		for (uint32_t i = 0; i < v->via.array.size; i++) {
			struct where_hash h;
			snprintf(at, sizeof(at), "%s: block_hashes[%u]", where, i);
			if (get_hash(&v->via.array.ptr[i], &h, why, wl, at))
				return -1;
			if (push_hash(b, &h))
				return fail(why, wl, "%s: out of memory", where);
		}
		return 0;
	case F_PARENT: {
		struct where_hash h;
		if (v->type == MSGPACK_OBJECT_NIL)
			return 0;
		snprintf(at, sizeof(at), "%s: parent_block_hash", where);
		return get_hash(v, &h, why, wl, at);
	}
	case F_TOKENS:
		if (v->type != MSGPACK_OBJECT_ARRAY)
			return fail(why, wl, "%s: token_ids: %s, expected an array", where, kind(v));
		for (uint32_t i = 0; i < v->via.array.size; i++)
			if (v->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
				return fail(why, wl, "%s: token_ids[%u]: %s, expected an int >= 0",
					    where, i, kind(&v->via.array.ptr[i]));
		return 0;
	case F_BS:
		if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 == 0 ||
		    v->via.u64 > UINT32_MAX)
			return fail(why, wl, "%s: block_size: %s%s, expected an int 1..%u", where,
				    v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? "" : kind(v),
				    v->type != MSGPACK_OBJECT_POSITIVE_INTEGER ? "" :
				    v->via.u64 ? "too large" : "0", UINT32_MAX);
		s->e.block_size = (uint32_t)v->via.u64;
		return 0;
	case F_LORA_ID:
		if (v->type != MSGPACK_OBJECT_NIL && !is_int(v))
			return fail(why, wl, "%s: lora_id: %s, expected nil or an int", where, kind(v));
		return 0;
	case F_MEDIUM:
		if (v->type == MSGPACK_OBJECT_NIL)
			return 0;
		if (v->type != MSGPACK_OBJECT_STR)
			return fail(why, wl, "%s: medium: %s, expected nil or a str", where, kind(v));
		s->e.medium = (uint8_t)where_medium(v->via.str.ptr, v->via.str.size);
		return 0;
	case F_LORA_NAME:
		if (v->type != MSGPACK_OBJECT_NIL && v->type != MSGPACK_OBJECT_STR)
			return fail(why, wl, "%s: lora_name: %s, expected nil or a str", where, kind(v));
		return 0;
	case F_GROUP:
		if (v->type == MSGPACK_OBJECT_NIL)
			return 0;
		if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return fail(why, wl, "%s: group_idx: %s, expected nil or an int >= 0", where,
				    kind(v));
		s->group = v->via.u64 > INT64_MAX ? INT64_MAX : (int64_t)v->via.u64;
		return 0;
	case F_OTHER:
		break;
	}
	return 0;
}

static enum field field_of(const msgpack_object *k)
{
	for (int f = 0; f < F_OTHER; f++)
		if (str_is(k, field_names[f]))
			return (enum field)f;
	return F_OTHER;
}

/* The event's type from its tag; 0 for a type this reader does not know. */
static int type_of(const msgpack_object *tag)
{
	if (str_is(tag, "BlockStored"))
		return WHERE_EV_STORED;
	if (str_is(tag, "BlockRemoved"))
		return WHERE_EV_REMOVED;
	if (str_is(tag, "AllBlocksCleared"))
		return WHERE_EV_CLEARED;
	return 0;
}

static int push_event(struct where_batch *b, const struct where_event *e)
{
	if (b->n_ev == b->cap_ev) {
		uint32_t cap = b->cap_ev ? b->cap_ev * 2 : 16;
		struct where_event *ne = realloc(b->ev, (size_t)cap * sizeof(*ne));
		if (!ne)
			return -1;
		b->ev = ne;
		b->cap_ev = cap;
	}
	b->ev[b->n_ev++] = *e;
	return 0;
}

static int one_event(struct where_batch *b, const msgpack_object *o, uint32_t idx, char *why,
		     size_t wl)
{
	struct ev_state s = { .e = { .medium = WHERE_M_GPU } };
	const msgpack_object *tag = NULL;
	char where[32];

	snprintf(where, sizeof(where), "event %u", idx);
	s.e.first = b->n_h;
	if (o->type == MSGPACK_OBJECT_MAP) {
		const msgpack_object_kv *kv = o->via.map.ptr;
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			if (kv[i].key.type != MSGPACK_OBJECT_STR)
				return fail(why, wl, "%s: a key that is %s, expected a str", where,
					    kind(&kv[i].key));
			if (str_is(&kv[i].key, "type")) {
				if (tag)
					return fail(why, wl, "%s: \"type\" given twice", where);
				tag = &kv[i].val;
			}
		}
		if (!tag)
			return fail(why, wl, "%s: a map without \"type\"", where);
		if (tag->type != MSGPACK_OBJECT_STR)
			return fail(why, wl, "%s: type: %s, expected a str", where, kind(tag));
		if (!(s.e.type = (uint8_t)type_of(tag)))
			goto skip;
		for (uint32_t i = 0; i < o->via.map.size; i++)
			if (set_field(b, &s, field_of(&kv[i].key), &kv[i].val, why, wl, where))
				return -1;
	} else if (o->type == MSGPACK_OBJECT_ARRAY) {
		/* vLLM's older array-like events: [tag, fields in order]. */
		const msgpack_object *a = o->via.array.ptr;
		const enum field *order;
		uint32_t n_order;
		if (!o->via.array.size)
			return fail(why, wl, "%s: an empty array, expected [type, fields...]", where);
		tag = &a[0];
		if (tag->type != MSGPACK_OBJECT_STR)
			return fail(why, wl, "%s: type: %s, expected a str", where, kind(tag));
		if (!(s.e.type = (uint8_t)type_of(tag)))
			goto skip;
		order = s.e.type == WHERE_EV_STORED ? stored_order : removed_order;
		n_order = s.e.type == WHERE_EV_STORED ? sizeof(stored_order) / sizeof(stored_order[0]) :
			  s.e.type == WHERE_EV_REMOVED ? sizeof(removed_order) / sizeof(removed_order[0]) : 0;
		for (uint32_t i = 1; i < o->via.array.size && i - 1 < n_order; i++)
			if (set_field(b, &s, order[i - 1], &a[i], why, wl, where))
				return -1;
	} else {
		return fail(why, wl, "%s: %s, expected a map tagged by \"type\"", where, kind(o));
	}
	if (s.e.type != WHERE_EV_CLEARED && !(s.seen & 1u << F_HASHES))
		return fail(why, wl, "%s: %.*s without block_hashes", where,
			    (int)tag->via.str.size, tag->via.str.ptr);
	if (s.e.type == WHERE_EV_STORED && !(s.seen & 1u << F_BS))
		return fail(why, wl, "%s: BlockStored without block_size", where);
	if (s.group > 0)
		goto skip;
	if (push_event(b, &s.e))
		return fail(why, wl, "%s: out of memory", where);
	return 0;
skip:
	b->n_h = s.e.first; /* its hashes, if any were read, go with it */
	b->skipped++;
	return 0;
}

int where_decode(struct where_batch *b, const uint8_t *p, size_t n, char *why, size_t wl)
{
	msgpack_unpacked up;
	size_t off = 0;
	int rc = -1;

	b->n_ev = b->n_h = b->skipped = 0;
	b->ts = 0;
	b->dp_rank = -1;
	if (n == 0)
		return fail(why, wl, "an empty payload");
	if (n > WHERE_PAYLOAD_MAX)
		return fail(why, wl, "a payload of %zu bytes (at most %u)", n, WHERE_PAYLOAD_MAX);
	if (scan(p, n, why, wl))
		return -1;
	msgpack_unpacked_init(&up);
	switch (msgpack_unpack_next(&up, (const char *)p, n, &off)) {
	case MSGPACK_UNPACK_SUCCESS:
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		fail(why, wl, "out of memory decoding %zu bytes", n);
		goto out;
	default: /* the scan has let through what msgpack-c refuses */
		fail(why, wl, "not msgpack");
		goto out;
	}
	const msgpack_object *root = &up.data;
	if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 2) {
		fail(why, wl, "the batch: %s%s, expected an array [ts, events, ...]", kind(root),
		     root->type == MSGPACK_OBJECT_ARRAY ? " of fewer than 2" : "");
		goto out;
	}
	const msgpack_object *a = root->via.array.ptr;
	switch (a[0].type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		b->ts = a[0].via.f64;
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		b->ts = (double)a[0].via.u64;
		break;
	default:
		fail(why, wl, "ts: %s, expected a float", kind(&a[0]));
		goto out;
	}
	if (a[1].type != MSGPACK_OBJECT_ARRAY) {
		fail(why, wl, "events: %s, expected an array", kind(&a[1]));
		goto out;
	}
	if (root->via.array.size > 2 && a[2].type != MSGPACK_OBJECT_NIL) {
		if (a[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[2].via.u64 > INT64_MAX) {
			fail(why, wl, "data_parallel_rank: %s, expected nil or an int >= 0",
			     kind(&a[2]));
			goto out;
		}
		b->dp_rank = (int64_t)a[2].via.u64;
	}
	for (uint32_t i = 0; i < a[1].via.array.size; i++)
		if (one_event(b, &a[1].via.array.ptr[i], i, why, wl))
			goto out;
	rc = 0;
out:
	msgpack_unpacked_destroy(&up);
	if (rc)
		b->n_ev = b->n_h = 0;
	return rc;
}

#else /* no msgpack-c */

#include <stdio.h>
#include <stdlib.h>

int where_decode(struct where_batch *b, const uint8_t *p, size_t n, char *why, size_t wl)
{
	(void)p, (void)n;
	b->n_ev = b->n_h = 0;
	snprintf(why, wl, "kvtier was built without msgpack-c");
	return -1;
}

#endif

void where_batch_free(struct where_batch *b)
{
	free(b->ev);
	free(b->h);
	b->ev = NULL;
	b->h = NULL;
	b->n_ev = b->cap_ev = b->n_h = b->cap_h = 0;
}
