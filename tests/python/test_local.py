"""The Python binding on a real kvtierd through the `daemon` key.

Run by ctest (py_local) with Debian's /usr/bin/python3, KVTIER_LIB naming
the built libkvtier.so, KVT_KVTIERD the built kvtierd.  The test starts the
daemon itself (--local on a socket in a scratch directory, DRAM tier and a
disk tier under it) and stops it at the end.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

import torch

import kvtier
import tier_env

LAYOUT = dict(num_layers=4, num_kv_heads=2, head_dim=64, dtype="bf16", chunk_tokens=32,
              block_size=16)


def start_daemon(bin_, data, sock, extra=()):
    """kvtierd with a disk tier in `data` and 64 MiB of DRAM, serving the
    node on `sock` (test_pd and test_lmcache start theirs the same way)."""
    return tier_env.start_kvtierd(sock, ["--data-dir", data, *extra], dram="64MiB", bin_=bin_)


class Local(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        bin_ = os.environ.get("KVT_KVTIERD")
        if not bin_ or not os.access(bin_, os.X_OK):
            raise unittest.SkipTest("KVT_KVTIERD does not name kvtierd (ctest sets it)")
        cls.dir = tempfile.mkdtemp(prefix="kvt-py-local-")
        cls.sock = os.path.join(cls.dir, "kvtierd.sock")
        cls.url = "unix://" + cls.sock
        cls.daemon = start_daemon(bin_, os.path.join(cls.dir, "data"), cls.sock)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.send_signal(signal.SIGTERM)
        cls.daemon.wait(20)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_put_get_through_the_key(self):
        with kvtier.Store(daemon=self.url) as st:
            self.assertEqual(st.tiers, 1)
            self.assertEqual(st.stats(0)["name"], "daemon")
            ns = st.namespace("py/local", kvtier.Layout(**LAYOUT))
            keys = ns.key_chain(list(range(96)))
            data = [torch.randn(ns.payload_bytes // 2).to(torch.bfloat16) for _ in keys]
            for k, d in zip(keys, data):
                self.assertTrue(st.put(ns, k, d, durability="crash_safe"))
            self.assertFalse(st.put(ns, keys[0], data[0]))  # first writer wins
            self.assertEqual(st.lookup(ns, keys), 3)
            for k, d in zip(keys, data):
                out = torch.empty_like(d)
                st.get(ns, k, out)
                self.assertTrue(torch.equal(out.view(torch.int16), d.view(torch.int16)))
            self.assertTrue(st.delete(ns, keys[2]))
            self.assertFalse(st.exists(ns, keys[2]))
            with self.assertRaises(kvtier.NotFound):
                st.get(ns, keys[2])

    def test_env_and_another_process(self):
        """KVTIER_DAEMON opens the daemon as the key does; a chunk one
        process puts, another gets."""
        env = dict(os.environ, KVTIER_DAEMON=self.url)
        code = ("import kvtier\n"
                "c = kvtier.Config(); c.apply_env()\n"
                "st = kvtier.Store(c)\n"
                "ns = st.namespace('py/local-shared', kvtier.Layout(**%r))\n"
                "k = ns.key_chain(list(range(32)))[0]\n"
                "assert st.put(ns, k, bytes([7]) * ns.payload_bytes)\n"
                "st.close()\n" % LAYOUT)
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
        with kvtier.Store(daemon=self.url) as st:
            ns = st.namespace("py/local-shared", kvtier.Layout(**LAYOUT))
            k = ns.key_chain(list(range(32)))[0]
            self.assertEqual(bytes(st.get(ns, k)), bytes([7]) * ns.payload_bytes)

    def test_no_daemon_names_the_socket(self):
        missing = os.path.join(self.dir, "nobody.sock")
        with self.assertRaises(kvtier.Error) as e:
            kvtier.Store(daemon="unix://" + missing)
        self.assertIn(missing, str(e.exception))
        with self.assertRaises(kvtier.ConfigError) as e:
            kvtier.Store(daemon="unix://relative.sock")
        self.assertIn("daemon", str(e.exception))


if __name__ == "__main__":
    unittest.main()
