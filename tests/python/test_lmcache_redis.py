"""LMCache's Redis remote connector against kvtierd, in LMCache's own cache
engine on CPU tensors (the installed LMCache, 0.5.6).

`remote_url: redis://USER:PASSWORD@host:port` is LMCache's RedisConnector
(redis-py, lmcache/v1/storage_backend/connector/redis_connector.py): two
keys a chunk, `<key>kv_bytes` set before `<key>metadata` (a RemoteMetadata:
length, memory format, then dtype and four dims per KV group: 28 bytes for
one group); a lookup is EXISTS of the metadata keys; a retrieve GETs the
metadata, then the bytes, and DELetes a metadata key whose bytes are gone.
`resp://host:port` is its native client (lmcache_redis): one key a chunk.

LMCache has no vLLM GPU connector for the CPU (CreateGPUConnector raises
"No supported cpu connector found."; VLLMPagedMemGPUConnectorV2 makes CUDA
streams), so the engine is built as LMCache's standalone mode builds it,
over its MockGPUConnector, here made to copy between a CPU KV tensor and
LMCache's memory objects; all else is LMCache's: LMCacheEngineBuilder, its
token database and chunk keys, StorageManager, LocalCPUBackend (L1),
RemoteBackend and the connectors.

kvtierd runs with an access list: alice (tenant a) and bob (tenant b), no
default user, so a connection without a password gets -NOAUTH.  A tap
(a TCP proxy) in front of it records the commands LMCache's redis-py
connector sends.

- test_store_restart_retrieve: stored chunks are two keys each, in that
  order, with metadata that describes the bytes; kvtierd restarted; a new
  engine (empty L1) finds them (EXISTS <key>metadata) and retrieves them
  byte-identical (GET metadata, then kv_bytes); bob's tenant and a
  connection without a password or with a wrong one see nothing.
- test_metadata_without_data: a chunk whose kv_bytes is gone: LMCache's
  retrieve stops before it and DELetes its metadata key.
- test_damaged_value: a value damaged on kvtierd's disk is not served;
  LMCache retrieves nothing, without an error.
- test_dead_kvtierd: kvtierd killed: LMCache's lookup finds nothing, its
  retrieve retrieves nothing and its store does not fail the caller; once
  kvtierd is back, what it acknowledged is there.

`resp://` (LMCache's native client) is not tested here: its lookup can hang
for ever (docs/LMCACHE.md, "Known LMCache 0.5.6 problems").

KVT_KVTIERD names the kvtierd to run (<build>/pytest.sh sets it).
"""

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import unittest

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import redis  # noqa: E402
import torch  # noqa: E402

from lmcache.utils import mock_up_broadcast_fn, mock_up_broadcast_object_fn  # noqa: E402
from lmcache.v1.cache_engine import LMCacheEngineBuilder  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.gpu_connector.mock_gpu_connector import MockGPUConnector  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.protocol import RemoteMetadata  # noqa: E402

import tier_env  # noqa: E402

MODEL = "kvtier-test/lmcache-redis"
CHUNK, LAYERS, HEADS, HEAD_DIM = 16, 2, 2, 64
CHUNK_BYTES = 2 * LAYERS * CHUNK * HEADS * HEAD_DIM * 2       # K and V, bf16
USERS = {"alice": ("a", "alice-pw", "000102030405060708090a0b0c0d0e0f"),
         "bob": ("b", "bob-pw", "101112131415161718191a1b1c1d1e1f")}


class CPUConnector(MockGPUConnector):
    """LMCache's standalone-mode connector, copying: the engine's KV is one
    CPU tensor (2, layers, tokens, heads, head_dim) (kwarg `kvcaches`),
    LMCache's memory objects are KV_2LTD, (2, layers, tokens, heads *
    head_dim)."""

    def from_gpu(self, memory_obj, start, end, **kwargs):
        memory_obj.tensor.copy_(kwargs["kvcaches"][:, :, start:end].reshape(
            memory_obj.tensor.shape))

    def to_gpu(self, memory_obj, start, end, **kwargs):
        kv = kwargs["kvcaches"][:, :, start:end]
        kv.copy_(memory_obj.tensor.reshape(kv.shape))

    def batched_from_gpu(self, memory_objs, starts, ends, **kwargs):
        for m, s, e in zip(memory_objs, starts, ends):
            self.from_gpu(m, s, e, **kwargs)

    def batched_to_gpu(self, memory_objs=None, starts=None, ends=None, **kwargs):
        for m, s, e in zip(memory_objs, starts, ends):
            self.to_gpu(m, s, e, **kwargs)


@contextlib.contextmanager
def engine(url, name):
    """LMCache's cache engine: L1 in CPU memory, L2 the remote `url`."""
    cfg = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=True, max_local_cpu_size=0.02, remote_url=url,
        remote_serde="naive", lmcache_instance_id=name, blocking_timeout_secs=5)
    md = LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0,
                         local_worker_id=0, kv_dtype=torch.bfloat16,
                         kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_DIM), chunk_size=CHUNK)
    eng = LMCacheEngineBuilder.get_or_create(name, cfg, md, CPUConnector(md.kv_shape),
                                             mock_up_broadcast_fn, mock_up_broadcast_object_fn)
    try:
        eng.post_init()
        yield eng
    finally:
        close_remote(eng)
        LMCacheEngineBuilder.destroy(name)


def close_remote(eng):
    """Close the engine's remote connection before LMCache would.  LMCache
    0.5.6's RedisConnector.close() runs, on the storage manager's event
    loop, `await self.pq_executor.shutdown(wait=True)`: a synchronous call
    that schedules a coroutine on that same loop and blocks on its result,
    so the loop deadlocks and RemoteBackend.close()
    (LMCacheEngineBuilder.destroy()) never returns.  redis-py's client is
    closed here, on its loop, and the backend detached (its close() then
    logs "Error occurred when closing remote connection")."""
    sm = eng.storage_manager
    backend = sm.storage_backends.get("RemoteBackend") if sm is not None else None
    if backend is None or backend.connection is None:
        return
    conn = backend.connection
    conn = conn.getWrappedConnector() if hasattr(conn, "getWrappedConnector") else conn
    asyncio.run_coroutine_threadsafe(conn.connection.aclose(), backend.loop).result(30)
    backend.connection = None


def tokens_from(first, chunks=4):
    return torch.arange(first, first + chunks * CHUNK)


def random_kv(ntokens, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, LAYERS, ntokens, HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)


def empty_kv(ntokens):
    return torch.zeros(2, LAYERS, ntokens, HEADS, HEAD_DIM, dtype=torch.bfloat16)


def chunk_bytes(kv, i):
    """Chunk i of `kv` as LMCache stores it (KV_2LTD)."""
    part = kv[:, :, i * CHUNK:(i + 1) * CHUNK].contiguous()
    return part.view(torch.uint8).numpy().tobytes()


def key_names(eng, tokens):
    """LMCache's own key strings of `tokens`'s chunks."""
    return [r[2].to_string() for r in eng.token_database.process_tokens(tokens)]


def parse_command(buf):
    """One RESP command (an array of bulk strings) from the front of `buf`:
    ((name, first argument), bytes used), or (None, 0) if incomplete."""
    end = buf.find(b"\r\n")
    if end < 0:
        return None, 0
    n, pos, args = int(buf[1:end]), end + 2, []
    for _ in range(n):
        e = buf.find(b"\r\n", pos)
        if e < 0:
            return None, 0
        size, start = int(buf[pos + 1:e]), e + 2
        if len(buf) < start + size + 2:
            return None, 0
        if len(args) < 2:
            args.append(bytes(buf[start:start + size]).decode("utf-8", "replace"))
        pos = start + size + 2
    return (args[0].upper(), args[1] if len(args) > 1 else None), pos


class Tap:
    """A TCP proxy to kvtierd recording, in arrival order, the name and the
    first argument of every command its clients send (before kvtierd gets
    it)."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.commands, self.lock = [], threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.lsock.close()

    def mark(self):
        with self.lock:
            return len(self.commands)

    def since(self, mark):
        with self.lock:
            return list(self.commands[mark:])

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                c.close()
                continue
            threading.Thread(target=self._pipe, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, False), daemon=True).start()

    def _pipe(self, src, dst, record):
        buf = b""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if record:
                    buf += data
                    while True:
                        cmd, used = parse_command(buf)
                        if cmd is None:
                            break
                        with self.lock:
                            self.commands.append(cmd)
                        buf = buf[used:]
                dst.sendall(data)
        except (OSError, ValueError):   # a connection closed, or not RESP: end it
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


class Kvtierd:
    """kvtierd with a DRAM and a disk tier, tenants a and b, the access
    list of USERS; stopped and started again on the same port and data."""

    def __init__(self, root):
        self.bin = os.environ.get("KVT_KVTIERD")
        if not self.bin or not os.access(self.bin, os.X_OK):
            raise RuntimeError("KVT_KVTIERD does not name kvtierd (<build>/pytest.sh sets it)")
        self.root, self.data = root, os.path.join(root, "data")
        self.config, self.acl = os.path.join(root, "kvtierd.yaml"), os.path.join(root, "acl")
        with open(self.config, "w") as f:
            f.write("max_local_cpu_size: 64MiB\ndram_prefault: false\ndram_lock_memory: false\n"
                    "tenants:\n")
            for tenant, _, secret in USERS.values():
                f.write("  - name: %s\n    secret: %s\n" % (tenant, secret))
        with open(self.acl, "w") as f:
            for user, (tenant, password, _) in USERS.items():
                f.write("user %s tenant %s sha256:%s\n" %
                        (user, tenant, hashlib.sha256(password.encode()).hexdigest()))
        self.port = tier_env.free_port()
        self.proc = None
        self.log = os.path.join(root, "kvtierd.log")

    def start(self):
        self.proc = tier_env.start_kvtierd_tcp(
            [self.bin, "--port", str(self.port), "--config", self.config, "--data-dir",
             self.data, "--acl", self.acl, "--threads", "2"], self.port, self.log)

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def client(self, user="alice"):
        return redis.Redis(port=self.port, username=user, password=USERS[user][1])

    def url(self, user="alice", port=None, password=None):
        return "redis://%s:%s@127.0.0.1:%d" % (user, password or USERS[user][1],
                                               port or self.port)


class RedisConnector(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="kvt-lmc-redis-")
        cls.kvtierd = Kvtierd(cls.root)
        cls.kvtierd.start()
        cls.tap = Tap(cls.kvtierd.port)

    @classmethod
    def tearDownClass(cls):
        cls.tap.close()
        cls.kvtierd.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def setUp(self):
        if self.kvtierd.proc is None:
            self.kvtierd.start()

    def wait_stored(self, names):
        """LMCache's puts are asynchronous: until kvtierd has every chunk's
        metadata key (set after its bytes)."""
        r = self.kvtierd.client()
        keys = [n + "metadata" for n in names]
        deadline = time.monotonic() + 30
        while r.exists(*keys) < len(names):
            if time.monotonic() > deadline:
                self.fail("LMCache stored %d of %d chunks in kvtierd" %
                          (r.exists(*keys), len(names)))
            time.sleep(0.05)
        r.close()

    def store(self, url, name, tokens, kv):
        with engine(url, name) as e:
            e.store(tokens, kvcaches=kv)
            names = key_names(e, tokens)
            self.wait_stored(names)
        return names

    def retrieve(self, url, name, tokens):
        """A new engine (an empty L1): its lookup, and what its retrieve
        brought back (how many tokens, the KV)."""
        with engine(url, name) as e:
            hit = e.lookup(tokens)
            kv = empty_kv(len(tokens))
            got = int(e.retrieve(tokens, kvcaches=kv).sum())
        return hit, got, kv

    def test_store_restart_retrieve(self):
        tokens, kv = tokens_from(1000), random_kv(4 * CHUNK, 1)
        url = self.kvtierd.url(port=self.tap.port)
        mark = self.tap.mark()
        names = self.store(url, "store", tokens, kv)
        sent = self.tap.since(mark)
        # redis-py authenticates first: HELLO 3 AUTH alice ... (or AUTH alice ...).
        self.assertIn(sent[0][0], ("HELLO", "AUTH"))
        for n in names:      # the bytes first, then the metadata that announces them
            self.assertLess(sent.index(("SET", n + "kv_bytes")),
                            sent.index(("SET", n + "metadata")))
        # What kvtierd holds for alice: two keys a chunk, nothing else.
        r = self.kvtierd.client()
        for i, n in enumerate(names):
            self.assertEqual(sorted(k.decode() for k in r.scan_iter(match=n + "*")),
                             [n + "kv_bytes", n + "metadata"])
            meta = r.get(n + "metadata")
            self.assertEqual(len(meta), 28)
            md = RemoteMetadata.deserialize(memoryview(meta))
            self.assertEqual((md.length, md.fmt, md.dtypes, md.shapes),
                             (CHUNK_BYTES, MemoryFormat.KV_2LTD, [torch.bfloat16],
                              [torch.Size([2, LAYERS, CHUNK, HEADS * HEAD_DIM])]))
            self.assertEqual(r.get(n + "kv_bytes"), chunk_bytes(kv, i))
        r.close()

        self.kvtierd.restart()
        mark = self.tap.mark()
        hit, got, out = self.retrieve(url, "load", tokens)
        sent = self.tap.since(mark)
        self.assertEqual((hit, got), (4 * CHUNK, 4 * CHUNK))
        self.assertTrue(torch.equal(out.view(torch.int16), kv.view(torch.int16)))
        for n in names:
            self.assertIn(("EXISTS", n + "metadata"), sent)
            self.assertLess(sent.index(("GET", n + "metadata")),
                            sent.index(("GET", n + "kv_bytes")))

        # Another tenant, no password, a wrong password: nothing, no error.
        self.assertEqual(self.retrieve(self.kvtierd.url("bob"), "bob", tokens)[:2], (0, 0))
        self.assertEqual(self.retrieve("redis://127.0.0.1:%d" % self.kvtierd.port, "anon",
                                       tokens)[:2], (0, 0))
        self.assertEqual(self.retrieve(self.kvtierd.url(password="nope"), "wrong",
                                       tokens)[:2], (0, 0))

    def test_metadata_without_data(self):
        tokens, kv = tokens_from(2000), random_kv(4 * CHUNK, 2)
        url = self.kvtierd.url(port=self.tap.port)
        names = self.store(url, "store-b", tokens, kv)
        r = self.kvtierd.client()
        self.assertEqual(r.delete(names[2] + "kv_bytes"), 1)
        mark = self.tap.mark()
        hit, got, out = self.retrieve(url, "load-b", tokens)
        # The lookup saw chunk 2's metadata; the retrieve stopped at its
        # missing bytes and removed the metadata.
        self.assertEqual((hit, got), (4 * CHUNK, 2 * CHUNK))
        self.assertTrue(torch.equal(out[:, :, :2 * CHUNK].view(torch.int16),
                                    kv[:, :, :2 * CHUNK].view(torch.int16)))
        self.assertIn(("DEL", names[2] + "metadata"), self.tap.since(mark))
        self.assertEqual(r.exists(names[2] + "metadata"), 0)
        self.assertEqual(self.retrieve(url, "again-b", tokens)[:2], (2 * CHUNK, 2 * CHUNK))
        r.close()

    def test_damaged_value(self):
        tokens, kv = tokens_from(3000), random_kv(4 * CHUNK, 3)
        url = self.kvtierd.url()
        before = set(self.disk_files())
        names = self.store(url, "store-c", tokens, kv)
        self.kvtierd.stop()
        damaged = 0
        for p in set(self.disk_files()) - before:
            if os.path.getsize(p) > 4096 + 200:     # the values, not the metadata
                tier_env.flip_byte(p)
                damaged += 1
        self.assertEqual(damaged, 4)
        self.kvtierd.start()
        r = self.kvtierd.client()
        self.assertIsNone(r.get(names[0] + "kv_bytes"))     # not served
        hit, got, _ = self.retrieve(url, "load-c", tokens)
        self.assertEqual(got, 0)
        r.close()

    def disk_files(self):
        for dirpath, _, files in os.walk(self.kvtierd.data):
            for f in files:
                yield os.path.join(dirpath, f)

    def test_dead_kvtierd(self):
        tokens, kv = tokens_from(4000), random_kv(4 * CHUNK, 4)
        url = self.kvtierd.url()
        self.store(url, "store-d", tokens, kv)
        with engine(url, "dead") as e:
            self.assertEqual(e.lookup(tokens), 4 * CHUNK)
            self.kvtierd.stop(signal.SIGKILL)
            t0 = time.monotonic()
            self.assertEqual(e.lookup(tokens), 0)
            out = empty_kv(4 * CHUNK)
            self.assertEqual(int(e.retrieve(tokens, kvcaches=out).sum()), 0)
            self.assertEqual(int(out.abs().sum()), 0)
            e.store(tokens_from(4500), kvcaches=random_kv(4 * CHUNK, 5))
            self.assertLess(time.monotonic() - t0, 60)
        # kvtierd acknowledged every SET once it was on disk (crash-safe).
        self.kvtierd.start()
        hit, got, out = self.retrieve(url, "back", tokens)
        self.assertEqual((hit, got), (4 * CHUNK, 4 * CHUNK))
        self.assertTrue(torch.equal(out.view(torch.int16), kv.view(torch.int16)))


if __name__ == "__main__":
    unittest.main()
