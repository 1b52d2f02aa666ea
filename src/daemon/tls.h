/*
 * tls.h — TLS for kvtierd's TCP clients, over OpenSSL.
 *
 * A context holds the certificate chain and key (PEM files named in the
 * configuration); a connection wraps one accepted, non-blocking socket.
 * Reads and writes behave as read(2) and write(2) on that socket do, so the
 * event loop treats a TLS connection as a plain one: > 0 bytes, 0 at the
 * peer's close, -1 with errno (EAGAIN when the socket must become ready
 * first), with one difference: a read may wait for the socket to be
 * writable, and a write for it to be readable (kvtd_tls_read_wants_write,
 * kvtd_tls_write_wants_read); the event loop then waits for that direction
 * and retries the call there.  The handshake runs inside the first reads
 * and writes.  Decrypted bytes may wait inside OpenSSL with the socket
 * idle: a loop drains kvtd_tls_pending before it sleeps on the socket.
 *
 * The context can be reloaded (SIGHUP): new connections get the new
 * certificate, sessions begun before keep the old one until they close.
 */
#ifndef KVTD_TLS_H
#define KVTD_TLS_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct kvtd_tls_ctx kvtd_tls_ctx;
typedef struct kvtd_tls kvtd_tls;

/* Load `cert` (PEM chain) and `key` (PEM private key), checked to match;
 * TLS 1.2 and up.  0 and *out, or -1 with the file and OpenSSL's reason in
 * err. */
int kvtd_tls_ctx_new(const char *cert, const char *key, kvtd_tls_ctx **out,
		     char *err, size_t errlen);
/* Read the same two files again into a new context, checked as at start,
 * for the connections accepted from now on: 0 with the new certificate's
 * subject and expiry in `what`, or -1 with the file and the reason in err
 * and the context in force kept.  Safe while connections are accepted. */
int kvtd_tls_ctx_reload(kvtd_tls_ctx *c, char *what, size_t whatlen, char *err, size_t errlen);
void kvtd_tls_ctx_free(kvtd_tls_ctx *c);

/* Server side of a TLS session on `fd` (the caller keeps the fd and
 * closes it after kvtd_tls_free).  NULL if out of memory. */
kvtd_tls *kvtd_tls_new(kvtd_tls_ctx *c, int fd);
void kvtd_tls_free(kvtd_tls *t);

ssize_t kvtd_tls_read(kvtd_tls *t, void *buf, size_t len);
ssize_t kvtd_tls_write(kvtd_tls *t, const void *buf, size_t len);
/* Writes the iovecs in order as one stream; returns what was written
 * (a short count when the socket filled), or -1 as kvtd_tls_write. */
ssize_t kvtd_tls_writev(kvtd_tls *t, const struct iovec *iov, int n);
/* 1 once the handshake is done. */
int kvtd_tls_established(const kvtd_tls *t);
/* Bytes already decrypted and waiting to be read. */
size_t kvtd_tls_pending(const kvtd_tls *t);
/* After a read's -1/EAGAIN: 1 if it waits for the socket to be writable
 * (it must send first: the handshake, a KeyUpdate's answer), else 0; so
 * until the next read. */
int kvtd_tls_read_wants_write(const kvtd_tls *t);
/* After a write's -1/EAGAIN (or short count): 1 if it waits for the socket
 * to be readable (a renegotiation), else 0; so until the next write. */
int kvtd_tls_write_wants_read(const kvtd_tls *t);

#endif
