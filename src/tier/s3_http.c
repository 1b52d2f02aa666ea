/*
 * s3_http.c — the S3 tier's requests (s3_int.h).
 *
 * Every request goes through s3_run(), which drives a batch of
 * requests on one curl multi handle.  Easy handles come from a pool bounded
 * by max_parallel (connections in flight across all callers), and every easy
 * handle shares one connection cache (CURLSH with CURL_LOCK_DATA_CONNECT),
 * so connections are reused across calls and threads.  Signing is libcurl's
 * CURLOPT_AWS_SIGV4 ("aws:amz:REGION:s3").  curl 7.88 (Debian 12) neither
 * adds x-amz-content-sha256 nor sorts or encodes the query string: we send
 * x-amz-content-sha256: UNSIGNED-PAYLOAD on every request (each image
 * carries its own checksums, and AWS accepts unsigned payloads) and build
 * every query string already sorted and percent-encoded.  Verified against
 * @20minutes/s3rver, which checks signatures.
 *
 * A request is retried (exponential backoff, full jitter) on curl errors
 * (connect, timeout, truncated body), 5xx and 429, while the caller's
 * deadline allows; each attempt's CURLOPT_TIMEOUT_MS is what is left of it.
 * s3_result() turns the final outcome into one code of the taxonomy in s3.h
 * and a sentence naming the operation, the object, the endpoint and what
 * happened; only a 404 NoSuchKey is a miss, because the store above goes on
 * to recompute on a miss and must not mistake a dead endpoint for one.
 */
#include "tier/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <expat.h>

#include "common/clock.h"
#include "common/log.h"

void s3_uri_encode(const char *s, char *out, size_t cap)
{
	static const char digits[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s && o + 4 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = digits[c >> 4];
			out[o++] = digits[c & 15];
		}
	}
	out[o] = '\0';
}

static pthread_once_t s3_curl_once = PTHREAD_ONCE_INIT;
static int s3_curl_rc;

static void s3_curl_init(void)
{
	s3_curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT) ? -1 : 0;
}

int s3_http_global_init(void)
{
	pthread_once(&s3_curl_once, s3_curl_init);
	return s3_curl_rc ? kvt_err(KVT_ENOMEM, "s3: curl_global_init failed") : 0;
}

static void s3_share_lock(CURL *h, curl_lock_data d, curl_lock_access a,
			  void *u)
{
	s3_tier *t = u;

	(void)h;
	(void)a;
	pthread_mutex_lock(&t->share_mu[d]);
}

static void s3_share_unlock(CURL *h, curl_lock_data d, void *u)
{
	s3_tier *t = u;

	(void)h;
	pthread_mutex_unlock(&t->share_mu[d]);
}

int s3_http_share_init(s3_tier *t)
{
	t->share = curl_share_init();
	if (!t->share)
		return KVT_ENOMEM;
	curl_share_setopt(t->share, CURLSHOPT_LOCKFUNC, s3_share_lock);
	curl_share_setopt(t->share, CURLSHOPT_UNLOCKFUNC, s3_share_unlock);
	curl_share_setopt(t->share, CURLSHOPT_USERDATA, t);
	curl_share_setopt(t->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	curl_share_setopt(t->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	return 0;
}

void s3_http_close(s3_tier *t)
{
	uint32_t i;

	for (i = 0; i < t->npool; i++)
		curl_easy_cleanup(t->pool[i]);
	t->npool = 0;
	if (t->share)
		curl_share_cleanup(t->share);
	t->share = NULL;
}

/* A handle from the pool: blocks until one is free or the deadline passes
 * when `wait`, else returns NULL at once if none is free. */
static CURL *s3_handle_get(s3_tier *t, int wait, int64_t deadline)
{
	CURL *e = NULL;

	pthread_mutex_lock(&t->pool_mu);
	for (;;) {
		if (t->npool) {
			e = t->pool[--t->npool];
			t->in_use++;
			break;
		}
		if (t->in_use < t->max_parallel) {
			e = curl_easy_init();
			if (e)
				t->in_use++;
			break;
		}
		if (!wait || s3_now_ms() >= deadline)
			break;
		{
			int64_t ms = deadline - s3_now_ms();
			struct timespec ts = kvt_deadline_after(ms > 100 ? 100 : ms);
			pthread_cond_timedwait(&t->pool_cv, &t->pool_mu, &ts);
		}
	}
	pthread_mutex_unlock(&t->pool_mu);
	return e;
}

static void s3_handle_put(s3_tier *t, CURL *e)
{
	pthread_mutex_lock(&t->pool_mu);
	t->pool[t->npool++] = e;
	t->in_use--;
	pthread_cond_signal(&t->pool_cv);
	pthread_mutex_unlock(&t->pool_mu);
}

static size_t s3_write_cb(char *p, size_t sz, size_t nm, void *u)
{
	s3_req *r = u;
	size_t n = sz * nm;
	long code = 0;

	curl_easy_getinfo(r->e, CURLINFO_RESPONSE_CODE, &code);
	if (code >= 300) {
		size_t room = sizeof(r->errbody) - 1 - r->errlen;
		if (n < room)
			room = n;
		memcpy(r->errbody + r->errlen, p, room);
		r->errlen += room;
		r->errbody[r->errlen] = '\0';
		return n;
	}
	if (r->dst) {
		if (r->len + n > r->dst_cap) {
			r->overflow = 1;
			return 0;
		}
		memcpy(r->dst + r->len, p, n);
		r->len += n;
		return n;
	}
	if (!r->cap) {
		/* Size the body once from Content-Range's total (a ranged
		 * GET's later ranges land in the same buffer) or
		 * Content-Length: no regrowth, no copies. */
		curl_off_t cl = -1;
		uint64_t want = 0;
		curl_easy_getinfo(r->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
		if (r->has_total && r->total <= S3_PREALLOC_MAX)
			want = r->total;
		else if (cl > 0 && (uint64_t)cl <= S3_PREALLOC_MAX)
			want = (uint64_t)cl;
		if (want >= r->len + n && r->pool) {
			/* An image: from the tier's buffers, already
			 * faulted in when reused. */
			size_t cap = 0;
			r->buf = s3_buf_get(r->pool, want, &cap);
			if (r->buf) {
				r->cap = cap;
				r->pooled = 1;
			}
		} else if (want >= r->len + n) {
			r->buf = malloc((size_t)want);
			if (r->buf)
				r->cap = (size_t)want;
		}
	}
	if (r->len + n > r->cap) {
		size_t nc = r->cap ? r->cap * 2 : 65536;
		uint8_t *nb;
		while (nc < r->len + n)
			nc *= 2;
		/* A pooled buffer is not realloc's to grow: move out of it. */
		nb = r->pooled ? malloc(nc) : realloc(r->buf, nc);
		if (!nb)
			return 0;
		if (r->pooled) {
			memcpy(nb, r->buf, r->len);
			s3_buf_put(r->pool, r->buf, r->cap);
			r->pooled = 0;
		}
		r->buf = nb;
		r->cap = nc;
	}
	memcpy(r->buf + r->len, p, n);
	r->len += n;
	return n;
}

static size_t s3_read_cb(char *p, size_t sz, size_t nm, void *u)
{
	s3_req *r = u;
	size_t n = sz * nm, left = r->up_len - r->up_off;

	if (n > left)
		n = left;
	memcpy(p, r->up + r->up_off, n);
	r->up_off += n;
	return n;
}

static void s3_hdr_value(const char *v, size_t n, char *out, size_t cap)
{
	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(out, v, n);
	out[n] = '\0';
}

static size_t s3_header_cb(char *p, size_t sz, size_t nm, void *u)
{
	s3_req *r = u;
	size_t n = sz * nm;

	if (n >= 5 && !strncmp(p, "HTTP/", 5)) {
		r->etag[0] = r->hmac[0] = '\0';
		r->has_total = 0;
	} else if (n > 5 && !strncasecmp(p, "etag:", 5)) {
		s3_hdr_value(p + 5, n - 5, r->etag, sizeof(r->etag));
	} else if (n > 20 && !strncasecmp(p, "x-amz-meta-kvt-hmac:", 20)) {
		s3_hdr_value(p + 20, n - 20, r->hmac, sizeof(r->hmac));
	} else if (n > 14 && !strncasecmp(p, "content-range:", 14)) {
		char v[128], *slash;
		s3_hdr_value(p + 14, n - 14, v, sizeof(v));
		slash = strchr(v, '/');
		if (slash && slash[1] != '*') {
			r->total = strtoull(slash + 1, NULL, 10);
			r->has_total = 1;
		}
	}
	return n;
}

int s3_req_init(s3_tier *t, s3_req *r, const char *method,
		       const char *name, const char *query)
{
	const struct curl_slist *h;

	memset(r, 0, sizeof(*r));
	r->method = method;
	r->clen = -1;
	snprintf(r->obj, sizeof(r->obj), "%s", name);
	/* The bucket itself is "/bucket" path-style, "/" virtual-hosted. */
	if (snprintf(r->url, sizeof(r->url), "%s%s%s%s%s", t->base_url,
		     *name || !t->path_style ? "/" : "", name, query ? "?" : "",
		     query ? query : "") >= (int)sizeof(r->url))
		return kvt_err(KVT_EINVAL, "S3 URL too long for %s", name);
	for (h = t->common; h; h = h->next) {
		struct curl_slist *n = curl_slist_append(r->hdrs, h->data);
		if (!n)
			return KVT_ENOMEM;
		r->hdrs = n;
	}
	return 0;
}

int s3_req_hdr(s3_req *r, const char *fmt, const char *v)
{
	char line[512];
	struct curl_slist *n;

	snprintf(line, sizeof(line), fmt, v);
	n = curl_slist_append(r->hdrs, line);
	if (!n)
		return KVT_ENOMEM;
	r->hdrs = n;
	return 0;
}

void s3_req_fini(s3_req *r)
{
	curl_slist_free_all(r->hdrs);
	if (r->pooled)
		s3_buf_put(r->pool, r->buf, r->cap);
	else
		free(r->buf);
	r->hdrs = NULL;
	r->buf = NULL;
	r->pooled = 0;
}

static void s3_req_setup(s3_tier *t, s3_req *r, int64_t deadline)
{
	CURL *e = r->e;
	long left = (long)(deadline - s3_now_ms());

	if (left < 1)
		left = 1;
	curl_easy_reset(e);
	r->len = 0;
	r->errlen = 0;
	r->errbody[0] = '\0';
	r->overflow = 0;
	r->up_off = 0;
	r->status = 0;
	r->cerr[0] = '\0';
	r->etag[0] = r->hmac[0] = '\0';
	r->has_total = 0;
	curl_easy_setopt(e, CURLOPT_URL, r->url);
	curl_easy_setopt(e, CURLOPT_SHARE, t->share);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->cerr);
	curl_easy_setopt(e, CURLOPT_AWS_SIGV4, t->sigv4);
	curl_easy_setopt(e, CURLOPT_USERNAME, t->user);
	curl_easy_setopt(e, CURLOPT_PASSWORD, t->secret);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, left);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, s3_write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, s3_header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	/* No "Expect:" header to turn 100-continue off: curl 7.88 signs the
	 * empty header and the signature no longer matches.  Not waiting for
	 * the 100 does the same. */
	curl_easy_setopt(e, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(r->method, "DELETE")) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
	} else if (!strcmp(r->method, "PUT")) {
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, s3_read_cb);
		curl_easy_setopt(e, CURLOPT_READDATA, r);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)r->up_len);
	} else if (!strcmp(r->method, "POST")) {
		curl_easy_setopt(e, CURLOPT_POST, 1L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS,
				 r->up ? (const char *)r->up : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)r->up_len);
	}
}

static int s3_retryable(const s3_req *r)
{
	if (r->cc != CURLE_OK)
		return !r->overflow;
	return r->status >= 500 || r->status == 429;
}

static int64_t s3_backoff_ms(int attempt)
{
	uint64_t cap = (uint64_t)S3_BACKOFF_BASE_MS << (attempt < 10 ? attempt : 10);
	uint32_t rnd = 0;

	if (cap > S3_BACKOFF_CAP_MS)
		cap = S3_BACKOFF_CAP_MS;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = (uint32_t)s3_now_ms() * 2654435761u;
	return (int64_t)(cap / 2 + rnd % (cap / 2 + 1)); /* equal jitter */
}

/* Run n requests concurrently (at most max_parallel connections) until each
 * has a final answer or the deadline passes.  Every request's outcome is in
 * its cc/status.  Returns 0, or KVT_ENOMEM if curl could not be driven. */
int s3_run(s3_tier *t, s3_req **rq, int n, int64_t deadline)
{
	CURLM *m = curl_multi_init();
	int done = 0, running_reqs = 0, i;

	if (!m)
		return kvt_err(KVT_ENOMEM, "curl_multi_init failed");
	for (i = 0; i < n; i++) {
		rq[i]->state = RQ_PENDING;
		rq[i]->attempts = 0;
		rq[i]->not_before = 0;
		rq[i]->cc = CURLE_OK;
		rq[i]->status = 0;
		rq[i]->t0_ms = s3_now_ms();
	}
	while (done < n) {
		int64_t now = s3_now_ms(), wake = now + 200;
		int still, msgs;
		CURLMsg *msg;

		if (now >= deadline) {
			for (i = 0; i < n; i++) {
				s3_req *r = rq[i];
				if (r->state == RQ_DONE)
					continue;
				/* Cut off mid-attempt, or never started: a
				 * timeout.  One waiting to retry keeps its
				 * last attempt's outcome ("HTTP 500 on every
				 * attempt" says more than "timed out"). */
				if (r->state == RQ_RUNNING) {
					curl_multi_remove_handle(m, r->e);
					s3_handle_put(t, r->e);
					r->e = NULL;
					r->cc = CURLE_OPERATION_TIMEDOUT;
					r->status = 0;
				} else if (r->attempts == 0) {
					r->cc = CURLE_OPERATION_TIMEDOUT;
				}
				r->state = RQ_DONE;
				done++;
			}
			break;
		}
		for (i = 0; i < n; i++) {
			s3_req *r = rq[i];
			if (r->state != RQ_PENDING)
				continue;
			if (r->not_before > now) {
				if (r->not_before < wake)
					wake = r->not_before;
				continue;
			}
			r->e = s3_handle_get(t, running_reqs == 0, deadline);
			if (!r->e)
				break;
			s3_req_setup(t, r, deadline);
			r->attempts++;
			r->state = RQ_RUNNING;
			running_reqs++;
			curl_multi_add_handle(m, r->e);
		}
		curl_multi_perform(m, &still);
		while ((msg = curl_multi_info_read(m, &msgs))) {
			s3_req *r = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE,
					  (char **)&r);
			r->cc = msg->data.result;
			curl_easy_getinfo(r->e, CURLINFO_RESPONSE_CODE,
					  &r->status);
			if (curl_easy_getinfo(r->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T,
					      &r->clen) != CURLE_OK)
				r->clen = -1;
			curl_multi_remove_handle(m, r->e);
			s3_handle_put(t, r->e);
			r->e = NULL;
			running_reqs--;
			if (s3_retryable(r) && r->attempts <= t->retries) {
				int64_t b = s3_backoff_ms(r->attempts - 1);
				if (s3_now_ms() + b + 5 < deadline) {
					kvt_log(KVT_LOG_DEBUG,
						"s3: %s %s: %s%ld, retry %d in %" PRId64 " ms",
						r->method, r->url,
						r->cc ? curl_easy_strerror(r->cc) : "HTTP ",
						r->cc ? 0L : r->status,
						r->attempts, b);
					r->not_before = s3_now_ms() + b;
					r->state = RQ_PENDING;
					continue;
				}
			}
			r->state = RQ_DONE;
			done++;
		}
		if (done < n && running_reqs > 0) {
			int64_t w = wake - s3_now_ms();
			if (w > deadline - s3_now_ms())
				w = deadline - s3_now_ms();
			if (w < 0)
				w = 0;
			curl_multi_poll(m, NULL, 0, (int)w, NULL);
		} else if (done < n) {
			int64_t w = wake - s3_now_ms();
			if (w > deadline - s3_now_ms())
				w = deadline - s3_now_ms();
			if (w > 0)
				usleep((useconds_t)(w * 1000));
		}
	}
	curl_multi_cleanup(m);
	return 0;
}

/* One element's text from an S3 XML answer, read with expat. */
typedef struct s3_xt {
	XML_Parser xp;
	const char *tag;
	char *out;
	size_t cap, n;
	int in;    /* depth inside the element; 0 outside */
	int found, cut;
} s3_xt;

static const char *s3_xt_local(const XML_Char *name)
{
	const char *c = strrchr(name, ':');

	return c ? c + 1 : name;
}

static void XMLCALL s3_xt_start(void *u, const XML_Char *name, const XML_Char **attr)
{
	s3_xt *x = u;

	(void)attr;
	if (x->in)
		x->in++;
	else if (!strcmp(s3_xt_local(name), x->tag))
		x->in = 1;
}

static void XMLCALL s3_xt_text(void *u, const XML_Char *s, int n)
{
	s3_xt *x = u;
	size_t room = x->cap - 1 - x->n;

	if (!x->in || n <= 0)
		return;
	if ((size_t)n > room) {
		x->cut = 1;
		n = (int)room;
	}
	memcpy(x->out + x->n, s, (size_t)n);
	x->n += (size_t)n;
	x->out[x->n] = '\0';
}

static void XMLCALL s3_xt_end(void *u, const XML_Char *name)
{
	s3_xt *x = u;

	(void)name;
	if (x->in && --x->in == 0) {
		x->found = 1;
		XML_StopParser(x->xp, XML_FALSE); /* the first one is the answer */
	}
}

int s3_xml_tag(const char *body, const char *tag, char *out, size_t cap)
{
	s3_xt x = { .tag = tag, .out = out, .cap = cap };
	size_t len = strlen(body);

	out[0] = '\0';
	if (len > INT_MAX || !(x.xp = XML_ParserCreate("UTF-8")))
		return -1;
	XML_SetUserData(x.xp, &x);
	XML_SetElementHandler(x.xp, s3_xt_start, s3_xt_end);
	XML_SetCharacterDataHandler(x.xp, s3_xt_text);
	/* An error body may be cut at S3_ERRBODY bytes: what came before the
	 * cut still counts, so the parse's own verdict does not matter. */
	XML_Parse(x.xp, body, (int)len, XML_TRUE);
	XML_ParserFree(x.xp);
	if (!x.found)
		out[0] = '\0';
	return !x.found ? -1 : x.cut ? -2 : 0;
}

/* Turn a finished request into 0 or a code of the taxonomy in s3.h, with a
 * sentence that names the operation, the object, the endpoint and what
 * happened.  Also records whether the endpoint answered at all. */
int s3_result(s3_tier *t, const s3_req *r, const char *what)
{
	char code[64] = "", msg[256] = "", where[S3_NAME_MAX + 256];
	long ms = (long)(s3_now_ms() - r->t0_ms);

	snprintf(where, sizeof(where), "S3 %s of s3://%s/%s at %s", what,
		 t->bucket, r->obj, t->endpoint);
	if (r->cc != CURLE_OK) {
		const char *why = r->cerr[0] ? r->cerr : curl_easy_strerror(r->cc);

		if (r->overflow)
			return kvt_err(KVT_EMALFORMED, "%s: answer longer than expected",
				       where);
		switch (r->cc) {
		case CURLE_COULDNT_CONNECT:
			atomic_store(&t->reachable, 0);
			return kvt_err(-ECONNREFUSED,
				       "%s: endpoint unreachable: %s (%d attempt(s) in %ld ms)",
				       where, why, r->attempts, ms);
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			atomic_store(&t->reachable, 0);
			return kvt_err(-EHOSTUNREACH,
				       "%s: endpoint unreachable: %s (%d attempt(s) in %ld ms)",
				       where, why, r->attempts, ms);
		case CURLE_OPERATION_TIMEDOUT:
			atomic_store(&t->reachable, 0);
			return kvt_err(KVT_ETIMEDOUT,
				       "%s: timed out: no complete answer within the %d ms deadline "
				       "(%d attempt(s)): %s",
				       where, t->timeout_ms, r->attempts, why);
		case CURLE_PARTIAL_FILE:
			return kvt_err(-EIO,
				       "%s: answer truncated (body shorter than its Content-Length) "
				       "on %d attempt(s) in %ld ms: %s",
				       where, r->attempts, ms, why);
		default:
			return kvt_err(-EIO, "%s: I/O error on %d attempt(s) in %ld ms: %s",
				       where, r->attempts, ms, why);
		}
	}
	atomic_store(&t->reachable, 1);
	if (r->status >= 200 && r->status < 300)
		return 0;
	s3_xml_tag(r->errbody, "Code", code, sizeof(code));
	s3_xml_tag(r->errbody, "Message", msg, sizeof(msg));
	if (r->status == 404) {
		if (!strcmp(code, "NoSuchBucket"))
			return kvt_err(KVT_ECONFIG,
				       "%s: 404 NoSuchBucket: bucket '%s' does not exist",
				       where, t->bucket);
		/* A HEAD has no body to carry a code. */
		if (!strcmp(code, "NoSuchKey") || !strcmp(code, "NoSuchUpload") ||
		    (!code[0] && !strcmp(r->method, "HEAD")))
			return kvt_err(KVT_ENOTFOUND, "%s: 404 %s", where, code);
		/* Not S3 saying "no such object" (a proxy's or a load
		 * balancer's 404, a wrong endpoint path): not a miss. */
		return kvt_err(-EIO, "%s: 404 %s without NoSuchKey: %s", where,
			       code[0] ? code : "(no S3 error code)",
			       code[0] ? msg : "not an S3 answer");
	}
	if (r->status == 412)
		return kvt_err(KVT_EEXIST, "%s: 412 precondition failed", where);
	if (r->status == 403 || r->status == 401 ||
	    !strcmp(code, "SignatureDoesNotMatch") ||
	    !strcmp(code, "InvalidAccessKeyId"))
		return kvt_err(-EACCES,
			       "S3 authentication failed: %s: %ld %s (%s) "
			       "for access key '%s', region '%s': check the "
			       "credentials, region and clock",
			       where, r->status, code, msg, t->user, t->region);
	if (r->status >= 500 || r->status == 429)
		return kvt_err(-EIO, "%s: HTTP %ld %s (%s) on %d attempt(s) in %ld ms",
			       where, r->status, code, msg, r->attempts, ms);
	return kvt_err(KVT_EINVAL, "%s: HTTP %ld %s %s", where, r->status, code,
		       msg);
}

/* One request, its deadline the caller's (a listing's page gets whichever
 * comes first of its own timeout and the listing's deadline). */
int s3_one_by(s3_tier *t, s3_req *r, const char *what, int64_t deadline)
{
	int rc = s3_run(t, &r, 1, deadline);

	return rc ? rc : s3_result(t, r, what);
}

int s3_one(s3_tier *t, s3_req *r, const char *what)
{
	return s3_one_by(t, r, what, s3_now_ms() + t->timeout_ms);
}
