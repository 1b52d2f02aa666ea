/*
 * guard.h — failed AUTH attempts, counted per source address, so that
 * guessing a password costs time: a connection that fails AUTH waits a
 * while before its next command is read (server.c), and a source address
 * that fails too often in a window is refused AUTH without a check until
 * the window ends, however many connections it opens.
 *
 * The table is shared by the workers (a mutex); it has a fixed number of
 * slots, and a source whose window has ended gives its slot up to a new
 * one, so a flood of addresses costs no memory: past the slots, the
 * address least recently failed is forgotten.
 */
#ifndef KVTD_GUARD_H
#define KVTD_GUARD_H

#include <stdint.h>

#define KVTD_GUARD_FAILS 20        /* failures a source may have in a window */
#define KVTD_GUARD_WINDOW_MS 60000 /* the window, from its first failure */
#define KVTD_GUARD_DELAY_MS 100    /* a connection's hold after its first failure, */
#define KVTD_GUARD_DELAY_MAX_MS 2000 /* doubling per failure up to this */

struct kvtd_guard;

struct kvtd_guard *kvtd_guard_new(void);
void kvtd_guard_free(struct kvtd_guard *g);

/* Milliseconds until source `ip` may try AUTH again, 0 if it may now.  A
 * NULL or empty ip (a Unix socket's client) is never refused. */
int64_t kvtd_guard_refused_ms(struct kvtd_guard *g, const char *ip, int64_t now_ms);
/* A failed AUTH from `ip`: the failures its window holds now. */
unsigned kvtd_guard_fail(struct kvtd_guard *g, const char *ip, int64_t now_ms);
/* How long a connection waits after its n-th failed AUTH (n >= 1). */
int64_t kvtd_guard_hold_ms(unsigned n);

#endif
