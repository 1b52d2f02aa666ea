#!/usr/bin/env python3
"""The plain reference replay of the capacity-planning issue (kvtier plan
must agree with it to the block).

A request's hit is the number of leading blocks present (a block counts only
when every earlier block of the same prompt also hits); then every block of
the request is accessed in prompt order: present ones refreshed, missing ones
inserted, evicting the least recently used when over capacity.

usage: plan_reference.py TRACE.jsonl [CAPACITY|inf ...]
(PLAN_REPEAT=N: time each as the fastest of N runs; PLAN_PARSE_SECONDS=1:
first print "parse SECONDS", the time of reading the trace with json.loads)
prints one line per capacity: "capacity hit_blocks blocks seconds"

In time (PLAN_QUEUE="NODES RATE PARAMS LAYERS D_MODEL KV_BYTES_PER_TOKEN
FLOPS GBPS LATENCY_S"): NODES nodes, each with its own LRU of CAPACITY
blocks and one accelerator, requests round-robin at timestamp / RATE
(Mooncake milliseconds), first come first served per node; the cached
prefix loads at GBPS after LATENCY_S, layer by layer under the prefill of
the rest.  Prints "capacity ttft_p50 ttft_p90 ttft_p99 queue_p90 seconds"
(milliseconds), what `kvtier plan --nodes NODES --rate RATE` must give.
"""
import json
import math
import os
import sys
import time
from collections import OrderedDict


def replay(requests, capacity):
    cache = OrderedDict()
    hits = blocks = 0
    for ids in requests:
        for b in ids:
            if b not in cache:
                break
            hits += 1
        for b in ids:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = True
                if capacity is not None and len(cache) > capacity:
                    cache.popitem(last=False)
        blocks += len(ids)
    return hits, blocks


def prefill(p, lay, d, flops, a, b):
    if b <= a:
        return 0.0
    return (2 * p * (b - a) + 2 * lay * d * (b * b - a * a)) / flops


def quantile(v, q):
    v = sorted(v)
    i = max(int(math.ceil(q * len(v))) - 1, 0)
    return v[min(i, len(v) - 1)]


def in_time(recs, capacity, conf):
    nodes, rate, p, lay, d, kvb, flops, gbps, lat = conf
    nodes, lay = int(nodes), int(lay)
    caches = [OrderedDict() for _ in range(nodes)]
    free = [0.0] * nodes
    ttft, wait = [], []
    for q, (ts, length, ids) in enumerate(recs):
        n = q % nodes
        cache = caches[n]
        hit = 0
        for b in ids:
            if b not in cache:
                break
            hit += 1
        for b in ids:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = True
                if capacity is not None and len(cache) > capacity:
                    cache.popitem(last=False)
        arrive = ts / 1000.0 / rate
        start = max(arrive, free[n])
        cached = min(hit * 512, length)
        frm = length - 1 if cached >= length else cached
        comp = prefill(p, lay, d, flops, frm, length)
        end = start + comp
        if cached > 0:
            load = cached * kvb / (gbps * 1e9)
            if lat + load <= prefill(p, lay, d, flops, 0, cached):
                first = start + lat
                last = first + load
                end = max(end, first + load / lay + comp, last + comp / lay)
            else:  # slower than recomputing: not loaded
                end = start + prefill(p, lay, d, flops, 0, length)
        free[n] = end
        ttft.append(end - arrive)
        wait.append(start - arrive)
    return quantile(ttft, 0.5), quantile(ttft, 0.9), quantile(ttft, 0.99), quantile(wait, 0.9)


def main():
    queue = os.environ.get("PLAN_QUEUE")
    if queue:
        conf = [float(v) for v in queue.split()]
        recs = []
        with open(sys.argv[1]) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    recs.append((r.get("timestamp", 0), r["input_length"], r["hash_ids"]))
        for arg in sys.argv[2:] or ["inf"]:
            cap = None if arg == "inf" else int(arg)
            t0 = time.perf_counter()
            p50, p90, p99, w90 = in_time(recs, cap, conf)
            dt = time.perf_counter() - t0
            print(f"{arg} {p50*1e3:.6f} {p90*1e3:.6f} {p99*1e3:.6f} {w90*1e3:.6f} {dt:.6f}")
        return
    requests = []
    t0 = time.perf_counter()
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line:
                requests.append(json.loads(line)["hash_ids"])
    if os.environ.get("PLAN_PARSE_SECONDS"):
        print(f"parse {time.perf_counter() - t0:.6f}")
    for arg in sys.argv[2:] or ["inf"]:
        cap = None if arg == "inf" else int(arg)
        dt = None
        for _ in range(int(os.environ.get("PLAN_REPEAT", "1"))):
            t0 = time.perf_counter()
            hits, blocks = replay(requests, cap)
            t = time.perf_counter() - t0
            dt = t if dt is None else min(dt, t)
        print(f"{arg} {hits} {blocks} {dt:.6f}")


if __name__ == "__main__":
    main()
