"""The binding and the engine connector over CUDA tensors, on a GPU machine
(scripts/device-check.sh runs it there); skipped where torch sees no CUDA
device or the library was built without its CUDA backend.

- Chunks saved from device blocks and loaded into other device blocks are
  byte-identical, through the DRAM tier.
- Stream order, save: a block written on the engine's compute stream after
  a long kernel, then saved at once (save_layer with that stream, as
  kvtier.vllm does), is stored with the written bytes, never the old ones.
- Stream order, load: once wait_layer returns, a kernel on any stream reads
  the loaded bytes (the copy is complete, not merely queued).
"""

import unittest

import pytest
import torch

import kvtier

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

L, H, D, BS, CHUNK, NB = 4, 8, 128, 16, 256, 64


def engine():
    return [torch.zeros(2, NB, BS, H, D, dtype=torch.bfloat16, device="cuda")
            for _ in range(L)]


class Cuda(unittest.TestCase):
    def setUp(self):
        self.st = kvtier.Store(max_local_cpu_size="512MiB", dram_prefault=False)
        lay = kvtier.Layout(L, H, D, "bf16", block_size=BS, chunk_tokens=CHUNK)
        self.ns = self.st.namespace("test/cuda", lay)
        self.kv = engine()
        try:
            self.conn = self.st.connector(self.ns, kvtier.paged_flash_attn(self.kv))
        except kvtier.NotSupported as e:
            self.st.close()
            self.skipTest("no CUDA backend in this build: %s" % e)

    def tearDown(self):
        self.conn.close()
        self.st.close()

    def keys(self, n, seed):
        return [self.ns.key_from_engine_hash(bytes([seed, i]) * 16) for i in range(n)]

    def save(self, req, keys, blocks, stream=None):
        self.assertEqual(self.conn.save_keys(req, keys, blocks), len(keys))
        for l in range(L):
            self.conn.save_layer(req, l, stream)
        self.conn.wait(req)
        self.conn.end(req)

    def test_round_trip(self):
        for t in self.kv:
            t.copy_(torch.randn_like(t, dtype=torch.float32).to(torch.bfloat16))
        src = list(range(0, 32))              # two chunks of 16 blocks
        dst = list(range(63, 31, -1))
        keys = self.keys(2, 1)
        self.save(1, keys, src)
        before = [t.clone() for t in self.kv]
        self.conn.load_keys(2, keys, dst, 2 * CHUNK)
        for l in range(L):
            self.assertEqual(self.conn.wait_layer(2, l, 30000), 0)
        self.assertEqual(self.conn.load_errors(2), [])
        self.conn.end(2)
        for t, b in zip(self.kv, before):
            for s, d in zip(src, dst):
                self.assertTrue(torch.equal(t[:, d], b[:, s]))

    def test_save_waits_for_the_engine_stream(self):
        s = torch.cuda.Stream()
        blocks = list(range(16))
        with torch.cuda.stream(s):
            torch.cuda._sleep(200_000_000)     # ~0.1 s or more of GPU time
            for t in self.kv:
                t[:, :16].fill_(7)
        # Saved at once, as vLLM's save_kv_layer does right after attention
        # is queued: the bytes stored must be the 7s.
        self.save(3, self.keys(1, 2), blocks, stream=s)
        torch.cuda.synchronize()
        for t in self.kv:
            t.zero_()
        self.conn.load_keys(4, self.keys(1, 2), list(range(32, 48)), CHUNK)
        self.conn.wait_layer(4, L - 1, 30000)
        self.conn.end(4)
        for t in self.kv:
            self.assertTrue(bool((t[:, 32:48] == 7).all()))

    def test_load_is_complete_when_wait_layer_returns(self):
        for t in self.kv:
            t[:, :16].fill_(5)
        self.save(5, self.keys(1, 3), list(range(16)))
        for t in self.kv:
            t.zero_()
        other = torch.cuda.Stream()
        self.conn.load_keys(6, self.keys(1, 3), list(range(16, 32)), CHUNK)
        for l in range(L):
            self.conn.wait_layer(6, l, 30000)
            with torch.cuda.stream(other):
                got = self.kv[l][:, 16:32].float().sum().item()
            self.assertEqual(got, 5.0 * 2 * 16 * BS * H * D)
        self.conn.end(6)


if __name__ == "__main__":
    unittest.main()
