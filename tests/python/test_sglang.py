"""kvtier.sglang.KvtierStorage under SGLang 0.5.23's own HiCache classes.

Everything SGLang-side here is SGLang's code, run on the CPU:

- the device pools MHATokenToKVPool, MLATokenToKVPool and MambaPool
  (device "cpu"), the host pools MHATokenToKVPoolHost and
  MLATokenToKVPoolHost (layer_first, page_first, page_first_direct; MHA also
  page_head), MambaPoolHost, LogicalHostPool, HostPoolGroup of
  build_pool_entry entries, the PagedTokenToKVPoolAllocator;
- HiCacheController and HybridCacheController with their own prefetch,
  prefetch-I/O, prefetch-sync and backup threads.  The controller builds
  HiCacheStorageConfig (_generate_storage_config) and creates kvtier by
  StorageBackendFactory.create_backend("dynamic", ...) from the extra config,
  then register_mem_pool_host / register_mem_host_pool_v2.  The test plays
  the radix tree's part as unified_radix_cache.py does: write_storage ->
  ack_backup_queue; prefetch -> prefetch_hit_queue -> host allocation ->
  prefetch_buffer -> ack_prefetch_queue; page hashes by get_storage_hash_str
  (compute_node_hash_values' function).

Restored pages must be byte-identical to the pages backed up, reloaded into
a fresh pool of another layout in another process (a spawned worker) through
NVMe, the shared directory, S3 and the node daemon's shared DRAM, and through
the in-process DRAM tier; for MLA only rank 0 writes (SGLang skips the backup
of the other ranks: HiCacheStorageConfig.is_storage_writer) and every rank
reads.

What SGLang cannot do on a machine without a GPU, and how the test goes
around it (SGLang's own code, other arguments):

- Its host-pool builders (hybrid_pool_assembler.build_kv_host_pool,
  _build_mha_mla_host_pool, build_mamba_host_pool) construct with
  pin_memory=True: alloc_with_host_register -> _cuda_host_register ->
  torch.cuda.cudart() raises "RuntimeError: Found no NVIDIA driver on your
  system. Please check that you have an NVIDIA GPU and installed a driver
  from http://www.nvidia.com/Download/index.aspx".  The host pools are made
  with the same arguments (_mha_host_inputs for MHA) and pin_memory=False.
- The builders read the published server configuration (get_memory()) and
  the launcher's ranks (get_parallel(): "derived parallel width
  'attn_dcp_size' is not available ..."): the ranks are set with
  get_parallel().override(...), as SGLang's own unit tests do, the pool
  geometry is passed directly.
- host_memory_budget_bytes() keeps 10 GiB of the machine's memory free and
  refuses a pool otherwise ("ValueError: Not enough host memory available");
  the pools are built inside host_memory_budget_scope(1 GiB).
- Nothing moves between device and host pools here (the transfer kernels
  are CUDA's); the host pools' contents are written directly.
"""

import concurrent.futures
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)     # the spawned worker imports this module

import kvtier                    # noqa: E402
import tier_env                  # noqa: E402

from sglang.srt.configs.mamba_utils import (  # noqa: E402
    Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape)
from sglang.srt.managers.cache_controller import HiCacheController  # noqa: E402
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    STORAGE_BATCH_SIZE, HiCacheStorage, HiCacheStorageConfig, PoolHitPolicy, PoolName,
    PoolTransfer)
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (  # noqa: E402
    HybridCacheController)
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import (  # noqa: E402
    _mha_host_inputs, build_pool_entry)
from sglang.srt.mem_cache.memory_pool import (  # noqa: E402
    MambaPool, MHATokenToKVPool, MLATokenToKVPool)
from sglang.srt.mem_cache.memory_pool_host import LogicalHostPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.base import host_memory_budget_scope  # noqa: E402
from sglang.srt.mem_cache.pool_host.group import HostPoolGroup  # noqa: E402
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_storage_hash_str  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

from kvtier import sglang as ksg  # noqa: E402

P, L, H, D = 4, 3, 2, 8   # page tokens, layers, KV heads, head dim
LORA, ROPE = 12, 4        # MLA: kv_lora_rank, qk_rope_head_dim
MODEL = "kvtier-test/sglang-tiny"
EXTRA = {"backend_name": "kvtier", "module_path": "kvtier.sglang",
         "class_name": "KvtierStorage", "interface_v1": 1}
WAIT = 60                 # seconds a controller queue may take


# --- SGLang's pools on the CPU --------------------------------------------------

def ranks(tp_rank=0, tp_size=1):
    """The launcher's ranks, which SGLang reads from its runtime context."""
    return get_parallel().override(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                   attn_dcp_size=1, attn_dcp_rank=0)


def device_pool(mla=False, pages=32, dtype=torch.bfloat16, layers=L, heads=H):
    if mla:
        return MLATokenToKVPool(size=pages * P, page_size=P, dtype=dtype, kv_lora_rank=LORA,
                                qk_rope_head_dim=ROPE, layer_num=layers, device="cpu",
                                enable_memory_saver=False)
    return MHATokenToKVPool(size=pages * P, page_size=P, dtype=dtype, head_num=heads,
                            head_dim=D, layer_num=layers, device="cpu",
                            enable_memory_saver=False, enable_alt_stream=False)


def host_pool(dev, layout, seed=None):
    """The host pool SGLang's _build_mha_mla_host_pool makes for `dev`
    (hicache_ratio 2), unpinned; random contents when seeded."""
    with host_memory_budget_scope(1 << 30):
        if isinstance(dev, MLATokenToKVPool):
            pool = MLATokenToKVPoolHost(
                dev.get_device_pool_infos()[0].buffer_info, 2.0, 0, P, layout,
                pin_memory=False, override_kv_cache_dim=dev.kv_cache_dim,
                device_capacity_tokens=dev.size, start_layer=dev.start_layer,
                end_layer=dev.end_layer, target_layer_num=dev.layer_num)
        else:
            cls, info, kw = _mha_host_inputs(dev)
            pool = cls(info, 2.0, 0, P, layout, pin_memory=False, **kw)
    if seed is not None:
        randomize(pool.kv_buffer, seed)
    return pool


def mamba_pools(seed=None):
    """SGLang's Mamba2 state pool for model layer 4 (8 request slots) and
    the MambaPoolHost build_mamba_host_pool makes of it, unpinned."""
    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=16, n_groups=1,
                                    num_heads=2, head_dim=4, state_size=4, conv_kernel=4)
    params = Mamba2CacheParams(shape=shape, layers=[4], dtype=Mamba2StateDType(
        conv=torch.bfloat16, temporal=torch.float32))
    dev = MambaPool(size=8, spec_state_size=0, cache_params=params, mamba_layer_ids=[4],
                    device="cpu")
    with host_memory_budget_scope(1 << 30):
        host = MambaPoolHost(dev.get_device_pool_infos()[0].buffer_info, 2.0, 0,
                             device_capacity=dev.size, pin_memory=False, layout="page_first")
    if seed is not None:
        for i, t in enumerate([host.temporal_buffer, *host.conv_buffer]):
            randomize(t, seed + i)
    return dev, host


def randomize(t, seed):
    g = torch.Generator().manual_seed(seed)
    b = t.view(torch.uint8)
    b.copy_(torch.randint(0, 256, b.shape, generator=g, dtype=torch.uint8))


def page_kv(pool, slot):
    """The page whose first slot is `slot` as bytes in one order whatever
    the layout: (layer, plane, token, head, element)."""
    page = pool.get_data_page(slot, flat=False)
    lay = pool.layout
    if isinstance(pool, MLATokenToKVPoolHost):
        if lay == "page_first":
            page = page.permute(1, 0, 2, 3)
        elif lay == "page_first_direct":
            page = page[0]
        page = page.unsqueeze(1)
    elif lay == "page_first":
        page = page.permute(2, 0, 1, 3, 4)
    elif lay == "page_head":
        page = page[:, 0].permute(3, 0, 2, 1, 4)
    else:
        page = page.reshape(2, L, P, H, D).permute(1, 0, 2, 3, 4)
    return page.contiguous().flatten().view(torch.uint8)


def pages_of(pool, idx, n):
    return [page_kv(pool, int(idx[i * P])) for i in range(n)]


def tokens_for(pages, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 1 << 17, (pages * P,), generator=g).tolist()


def hashes_of(tokens):
    """The page hashes the radix tree gives its nodes (compute_node_hash_values)."""
    return get_storage_hash_str(tokens, None, page_size=P)


class Engine:
    """One SGLang rank's HiCache storage side: SGLang's HiCacheController
    over a device pool and a host pool, kvtier attached from the extra
    config; the radix tree's calls into it."""

    def __init__(self, dev, host, extra=None, tp_rank=0, tp_size=1, metrics=False):
        self.host = host
        alloc = PagedTokenToKVPoolAllocator(dev.size, P, dev.dtype, "cpu", dev, need_sort=False)
        with ranks(tp_rank, tp_size):
            self.cc = HiCacheController(
                alloc, host, P, None, threading.Event(), io_backend="kernel",
                storage_backend="dynamic", model_name=MODEL,
                storage_backend_extra_config=dict(EXTRA, **(extra or {})),
                enable_storage_metrics=metrics)
        self.backend = self.cc.storage_backend

    def close(self):
        self.cc.detach_storage_backend()   # the backend's close(): a store restart

    def backup(self, tokens, host_indices):
        """write_storage of a node's pages; the tokens SGLang stored."""
        cc = self.cc
        op_id = cc.write_storage(host_indices, tokens, hash_value=hashes_of(tokens))
        op = cc.ack_backup_queue.get(timeout=WAIT)
        assert op.id == op_id
        return op.completed_tokens

    def prefetch(self, tokens, skip_pages=0):
        """prefetch -> the storage hit (rank-reduced) -> host slots (after
        skip_pages taken first, so that they differ from the source's) ->
        the transfer.  (hit tokens, loaded tokens, host indices)."""
        cc = self.cc
        op = cc.prefetch("req", tokens, None)
        hit = cc.prefetch_hit_queue.get(timeout=WAIT)
        assert hit is op
        if op.storage_hit_count == 0:
            return 0, 0, None
        if skip_pages:
            self.host.alloc(skip_pages * P)
        op.host_indices = cc.alloc_prefetch_host_buffers(op, op.storage_hit_count)
        cc.prefetch_buffer.put(op)
        done = 0
        while True:
            ack = cc.ack_prefetch_queue.get(timeout=WAIT)
            if ack.completed_tokens is not None:
                done = ack.completed_tokens
            if ack.completed_req:
                return op.storage_hit_count, done, op.host_indices


def flip(env, tier, name, key):
    n = tier_env.flip_payload_byte(env, tier, name, key)
    assert n >= 1, "no file of %s on %s" % (key, tier)


def truncate(env, tier, name, key):
    """Cut every file of `key` on the tier's medium to half its size."""
    n = 0
    for dirpath, _, files in os.walk(env.medium(tier, name)):
        for f in files:
            if str(key) in f:
                p = os.path.join(dirpath, f)
                os.truncate(p, os.path.getsize(p) // 2)
                n += 1
    assert n >= 1, "no file of %s on %s" % (key, tier)


# --- the other process ----------------------------------------------------------

_worker = None


def setUpModule():
    # One spawned process for every reload, started now: it imports SGLang
    # (long) while the tests before SGLangTiers run.
    global _worker
    _worker = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"))
    _worker.submit(worker_pid)


def worker_pid():
    return os.getpid()   # run there, it imports this module, and SGLang


def tearDownModule():
    _worker.shutdown()


def elsewhere(jobs):
    """Run reload jobs in the other process, in order; their results."""
    return [f.result(timeout=300) for f in [_worker.submit(reload_pages, j) for j in jobs]]


def reload_pages(job):
    """A fresh SGLang rank in this process: device pool, zeroed host pool
    in job["layout"], HiCacheController with kvtier from job["yaml"]; it
    prefetches job["tokens"].  (pid, hit tokens, loaded tokens, the loaded
    pages' bytes)."""
    os.environ["AWS_ACCESS_KEY_ID"] = tier_env.ACCESS_KEY
    os.environ["AWS_SECRET_ACCESS_KEY"] = tier_env.SECRET_KEY
    dev = device_pool(job["mla"], dtype=getattr(torch, job["dtype"]))
    host = host_pool(dev, job["layout"])
    host.kv_buffer.zero_()
    eng = Engine(dev, host, {"kvtier_config": job["yaml"]}, tp_rank=job.get("tp_rank", 0),
                 tp_size=job.get("tp_size", 1))
    try:
        hit, done, idx = eng.prefetch(job["tokens"], skip_pages=3)
        pages = [] if idx is None else [p.numpy().tobytes()
                                        for p in pages_of(host, idx, done // P)]
    finally:
        eng.close()
    return os.getpid(), hit, done, pages


# --- the tests --------------------------------------------------------------------

class SGLangHybrid(unittest.TestCase):
    """A hybrid model's HiCache: HybridCacheController over a HostPoolGroup
    of the KV pool (anchor), an SWA pool (2-page window) and a Mamba state
    pool, the v2 interface carrying the side pools as SGLang's components
    build their transfers (TRAILING_PAGES, keys = KV page hashes)."""

    def setUp(self):
        self.env = tier_env.Env()
        kv_dev = device_pool()
        swa_dev = device_pool(layers=1, heads=1)
        self.kv = host_pool(kv_dev, "page_first", seed=10)
        self.swa = host_pool(swa_dev, "layer_first", seed=11)
        mamba_dev, self.mamba = mamba_pools(seed=12)
        self.group = HostPoolGroup([
            build_pool_entry(name=PoolName.KV, host_pool=self.kv, device_pool=kv_dev,
                             layer_mapping={i: i for i in range(L)}, transfer_layer_id_max=5,
                             is_anchor=True),
            build_pool_entry(name=PoolName.SWA, host_pool=self.swa, device_pool=swa_dev,
                             layer_mapping={3: 0}, transfer_layer_id_max=5),
            build_pool_entry(name=PoolName.MAMBA, host_pool=self.mamba, device_pool=mamba_dev,
                             layer_mapping={4: 0}, transfer_layer_id_max=5)])
        alloc = PagedTokenToKVPoolAllocator(kv_dev.size, P, kv_dev.dtype, "cpu", kv_dev,
                                            need_sort=False)
        with ranks():
            self.cc = HybridCacheController(
                alloc, self.group, P, None, threading.Event(), io_backend="kernel",
                storage_backend="dynamic", model_name=MODEL,
                storage_backend_extra_config=dict(
                    EXTRA, kvtier_config=self.env.yaml("dram", "hybrid")),
                transfer_layer_id_max=5)
        self.backend = self.cc.storage_backend

    def tearDown(self):
        self.cc.detach_storage_backend()
        self.env.close()

    def backup_node(self, tokens, hashes, kv_idx, swa_idx=None, mamba_idx=None):
        """The radix tree's BACKUP_STORAGE of one node: its KV pages, the SWA
        window and the Mamba state at its end (SWAComponent, MambaComponent
        build_hicache_transfers)."""
        extra = []
        if swa_idx is not None:
            n = swa_idx.numel() // P
            extra.append(PoolTransfer(name=PoolName.SWA, host_indices=swa_idx,
                                      keys=hashes[-n:], hit_policy=PoolHitPolicy.TRAILING_PAGES))
        if mamba_idx is not None:
            extra.append(PoolTransfer(name=PoolName.MAMBA, host_indices=mamba_idx,
                                      keys=hashes[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES))
        self.cc.write_storage(kv_idx, tokens, hash_value=hashes, extra_pools=extra or None)
        op = self.cc.ack_backup_queue.get(timeout=WAIT)
        return op.completed_tokens, dict(op.pool_storage_result.extra_pool_hit_pages)

    def prefetch(self, tokens):
        """The tree's PREFETCH: placeholders for the SWA window and the
        Mamba state, the hit, the host slots of every pool, the transfer.
        (hit tokens, loaded tokens, pool hits, operation)."""
        cc = self.cc
        extra = [PoolTransfer(name=PoolName.SWA, keys=["__placeholder__"] * 2,
                              hit_policy=PoolHitPolicy.TRAILING_PAGES),
                 PoolTransfer(name=PoolName.MAMBA, keys=["__placeholder__"],
                              hit_policy=PoolHitPolicy.TRAILING_PAGES)]
        op = cc.prefetch(CacheRequestHandle("req", 0), tokens, None, None, extra_pools=extra)
        self.assertIs(cc.prefetch_hit_queue.get(timeout=WAIT), op)
        hit = op.storage_hit_count
        if hit == 0:
            return 0, 0, {}, op
        self.kv.alloc(3 * P)   # slots other than the source's
        op.host_indices = cc.alloc_prefetch_host_buffers(op, hit)
        for t in op.pool_transfers:
            pool = self.group.get_pool(t.name)
            t.host_indices = self.group.alloc(min(len(t.keys), hit // P) * pool.page_size,
                                              pool=t.name)
        cc.prefetch_buffer.put(op)
        done, pool_hits = 0, {}
        while True:
            ack = cc.ack_prefetch_queue.get(timeout=WAIT)
            if ack.completed_tokens is not None:
                done = ack.completed_tokens
            if ack.pool_hits is not None:
                # Rank-reduced over every PoolName: the pools that loaded.
                pool_hits = {k: v for k, v in ack.pool_hits.items() if v}
            if ack.completed_req:
                return hit, done, pool_hits, op

    def side(self, op, name):
        return next(t for t in op.pool_transfers if t.name == name)

    def swa_pages(self, idx):
        return [self.swa.get_data_page(int(idx[i * P]), flat=False)
                .contiguous().view(torch.uint8).clone() for i in range(idx.numel() // P)]

    def test_side_pools_through_the_controller(self):
        b = self.backend
        self.assertEqual(sorted(b._pages), ["kv", "mamba", "swa"])
        self.assertIsInstance(b._pages["swa"], ksg._KvPages)     # zero-copy, own namespace
        self.assertIsInstance(b._pages["mamba"], ksg._FlatPages)

        # Two nodes, pages 0-2 and 3-5, each with its window and state.
        tokens = tokens_for(6, seed=20)
        hashes = hashes_of(tokens)
        kv_idx = self.kv.alloc(6 * P)
        swa_idx = self.swa.alloc(4 * P)
        m_idx = self.mamba.alloc(2)
        self.assertEqual(self.backup_node(tokens[:3 * P], hashes[:3], kv_idx[:3 * P],
                                          swa_idx[:2 * P], m_idx[:1]),
                         (3 * P, {PoolName.SWA: 2, PoolName.MAMBA: 1}))
        self.assertEqual(self.backup_node(tokens[3 * P:], hashes[3:], kv_idx[3 * P:],
                                          swa_idx[2 * P:], m_idx[1:]),
                         (3 * P, {PoolName.SWA: 2, PoolName.MAMBA: 1}))
        want_kv = pages_of(self.kv, kv_idx, 6)
        want_swa = self.swa_pages(swa_idx[2 * P:])
        want_state = self.mamba.get_data_page(int(m_idx[1])).clone()
        for t in (self.kv.kv_buffer, self.swa.kv_buffer, self.mamba.temporal_buffer,
                  *self.mamba.conv_buffer):
            t.zero_()

        # A longer prompt: the KV hit is 6 pages, and 6 is a length whose
        # window and state are stored.
        hit, done, pool_hits, op = self.prefetch(tokens + tokens_for(2, seed=21))
        self.assertEqual((hit, done), (6 * P, 6 * P))
        self.assertEqual(pool_hits, {PoolName.SWA: 2, PoolName.MAMBA: 1})
        self.assertEqual([p.tolist() for p in pages_of(self.kv, op.host_indices, 6)],
                         [p.tolist() for p in want_kv])
        swa_t, m_t = self.side(op, PoolName.SWA), self.side(op, PoolName.MAMBA)
        self.assertEqual(swa_t.keys, hashes[4:6])
        self.assertTrue(all(torch.equal(a, b) for a, b in
                            zip(self.swa_pages(swa_t.host_indices), want_swa)))
        self.assertTrue(torch.equal(self.mamba.get_data_page(int(m_t.host_indices[0])),
                                    want_state))

    def test_trailing_pages_cut_the_hit(self):
        # The second node's state is not stored (evicted before its
        # backup): the restorable lengths are {3}, not 6.
        tokens = tokens_for(6, seed=30)
        hashes = hashes_of(tokens)
        kv_idx = self.kv.alloc(6 * P)
        swa_idx = self.swa.alloc(2 * P)
        m_idx = self.mamba.alloc(1)
        self.backup_node(tokens[:3 * P], hashes[:3], kv_idx[:3 * P], swa_idx, m_idx)
        self.assertEqual(self.backup_node(tokens[3 * P:], hashes[3:], kv_idx[3 * P:]),
                         (3 * P, {}))
        want_state = self.mamba.get_data_page(int(m_idx[0])).clone()
        res = self.backend.batch_exists_v2(hashes, [
            PoolTransfer(name=PoolName.MAMBA, keys=["x"], hit_policy=PoolHitPolicy.TRAILING_PAGES),
            PoolTransfer(name=PoolName.SWA, keys=["x", "y"],
                         hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        self.assertEqual((res.kv_hit_pages, res.restorable_prefix_pages), (3, [3]))
        self.assertEqual(res.extra_pool_hit_pages,
                         {PoolName.KV: 6, PoolName.MAMBA: 3, PoolName.SWA: 3})
        self.mamba.temporal_buffer.zero_()
        hit, done, pool_hits, op = self.prefetch(tokens)
        self.assertEqual((hit, done), (3 * P, 3 * P))
        self.assertEqual(pool_hits, {PoolName.SWA: 2, PoolName.MAMBA: 1})
        self.assertEqual(self.side(op, PoolName.MAMBA).keys, hashes[2:3])
        m_t = self.side(op, PoolName.MAMBA)
        self.assertTrue(torch.equal(self.mamba.get_data_page(int(m_t.host_indices[0])),
                                    want_state))

    def test_v2_calls(self):
        b = self.backend
        tokens = tokens_for(3, seed=40)
        hashes = hashes_of(tokens)
        kv_idx, swa_idx = self.kv.alloc(3 * P), self.swa.alloc(3 * P)
        self.cc.write_storage(kv_idx, tokens, hash_value=hashes)
        self.cc.ack_backup_queue.get(timeout=WAIT)
        # SWA pages 1 and 2 only.
        self.assertEqual(b.batch_set_v2([PoolTransfer(name=PoolName.SWA, host_indices=swa_idx[P:],
                                                      keys=hashes[1:])]),
                         {PoolName.SWA: [True, True]})

        def exists(policy, keys=("x",)):
            return b.batch_exists_v2(hashes, [PoolTransfer(name=PoolName.SWA, keys=list(keys),
                                                           hit_policy=policy)])
        r = exists(PoolHitPolicy.ALL_PAGES)          # page 0 lacks its SWA page
        self.assertEqual((r.kv_hit_pages, r.extra_pool_hit_pages[PoolName.SWA]), (0, 0))
        r = exists(PoolHitPolicy.TRAILING_PAGES, ("x", "y"))
        self.assertEqual((r.kv_hit_pages, r.restorable_prefix_pages), (3, [3]))
        r = exists(PoolHitPolicy.BLOCK_GROUPS)       # no verdict, no cut
        self.assertEqual((r.kv_hit_pages, r.extra_pool_hit_pages), (3, {PoolName.KV: 3}))
        dst = self.swa.alloc(3 * P)
        logging.disable(logging.CRITICAL)
        try:
            r = b.batch_exists_v2(hashes, [PoolTransfer(name=PoolName.INDEXER, keys=["x"])])
            self.assertEqual(r.kv_hit_pages, 0)      # a pool never registered
            got = b.batch_get_v2([
                PoolTransfer(name=PoolName.SWA, host_indices=dst, keys=hashes),
                PoolTransfer(name=PoolName.INDEXER, host_indices=dst, keys=hashes[:1]),
                PoolTransfer(name=PoolName.MAMBA, host_indices=self.mamba.alloc(1),
                             keys=hashes[:2])])
        finally:
            logging.disable(logging.NOTSET)
        self.assertEqual(got, {PoolName.SWA: [False, False, False],  # page 0 missing
                               PoolName.INDEXER: [False],
                               PoolName.MAMBA: [False, False]})       # 2 keys, 1 slot
        got = b.batch_get_v2([PoolTransfer(name=PoolName.SWA, host_indices=dst[P:],
                                           keys=hashes[1:])])
        self.assertEqual(got, {PoolName.SWA: [True, True]})
        self.assertTrue(all(torch.equal(a, c) for a, c in
                            zip(self.swa_pages(dst[P:]), self.swa_pages(swa_idx[P:]))))


class SGLangAttach(unittest.TestCase):
    """Pools and configurations kvtier serves, and those it refuses when
    SGLang attaches it, with a message naming what is unsupported."""

    def setUp(self):
        self.env = tier_env.Env()
        self.yaml = self.env.yaml("nvme", "attach")
        self.extra = {"kvtier_config": self.yaml, "kvtier_durability": "crash_safe"}

    def tearDown(self):
        self.env.close()

    def test_logical_anchor_pool_is_refused(self):
        dev = device_pool()
        with self.assertRaises(ValueError) as e:
            Engine(dev, LogicalHostPool(64 * P, P), self.extra)
        self.assertEqual(str(e.exception),
                         "Failed to create storage backend: kvtier.sglang: the host pool "
                         "LogicalHostPool has no kv_buffer (a logical anchor or an "
                         "allocator-only pool holds no pages); kvtier stores pages it can "
                         "read")

    def test_page_unified_is_refused(self):
        dev = device_pool()
        with self.assertRaisesRegex(ValueError, "^Failed to create storage backend: kvtier.sglang: "
                                    "the host pool MHATokenToKVPoolHost has layout "
                                    "'page_unified'; kvtier stores MHA pools in layer_first, "
                                    "page_first, page_first_direct, page_head$"):
            Engine(dev, host_pool(dev, "page_unified"), self.extra)

    def test_page_head_works(self):
        dev = device_pool()
        src = host_pool(dev, "page_head", seed=5)
        tokens = tokens_for(3, seed=5)
        eng = Engine(dev, src, self.extra)
        idx = src.alloc(3 * P)
        self.assertEqual(eng.backup(tokens, idx), 3 * P)
        eng.close()
        dst = host_pool(dev, "page_first")
        eng = Engine(dev, dst, self.extra)
        hit, done, didx = eng.prefetch(tokens, skip_pages=1)
        self.assertEqual((hit, done), (3 * P, 3 * P))
        self.assertEqual([p.tolist() for p in pages_of(dst, didx, 3)],
                         [p.tolist() for p in pages_of(src, idx, 3)])
        eng.close()

    def test_tp_lcm_size(self):
        dev = device_pool()
        with self.assertRaises(ValueError) as e:
            Engine(dev, host_pool(dev, "page_head"), dict(self.extra, tp_lcm_size=2))
        self.assertEqual(str(e.exception),
                         "Failed to create storage backend: kvtier.sglang: tp_lcm_size 2 (TP "
                         "size 1, heads split) is not supported: pages shared between "
                         "instances of different TP sizes (heads split by the page_head "
                         "layout) need one chunk per head group; kvtier keys a page per TP "
                         "rank and size")
        # The TP size itself: nothing is shared across sizes, nothing split.
        Engine(dev, host_pool(dev, "page_head"), dict(self.extra, tp_lcm_size=1)).close()

    def test_is_a_hicache_storage(self):
        self.assertTrue(issubclass(ksg.KvtierStorage, HiCacheStorage))

    def test_without_sglang(self):
        # Where SGLang cannot be imported, importing the backend says so.
        r = subprocess.run([sys.executable, "-c", "import sys; sys.modules['sglang'] = None; "
                            "import kvtier.sglang"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines()[-1],
                         "ImportError: kvtier.sglang is a storage backend of SGLang's HiCache "
                         "and needs SGLang >= 0.5.23 (sglang.srt.mem_cache.hicache_storage "
                         "with HiCacheStorage and the v2 pool interface); importing it "
                         "failed: ModuleNotFoundError: No module named 'sglang.srt'; "
                         "'sglang' is not a package")


class SGLangBadInput(unittest.TestCase):
    """What a damaged medium and a wrong configuration look like to SGLang."""

    def setUp(self):
        self.env = tier_env.Env()

    def tearDown(self):
        self.env.close()

    def backend(self, host, extra, store=None):
        """kvtier created the controller's way: its storage config
        (_generate_storage_config), the factory, register_mem_pool_host."""
        dev = device_pool()
        alloc = PagedTokenToKVPoolAllocator(dev.size, P, dev.dtype, "cpu", dev, need_sort=False)
        with ranks():
            cc = HiCacheController(alloc, host, P, None, threading.Event(), io_backend="kernel")
            cfg = cc._generate_storage_config(MODEL, dict(EXTRA, **extra))
        kw = {} if store is None else {"store": store}
        b = StorageBackendFactory.create_backend("dynamic", cfg, host, **kw)
        b.register_mem_pool_host(host)
        return b

    def damaged(self, name, damage, page):
        """Back up 5 pages to NVMe, damage page `page` there, restart, and
        batch_get_v1 the 5 pages into a fresh pool: (batch_exists, the
        per-page results); the pages before `page` must be the source's."""
        extra = {"kvtier_config": self.env.yaml("nvme", name),
                 "kvtier_durability": "crash_safe"}
        dev = device_pool()
        src = host_pool(dev, "page_first", seed=6)
        tokens = tokens_for(5, seed=6)
        hashes = hashes_of(tokens)
        b = self.backend(src, extra)
        idx = src.alloc(5 * P)
        self.assertEqual(b.batch_set_v1(hashes, idx), [True] * 5)
        key = b._key(hashes[page])
        b.close()
        damage(self.env, "nvme", name, key)
        dst = host_pool(dev, "layer_first")
        b = self.backend(dst, extra)
        dst.alloc(2 * P)
        didx = dst.alloc(5 * P)
        exists = b.batch_exists(hashes)               # the index: no I/O
        logging.disable(logging.CRITICAL)
        try:
            got = b.batch_get_v1(hashes, didx)
        finally:
            logging.disable(logging.NOTSET)
        self.assertEqual([p.tolist() for p in pages_of(dst, didx, page)],
                         [p.tolist() for p in pages_of(src, idx, page)])
        b.close()
        return exists, got

    def test_corrupt_chunk(self):
        # Only a read finds a flipped byte: the index still counts the page.
        self.assertEqual(self.damaged("flip", flip, 1), (5, [True, False, False, False, False]))

    def test_truncated_chunk(self):
        # The NVMe tier finds a short object when it opens, and leaves it out.
        self.assertEqual(self.damaged("cut", truncate, 3), (3, [True, True, True, False, False]))

    def test_extra_config(self):
        dev = device_pool()
        host = host_pool(dev, "page_first")
        tail = (" (kvtier's keys: kvtier_config, kvtier_durability, kvtier_fp8_dtype, "
                "kvtier_model, kvtier_revision, kvtier_tenant; SGLang's: backend_name, "
                "class_name, file_storage_path, hicache_storage_pass_prefix_keys, "
                "interface_v1, module_path, prefetch_threshold, prefetch_timeout_base, "
                "prefetch_timeout_per_ki_token, tp_lcm_size)")
        head = "kvtier.sglang: --hicache-storage-backend-extra-config: "
        st = kvtier.Store(self.env.config("dram", "extra"))
        cases = [
            ({"kvtier_confg": "/etc/kvtier.yaml"}, "unknown key 'kvtier_confg'"),
            ({"kvtier_durability": 1}, "kvtier_durability must be a string, not int 1"),
            ({"kvtier_durability": "always"},
             "kvtier_durability 'always' is not cached, crash_safe or power_safe"),
            ({"interface_v1": "yes", "kvtier_tenant": ["a"]},
             "interface_v1 must be 0, 1 or a boolean, not str 'yes'; kvtier_tenant must be "
             "a string, not list ['a']"),
        ]
        for extra, what in cases:
            # Created by SGLang's factory...
            with self.assertRaises(ValueError) as e:
                self.backend(host, extra, store=st)
            self.assertEqual(str(e.exception), head + what + tail)
        # ... and attached by the controller, which says so.
        with self.assertRaises(ValueError) as e:
            Engine(dev, host, cases[0][0])
        self.assertEqual(str(e.exception),
                         "Failed to create storage backend: " + head + cases[0][1] + tail)
        # Keys of SGLang's own are let through, null is a kvtier key unset.
        self.backend(host, {"file_storage_path": "/tmp/x", "kvtier_tenant": None},
                     store=st).close()
        st.close()

    def test_keys_and_indices(self):
        dev = device_pool()
        host = host_pool(dev, "page_first", seed=7)
        st = kvtier.Store(self.env.config("dram", "keys"))
        b = self.backend(host, {}, store=st)
        good = hashes_of(tokens_for(1, seed=7))[0]
        idx = host.alloc(2 * P)
        logging.disable(logging.CRITICAL)
        try:
            self.assertEqual(b.batch_set_v1(["not-a-hash", good], idx), [False, True])
            self.assertFalse(b.exists("not-a-hash"))
            self.assertEqual(b.batch_exists(["zz", good]), 0)
            self.assertEqual(b.batch_exists([good, "zz"]), 1)
            # A page whose slots are not one aligned page moves nowhere.
            self.assertEqual(b.batch_get_v1([good], idx[1:P + 1]), [False])
        finally:
            logging.disable(logging.NOTSET)
        with self.assertRaisesRegex(ValueError, "^kvtier.sglang: 3 keys and 8 host indices for "
                                    "pool kv .page size 4.$"):
            b.batch_get_v1(["aa", "bb", "cc"], idx)
        b.close()
        cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, MODEL, extra_config={})
        with self.assertRaisesRegex(RuntimeError, "register_mem_pool_host"):
            ksg.KvtierStorage(cfg, {"store": st}).exists(good)
        st.close()


class SGLangContract(unittest.TestCase):
    """The rest of what SGLang asks of a storage backend."""

    def setUp(self):
        self.env = tier_env.Env()

    def tearDown(self):
        self.env.close()

    def test_generic_page_get_and_set(self):
        # Without interface_v1 SGLang moves flat pages (_generic_page_set,
        # _generic_page_get); they are the same chunks, so zero-copy reads
        # them back too.
        yaml = self.env.yaml("shared_fs", "generic")
        dev = device_pool()
        src = host_pool(dev, "page_first", seed=8)
        tokens = tokens_for(5, seed=8)
        eng = Engine(dev, src, {"kvtier_config": yaml, "interface_v1": 0})
        self.assertEqual(eng.cc.page_set_func.__name__, "_generic_page_set")
        idx = src.alloc(5 * P)
        self.assertEqual(eng.backup(tokens, idx), 5 * P)
        eng.close()
        for layout, v1 in (("layer_first", 0), ("page_first_direct", 1), ("page_head", 0)):
            dst = host_pool(dev, layout)
            eng = Engine(dev, dst, {"kvtier_config": yaml, "interface_v1": v1})
            hit, done, didx = eng.prefetch(tokens, skip_pages=2)
            self.assertEqual((hit, done), (5 * P, 5 * P), layout)
            self.assertEqual([p.tolist() for p in pages_of(dst, didx, 5)],
                             [p.tolist() for p in pages_of(src, idx, 5)], layout)
            eng.close()

    def test_tensor_parallel_ranks_are_namespaces(self):
        yaml = self.env.yaml("shared_fs", "tp")
        tokens = tokens_for(3, seed=9)
        dev = device_pool()
        src = [host_pool(dev, "page_first", seed=10 + r) for r in range(2)]
        idx = [p.alloc(3 * P) for p in src]
        e0 = Engine(dev, src[0], {"kvtier_config": yaml}, tp_rank=0, tp_size=2)
        self.assertEqual(e0.backup(tokens, idx[0]), 3 * P)
        e0.close()
        # Rank 1 has not backed its shard up: the same page hashes miss.
        e1 = Engine(dev, src[1], {"kvtier_config": yaml}, tp_rank=1, tp_size=2)
        self.assertEqual(e1.prefetch(tokens)[:2], (0, 0))
        self.assertEqual(e1.backup(tokens, idx[1]), 3 * P)
        e1.close()
        for r in range(2):
            dst = host_pool(dev, "layer_first")
            e = Engine(dev, dst, {"kvtier_config": yaml}, tp_rank=r, tp_size=2)
            hit, done, didx = e.prefetch(tokens)
            self.assertEqual((hit, done), (3 * P, 3 * P))
            self.assertEqual([p.tolist() for p in pages_of(dst, didx, 3)],
                             [p.tolist() for p in pages_of(src[r], idx[r], 3)], r)
            e.close()

    def test_rank_namespaces(self):
        # Which ranks name the same pages: MLA's TP ranks share one copy,
        # anything else (MHA's TP ranks, PP stages, CP slices, also MLA's)
        # is a shard of its own; attention-DP replicas share.
        # A Mamba state is sharded by TP rank even in an MLA model.
        st = kvtier.Store(self.env.config("dram", "ns"))
        pools = {mla: host_pool(device_pool(mla=mla, pages=2), "page_first")
                 for mla in (False, True)}
        mamba = mamba_pools()[1]

        def digest(mla=False, pool="kv", **r):
            c = dict(tp_rank=0, tp_size=4, pp_rank=0, pp_size=2, attn_cp_rank=0,
                     attn_cp_size=1, dp_rank=0)
            c.update(r)
            cfg = HiCacheStorageConfig(is_mla_model=mla, enable_storage_metrics=False,
                                       is_page_first_layout=True, model_name=MODEL,
                                       extra_config={}, **c)
            b = ksg.KvtierStorage(cfg, {"store": st})
            b.register_mem_pool_host(pools[mla])
            b.register_mem_host_pool_v2(pools[mla], PoolName.KV)
            b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
            d = b._pages[pool].ns.digest
            b.close()
            return d

        base = digest()
        self.assertNotEqual(base, digest(tp_rank=1))
        self.assertNotEqual(base, digest(pp_rank=1))
        self.assertNotEqual(base, digest(attn_cp_size=2))
        self.assertNotEqual(digest(attn_cp_size=2), digest(attn_cp_size=2, attn_cp_rank=1))
        self.assertEqual(base, digest(dp_rank=1))
        mla = digest(mla=True)
        self.assertEqual(mla, digest(mla=True, tp_rank=3))
        self.assertNotEqual(mla, digest(mla=True, pp_rank=1))
        self.assertNotEqual(digest(mla=True, attn_cp_size=2),
                            digest(mla=True, attn_cp_size=2, attn_cp_rank=1))
        self.assertNotEqual(digest(mla=True, pool="mamba"),
                            digest(mla=True, pool="mamba", tp_rank=3))
        self.assertNotEqual(digest(mla=True, pool="mamba"), mla)
        st.close()

    def test_rank_config_files(self):
        # One extra config for every rank; {tp_rank} names each rank's YAML,
        # here each its own NVMe directory, as ranks on one node need.
        for r in range(2):
            with open("%s/rank%d.yaml" % (self.env.root, r), "w") as f:
                f.write("max_local_cpu_size: 1MiB\ndram_lock_memory: false\n"
                        "local_disk: %s/disk%d\nmax_local_disk_size: 8MiB\n" %
                        (self.env.root, r))
        extra = {"kvtier_config": self.env.root + "/rank{tp_rank}.yaml",
                 "kvtier_durability": "crash_safe"}
        tokens = tokens_for(2, seed=11)
        dev = device_pool()
        for r in range(2):
            pool = host_pool(dev, "page_first", seed=60 + r)
            e = Engine(dev, pool, extra, tp_rank=r, tp_size=2)
            self.assertEqual(e.backup(tokens, pool.alloc(2 * P)), 2 * P)
            e.close()
        for r in range(2):
            files = [f for _, _, fs in os.walk("%s/disk%d" % (self.env.root, r)) for f in fs
                     if f.endswith(".kvt")]
            self.assertEqual(len(files), 2, (r, files))

    def test_stats(self):
        dev = device_pool()
        src = host_pool(dev, "page_first", seed=12)
        eng = Engine(dev, src, {"kvtier_config": self.env.yaml("dram", "stats")},
                     metrics=True)
        tokens = tokens_for(4, seed=12)
        eng.backup(tokens, src.alloc(4 * P))
        self.assertEqual(eng.prefetch(tokens)[:2], (4 * P, 4 * P))
        m = eng.backend.get_stats()
        self.assertEqual(type(m).__name__, "StorageMetrics")
        self.assertEqual((sum(m.backup_pgs), sum(m.prefetch_pgs)), (4, 4))
        self.assertTrue(all(b > 0 for b in m.prefetch_bandwidth + m.backup_bandwidth))
        self.assertEqual(sum(eng.backend.get_stats().prefetch_pgs), 0)  # reset by the call
        eng.close()


class SGLangTiers(unittest.TestCase):
    """Backup by one SGLang rank, prefetch by a fresh one, through every
    tier: the pages must come back byte for byte."""

    @classmethod
    def setUpClass(cls):
        cls.env = tier_env.Env()

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def assertPages(self, got, want):
        self.assertEqual(len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            g = g if isinstance(g, bytes) else g.numpy().tobytes()
            self.assertEqual(g, w.numpy().tobytes(), "page %d differs" % i)

    def test_dram(self):
        # 130 pages: two storage batches (STORAGE_BATCH_SIZE 128), both ways.
        yaml = self.env.yaml("dram", "mha")
        n = STORAGE_BATCH_SIZE + 2
        dev = device_pool(pages=n + 8)
        pool = host_pool(dev, "page_first", seed=1)
        eng = Engine(dev, pool, {"kvtier_config": yaml})
        tokens = tokens_for(n, seed=1)
        self.assertEqual(eng.prefetch(tokens)[:2], (0, 0))
        idx = pool.alloc(n * P)
        self.assertEqual(eng.backup(tokens, idx), n * P)
        want = pages_of(pool, idx, n)
        pool.kv_buffer.zero_()
        hit, done, didx = eng.prefetch(tokens + tokens_for(2, seed=99))
        self.assertEqual((hit, done), (n * P, n * P))
        self.assertPages(pages_of(pool, didx, n), want)
        self.assertGreaterEqual(eng.backend.store.stats(0)["hits"], n)
        eng.close()

    def tier_roundtrip(self, tier, name, daemon=None):
        """MHA from page_first (bf16) and MLA from page_first_direct (f16),
        backed up here; reloaded in the other process into layer_first and
        page_head (MHA), page_first and layer_first (MLA ranks 0 and 1)."""
        yaml = self.env.yaml(tier, name, daemon=daemon)
        extra = {"kvtier_config": yaml, "kvtier_durability":
                 "cached" if daemon else "crash_safe"}
        n = 5
        tokens, mtokens = tokens_for(n, seed=len(name)), tokens_for(n, seed=len(name) + 50)

        dev = device_pool()
        src = host_pool(dev, "page_first", seed=2)
        eng = Engine(dev, src, extra)
        idx = src.alloc(n * P)
        self.assertEqual(eng.backup(tokens, idx), n * P)
        want = pages_of(src, idx, n)
        key1 = eng.backend._key(hashes_of(tokens)[1])
        eng.close()

        # MLA: rank 1's backup is skipped by SGLang itself; rank 0 writes.
        mdev = device_pool(mla=True, dtype=torch.float16)
        r1 = host_pool(mdev, "layer_first", seed=3)
        e1 = Engine(mdev, r1, extra, tp_rank=1, tp_size=2)
        self.assertTrue(e1.cc.backup_skip)
        self.assertEqual(e1.backup(mtokens, r1.alloc(n * P)), 0)
        self.assertEqual(e1.prefetch(mtokens)[:2], (0, 0))
        e1.close()
        r0 = host_pool(mdev, "page_first_direct", seed=4)
        e0 = Engine(mdev, r0, extra, tp_rank=0, tp_size=2)
        midx = r0.alloc(n * P)
        self.assertEqual(e0.backup(mtokens, midx), n * P)
        mwant = pages_of(r0, midx, n)
        e0.close()

        longer = tokens + tokens_for(2, seed=98)
        jobs = [dict(yaml=yaml, mla=False, dtype="bfloat16", layout="layer_first",
                     tokens=longer),
                dict(yaml=yaml, mla=False, dtype="bfloat16", layout="page_head",
                     tokens=tokens),
                dict(yaml=yaml, mla=True, dtype="float16", layout="page_first",
                     tokens=mtokens, tp_rank=0, tp_size=2),
                dict(yaml=yaml, mla=True, dtype="float16", layout="layer_first",
                     tokens=mtokens, tp_rank=1, tp_size=2)]
        for job, (pid, hit, done, got) in zip(jobs, elsewhere(jobs)):
            self.assertNotEqual(pid, os.getpid())
            self.assertEqual((hit, done), (n * P, n * P), job["layout"])
            self.assertPages(got, mwant if job["mla"] else want)
        if daemon:
            return

        # A page damaged on the tier's medium is detected, never restored:
        # after a restart the prefetch stops at it (the hit query, from the
        # indexes, does not see it).  Backed up again, it heals.
        flip(self.env, tier, name, key1)
        eng = Engine(dev, src, extra)
        hit, done, didx = eng.prefetch(tokens)
        self.assertEqual((hit, done), (n * P, P))
        self.assertPages(pages_of(src, didx, 1), want[:1])
        self.assertGreaterEqual(eng.backend.store.stats(eng.backend.store.tiers - 1)["hits"], 1)
        self.assertEqual(eng.backup(tokens, idx), n * P)
        hit, done, didx = eng.prefetch(tokens)
        self.assertEqual((hit, done), (n * P, n * P))
        self.assertPages(pages_of(src, didx, n), want)
        eng.close()

    def test_node_daemon_dram(self):
        # Engines on one node reach one DRAM through kvtierd --local.
        sock = os.path.join(self.env.root, "kvtierd.sock")
        daemon = tier_env.start_kvtierd(sock)
        try:
            self.tier_roundtrip("daemon", "node", daemon=sock)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(20)

    def test_nvme(self):
        self.tier_roundtrip("nvme", "nvme")

    def test_shared_fs(self):
        self.tier_roundtrip("shared_fs", "sfs")

    def test_s3(self):
        self.tier_roundtrip("s3", "s3")


if __name__ == "__main__":
    unittest.main()
