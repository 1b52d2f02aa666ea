/*
 * tls.c — TLS sessions for kvtierd's TCP clients (tls.h), over OpenSSL.
 *
 * Partial writes are enabled and a retried write may come from another
 * address (the event loop's output buffer moves as it is compacted), so
 * kvtd_tls_write means what write(2) means.  Errors become errnos: a
 * protocol failure is EPROTO, the peer's close without close_notify is
 * ECONNRESET; the connection is dropped either way.
 */
#include "daemon/tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* The context new connections get, swapped whole by a reload.  Each SSL
 * holds a reference to the SSL_CTX it was made from (SSL_new takes one,
 * SSL_free drops it): a session begun before a reload goes on with the old
 * certificate until it closes, and the old context is freed with its last
 * session. */
struct kvtd_tls_ctx {
	pthread_mutex_t mu;       /* cur: read per accepted connection, set by reload */
	SSL_CTX *cur;
	char *cert, *key;         /* the files, read again by kvtd_tls_ctx_reload */
};

struct kvtd_tls {
	SSL *ssl;
	int read_wants_write;     /* the last read waits for the socket to be writable */
	int write_wants_read;     /* the last write waits for it to be readable */
};

static void ssl_reason(char *err, size_t errlen, const char *what, const char *path)
{
	unsigned long e = ERR_get_error();
	char r[256];

	ERR_error_string_n(e, r, sizeof(r));
	snprintf(err, errlen, "%s %s: %s", what, path, e ? r : "unknown error");
	ERR_clear_error();
}

/* A server context over the chain in `cert` and the key in `key`, checked
 * to belong together; NULL with the file and OpenSSL's reason in err. */
static SSL_CTX *ctx_load(const char *cert, const char *key, char *err, size_t errlen)
{
	SSL_CTX *x = SSL_CTX_new(TLS_server_method());

	if (!x) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(x, TLS1_2_VERSION);
	SSL_CTX_set_mode(x, SSL_MODE_ENABLE_PARTIAL_WRITE |
			    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(x, cert) != 1) {
		ssl_reason(err, errlen, "TLS certificate", cert);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM) != 1) {
		ssl_reason(err, errlen, "TLS key", key);
		goto fail;
	}
	if (SSL_CTX_check_private_key(x) != 1) {
		ssl_reason(err, errlen, "TLS key does not match the certificate:", key);
		goto fail;
	}
	return x;
fail:
	SSL_CTX_free(x);
	return NULL;
}

int kvtd_tls_ctx_new(const char *cert, const char *key, kvtd_tls_ctx **out,
		     char *err, size_t errlen)
{
	kvtd_tls_ctx *c;

	*out = NULL;
	if (!cert || !*cert || !key || !*key) {
		snprintf(err, errlen, "TLS needs both a certificate and a key file");
		return -1;
	}
	if (!(c = calloc(1, sizeof(*c))) || !(c->cert = strdup(cert)) ||
	    !(c->key = strdup(key))) {
		if (c)
			free(c->cert);
		free(c);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (!(c->cur = ctx_load(cert, key, err, errlen))) {
		free(c->cert);
		free(c->key);
		free(c);
		return -1;
	}
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return 0;
}

int kvtd_tls_ctx_reload(kvtd_tls_ctx *c, char *what, size_t whatlen, char *err, size_t errlen)
{
	SSL_CTX *x = ctx_load(c->cert, c->key, err, errlen), *old;
	X509 *crt;

	if (!x)
		return -1;
	crt = SSL_CTX_get0_certificate(x);
	what[0] = '\0';
	if (crt) {
		char subj[256] = "", until[64] = "";
		BIO *b = BIO_new(BIO_s_mem());
		X509_NAME_oneline(X509_get_subject_name(crt), subj, sizeof(subj));
		if (b && ASN1_TIME_print(b, X509_get0_notAfter(crt)) > 0)
			BIO_read(b, until, sizeof(until) - 1);
		BIO_free(b);
		snprintf(what, whatlen, "%s, valid until %s", subj, until);
	}
	pthread_mutex_lock(&c->mu);
	old = c->cur;
	c->cur = x;
	pthread_mutex_unlock(&c->mu);
	SSL_CTX_free(old); /* our reference: sessions on it keep theirs */
	return 0;
}

void kvtd_tls_ctx_free(kvtd_tls_ctx *c)
{
	if (!c)
		return;
	SSL_CTX_free(c->cur);
	pthread_mutex_destroy(&c->mu);
	free(c->cert);
	free(c->key);
	free(c);
}

kvtd_tls *kvtd_tls_new(kvtd_tls_ctx *c, int fd)
{
	kvtd_tls *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	pthread_mutex_lock(&c->mu);
	t->ssl = SSL_new(c->cur);
	pthread_mutex_unlock(&c->mu);
	if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
		SSL_free(t->ssl);
		free(t);
		return NULL;
	}
	SSL_set_accept_state(t->ssl);
	return t;
}

int kvtd_tls_established(const kvtd_tls *t)
{
	return SSL_is_init_finished(t->ssl);
}

void kvtd_tls_free(kvtd_tls *t)
{
	if (!t)
		return;
	/* One close_notify, not waited for: the socket is being closed. */
	if (SSL_is_init_finished(t->ssl))
		SSL_shutdown(t->ssl);
	SSL_free(t->ssl);
	ERR_clear_error();
	free(t);
}

/* OpenSSL's outcome of a read (writing 0) or a write (1) as read(2) and
 * write(2) would give it.  A call that cannot go on waits for the socket in
 * one direction, and not always its own: a read may first have to send (the
 * answer to a TLS 1.3 KeyUpdate, a renegotiation's messages), a write first
 * receive (a renegotiation).  The flag of the call says which, until that
 * call is made again. */
static ssize_t tls_result(kvtd_tls *t, int writing, int r, size_t done)
{
	int e = SSL_get_error(t->ssl, r);
	int *other = writing ? &t->write_wants_read : &t->read_wants_write;

	if (r > 0) {
		*other = 0;
		return (ssize_t)done;
	}
	switch (e) {
	case SSL_ERROR_WANT_READ:
		*other = writing;
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_WANT_WRITE:
		*other = !writing;
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		ERR_clear_error();
		if (errno == 0 || errno == EAGAIN)
			errno = ECONNRESET;
		return -1;
	default:
		ERR_clear_error();
		errno = EPROTO;
		return -1;
	}
}

ssize_t kvtd_tls_read(kvtd_tls *t, void *buf, size_t len)
{
	size_t got = 0;
	int r;

	errno = 0;
	r = SSL_read_ex(t->ssl, buf, len, &got);
	return tls_result(t, 0, r, got);
}

ssize_t kvtd_tls_write(kvtd_tls *t, const void *buf, size_t len)
{
	size_t put = 0;
	int r;

	if (len == 0)
		return 0;
	errno = 0;
	r = SSL_write_ex(t->ssl, buf, len, &put);
	return tls_result(t, 1, r, put);
}

ssize_t kvtd_tls_writev(kvtd_tls *t, const struct iovec *iov, int n)
{
	ssize_t total = 0;

	for (int i = 0; i < n; i++) {
		ssize_t w = kvtd_tls_write(t, iov[i].iov_base, iov[i].iov_len);
		if (w < 0)
			return total ? total : -1;
		total += w;
		if ((size_t)w < iov[i].iov_len)
			break;
	}
	return total;
}

size_t kvtd_tls_pending(const kvtd_tls *t)
{
	return (size_t)SSL_pending(t->ssl);
}

int kvtd_tls_read_wants_write(const kvtd_tls *t)
{
	return t->read_wants_write;
}

int kvtd_tls_write_wants_read(const kvtd_tls *t)
{
	return t->write_wants_read;
}
