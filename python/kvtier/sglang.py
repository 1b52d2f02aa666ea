"""kvtier as SGLang's HiCache storage backend (its L3, below the host pools).

SGLang loads it with

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang", "class_name": "KvtierStorage",
        "interface_v1": 1, "kvtier_config": "/etc/kvtier/kvtier.yaml"}'

(docs/SGLANG.md).  The HiCacheController builds a HiCacheStorageConfig,
StorageBackendFactory._create_dynamic_backend calls
KvtierStorage(storage_config, kwargs), and the controller calls
register_mem_pool_host(host_pool) with its KV host pool; the hybrid
controller then registers every pool of its host pool group
(register_mem_host_pool_v2: the KV anchor again, and the Mamba, SWA,
indexer... pools).

With "interface_v1": 1 the KV pages move by batch_exists -> batch_get_v1
(prefetch) and batch_set_v1 (backup), each one engine-connector request by
key over the KV host pool: the connector scatters verified chunks straight
into the pages' slots and gathers pages into chunks.  Without it SGLang uses
get/set/batch_get/batch_set with flat page tensors, stored in the same
bytes.  The other pools of a hybrid model move by batch_exists_v2,
batch_get_v2 and batch_set_v2, each pool in its own namespace: a KV-shaped
pool (an SWA window) through a connector of its own, any other (Mamba
state) as its flat pages.

One SGLang page is one kvtier chunk.  Its key is SGLang's page hash (hex
SHA-256, or XXH3 with SGLANG_USE_XXH3_HASH) wrapped by the namespace; the
rank suffixes SGLang's file and Mooncake backends append to their keys
(tensor, pipeline and attention context-parallel rank) are namespace fields
instead: the model, the page layout, tp_rank/tp_size (CP ranks fold into
the tensor rank, each holding its own slice) and pp_rank/pp_size.  An MLA
model's TP ranks hold the same latent cache and share one copy
(rank_shared; SGLang backs it up from rank 0 only), its Mamba state is
sharded.  KV chunks are stored in kvtier's payload order, so a page written
from a page_first pool reads back into a layer_first one.

This module is SGLang's backend and nothing else: importing it without
SGLang (0.5.23 or later: the v2 pool interface) raises ImportError naming
what is missing.
"""

import logging
import os
import threading
import time
from enum import Enum
from typing import Any, Dict, List, Optional

import kvtier

logger = logging.getLogger(__name__)

try:
    from sglang.srt.mem_cache.hicache_storage import (
        HiCacheStorage,
        HiCacheStorageConfig,
        HiCacheStorageExtraInfo,
        PoolHitPolicy,
        PoolName,
        PoolTransfer,
        PoolTransferResult,
    )
except ImportError as e:
    raise ImportError(
        "kvtier.sglang is a storage backend of SGLang's HiCache and needs SGLang >= 0.5.23 "
        "(sglang.srt.mem_cache.hicache_storage with HiCacheStorage and the v2 pool "
        "interface); importing it failed: %s: %s" % (type(e).__name__, e)) from e

import torch  # noqa: E402  (after SGLang: without it, fail before this long import)


# --- the extra config ---------------------------------------------------------

# The keys of --hicache-storage-backend-extra-config that are kvtier's:
# (type, allowed values or None, what it is).
EXTRA_KEYS = {
    "kvtier_config": (str, None, "path of the kvtier YAML configuration (default: "
                      "$KVTIER_CONFIG, else kvtier's defaults; KVTIER_* variables apply on "
                      "top); {tp_rank}, {pp_rank}, {dp_rank} and {attn_cp_rank} in it are "
                      "the rank's"),
    "kvtier_tenant": (str, None, "tenant whose secret keys the namespace (default: the "
                      "default tenant)"),
    "kvtier_model": (str, None, "model id of the namespace (default: SGLang's model name)"),
    "kvtier_revision": (str, None, "model revision of the namespace (default: none)"),
    "kvtier_durability": (str, ("cached", "crash_safe", "power_safe"),
                          "what a backed-up page must reach before batch_set_v1 returns "
                          "(default: cached)"),
    "kvtier_fp8_dtype": (str, ("fp8_e4m3", "fp8_e5m2"), "what a uint8 host pool holds "
                         "(default: fp8_e4m3)"),
}

# The keys SGLang itself puts there: those reaching the backend (the
# factory's three, interface_v1, and file_storage_path, which SGLang adds
# for any backend with --file-storage-path) and those SGLang pops before
# (parse_storage_backend_extra_config, _generate_storage_config).
SGLANG_KEYS = {
    "backend_name": str, "module_path": str, "class_name": str, "interface_v1": (bool, int),
    "file_storage_path": str, "prefetch_threshold": int,
    "prefetch_timeout_base": (int, float), "prefetch_timeout_per_ki_token": (int, float),
    "hicache_storage_pass_prefix_keys": bool, "tp_lcm_size": int,
}

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean",
               (bool, int): "0, 1 or a boolean", (int, float): "a number"}


def check_extra_config(extra):
    """Every problem of the extra config in one ValueError: a key neither
    kvtier's nor SGLang's, a value of the wrong type or not one of the
    allowed ones."""
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise ValueError("kvtier.sglang: the extra config is a JSON object, not %s" %
                         type(extra).__name__)
    problems = []
    for key in sorted(extra, key=str):
        value = extra[key]
        if key in EXTRA_KEYS:
            want, allowed, _ = EXTRA_KEYS[key]
            if value is None:
                continue
        elif key in SGLANG_KEYS:
            want, allowed = SGLANG_KEYS[key], None
        else:
            problems.append("unknown key %r" % (key,))
            continue
        types = want if isinstance(want, tuple) else (want,)
        # A JSON true is no integer here, nor a JSON 1 a boolean.
        ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
        if key == "interface_v1" and ok and not isinstance(value, bool) and value not in (0, 1):
            ok = False
        if not ok:
            problems.append("%s must be %s, not %s %r" % (key, _TYPE_NAMES[want],
                                                           type(value).__name__, value))
        elif allowed is not None and value not in allowed:
            problems.append("%s %r is not %s or %s" % (key, value, ", ".join(allowed[:-1]),
                                                        allowed[-1]))
    if problems:
        raise ValueError(
            "kvtier.sglang: --hicache-storage-backend-extra-config: %s (kvtier's keys: %s; "
            "SGLang's: %s)" % ("; ".join(problems), ", ".join(sorted(EXTRA_KEYS)),
                               ", ".join(sorted(SGLANG_KEYS))))


# --- host pools as the store sees them -------------------------------------------

_TORCH_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32",
                 "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "int8": "int8"}

# The layouts of a KV host pool whose pages kvtier addresses (MLA has no
# page_head); page_unified (head groups interleaved in one envelope) and
# NPU's page_first_kv_split are not among them.
_MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
_MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def _name(pool_name):
    """A pool's name as a plain string (SGLang passes PoolName members)."""
    return pool_name.value if isinstance(pool_name, Enum) else str(pool_name)


def _kv_shape(pool):
    """(is_mla, expected kv_buffer shape, element dim) of a KV host pool, or
    None when `pool` is not one: no tensor kv_buffer, or neither the MHA
    (head_num, head_dim) nor the MLA (kv_lora_rank) attributes."""
    t = getattr(pool, "kv_buffer", None)
    if not isinstance(t, torch.Tensor):
        return None
    P, L, S = pool.page_size, pool.layer_num, pool.size
    NP = getattr(pool, "page_num", S // P)
    lay = pool.layout
    if hasattr(pool, "kv_lora_rank"):
        D = t.shape[-1]
        dims = {"layer_first": (L, S, 1, D), "page_first": (S, L, 1, D),
                "page_first_direct": (NP, L, P, 1, D)}.get(lay)
        return True, dims, D
    if hasattr(pool, "head_num") and hasattr(pool, "head_dim"):
        H, D = pool.head_num, pool.head_dim
        dims = {"layer_first": (2, L, S, H, D), "page_first": (2, S, L, H, D),
                "page_first_direct": (2, NP, L, P, H, D),
                "page_head": (2, NP, H, P, L, D)}.get(lay)
        return False, dims, D
    return None


def _check_kv_pool(pool, what):
    """Refuse, naming it, a KV host pool kvtier cannot address."""
    cls = type(pool).__name__
    if getattr(pool, "kv_buffer", None) is None:
        raise ValueError("kvtier.sglang: %s %s has no kv_buffer (a logical anchor or an "
                         "allocator-only pool holds no pages); kvtier stores pages it can "
                         "read" % (what, cls))
    shape = _kv_shape(pool)
    if shape is None:
        raise ValueError("kvtier.sglang: %s %s is not an MHA or MLA KV host pool" %
                         (what, cls))
    mla, dims, _ = shape
    t = pool.kv_buffer
    layouts = _MLA_LAYOUTS if mla else _MHA_LAYOUTS
    if pool.layout not in layouts:
        raise ValueError("kvtier.sglang: %s %s has layout %r; kvtier stores %s pools in %s"
                         % (what, cls, pool.layout, "MLA" if mla else "MHA",
                            ", ".join(layouts)))
    if t.device.type != "cpu":
        raise ValueError("kvtier.sglang: %s %s is on %s, not in host memory" %
                         (what, cls, t.device))
    if getattr(pool, "dcp_size", 1) != 1:
        raise ValueError("kvtier.sglang: %s %s is split by decode context parallelism "
                         "(dcp_size %d); not supported" % (what, cls, pool.dcp_size))
    if not mla and getattr(pool, "v_head_dim", pool.head_dim) != pool.head_dim:
        raise ValueError("kvtier.sglang: %s %s has K head dim %d and V head dim %d; kvtier "
                         "stores K and V of one head dim" % (what, cls, pool.head_dim,
                                                             pool.v_head_dim))
    if tuple(t.shape) != dims:
        raise ValueError("kvtier.sglang: %s %s in %s has kv_buffer %s, not the %s expected"
                         % (what, cls, pool.layout, tuple(t.shape), dims))


def _kv_addressable(pool):
    try:
        _check_kv_pool(pool, "")
    except ValueError:
        return False
    return True


def _page_dims(pool, mla):
    """(shape of one flat page as get_data_page(flat=True) makes it, the
    permutation of it into kvtier's payload order: layer, plane, token,
    head, element)."""
    P, L = pool.page_size, pool.layer_num
    lay = pool.layout
    if mla:
        D = pool.kv_buffer.shape[-1]
        if lay == "page_first":
            return (P, L, 1, D), (1, 0, 2, 3)
        return (L, P, 1, D), (0, 1, 2, 3)      # layer_first, page_first_direct
    H, D = pool.head_num, pool.head_dim
    if lay == "page_first":
        return (2, P, L, H, D), (2, 0, 1, 3, 4)
    if lay == "page_head":
        return (2, H, P, L, D), (3, 0, 2, 1, 4)
    return (2, L, P, H, D), (1, 0, 2, 3, 4)    # layer_first, page_first_direct


def _paged_desc(pool, mla):
    """The host pool's kv_buffer as the connector's paged memory: one
    descriptor for every layer (layer_stride), a page of page_size tokens
    per block, block b holding the pool's token slots b*P .. b*P+P-1."""
    t, P = pool.kv_buffer, pool.page_size
    lay = pool.layout
    if mla:
        ldim = 0 if lay == "layer_first" else 1
        planes = [t.select(ldim, 0)]           # (S, 1, D) or (NP, P, 1, D)
    elif lay == "page_head":
        ldim = 4                               # (2, NP, H, P, L, D)
        planes = [t[k].select(3, 0).permute(0, 2, 1, 3) for k in (0, 1)]
    else:
        ldim = 1 if lay == "layer_first" else 2
        planes = [t[k].select(ldim - 1, 0) for k in (0, 1)]
    ps = tuple(kvtier.Plane.of(v, block_tokens=P if v.dim() == 3 else None) for v in planes)
    d = kvtier.PagedDesc([ps], layer_stride=t.stride(ldim) * t.element_size(), owners=[t])
    d.num_layers = t.shape[ldim]
    return d


def _blob_layout(n):
    """A kvtier layout whose payload is exactly n opaque bytes (int8
    elements: tokens x heads x head_dim of one layer and one plane)."""
    dim = max(d for d in range(1, min(n, 65536) + 1) if n % d == 0)
    rest = n // dim
    heads = max(h for h in range(1, min(rest, 4096) + 1) if rest % h == 0)
    tokens = rest // heads
    if tokens > (1 << 20):
        raise ValueError("kvtier.sglang: a page of %d bytes does not factor into a kvtier "
                         "layout" % n)
    return kvtier.Layout(1, heads, dim, "int8", kv_planes=1, block_size=1,
                         chunk_tokens=tokens)


class _Pages:
    """One registered host pool's side of the store: its namespace, and how
    its pages move between the pool's slots and chunks."""

    def __init__(self, owner, pool, name):
        self.owner = owner
        self.pool = pool
        self.name = name
        self.store = owner.store
        self.page_size = pool.page_size

    def key(self, page_hash):
        """The storage key of SGLang's page hash, or None (logged) when it is
        not the hex digest SGLang makes."""
        try:
            h = bytes.fromhex(page_hash)
        except (TypeError, ValueError):
            h = b""
        if not h:
            logger.error("kvtier.sglang: key %r is not a hex page hash", page_hash)
            return None
        return self.ns.key_from_engine_hash(h)

    def has(self, key):
        return key is not None and self.store.exists(self.ns, key)

    def first_slots(self, n, host_indices):
        """The first host slot of each of n pages in host_indices (page_size
        slots per page); ValueError when the count is not that."""
        P = self.page_size
        if host_indices is None or host_indices.numel() != n * P:
            raise ValueError("kvtier.sglang: %d keys and %d host indices for pool %s "
                             "(page size %d)" % (n, 0 if host_indices is None else
                                                 host_indices.numel(), self.name, P))
        return host_indices.reshape(n, P).to("cpu", torch.int64)

    def close(self):
        pass


class _KvPages(_Pages):
    """A KV host pool (MHA or MLA), moved zero-copy by a connector of its
    own over the pool's kv_buffer."""

    def __init__(self, owner, pool, name, shared):
        super().__init__(owner, pool, name)
        _check_kv_pool(pool, "the host pool" if name == "kv" else "host pool %r" % name)
        mla = hasattr(pool, "kv_lora_rank")
        P = pool.page_size
        dtype = owner.kv_dtype(pool)
        if mla:
            layout = kvtier.Layout(pool.layer_num, 1, pool.kv_buffer.shape[-1], dtype,
                                   kv_planes=1, block_size=P, chunk_tokens=P)
        else:
            layout = kvtier.Layout(pool.layer_num, pool.head_num, pool.head_dim, dtype,
                                   kv_planes=2, block_size=P, chunk_tokens=P)
        self.ns = owner.namespace(name, layout, shared, pool)
        self.page_bytes = self.ns.payload_bytes
        self.page_dims, self.page_perm = _page_dims(pool, mla)
        self.conn = self.store.connector(self.ns, _paged_desc(pool, mla),
                                         durability=owner.durability)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def blocks(self, n, host_indices):
        """The block (page) of each of n pages, or None for a page whose
        slots are not one aligned page."""
        P = self.page_size
        idx = self.first_slots(n, host_indices)
        first = idx[:, 0]
        ok = (first % P == 0) & (idx == first[:, None] + torch.arange(P)).all(dim=1)
        return [int(b) if good else None for b, good in zip((first // P).tolist(),
                                                            ok.tolist())]

    def movable(self, keys, host_indices):
        """(indices into keys, storage keys, blocks) of the pages that can
        move: a key that is a page hash, slots that are one page."""
        blocks = self.blocks(len(keys), host_indices)
        which, ks, bs = [], [], []
        for i, (page_hash, b) in enumerate(zip(keys, blocks)):
            k = self.key(page_hash)
            if k is not None and b is None:
                logger.error("kvtier.sglang: the host slots of page %s are not one aligned "
                             "page", page_hash)
            if k is not None and b is not None:
                which.append(i)
                ks.append(k)
                bs.append(b)
        return which, ks, bs

    def save(self, keys, host_indices):
        """One connector save of the pages the store lacks: every layer
        gathered from the pool into its chunk and put by the connector's
        workers.  Per key: the page is in the store now (one already there
        counts: first writer wins); and the count of chunks written."""
        which, ks, bs = self.movable(keys, host_indices)
        out = [False] * len(keys)
        if not which:
            return out, 0
        req, saved = self.owner.request(), 0
        try:
            saved = self.conn.save_keys(req, ks, bs)
            if saved:
                self.conn.save_layer(req)
                self.conn.wait(req)
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: backup of %d pages of pool %s failed: %s",
                           len(ks), self.name, e)
        finally:
            self.conn.end(req)
        for i, k in zip(which, ks):
            out[i] = self.store.exists(self.ns, k)
        return out, saved

    def load(self, keys, host_indices):
        """One connector load, which brings the chunks to the first tier at
        once (a lower tier's reads run in parallel), verifies each layer
        where the tier verifies, and scatters it straight into the page's
        slots.  Per key: the page is whole in the pool (missing or damaged:
        False)."""
        which, ks, bs = self.movable(keys, host_indices)
        out = [False] * len(keys)
        if not which:
            return out
        req, bad = self.owner.request(), set(bs)
        try:
            self.conn.load_keys(req, ks, bs, len(ks) * self.page_size)
            self.conn.wait(req)
            bad = set(self.conn.load_errors(req))
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: prefetch of %d pages of pool %s failed: %s",
                           len(ks), self.name, e)
        finally:
            self.conn.end(req)
        for i, b in zip(which, bs):
            out[i] = b not in bad
        return out

    # flat pages (SGLang without interface_v1)
    def payload_view(self, buf):
        """`buf` (page_bytes of uint8) as the pool's dtype in payload order."""
        shape = tuple(self.page_dims[i] for i in self.page_perm)
        return buf.view(self.pool.kv_buffer.dtype).view(shape)

    def page_view(self, flat):
        t = flat.view(self.pool.kv_buffer.dtype)
        if t.numel() * t.element_size() != self.page_bytes:
            raise ValueError("kvtier.sglang: a page of %d bytes, the pool's are %d" %
                             (t.numel() * t.element_size(), self.page_bytes))
        return t.reshape(self.page_dims).permute(self.page_perm)


class _FlatPages(_Pages):
    """Any other host pool (Mamba state, an indexer...): a page is the
    bytes of the pool's get_data_page(index, flat=True), written back by
    its set_from_flat_data_page; their order is the pool's own, so the
    namespace names the pool's class and layout."""

    def __init__(self, owner, pool, name, shared):
        super().__init__(owner, pool, name)
        for m in ("get_data_page", "set_from_flat_data_page"):
            if not callable(getattr(pool, m, None)):
                raise ValueError("kvtier.sglang: host pool %r (%s) has no %s()" %
                                 (name, type(pool).__name__, m))
        # A real page, not get_dummy_flat_data_page(): that one pins host
        # memory, which needs a GPU.
        sample = pool.get_data_page(0, flat=True)
        self.flat_dtype = sample.dtype
        self.page_bytes = sample.numel() * sample.element_size()
        if self.page_bytes == 0:
            raise ValueError("kvtier.sglang: host pool %r (%s) has pages of 0 bytes" %
                             (name, type(pool).__name__))
        tag = "%s:%s:%s" % (name, type(pool).__name__, getattr(pool, "layout", ""))
        self.ns = owner.namespace(tag, _blob_layout(self.page_bytes), shared, pool)
        assert self.ns.payload_bytes == self.page_bytes

    def save(self, keys, host_indices):
        idx = self.first_slots(len(keys), host_indices)
        out = [False] * len(keys)
        which, ks, pages = [], [], []
        for i, page_hash in enumerate(keys):
            k = self.key(page_hash)
            if k is None:
                continue
            if self.store.exists(self.ns, k):
                out[i] = True
                continue
            flat = self.pool.get_data_page(int(idx[i, 0]), flat=True)
            which.append(i)
            ks.append(k)
            pages.append(flat.contiguous().view(torch.uint8))
        if not which:
            return out, 0
        try:
            codes = self.store.put_batch(self.ns, ks, pages, self.owner.durability)
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: backup of %d pages of pool %s failed: %s",
                           len(ks), self.name, e)
            return out, 0
        for i, c in zip(which, codes):
            out[i] = c in (0, kvtier.EEXIST)
        return out, sum(c == 0 for c in codes)

    def load(self, keys, host_indices):
        idx = self.first_slots(len(keys), host_indices)
        out = [False] * len(keys)
        which, ks = [], []
        for i, page_hash in enumerate(keys):
            k = self.key(page_hash)
            if k is not None:
                which.append(i)
                ks.append(k)
        if not which:
            return out
        bufs = [torch.empty(self.page_bytes, dtype=torch.uint8) for _ in ks]
        try:
            codes = self.store.get_batch(self.ns, ks, bufs)
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: prefetch of %d pages of pool %s failed: %s",
                           len(ks), self.name, e)
            return out
        for i, c, buf in zip(which, codes, bufs):
            if c == 0:
                self.pool.set_from_flat_data_page(int(idx[i, 0]), buf.view(self.flat_dtype))
                out[i] = True
        return out


def _leading(flags):
    """Per page: it and every page before it are True (a prefix cache has
    no use for a page after a hole)."""
    out, ok = [], True
    for f in flags:
        ok = ok and bool(f)
        out.append(ok)
    return out


class KvtierStorage(HiCacheStorage):
    """HiCacheStorage over a kvtier store (see the module's manual)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        cfg = storage_config
        check_extra_config(cfg.extra_config)
        extra = dict(cfg.extra_config or {})
        if cfg.should_split_heads or (cfg.tp_lcm_size and cfg.tp_lcm_size != cfg.tp_size):
            raise ValueError(
                "kvtier.sglang: tp_lcm_size %s (TP size %d%s) is not supported: pages shared "
                "between instances of different TP sizes (heads split by the page_head "
                "layout) need one chunk per head group; kvtier keys a page per TP rank "
                "and size" % (cfg.tp_lcm_size, cfg.tp_size,
                              ", heads split" if cfg.should_split_heads else ""))
        if getattr(cfg, "dcp_size", 1) != 1:
            raise ValueError("kvtier.sglang: dcp_size %d (decode context parallelism) is not "
                             "supported" % cfg.dcp_size)
        self.storage_config = cfg
        self.durability = extra.get("kvtier_durability") or "cached"
        self.fp8_dtype = extra.get("kvtier_fp8_dtype") or "fp8_e4m3"
        self.tenant = extra.get("kvtier_tenant")
        self.model = extra.get("kvtier_model") or cfg.model_name or "sglang"
        self.revision = extra.get("kvtier_revision")
        self.store = None
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
        self._kv = None                        # the KV pool (register_mem_pool_host)
        self._pages: Dict[str, _Pages] = {}    # every registered pool by name
        self._warned = set()
        self._tls = threading.local()
        self._mlock = threading.Lock()
        self._next_req = 0
        self._metrics = None
        self.enable_storage_metrics = bool(cfg.enable_storage_metrics)

    # --- what the pools share ----------------------------------------------

    def kv_dtype(self, pool):
        name = str(pool.dtype).replace("torch.", "")
        if name == "uint8":
            return self.fp8_dtype
        if name not in _TORCH_DTYPES:
            raise ValueError("kvtier.sglang: host pool dtype %s has no kvtier dtype" %
                             pool.dtype)
        return _TORCH_DTYPES[name]

    def _ranks(self, shared):
        """(tp_rank, tp_size, rank_shared) of a pool's namespace: a CP rank
        holds its own slice of every page, so (tp, cp) pairs are shards;
        MLA's TP ranks hold one latent cache and share it."""
        c = self.storage_config
        cp_rank, cp_size = c.attn_cp_rank, c.attn_cp_size
        if shared:
            if cp_size > 1:
                return cp_rank, cp_size, False
            return c.tp_rank, c.tp_size, True
        return c.tp_rank * cp_size + cp_rank, c.tp_size * cp_size, False

    def namespace(self, name, layout, shared, pool):
        """The namespace of pool `name`: the KV pool's is the model's own,
        another pool's adds its name (and the pool's storage format tag)."""
        model = self.model
        if name != "kv":
            tag = getattr(pool, "storage_format_tag", None)
            model = "%s#%s%s" % (model, name, "" if tag is None else ":" + tag)
        tp_rank, tp_size, rank_shared = self._ranks(shared)
        c = self.storage_config
        return self.store.namespace(model, layout, revision=self.revision, tp_rank=tp_rank,
                                    tp_size=tp_size, pp_rank=c.pp_rank, pp_size=c.pp_size,
                                    tenant=self.tenant, rank_shared=rank_shared)

    def request(self):
        with self._mlock:
            self._next_req += 1
            return self._next_req

    # --- registration ------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """The KV host pool: it fixes the model's namespace (layers, heads,
        head dim, dtype, page size) and opens the connector over its
        kv_buffer.  A pool kvtier cannot address is refused here, naming
        what it lacks."""
        super().register_mem_pool_host(mem_pool_host)
        pages = _KvPages(self, mem_pool_host, "kv", self.storage_config.is_mla_model)
        old = self._pages.get("kv")
        if old is not None:
            old.close()
        self._kv = self._pages["kv"] = pages

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        """A pool of the hybrid controller's host pool group.  The KV anchor
        comes again under "kv"; the others get namespaces of their own: a
        KV-shaped pool (SWA) moves zero-copy, any other as flat pages.
        Mamba state is sharded by TP rank even in an MLA model (SGLang backs
        it up from every rank); the other pools of an MLA model are shared
        by its ranks, as its KV is."""
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        name = _name(host_pool_name)
        if name == "kv" and self._kv is not None and host_pool is self._kv.pool:
            return
        shared = self.storage_config.is_mla_model and name != "mamba"
        if _kv_addressable(host_pool):
            pages = _KvPages(self, host_pool, name, shared)
        else:
            pages = _FlatPages(self, host_pool, name, shared)
        old = self._pages.get(name)
        if old is not None and old is not self._kv:
            old.close()
        self._pages[name] = pages
        if name == "kv":
            self._kv = pages

    def _kv_pages(self):
        if self._kv is None:
            raise RuntimeError("kvtier.sglang: register_mem_pool_host() first: the "
                               "namespace is the host pool's layout")
        return self._kv

    @property
    def ns(self):
        """The KV pool's namespace (None before register_mem_pool_host)."""
        return None if self._kv is None else self._kv.ns

    def _key(self, page_hash):
        return self._kv_pages().key(page_hash)

    # --- metrics -------------------------------------------------------------

    def _record(self, what, pages, t0):
        if not self.enable_storage_metrics or not pages:
            return
        gib = pages * self._kv.page_bytes / float(1 << 30)
        dt = max(time.perf_counter() - t0, 1e-9)
        with self._mlock:
            if self._metrics is None:
                self._metrics = _storage_metrics()
            getattr(self._metrics, what + "_pgs").append(pages)
            getattr(self._metrics, what + "_bandwidth").append(gib / dt)

    def get_stats(self):
        """The pages and GiB/s of each prefetch and backup batch since the
        last call (SGLang's StorageMetrics), with enable_storage_metrics."""
        with self._mlock:
            m, self._metrics = self._metrics, None
        return m if m is not None else _storage_metrics()

    # --- zero-copy KV pages ------------------------------------------------

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Back up KV pages of the host pool (one connector save).  One bool
        per key: the page is in the store now."""
        kv = self._kv_pages()
        t0 = time.perf_counter()
        out, saved = kv.save(keys, host_indices)
        self._record("backup", saved, t0)
        return out

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Load KV pages into the host pool (one connector load).  One bool
        per key: the page and every page before it are whole in the pool; a
        missing or damaged chunk is False, and so is every page after it."""
        kv = self._kv_pages()
        t0 = time.perf_counter()
        out = _leading(kv.load(keys, host_indices))
        self._record("prefetch", sum(out), t0)
        return out

    # --- flat KV pages (SGLang without interface_v1) ---------------------------

    def _staging(self, kv):
        """This thread's chunk buffer for the flat-page calls (SGLang's
        prefetch and backup threads run at once)."""
        buf = getattr(self._tls, "buf", None)
        if buf is None or buf.numel() != kv.page_bytes:
            buf = self._tls.buf = torch.empty(kv.page_bytes, dtype=torch.uint8)
        return buf

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        """Read a page into target_location (a flat page tensor, as the
        pool's get_dummy_flat_data_page makes) and return it, or None."""
        kv = self._kv_pages()
        k = kv.key(key)
        if k is None:
            return None
        if not isinstance(target_location, torch.Tensor):
            raise ValueError("kvtier.sglang: get() needs target_location, a flat page "
                             "tensor (the pool's get_dummy_flat_data_page())")
        buf = self._staging(kv)
        try:
            self.store.get(kv.ns, k, buf)
        except kvtier.NotFound:
            return None
        except kvtier.Error as e:
            logger.warning("kvtier.sglang: get of page %s failed: %s", key, e)
            return None
        kv.page_view(target_location).copy_(kv.payload_view(buf))
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
        kv = self._kv_pages()
        k = kv.key(key)
        if k is None:
            return False
        if not isinstance(value, torch.Tensor):
            raise ValueError("kvtier.sglang: set() takes the page as a tensor `value` "
                             "(pointers in target_location are not supported)")
        try:
            if self.store.exists(kv.ns, k):
                return True
            buf = self._staging(kv)
            kv.payload_view(buf).copy_(kv.page_view(value))
            self.store.put(kv.ns, k, buf, self.durability)
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
                break
            n += 1
        self._record("backup", n, t0)
        return n == len(keys)

    # --- lookup ----------------------------------------------------------------

    def exists(self, key: str) -> bool:
        kv = self._kv_pages()
        return kv.has(kv.key(key))

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many leading KV pages the store holds, from the tiers' indexes
        (no I/O, no side effect)."""
        kv = self._kv_pages()
        ks = []
        for page_hash in keys:
            k = kv.key(page_hash)
            if k is None:
                break
            ks.append(k)
        return self.store.lookup(kv.ns, ks) if ks else 0

    # --- the v2 multi-pool interface ---------------------------------------------

    def _pool_pages(self, name, what):
        pages = self._pages.get(_name(name))
        if pages is None:
            logger.error("kvtier.sglang: %s for pool %s, which was not registered "
                         "(register_mem_host_pool_v2)", what, _name(name))
        return pages

    def _warn_once(self, what):
        if what not in self._warned:
            self._warned.add(what)
            logger.warning("kvtier.sglang: %s", what)

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[PoolTransfer]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None
                        ) -> PoolTransferResult:
        """The KV prefix the store holds, cut to where every pool of
        pool_transfers can restore it (from the tiers' indexes; no I/O).
        A pool's pages are keyed by the KV page hashes (page i of pool X is
        X's chunk under keys[i]); only the number of a transfer's keys
        counts (SGLang sends placeholders here).

        ALL_PAGES: every page of the prefix must be in the pool.
        TRAILING_PAGES: prefix length p is restorable when the pool holds
        the len(transfer.keys) pages ending at p (a Mamba state, an SWA
        window): the restorable lengths need not be contiguous.
        BLOCK_GROUPS: no verdict and no cut (SGLang 0.5.23 sends none).
        extra_pool_hit_pages holds the KV pool's boundary and each pool's;
        restorable_prefix_pages every length all pools can restore."""
        kv_hit = self.batch_exists(keys, extra_info)
        hits = {PoolName.KV: kv_hit}
        restorable = set(range(1, kv_hit + 1))
        for t in pool_transfers or []:
            name = _name(t.name)
            if t.hit_policy == PoolHitPolicy.BLOCK_GROUPS:
                self._warn_once("pool %s: hit policy block_groups is not supported; the "
                                "pool gets no verdict" % name)
                continue
            pages = self._kv if name == "kv" else self._pool_pages(t.name, "batch_exists_v2")
            if pages is None:
                hits[t.name] = 0
                restorable = set()
                continue
            present = [pages.has(pages.key(h)) for h in keys[:kv_hit]]
            if t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                n = max(1, len(t.keys or ()))
                mine = {p for p in range(1, kv_hit + 1) if all(present[max(0, p - n):p])}
                boundary = max(mine, default=0)
            else:                              # ALL_PAGES
                boundary = _leading(present).count(True)
                mine = set(range(1, boundary + 1))
            hits[t.name] = boundary
            restorable &= mine
        final = max(restorable, default=0)
        return PoolTransferResult(final, hits, sorted(restorable))

    def _batch_v2(self, transfers, what):
        out = {}
        for t in transfers:
            keys = list(t.keys or ())
            pages = self._pool_pages(t.name, what)
            if pages is None:
                out[t.name] = [False] * len(keys)
                continue
            try:
                if what == "batch_get_v2":
                    out[t.name] = _leading(pages.load(keys, t.host_indices))
                else:
                    out[t.name] = pages.save(keys, t.host_indices)[0]
            except ValueError as e:
                logger.error("%s", e)
                out[t.name] = [False] * len(keys)
        return out

    def batch_get_v2(self, transfers: List[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> Dict[Any, List[bool]]:
        """Load each transfer's pages (keys: KV page hashes, host_indices:
        the pool's slots, page_size per key) into its pool.  Per pool, one
        bool per key: the page and every one before it are whole in the
        pool."""
        return self._batch_v2(transfers, "batch_get_v2")

    def batch_set_v2(self, transfers: List[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> Dict[Any, List[bool]]:
        """Back up each transfer's pages.  Per pool, one bool per key: the
        page is in the store now."""
        return self._batch_v2(transfers, "batch_set_v2")

    # --- housekeeping --------------------------------------------------------

    def clear(self) -> None:
        """SGLang's clear() wipes its own backends' files; kvtier's tiers
        outlive the engine and are shared with other engines, ranks and
        tenants, so this one deletes nothing (as HiCacheStorage's default)
        and only waits for the background copies queued so far.  Chunks age
        out by the tiers' eviction and TTL."""
        self.store.flush()

    def close(self):
        for pages in self._pages.values():
            pages.close()
        self._pages.clear()
        self._kv = None
        if self._own_store and self.store is not None:
            self.store.close()
        self.store = None


def _storage_metrics():
    """SGLang's StorageMetrics (imported when first used: its module pulls
    in much of SGLang)."""
    from sglang.srt.observability.metrics_collector import StorageMetrics
    return StorageMetrics()
