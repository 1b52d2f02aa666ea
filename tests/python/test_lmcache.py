"""kvtier as LMCache's L2, tested against the installed LMCache (0.5.6) on
the CPU: LMCache's own server, client, adapter factory, keys and buffers.

- LMCacheServer: LMCache's multiprocess server, started as its docs say
  (`python -m lmcache.v1.multiprocess.server ... --l2-adapter JSON`; on a
  CPU-only machine it runs on its StubCPUDevice, KV moving by its
  engine-driven transfer), with kvtier as its L2, one server per tier.
  LMCache's own vLLM-side client (LMCacheMPSchedulerAdapter for lookups,
  LMCacheMPWorkerAdapter for stores and retrieves: what vLLM's
  LMCacheMPConnector runs) stores chunks from CPU KV caches in vLLM's paged
  layout.  LMCache writes each chunk to its L2 as soon as it is written to
  L1 (store-through; L1 eviction writes nothing), so after the server
  process is stopped and started again the chunks are found by a lookup and
  retrieved byte-identical from kvtier: an NVMe tier, a shared directory.  A
  DRAM-only kvtier serves them while the server lives (with
  --l2-store-policy skip_l1, so that L1 no longer holds them: the server's
  log shows the prefetch reading its L2).  A chunk damaged on the NVMe tier
  and a truncated one end LMCache's hit where they stand: never data.
- L2Adapter: LMCache's adapter factory builds kvtier's adapter from the
  same JSON (types "plugin" and "native_plugin"), driven through LMCache's
  L2AdapterInterface with its ObjectKeys (hashed by its TokenHasher) and
  MemoryObjs, in every tier (DRAM, NVMe, shared directory, S3, a kvtierd
  the store is a client of), the persistent ones across a store restart:
  stored, looked up and locked, loaded byte-identical, deleted; misses, a
  damaged and a truncated chunk are unset bits; a DRAM-only store is empty
  after a restart.
- Connector: kvtier's native-connector contract itself, as LMCache's demux
  thread drives it: batches in flight and one wakeup, submitters on many
  threads, close() with work queued, buffers of another size, bad input.
- ImportLogged: an LMCache that does not import is logged with its error.

The tests need KVT_KVTIERD (ctest's pytest.sh sets it) and the S3 test
server of tier_env.
"""

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import unittest

# LMCache reports its usage to its developers' server unless told not to.
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import torch  # noqa: E402
import zmq  # noqa: E402

import kvtier  # noqa: E402
import tier_env  # noqa: E402
from kvtier.lmcache import (  # noqa: E402
    KvtierL2Adapter,
    KvtierL2AdapterConfig,
    KvtierNativeConnector,
)
from lmcache.integration.vllm.vllm_multi_process_adapter import (  # noqa: E402
    LMCacheMPSchedulerAdapter,
    LMCacheMPWorkerAdapter,
    LoadStoreOp,
    ParallelStrategy,
)
from lmcache.v1.distributed.api import ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters import create_l2_adapter  # noqa: E402
from lmcache.v1.distributed.l2_adapters.config import (  # noqa: E402
    add_l2_adapters_args,
    parse_args_to_l2_adapters_config,
)
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
    _object_key_to_string,
)
from lmcache.v1.memory_allocators.ad_hoc_memory_allocator import (  # noqa: E402
    AdHocMemoryAllocator,
)
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.multiprocess.cache_control.key_resolver import (  # noqa: E402
    resolve_object_keys,
)
from lmcache.v1.multiprocess.token_hasher import TokenHasher  # noqa: E402
from test_local import start_daemon  # noqa: E402

MODEL = "kvtier-test/lmcache"
CHUNK = 32                                 # tokens per LMCache chunk (--chunk-size)
BLOCK = 16                                 # vLLM's block size
LAYERS, HEADS, HEAD_DIM = 2, 2, 64
NUM_BLOCKS = 48
CHUNK_BYTES = 2 * LAYERS * CHUNK * HEADS * HEAD_DIM * 2     # K and V, bf16


def lmcache_env():
    return dict(os.environ, LMCACHE_TRACK_USAGE="false", DO_NOT_TRACK="1",
                PYTHONUNBUFFERED="1")


def kvtierd_bin():
    b = os.environ.get("KVT_KVTIERD")
    if not b or not os.access(b, os.X_OK):
        raise RuntimeError("KVT_KVTIERD does not name kvtierd (<build>/pytest.sh sets it)")
    return b


def write_config(env, tier, name, daemon=None):
    """A kvtier YAML for `tier` (tier_env's settings over 8 MiB of DRAM; the
    client of the kvtierd on `daemon` for "kvtierd"), medium named `name`;
    its path."""
    return env.yaml(tier, name, dram="8MiB", daemon=daemon if tier == "kvtierd" else None)


def adapter_spec(kind, config, **params):
    """The --l2-adapter JSON object that loads kvtier (docs/LMCACHE.md)."""
    cls = {"plugin": "KvtierL2Adapter", "native_plugin": "KvtierNativeConnector"}[kind]
    return {"type": kind, "module_path": "kvtier.lmcache", "class_name": cls,
            "adapter_params": dict(config=config, **params)}


def medium_files(env, tier, name, key):
    """The files of kvtier key `key` on the medium of `tier`."""
    out = []
    for dirpath, _, files in os.walk(env.medium(tier, name)):
        out += [os.path.join(dirpath, f) for f in files
                if str(key) in f and "metadata" not in f and "md5" not in f]
    return out


def truncate_payload(env, tier, name, key):
    """Cut every file of `key` short in its payload; how many."""
    n = 0
    for p in medium_files(env, tier, name, key):
        size = os.path.getsize(p)
        if size > 4096 + 200:
            os.truncate(p, 4096 + 100)
            n += 1
    return n


def sequence(first, chunks, tail=8):
    """`chunks` whole chunks of token ids from `first`, and a partial one."""
    return list(range(first, first + chunks * CHUNK + tail))


# LMCache's chunk hasher as its server runs it (--chunk-size, blake3).
HASHER = TokenHasher(chunk_size=CHUNK)


def chunk_key_strings(tokens):
    """LMCache's own ObjectKeys of `tokens`'s whole chunks (world size 1,
    object group 0) as its native-connector key strings."""
    keys, _ = resolve_object_keys(HASHER, MODEL, 1, tokens, "")
    return [_object_key_to_string(k) for k in keys]


class Server:
    """`python -m lmcache.v1.multiprocess.server` with one kvtier L2 adapter;
    its output in a log file."""

    READY = "LMCache cache server is running..."

    def __init__(self, root, name, spec, extra=()):
        self.port = tier_env.free_port()
        self.log_path = os.path.join(root, "%s-%d.log" % (name, self.port))
        self.argv = [sys.executable, "-m", "lmcache.v1.multiprocess.server",
                     "--host", "127.0.0.1", "--port", str(self.port),
                     "--chunk-size", str(CHUNK), "--l1-size-gb", "0.02", "--no-l1-use-lazy",
                     "--eviction-policy", "LRU", "--supported-transfer-mode", "engine_driven",
                     "--disable-observability", "--l2-adapter", json.dumps(spec), *extra]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         env=lmcache_env())

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=300):
        deadline = time.monotonic() + timeout
        while self.READY not in self.text():
            if self.proc.poll() is not None:
                raise RuntimeError("LMCache's server exited (%d):\n%s" %
                                   (self.proc.returncode, self.text()[-4000:]))
            if time.monotonic() > deadline:
                raise RuntimeError("LMCache's server did not start in %ds:\n%s" %
                                   (timeout, self.text()[-4000:]))
            time.sleep(0.2)

    def stop(self):
        """SIGTERM: the server's own orderly shutdown (it closes its L2 adapters)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def prefetches(self):
        """(L1, L2) of every prefetch the server logged."""
        return [(int(a), int(b)) for a, b in
                re.findall(r"Prefetch request completed.*?\((\d+) L1, (\d+) L2\)", self.text())]


class Client:
    """LMCache's vLLM-side multiprocess client (the scheduler's and the
    worker's adapters of LMCacheMPConnector) over CPU KV caches of vLLM's
    paged layout, (2, blocks, block_size, heads, head_dim) per layer."""

    def __init__(self, port):
        url = "tcp://127.0.0.1:%d" % port
        ps = ParallelStrategy(mla_only=False, vllm_world_size=1, vllm_worker_id=0,
                              tp_size=1, pp_size=1, n_servers=1)
        self.ctx = zmq.Context()
        self.sched = LMCacheMPSchedulerAdapter([url], self.ctx, MODEL, BLOCK, ps,
                                               mq_timeout=60)
        self.worker = LMCacheMPWorkerAdapter(url, self.ctx, MODEL, BLOCK, ps, mq_timeout=60)
        self.kv = {"model.layers.%d.self_attn.attn" % i:
                   torch.zeros(2, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM, dtype=torch.bfloat16)
                   for i in range(LAYERS)}
        self.worker.register_kv_caches(self.kv, layout_hints={"kv_layout": "NHD"})
        self.n = 0

    def close(self):
        self.worker.shutdown()
        self.sched.shutdown()
        self.ctx.destroy(linger=0)

    def _rid(self, what):
        self.n += 1
        return "%s-%d" % (what, self.n)

    def fill(self, blocks, seed):
        g = torch.Generator().manual_seed(seed)
        for t in self.kv.values():
            for b in blocks:
                t[:, b].copy_(torch.randn(t[:, b].shape, generator=g).to(torch.bfloat16))

    def same(self, blocks_a, blocks_b):
        a, b = slice(blocks_a.start, blocks_a.stop), slice(blocks_b.start, blocks_b.stop)
        return all(torch.equal(t[:, a].view(torch.int16), t[:, b].view(torch.int16))
                   for t in self.kv.values())

    def store(self, tokens, blocks):
        """The worker's store of `tokens`'s whole chunks (vLLM's connector
        stores up to a chunk boundary) from `blocks`."""
        rid = self._rid("store")
        end = len(tokens) // CHUNK * CHUNK
        self.worker.submit_store_request(
            rid, LoadStoreOp(token_ids=tokens, block_ids=[list(blocks)], start=0, end=end),
            None)
        future = self.worker.store_futures[rid]
        deadline = time.monotonic() + 60
        while True:
            stores, _ = self.worker.get_finished({rid})
            if stores and rid in stores:
                break
            if time.monotonic() > deadline:
                raise AssertionError("LMCache did not finish store %s" % rid)
            time.sleep(0.01)
        assert future.result(timeout=0), "LMCache's server failed store %s" % rid

    def lookup(self, tokens):
        """The scheduler's lookup (which prefetches into L1 and locks): the
        request id and the tokens LMCache has."""
        rid = self._rid("req")
        self.sched.maybe_submit_lookup_request(rid, tokens)
        deadline = time.monotonic() + 60
        while (hit := self.sched.check_lookup_result(rid)) is None:
            if time.monotonic() > deadline:
                raise AssertionError("LMCache's lookup %s did not finish" % rid)
            time.sleep(0.01)
        self.sched.cleanup_lookup_result(rid)
        return rid, hit

    def retrieve(self, rid, tokens, hit, blocks):
        """The worker's retrieve of the `hit` tokens into `blocks`; the
        blocks LMCache reported as failed."""
        self.worker.submit_retrieve_request(
            rid, LoadStoreOp(token_ids=tokens, block_ids=[list(blocks)], start=0, end=hit),
            None)
        deadline = time.monotonic() + 60
        while True:
            _, done = self.worker.get_finished(set())
            if done and rid in done:
                break
            if time.monotonic() > deadline:
                raise AssertionError("LMCache did not finish retrieve %s" % rid)
            time.sleep(0.01)
        return self.worker.get_block_ids_with_load_errors()


# Stored by every server: A (4 chunks and a partial one) from blocks 0..8.
# On NVMe also B and C, whose chunk 1 is damaged and chunk 0 truncated
# before the restart.
SEQ_A, SEQ_B, SEQ_C = sequence(1000, 4), sequence(5000, 4), sequence(9000, 4)
BLOCKS_A, BLOCKS_B, BLOCKS_C = range(0, 9), range(9, 18), range(18, 27)
OUT = range(30, 39)     # where retrieves land
WHOLE = 4 * CHUNK // BLOCK      # the blocks of the 4 whole chunks; the 9th is partial


class LMCacheServer(unittest.TestCase):
    """LMCache's server with kvtier as L2, across a restart of its process.
    The servers of a round run side by side; setUpClass drives both rounds
    and keeps what each tier showed, the tests check it."""

    # tier: (adapter type, its adapter_params besides config, server flags)
    TIERS = {
        "dram": ("plugin", {}, ["--l2-store-policy", "skip_l1"]),
        "nvme": ("plugin", {"durability": "crash_safe", "num_workers": 2}, []),
        "shared_fs": ("native_plugin", {"num_workers": 2}, []),
    }
    RESTARTED = ("nvme", "shared_fs")

    @classmethod
    def setUpClass(cls):
        cls.env = tier_env.Env()
        cls.servers, cls.clients, cls.found = [], [], {}
        cls.keys = KvtierNativeConnector(cls.env.config("dram", "keys"), num_workers=1)
        try:
            cls._run()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _run(cls):
        env = cls.env
        cls.specs = {tier: adapter_spec(kind, write_config(env, tier, "mp"), **params)
                     for tier, (kind, params, _) in cls.TIERS.items()}
        # Round 1: store.
        first = cls._start(cls.TIERS)
        for tier, server in first.items():
            c = cls._client(server)
            c.fill(BLOCKS_A, seed=1)
            c.store(SEQ_A, BLOCKS_A)
            if tier == "nvme":
                c.fill(BLOCKS_B, seed=2)
                c.fill(BLOCKS_C, seed=3)
                c.store(SEQ_B, BLOCKS_B)
                c.store(SEQ_C, BLOCKS_C)
            cls.found[tier] = {"data": {k: t.clone() for k, t in c.kv.items()}}
        # DRAM: only while the server lives.  skip_l1 drops a chunk from L1
        # once kvtier holds it; retrieve until the server logs a prefetch
        # that read every chunk from its L2.
        c, server = cls.clients[0], first["dram"]
        deadline = time.monotonic() + 60
        while True:
            rid, hit = c.lookup(SEQ_A)
            errors = c.retrieve(rid, SEQ_A, hit, OUT) if hit else set()
            last = server.prefetches()[-1:]
            if last == [(0, 4)] or time.monotonic() > deadline:
                cls.found["dram"].update(hit=hit, errors=errors, prefetch=last,
                                         same=c.same(BLOCKS_A[:WHOLE], OUT[:WHOLE]),
                                         log=server.text())
                break
            time.sleep(0.2)
        # The disk tiers: every chunk on its medium before the stop.
        cls._wait_stored("nvme", [SEQ_A, SEQ_B, SEQ_C])
        cls._wait_stored("shared_fs", [SEQ_A])
        cls._stop_all()
        # Damage B's chunk 1 and cut C's chunk 0 short on the NVMe tier.
        kb = cls.keys._key(chunk_key_strings(SEQ_B)[1])
        kc = cls.keys._key(chunk_key_strings(SEQ_C)[0])
        cls.found["nvme"]["damaged"] = (tier_env.flip_payload_byte(env, "nvme", "mp", kb),
                                        truncate_payload(env, "nvme", "mp", kc))
        # Round 2: a new server process over the same kvtier; look up and
        # retrieve into blocks the client never wrote.
        second = cls._start(cls.RESTARTED)
        for tier, server in second.items():
            c = cls._client(server)
            got = cls.found[tier]
            for k, t in c.kv.items():
                t.copy_(got["data"][k])
                t[:, OUT.start:OUT.stop].zero_()
            rid, hit = c.lookup(SEQ_A)
            got["after"] = (hit, c.retrieve(rid, SEQ_A, hit, OUT) if hit else set(),
                            c.same(BLOCKS_A[:WHOLE], OUT[:WHOLE]), server.prefetches(),
                            all(int(t[:, OUT[WHOLE]].abs().sum()) == 0 for t in c.kv.values()))
            if tier == "nvme":
                rid, hit_b = c.lookup(SEQ_B)
                errors = c.retrieve(rid, SEQ_B, hit_b, OUT) if hit_b else None
                got["b"] = (hit_b, errors, c.same(BLOCKS_B[:2], OUT[:2]))
                rid, hit_c = c.lookup(SEQ_C)
                got["c"] = hit_c
            got["log"] = server.text()

    @classmethod
    def _start(cls, tiers):
        started = {t: Server(cls.env.root, t, cls.specs[t], cls.TIERS[t][2]) for t in tiers}
        cls.servers += started.values()
        for s in started.values():
            s.wait_ready()
        return started

    @classmethod
    def _client(cls, server):
        c = Client(server.port)
        cls.clients.append(c)
        return c

    @classmethod
    def _wait_stored(cls, tier, sequences, timeout=60):
        keys = [cls.keys._key(n) for t in sequences for n in chunk_key_strings(t)]
        deadline = time.monotonic() + timeout
        while True:
            held = [bool(medium_files(cls.env, tier, "mp", k)) for k in keys]
            if all(held):
                return
            if time.monotonic() > deadline:
                raise AssertionError("%s: LMCache stored %s of %d chunks in kvtier" %
                                     (tier, held, len(keys)))
            time.sleep(0.1)

    @classmethod
    def _stop_all(cls):
        for c in cls.clients:
            try:
                c.close()
            except Exception:   # the server may be gone; the next ones still close
                pass
        cls.clients = []
        for s in cls.servers:
            s.stop()
        cls.servers = []

    @classmethod
    def tearDownClass(cls):
        cls._stop_all()
        cls.keys.close()
        cls.env.close()

    def check_restart(self, tier):
        hit, errors, same, prefetches, partial_untouched = self.found[tier]["after"]
        self.assertEqual(hit, 4 * CHUNK, "%s: LMCache's lookup after the restart" % tier)
        self.assertEqual(errors, set())
        self.assertTrue(same, "%s: the retrieved KV differs from what was stored" % tier)
        # The partial chunk was never stored, so never retrieved.
        self.assertTrue(partial_untouched)
        # L1 was empty: all 4 chunks came from kvtier.
        self.assertEqual(prefetches[:1], [(0, 4)])
        self.assertNotIn("Traceback", self.found[tier]["log"])

    def test_dram_serves_while_the_server_lives(self):
        # (What a DRAM-only kvtier loses at a restart: L2Adapter.test_dram.)
        got = self.found["dram"]
        self.assertEqual((got["hit"], got["errors"], got["same"], got["prefetch"]),
                         (4 * CHUNK, set(), True, [(0, 4)]))
        self.assertNotIn("Traceback", got["log"])

    def test_nvme_restart(self):
        self.check_restart("nvme")

    def test_shared_fs_restart(self):
        self.check_restart("shared_fs")

    def test_damaged_and_truncated_chunks_are_misses(self):
        got = self.found["nvme"]
        self.assertEqual(got["damaged"], (1, 1))
        # B: chunk 0 whole, chunk 1 fails its checksum: LMCache's hit stops
        # after chunk 0, which comes back whole.
        self.assertEqual(got["b"], (CHUNK, set(), True))
        # C: chunk 0 cut short: nothing.
        self.assertEqual(got["c"], 0)


def one(conn, fid, timeout=20.0):
    return wait_for(conn, [fid], timeout)[fid]


def wait_for(conn, fids, timeout=20.0):
    """NativeConnectorL2Adapter's demux loop: poll the eventfd, drain, route
    by future id, until every future in `fids` completed;
    {fid: (ok, error, per_key)}."""
    poller = select.poll()
    poller.register(conn.event_fd(), select.POLLIN)
    out = {}
    while set(fids) - set(out):
        if not poller.poll(int(timeout * 1000)):
            raise AssertionError("no completion in %gs for %s" % (timeout, set(fids) - set(out)))
        for fid, ok, err, per_key in conn.drain_completions():
            assert fid not in out, "future %d completed twice" % fid
            out[fid] = (ok, err, per_key)
    return out


ALLOC = AdHocMemoryAllocator("cpu")


def memory_obj(seed=None, shape=(2, LAYERS, CHUNK, HEADS * HEAD_DIM), dtype=torch.bfloat16):
    """A MemoryObj as LMCache's L1 hands its L2 (KV_2LTD), random or zero."""
    obj = ALLOC.allocate(torch.Size(shape), dtype, fmt=MemoryFormat.KV_2LTD)
    if seed is None:
        obj.tensor.zero_()
    else:
        g = torch.Generator().manual_seed(seed)
        obj.tensor.copy_(torch.randn(obj.tensor.shape, generator=g).to(dtype))
    return obj


def raw(obj):
    return bytes(obj.byte_array)


def object_keys(first, chunks, model=MODEL, kv_rank=0):
    """LMCache's ObjectKeys of `chunks` chunks of tokens from `first`."""
    hashes = HASHER.compute_chunk_hashes(sequence(first, chunks, 0))
    return [ObjectKey(chunk_hash=h, model_name=model, kv_rank=kv_rank) for h in hashes]


def key_string(first, model=MODEL, kv_rank=0, group=0):
    [k] = object_keys(first, 1, model, kv_rank)
    return _object_key_to_string(ObjectKey(chunk_hash=k.chunk_hash, model_name=model,
                                           kv_rank=kv_rank, object_group_id=group))


class L2Adapter(unittest.TestCase):
    """kvtier's adapter as LMCache's storage manager builds and drives it."""

    @classmethod
    def setUpClass(cls):
        cls.env = tier_env.Env()

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def build(self, spec):
        """LMCache's own path from a --l2-adapter argument to an adapter."""
        parser = add_l2_adapters_args(argparse.ArgumentParser())
        args = parser.parse_args(["--l2-adapter", json.dumps(spec)])
        [cfg] = parse_args_to_l2_adapters_config(args).adapters
        return create_l2_adapter(cfg)

    def wait(self, fd, poll_result, timeout=20.0):
        p = select.poll()
        p.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            r = poll_result()
            if r is not None:
                return r
            if time.monotonic() > deadline:
                raise AssertionError("no L2 completion in %gs" % timeout)
            p.poll(50)
            time.sleep(0.002)

    def store(self, ad, keys, objs):
        task = ad.submit_store_task(keys, objs)
        done = {}

        def poll():
            done.update(ad.pop_completed_store_tasks())
            return done.get(task)
        return self.wait(ad.get_store_event_fd(), poll)

    def lookup(self, ad, keys):
        task = ad.submit_lookup_and_lock_task(keys, {})
        bm = self.wait(ad.get_lookup_and_lock_event_fd(),
                       lambda: ad.query_lookup_and_lock_result(task))
        return [bm.test(i) for i in range(len(keys))]

    def load(self, ad, keys, objs):
        task = ad.submit_load_task(keys, objs)
        bm = self.wait(ad.get_load_event_fd(), lambda: ad.query_load_result(task))
        return [bm.test(i) for i in range(len(keys))]

    def run_tier(self, tier, daemon=None):
        name = "l2-" + tier
        params = {"num_workers": 3}
        if tier != "dram":
            params["durability"] = "crash_safe"
        spec = adapter_spec("plugin", write_config(self.env, tier, name, daemon), **params)
        ad = self.build(spec)
        self.assertIsInstance(ad, KvtierL2Adapter)
        status = ad.report_status()
        self.assertEqual((status["type"], status["is_healthy"]), ("kvtier", True))
        # Four chunks of KV, and one object of another shape (an MLA-like one).
        keys = object_keys(100, 4) + object_keys(700, 1)
        objs = [memory_obj(seed=i) for i in range(4)] + \
            [memory_obj(seed=9, shape=(LAYERS, CHUNK, 576))]
        res = self.store(ad, keys, objs)
        self.assertTrue(res.is_successful())
        self.assertEqual(res.bytes_transferred(), sum(o.get_size() for o in objs))
        if tier != "dram":
            ad.close()
            ad = self.build(spec)            # a restart: kvtier's DRAM is empty
        missing = object_keys(300, 1)
        self.assertEqual(self.lookup(ad, keys + missing), [True] * 5 + [False])
        outs = [memory_obj() for _ in range(4)] + [memory_obj(shape=(LAYERS, CHUNK, 576)),
                                                   memory_obj()]
        self.assertEqual(self.load(ad, keys + missing, outs), [True] * 5 + [False])
        for i, (a, b) in enumerate(zip(objs, outs)):
            self.assertEqual(raw(a), raw(b), "object %d" % i)
        self.assertEqual(raw(outs[5]), bytes(CHUNK_BYTES))
        ad.submit_unlock(keys)
        # LMCache's synchronous delete (its L2 eviction's path).
        ad.delete(keys[4:])
        self.assertEqual(self.lookup(ad, keys[3:]), [True, False])
        conn = ad._client
        self.assertIsInstance(conn, KvtierNativeConnector)
        if tier not in ("dram", "kvtierd"):
            self.assertGreaterEqual(conn.store.stats(1)["hits"], 4)
        ad.close()
        if tier == "dram":
            # A DRAM-only kvtier lives in LMCache's process: a new one is empty.
            ad = self.build(spec)
            self.assertEqual(self.lookup(ad, keys), [False] * 5)
            ad.close()
        if tier in ("dram", "kvtierd"):
            return
        # On the medium: chunk 0 damaged, chunk 1 cut short.  Neither is data.
        k0, k1 = conn._key(_object_key_to_string(keys[0])), \
            conn._key(_object_key_to_string(keys[1]))
        self.assertEqual(tier_env.flip_payload_byte(self.env, tier, name, k0), 1)
        self.assertEqual(truncate_payload(self.env, tier, name, k1), 1)
        ad = self.build(spec)
        outs = [memory_obj() for _ in range(3)]
        self.assertEqual(self.load(ad, keys[:3], outs), [False, False, True])
        self.assertEqual(raw(outs[2]), raw(objs[2]))
        self.assertGreaterEqual(sum(s["corrupt"] + s["bad_listed"] + s["read_errors"]
                                    for s in ad._client.store.stats()), 1)
        ad.close()

    def test_dram(self):
        self.run_tier("dram")

    def test_nvme(self):
        self.run_tier("nvme")

    def test_shared_fs(self):
        self.run_tier("shared_fs")

    def test_s3(self):
        self.run_tier("s3")

    def test_kvtierd(self):
        # kvtier's store a client of the node's kvtierd (its DRAM and disk
        # tiers): what LMCache stored outlives LMCache's process.
        sock = os.path.join(self.env.root, "kvtierd.sock")
        daemon = start_daemon(kvtierd_bin(), os.path.join(self.env.root, "kvtierd"), sock)
        try:
            self.run_tier("kvtierd", daemon=sock)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)

    def test_native_plugin(self):
        # LMCache wraps kvtier's connector in its own adapter; max_capacity_gb
        # is LMCache's (its usage accounting), not kvtier's.
        spec = adapter_spec("native_plugin", write_config(self.env, "dram", "native"),
                            num_workers=2)
        spec["max_capacity_gb"] = 1
        ad = self.build(spec)
        self.assertIs(type(ad), NativeConnectorL2Adapter)
        self.assertIsInstance(ad._client, KvtierNativeConnector)
        keys, objs = object_keys(40, 2), [memory_obj(seed=5), memory_obj(seed=6)]
        self.assertTrue(self.store(ad, keys, objs).is_successful())
        deadline = time.monotonic() + 10     # counted by LMCache's demux thread
        while ad.get_usage().total_bytes_used < 2 * CHUNK_BYTES and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        usage = ad.get_usage()
        self.assertEqual((usage.total_bytes_used, usage.total_capacity_bytes),
                         (2 * CHUNK_BYTES, 1 << 30))
        outs = [memory_obj(), memory_obj()]
        self.assertEqual(self.load(ad, keys, outs), [True, True])
        self.assertEqual([raw(o) for o in outs], [raw(o) for o in objs])
        ad.close()

    def test_plugin_parameters(self):
        # LMCache's plugin loader finds KvtierL2AdapterConfig by name and
        # builds it from adapter_params; an unknown one is refused by name.
        yaml = write_config(self.env, "dram", "params")
        with self.assertRaisesRegex(ValueError, "unknown parameter.s. confg"):
            self.build(adapter_spec("plugin", yaml, confg="x"))
        with self.assertRaisesRegex(ValueError, "durability 'sync'"):
            self.build(adapter_spec("plugin", yaml, durability="sync"))
        with self.assertRaisesRegex(ValueError, "config 5 is not a string"):
            KvtierL2AdapterConfig.from_dict({"config": 5})
        self.assertIn("num_workers", KvtierL2AdapterConfig.help())
        # The raw-dict form, for LMCache versions that pass adapter_params.
        ad = KvtierL2Adapter({"config": yaml, "num_workers": 1})
        self.assertEqual(ad.report_status()["num_workers"], 1)
        ad.close()


class Connector(unittest.TestCase):
    """KvtierNativeConnector's contract, driven directly."""

    def setUp(self):
        self.env = tier_env.Env()
        self.conn = KvtierNativeConnector(self.env.config("dram", "contract"), num_workers=2)

    def tearDown(self):
        self.conn.close()
        self.env.close()

    def test_batches_in_flight_and_one_wakeup(self):
        c = self.conn
        sets, objs = [], {}
        for b in range(4):
            keys = [key_string(100 * b + i) for i in range(5)]
            objs[b] = [memory_obj(seed=100 * b + i) for i in range(5)]
            sets.append(c.submit_batch_set(keys, [o.byte_array for o in objs[b]]))
        self.assertEqual(len(set(sets)), 4)
        done = wait_for(c, sets)
        self.assertTrue(all(done[f] == (True, "", [True] * 5) for f in sets), done)
        # Nothing queued: the eventfd is not readable and a drain is empty.
        p = select.poll()
        p.register(c.event_fd(), select.POLLIN)
        self.assertEqual(p.poll(0), [])
        self.assertEqual(c.drain_completions(), [])
        # A set of keys already stored succeeds (first writer wins) and
        # does not replace the bytes.
        keys = [key_string(i) for i in range(5)]
        other = [memory_obj(seed=77) for _ in keys]
        self.assertEqual(one(c, c.submit_batch_set(keys, [o.byte_array for o in other]))[2],
                         [True] * 5)
        out = memory_obj()
        one(c, c.submit_batch_get(keys[:1], [out.byte_array]))
        self.assertEqual(raw(out), raw(objs[0][0]))

    def test_submitters_on_many_threads(self):
        # LMCache's store and prefetch controllers submit from their own
        # threads while the demux thread drains.
        c = self.conn
        errors = []

        def client(t):
            try:
                keys = [key_string(1000 * t + i) for i in range(8)]
                data = [memory_obj(seed=1000 * t + i) for i in range(8)]
                fid = c.submit_batch_set(keys, [o.byte_array for o in data])
                with lock:
                    want[fid] = None
                while fid not in got:
                    ev.wait(0.05)
                outs = [memory_obj() for _ in keys]
                fid = c.submit_batch_get(keys, [o.byte_array for o in outs])
                with lock:
                    want[fid] = None
                while fid not in got:
                    ev.wait(0.05)
                if got[fid][2] != [True] * 8 or [raw(o) for o in outs] != [raw(o) for o in data]:
                    errors.append((t, got[fid]))
            except Exception as e:  # reported below, not lost in the thread
                errors.append((t, e))

        lock, ev, want, got = threading.Lock(), threading.Event(), {}, {}
        threads = [threading.Thread(target=client, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        poller = select.poll()
        poller.register(c.event_fd(), select.POLLIN)
        while any(t.is_alive() for t in threads):
            if poller.poll(100):
                for fid, ok, err, res in c.drain_completions():
                    self.assertNotIn(fid, got)
                    got[fid] = (ok, err, res)
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(set(got), set(want))

    def test_key_namespaces_and_sizes(self):
        # The same chunk under another model, rank or group is another
        # object; a buffer of another size never receives an object.
        c = self.conn
        a = key_string(1, model="m1")
        # LMCache's L1 holds a buffer until its future completes; so does
        # each test (a buffer freed in flight is the caller's bug).
        obj = memory_obj(seed=1)
        one(c, c.submit_batch_set([a], [obj.byte_array]))
        self.assertEqual(one(c, c.submit_batch_exists(
            [a, key_string(1, model="m2"), key_string(1, model="m1", kv_rank=1),
             key_string(1, model="m1", group=1)]))[2], [True, False, False, False])
        small = memory_obj(shape=(2, LAYERS, CHUNK - 1, HEADS * HEAD_DIM))
        ok, err, res = one(c, c.submit_batch_get([a], [small.byte_array]))
        self.assertEqual((ok, res), (True, [False]))
        self.assertIn(a, err)
        self.assertEqual(raw(small), bytes(small.get_size()))

    def test_bad_input(self):
        c = self.conn
        with self.assertRaisesRegex(ValueError, "keys list is empty"):
            c.submit_batch_exists([])
        with self.assertRaisesRegex(ValueError, "2 keys and 1 buffers"):
            c.submit_batch_set(["a", "b"], [b"x"])
        with self.assertRaisesRegex(ValueError, "buffer 0 of a get is read-only"):
            c.submit_batch_get(["a"], [b"x"])
        with self.assertRaisesRegex(ValueError, "buffer 0 is empty"):
            c.submit_batch_set(["a"], [b""])
        with self.assertRaisesRegex(ValueError, "not a non-empty string"):
            c.submit_batch_exists([b"bytes"])
        with self.assertRaisesRegex(ValueError, "durability 'sync'"):
            KvtierNativeConnector(store=c.store, durability="sync")
        c.close()
        c.close()
        with self.assertRaisesRegex(RuntimeError, "closed"):
            c.submit_batch_exists(["a"])
        self.conn = KvtierNativeConnector(self.env.config("dram", "contract"))

    def test_close_with_work_queued(self):
        # close() returns with work queued: the sets still run (LMCache
        # closes its L2 adapters before the L1 their buffers are in), the
        # gets are dropped; no completion comes after it; the eventfd closes.
        store = kvtier.Store(self.env.config("dram", "queued"))
        c = KvtierNativeConnector(store=store, num_workers=1)
        keys = [key_string(i) for i in range(64)]
        objs = [memory_obj(seed=i) for i in range(64)]
        fid = c.submit_batch_set(keys, [o.byte_array for o in objs])
        outs = [memory_obj() for _ in keys]
        c.submit_batch_get(keys, [o.byte_array for o in outs])
        fd = c.event_fd()
        c.close()
        self.assertGreater(fid, 0)
        with self.assertRaises(OSError):
            os.fstat(fd)
        with KvtierNativeConnector(store=store, num_workers=1) as again:
            self.assertEqual(one(again, again.submit_batch_exists(keys))[2], [True] * 64)
        store.close()


class ImportLogged(unittest.TestCase):
    def test_lmcache_import_error_is_logged(self):
        # An LMCache that does not import: the connector still works, the
        # error is logged, and asking for the adapter names it again.
        code = "\n".join([
            "import logging, sys",
            "logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s "
            "%(message)s')",
            "sys.modules['lmcache'] = None",
            "import kvtier.lmcache as m",
            "print('CONNECTOR', m.KvtierNativeConnector.__name__)",
            "try:",
            "    m.KvtierL2Adapter",
            "except AttributeError as e:",
            "    print('USE', e)",
        ])
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=lmcache_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        why = "ModuleNotFoundError: No module named 'lmcache.v1'; 'lmcache' is not a package"
        self.assertIn("WARNING kvtier.lmcache kvtier.lmcache: LMCache does not import, so "
                      "KvtierL2Adapter and KvtierL2AdapterConfig", r.stderr)
        self.assertIn(why, r.stderr)
        self.assertIn("CONNECTOR KvtierNativeConnector", r.stdout)
        self.assertIn("USE kvtier.lmcache.KvtierL2Adapter needs LMCache, which did not "
                      "import: " + why, r.stdout)


if __name__ == "__main__":
    unittest.main()
