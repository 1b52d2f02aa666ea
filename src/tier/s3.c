/*
 * s3.c — the S3 tier proper (see s3.h for the contract and docs/S3.md for
 * the operations guide): the existence cache and its refresh, put (single
 * and multipart), get (single and parallel ranges), delete, eviction, GC,
 * the bad list, the vtable and open.  HTTP is s3_http.c, the listing
 * s3_list.c, credentials s3_creds.c, the image buffers s3_buf.c (s3_int.h
 * says what they share).
 *
 * Index: the keys known present with their sizes and times, in the shared
 * index of findex.c (a hash table and a list), under its mutex, which is
 * never held across a network call.  The list is kept in age order (oldest
 * mtime first) rather than use order: eviction and GC take the oldest
 * first, so each victim costs O(1) and a re-listing one sort.  The objects
 * found bad are a second such index, keyed the same way.
 */
#include "tier/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/clock.h"
#include "common/hex.h"
#include "common/log.h"

/* Image buffers come from the tier's cache (t->bufs, s3_buf.c) and go back:
 * a write buffer always, a read image when the answer's headers sized it
 * (pooled), else it was malloc'd. */
typedef struct s3_wbuf {
	kvt_tier_wbuf w;
	struct iovec iov;
	size_t cap;
} s3_wbuf;

typedef struct s3_rbuf {
	kvt_tier_rbuf r;
	struct iovec iov;
	size_t cap;
	int pooled;
	char etag[128];
} s3_rbuf;

static const struct kvt_tier_ops s3_ops;

static int s3_bad_take(s3_tier *t, const kvt_key *k, struct s3_bad *out);
static void s3_bad_put(s3_tier *t, const struct s3_bad *rec);

/* --- names ----------------------------------------------------------------- */

#define s3_hex kvt_hex_encode

/* "<prefix>ab/<64 hex>.kvt" */
static void s3_obj_name(const s3_tier *t, const kvt_key *k, char *out,
			size_t cap)
{
	char hex[S3_HEX + 1];

	s3_hex(k->b, KVT_KEY_BYTES, hex);
	snprintf(out, cap, "%s%.2s/%s.kvt", t->prefix, hex, hex);
}

/* Parse a listed name (prefix already stripped).  0 or -1 (not ours). */
static int s3_parse_name(const char *s, size_t n, kvt_key *k)
{
	size_t i;

	if (n != 2 + 1 + S3_HEX + 4 || s[2] != '/' ||
	    memcmp(s + 3 + S3_HEX, ".kvt", 4) || s[0] != s[3] || s[1] != s[4])
		return -1;
	for (i = 0; i < KVT_KEY_BYTES; i++) {
		int hi = kvt_hex_nibble(s[3 + 2 * i], 0), lo = kvt_hex_nibble(s[4 + 2 * i], 0);
		if (hi < 0 || lo < 0)
			return -1;
		k->b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}
/* --- index (caller holds t->ix.mu) ---------------------------------------- */

static s3_ent *s3_find(const s3_tier *t, const kvt_key *k)
{
	return (s3_ent *)kvt_findex_find_locked(&t->ix, k);
}

/* Age order: oldest mtime first; within one second (S3's mtime grain),
 * listed ones (put_ms 0) before our own puts, these in the order made. */
static int s3_older(const struct kvt_findex_ent *a, const struct kvt_findex_ent *b)
{
	const s3_ent *x = (const s3_ent *)a, *y = (const s3_ent *)b;

	return x->mtime_s < y->mtime_s ||
	       (x->mtime_s == y->mtime_s && x->put_ms < y->put_ms);
}

/* Insert or update.  0 or KVT_ENOMEM. */
static int s3_index_set(s3_tier *t, const kvt_key *k, uint64_t len,
			int64_t mtime_s, int64_t put_ms)
{
	s3_ent *e = s3_find(t, k);

	if (e)
		kvt_findex_remove_locked(&t->ix, &e->fe); /* its place moves */
	else if (!(e = calloc(1, sizeof(*e))))
		return KVT_ENOMEM;
	e->fe.key = *k;
	e->fe.len = e->fe.charge = len;
	e->mtime_s = mtime_s;
	e->put_ms = put_ms;
	kvt_findex_insert_ordered_locked(&t->ix, &e->fe, s3_older);
	return 0;
}

static int s3_index_del(s3_tier *t, const kvt_key *k)
{
	s3_ent *e = s3_find(t, k);

	if (!e)
		return KVT_ENOTFOUND;
	kvt_findex_remove_locked(&t->ix, &e->fe);
	free(e);
	return 0;
}
/* --- HMAC ---------------------------------------------------------------- */

static void s3_hmac_hex(const s3_tier *t, const uint8_t *img, size_t len,
			char out[65])
{
	uint8_t mac[32];
	unsigned int ml = sizeof(mac);

	HMAC(EVP_sha256(), t->hmac_key, (int)t->hmac_key_len, img, len, mac,
	     &ml);
	s3_hex(mac, 32, out);
}

/* Whether `k` is on the bad list (a listing must not bring it back). */
static int s3_is_bad(s3_tier *t, const kvt_key *k)
{
	int found;

	pthread_mutex_lock(&t->ix.mu);
	found = kvt_findex_find_locked(&t->bad, k) != NULL;
	pthread_mutex_unlock(&t->ix.mu);
	return found;
}

/* Whether `k` is listed bad with exactly this ETag; a listed key under
 * another ETag is another object, so its record goes. */
static int s3_bad_same(s3_tier *t, const kvt_key *k, const char *etag)
{
	struct s3_bad *b;
	int same = 0, other = 0;

	pthread_mutex_lock(&t->ix.mu);
	b = (struct s3_bad *)kvt_findex_find_locked(&t->bad, k);
	if (b) {
		same = b->etag[0] && !strcmp(b->etag, etag);
		other = !same;
	}
	pthread_mutex_unlock(&t->ix.mu);
	if (other)
		s3_bad_take(t, k, NULL);
	return same;
}

/* A listing being read: the chunks it names, in the order listed, and
 * what it skipped. */
typedef struct s3_fill {
	s3_tier *t;
	s3_ent **ents;
	size_t n, cap;
	uint64_t foreign, small;
	char example[128], small_example[128];
	uint64_t small_size;
} s3_fill;

static int s3_fill_one(void *arg, const char *name, size_t n, uint64_t size,
		       int64_t mtime_s)
{
	s3_fill *f = arg;
	kvt_key k;
	s3_ent *e;

	if (s3_parse_name(name, n, &k)) {
		if (!f->foreign++)
			snprintf(f->example, sizeof(f->example), "%.*s",
				 (int)(n < 100 ? n : 100), name);
		return 0;
	}
	/* Every valid layout has a payload of at least one byte, so an image
	 * is longer than its header; one larger than the decoder accepts is
	 * refused on read.  Either way lookup must not count it: a hit here
	 * would make the engine skip prefill for a chunk no get can serve. */
	if (size <= KVT_OBJ_HEADER_BYTES ||
	    size > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD) {
		if (!f->small++) {
			snprintf(f->small_example, sizeof(f->small_example), "%.*s",
				 (int)(n < 100 ? n : 100), name);
			f->small_size = size;
		}
		return 0;
	}
	if (s3_is_bad(f->t, &k))
		return 0; /* listed bad: not served, whatever the listing says */
	if (f->n == f->cap) {
		size_t nc = f->cap ? 2 * f->cap : 1024;
		s3_ent **ne = realloc(f->ents, nc * sizeof(*ne));
		if (!ne)
			return KVT_ENOMEM;
		f->ents = ne;
		f->cap = nc;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return KVT_ENOMEM;
	e->fe.key = k;
	e->fe.len = e->fe.charge = size;
	e->mtime_s = mtime_s;
	f->ents[f->n++] = e;
	return 0;
}

static void s3_fill_free(s3_fill *f)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		free(f->ents[i]);
	free(f->ents);
	f->ents = NULL;
	f->n = f->cap = 0;
}

/* Oldest first, ties by key: the order the index keeps. */
static int s3_fill_cmp(const void *a, const void *b)
{
	const s3_ent *x = *(s3_ent *const *)a, *y = *(s3_ent *const *)b;

	if (x->mtime_s != y->mtime_s)
		return x->mtime_s < y->mtime_s ? -1 : 1;
	return memcmp(x->fe.key.b, y->fe.key.b, KVT_KEY_BYTES);
}

static void s3_fill_init(s3_tier *t, s3_fill *f)
{
	memset(f, 0, sizeof(*f));
	f->t = t;
}

/* A listing that failed: the cache stays as it was, since a listing cut
 * short says nothing about what it did not reach. */
static int s3_fill_fail(s3_tier *t, s3_fill *f, int rc)
{
	s3_fill_free(f);
	pthread_mutex_lock(&t->ix.mu);
	t->health.list_rc = rc;
	snprintf(t->health.list_error, sizeof(t->health.list_error), "%s",
		 kvt_errmsg());
	t->health.list_failures++;
	pthread_mutex_unlock(&t->ix.mu);
	return rc;
}

/* A listing that completed (started at monotonic `start`, wall clock
 * `start_s`, `pages` long) becomes the cache: sorted once into age order
 * and indexed aside, then swapped in.  0 or KVT_ENOMEM (the cache then
 * stays as it was). */
static int s3_fill_install(s3_tier *t, s3_fill *f, int64_t start,
			   int64_t start_s, uint64_t pages)
{
	struct kvt_findex fresh;
	struct kvt_findex_ent *o;
	uint64_t count, used;
	size_t i;

	if (kvt_findex_init(&fresh, t->ix.capacity))
		return s3_fill_fail(t, f, KVT_ENOMEM);
	if (f->n)
		qsort(f->ents, f->n, sizeof(*f->ents), s3_fill_cmp);
	for (i = 0; i < f->n; i++) {
		/* An endpoint that lists a name twice is not counted twice. */
		if (kvt_findex_find_locked(&fresh, &f->ents[i]->fe.key))
			free(f->ents[i]);
		else
			kvt_findex_insert_locked(&fresh, &f->ents[i]->fe);
	}
	free(f->ents);
	f->ents = NULL;
	f->n = 0;
	if (f->foreign)
		kvt_log(KVT_LOG_WARN,
			"s3: skipped %" PRIu64 " object(s) under s3://%s/%s that are not kvtier chunks (e.g. '%s')",
			f->foreign, t->bucket, t->prefix, f->example);
	if (f->small)
		kvt_log(KVT_LOG_WARN,
			"s3: skipped %" PRIu64 " object(s) under s3://%s/%s named like chunks whose listed "
			"size rules a chunk out (e.g. '%s', %" PRIu64 " bytes; an image is more than "
			"the %u-byte header)",
			f->small, t->bucket, t->prefix, f->small_example, f->small_size,
			KVT_OBJ_HEADER_BYTES);
	pthread_mutex_lock(&t->ix.mu);
	/* Keep what this tier put while the listing ran: it may be missing
	 * from the pages already read.  Those puts are the newest, so the
	 * walk stops at the first entry older than the listing (a wall clock
	 * stepped back may hide some until the next listing, which has
	 * them). */
	for (o = t->ix.mru; o && ((s3_ent *)o)->mtime_s >= start_s; o = o->older) {
		s3_ent *e = (s3_ent *)o, *x;
		if (e->put_ms < start || kvt_findex_find_locked(&fresh, &o->key))
			continue;
		x = malloc(sizeof(*x));
		if (!x)
			continue;
		*x = *e;
		kvt_findex_insert_ordered_locked(&fresh, &x->fe, s3_older);
	}
	kvt_findex_swap_entries_locked(&t->ix, &fresh);
	count = t->ix.count;
	used = t->ix.used;
	t->health.list_rc = 0;
	t->health.list_error[0] = '\0';
	t->health.lists++;
	t->health.list_pages = pages;
	t->health.skipped_foreign = f->foreign;
	t->health.skipped_size = f->small;
	pthread_mutex_unlock(&t->ix.mu);
	kvt_findex_fini(&fresh); /* the old entries */
	kvt_log(KVT_LOG_INFO, "s3: s3://%s/%s holds %" PRIu64 " chunk(s), %" PRIu64 " bytes",
		t->bucket, t->prefix, count, used);
	return 0;
}

int kvt_s3_refresh(kvt_tier *tier)
{
	s3_tier *t = (s3_tier *)tier;
	s3_fill f;
	int64_t start = s3_now_ms(), start_s = s3_wall_s();
	uint64_t pages = 0;
	int rc;

	if (!kvt_s3_is(tier))
		return kvt_err(KVT_EINVAL, "kvt_s3_refresh: not an S3 tier");
	s3_fill_init(t, &f);
	rc = s3_list(t, s3_fill_one, &f, &pages);
	if (rc)
		return s3_fill_fail(t, &f, rc);
	return s3_fill_install(t, &f, start, start_s, pages);
}

int kvt_s3_refresh_pages(kvt_tier *tier,
			 int (*next)(void *arg, const char **xml, size_t *len),
			 void *arg)
{
	s3_tier *t = (s3_tier *)tier;
	s3_fill f;
	int64_t start = s3_now_ms(), start_s = s3_wall_s();
	char token[S3_TOKEN_MAX], where[S3_NAME_MAX + 64];
	const char *xml;
	size_t len;
	unsigned page = 0;
	int rc = 0, tr = 1;

	if (!kvt_s3_is(tier))
		return kvt_err(KVT_EINVAL, "kvt_s3_refresh_pages: not an S3 tier");
	s3_fill_init(t, &f);
	snprintf(where, sizeof(where), "listing of s3://%s/%s", t->bucket, t->prefix);
	while (!rc && tr && (rc = next(arg, &xml, &len)) == 0)
		rc = kvt_s3_parse_list_page(xml, len, t->prefix, s3_fill_one, &f,
					    &tr, token, sizeof(token), where, ++page);
	if (rc)
		return s3_fill_fail(t, &f, rc);
	return s3_fill_install(t, &f, start, start_s, page);
}

/* The tier's health as one consistent copy. */
static void s3_health_read(s3_tier *t, kvt_s3_status *out)
{
	pthread_mutex_lock(&t->ix.mu);
	*out = t->health;
	pthread_mutex_unlock(&t->ix.mu);
	out->reachable = atomic_load(&t->reachable);
}

int kvt_s3_status_get(kvt_tier *tier, kvt_s3_status *out)
{
	if (!kvt_s3_is(tier) || !out)
		return kvt_err(KVT_EINVAL, "kvt_s3_status_get: not an S3 tier");
	s3_health_read((s3_tier *)tier, out);
	return 0;
}

/* --- delete ---------------------------------------------------------------- */

static int s3_delete_name(s3_tier *t, const char *name)
{
	s3_req r;
	int rc = s3_req_init(t, &r, "DELETE", name, NULL);

	if (!rc)
		rc = s3_one(t, &r, "DELETE");
	s3_req_fini(&r);
	return rc;
}

static int s3_delete_key(s3_tier *t, const kvt_key *k)
{
	char name[S3_NAME_MAX];

	s3_obj_name(t, k, name, sizeof(name));
	return s3_delete_name(t, name);
}

/* Evict the oldest entries until `need` more bytes fit, deleting each from
 * the bucket when `remote`: the victims are taken off the list's old end
 * at once under the lock, and deleted after it is dropped.  Caller holds
 * nothing.  The count evicted. */
static uint64_t s3_evict(s3_tier *t, uint64_t need, int remote)
{
	struct kvt_findex_ent *victims = NULL, *e;
	uint64_t n = 0;

	pthread_mutex_lock(&t->ix.mu);
	kvt_findex_evict_locked(&t->ix, need, NULL, &victims);
	pthread_mutex_unlock(&t->ix.mu);
	while ((e = victims)) {
		victims = e->hnext;
		if (remote && s3_delete_key(t, &e->key) && kvt_errmsg())
			kvt_log(KVT_LOG_WARN, "s3: evict: %s", kvt_errmsg());
		free(e);
		n++;
	}
	return n;
}

static void s3_make_room(s3_tier *t, uint64_t need)
{
	s3_evict(t, need, 1);
}

uint64_t kvt_s3_evict_index(kvt_tier *tier, uint64_t need)
{
	return kvt_s3_is(tier) ? s3_evict((s3_tier *)tier, need, 0) : 0;
}

/* --- ops --------------------------------------------------------------------- */

static int s3_put_begin(kvt_tier *tier, const kvt_key *key, uint64_t len,
			kvt_tier_wbuf **w)
{
	s3_tier *t = (s3_tier *)tier;
	s3_wbuf *b;
	int hit;

	if (len > t->capacity) {
		pthread_mutex_lock(&t->ix.mu);
		t->ix.st.put_rejects++;
		pthread_mutex_unlock(&t->ix.mu);
		return kvt_err(KVT_ETOOBIG, "s3: image of %" PRIu64 " bytes exceeds capacity %" PRIu64,
			       len, t->capacity);
	}
	pthread_mutex_lock(&t->ix.mu);
	hit = s3_find(t, key) != NULL;
	if (hit)
		t->ix.st.put_exists++;
	pthread_mutex_unlock(&t->ix.mu);
	if (hit)
		return KVT_EEXIST;
	b = calloc(1, sizeof(*b));
	if (!b || !(b->iov.iov_base = s3_buf_get(&t->bufs, len, &b->cap))) {
		free(b);
		return KVT_ENOMEM;
	}
	b->iov.iov_len = len;
	b->w.key = *key;
	b->w.len = len;
	b->w.iov = &b->iov;
	b->w.n_iov = 1;
	*w = &b->w;
	return 0;
}

static void s3_put_abort(kvt_tier *tier, kvt_tier_wbuf *w)
{
	s3_wbuf *b = (s3_wbuf *)w;

	s3_buf_put(&((s3_tier *)tier)->bufs, b->iov.iov_base, b->cap);
	free(b);
}

static void s3_img_free(s3_tier *t, uint8_t *img, size_t cap, int pooled)
{
	if (pooled)
		s3_buf_put(&t->bufs, img, cap);
	else
		free(img);
}

static int s3_put_single(s3_tier *t, const char *name, const uint8_t *img,
			 size_t len, const char *hmac, int conditional)
{
	s3_req r;
	int rc = s3_req_init(t, &r, "PUT", name, NULL);

	if (!rc && conditional)
		rc = s3_req_hdr(&r, "If-None-Match: %s", "*");
	if (!rc && hmac)
		rc = s3_req_hdr(&r, "x-amz-meta-kvt-hmac: %s", hmac);
	if (!rc)
		rc = s3_req_hdr(&r, "Content-Type: %s", "application/octet-stream");
	r.up = img;
	r.up_len = len;
	if (!rc)
		rc = s3_one(t, &r, "PUT");
	s3_req_fini(&r);
	return rc;
}

static int s3_put_multipart(s3_tier *t, const char *name, const uint8_t *img,
			    size_t len, const char *hmac, int conditional)
{
	int64_t deadline = s3_now_ms() + t->timeout_ms;
	size_t nparts = (len + t->part_bytes - 1) / t->part_bytes, i;
	char upload_id[512] = "", enc_id[1536], query[2048];
	s3_req r, *parts = NULL, **pp = NULL;
	char *xml = NULL;
	size_t xcap, xl = 0;
	int rc;

	rc = s3_req_init(t, &r, "POST", name, "uploads=");
	if (!rc && hmac)
		rc = s3_req_hdr(&r, "x-amz-meta-kvt-hmac: %s", hmac);
	if (!rc)
		rc = s3_req_hdr(&r, "Content-Type: %s", "application/octet-stream");
	if (!rc)
		rc = s3_run(t, (s3_req *[]){ &r }, 1, deadline);
	if (!rc)
		rc = s3_result(t, &r, "CreateMultipartUpload");
	if (!rc) {
		uint8_t *nb = realloc(r.buf, r.len + 1);
		if (nb) {
			r.buf = nb;
			nb[r.len] = '\0';
			if (s3_xml_tag((char *)nb, "UploadId", upload_id,
				       sizeof(upload_id)) == -2)
				upload_id[0] = '\0'; /* a cut id names no upload */
		}
		if (!upload_id[0])
			rc = kvt_err(-EIO, "S3 CreateMultipartUpload %s: no UploadId in the answer",
				     r.url);
	}
	s3_req_fini(&r);
	if (rc)
		return rc;
	s3_uri_encode(upload_id, enc_id, sizeof(enc_id));

	parts = calloc(nparts, sizeof(*parts));
	pp = calloc(nparts, sizeof(*pp));
	xcap = 128 + nparts * 256;
	xml = malloc(xcap);
	if (!parts || !pp || !xml) {
		rc = KVT_ENOMEM;
		goto abort;
	}
	for (i = 0; i < nparts; i++) {
		size_t off = i * t->part_bytes;
		snprintf(query, sizeof(query), "partNumber=%zu&uploadId=%s",
			 i + 1, enc_id);
		rc = s3_req_init(t, &parts[i], "PUT", name, query);
		if (rc)
			goto abort;
		parts[i].up = img + off;
		parts[i].up_len = len - off < t->part_bytes ? len - off : t->part_bytes;
		pp[i] = &parts[i];
	}
	rc = s3_run(t, pp, (int)nparts, deadline);
	for (i = 0; !rc && i < nparts; i++) {
		rc = s3_result(t, &parts[i], "UploadPart");
		if (!rc && !parts[i].etag[0])
			rc = kvt_err(-EIO, "S3 UploadPart %s: no ETag", parts[i].url);
	}
	if (rc)
		goto abort;
	xl = (size_t)snprintf(xml, xcap, "<CompleteMultipartUpload>");
	for (i = 0; i < nparts; i++)
		xl += (size_t)snprintf(xml + xl, xcap - xl,
				       "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>",
				       i + 1, parts[i].etag);
	xl += (size_t)snprintf(xml + xl, xcap - xl, "</CompleteMultipartUpload>");
	snprintf(query, sizeof(query), "uploadId=%s", enc_id);
	rc = s3_req_init(t, &r, "POST", name, query);
	if (!rc && conditional)
		rc = s3_req_hdr(&r, "If-None-Match: %s", "*");
	if (!rc)
		rc = s3_req_hdr(&r, "Content-Type: %s", "application/xml");
	r.up = (const uint8_t *)xml;
	r.up_len = xl;
	if (!rc)
		rc = s3_run(t, (s3_req *[]){ &r }, 1, deadline);
	if (!rc)
		rc = s3_result(t, &r, "CompleteMultipartUpload");
	if (!rc && r.errlen == 0 && r.buf) {
		/* A 200 can still carry an <Error> body. */
		uint8_t *nb = realloc(r.buf, r.len + 1);
		if (nb) {
			r.buf = nb;
			nb[r.len] = '\0';
			if (strstr((char *)nb, "<Error>")) {
				char code[64] = "";
				s3_xml_tag((char *)nb, "Code", code, sizeof(code));
				rc = !strcmp(code, "PreconditionFailed")
					     ? KVT_EEXIST
					     : kvt_err(-EIO, "S3 CompleteMultipartUpload %s: %s",
						       r.url, code);
			}
		}
	}
	s3_req_fini(&r);
abort:
	if (rc) {
		int saved = rc;
		s3_req a;
		snprintf(query, sizeof(query), "uploadId=%s", enc_id);
		if (!s3_req_init(t, &a, "DELETE", name, query))
			s3_one(t, &a, "AbortMultipartUpload");
		s3_req_fini(&a);
		rc = saved;
	}
	for (i = 0; parts && i < nparts; i++)
		s3_req_fini(&parts[i]);
	free(parts);
	free(pp);
	free(xml);
	return rc;
}

static int s3_put_commit(kvt_tier *tier, kvt_tier_wbuf *w, int durability)
{
	s3_tier *t = (s3_tier *)tier;
	s3_wbuf *b = (s3_wbuf *)w;
	char name[S3_NAME_MAX], mac[65];
	const uint8_t *img = b->iov.iov_base;
	size_t len = b->iov.iov_len;
	struct s3_bad bad;
	int rc, replace;

	(void)durability; /* S3 acknowledges only durable writes */
	/* A damaged object under the key is the writer's to replace: write
	 * without the first-writer condition, which it would otherwise win. */
	replace = s3_bad_take(t, &w->key, &bad);
	if (replace && !bad.proven) {
		s3_bad_put(t, &bad); /* not ours to replace: stays listed */
		replace = 0;
	}
	s3_obj_name(t, &w->key, name, sizeof(name));
	if (t->hmac_key)
		s3_hmac_hex(t, img, len, mac);
	if (t->capacity != UINT64_MAX)
		s3_make_room(t, len);
	if (len <= t->multipart_bytes)
		rc = s3_put_single(t, name, img, len, t->hmac_key ? mac : NULL, !replace);
	else
		rc = s3_put_multipart(t, name, img, len, t->hmac_key ? mac : NULL, !replace);
	pthread_mutex_lock(&t->ix.mu);
	if (!rc) {
		s3_index_set(t, &w->key, len, s3_wall_s(), s3_now_ms());
		t->ix.st.puts++;
		t->ix.st.bytes_in += len;
	} else if (rc == KVT_EEXIST) {
		/* Someone else won: the key is present. */
		s3_index_set(t, &w->key, len, s3_wall_s(), 0);
		t->ix.st.put_exists++;
	} else {
		t->ix.st.write_errors++;
	}
	pthread_mutex_unlock(&t->ix.mu);
	s3_put_abort(tier, w);
	return rc;
}

static void s3_forget(s3_tier *t, const kvt_key *k)
{
	pthread_mutex_lock(&t->ix.mu);
	s3_index_del(t, k);
	pthread_mutex_unlock(&t->ix.mu);
}

/* Take the record of `k` off the bad list into *out (may be NULL); 1 if
 * there was one. */
static int s3_bad_take(s3_tier *t, const kvt_key *k, struct s3_bad *out)
{
	struct s3_bad *b;

	pthread_mutex_lock(&t->ix.mu);
	b = (struct s3_bad *)kvt_findex_find_locked(&t->bad, k);
	if (b)
		kvt_findex_remove_locked(&t->bad, &b->fe);
	pthread_mutex_unlock(&t->ix.mu);
	if (b && out)
		*out = *b;
	free(b);
	return b != NULL;
}

/* Put a record on the bad list as its newest, replacing one of the same
 * key (best effort: without memory it is only not listed). */
static void s3_bad_put(s3_tier *t, const struct s3_bad *rec)
{
	struct s3_bad *b = malloc(sizeof(*b)), *old;

	if (!b)
		return;
	*b = *rec;
	b->fe.len = b->fe.charge = 0;
	pthread_mutex_lock(&t->ix.mu);
	old = (struct s3_bad *)kvt_findex_find_locked(&t->bad, &b->fe.key);
	if (old)
		kvt_findex_remove_locked(&t->bad, &old->fe);
	kvt_findex_insert_locked(&t->bad, &b->fe);
	pthread_mutex_unlock(&t->ix.mu);
	free(old);
}

/* An object that is not a valid image of its key: no longer served,
 * counted, logged, listed, and left in the bucket; other nodes share it,
 * and only what is damaged (not a tag this node cannot check) may be
 * replaced or repaired away. */
static void s3_count_corrupt(s3_tier *t, const kvt_key *k, const char *name,
			     const char *why, int proven, const char *etag)
{
	struct s3_bad b;

	memset(&b, 0, sizeof(b));
	b.fe.key = *k;
	b.proven = proven;
	snprintf(b.etag, sizeof(b.etag), "%s", etag ? etag : "");
	snprintf(b.why, sizeof(b.why), "%s", why);
	s3_bad_take(t, k, NULL);
	pthread_mutex_lock(&t->ix.mu);
	t->ix.st.corrupt++;
	s3_index_del(t, k);
	pthread_mutex_unlock(&t->ix.mu);
	s3_bad_put(t, &b);
	kvt_log(KVT_LOG_WARN, "s3: s3://%s/%s is not a valid image (%s): not served, left in place",
		t->bucket, name, why);
}

/* The rest of an image of `total` bytes whose first `got` bytes the first
 * GET brought, into img: parallel ranged GETs of part_bytes each, every
 * one held to the first's ETag (never two versions stitched: a miss). */
static int s3_get_rest(s3_tier *t, const char *name, const s3_req *first, uint8_t *img,
		       uint64_t got, uint64_t total, int64_t deadline)
{
	size_t nr = (total - got + t->part_bytes - 1) / t->part_bytes, i;
	s3_req *rs = calloc(nr, sizeof(*rs)), **rp = calloc(nr, sizeof(*rp));
	char range[64];
	int rc = rs && rp ? 0 : KVT_ENOMEM;

	for (i = 0; !rc && i < nr; i++) {
		uint64_t a = got + i * t->part_bytes;
		uint64_t z = a + t->part_bytes > total ? total : a + t->part_bytes;
		rc = s3_req_init(t, &rs[i], "GET", name, NULL);
		snprintf(range, sizeof(range), "Range: bytes=%" PRIu64 "-%" PRIu64, a, z - 1);
		if (!rc)
			rc = s3_req_hdr(&rs[i], "%s", range);
		if (!rc && first->etag[0])
			rc = s3_req_hdr(&rs[i], "If-Match: %s", first->etag);
		rs[i].dst = img + a;
		rs[i].dst_cap = z - a;
		rp[i] = &rs[i];
	}
	if (!rc)
		rc = s3_run(t, rp, (int)nr, deadline);
	for (i = 0; !rc && i < nr; i++) {
		rc = s3_result(t, &rs[i], "GET range");
		if (rc == KVT_EEXIST || rc == KVT_ENOTFOUND) {
			/* 412: replaced between our ranges; never stitch two
			 * versions: a miss. */
			rc = kvt_err(KVT_ENOTFOUND, "s3: %s changed during a ranged read", name);
		} else if (!rc && rs[i].etag[0] && first->etag[0] &&
			   strcmp(rs[i].etag, first->etag)) {
			rc = kvt_err(KVT_ENOTFOUND, "s3: %s: range %zu is of another version", name, i);
		} else if (!rc && rs[i].len != rs[i].dst_cap) {
			/* The endpoint answered 2xx with fewer bytes than
			 * asked: its fault, not a miss. */
			rc = kvt_err(-EIO,
				     "S3 GET range of s3://%s/%s at %s: range %zu holds %zu of %zu bytes",
				     t->bucket, name, t->endpoint, i, rs[i].len, rs[i].dst_cap);
		}
	}
	for (i = 0; rs && i < nr; i++)
		s3_req_fini(&rs[i]);
	free(rs);
	free(rp);
	return rc;
}

/* Whether the image of `total` bytes the GET of `name` brought is the
 * chunk of `key`, whole and (with an object key) signed: 0, or the error
 * (KVT_ECORRUPT counted against the object, -EIO for an answer cut short
 * without a Content-Length: not proof of damage). */
static int s3_check_image(s3_tier *t, const kvt_key *key, const char *name,
			  const s3_req *first, const uint8_t *img, uint64_t total)
{
	kvt_obj_hdr h;
	int rc = kvt_obj_hdr_decode(img, total, &h);

	if (first->status == 200 && first->clen < 0 &&
	    (rc == KVT_ETRUNCATED ||
	     (!rc && (uint64_t)h.header_len + h.payload_len > total))) {
		/* No Content-Length to tell a cut connection from a short
		 * object: never data, but not proof of corruption either, so
		 * the object is not deleted. */
		return kvt_err(-EIO,
			       "S3 GET of s3://%s/%s at %s: answer ended after %" PRIu64
			       " bytes without a Content-Length, shorter than the image",
			       t->bucket, name, t->endpoint, total);
	}
	if (rc) {
		s3_count_corrupt(t, key, name, kvt_strerror(rc),
				 rc != KVT_EVERSION && rc != KVT_EBADMAGIC, first->etag);
		return KVT_ECORRUPT;
	}
	if (memcmp(h.key.b, key->b, KVT_KEY_BYTES) ||
	    (uint64_t)h.header_len + h.payload_len != total) {
		s3_count_corrupt(t, key, name, "key or length mismatch", 1, first->etag);
		return KVT_ECORRUPT;
	}
	if (t->hmac_key) {
		char mac[65];
		s3_hmac_hex(t, img, total, mac);
		if (strcmp(mac, first->hmac)) {
			s3_count_corrupt(t, key, name,
					 "HMAC tag does not verify under this node's key", 0,
					 first->etag);
			return KVT_ECORRUPT;
		}
	}
	return 0;
}

static int s3_get(kvt_tier *tier, const kvt_key *key, kvt_tier_rbuf **out)
{
	s3_tier *t = (s3_tier *)tier;
	int64_t deadline = s3_now_ms() + t->timeout_ms;
	char name[S3_NAME_MAX], range[64];
	s3_req first;
	s3_rbuf *rb = NULL;
	uint8_t *img = NULL;
	uint64_t total, got;
	size_t img_cap = 0;
	int rc, img_pooled = 0;

	/* A key listed bad is read again: another node may have replaced
	 * the object since (the index, and so lookup, leaves it out). */
	s3_obj_name(t, key, name, sizeof(name));
	rc = s3_req_init(t, &first, "GET", name, NULL);
	first.pool = &t->bufs;
	/* One request moves objects up to multipart_bytes; a larger one
	 * answers 206 with its total and the rest comes as parallel ranges. */
	{
		uint64_t first_len = t->multipart_bytes, known = 0;
		s3_ent *e;
		pthread_mutex_lock(&t->ix.mu);
		e = s3_find(t, key);
		if (e)
			known = e->fe.len;
		pthread_mutex_unlock(&t->ix.mu);
		if (known > t->multipart_bytes)
			first_len = t->part_bytes; /* known large: all parallel */
		snprintf(range, sizeof(range), "Range: bytes=0-%" PRIu64, first_len - 1);
	}
	if (!rc)
		rc = s3_req_hdr(&first, "%s", range);
	if (!rc)
		rc = s3_run(t, (s3_req *[]){ &first }, 1, deadline);
	if (!rc)
		rc = s3_result(t, &first, "GET");
	if (rc) {
		if (rc == KVT_ENOTFOUND)
			s3_forget(t, key);
		goto out;
	}
	if (first.etag[0] && s3_bad_same(t, key, first.etag)) {
		/* The very object found bad before (by this tier or by the
		 * store's check): not handed out again.  Another ETag is another
		 * object, judged afresh. */
		rc = kvt_err(KVT_ECORRUPT, "s3: s3://%s/%s (ETag %s) was found bad before",
			     t->bucket, name, first.etag);
		goto out;
	}
	got = first.len;
	total = first.status == 206 && first.has_total ? first.total : got;
	if (total > KVT_OBJ_HEADER_BYTES + KVT_OBJ_MAX_PAYLOAD || got > total) {
		s3_count_corrupt(t, key, name, "impossible length", 1, first.etag);
		rc = KVT_ECORRUPT;
		goto out;
	}
	if (got < total) {
		if (first.cap >= total) { /* sized from Content-Range */
			img = first.buf;
			img_cap = first.cap;
			img_pooled = first.pooled;
			first.buf = NULL;
			first.pooled = 0;
		} else {
			img = s3_buf_get(&t->bufs, total, &img_cap);
			if (!img) {
				rc = KVT_ENOMEM;
				goto out;
			}
			img_pooled = 1;
			memcpy(img, first.buf, got);
		}
		if ((rc = s3_get_rest(t, name, &first, img, got, total, deadline)))
			goto out;
	} else {
		img = first.buf;
		img_cap = first.cap;
		img_pooled = first.pooled;
		first.buf = NULL;
		first.pooled = 0;
	}
	if ((rc = s3_check_image(t, key, name, &first, img, total)))
		goto out;
	rb = calloc(1, sizeof(*rb));
	if (!rb) {
		rc = KVT_ENOMEM;
		goto out;
	}
	rb->iov.iov_base = img;
	rb->iov.iov_len = total;
	rb->cap = img_cap;
	rb->pooled = img_pooled;
	rb->r.key = *key;
	rb->r.len = total;
	rb->r.iov = &rb->iov;
	rb->r.n_iov = 1;
	snprintf(rb->etag, sizeof(rb->etag), "%s", first.etag);
	img = NULL;
	*out = &rb->r;
	atomic_fetch_add(&t->borrowed, 1);
	pthread_mutex_lock(&t->ix.mu);
	t->ix.st.hits++;
	t->ix.st.bytes_out += total;
	if (!s3_find(t, key))
		s3_index_set(t, key, total, s3_wall_s(), 0);
	pthread_mutex_unlock(&t->ix.mu);
out:
	if (rc) {
		/* A miss is a miss; a failure to read is counted apart, so
		 * that a dead endpoint does not look like a cold cache. */
		pthread_mutex_lock(&t->ix.mu);
		if (rc == KVT_ENOTFOUND || rc == KVT_ECORRUPT)
			t->ix.st.misses++;
		else
			t->health.read_errors++;
		pthread_mutex_unlock(&t->ix.mu);
	}
	s3_img_free(t, img, img_cap, img_pooled);
	s3_req_fini(&first);
	return rc;
}

static void s3_release(kvt_tier *tier, kvt_tier_rbuf *r)
{
	s3_tier *t = (s3_tier *)tier;
	s3_rbuf *rb = (s3_rbuf *)r;

	s3_img_free(t, rb->iov.iov_base, rb->cap, rb->pooled);
	free(rb);
	atomic_fetch_sub(&t->borrowed, 1);
}

static int s3_exists(kvt_tier *tier, const kvt_key *key)
{
	return kvt_findex_exists(&((s3_tier *)tier)->ix, key);
}

static int s3_del(kvt_tier *tier, const kvt_key *key)
{
	s3_tier *t = (s3_tier *)tier;
	int known, rc;

	pthread_mutex_lock(&t->ix.mu);
	known = s3_index_del(t, key) == 0;
	pthread_mutex_unlock(&t->ix.mu);
	rc = s3_delete_key(t, key);
	/* S3 answers 204 for absent keys too: the index decides. */
	if (rc)
		return rc == KVT_ENOTFOUND ? KVT_ENOTFOUND : rc;
	return known ? 0 : KVT_ENOTFOUND;
}

static int s3_iterate(kvt_tier *tier,
		      int (*fn)(void *arg, const kvt_key *key, uint64_t len),
		      void *arg)
{
	return kvt_findex_iterate(&((s3_tier *)tier)->ix, "s3", fn, arg);
}

static void s3_stats(kvt_tier *tier, kvt_tier_stats *out)
{
	s3_tier *t = (s3_tier *)tier;

	kvt_findex_stats(&t->ix, out, "s3", atomic_load(&t->borrowed));
	pthread_mutex_lock(&t->ix.mu);
	out->capacity_bytes = t->capacity;
	out->bad_listed = t->bad.count;
	pthread_mutex_unlock(&t->ix.mu);
	{
		kvt_s3_status h;
		s3_health_read(t, &h);
		out->unreachable = !h.reachable;
		out->read_errors = h.read_errors;
		if (h.list_rc)
		{
			/* The listing's sentence, cut to fit. */
			memcpy(out->state, h.list_error, sizeof(out->state) - 1);
			out->state[sizeof(out->state) - 1] = '\0';
		}
		else if (!h.reachable)
			snprintf(out->state, sizeof(out->state), "endpoint not answering");
	}
}

static void s3_corrupt(kvt_tier *tier, kvt_tier_rbuf *r)
{
	s3_tier *t = (s3_tier *)tier;
	char name[S3_NAME_MAX];

	s3_obj_name(t, &r->key, name, sizeof(name));
	s3_count_corrupt(t, &r->key, name, kvt_errmsg()[0] ? kvt_errmsg() : "payload checksum", 1,
			 ((s3_rbuf *)r)->etag);
}

static int s3_bad_iterate(kvt_tier *tier,
			  int (*fn)(void *arg, const kvt_key *key, const char *where,
				    int proven, const char *why),
			  void *arg)
{
	s3_tier *t = (s3_tier *)tier;
	struct s3_bad *items = NULL;
	struct kvt_findex_ent *b;
	size_t n, i = 0;
	int rc = 0;

	pthread_mutex_lock(&t->ix.mu);
	n = t->bad.count;
	if (n && (items = malloc(n * sizeof(*items))))
		for (b = t->bad.lru; b; b = b->newer) /* oldest first */
			items[i++] = *(struct s3_bad *)b;
	pthread_mutex_unlock(&t->ix.mu);
	if (n && !items)
		return kvt_err(KVT_ENOMEM, "s3: no memory to list bad objects");
	for (i = 0; i < n && !rc; i++) {
		char name[S3_NAME_MAX], where[S3_NAME_MAX + 600];
		s3_obj_name(t, &items[i].fe.key, name, sizeof(name));
		snprintf(where, sizeof(where), "s3://%s/%s", t->bucket, name);
		rc = fn(arg, &items[i].fe.key, where, items[i].proven, items[i].why);
	}
	free(items);
	return rc;
}

static int s3_repair(kvt_tier *tier, const kvt_key *key)
{
	s3_tier *t = (s3_tier *)tier;
	char name[S3_NAME_MAX];
	struct s3_bad b;
	int rc;

	if (!s3_bad_take(t, key, &b))
		return KVT_ENOTFOUND;
	s3_obj_name(t, key, name, sizeof(name));
	if (!b.proven) {
		s3_bad_put(t, &b);
		return kvt_err(KVT_ENOTSUP, "s3: s3://%s/%s left in place: another node may read it",
			       t->bucket, name);
	}
	rc = s3_delete_name(t, name);
	if (rc && rc != KVT_ENOTFOUND) {
		s3_bad_put(t, &b);
		return rc;
	}
	kvt_log(KVT_LOG_WARN, "s3: deleted damaged s3://%s/%s (repair)", t->bucket, name);
	return 0;
}

static void s3_close(kvt_tier *tier)
{
	s3_tier *t = (s3_tier *)tier;
	int j;

	if (!t)
		return;
	if (t->has_refresher) {
		pthread_mutex_lock(&t->stop_mu);
		t->stopping = 1;
		pthread_cond_signal(&t->stop_cv);
		pthread_mutex_unlock(&t->stop_mu);
		pthread_join(t->refresher, NULL);
	}
	s3_http_close(t);
	for (j = 0; j < CURL_LOCK_DATA_LAST; j++)
		pthread_mutex_destroy(&t->share_mu[j]);
	curl_slist_free_all(t->common);
	kvt_findex_fini(&t->ix);
	kvt_findex_fini(&t->bad);
	s3_bufs_fini(&t->bufs); /* every image given back by now */
	pthread_mutex_destroy(&t->pool_mu);
	pthread_cond_destroy(&t->pool_cv);
	pthread_mutex_destroy(&t->stop_mu);
	pthread_cond_destroy(&t->stop_cv);
	free(t->pool);
	free(t->endpoint);
	free(t->region);
	free(t->bucket);
	free(t->prefix);
	free(t->base_url);
	free(t->user);
	if (t->secret)
		OPENSSL_cleanse(t->secret, strlen(t->secret));
	free(t->secret);
	free(t->sigv4);
	if (t->hmac_key)
		OPENSSL_cleanse(t->hmac_key, t->hmac_key_len);
	free(t->hmac_key);
	free(t);
}

static const struct kvt_tier_ops s3_ops = {
	.name = "s3",
	.put_begin = s3_put_begin,
	.put_commit = s3_put_commit,
	.put_abort = s3_put_abort,
	.get = s3_get,
	.release = s3_release,
	.exists = s3_exists,
	.del = s3_del,
	.iterate = s3_iterate,
	.stats = s3_stats,
	.corrupt = s3_corrupt,
	.bad_iterate = s3_bad_iterate,
	.repair = s3_repair,
	.close = s3_close,
};

int kvt_s3_is(const kvt_tier *t)
{
	return t && t->ops == &s3_ops;
}

/* --- lifecycle --------------------------------------------------------------- */

int kvt_s3_gc(kvt_tier *tier, uint64_t max_age_s, uint64_t budget_bytes,
	      uint64_t *deleted)
{
	s3_tier *t = (s3_tier *)tier;
	uint64_t n = 0;
	int64_t now = s3_wall_s();
	int rc;

	if (!kvt_s3_is(tier))
		return kvt_err(KVT_EINVAL, "kvt_s3_gc: not an S3 tier");
	rc = kvt_s3_refresh(tier);
	if (rc)
		return rc;
	for (;;) {
		s3_ent *victim;
		kvt_key k;

		/* Oldest first, off the list's old end: O(1) a victim. */
		pthread_mutex_lock(&t->ix.mu);
		victim = (s3_ent *)t->ix.lru;
		if (!victim ||
		    !((max_age_s && now - victim->mtime_s > (int64_t)max_age_s) ||
		      (budget_bytes && t->ix.used > budget_bytes))) {
			pthread_mutex_unlock(&t->ix.mu);
			break;
		}
		k = victim->fe.key;
		t->ix.st.evictions++;
		t->ix.st.evicted_bytes += victim->fe.len;
		kvt_findex_remove_locked(&t->ix, &victim->fe);
		pthread_mutex_unlock(&t->ix.mu);
		free(victim);
		rc = s3_delete_key(t, &k);
		if (rc && rc != KVT_ENOTFOUND)
			break;
		rc = 0;
		n++;
	}
	if (deleted)
		*deleted = n;
	return rc;
}

int kvt_s3_put_raw(kvt_tier *tier, const char *name, const void *data,
		   size_t len)
{
	s3_tier *t = (s3_tier *)tier;
	char full[S3_NAME_MAX];

	if (!kvt_s3_is(tier))
		return kvt_err(KVT_EINVAL, "kvt_s3_put_raw: not an S3 tier");
	snprintf(full, sizeof(full), "%s%s", t->prefix, name);
	return s3_put_single(t, full, data, len, NULL, 0);
}

static void *s3_refresh_main(void *arg)
{
	s3_tier *t = arg;

	pthread_mutex_lock(&t->stop_mu);
	while (!t->stopping) {
		struct timespec ts = kvt_deadline_after((int64_t)t->refresh_s * 1000);
		pthread_cond_timedwait(&t->stop_cv, &t->stop_mu, &ts);
		if (t->stopping)
			break;
		pthread_mutex_unlock(&t->stop_mu);
		if (kvt_s3_refresh(&t->base))
			kvt_log(KVT_LOG_WARN, "s3: background re-list: %s",
				kvt_errmsg());
		pthread_mutex_lock(&t->stop_mu);
	}
	pthread_mutex_unlock(&t->stop_mu);
	return NULL;
}
/* --- open -------------------------------------------------------------------- */

static int s3_valid_prefix(const char *p)
{
	for (; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("-_.~/", *p))
			return 0;
	return 1;
}

/* The options an S3 tier cannot open with: 0, or KVT_EINVAL naming it. */
static int s3_opts_check(const kvt_s3_opts *o)
{
	if (!o->bucket || !*o->bucket)
		return kvt_err(KVT_EINVAL, "s3: a bucket is required");
	if (o->prefix && !s3_valid_prefix(o->prefix))
		return kvt_err(KVT_EINVAL,
			       "s3: prefix '%s' has characters outside [A-Za-z0-9._~/-]",
			       o->prefix);
	if (strspn(o->bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") !=
	    strlen(o->bucket))
		return kvt_err(KVT_EINVAL, "s3: bucket name '%s' is not valid",
			       o->bucket);
	if (o->multipart_bytes && o->multipart_bytes < S3_MIN_PART)
		return kvt_err(KVT_EINVAL, "s3: multipart_bytes %" PRIu64 " below 1 MiB",
			       o->multipart_bytes);
	if (o->part_bytes && o->part_bytes < S3_MIN_PART)
		return kvt_err(KVT_EINVAL, "s3: part_bytes %" PRIu64 " below 1 MiB",
			       o->part_bytes);
	return 0;
}

/* The endpoint (AWS's for the region when none is given), the bucket's
 * URL (path-style or virtual-hosted), the SigV4 scope and the headers
 * every request carries (the session token's among them).  0, or the
 * error. */
static int s3_urls(s3_tier *t, const kvt_s3_opts *o, const char *token)
{
	char buf[S3_URL_MAX];
	const char *ep;

	if (o->endpoint && *o->endpoint) {
		t->endpoint = strdup(o->endpoint);
	} else {
		snprintf(buf, sizeof(buf), "https://s3.%s.amazonaws.com", t->region);
		t->endpoint = strdup(buf);
	}
	if (!t->endpoint)
		return KVT_ENOMEM;
	{
		size_t l = strlen(t->endpoint);
		while (l && t->endpoint[l - 1] == '/')
			t->endpoint[--l] = '\0';
	}
	ep = strstr(t->endpoint, "://");
	if (!ep)
		return kvt_err(KVT_EINVAL, "s3: endpoint '%s' needs http:// or https://",
			       t->endpoint);
	if (o->path_style)
		snprintf(buf, sizeof(buf), "%s/%s", t->endpoint, t->bucket);
	else
		snprintf(buf, sizeof(buf), "%.*s%s.%s", (int)(ep + 3 - t->endpoint),
			 t->endpoint, t->bucket, ep + 3);
	t->base_url = strdup(buf);
	snprintf(buf, sizeof(buf), "aws:amz:%s:s3", t->region);
	t->sigv4 = strdup(buf);
	t->common = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (t->common && token) {
		/* Session tokens have no stated maximum length: never cut one. */
		size_t hl = strlen(token) + sizeof("x-amz-security-token: ");
		char *h = malloc(hl);
		if (h) {
			snprintf(h, hl, "x-amz-security-token: %s", token);
			t->common = curl_slist_append(t->common, h);
			OPENSSL_cleanse(h, hl);
		}
		free(h);
		if (!h) {
			curl_slist_free_all(t->common);
			t->common = NULL;
		}
	}
	return 0;
}

int kvt_s3_open(const kvt_s3_opts *o, kvt_tier **out)
{
	s3_tier *t;
	char *token = NULL;
	int rc, j;

	if (!o || !out)
		return kvt_err(KVT_EINVAL, "s3: a bucket is required");
	if ((rc = s3_opts_check(o)))
		return rc;
	if ((rc = s3_http_global_init()))
		return rc;
	t = calloc(1, sizeof(*t));
	if (!t)
		return KVT_ENOMEM;
	t->base.ops = &s3_ops;
	pthread_mutex_init(&t->pool_mu, NULL);
	kvt_cond_init_mono(&t->pool_cv);
	pthread_mutex_init(&t->stop_mu, NULL);
	kvt_cond_init_mono(&t->stop_cv);
	for (j = 0; j < CURL_LOCK_DATA_LAST; j++)
		pthread_mutex_init(&t->share_mu[j], NULL);
	t->capacity = o->capacity ? o->capacity : UINT64_MAX;
	t->part_bytes = o->part_bytes ? o->part_bytes : 8ull << 20;
	t->multipart_bytes = o->multipart_bytes ? o->multipart_bytes : 64ull << 20;
	t->max_parallel = o->max_parallel ? o->max_parallel : 16;
	t->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
	t->retries = o->retries > 0 ? o->retries : (o->retries < 0 ? 0 : 5);
	t->refresh_s = o->refresh_s;
	t->list_timeout_ms = o->list_timeout_ms > 0
				     ? o->list_timeout_ms
				     : (t->timeout_ms > INT32_MAX / S3_LIST_TIMEOUT_MULT
						? INT32_MAX
						: t->timeout_ms * S3_LIST_TIMEOUT_MULT);
	t->list_max_pages = o->list_max_pages ? o->list_max_pages : S3_LIST_PAGES;
	atomic_init(&t->reachable, 1);
	t->path_style = o->path_style;
	t->pool = calloc(t->max_parallel, sizeof(*t->pool));
	t->bucket = strdup(o->bucket);
	t->prefix = strdup(o->prefix ? o->prefix : "");
	if (kvt_findex_init(&t->ix, t->capacity) || kvt_findex_init(&t->bad, UINT64_MAX) ||
	    s3_bufs_init(&t->bufs) ||
	    !t->pool || !t->bucket || !t->prefix) {
		rc = KVT_ENOMEM;
		goto fail;
	}
	if (o->hmac_key && o->hmac_key_len) {
		t->hmac_key = malloc(o->hmac_key_len);
		if (!t->hmac_key) {
			rc = KVT_ENOMEM;
			goto fail;
		}
		memcpy(t->hmac_key, o->hmac_key, o->hmac_key_len);
		t->hmac_key_len = o->hmac_key_len;
	}
	rc = s3_credentials(t, o, &token);
	if (rc)
		goto fail;
	rc = s3_urls(t, o, token);
	free(token);
	token = NULL;
	if (rc)
		goto fail;
	if (!t->base_url || !t->sigv4 || !t->common || s3_http_share_init(t)) {
		rc = KVT_ENOMEM;
		goto fail;
	}

	rc = kvt_s3_refresh(&t->base);
	if (rc == -EACCES || rc == KVT_EINVAL || rc == KVT_ECONFIG) {
		/* Wrong credentials, a missing bucket, a request the
		 * endpoint refuses: no retry later will fix these. */
		rc = rc == -EACCES ? rc : KVT_ECONFIG;
		kvt_err_prefix(rc, "s3 open: ");
		goto fail;
	}
	if (rc) {
		/* The store keeps serving from its other tiers, so the open
		 * goes on; but an empty cache here is not an empty bucket,
		 * and the log says so in so many words. */
		int down = rc == -ECONNREFUSED || rc == -EHOSTUNREACH ||
			   rc == KVT_ETIMEDOUT;
		kvt_log(KVT_LOG_ERROR,
			"s3: s3://%s/%s %s at open: %s. The tier is shown empty (nothing listed, "
			"not known to be empty) until a listing succeeds%s",
			t->bucket, t->prefix,
			down ? "is UNREACHABLE" : "could not be listed", kvt_errmsg(),
			down ? "; reads and writes fail until the endpoint answers" : "");
		kvt_err_clear();
	}
	if (t->refresh_s > 0) {
		if (pthread_create(&t->refresher, NULL, s3_refresh_main, t) == 0)
			t->has_refresher = 1;
	}
	*out = &t->base;
	return 0;
fail:
	free(token);
	s3_close(&t->base);
	return rc;
}
