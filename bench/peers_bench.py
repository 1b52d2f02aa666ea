"""`kvtier-bench peers`: the same KV-chunk work through each store's own
client, in one run, rounds interleaved.

The stores, each started here on loopback and driven by its own client:

  kvtier_local   kvtierd through kvtier's Python binding, the library as a
                 local client of the daemon (the `daemon` key: shared memory,
                 docs/DAEMON.md "Local clients")
  kvtierd_resp   the same kvtierd through redis-py (RESP over TCP)
  redis          Debian's redis-server (persistence off) through redis-py
  mooncake       Mooncake Store (mooncake_master with its HTTP metadata
                 server, and a mooncake_client holding the segment), through
                 MooncakeDistributedStore over its TCP transport: put_from /
                 get_into on buffers given to register_buffer (its zero-copy
                 calls), the calling processes contributing no segment
  mooncake_shm   the same mooncake_client through Mooncake's own local path:
                 MooncakeDistributedStore.setup_dummy, buffers from
                 alloc_from_mem_pool (memory shared with mooncake_client),
                 put_from / get_into
  lmcache        LMCache's multiprocess server, its L1 (DRAM) the store (no
                 L2 adapter), through LMCache's own client as
                 bench-data/lmcache_bench.py (kvtier-bench lmcache's) builds
                 it: LMCacheServerClient, one slot of shared-memory KV cache

The work: one chunk of 256 tokens of Qwen2.5-0.5B (3 MiB), Llama-3.1-8B
(32 MiB) and a 70B shape (80 layers, 8 KV heads, head dim 128, bf16: 80
MiB), stored (put) and read back (get) by 1, 4 and 16 clients at once, each
client a process of its own (so the GIL caps nothing), each doing its puts
(then its gets) back to back from a common start.  Per store and phase:
throughput (bytes of every client over the time from the common start to
the last client's end), p50/p99 latency of the single requests, and the
server's CPU time per request (utime+stime of its processes from
/proc/PID/stat, before and after; Mooncake's master and mooncake_client
together), and the clients' own CPU time and page faults per request.
Every round visits every store, the order rotated from round to round;
figures are medians with min/max over the rounds, and the ratios (kvtier's
throughput over the peer's, ratio_vs_<peer>) are taken round by round.
Keys are fresh in every round and deleted after it, so each store holds
one cell's working set at a time.  Each value carries stamps that every
get checks, and samples of its middle are checked after each run.

Each kvtier client maps kvtierd's whole arena into its page tables before
it is timed, as a long-running engine's client has it (KvtierClient's
_populate says why); kvtierd's arena is sized for its local clients'
reserved next writes too.  Memory: the run plans, from the memory free at
its start, which cells it can hold (Bench.plan), leaves the others out and
says so in "skipped": every cell of the full run takes about 22 GiB.

Lookup: how long the check of a 128-chunk prefix takes, one client: kvtier's
Store.lookup (one LOOKUP for the chain, answered from the daemon's index),
a pipeline of 128 EXISTS through redis-py, Mooncake's batch_is_exist, and
LMCache's own lookup through the wrapper; ratio_vs_<peer>, the peer's time
over kvtier's.

A store that cannot run here is reported with the exact error under
peers.<name>.error, and the others still run.

Usage (kvtier-bench peers runs this with the build's library, kvtierd and
package): peers_bench.py [--json] [--quick]"""
import argparse
import ctypes
import hashlib
import json
import math
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

CHUNK_TOKENS = 256
MIB = 1 << 20
SHAPES = [  # name, layers, kv heads, head dim (bf16, K and V)
    ("Qwen2.5-0.5B", 24, 2, 64),
    ("Llama-3.1-8B", 32, 8, 128),
    ("70B", 80, 8, 128),
]
LOOKUP_CHUNKS = 128
LOOKUP_SHAPE = ("lookup", 1, 1, 64)  # 64 KiB values: a lookup reads no value
BIG_CELL = 256 * MIB  # a cell whose clients let go of their buffers after it
# Anonymous memory of one client process (measured): LMCache's imports torch.
WORKER_MIB = {"kv": 64, "mooncake": 64, "mooncake_shm": 32, "lmcache": 384}
MEM_RESERVE = 3 << 29  # 1.5 GiB left to the machine's other users
TARGET_THROUGHPUT = 1.2
TARGET_LOOKUP = 10.0
PEERS = ["kvtier_local", "kvtierd_resp", "redis", "mooncake", "mooncake_shm", "lmcache"]
FAMILY = {"kvtier_local": "kv", "kvtierd_resp": "kv", "redis": "kv",
          "mooncake": "mooncake", "mooncake_shm": "mooncake_shm", "lmcache": "lmcache"}
KVTIER = ("kvtier_local", "kvtierd_resp")
# Each ratio: the peer, kvtier's path it is headed by, and the other path
# shown beside it.
RATIOS = [("redis", "kvtierd_resp", "kvtier_local"),
          ("mooncake", "kvtier_local", "kvtierd_resp"),
          ("mooncake_shm", "kvtier_local", "kvtierd_resp"),
          ("lmcache", "kvtier_local", "kvtierd_resp")]


def payload_bytes(shape):
    _, layers, heads, dim = shape
    return layers * heads * dim * 2 * 2 * CHUNK_TOKENS


class PeerError(Exception):
    pass


# --- the client side: one process per client ---------------------------------------

def _np():
    import numpy
    return numpy


def _fill(arr):
    """Bytes no store can compress, quickly: one random MiB repeated."""
    np = _np()
    block = np.frombuffer(os.urandom(min(MIB, arr.nbytes)), np.uint8)
    reps = -(-arr.nbytes // block.nbytes)
    arr[:] = np.tile(block, reps)[:arr.nbytes]


_BUF = {}


def _buffer(size):
    """The one buffer of this process for values of `size`: each put sends
    it, each get lands in it (Mooncake's and LMCache's) or is checked
    against it (redis-py's, which returns new bytes); the clients of one
    process share it."""
    if _BUF.get("size") != size:
        _BUF.clear()
        np = _np()
        buf = np.empty(size, np.uint8)
        _fill(buf)
        _BUF.update(size=size, buf=buf, ref=_samples(buf))
    return _BUF["buf"]


def _samples(buf):
    """4 KiB of the buffer's fill at a few offsets, which no put changes
    (the stamps are at its ends): a get's value is checked against them."""
    n = buf.nbytes
    return {off: bytes(buf[off:off + 4096]) for off in (8, n // 3, n // 2, max(8, n - 4104))}


class Client:
    """What every store's client does around its put and get: each value
    carries a stamp (its number) in its first and last 8 bytes, written
    into the buffer before its put; a get clears them first and checks
    them after, so a get that wrote nothing, or the wrong value, fails."""

    def stamp(self, s):
        self.buf[:8] = s
        self.buf[-8:] = s

    def unstamp(self, zero):
        self.buf[:8] = zero
        self.buf[-8:] = zero

    def ends(self, v):
        """A get's answer: its first and last 8 bytes, and its length."""
        return bytes(v[:8]), bytes(v[-8:]), len(v)

    def whole(self, v):
        """A get's answer as one flat buffer (checked after the timing)."""
        return v

    def release(self):
        """Let go of the value buffer (prepare makes it again)."""
        self.buf = self.view = None
        self.size = None
        _BUF.clear()


class RespClient(Client):
    """redis-py against redis-server or kvtierd (the same client for both)."""

    def __init__(self, spec):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=spec["port"], socket_timeout=300)
        self.r.ping()

    def prepare(self, size, shape=None):
        self.buf = _buffer(size)
        self.view = memoryview(self.buf)
        self.size = size

    def put(self, key):
        if not self.r.set(key, self.view):
            raise PeerError("SET %s refused" % key)

    def get(self, key):
        v = self.r.get(key)
        if v is None:
            raise PeerError("GET %s: no such key" % key)
        return v

    def delete(self, keys):
        for i in range(0, len(keys), 256):
            self.r.delete(*keys[i:i + 256])

    def lookup(self, keys):
        p = self.r.pipeline(transaction=False)
        for k in keys:
            p.exists(k)
        n = 0
        for x in p.execute():
            if not x:
                break
            n += 1
        return n


class KvtierClient(Client):
    """kvtier's binding, the library as a local client of kvtierd."""

    def __init__(self, spec):
        import kvtier
        self.kvtier = kvtier
        self.st = kvtier.Store(daemon="unix://" + spec["local"])
        self.keys = {}
        self.populated = self._populate()

    def _populate(self):
        """Map the daemon's whole arena into this process's page tables now,
        as a long-running engine's client has it after its first pass over
        the arena: otherwise each 4 KiB page this process is the first to
        write costs it a page fault (8192 for a 32 MiB put), which this
        benchmark's short-lived clients would pay on much of their data.
        Mooncake's clients here write from buffers already touched, and
        kvtierd and mooncake_client keep their own mappings warm.  What it
        did is in the JSON (peers.kvtier_local.client_arena)."""
        lay = self.kvtier.Layout(1, 1, 64, dtype="bf16", chunk_tokens=CHUNK_TOKENS)
        ns = self.st.namespace("kvtier-bench/peers/connect", lay)
        self.st.exists(ns, self.kvtier.Key(bytes(32)))  # connects: the arena is mapped
        spans = []
        with open("/proc/self/maps") as f:
            for line in f:
                if "kvtier-dram" in line:
                    a, b = (int(x, 16) for x in line.split()[0].split("-"))
                    spans.append((a, b - a))
        if not spans:
            return "no mapping of kvtierd's arena found in /proc/self/maps"
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        t = time.monotonic()
        for a, n in spans:
            if libc.madvise(a, n, 23) != 0:  # MADV_POPULATE_WRITE (Linux 5.14)
                return "madvise(MADV_POPULATE_WRITE): %s" % os.strerror(ctypes.get_errno())
        return "populated %d MiB in %.2f s" % (sum(n for _, n in spans) // MIB,
                                               time.monotonic() - t)

    def _key(self, name):
        """A kvtier key (32 bytes) for the benchmark's name of a value,
        made once: the naming is the benchmark's work, not the store's."""
        k = self.keys.get(name)
        if k is None:
            k = self.keys[name] = self.kvtier.Key(hashlib.sha256(name.encode()).digest())
        return k

    def prepare(self, size, shape=None):
        kt = self.kvtier
        shape = shape or next(s for s in SHAPES if payload_bytes(s) == size)
        lay = kt.Layout(shape[1], shape[2], shape[3], dtype="bf16", chunk_tokens=CHUNK_TOKENS)
        self.ns = self.st.namespace("kvtier-bench/peers/" + shape[0], lay)
        if self.ns.payload_bytes != size:
            raise PeerError("kvtier's layout of %s holds %d bytes, not %d" %
                            (shape[0], self.ns.payload_bytes, size))
        self.buf = _buffer(size)
        self.size = size

    def put(self, key):
        if not self.st.put(self.ns, self._key(key), self.buf):
            raise PeerError("put %s: the key was there" % key)

    def get(self, key):
        self.st.get(self.ns, self._key(key), self.buf)
        return self.buf

    def delete(self, keys):
        for k in keys:
            self.st.delete(self.ns, self._key(k))
            del self.keys[k]

    def lookup(self, keys):
        return self.st.lookup(self.ns, [self._key(k) for k in keys])


class MooncakeClient(Client):
    """MooncakeDistributedStore over its TCP transport, zero-copy calls on
    a registered buffer, contributing no segment of its own."""

    def __init__(self, spec):
        from mooncake.store import MooncakeDistributedStore
        self.s = MooncakeDistributedStore()
        rc = self.s.setup("127.0.0.1", spec["metadata"], 0, 0, "tcp", "", spec["master"])
        if rc != 0:
            raise PeerError("MooncakeDistributedStore.setup(127.0.0.1, %s, 0, 0, tcp, '', %s) "
                            "returned %d" % (spec["metadata"], spec["master"], rc))
        self.reg = None

    def prepare(self, size, shape=None):
        if self.reg is not None and getattr(self, "size", None) == size and \
                self.buf is _BUF.get("buf"):
            return
        if self.reg is not None:
            self.s.unregister_buffer(self.reg)
            self.reg = None
        self.buf = _buffer(size)
        rc = self.s.register_buffer(self.buf.ctypes.data, size)
        if rc != 0:
            raise PeerError("register_buffer(%d bytes) returned %d" % (size, rc))
        self.reg = self.buf.ctypes.data
        self.size = size

    def put(self, key):
        rc = self.s.put_from(key, self.buf.ctypes.data, self.size)
        if rc != 0:
            raise PeerError("put_from(%s, %d bytes) returned %d" % (key, self.size, rc))

    def get(self, key):
        rc = self.s.get_into(key, self.buf.ctypes.data, self.size)
        if rc != self.size:
            raise PeerError("get_into(%s, %d bytes) returned %d" % (key, self.size, rc))
        return self.buf

    def release(self):
        if self.reg is not None:
            self.s.unregister_buffer(self.reg)
            self.reg = None
        Client.release(self)

    def delete(self, keys):
        for k in keys:
            self.s.remove(k, True)

    def lookup(self, keys):
        n = 0
        for x in self.s.batch_is_exist(keys):
            if x != 1:
                break
            n += 1
        return n


class MooncakeShmClient(MooncakeClient):
    """MooncakeDistributedStore as a dummy client of the local
    mooncake_client: its buffer comes from a pool the two share."""

    def __init__(self, spec):
        self.spec = spec
        self.s = None
        self.buf = None
        self.pool = 0
        self.prepare(MIB)

    def prepare(self, size, shape=None):
        np = _np()
        from mooncake.store import MooncakeDistributedStore
        if getattr(self, "size", None) == size and self.buf is not None:
            return
        need = size + 4 * MIB
        if self.pool < need:
            self.buf = None
            if self.s is not None:
                self.s.close()
            self.s = MooncakeDistributedStore()
            rc = self.s.setup_dummy(need, 0, self.spec["client"])
            if rc != 0:
                raise PeerError("MooncakeDistributedStore.setup_dummy(%d, 0, %s) returned %d" %
                                (need, self.spec["client"], rc))
            self.pool = need
            self.addr = self.s.alloc_from_mem_pool(size)
            if not self.addr:
                raise PeerError("alloc_from_mem_pool(%d) returned 0" % size)
            rc = self.s.register_buffer(self.addr, size)
            if rc != 0:
                raise PeerError("register_buffer(alloc_from_mem_pool(%d)) returned %d" %
                                (size, rc))
        self.buf = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(self.addr))
        _fill(self.buf)
        self.ref = _samples(self.buf)
        self.size = size

    def release(self):
        """Close the dummy client: its pool goes with it."""
        self.buf = None
        self.size = None
        if self.s is not None:
            self.s.close()
        self.s = None
        self.pool = 0


class LMCacheClient(Client):
    """LMCache's own client (LMCacheServerClient of bench-data/lmcache_bench.py:
    LMCache's request client and the transfer context vLLM's
    LMCacheMPConnector uses, the KV cache in shared memory that the server
    reads and writes itself).  One slot: a put STOREs what the slot holds,
    a get LOOKUPs and RETRIEVEs into it, so no copy is added to LMCache's
    own; the stamps go straight into the slot's first and last bytes."""

    def __init__(self, spec):
        self.lb = _lmcache_module()
        self.spec = spec
        self.c = None

    def prepare(self, size, shape=None):
        torch = __import__("torch")
        shape = shape or next(s for s in SHAPES if payload_bytes(s) == size)
        if self.c is not None:
            self.c.close()
            self.c = None
        # The lookup asks for 128 chunks at once: a slot each.
        slots = LOOKUP_CHUNKS if shape == LOOKUP_SHAPE else 1
        self.c = self.lb.LMCacheServerClient(self.spec["rpc_url"],
                                             self.lb.Shape(shape[0], *shape[1:]), slots=slots)
        if self.c.chunk_bytes != size:
            raise PeerError("LMCache's chunk of %s is %d bytes, not %d" %
                            (shape[0], self.c.chunk_bytes, size))
        # The slot's random bytes (the wrapper's) are the value's; no
        # buffer of ours beside it.
        self.buf = _np().empty(0, _np().uint8)
        self.ref = _samples(self.whole(None, size))
        pieces = self.c._pieces(0)
        self.head, self.tail = pieces[0][:8], pieces[-1][-8:]
        self.torch = torch
        self.size = size

    def stamp(self, s):
        t = self.torch.from_numpy(s)
        self.head.copy_(t)
        self.tail.copy_(t)

    def unstamp(self, zero):
        self.stamp(zero)

    def ends(self, v):
        return bytes(self.head.numpy()), bytes(self.tail.numpy()), self.size

    def whole(self, v, size=None):
        out = _np().empty(size or self.size, _np().uint8)
        self.c.read_slot(0, out)
        return out

    def put(self, key):
        if not self.c.put([key])[0]:
            raise PeerError("STORE %s: not taken" % key)

    def get(self, key):
        if not self.c.get([key])[0]:
            raise PeerError("LOOKUP/RETRIEVE %s: not found" % key)
        return None

    def delete(self, keys):
        pass  # its client has no delete: the orchestrator clears its L1 (/cache/clear)

    def release(self):
        """Close the client: its KV cache (the slot) goes with it."""
        if self.c is not None:
            self.c.close()
        self.c = None

    def lookup(self, keys):
        n = 0
        for hit in self.c.contains(keys):
            if not hit:
                break
            n += 1
        return n


CLIENTS = {"kvtier_local": KvtierClient, "kvtierd_resp": RespClient, "redis": RespClient,
           "mooncake": MooncakeClient, "mooncake_shm": MooncakeShmClient,
           "lmcache": LMCacheClient}


def _lmcache_module():
    """bench-data/lmcache_bench.py, `kvtier-bench lmcache`'s own file, whose
    LMCacheServer and LMCacheServerClient this benchmark borrows."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(os.path.join(here, "lmcache_bench.py")):
        raise PeerError("no lmcache_bench.py in %s: LMCache's client wrapper "
                        "(bench/lmcache_bench.py) is not in this build's bench-data" % here)
    if here not in sys.path:
        sys.path.insert(0, here)
    import lmcache_bench
    missing = [n for n in ("LMCacheServer", "LMCacheServerClient", "Shape")
               if not hasattr(lmcache_bench, n)]
    if missing:
        raise PeerError("lmcache_bench.py has no %s" % ", ".join(missing))
    return lmcache_bench


def _stamp(i):
    return i.to_bytes(8, "little")


def _worker_run(c, op, keys, t0):
    """One client's puts (or gets) of `keys` [(stamp, name)], from t0 on.
    Each value carries its stamp in its first and last 8 bytes; a get
    clears them in the buffer first, so a get that wrote nothing fails."""
    np = _np()
    zero = np.zeros(8, np.uint8)
    lat = []
    errs = 0
    first = None
    last = None
    while True:
        d = t0 - time.monotonic()
        if d <= 0:
            break
        time.sleep(min(d, 0.002))
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    ts = time.monotonic()
    for stamp, k in keys:
        s = np.frombuffer(_stamp(stamp), np.uint8)
        a = time.monotonic()
        try:
            if op == "put":
                c.stamp(s)
                c.put(k)
            else:
                c.unstamp(zero)
                v = c.get(k)
                head, tail, n = c.ends(v)
                if n != c.size or head != s.tobytes() or tail != s.tobytes():
                    raise PeerError("get %s: the value read back is not the one stored" % k)
                last = (v,)
        except Exception as e:  # noqa: BLE001 (every failure is reported)
            errs += 1
            first = first or "%s: %s" % (type(e).__name__, e)
        lat.append(time.monotonic() - a)
    te = time.monotonic()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    if last is not None and first is None:
        # The middle too, in samples of the fill every value stored has.
        ref = getattr(c, "ref", None) or _BUF["ref"]
        last = c.whole(last[0])
        for off, want in ref.items():
            if bytes(last[off:off + 4096]) != want:
                errs += 1
                first = "a value read back differs from the one stored at byte %d" % off
                break
    return {"t0": ts, "t1": te, "lat": lat, "errors": errs, "error": first,
            "cpu": ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime,
            "faults": ru1.ru_minflt - ru0.ru_minflt}


def _preload(family):
    """Import what the family's clients will, while the servers start:
    seconds each (torch and LMCache's own modules above all)."""
    try:
        _np()
        if family == "kv":
            import kvtier  # noqa: F401
            import redis  # noqa: F401
        elif family.startswith("mooncake"):
            import mooncake.store  # noqa: F401
        elif family == "lmcache":
            _lmcache_module()
            import torch  # noqa: F401
            import zmq  # noqa: F401
            from lmcache.v1.multiprocess import transfer_context  # noqa: F401
            from lmcache.v1.multiprocess.transport import factory  # noqa: F401
    except Exception:  # noqa: BLE001 (opening the client reports it)
        traceback.print_exc()


def worker_main(conn, family, log):
    """A client process: opens its family's clients, then runs what the
    orchestrator sends (tuples over the pipe), answering each."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    _preload(family)
    clients = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        what, peer = msg[0], msg[1]
        try:
            if what == "quit":
                for c in clients.values():
                    close = getattr(getattr(c, "c", None), "close", None)
                    if close:
                        close()
                conn.send(("ok", None))
                return
            if what == "open":
                clients[peer] = CLIENTS[peer](msg[2])
                res = getattr(clients[peer], "populated", None)
            elif what == "prepare":
                c = clients[peer]
                res = c.prepare(msg[2]) if len(msg) < 4 else c.prepare(msg[2], msg[3])
            elif what == "run":
                res = _worker_run(clients[peer], msg[2], msg[3], msg[4])
            elif what == "delete":
                clients[peer].delete(msg[2])
                res = None
            elif what == "release":  # every client of this process lets go
                for c in clients.values():
                    c.release()
                res = None
            elif what == "lookup":
                c, keys, reps, cap = clients[peer], msg[2], msg[3], msg[4]
                c.lookup(keys)  # its first: connections and caches warm
                times = []
                end = time.monotonic() + cap
                while len(times) < reps and (len(times) < 3 or time.monotonic() < end):
                    a = time.monotonic()
                    hit = c.lookup(keys)
                    times.append(time.monotonic() - a)
                    if hit != len(keys):
                        raise PeerError("lookup found %d of %d chunks" % (hit, len(keys)))
                res = times
            else:
                raise PeerError("unknown request %r" % (what,))
            conn.send(("ok", res))
        except Exception as e:  # noqa: BLE001
            conn.send(("err", "%s: %s" % (type(e).__name__, e), traceback.format_exc()))


# --- the orchestrator -----------------------------------------------------------------

class PoolBroken(Exception):
    pass


class Pool:
    """n client processes of one family, each with a pipe."""

    def __init__(self, family, n, root):
        self.family, self.n, self.root = family, n, root
        self.ctx = mp.get_context("spawn")
        self.procs, self.conns = [], []
        saved = dict(os.environ)
        if family != "kv":  # no kvtier in these: spawn them as foreign programs
            os.environ.clear()
            os.environ.update(foreign_env())
        try:
            for i in range(n):
                a, b = self.ctx.Pipe()
                log = self.log(i)
                p = self.ctx.Process(target=worker_main, args=(b, family, log), daemon=True)
                p.start()
                b.close()
                self.procs.append(p)
                self.conns.append(a)
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def log(self, i):
        return os.path.join(self.root, "client-%s-%d.log" % (self.family, i))

    def tail(self, i, n=1500):
        try:
            with open(self.log(i), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def call(self, msgs, timeout):
        """Send msgs[i] to client i (for i < len(msgs)); their answers, in
        order.  A client that dies or does not answer in time breaks the pool."""
        for i, m in enumerate(msgs):
            try:
                self.conns[i].send(m)
            except OSError:
                self.procs[i].join(5)
                raise PoolBroken("client process %d died (exit code %s); its log ends: %s" %
                                 (i, self.procs[i].exitcode, self.tail(i)[-600:]))
        out = [None] * len(msgs)
        left = set(range(len(msgs)))
        end = time.monotonic() + timeout
        while left:
            ready = mpc.wait([self.conns[i] for i in left] + [self.procs[i].sentinel for i in left],
                             max(0, end - time.monotonic()))
            if not ready:
                raise PoolBroken("no answer from %d client(s) in %.0f s" % (len(left), timeout))
            for i in list(left):
                dead = False
                if self.conns[i] in ready:
                    try:
                        out[i] = self.conns[i].recv()
                        left.discard(i)
                        continue
                    except EOFError:
                        dead = True
                if dead or self.procs[i].sentinel in ready:
                    self.procs[i].join(5)
                    raise PoolBroken("client process %d died (exit code %s); its log ends: %s" %
                                     (i, self.procs[i].exitcode, self.tail(i)[-600:]))
        return out

    def close(self):
        self.quit()
        self.join()

    def quit(self):
        for c in self.conns:
            try:
                c.send(("quit", None))
            except (OSError, BrokenPipeError):
                pass

    def join(self):
        end = time.monotonic() + 20
        for p in self.procs:
            p.join(max(0.1, end - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, log, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise PeerError("%s exited with %s: %s" % (what, proc.returncode, tail_file(log)))
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise PeerError("%s did not listen on port %d in %d s: %s" %
                    (what, port, timeout, tail_file(log)))


def tail_file(path, n=800):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace").strip()
    except OSError as e:
        return str(e)


def foreign_env():
    """The environment for a program that is not kvtier's (a peer's server,
    a process of Mooncake's or LMCache's client): without the sanitizer
    runtime a sanitized build preloads for kvtier's library."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("ASAN_OPTIONS", None)
    return env


def spawn(argv, root, name, env=None):
    log = os.path.join(root, name + ".log")
    with open(log, "w") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
    return p, log


class Servers:
    """The stores' server processes, by peer."""

    def __init__(self):
        self.procs = []
        self.pids = {}     # peer -> [pid]
        self.spec = {}     # peer -> what a client needs
        self.cmd = {}      # peer -> [argv, ...]
        self.stops = []
        self.clear = {}    # peer -> what deletes every value (where its client cannot)

    def stop(self):
        for f in self.stops:
            try:
                f()
            except Exception:  # noqa: BLE001
                pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def start_kvtierd(sv, root, dram_mib):
    kvtierd = os.environ.get("KVTIER_KVTIERD")
    if not kvtierd:
        raise PeerError("KVTIER_KVTIERD is not set (kvtier-bench peers sets it)")
    sock = os.path.join(root, "kvtierd.sock")
    argv = [kvtierd, "--port", "0", "--local", sock, "--threads", "4", "--log-level", "warn",
            "--set", "max_local_cpu_size=%dMiB" % dram_mib]
    p, log = spawn(argv, root, "kvtierd")
    sv.procs.append(p)
    end = time.monotonic() + 60
    port = None
    while time.monotonic() < end and port is None:
        if p.poll() is not None:
            raise PeerError("kvtierd exited with %s: %s" % (p.returncode, tail_file(log)))
        for line in open(log, errors="replace"):
            if "listening on 127.0.0.1:" in line:
                port = int(line.split("listening on 127.0.0.1:")[1].split(",")[0].split()[0])
        if port is None or not os.path.exists(sock):
            port = None
            time.sleep(0.05)
    if port is None:
        raise PeerError("kvtierd did not start in 60 s: " + tail_file(log))
    for peer in KVTIER:
        sv.pids[peer] = [p.pid]
        sv.cmd[peer] = [argv]
    sv.spec["kvtierd_resp"] = {"port": port}
    sv.spec["kvtier_local"] = {"local": sock}


def start_redis(sv, root, maxmem_mib):
    rs = shutil.which("redis-server")
    if not rs:
        raise PeerError("redis-server is not on PATH (Debian's redis-server package)")
    port = free_port()
    argv = [rs, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--maxmemory", "%dmb" % maxmem_mib,
            "--maxmemory-policy", "noeviction", "--dir", root]
    p, log = spawn(argv, root, "redis-server", foreign_env())
    sv.procs.append(p)
    wait_port(port, p, log, "redis-server")
    sv.pids["redis"] = [p.pid]
    sv.spec["redis"] = {"port": port}
    sv.cmd["redis"] = [argv]


def mooncake_bin(name):
    import importlib.util
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.submodule_search_locations:
        raise PeerError("the mooncake package is not installed in %s "
                        "(PyPI's mooncake-transfer-engine-non-cuda)" % sys.executable)
    path = os.path.join(list(spec.submodule_search_locations)[0], name)
    if not os.access(path, os.X_OK):
        raise PeerError("%s is missing or not executable" % path)
    return path


def mooncake_version():
    import importlib.metadata
    for dist in ("mooncake-transfer-engine-non-cuda", "mooncake-transfer-engine"):
        try:
            return "%s %s" % (dist, importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def start_mooncake(sv, root, segment_mib):
    master, client = mooncake_bin("mooncake_master"), mooncake_bin("mooncake_client")
    rpc, http, metrics, cport = free_port(), free_port(), free_port(), free_port()
    margv = [master, "--rpc_address=127.0.0.1", "--rpc_port=%d" % rpc,
             "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
             "--http_metadata_server_port=%d" % http, "--metrics_host=127.0.0.1",
             "--metrics_port=%d" % metrics, "--logtostderr"]
    mp_, mlog = spawn(margv, root, "mooncake_master", foreign_env())
    sv.procs.append(mp_)
    wait_port(rpc, mp_, mlog, "mooncake_master")
    wait_port(http, mp_, mlog, "mooncake_master's HTTP metadata server")
    metadata = "http://127.0.0.1:%d/metadata" % http
    # mooncake_client: the store service holding the segment; --threads as
    # kvtierd's workers.
    cargv = [client, "--host=127.0.0.1", "--port=%d" % cport,
             "--master_server_address=127.0.0.1:%d" % rpc, "--metadata_server=" + metadata,
             "--global_segment_size=%d MB" % segment_mib, "--protocol=tcp", "--threads=4",
             "--logtostderr"]
    cp, clog = spawn(cargv, root, "mooncake_client", foreign_env())
    sv.procs.append(cp)
    wait_port(cport, cp, clog, "mooncake_client")
    spec = {"metadata": metadata, "master": "127.0.0.1:%d" % rpc,
            "client": "127.0.0.1:%d" % cport}
    for peer in ("mooncake", "mooncake_shm"):
        sv.pids[peer] = [mp_.pid, cp.pid]
        sv.spec[peer] = spec
        sv.cmd[peer] = [margv, cargv]


def launch_lmcache(sv, root, l1_mib):
    """LMCache's multiprocess server as lmcache_bench.py starts it, but
    with its DRAM (L1) as the store, as the other stores here keep theirs:
    no L2 adapter, the default store policy (lmcache_bench's server is an
    L2's benchmark: it names an adapter and makes L1 a write buffer)."""
    lb = _lmcache_module()
    srv = lb.LMCacheServer(root, "peers", {"type": "mock", "max_size_gb": 1,
                                           "mock_bandwidth_gb": 1},
                           l1_size_gb=round(l1_mib / 1024, 3), python=sys.executable)
    args = []
    it = iter(srv.args)
    for x in it:
        if x in ("--l2-adapter", "--l2-store-policy"):
            next(it)
        else:
            args.append(x)
    srv.args = args
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(foreign_env())
    try:
        srv.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    sv.stops.append(srv.stop)
    sv.cmd["lmcache"] = [[srv.python] + srv.args]
    return lambda: wait_lmcache(sv, srv, lb)


def wait_lmcache(sv, srv, lb):
    end = time.monotonic() + 300
    while True:
        if srv.proc.poll() is not None:
            raise PeerError("LMCache's server exited with status %s: %s" %
                            (srv.proc.returncode, lb._log_tail(srv.log, 1500)))
        try:
            if srv.status(timeout=2).get("is_healthy"):
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > end:
            raise PeerError("LMCache's server did not answer healthy in 300 s: " +
                            lb._log_tail(srv.log, 1500))
        time.sleep(0.25)
    sv.pids["lmcache"] = [srv.proc.pid]
    sv.spec["lmcache"] = {"rpc_url": srv.rpc_url}

    def clear():
        import urllib.request
        req = urllib.request.Request(srv.http_url + "/cache/clear", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
    sv.clear["lmcache"] = clear


def cpu_ticks(pids):
    t = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return t


def summary(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def pctl(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(math.ceil(q * len(xs))) - 1))]


class Bench:
    def __init__(self, a, root):
        self.a, self.root = a, root
        self.quick = a.quick
        self.sizes = SHAPES[:1] if a.quick else SHAPES
        self.clients = [1, 4] if a.quick else [1, 4, 16]
        self.rounds = 2 if a.quick else 4
        # Bytes per store and phase in a cell: enough for a steady figure,
        # at least one value per client.
        self.budget = (48 if a.quick else 256) * MIB
        self.pool_n = {}    # family -> client processes
        self.left_out = {}  # family -> why its largest cells are left out
        self.skipped = []
        self.plan()
        self.lookup_reps = 30 if a.quick else 100
        self.lookup_cap = 0.5 if a.quick else 2.0  # seconds per store and round, 3 lookups at least
        self.nonce = os.urandom(4).hex()
        self.sv = Servers()
        self.peer = {p: {"client": None, "error": None} for p in PEERS}
        self.pools = {}
        self.cur_size = None
        self.t0 = time.monotonic()

    # peers that still run
    def alive(self, fam=None):
        return [p for p in PEERS if self.peer[p]["error"] is None and p in self.sv.spec and
                (fam is None or FAMILY[p] == fam)]

    def fail(self, peer, msg):
        if self.peer[peer]["error"] is None:
            self.peer[peer]["error"] = msg

    def start(self):
        """The servers, then the client processes: LMCache's server (the
        slowest to come up) and the clients' imports overlap the rest."""
        n = max(self.clients)

        def failed(name, e):
            msg = str(e) if isinstance(e, PeerError) else "%s: %s" % (type(e).__name__, e)
            for p in PEERS:
                if p == name or (name == "kvtierd" and p in KVTIER) or \
                        (name == "mooncake" and p == "mooncake_shm"):
                    self.fail(p, msg)

        lmcache_up = None
        try:
            lmcache_up = launch_lmcache(self.sv, self.root, self.store_mib["lmcache_l1"])
        except Exception as e:  # noqa: BLE001
            failed("lmcache", e)
        mib = self.store_mib
        for name, f in (("kvtierd", lambda: start_kvtierd(self.sv, self.root, mib["kvtierd_dram"])),
                        ("redis", lambda: start_redis(self.sv, self.root, mib["redis_maxmemory"])),
                        ("mooncake",
                         lambda: start_mooncake(self.sv, self.root, mib["mooncake_segment"]))):
            try:
                f()
            except Exception as e:  # noqa: BLE001
                failed(name, e)
        self.spawn_pools(n)
        if lmcache_up:
            try:
                lmcache_up()
            except Exception as e:  # noqa: BLE001
                failed("lmcache", e)
        for fam in sorted({FAMILY[p] for p in self.alive()}):
            self.open_family(fam)
        for fam in list(self.pools):
            if not self.alive(fam):
                self.pools.pop(fam).close()

    def spawn_pools(self, n):
        for fam in sorted({FAMILY[p] for p in PEERS if not self.peer[p]["error"]}):
            self.pool_n[fam] = self.pool_plan[fam]
            self.pools[fam] = Pool(fam, self.pool_n[fam], self.root)

    def pool_sizes(self):
        return dict(self.pool_n)

    def open_family(self, fam, fresh=False):
        if fresh and fam in self.pools:
            self.pools.pop(fam).close()
        peers = self.alive(fam)
        if not peers:
            return
        if fam not in self.pools:
            self.pools[fam] = Pool(fam, self.pool_n[fam], self.root)
        pool = self.pools[fam]
        for p in peers:
            try:
                res = pool.call([("open", p, self.sv.spec[p])] * pool.n, 300)
            except PoolBroken as e:
                self.fail(p, "opening its client: %s" % e)
                return self.open_family(fam, fresh=True)
            errs = [r[1] for r in res if r[0] != "ok"]
            if errs:
                self.fail(p, "opening its client: " + errs[0])
            elif res[0][1]:
                self.peer[p]["client_arena"] = "client 0: " + res[0][1]

    def call(self, peer, msgs, timeout):
        """Ask the first len(msgs) clients of the peer's family; None (and
        the peer failed) if any of them failed."""
        fam = FAMILY[peer]
        try:
            res = self.pools[fam].call(msgs, timeout)
        except PoolBroken as e:
            self.fail(peer, str(e))
            self.open_family(fam, fresh=True)
            if self.cur_size and fam == "lmcache":  # the others prepare per cell
                for p in self.alive(fam):
                    self.call(p, [("prepare", p, self.cur_size)] * self.pool_n[fam], 600)
            return None
        errs = [r[1] for r in res if r[0] != "ok"]
        if errs:
            self.fail(peer, errs[0])
            return None
        return [r[1] for r in res]

    def delete(self, peer, keys):
        """Delete each client's keys (keys[i]: client i's), or clear the
        store where its client cannot delete."""
        self.call(peer, [("delete", peer, k) for k in keys], 300)
        clear = self.sv.clear.get(peer)
        if clear:
            try:
                clear()
            except Exception as e:  # noqa: BLE001
                self.fail(peer, "clearing it: %s: %s" % (type(e).__name__, e))

    # --- lookup ---------------------------------------------------------------------------
    def lookup(self):
        size = payload_bytes(LOOKUP_SHAPE)
        keys = ["peers/%s/lookup/%d" % (self.nonce, i) for i in range(LOOKUP_CHUNKS)]
        peers = self.alive()
        for p in peers:
            if self.call(p, [("prepare", p, size, LOOKUP_SHAPE)], 120) is None:
                continue
            r = self.call(p, [("run", p, "put", list(enumerate(keys)), 0)], 120)
            if r is not None and r[0]["errors"]:
                self.fail(p, "storing the lookup's chunks: " + r[0]["error"])
        rows = {p: [] for p in peers}
        for rnd in range(self.rounds):
            k = rnd % len(peers)
            for p in peers[k:] + peers[:k]:
                if self.peer[p]["error"]:
                    continue
                r = self.call(p, [("lookup", p, keys, self.lookup_reps, self.lookup_cap)], 300)
                if r is not None:
                    rows[p].append(r[0])
        for p in peers:
            if not self.peer[p]["error"]:
                self.delete(p, [keys])
        out = {"chunks": LOOKUP_CHUNKS, "peers": {}}
        for p in PEERS:
            t = rows.get(p) or []
            if not t or (self.peer[p]["error"] and len(t) < self.rounds):
                out["peers"][p] = {"error": self.peer[p]["error"] or "not run"}
                continue
            out["peers"][p] = {"us": summary([1e6 * statistics.median(x) for x in t]),
                               "p99_us": summary([1e6 * pctl(x, 0.99) for x in t]),
                               "lookups_per_round": min(len(x) for x in t)}
        kv = rows.get("kvtier_local") or []
        for peer, _, _ in RATIOS + [("kvtierd_resp", None, None)]:
            pt = rows.get(peer) or []
            key = "ratio_vs_" + ("kvtierd_resp" if peer == "kvtierd_resp" else peer)
            if len(kv) == len(pt) == self.rounds and "error" not in out["peers"][peer] and \
                    "error" not in out["peers"]["kvtier_local"]:
                s = summary([statistics.median(b) / statistics.median(a) for a, b in zip(kv, pt)])
                out[key] = dict(s, kvtier_path="kvtier_local", target=TARGET_LOOKUP,
                                **{"pass": s["median"] >= TARGET_LOOKUP})
            else:
                out[key] = {"kvtier_path": "kvtier_local", "target": TARGET_LOOKUP,
                            "pass": False, "error": (out["peers"][peer].get("error") or
                                                     out["peers"]["kvtier_local"].get("error"))}
        # kvtierd's own EXISTS pipeline is a figure beside redis's, not a peer
        out["ratio_vs_kvtierd_resp"].pop("target", None)
        out["ratio_vs_kvtierd_resp"].pop("pass", None)
        return out

    # --- put and get ----------------------------------------------------------------------
    def ops_per_client(self, size, c):
        return max(1, min(64, -(-self.budget // (c * size))))

    def cell(self, peer, size, c, rnd):
        """One store's puts then gets of one cell in one round; its figures."""
        k = self.ops_per_client(size, c)
        keys = [[(w * k + i + 1, "peers/%s/%d/%d/%d/%s/%d" % (self.nonce, size, c, rnd, w, i))
                 for i in range(k)] for w in range(c)]
        # Buffers per cell (the same size is kept, so this is a no-op
        # mostly); a big cell's are let go after it, so that the families'
        # clients do not all hold theirs at once.  LMCache's client is made
        # per size (its slot is its KV cache).
        per_cell = FAMILY[peer] != "lmcache"
        big = per_cell and c * size > BIG_CELL
        if per_cell and self.call(peer, [("prepare", peer, size)] * c, 300) is None:
            return None
        try:
            return self._cell(peer, size, c, k, keys)
        finally:
            if big and self.peer[peer]["error"] is None:
                self.call(peer, [("release", peer)] * c, 300)

    def _cell(self, peer, size, c, k, keys):
        timeout = 120 + c * k * size / (10 * MIB)
        pids = self.sv.pids[peer]
        figs = {}
        for op in ("put", "get"):
            t0 = time.monotonic() + 0.05 + 0.01 * c
            try:
                cpu0 = cpu_ticks(pids)
            except OSError as e:
                self.fail(peer, "its server is gone: %s" % e)
                return None
            res = self.call(peer, [("run", peer, op, keys[w], t0) for w in range(c)], timeout)
            if res is None:
                return None
            cpu1 = cpu_ticks(pids)
            bad = [r["error"] for r in res if r["errors"]]
            if bad:
                self.fail(peer, "%s of %d MiB by %d clients: %s" % (op, size // MIB, c, bad[0]))
                self.delete(peer, [[n for _, n in keys[w]] for w in range(c)])
                return None
            wall = max(r["t1"] for r in res) - min(r["t0"] for r in res)
            lat = [x for r in res for x in r["lat"]]
            figs[op] = {"gb_per_s": c * k * size / wall / 1e9,
                        "p50_ms": 1e3 * pctl(lat, 0.5), "p99_ms": 1e3 * pctl(lat, 0.99),
                        "server_cpu_ms_per_req":
                            1e3 * (cpu1 - cpu0) / os.sysconf("SC_CLK_TCK") / len(lat),
                        "client_cpu_ms_per_req": 1e3 * sum(r["cpu"] for r in res) / len(lat),
                        "client_faults_per_req": sum(r["faults"] for r in res) / len(lat)}
        self.delete(peer, [[n for _, n in keys[w]] for w in range(c)])
        return figs

    @staticmethod
    def stores_mib(m, b):
        """The stores' sizes for cells of at most m bytes of values (all
        clients' together) and b bytes in flight (a value per client)."""
        return {
            # kvtierd also keeps, for each local client, pages reserved for
            # its next write of the size it wrote last (docs/DAEMON.md,
            # "Local clients"), held while the client is idle.
            "kvtierd_dram": (m + b + 256 * MIB) // MIB,
            # redis counts the query buffers of the SETs in flight (a whole
            # value each) with the values it holds.
            "redis_maxmemory": (m + b + 256 * MIB) // MIB,
            "mooncake_segment": (m * 5 // 4 + 256 * MIB) // MIB,
            "lmcache_l1": (m * 9 // 8 + 128 * MIB) // MIB}

    def plan(self):
        """Which cells this machine has the memory for now, with
        MEM_RESERVE left to its other users, and the stores sized to them.
        A cell of c clients of `size` holds m = c x ops x size of values
        and b = c x size in flight; the run needs the stores (kvtierd's
        arena and LMCache's L1 allocated at their start, Mooncake's segment
        and redis as they fill), the running store's clients' buffers, a
        redis-py GET's copies and LMCache's slots (3 b), and the client
        processes themselves.  Cells are taken smallest first while they
        fit; LMCache's 16 clients (torch each) only if everything does."""
        cells = sorted(((c * self.ops_per_client(payload_bytes(s), c) * payload_bytes(s),
                         c * payload_bytes(s), s, c) for s in self.sizes for c in self.clients),
                       key=lambda x: (x[1], x[0]))
        avail = self.mem_available() - MEM_RESERVE

        def need(m, b, n, n_lm):
            st = self.stores_mib(m, b)
            procs = n * (WORKER_MIB["kv"] + WORKER_MIB["mooncake"] + WORKER_MIB["mooncake_shm"])
            procs += n_lm * WORKER_MIB["lmcache"] + 768  # and the servers' own
            return (sum(st.values()) + procs) * MIB + 3 * b

        self.cells = set()
        m = b = n = n_lm = 0
        for cm, cb, s, c in cells:
            m1, b1, n1 = max(m, cm), max(b, cb), max(n, c)
            if need(m1, b1, n1, n1) <= avail:
                n_lm = n1
            elif need(m1, b1, n1, n_lm) > avail or not n_lm:
                self.skipped.append(
                    "%s (%d MiB) by %d clients left out: with it the run needs about %.1f GiB, "
                    "%.1f GiB is available and %.1f GiB is left to the machine's other users" %
                    (s[0], payload_bytes(s) // MIB, c, need(m1, b1, n1, n_lm) / (1 << 30),
                     (avail + MEM_RESERVE) / (1 << 30), MEM_RESERVE / (1 << 30)))
                continue
            self.cells.add((payload_bytes(s), c))
            m, b, n = m1, b1, n1
        if not self.cells:  # the smallest cell at least: the stores are sized for it
            m, b, s, n = cells[0]
            n_lm = n
            self.cells.add((payload_bytes(s), n))
            self.skipped.pop(0)
        if n_lm < n:
            self.left_out["lmcache"] = (
                "%d clients left out: its client processes (torch, about %d MiB each) do not "
                "fit beside the rest in the memory available (%.1f GiB, %.1f GiB left to the "
                "machine's other users)" % (n, WORKER_MIB["lmcache"],
                                            (avail + MEM_RESERVE) / (1 << 30),
                                            MEM_RESERVE / (1 << 30)))
            self.skipped.append("lmcache: " + self.left_out["lmcache"])
        self.store_mib = self.stores_mib(m, b)
        self.pool_plan = {"kv": n, "mooncake": n, "mooncake_shm": n, "lmcache": max(1, n_lm)}

    def mem_available(self):
        with open("/proc/meminfo") as f:
            return next(int(x.split()[1]) << 10 for x in f if x.startswith("MemAvailable:"))

    def memory_short(self, size, c):
        """Why c clients of this size are left out after all, if the
        machine's other users took the memory plan() counted on: the
        cell's buffers, copies and slots, and redis's and Mooncake's growth,
        with half of MEM_RESERVE still free."""
        need = c * size * 3 + 2 * c * self.ops_per_client(size, c) * size
        avail = self.mem_available()
        if avail < need + MEM_RESERVE // 2:
            return ("%d MiB chunks by %d clients left out: they need about %.1f GiB, %.1f GiB is "
                    "available and %.2f GiB is left to the machine's other users" %
                    (size // MIB, c, need / (1 << 30), avail / (1 << 30),
                     MEM_RESERVE / 2 / (1 << 30)))
        return None

    def run(self):
        self.start()
        self.progress("started; the lookup")
        lookup = self.lookup()
        results = []
        for shape in self.sizes:
            size = payload_bytes(shape)
            self.cur_size = None
            # The last size's buffers go first (LMCache's clients with it).
            for fam, pool in self.pools.items():
                p = self.alive(fam)
                if p:
                    self.call(p[0], [("release", p[0])] * pool.n, 300)
            clients = []
            for c in self.clients:
                if (size, c) not in self.cells:
                    continue
                why = self.memory_short(size, c)
                if why:
                    self.skipped.append(why)
                    self.progress(why)
                else:
                    clients.append(c)
            if not clients:
                continue
            cmax = max(clients)
            self.cur_size = size
            self.progress("%s (%d MiB): LMCache's clients, and a warm-up cell" %
                          (shape[0], size // MIB))
            if "lmcache" in self.alive():
                m = min(cmax, self.pool_n["lmcache"])
                self.call("lmcache", [("prepare", "lmcache", size)] * m, 600)
            # Unrecorded: the largest cell once, so that no round pays for
            # a store's first touch of its memory (Mooncake's segment and
            # redis's heap grow as they are written).
            for p in self.alive():
                self.cell(p, size, min(cmax, self.pool_n[FAMILY[p]]), -1)
            cells = {c: {p: [] for p in PEERS} for c in clients}
            for rnd in range(self.rounds):
                for c in clients:
                    self.progress("%s (%d MiB): round %d of %d, %d client(s)" %
                                  (shape[0], size // MIB, rnd + 1, self.rounds, c))
                    peers = [p for p in self.alive() if c <= self.pool_n[FAMILY[p]]]
                    k = rnd % max(1, len(peers))
                    for p in peers[k:] + peers[:k]:
                        if self.mem_available() < MEM_RESERVE // 4:
                            self.fail(p, "left out at %s by %d clients, round %d: the machine's "
                                      "available memory fell below %d MiB" %
                                      (shape[0], c, rnd + 1, MEM_RESERVE // 4 // MIB))
                            continue
                        cells[c][p].append(self.cell(p, size, c, rnd))
            for c in clients:
                for op in ("put", "get"):
                    results.append(self.row(shape, size, c, op, cells[c]))
        return lookup, results

    def row(self, shape, size, c, op, cell):
        row = {"model": shape[0], "value_mib": size / MIB, "clients": c, "op": op,
               "ops_per_client": self.ops_per_client(size, c), "rounds": self.rounds,
               "peers": {}}
        ok = {}
        for p in PEERS:
            runs = cell[p]
            if len(runs) == self.rounds and all(runs):
                ok[p] = [r[op] for r in runs]
                row["peers"][p] = {f: summary([x[f] for x in ok[p]]) for f in
                                   ("gb_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_req",
                                    "client_cpu_ms_per_req", "client_faults_per_req")}
            elif self.peer[p]["error"]:
                row["peers"][p] = {"error": self.peer[p]["error"]}
            elif c > self.pool_n.get(FAMILY[p], 0):
                row["peers"][p] = {"error": self.left_out.get(FAMILY[p], "not run")}
            else:
                row["peers"][p] = {"error": "not run"}
        for peer, path, other in RATIOS:
            key = "ratio_vs_" + peer
            r = {"kvtier_path": path, "target": TARGET_THROUGHPUT, "pass": False}
            if peer in ok and path in ok:
                s = summary([a["gb_per_s"] / b["gb_per_s"] for a, b in zip(ok[path], ok[peer])])
                r.update(s)
                r["pass"] = s["median"] >= TARGET_THROUGHPUT
                if other in ok:
                    r[other] = summary([a["gb_per_s"] / b["gb_per_s"]
                                        for a, b in zip(ok[other], ok[peer])])
                r["server_cpu_ms_per_req"] = {
                    path: row["peers"][path]["server_cpu_ms_per_req"]["median"],
                    peer: row["peers"][peer]["server_cpu_ms_per_req"]["median"]}
            else:
                r["error"] = row["peers"].get(peer, {}).get("error") or \
                    row["peers"].get(path, {}).get("error")
            row[key] = r
        return row

    def progress(self, what):
        print("kvtier-bench peers: %5.0f s: %s" % (time.monotonic() - self.t0, what),
              file=sys.stderr, flush=True)

    def close(self):
        self.progress("stopping")
        for pool in self.pools.values():
            pool.quit()
        for pool in self.pools.values():
            pool.join()
        self.sv.stop()
        self.progress("stopped")


def describe(b):
    d = {}
    what = {
        "kvtier_local": "kvtierd through kvtier's Python binding as its local client "
                        "(kvtier.Store(daemon='unix://...'): shared memory)",
        "kvtierd_resp": "kvtierd through redis-py (RESP over TCP)",
        "redis": "redis-server through redis-py (RESP over TCP)",
        "mooncake": "Mooncake Store through MooncakeDistributedStore, TCP transport, "
                    "put_from/get_into on registered buffers; the segment in mooncake_client",
        "mooncake_shm": "Mooncake Store through MooncakeDistributedStore.setup_dummy on the "
                        "same mooncake_client (its shared-memory local path), put_from/get_into "
                        "on alloc_from_mem_pool buffers",
        "lmcache": "LMCache's multiprocess server (its L1, DRAM, as the store; no L2 adapter) "
                   "through LMCache's own client as bench-data/lmcache_bench.py builds it "
                   "(LMCacheServerClient: the KV cache in shared memory, one slot)",
    }
    for p in PEERS:
        d[p] = {"what": what[p], "server": b.sv.cmd.get(p)}
        if b.peer[p].get("client_arena"):
            d[p]["client_arena"] = b.peer[p]["client_arena"]
        if b.peer[p]["error"]:
            d[p]["error"] = b.peer[p]["error"]
    d["mooncake"]["version"] = d["mooncake_shm"]["version"] = mooncake_version()
    try:
        import importlib.metadata
        d["lmcache"]["version"] = "lmcache " + importlib.metadata.version("lmcache")
    except Exception:  # noqa: BLE001
        pass
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        d["redis"]["version"] = out
    except Exception:  # noqa: BLE001
        pass
    return d


def print_text(doc):
    print("kvtier-bench peers: the same chunks through each store's own client "
          "(%d rounds, medians [min..max])" % doc["rounds"])
    for p, d in doc["peers"].items():
        if "error" in d:
            print("  %-13s not measured: %s" % (p, d["error"][:300]))
    for why in doc["skipped"]:
        print("  " + why)
    lk = doc["lookup"]
    print("\n%d-chunk prefix lookup:" % lk["chunks"])
    for p, d in lk["peers"].items():
        if "us" in d:
            print("  %-13s %9.1f us  [%.1f..%.1f]" % (p, d["us"]["median"], d["us"]["min"],
                                                    d["us"]["max"]))
    for peer, _, _ in RATIOS:
        r = lk["ratio_vs_" + peer]
        if "median" in r:
            print("  ratio_vs_%-12s %6.1f [%.1f..%.1f]  target %g: %s" %
                  (peer, r["median"], r["min"], r["max"], r["target"],
                   "pass" if r["pass"] else "FAIL"))
    for row in doc["results"]:
        print("\n%s, %g MiB chunk, %d client(s), %s (%d each): GB/s, latency, "
              "CPU ms per request of the server and of the clients" %
              (row["model"], row["value_mib"], row["clients"], row["op"],
               row["ops_per_client"]))
        for p, d in row["peers"].items():
            if "gb_per_s" in d:
                print("  %-13s %7.3f [%.3f..%.3f]  p50 %7.2f ms  p99 %7.2f ms  server %6.2f"
                      "  clients %6.2f" %
                      (p, d["gb_per_s"]["median"], d["gb_per_s"]["min"], d["gb_per_s"]["max"],
                       d["p50_ms"]["median"], d["p99_ms"]["median"],
                       d["server_cpu_ms_per_req"]["median"], d["client_cpu_ms_per_req"]["median"]))
        for peer, path, other in RATIOS:
            r = row["ratio_vs_" + peer]
            if "median" in r:
                extra = (", %s %.2f" % (other, r[other]["median"])) if other in r else ""
                print("  ratio_vs_%-12s %5.2f [%.2f..%.2f] (%s%s)  target %g: %s" %
                      (peer, r["median"], r["min"], r["max"], path, extra, r["target"],
                       "pass" if r["pass"] else "FAIL"))


def main():
    ap = argparse.ArgumentParser(prog="kvtier-bench peers")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kvt-bench-peers-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    b = Bench(a, root)
    t_start = time.monotonic()
    load0 = os.getloadavg()
    try:
        lookup, results = b.run()
        doc = {"bench": "peers", "quick": a.quick, "rounds": b.rounds,
               "chunk_tokens": CHUNK_TOKENS, "clients": b.clients,
               "machine": {"cpus": os.cpu_count(), "loadavg_start": list(load0),
                           "loadavg_end": list(os.getloadavg())},
               "store_mib": b.store_mib, "client_processes": b.pool_sizes(),
               "skipped": b.skipped,
               "peers": describe(b), "lookup": lookup, "results": results,
               "targets": {"ratio_vs_peer": TARGET_THROUGHPUT, "lookup_ratio_vs_peer":
                           TARGET_LOOKUP},
               "seconds": time.monotonic() - t_start}
    finally:
        b.close()
        shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        print_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
