"""The Python binding's calls and error paths, against the real library.

Run by ctest (py_binding) with Debian's /usr/bin/python3 (numpy, torch),
KVTIER_LIB naming the built libkvtier.so and PYTHONPATH the package.
"""

import gc
import os
import shutil
import tempfile
import unittest
import weakref

import numpy as np
import torch

import kvtier


def small_store(**kw):
    kw.setdefault("max_local_cpu_size", "64MiB")
    kw.setdefault("dram_prefault", False)
    return kvtier.Store(**kw)


LAYOUT = dict(num_layers=4, num_kv_heads=2, head_dim=64, dtype="bf16", chunk_tokens=32,
              block_size=16)


class Errors(unittest.TestCase):
    def test_config_key_errors_name_the_key(self):
        cfg = kvtier.Config()
        with self.assertRaises(kvtier.ConfigError) as e:
            cfg.set("max_local_cpu_size", "4 parsecs")
        self.assertIn("max_local_cpu_size", str(e.exception))
        self.assertIn("parsecs", e.exception.message)
        self.assertEqual(e.exception.code, kvtier.ENOTFOUND - 14)
        with self.assertRaises(kvtier.ConfigError) as e:
            cfg.set("no_such_key", "1")
        self.assertIn("no_such_key", str(e.exception))
        cfg.close()
        with self.assertRaises(kvtier.Closed):
            cfg.set("chunk_size", "64")

    def test_yaml_load_and_parse(self):
        d = tempfile.mkdtemp()
        try:
            p = os.path.join(d, "c.yaml")
            with open(p, "w") as f:
                f.write("chunk_size: 64\nmax_local_cpu_size: 32MiB\ndram_prefault: false\n")
            cfg = kvtier.Config.load(p)
            ns = cfg.namespace("m", kvtier.Layout(2, 1, 8, "f16"))
            self.assertEqual(ns.chunk_tokens, 64)
            with open(p, "w") as f:
                f.write("chunk_size: 64\nchunk_size: 32\n")
            with self.assertRaises(kvtier.ConfigError) as e:
                kvtier.Config.load(p)
            self.assertIn("given twice", str(e.exception))
            with self.assertRaises(kvtier.ConfigError) as e:
                kvtier.Config.load(os.path.join(d, "missing.yaml"))
            self.assertIn("missing.yaml: cannot open", str(e.exception))
            with self.assertRaises(kvtier.ConfigError) as e:
                kvtier.Config.parse("ttl: forever\n", "inline")
            self.assertIn("inline:1", str(e.exception))
            with kvtier.Store(kvtier.Config.parse("max_local_cpu_size: 32MiB\n")) as st:
                self.assertEqual(st.tiers, 1)
        finally:
            shutil.rmtree(d)

    def test_store_open_failure_names_the_tier(self):
        d = tempfile.mkdtemp()
        try:
            f = os.path.join(d, "file")
            open(f, "w").close()
            with self.assertRaises(kvtier.Error) as e:
                small_store(local_disk=f)
            self.assertIn(f, str(e.exception))
        finally:
            shutil.rmtree(d)

    def test_namespace_errors(self):
        with small_store() as st:
            lay = kvtier.Layout(**LAYOUT)
            with self.assertRaises(kvtier.InvalidArgument) as e:
                st.namespace("m", lay, tp_rank=2, tp_size=2)
            self.assertIn("rank", str(e.exception))
            with self.assertRaises(kvtier.TenantError):
                st.namespace("m", lay, tenant="acme")
            with self.assertRaises(kvtier.LayoutError):
                st.namespace("m", kvtier.Layout(4, 2, 64, "bf16", block_size=48,
                                                chunk_tokens=64))
            with self.assertRaises(kvtier.InvalidArgument):
                kvtier.Layout(4, 2, 64, "complex128")
            with self.assertRaises(kvtier.InvalidArgument):
                st.namespace("m", lay, hash_scheme="md5")

    def test_tenant_and_ranks_change_the_digest(self):
        secret = "6f1d0c2b9a8e7d6c5b4a39281706f5e4"
        cfg = kvtier.Config(max_local_cpu_size="32MiB", dram_prefault=False)
        cfg.set("tenants", "acme=" + secret)
        lay = kvtier.Layout(**LAYOUT)
        with kvtier.Store(cfg) as st:
            base = st.namespace("m", lay)
            acme = st.namespace("m", lay, tenant="acme")
            r1 = st.namespace("m", lay, tp_rank=1, tp_size=2)
            r0 = st.namespace("m", lay, tp_rank=0, tp_size=2)
            shared = [st.namespace("m", lay, tp_rank=r, tp_size=2, rank_shared=True)
                      for r in (0, 1)]
            self.assertEqual(len({base.digest, acme.digest, r0.digest, r1.digest}), 4)
            self.assertEqual(shared[0].digest, shared[1].digest)
            self.assertEqual(cfg.namespace("m", lay, tenant="acme"), acme)
        cfg.close()


class Keys(unittest.TestCase):
    def setUp(self):
        self.st = small_store()
        self.ns = self.st.namespace("m", kvtier.Layout(**LAYOUT))

    def tearDown(self):
        self.st.close()

    def test_chain_is_chunk_by_chunk(self):
        toks = list(range(1000, 1100))
        keys = self.ns.key_chain(toks)
        self.assertEqual(len(keys), 3)  # 100 tokens: 3 whole chunks of 32
        k = None
        for i in range(3):
            k = self.ns.key_chunk(toks[i * 32:(i + 1) * 32], parent=k)
            self.assertEqual(k, keys[i])
        # The same ids as numpy, torch and array inputs give the same keys.
        self.assertEqual(self.ns.key_chain(np.arange(1000, 1100, dtype=np.int64)), keys)
        self.assertEqual(self.ns.key_chain(torch.arange(1000, 1100)), keys)
        salted = self.ns.key_chain(toks, kvtier.ExtraKeys(cache_salt="s"))
        self.assertNotEqual(salted[0], keys[0])
        lora = self.ns.key_chain(toks, {"lora": "adapter"})
        self.assertNotEqual(lora[2], keys[2])
        mm = self.ns.key_chain(toks, kvtier.ExtraKeys(mm=[("img", 3)]))
        self.assertNotEqual(mm[0], keys[0])
        with self.assertRaises(kvtier.InvalidArgument):
            self.ns.key_chunk(toks[:31])
        with self.assertRaises(kvtier.InvalidArgument):
            self.ns.key_chain([1, -1, 2])
        self.assertEqual(kvtier.Key(str(keys[0])), keys[0])
        with self.assertRaises(kvtier.InvalidArgument):
            kvtier.Key(b"short")

    def test_vllm_hashes_golden(self):
        none = kvtier.vllm_none_hash("vllm-none-hash")
        self.assertEqual(none.hex(),
                         "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0")
        t = [(i * 7919 + 13) % 152064 for i in range(256)]
        h = kvtier.vllm_block_hash(none, t[:128], first_block=True)
        self.assertEqual(h.hex(),
                         "3c922374e6fe67f3c64e75b88a3b8bd6185b538f7019674b72aefbf8dd8754f8")
        self.assertEqual(kvtier.vllm_hash_u64(h), 8263819412558533880)
        h2 = kvtier.vllm_block_hash(h, t[128:])
        self.assertEqual(h2.hex(),
                         "2e69fa8c8aebe362593b51b8b212f1aeb45f9bb56c4258c0bf2a94f1e384e2a5")
        k = self.ns.key_from_engine_hash(h2)
        other = self.st.namespace("other", kvtier.Layout(**LAYOUT))
        self.assertNotEqual(other.key_from_engine_hash(h2), k)
        self.assertNotEqual(k, h2)
        self.assertEqual(self.ns.keys_from_engine_hashes([h, h2], 2), [k])
        with self.assertRaises(kvtier.InvalidArgument):
            kvtier.vllm_block_hash(b"x" * 31, t[:4])


class PutGet(unittest.TestCase):
    def setUp(self):
        self.st = small_store()
        self.ns = self.st.namespace("m", kvtier.Layout(**LAYOUT))
        self.keys = self.ns.key_chain(list(range(128)))
        self.n = self.ns.payload_bytes

    def tearDown(self):
        self.st.close()

    def payload(self, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, 256, (self.n,), dtype=torch.uint8, generator=g)

    def test_every_buffer_kind(self):
        st, ns, k = self.st, self.ns, self.keys
        p = self.payload(1)
        self.assertTrue(st.put(ns, k[0], p))
        self.assertFalse(st.put(ns, k[0], self.payload(2)))  # first writer wins
        self.assertTrue(st.put(ns, k[1], p.numpy().tobytes()))
        self.assertTrue(st.put(ns, k[2], bytearray(p.numpy().tobytes())))
        self.assertTrue(st.put(ns, k[3], p.view(torch.bfloat16).reshape(4, -1)))
        for key in k[:4]:
            t = torch.empty(self.n, dtype=torch.uint8)
            self.assertEqual(st.get(ns, key, t), self.n)
            self.assertTrue(torch.equal(t, p))
            a = np.empty(self.n, dtype=np.uint8)
            st.get(ns, key, a)
            self.assertEqual(a.tobytes(), p.numpy().tobytes())
            self.assertEqual(bytes(st.get(ns, key)), p.numpy().tobytes())
            mv = memoryview(bytearray(self.n))
            st.get(ns, key, mv)
            self.assertEqual(mv.tobytes(), p.numpy().tobytes())
        layer = st.get_layer(ns, k[0], 2)
        lb = ns.layer_bytes
        self.assertEqual(bytes(layer), p.numpy().tobytes()[2 * lb:3 * lb])

    def test_buffer_errors(self):
        st, ns, k = self.st, self.ns, self.keys
        big = torch.zeros(2, self.n, dtype=torch.uint8)
        with self.assertRaises(kvtier.InvalidArgument) as e:
            st.put(ns, k[0], big[:, ::2])
        self.assertIn("not contiguous", str(e.exception))
        with self.assertRaises(kvtier.InvalidArgument):
            st.put(ns, k[0], np.zeros((2, self.n), np.uint8)[:, ::2])
        with self.assertRaises(kvtier.LayoutError) as e:
            st.put(ns, k[0], b"x" * 100)
        self.assertIn("100 bytes", str(e.exception))
        st.put(ns, k[0], self.payload(3))
        with self.assertRaises(kvtier.BufferTooSmall):
            st.get(ns, k[0], bytearray(10))
        with self.assertRaises(kvtier.InvalidArgument) as e:
            st.get(ns, k[0], b"x" * self.n)
        self.assertIn("immutable", str(e.exception))
        ro = np.zeros(self.n, np.uint8)
        ro.flags.writeable = False
        with self.assertRaises(kvtier.InvalidArgument):
            st.get(ns, k[0], ro)
        with self.assertRaises(kvtier.NotFound):
            st.get(ns, k[1])
        with self.assertRaises(kvtier.InvalidArgument):
            st.put(ns, k[0], 12345)
        with self.assertRaises(kvtier.InvalidArgument):
            st.put(ns, k[0], self.payload(1), durability="forever")
        with self.assertRaises(kvtier.NotSupported):
            st.put(ns, k[3], self.payload(1), durability="crash_safe")  # no disk tier

    def test_exists_lookup_delete_batch(self):
        st, ns, k = self.st, self.ns, self.keys
        toks = list(range(128))
        res = st.put_batch(ns, k[:3], [self.payload(i) for i in range(3)])
        self.assertEqual(res, [0, 0, 0])
        self.assertTrue(st.exists(ns, k[2]))
        self.assertFalse(st.exists(ns, k[3]))
        self.assertEqual(st.lookup(ns, k), 3)
        self.assertEqual(st.lookup(ns, k, tiers=True), (3, [0, 0, 0]))
        self.assertEqual(st.lookup_tokens(ns, toks), 3)
        self.assertEqual(st.locate(ns, k[0]), [0])
        outs = [bytearray(self.n) for _ in range(4)]
        res = st.get_batch(ns, k, outs)
        self.assertEqual(res[:3], [0, 0, 0])
        self.assertEqual(res[3], kvtier.ENOTFOUND)
        self.assertEqual(bytes(outs[1]), self.payload(1).numpy().tobytes())
        self.assertTrue(st.delete(ns, k[1]))
        self.assertFalse(st.delete(ns, k[1]))
        self.assertEqual(st.lookup(ns, k), 1)
        st.pin(ns, k[0])
        self.assertEqual(st.stats(0)["pinned"], 1)
        st.pin(ns, k[0], False)
        s = st.stats()
        self.assertEqual(len(s), 1)
        self.assertEqual(s[0]["name"], "dram")
        self.assertEqual(s[0]["chunks"], 2)

    def test_async_ops(self):
        st, ns, k = self.st, self.ns, self.keys
        p = self.payload(7)
        with st.put_async(ns, k[0], p) as op:
            self.assertEqual(op.wait(), 0)
        out = torch.empty(self.n, dtype=torch.uint8)
        with st.get_async(ns, k[0], out) as op:
            self.assertEqual(op.wait(5000), 0)
            self.assertEqual(op.bytes, self.n)
        self.assertTrue(torch.equal(out, p))
        op = st.get_async(ns, k[1], bytearray(self.n))
        with self.assertRaises(kvtier.NotFound):
            op.wait()
        op.close()
        with self.assertRaises(kvtier.Closed):
            op.poll()
        with st.prefetch(ns, k[:2], 1000) as op:
            self.assertEqual(op.wait(), 1)


def paged_roundtrip(test, st, ns, make, fill_planes):
    """Save two chunks through a connector over `make(zero=False)`, load
    them into blocks of a fresh `make(zero=True)` and compare every plane
    block by block."""
    src, dsrc = make(False)
    dst, ddst = make(True)
    toks = list(range(5000, 5000 + 2 * ns.chunk_tokens + 5))
    bt = dsrc.block_tokens
    nblk = (2 * ns.chunk_tokens) // bt
    save_blocks = list(range(1, 1 + nblk))
    load_blocks = list(range(dsrc.num_blocks - nblk, dsrc.num_blocks))
    with st.connector(ns, dsrc) as c:
        test.assertEqual(c.save(1, toks, save_blocks), 2)
        for l in range(ns.layout.num_layers):
            c.save_layer(1, l)
        c.wait(1)
        done = c.finished()
        test.assertEqual([(d.what, d.status, d.chunks) for d in done], [("save", 0, 2)])
        c.end(1)
    with st.connector(ns, ddst) as c:
        n = c.lookup(toks)
        test.assertEqual(n, 2 * ns.chunk_tokens)
        c.load(2, toks, load_blocks, n)
        for l in range(ns.layout.num_layers):
            test.assertEqual(c.wait_layer(2, l), 0)
        test.assertEqual(c.load_errors(2), [])
        c.end(2)
    for ps, pd in fill_planes(src, dst):
        for a, b in zip(save_blocks, load_blocks):
            test.assertTrue(torch.equal(ps(a), pd(b)))
        test.assertFalse(pd(0).any())  # blocks the load did not cover stay zero


class Connectors(unittest.TestCase):
    """Every engine layout the binding describes, round-tripped bit-exact."""

    L, H, D, BS, NB = 3, 2, 32, 16, 12

    def setUp(self):
        self.st = small_store()

    def tearDown(self):
        self.st.close()

    def ns(self, planes=2, heads=None, dim=None, dtype="bf16"):
        return self.st.namespace("layouts", kvtier.Layout(
            self.L, heads or self.H, dim or self.D, dtype, kv_planes=planes, block_size=16,
            chunk_tokens=32))

    def rand(self, shape, zero, dtype=torch.bfloat16):
        return torch.zeros(shape, dtype=dtype) if zero else torch.randn(shape).to(dtype)

    def test_flash_attn_nhd_and_hnd(self):
        L, H, D, BS, NB = self.L, self.H, self.D, self.BS, self.NB

        def nhd(zero):
            t = [self.rand((2, NB, BS, H, D), zero) for _ in range(L)]
            return t, kvtier.paged_flash_attn({"layer.%d" % i: x for i, x in enumerate(t)})

        def hnd(zero):
            # Physically (2, NB, H, BS, D); vLLM hands out the permuted view.
            t = [self.rand((2, NB, H, BS, D), zero).permute(0, 1, 3, 2, 4) for _ in range(L)]
            return t, kvtier.paged_flash_attn(t)

        planes = lambda s, d: [(lambda b, x=x, p=p: x[p, b], lambda b, y=y, p=p: y[p, b])
                               for x, y in zip(s, d) for p in (0, 1)]
        paged_roundtrip(self, self.st, self.ns(), nhd, planes)
        self.st.close()
        self.st = small_store()
        paged_roundtrip(self, self.st, self.ns(), hnd, planes)

    def test_flashinfer_and_mla(self):
        L, H, D, BS, NB = self.L, self.H, self.D, self.BS, self.NB

        def fi(zero):
            t = [self.rand((NB, 2, BS, H, D), zero) for _ in range(L)]
            return t, kvtier.paged_flashinfer(t)

        paged_roundtrip(self, self.st, self.ns(), fi,
                        lambda s, d: [(lambda b, x=x: x[b], lambda b, y=y: y[b])
                                      for x, y in zip(s, d)])

        def mla(zero):
            t = [self.rand((NB, BS, 72), zero) for _ in range(L)]
            return t, kvtier.paged_mla(t)

        paged_roundtrip(self, self.st, self.ns(planes=1, heads=1, dim=72), mla,
                        lambda s, d: [(lambda b, x=x: x[b], lambda b, y=y: y[b])
                                      for x, y in zip(s, d)])

    def test_cross_layer(self):
        L, H, D, BS, NB = self.L, self.H, self.D, self.BS, self.NB

        def lf(zero):
            t = self.rand((L, 2, NB, BS, H, D), zero)
            return t, kvtier.paged_cross_layer(t, "layers_first")

        def bf(zero):
            t = self.rand((NB, L, 2, BS, H, D), zero)
            return t, kvtier.paged_cross_layer(t, "blocks_first")

        paged_roundtrip(self, self.st, self.ns(), lf,
                        lambda s, d: [(lambda b: s[:, :, b], lambda b: d[:, :, b])])
        self.st.close()
        self.st = small_store()
        paged_roundtrip(self, self.st, self.ns(), bf,
                        lambda s, d: [(lambda b: s[b], lambda b: d[b])])

    def test_sglang_host_pools(self):
        L, H, D, BS, NB = self.L, self.H, self.D, self.BS, self.NB
        size = NB * BS

        def layer_first(zero):
            t = self.rand((2, L, size, H, D), zero)
            return t, kvtier.paged_sglang_layer_first(t, BS)

        def page_first(zero):
            t = self.rand((2, size, L, H, D), zero)
            return t, kvtier.paged_sglang_page_first(t, BS)

        def mla_page_first(zero):
            t = self.rand((size, L, 1, 40), zero)
            return t, kvtier.paged_sglang_mla_page_first(t, BS)

        pages = lambda b: slice(b * BS, (b + 1) * BS)
        paged_roundtrip(self, self.st, self.ns(), layer_first,
                        lambda s, d: [(lambda b: s[:, :, pages(b)], lambda b: d[:, :, pages(b)])])
        self.st.close()
        self.st = small_store()
        paged_roundtrip(self, self.st, self.ns(), page_first,
                        lambda s, d: [(lambda b: s[:, pages(b)], lambda b: d[:, pages(b)])])
        self.st.close()
        self.st = small_store()
        paged_roundtrip(self, self.st, self.ns(planes=1, heads=1, dim=40), mla_page_first,
                        lambda s, d: [(lambda b: s[pages(b)], lambda b: d[pages(b)])])

    def test_layout_mismatch_is_refused(self):
        t = [torch.zeros(2, self.NB, self.BS, self.H, self.D, dtype=torch.float16)
             for _ in range(self.L)]
        with self.assertRaises(kvtier.LayoutError) as e:
            self.st.connector(self.ns(dtype="f32"), kvtier.paged_flash_attn(t))
        self.assertIn("f32", str(e.exception))
        with self.assertRaises(kvtier.LayoutError):
            self.st.connector(self.ns(heads=4, dtype="f16"), kvtier.paged_flash_attn(t))
        with self.assertRaises(kvtier.LayoutError):
            self.st.connector(self.ns(dtype="f16"), kvtier.paged_flash_attn(t[:2]))
        with self.assertRaises(kvtier.InvalidArgument):
            kvtier.paged_flash_attn([torch.zeros(3, 4, 5)])
        with self.assertRaises(kvtier.InvalidArgument):
            kvtier.paged_sglang_page_first(torch.zeros(2, 20, 3, 2, 4), 16)

    def test_request_errors_gather_scatter_and_close(self):
        t = [self.rand((2, self.NB, self.BS, self.H, self.D), False) for _ in range(self.L)]
        ns = self.ns()
        c = self.st.connector(ns, kvtier.paged_flash_attn(t))
        toks = list(range(96))
        with self.assertRaises(kvtier.InvalidArgument) as e:
            c.load(1, toks, [0, 1], 64)  # 64 tokens need 4 blocks
        self.assertIn("blocks", str(e.exception))
        with self.assertRaises(kvtier.InvalidArgument):
            c.save(1, toks, [0, 1, 2, 3, 4, 99])  # a block id past the pool
        with self.assertRaises(kvtier.InvalidArgument):
            c.wait_layer(1, self.L)
        with self.assertRaises(kvtier.InvalidArgument):
            c.load_errors(77)  # no load registered
        # A chunk missing in the middle: its blocks are the invalid ones.
        self.assertEqual(c.save(3, toks, list(range(6))), 3)
        c.save_layer(3)
        c.wait(3)
        self.assertTrue(self.st.delete(ns, ns.key_chain(toks)[1]))
        c.load(4, toks, [6, 7, 8, 9, 10, 11], 95)
        self.assertEqual(c.wait_layer(4, self.L - 1), 2)
        self.assertEqual(c.load_errors(4), [8, 9])
        done = {d.what: d for d in c.finished()}
        self.assertEqual(done["load"].chunks, 2)
        self.assertIsInstance(done["load"].error, kvtier.NotFound)
        # By key: engine hashes wrapped in the namespace name the chunks.
        hk = ns.keys_from_engine_hashes([bytes([i]) * 32 for i in range(4)], 2)
        self.assertEqual(c.save_keys(5, hk, [0, 1, 2, 3]), 2)
        c.save_layer(5)
        c.wait(5)
        with self.assertRaises(kvtier.InvalidArgument) as e:
            c.load_keys(6, hk[:1], [6, 7, 8, 9], 64)
        self.assertIn("1 keys given", str(e.exception))
        with self.assertRaises(kvtier.InvalidArgument):
            c.save_keys(6, hk, [0, 1, 2])  # two chunks need four blocks
        c.load_keys(6, hk, [8, 9, 10, 11], 64)
        c.wait(6)
        self.assertEqual(c.load_errors(6), [])
        for l in range(self.L):
            self.assertTrue(torch.equal(t[l][:, 0:4], t[l][:, 8:12]))
        # Synchronous gather and scatter of one layer of one chunk.
        buf = torch.empty(ns.layer_bytes, dtype=torch.uint8)
        c.gather(1, [0, 1], 32, buf)
        c.scatter(1, [10, 11], 32, buf)
        self.assertTrue(torch.equal(t[1][:, 0:2], t[1][:, 10:12]))
        with self.assertRaises(kvtier.BufferTooSmall):
            c.gather(1, [0, 1], 32, bytearray(16))
        c.close()
        with self.assertRaises(kvtier.Closed):
            c.lookup(toks)

    def test_store_close_closes_its_connectors_and_gc(self):
        t = [self.rand((2, self.NB, self.BS, self.H, self.D), False) for _ in range(self.L)]
        c = self.st.connector(self.ns(), kvtier.paged_flash_attn(t))
        self.st.close()
        self.assertTrue(c.closed)
        with self.assertRaises(kvtier.Closed):
            c.save(1, list(range(32)), [0, 1])
        # Unreferenced handles are closed by the collector.
        st = small_store()
        ns = st.namespace("gc", kvtier.Layout(self.L, self.H, self.D, "bf16", block_size=16,
                                              chunk_tokens=32))
        c = st.connector(ns, kvtier.paged_flash_attn(t))
        refs = [weakref.ref(st), weakref.ref(c)]
        del st, c
        gc.collect()
        self.assertEqual([r() for r in refs], [None, None])
        self.st = small_store()


if __name__ == "__main__":
    unittest.main(verbosity=1)
