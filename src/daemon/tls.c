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
#include <stdio.h>
#include <stdlib.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

struct kvtd_tls_ctx {
	SSL_CTX *ctx;
};

struct kvtd_tls {
	SSL *ssl;
	int want_write;
};

static void ssl_reason(char *err, size_t errlen, const char *what, const char *path)
{
	unsigned long e = ERR_get_error();
	char r[256];

	ERR_error_string_n(e, r, sizeof(r));
	snprintf(err, errlen, "%s %s: %s", what, path, e ? r : "unknown error");
	ERR_clear_error();
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
	if (!(c = calloc(1, sizeof(*c))) || !(c->ctx = SSL_CTX_new(TLS_server_method()))) {
		free(c);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(c->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(c->ctx, cert) != 1) {
		ssl_reason(err, errlen, "TLS certificate", cert);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(c->ctx, key, SSL_FILETYPE_PEM) != 1) {
		ssl_reason(err, errlen, "TLS key", key);
		goto fail;
	}
	if (SSL_CTX_check_private_key(c->ctx) != 1) {
		ssl_reason(err, errlen, "TLS key does not match the certificate:", key);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	SSL_CTX_free(c->ctx);
	free(c);
	return -1;
}

void kvtd_tls_ctx_free(kvtd_tls_ctx *c)
{
	if (!c)
		return;
	SSL_CTX_free(c->ctx);
	free(c);
}

kvtd_tls *kvtd_tls_new(kvtd_tls_ctx *c, int fd)
{
	kvtd_tls *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	if (!(t->ssl = SSL_new(c->ctx)) || SSL_set_fd(t->ssl, fd) != 1) {
		SSL_free(t->ssl);
		free(t);
		return NULL;
	}
	SSL_set_accept_state(t->ssl);
	return t;
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

/* OpenSSL's outcome of a read or write as read(2)/write(2) would give it. */
static ssize_t tls_result(kvtd_tls *t, int r, size_t done)
{
	int e = SSL_get_error(t->ssl, r);

	if (r > 0)
		return (ssize_t)done;
	switch (e) {
	case SSL_ERROR_WANT_READ:
		t->want_write = 0;
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_WANT_WRITE:
		t->want_write = 1;
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
	return tls_result(t, r, got);
}

ssize_t kvtd_tls_write(kvtd_tls *t, const void *buf, size_t len)
{
	size_t put = 0;
	int r;

	if (len == 0)
		return 0;
	errno = 0;
	r = SSL_write_ex(t->ssl, buf, len, &put);
	return tls_result(t, r, put);
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

int kvtd_tls_wants_write(const kvtd_tls *t)
{
	return t->want_write;
}
