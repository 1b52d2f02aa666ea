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
/* The trailer's last 8 bytes say what the object is. */
#define MAGIC_V1 "KVTDVAL1"  /* a value, trailer unchecked (daemons before tombstones) */
#define MAGIC_VAL "KVTDVAL2" /* a value, trailer checksummed */
#define MAGIC_DEL "KVTDDEL2" /* a key's tombstone: its versions up to seq are deleted */
#define MAGIC_FLS "KVTDFLS2" /* a tenant's: every version up to seq is (FLUSHDB) */
/* The object names of each kind: SHA-256 under its own domain. */
#define DOM_VAL "kvtierd value"
#define DOM_DEL "kvtierd tombstone"
#define DOM_FLS "kvtierd flush"
/* Versions deleted whose late copies are deleted again once the store has
 * no background copy left (struct late): beyond this many (tombstones
 * aside) a restart's rebuild is left to delete them. */
#define LATE_MAX (256 * 1024)
/* What the rebuild reads of each object first: the trailer of any key up
 * to this long less VALS_TRAILER; a longer key is read in a second peek. */
#define TAIL_FIRST 512
/* Overwritten versions waiting for the deleter (struct doomed): beyond
 * this many, or half of reserve_max in bytes, a SET deletes its old
 * version itself. */
#define DOOMED_MAX 256

struct entry {
	struct entry *next;
	uint64_t hash;
	uint32_t tenant, klen;
	uint64_t seq, nonce, vlen;
	int64_t expire_ms;
	kvt_key obj;
	/* Deleted, its tombstone on disk: absent to every reader, but still
	 * the key's newest version, so that a SET numbered before it (a
	 * concurrent one, installed late) loses as it will at a restart. */
	int dead;
	char key[];
};

/* A version deleted (and maybe its tombstone) whose background copy may
 * still land on the disk after the deletion: once the store has no copy
 * queued or running the version is deleted again, then the tombstone, then
 * the dead entry.  So a copy that lands late is harmless: the tombstone
 * hides it from a restart's rebuild until it is deleted. */
struct late {
	struct late *next;
	kvt_key obj, tomb;
	uint64_t p, tp, seq;
	uint32_t tenant, klen;
	int has_obj, has_tomb, dead; /* dead: remove key's dead entry of seq */
	char key[];
};

/* A version a SET replaced, deleted off that SET's path by the deleter
 * thread: its tenant is copied (tenants outlive no shutdown). */
struct doomed {
	struct doomed *next;
	struct kvtd_tenant t;
	kvt_key obj;
	uint64_t p;
};

struct shard {
	pthread_mutex_t mu;
	struct entry **b;
	size_t nb, n;
};

/* A tenant's keys, in a table of its own: a SCAN walks its tenant's keys
 * alone (its length tells nothing of the others'), a FLUSHDB visits them
 * alone, and no lock one tenant holds is another's.  Made at the tenant's
 * first write. */
struct table {
	struct shard sh[NSHARDS];
};

struct vals {
	kvt_store *st;
	struct vals_opts o;
	struct table *_Atomic tab[VALS_MAX_TENANTS];
	pthread_mutex_t tab_mu;   /* making a table */
	_Atomic uint64_t seq;
	uint64_t nonce;
	_Atomic uint64_t count[VALS_MAX_TENANTS];
	_Atomic uint64_t expiring[VALS_MAX_TENANTS];
	/* Each tenant met (rebuild, SET): the sweep deletes expired objects
	 * in their owner's namespace. */
	const struct kvtd_tenant *_Atomic tenant_of[VALS_MAX_TENANTS];
	pthread_mutex_t sweep_mu;
	size_t sweep_tenant, sweep_shard, sweep_bucket;
	_Atomic uint64_t reserved;  /* tier space held by SETs being received */
	uint64_t reserve_max;
	/* Deletions write tombstones: SETs are cached and a tier outlives
	 * the process, so a deleted version's copy may land after it. */
	int tombs;
	_Atomic uint64_t flushed[VALS_MAX_TENANTS]; /* FLUSHDB: versions <= this lost */
	pthread_mutex_t late_mu;
	struct late *late;
	size_t n_late;
	/* The deleter: overwritten versions (struct doomed), oldest first. */
	pthread_mutex_t doom_mu;
	pthread_cond_t doom_cv;   /* wakes the deleter */
	pthread_cond_t doom_idle; /* it holds nothing (doom_drain) */
	struct doomed *doom_head, *doom_tail;
	size_t n_doom;
	uint64_t doom_bytes, doom_max_bytes;
	int doom_stop, doom_on;
	pthread_t doom_th;
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

static void obj_key(const struct kvtd_tenant *t, const char *dom, uint64_t seq, uint64_t nonce,
		    const char *key, size_t klen, kvt_key *out)
{
	uint8_t pre[48];
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned n = 0;

	memcpy(pre, t->ns.digest, 32);
	put_u64(pre + 32, seq);
	put_u64(pre + 40, nonce);
	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL) ||
	    !EVP_DigestUpdate(c, dom, strlen(dom) + 1) ||
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

/* Whether tier i keeps this daemon's objects across a restart: what the
 * rebuild reads, and where a late copy could bring a deleted version back
 * (not memory, nor the peer tier: other nodes' chunks, read only). */
static int outlives(kvt_store *st, int i)
{
	kvt_tier_stats ts;
	return kvt_store_stats(st, i, &ts) == 0 && strcmp(ts.name, "dram") &&
	       strcmp(ts.name, "device") && strcmp(ts.name, "peer");
}

static void late_collect(struct vals *v, size_t budget);
static void *deleter_main(void *arg);

static void table_free(struct table *t)
{
	if (!t)
		return;
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &t->sh[i];
		for (size_t j = 0; s->b && j < s->nb; j++)
			for (struct entry *e = s->b[j], *n; e; e = n) {
				n = e->next;
				free(e);
			}
		free(s->b);
		pthread_mutex_destroy(&s->mu);
	}
	free(t);
}

static struct table *table_new(void)
{
	struct table *t = calloc(1, sizeof(*t));

	for (int i = 0; t && i < NSHARDS; i++) {
		pthread_mutex_init(&t->sh[i].mu, NULL);
		t->sh[i].nb = 4;
		if (!(t->sh[i].b = calloc(4, sizeof(struct entry *)))) {
			for (int j = i + 1; j < NSHARDS; j++) /* what table_free meets */
				pthread_mutex_init(&t->sh[j].mu, NULL);
			table_free(t);
			return NULL;
		}
	}
	return t;
}

int vals_open(kvt_store *st, const struct vals_opts *o, struct vals **out)
{
	struct vals *v = calloc(1, sizeof(*v));

	if (!v)
		return KVT_ENOMEM;
	v->st = st;
	v->o = *o;
	pthread_mutex_init(&v->tab_mu, NULL);
	pthread_mutex_init(&v->sweep_mu, NULL);
	pthread_mutex_init(&v->late_mu, NULL);
	pthread_mutex_init(&v->doom_mu, NULL);
	pthread_cond_init(&v->doom_cv, NULL);
	pthread_cond_init(&v->doom_idle, NULL);
	if (RAND_bytes((unsigned char *)&v->nonce, sizeof(v->nonce)) != 1) {
		vals_close(v);
		return KVT_ENOMEM;
	}
	/* Sequence numbers order the versions of a key, across restarts too:
	 * they start past the clock (and past anything the rebuild finds). */
	atomic_store(&v->seq, (uint64_t)vals_now_ms() * 1000);
	v->reserve_max = o->reserve_max;
	for (int i = 0; o->durability == KVT_DUR_CACHED && i < kvt_store_tiers(st); i++)
		v->tombs |= outlives(st, i);
	v->doom_max_bytes = o->reserve_max ? o->reserve_max / 2 : 64u << 20;
	/* Without the thread (cached SETs: drop_later), every SET deletes
	 * its old version itself. */
	v->doom_on = o->durability > KVT_DUR_CACHED &&
		     pthread_create(&v->doom_th, NULL, deleter_main, v) == 0;
	*out = v;
	return 0;
}

void vals_close(struct vals *v)
{
	if (!v)
		return;
	if (v->doom_on) { /* what it holds is deleted first */
		pthread_mutex_lock(&v->doom_mu);
		v->doom_stop = 1;
		pthread_cond_signal(&v->doom_cv);
		pthread_mutex_unlock(&v->doom_mu);
		pthread_join(v->doom_th, NULL);
	}
	pthread_mutex_destroy(&v->doom_mu);
	pthread_cond_destroy(&v->doom_cv);
	pthread_cond_destroy(&v->doom_idle);
	/* After the store's flush (main.c): nothing can land any more. */
	late_collect(v, SIZE_MAX);
	for (struct late *l = v->late, *n; l; l = n) {
		n = l->next;
		free(l);
	}
	pthread_mutex_destroy(&v->late_mu);
	for (int t = 0; t < VALS_MAX_TENANTS; t++)
		table_free(atomic_load(&v->tab[t]));
	pthread_mutex_destroy(&v->tab_mu);
	pthread_mutex_destroy(&v->sweep_mu);
	free(v);
}

/* Tenant `tenant`'s table; with `make`, made if it has none (NULL only if
 * out of memory); without, NULL when it has none (no keys). */
static struct table *table_of(struct vals *v, uint32_t tenant, int make)
{
	struct table *t = atomic_load_explicit(&v->tab[tenant], memory_order_acquire);

	if (t || !make)
		return t;
	pthread_mutex_lock(&v->tab_mu);
	if (!(t = atomic_load(&v->tab[tenant])) && (t = table_new()))
		atomic_store_explicit(&v->tab[tenant], t, memory_order_release);
	pthread_mutex_unlock(&v->tab_mu);
	return t;
}

static struct shard *shard_of(struct vals *v, uint32_t tenant, uint64_t h, int make)
{
	struct table *t = table_of(v, tenant, make);
	return t ? &t->sh[h % NSHARDS] : NULL;
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
	e->dead = 0;
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

/* Delete an object of `p` payload bytes from every tier: 0, KVT_ENOTFOUND
 * or the store's error. */
static int delete_object(struct vals *v, const struct kvtd_tenant *t, const kvt_key *obj,
			 uint64_t p)
{
	kvt_ns ns;
	return ns_of(t, p, &ns) ? KVT_EINVAL : kvt_delete(v->st, &ns, obj);
}

/* Queue `l` for late_collect; a version alone (no tombstone to collect)
 * is left to the next start's rebuild when too many wait. */
static void late_add(struct vals *v, struct late *l)
{
	pthread_mutex_lock(&v->late_mu);
	if (l->has_tomb || v->n_late < LATE_MAX) {
		l->next = v->late;
		v->late = l;
		v->n_late++;
		l = NULL;
	}
	pthread_mutex_unlock(&v->late_mu);
	free(l);
}

/* A version leaves the map: delete its object now, and again once no
 * background copy of it can still land (struct late). */
static void drop_now(struct vals *v, const struct kvtd_tenant *t, const kvt_key *obj,
		     uint64_t p)
{
	struct late *l;

	delete_object(v, t, obj, p);
	if (!v->tombs || !(l = calloc(1, sizeof(*l))))
		return;
	l->obj = *obj;
	l->p = p;
	l->tenant = t->id;
	l->has_obj = 1;
	late_add(v, l);
}

/* An overwritten version is deleted by the deleter thread, not by the SET
 * that replaced it: deleting a version is a file's unlink on a disk tier,
 * which freeing its blocks (and an online discard) made 0.3-0.7 ms a SET
 * in the median and up to 100 ms in the tail on the 2-core test machine,
 * time the client waited for a +OK that did not depend on it.  It is safe
 * to be late: no reader finds the version (the map names the new one), a
 * restart's rebuild deletes it if the daemon dies first (the newer version
 * wins), a deletion of a key's current version waits for the deleter
 * first (doom_drain), and so does a clean stop (vals_close). */
static void *deleter_main(void *arg)
{
	struct vals *v = arg;

	pthread_mutex_lock(&v->doom_mu);
	for (;;) {
		struct doomed *d = v->doom_head;
		if (!d) {
			if (v->doom_stop)
				break;
			pthread_cond_wait(&v->doom_cv, &v->doom_mu);
			continue;
		}
		v->doom_head = d->next;
		if (!v->doom_head)
			v->doom_tail = NULL;
		pthread_mutex_unlock(&v->doom_mu);
		drop_now(v, &d->t, &d->obj, d->p);
		pthread_mutex_lock(&v->doom_mu);
		v->doom_bytes -= d->p;
		if (--v->n_doom == 0)
			pthread_cond_broadcast(&v->doom_idle);
		free(d);
	}
	pthread_mutex_unlock(&v->doom_mu);
	return NULL;
}

/* drop_object, by the deleter when it keeps up; by the caller when it
 * does not (back-pressure: the DRAM the versions hold stays bounded).
 * With cached SETs the caller deletes at once: its version is then still
 * in DRAM alone as a rule (the store waits a little before it copies a put
 * down, store.c, THROUGH_SETTLE_S), so the deletion costs no file, and it
 * must be seen there now for that copy to be skipped; a deleter that the
 * machine's load held back let half the copies through. */
static void drop_later(struct vals *v, const struct kvtd_tenant *t, const kvt_key *obj,
		       uint64_t p)
{
	struct doomed *d = v->doom_on ? malloc(sizeof(*d)) : NULL;

	if (d) {
		*d = (struct doomed){ .t = *t, .obj = *obj, .p = p };
		pthread_mutex_lock(&v->doom_mu);
		if (v->n_doom < DOOMED_MAX && v->doom_bytes + p <= v->doom_max_bytes) {
			if (v->doom_tail)
				v->doom_tail->next = d;
			else
				v->doom_head = d;
			v->doom_tail = d;
			v->n_doom++;
			v->doom_bytes += p;
			pthread_cond_signal(&v->doom_cv);
			d = NULL;
		}
		pthread_mutex_unlock(&v->doom_mu);
		if (!d)
			return;
		free(d);
	}
	drop_now(v, t, obj, p); /* an older version than the key's: no wait */
}

/* Every version the deleter holds is deleted.  A deletion of the version a
 * key reads (DEL, UNLINK, an expiry, FLUSHDB) waits for this first: with
 * the key's current version gone from the disk, an older one still there
 * would be the newest a restart finds, and a deleted key would come back
 * after a crash. */
static void doom_drain(struct vals *v)
{
	if (!v->doom_on)
		return;
	pthread_mutex_lock(&v->doom_mu);
	while (v->n_doom)
		pthread_cond_wait(&v->doom_idle, &v->doom_mu);
	pthread_mutex_unlock(&v->doom_mu);
}

/* A version that may be its key's current one leaves the map. */
static void drop_object(struct vals *v, const struct kvtd_tenant *t, const kvt_key *obj,
			uint64_t p)
{
	doom_drain(v);
	drop_now(v, t, obj, p);
}

/* The trailer (the user key, then the fixed fields) into out[0 .. klen +
 * VALS_TRAILER), its checksum over all of it with the checksum's own
 * field zero: the rebuild reads it alone, outside the layer checksums. */
static void encode_trailer(uint8_t *out, const char *magic, const char *key, size_t klen,
			   uint64_t vlen, uint64_t seq, uint64_t nonce, int64_t expire_ms)
{
	uint8_t *t = out + klen;

	memcpy(out, key, klen);
	put_u32(t, (uint32_t)klen);
	put_u32(t + 4, 0);
	put_u64(t + 8, vlen);
	put_u64(t + 16, seq);
	put_u64(t + 24, nonce);
	put_u64(t + 32, (uint64_t)expire_ms);
	memcpy(t + 40, magic, 8);
	put_u32(t + 4, (uint32_t)XXH3_64bits(out, klen + VALS_TRAILER));
}

static void write_trailer(char *buf, const char *key, size_t klen, uint64_t vlen,
			  uint64_t p, uint64_t seq, uint64_t nonce, int64_t expire_ms)
{
	memset(buf + vlen, 0, (size_t)(p - vlen - klen - VALS_TRAILER));
	encode_trailer((uint8_t *)buf + p - klen - VALS_TRAILER, MAGIC_VAL, key, klen, vlen, seq,
		       nonce, expire_ms);
}

static int live(struct vals *v, struct shard *s, uint64_t h, const struct kvtd_tenant *t,
		const char *key, size_t klen, struct gone *g, int *dropped)
{
	struct entry **pp = find(s, h, t->id, key, klen);
	*dropped = 0;
	if (*pp && (*pp)->dead)
		return 0;
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
	struct shard *s = shard_of(v, t->id, h, 0);
	int64_t keep = 0;
	struct gone g;
	int here, dropped;

	if (!(flags & (VALS_SET_NX | VALS_SET_XX | VALS_SET_KEEPTTL)))
		return 0;
	if (!s) /* the tenant has no keys */
		return (flags & VALS_SET_XX) ? 1 : 0;
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
		   uint64_t seq, const kvt_key *obj, uint64_t vlen,
		   int64_t expire_ms, int flags)
{
	uint64_t h = hash_of(t->id, key, klen);
	struct shard *s = shard_of(v, t->id, h, 1);
	struct entry **pp, *e;
	struct gone g;
	int dropped, here, replaced = 0;

	if (!s) {
		drop_object(v, t, obj, vals_payload_bytes(klen, vlen));
		return KVT_ENOMEM;
	}
	pthread_mutex_lock(&s->mu);
	here = live(v, s, h, t, key, klen, &g, &dropped);
	pp = find(s, h, t->id, key, klen);
	/* A FLUSHDB or a DEL numbered after this SET came first: it
	 * counts as overwritten at once, as a restart will see it. */
	int later = (*pp && (*pp)->seq > seq) || seq <= atomic_load(&v->flushed[t->id]);
	if ((here && (flags & VALS_SET_NX)) || (!here && (flags & VALS_SET_XX)) || later) {
		/* Lost a race: to a writer that made the key exist (NX) or
		 * vanish (XX) meanwhile, or to a newer SET that is already in
		 * the map (ours then counts as overwritten at once). */
		pthread_mutex_unlock(&s->mu);
		if (dropped)
			drop_object(v, t, &g.obj, g.p);
		drop_object(v, t, obj, vals_payload_bytes(klen, vlen));
		return later ? 1 : 0;
	}
	if (dropped)
		drop_object(v, t, &g.obj, g.p); /* expired: unlinked by live() */
	e = *pp;
	if (e && e->dead) {
		e->dead = 0; /* its object is gone already; its tombstone hides older only */
	} else if (e) {
		replaced = 1;
		g.obj = e->obj;
		g.p = vals_payload_bytes(e->klen, e->vlen);
		count_add(v, e, -1);
	} else {
		e = new_entry(s, pp, h, t, key, klen);
		if (!e) {
			pthread_mutex_unlock(&s->mu);
			drop_object(v, t, obj, vals_payload_bytes(klen, vlen));
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
		drop_later(v, t, &g.obj, g.p);
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
	obj_key(t, DOM_VAL, seq, v->nonce, key, klen, &obj);
	write_trailer(buf, key, klen, vlen, p, seq, v->nonce, expire_ms);
	rc = kvt_put(v->st, &ns, &obj, buf, (size_t)p, v->o.durability);
	if (rc < 0)
		return rc;
	return install(v, t, key, klen, seq, &obj, vlen, expire_ms, flags);
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
	obj_key(t, DOM_VAL, vp->seq, v->nonce, key, klen, &vp->obj);
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
	encode_trailer(tr, MAGIC_VAL, vp->key, vp->klen, vp->vlen, vp->seq, v->nonce, expire_ms);
	iov_write(iov, n_iov, vp->p - tl, tr, tl);
	rc = kvt_put_publish(vp->b);
	atomic_fetch_sub(&v->reserved, vp->p);
	if (rc == 0)
		rc = install(v, vp->t, vp->key, vp->klen, vp->seq, &vp->obj, vp->vlen,
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
	struct shard *s = shard_of(v, t->id, h, 0);
	struct gone g;
	int here, dropped;

	if (!s)
		return 0;
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
	struct shard *s = shard_of(v, t->id, h, 0);
	struct entry **pp;
	struct gone g;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	pp = find(s, h, t->id, key, klen);
	if (*pp && !(*pp)->dead && (*pp)->seq == seq)
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

/* Store a tombstone (MAGIC_DEL and DOM_DEL for `key`, or MAGIC_FLS and
 * DOM_FLS for the tenant, klen 0): the versions numbered up to `seq` are
 * deleted.  It is
 * written crash-safe whatever the SETs' durability: a deletion must
 * outlive the late copy it hides.  0 with its name and payload length, or
 * the put's error. */
static int put_tomb(struct vals *v, const struct kvtd_tenant *t, const char *magic,
		    const char *dom, const char *key, size_t klen, uint64_t seq, kvt_key *name,
		    uint64_t *p)
{
	uint8_t *buf;
	kvt_ns ns;
	int rc;

	*p = vals_payload_bytes(klen, 0);
	if (ns_of(t, *p, &ns) || !(buf = calloc(1, (size_t)*p)))
		return KVT_ENOMEM;
	obj_key(t, dom, seq, v->nonce, key, klen, name);
	encode_trailer(buf + *p - klen - VALS_TRAILER, magic, key, klen, 0, seq, v->nonce, 0);
	rc = kvt_put(v->st, &ns, name, buf, (size_t)*p, KVT_DUR_CRASH_SAFE);
	free(buf);
	return rc == KVT_EEXIST ? 0 : rc;
}

/* Remove key's dead entry of version `seq`, if it is still that. */
static void bury_entry(struct vals *v, uint32_t tenant, const char *key, size_t klen,
		       uint64_t seq)
{
	uint64_t h = hash_of(tenant, key, klen);
	struct shard *s = shard_of(v, tenant, h, 0);
	struct entry **pp, *e;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	pp = find(s, h, tenant, key, klen);
	if ((e = *pp) && e->dead && e->seq == seq) {
		*pp = e->next;
		s->n--;
		free(e);
	}
	pthread_mutex_unlock(&s->mu);
}

/* Without a tombstone (the disk refused it), a deletion is made safe the
 * other way: by waiting until the copies queued have landed, then
 * deleting again.  `what` names the deletion in the log. */
static void delete_unburied(struct vals *v, const struct kvtd_tenant *t, const char *what,
			    int rc, const kvt_key *obj, uint64_t p)
{
	kvtd_log(KVTD_LOG_WARN, "%s: no tombstone could be written (%s: %s); waiting for the "
		 "background copies instead", what, kvt_strerror(rc), kvt_errmsg());
	if (kvt_store_flush(v->st, 10000))
		kvtd_log(KVTD_LOG_WARN, "%s: copies still queued after 10 s: a restart may "
			 "bring back what it deleted", what);
	if (obj)
		delete_object(v, t, obj, p);
}

/* The deletion of version (seq, obj) of `key`, whose entry is dead in
 * the map.  If the store has no background copy queued or running once
 * the object is deleted, none of it can land any more (one that landed
 * meanwhile is deleted again): the entry goes, nothing else is needed.
 * Else a tombstone, before the reply: a crash after it keeps the key
 * deleted however late its copy lands. */
static void delete_buried(struct vals *v, const struct kvtd_tenant *t, const char *key,
			  size_t klen, uint64_t seq, const struct gone *g)
{
	struct late *l;
	int rc;

	delete_object(v, t, &g->obj, g->p);
	if (kvt_store_flush(v->st, 0) == 0) {
		delete_object(v, t, &g->obj, g->p);
		bury_entry(v, t->id, key, klen, seq);
		return;
	}
	l = calloc(1, sizeof(*l) + klen);
	rc = l ? put_tomb(v, t, MAGIC_DEL, DOM_DEL, key, klen, seq, &l->tomb, &l->tp) : KVT_ENOMEM;
	if (rc) {
		free(l);
		delete_unburied(v, t, "DEL", rc, &g->obj, g->p);
		bury_entry(v, t->id, key, klen, seq);
		return;
	}
	l->obj = g->obj;
	l->p = g->p;
	l->seq = seq;
	l->tenant = t->id;
	l->klen = (uint32_t)klen;
	memcpy(l->key, key, klen);
	l->has_obj = l->has_tomb = l->dead = 1;
	late_add(v, l);
}

int vals_del(struct vals *v, const struct kvtd_tenant *t, const char *key, size_t klen)
{
	uint64_t h = hash_of(t->id, key, klen), seq = 0;
	struct shard *s = shard_of(v, t->id, h, 0);
	struct entry **pp, *e;
	struct gone g;
	int was = 0, expired = 0, tomb = 0;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->mu);
	pp = find(s, h, t->id, key, klen);
	if ((e = *pp) && !e->dead) {
		expired = is_expired(e, vals_now_ms());
		was = 1;
		/* An expired version needs no tombstone: its trailer says it
		 * is, to a restart too. */
		tomb = v->tombs && !expired;
		if (tomb) {
			g = (struct gone){ e->obj, vals_payload_bytes(e->klen, e->vlen), e->tenant };
			seq = e->seq;
			count_add(v, e, -1);
			e->dead = 1;
			e->expire_ms = 0;
		} else {
			unlink_entry(v, s, pp, &g);
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (tomb)
		delete_buried(v, t, key, klen, seq, &g);
	else if (was)
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
	struct shard *s;
	kvt_key old, obj;
	kvt_ns ns;
	kvt_ref *ref;
	char *buf;
	int rc;

	if (!current(v, t, key, klen, &old, &vlen, &seq))
		return 0;
	s = shard_of(v, t->id, h, 0); /* there: the key is */
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
	obj_key(t, DOM_VAL, nseq, v->nonce, key, klen, &obj);
	write_trailer(buf, key, klen, vlen, p, nseq, v->nonce, expire_ms);
	rc = kvt_put(v->st, &ns, &obj, buf, (size_t)p, v->o.durability);
	free(buf);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&s->mu);
	struct entry **pp = find(s, h, t->id, key, klen);
	int same = *pp && !(*pp)->dead && (*pp)->seq == seq;
	if (same) {
		count_add(v, *pp, -1);
		(*pp)->seq = nseq;
		(*pp)->nonce = v->nonce;
		(*pp)->obj = obj;
		(*pp)->expire_ms = expire_ms;
		count_add(v, *pp, 1);
	}
	pthread_mutex_unlock(&s->mu);
	drop_object(v, t, same ? &old : &obj, p);
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
	struct shard *s = shard_of(v, t->id, h, 0);
	struct gone g;
	int64_t r = -2;
	int dropped;

	if (!s)
		return -2;
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

/* The keys one SCAN step collected under a shard's lock, matched after
 * it is let go: a pattern is the client's, and no other tenant waits on
 * the lock while it runs. */
struct scan_keys {
	char *buf;
	size_t len, cap;
	size_t *ends; /* ends[i]: where key i ends in buf */
	size_t n, ncap;
};

static int scan_keep(struct scan_keys *k, const char *key, size_t klen)
{
	if (k->len + klen > k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 4096;
		while (cap < k->len + klen)
			cap *= 2;
		char *b = realloc(k->buf, cap);
		if (!b)
			return -1;
		k->buf = b;
		k->cap = cap;
	}
	if (k->n == k->ncap) {
		size_t ncap = k->ncap ? k->ncap * 2 : 64;
		size_t *e = realloc(k->ends, ncap * sizeof(*e));
		if (!e)
			return -1;
		k->ends = e;
		k->ncap = ncap;
	}
	memcpy(k->buf + k->len, key, klen);
	k->len += klen;
	k->ends[k->n++] = k->len;
	return 0;
}

/* Cursor: shard in the low 6 bits, bucket index above.  Buckets are
 * visited in increasing order and tables only double, so an entry never
 * moves below the cursor (see grow).  As Redis: a step collects about
 * `count` of the tenant's keys (or visits ten times as many buckets: a
 * sparse table does not make one call long), and MATCH filters what was
 * collected, with the shard's lock let go. */
uint64_t vals_scan(struct vals *v, const struct kvtd_tenant *t, uint64_t cursor,
		   size_t count, const char *match, size_t mlen,
		   void (*fn)(void *arg, const char *key, size_t klen), void *arg)
{
	size_t si = (size_t)(cursor % NSHARDS), bi = (size_t)(cursor / NSHARDS);
	size_t visited = 0, collected = 0;
	int64_t now = vals_now_ms();
	struct scan_keys k = { 0 };
	uint64_t next = 0;
	struct table *tab = table_of(v, t->id, 0);

	if (count == 0)
		count = 10;
	while (tab && si < NSHARDS) {
		struct shard *s = &tab->sh[si];
		int done;

		k.len = k.n = 0;
		pthread_mutex_lock(&s->mu);
		for (; bi < s->nb && collected + k.n < count && visited < count * 10;
		     bi++, visited++)
			for (struct entry *e = s->b[bi]; e; e = e->next)
				if (e->tenant == t->id && !e->dead && !is_expired(e, now))
					(void)scan_keep(&k, e->key, e->klen); /* OOM: fewer */
		done = bi >= s->nb;
		pthread_mutex_unlock(&s->mu);
		for (size_t i = 0; i < k.n; i++) {
			size_t start = i ? k.ends[i - 1] : 0;
			if (!match || vals_glob(match, mlen, k.buf + start, k.ends[i] - start))
				fn(arg, k.buf + start, k.ends[i] - start);
		}
		collected += k.n;
		if (!done) {
			next = (uint64_t)bi * NSHARDS + si;
			break;
		}
		si++;
		bi = 0;
		if (collected >= count || visited >= count * 10) {
			next = si < NSHARDS ? si : 0;
			break;
		}
	}
	free(k.buf);
	free(k.ends);
	return next;
}

uint64_t vals_count(struct vals *v, const struct kvtd_tenant *t)
{
	return atomic_load(&v->count[t->id]);
}

uint64_t vals_expiring(struct vals *v, const struct kvtd_tenant *t)
{
	return atomic_load(&v->expiring[t->id]);
}

/* Remove the entries of one bucket: tenant t's numbered up to `upto`, or
 * (t NULL) the expired ones.  Their objects are deleted after the shard's
 * lock is let go. */
static uint64_t purge_bucket(struct vals *v, const struct kvtd_tenant *t, struct shard *s,
			     size_t bi, uint64_t upto)
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
			int pick = !(*pp)->dead && (t ? (*pp)->tenant == t->id && (*pp)->seq <= upto
							  : is_expired(*pp, now));
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

/* Tenant t's entries numbered up to `upto` leave the map and the tiers. */
static uint64_t purge_table(struct vals *v, const struct kvtd_tenant *t, uint64_t upto)
{
	struct table *tab = table_of(v, t->id, 0);
	uint64_t gone = 0;

	for (int si = 0; tab && si < NSHARDS; si++) {
		struct shard *s = &tab->sh[si];
		pthread_mutex_lock(&s->mu);
		size_t nb = s->nb;
		pthread_mutex_unlock(&s->mu);
		for (size_t bi = 0; bi < nb; bi++)
			gone += purge_bucket(v, t, s, bi, upto);
	}
	return gone;
}

uint64_t vals_flush(struct vals *v, const struct kvtd_tenant *t)
{
	uint64_t gone = 0, upto = UINT64_MAX;
	struct late *l = NULL;
	int rc = 0;

	if (v->tombs) {
		/* Every version numbered so far goes, in the map now and at a
		 * restart by the tenant's tombstone; a SET numbered before
		 * that installs after it loses (install). */
		upto = atomic_load(&v->seq);
		atomic_store(&v->flushed[t->id], upto);
		l = calloc(1, sizeof(*l));
		rc = l ? put_tomb(v, t, MAGIC_FLS, DOM_FLS, "", 0, upto, &l->tomb, &l->tp)
		       : KVT_ENOMEM;
		if (rc) {
			free(l);
			l = NULL;
		} else {
			l->tenant = t->id;
			l->has_tomb = 1;
		}
	}

	gone = purge_table(v, t, upto);
	if (l)
		late_add(v, l);
	else if (rc)
		delete_unburied(v, t, "FLUSHDB", rc, NULL, 0);
	return gone;
}

/* Put `l` (a list of n) back at the head of the late list. */
static void late_requeue(struct vals *v, struct late *l, size_t n)
{
	struct late *tail = l;

	if (!l)
		return;
	while (tail->next)
		tail = tail->next;
	pthread_mutex_lock(&v->late_mu);
	tail->next = v->late;
	v->late = l;
	v->n_late += n;
	pthread_mutex_unlock(&v->late_mu);
}

/* Collect what waits on the late list, up to `budget` items, if the store
 * has no background copy queued or running now: every item was queued
 * after its version's deletion, so no copy of it can land after this.
 * Its version is deleted again (a copy that landed since), then its
 * tombstone, then its dead entry.  (The store does not count a demotion
 * that an evicting writer runs itself when its queue is full: a version
 * evicted from DRAM before any disk copy, deleted while that one copy
 * runs, is the window this leaves.) */
static void late_collect(struct vals *v, size_t budget)
{
	struct late *l, *next, *keep = NULL;
	size_t kept = 0;

	pthread_mutex_lock(&v->late_mu);
	l = v->late;
	v->late = NULL;
	v->n_late = 0;
	pthread_mutex_unlock(&v->late_mu);
	if (l && kvt_store_flush(v->st, 0)) {
		for (next = l; next; next = next->next)
			kept++;
		late_requeue(v, l, kept);
		return;
	}
	for (; l; l = next) {
		const struct kvtd_tenant *t = atomic_load(&v->tenant_of[l->tenant]);
		int rc = 0, done = budget && t;
		next = l->next;
		if (done) {
			budget--;
			if (l->has_obj)
				delete_object(v, t, &l->obj, l->p);
			if (l->has_tomb)
				rc = delete_object(v, t, &l->tomb, l->tp);
		}
		if (!done || (rc && rc != KVT_ENOTFOUND)) {
			l->next = keep; /* for the next time */
			keep = l;
			kept++;
			continue;
		}
		if (l->dead)
			bury_entry(v, l->tenant, l->key, l->klen, l->seq);
		free(l);
	}
	late_requeue(v, keep, kept);
}

void vals_sweep(struct vals *v, size_t budget)
{
	late_collect(v, 4096);
	pthread_mutex_lock(&v->sweep_mu);
	/* A bucket a step, tenant by tenant; tenants without a table cost
	 * a step each, so a pass over an idle node is quick either way. */
	for (size_t i = 0; i < budget; i++) {
		struct table *tab = table_of(v, (uint32_t)v->sweep_tenant, 0);
		size_t nb = 0;
		if (tab) {
			struct shard *s = &tab->sh[v->sweep_shard];
			purge_bucket(v, NULL, s, v->sweep_bucket, 0);
			pthread_mutex_lock(&s->mu);
			nb = s->nb;
			pthread_mutex_unlock(&s->mu);
		}
		if (++v->sweep_bucket >= nb) {
			v->sweep_bucket = 0;
			if (!tab || ++v->sweep_shard == NSHARDS) {
				v->sweep_shard = 0;
				v->sweep_tenant = (v->sweep_tenant + 1) % VALS_MAX_TENANTS;
			}
		}
	}
	pthread_mutex_unlock(&v->sweep_mu);
}

int64_t vals_expiry_ms(long long t, int sec, int at, int64_t now)
{
	int64_t ms, sum;

	if (__builtin_mul_overflow((int64_t)t, sec ? 1000 : 1, &ms))
		return INT64_MIN;
	if (at)
		return ms;
	if (__builtin_add_overflow(ms, now, &sum))
		return INT64_MIN;
	return sum;
}

/* Whether the one pattern token at p (a literal, an escaped byte, '?' or a
 * [class]) takes byte c; *len gets the token's length in the pattern. */
static int glob_token(const char *p, size_t pl, unsigned char c, size_t *len)
{
	size_t i = 1;
	int neg, hit = 0;

	switch (*p) {
	case '?':
		*len = 1;
		return 1;
	case '\\':
		if (pl >= 2) {
			*len = 2;
			return (unsigned char)p[1] == c;
		}
		*len = 1;
		return c == '\\';
	case '[':
		neg = i < pl && p[i] == '^';
		i += neg;
		while (i < pl && p[i] != ']') {
			if (p[i] == '\\' && i + 1 < pl) {
				hit |= (unsigned char)p[i + 1] == c;
				i += 2;
			} else if (i + 2 < pl && p[i + 1] == '-') {
				unsigned char a = (unsigned char)p[i], b = (unsigned char)p[i + 2];
				if (a > b) {
					unsigned char x = a;
					a = b;
					b = x;
				}
				hit |= c >= a && c <= b;
				i += 3;
			} else {
				hit |= (unsigned char)p[i] == c;
				i++;
			}
		}
		*len = i < pl ? i + 1 : i; /* an unclosed class runs to the end */
		return hit != neg;
	default:
		*len = 1;
		return (unsigned char)*p == c;
	}
}

/* Redis's glob over bytes.  Every token but '*' takes exactly one byte, so
 * the match needs no recursion: on a mismatch go back to the last '*' and
 * let it take one more byte.  At most |p|·|s| steps, never exponential (a
 * pattern of many stars over a long key once took seconds, CVE-2022-36021
 * in Redis). */
int vals_glob(const char *p, size_t pl, const char *s, size_t sl)
{
	size_t pi = 0, si = 0, star = SIZE_MAX, mark = 0, len;

	while (si < sl) {
		if (pi < pl && p[pi] == '*') {
			while (pi < pl && p[pi] == '*')
				pi++;
			if (pi == pl)
				return 1;
			star = pi;
			mark = si;
			continue;
		}
		if (pi < pl && glob_token(p + pi, pl - pi, (unsigned char)s[si], &len)) {
			pi += len;
			si++;
			continue;
		}
		if (star == SIZE_MAX)
			return 0;
		pi = star;
		si = ++mark;
	}
	while (pi < pl && p[pi] == '*')
		pi++;
	return pi == pl;
}

/* --- rebuild ---------------------------------------------------------------- */

struct found {
	kvt_key key;
	uint64_t len;
	int tier;
};

struct found_list {
	struct found *f;
	size_t n, cap;
	int tier;
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
	l->f[l->n++] = (struct found){ *key, len, l->tier };
	return 0;
}

enum { OBJ_V1 = 1, OBJ_VAL, OBJ_DEL, OBJ_FLS };

/* What a trailer says.  `key` points into the buffer it was read into. */
struct trailer {
	int kind;
	uint32_t klen;
	uint64_t vlen, seq, nonce;
	int64_t exp;
	const char *key;
};

/* Parse the trailer that ends at `end`, `have` bytes of which are there:
 * its kind (its checksum checked from VAL2 on), 0 if it is none of ours or
 * damaged, or -1 with *need when its key is longer than what was read. */
static int trailer_parse(uint8_t *end, size_t have, struct trailer *tr, size_t *need)
{
	static const char *const magic[] = { MAGIC_V1, MAGIC_VAL, MAGIC_DEL, MAGIC_FLS };
	uint8_t *t = end - VALS_TRAILER;

	if (have < VALS_TRAILER)
		return 0;
	tr->kind = 0;
	for (int k = 0; k < 4; k++)
		if (!memcmp(t + 40, magic[k], 8))
			tr->kind = k + 1;
	tr->klen = get_u32(t);
	if (!tr->kind || tr->klen > VALS_MAX_KEY)
		return 0;
	if (tr->klen > have - VALS_TRAILER) {
		*need = tr->klen + VALS_TRAILER;
		return -1;
	}
	tr->key = (const char *)t - tr->klen;
	tr->vlen = get_u64(t + 8);
	tr->seq = get_u64(t + 16);
	tr->nonce = get_u64(t + 24);
	tr->exp = (int64_t)get_u64(t + 32);
	if (tr->kind != OBJ_V1) {
		uint32_t sum = get_u32(t + 4);
		put_u32(t + 4, 0);
		uint32_t want = (uint32_t)XXH3_64bits(t - tr->klen, tr->klen + VALS_TRAILER);
		put_u32(t + 4, sum);
		if (sum != want)
			return 0;
	}
	return tr->kind;
}

/* The last layer of a value written before trailers were checksummed,
 * read whole and verified, must end with the bytes peeked: then they can
 * be trusted.  1, 0 (not), or a negative code. */
static int legacy_verified(struct vals *v, const kvt_ns *ns, const struct found *f,
			   const uint8_t *tail, size_t have)
{
	uint32_t n = ns->layout.num_layers;
	size_t lb = (size_t)(f->len / n);
	uint8_t *layer = malloc(lb);
	int rc;

	if (!layer)
		return KVT_ENOMEM;
	rc = kvt_get_layer(v->st, ns, &f->key, n - 1, layer, lb);
	if (rc == 0)
		rc = lb >= have && !memcmp(layer + lb - have, tail, have);
	free(layer);
	return rc == KVT_ENOTFOUND || rc == KVT_ECORRUPT ? 0 : rc;
}

/* Read one object's header and trailer (kvt_store_peek: the header's
 * block and the trailer's, however long the value) from its tier: the
 * kind, with *tr and *tenant, if it is a value or tombstone of a tenant
 * listed, intact and named by its own trailer; 0 if not; or a negative
 * code.  `buf` holds VALS_MAX_KEY + VALS_TRAILER bytes. */
static int examine(struct vals *v, const struct kvtd_tenant *const *tenants, size_t nt,
		   const struct found *f, uint8_t *buf, struct trailer *tr,
		   const struct kvtd_tenant **tenant)
{
	static const char *const dom[] = { DOM_VAL, DOM_VAL, DOM_DEL, DOM_FLS };
	size_t have = f->len < TAIL_FIRST ? (size_t)f->len : TAIL_FIRST, need = 0;
	kvt_object_info info;
	kvt_ns ns;
	kvt_key want;
	int rc, kind = 0;

	rc = kvt_store_peek(v->st, f->tier, &f->key, &info, f->len - have, buf, have);
	if (rc == 0 && (kind = trailer_parse(buf + have, have, tr, &need)) < 0 &&
	    need <= f->len) {
		have = need;
		rc = kvt_store_peek(v->st, f->tier, &f->key, &info, f->len - have, buf, have);
		kind = rc ? 0 : trailer_parse(buf + have, have, tr, &need);
	}
	if (rc == KVT_ENOTFOUND || rc == KVT_EMISMATCH)
		return 0; /* gone since the listing, or not what it is listed as */
	if (rc < 0 || kind <= 0)
		return rc < 0 ? rc : 0;
	*tenant = NULL;
	for (size_t i = 0; i < nt && !*tenant; i++)
		if (!memcmp(tenants[i]->ns.digest, info.ns_digest, 32))
			*tenant = tenants[i];
	/* A tenant's, and laid out as a value of its length is. */
	if (!*tenant || ns_of(*tenant, f->len, &ns) ||
	    info.layout.num_layers != ns.layout.num_layers ||
	    info.layout.num_kv_heads != ns.layout.num_kv_heads ||
	    info.layout.head_dim != ns.layout.head_dim || info.layout.dtype != ns.layout.dtype ||
	    info.layout.scale_bytes != ns.layout.scale_bytes)
		return 0;
	if (vals_payload_bytes(tr->klen, tr->vlen) != f->len ||
	    (kind >= OBJ_DEL && tr->vlen) || (kind == OBJ_FLS && tr->klen))
		return 0;
	obj_key(*tenant, dom[kind - 1], tr->seq, tr->nonce, tr->key, tr->klen, &want);
	if (memcmp(want.b, f->key.b, KVT_KEY_BYTES))
		return 0; /* its trailer does not name it */
	if (kind == OBJ_V1 && (rc = legacy_verified(v, &ns, f, buf, have)) <= 0)
		return rc;
	return kind;
}

/* Put a value's version in the map if it is the newest seen: 1 if it
 * went in as a new key, 0 if not (superseded and deleted, expired and
 * deleted, or the same version seen in another tier), or KVT_ENOMEM. */
static int adopt(struct vals *v, const struct kvtd_tenant *t, const struct found *f,
		 const struct trailer *tr, int64_t now)
{
	uint64_t h = hash_of(t->id, tr->key, tr->klen);
	struct shard *s = shard_of(v, t->id, h, 1);
	struct entry **pp, *e;
	struct gone g = { 0 };
	int older = 0, replaced = 0;

	if (tr->exp && tr->exp <= now) {
		delete_object(v, t, &f->key, f->len);
		return 0;
	}
	if (!s)
		return KVT_ENOMEM;
	pthread_mutex_lock(&s->mu);
	pp = find(s, h, t->id, tr->key, tr->klen);
	if (*pp && (*pp)->seq > tr->seq) {
		older = 1;
	} else if (*pp && (*pp)->seq == tr->seq) {
		pthread_mutex_unlock(&s->mu);
		return 0; /* the same version, from another tier */
	} else if (*pp) {
		e = *pp;
		replaced = 1;
		g.obj = e->obj;
		g.p = vals_payload_bytes(e->klen, e->vlen);
		count_add(v, e, -1);
	} else if (!new_entry(s, pp, h, t, tr->key, tr->klen)) {
		pthread_mutex_unlock(&s->mu);
		return KVT_ENOMEM;
	}
	if (!older) {
		e = *find(s, h, t->id, tr->key, tr->klen);
		e->seq = tr->seq;
		e->nonce = tr->nonce;
		e->vlen = tr->vlen;
		e->expire_ms = tr->exp;
		e->obj = f->key;
		count_add(v, e, 1);
	}
	pthread_mutex_unlock(&s->mu);
	/* A version a later SET replaced, left by a crash between that
	 * SET's put and its delete of the old one, or by a late copy. */
	if (older)
		delete_object(v, t, &f->key, f->len);
	if (replaced)
		delete_object(v, t, &g.obj, g.p);
	return !older && !replaced;
}

/* A tombstone found: applied once every value is in the map. */
struct tomb {
	struct tomb *next;
	const struct kvtd_tenant *t;
	kvt_key name;
	uint64_t len, seq;
	int kind;
	uint32_t klen;
	char key[];
};

/* Apply a tombstone: the versions it hides leave the map and the tiers. */
static void tomb_apply(struct vals *v, const struct tomb *tb)
{
	if (tb->kind == OBJ_FLS) {
		purge_table(v, tb->t, tb->seq);
		return;
	}
	uint64_t h = hash_of(tb->t->id, tb->key, tb->klen);
	struct shard *s = shard_of(v, tb->t->id, h, 0);
	struct entry **pp;
	struct gone g;
	int hide;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	pp = find(s, h, tb->t->id, tb->key, tb->klen);
	if ((hide = *pp && (*pp)->seq <= tb->seq))
		unlink_entry(v, s, pp, &g);
	pthread_mutex_unlock(&s->mu);
	if (hide)
		delete_object(v, tb->t, &g.obj, g.p);
}

long vals_rebuild(struct vals *v, const struct kvtd_tenant *const *tenants,
		  size_t n_tenants)
{
	struct found_list l = { 0 };
	struct tomb *tombs = NULL;
	int nt = kvt_store_tiers(v->st);
	long keys = 0;
	uint8_t *buf = malloc(VALS_MAX_KEY + VALS_TRAILER);
	int64_t now = vals_now_ms();
	int rc = buf ? 0 : KVT_ENOMEM;

	for (size_t i = 0; i < n_tenants; i++)
		atomic_store(&v->tenant_of[tenants[i]->id], tenants[i]);
	for (int i = 0; i < nt && rc == 0; i++) {
		l.tier = i;
		if (outlives(v->st, i))
			rc = kvt_store_iterate(v->st, i, collect, &l);
	}
	for (size_t i = 0; i < l.n && rc >= 0; i++) {
		const struct kvtd_tenant *t = NULL;
		struct trailer tr;
		int kind = examine(v, tenants, n_tenants, &l.f[i], buf, &tr, &t);
		struct tomb *tb;

		rc = 0;
		if (kind == OBJ_V1 || kind == OBJ_VAL) {
			rc = adopt(v, t, &l.f[i], &tr, now);
		} else if (kind == OBJ_DEL || kind == OBJ_FLS) {
			if (!(tb = malloc(sizeof(*tb) + tr.klen))) {
				rc = KVT_ENOMEM;
				break;
			}
			*tb = (struct tomb){ tombs, t, l.f[i].key, l.f[i].len, tr.seq, kind,
					     tr.klen };
			memcpy(tb->key, tr.key, tr.klen);
			tombs = tb;
		} else if (kind < 0 && kind != KVT_ENOMEM) {
			kvtd_log(KVTD_LOG_WARN, "rebuild: an object could not be read: %s (%s)",
				 kvt_strerror(kind), kvt_errmsg());
		} else {
			rc = kind;
		}
		if (rc >= 0 && kind > 0 && tr.seq >= atomic_load(&v->seq))
			atomic_store(&v->seq, tr.seq + 1);
	}
	/* Tombstones last: what they hide goes, then they do (no copy of
	 * the process before can land any more); a crash in between finds
	 * them again. */
	for (struct tomb *tb = tombs; tb && rc >= 0; tb = tb->next)
		tomb_apply(v, tb);
	for (struct tomb *tb = tombs, *n; tb; tb = n) {
		n = tb->next;
		if (rc >= 0)
			delete_object(v, tb->t, &tb->name, tb->len);
		free(tb);
	}
	for (size_t i = 0; i < n_tenants; i++)
		keys += (long)vals_count(v, tenants[i]);
	free(buf);
	free(l.f);
	return rc < 0 ? rc : keys;
}
