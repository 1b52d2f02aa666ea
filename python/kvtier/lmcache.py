"""kvtier as LMCache's L2: the native connector interface of LMCache's
multiprocess mode, eventfd-driven (LMCache 0.5.6, the installed one, is
what this module is written and tested against).

LMCache's multiprocess server wraps a native storage connector (a pybind
C++ IStorageConnector such as its Redis, FS or Mooncake ones) in
NativeConnectorL2Adapter, which polls the connector's one eventfd from a
demux thread, calls drain_completions() and routes each completion by its
future id.  KvtierNativeConnector is that interface over a kvtier store:

    event_fd() -> int
    submit_batch_get(keys, memoryviews) -> future id
    submit_batch_set(keys, memoryviews) -> future id
    submit_batch_exists(keys) -> future id
    submit_batch_delete(keys) -> future id
    drain_completions() -> [(future_id, ok, error, per_key_bools or None)]
    close()

Submission never blocks: a batch is cut into tiles run by worker threads
(ctypes lets go of the GIL inside every kvtier call); the last tile of a
batch queues its completion and signals the eventfd once until the next
drain, as LMCache's ConnectorBase does.  Per-key results: get, True when
the buffer holds the object (a miss, a corrupt copy, an object of another
size are False, the batch still ok, the first reason in `error`); set,
True when stored or already there (first writer wins); exists, from the
tiers' in-memory indexes; delete, True when some tier held the key.

LMCache's server loads it through either of its two adapter types
(docs/LMCACHE.md has the whole command line):

    --l2-adapter '{"type": "plugin", "module_path": "kvtier.lmcache",
        "class_name": "KvtierL2Adapter",
        "adapter_params": {"config": "/etc/kvtier/kvtier.yaml"}}'
    --l2-adapter '{"type": "native_plugin", "module_path": "kvtier.lmcache",
        "class_name": "KvtierNativeConnector",
        "adapter_params": {"config": "/etc/kvtier/kvtier.yaml"}}'

"plugin" finds KvtierL2AdapterConfig by name (class_name + "Config"),
builds it from adapter_params and constructs KvtierL2Adapter, LMCache's
own NativeConnectorL2Adapter over this connector; "native_plugin" calls
KvtierNativeConnector(**adapter_params) and wraps it itself.  The two
classes exist only when LMCache imports; when it does not, the reason is
logged (a warning naming the ImportError) and named again by any use of
them.  Keys are the strings NativeConnectorL2Adapter makes of LMCache's
ObjectKeys (model@kv_rank@group@chunk_hash[@salt]), their SHA-256 wrapped
by the tenant's "lmcache" namespace; an object is stored under the
namespace of its byte size, so a get names the object's size by its buffer
and a buffer of another size never receives it.
"""

import hashlib
import logging
import os
import threading
from collections import deque

import kvtier

logger = logging.getLogger(__name__)

# The namespace keys are wrapped in, and the model id of every object's.
MODEL = "lmcache"
# A byte-blob layout holds any size: head_dim elements of one byte per
# "token", the remainder as scale bytes (kvt_layout's limits: head_dim up
# to 65536, chunk_tokens up to 2^20, so objects up to 64 GiB).
_BLOB_DIM = 65536

PARAMS = {
    "config": "path of the kvtier YAML configuration (default: $KVTIER_CONFIG, else "
              "kvtier's defaults; KVTIER_* variables apply on top)",
    "tenant": "tenant whose secret keys the objects (default: the default tenant)",
    "durability": "cached, crash_safe or power_safe: what a set must reach before its "
                  "completion (default: cached)",
    "num_workers": "worker threads (default: 4)",
}

_GET, _SET, _EXISTS, _DELETE = "get", "set", "exists", "delete"


def _blob_layout(n):
    if n <= 0:
        raise ValueError("kvtier.lmcache: an object of %d bytes" % n)
    dim = min(n, _BLOB_DIM)
    return kvtier.Layout(1, 1, dim, "int8", kv_planes=1, scale_bytes=n % dim,
                         block_size=n // dim, chunk_tokens=n // dim)


def _view(buf, i, writable):
    """A flat byte memoryview of buffer i (LMCache passes MemoryObj.byte_array)."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise ValueError("kvtier.lmcache: buffer %d is a %s, not a buffer" %
                         (i, type(buf).__name__))
    if not mv.contiguous:
        raise ValueError("kvtier.lmcache: buffer %d is not contiguous" % i)
    if writable and mv.readonly:
        raise ValueError("kvtier.lmcache: buffer %d of a get is read-only" % i)
    if mv.nbytes == 0:
        raise ValueError("kvtier.lmcache: buffer %d is empty" % i)
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


class _Batch:
    """One submitted batch: its per-key results, filled by its tiles."""

    __slots__ = ("fid", "op", "keys", "bufs", "results", "errors", "left", "lock")

    def __init__(self, fid, op, keys, bufs, tiles):
        self.fid = fid
        self.op = op
        self.keys = keys        # (LMCache's key string, kvtier key)
        self.bufs = bufs
        self.results = [False] * len(keys)
        self.errors = []
        self.left = tiles
        self.lock = threading.Lock()


class KvtierNativeConnector:
    """LMCache's native connector interface over a kvtier store (see the
    module's manual).  `config`: a kvtier.Config, a YAML path, or None;
    `store`: an open kvtier.Store to use instead (not closed by close())."""

    def __init__(self, config=None, tenant=None, durability="cached", num_workers=4,
                 store=None):
        if durability not in kvtier.DURABILITY:
            raise ValueError("kvtier.lmcache: durability %r is not cached, crash_safe or "
                             "power_safe" % (durability,))
        if not isinstance(num_workers, int) or not 1 <= num_workers <= 64:
            raise ValueError("kvtier.lmcache: num_workers %r is not 1..64" % (num_workers,))
        self.durability = durability
        self.tenant = tenant
        self._own_store = store is None
        if store is None:
            if config is None:
                config = os.environ.get("KVTIER_CONFIG")
            if isinstance(config, kvtier.Config):
                store = kvtier.Store(config)
            else:
                conf = kvtier.Config.load(config) if config else kvtier.Config()
                try:
                    conf.apply_env()
                    store = kvtier.Store(conf)
                finally:
                    conf.close()
        self.store = store
        self._key_ns = self._ns(1)
        self._nss = {}
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._tiles = deque()
        self._done = deque()
        self._signaled = False
        self._next_fid = 1
        self._stop = False
        self._workers = [threading.Thread(target=self._work, daemon=True,
                                          name="kvtier-lmcache-%d" % i)
                         for i in range(num_workers)]
        for t in self._workers:
            t.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- namespaces and keys -------------------------------------------------

    def _ns(self, n):
        return self.store.namespace(MODEL, _blob_layout(n), tenant=self.tenant)

    def _ns_of(self, n):
        ns = self._nss.get(n)
        if ns is None:
            ns = self._nss.setdefault(n, self._ns(n))
        return ns

    def _key(self, key):
        if not isinstance(key, str) or not key:
            raise ValueError("kvtier.lmcache: key %r is not a non-empty string" % (key,))
        # An engine hash is 1..64 bytes; LMCache's strings are longer.
        return self._key_ns.key_from_engine_hash(hashlib.sha256(key.encode("utf-8")).digest())

    # --- the interface ----------------------------------------------------------

    def event_fd(self):
        """The eventfd that becomes readable when completions are queued."""
        if self._efd < 0:
            raise RuntimeError("kvtier.lmcache: the connector is closed")
        return self._efd

    def submit_batch_get(self, keys, bufs):
        return self._submit(_GET, keys, bufs)

    def submit_batch_set(self, keys, bufs):
        return self._submit(_SET, keys, bufs)

    def submit_batch_exists(self, keys):
        return self._submit(_EXISTS, keys, None)

    def submit_batch_delete(self, keys):
        return self._submit(_DELETE, keys, None)

    def drain_completions(self):
        """Every completion queued since the last call, as (future_id, ok,
        error, per-key bools); resets the eventfd."""
        try:
            os.eventfd_read(self._efd)
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            out = list(self._done)
            self._done.clear()
            self._signaled = False
        return out

    def close(self):
        """Stop the workers, then close the eventfd and the store the
        connector opened.  Idempotent.  The set and delete tiles still
        queued are run first: LMCache's StorageManager.close() closes its
        L2 adapters before its L1, whose buffers they read, so a graceful
        stop of LMCache's server keeps every store it handed over.  Queued
        get and exists tiles are dropped.  Nothing completes after close()
        (LMCache stops its demux thread before it closes the connector)."""
        with self._lock:
            if self._stop:
                return
            self._stop = True
            self._tiles = deque(t for t in self._tiles if t[0].op in (_SET, _DELETE))
            self._cv.notify_all()
        for t in self._workers:
            t.join()
        os.close(self._efd)
        self._efd = -1
        if self._own_store:
            self.store.close()

    # --- submission and the workers ----------------------------------------------

    def _submit(self, op, keys, bufs):
        keys = list(keys)
        if not keys:
            raise ValueError("kvtier.lmcache: keys list is empty")
        ks = [self._key(k) for k in keys]
        views = None
        if bufs is not None:
            bufs = list(bufs)
            if len(bufs) != len(keys):
                raise ValueError("kvtier.lmcache: %d keys and %d buffers" %
                                 (len(keys), len(bufs)))
            views = [_view(b, i, op == _GET) for i, b in enumerate(bufs)]
            for v in views:
                self._ns_of(v.nbytes)
        n = len(keys)
        tiles = min(len(self._workers), n)
        size = (n + tiles - 1) // tiles
        tiles = (n + size - 1) // size
        with self._lock:
            if self._stop:
                raise RuntimeError("kvtier.lmcache: the connector is closed")
            fid = self._next_fid
            self._next_fid += 1
            b = _Batch(fid, op, list(zip(keys, ks)), views, tiles)
            for s in range(0, n, size):
                self._tiles.append((b, s, min(s + size, n)))
            self._cv.notify_all()
        return fid

    def _work(self):
        while True:
            with self._lock:
                while not self._tiles and not self._stop:
                    self._cv.wait()
                if not self._tiles:
                    return      # stopped, and what close() kept has run
                b, s, e = self._tiles.popleft()
            errors = []
            for i in range(s, e):
                try:
                    b.results[i] = self._one(b, i)
                except kvtier.Error as err:
                    # A get's miss is a result, not a failure; its reason
                    # (absent, or a copy that failed its checksums) is kept.
                    errors.append("key %s: %s" % (b.keys[i][0], err))
            with b.lock:
                b.errors.extend(errors)
                b.left -= 1
                last = b.left == 0
            if last:
                self._complete(b)

    def _one(self, b, i):
        name, key = b.keys[i]
        if b.op == _EXISTS:
            return self.store.exists(self._key_ns, key)
        if b.op == _DELETE:
            return self.store.delete(self._key_ns, key)
        buf = b.bufs[i]
        ns = self._nss[buf.nbytes]
        if b.op == _SET:
            self.store.put(ns, key, buf, self.durability)
        else:
            self.store.get(ns, key, buf)
        return True

    def _complete(self, b):
        err = b.errors[0] if b.errors else ""
        if len(b.errors) > 1:
            err += " (and %d more)" % (len(b.errors) - 1)
        # A get is ok when it ran, whatever its keys' results (LMCache reads
        # the per-key bools); a set when every key is stored; an exists or a
        # delete when no key failed other than by being absent.
        if b.op == _GET:
            ok = True
        elif b.op == _SET:
            ok = all(b.results)
        else:
            ok = not b.errors
        with self._lock:
            self._done.append((b.fid, ok, err, list(b.results)))
            signal = not self._signaled
            self._signaled = True
        if signal:
            os.eventfd_write(self._efd, 1)


# The error that kept LMCache's classes from importing, if one did.
_LMCACHE_IMPORT_ERROR = None

try:
    from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
    from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (
        NativeConnectorL2Adapter,
    )
except Exception as e:     # noqa: BLE001 - LMCache's import also probes the device
    # Not fatal: KvtierNativeConnector needs nothing of LMCache's (and is
    # what the "native_plugin" type loads); the two classes below are not
    # defined, and a use of them names this error again (__getattr__).  An
    # ImportError is the expected case (LMCache absent, or one of its
    # compiled modules not loading); anything else gets its traceback too.
    _LMCACHE_IMPORT_ERROR = "%s: %s" % (type(e).__name__, e)
    logger.warning("kvtier.lmcache: LMCache does not import, so KvtierL2Adapter and "
                   "KvtierL2AdapterConfig (LMCache's \"plugin\" L2 adapter type) are not "
                   "defined: %s", _LMCACHE_IMPORT_ERROR,
                   exc_info=not isinstance(e, ImportError))

    def __getattr__(name):
        if name in ("KvtierL2Adapter", "KvtierL2AdapterConfig"):
            raise AttributeError("kvtier.lmcache.%s needs LMCache, which did not import: %s"
                                 % (name, _LMCACHE_IMPORT_ERROR))
        raise AttributeError("module 'kvtier.lmcache' has no attribute %r" % (name,))
else:
    class KvtierL2AdapterConfig(L2AdapterConfigBase):
        """adapter_params of the "plugin" type: the keys of kvtier.lmcache.PARAMS
        (an unknown one is refused by name)."""

        def __init__(self, config=None, tenant=None, durability="cached", num_workers=4):
            self.config = config
            self.tenant = tenant
            self.durability = durability
            self.num_workers = num_workers

        @classmethod
        def from_dict(cls, d):
            if not isinstance(d, dict):
                raise ValueError("kvtier L2 adapter: adapter_params is a %s, not an object" %
                                 type(d).__name__)
            unknown = sorted(set(d) - set(PARAMS))
            if unknown:
                raise ValueError("kvtier L2 adapter: unknown parameter(s) %s; known: %s" %
                                 (", ".join(unknown), ", ".join(sorted(PARAMS))))
            for k in ("config", "tenant"):
                if d.get(k) is not None and not isinstance(d[k], str):
                    raise ValueError("kvtier L2 adapter: %s %r is not a string" % (k, d[k]))
            return cls(**d)

        @classmethod
        def help(cls):
            return "kvtier L2 adapter parameters:\n" + "\n".join(
                "- %s: %s" % kv for kv in sorted(PARAMS.items()))

    class KvtierL2Adapter(NativeConnectorL2Adapter):
        """LMCache's NativeConnectorL2Adapter over KvtierNativeConnector, for
        the "plugin" adapter type.  LMCache constructs it as
        KvtierL2Adapter(KvtierL2AdapterConfig.from_dict(adapter_params)[,
        l1_memory_desc=...]); a raw adapter_params dict is taken too.  The
        L1 memory descriptor is not needed: kvtier copies from and into the
        buffers it is handed."""

        def __init__(self, params=None, l1_memory_desc=None):
            if not isinstance(params, KvtierL2AdapterConfig):
                params = KvtierL2AdapterConfig.from_dict(dict(params or {}))
            native = KvtierNativeConnector(params.config, params.tenant, params.durability,
                                           params.num_workers)
            try:
                super().__init__(native, type_name="kvtier", extra_status={
                    "config": params.config, "tenant": params.tenant,
                    "durability": params.durability, "num_workers": params.num_workers})
            except BaseException:
                native.close()
                raise
