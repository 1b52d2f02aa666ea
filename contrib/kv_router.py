#!/usr/bin/env python3
"""A KV-aware router in a page: `kvtier where --serve` against round robin.

Three kvtierd nodes on loopback publish KV events; `kvtier where --serve`
reads them.  The shipped conversation trace (tests/data/traces, Mooncake's:
one prefix hash per 512-token block) is replayed request by request: each
request goes to the node `where` says holds the longest prefix of it (the
least loaded among equals, none more than 25% over the mean load; round
robin when no node holds anything), is looked up there (the prefix it
would load), and its missing chunks are put there, as an engine does
after prefill.  A second fleet of three serves the same requests in pure
round robin.  Printed: the share of prompt tokens found cached on the
chosen node, both ways.

Each trace block is one 16-token kvtier chunk of synthetic tokens derived
from its hash id (equal ids, equal prefixes: the trace's own promise), so
the keys chain as a real prompt's do; a chunk is a small one (the "tiny"
preset), in each node's DRAM tier (--dram).  Token
counts are the trace's (512 per block, the last one partial).

    python contrib/kv_router.py --kvtierd build/kvtierd --kvtier build/kvtier [--requests N]
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "tests", "data", "traces", "conversation_trace.jsonl")
CHUNK, TRACE_BLOCK = 16, 512


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_node(kvtierd, root, name, dram):
    """kvtierd with `dram` of DRAM and KV events on; (process, socket, PUB, ROUTER)."""
    sock, pub, rep = os.path.join(root, name + ".sock"), free_port(), free_port()
    p = subprocess.Popen([kvtierd, "--port", "0", "--local", sock, "--threads", "2",
                          "--set", "max_local_cpu_size=" + dram, "--set", "dram_prefault=false",
                          "--set", "dram_lock_memory=false", "--set", "dram_page_size=4KiB",
                          "--set", "chunk_size=%d" % CHUNK,
                          "--set", "kv_events_publisher=zmq",
                          "--set", "kv_events_endpoint=tcp://*:%d" % pub,
                          "--set", "kv_events_replay_endpoint=tcp://*:%d" % rep],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        if os.path.exists(sock):
            return p, sock, "%s=tcp://127.0.0.1:%d" % (name, pub), "tcp://127.0.0.1:%d" % rep
        if p.poll() is not None:
            sys.exit("kv_router: kvtierd exited at start")
        time.sleep(0.025)
    sys.exit("kv_router: kvtierd did not listen on " + sock)


class Fleet:
    def __init__(self, kvtierd, root, prefix, dram, n=3):
        self.nodes = [start_node(kvtierd, root, "%s%d" % (prefix, i), dram) for i in range(n)]
        time.sleep(0.2)
        self.stores = [kvtier.Store(daemon="unix://" + s) for _, s, _, _ in self.nodes]
        lay = kvtier.Layout.preset("tiny", chunk_tokens=CHUNK)
        self.ns = [st.namespace("kv_router/demo", lay) for st in self.stores]
        self.payload = bytes(self.ns[0].payload_bytes)
        self.sent = [0] * n

    def serve(self, node, keys):
        """Send a request to `node`: the chunks it finds cached, then the rest put."""
        st, ns = self.stores[node], self.ns[node]
        hit = st.lookup(ns, keys)
        for k in keys[hit:]:
            st.put(ns, k, self.payload)
        self.sent[node] += 1
        return hit

    def close(self):
        for st in self.stores:
            st.close()
        for p, _, _, _ in self.nodes:
            p.send_signal(signal.SIGTERM)
            p.wait(20)


def tokens_of(hash_ids):
    """Synthetic token ids, CHUNK per trace block, a function of its id."""
    return [(h * 7919 + j * 104729) % 150000 for h in hash_ids for j in range(CHUNK)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvtierd", required=True, help="the kvtierd binary")
    ap.add_argument("--kvtier", required=True, help="the kvtier command (libkvtier.so beside it)")
    ap.add_argument("--requests", type=int, default=2000, help="requests of the trace replayed (default 2000)")
    ap.add_argument("--dram", default="64MiB", help="each node's DRAM tier (default 64MiB)")
    ap.add_argument("--trace", default=TRACE)
    a = ap.parse_args()
    build = os.path.dirname(os.path.abspath(a.kvtier))
    os.environ.setdefault("KVTIER_LIB", os.path.join(build, "libkvtier.so"))
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    global kvtier
    import kvtier

    with open(a.trace) as f:
        reqs = [json.loads(line) for _, line in zip(range(a.requests), f)]
    root = tempfile.mkdtemp(prefix="kv-router-")
    aware, rr = Fleet(a.kvtierd, root, "w", a.dram), Fleet(a.kvtierd, root, "r", a.dram)
    where = subprocess.Popen([a.kvtier, "where", "--serve", "0",
                              "--subscribe", ",".join(n[2] for n in aware.nodes),
                              "--replay", ",".join(n[3] for n in aware.nodes)],
                             stdout=subprocess.PIPE, text=True)
    url = where.stdout.readline().split("serving ")[1].split()[0]
    try:
        found = {"round robin": 0, "kvtier where": 0}
        total = ideal = 0
        seen, lat, look, turn = set(), [], [], 0
        for i, r in enumerate(reqs):
            ids, n_tok = r["hash_ids"], r["input_length"]
            keys = aware.ns[0].key_chain(tokens_of(ids))  # one namespace on every node
            body = json.dumps({"hashes": [str(k) for k in keys], "block_size": CHUNK}).encode()
            t0 = time.monotonic()
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as h:
                ans = json.loads(h.read())
            lat.append((time.monotonic() - t0) * 1e6)
            look.append(ans["lookup_us"])
            # The longest prefix first, the least loaded among equals; but
            # no node more than 25% over the mean load (bounded load: the
            # trace's prompts share a first block, and a pure prefix rule
            # would send every new conversation to the node holding it).
            order = sorted(range(3), key=lambda j: (-ans["nodes"][j]["tokens"], aware.sent[j]))
            cap = 1.25 * (i + 1) / 3 + 1
            node = next((j for j in order if aware.sent[j] < cap), order[0])
            if not ans["nodes"][order[0]]["tokens"]:  # nobody holds anything
                node, turn = turn % 3, turn + 1
            tok = lambda blocks: min(blocks * TRACE_BLOCK, n_tok)
            found["kvtier where"] += tok(aware.serve(node, keys))
            found["round robin"] += tok(rr.serve(i % 3, keys))
            # A single unbounded cache: the most any routing could find.
            hit = next((b for b, h in enumerate(ids) if h not in seen), len(ids))
            ideal += tok(hit)
            seen.update(ids)
            total += n_tok
        with urllib.request.urlopen(url.replace("/where", "/stats"), timeout=10) as h:
            ix = json.loads(h.read())["index"]
        print("%d requests of %s, 3 nodes x %s DRAM each, one 16-token chunk per "
              "512-token trace block; where indexes %d blocks"
              % (len(reqs), os.path.basename(a.trace), a.dram, ix["blocks"]))
        print("%-34s %14s %14s" % ("", "round robin", "kvtier where"))
        print("%-34s %13.1f%% %13.1f%%" % ("prompt tokens found on the node",
                                          100 * found["round robin"] / total,
                                          100 * found["kvtier where"] / total))
        print("%-34s %14s %14s" % ("requests per node", "/".join(map(str, rr.sent)),
                                   "/".join(map(str, aware.sent))))
        print("%-34s %14s %11.0f us" % ("where's answer over HTTP (median)", "-",
                                        statistics.median(lat)))
        print("%-34s %14s %11.1f us" % ("  of it, the index lookup", "-",
                                        statistics.median(look)))
        print("one unbounded cache would find %.1f%% (the bound on any routing)"
              % (100 * ideal / total))
    finally:
        where.send_signal(signal.SIGTERM)
        where.wait(20)
        aware.close()
        rr.close()


if __name__ == "__main__":
    main()
