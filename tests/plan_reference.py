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
"""
import json
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


def main():
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
