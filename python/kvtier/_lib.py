"""The C side of the binding: libkvtier.so loaded with ctypes, its structs
and the prototypes of every call the package makes.

The library is the one the wheel installs beside this file; $KVTIER_LIB (a
path to a libkvtier.so) overrides it, and in a source checkout the default
build (<source>/build/libkvtier.so) stands in when none is beside it.  It
must be the package's own version: a stale or foreign library is refused
at import with a message naming it, never called into.  Nothing is built
at import time.

The structs mirror include/kvtier.h field for field; ctypes lays them out
with the C compiler's rules, and _check_sizes() compares what it can with
the library's own arithmetic at load time.
"""

import ctypes
import os
import re
import sys

c_u8 = ctypes.c_uint8
c_u32 = ctypes.c_uint32
c_i32 = ctypes.c_int32
c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_int = ctypes.c_int
c_size = ctypes.c_size_t
c_vp = ctypes.c_void_p
c_cp = ctypes.c_char_p
c_double = ctypes.c_double
P = ctypes.POINTER

KEY_BYTES = 32
ERR_BASE = -30000


class kvt_key(ctypes.Structure):
    _fields_ = [("b", c_u8 * KEY_BYTES)]


class kvt_layout(ctypes.Structure):
    _fields_ = [("num_layers", c_u32), ("num_kv_heads", c_u32), ("head_dim", c_u32),
                ("dtype", c_u32), ("kv_planes", c_u32), ("scale_bytes", c_u32),
                ("block_size", c_u32), ("chunk_tokens", c_u32)]


class kvt_ns_desc(ctypes.Structure):
    _fields_ = [("model", c_cp), ("revision", c_cp), ("layout", kvt_layout),
                ("tp_rank", c_u32), ("tp_size", c_u32), ("pp_rank", c_u32),
                ("pp_size", c_u32), ("lora", c_cp), ("tenant", c_cp),
                ("hash_scheme", c_u32), ("rank_shared", c_u32)]


class kvt_ns(ctypes.Structure):
    _fields_ = [("digest", c_u8 * 32), ("layout", kvt_layout), ("hash_scheme", c_u32),
                ("tp_rank", c_u32), ("tp_size", c_u32), ("pp_rank", c_u32),
                ("pp_size", c_u32)]


class kvt_mm_hash(ctypes.Structure):
    _fields_ = [("hash", c_cp), ("offset", c_i64)]


class kvt_extra_keys(ctypes.Structure):
    _fields_ = [("lora", c_cp), ("mm", P(kvt_mm_hash)), ("n_mm", c_size),
                ("cache_salt", c_cp)]


class kvt_lookup_result(ctypes.Structure):
    _fields_ = [("n_hit", c_u32), ("tier", P(c_u8))]


class kvt_tier_stats(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16), ("capacity_bytes", c_u64),
                ("used_bytes", c_u64), ("chunks", c_u64), ("hits", c_u64),
                ("misses", c_u64), ("puts", c_u64), ("put_exists", c_u64),
                ("put_rejects", c_u64), ("bytes_in", c_u64), ("bytes_out", c_u64),
                ("evictions", c_u64), ("evicted_bytes", c_u64), ("corrupt", c_u64),
                ("borrowed", c_u64), ("promotions", c_u64), ("demotions", c_u64),
                ("admit_rejects", c_u64), ("policy_evictions", c_u64),
                ("pinned", c_u64), ("write_errors", c_u64), ("read_gbps", c_double),
                ("read_latency_us", c_double), ("get_latency_log2_us", c_u64 * 24),
                ("writes_off", c_u32), ("last_write_error", ctypes.c_char * 160),
                ("unreachable", c_u32), ("read_only", c_u32), ("bad_listed", c_u64),
                ("read_errors", c_u64), ("state", ctypes.c_char * 160)]


class kvt_events_stats(ctypes.Structure):
    _fields_ = [("batches", c_u64), ("events", c_u64), ("dropped", c_u64),
                ("send_failures", c_u64), ("replays", c_u64), ("replay_errors", c_u64),
                ("last_seq", c_u64), ("queued", c_u64), ("enabled", c_u32)]


class kvt_why_chunk(ctypes.Structure):
    _fields_ = [("reason", ctypes.c_int32), ("tier", ctypes.c_int32), ("when", c_double),
                ("detail", ctypes.c_char * 256)]


class kvt_warm_progress(ctypes.Structure):
    _fields_ = [("listed", c_u64), ("done", c_u64), ("loaded", c_u64), ("loaded_bytes", c_u64),
                ("already", c_u64), ("missing", c_u64), ("failed", c_u64),
                ("budget_bytes", c_u64), ("finished", c_u32), ("cancel", c_u32)]


class kvt_paged_plane(ctypes.Structure):
    _fields_ = [("base", c_vp), ("block_stride", c_u64), ("token_stride", c_u64),
                ("head_stride", c_u64), ("elem_stride", c_u64)]


class kvt_paged_layer(ctypes.Structure):
    _fields_ = [("plane", kvt_paged_plane * 2), ("scale", c_vp)]


class kvt_conn_desc(ctypes.Structure):
    _fields_ = [("layers", P(kvt_paged_layer)), ("n_layer_descs", c_u32),
                ("layer_stride", c_u64), ("num_blocks", c_u32), ("block_tokens", c_u32),
                ("threads", c_u32), ("durability", c_int), ("recompute_s", c_double),
                ("memory", c_u32), ("cuda_device", c_i32)]


class kvt_conn_done(ctypes.Structure):
    _fields_ = [("req", c_u64), ("what", c_u32), ("status", c_int), ("chunks", c_u32),
                ("n_invalid", c_u32)]


class kvt_model_preset(ctypes.Structure):
    _fields_ = [("name", c_cp), ("model_id", c_cp), ("title", c_cp), ("params", c_double),
                ("layers", c_u32), ("d_model", c_u32), ("kv_heads", c_u32),
                ("head_dim", c_u32)]


# name: (restype, argtypes).  Every call the package makes, and no other.
_PROTOS = {
    "kvt_strerror": (c_cp, [c_int]),
    "kvt_errmsg": (c_cp, []),
    "kvt_dtype_size": (c_u32, [c_u32]),
    "kvt_dtype_name": (c_cp, [c_u32]),
    "kvt_layout_layer_bytes": (c_u64, [P(kvt_layout)]),
    "kvt_layout_payload_bytes": (c_u64, [P(kvt_layout)]),
    "kvt_layout_check": (c_int, [P(kvt_layout)]),
    "kvt_key_chunk": (c_int, [P(kvt_ns), P(kvt_key), c_vp, c_size, P(kvt_extra_keys),
                              P(kvt_key)]),
    "kvt_key_chain": (c_int, [P(kvt_ns), c_vp, c_size, P(kvt_extra_keys), c_vp, c_size]),
    "kvt_key_from_engine_hash": (c_int, [P(kvt_ns), c_cp, c_size, P(kvt_key)]),
    "kvt_vllm_none_hash": (None, [c_cp, c_vp]),
    "kvt_vllm_block_hash": (c_int, [c_cp, c_vp, c_size, P(kvt_extra_keys), c_int, c_vp]),
    "kvt_vllm_hash_u64": (c_u64, [c_cp]),
    "kvt_config_new": (c_vp, []),
    "kvt_config_load": (c_vp, [c_cp, P(c_int)]),
    "kvt_config_parse": (c_vp, [c_cp, c_size, c_cp, P(c_int)]),
    "kvt_config_set": (c_int, [c_vp, c_cp, c_cp]),
    "kvt_config_apply_env": (c_int, [c_vp]),
    "kvt_config_free": (None, [c_vp]),
    "kvt_config_daemon": (c_cp, [c_vp]),
    "kvt_config_ns": (c_int, [c_vp, P(kvt_ns_desc), P(kvt_ns)]),
    "kvt_model_preset_find": (P(kvt_model_preset), [c_cp]),
    "kvt_store_open": (c_vp, [c_vp, P(c_int)]),
    "kvt_store_close": (None, [c_vp]),
    "kvt_store_flush": (c_int, [c_vp, c_int]),
    "kvt_store_tiers": (c_int, [c_vp]),
    "kvt_store_stats": (c_int, [c_vp, c_int, P(kvt_tier_stats)]),
    "kvt_store_events_stats": (c_int, [c_vp, P(kvt_events_stats)]),
    "kvt_ns_init": (c_int, [c_vp, P(kvt_ns_desc), P(kvt_ns)]),
    "kvt_put": (c_int, [c_vp, P(kvt_ns), P(kvt_key), c_vp, c_size, c_int]),
    "kvt_get": (c_int, [c_vp, P(kvt_ns), P(kvt_key), c_vp, c_size, P(c_size)]),
    "kvt_get_layer": (c_int, [c_vp, P(kvt_ns), P(kvt_key), c_u32, c_vp, c_size]),
    "kvt_exists": (c_int, [c_vp, P(kvt_ns), P(kvt_key)]),
    "kvt_delete": (c_int, [c_vp, P(kvt_ns), P(kvt_key)]),
    "kvt_locate": (c_int, [c_vp, P(kvt_ns), P(kvt_key), P(c_u32)]),
    "kvt_why": (c_int, [c_vp, P(kvt_ns), c_vp, c_size, P(kvt_why_chunk)]),
    "kvt_why_tokens": (c_int, [c_vp, P(kvt_ns), c_vp, c_size, P(kvt_extra_keys),
                               P(kvt_why_chunk), c_size]),
    "kvt_why_name": (c_cp, [c_int]),
    "kvt_store_hot_save": (c_int, [c_vp, c_cp, c_size]),
    "kvt_store_name_chunk": (c_int, [c_vp, P(kvt_key), c_cp, c_u32, c_u32, c_cp, c_u32]),
    "kvt_store_warm": (c_int, [c_vp, c_cp, c_u64, c_u64, P(kvt_warm_progress)]),
    "kvt_store_misses": (c_u64, [c_vp, c_cp, c_int, c_int]),
    "kvt_pin": (c_int, [c_vp, P(kvt_ns), P(kvt_key), c_int]),
    "kvt_lookup": (c_int, [c_vp, P(kvt_ns), c_vp, c_size, P(kvt_lookup_result)]),
    "kvt_lookup_tokens": (c_int, [c_vp, P(kvt_ns), c_vp, c_size, P(kvt_extra_keys), c_vp,
                                  c_size, P(kvt_lookup_result)]),
    "kvt_lookup_worth": (c_int, [c_vp, P(kvt_ns), P(kvt_lookup_result), c_double]),
    "kvt_put_batch": (c_int, [c_vp, P(kvt_ns), c_vp, c_vp, c_size, c_int, c_vp]),
    "kvt_get_batch": (c_int, [c_vp, P(kvt_ns), c_vp, c_vp, c_size, c_size, c_vp]),
    "kvt_get_async": (c_int, [c_vp, P(kvt_ns), P(kvt_key), c_vp, c_size, P(c_vp)]),
    "kvt_put_async": (c_int, [c_vp, P(kvt_ns), P(kvt_key), c_vp, c_size, c_int, P(c_vp)]),
    "kvt_prefetch": (c_int, [c_vp, P(kvt_ns), c_vp, c_size, c_int, P(c_vp)]),
    "kvt_op_poll": (c_int, [c_vp]),
    "kvt_op_wait": (c_int, [c_vp, c_int]),
    "kvt_op_errmsg": (c_cp, [c_vp]),
    "kvt_op_bytes": (c_u64, [c_vp]),
    "kvt_op_free": (None, [c_vp]),
    "kvt_conn_open": (c_int, [c_vp, P(kvt_ns), P(kvt_conn_desc), P(c_vp)]),
    "kvt_conn_close": (None, [c_vp]),
    "kvt_conn_gather": (c_int, [c_vp, c_u32, c_vp, c_size, c_u32, c_vp, c_size]),
    "kvt_conn_scatter": (c_int, [c_vp, c_u32, c_vp, c_size, c_u32, c_vp, c_size]),
    "kvt_conn_lookup": (c_int, [c_vp, c_vp, c_size, P(kvt_extra_keys)]),
    "kvt_conn_load": (c_int, [c_vp, c_u64, c_vp, c_size, P(kvt_extra_keys), c_vp, c_size,
                              c_size, c_int]),
    "kvt_conn_wait_layer": (c_int, [c_vp, c_u64, c_u32, c_int]),
    "kvt_conn_load_errors": (c_int, [c_vp, c_u64, c_vp, c_size]),
    "kvt_conn_save": (c_int, [c_vp, c_u64, c_vp, c_size, P(kvt_extra_keys), c_vp, c_size]),
    "kvt_conn_save_layer": (c_int, [c_vp, c_u64, c_u32]),
    "kvt_conn_finished": (c_int, [c_vp, P(kvt_conn_done), c_size]),
    "kvt_conn_wait": (c_int, [c_vp, c_u64, c_int]),
    "kvt_conn_end": (c_int, [c_vp, c_u64]),
}

# Calls a newer library has; the package works without them and says so
# when one is used.
_OPTIONAL = {
    "kvt_conn_load_keys": (c_int, [c_vp, c_u64, c_vp, c_size, c_vp, c_size, c_size, c_int]),
    "kvt_conn_save_keys": (c_int, [c_vp, c_u64, c_vp, c_size, c_vp, c_size]),
}


_HERE = os.path.dirname(os.path.abspath(__file__))


def package_dirs():
    """The folders the kvtier package is made of: one for an installed
    wheel; an editable install adds the one holding what CMake built."""
    pkg = sys.modules.get(__package__)
    dirs = list(getattr(pkg, "__path__", None) or [])
    return [os.path.abspath(d) for d in dirs] or [_HERE]


def _source_header():
    """include/kvtier.h when this package is a source checkout's python/kvtier."""
    h = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "include", "kvtier.h")
    return h if os.path.exists(h) else None

# What the library links against, by soname: the package a system names it
# by (Debian/Ubuntu, then RHEL/Fedora), for the message when one is missing.
_SYSTEM_LIBS = {
    "liburing.so.2": ("liburing2", "liburing"),
    "libcurl.so.4": ("libcurl4", "libcurl"),
    "libcrypto.so.3": ("libssl3", "openssl-libs"),
    "libssl.so.3": ("libssl3", "openssl-libs"),
    "libxxhash.so.0": ("libxxhash0", "xxhash-libs"),
    "libyaml-0.so.2": ("libyaml-0-2", "libyaml"),
    "libjansson.so.4": ("libjansson4", "jansson"),
    "libexpat.so.1": ("libexpat1", "expat"),
}


def _package_version():
    """This package's version: in a source checkout the public header's
    (include/kvtier.h, where CMake and the wheel read it too), else the
    wheel's generated _version.py."""
    header = _source_header()
    if header:
        with open(header) as f:
            for line in f:
                if line.startswith("#define KVT_VERSION_STRING "):
                    return line.split('"')[1]
    try:
        from ._version import __version__ as v
        return v
    except ImportError:
        return None


VERSION = _package_version()


def _candidates():
    """[(path, how it was chosen)] to try in order, and whether the first
    is the user's own choice (then it is the only one)."""
    env = os.environ.get("KVTIER_LIB")
    if env:
        return [(env, "from KVTIER_LIB")], True
    out = [(os.path.join(d, "libkvtier.so"), "beside the package") for d in package_dirs()]
    if _source_header():  # a source checkout (python/kvtier beside include/)
        build = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build")
        out.append((os.path.join(build, "libkvtier.so"), "the source checkout's build"))
    return out, False


def _load_error(p, how, e):
    msg = str(e)
    m = re.search(r"([^\s:]+\.so[.\d]*): cannot open shared object file", msg)
    if m and os.path.basename(p) != m.group(1):
        need = m.group(1)
        hint = ""
        if need in _SYSTEM_LIBS:
            hint = " (Debian/Ubuntu: apt-get install %s; RHEL/Fedora: dnf install %s)" % \
                _SYSTEM_LIBS[need]
        return ImportError("kvtier: %s (%s) cannot be loaded: it needs %s, which this system "
                           "lacks%s" % (p, how, need, hint))
    return ImportError("kvtier: %s (%s) cannot be loaded: %s" % (p, how, msg))


def _load():
    paths, forced = _candidates()
    for p, how in paths:
        if not os.path.exists(p):
            if forced:
                raise ImportError("kvtier: KVTIER_LIB=%s: no such file" % p)
            continue
        try:
            return ctypes.CDLL(p), p, how
        except OSError as e:
            raise _load_error(p, how, e) from None
    raise ImportError(
        "kvtier: libkvtier.so is not beside the package (%s): the installation is incomplete "
        "(reinstall the kvtier wheel), or this is a source checkout that was not built "
        "(build it, or set KVTIER_LIB to the library's path)" % ", ".join(package_dirs()))


def _check_version(lib, path, how):
    fn = getattr(lib, "kvt_version", None)
    if fn is None:
        if getattr(lib, "kvt_strerror", None) is None:
            raise ImportError("kvtier: %s (%s) is not libkvtier: it exports none of its calls"
                              % (path, how))
        raise ImportError("kvtier: %s (%s) is a libkvtier older than 0.2.0; this package "
                          "(%s) needs libkvtier %s" % (path, how, VERSION, VERSION))
    fn.restype = c_cp
    fn.argtypes = []
    have = fn().decode()
    if VERSION and have != VERSION:
        raise ImportError("kvtier: %s (%s) is libkvtier %s; this package is %s and needs "
                          "the library of the same version" % (path, how, have, VERSION))
    return have


lib, path, _how = _load()
LIB_VERSION = _check_version(lib, path, _how)
for _name, (_res, _args) in _PROTOS.items():
    try:
        _fn = getattr(lib, _name)
    except AttributeError:
        raise ImportError("kvtier: %s lacks %s: not the libkvtier this package was built with"
                          % (path, _name)) from None
    _fn.restype = _res
    _fn.argtypes = _args
for _name, (_res, _args) in _OPTIONAL.items():
    _fn = getattr(lib, _name, None)
    if _fn is not None:
        _fn.restype = _res
        _fn.argtypes = _args


def has(name):
    """Whether the loaded library exports `name`."""
    return getattr(lib, name, None) is not None


def _check_sizes():
    # The layout arithmetic through the struct: a misaligned field would
    # make the library read another field and answer something else.
    lay = kvt_layout(num_layers=2, num_kv_heads=3, head_dim=4, dtype=1, kv_planes=2,
                     scale_bytes=0, block_size=16, chunk_tokens=16)
    want = 2 * 16 * 3 * 4 * 2
    got = lib.kvt_layout_layer_bytes(ctypes.byref(lay))
    if got != want:
        raise ImportError("%s: kvt_layout does not match this package (%d != %d)" %
                          (path, got, want))


_check_sizes()
