/*
 * peer.h — other nodes' kvtierd as a tier: a store reads chunks straight
 * from the memory and disks of the node that computed them (a decode node
 * from its prefill node), over the network, with the daemon's RESP port
 * and two commands of its own (docs/DAEMON.md, "Nodes and peers"):
 *
 *   KVTIER.PEEK <key hex>...   :<n>   how many of the keys, from the
 *                                     first, the node holds itself
 *   KVTIER.FETCH <key hex>     $<len> the object image, header and
 *                                     payload as stored; $-1 if absent
 *
 * The tier reads only: it takes no puts (its write policy is none) and
 * deletes nothing on the other node.  What it returns is an image like
 * any tier's, checked and verified by the store like one from a disk.
 */
#ifndef KVT_PEER_TIER_H
#define KVT_PEER_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "tier/tier.h"

#define KVT_PEER_MAX 16          /* peers one store reads from */
#define KVT_PEER_MAX_PEEK 1024   /* keys one KVTIER.PEEK names */

typedef struct kvt_peer_opts {
	const char *peers;       /* "host:port,host:port,..." */
	const char *user;        /* AUTH user ("" : AUTH <password> alone) */
	const char *password;    /* "" : no AUTH */
	int timeout_ms;          /* connect, and each read or write */
	uint64_t max_image;      /* a reply announcing more is refused */
} kvt_peer_opts;

/* Parse the peer list and open the tier; nothing is connected until the
 * first read.  KVT_ECONFIG naming the entry that is not host:port. */
int kvt_peer_open(const kvt_peer_opts *o, kvt_tier **out);

/* Check a "host:port,..." list (the configuration's setter). */
int kvt_peer_list_check(const char *peers);

#endif
