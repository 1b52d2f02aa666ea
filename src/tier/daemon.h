/*
 * daemon.h — a tier that is kvtierd: the one tier of a store opened with
 * `daemon: unix:///path` (daemon.c says why a tier, and how the data
 * moves through the daemon's shared memory).
 */
#ifndef KVT_DAEMON_TIER_H
#define KVT_DAEMON_TIER_H

#include "tier/tier.h"

/* Connect to the daemon's local socket at `path` and map its arena.
 * -ENOENT/-ECONNREFUSED (no daemon there), -EACCES (not allowed), each
 * with a message naming the socket. */
int kvt_daemon_open(const char *path, kvt_tier **out);

#endif
