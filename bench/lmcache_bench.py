"""The Python side of `kvtier-bench lmcache` (bench/lmcache.c runs it): kvtier
beside LMCache's own storage, each driven by LMCache's own client code.

(a) L2 of LMCache's multiprocess server.  Two servers run, the real
    `lmcache server` (lmcache.v1.multiprocess.http_server: the multiprocess
    server of lmcache.v1.multiprocess.server with its HTTP frontend, whose
    /status tells when the L1 has handed every chunk to the L2), CPU only, a
    1 GB L1, `--l2-store-policy skip_l1` (an L1 object is deleted once its
    L2 store succeeded, so L1 is a write buffer only): one with kvtier as
    its L2 (the "plugin" adapter type loading kvtier.lmcache.KvtierL2Adapter
    over a kvtier store whose one tier is the disk tier on DIR/kvtier), one
    with LMCache's own local-disk adapter ("fs_native", its C++ file-system
    connector, on DIR/lmcache: the same parent directory, the same file
    system).  The client is LMCache's own: the transfer context and request
    client vLLM's LMCacheMPConnector uses (lmcache_driven transfer; on the
    CPU the KV cache is handed over in POSIX shared memory), as LMCache's
    own `lmcache bench server` builds it.  Each 256-token chunk is its own
    request (its tokens derived from its key).

    store     every chunk of the round STOREd into the server, until /status
              shows L1 empty: the L2 has all of them.  Bytes / that time.
    retrieve  L1 is empty, so each chunk's LOOKUP misses L1 and LMCache's
              prefetch controller loads it from the L2 into L1; then the
              RETRIEVE copies it into the client's KV cache.  From the
              first LOOKUP to the last RETRIEVE's answer.  Every chunk
              comes back byte-identical (checked after the timing) or the
              round fails.  L1 is cleared afterwards.

    ratio_vs_lmcache_disk = kvtier's bandwidth / LMCache disk's (target 1.0).

(b) LMCache's Redis remote connectors, its own code through its connector
    factory (lmcache.v1.storage_backend.connector.CreateConnector):
    "redis" (redis://, RedisConnector over redis-py's asyncio client, a
    metadata and a kv_bytes key per chunk) and "resp" (resp://,
    RESPConnector over the native lmcache_redis client), each against
    kvtierd (a DRAM tier) and against redis-server (persistence off):
    batched_put and batched_get_non_blocking of 8 chunks at a time (8
    requests in flight).  ratio_vs_redis = kvtierd's bandwidth /
    redis-server's (target 1.2).

Rounds interleave: kvtier and its peer alternate, the order flipping each
round, after one uncounted warm-up round each (2 chunks; one batch in (b));
every figure is a median with min and max over the rounds, a ratio the
median of the per-round ratios.  A part that cannot run says why in the
JSON ("error", the exception's own text) and the program exits 1 after
printing everything else.

Reusable (kvtier-bench peers imports it from bench-data; nothing heavy is
imported until a class is used; importing it sets LMCACHE_LOG_LEVEL=ERROR
and turns LMCache's usage reporting off, unless the environment says
otherwise):

    sys.path.insert(0, "<build>/bench-data")
    import lmcache_bench as lb
    srv = lb.LMCacheServer(root, "disk", {"type": "fs_native", "base_path": d})
    srv.start(); srv.wait_ready()
    c = lb.LMCacheServerClient(srv.rpc_url, lb.SHAPES["llama-3.1-8b"], slots=16)
    c.put(["k1", "k2"], [buf1, buf2])    # [True, True]; buffers of c.chunk_bytes
    srv.wait_l2_stored()                 # L1 emptied into the L2 (skip_l1)
    c.get(["k1"], [out])                 # [True]: out holds k1's bytes
    c.contains(["k1", "none"])           # [True, False]
    c.close(); srv.stop()

    r = lb.LMCacheRemoteClient("resp://127.0.0.1:6379", lb.SHAPES["qwen2.5-0.5b"])
    r.put(keys, bufs); r.get(keys, outs); r.contains(keys); r.close()

Without buffers put stores what the client's slots hold and get leaves the
chunks there (c.slot_digest(i) names slot i's bytes), which is what the
benchmark times: no copies beside LMCache's own.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import uuid

CHUNK_TOKENS = 256
BLOCK_TOKENS = 16
BLOCKS_PER_CHUNK = CHUNK_TOKENS // BLOCK_TOKENS

# LMCache's logging and usage reporting: quiet, and nothing sent anywhere.
QUIET_ENV = {"LMCACHE_LOG_LEVEL": "ERROR", "LMCACHE_TRACK_USAGE": "false",
             "DO_NOT_TRACK": "1", "PYTHONWARNINGS": "ignore"}
for _k, _v in QUIET_ENV.items():
    os.environ.setdefault(_k, _v)


class Shape:
    """A model's KV cache: per 256-token chunk, layers x K/V x tokens x
    kv_heads x head_dim bf16 values."""

    def __init__(self, name, layers, kv_heads, head_dim):
        self.name = name
        self.layers = layers
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.chunk_bytes = layers * 2 * CHUNK_TOKENS * kv_heads * head_dim * 2

    def describe(self):
        return {"layers": self.layers, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "dtype": "bfloat16", "chunk_tokens": CHUNK_TOKENS,
                "chunk_bytes": self.chunk_bytes}


SHAPES = {
    "llama-3.1-8b": Shape("llama-3.1-8b", 32, 8, 128),  # 32 MiB a chunk
    "qwen2.5-0.5b": Shape("qwen2.5-0.5b", 24, 2, 64),   # 3 MiB a chunk
}


def _die_with_parent():
    """preexec_fn of every server started here: SIGTERM when this process
    ends, however it ends (a killed benchmark leaves no server behind)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path, n=4000):
    """What a server died with: the last exception line of its log (the
    exact error), then the end of the log from its last traceback on."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        return "(no log: %s)" % e
    at = text.rfind("Traceback (most recent call last)")
    tail = (text[at:] if at >= 0 else text)[-n:].strip()
    last = [l for l in tail.splitlines()
            if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", l)]
    return "%s -- its log: %s" % (last[-1], tail) if last else tail


# --- LMCache's multiprocess server ----------------------------------------------


class LMCacheServer:
    """One LMCache multiprocess server (`lmcache server`: the MP server and
    its HTTP frontend) with one L2 adapter, in a process of its own.

    l2_adapter: the --l2-adapter JSON (a dict).  The L2 store policy is
    skip_l1 (L1 a write buffer: an object leaves L1 once its L2 store
    succeeded), eviction LRU, chunks of 256 tokens.  Its output goes to
    <root>/lmcache-<name>.log."""

    def __init__(self, root, name, l2_adapter, l1_size_gb=1.0, python=None, extra_args=()):
        self.name = name
        self.l2_adapter = l2_adapter
        self.port = free_port()
        self.http_port = free_port()
        self.rpc_url = "tcp://127.0.0.1:%d" % self.port
        self.http_url = "http://127.0.0.1:%d" % self.http_port
        self.log = os.path.join(root, "lmcache-%s.log" % name)
        self.args = ["-m", "lmcache.v1.multiprocess.http_server",
                     "--host", "127.0.0.1", "--port", str(self.port),
                     "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
                     "--chunk-size", str(CHUNK_TOKENS),
                     "--l1-size-gb", str(l1_size_gb), "--no-l1-use-lazy",
                     "--eviction-policy", "LRU", "--l2-store-policy", "skip_l1",
                     "--prometheus-port", str(free_port()),
                     "--l2-adapter", json.dumps(l2_adapter)] + list(extra_args)
        self.python = python or sys.executable
        self.proc = None

    def start(self):
        env = dict(os.environ, **QUIET_ENV)
        env["LMCACHE_LOG_LEVEL"] = "INFO"  # its log is a file: keep what it says
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([self.python] + self.args, stdout=out,
                                         stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def wait_ready(self, timeout=300):
        """Until /status answers healthy with its L2 adapter up; raises
        RuntimeError with the server's own error if it died or never came up."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(self.exit_reason())
            try:
                st = self.status(timeout=2)
            except OSError:
                time.sleep(0.25)
                continue
            sm = st["storage_manager"]
            if not st.get("is_healthy") or not sm.get("l2_adapters"):
                raise RuntimeError("LMCache's server (%s) is up but unhealthy: %s" %
                                   (self.name, json.dumps(sm)[:2000]))
            return st
        raise RuntimeError("LMCache's server (%s) did not answer in %d s: %s" %
                           (self.name, timeout, _log_tail(self.log)))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def exit_reason(self):
        """Why the server process ended: its status and the error it
        logged, or the signal that killed it."""
        rc = self.proc.returncode
        if rc is not None and rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
            return ("LMCache's server (%s) was killed by %s%s" %
                    (self.name, name, " (no error in its log: the kernel's OOM killer, or "
                     "another process)" if -rc == signal.SIGKILL else ""))
        return "LMCache's server (%s) exited with status %s: %s" % (self.name, rc,
                                                                   _log_tail(self.log))

    def status(self, timeout=10):
        with urllib.request.urlopen(self.http_url + "/status", timeout=timeout) as r:
            return json.load(r)

    def _l1_state(self):
        sm = self.status()["storage_manager"]
        l1, sc = sm["l1_manager"], sm["store_controller"]
        return (l1["total_object_count"], sc["pending_keys_count"],
                sc["in_flight_task_count"])

    def wait_l2_stored(self, timeout=300, poll=0.01):
        """Until L1 holds no object and no L2 store is pending or in flight.
        Under skip_l1 an object leaves L1 when its L2 store succeeded (a
        failed one stays), so this is "the L2 has every chunk stored".
        Raises TimeoutError naming what is left."""
        end = time.monotonic() + timeout
        while True:
            state = self._l1_state()
            if state == (0, 0, 0):
                return
            if time.monotonic() > end:
                raise TimeoutError("LMCache's server (%s): after %d s L1 still holds %d "
                                   "objects (%d keys pending, %d L2 stores in flight): the "
                                   "L2 did not take them; its log: %s" %
                                   ((self.name, timeout) + state + (_log_tail(self.log, 1500),)))
            time.sleep(poll)

    def clear_l1(self):
        """LMCache's /cache/clear: L1 only (the L2 keeps everything)."""
        req = urllib.request.Request(self.http_url + "/cache/clear", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        self.wait_l2_stored(timeout=60)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)


class LMCacheServerClient:
    """LMCache's MP server through LMCache's own client: its request client
    (zmq) and the transfer context vLLM's LMCacheMPConnector registers its
    KV cache with (lmcache_driven: the server reads and writes the client's
    paged KV cache itself; on the CPU that cache lives in POSIX shared
    memory).

    The KV cache holds `slots` chunks of `shape` (16-token blocks, vLLM's
    NHD layout), random bytes at first.  A key is any string: its chunk is
    a 256-token request whose tokens are derived from the key, so LMCache's
    own key of it (model, chunk hash) is the key's alone.  put, get and
    contains take up to any number of keys, `slots` at a time, every
    request of a batch in flight together."""

    _next_instance = [0]

    def __init__(self, rpc_url, shape, slots=16, model=None, timeout=120.0, alive=None):
        import torch
        import zmq
        from lmcache.utils import EngineType
        from lmcache.v1.multiprocess.group_view import EngineGroupInfo
        from lmcache.v1.multiprocess.transfer_context import create_transfer_context
        from lmcache.v1.multiprocess.transport.factory import RequestClientFactory

        self.torch = torch
        self.shape = shape
        self.slots = slots
        self.chunk_bytes = shape.chunk_bytes
        self.model = model or "kvtier-bench/" + shape.name
        self.timeout = timeout
        self.alive = alive  # a callable: False once the server is gone
        self._zmq = zmq.Context()
        self._zmq.setsockopt(zmq.LINGER, 0)
        self.rc = RequestClientFactory.create(rpc_url, context=self._zmq)
        self.tc = None
        self.kv = None
        try:
            chunk = self._result(self.rc.get_chunk_size())
            if chunk != CHUNK_TOKENS:
                raise RuntimeError("LMCache's server has %s-token chunks, not %d" %
                                   (chunk, CHUNK_TOKENS))
            nb = slots * BLOCKS_PER_CHUNK
            self.kv = {"layer.%d" % i: torch.empty((2, nb, BLOCK_TOKENS, shape.kv_heads,
                                                    shape.head_dim), dtype=torch.bfloat16)
                       for i in range(shape.layers)}
            LMCacheServerClient._next_instance[0] += 1
            self.instance_id = 1000 + (os.getpid() % 10000) * 100 + \
                LMCacheServerClient._next_instance[0] % 100
            self.tc = create_transfer_context(self.kv, mode="lmcache_driven",
                                              instance_id=self.instance_id, req_client=self.rc)
            self.tc.register(self.kv, self.model, 1, BLOCKS_PER_CHUNK, timeout,
                             layout_hints={"kv_layout": "NHD"},
                             engine_group_infos=[EngineGroupInfo(
                                 engine_group_id=0, layer_indices=tuple(range(shape.layers)),
                                 tokens_per_block=BLOCK_TOKENS)],
                             engine_type=EngineType.VLLM)
            # Random contents, written after registration moved the cache
            # into shared memory.
            g = torch.Generator().manual_seed(1234)
            for t in self.kv.values():
                u = t.view(torch.int16)
                u.copy_(torch.randint(-32768, 32767, u.shape, dtype=torch.int16, generator=g))
        except BaseException:
            self.close()
            raise

    # --- keys, slots and requests ---------------------------------------------------

    def _tokens(self, key):
        raw = hashlib.shake_256(("kvtier-bench:" + key).encode()).digest(2 * CHUNK_TOKENS)
        return tuple(int.from_bytes(raw[i:i + 2], "little") for i in range(0, len(raw), 2))

    def _ipc_key(self, key, rid, worker):
        from lmcache.v1.multiprocess.custom_types import IPCCacheServerKey
        return IPCCacheServerKey(model_name=self.model, world_size=1,
                                 worker_id=0 if worker else None,
                                 token_ids=self._tokens(key), start=0, end=CHUNK_TOKENS,
                                 request_id=rid, num_kv_readers=1)

    def _blocks(self, slot):
        return [list(range(slot * BLOCKS_PER_CHUNK, (slot + 1) * BLOCKS_PER_CHUNK))]

    def _pieces(self, slot):
        """Slot `slot` as contiguous byte tensors: per layer, K then V."""
        b0, b1 = slot * BLOCKS_PER_CHUNK, (slot + 1) * BLOCKS_PER_CHUNK
        return [t[kv, b0:b1].view(self.torch.uint8).reshape(-1)
                for t in self.kv.values() for kv in (0, 1)]

    def write_slot(self, slot, buf):
        src = self.torch.frombuffer(memoryview(buf).cast("B"), dtype=self.torch.uint8)
        if src.numel() != self.chunk_bytes:
            raise ValueError("a buffer of %d bytes for %d-byte chunks" %
                             (src.numel(), self.chunk_bytes))
        off = 0
        for p in self._pieces(slot):
            p.copy_(src[off:off + p.numel()])
            off += p.numel()

    def read_slot(self, slot, buf):
        dst = self.torch.frombuffer(memoryview(buf).cast("B"), dtype=self.torch.uint8)
        if dst.numel() != self.chunk_bytes:
            raise ValueError("a buffer of %d bytes for %d-byte chunks" %
                             (dst.numel(), self.chunk_bytes))
        off = 0
        for p in self._pieces(slot):
            dst[off:off + p.numel()].copy_(p)
            off += p.numel()

    def zero_slot(self, slot):
        for p in self._pieces(slot):
            p.zero_()

    def slot_digest(self, slot):
        h = hashlib.blake2b(digest_size=16)
        for p in self._pieces(slot):
            h.update(p.numpy())
        return h.hexdigest()

    def _wait(self, future, event=None):
        """A transfer future's result; its IPC event kept alive until the
        transport is done with it (as LMCache's own clients do)."""
        from lmcache.v1.multiprocess.futures import DeviceMessagingFuture
        owner = future.raw_future_ if isinstance(future, DeviceMessagingFuture) else future
        if event is not None:
            owner.retain_reference(event)
        res = self._result(future)
        rel = getattr(owner, "release_references", None)
        if callable(rel):
            rel()
        return res

    def _result(self, future, timeout=None):
        """future.result(), in slices of a second so that a server that
        died is noticed (`alive`) instead of waited for to the timeout."""
        end = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                return future.result(timeout=min(1.0, max(0.01, end - time.monotonic())))
            except TimeoutError:
                if self.alive is not None and not self.alive():
                    raise RuntimeError("LMCache's server is gone (its answer will not come)")
                if time.monotonic() >= end:
                    raise

    def _batches(self, keys):
        keys = list(keys)
        for s in range(0, len(keys), self.slots):
            yield s, keys[s:s + self.slots]

    def _end(self, rids):
        for f in [self.rc.end_session(r) for r in rids]:
            self._result(f)

    # --- the interface ------------------------------------------------------------

    def put(self, keys, bufs=None):
        """STORE each key's chunk (bufs[i] copied into a slot first; without
        bufs, what slot i % slots holds).  [bool] per key: the server took
        it into L1 (its L2 store follows in the background)."""
        out = []
        for s, batch in self._batches(keys):
            if bufs is not None:
                for i in range(len(batch)):
                    self.write_slot(i, bufs[s + i])
            subs = []
            for i, k in enumerate(batch):
                rid = "put-" + uuid.uuid4().hex
                ev = self.tc.create_recorded_event()
                subs.append((rid, ev, self.tc.submit_store(
                    rid, self._ipc_key(k, rid, True), self.kv, self._blocks(i), ev,
                    BLOCKS_PER_CHUNK)))
            out += [bool(self._wait(f, ev)) for _, ev, f in subs]
            self._end([rid for rid, _, _ in subs])
        return out

    def _lookup(self, batch):
        """LOOKUP every key of a batch (LMCache prefetches what L1 lacks
        from its L2), then wait for each prefetch: (request id, hit)."""
        rids = ["get-" + uuid.uuid4().hex for _ in batch]
        acks = [self.rc.lookup(self._ipc_key(k, r, False), 1) for k, r in zip(batch, rids)]
        for a in acks:
            self._result(a)
        hits = []
        for r in rids:
            n = self._result(self.rc.wait_prefetch_status(r, self.timeout), self.timeout + 5)
            if n is None:
                raise TimeoutError("LMCache's prefetch of %s did not end in %d s" %
                                   (r, self.timeout))
            hits.append(n >= 1)
        return rids, hits

    def get(self, keys, bufs=None):
        """LOOKUP and RETRIEVE each key's chunk into a slot (then into
        bufs[i] if given).  [bool] per key: found and retrieved."""
        out = []
        for s, batch in self._batches(keys):
            rids, hits = self._lookup(batch)
            subs = []
            for i, (k, rid, hit) in enumerate(zip(batch, rids, hits)):
                if hit:
                    ev = self.tc.create_recorded_event()
                    subs.append((i, ev, self.tc.submit_retrieve(
                        rid, self._ipc_key(k, rid, True), self.kv, self._blocks(i), ev,
                        BLOCKS_PER_CHUNK, skip_first_n_tokens=0)))
            got = [False] * len(batch)
            for i, ev, f in subs:
                got[i] = bool(self._wait(f, ev))
            self._end(rids)
            if bufs is not None:
                for i, ok in enumerate(got):
                    if ok:
                        self.read_slot(i, bufs[s + i])
            out += got
        return out

    def contains(self, keys):
        """[bool] per key: LMCache's LOOKUP finds it (in L1, or in its L2,
        from where the lookup prefetches it into L1, as it does for vLLM);
        the lookup's read locks are released again."""
        out = []
        for _, batch in self._batches(keys):
            rids, hits = self._lookup(batch)
            for k, rid, hit in zip(batch, rids, hits):
                if hit:
                    self._result(self.rc.free_lookup_locks(self._ipc_key(k, rid, False), 1))
            self._end(rids)
            out += hits
        return out

    def close(self):
        """Unregister, close, and free the shared-memory KV cache."""
        if self.tc is not None:
            try:
                f = self.tc.unregister()
                if f is not None:
                    f.result(timeout=30)
            except Exception:
                pass
            try:
                self.tc.close()
            except Exception:
                pass
            self.tc = None
        self.kv = None
        if self.rc is not None:
            try:
                self.rc.close()
            except Exception:
                pass
            self.rc = None
        if self._zmq is not None:
            self._zmq.term()
            self._zmq = None
        import gc
        gc.collect()  # the shared-memory segments are unlinked when their storage goes


# --- LMCache's Redis remote connectors ----------------------------------------------


class LMCacheRemoteClient:
    """LMCache's own remote connector for `url`, made by LMCache's connector
    factory (redis:// is RedisConnector over redis-py, resp:// RESPConnector
    over the native lmcache_redis client), holding chunks of `shape`;
    `inflight` keys per batched call (that many requests in flight)."""

    def __init__(self, url, shape, inflight=8, cpu_chunks=64):
        import asyncio

        import torch
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.memory_management import MemoryFormat
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.connector import CreateConnector
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

        self.torch = torch
        self.url = url
        self.shape = shape
        self.inflight = inflight
        self.chunk_bytes = shape.chunk_bytes
        self.model = "kvtier-bench/" + shape.name
        gb = max(0.25, (cpu_chunks + 2 * inflight) * shape.chunk_bytes / 2**30 * 1.1)
        self.config = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK_TOKENS, local_cpu=True, max_local_cpu_size=gb,
            save_unfull_chunk=False, extra_config={"save_chunk_meta": False})
        self.metadata = LMCacheMetadata(
            model_name=self.model, world_size=1, local_world_size=1, worker_id=0,
            local_worker_id=0, kv_dtype=torch.bfloat16,
            kv_shape=(shape.layers, 2, CHUNK_TOKENS, shape.kv_heads, shape.head_dim))
        self.backend = LocalCPUBackend(self.config, self.metadata)
        self._fmt = MemoryFormat.KV_2LTD
        self._asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.conn = None
        try:
            self.conn = CreateConnector(url, self.loop, self.backend, self.config, self.metadata)
        except BaseException:
            self.close()
            raise

    def _key(self, key):
        from lmcache.utils import CacheEngineKey
        h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        return CacheEngineKey(self.model, 1, 0, h, self.torch.bfloat16)

    def _run(self, coro, timeout=300):
        return self._asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def alloc(self):
        """A chunk-sized memory object of LMCache's CPU backend."""
        obj = self.backend.allocate(self.metadata.get_shapes(), self.metadata.get_dtypes(),
                                    self._fmt)
        if obj is None:
            raise MemoryError("LMCache's CPU backend has no room for a chunk")
        return obj

    def random_chunk(self, seed):
        obj = self.alloc()
        u = obj.tensor.view(self.torch.int16)
        u.copy_(self.torch.randint(-32768, 32767, u.shape, dtype=self.torch.int16,
                                   generator=self.torch.Generator().manual_seed(seed)))
        return obj

    @staticmethod
    def digest(obj):
        return hashlib.blake2b(memoryview(obj.byte_array).cast("B"),
                               digest_size=16).hexdigest()

    def put_objs(self, keys, objs):
        """batched_put of `inflight` keys at a time; objs stay the caller's
        (the connector drops one reference per put: one is added)."""
        keys = list(keys)
        for s in range(0, len(keys), self.inflight):
            ks = [self._key(k) for k in keys[s:s + self.inflight]]
            os_ = objs[s:s + self.inflight]
            for o in os_:
                o.ref_count_up()
            self._run(self.conn.batched_put(ks, os_))

    def get_objs(self, keys):
        """batched_get_non_blocking of `inflight` keys at a time: a memory
        object per key found (release() them), None for a miss."""
        keys = list(keys)
        out = []
        for s in range(0, len(keys), self.inflight):
            batch = keys[s:s + self.inflight]
            got = self._run(self.conn.batched_get_non_blocking(
                "get-" + uuid.uuid4().hex, [self._key(k) for k in batch]))
            got = list(got)
            if len(got) != len(batch):
                # The redis connector leaves misses out: find them one by one.
                for o in got:
                    if o is not None:
                        o.ref_count_down()
                got = [self._run(self.conn.get(self._key(k))) for k in batch]
            out += got
        return out

    @staticmethod
    def release(objs):
        for o in objs:
            if o is not None:
                o.ref_count_down()

    def put(self, keys, bufs):
        objs = []
        try:
            for b in bufs:
                o = self.alloc()
                objs.append(o)
                o.byte_array.cast("B")[:] = memoryview(b).cast("B")
            self.put_objs(keys, objs)
        finally:
            self.release(objs)
        return [True] * len(objs)  # the connector reports no per-key outcome

    def get(self, keys, bufs):
        keys = list(keys)
        if self.url.startswith("resp://"):
            # The native RESP client never completes a batch that meets a
            # missing key (LMCache 0.5.6): ask which are there first.
            there = self.contains(keys)
            got = iter(self.get_objs([k for k, t in zip(keys, there) if t]))
            objs = [next(got) if t else None for t in there]
        else:
            objs = self.get_objs(keys)
        try:
            for o, b in zip(objs, bufs):
                if o is not None:
                    memoryview(b).cast("B")[:] = memoryview(o.byte_array).cast("B")
            return [o is not None for o in objs]
        finally:
            self.release(objs)

    def contains(self, keys):
        async def all_(ks):
            return await self._asyncio.gather(*(self.conn.exists(k) for k in ks))
        return [bool(x) for x in self._run(all_([self._key(k) for k in keys]))]

    def close(self):
        # Not the connector's close(): in LMCache 0.5.6 it never returns (it
        # calls its executor's synchronous shutdown() on the event loop,
        # which schedules the shutdown on that same loop and blocks it
        # waiting).  Its steps, each where it can run: stop the executor,
        # close the connection.
        if self.conn is not None:
            inner = self.conn.getWrappedConnector()
            self.conn = None
            pq = getattr(inner, "pq_executor", None)
            try:
                if pq is not None:
                    self._run(pq.shutdown_async(wait=False), timeout=30)
                if hasattr(inner, "client"):        # RESPConnector: the native client
                    inner.client.close()
                if hasattr(inner, "connection"):    # RedisConnector: redis-py's pool
                    self._run(inner.connection.aclose(), timeout=30)
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        try:
            self.backend.close()
        except Exception:
            pass


# --- servers of part (b) ----------------------------------------------------------


def resp_command(port, *args, timeout=30):
    """One RESP command to 127.0.0.1:port; the first line of its reply."""
    msg = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(msg)
        buf = b""
        while b"\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                break
            buf += d
    return buf.split(b"\r\n", 1)[0].decode(errors="replace")


def start_server(argv, port, log, name, timeout=120):
    out = open(log, "w")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                         preexec_fn=_die_with_parent)
    out.close()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if p.poll() is not None:
            raise RuntimeError("%s exited with status %d: %s" % (name, p.returncode,
                                                                  _log_tail(log, 2000)))
        try:
            if resp_command(port, "PING", timeout=2) == "+PONG":
                return p
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("%s did not answer PING in %d s: %s" % (name, timeout, _log_tail(log)))


def stop_process(p):
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(30)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(30)


# --- figures ------------------------------------------------------------------------


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def compare(subject, bound, subj_name, bound_name, ratio_name, target):
    """Per-round figures of a subject and its bound: their stats, the stats
    of the per-round ratios, the target and whether the median meets it."""
    ratios = [a / b for a, b in zip(subject, bound) if a and b]
    r = stats(ratios)
    return {subj_name: stats(subject), bound_name: stats(bound), ratio_name: r,
            "target": target, "pass": bool(r and r["median"] >= target)}


def exact_error(e):
    """The exception as it reads, its type named; the innermost frame."""
    tb = traceback.extract_tb(e.__traceback__)
    where = " (at %s:%d)" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else ""
    return "%s: %s%s" % (type(e).__name__, e, where)


def preload():
    """Import what the clients use (torch, LMCache's client side): seconds
    on two cores, spent while the servers start."""
    import torch  # noqa: F401
    import lmcache.v1.multiprocess.transfer_context  # noqa: F401
    import lmcache.v1.multiprocess.transport.factory  # noqa: F401
    import lmcache.v1.storage_backend.connector  # noqa: F401


# --- (a) L2 ---------------------------------------------------------------------------


def l2_round(server, client, shape, n, tag):
    """One round against one server: store n chunks into L2, retrieve them
    from L2.  Returns (store GB/s, retrieve GB/s, seconds until the STOREs
    were answered)."""
    keys = ["%s/%s/%d" % (tag, shape.name, i) for i in range(n)]
    n_slots = client.slots
    want = [client.slot_digest(i % n_slots) for i in range(n)]
    t0 = time.perf_counter()
    ok = client.put(keys)
    t1 = time.perf_counter()
    if not all(ok):
        raise RuntimeError("%s: LMCache's server refused %d of %d STOREs" %
                           (server.name, ok.count(False), n))
    server.wait_l2_stored()
    t2 = time.perf_counter()
    for i in range(min(n, n_slots)):
        client.zero_slot(i)
    t3 = time.perf_counter()
    got = client.get(keys)
    t4 = time.perf_counter()
    if not all(got):
        raise RuntimeError("%s: %d of %d chunks not found in L2 after their store" %
                           (server.name, got.count(False), n))
    # With n > slots only the last batch is still in the slots.
    last = (n - 1) // n_slots * n_slots
    bad = [i for i in range(last, n) if client.slot_digest(i - last) != want[i]]
    if bad:
        raise RuntimeError("%s: chunk %d came back from L2 with other bytes" %
                           (server.name, bad[0]))
    server.clear_l1()
    nbytes = n * shape.chunk_bytes
    return nbytes / (t2 - t0) / 1e9, nbytes / (t4 - t3) / 1e9, t1 - t0


def run_l2(root, shapes, rounds, chunks, odirect=True):
    """kvtier's disk tier reads with O_DIRECT; LMCache's fs_native adapter by
    default through the page cache, which holds what it just wrote.  With
    `odirect`, LMCache's adapter also runs with use_odirect (the same medium
    read the same way: ratio_vs_lmcache_disk_odirect) beside its default."""
    kvdir = os.path.join(root, "disk", "kvtier")
    lmdir = os.path.join(root, "disk", "lmcache")
    lodir = os.path.join(root, "disk", "lmcache-odirect")
    os.makedirs(kvdir)
    os.makedirs(lmdir)
    os.makedirs(lodir)
    yaml = os.path.join(root, "kvtier-l2.yaml")
    kv_conf = {"local_cpu": "false", "local_disk": kvdir, "max_local_disk_size": "16GiB"}
    with open(yaml, "w") as f:
        f.writelines("%s: %s\n" % kv for kv in kv_conf.items())
    kv_adapter = {"type": "plugin", "module_path": "kvtier.lmcache",
                  "class_name": "KvtierL2Adapter",
                  "adapter_params": {"config": yaml, "num_workers": 4}}
    lm_adapter = {"type": "fs_native", "base_path": lmdir, "num_workers": 4}
    l1_gb = 1.0
    lo_adapter = dict(lm_adapter, base_path=lodir, use_odirect=True)
    servers = {"kvtier": LMCacheServer(root, "kvtier", kv_adapter, l1_gb),
               "lmcache_disk": LMCacheServer(root, "lmcache-disk", lm_adapter, l1_gb)}
    if odirect:
        servers["lmcache_disk_odirect"] = LMCacheServer(root, "lmcache-disk-odirect",
                                                        lo_adapter, l1_gb)
    doc = {"server": "python -m lmcache.v1.multiprocess.http_server (`lmcache server`: "
                     "the multiprocess server with its HTTP frontend), CPU only",
           "server_args": servers["kvtier"].args[2:-2],
           "l1_size_gb": l1_gb, "l2_store_policy": "skip_l1",
           "client": "LMCache's request client and lmcache_driven transfer context "
                     "(vLLM's LMCacheMPConnector's), KV cache in POSIX shared memory",
           "kvtier_l2_adapter": kv_adapter, "kvtier_config": kv_conf,
           "lmcache_disk_l2_adapter": lm_adapter,
           "lmcache_disk_odirect_l2_adapter": lo_adapter if odirect else None,
           "rounds": rounds, "shapes": {},
           "error": None}
    try:
        for s in servers.values():
            s.start()  # both start together: their imports take the most time
        preload()      # and this process's own meanwhile
        for s in servers.values():
            s.wait_ready()
        for sh in shapes:
            n = chunks[sh.name]
            clients = {}
            try:
                for k, s in servers.items():
                    clients[k] = LMCacheServerClient(s.rpc_url, sh, slots=n,
                                                     alive=s.alive)
                # A warm-up round of 2 chunks each, not counted: first uses
                # (the server mapping the client's KV cache, thread pools,
                # the adapter's namespace of this chunk size).
                for k, s in servers.items():
                    l2_round(s, clients[k], sh, min(n, 2), "warm-up")
                res = {k: ([], [], []) for k in servers}
                names = list(servers)
                for r in range(rounds):
                    # Each round a different one first, and the order flipped.
                    order = names[r % len(names):] + names[:r % len(names)]
                    if r % 2:
                        order.reverse()
                    for k in order:
                        st, rt, cs = l2_round(servers[k], clients[k], sh, n, "r%d" % r)
                        res[k][0].append(st)
                        res[k][1].append(rt)
                        res[k][2].append(cs)
            finally:
                for c in clients.values():
                    c.close()
            row = dict(sh.describe(), chunks_per_round=n)
            for op, i in (("store", 0), ("retrieve", 1)):
                row[op] = compare(res["kvtier"][i], res["lmcache_disk"][i], "kvtier_gbps",
                                  "lmcache_disk_gbps", "ratio_vs_lmcache_disk", 1.0)
                if odirect:
                    row[op]["odirect"] = compare(
                        res["kvtier"][i], res["lmcache_disk_odirect"][i], "kvtier_gbps",
                        "lmcache_disk_odirect_gbps", "ratio_vs_lmcache_disk_odirect", 1.0)
            row["store"]["kvtier_stores_answered_s"] = stats(res["kvtier"][2])
            row["store"]["lmcache_disk_stores_answered_s"] = stats(res["lmcache_disk"][2])
            doc["shapes"][sh.name] = row
    except Exception as e:
        doc["error"] = exact_error(e)
        for s in servers.values():
            if s.proc is not None and s.proc.poll() is not None and \
                    "LMCache's server (%s)" % s.name not in doc["error"]:
                doc["error"] += " | " + s.exit_reason()
    finally:
        for s in servers.values():
            s.stop()
    for sh in shapes:
        if sh.name not in doc["shapes"]:
            doc["shapes"][sh.name] = dict(sh.describe(), chunks_per_round=chunks[sh.name], **{
                op: {"ratio_vs_lmcache_disk": None, "target": 1.0, "pass": False}
                for op in ("store", "retrieve")})
    return doc


# --- (b) remote connectors ---------------------------------------------------------


def remote_round(client, srcs, port, shape, n, tag):
    """n chunks put then got through one connector: (put GB/s, get GB/s)."""
    keys = ["%s/%s/%d" % (tag, shape.name, i) for i in range(n)]
    objs = [srcs[i % len(srcs)] for i in range(n)]
    t0 = time.perf_counter()
    client.put_objs(keys, objs)
    t1 = time.perf_counter()
    got = client.get_objs(keys)
    t2 = time.perf_counter()
    try:
        miss = sum(o is None for o in got)
        if miss:
            raise RuntimeError("%s: %d of %d chunks missing after their put" %
                               (client.url, miss, n))
        want = [LMCacheRemoteClient.digest(s) for s in srcs]
        for i, o in enumerate(got):
            if LMCacheRemoteClient.digest(o) != want[i % len(srcs)]:
                raise RuntimeError("%s: chunk %d came back with other bytes" % (client.url, i))
    finally:
        LMCacheRemoteClient.release(got)
    resp_command(port, "FLUSHDB")
    nbytes = n * shape.chunk_bytes
    return nbytes / (t1 - t0) / 1e9, nbytes / (t2 - t1) / 1e9


def run_remote(root, shapes, rounds, chunks, inflight=8):
    kvtierd = os.environ.get("KVTIER_KVTIERD")
    redis = shutil.which("redis-server")
    doc = {"connectors": {"redis": "lmcache.v1.storage_backend.connector.redis_connector."
                                   "RedisConnector (redis://, redis-py asyncio)",
                          "resp": "lmcache.v1.storage_backend.connector.redis_connector."
                                  "RESPConnector (resp://, native lmcache_redis client)"},
           "requests_in_flight": inflight, "rounds": rounds,
           "kvtierd_args": None, "redis_server_args": None, "shapes": {}, "error": None}
    procs = {}
    try:
        if not kvtierd or not os.access(kvtierd, os.X_OK):
            raise RuntimeError("no kvtierd (KVTIER_KVTIERD=%r)" % kvtierd)
        if not redis:
            raise RuntimeError("no redis-server in PATH")
        ports = {"kvtierd": free_port(), "redis": free_port()}
        argv = {"kvtierd": [kvtierd, "--port", str(ports["kvtierd"]), "--threads", "4",
                            "--set", "max_local_cpu_size=2GiB", "--set", "dram_lock_memory=false",
                            "--log-level", "warn"],
                "redis": [redis, "--port", str(ports["redis"]), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--daemonize", "no"]}
        doc["kvtierd_args"] = argv["kvtierd"][1:]
        doc["redis_server_args"] = argv["redis"][1:]
        for k in ("kvtierd", "redis"):
            procs[k] = start_server(argv[k], ports[k], os.path.join(root, k + ".log"), k)
        for sh in shapes:
            n = chunks[sh.name]
            row = dict(sh.describe(), chunks_per_round=n)
            for conn in ("redis", "resp"):
                scheme = conn + "://127.0.0.1:%d"
                clients = {}
                try:
                    for k in ("kvtierd", "redis"):
                        clients[k] = LMCacheRemoteClient(scheme % ports[k], sh, inflight, n)
                    srcs = [clients["kvtierd"].random_chunk(i) for i in range(inflight)]
                    # A warm-up batch each, not counted (the connections
                    # a connector opens on first use).
                    for k in clients:
                        remote_round(clients[k], srcs, ports[k], sh, inflight, "warm-up")
                    res = {k: ([], []) for k in clients}
                    for r in range(rounds):
                        order = ["kvtierd", "redis"] if r % 2 == 0 else ["redis", "kvtierd"]
                        for k in order:
                            p, g = remote_round(clients[k], srcs, ports[k], sh, n, "r%d" % r)
                            res[k][0].append(p)
                            res[k][1].append(g)
                    LMCacheRemoteClient.release(srcs)
                finally:
                    for c in clients.values():
                        c.close()
                row[conn] = {op: compare(res["kvtierd"][i], res["redis"][i], "kvtierd_gbps",
                                         "redis_gbps", "ratio_vs_redis", 1.2)
                             for op, i in (("put", 0), ("get", 1))}
            doc["shapes"][sh.name] = row
    except Exception as e:
        doc["error"] = exact_error(e)
    finally:
        for p in procs.values():
            stop_process(p)
    for sh in shapes:
        row = doc["shapes"].setdefault(sh.name, dict(sh.describe(),
                                                     chunks_per_round=chunks[sh.name]))
        for conn in ("redis", "resp"):
            row.setdefault(conn, {op: {"ratio_vs_redis": None, "target": 1.2, "pass": False}
                                  for op in ("put", "get")})
    return doc


# --- main -----------------------------------------------------------------------------


def lmcache_version():
    import importlib.metadata
    try:
        return importlib.metadata.version("lmcache")
    except importlib.metadata.PackageNotFoundError:
        return None


def fmt(s, unit=""):
    if not s:
        return "-"
    return "%.3g%s [%.3g..%.3g]" % (s["median"], unit, s["min"], s["max"])


def print_text(doc):
    print("kvtier-bench lmcache: kvtier beside LMCache %s's own storage, through LMCache's "
          "own clients (%s rounds; %d CPUs, load %s)" %
          (doc["lmcache"], doc["l2"]["rounds"], doc["machine"]["cpus"],
           " ".join("%.1f" % x for x in doc["machine"]["loadavg_start"])))
    l2 = doc["l2"]
    print("\n(a) LMCache server's L2: kvtier (disk tier) vs LMCache's fs_native disk adapter "
          "(GB/s, median [min..max])")
    if l2["error"]:
        print("    error: " + l2["error"][:2000])
    for name, row in l2["shapes"].items():
        for op in ("store", "retrieve"):
            x = row[op]
            if x.get("kvtier_gbps"):
                print("    %-13s %-8s kvtier %-24s lmcache disk %-24s ratio_vs_lmcache_disk %s%s"
                      % (name, op, fmt(x["kvtier_gbps"]), fmt(x["lmcache_disk_gbps"]),
                         fmt(x["ratio_vs_lmcache_disk"]), "" if x["pass"] else "  (below 1.0)"))
                o = x.get("odirect")
                if o and o.get("kvtier_gbps"):
                    print("    %-13s %-8s %-31s lmcache O_DIRECT %-20s "
                          "ratio_vs_lmcache_disk_odirect %s"
                          % ("", "", "", fmt(o["lmcache_disk_odirect_gbps"]),
                             fmt(o["ratio_vs_lmcache_disk_odirect"])))
    rm = doc["remote"]
    print("\n(b) LMCache's Redis connectors, %d requests in flight: kvtierd vs redis-server "
          "(GB/s)" % rm["requests_in_flight"])
    if rm["error"]:
        print("    error: " + rm["error"][:2000])
    for name, row in rm["shapes"].items():
        for conn in ("redis", "resp"):
            for op in ("put", "get"):
                x = row[conn][op]
                if x.get("kvtierd_gbps"):
                    print("    %-13s %-5s %-4s kvtierd %-24s redis %-24s ratio_vs_redis %s%s" %
                          (name, conn, op, fmt(x["kvtierd_gbps"]), fmt(x["redis_gbps"]),
                           fmt(x["ratio_vs_redis"]), "" if x["pass"] else "  (below 1.2)"))


def main():
    ap = argparse.ArgumentParser(prog="kvtier-bench lmcache")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    # SIGTERM (a test's timeout) unwinds like an error: servers stopped,
    # the scratch directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shapes = [SHAPES["llama-3.1-8b"], SHAPES["qwen2.5-0.5b"]]
    if a.quick:
        rounds = 1
        l2_chunks = {"llama-3.1-8b": 4, "qwen2.5-0.5b": 16}
        remote_chunks = {"llama-3.1-8b": 8, "qwen2.5-0.5b": 16}
    else:
        rounds = 5
        l2_chunks = {"llama-3.1-8b": 16, "qwen2.5-0.5b": 64}
        remote_chunks = {"llama-3.1-8b": 16, "qwen2.5-0.5b": 64}
    root = tempfile.mkdtemp(prefix="kvt-bench-lmcache-",
                            dir=os.environ.get("TMPDIR", "/var/tmp"))
    t0 = time.monotonic()
    doc = {"bench": "lmcache", "quick": a.quick, "lmcache": lmcache_version(),
           "machine": {"cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())},
           "dir": root}
    try:
        doc["l2"] = run_l2(root, shapes, rounds, l2_chunks, odirect=not a.quick)
        doc["remote"] = run_remote(root, shapes, rounds, remote_chunks)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    doc["wall_s"] = time.monotonic() - t0
    # The headline: the ratios at the Llama shape.
    ll = "llama-3.1-8b"
    doc["ratio_vs_lmcache_disk"] = {op: (doc["l2"]["shapes"][ll][op]["ratio_vs_lmcache_disk"]
                                         or {}).get("median")
                                    for op in ("store", "retrieve")}
    doc["ratio_vs_lmcache_disk_odirect"] = {
        op: ((doc["l2"]["shapes"][ll][op].get("odirect") or {})
             .get("ratio_vs_lmcache_disk_odirect") or {}).get("median")
        for op in ("store", "retrieve")}
    doc["ratio_vs_redis"] = {"%s_%s" % (c, op): (doc["remote"]["shapes"][ll][c][op]
                                                 ["ratio_vs_redis"] or {}).get("median")
                             for c in ("redis", "resp") for op in ("put", "get")}
    doc["targets"] = {"ratio_vs_lmcache_disk": 1.0, "ratio_vs_redis": 1.2}
    doc["pass"] = {"ratio_vs_lmcache_disk": all(
        doc["l2"]["shapes"][s][op]["pass"] for s in doc["l2"]["shapes"]
        for op in ("store", "retrieve")),
        "ratio_vs_redis": all(doc["remote"]["shapes"][s][c][op]["pass"]
                              for s in doc["remote"]["shapes"] for c in ("redis", "resp")
                              for op in ("put", "get"))}
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        print_text(doc)
    sys.stdout.flush()
    failed = [p for p in ("l2", "remote") if doc[p]["error"]]
    for p in failed:
        print("kvtier-bench lmcache: %s: %s" % (p, doc[p]["error"][:1000]), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
