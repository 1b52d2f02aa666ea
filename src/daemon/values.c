/*
 * values.c — mutable keys as versioned immutable objects (values.h).
 */
#include "daemon/values.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "daemon/log.h"

#define NSHARDS 64
#define ONE_LAYER_MAX (1024 * 1024)
#define MANY_LAYERS 64
static const char trailer_magic[8] = { 'K', 'V', 'T', 'D', 'V', 'A', 'L', '1' };

struct entry {
	struct entry *next;
	uint64_t hash;
	uint32_t tenant, klen;
	uint64_t seq, nonce, vlen;
	int64_t expire_ms;
	kvt_key obj;
	char key[];
};

struct shard {
	pthread_mutex_t mu;
	struct entry **b;
	size_t nb, n;
};

struct vals {
	kvt_store *st;
	struct vals_opts o;
	struct shard sh[NSHARDS];
	_Atomic uint64_t seq;
	uint64_t nonce;
	_Atomic uint64_t count[VALS_MAX_TENANTS];
	_Atomic uint64_t expiring[VALS_MAX_TENANTS];
	/* Each tenant met (rebuild, SET): the sweep deletes expired objects
	 * in their owner's namespace. */
	const struct kvtd_tenant *_Atomic tenant_of[VALS_MAX_TENANTS];
	pthread_mutex_t sweep_mu;
	size_t sweep_shard, sweep_bucket;
	_Atomic uint64_t reserved;  /* tier space held by SETs being received */
	uint64_t reserve_max;
};

int64_t vals_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Layers of a payload of `p` bytes: a function of the length alone, so a
 * reader that knows only the length (a tier's listing) knows the layout. */
static uint32_t layers_of(uint64_t p)
{
	return p <= ONE_LAYER_MAX ? 1 : MANY_LAYERS;
}

uint64_t vals_payload_bytes(size_t klen, uint64_t vlen)
{
	uint64_t need = vlen + klen + VALS_TRAILER;
	uint32_t l = layers_of(need);
	return (need + l - 1) / l * l;
}

/* The int8 layout that holds exactly `p` payload bytes: each layer is
 * heads x head_dim bytes plus up to 64 KiB of "scale" bytes.  0, or -1 for
 * a length no object of ours can have. */
static int layout_of(uint64_t p, kvt_layout *l)
{
	uint32_t n = layers_of(p);
	uint64_t b = p / n, d, h;

	if (p == 0 || p % n)
		return -1;
	d = b < 65536 ? b : 65536;
	h = b / d;
	if (h > 4096)
		return -1;
	*l = (kvt_layout){ .num_layers = n, .num_kv_heads = (uint32_t)h,
			   .head_dim = (uint32_t)d, .dtype = KVT_DTYPE_INT8,
			   .kv_planes = 1, .scale_bytes = (uint32_t)(b - h * d),
			   .block_size = 1, .chunk_tokens = 1 };
	return 0;
}

/* The namespace an object of `p` bytes is stored in: the tenant's digest
 * with the layout of its length.  The digest is what binds it to the
 * tenant (every read checks it); the layout is what the store checks the
 * length against. */
static int ns_of(const struct kvtd_tenant *t, uint64_t p, kvt_ns *ns)
{
	*ns = t->ns;
	return layout_of(p, &ns->layout);
}

static void obj_key(const struct kvtd_tenant *t, uint64_t seq, uint64_t nonce,
		    const char *key, size_t klen, kvt_key *out)
{
	uint8_t pre[48];
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned n = 0;

	memcpy(pre, t->ns.digest, 32);
	put_u64(pre + 32, seq);
	put_u64(pre + 40, nonce);
	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL) ||
	    !EVP_DigestUpdate(c, "kvtierd value\0", 14) ||
	    !EVP_DigestUpdate(c, pre, sizeof(pre)) || !EVP_DigestUpdate(c, key, klen) ||
	    !EVP_DigestFinal_ex(c, out->b, &n)) {
		/* No SHA-256 in this OpenSSL: nothing the daemon can do. */
		kvtd_log(KVTD_LOG_ERROR, "SHA-256 failed");
		abort();
	}
	EVP_MD_CTX_free(c);
}

static uint64_t hash_of(uint32_t tenant, const char *key, size_t klen)
{
	return XXH3_64bits_withSeed(key, klen, tenant);
}

int vals_open(kvt_store *st, const struct vals_opts *o, struct vals **out)
{
	struct vals *v = calloc(1, sizeof(*v));

	if (!v)
		return KVT_ENOMEM;
	v->st = st;
	v->o = *o;
	for (int i = 0; i < NSHARDS; i++) {
		pthread_mutex_init(&v->sh[i].mu, NULL);
		v->sh[i].nb = 4;
		v->sh[i].b = calloc(4, sizeof(struct entry *));
		if (!v->sh[i].b) {
			vals_close(v);
			return KVT_ENOMEM;
		}
	}
	pthread_mutex_init(&v->sweep_mu, NULL);
	if (RAND_bytes((unsigned char *)&v->nonce, sizeof(v->nonce)) != 1) {
		vals_close(v);
		return KVT_ENOMEM;
	}
	/* Sequence numbers order the versions of a key, across restarts too:
	 * they start past the clock (and past anything the rebuild finds). */
	atomic_store(&v->seq, (uint64_t)vals_now_ms() * 1000);
	v->reserve_max = o->reserve_max;
	*out = v;
	return 0;
}

void vals_close(struct vals *v)
{
	if (!v)
		return;
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &v->sh[i];
		for (size_t j = 0; s->b && j < s->nb; j++)
			for (struct entry *e = s->b[j], *n; e; e = n) {
				n = e->next;
				free(e);
			}
		free(s->b);
		pthread_mutex_destroy(&s->mu);
	}
	pthread_mutex_destroy(&v->sweep_mu);
	free(v);
}

static struct shard *shard_of(struct vals *v, uint64_t h)
{
	return &v->sh[h % NSHARDS];
}

static size_t bucket_of(const struct shard *s, uint64_t h)
{
	return (size_t)(h / NSHARDS) & (s->nb - 1);
}

static struct entry **find(struct shard *s, uint64_t h, uint32_t tenant, const char *key,
			   size_t klen)
{
	struct entry **pp = &s->b[bucket_of(s, h)];
	for (; *pp; pp = &(*pp)->next) {
		struct entry *e = *pp;
		if (e->hash == h && e->tenant == tenant && e->klen == klen &&
		    !memcmp(e->key, key, klen))
			return pp;
	}
	return pp;
}

/* Doubling keeps every entry at or after its old bucket index, which is
 * what lets a SCAN cursor (a bucket index) survive a resize. */
static void grow(struct shard *s)
{
	size_t nb = s->nb * 2;
	struct entry **b = calloc(nb, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < s->nb; i++)
		for (struct entry *e = s->b[i], *n; e; e = n) {
			n = e->next;
			size_t j = (size_t)(e->hash / NSHARDS) & (nb - 1);
			e->next = b[j];
			b[j] = e;
		}
	free(s->b);
	s->b = b;
	s->nb = nb;
}

/* A key's entry, linked at *pp (shard locked); its version is set by the
 * caller.  NULL if out of memory. */
static struct entry *new_entry(struct shard *s, struct entry **pp, uint64_t h,
			       const struct kvtd_tenant *t, const char *key, size_t klen)
{
	struct entry *e = malloc(sizeof(*e) + klen);

	if (!e)
		return NULL;
	e->next = NULL;
	e->hash = h;
	e->tenant = t->id;
	e->klen = (uint32_t)klen;
	e->expire_ms = 0;
	memcpy(e->key, key, klen);
	*pp = e;
	if (++s->n > s->nb * 2)
		grow(s);
	return e;
}

static void count_add(struct vals *v, const struct entry *e, int d)
{
	atomic_fetch_add(&v->count[e->tenant], (uint64_t)(int64_t)d);
	if (e->expire_ms)
		atomic_fetch_add(&v->expiring[e->tenant], (uint64_t)(int64_t)d);
}

struct gone {
	kvt_key obj;
	uint64_t p;
	uint32_t tenant;
};

static int is_expired(const struct entry *e, int64_t now)
{
	return e->expire_ms && e->expire_ms <= now;
}

/* Unlink *pp (shard locked); what the store must delete goes in *g. */
static void unlink_entry(struct vals *v, struct shard *s, struct entry **pp, struct gone *g)
{
	struct entry *e = *pp;
	*pp = e->next;
	s->n--;
	g->obj = e->obj;
	g->p = vals_payload_bytes(e->klen, e->vlen);
	g->tenant = e->tenant;
	count_add(v, e, -1);
	free(e);
}

static void drop_object(struct vals *v, const struct kvtd_tenant *t, const kvt_key *obj,
			uint64_t p)
{
	kvt_ns ns;
	if (ns_of(t, p, &ns) == 0)
		kvt_delete(v->st, &ns, obj);
}

/* The trailer (the user key, then the fixed fields) into out[0 .. klen +
 * VALS_TRAILER). */
static void encode_trailer(uint8_t *out, const char *key, size_t klen, uint64_t vlen,
			   uint64_t seq, uint64_t nonce, int64_t expire_ms)
{
	uint8_t *t = out + klen;

	memcpy(out, key, klen);
	put_u32(t, (uint32_t)klen);
	put_u32(t + 4, 0);
	put_u64(t + 8, vlen);
	put_u64(t + 16, seq);
	put_u64(t + 24, nonce);
	put_u64(t + 32, (uint64_t)expire_ms);
	memcpy(t + 40, trailer_magic, 8);
}

static void write_trailer(char *buf, const char *key, size_t klen, uint64_t vlen,
			  uint64_t p, uint64_t seq, uint64_t nonce, int64_t expire_ms)
{
	memset(buf + vlen, 0, (size_t)(p - vlen - klen - VALS_TRAILER));
	encode_trailer((uint8_t *)buf + p - klen - VALS_TRAILER, key, klen, vlen, seq, nonce,
		       expire_ms);
}

static int live(struct vals *v, struct shard *s, uint64_t h, const struct kvtd_tenant *t,
		const char *key, size_t klen, struct gone *g, int *dropped)
{
	struct entry **pp = find(s, h, t->id, key, klen);
	*dropped = 0;
	if (*pp && is_expired(*pp, vals_now_ms())) {
		unlink_entry(v, s, pp, g);
		*dropped = 1;
		return 0;
	}
	return *pp != NULL;
}

/* NX, XX and KEEPTTL before a put: 0 to go on (with *expire_ms the one
 * to store), or 1 when the condition says no. */
static int pre_check(struct vals *v, const struct kvtd_tenant *t, const char *key,
		     size_t klen, int flags, int64_t *expire_ms)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	int64_t keep = 0;
	struct gone g;
	int here, dropped;

	if (!(flags & (VALS_SET_NX | VALS_SET_XX | VALS_SET_KEEPTTL)))
		return 0;
	pthread_mutex_lock(&s->mu);
	here = live(v, s, h, t, key, klen, &g, &dropped);
	if (here && (flags & VALS_SET_KEEPTTL))
		keep = (*find(s, h, t->id, key, klen))->expire_ms;
	pthread_mutex_unlock(&s->mu);
	if (dropped)
		drop_object(v, t, &g.obj, g.p);
	if ((here && (flags & VALS_SET_NX)) || (!here && (flags & VALS_SET_XX)))
		return 1;
	if (flags & VALS_SET_KEEPTTL)
		*expire_ms = keep;
	return 0;
}

/* The version `seq` (object `obj`, stored) becomes the key's current one,
 * unless NX or XX says no now or a newer version is in already.  1, 0, or
 * KVT_ENOMEM; the object is deleted when it does not go in. */
static int install(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
		   uint64_t seq, const kvt_key *obj, const kvt_ns *ns, uint64_t vlen,
		   int64_t expire_ms, int flags)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	struct entry **pp, *e;
	struct gone g;
	int dropped, here, replaced = 0;

	pthread_mutex_lock(&s->mu);
	here = live(v, s, h, t, key, klen, &g, &dropped);
	pp = find(s, h, t->id, key, klen);
	if ((here && (flags & VALS_SET_NX)) || (!here && (flags & VALS_SET_XX)) ||
	    (*pp && (*pp)->seq > seq)) {
		/* Lost a race: to a writer that made the key exist (NX) or
		 * vanish (XX) meanwhile, or to a newer SET that is already in
		 * the map (ours then counts as overwritten at once). */
		int won = !(*pp && (*pp)->seq > seq);
		pthread_mutex_unlock(&s->mu);
		if (dropped)
			drop_object(v, t, &g.obj, g.p);
		kvt_delete(v->st, ns, obj);
		return won ? 0 : 1;
	}
	if (dropped)
		drop_object(v, t, &g.obj, g.p); /* expired: unlinked by live() */
	e = *pp;
	if (e) {
		replaced = 1;
		g.obj = e->obj;
		g.p = vals_payload_bytes(e->klen, e->vlen);
		count_add(v, e, -1);
	} else {
		e = new_entry(s, pp, h, t, key, klen);
		if (!e) {
			pthread_mutex_unlock(&s->mu);
			kvt_delete(v->st, ns, obj);
			return KVT_ENOMEM;
		}
	}
	e->seq = seq;
	e->nonce = v->nonce;
	e->vlen = vlen;
	e->expire_ms = expire_ms;
	e->obj = *obj;
	count_add(v, e, 1);
	pthread_mutex_unlock(&s->mu);
	if (replaced)
		drop_object(v, t, &g.obj, g.p);
	return 1;
}

int vals_set(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
	     char *buf, uint64_t vlen, int64_t expire_ms, int flags)
{
	uint64_t p = vals_payload_bytes(klen, vlen), seq;
	kvt_key obj;
	kvt_ns ns;
	int rc;

	if (klen > VALS_MAX_KEY)
		return KVT_EINVAL;
	if (ns_of(t, p, &ns))
		return KVT_ETOOBIG;
	if (pre_check(v, t, key, klen, flags, &expire_ms))
		return 0;
	if (!atomic_load(&v->tenant_of[t->id]))
		atomic_store(&v->tenant_of[t->id], t);
	seq = atomic_fetch_add(&v->seq, 1) + 1;
	obj_key(t, seq, v->nonce, key, klen, &obj);
	write_trailer(buf, key, klen, vlen, p, seq, v->nonce, expire_ms);
	rc = kvt_put(v->st, &ns, &obj, buf, (size_t)p, v->o.durability);
	if (rc < 0)
		return rc;
	return install(v, t, key, klen, seq, &obj, &ns, vlen, expire_ms, flags);
}

/* --- SETs received in place ------------------------------------------------ */

struct vals_put {
	struct vals *v;
	const struct kvtd_tenant *t;
	kvt_put_buf *b;
	kvt_ns ns;
	kvt_key obj;
	uint64_t seq, vlen, p;
	size_t klen;
	char key[];
};

int vals_put_open(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
		  uint64_t vlen, struct vals_put **out, const struct iovec **iov, int *n_iov)
{
	uint64_t p = vals_payload_bytes(klen, vlen);
	struct vals_put *vp;
	int rc;

	if (klen > VALS_MAX_KEY)
		return KVT_EINVAL;
	/* Reserved space holds tier memory while a client sends: at most a
	 * share of the first tier is held so, so that clients that announce
	 * big values and stall cannot push the others' data out. */
	if (atomic_fetch_add(&v->reserved, p) + p > v->reserve_max) {
		atomic_fetch_sub(&v->reserved, p);
		return KVT_EFULL;
	}
	vp = malloc(sizeof(*vp) + klen);
	if (!vp) {
		atomic_fetch_sub(&v->reserved, p);
		return KVT_ENOMEM;
	}
	*vp = (struct vals_put){ .v = v, .t = t, .vlen = vlen, .p = p, .klen = klen };
	memcpy(vp->key, key, klen);
	if (ns_of(t, p, &vp->ns)) {
		rc = KVT_ETOOBIG;
		goto fail;
	}
	if (!atomic_load(&v->tenant_of[t->id]))
		atomic_store(&v->tenant_of[t->id], t);
	vp->seq = atomic_fetch_add(&v->seq, 1) + 1;
	obj_key(t, vp->seq, v->nonce, key, klen, &vp->obj);
	rc = kvt_put_reserve(v->st, &vp->ns, &vp->obj, v->o.durability, &vp->b);
	if (rc)
		goto fail;
	kvt_put_buf_iov(vp->b, iov, n_iov);
	*out = vp;
	return 0;
fail:
	atomic_fetch_sub(&v->reserved, p);
	free(vp);
	return rc;
}

void vals_put_progress(struct vals_put *vp, uint64_t got)
{
	/* Not past the value: its CRLF lands where the padding and trailer
	 * are written at commit. */
	kvt_put_buf_written(vp->b, got < vp->vlen ? got : vp->vlen);
}

void vals_put_cancel(struct vals_put *vp)
{
	if (!vp)
		return;
	kvt_put_cancel(vp->b);
	atomic_fetch_sub(&vp->v->reserved, vp->p);
	free(vp);
}

/* Write `n` bytes at payload offset `at` into the segments. */
static void iov_write(const struct iovec *iov, int n_iov, uint64_t at, const void *src,
		      size_t n)
{
	const char *s = src;
	for (int i = 0; i < n_iov && n; i++) {
		if (at >= iov[i].iov_len) {
			at -= iov[i].iov_len;
			continue;
		}
		size_t k = iov[i].iov_len - (size_t)at < n ? iov[i].iov_len - (size_t)at : n;
		if (s)
			memcpy((char *)iov[i].iov_base + at, s, k);
		else
			memset((char *)iov[i].iov_base + at, 0, k);
		if (s)
			s += k;
		n -= k;
		at = 0;
	}
}

int vals_put_commit(struct vals_put *vp, int64_t expire_ms, int flags)
{
	struct vals *v = vp->v;
	const struct iovec *iov;
	uint8_t tr[VALS_MAX_KEY + VALS_TRAILER];
	int n_iov, rc;

	if (pre_check(v, vp->t, vp->key, vp->klen, flags, &expire_ms)) {
		vals_put_cancel(vp);
		return 0;
	}
	/* Padding and trailer after the value, as write_trailer lays them
	 * out in a flat buffer. */
	kvt_put_buf_iov(vp->b, &iov, &n_iov);
	size_t tl = vp->klen + VALS_TRAILER;
	iov_write(iov, n_iov, vp->vlen, NULL, (size_t)(vp->p - vp->vlen - tl));
	encode_trailer(tr, vp->key, vp->klen, vp->vlen, vp->seq, v->nonce, expire_ms);
	iov_write(iov, n_iov, vp->p - tl, tr, tl);
	rc = kvt_put_publish(vp->b);
	atomic_fetch_sub(&v->reserved, vp->p);
	if (rc == 0)
		rc = install(v, vp->t, vp->key, vp->klen, vp->seq, &vp->obj, &vp->ns, vp->vlen,
			     expire_ms, flags);
	free(vp);
	return rc;
}

/* Look `key` up for reading: 1 with the version's object, 0 if it has
 * none (an expired one is removed on the way). */
static int current(struct vals *v, const struct kvtd_tenant *t, const char *key,
		   size_t klen, kvt_key *obj, uint64_t *vlen, uint64_t *seq)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	struct gone g;
	int here, dropped;

	pthread_mutex_lock(&s->mu);
	here = live(v, s, h, t, key, klen, &g, &dropped);
	if (here) {
		struct entry *e = *find(s, h, t->id, key, klen);
		*obj = e->obj;
		*vlen = e->vlen;
		*seq = e->seq;
	}
	pthread_mutex_unlock(&s->mu);
	if (dropped)
		drop_object(v, t, &g.obj, g.p);
	return here;
}

/* The version `seq` of `key` is gone from every tier (evicted with no
 * tier below to keep it): the key is gone too, unless a newer SET came. */
static void forget(struct vals *v, const struct kvtd_tenant *t, const char *key,
		   size_t klen, uint64_t seq)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	struct entry **pp;
	struct gone g;

	pthread_mutex_lock(&s->mu);
	pp = find(s, h, t->id, key, klen);
	if (*pp && (*pp)->seq == seq)
		unlink_entry(v, s, pp, &g);
	pthread_mutex_unlock(&s->mu);
}

int vals_get(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
	     kvt_ref **ref, uint64_t *vlen)
{
	for (int tries = 0; tries < 8; tries++) {
		uint64_t seq;
		kvt_key obj;
		kvt_ns ns;
		int rc;

		if (!current(v, t, key, klen, &obj, vlen, &seq))
			return KVT_ENOTFOUND;
		if (ns_of(t, vals_payload_bytes(klen, *vlen), &ns))
			return KVT_ENOTFOUND;
		rc = kvt_borrow(v->st, &ns, &obj, ref);
		if (rc != KVT_ENOTFOUND)
			return rc;
		/* Replaced (and deleted) between the look-up and the borrow:
		 * read the newer version.  Else it is gone for good. */
		uint64_t seq2, vlen2;
		kvt_key obj2;
		if (!current(v, t, key, klen, &obj2, &vlen2, &seq2))
			return KVT_ENOTFOUND;
		if (seq2 == seq) {
			forget(v, t, key, klen, seq);
			return KVT_ENOTFOUND;
		}
	}
	return KVT_ENOTFOUND;
}

int vals_exists(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen)
{
	uint64_t vlen, seq;
	kvt_key obj;
	kvt_ns ns;

	if (!current(v, t, key, klen, &obj, &vlen, &seq))
		return 0;
	/* From the tiers' indexes: a version evicted from every tier is no
	 * longer there, whatever the map says. */
	if (ns_of(t, vals_payload_bytes(klen, vlen), &ns) == 0 &&
	    kvt_exists(v->st, &ns, &obj) == 0) {
		forget(v, t, key, klen, seq);
		return 0;
	}
	return 1;
}

int vals_del(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	struct entry **pp;
	struct gone g;
	int was = 0, expired = 0;

	pthread_mutex_lock(&s->mu);
	pp = find(s, h, t->id, key, klen);
	if (*pp) {
		expired = is_expired(*pp, vals_now_ms());
		unlink_entry(v, s, pp, &g);
		was = 1;
	}
	pthread_mutex_unlock(&s->mu);
	if (was)
		drop_object(v, t, &g.obj, g.p);
	return was && !expired;
}

/* A new version of `key` holding the same value with another expiry: the
 * expiry is in the trailer, so that a restart keeps it, and objects are
 * immutable.  1 if it went in, 0 if the key is gone or changed meanwhile
 * (a SET since wins, as it would have come after), or a negative code. */
static int rewrite_expiry(struct vals *v, const struct kvtd_tenant *t, const char *key,
			  size_t klen, int64_t expire_ms)
{
	uint64_t vlen, seq, p, h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	kvt_key old, obj;
	kvt_ns ns;
	kvt_ref *ref;
	char *buf;
	int rc;

	if (!current(v, t, key, klen, &old, &vlen, &seq))
		return 0;
	p = vals_payload_bytes(klen, vlen);
	if (ns_of(t, p, &ns))
		return 0;
	rc = kvt_borrow(v->st, &ns, &old, &ref);
	if (rc == KVT_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	buf = malloc((size_t)p);
	if (!buf) {
		kvt_release(ref);
		return KVT_ENOMEM;
	}
	const struct iovec *iov;
	int n;
	uint64_t at = 0;
	kvt_ref_iov(ref, &iov, &n);
	for (int i = 0; i < n && at < vlen; i++) {
		size_t k = iov[i].iov_len < vlen - at ? iov[i].iov_len : (size_t)(vlen - at);
		memcpy(buf + at, iov[i].iov_base, k);
		at += k;
	}
	kvt_release(ref);
	uint64_t nseq = atomic_fetch_add(&v->seq, 1) + 1;
	obj_key(t, nseq, v->nonce, key, klen, &obj);
	write_trailer(buf, key, klen, vlen, p, nseq, v->nonce, expire_ms);
	rc = kvt_put(v->st, &ns, &obj, buf, (size_t)p, v->o.durability);
	free(buf);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&s->mu);
	struct entry **pp = find(s, h, t->id, key, klen);
	int same = *pp && (*pp)->seq == seq;
	if (same) {
		count_add(v, *pp, -1);
		(*pp)->seq = nseq;
		(*pp)->nonce = v->nonce;
		(*pp)->obj = obj;
		(*pp)->expire_ms = expire_ms;
		count_add(v, *pp, 1);
	}
	pthread_mutex_unlock(&s->mu);
	kvt_delete(v->st, &ns, same ? &old : &obj);
	return same;
}

int vals_expire(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen,
		int64_t expire_ms)
{
	if (expire_ms && expire_ms <= vals_now_ms())
		return vals_del(v, t, key, klen); /* in the past: the key goes */
	for (int tries = 0; tries < 4; tries++) {
		int rc = rewrite_expiry(v, t, key, klen, expire_ms);
		if (rc != 0)
			return rc;
		if (!vals_exists(v, t, key, klen))
			return 0;
	}
	return KVT_EAGAIN;
}

int64_t vals_pttl(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	struct gone g;
	int64_t r = -2;
	int dropped;

	pthread_mutex_lock(&s->mu);
	if (live(v, s, h, t, key, klen, &g, &dropped)) {
		struct entry *e = *find(s, h, t->id, key, klen);
		r = e->expire_ms ? e->expire_ms - vals_now_ms() : -1;
		if (r < -1)
			r = 0;
	}
	pthread_mutex_unlock(&s->mu);
	if (dropped)
		drop_object(v, t, &g.obj, g.p);
	return r;
}

/* Cursor: shard in the low 6 bits, bucket index above.  Buckets are
 * visited in increasing order and tables only double, so an entry never
 * moves below the cursor (see grow). */
uint64_t vals_scan(struct vals *v, const struct kvtd_tenant *t, uint64_t cursor,
		   size_t count, const char *match, size_t mlen,
		   void (*fn)(void *arg, const char *key, size_t klen), void *arg)
{
	size_t si = (size_t)(cursor % NSHARDS), bi = (size_t)(cursor / NSHARDS);
	size_t visited = 0, found = 0;
	int64_t now = vals_now_ms();

	if (count == 0)
		count = 10;
	/* As Redis: stop once `count` keys are out, or after ten times as
	 * many buckets (a sparse table does not make one call long). */
	while (si < NSHARDS) {
		struct shard *s = &v->sh[si];
		pthread_mutex_lock(&s->mu);
		for (; bi < s->nb && found < count && visited < count * 10; bi++, visited++)
			for (struct entry *e = s->b[bi]; e; e = e->next)
				if (e->tenant == t->id && !is_expired(e, now) &&
				    (!match || vals_glob(match, mlen, e->key, e->klen))) {
					fn(arg, e->key, e->klen);
					found++;
				}
		int done = bi >= s->nb;
		pthread_mutex_unlock(&s->mu);
		if (!done)
			return (uint64_t)bi * NSHARDS + si;
		si++;
		bi = 0;
		if (found >= count || visited >= count * 10)
			return si < NSHARDS ? si : 0;
	}
	return 0;
}

uint64_t vals_count(struct vals *v, const struct kvtd_tenant *t)
{
	return atomic_load(&v->count[t->id]);
}

uint64_t vals_expiring(struct vals *v, const struct kvtd_tenant *t)
{
	return atomic_load(&v->expiring[t->id]);
}

/* Remove the entries of one bucket that `pred` picks; their objects are
 * deleted after the shard's lock is let go. */
static uint64_t purge_bucket(struct vals *v, const struct kvtd_tenant *t, struct shard *s,
			     size_t bi, int all_of_tenant, uint32_t tenant)
{
	struct gone g[32];
	size_t n = 0;
	uint64_t gone = 0;
	int again;

	do {
		int64_t now = vals_now_ms();
		again = 0;
		pthread_mutex_lock(&s->mu);
		for (struct entry **pp = bi < s->nb ? &s->b[bi] : NULL; pp && *pp;) {
			int pick = all_of_tenant ? (*pp)->tenant == tenant : is_expired(*pp, now);
			if (!pick) {
				pp = &(*pp)->next;
				continue;
			}
			if (n == 32) {
				again = 1;
				break;
			}
			unlink_entry(v, s, pp, &g[n++]);
		}
		pthread_mutex_unlock(&s->mu);
		for (size_t i = 0; i < n; i++) {
			const struct kvtd_tenant *owner =
				t ? t : atomic_load(&v->tenant_of[g[i].tenant]);
			if (owner)
				drop_object(v, owner, &g[i].obj, g[i].p);
		}
		gone += n;
		n = 0;
	} while (again);
	return gone;
}

uint64_t vals_flush(struct vals *v, const struct kvtd_tenant *t)
{
	uint64_t gone = 0;

	for (int si = 0; si < NSHARDS; si++) {
		struct shard *s = &v->sh[si];
		pthread_mutex_lock(&s->mu);
		size_t nb = s->nb;
		pthread_mutex_unlock(&s->mu);
		for (size_t bi = 0; bi < nb; bi++)
			gone += purge_bucket(v, t, s, bi, 1, t->id);
	}
	return gone;
}

void vals_sweep(struct vals *v, size_t budget)
{
	pthread_mutex_lock(&v->sweep_mu);
	for (size_t i = 0; i < budget; i++) {
		struct shard *s = &v->sh[v->sweep_shard];
		purge_bucket(v, NULL, s, v->sweep_bucket, 0, 0);
		pthread_mutex_lock(&s->mu);
		size_t nb = s->nb;
		pthread_mutex_unlock(&s->mu);
		if (++v->sweep_bucket >= nb) {
			v->sweep_bucket = 0;
			v->sweep_shard = (v->sweep_shard + 1) % NSHARDS;
		}
	}
	pthread_mutex_unlock(&v->sweep_mu);
}

int vals_glob(const char *p, size_t pl, const char *s, size_t sl)
{
	while (pl) {
		switch (*p) {
		case '*':
			while (pl > 1 && p[1] == '*') {
				p++;
				pl--;
			}
			if (pl == 1)
				return 1;
			for (size_t i = 0; i <= sl; i++)
				if (vals_glob(p + 1, pl - 1, s + i, sl - i))
					return 1;
			return 0;
		case '?':
			if (!sl)
				return 0;
			s++;
			sl--;
			break;
		case '[': {
			int neg, hit = 0;
			p++;
			pl--;
			neg = pl && *p == '^';
			if (neg) {
				p++;
				pl--;
			}
			while (pl && *p != ']') {
				if (*p == '\\' && pl >= 2) {
					p++;
					pl--;
					if (sl && *p == *s)
						hit = 1;
				} else if (pl >= 3 && p[1] == '-') {
					unsigned char a = (unsigned char)p[0], b = (unsigned char)p[2];
					if (a > b) {
						unsigned char x = a;
						a = b;
						b = x;
					}
					if (sl && (unsigned char)*s >= a && (unsigned char)*s <= b)
						hit = 1;
					p += 2;
					pl -= 2;
				} else if (sl && *p == *s) {
					hit = 1;
				}
				p++;
				pl--;
			}
			if (!sl || hit == neg)
				return 0;
			s++;
			sl--;
			if (!pl)
				return sl == 0; /* an unclosed class ends the pattern */
			break;
		}
		case '\\':
			if (pl >= 2) {
				p++;
				pl--;
			}
			/* fall through */
		default:
			if (!sl || *p != *s)
				return 0;
			s++;
			sl--;
			break;
		}
		p++;
		pl--;
	}
	return sl == 0;
}

/* --- rebuild ---------------------------------------------------------------- */

struct found {
	kvt_key key;
	uint64_t len;
};

struct found_list {
	struct found *f;
	size_t n, cap;
};

static int collect(void *arg, const kvt_key *key, uint64_t len)
{
	struct found_list *l = arg;
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 1024;
		struct found *f = realloc(l->f, c * sizeof(*f));
		if (!f)
			return KVT_ENOMEM;
		l->f = f;
		l->cap = c;
	}
	l->f[l->n++] = (struct found){ *key, len };
	return 0;
}

/* Read one object's trailer and put its version in the map if it is the
 * newest seen; 1 if it went in, 0 if it was not ours or superseded (and
 * deleted), or a negative code. */
static int adopt(struct vals *v, const struct kvtd_tenant *const *tenants, size_t nt,
		 const struct found *f, char *layer, size_t cap, int64_t now)
{
	kvt_layout l;
	kvt_ns ns;
	size_t lb;
	int rc = KVT_EMISMATCH;
	const struct kvtd_tenant *t = NULL;

	if (layout_of(f->len, &l))
		return 0;
	lb = (size_t)(f->len / l.num_layers);
	if (lb > cap)
		return 0;
	for (size_t i = 0; i < nt && rc == KVT_EMISMATCH; i++) {
		t = tenants[i];
		ns_of(t, f->len, &ns);
		rc = kvt_get_layer(v->st, &ns, &f->key, l.num_layers - 1, layer, lb);
	}
	if (rc == KVT_EMISMATCH || rc == KVT_ELAYOUT || rc == KVT_ENOTFOUND)
		return 0; /* not a value of a tenant we serve */
	if (rc < 0)
		return rc;
	const uint8_t *tr = (const uint8_t *)layer + lb - VALS_TRAILER;
	if (lb < VALS_TRAILER || memcmp(tr + 40, trailer_magic, 8))
		return 0;
	uint32_t klen = get_u32(tr);
	uint64_t vlen = get_u64(tr + 8), seq = get_u64(tr + 16), nonce = get_u64(tr + 24);
	int64_t exp = (int64_t)get_u64(tr + 32);
	if (klen > VALS_MAX_KEY || klen > lb - VALS_TRAILER ||
	    vals_payload_bytes(klen, vlen) != f->len)
		return 0;
	const char *key = (const char *)tr - klen;
	kvt_key want;
	obj_key(t, seq, nonce, key, klen, &want);
	if (memcmp(want.b, f->key.b, KVT_KEY_BYTES))
		return 0; /* its trailer does not name it */
	if (exp && exp <= now) {
		kvt_delete(v->st, &ns, &f->key);
		return 0;
	}

	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, h);
	struct entry **pp, *e;
	struct gone g = { 0 };
	int older = 0, replaced = 0;

	pthread_mutex_lock(&s->mu);
	pp = find(s, h, t->id, key, klen);
	if (*pp && (*pp)->seq > seq) {
		older = 1;
	} else if (*pp && (*pp)->seq == seq) {
		pthread_mutex_unlock(&s->mu);
		return 0; /* the same version, from another tier */
	} else if (*pp) {
		e = *pp;
		replaced = 1;
		g.obj = e->obj;
		g.p = vals_payload_bytes(e->klen, e->vlen);
		count_add(v, e, -1);
	} else {
		if (!new_entry(s, pp, h, t, key, klen)) {
			pthread_mutex_unlock(&s->mu);
			return KVT_ENOMEM;
		}
	}
	if (!older) {
		e = *find(s, h, t->id, key, klen);
		e->seq = seq;
		e->nonce = nonce;
		e->vlen = vlen;
		e->expire_ms = exp;
		e->obj = f->key;
		count_add(v, e, 1);
	}
	pthread_mutex_unlock(&s->mu);
	/* A version a later SET replaced, left by a crash between that
	 * SET's put and its delete of the old one. */
	if (older)
		kvt_delete(v->st, &ns, &f->key);
	if (replaced)
		drop_object(v, t, &g.obj, g.p);
	if (seq >= atomic_load(&v->seq))
		atomic_store(&v->seq, seq + 1);
	return !older && !replaced;
}

long vals_rebuild(struct vals *v, const struct kvtd_tenant *const *tenants,
		  size_t n_tenants)
{
	struct found_list l = { 0 };
	int nt = kvt_store_tiers(v->st);
	long keys = 0;
	size_t cap = 0;
	char *layer = NULL;
	int64_t now = vals_now_ms();
	int rc = 0;

	for (size_t i = 0; i < n_tenants; i++)
		atomic_store(&v->tenant_of[tenants[i]->id], tenants[i]);
	for (int i = 0; i < nt && rc == 0; i++) {
		kvt_tier_stats ts;
		if (kvt_store_stats(v->st, i, &ts) || !strcmp(ts.name, "dram"))
			continue;
		rc = kvt_store_iterate(v->st, i, collect, &l);
	}
	for (size_t i = 0; i < l.n && rc >= 0; i++) {
		size_t lb = (size_t)(l.f[i].len / layers_of(l.f[i].len));
		if (lb > cap) {
			char *b = realloc(layer, lb);
			if (!b) {
				rc = KVT_ENOMEM;
				break;
			}
			layer = b;
			cap = lb;
		}
		rc = adopt(v, tenants, n_tenants, &l.f[i], layer, cap, now);
		if (rc > 0)
			keys++;
		if (rc > 0 || rc == 0)
			rc = 0;
		else if (rc != KVT_ENOMEM) {
			kvtd_log(KVTD_LOG_WARN, "rebuild: an object could not be read: %s (%s)",
				 kvt_strerror(rc), kvt_errmsg());
			rc = 0;
		}
	}
	free(layer);
	free(l.f);
	return rc < 0 ? rc : keys;
}
