"""kvtier-bench plan's libCacheSim side: kvtier's planner and libCacheSim
(PyPI's libcachesim) simulate the same block accesses in this one process.

The trace is read by kvtier (kvt_plan_trace_read through the build's
shared planner, libkvtier_plan.so, which KVTIER_LIB names); its dense block ids, every access in request
order, are written once as a libCacheSim oracleGeneral file (24-byte
records, each block of size 1, so a capacity in bytes is one in blocks).
For each capacity and policy, rounds alternate which one runs first:

  kvtier:      kvt_plan_simulate, one node, DRAM only, admit everything;
               its per-access hits (access_hits[0]);
  libCacheSim: cache.process_trace(reader) over a reader opened before the
               clock starts; hits = accesses x (1 - its miss ratio).

LRU as is; S3-FIFO with libCacheSim's defaults (10% small queue, 90%
ghost, promotion after 2 hits in the small queue) and kvtier set to the
same (s3_small_pct 10, s3_promote 2, and s3_fill_main: libCacheSim's
S3FIFO fills the main queue until its first eviction).  The hit counts must be equal.  Times
are the simulation loops alone: no trace parsing on either side.

Usage: plan_libcachesim.py TRACE CAPS ROUNDS   (CAPS: 1000,5000,20000)
Prints one JSON object.
"""
import ctypes as C
import json
import os
import statistics
import sys
import tempfile
import time

NT = 3


class TierConf(C.Structure):
    _fields_ = [("capacity", C.c_uint64), ("admit", C.c_int), ("seen_n", C.c_uint32),
                ("min_prefix", C.c_uint32)]


class Conf(C.Structure):
    _fields_ = [("policy", C.c_int), ("nodes", C.c_uint), ("route", C.c_int),
                ("tier", TierConf * NT), ("s3_small_pct", C.c_uint32),
                ("s3_promote", C.c_uint32), ("s3_fill_main", C.c_int)]


class Result(C.Structure):
    _fields_ = [("requests", C.c_uint64), ("blocks", C.c_uint64), ("hit_blocks", C.c_uint64),
                ("hit_tier", C.c_uint64 * NT), ("tokens", C.c_uint64),
                ("hit_tokens", C.c_uint64), ("inserts", C.c_uint64 * NT),
                ("rejects", C.c_uint64 * NT), ("demotions", C.c_uint64),
                ("promotions", C.c_uint64), ("access_hits", C.c_uint64 * NT)]


class View(C.Structure):
    _fields_ = [("format", C.c_int), ("block_tokens", C.c_uint32), ("requests", C.c_uint64),
                ("blocks", C.c_uint64), ("distinct_blocks", C.c_uint64),
                ("off", C.POINTER(C.c_uint64)), ("ids", C.POINTER(C.c_uint32)),
                ("arrive_s", C.POINTER(C.c_double)), ("in_len", C.POINTER(C.c_uint32)),
                ("out_len", C.POINTER(C.c_uint32))]


LRU, S3FIFO = 0, 1


def summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main():
    trace, caps, rounds = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], int(sys.argv[3])
    try:
        import libcachesim as lcs
        import numpy as np
    except ImportError as e:
        print(json.dumps({"error": "libcachesim cannot be imported: %s (scripts/install-deps.sh "
                                   "installs it in the venv)" % e}))
        return 0
    lib = C.CDLL(os.environ["KVTIER_LIB"])
    lib.kvt_plan_trace_read.argtypes = [C.c_char_p, C.c_int, C.c_uint32, C.c_uint64,
                                        C.POINTER(C.c_void_p)]
    lib.kvt_plan_trace_view_get.argtypes = [C.c_void_p, C.POINTER(View)]
    lib.kvt_plan_simulate.argtypes = [C.c_void_p, C.POINTER(Conf), C.POINTER(Result), C.c_void_p]
    lib.kvt_plan_trace_free.argtypes = [C.c_void_p]
    lib.kvt_errmsg.restype = C.c_char_p
    tr = C.c_void_p()
    rc = lib.kvt_plan_trace_read(trace.encode(), 0, 0, 0, C.byref(tr))
    if rc:
        print(json.dumps({"error": "kvt_plan_trace_read: %s" % lib.kvt_errmsg().decode()}))
        return 1
    v = View()
    lib.kvt_plan_trace_view_get(tr, C.byref(v))
    ids = np.ctypeslib.as_array(v.ids, shape=(v.blocks,))
    rec = np.zeros(v.blocks, dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"),
                                    ("next", "<i8")])
    rec["t"] = np.arange(v.blocks, dtype=np.uint32)
    rec["id"] = ids.astype(np.uint64) + 1  # libCacheSim's id 0 is no object
    rec["size"] = 1
    rec["next"] = -1
    tmpdir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(suffix=".oracleGeneral", dir=tmpdir) as f:
        rec.tofile(f.name)
        out = []
        for cap in caps:
            for pol in (LRU, S3FIFO):
                out.append(compare(lib, lcs, tr, f.name, v.blocks, cap, pol, rounds,
                                   hashpower(v.distinct_blocks)))
    lib.kvt_plan_trace_free(tr)
    exact = all(o["exact"] for o in out)
    res = {"trace": trace, "accesses": v.blocks, "distinct_blocks": v.distinct_blocks,
           "rounds": rounds, "libcachesim_version": getattr(lcs, "__version__", "?"),
           "exact": exact, "configs": out}
    for pol in ("lru", "s3fifo"):
        rs = [o["ratio_vs_libcachesim"] for o in out if o["policy"] == pol]
        res["ratio_vs_libcachesim_" + pol] = statistics.median(rs)
    print(json.dumps(res))
    return 0 if exact else 1


def hashpower(distinct):
    """libCacheSim's hash table sized to the trace (2^hp buckets, at least
    twice the distinct blocks) rather than its default 2^24: its fastest
    setting here, the table in cache."""
    hp = 10
    while (1 << hp) < 2 * distinct:
        hp += 1
    return hp


def compare(lib, lcs, tr, path, n, cap, pol, rounds, hp):
    conf = Conf(policy=pol, nodes=1, route=0)
    conf.tier[0].capacity = cap
    if pol == S3FIFO:
        conf.s3_small_pct, conf.s3_promote, conf.s3_fill_main = 10, 2, 1
    r = Result()
    kt, lt, khits, lhits = [], [], None, None
    for rnd in range(rounds):
        for side in ((0, 1) if rnd % 2 == 0 else (1, 0)):
            if side == 0:
                t0 = time.perf_counter()
                rc = lib.kvt_plan_simulate(tr, C.byref(conf), C.byref(r), None)
                kt.append(time.perf_counter() - t0)
                if rc:
                    raise SystemExit("kvt_plan_simulate: %s" % lib.kvt_errmsg().decode())
                khits = r.access_hits[0]
            else:
                reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
                cache = lcs.LRU(cap, hashpower=hp) if pol == LRU else lcs.S3FIFO(
                    cap, hashpower=hp, small_size_ratio=0.1, ghost_size_ratio=0.9,
                    move_to_main_threshold=2)
                t0 = time.perf_counter()
                miss_ratio, _ = cache.process_trace(reader)
                lt.append(time.perf_counter() - t0)
                lhits = int(round((1 - miss_ratio) * n))
    ratios = [l / k for k, l in zip(kt, lt)]
    return {"policy": "lru" if pol == LRU else "s3fifo", "capacity_blocks": cap,
            "s3fifo": {"small_pct": 10, "promote": 2, "fill_main": True}
            if pol == S3FIFO else None,
            "libcachesim_hashpower": hp, "kvtier_hits": khits, "libcachesim_hits": lhits, "exact": khits == lhits,
            "kvtier_accesses_per_s": summary([n / t for t in kt]),
            "libcachesim_accesses_per_s": summary([n / t for t in lt]),
            "ratio_vs_libcachesim": statistics.median(ratios),
            "ratio_range": summary(ratios), "target": 1.5,
            "pass": statistics.median(ratios) >= 1.5}


if __name__ == "__main__":
    sys.exit(main())
