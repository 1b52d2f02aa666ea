"""kvtier.lmcache.KvtierNativeConnector driven as LMCache's multiprocess
mode drives a native connector (NativeConnectorL2Adapter): object key
strings and MemoryObj byte memoryviews submitted in batches, the one
eventfd polled, drain_completions() read for (future_id, ok, error,
per-key bools).  Through every tier; misses, objects of another size and a
chunk damaged on the medium come back as False results, never as data.

LMCache cannot be installed here; its key format (ObjectKey to string:
model@kv_rank@group@chunk_hash) and buffers (bytearrays: writable,
itemsize 1, as MemoryObj.byte_array) are reproduced.
"""

import hashlib
import importlib
import os
import random
import select
import sys
import threading
import types
import unittest

import kvtier
import tier_env
from kvtier.lmcache import KvtierNativeConnector


def object_key(model, chunk, kv_rank=0, group=0):
    chunk_hash = hashlib.sha256(b"chunk %d" % chunk).digest()
    return "%s@%08x@%x@%s" % (model, kv_rank, group, chunk_hash.hex())


def wait_for(conn, fids, timeout=20.0):
    """The demux loop: poll the eventfd, drain, route by future id, until
    every future in `fids` completed; {fid: (ok, error, per_key)}."""
    poller = select.poll()
    poller.register(conn.event_fd(), select.POLLIN)
    out = {}
    while set(fids) - set(out):
        if not poller.poll(int(timeout * 1000)):
            raise AssertionError("no completion in %gs for %s" % (timeout, set(fids) - set(out)))
        for fid, ok, err, per_key in conn.drain_completions():
            assert fid not in out, "future %d completed twice" % fid
            out[fid] = (ok, err, per_key)
    return out


def one(conn, fid):
    return wait_for(conn, [fid])[fid]


# Objects of LMCache's chunk sizes, and sizes around the byte-blob layout's
# 65536-byte rows.
SIZES = (65536, 65536, 65536, 131072, 70001, 100)


def payloads(seed):
    r = random.Random(seed)
    return [bytearray(r.randbytes(n)) for n in SIZES]


class LMCacheTiers(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.env = tier_env.Env()

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def connector(self, tier, name):
        durability = "cached" if tier == "dram" else "crash_safe"
        return KvtierNativeConnector(self.env.config(tier, name, dram="8MiB"),
                                     durability=durability, num_workers=3)

    def run_tier(self, tier):
        name = "lmc-" + tier
        model = "kvtier-test/lmcache-tiny"
        keys = [object_key(model, i) for i in range(len(SIZES))]
        data = payloads(len(tier))
        conn = self.connector(tier, name)
        ok, err, res = one(conn, conn.submit_batch_set(keys, [memoryview(d) for d in data]))
        self.assertEqual((ok, err, res), (True, "", [True] * len(keys)))
        if tier != "dram":
            conn.close()
            conn = self.connector(tier, name)   # a restart: DRAM empty
        missing = object_key(model, 999)
        ok, err, res = one(conn, conn.submit_batch_exists(keys + [missing]))
        self.assertEqual((ok, res), (True, [True] * len(keys) + [False]))

        bufs = [bytearray(len(d)) for d in data] + [bytearray(65536)]
        ok, err, res = one(conn, conn.submit_batch_get(keys + [missing],
                                                       [memoryview(b) for b in bufs]))
        self.assertTrue(ok)
        self.assertEqual(res, [True] * len(keys) + [False])
        self.assertIn(missing, err)
        for i, (a, b) in enumerate(zip(data, bufs)):
            self.assertEqual(a, b, "object %d" % i)
        if tier != "dram":
            self.assertGreaterEqual(conn.store.stats(1)["hits"], len(keys))

        # A buffer of another size never receives the object.
        small = bytearray(65535)
        ok, err, res = one(conn, conn.submit_batch_get([keys[0]], [memoryview(small)]))
        self.assertEqual((ok, res), (True, [False]))
        self.assertIn(keys[0], err)
        self.assertEqual(small, bytearray(65535))

        # Delete: present and absent keys.
        ok, err, res = one(conn, conn.submit_batch_delete([keys[5], missing]))
        self.assertEqual((ok, res), (True, [True, False]))
        ok, err, res = one(conn, conn.submit_batch_exists([keys[5]]))
        self.assertEqual(res, [False])
        conn.close()
        if tier == "dram":
            return

        # A chunk damaged on the medium: a False result, the others whole.
        key0 = conn._key(keys[0])
        self.assertEqual(tier_env.flip_payload_byte(self.env, tier, name, key0), 1)
        conn = self.connector(tier, name)
        bufs = [bytearray(len(d)) for d in data[:3]]
        ok, err, res = one(conn, conn.submit_batch_get(keys[:3], [memoryview(b) for b in bufs]))
        self.assertEqual((ok, res), (True, [False, True, True]))
        self.assertIn(keys[0], err)
        self.assertEqual(bufs[1:], data[1:3])
        self.assertGreaterEqual(sum(s["corrupt"] + s["bad_listed"]
                                    for s in conn.store.stats()), 1)
        conn.close()

    def test_dram(self):
        self.run_tier("dram")

    def test_nvme(self):
        self.run_tier("nvme")

    def test_shared_fs(self):
        self.run_tier("shared_fs")

    def test_s3(self):
        self.run_tier("s3")


class LMCacheContract(unittest.TestCase):

    def setUp(self):
        self.env = tier_env.Env()
        self.conn = KvtierNativeConnector(self.env.config("dram", "contract"), num_workers=2)

    def tearDown(self):
        self.conn.close()
        self.env.close()

    def test_batches_in_flight_and_one_wakeup(self):
        c = self.conn
        sets = []
        for b in range(4):
            keys = [object_key("m", b * 10 + i) for i in range(5)]
            sets.append(c.submit_batch_set(keys, [bytes([b]) * 4096] * 5))
        self.assertEqual(len(set(sets)), 4)
        done = wait_for(c, sets)
        self.assertTrue(all(done[f] == (True, "", [True] * 5) for f in sets), done)
        # Nothing queued: the eventfd is not readable and a drain is empty.
        p = select.poll()
        p.register(c.event_fd(), select.POLLIN)
        self.assertEqual(p.poll(0), [])
        self.assertEqual(c.drain_completions(), [])
        # A set of keys already stored succeeds (first writer wins) and
        # does not replace the bytes.
        keys = [object_key("m", i) for i in range(5)]
        self.assertEqual(one(c, c.submit_batch_set(keys, [b"\xff" * 4096] * 5))[2],
                         [True] * 5)
        buf = bytearray(4096)
        one(c, c.submit_batch_get(keys[:1], [buf]))
        self.assertEqual(buf, bytes([0]) * 4096)

    def test_submitters_on_many_threads(self):
        # LMCache's store and prefetch controllers submit from their own
        # threads while the demux thread drains.
        c = self.conn
        errors = []

        def client(t):
            try:
                keys = [object_key("m", 1000 * t + i) for i in range(8)]
                data = [bytes([t, i]) * 2048 for i in range(8)]
                fid = c.submit_batch_set(keys, data)
                with lock:
                    want[fid] = None
                while fid not in got:
                    ev.wait(0.05)
                bufs = [bytearray(4096) for _ in keys]
                fid = c.submit_batch_get(keys, bufs)
                with lock:
                    want[fid] = None
                while fid not in got:
                    ev.wait(0.05)
                if got[fid][2] != [True] * 8 or bufs != [bytearray(d) for d in data]:
                    errors.append((t, got[fid]))
            except Exception as e:  # reported below, not lost in the thread
                errors.append((t, e))

        lock, ev, want, got = threading.Lock(), threading.Event(), {}, {}
        threads = [threading.Thread(target=client, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        poller = select.poll()
        poller.register(c.event_fd(), select.POLLIN)
        while any(t.is_alive() for t in threads):
            if poller.poll(100):
                for fid, ok, err, res in c.drain_completions():
                    self.assertNotIn(fid, got)
                    got[fid] = (ok, err, res)
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(set(got), set(want))

    def test_lmcache_plugin(self):
        # LMCache's "plugin" L2 adapter type: it imports module_path, takes
        # class_name + "Config" (an L2AdapterConfigBase) built from_dict
        # of adapter_params, and calls class_name(config, l1_memory_desc=..).
        # LMCache's base classes are stood in for, as far as the plugin
        # uses them.
        stubs = {}
        for name in ("lmcache", "lmcache.v1", "lmcache.v1.distributed",
                     "lmcache.v1.distributed.l2_adapters",
                     "lmcache.v1.distributed.l2_adapters.config",
                     "lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter"):
            stubs[name] = types.ModuleType(name)

        class L2AdapterConfigBase:
            pass

        class NativeConnectorL2Adapter:
            def __init__(self, native_client):
                self.fd = native_client.event_fd()
                self.client = native_client

        stubs["lmcache.v1.distributed.l2_adapters.config"].L2AdapterConfigBase = \
            L2AdapterConfigBase
        stubs["lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter"] \
            .NativeConnectorL2Adapter = NativeConnectorL2Adapter
        saved = {k: sys.modules.get(k) for k in stubs}
        sys.modules.update(stubs)
        try:
            sys.modules.pop("kvtier.lmcache")
            mod = importlib.import_module("kvtier.lmcache")
            cfg_cls = getattr(mod, "KvtierL2Adapter" + "Config")
            self.assertTrue(issubclass(cfg_cls, L2AdapterConfigBase))
            with self.assertRaisesRegex(ValueError, "unknown parameter.s. confg"):
                cfg_cls.from_dict({"confg": "x"})
            path = os.path.join(self.env.root, "l2.yaml")
            with open(path, "w") as f:
                f.write("max_local_cpu_size: 2MiB\ndram_lock_memory: false\n")
            cfg = cfg_cls.from_dict({"config": path, "num_workers": 2})
            ad = mod.KvtierL2Adapter(cfg, l1_memory_desc=None)
            self.assertIsInstance(ad.client, mod.KvtierNativeConnector)
            self.assertEqual(ad.client.store.stats(0)["capacity_bytes"], 2 << 20)
            ok, err, res = one(ad.client, ad.client.submit_batch_exists(["k"]))
            self.assertEqual((ok, res), (True, [False]))
            ad.client.close()
            raw = mod.KvtierL2Adapter({"config": path})   # the older raw-dict form
            raw.client.close()
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
            sys.modules.pop("kvtier.lmcache", None)
            importlib.import_module("kvtier.lmcache")

    def test_key_namespaces(self):
        # The same chunk under another model or rank is another object.
        c = self.conn
        a, b = object_key("m1", 1), object_key("m2", 1)
        one(c, c.submit_batch_set([a], [b"a" * 512]))
        self.assertEqual(one(c, c.submit_batch_exists([a, b, object_key("m1", 1, 1)]))[2],
                         [True, False, False])

    def test_bad_input(self):
        c = self.conn
        with self.assertRaisesRegex(ValueError, "keys list is empty"):
            c.submit_batch_exists([])
        with self.assertRaisesRegex(ValueError, "2 keys and 1 buffers"):
            c.submit_batch_set(["a", "b"], [b"x"])
        with self.assertRaisesRegex(ValueError, "buffer 0 of a get is read-only"):
            c.submit_batch_get(["a"], [b"x"])
        with self.assertRaisesRegex(ValueError, "buffer 0 is empty"):
            c.submit_batch_set(["a"], [b""])
        with self.assertRaisesRegex(ValueError, "not a non-empty string"):
            c.submit_batch_exists([b"bytes"])
        with self.assertRaisesRegex(ValueError, "durability 'sync'"):
            KvtierNativeConnector(store=c.store, durability="sync")
        c.close()
        c.close()
        with self.assertRaisesRegex(RuntimeError, "closed"):
            c.submit_batch_exists(["a"])
        self.conn = KvtierNativeConnector(self.env.config("dram", "contract"))

    def test_close_with_work_queued(self):
        # close() returns with work in flight; what ran is whole, the eventfd
        # is closed with the connector.
        c = self.conn
        fid = c.submit_batch_set([object_key("m", i) for i in range(64)], [b"z" * 8192] * 64)
        fd = c.event_fd()
        c.close()
        self.assertGreater(fid, 0)
        with self.assertRaises(OSError):
            os.fstat(fd)
        self.conn = KvtierNativeConnector(self.env.config("dram", "contract"))


if __name__ == "__main__":
    unittest.main()
