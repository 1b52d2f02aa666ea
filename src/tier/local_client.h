/*
 * local_client.h — a tier that is kvtierd, reached as its local client: the
 * one tier of a store opened with `daemon: unix:///path` (local_client.c
 * says why a tier, and how the data moves through kvtierd's shared memory).
 */
#ifndef KVT_LOCAL_CLIENT_H
#define KVT_LOCAL_CLIENT_H

#include "tier/tier.h"

/* Connect to the daemon's local socket at `path` and map its arena.
 * -ENOENT/-ECONNREFUSED (no daemon there), -EACCES (not allowed), each
 * with a message naming the socket. */
int kvt_local_client_open(const char *path, kvt_tier **out);

#endif
