"""Prefill and decode on two nodes: two kvtierd processes, each its own
node (its own DRAM and disk tier), sharing one shared file system
directory.  An engine on the prefill node stores a prompt's chunks through
its daemon; an engine on the decode node, asking its own daemon, finds
them (the shared tier's index picks up the other node's objects) and loads
them byte for byte.

Run by ctest (py_pd) with Debian's /usr/bin/python3, KVTIER_LIB and
KVT_KVTIERD set.
"""

import os
import shutil
import signal
import tempfile
import time
import unittest

import torch

import kvtier
from test_local import LAYOUT, start_daemon


class PrefillDecode(unittest.TestCase):
    def test_decode_node_loads_what_prefill_stored(self):
        bin_ = os.environ.get("KVT_KVTIERD")
        if not bin_ or not os.access(bin_, os.X_OK):
            raise unittest.SkipTest("KVT_KVTIERD does not name kvtierd (ctest sets it)")
        d = tempfile.mkdtemp(prefix="kvt-py-pd-")
        shared = os.path.join(d, "shared")
        os.mkdir(shared)
        extra = ["--set", "shared_fs=" + shared, "--set", "shared_fs_refresh_ms=100"]
        nodes = []
        try:
            for name in ("prefill", "decode"):
                sock = os.path.join(d, name + ".sock")
                nodes.append((start_daemon(bin_, os.path.join(d, name), sock, extra),
                              "unix://" + sock))
            with kvtier.Store(daemon=nodes[0][1]) as p, kvtier.Store(daemon=nodes[1][1]) as q:
                ns_p = p.namespace("py/pd", kvtier.Layout(**LAYOUT))
                ns_q = q.namespace("py/pd", kvtier.Layout(**LAYOUT))
                tokens = list(range(1000, 1096))
                keys = ns_p.key_chain(tokens)
                self.assertEqual(ns_q.key_chain(tokens), keys)  # one name on both nodes
                self.assertEqual(q.lookup(ns_q, keys), 0)
                data = [torch.randn(ns_p.payload_bytes // 2).to(torch.bfloat16) for _ in keys]
                for k, x in zip(keys, data):
                    self.assertTrue(p.put(ns_p, k, x, durability="crash_safe"))
                deadline = time.monotonic() + 20
                while q.lookup(ns_q, keys) < len(keys) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertEqual(q.lookup(ns_q, keys), len(keys))
                for k, x in zip(keys, data):
                    out = torch.empty_like(x)
                    q.get(ns_q, k, out)
                    self.assertTrue(torch.equal(out.view(torch.int16), x.view(torch.int16)))
        finally:
            for proc, _ in nodes:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
