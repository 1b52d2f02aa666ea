"""kvtier as a vLLM KV connector (vLLM v1's KVConnectorBase_V1).

Enabled with

    vllm serve MODEL --kv-transfer-config '{"kv_connector":"KvtierConnector",
        "kv_role":"kv_both",
        "kv_connector_extra_config":{"kvtier_config":"/etc/kvtier.yaml"}}'

(the name is registered by kvtier's vLLM plugin, kvtier.vllm.register;
docs/PYTHON.md lists the extra_config keys).

Where the chunks live.  Both halves of the connector are clients of the
node's store, kvtierd, through its shared-memory local protocol: the
scheduler's lookup sees what every worker saved, from the daemon's memory
in microseconds, and a worker's load borrows the daemon's pages and
scatters them into vLLM's blocks.  The configuration names the node's
daemon (`daemon: unix:///run/kvtier/kvtierd.sock`); when it names none, the
first connector of the engine starts one for it (the wheel's kvtierd, over
the configuration's tiers, gone when the engine's process is), so one flag
still works.

The scheduler half answers how many prompt tokens the store holds beyond
vLLM's own prefix cache and plans, per step, which chunks each worker
loads and saves.  A load starts in the chunk that holds vLLM's own hit and
writes only the blocks past it (the blocks vLLM holds are named
kvtier.NO_BLOCK: shared, immutable, possibly being read).  The worker half
registers the step's loads before the forward pass and waits for each
layer just before its attention; saves are gathered layer by layer as
attention writes each layer and go on in the background past the step:
a finished request whose chunks are still being saved keeps its blocks
(request_finished -> delay) until the worker reports the save done.

Chunks are named by vLLM's own block hashes (request.block_hashes, the
sha256_cbor chain kvtier reproduces bit for bit, at vLLM's hash block
size): chunk i's key is the hash of its last hash block wrapped in the
namespace (model, revision, layout, ranks, tenant), so the hashes alone
never name stored bytes and another model's, layout's or tenant's chunks
are never served.

Importing this module needs vLLM (>= MIN_VLLM in kvtier/vllm/__init__.py):
an older one, or none, is an ImportError that says which version is
needed, raised when vLLM's factory loads the connector at the engine's
start.
"""

import collections
import contextlib
import fcntl
import itertools
import logging
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
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

from vllm.distributed.kv_events import BlockStored, KVConnectorKVEvents  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: E402
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

__all__ = ["KvtierConnector", "KvtierConnectorMetadata", "KVConnectorRole"]

# extra_config keys the adapter reads itself; every other key is a kvtier
# configuration key (docs/CONFIG.md), set on top of kvtier_config's file.
ADAPTER_KEYS = ("kvtier_config", "chunk_size", "kv_cache_layout", "load_deadline_ms", "tenant",
                "model", "save_decode", "connector_threads", "durability",
                "daemon_start_timeout_s", "name_chunks")

# The medium kvtier's BlockStored events name: a save lands in the node
# daemon's DRAM tier first (its lower tiers copy it from there).
MEDIUM = "DRAM"


# --- the node's store -------------------------------------------------------------------

def _config_of(extra):
    """The kvtier configuration: kvtier_config's file, then the extra keys,
    then KVTIER_* from the environment.  A bad value is a kvtier.ConfigError
    naming the key (and fails vLLM's start)."""
    path = extra.get("kvtier_config")
    cfg = kvtier.Config.load(path) if path else kvtier.Config()
    try:
        for k, v in extra.items():
            if k not in ADAPTER_KEYS:
                cfg.set(k, v)
        cfg.apply_env()
    except BaseException:
        cfg.close()
        raise
    return cfg


def _kvtierd():
    """The kvtierd to start: $KVTIER_KVTIERD (a build under test), else the
    wheel's own, else the one on PATH."""
    from .. import _programs
    for cand in (os.environ.get("KVTIER_KVTIERD"), _programs.program("kvtierd"),
                 shutil.which("kvtierd")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise kvtier.ConfigError(kvtier.ENOTFOUND - 14,
                             "kvtier.vllm: no kvtierd to start (%s is missing; install the "
                             "kvtier wheel, or name a running one with the `daemon` key)" %
                             _programs.program("kvtierd"))


def _reachable(sock):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(sock)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _sweep_runs(base):
    """Remove the run folders (socket, lock, log) of this user's engines
    that are gone: no engine holds the lock, no daemon answers, and a
    minute has passed since the folder last changed."""
    import glob
    for d in glob.glob(os.path.join(base, "kvtier-vllm-*-%d" % os.getuid())):
        try:
            if time.time() - os.stat(d).st_mtime < 60:
                continue
            with open(os.path.join(d, "lock"), "a") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if not _reachable(os.path.join(d, "kvtierd.sock")):
                    shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue  # held, or gone already


@contextlib.contextmanager
def _unpinned():
    """The calling thread free to run on every CPU for the while, so that a
    process it starts inherits that rather than its own pin.  A worker of
    vLLM's CPU backend is pinned to the cores of its OpenMP threads, which
    spin between kernels: a kvtierd started from it shared that core, and on
    a 2-core machine half of the scheduler's lookups through it took 0.4 s
    instead of 0.3 ms (TTFT of a 1k-token prefix from NVMe 0.45-0.6 s
    against 0.05-0.06 s with the daemon unpinned)."""
    try:
        mask = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        yield
        return
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except OSError:
        pass
    try:
        yield
    finally:
        try:
            os.sched_setaffinity(0, mask)
        except OSError:
            pass


def _start_daemon(run, sock, extra, owner, timeout_s):
    """Start the engine's kvtierd on `sock` unless one already serves there
    (another process of the engine started it): under a lock file, so that
    the engine's workers and scheduler start one between them."""
    _sweep_runs(os.path.dirname(run))
    os.makedirs(run, mode=0o700, exist_ok=True)
    with open(os.path.join(run, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _reachable(sock):
            return
        if os.path.exists(sock):
            os.unlink(sock)  # a daemon of this engine that died
        args = [_kvtierd(), "--port", "0", "--local", sock, "--owner-pid", str(owner)]
        if extra.get("kvtier_config"):
            args += ["--config", str(extra["kvtier_config"])]
        for k, v in extra.items():
            if k not in ADAPTER_KEYS:
                args += ["--set", "%s=%s" % (k, v)]
        logpath = os.path.join(run, "kvtierd.log")
        # Not the engine's preloads (vLLM's CPU backend puts tcmalloc and
        # libgomp in LD_PRELOAD for its processes), and not its CPU pin.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        with open(logpath, "ab") as logf, _unpinned():
            p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                 start_new_session=True, close_fds=True, env=env)
        t_end = time.monotonic() + timeout_s
        while not _reachable(sock):
            if p.poll() is not None or time.monotonic() > t_end:
                if p.poll() is None:
                    p.kill()
                with open(logpath, "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace").strip()
                raise kvtier.ConfigError(
                    kvtier.ENOTFOUND - 14,
                    "kvtier.vllm: the engine's kvtierd did not start (%s): %s" %
                    (" ".join(args), tail or "no output"))
            time.sleep(0.02)
        log.info("kvtier: started kvtierd (pid %d) for this engine on %s; its log: %s",
                 p.pid, sock, logpath)


_nodes = {}
_nodes_lock = threading.Lock()


def _node_socket(extra, engine_id):
    """(socket path, run dir of an embedded daemon or None)."""
    cfg = _config_of(extra)  # every key checked here, at the engine's start
    try:
        named = cfg.daemon
    finally:
        cfg.close()
    if named:
        return named, None
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    run = os.path.join(base, "kvtier-vllm-%s-%d" % (engine_id, os.getuid()))
    return os.path.join(run, "kvtierd.sock"), run


def _acquire_store(extra, engine_id):
    """This process's client of the engine's kvtierd, shared by the
    connectors of one configuration in it (vLLM's single-process executor
    runs the scheduler and the worker in one process)."""
    key = (engine_id, repr(sorted((k, str(v)) for k, v in extra.items())))
    with _nodes_lock:
        ent = _nodes.get(key)
        if ent is not None:
            ent[1] += 1
            return ent[0]
        sock, run = _node_socket(extra, engine_id)
        if run is not None:
            # The engine's process: the parent of a worker process, or this
            # one when the worker runs in it.
            owner = os.getppid() if multiprocessing.parent_process() else os.getpid()
            _start_daemon(run, sock, extra, owner,
                          float(extra.get("daemon_start_timeout_s", 60)))
        cfg = _config_of(extra)
        try:
            cfg.set("daemon", "unix://" + sock)
            st = kvtier.Store(cfg)
        finally:
            cfg.close()
        _nodes[key] = [st, 1]
        return st


def _release_store(st):
    with _nodes_lock:
        for key, ent in list(_nodes.items()):
            if ent[0] is st:
                ent[1] -= 1
                if ent[1] > 0:
                    return
                del _nodes[key]
                break
    st.close()


# --- the namespace, from vLLM's configuration -------------------------------------------

def _cache_dtype(vllm_config, torch_dtype):
    cd = str(getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", "auto"))
    if cd.startswith("fp8"):
        return "fp8_e5m2" if "e5m2" in cd else "fp8_e4m3"
    return str(torch_dtype)


def _layout_of(vllm_config, kv_cache_config, chunk_tokens):
    """kvtier's layout of one chunk from vLLM's KV cache spec: one group of
    uniform attention layers.  A hybrid model (several KV cache groups:
    sliding-window, Mamba or indexer layers beside full attention) is
    refused when the connector is created, naming the groups."""
    groups = getattr(kv_cache_config, "kv_cache_groups", None) or []
    if len(groups) != 1:
        kinds = ", ".join(type(g.kv_cache_spec).__name__ for g in groups) or "none"
        raise kvtier.NotSupported(
            kvtier.ENOTFOUND - 18,
            "kvtier.vllm: %d KV cache groups (%s): kvtier's connector stores the KV of one "
            "group of attention layers; a hybrid model runs without it" % (len(groups), kinds))
    g = groups[0]
    spec = g.kv_cache_spec
    if not hasattr(spec, "num_kv_heads") or not hasattr(spec, "head_size"):
        raise kvtier.NotSupported(kvtier.ENOTFOUND - 18,
                                  "kvtier.vllm: a KV cache spec of %s has no attention "
                                  "heads to store" % type(spec).__name__)
    mla = "MLA" in type(spec).__name__ or bool(getattr(spec, "use_mla", False))
    return kvtier.Layout(len(g.layer_names), 1 if mla else spec.num_kv_heads, spec.head_size,
                         _cache_dtype(vllm_config, spec.dtype), kv_planes=1 if mla else 2,
                         block_size=spec.block_size, chunk_tokens=chunk_tokens), mla, \
        list(g.layer_names)


def _hash_block_size(vllm_config, kv_cache_config, block_size):
    """The tokens per entry of request.block_hashes: vLLM hashes at its own
    hash block size, which with several KV cache groups may differ from the
    kernel's block size."""
    try:
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
        return int(resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)[1])
    except (ImportError, AttributeError, TypeError):
        return block_size


def _ranks(vllm_config):
    pc = vllm_config.parallel_config
    return (getattr(pc, "tensor_parallel_size", 1) or 1,
            getattr(pc, "pipeline_parallel_size", 1) or 1)


def _worker_ranks():
    from vllm.distributed.parallel_state import get_pp_group, get_tensor_model_parallel_rank
    return get_tensor_model_parallel_rank(), get_pp_group().rank_in_group


# --- per-step metadata ------------------------------------------------------------------

@dataclass
class LoadSpec:
    """One request's load this step: the chunks named by `hashes` (vLLM's
    hash of each chunk's last hash block; each worker wraps them in its own
    rank's namespace) into block_ids (kvtier.NO_BLOCK for the blocks vLLM
    holds itself), n_tokens tokens from the first chunk's start."""
    req_id: str
    hashes: list
    block_ids: list
    n_tokens: int


@dataclass
class SaveSpec:
    """Chunks of one request to save this step (named as in LoadSpec), with
    their blocks; `events`, when vLLM publishes KV events: per chunk, the
    BlockStored fields the worker reports once the chunk is stored."""
    req_id: str
    hashes: list
    block_ids: list
    events: list = None


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    preempted: list = field(default_factory=list)


@dataclass
class _ReqState:
    request: object
    block_ids: list
    saved_chunks: int = 0   # chunks [0, saved_chunks) are saved, loaded or planned
    load: object = None     # (first chunk, chunks, end token, vLLM's own hit)
    save_planned: bool = False  # a SaveSpec went to the workers: they report its end


class KvtierKVEvents(KVConnectorKVEvents):
    """The BlockStored events of the chunks one step's workers stored, as
    vLLM carries connectors' events from the workers to the scheduler
    (concatenated across workers).  The scheduler counts them across steps
    (a rank's save may end a step after another's) and publishes an event
    once every rank has reported it."""

    def __init__(self, events=(), num_workers=1):
        self._events = list(events)
        self._workers = num_workers

    def add_events(self, events):
        self._events.extend(events)

    def aggregate(self):
        return self

    def increment_workers(self, count=1):
        self._workers += count

    def get_all_events(self):
        return list(self._events)

    def get_number_of_workers(self):
        return self._workers

    def clear_events(self):
        self._events = []


class KvtierConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector over the node's kvtier store."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = self._kv_transfer_config
        extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self._extra = extra
        self._engine_id = str(getattr(ktc, "engine_id", None) or "default")
        self._block_size = int(vllm_config.cache_config.block_size)
        self._chunk_tokens = int(extra.get("chunk_size", 256))
        if self._chunk_tokens % self._block_size:
            raise kvtier.InvalidArgument(
                kvtier.EINVAL, "kvtier.vllm: chunk_size %d is not a multiple of vLLM's "
                "block_size %d" % (self._chunk_tokens, self._block_size))
        self._bpc = self._chunk_tokens // self._block_size
        self._hash_bs = _hash_block_size(vllm_config, kv_cache_config, self._block_size)
        if self._chunk_tokens % self._hash_bs:
            raise kvtier.InvalidArgument(
                kvtier.EINVAL, "kvtier.vllm: chunk_size %d is not a multiple of vLLM's hash "
                "block size %d" % (self._chunk_tokens, self._hash_bs))
        self._hpc = self._chunk_tokens // self._hash_bs  # hashes per chunk
        self._deadline_ms = int(extra.get("load_deadline_ms", -1))
        self._save_decode = str(extra.get("save_decode", "false")).lower() == "true"
        # kv_producer only saves, kv_consumer only loads, kv_both does both.
        kv_role = getattr(ktc, "kv_role", "kv_both") or "kv_both"
        self._can_load = kv_role in ("kv_both", "kv_consumer")
        self._can_save = kv_role in ("kv_both", "kv_producer")
        kec = getattr(vllm_config, "kv_events_config", None)
        self._events_on = bool(kec and getattr(kec, "enable_kv_cache_events", False))
        # The store's own KV events name saved chunks by vLLM's block hashes
        # when vLLM publishes events (a router then indexes one kind of
        # hash), or when asked ("name_chunks": true).
        self._name_chunks = str(extra.get("name_chunks", self._events_on)).lower() == "true"
        self._layout, self._mla, self._layer_names = _layout_of(
            vllm_config, kv_cache_config, self._chunk_tokens)
        # The model's name in the namespace: the same weights served from
        # another path (another node's mount) must name the same chunks.
        served = getattr(vllm_config.model_config, "served_model_name", None)
        if isinstance(served, (list, tuple)):
            served = served[0] if served else None
        self._model = str(extra.get("model") or served or vllm_config.model_config.model)
        self._revision = getattr(vllm_config.model_config, "revision", None)
        self._tp_size, self._pp_size = _ranks(vllm_config)
        if getattr(ktc, "kv_load_failure_policy", "recompute") != "recompute" and \
                getattr(role, "name", "") == "SCHEDULER" and self._can_load:
            log.warning("kvtier: kv_load_failure_policy is %r: a chunk kvtier cannot load "
                        "(corrupt, its tier down) fails its request; with "
                        "\"kv_load_failure_policy\":\"recompute\" vLLM computes it instead",
                        ktc.kv_load_failure_policy)
        # Every kvtier setting is checked now, and the node's store reached:
        # a bad configuration fails vLLM's start with kvtier's message.
        self._store = _acquire_store(extra, self._engine_id)
        # scheduler side
        self._ns_ranks = None
        self._reqs = {}
        self._local = {}          # request id -> vLLM's own prefix hit, in tokens
        self._event_counts = collections.Counter()  # workers' BlockStored, until all report
        self._misses = {}         # request id -> why its first missing chunk missed
        self.miss_reasons = collections.Counter()  # reason -> requests (docs/WHY.md)
        # worker side
        self._conn = None
        self._ns = None
        self._layer_index = {n: i for i, n in enumerate(self._layer_names)}
        self._ids = itertools.count(1)
        self._loads = {}          # vLLM request id -> (kvtier request id, LoadSpec), this step
        self._step_saves = []     # kvtier request ids of this step's saves
        self._saving = {}         # kvtier request id -> (vLLM request id, SaveSpec)
        self._pending = {}        # vLLM request id -> saves in flight
        self._had_saves = set()   # vLLM requests that ever had a save
        self._finishing = set()   # finished vLLM requests waiting for their saves
        self._stored_events = []  # BlockStored of saves done, for vLLM's publisher
        self._cuda = False
        self._warned = {}
        self._failed_loads = set()  # blocks of loads that could not even start
        if getattr(role, "name", str(role)) == "WORKER":
            tp_rank, pp_rank = _worker_ranks()
            self._ns = self._namespace(tp_rank, pp_rank)

    # --- shared -----------------------------------------------------------------------

    def _namespace(self, tp_rank, pp_rank):
        return self._store.namespace(self._model, self._layout, revision=self._revision,
                                     tp_rank=tp_rank, tp_size=self._tp_size, pp_rank=pp_rank,
                                     pp_size=self._pp_size, tenant=self._extra.get("tenant"),
                                     rank_shared=self._mla)

    def _chunk_hash(self, block_hashes, i):
        """vLLM's hash of chunk i's last hash block: the chunk's name."""
        return block_hashes[(i + 1) * self._hpc - 1]

    def _warn_once(self, what, fmt, *args):
        """A warning per kind of failure and minute, not per request."""
        now = time.monotonic()
        if now - self._warned.get(what, -1e9) >= 60:
            self._warned[what] = now
            log.warning(fmt, *args)

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        # Loads are waited for and saves queued per layer, around each
        # layer's attention: full CUDA graphs would skip those hooks.
        return True

    # --- scheduler side ---------------------------------------------------------------

    def _lookup_namespaces(self):
        """One namespace per rank: a prefix hits only as far as every rank's
        shard is present (MLA's latent is one copy for every rank)."""
        if self._ns_ranks is None:
            ranks = [(0, 0)] if self._mla else [
                (t, p) for p in range(self._pp_size) for t in range(self._tp_size)]
            self._ns_ranks = [self._namespace(t, p) for t, p in ranks]
        return self._ns_ranks

    def _whole_chunks(self, request):
        n_prompt = len(request.prompt_token_ids or [])
        return min(len(request.block_hashes) // self._hpc, n_prompt // self._chunk_tokens)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens the store holds beyond vLLM's own prefix hit
        (num_computed_tokens), from the node daemon's memory and without
        side effects: (count, False), the load being layer-wise in the next
        forward pass rather than asynchronous."""
        self._local[request.request_id] = num_computed_tokens
        if not self._can_load:
            return 0, False
        n_chunks = self._whole_chunks(request)
        first = num_computed_tokens // self._chunk_tokens
        if n_chunks <= first:
            return 0, False
        hit = n_chunks - first
        hashes = request.block_hashes
        try:
            for ns in self._lookup_namespaces():
                keys = [ns.key_from_engine_hash(self._chunk_hash(hashes, i))
                        for i in range(first, first + hit)]
                got = self._store.lookup(ns, keys)
                if got < hit:
                    self._note_miss(request.request_id, ns, keys[got], first + got)
                hit = min(hit, got)
                if hit == 0:
                    return 0, False
        except kvtier.Error as e:
            # The node's store cannot answer (kvtierd stopped): a miss, and
            # vLLM computes the prompt itself.
            self._warn_once("lookup", "kvtier: lookup failed, treated as a miss: %s", e)
            return 0, False
        end = (first + hit) * self._chunk_tokens
        n_prompt = len(request.prompt_token_ids or [])
        if end >= n_prompt:
            end = n_prompt - 1  # vLLM computes at least one token to sample from
        n = end - num_computed_tokens
        return (n, False) if n > 0 else (0, False)

    def _note_miss(self, req_id, ns, key, chunk):
        """Why the prompt's chunk `chunk` (the first the store does not
        serve) missed (docs/WHY.md): kept for the request's
        kv_transfer_params and counted in miss_reasons."""
        try:
            why = self._store.why(ns, [key])[0]
        except kvtier.Error as e:
            why = {"reason": "?", "detail": str(e)}
        self._misses[req_id] = {"chunk": chunk, "reason": why["reason"],
                                "detail": why["detail"]}
        self.miss_reasons[why["reason"]] += 1

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        block_ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
        st = self._reqs.get(request.request_id)
        if st is None:
            st = self._reqs[request.request_id] = _ReqState(request, block_ids)
        else:
            st.block_ids = block_ids or st.block_ids
        local = self._local.pop(request.request_id, 0)  # vLLM's own hit
        # Chunks vLLM had cached whole were saved when they were computed,
        # and loaded ones are in the store: neither is saved again.
        st.saved_chunks = max(st.saved_chunks, local // self._chunk_tokens)
        if num_external_tokens > 0:
            first = local // self._chunk_tokens
            end = local + num_external_tokens
            n_chunks = -(-end // self._chunk_tokens) - first
            st.load = (first, n_chunks, end, local)
            # Every chunk the load reads is in the store, the last one too
            # when the load stops a token short of the prompt's end.
            st.saved_chunks = max(st.saved_chunks, first + n_chunks)

    def _chunk_events(self, req, first, last):
        """BlockStored of chunks [first, last) of req, as vLLM's own cache
        reports its blocks (every hash block, its tokens and parent)."""
        out = []
        hashes, tokens = req.block_hashes, req.all_token_ids
        lora = getattr(req, "lora_request", None)
        from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
        for i in range(first, last):
            lo, hi = i * self._hpc, (i + 1) * self._hpc
            out.append(dict(
                block_hashes=[maybe_convert_block_hash(h) for h in hashes[lo:hi]],
                parent_block_hash=maybe_convert_block_hash(hashes[lo - 1]) if lo else None,
                token_ids=list(tokens[lo * self._hash_bs:hi * self._hash_bs]),
                block_size=self._hash_bs,
                lora_id=lora.adapter_id if lora else None,
                lora_name=lora.name if lora else None))
        return out

    def _name(self, req, first, last):
        """Tell the store which of vLLM's blocks chunks [first, last) of req
        hold, so that its KV events (kvtierd's, every tier's) name them by
        vLLM's own hashes, as vLLM's events do (docs/EVENTS.md)."""
        for ev, i in zip(self._chunk_events(req, first, last), range(first, last)):
            for ns in self._lookup_namespaces():
                key = ns.key_from_engine_hash(self._chunk_hash(req.block_hashes, i))
                try:
                    self._store.name_chunk(key, ev["block_hashes"], ev["parent_block_hash"],
                                           ev["block_size"])
                except kvtier.Error as e:  # the events lose a name, the save goes on
                    self._warn_once("name", "kvtier: naming a chunk failed: %s", e)

    def build_connector_meta(self, scheduler_output):
        meta = KvtierConnectorMetadata()
        meta.preempted = list(getattr(scheduler_output, "preempted_req_ids", None) or ())
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
                first, n_chunks, end, local = st.load
                st.load = None
                ids = st.block_ids[first * self._bpc:-(-end // self._block_size)]
                # The blocks of the first chunk vLLM holds itself.
                own = local // self._block_size - first * self._bpc
                ids[:own] = [kvtier.NO_BLOCK] * own
                meta.loads.append(LoadSpec(
                    rid, [self._chunk_hash(hashes, i) for i in range(first, first + n_chunks)],
                    ids, end - first * self._chunk_tokens))
            # Chunks whose last token this step computes, up to the prompt
            # (and, with save_decode, the generated tokens).  Chunks the
            # store already holds (loaded ones, others' saves) are left out
            # by the worker's connector.
            limit = req.num_tokens if self._save_decode else len(req.prompt_token_ids or [])
            done = min(n_comp + sched.get(rid, 0), limit, len(hashes) * self._hash_bs)
            full = min(done // self._chunk_tokens, len(st.block_ids) // self._bpc)
            if self._can_save and full > st.saved_chunks:
                first = st.saved_chunks
                if self._name_chunks:
                    self._name(req, first, full)
                meta.saves.append(SaveSpec(
                    rid, [self._chunk_hash(hashes, i) for i in range(first, full)],
                    st.block_ids[first * self._bpc:full * self._bpc],
                    self._chunk_events(req, first, full) if self._events_on else None))
                st.saved_chunks = full
                st.save_planned = True
        return meta

    def update_connector_output(self, connector_output):
        ev = getattr(connector_output, "kv_cache_events", None)
        if isinstance(ev, KvtierKVEvents):
            self._event_counts.update(ev.get_all_events())

    def request_finished(self, request, block_ids):
        """(delay freeing the blocks, params): a request for which a save
        was planned keeps its blocks until the workers report its saves done
        (get_finished: the workers report exactly the requests whose
        metadata carried a save), so that no block is reused while a save
        still reads it."""
        st = self._reqs.pop(request.request_id, None)
        self._local.pop(request.request_id, None)
        miss = self._misses.pop(request.request_id, None)
        # Why the prompt's first missing chunk missed, in the request's
        # output (RequestOutput.kv_transfer_params["kvtier_miss"]).
        return (st is not None and st.save_planned), ({"kvtier_miss": miss} if miss else None)

    def take_events(self):
        """BlockStored of the chunks every rank has stored since the last
        call, for vLLM's KV event publisher."""
        ranks = 1 if self._mla else self._tp_size * self._pp_size
        done = [e for e, n in self._event_counts.items() if n >= ranks]
        for e in done:
            del self._event_counts[e]
        return done

    # --- worker side ------------------------------------------------------------------

    def _paged_of(self, tensors):
        """kvtier's description of vLLM's KV tensors, by the attention
        backend that allocated them (kv_cache_layout overrides)."""
        kind = self._extra.get("kv_cache_layout")
        backend = None
        if kind is None:
            try:
                from vllm.distributed.kv_transfer.kv_connector.utils import (
                    get_current_attn_backends)
                backend = get_current_attn_backends(self._vllm_config,
                                                    self._layer_names or None)[0].get_name()
            except Exception as e:  # noqa: BLE001 - any failure: go by the shape
                log.debug("kvtier: attention backend unknown (%s); going by the shape", e)
            t0 = tensors[0]
            if backend == "CPU_ATTN":
                kind = "cpu"
            elif backend and "MLA" in backend:
                kind = "mla"
            elif backend == "FLASHINFER":
                kind = "flashinfer"
            elif t0.dim() == 5 and t0.shape[0] == 2:
                kind = "flash_attn"
            elif t0.dim() == 3:
                kind = "mla"
            else:
                raise kvtier.LayoutError(
                    kvtier.ENOTFOUND - 12,
                    "kvtier.vllm: vLLM KV tensor of shape %s (attention backend %s) is no "
                    "layout kvtier knows; set kv_cache_layout to cpu, flash_attn, flashinfer "
                    "or mla" % (tuple(t0.shape), backend or "unknown"))
        makers = {"cpu": kvtier.paged_vllm_cpu, "flash_attn": kvtier.paged_flash_attn,
                  "flashinfer": kvtier.paged_flashinfer, "mla": kvtier.paged_mla}
        if kind not in makers:
            raise kvtier.InvalidArgument(kvtier.EINVAL, "kvtier.vllm: kv_cache_layout %r is not "
                                         "one of %s" % (kind, ", ".join(makers)))
        return makers[kind](tensors)

    def _open(self, paged):
        if self._conn is not None:
            raise kvtier.InvalidArgument(kvtier.EINVAL, "KV caches are already registered")
        self._cuda = str(paged.device).startswith("cuda")
        self._conn = kvtier.Connector(self._store, self._ns, paged,
                                      threads=int(self._extra.get("connector_threads", 0)),
                                      durability=self._extra.get("durability", "cached"))

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

    def handle_preemptions(self, kv_connector_metadata):
        """Before a preempted request's blocks are reused this step: its
        saves still reading them are finished first."""
        for rid in kv_connector_metadata.preempted:
            self._wait_saves_of(rid)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        conn = self._conn
        self._loads = {}
        self._step_saves = []
        for s in meta.saves:
            rid = next(self._ids)
            keys = [self._ns.key_from_engine_hash(h) for h in s.hashes]
            self._had_saves.add(s.req_id)
            try:
                n = conn.save_keys(rid, keys, s.block_ids)
            except kvtier.Error as e:
                # Nothing saved (the node's store cannot be reached): the
                # engine goes on; the chunks are computed again next time.
                self._warn_once("save", "kvtier: request %s: save not started: %s", s.req_id, e)
                continue
            if n > 0:
                self._step_saves.append(rid)
                self._saving[rid] = (s.req_id, s)
                self._pending[s.req_id] = self._pending.get(s.req_id, 0) + 1
            else:
                conn.end(rid)  # every chunk is in the store already
                self._report_stored(s, None)
        for ld in meta.loads:
            rid = next(self._ids)
            keys = [self._ns.key_from_engine_hash(h) for h in ld.hashes]
            try:
                conn.load_keys(rid, keys, ld.block_ids, ld.n_tokens, self._deadline_ms)
            except kvtier.Error as e:
                # Every block the load was to write is left to vLLM to
                # compute (get_block_ids_with_load_errors).
                self._warn_once("load", "kvtier: request %s: load not started: %s", ld.req_id, e)
                self._failed_loads.update(b for b in ld.block_ids if b != kvtier.NO_BLOCK)
                continue
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
        stream = None
        if self._cuda and self._step_saves:
            # The gather runs on kvtier's stream: it must not read the
            # blocks before this layer's attention (on vLLM's stream) has
            # written them.
            import torch
            stream = torch.cuda.current_stream()
        for rid in self._step_saves:
            self._conn.save_layer(rid, l, stream)
            stream = None  # once is enough

    def wait_for_save(self):
        # Layers the model never reported (none, normally) are queued now:
        # a chunk is published only whole.  The saves go on past the step;
        # get_finished collects them.
        for rid in self._step_saves:
            self._conn.save_layer(rid, None)
        self._step_saves = []
        self._collect()

    def _report_stored(self, spec, n_stored):
        if spec.events:
            for ev in spec.events:
                self._stored_events.append(BlockStored(medium=MEDIUM, **ev))

    def _collect(self):
        """Saves finished since the last call: their requests' counts, their
        events, and their kvtier requests ended."""
        for d in self._conn.finished():
            if d.what != "save":
                continue
            ent = self._saving.pop(d.req, None)
            if ent is None:
                continue
            req_id, spec = ent
            if d.status < 0 and d.status != kvtier.ENOTFOUND:
                log.warning("kvtier: request %s: a save stored %d of %d chunks: %s", req_id,
                            d.chunks, d.chunks + d.n_invalid, d.error)
            elif d.status >= 0:
                self._report_stored(spec, d.chunks)
            self._conn.end(d.req)
            n = self._pending.get(req_id, 1) - 1
            if n > 0:
                self._pending[req_id] = n
            else:
                self._pending.pop(req_id, None)

    def _wait_saves_of(self, req_id):
        for rid, (rq, _) in list(self._saving.items()):
            if rq == req_id:
                self._conn.wait(rid)
        self._collect()

    def get_finished(self, finished_req_ids):
        """(finished sending, finished receiving): the finished requests
        whose saves are all stored (the scheduler delayed freeing their
        blocks for them); loads finish within their step."""
        self._collect()
        for rid in finished_req_ids or ():
            if rid in self._had_saves:
                self._finishing.add(rid)
                self._had_saves.discard(rid)
        done = {rid for rid in self._finishing if rid not in self._pending}
        self._finishing -= done
        return (done or None), None

    def get_block_ids_with_load_errors(self):
        bad, self._failed_loads = self._failed_loads, set()
        for rid, ld in self._loads.values():
            self._conn.wait(rid)
            bad.update(self._conn.load_errors(rid))
            self._conn.end(rid)
        self._loads = {}
        return bad

    def get_kv_connector_kv_cache_events(self):
        if not self._stored_events:
            return None
        ev = KvtierKVEvents(self._stored_events)
        self._stored_events = []
        return ev

    def shutdown(self):
        if self._conn is not None:
            for rid in self._step_saves:
                self._conn.save_layer(rid, None)
            for rid in list(self._saving):
                try:
                    self._conn.wait(rid, 60000)
                except kvtier.Error as e:
                    log.warning("kvtier: a save still running at shutdown: %s", e)
            self._conn.close()
            self._conn = None
        if self._store is not None:
            st, self._store = self._store, None
            self._ns_ranks = None
            self._ns = None
            _release_store(st)
