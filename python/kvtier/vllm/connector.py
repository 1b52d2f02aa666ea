"""kvtier as a vLLM KV connector (vLLM v1's KVConnectorBase_V1).

Enabled with

    vllm serve MODEL --kv-transfer-config '{"kv_connector":"KvtierConnector",
        "kv_role":"kv_both",
        "kv_connector_extra_config":{"kvtier_config":"/etc/kvtier.yaml"}}'

(the name is registered by kvtier's vLLM plugin, kvtier.vllm.register).

(docs/PYTHON.md lists the extra_config keys.)  The scheduler-side half
answers how many prompt tokens the store holds beyond vLLM's own prefix
cache and plans, per step, which chunks each worker loads and saves; the
worker-side half drives kvtier's engine connector over vLLM's paged KV
tensors: a load per request started before the forward pass and waited on
layer by layer, a save gathered layer by layer as attention writes each
layer.

Chunks are named by vLLM's own block hashes (request.block_hashes, the
sha256_cbor chain kvtier reproduces bit for bit): a chunk of chunk_size
tokens is chunk_size / block_size blocks, and its key is the hash of its
last block wrapped in the namespace (model, layout, ranks, tenant), so
the hashes alone never name stored bytes and another model's or tenant's
chunks are never served.

Importing this module needs vLLM (>= MIN_VLLM in kvtier/vllm/__init__.py):
an older one, or none, is an ImportError that says which version is
needed, raised when vLLM's factory loads the connector at the engine's
start.
"""

import itertools
import logging
import threading
from dataclasses import dataclass, field

import kvtier

from . import MIN_VLLM, TESTED_VLLM

log = logging.getLogger("kvtier.vllm")


def _vllm_version():
    try:
        import vllm
    except ImportError as e:
        raise ImportError("kvtier.vllm: vLLM is not installed in this Python (%s); the "
                          "connector runs inside vLLM >= %d.%d" % ((e,) + MIN_VLLM)) from e
    v = getattr(vllm, "__version__", "0")
    nums = []
    for part in v.split("+")[0].split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        nums.append(int(digits or 0))
    if tuple(nums) < MIN_VLLM:
        raise ImportError("kvtier.vllm: vLLM %s is too old for kvtier's connector: it needs "
                          "vLLM >= %d.%d (tested with %s)" % ((v,) + MIN_VLLM + (TESTED_VLLM,)))
    if v.split("+")[0] != TESTED_VLLM:
        log.info("kvtier.vllm: running on vLLM %s; tested with %s", v, TESTED_VLLM)
    return v


VLLM_VERSION = _vllm_version()

from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: E402
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)


# extra_config keys the adapter reads itself; every other key is a kvtier
# configuration key (docs/CONFIG.md) set on top of kvtier_config's file.
ADAPTER_KEYS = ("kvtier_config", "kv_cache_layout", "load_deadline_ms", "tenant",
                "save_decode", "tp_rank", "model", "connector_threads")


# --- one store per process ------------------------------------------------------

_stores = {}
_stores_lock = threading.Lock()


def _store_key(extra):
    return repr(sorted((k, str(v)) for k, v in extra.items() if k not in ADAPTER_KEYS[1:]))


def _config_of(extra, lookup_only=False):
    path = extra.get("kvtier_config")
    cfg = kvtier.Config.load(path) if path else kvtier.Config()
    try:
        for k, v in extra.items():
            if k not in ADAPTER_KEYS:
                cfg.set(k, v)
        cfg.apply_env()
        if lookup_only:
            # A scheduler in a process without a worker: it reads what the
            # workers' lower tiers hold and changes nothing.
            cfg.set("read_only", True)
            cfg.set("local_cpu", False)
    except BaseException:
        cfg.close()
        raise
    return cfg


def _acquire_store(extra, writer):
    """The process's store for this configuration: opened by the first
    worker-side connector (or, for a scheduler alone in its process, a
    read-only store over the lower tiers), shared by both roles when vLLM
    runs them in one process (its single-GPU executor)."""
    key = _store_key(extra)
    with _stores_lock:
        ent = _stores.get(key)
        if ent is not None and (ent[2] or not writer):
            ent[1] += 1
            return ent[0]
        # (A lookup-only store the scheduler opened first is replaced for
        # later users by the worker's writable one; each is closed by its
        # own last user.)
        cfg = _config_of(extra, lookup_only=not writer)
        try:
            st = kvtier.Store(cfg)
        finally:
            cfg.close()
        _stores[key] = [st, 1, writer]
        return st


def _release_store(extra, st):
    key = _store_key(extra)
    with _stores_lock:
        ent = _stores.get(key)
        if ent is not None and ent[0] is st:
            ent[1] -= 1
            if ent[1] > 0:
                return
            del _stores[key]
    st.close()


# --- the namespace, from vLLM's configuration ----------------------------------------

def _cache_dtype(vllm_config, torch_dtype):
    cd = str(getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", "auto"))
    if cd.startswith("fp8"):
        return "fp8_e5m2" if "e5m2" in cd else "fp8_e4m3"
    return str(torch_dtype)


def _layout_of(vllm_config, kv_cache_config, chunk_tokens):
    """kvtier's layout of one chunk from vLLM's KV cache spec (one group of
    uniform attention layers; hybrid models are refused)."""
    groups = getattr(kv_cache_config, "kv_cache_groups", None)
    if not groups:
        # vLLM before 0.11 built connectors without a kv_cache_config: the
        # model's own figures, per rank.
        mc, pc = vllm_config.model_config, vllm_config.parallel_config
        mla = bool(getattr(mc, "use_mla", False))
        heads = 1 if mla else mc.get_num_kv_heads(pc)
        return kvtier.Layout(mc.get_num_layers(pc), heads, mc.get_head_size(),
                             _cache_dtype(vllm_config, mc.dtype), kv_planes=1 if mla else 2,
                             block_size=vllm_config.cache_config.block_size,
                             chunk_tokens=chunk_tokens), mla, []
    if len(groups) != 1:
        raise kvtier.NotSupported(kvtier.ENOTFOUND - 18,
                                  "%d KV cache groups (a hybrid model): kvtier's vLLM "
                                  "connector stores one group of attention layers" % len(groups))
    g = groups[0]
    spec = g.kv_cache_spec
    mla = "MLA" in type(spec).__name__ or getattr(spec, "use_mla", False)
    return kvtier.Layout(len(g.layer_names), 1 if mla else spec.num_kv_heads, spec.head_size,
                         _cache_dtype(vllm_config, spec.dtype), kv_planes=1 if mla else 2,
                         block_size=spec.block_size, chunk_tokens=chunk_tokens), mla, \
        list(g.layer_names)


def _tp(vllm_config):
    pc = getattr(vllm_config, "parallel_config", None)
    return (getattr(pc, "tensor_parallel_size", 1) or 1,
            getattr(pc, "pipeline_parallel_size", 1) or 1)


def _worker_ranks(extra):
    if "tp_rank" in extra:
        return int(extra["tp_rank"]), 0
    try:
        from vllm.distributed.parallel_state import (get_pp_group,
                                                     get_tensor_model_parallel_rank)
        return get_tensor_model_parallel_rank(), get_pp_group().rank_in_group
    except Exception:  # no vLLM, or no distributed state: one rank
        return 0, 0


# --- per-step metadata -----------------------------------------------------------------

@dataclass
class LoadSpec:
    """One request's load this step: the chunks named by `hashes` (vLLM's
    hash of each chunk's last block; each worker wraps them in its own
    rank's namespace) into block_ids, n_tokens tokens of them."""
    req_id: str
    hashes: list
    block_ids: list
    n_tokens: int


@dataclass
class SaveSpec:
    """Chunks of one request to save this step (named as in LoadSpec),
    with their blocks."""
    req_id: str
    hashes: list
    block_ids: list


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)


@dataclass
class _ReqState:
    request: object
    block_ids: list
    saved_chunks: int = 0   # chunks [0, saved_chunks) were planned for saving
    load: object = None     # (first chunk, chunks, end token) for the next step


class KvtierConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector over a kvtier store."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = self._kv_transfer_config
        extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self._extra = extra
        self._block_size = int(vllm_config.cache_config.block_size)
        self._chunk_tokens = int(extra.get("chunk_size", 256))
        if self._chunk_tokens % self._block_size:
            raise kvtier.InvalidArgument(
                kvtier.EINVAL, "chunk_size %d is not a multiple of vLLM's block_size %d" %
                (self._chunk_tokens, self._block_size))
        self._bpc = self._chunk_tokens // self._block_size
        self._deadline_ms = int(extra.get("load_deadline_ms", -1))
        self._save_decode = str(extra.get("save_decode", "false")).lower() == "true"
        # kv_producer only saves, kv_consumer only loads, kv_both does both.
        kv_role = getattr(ktc, "kv_role", "kv_both") or "kv_both"
        self._can_load = kv_role in ("kv_both", "kv_consumer")
        self._can_save = kv_role in ("kv_both", "kv_producer")
        self._layout, self._mla, self._layer_names = _layout_of(
            vllm_config, kv_cache_config, self._chunk_tokens)
        self._model = vllm_config.model_config.model
        self._revision = getattr(vllm_config.model_config, "revision", None)
        self._tp_size, self._pp_size = _tp(vllm_config)
        self._store = None
        self._ns_ranks = None
        # scheduler side
        self._reqs = {}
        self._local = {}          # request id -> vLLM's own prefix hit, in tokens
        # worker side
        self._conn = None
        self._ns = None
        self._layer_index = {n: i for i, n in enumerate(self._layer_names)}
        self._ids = itertools.count(1)
        self._loads = {}          # vLLM request id -> kvtier request id, this step
        self._saves = {}
        self._invalid = set()
        self._load_stats = [0, 0]  # tokens asked, chunks failed
        role_name = getattr(role, "name", str(role))
        if role_name == "WORKER":
            self._store = _acquire_store(extra, writer=True)
            tp_rank, pp_rank = _worker_ranks(extra)
            self._ns = self._namespace(self._store, tp_rank, pp_rank)

    # --- shared -------------------------------------------------------------------

    def _namespace(self, st, tp_rank, pp_rank):
        return st.namespace(self._model, self._layout, revision=self._revision,
                            tp_rank=tp_rank, tp_size=self._tp_size, pp_rank=pp_rank,
                            pp_size=self._pp_size, tenant=self._extra.get("tenant"),
                            rank_shared=self._mla)

    def _keys(self, ns, block_hashes, first_chunk, n_chunks):
        bpc = self._bpc
        return [ns.key_from_engine_hash(block_hashes[(i + 1) * bpc - 1])
                for i in range(first_chunk, first_chunk + n_chunks)]

    # --- scheduler side ----------------------------------------------------------------

    def _lookup_namespaces(self):
        """The scheduler's store and one namespace per rank: a prefix hits
        only as far as every rank's shard is present."""
        if self._ns_ranks is None:
            try:
                self._store = _acquire_store(self._extra, writer=False)
            except kvtier.Error as e:
                log.warning("kvtier: the scheduler cannot open a store to look up in (%s); "
                            "no external hits", e)
                self._ns_ranks = []
                return None, []
            ranks = [(0, 0)] if self._mla else [
                (t, p) for p in range(self._pp_size) for t in range(self._tp_size)]
            self._ns_ranks = [self._namespace(self._store, t, p) for t, p in ranks]
        return self._store, self._ns_ranks

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens the store holds beyond num_computed_tokens, from memory and
        without side effects: (count, False), the load being layer-wise in
        the next forward pass rather than asynchronous."""
        if not self._can_load:
            return 0, False
        n_prompt = len(request.prompt_token_ids or [])
        hashes = request.block_hashes
        n_chunks = min(len(hashes) // self._bpc, n_prompt // self._chunk_tokens)
        first = num_computed_tokens // self._chunk_tokens
        self._local[request.request_id] = num_computed_tokens
        if n_chunks <= first:
            return 0, False
        st, namespaces = self._lookup_namespaces()
        if not namespaces:
            return 0, False
        hit = n_chunks - first
        for ns in namespaces:
            hit = min(hit, st.lookup(ns, self._keys(ns, hashes, first, hit)))
            if hit == 0:
                return 0, False
        end = (first + hit) * self._chunk_tokens
        if end >= n_prompt:
            end = n_prompt - 1  # vLLM computes at least one token to sample from
        n = end - num_computed_tokens
        return (n, False) if n > 0 else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        block_ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
        st = self._reqs.get(request.request_id)
        if st is None:
            st = self._reqs[request.request_id] = _ReqState(request, block_ids)
        else:
            st.block_ids = block_ids or st.block_ids
        # The load starts at the chunk holding vLLM's own prefix hit: blocks
        # of that chunk below the hit are written again with the stored
        # bytes of their own tokens (vLLM's offloading connector does the
        # same with its offloaded blocks).
        local = self._local.pop(request.request_id, 0)
        if num_external_tokens > 0:
            first = local // self._chunk_tokens
            end = local + num_external_tokens
            st.load = (first, -(-end // self._chunk_tokens) - first, end)

    def build_connector_meta(self, scheduler_output):
        meta = KvtierConnectorMetadata()
        sched = scheduler_output.num_scheduled_tokens
        steps = []
        for r in scheduler_output.scheduled_new_reqs:
            steps.append((r.req_id, list(r.block_ids[0]), r.num_computed_tokens, True))
        cached = scheduler_output.scheduled_cached_reqs
        resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
        for i, rid in enumerate(cached.req_ids):
            nb = cached.new_block_ids[i]
            steps.append((rid, list(nb[0]) if nb is not None else None,
                          cached.num_computed_tokens[i], rid in resumed))
        for rid, block_ids, n_comp, replace in steps:
            st = self._reqs.get(rid)
            if st is None:
                continue
            if block_ids is not None:
                st.block_ids = block_ids if replace else st.block_ids + block_ids
            req = st.request
            hashes = req.block_hashes
            if st.load is not None:
                first, n_chunks, end = st.load
                st.load = None
                meta.loads.append(LoadSpec(
                    rid, hashes[(first + 1) * self._bpc - 1:(first + n_chunks) * self._bpc:
                                self._bpc],
                    st.block_ids[first * self._bpc:], end - first * self._chunk_tokens))
            # Chunks whose last token this step computes, up to the prompt
            # (and, with save_decode, the generated tokens).  Chunks the
            # store already holds (loaded ones, others' saves) are left out
            # by the worker's connector.
            limit = req.num_tokens if self._save_decode else len(req.prompt_token_ids or [])
            done = min(n_comp + sched.get(rid, 0), limit, len(hashes) * self._block_size)
            full = min(done // self._chunk_tokens, len(st.block_ids) // self._bpc)
            if self._can_save and full > st.saved_chunks:
                first = st.saved_chunks
                meta.saves.append(SaveSpec(
                    rid, hashes[(first + 1) * self._bpc - 1:full * self._bpc:self._bpc],
                    st.block_ids[first * self._bpc:full * self._bpc]))
                st.saved_chunks = full
        for rid in getattr(scheduler_output, "finished_req_ids", ()) or ():
            self._reqs.pop(rid, None)
            self._local.pop(rid, None)
        return meta

    def update_connector_output(self, connector_output):
        # Loads and saves finish inside the step that planned them; failed
        # blocks come back to vLLM's scheduler in invalid_block_ids, which
        # it recomputes by itself.
        return

    def request_finished(self, request, block_ids):
        self._reqs.pop(request.request_id, None)
        self._local.pop(request.request_id, None)
        return False, None

    def take_events(self):
        return ()

    # --- worker side -------------------------------------------------------------------

    def _open(self, paged):
        if self._conn is not None:
            raise kvtier.InvalidArgument(kvtier.EINVAL, "KV caches are already registered")
        self._conn = kvtier.Connector(self._store, self._ns, paged,
                                      threads=int(self._extra.get("connector_threads", 0)))

    def _paged_of(self, tensors):
        kind = self._extra.get("kv_cache_layout")
        t0 = tensors[0]
        nb = getattr(self._kv_cache_config, "num_blocks", None)
        if kind is None:
            if t0.dim() == 3:
                kind = "mla"
            elif t0.dim() == 5 and t0.shape[0] == 2 and (nb is None or t0.shape[1] == nb):
                kind = "flash_attn"
            elif t0.dim() == 5 and t0.shape[1] == 2:
                kind = "flashinfer"
            else:
                raise kvtier.LayoutError(kvtier.ENOTFOUND - 12,
                                         "vLLM KV tensor of shape %s is no layout kvtier "
                                         "knows; set kv_cache_layout" % (tuple(t0.shape),))
        makers = {"flash_attn": kvtier.paged_flash_attn, "flashinfer": kvtier.paged_flashinfer,
                  "mla": kvtier.paged_mla}
        if kind not in makers:
            raise kvtier.InvalidArgument(kvtier.EINVAL, "kv_cache_layout %r is not one of %s" %
                                         (kind, ", ".join(makers)))
        return makers[kind](tensors)

    def register_kv_caches(self, kv_caches):
        names = list(kv_caches)
        if self._layer_names and set(names) == set(self._layer_names):
            names = self._layer_names
        self._layer_index = {n: i for i, n in enumerate(names)}
        self._open(self._paged_of([kv_caches[n] for n in names]))

    def register_cross_layers_kv_cache(self, kv_cache, attn_backend=None):
        """One tensor of every layer, logically (num_layers, <one layer's
        shape>) whatever its physical order: layer l is kv_cache[l]."""
        one = self._paged_of([kv_cache[0]])
        paged = kvtier.PagedDesc(one.layers, kv_cache.stride(0) * kv_cache.element_size(),
                                 owners=[kv_cache])
        paged.num_layers = kv_cache.shape[0]
        self._open(paged)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        conn = self._conn
        self._loads = {}
        self._saves = {}
        for s in meta.saves:
            rid = next(self._ids)
            keys = [self._ns.key_from_engine_hash(h) for h in s.hashes]
            if conn.save_keys(rid, keys, s.block_ids) > 0:
                self._saves[s.req_id] = rid
            else:
                conn.end(rid)
        for ld in meta.loads:
            rid = next(self._ids)
            keys = [self._ns.key_from_engine_hash(h) for h in ld.hashes]
            conn.load_keys(rid, keys, ld.block_ids, ld.n_tokens, self._deadline_ms)
            self._loads[ld.req_id] = (rid, ld)

    def _layer(self, layer_name):
        return self._layer_index.get(layer_name)

    def wait_for_layer_load(self, layer_name):
        l = self._layer(layer_name)
        if l is None:
            return
        for rid, _ in self._loads.values():
            self._conn.wait_layer(rid, l)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        l = self._layer(layer_name)
        if l is None:
            return
        for rid in self._saves.values():
            self._conn.save_layer(rid, l)

    def wait_for_save(self):
        # Layers the model never reported (none, normally) are queued now:
        # a chunk is published only whole.
        for rid in self._saves.values():
            self._conn.save_layer(rid, None)
            self._conn.wait(rid)
        for d in self._conn.finished():
            if d.what == "save" and d.status < 0 and d.status != kvtier.ENOTFOUND:
                log.warning("kvtier: a save stored %d of %d chunks: %s", d.chunks,
                            d.chunks + d.n_invalid, d.error)
        for rid in self._saves.values():
            self._conn.end(rid)
        self._saves = {}

    def get_finished(self, finished_req_ids):
        # Loads and saves are over within their step: nothing is held back.
        return None, None

    def get_block_ids_with_load_errors(self):
        bad = set()
        for rid, ld in self._loads.values():
            self._conn.wait(rid)
            bad.update(self._conn.load_errors(rid))
            self._conn.end(rid)
        self._loads = {}
        self._conn.finished()
        return bad

    def shutdown(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._store is not None:
            st, self._store = self._store, None
            self._ns_ranks = None
            _release_store(self._extra, st)


# --- a secondary tier for vLLM's OffloadingConnector ----------------------------------

try:
    from vllm.v1.kv_offload.tiering.base import (  # noqa: F401
        JobMetadata,
        JobResult,
        SecondaryTierManager,
    )
except ImportError:
    class SecondaryTierManager:
        """The part of vLLM's SecondaryTierManager a tier inherits."""

        def __init__(self, offloading_spec, primary_kv_view, tier_type):
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type

    @dataclass
    class JobMetadata:
        job_id: int
        keys: list
        block_ids: object
        is_promotion: bool = False
        req_context: object = None

    @dataclass
    class JobResult:
        job_id: int
        success: bool

try:
    from vllm.v1.kv_offload.base import LookupResult
except ImportError:
    LookupResult = None


class KvtierSecondaryTier(SecondaryTierManager):
    """kvtier's tiers below the CPU tier of vLLM's tiered OffloadingConnector.

    The primary tier is vLLM's CPU KV cache, a memoryview whose first
    stride is one block slot; kvtier stores each slot's bytes as they are
    (one chunk a block, in a namespace of the model and the slot size), so
    whatever vLLM's slot layout, a load gives back the very bytes stored.
    Stores and loads are the store's asynchronous puts and gets straight
    from and into the slots (no staging copy); get_finished polls them.
    Every method runs in vLLM's scheduler process and returns at once.

    Extra arguments are kvtier configuration keys (`kvtier_config`, a YAML
    path, and any key of docs/CONFIG.md), as in the connector's
    extra_config.
    """

    def __init__(self, offloading_spec=None, primary_kv_view=None, tier_type="kvtier",
                 vllm_config=None, **settings):
        # vLLM's tier factory has passed either the offloading spec or the
        # vLLM config (its tiering interface is still moving): both work.
        try:
            super().__init__(offloading_spec, primary_kv_view, tier_type)
        except TypeError:
            super().__init__(vllm_config=vllm_config, primary_kv_view=primary_kv_view,
                             tier_type=tier_type)
        if primary_kv_view is None:
            raise kvtier.InvalidArgument(kvtier.EINVAL, "no primary_kv_view")
        view = primary_kv_view if isinstance(primary_kv_view, memoryview) \
            else memoryview(primary_kv_view)
        self._slot = int(view.strides[0])
        self._n_slots = int(view.shape[0])
        self._flat = view.cast("B") if view.ndim > 1 or view.format != "B" else view
        self._extra = dict(settings)
        self._store = _acquire_store(self._extra, writer=True)
        # The slot as an opaque byte string: a layout of one layer of
        # int8 "tokens" of 64 bytes whose payload is exactly the slot.
        if self._slot % 64:
            raise kvtier.LayoutError(kvtier.ENOTFOUND - 12,
                                     "a primary slot of %d bytes is not a multiple of 64" %
                                     self._slot)
        n = self._slot // 64
        lay = kvtier.Layout(1, 1, 64, "int8", kv_planes=1, block_size=n, chunk_tokens=n)
        vc = vllm_config or getattr(offloading_spec, "vllm_config", None)
        model = getattr(getattr(vc, "model_config", None), "model", None) or \
            self._extra.get("model", "vllm")
        self._ns = self._store.namespace("%s#offload-slot" % model, lay,
                                         tenant=self._extra.get("tenant"))
        self._jobs = {}  # job id -> [ops, keep]

    def _keys(self, keys):
        return [self._ns.key_from_engine_hash(bytes(k)) for k in keys]

    def _slot_view(self, bid):
        bid = int(bid)
        if not 0 <= bid < self._n_slots:
            raise kvtier.InvalidArgument(kvtier.EINVAL, "slot %d of %d" % (bid, self._n_slots))
        return self._flat[bid * self._slot:(bid + 1) * self._slot]

    def lookup(self, key, req_context=None):
        hit = self._store.exists(self._ns, self._keys([key])[0])
        if LookupResult is not None:
            return LookupResult.HIT if hit else LookupResult.MISS
        return hit

    def submit_store(self, job_metadata):
        ops = []
        for k, bid in zip(self._keys(job_metadata.keys), job_metadata.block_ids):
            if not self._store.exists(self._ns, k):
                ops.append(self._store.put_async(self._ns, k, self._slot_view(bid)))
        self._jobs[job_metadata.job_id] = ops

    def submit_load(self, job_metadata):
        ops = []
        for k, bid in zip(self._keys(job_metadata.keys), job_metadata.block_ids):
            ops.append(self._store.get_async(self._ns, k, self._slot_view(bid)))
        self._jobs[job_metadata.job_id] = ops

    def get_finished(self):
        done = []
        for job_id, ops in list(self._jobs.items()):
            if not all(op.done for op in ops):
                continue
            ok = True
            for op in ops:
                try:
                    op.wait()
                except kvtier.Exists:
                    pass  # another writer stored it first: it is there
                except kvtier.NotFound:
                    ok = False  # evicted since the lookup: vLLM recomputes
                except kvtier.Error as e:
                    log.warning("kvtier: offload job %s: %s", job_id, e)
                    ok = False
                op.close()
            del self._jobs[job_id]
            done.append(JobResult(job_id=job_id, success=ok))
        return done

    # vLLM renamed get_finished to get_finished_jobs; both are served.
    get_finished_jobs = get_finished

    def touch(self, keys, req_context=None):
        return

    def drain_jobs(self):
        for ops in self._jobs.values():
            for op in ops:
                try:
                    op.wait()
                except kvtier.Error:
                    pass

    def shutdown(self):
        self.drain_jobs()
        for ops in self._jobs.values():
            for op in ops:
                op.close()
        self._jobs = {}
        if self._store is not None:
            st, self._store = self._store, None
            _release_store(self._extra, st)


try:  # vLLM's tier factory, where it has one, knows the type "kvtier"
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    try:
        SecondaryTierFactory.register_tier("kvtier", __name__, "KvtierSecondaryTier")
    except ValueError:
        pass  # registered already (a reload)
except ImportError:
    pass
