"""kvtier: KV-cache tiering for LLM inference, from Python.

A binding of libkvtier (include/kvtier.h is the manual of every call) over
ctypes: the configuration, the store and its tiers, namespaces and keys,
put/get of bytes, numpy arrays and torch tensors through their data
pointers (no copy on the Python side), asynchronous ops, and the engine
connector that moves paged KV blocks in and out of a store layer by layer.
docs/PYTHON.md is the guide.

Every failure of the library is raised as a kvtier.Error (a subclass per
class of error) whose text is kvt_errmsg()'s.  Handles (Store, Connector,
Op) close deterministically with `with` or close(), and on garbage
collection; a call on a closed handle raises kvtier.Closed.

The engines' integrations are subpackages and modules imported only when
used, so this package imports with no engine installed: kvtier.vllm
(vLLM's KV connector, registered by name through vLLM's plugin entry
point), kvtier.sglang (SGLang HiCache's storage backend), kvtier.lmcache
(LMCache's L2 adapter).
"""

import array
import ctypes
import threading
import weakref
from collections import namedtuple

from . import _lib
from ._lib import lib

__all__ = [
    "Error", "NotFound", "Exists", "InvalidArgument", "OutOfMemory", "Full", "TooBig",
    "Corrupt", "LayoutError", "ConfigError", "BufferTooSmall", "Again", "Timeout",
    "NotSupported", "TenantError", "Cancelled", "IOFailure", "Closed",
    "Config", "Store", "Layout", "Namespace", "ExtraKeys", "Key", "Op", "Connector",
    "PagedDesc", "Plane", "Done",
    "vllm_none_hash", "vllm_block_hash", "vllm_hash_u64", "dtype_size",
    "paged_flash_attn", "paged_flashinfer", "paged_vllm_cpu", "paged_mla", "paged_cross_layer",
    "paged_sglang_layer_first", "paged_sglang_page_first", "paged_sglang_mla_page_first",
]

# The package's version (the library's is checked equal at import).
__version__ = _lib.VERSION or _lib.LIB_VERSION

# --- errors ------------------------------------------------------------------


class Error(Exception):
    """A kvtier failure: .code is the library's negative code, .message
    kvt_errmsg()'s sentence, .name kvt_strerror()'s."""

    def __init__(self, code, message, name=None):
        self.code = code
        self.message = message
        self.name = name or _strerror(code)
        super().__init__("%s: %s" % (self.name, message)
                         if message and message != self.name else self.name)


class NotFound(Error, KeyError):
    def __str__(self):
        return Error.__str__(self)


class Exists(Error):
    pass


class InvalidArgument(Error, ValueError):
    pass


class OutOfMemory(Error, MemoryError):
    pass


class Full(Error):
    pass


class TooBig(Error):
    pass


class Corrupt(Error):
    """The bytes read are not a good object (magic, version, truncation,
    checksums, inconsistent header, another key's object)."""


class LayoutError(Error, ValueError):
    pass


class ConfigError(Error, ValueError):
    pass


class BufferTooSmall(Error, ValueError):
    pass


class Again(Error):
    pass


class Timeout(Error, TimeoutError):
    pass


class NotSupported(Error):
    pass


class TenantError(Error):
    pass


class Cancelled(Error):
    pass


class IOFailure(Error, OSError):
    """A medium's failure: .errno is the positive errno value."""

    def __init__(self, code, message, name=None):
        Error.__init__(self, code, message, name)
        self.errno = -code

    def __str__(self):
        return Error.__str__(self)


class Closed(Error):
    """A call on a handle after its close()."""


_E = _lib.ERR_BASE
_CLASSES = {
    _E - 1: NotFound, _E - 2: Exists, _E - 3: InvalidArgument, _E - 4: OutOfMemory,
    _E - 5: Full, _E - 6: TooBig, _E - 7: Corrupt, _E - 8: Corrupt, _E - 9: Corrupt,
    _E - 10: Corrupt, _E - 11: Corrupt, _E - 12: Corrupt, _E - 13: LayoutError,
    _E - 14: Corrupt, _E - 15: ConfigError, _E - 16: BufferTooSmall, _E - 17: Again,
    _E - 18: Timeout, _E - 19: NotSupported, _E - 20: TenantError, _E - 21: Cancelled,
}
ENOTFOUND, EEXIST, EINVAL, EAGAIN, ETIMEDOUT = _E - 1, _E - 2, _E - 3, _E - 17, _E - 18


def _strerror(code):
    return lib.kvt_strerror(code).decode("utf-8", "replace")


def _error(code, message=None):
    if message is None:
        message = lib.kvt_errmsg().decode("utf-8", "replace")
    cls = _CLASSES.get(code)
    if cls is None:
        cls = IOFailure if -4096 < code < 0 else Error
    return cls(code, message)


def _check(rc):
    """rc if it is not negative; else the error kvt_errmsg() describes."""
    if rc < 0:
        raise _error(rc)
    return rc


def _closed(what):
    return Closed(EINVAL, "%s is closed" % what, "closed")


def _bad(message):
    return InvalidArgument(EINVAL, message)


def _cstr(s, what):
    if s is None:
        return None
    if isinstance(s, bytes):
        b = s
    elif isinstance(s, str):
        b = s.encode("utf-8")
    else:
        raise _bad("%s must be a str, not %s" % (what, type(s).__name__))
    if b"\0" in b:
        raise _bad("%s contains a NUL byte" % what)
    return b


# --- buffers -------------------------------------------------------------------


def _is_torch(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _is_numpy(obj):
    return type(obj).__module__ == "numpy" and hasattr(obj, "__array_interface__")


def _buffer(obj, writable, what="buffer"):
    """(address, nbytes, owner) of `obj`'s memory, without a copy: bytes
    (read-only), bytearray, memoryview and other buffer objects, numpy
    arrays (C-contiguous) and torch tensors (contiguous, CPU).  `owner` is
    what must stay alive while the address is used."""
    if _is_torch(obj):
        if obj.device.type != "cpu":
            raise _bad("%s: a tensor on %s; put/get take host memory (the connector "
                       "takes device tensors)" % (what, obj.device))
        if not obj.is_contiguous():
            raise _bad("%s: tensor of shape %s and strides %s is not contiguous" %
                       (what, tuple(obj.shape), tuple(obj.stride())))
        return obj.data_ptr(), obj.numel() * obj.element_size(), obj
    if _is_numpy(obj):
        if not obj.flags["C_CONTIGUOUS"]:
            raise _bad("%s: array of shape %s and strides %s is not C-contiguous" %
                       (what, obj.shape, obj.strides))
        if writable and not obj.flags["WRITEABLE"]:
            raise _bad("%s: array is read-only" % what)
        return obj.ctypes.data, obj.nbytes, obj
    if isinstance(obj, bytes):
        if writable:
            raise _bad("%s: bytes are immutable; pass a bytearray, an array or a tensor"
                       % what)
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0, len(obj), obj
    try:
        mv = memoryview(obj)
    except TypeError:
        raise _bad("%s: %s is not a buffer, an array or a tensor" %
                   (what, type(obj).__name__))
    if not mv.contiguous:
        raise _bad("%s: memoryview is not contiguous" % what)
    if mv.readonly:
        if writable:
            raise _bad("%s: buffer is read-only" % what)
        # ctypes needs a writable buffer to take an address without a copy;
        # a read-only exporter other than bytes is read through numpy.
        import numpy
        arr = numpy.frombuffer(mv, dtype=numpy.uint8)
        return arr.ctypes.data, arr.nbytes, (arr, mv)
    n = mv.nbytes
    if n == 0:
        return 0, 0, mv
    c = (ctypes.c_char * n).from_buffer(mv.cast("B"))
    return ctypes.addressof(c), n, (c, mv)


def _u32s(seq, what="tokens"):
    """(ctypes pointer value, count, owner) of a sequence of uint32 ids: a
    list or tuple of ints, an array('I'), a numpy array or a torch tensor
    of integers (converted once when not uint32 already)."""
    if _is_torch(seq):
        seq = seq.detach().cpu().numpy()
    if _is_numpy(seq):
        import numpy
        if seq.ndim != 1:
            raise _bad("%s: a 1-d array is needed, not shape %s" % (what, seq.shape))
        if seq.dtype.kind not in "iu":
            raise _bad("%s: integer ids are needed, not %s" % (what, seq.dtype))
        if seq.size and (int(seq.min()) < 0 or int(seq.max()) > 0xFFFFFFFF):
            raise _bad("%s: an id outside 0..2^32-1" % what)
        a = numpy.ascontiguousarray(seq, dtype=numpy.uint32)
        return (a.ctypes.data if a.size else None), a.size, a
    if isinstance(seq, array.array) and seq.typecode == "I" and seq.itemsize == 4:
        a = seq
    else:
        try:
            a = array.array("I", seq)
        except (OverflowError, TypeError) as e:
            raise _bad("%s: %s (ids are integers 0..2^32-1)" % (what, e))
    if not len(a):
        return None, 0, a
    addr, _ = a.buffer_info()
    return addr, len(a), a


# --- keys ------------------------------------------------------------------------


class Key(bytes):
    """A 32-byte storage key.  str() is its lower-case hex."""

    def __new__(cls, b):
        if isinstance(b, str):
            try:
                b = bytes.fromhex(b)
            except ValueError:
                raise _bad("key: %r is not 64 hex digits" % b)
        b = bytes(b)
        if len(b) != _lib.KEY_BYTES:
            raise _bad("key: %d bytes, a key is 32" % len(b))
        return bytes.__new__(cls, b)

    def __str__(self):
        return self.hex()

    def __repr__(self):
        return "Key(%s)" % self.hex()

    def _c(self):
        k = _lib.kvt_key()
        ctypes.memmove(k.b, self, _lib.KEY_BYTES)
        return k


def _key(k):
    if isinstance(k, Key):
        return k._c()
    return Key(k)._c()


def _keys_array(keys):
    """A C array of kvt_key of `keys` (Keys or 32-byte strings)."""
    keys = list(keys)
    blob = b"".join(k if isinstance(k, Key) else Key(k) for k in keys)
    arr = (_lib.kvt_key * max(len(keys), 1))()
    if keys:
        ctypes.memmove(arr, blob, len(blob))
    return arr, len(keys)


def _keys_from(arr, n):
    raw = ctypes.string_at(arr, n * _lib.KEY_BYTES)
    return [Key(raw[i * 32:(i + 1) * 32]) for i in range(n)]


class ExtraKeys:
    """What besides the tokens names a chunk, as vLLM keys a block: the
    LoRA name, multimodal items overlapping it ((content hash, offset of
    the item's first token from the chunk's first token)), and the cache
    salt (first chunk only)."""

    def __init__(self, lora=None, mm=(), cache_salt=None):
        self.lora = lora
        self.mm = [(h, int(o)) for h, o in mm]
        self.cache_salt = cache_salt

    def _c(self):
        keep = []
        mm = None
        if self.mm:
            mm = (_lib.kvt_mm_hash * len(self.mm))()
            for i, (h, o) in enumerate(self.mm):
                hb = _cstr(h, "multimodal hash")
                keep.append(hb)
                mm[i].hash = hb
                mm[i].offset = o
        lora = _cstr(self.lora, "lora")
        salt = _cstr(self.cache_salt, "cache_salt")
        e = _lib.kvt_extra_keys(lora, mm, len(self.mm), salt)
        e._keep = (keep, mm, lora, salt)
        return e

    def __repr__(self):
        return "ExtraKeys(lora=%r, mm=%r, cache_salt=%r)" % (self.lora, self.mm,
                                                            self.cache_salt)


def _extra_struct(extra):
    if extra is None:
        return None, None
    if isinstance(extra, dict):
        extra = ExtraKeys(**extra)
    if not isinstance(extra, ExtraKeys):
        raise _bad("extra keys must be an ExtraKeys, a dict or None")
    s = extra._c()
    return ctypes.byref(s), s


def vllm_none_hash(seed=""):
    """vLLM's NONE_HASH for a PYTHONHASHSEED string (the parent of a
    prompt's first block)."""
    out = (ctypes.c_uint8 * 32)()
    lib.kvt_vllm_none_hash(_cstr(seed, "seed"), out)
    return bytes(out)


def vllm_block_hash(parent, tokens, extra=None, first_block=False):
    """vLLM's sha256_cbor block hash of one block, bit for bit: `parent` is
    the previous block's 32-byte hash (vllm_none_hash() for the first)."""
    parent = bytes(parent)
    if len(parent) != 32:
        raise _bad("parent: %d bytes, a block hash is 32" % len(parent))
    p, n, keep = _u32s(tokens)
    ep, es = _extra_struct(extra)
    out = (ctypes.c_uint8 * 32)()
    _check(lib.kvt_vllm_block_hash(parent, p, n, ep, 1 if first_block else 0, out))
    del keep, es
    return bytes(out)


def vllm_hash_u64(h):
    """The 64-bit integer vLLM publishes in KV events for a block hash."""
    h = bytes(h)
    if len(h) != 32:
        raise _bad("block hash: %d bytes, not 32" % len(h))
    return lib.kvt_vllm_hash_u64(h)


# --- layouts and namespaces ---------------------------------------------------------

DTYPES = {"f16": 1, "float16": 1, "half": 1, "bf16": 2, "bfloat16": 2, "f32": 3,
          "float32": 3, "float": 3, "fp8_e4m3": 4, "float8_e4m3fn": 4, "fp8": 4,
          "fp8_e5m2": 5, "float8_e5m2": 5, "int8": 6}


def _dtype_code(d):
    if isinstance(d, int):
        if lib.kvt_dtype_size(d) == 0:
            raise _bad("dtype %d is not a kvtier dtype" % d)
        return d
    name = str(d)
    for prefix in ("torch.", "numpy.", "<class 'numpy."):
        if name.startswith(prefix):
            name = name[len(prefix):].rstrip("'>")
    if name not in DTYPES:
        raise _bad("dtype %r is not one of %s" % (d, ", ".join(sorted(DTYPES))))
    return DTYPES[name]


def dtype_size(d):
    """Bytes of one element of a dtype (a name, a torch or numpy dtype)."""
    return lib.kvt_dtype_size(_dtype_code(d))


class Layout:
    """The shape of one chunk's KV (kvt_layout).  block_size and
    chunk_tokens may be left 0 for the namespace's defaults."""

    FIELDS = ("num_layers", "num_kv_heads", "head_dim", "dtype", "kv_planes", "scale_bytes",
              "block_size", "chunk_tokens")

    def __init__(self, num_layers, num_kv_heads, head_dim, dtype="bf16", kv_planes=2,
                 scale_bytes=0, block_size=0, chunk_tokens=0):
        self.num_layers = int(num_layers)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = int(head_dim)
        self.dtype = _dtype_code(dtype)
        self.kv_planes = int(kv_planes)
        self.scale_bytes = int(scale_bytes)
        self.block_size = int(block_size)
        self.chunk_tokens = int(chunk_tokens)

    @classmethod
    def preset(cls, name, **override):
        """A known model's layout by name ("llama3.1-8b", a Hugging Face id)."""
        p = lib.kvt_model_preset_find(_cstr(name, "model"))
        if not p:
            raise _bad("model %r is not a preset kvtier knows" % name)
        p = p.contents
        lay = cls(p.layers, p.kv_heads, p.head_dim)
        for k, v in override.items():
            if k not in cls.FIELDS:
                raise _bad("Layout has no field %r" % k)
            setattr(lay, k, _dtype_code(v) if k == "dtype" else int(v))
        return lay

    @classmethod
    def _from_c(cls, c):
        return cls(*(getattr(c, f) for f in cls.FIELDS))

    def _c(self):
        return _lib.kvt_layout(*(getattr(self, f) for f in self.FIELDS))

    @property
    def dtype_name(self):
        return lib.kvt_dtype_name(self.dtype).decode()

    @property
    def elem_size(self):
        return lib.kvt_dtype_size(self.dtype)

    def check(self):
        c = self._c()
        _check(lib.kvt_layout_check(ctypes.byref(c)))

    @property
    def layer_bytes(self):
        c = self._c()
        n = lib.kvt_layout_layer_bytes(ctypes.byref(c))
        if n == 0:
            self.check()
        return n

    @property
    def payload_bytes(self):
        c = self._c()
        n = lib.kvt_layout_payload_bytes(ctypes.byref(c))
        if n == 0:
            self.check()
        return n

    def __eq__(self, other):
        return isinstance(other, Layout) and all(
            getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    def __repr__(self):
        return "Layout(%s)" % ", ".join(
            "%s=%r" % (f, self.dtype_name if f == "dtype" else getattr(self, f))
            for f in self.FIELDS)


HASHES = {None: 0, "sha256": 1, "xxh3": 2}


def _ns_desc(model, layout, revision=None, tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
             lora=None, tenant=None, hash_scheme=None, rank_shared=False):
    if not isinstance(layout, Layout):
        raise _bad("layout must be a kvtier.Layout")
    if hash_scheme not in HASHES:
        raise _bad("hash_scheme %r is not sha256 or xxh3" % (hash_scheme,))
    strs = [_cstr(model, "model"), _cstr(revision, "revision"), _cstr(lora, "lora"),
            _cstr(tenant, "tenant")]
    d = _lib.kvt_ns_desc(strs[0], strs[1], layout._c(), int(tp_rank), int(tp_size),
                         int(pp_rank), int(pp_size), strs[2], strs[3], HASHES[hash_scheme],
                         1 if rank_shared else 0)
    return d, strs


class Namespace:
    """A resolved namespace (kvt_ns): plain data, shared freely between
    threads and connectors.  Made by Store.namespace or Config.namespace."""

    def __init__(self, c, desc_kw):
        self._ns = c
        self.desc = desc_kw

    @property
    def digest(self):
        return bytes(self._ns.digest)

    @property
    def layout(self):
        return Layout._from_c(self._ns.layout)

    @property
    def chunk_tokens(self):
        return self._ns.layout.chunk_tokens

    @property
    def payload_bytes(self):
        return lib.kvt_layout_payload_bytes(ctypes.byref(self._ns.layout))

    @property
    def layer_bytes(self):
        return lib.kvt_layout_layer_bytes(ctypes.byref(self._ns.layout))

    def _ref(self):
        return ctypes.byref(self._ns)

    def key_chain(self, tokens, extra=None):
        """Keys of every whole chunk of a prompt (the partial tail is not
        keyed)."""
        p, n, keep = _u32s(tokens)
        ep, es = _extra_struct(extra)
        count = _check(lib.kvt_key_chain(self._ref(), p, n, ep, None, 0))
        arr = (_lib.kvt_key * max(count, 1))()
        _check(lib.kvt_key_chain(self._ref(), p, n, ep, arr, count))
        del keep, es
        return _keys_from(arr, count)

    def key_chunk(self, tokens, parent=None, extra=None):
        """The key of one chunk of exactly chunk_tokens ids after `parent`."""
        p, n, keep = _u32s(tokens)
        ep, es = _extra_struct(extra)
        out = _lib.kvt_key()
        par = _key(parent) if parent is not None else None
        _check(lib.kvt_key_chunk(self._ref(), ctypes.byref(par) if par else None, p, n, ep,
                                 ctypes.byref(out)))
        del keep, es
        return Key(bytes(out.b))

    def key_from_engine_hash(self, h):
        """The storage key of a chunk whose last engine block has hash `h`
        (bytes: vLLM's 32-byte block hash; an int is taken as vLLM's 64-bit
        event form, big-endian)."""
        if isinstance(h, int):
            h = h.to_bytes(8, "big")
        h = bytes(h)
        out = _lib.kvt_key()
        _check(lib.kvt_key_from_engine_hash(self._ref(), h, len(h), ctypes.byref(out)))
        return Key(bytes(out.b))

    def keys_from_engine_hashes(self, hashes, blocks_per_chunk=1):
        """One key per whole chunk from a list of engine block hashes: the
        hash of each chunk's last block, wrapped in the namespace."""
        if blocks_per_chunk < 1:
            raise _bad("blocks_per_chunk must be >= 1")
        n = len(hashes) // blocks_per_chunk
        return [self.key_from_engine_hash(hashes[(i + 1) * blocks_per_chunk - 1])
                for i in range(n)]

    def __eq__(self, other):
        return isinstance(other, Namespace) and bytes(self._ns) == bytes(other._ns)

    def __repr__(self):
        return "Namespace(%s, %s)" % (self.desc.get("model"), self.digest.hex()[:16])


# --- configuration -----------------------------------------------------------------


class _Handle:
    """What every handle of the library shares: a `with` block and garbage
    collection close it (close() of its own class), and `closed` says
    whether it is."""

    _h = None

    @property
    def closed(self):
        return not self._h

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None):
            self.close()


class Config(_Handle):
    """A store's configuration (docs/CONFIG.md): Config() has every default,
    Config.load(path) reads YAML, Config.parse(text) the same from a
    string; set(key, value) sets one key as the YAML would."""

    def __init__(self, _handle=None, **settings):
        h = _handle if _handle is not None else lib.kvt_config_new()
        if not h:
            raise OutOfMemory(_E - 4, "out of memory")
        self._h = h
        for k, v in settings.items():
            self.set(k, v)

    @classmethod
    def load(cls, path):
        err = ctypes.c_int(0)
        h = lib.kvt_config_load(_cstr(str(path), "path"), ctypes.byref(err))
        if not h:
            raise _error(err.value)
        return cls(_handle=h)

    @classmethod
    def parse(cls, text, name="<string>"):
        b = _cstr(text, "yaml") if isinstance(text, str) else bytes(text)
        err = ctypes.c_int(0)
        h = lib.kvt_config_parse(b, len(b), _cstr(name, "name"), ctypes.byref(err))
        if not h:
            raise _error(err.value)
        return cls(_handle=h)

    def _handle(self):
        if not self._h:
            raise _closed("config")
        return self._h

    def set(self, key, value):
        if isinstance(value, bool):
            value = "true" if value else "false"
        _check(lib.kvt_config_set(self._handle(), _cstr(key, "key"),
                                  _cstr(str(value), "value")))
        return self

    @property
    def daemon(self):
        """The kvtierd socket path this configuration names (the `daemon`
        key), or None."""
        p = lib.kvt_config_daemon(self._handle())
        return p.decode() if p else None

    def apply_env(self):
        """Apply KVTIER_<KEY> variables of the environment."""
        _check(lib.kvt_config_apply_env(self._handle()))
        return self

    def namespace(self, model, layout, **kw):
        """Resolve a namespace against this configuration (no store)."""
        d, keep = _ns_desc(model, layout, **kw)
        ns = _lib.kvt_ns()
        _check(lib.kvt_config_ns(self._handle(), ctypes.byref(d), ctypes.byref(ns)))
        del keep
        return Namespace(ns, dict(kw, model=model))

    def close(self):
        h, self._h = self._h, None
        if h:
            lib.kvt_config_free(h)


# --- the store --------------------------------------------------------------------

DURABILITY = {"cached": 0, "crash_safe": 1, "crash": 1, "power_safe": 2, "power": 2}


def _durability(d):
    if isinstance(d, int) and d in (0, 1, 2):
        return d
    if d in DURABILITY:
        return DURABILITY[d]
    raise _bad("durability %r is not cached, crash_safe or power_safe" % (d,))


def _stats_dict(s):
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        if name in ("name", "last_write_error", "state"):
            v = v.decode("utf-8", "replace")
        elif name == "get_latency_log2_us":
            v = list(v)
        out[name] = v
    return out


class Store(_Handle):
    """A store over its configured tiers (kvt_store_open).

    Store(config) takes a Config, a path to a YAML file, or None (every
    default); keyword settings are set on a copy first:
    Store(local_disk="/mnt/nvme/kv", max_local_cpu_size="8GiB")."""

    def __init__(self, config=None, **settings):
        self._h = None
        self._children = weakref.WeakSet()
        self._lock = threading.Lock()
        own = None
        if config is None:
            own = cfg = Config()
        elif isinstance(config, Config):
            cfg = config
            if settings:
                raise _bad("settings with a Config object: set them on the Config")
        else:
            own = cfg = Config.load(config)
        try:
            for k, v in settings.items():
                cfg.set(k, v)
            err = ctypes.c_int(0)
            h = lib.kvt_store_open(cfg._handle(), ctypes.byref(err))
            if not h:
                raise _error(err.value)
            self._h = h
        finally:
            if own is not None:
                own.close()

    def _handle(self):
        h = self._h
        if not h:
            raise _closed("store")
        return h

    def _adopt(self, child):
        self._children.add(child)

    def close(self):
        """Close every connector and free every op made on the store, then
        the store (waiting for its background work)."""
        with self._lock:
            h, self._h = self._h, None
        if not h:
            return
        for c in list(self._children):
            c.close()
        lib.kvt_store_close(h)


    # namespaces
    def namespace(self, model, layout, **kw):
        """Resolve a namespace: model (and revision, lora), layout, ranks
        (tp_rank, tp_size, pp_rank, pp_size, rank_shared), tenant and
        hash_scheme."""
        d, keep = _ns_desc(model, layout, **kw)
        ns = _lib.kvt_ns()
        _check(lib.kvt_ns_init(self._handle(), ctypes.byref(d), ctypes.byref(ns)))
        del keep
        return Namespace(ns, dict(kw, model=model))

    # chunks
    def put(self, ns, key, data, durability="cached"):
        """Store one chunk's payload (bytes, a buffer, a numpy array or a
        torch tensor of exactly ns.payload_bytes).  True if stored, False if
        the key was already there (first writer wins)."""
        addr, n, keep = _buffer(data, False, "payload")
        k = _key(key)
        rc = lib.kvt_put(self._handle(), ns._ref(), ctypes.byref(k), addr, n,
                         _durability(durability))
        del keep
        if rc == EEXIST:
            return False
        _check(rc)
        return True

    def get(self, ns, key, out=None):
        """A chunk's payload: into `out` (a writable buffer, array or tensor;
        returns the byte count), or as a new bytearray."""
        k = _key(key)
        if out is None:
            out = bytearray(ns.payload_bytes)
            self.get(ns, k, out)
            return out
        addr, cap, keep = _buffer(out, True, "out")
        ln = ctypes.c_size_t(0)
        _check(lib.kvt_get(self._handle(), ns._ref(), ctypes.byref(k), addr, cap,
                           ctypes.byref(ln)))
        del keep
        return ln.value

    def get_layer(self, ns, key, layer, out=None):
        k = _key(key)
        if out is None:
            out = bytearray(ns.layer_bytes)
            self.get_layer(ns, k, layer, out)
            return out
        addr, cap, keep = _buffer(out, True, "out")
        _check(lib.kvt_get_layer(self._handle(), ns._ref(), ctypes.byref(k), int(layer),
                                 addr, cap))
        del keep
        return ns.layer_bytes

    def exists(self, ns, key):
        k = _key(key)
        return _check(lib.kvt_exists(self._handle(), ns._ref(), ctypes.byref(k))) == 1

    def delete(self, ns, key):
        """Remove a chunk from every tier; False if no tier held it."""
        k = _key(key)
        rc = lib.kvt_delete(self._handle(), ns._ref(), ctypes.byref(k))
        if rc == ENOTFOUND:
            return False
        _check(rc)
        return True

    def locate(self, ns, key):
        """The indices of the tiers holding `key` now."""
        k = _key(key)
        mask = ctypes.c_uint32(0)
        _check(lib.kvt_locate(self._handle(), ns._ref(), ctypes.byref(k), ctypes.byref(mask)))
        return [i for i in range(32) if mask.value >> i & 1]

    def pin(self, ns, key, pin=True):
        k = _key(key)
        _check(lib.kvt_pin(self._handle(), ns._ref(), ctypes.byref(k), 1 if pin else 0))

    def put_batch(self, ns, keys, payloads, durability="cached"):
        """Store many chunks; the per-chunk codes (0, or EEXIST...) as a list."""
        arr, n = _keys_array(keys)
        payloads = list(payloads)
        if len(payloads) != n:
            raise _bad("%d keys and %d payloads" % (n, len(payloads)))
        ptrs = (ctypes.c_void_p * max(n, 1))()
        keep = []
        for i, p in enumerate(payloads):
            addr, ln, o = _buffer(p, False, "payload %d" % i)
            if ln != ns.payload_bytes:
                raise LayoutError(_E - 13, "payload %d is %d bytes, the layout needs %d" %
                                  (i, ln, ns.payload_bytes))
            ptrs[i] = addr
            keep.append(o)
        res = (ctypes.c_int * max(n, 1))()
        _check(lib.kvt_put_batch(self._handle(), ns._ref(), arr, ptrs, n,
                                 _durability(durability), res))
        return list(res)[:n]

    def get_batch(self, ns, keys, outs):
        """Fetch many chunks into `outs` (one writable buffer each, every one
        of at least ns.payload_bytes); the per-chunk codes as a list."""
        arr, n = _keys_array(keys)
        outs = list(outs)
        if len(outs) != n:
            raise _bad("%d keys and %d buffers" % (n, len(outs)))
        ptrs = (ctypes.c_void_p * max(n, 1))()
        keep = []
        cap = None
        for i, b in enumerate(outs):
            addr, ln, o = _buffer(b, True, "buffer %d" % i)
            cap = ln if cap is None else min(cap, ln)
            ptrs[i] = addr
            keep.append(o)
        res = (ctypes.c_int * max(n, 1))()
        _check(lib.kvt_get_batch(self._handle(), ns._ref(), arr, ptrs, cap or 0, n, res))
        return list(res)[:n]

    # lookup
    def lookup(self, ns, keys, tiers=False):
        """How many leading keys are present (from memory; no side effect).
        With tiers=True: (n_hit, [tier index of each hit chunk])."""
        arr, n = _keys_array(keys)
        tier = (ctypes.c_uint8 * max(n, 1))()
        res = _lib.kvt_lookup_result(0, ctypes.cast(tier, ctypes.POINTER(ctypes.c_uint8)))
        hit = _check(lib.kvt_lookup(self._handle(), ns._ref(), arr, n, ctypes.byref(res)))
        return (hit, list(tier)[:hit]) if tiers else hit

    def lookup_tokens(self, ns, tokens, extra=None):
        """Hash a prompt and look its chain up: the leading whole chunks
        present."""
        p, n, keep = _u32s(tokens)
        ep, es = _extra_struct(extra)
        hit = _check(lib.kvt_lookup_tokens(self._handle(), ns._ref(), p, n, ep, None, 0,
                                           None))
        del keep, es
        return hit

    def why(self, ns, keys):
        """Why each key is or is not served (kvt_why): a list of dicts
        {reason, tier, when, detail}, reason one of kvt_why_name's."""
        arr, n = _keys_array(keys)
        out = (_lib.kvt_why_chunk * max(n, 1))()
        _check(lib.kvt_why(self._handle(), ns._ref(), arr, n, out))
        return [_why_dict(out[i]) for i in range(n)]

    def why_tokens(self, ns, tokens, extra=None):
        """kvt_why over a prompt's whole chunks, other namespaces of the
        tenant tried for the chunks no tier holds (kvt_why_tokens)."""
        p, n, keep = _u32s(tokens)
        ep, es = _extra_struct(extra)
        cap = max(n // max(ns.layout.chunk_tokens, 1), 1)
        out = (_lib.kvt_why_chunk * cap)()
        m = _check(lib.kvt_why_tokens(self._handle(), ns._ref(), p, n, ep, out, cap))
        del keep, es
        return [_why_dict(out[i]) for i in range(m)]

    def name_chunk(self, key, block_hashes, parent=None, block_size=0):
        """Chunk `key` holds the engine's blocks `block_hashes` (bytes of 32,
        or ints: vLLM's 64-bit form) after `parent`: the store's KV events
        name it by them (kvt_store_name_chunk)."""
        def raw(h):
            return int(h).to_bytes(8, "big") if isinstance(h, int) else bytes(h)
        hs = [raw(h) for h in block_hashes]
        if not hs or any(len(h) != len(hs[0]) for h in hs):
            raise _bad("name_chunk: block hashes must be all 32 bytes or all ints")
        p = raw(parent) if parent is not None else None
        if p is not None and len(p) != len(hs[0]):
            raise _bad("name_chunk: the parent is not of the blocks' kind")
        k = _key(key)
        _check(lib.kvt_store_name_chunk(self._handle(), ctypes.byref(k), b"".join(hs), len(hs),
                                        len(hs[0]), p, int(block_size)))

    def hot_save(self, path, max_keys=0):
        """Write the first tier's keys, most recently used first, to `path`
        (the hot list a warm start reads)."""
        _check(lib.kvt_store_hot_save(self._handle(), _cstr(str(path), "path"), int(max_keys)))

    def warm(self, path, budget_bytes=0, bytes_per_s=0):
        """Fill the first tier from the hot list at `path` (kvt_store_warm);
        its progress counters as a dict."""
        p = _lib.kvt_warm_progress()
        _check(lib.kvt_store_warm(self._handle(), _cstr(str(path), "path"), int(budget_bytes),
                                  int(bytes_per_s), ctypes.byref(p)))
        return {f: getattr(p, f) for f, _ in p._fields_ if f != "cancel"}

    def misses(self, reason, tier=-1, tenant=None):
        """Misses counted for `reason` (a name or code), tier and tenant."""
        code = WHY_REASONS.index(reason) if isinstance(reason, str) else int(reason)
        t = None if tenant is None else _cstr(tenant, "tenant")
        return lib.kvt_store_misses(self._handle(), t, code, int(tier))

    def lookup_worth(self, ns, keys, recompute_s):
        """How many leading chunks are worth loading rather than recomputing
        one chunk in `recompute_s` seconds, from the tiers' measured speeds."""
        arr, n = _keys_array(keys)
        tier = (ctypes.c_uint8 * max(n, 1))()
        res = _lib.kvt_lookup_result(0, ctypes.cast(tier, ctypes.POINTER(ctypes.c_uint8)))
        _check(lib.kvt_lookup(self._handle(), ns._ref(), arr, n, ctypes.byref(res)))
        return _check(lib.kvt_lookup_worth(self._handle(), ns._ref(), ctypes.byref(res),
                                           float(recompute_s)))

    # asynchronous ops
    def get_async(self, ns, key, out):
        """Start a get into `out` (kept alive by the op); an Op."""
        k = _key(key)
        addr, cap, keep = _buffer(out, True, "out")
        op = ctypes.c_void_p()
        _check(lib.kvt_get_async(self._handle(), ns._ref(), ctypes.byref(k), addr, cap,
                                 ctypes.byref(op)))
        return Op(self, op.value, keep)

    def put_async(self, ns, key, data, durability="cached"):
        k = _key(key)
        addr, n, keep = _buffer(data, False, "payload")
        op = ctypes.c_void_p()
        _check(lib.kvt_put_async(self._handle(), ns._ref(), ctypes.byref(k), addr, n,
                                 _durability(durability), ctypes.byref(op)))
        return Op(self, op.value, keep)

    def prefetch(self, ns, keys, deadline_ms=-1):
        """Bring the leading chunks into the first tier; the Op's result is
        how many leading chunks are there."""
        arr, n = _keys_array(keys)
        op = ctypes.c_void_p()
        _check(lib.kvt_prefetch(self._handle(), ns._ref(), arr, n, int(deadline_ms),
                                ctypes.byref(op)))
        return Op(self, op.value, None)

    # the store as a whole
    def flush(self, timeout_ms=-1):
        """Wait until the background copies queued so far have run."""
        _check(lib.kvt_store_flush(self._handle(), int(timeout_ms)))

    @property
    def tiers(self):
        return lib.kvt_store_tiers(self._handle())

    def stats(self, tier=None):
        """kvt_tier_stats of one tier as a dict, or a list of every tier's."""
        if tier is None:
            return [self.stats(i) for i in range(self.tiers)]
        s = _lib.kvt_tier_stats()
        _check(lib.kvt_store_stats(self._handle(), int(tier), ctypes.byref(s)))
        return _stats_dict(s)

    def events_stats(self):
        """The KV event publisher's counters (kvt_events_stats) as a dict."""
        s = _lib.kvt_events_stats()
        _check(lib.kvt_store_events_stats(self._handle(), ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in s._fields_}

    def connector(self, ns, paged, **kw):
        """Connector(self, ns, paged, **kw)."""
        return Connector(self, ns, paged, **kw)


WHY_REASONS = ("hit", "prefix", "never", "namespace", "evicted", "deleted", "corrupt",
               "expired", "deadline", "tier_down")


def _why_dict(c):
    return {"reason": WHY_REASONS[c.reason] if 0 <= c.reason < len(WHY_REASONS) else "?",
            "tier": c.tier, "when": c.when, "detail": c.detail.decode(errors="replace")}


class Op(_Handle):
    """An asynchronous get, put or prefetch.  wait() returns its result
    (what the synchronous call would) or raises its error; the op keeps its
    buffer alive until it is freed (close(), `with`, or GC)."""

    def __init__(self, store, handle, keep):
        self._store = store
        self._h = handle
        self._keep = keep
        store._adopt(self)

    def _handle(self):
        if not self._h:
            raise _closed("op")
        return self._h

    def _result(self, rc):
        if rc == EAGAIN:
            return None
        if rc < 0:
            raise _error(rc, lib.kvt_op_errmsg(self._h).decode("utf-8", "replace"))
        return rc

    @property
    def done(self):
        """Whether the op has completed (its result is then wait()'s)."""
        return lib.kvt_op_poll(self._handle()) != EAGAIN

    def poll(self):
        """None while in flight, else the result."""
        return self._result(lib.kvt_op_poll(self._handle()))

    def wait(self, timeout_ms=-1):
        rc = lib.kvt_op_wait(self._handle(), int(timeout_ms))
        if rc == ETIMEDOUT and timeout_ms >= 0 and lib.kvt_op_poll(self._h) == EAGAIN:
            raise Timeout(rc, "op still in flight after %d ms" % timeout_ms)
        return self._result(rc)

    @property
    def bytes(self):
        return lib.kvt_op_bytes(self._handle())

    def close(self):
        h, self._h = self._h, None
        if h:
            lib.kvt_op_free(h)
        self._keep = None


# --- paged layouts of engine memory ---------------------------------------------------


class Plane:
    """One plane (K, V or the MLA latent) of one layer: a base address and
    the byte strides of block, token, head and element.  Made from a tensor
    view with Plane.of(view)."""

    __slots__ = ("base", "block_stride", "token_stride", "head_stride", "elem_stride",
                 "shape", "elem_size", "device", "owner")

    def __init__(self, base, block_stride, token_stride, head_stride, elem_stride,
                 shape=None, elem_size=None, device="cpu", owner=None):
        self.base = int(base)
        self.block_stride = int(block_stride)
        self.token_stride = int(token_stride)
        self.head_stride = int(head_stride)
        self.elem_stride = int(elem_stride)
        self.shape = shape
        self.elem_size = elem_size
        self.device = device
        self.owner = owner

    @classmethod
    def of(cls, view, block_tokens=None):
        """A plane from a torch tensor (or numpy array) view of shape
        (blocks, block_tokens, heads, head_dim), any strides; a 3-d view
        (tokens, heads, head_dim) is cut into blocks of `block_tokens`."""
        if _is_torch(view):
            esz = view.element_size()
            strides = [s * esz for s in view.stride()]
            shape = list(view.shape)
            base = view.data_ptr()
            dev = view.device
            device = "cpu" if dev.type == "cpu" else "cuda:%d" % (dev.index or 0)
        elif _is_numpy(view):
            esz = view.itemsize
            strides = list(view.strides)
            shape = list(view.shape)
            base = view.ctypes.data
            device = "cpu"
        else:
            raise _bad("a plane is a torch tensor or a numpy array view, not %s" %
                       type(view).__name__)
        if len(shape) == 3:
            if not block_tokens or shape[0] % block_tokens:
                raise _bad("a 3-d plane (tokens, heads, head_dim) of %d tokens needs a "
                           "block_tokens that divides it (got %r)" % (shape[0], block_tokens))
            shape = [shape[0] // block_tokens, block_tokens] + shape[1:]
            strides = [strides[0] * block_tokens] + strides
        if len(shape) != 4:
            raise _bad("a plane view is (blocks, block_tokens, heads, head_dim), not "
                       "shape %s" % (tuple(shape),))
        if any(s < 0 for s in strides):
            raise _bad("negative strides are not supported")
        # A dimension of extent 1 may have any stride; kvtier wants 0 there.
        strides = [0 if n == 1 else s for n, s in zip(shape, strides)]
        return cls(base, strides[0], strides[1], strides[2], strides[3], tuple(shape), esz,
                   device, view)

    def _c(self):
        return _lib.kvt_paged_plane(self.base, self.block_stride, self.token_stride,
                                    self.head_stride, self.elem_stride)


class PagedDesc:
    """Where an engine's KV lives: per layer its planes (and scale pointer),
    or one layer's planes and a layer_stride for a tensor holding every
    layer.  Made by the paged_* functions below; it keeps the tensors
    alive."""

    def __init__(self, layers, layer_stride=0, scales=None, owners=()):
        self.layers = [tuple(l) for l in layers]
        self.layer_stride = int(layer_stride)
        self.scales = list(scales) if scales else None
        self.owners = list(owners)
        p0 = self.layers[0][0]
        self.num_blocks, self.block_tokens, self.heads, self.head_dim = p0.shape
        self.elem_size = p0.elem_size
        self.kv_planes = len(self.layers[0])
        self.device = p0.device
        for l in self.layers:
            for p in l:
                if p.shape != p0.shape or p.elem_size != p0.elem_size or p.device != p0.device:
                    raise _bad("every plane must have one shape, dtype and device: "
                               "%s %s vs %s %s" % (p.shape, p.device, p0.shape, p0.device))
        if self.scales and len(self.scales) != len(self.layers):
            raise _bad("%d scale pointers for %d layer descriptors" %
                       (len(self.scales), len(self.layers)))

    def _c(self):
        n = len(self.layers)
        arr = (_lib.kvt_paged_layer * n)()
        for i, l in enumerate(self.layers):
            for j, p in enumerate(l):
                arr[i].plane[j] = p._c()
            if self.scales:
                arr[i].scale = _scale_addr(self.scales[i])
        return arr

    def __repr__(self):
        return ("PagedDesc(%d layer descs, %d planes, %d blocks of %d tokens, %d heads x %d, "
                "%s)" % (len(self.layers), self.kv_planes, self.num_blocks, self.block_tokens,
                         self.heads, self.head_dim, self.device))


def _scale_addr(s):
    if s is None:
        return None
    if isinstance(s, int):
        return s
    addr, _, _ = _buffer(s, True, "scale")
    return addr


def _tlist(kv_caches):
    if isinstance(kv_caches, dict):
        return list(kv_caches.values())
    if _is_torch(kv_caches) or _is_numpy(kv_caches):
        return [kv_caches]
    return list(kv_caches)


def paged_flash_attn(kv_caches, scales=None):
    """vLLM's FlashAttention per-layer tensors of logical shape (2,
    num_blocks, block_size, kv_heads, head_size), NHD or HND (the latter a
    permuted view with its own strides): a list (or vLLM's dict of layer
    name -> tensor, in layer order)."""
    ts = _tlist(kv_caches)
    for t in ts:
        if t.dim() != 5 or t.shape[0] != 2:
            raise _bad("FlashAttention KV is (2, num_blocks, block_size, heads, head_size), "
                       "not %s" % (tuple(t.shape),))
    return PagedDesc([(Plane.of(t[0]), Plane.of(t[1])) for t in ts], scales=scales,
                     owners=ts)


def paged_flashinfer(kv_caches, scales=None):
    """FlashInfer's per-layer tensors (num_blocks, 2, block_size, kv_heads,
    head_size), NHD or HND."""
    ts = _tlist(kv_caches)
    for t in ts:
        if t.dim() != 5 or t.shape[1] != 2:
            raise _bad("FlashInfer KV is (num_blocks, 2, block_size, heads, head_size), "
                       "not %s" % (tuple(t.shape),))
    return PagedDesc([(Plane.of(t[:, 0]), Plane.of(t[:, 1])) for t in ts], scales=scales,
                     owners=ts)


def paged_vllm_cpu(kv_caches, scales=None):
    """vLLM's CPU attention backend: one fused tensor per layer, declared
    (num_blocks, kv_heads, block_size, 2 * head_size) and read by its kernels
    as (num_blocks, kv_heads, 2 * block_size, head_size): per block and head,
    block_size rows of K, then block_size rows of V ("HND")."""
    ts = _tlist(kv_caches)
    layers = []
    for t in ts:
        if t.dim() != 4 or t.shape[3] % 2:
            raise _bad("vLLM CPU KV is (num_blocks, kv_heads, block_size, 2 * head_size), "
                       "not %s" % (tuple(t.shape),))
        nb, heads, bs, two_hd = t.shape
        rows = t.view(nb, heads, 2 * bs, two_hd // 2)
        layers.append((Plane.of(rows[:, :, :bs].permute(0, 2, 1, 3)),
                       Plane.of(rows[:, :, bs:].permute(0, 2, 1, 3))))
    return PagedDesc(layers, scales=scales, owners=ts)


def paged_mla(kv_caches, scales=None):
    """MLA's per-layer latent cache (num_blocks, block_size, kv_lora_rank +
    rope_dim): one plane, one head."""
    ts = _tlist(kv_caches)
    for t in ts:
        if t.dim() != 3:
            raise _bad("MLA KV is (num_blocks, block_size, head_size), not %s" %
                       (tuple(t.shape),))
    return PagedDesc([(Plane.of(t.unsqueeze(2)),) for t in ts], scales=scales, owners=ts)


def paged_cross_layer(kv_cache, order="layers_first", mla=False, scale=None):
    """One tensor holding every layer (vLLM's cross-layer blocks):
    layers_first (num_layers, 2, num_blocks, block_size, heads, head_size)
    or blocks_first (num_blocks, num_layers, 2, block_size, heads,
    head_size); with mla=True the 2 (planes) and heads dimensions are
    absent.  `scale`: layer 0's scale bytes, the next layer's following."""
    t = kv_cache
    esz = t.element_size()
    if order == "layers_first":
        l0, lstride = t[0], t.stride(0)
        if mla:
            planes = (Plane.of(l0.unsqueeze(2)),)
        else:
            planes = (Plane.of(l0[0]), Plane.of(l0[1]))
    elif order == "blocks_first":
        l0, lstride = t[:, 0], t.stride(1)
        if mla:
            planes = (Plane.of(l0.unsqueeze(2)),)
        else:
            planes = (Plane.of(l0[:, 0]), Plane.of(l0[:, 1]))
    else:
        raise _bad("order %r is not layers_first or blocks_first" % (order,))
    d = PagedDesc([planes], layer_stride=lstride * esz,
                  scales=[scale] if scale is not None else None, owners=[t])
    d.num_layers = t.shape[0] if order == "layers_first" else t.shape[1]
    return d


def _sglang_pages(view, page_size):
    if view.shape[0] % page_size:
        raise _bad("host pool of %d tokens is not whole pages of %d" %
                   (view.shape[0], page_size))
    return Plane.of(view, block_tokens=page_size)


def paged_sglang_layer_first(kv_buffer, page_size):
    """SGLang's MHA host pool in layer_first: kv_buffer (2, layer_num, size,
    head_num, head_dim); a page of page_size tokens is a block."""
    t = kv_buffer
    if t.dim() != 5 or t.shape[0] != 2:
        raise _bad("layer_first host pool is (2, layers, size, heads, head_dim), not %s" %
                   (tuple(t.shape),))
    d = PagedDesc([(_sglang_pages(t[0, 0], page_size), _sglang_pages(t[1, 0], page_size))],
                  layer_stride=t.stride(1) * t.element_size(), owners=[t])
    d.num_layers = t.shape[1]
    return d


def paged_sglang_page_first(kv_buffer, page_size):
    """SGLang's MHA host pool in page_first: kv_buffer (2, size, layer_num,
    head_num, head_dim)."""
    t = kv_buffer
    if t.dim() != 5 or t.shape[0] != 2:
        raise _bad("page_first host pool is (2, size, layers, heads, head_dim), not %s" %
                   (tuple(t.shape),))
    d = PagedDesc([(_sglang_pages(t[0, :, 0], page_size),
                    _sglang_pages(t[1, :, 0], page_size))],
                  layer_stride=t.stride(2) * t.element_size(), owners=[t])
    d.num_layers = t.shape[2]
    return d


def paged_sglang_mla_page_first(kv_buffer, page_size):
    """SGLang's MLA host pool in page_first: kv_buffer (size, layer_num, 1,
    kv_cache_dim)."""
    t = kv_buffer
    if t.dim() != 4 or t.shape[2] != 1:
        raise _bad("MLA page_first host pool is (size, layers, 1, dim), not %s" %
                   (tuple(t.shape),))
    d = PagedDesc([(_sglang_pages(t[:, 0], page_size),)],
                  layer_stride=t.stride(1) * t.element_size(), owners=[t])
    d.num_layers = t.shape[1]
    return d


# --- the engine connector -----------------------------------------------------------

Done = namedtuple("Done", "req what status chunks n_invalid error")
LOAD, SAVE = 1, 2
ALL_LAYERS = 0xFFFFFFFF
# A load's block id for a block the engine holds already (KVT_CONN_NO_BLOCK):
# the load writes the chunk's other blocks only, and never reports it.
NO_BLOCK = 0xFFFFFFFF


class Connector(_Handle):
    """The engine connector (kvt_conn_*) of a namespace over a store and an
    engine's paged memory (a PagedDesc).  Requests are named by integers
    (0 .. 2^64-1).  Tensors described by `paged` are kept alive by it."""

    def __init__(self, store, ns, paged, threads=0, durability="cached", recompute_s=0.0,
                 block_tokens=None):
        if not isinstance(paged, PagedDesc):
            raise _bad("paged must be a PagedDesc (kvtier.paged_flash_attn(...), ...)")
        lay = ns.layout
        if paged.kv_planes != lay.kv_planes:
            raise LayoutError(_E - 13, "the engine memory has %d planes, the namespace %d" %
                              (paged.kv_planes, lay.kv_planes))
        if paged.heads != lay.num_kv_heads or paged.head_dim != lay.head_dim:
            raise LayoutError(_E - 13, "the engine memory holds %d heads x %d, the namespace "
                              "%d x %d" % (paged.heads, paged.head_dim, lay.num_kv_heads,
                                           lay.head_dim))
        if paged.elem_size != lay.elem_size:
            raise LayoutError(_E - 13, "the engine memory's elements are %d bytes, the "
                              "namespace's %s %d" % (paged.elem_size, lay.dtype_name,
                                                     lay.elem_size))
        n_desc = len(paged.layers)
        if n_desc not in (1, lay.num_layers) or (n_desc == 1 and lay.num_layers > 1 and
                                                not paged.layer_stride):
            raise LayoutError(_E - 13, "%d layer descriptors (and layer_stride %d) for a "
                              "namespace of %d layers" % (n_desc, paged.layer_stride,
                                                          lay.num_layers))
        if getattr(paged, "num_layers", lay.num_layers) != lay.num_layers:
            raise LayoutError(_E - 13, "the engine memory holds %d layers, the namespace %d" %
                              (paged.num_layers, lay.num_layers))
        self._h = None
        self._store = store
        self._ns = ns
        self.paged = paged
        self.num_layers = lay.num_layers
        self.chunk_tokens = lay.chunk_tokens
        self.block_tokens = block_tokens or paged.block_tokens
        self._layers = paged._c()
        mem, dev = 0, 0
        if paged.device != "cpu":
            mem, dev = 1, int(str(paged.device).split(":")[1])
        self._desc = _lib.kvt_conn_desc(
            ctypes.cast(self._layers, ctypes.POINTER(_lib.kvt_paged_layer)), n_desc,
            paged.layer_stride if n_desc == 1 else 0, paged.num_blocks, self.block_tokens,
            int(threads), _durability(durability), float(recompute_s), mem, dev)
        h = ctypes.c_void_p()
        _check(lib.kvt_conn_open(store._handle(), ns._ref(), ctypes.byref(self._desc),
                                 ctypes.byref(h)))
        self._h = h.value
        store._adopt(self)

    def _handle(self):
        h = self._h
        if not h:
            raise _closed("connector")
        return h

    def close(self):
        """Wait for every load and save in flight, then free the connector."""
        h, self._h = self._h, None
        if h:
            lib.kvt_conn_close(h)


    @staticmethod
    def _blocks(block_ids):
        return _u32s(block_ids, "block ids")

    # synchronous copies
    def gather(self, layer, block_ids, n_tokens, out):
        """Copy one layer of one chunk from the blocks into `out`."""
        bp, nb, keep = self._blocks(block_ids)
        addr, cap, k2 = _buffer(out, True, "out")
        _check(lib.kvt_conn_gather(self._handle(), int(layer), bp, nb, int(n_tokens), addr,
                                   cap))
        del keep, k2

    def scatter(self, layer, block_ids, n_tokens, data):
        """Copy one layer of one chunk from `data` into the blocks."""
        bp, nb, keep = self._blocks(block_ids)
        addr, ln, k2 = _buffer(data, False, "data")
        _check(lib.kvt_conn_scatter(self._handle(), int(layer), bp, nb, int(n_tokens), addr,
                                    ln))
        del keep, k2

    # per request
    def lookup(self, tokens, extra=None):
        """How many leading prompt tokens to load (whole chunks present; one
        fewer than the prompt on a full hit)."""
        p, n, keep = _u32s(tokens)
        ep, es = _extra_struct(extra)
        rc = _check(lib.kvt_conn_lookup(self._handle(), p, n, ep))
        del keep, es
        return rc

    def load(self, req, tokens, block_ids, n_load, extra=None, deadline_ms=-1):
        """Start loading the first n_load tokens into the request's blocks."""
        p, n, keep = _u32s(tokens)
        bp, nb, k2 = self._blocks(block_ids)
        ep, es = _extra_struct(extra)
        _check(lib.kvt_conn_load(self._handle(), int(req), p, n, ep, bp, nb, int(n_load),
                                 int(deadline_ms)))
        del keep, k2, es

    def load_keys(self, req, keys, block_ids, n_load, deadline_ms=-1):
        """load() with the chunks named by their keys (one per whole chunk,
        e.g. from engine block hashes) instead of the prompt's tokens."""
        if not _lib.has("kvt_conn_load_keys"):
            raise NotSupported(_E - 19, "%s has no kvt_conn_load_keys" % _lib.path)
        arr, nk = _keys_array(keys)
        bp, nb, k2 = self._blocks(block_ids)
        _check(lib.kvt_conn_load_keys(self._handle(), int(req), arr, nk, bp, nb, int(n_load),
                                      int(deadline_ms)))
        del k2

    def wait_layer(self, req, layer, timeout_ms=-1):
        """Wait for layer `layer` of the request's load; the count of its
        blocks known invalid so far."""
        return _check(lib.kvt_conn_wait_layer(self._handle(), int(req), int(layer),
                                              int(timeout_ms)))

    def load_errors(self, req):
        """The blocks the request's load left invalid, in block-table order."""
        h = self._handle()
        n = _check(lib.kvt_conn_load_errors(h, int(req), None, 0))
        if not n:
            return []
        out = (ctypes.c_uint32 * n)()
        n = _check(lib.kvt_conn_load_errors(h, int(req), out, n))
        return list(out)[:n]

    def save(self, req, tokens, block_ids, extra=None):
        """Register the save of the prompt's whole chunks the store lacks;
        the number of chunks that will be saved."""
        p, n, keep = _u32s(tokens)
        bp, nb, k2 = self._blocks(block_ids)
        ep, es = _extra_struct(extra)
        rc = _check(lib.kvt_conn_save(self._handle(), int(req), p, n, ep, bp, nb))
        del keep, k2, es
        return rc

    def save_keys(self, req, keys, block_ids):
        """save() with the chunks named by their keys."""
        if not _lib.has("kvt_conn_save_keys"):
            raise NotSupported(_E - 19, "%s has no kvt_conn_save_keys" % _lib.path)
        arr, nk = _keys_array(keys)
        bp, nb, k2 = self._blocks(block_ids)
        rc = _check(lib.kvt_conn_save_keys(self._handle(), int(req), arr, nk, bp, nb))
        del k2
        return rc

    def save_layer(self, req, layer=None, stream=None):
        """Layer `layer` (None: every layer not yet queued) is computed.
        `stream`: the CUDA stream (a torch.cuda.Stream) the engine wrote the
        layer's blocks on, for a connector over device memory: its work is
        finished first, so that the gather, on kvtier's own stream, cannot
        read the blocks before the engine's kernels have written them."""
        if stream is not None:
            stream.synchronize()
        _check(lib.kvt_conn_save_layer(self._handle(), int(req),
                                       ALL_LAYERS if layer is None else int(layer)))

    def finished(self, max_reports=256):
        """The loads and saves finished since the last call, each once, as
        Done(req, what ('load'/'save'), status, chunks, n_invalid, error)."""
        h = self._handle()
        out = []
        buf = (_lib.kvt_conn_done * max_reports)()
        while True:
            n = _check(lib.kvt_conn_finished(h, buf, max_reports))
            for i in range(n):
                d = buf[i]
                err = _error(d.status, "") if d.status < 0 else None
                out.append(Done(d.req, "load" if d.what == LOAD else "save", d.status,
                                d.chunks, d.n_invalid, err))
            if n < max_reports:
                return out

    def wait(self, req, timeout_ms=-1):
        """Wait for the request's load and save."""
        _check(lib.kvt_conn_wait(self._handle(), int(req), int(timeout_ms)))

    def end(self, req):
        """Forget the request (waiting for its load and save first)."""
        _check(lib.kvt_conn_end(self._handle(), int(req)))
