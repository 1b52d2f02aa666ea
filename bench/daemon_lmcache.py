"""LMCache's Redis connector pattern, for kvtier-bench daemon: N client
processes, each storing and reading back keys the way LMCache does (SET
<key>kv_bytes, SET <key>metadata (28 bytes); EXISTS <key>metadata; GET
<key>metadata, GET <key>kv_bytes).  Prints the keys per second, all clients
together, from a common start to the last one's end.

Usage: daemon_lmcache.py PORT VALUE_MIB KEYS_PER_CLIENT CLIENTS"""
import json
import multiprocessing as mp
import os
import sys
import time

import redis


def client(port, size, n, w, start, out):
    r = redis.Redis(port=port)
    kv = os.urandom(size)
    meta = os.urandom(28)
    r.ping()
    start.wait()
    t0 = time.time()
    for i in range(n):
        key = "bench/model@8@%d@%064x@bfloat16" % (w, i % 4)
        r.set(key + "kv_bytes", kv)
        r.set(key + "metadata", meta)
        assert r.exists(key + "metadata") == 1
        assert r.get(key + "metadata") == meta
        assert len(r.get(key + "kv_bytes")) == size
    out.put((t0, time.time()))


def main():
    port, mib, n, clients = (int(a) for a in sys.argv[1:5])
    start = mp.Barrier(clients)
    out = mp.Queue()
    ps = [mp.Process(target=client, args=(port, mib << 20, n, w, start, out))
          for w in range(clients)]
    for p in ps:
        p.start()
    spans = [out.get() for _ in ps]
    for p in ps:
        p.join()
    secs = max(e for _, e in spans) - min(s for s, _ in spans)
    print(json.dumps({"keys_per_s": clients * n / secs, "secs": secs}))


if __name__ == "__main__":
    main()
