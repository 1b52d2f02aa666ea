"""kvtier as SGLang's HiCache storage backend (its L3, below the host pool).

SGLang loads it with

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang", "class_name": "KvtierStorage",
        "interface_v1": 1, "kvtier_config": "/etc/kvtier/kvtier.yaml"}'

(docs/SGLANG.md).  StorageBackendFactory._create_dynamic_backend calls
KvtierStorage(storage_config, kwargs) and the HiCacheController then calls
register_mem_pool_host(host_pool); with "interface_v1": 1 it moves pages by
batch_exists -> batch_get_v1 (prefetch) and batch_set_v1 (backup), each one
engine-connector request by key over the registered host pool: the
connector scatters verified chunks straight into the pages' slots and
gathers pages into chunks, as it does for any engine's paged memory.
Without it SGLang uses get/set/batch_get/batch_set with flat page tensors,
stored in the same bytes.

One SGLang page is one kvtier chunk.  Its key is SGLang's page hash (hex
SHA-256, or XXH3 with SGLANG_USE_XXH3_HASH) wrapped by the namespace; the
rank suffixes SGLang's file and Mooncake backends append to their keys
(tensor, pipeline and attention context-parallel rank) are namespace fields
instead: the model, the page layout, tp_rank/tp_size (CP ranks fold into
the tensor rank, each holding its own slice) and pp_rank/pp_size.  An MLA
model's TP ranks hold the same latent cache and share one copy
(rank_shared).  Chunks are stored in kvtier's payload order, so a page
written from a page_first pool reads back into a layer_first one.
"""

import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, List, Optional

import torch

import kvtier

logger = logging.getLogger(__name__)

try:
    from sglang.srt.mem_cache.hicache_storage import (  # noqa: F401
        HiCacheStorage,
        HiCacheStorageConfig,
        HiCacheStorageExtraInfo,
    )
except ImportError:
    # SGLang is not installed: stand-ins with the names, fields and
    # defaults of sglang/srt/mem_cache/hicache_storage.py, so the backend
    # can be driven the way HiCacheController drives it.

    @dataclass
    class HiCacheStorageConfig:
        tp_rank: int
        tp_size: int
        pp_rank: int
        pp_size: int
        attn_cp_rank: int
        attn_cp_size: int
        is_mla_model: bool
        enable_storage_metrics: bool
        is_page_first_layout: bool
        model_name: Optional[str]
        dp_rank: int = 0
        dp_size: int = 1
        tp_lcm_size: Optional[int] = None
        should_split_heads: bool = False
        extra_config: Optional[dict] = None

    @dataclass
    class HiCacheStorageExtraInfo:
        prefix_keys: Optional[List[str]] = None
        extra_info: Optional[dict] = None

    class HiCacheStorage(ABC):
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

        def batch_get_v1(self, keys, host_indices, extra_info=None):
            raise NotImplementedError()

        def batch_set_v1(self, keys, host_indices, extra_info=None):
            raise NotImplementedError()

        @abstractmethod
        def get(self, key, target_location=None, target_sizes=None):
            pass

        @abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None):
            pass

        @abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None):
            pass

        @abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
            pass

        @abstractmethod
        def exists(self, key):
            pass

        def batch_exists(self, keys, extra_info=None):
            for i in range(len(keys)):
                if not self.exists(keys[i]):
                    return i
            return len(keys)

        def clear(self):
            pass

        def get_stats(self):
            return None

try:
    from sglang.srt.observability.metrics_collector import StorageMetrics
except ImportError:
    try:
        from sglang.srt.metrics.collector import StorageMetrics
    except ImportError:
        @dataclass
        class StorageMetrics:
            """The fields of SGLang's StorageMetrics that get_stats fills."""
            prefetch_pgs: List[int] = field(default_factory=list)
            backup_pgs: List[int] = field(default_factory=list)
            prefetch_bandwidth: List[float] = field(default_factory=list)
            backup_bandwidth: List[float] = field(default_factory=list)


# The keys of --hicache-storage-backend-extra-config that are kvtier's; the
# others there belong to SGLang (backend_name, interface_v1, prefetch knobs).
EXTRA_KEYS = {
    "kvtier_config": "path of the kvtier YAML configuration (default: $KVTIER_CONFIG, "
                     "else kvtier's defaults; KVTIER_* variables apply on top); {tp_rank}, "
                     "{pp_rank}, {dp_rank} and {attn_cp_rank} in it are the rank's",
    "kvtier_tenant": "tenant whose secret keys the namespace (default: the default tenant)",
    "kvtier_model": "model id of the namespace (default: SGLang's model name)",
    "kvtier_revision": "model revision of the namespace (default: none)",
    "kvtier_durability": "cached, crash_safe or power_safe: what a backed-up page must "
                         "reach before batch_set_v1 returns (default: cached)",
    "kvtier_fp8_dtype": "fp8_e4m3 or fp8_e5m2: what a uint8 host pool holds "
                        "(default: fp8_e4m3)",
}

_TORCH_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32",
                 "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "int8": "int8"}


def _is_mla(pool):
    return hasattr(pool, "kv_lora_rank")


def _page_dims(pool):
    """(shape of one flat page in the pool's own order, permutation of it to
    kvtier's payload order: layer, plane, token, head, element)."""
    P, L = pool.page_size, pool.layer_num
    if _is_mla(pool):
        D = pool.kv_lora_rank + pool.qk_rope_head_dim
        if pool.layout == "page_first":
            return (P, L, 1, D), (1, 0, 2, 3)
        return (L, P, 1, D), (0, 1, 2, 3)      # layer_first, page_first_direct
    H, D = pool.head_num, pool.head_dim
    if pool.layout == "page_first":
        return (2, P, L, H, D), (2, 0, 1, 3, 4)
    return (2, L, P, H, D), (1, 0, 2, 3, 4)    # layer_first, page_first_direct


def _paged_desc(pool):
    """The host pool's kv_buffer as the connector's paged memory: one
    descriptor for every layer (layer_stride), a page of page_size tokens
    per block, block b holding the pool's token slots b*P .. b*P+P-1."""
    t, P, esz = pool.kv_buffer, pool.page_size, pool.kv_buffer.element_size()
    lay = pool.layout
    if lay not in ("page_first", "layer_first", "page_first_direct"):
        raise ValueError("kvtier.sglang: host pool layout %r is not page_first, "
                         "layer_first or page_first_direct" % (lay,))
    mla = _is_mla(pool)
    # Index of the layer dimension, and one layer's view of each plane.
    if mla:
        ldim = {"layer_first": 0, "page_first": 1, "page_first_direct": 1}[lay]
        planes = [t.select(ldim, 0)]
    else:
        ldim = {"layer_first": 1, "page_first": 2, "page_first_direct": 2}[lay]
        planes = [t[0].select(ldim - 1, 0), t[1].select(ldim - 1, 0)]
    ps = tuple(kvtier.Plane.of(v, block_tokens=P if v.dim() == 3 else None)
               for v in planes)
    d = kvtier.PagedDesc([ps], layer_stride=t.stride(ldim) * esz, owners=[t])
    d.num_layers = t.shape[ldim]
    return d


class KvtierStorage(HiCacheStorage):
    """HiCacheStorage over a kvtier store (see the module's manual)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        cfg = storage_config
        extra = dict(cfg.extra_config or {})
        unknown = sorted(k for k in extra if k.startswith("kvtier_") and k not in EXTRA_KEYS)
        if unknown:
            raise ValueError("kvtier.sglang: unknown extra-config key(s) %s; kvtier's are %s"
                             % (", ".join(unknown), ", ".join(sorted(EXTRA_KEYS))))
        if cfg.should_split_heads or cfg.tp_lcm_size:
            raise NotImplementedError(
                "kvtier.sglang: tp_lcm_size (heads split across heterogeneous TP "
                "sizes, the page_head layout) is not supported")
        self.storage_config = cfg
        self.durability = extra.get("kvtier_durability", "cached")
        if self.durability not in kvtier.DURABILITY:
            raise ValueError("kvtier.sglang: kvtier_durability %r is not cached, crash_safe "
                             "or power_safe" % (self.durability,))
        self.fp8_dtype = extra.get("kvtier_fp8_dtype", "fp8_e4m3")
        if self.fp8_dtype not in ("fp8_e4m3", "fp8_e5m2"):
            raise ValueError("kvtier.sglang: kvtier_fp8_dtype %r is not fp8_e4m3 or "
                             "fp8_e5m2" % (self.fp8_dtype,))
        self.tenant = extra.get("kvtier_tenant")
        self.model = extra.get("kvtier_model") or cfg.model_name or "sglang"
        self.revision = extra.get("kvtier_revision")
        shared = (kwargs or {}).get("store")
        self._own_store = shared is None
        if shared is not None:
            self.store = shared
        else:
            path = extra.get("kvtier_config") or os.environ.get("KVTIER_CONFIG")
            # Every rank is a process with its own store, and all read one
            # extra config: a rank's own file (its own local_disk) is named
            # by these placeholders.
            for f in ("tp_rank", "pp_rank", "dp_rank", "attn_cp_rank"):
                path = path and path.replace("{%s}" % f, str(getattr(cfg, f)))
            conf = kvtier.Config.load(path) if path else kvtier.Config()
            try:
                conf.apply_env()
                self.store = kvtier.Store(conf)
            finally:
                conf.close()
        self.ns = None
        self.conn = None
        self._tls = threading.local()
        self._mlock = threading.Lock()
        self._next_req = 0
        self._metrics = StorageMetrics()
        self.enable_storage_metrics = bool(cfg.enable_storage_metrics)

    # --- the host pool ---------------------------------------------------

    def _dtype(self, pool):
        name = str(pool.dtype).replace("torch.", "")
        if name == "uint8":
            return self.fp8_dtype
        if name not in _TORCH_DTYPES:
            raise ValueError("kvtier.sglang: host pool dtype %s has no kvtier dtype" %
                             pool.dtype)
        return _TORCH_DTYPES[name]

    def _ranks(self):
        """(tp_rank, tp_size, rank_shared) of the namespace: a CP rank holds
        its own slice of every page, so (tp, cp) pairs are shards; MLA's TP
        ranks hold one latent cache and share it."""
        c = self.storage_config
        cp_rank, cp_size = c.attn_cp_rank, c.attn_cp_size
        if c.is_mla_model:
            if cp_size > 1:
                return cp_rank, cp_size, False
            return c.tp_rank, c.tp_size, True
        return c.tp_rank * cp_size + cp_rank, c.tp_size * cp_size, False

    def register_mem_pool_host(self, mem_pool_host):
        super().register_mem_pool_host(mem_pool_host)
        pool = mem_pool_host
        if getattr(pool, "kv_buffer", None) is None:
            raise ValueError("kvtier.sglang: the host pool has no kv_buffer (a logical "
                             "pool); kvtier stores KV host pools")
        if pool.kv_buffer.device.type != "cpu":
            raise ValueError("kvtier.sglang: the host pool is on %s, not host memory" %
                             pool.kv_buffer.device)
        mla = _is_mla(pool)
        P = pool.page_size
        if mla:
            layout = kvtier.Layout(pool.layer_num, 1, pool.kv_lora_rank +
                                   pool.qk_rope_head_dim, self._dtype(pool), kv_planes=1,
                                   block_size=P, chunk_tokens=P)
        else:
            layout = kvtier.Layout(pool.layer_num, pool.head_num, pool.head_dim,
                                   self._dtype(pool), kv_planes=2, block_size=P,
                                   chunk_tokens=P)
        tp_rank, tp_size, shared = self._ranks()
        c = self.storage_config
        self.ns = self.store.namespace(self.model, layout, revision=self.revision,
                                       tp_rank=tp_rank, tp_size=tp_size,
                                       pp_rank=c.pp_rank, pp_size=c.pp_size,
                                       tenant=self.tenant, rank_shared=shared)
        self.page_bytes = self.ns.payload_bytes
        self.layer_bytes = self.ns.layer_bytes
        self.page_dims, self.page_perm = _page_dims(pool)
        if self.conn is not None:
            self.conn.close()
        self.conn = self.store.connector(self.ns, _paged_desc(pool),
                                         durability=self.durability)

    def _pool(self):
        if self.ns is None:
            raise RuntimeError("kvtier.sglang: register_mem_pool_host() first: the "
                               "namespace is the host pool's layout")
        return self.mem_pool_host

    def _staging(self):
        """This thread's chunk buffer for the flat-page calls (SGLang's
        prefetch and backup threads run at once)."""
        buf = getattr(self._tls, "buf", None)
        if buf is None or buf.numel() != self.page_bytes:
            buf = self._tls.buf = torch.empty(self.page_bytes, dtype=torch.uint8)
        return buf

    # --- keys -------------------------------------------------------------

    def _key(self, key):
        """The storage key of SGLang's page hash, or None (logged) when it is
        not the hex digest SGLang makes."""
        try:
            h = bytes.fromhex(key)
        except (TypeError, ValueError):
            h = b""
        if not h:
            logger.error("kvtier.sglang: key %r is not a hex page hash", key)
            return None
        return self.ns.key_from_engine_hash(h)

    # --- zero-copy page transfers ------------------------------------------

    def _blocks(self, n, host_indices):
        """The block of each of n pages in host_indices (token slots, P per
        page), or None for a page whose slots are not one aligned page."""
        P = self.mem_pool_host.page_size
        if host_indices.numel() != n * P:
            raise ValueError("kvtier.sglang: %d keys and %d host indices (page size %d)" %
                             (n, host_indices.numel(), P))
        idx = host_indices.reshape(n, P).to("cpu", torch.int64)
        first = idx[:, 0]
        ok = (first % P == 0) & (idx == first[:, None] + torch.arange(P)).all(dim=1)
        return [int(b) if good else None for b, good in
                zip((first // P).tolist(), ok.tolist())]

    def _record(self, what, pages, t0):
        if not self.enable_storage_metrics or not pages:
            return
        gib = pages * self.page_bytes / float(1 << 30)
        dt = max(time.perf_counter() - t0, 1e-9)
        with self._mlock:
            getattr(self._metrics, what + "_pgs").append(pages)
            getattr(self._metrics, what + "_bandwidth").append(gib / dt)

    def _request(self):
        with self._mlock:
            self._next_req += 1
            return self._next_req

    def _named_pages(self, keys, host_indices):
        """(indices into keys, their storage keys, their blocks) of the pages
        that can move: a key that is a page hash, slots that are one page."""
        blocks = self._blocks(len(keys), host_indices)
        which, ks, bs = [], [], []
        for i, (key, b) in enumerate(zip(keys, blocks)):
            k = self._key(key)
            if k is not None and b is None:
                logger.error("kvtier.sglang: the host slots of page %s are not one "
                             "aligned page", key)
            if k is not None and b is not None:
                which.append(i)
                ks.append(k)
                bs.append(b)
        return which, ks, bs

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Back up pages of the host pool: one connector save of the pages the
        store lacks, every layer gathered from the pool into its chunk and
        put by the connector's workers.  One bool per key: the page is in the
        store now (one already there counts: first writer wins)."""
        self._pool()
        t0 = time.perf_counter()
        which, ks, bs = self._named_pages(keys, host_indices)
        out = [False] * len(keys)
        if not which:
            return out
        req, saved = self._request(), 0
        try:
            saved = self.conn.save_keys(req, ks, bs)
            if saved:
                self.conn.save_layer(req)
                self.conn.wait(req)
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: backup of %d pages failed: %s", len(ks), e)
        finally:
            self.conn.end(req)
        for i, k in zip(which, ks):
            out[i] = self.store.exists(self.ns, k)
        self._record("backup", saved, t0)
        return out

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Load pages into the host pool: one connector load, which brings
        the chunks to the first tier at once (a lower tier's reads run in
        parallel), verifies each layer where the tier verifies, and scatters
        it straight into the page's slots.  One bool per key: the page is
        whole in the pool (a missing or damaged chunk is False; SGLang uses
        the leading run of True)."""
        self._pool()
        t0 = time.perf_counter()
        which, ks, bs = self._named_pages(keys, host_indices)
        out = [False] * len(keys)
        if not which:
            return out
        req, bad = self._request(), set(bs)
        try:
            self.conn.load_keys(req, ks, bs, len(ks) * self.mem_pool_host.page_size)
            self.conn.wait(req)
            bad = set(self.conn.load_errors(req))
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: prefetch of %d pages failed: %s", len(ks), e)
        finally:
            self.conn.end(req)
        for i, b in zip(which, bs):
            out[i] = b not in bad
        self._record("prefetch", sum(out), t0)
        return out

    # --- flat pages (SGLang without interface_v1) ---------------------------

    def _payload_view(self, buf):
        """`buf` (page_bytes of uint8) as the pool's dtype in payload order."""
        dims = self.page_dims
        shape = tuple(dims[i] for i in self.page_perm)
        return buf.view(self.mem_pool_host.kv_buffer.dtype).view(shape)

    def _page_view(self, flat):
        t = flat.view(self.mem_pool_host.kv_buffer.dtype)
        if t.numel() * t.element_size() != self.page_bytes:
            raise ValueError("kvtier.sglang: a page of %d bytes, the pool's are %d" %
                             (t.numel() * t.element_size(), self.page_bytes))
        return t.reshape(self.page_dims).permute(self.page_perm)

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        """Read a page into target_location (a flat page tensor, as the
        pool's get_dummy_flat_data_page makes) and return it, or None."""
        self._pool()
        k = self._key(key)
        if k is None:
            return None
        if not isinstance(target_location, torch.Tensor):
            raise ValueError("kvtier.sglang: get() needs target_location, a flat page "
                             "tensor (the pool's get_dummy_flat_data_page())")
        buf = self._staging()
        try:
            self.store.get(self.ns, k, buf)
        except kvtier.NotFound:
            return None
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: get of page %s failed: %s", key, e)
            return None
        self._page_view(target_location).copy_(self._payload_view(buf))
        return target_location

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Optional[torch.Tensor]]:
        if target_locations is None or len(target_locations) != len(keys):
            raise ValueError("kvtier.sglang: batch_get() needs one target location per key")
        t0 = time.perf_counter()
        out = [self.get(k, t) for k, t in zip(keys, target_locations)]
        self._record("prefetch", sum(o is not None for o in out), t0)
        return out

    def set(self, key: str, value: Optional[Any] = None,
            target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        """Store a flat page tensor (the pool's get_data_page(i, flat=True))."""
        self._pool()
        k = self._key(key)
        if k is None:
            return False
        if not isinstance(value, torch.Tensor):
            raise ValueError("kvtier.sglang: set() takes the page as a tensor `value` "
                             "(pointers in target_location are not supported)")
        try:
            if self.store.exists(self.ns, k):
                return True
            buf = self._staging()
            self._payload_view(buf).copy_(self._page_view(value))
            self.store.put(self.ns, k, buf, self.durability)
            return True
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: set of page %s failed: %s", key, e)
            return False

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        if values is None or len(values) != len(keys):
            raise ValueError("kvtier.sglang: batch_set() needs one value per key")
        t0 = time.perf_counter()
        n = 0
        for k, v in zip(keys, values):
            if not self.set(k, v):
                self._record("backup", n, t0)
                return False
            n += 1
        self._record("backup", n, t0)
        return True

    # --- lookup, housekeeping ------------------------------------------------

    def exists(self, key: str) -> bool:
        self._pool()
        k = self._key(key)
        return k is not None and self.store.exists(self.ns, k)

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many leading pages the store holds, from the tiers' indexes
        (no I/O, no side effect)."""
        self._pool()
        ks = []
        for key in keys:
            k = self._key(key)
            if k is None:
                break
            ks.append(k)
        return self.store.lookup(self.ns, ks) if ks else 0

    def clear(self) -> None:
        """SGLang's clear() wipes its own backends' files; kvtier's tiers
        outlive the engine and are shared with other engines, ranks and
        tenants, so this one deletes nothing (as HiCacheStorage's default)
        and only waits for the background copies queued so far.  Chunks age
        out by the tiers' eviction and TTL."""
        self.store.flush()

    def get_stats(self):
        """The pages and GiB/s of each prefetch and backup batch since the
        last call (SGLang's StorageMetrics), with enable_storage_metrics."""
        with self._mlock:
            m, self._metrics = self._metrics, StorageMetrics()
        return m

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self._own_store and self.store is not None:
            self.store.close()
        self.store = None
