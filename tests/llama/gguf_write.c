/*
 * gguf_write.c — GGUF version 3 as ggml/include/gguf.h of llama.cpp's
 * source describes it: "GGUF", the version, the tensor and key/value counts
 * (64-bit), the key/value pairs (64-bit length-prefixed strings, a 32-bit
 * type tag, the value), the tensor infos (name, dimension count, dimensions
 * innermost first, ggml type, offset into the data blob), padding to
 * general.alignment, then the data blob, each tensor aligned the same way.
 *
 * Weights are normal with a standard deviation of 1/sqrt(fan-in), so that
 * activations stay of order one through the layers of a random model;
 * embeddings are of order one and RMS-norm gains near one.
 */
#include "gguf_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LGG_ALIGN 32
enum { LGG_U32 = 4, LGG_F32 = 6, LGG_STR = 8 };
enum { LGG_GGML_F32 = 0, LGG_GGML_F16 = 1 };

typedef struct lgg_tensor {
	char name[48];
	uint64_t ne[2]; /* ggml order: ne[0] innermost (the fan-in) */
	int n_dims;
	int type;
} lgg_tensor;

typedef struct lgg_out {
	FILE *f;
	int err;
} lgg_out;

static void lgg_put(lgg_out *o, const void *p, size_t n)
{
	if (!o->err && fwrite(p, 1, n, o->f) != n)
		o->err = errno ? errno : EIO;
}

static void lgg_u32(lgg_out *o, uint32_t v) { lgg_put(o, &v, 4); }
static void lgg_u64(lgg_out *o, uint64_t v) { lgg_put(o, &v, 8); }

static void lgg_str(lgg_out *o, const char *s)
{
	lgg_u64(o, strlen(s));
	lgg_put(o, s, strlen(s));
}

static void lgg_kv_u32(lgg_out *o, const char *k, uint32_t v)
{
	lgg_str(o, k);
	lgg_u32(o, LGG_U32);
	lgg_u32(o, v);
}

static void lgg_kv_f32(lgg_out *o, const char *k, float v)
{
	lgg_str(o, k);
	lgg_u32(o, LGG_F32);
	lgg_put(o, &v, 4);
}

static void lgg_kv_str(lgg_out *o, const char *k, const char *v)
{
	lgg_str(o, k);
	lgg_u32(o, LGG_STR);
	lgg_str(o, v);
}

static void lgg_pad(lgg_out *o, uint64_t at)
{
	static const uint8_t zero[LGG_ALIGN];
	uint64_t pad = (LGG_ALIGN - at % LGG_ALIGN) % LGG_ALIGN;

	lgg_put(o, zero, pad);
}

/* splitmix64, then Box-Muller: reproducible on every machine. */
static uint64_t lgg_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void lgg_normal2(uint64_t *s, float out[2])
{
	double u1 = ((lgg_next(s) >> 11) + 1.0) / 9007199254740993.0;
	double u2 = (lgg_next(s) >> 11) / 9007199254740992.0;
	double r = sqrt(-2.0 * log(u1));

	out[0] = (float)(r * cos(2 * M_PI * u2));
	out[1] = (float)(r * sin(2 * M_PI * u2));
}

/* IEEE half, round to nearest even (values here are far from overflow). */
static uint16_t lgg_half(float f)
{
	uint32_t x, sign, e, m;
	int exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	e = (x >> 23) & 0xff;
	m = x & 0x7fffff;
	exp = (int)e - 127 + 15;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		uint32_t shift, half, r;

		if (exp < -10)
			return (uint16_t)sign;
		m |= 0x800000;
		shift = (uint32_t)(14 - exp);
		half = 1u << (shift - 1);
		r = m >> shift;
		if ((m & ((1u << shift) - 1)) > half ||
		    ((m & ((1u << shift) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t h = ((uint32_t)exp << 10) | (m >> 13);
		uint32_t rest = m & 0x1fff;

		if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
			h++; /* a carry into the exponent is still right */
		return (uint16_t)(sign | h);
	}
}

static void lgg_data(lgg_out *o, const lgg_tensor *t, uint64_t *rng, int is_embd)
{
	uint64_t n = t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1), i;
	double sd = t->n_dims > 1 && !is_embd ? 1.0 / sqrt((double)t->ne[0]) : 1.0;
	size_t el = t->type == LGG_GGML_F16 ? 2 : 4;
	uint8_t buf[8192];
	size_t fill = 0;

	for (i = 0; i < n; i += 2) {
		float v[2];
		int k;

		lgg_normal2(rng, v);
		for (k = 0; k < 2 && i + k < n; k++) {
			float x = t->n_dims == 1 ? 1.0f + 0.1f * v[k] : (float)(sd * v[k]);

			if (el == 2) {
				uint16_t h = lgg_half(x);
				memcpy(buf + fill, &h, 2);
			} else {
				memcpy(buf + fill, &x, 4);
			}
			fill += el;
			if (fill == sizeof(buf)) {
				lgg_put(o, buf, fill);
				fill = 0;
			}
		}
	}
	lgg_put(o, buf, fill);
	lgg_pad(o, n * el);
}

static int lgg_tensors(const lgg_shape *s, lgg_tensor *t)
{
	static const char *const per_layer[] = {
		"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
		"ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
	};
	uint64_t kv = (uint64_t)s->kv_heads * (s->embd / s->heads);
	int n = 0;
	uint32_t l;
	size_t j;

#define LGG_T(nm, d, a, b, ty) do { \
		snprintf(t[n].name, sizeof(t[n].name), "%s", nm); \
		t[n].n_dims = d; t[n].ne[0] = a; t[n].ne[1] = b; t[n].type = ty; n++; \
	} while (0)
	int mt = s->f16 ? LGG_GGML_F16 : LGG_GGML_F32;

	LGG_T("token_embd.weight", 2, s->embd, s->vocab, mt);
	LGG_T("output_norm.weight", 1, s->embd, 1, LGG_GGML_F32);
	LGG_T("output.weight", 2, s->embd, s->vocab, mt);
	for (l = 0; l < s->layers; l++) {
		for (j = 0; j < sizeof(per_layer) / sizeof(per_layer[0]); j++) {
			char nm[48];
			const char *p = per_layer[j];
			uint64_t a = s->embd, b = s->embd;

			snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, p);
			if (strstr(p, "norm")) {
				LGG_T(nm, 1, a, 1, LGG_GGML_F32);
				continue;
			}
			if (!strcmp(p, "attn_k") || !strcmp(p, "attn_v"))
				b = kv;
			else if (!strcmp(p, "ffn_gate") || !strcmp(p, "ffn_up"))
				b = s->ff;
			else if (!strcmp(p, "ffn_down"))
				a = s->ff;
			LGG_T(nm, 2, a, b, mt);
		}
	}
#undef LGG_T
	return n;
}

int lgg_write(const char *path, const lgg_shape *s, char *why, size_t why_len)
{
	char tmp[4096];
	lgg_tensor *t;
	lgg_out o = { NULL, 0 };
	uint64_t off = 0, rng = s->seed;
	int n, i;

	if (!s->layers || !s->heads || !s->kv_heads || s->embd % s->heads ||
	    s->heads % s->kv_heads || !s->ff || !s->vocab) {
		snprintf(why, why_len, "gguf: bad shape (embd %u must divide by heads %u, "
			 "heads by kv_heads %u; no zero sizes)", s->embd, s->heads, s->kv_heads);
		return -1;
	}
	t = calloc(3 + 9 * (size_t)s->layers, sizeof(*t));
	if (!t) {
		snprintf(why, why_len, "gguf: out of memory");
		return -1;
	}
	n = lgg_tensors(s, t);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	o.f = fopen(tmp, "wb");
	if (!o.f) {
		snprintf(why, why_len, "gguf: %s: %s", tmp, strerror(errno));
		free(t);
		return -1;
	}
	lgg_put(&o, "GGUF", 4);
	lgg_u32(&o, 3);
	lgg_u64(&o, (uint64_t)n);
	lgg_u64(&o, 13);
	lgg_kv_str(&o, "general.architecture", "llama");
	lgg_kv_str(&o, "general.name", "kvtier-random-llama");
	lgg_kv_u32(&o, "general.alignment", LGG_ALIGN);
	lgg_kv_u32(&o, "llama.context_length", s->ctx ? s->ctx : 8192);
	lgg_kv_u32(&o, "llama.embedding_length", s->embd);
	lgg_kv_u32(&o, "llama.block_count", s->layers);
	lgg_kv_u32(&o, "llama.feed_forward_length", s->ff);
	lgg_kv_u32(&o, "llama.attention.head_count", s->heads);
	lgg_kv_u32(&o, "llama.attention.head_count_kv", s->kv_heads);
	lgg_kv_f32(&o, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	lgg_kv_u32(&o, "llama.rope.dimension_count", s->embd / s->heads);
	lgg_kv_u32(&o, "llama.vocab_size", s->vocab);
	lgg_kv_str(&o, "tokenizer.ggml.model", "none");
	for (i = 0; i < n; i++) {
		uint64_t bytes = t[i].ne[0] * (t[i].n_dims > 1 ? t[i].ne[1] : 1) *
				 (t[i].type == LGG_GGML_F16 ? 2 : 4);
		int d;

		lgg_str(&o, t[i].name);
		lgg_u32(&o, (uint32_t)t[i].n_dims);
		for (d = 0; d < t[i].n_dims; d++)
			lgg_u64(&o, t[i].ne[d]);
		lgg_u32(&o, (uint32_t)t[i].type);
		lgg_u64(&o, off);
		off += bytes + (LGG_ALIGN - bytes % LGG_ALIGN) % LGG_ALIGN;
	}
	if (!o.err) {
		long at = ftell(o.f);
		lgg_pad(&o, at < 0 ? 0 : (uint64_t)at);
	}
	for (i = 0; i < n; i++)
		lgg_data(&o, &t[i], &rng, i == 0);
	free(t);
	if (fclose(o.f) && !o.err)
		o.err = errno;
	if (!o.err && rename(tmp, path))
		o.err = errno;
	if (o.err) {
		snprintf(why, why_len, "gguf: writing %s: %s", path, strerror(o.err));
		unlink(tmp);
		return -1;
	}
	return 0;
}
