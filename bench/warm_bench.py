"""`kvtier-bench warm`: a restarted node's warm start against a cold one,
on the shipped conversation trace.

A node (kvtierd with --data-dir: a 256 MiB DRAM tier over its disk tier,
the engines its local clients through kvtier's binding) serves the trace's
first five minutes: per request, a lookup of its prefix, a get of each
chunk found, a put of each one missing (an engine's load and save; one
trace block, 512 tokens, is one 32 KiB chunk).  It is then stopped
(SIGTERM: its hot list is saved), and its data directory copied for each
of three successors, which serve the trace's next minute:

  warm      restarted with --warm-start 256MiB: /ready says yes once the
            chunks its first tier held are back in it
  cold      restarted without: ready as soon as its index is rebuilt
  new       a node on an empty data directory (a node added to the fleet)

Figures, per successor: time from the exec to /ready answering 200
(time_to_ready_s), and over the first minute's requests the share of the
chunks asked for that were served (hit_rate) and that were served from
DRAM (dram_hit_rate: those found less the reads its lower tiers served,
from the node's own counters in /metrics), and the
mean time a request's lookup and loads took (load_ms).  Ratios:
ratio_vs_cold for the warm node's DRAM hit rate over the cold one's (the
point of a warm start; target > 1), ratio_vs_new for the restarted
nodes' hit rate over a new node's, and the warm start's cost in time to
ready (ratio_vs_cold of time_to_ready_s).  Rounds alternate the order of
warm and cold; medians with min/max over the rounds.

Usage (kvtier-bench warm runs this with the build's library, kvtierd and
package): warm_bench.py [--json] [--quick]"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import kvtier

TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces",
                     "conversation_trace.jsonl")
LAYOUT = kvtier.Layout(1, 1, 32, "bf16", chunk_tokens=256)  # 32 KiB a chunk
DRAM = "256MiB"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


class Node:
    def __init__(self, root, name, data, *extra):
        self.sock = os.path.join(root, name + ".sock")
        self.port, self.mport = free_port(), free_port()
        self.log = open(os.path.join(root, name + ".log"), "a")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(
            [os.environ["KVTIER_KVTIERD"], "--port", str(self.port), "--local", self.sock,
             "--data-dir", data, "--metrics-port", str(self.mport), "--threads", "2",
             "--set", "max_local_cpu_size=" + DRAM, "--set", "dram_page_size=4KiB",
             "--set", "dram_prefault=false",
             "--set", "dram_lock_memory=false", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.ready_s = None

    def http(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.mport, path),
                                        timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return None, ""

    def wait_ready(self, timeout=120):
        while time.monotonic() - self.t0 < timeout:
            if self.p.poll() is not None:
                raise RuntimeError("kvtierd exited; see its log in " + self.log.name)
            if self.http("/ready")[0] == 200:
                self.ready_s = time.monotonic() - self.t0
                return self.ready_s
            time.sleep(0.01)
        raise RuntimeError("kvtierd not ready in %d s" % timeout)

    def hits(self):
        """kvtier_tier_hits_total by tier."""
        out = {}
        for line in self.http("/metrics")[1].splitlines():
            if line.startswith("kvtier_tier_hits_total{tier=\""):
                tier = line.split("\"")[1]
                out[tier] = int(line.rsplit(" ", 1)[1])
        return out

    def client(self):
        c = kvtier.Config()
        c.set("daemon", "unix://" + self.sock)
        st = kvtier.Store(c)
        return st, st.namespace("kvtier-bench/warm", LAYOUT)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(60)
        self.log.close()


def requests(t_from, t_to):
    out = []
    with open(TRACE) as f:
        for line in f:
            r = json.loads(line)
            if t_from <= r["timestamp"] < t_to:
                out.append(r["hash_ids"])
    return out


def keys_of(blocks):
    """A trace block id names its whole prefix (these traces hash each
    block with everything before it), so it is its chunk's key: the
    block id in a key of kvtier's width."""
    return [kvtier.Key(b"kvtbench" + b.to_bytes(8, "little") + bytes(16)) for b in blocks]


def serve(node, reqs):
    """An engine's work per request; (chunks asked, chunks found, seconds
    of lookups and loads)."""
    st, ns = node.client()
    asked, found, t_load = 0, 0, 0.0
    buf = bytearray(ns.payload_bytes)
    payload = os.urandom(ns.payload_bytes)
    for blocks in reqs:
        keys = keys_of(blocks)
        t = time.monotonic()
        n = st.lookup(ns, keys)
        for k in keys[:n]:
            st.get(ns, k, buf)
        t_load += time.monotonic() - t
        for k in keys[n:]:
            st.put(ns, k, payload)
        asked += len(keys)
        found += n
    st.flush(60000)
    st.close()
    return asked, found, t_load


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    rounds = 1 if a.quick else 3
    history_s = 120 if a.quick else 300
    root = tempfile.mkdtemp(prefix="kvtier-bench-warm.")
    try:
        base = os.path.join(root, "base")
        first = Node(root, "history", base)
        first.wait_ready()
        hist = requests(0, history_s * 1000)
        serve(first, hist)
        first.stop()
        minute = requests(history_s * 1000, (history_s + 60) * 1000)
        res = {k: {"time_to_ready_s": [], "hit_rate": [], "dram_hit_rate": [], "load_ms": []}
               for k in ("warm", "cold", "new")}
        for r in range(rounds):
            order = ["warm", "cold", "new"] if r % 2 == 0 else ["cold", "warm", "new"]
            for kind in order:
                data = os.path.join(root, "%s-%d" % (kind, r))
                if kind != "new":
                    shutil.copytree(base, data)
                extra = ["--warm-start", DRAM] if kind == "warm" else []
                node = Node(root, "%s-%d" % (kind, r), data, *extra)
                try:
                    res[kind]["time_to_ready_s"].append(node.wait_ready())
                    before = node.hits()
                    asked, found, t_load = serve(node, minute)
                    after = node.hits()
                finally:
                    node.stop()
                if kind == "warm":  # what its warm start did, from its log
                    with open(node.log.name) as f:
                        res["warm_log"] = [l.split("kvtierd ", 1)[-1].strip() for l in f
                                           if "warm start:" in l][-1:]
                shutil.rmtree(data, ignore_errors=True)
                # A chunk read from a lower tier is copied up and then read
                # from DRAM: those below count the reads DRAM did not serve.
                below = sum(after.get(t, 0) - before.get(t, 0) for t in after if t != "dram")
                dram = found - below
                res[kind]["hit_rate"].append(found / asked)
                res[kind]["dram_hit_rate"].append(dram / asked)
                res[kind]["load_ms"].append(t_load / len(minute) * 1e3)
        out = {"bench": "warm", "rounds": rounds, "history_requests": len(hist),
               "minute_requests": len(minute), "dram": DRAM}
        out["warm_start_log"] = res.pop("warm_log", [])
        for kind, f in res.items():
            out[kind] = {k: summary(v) for k, v in f.items()}
        n = rounds

        def ratio(x, y, field):
            return summary([res[x][field][i] / res[y][field][i]
                            if res[y][field][i] else float("inf") for i in range(n)])
        out["ratio_vs_cold"] = {"dram_hit_rate": ratio("warm", "cold", "dram_hit_rate"),
                                "load_ms": ratio("warm", "cold", "load_ms"),
                                "time_to_ready_s": ratio("warm", "cold", "time_to_ready_s")}
        out["ratio_vs_new"] = {"warm_hit_rate": ratio("warm", "new", "hit_rate"),
                               "cold_hit_rate": ratio("cold", "new", "hit_rate")}
        if a.json:
            print(json.dumps(out))
        else:
            print("warm starts: %d requests of history, then the next minute's %d requests; "
                  "%d round(s), median [min..max]" % (len(hist), len(minute), rounds))
            for kind in ("warm", "cold", "new"):
                f = out[kind]
                print("  %-5s ready in %.2f s, hit rate %.3f, from DRAM %.3f, load %.2f ms "
                      "a request" % (kind, f["time_to_ready_s"]["median"],
                                     f["hit_rate"]["median"], f["dram_hit_rate"]["median"],
                                     f["load_ms"]["median"]))
            print("  " + " ".join(out["warm_start_log"]))
            r = out["ratio_vs_cold"]
            print("  warm over cold: DRAM hit rate %.2fx, load time %.2fx, time to ready %.2fx"
                  % (r["dram_hit_rate"]["median"], r["load_ms"]["median"],
                     r["time_to_ready_s"]["median"]))
            print("  restarted over new: hit rate %.2fx (warm), %.2fx (cold)"
                  % (out["ratio_vs_new"]["warm_hit_rate"]["median"],
                     out["ratio_vs_new"]["cold_hit_rate"]["median"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
