"""kvtier.vllm.KvtierConnector driven the way vLLM v1 drives a KV connector.

vLLM cannot be installed here, so the engine around the connector is a
small model of vLLM's: a block pool handing out scattered block ids, the
scheduler's calls (get_num_new_matched_tokens -> update_state_after_alloc
-> build_connector_meta, then update_connector_output and
request_finished), and the model runner's (bind_connector_metadata ->
start_load_kv -> per layer wait_for_layer_load / "attention" /
save_kv_layer -> wait_for_save -> get_finished ->
get_block_ids_with_load_errors -> clear_connector_metadata), over torch CPU
tensors in vLLM's KV cache layouts.  Block hashes are vLLM's sha256_cbor
chain (kvtier.vllm_block_hash, checked bit for bit against vLLM's own
digests in test_binding).  One engine saves a prompt's KV through a real
tier (DRAM, NVMe, a shared directory, S3 on tests/s3's SigV4-checking
server); a second engine loads it, and every block it did not compute
must be byte-identical to what the first one computed.
"""

import glob
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest
from types import SimpleNamespace as NS

import numpy as np
import torch

import kvtier
from kvtier.vllm.connector import KvtierConnector, KVConnectorRole

L, H, D, BS, CHUNK, NUM_BLOCKS = 4, 2, 64, 16, 64, 48
NONE_HASH = kvtier.vllm_none_hash("vllm-none-hash")


class FullAttentionSpec(NS):
    pass


class MLAAttentionSpec(NS):
    pass


def block_hashes(tokens):
    """vLLM's request.block_hashes: one per full block of tokens."""
    out, parent = [], NONE_HASH
    for i in range(len(tokens) // BS):
        parent = kvtier.vllm_block_hash(parent, tokens[i * BS:(i + 1) * BS],
                                        first_block=(i == 0))
        out.append(parent)
    return out


class Request:
    """What the connector reads of vLLM's v1 Request."""

    def __init__(self, req_id, prompt):
        self.request_id = req_id
        self.prompt_token_ids = list(prompt)
        self.all_token_ids = list(prompt)
        self.num_tokens = len(prompt)
        self.num_computed_tokens = 0
        self.block_hashes = block_hashes(self.prompt_token_ids)
        self.lora_request = None
        self.mm_features = []
        self.cache_salt = None


class KVCacheBlocks:
    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self):
        return (list(self.ids),)


_POS = {}


def truth(prompt, mla=False, rank=0):
    """The KV a model computes for a prompt, per layer: (planes, tokens,
    heads, dim) of bf16.  A token's KV depends on its id and position only,
    so prompts sharing a prefix share its KV, as with a real model; each
    tensor-parallel rank holds other heads (other values)."""
    shape = (1, 1, 72) if mla else (2, H, D)
    if shape not in _POS:
        g = torch.Generator().manual_seed(11)
        _POS[shape] = (torch.randn((L, 1024) + shape, generator=g),
                       torch.randn((L, 4096) + shape, generator=g))
    pos_t, tok_t = _POS[shape]
    n = len(prompt)
    ids = torch.tensor(prompt) % 4096
    kv = pos_t[:, :n] + tok_t[:, ids] + rank   # (L, n, planes, heads, dim)
    return [kv[l].transpose(0, 1).to(torch.bfloat16).contiguous() for l in range(L)]


class Engine:
    """One vLLM instance: a scheduler-side and a worker-side connector, a
    KV cache in one of vLLM's layouts, and the calls vLLM makes per step."""

    def __init__(self, extra, layout="flash_attn", kv_role="kv_both", tp=(0, 1)):
        """tp: (rank, size); every rank but 0 is a worker alone, driven by
        rank 0's engine (vLLM's one scheduler) through `ranks`."""
        self.layout = layout
        self.rank = tp[0]
        self.ranks = []
        self.mla = layout == "mla"
        self.names = ["model.layers.%d.self_attn.attn" % i for i in range(L)]
        spec = (MLAAttentionSpec(block_size=BS, num_kv_heads=1, head_size=72,
                                 dtype=torch.bfloat16) if self.mla else
                FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D,
                                  dtype=torch.bfloat16))
        kv_cache_config = NS(num_blocks=NUM_BLOCKS,
                             kv_cache_groups=[NS(layer_names=self.names, kv_cache_spec=spec)])
        vllm_config = NS(
            kv_transfer_config=NS(kv_connector="KvtierConnector",
                                  kv_connector_module_path="kvtier.vllm", kv_role=kv_role,
                                  kv_connector_extra_config=dict(
                                      {"chunk_size": CHUNK, "tp_rank": tp[0]}, **extra)),
            cache_config=NS(block_size=BS, cache_dtype="auto"),
            model_config=NS(model="test/tiny-llama", revision=None),
            parallel_config=NS(tensor_parallel_size=tp[1], pipeline_parallel_size=1))
        self.worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        self.sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER,
                                     kv_cache_config) if tp[0] == 0 else None
        self.kv = self.allocate()
        if layout == "cross_layer":
            self.worker.register_cross_layers_kv_cache(self.kv, None)
        else:
            self.worker.register_kv_caches(dict(zip(self.names, self.kv)))
        self.free = list(range(NUM_BLOCKS))
        random.Random(7).shuffle(self.free)

    def allocate(self):
        z = lambda *s: torch.zeros(s, dtype=torch.bfloat16)
        if self.layout == "flash_attn":
            return [z(2, NUM_BLOCKS, BS, H, D) for _ in range(L)]
        if self.layout == "flash_attn_hnd":  # physical HND, vLLM's permuted view
            return [z(2, NUM_BLOCKS, H, BS, D).permute(0, 1, 3, 2, 4) for _ in range(L)]
        if self.layout == "flashinfer":
            return [z(NUM_BLOCKS, 2, BS, H, D) for _ in range(L)]
        if self.layout == "mla":
            return [z(NUM_BLOCKS, BS, 72) for _ in range(L)]
        if self.layout == "cross_layer":  # blocks first in memory, layers first logically
            return z(NUM_BLOCKS, L, 2, BS, H, D).permute(1, 2, 0, 3, 4, 5)
        raise ValueError(self.layout)

    def planes(self, layer):
        """Views (blocks, block tokens, heads, dim) of layer's K and V."""
        t = self.kv[layer]
        if self.layout in ("flash_attn", "flash_attn_hnd", "cross_layer"):
            return [t[0], t[1]]
        if self.layout == "flashinfer":
            return [t[:, 0], t[:, 1]]
        return [t.unsqueeze(2)]

    def token_kv(self, layer, blocks, pos):
        b, o = blocks[pos // BS], pos % BS
        return [p[b, o] for p in self.planes(layer)]

    def write(self, layer, blocks, lo, hi, kv):
        """What attention does: the KV of tokens [lo, hi) into their slots."""
        for pos in range(lo, hi):
            for p, dst in enumerate(self.token_kv(layer, blocks, pos)):
                dst.copy_(kv[layer][p, pos])

    def run_prefill(self, req, local_hit=0, budget=None, local_kv=None):
        """Schedule `req`'s whole prompt, `budget` tokens a step (chunked
        prefill; None: one step), and run each step's forward pass.  The
        first local_hit tokens (whole blocks) are vLLM's own prefix-cache
        hit: their blocks already hold `local_kv` (default: the prompt's
        true KV).  Returns (external tokens, blocks, invalid block ids
        reported over the steps, the prompt's true KV)."""
        n = len(req.prompt_token_ids)
        ext, load_async = self.sched.get_num_new_matched_tokens(req, local_hit)
        assert load_async is False and ext is not None
        # The scheduler may ask again; the answer is the same (no side effect).
        assert self.sched.get_num_new_matched_tokens(req, local_hit) == (ext, False)
        kv = truth(req.prompt_token_ids, self.mla)
        blocks = [self.free.pop() for _ in range(local_hit // BS)]
        for l in range(L):
            self.write(l, blocks, 0, local_hit, local_kv or kv)
        done = local_hit + ext
        step = min(budget or n, n - done)
        blocks += [self.free.pop() for _ in range(-(-(done + step) // BS) - len(blocks))]
        self.sched.update_state_after_alloc(req, KVCacheBlocks(blocks), ext)
        out = NS(scheduled_new_reqs=[NS(req_id=req.request_id,
                                        prompt_token_ids=req.prompt_token_ids,
                                        block_ids=(list(blocks),),
                                        num_computed_tokens=done)],
                 scheduled_cached_reqs=NS(req_ids=[], resumed_req_ids=set(), new_block_ids=[],
                                          num_computed_tokens=[]),
                 num_scheduled_tokens={req.request_id: step},
                 finished_req_ids=set())
        invalid = set()
        while True:
            req.num_computed_tokens = done
            meta = self.sched.build_connector_meta(out)
            invalid |= self.forward(meta, blocks, done, done + step, kv)
            for r in self.ranks:  # the same metadata and block table on every rank
                invalid |= r.forward(meta, blocks, done, done + step,
                                     truth(req.prompt_token_ids, self.mla, r.rank))
            done += step
            req.num_computed_tokens = done
            if done == n:
                return ext, blocks, invalid, kv
            step = min(budget, n - done)
            new = [self.free.pop() for _ in range(-(-(done + step) // BS) - len(blocks))]
            blocks += new
            out = NS(scheduled_new_reqs=[],
                     scheduled_cached_reqs=NS(req_ids=[req.request_id], resumed_req_ids=set(),
                                              new_block_ids=[(new,)],
                                              num_computed_tokens=[done]),
                     num_scheduled_tokens={req.request_id: step}, finished_req_ids=set())

    def forward(self, meta, blocks, lo, hi, kv):
        """The model runner's calls around one forward pass computing
        tokens [lo, hi); the invalid block ids it reports."""
        w = self.worker
        w.bind_connector_metadata(meta)
        w.start_load_kv(NS(no_compile_layers={}, attn_metadata={}))
        for l, name in enumerate(self.names):
            w.wait_for_layer_load(name)
            self.write(l, blocks, lo, hi, kv)
            w.save_kv_layer(name, self.kv[l], None)
        w.wait_for_save()
        sending, recving = w.get_finished(set())
        invalid = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        assert (sending, recving) == (None, None)
        if self.sched is not None:
            self.sched.update_connector_output(NS(finished_sending=sending,
                                                  finished_recving=recving,
                                                  invalid_block_ids=invalid))
        return invalid

    def finish(self, req, blocks):
        assert self.sched.request_finished(req, blocks) == (False, None)
        assert list(self.sched.take_events()) == []
        self.free.extend(blocks)

    def check(self, test, blocks, kv, lo, hi):
        for l in range(L):
            for pos in range(lo, hi):
                for p, got in enumerate(self.token_kv(l, blocks, pos)):
                    if not torch.equal(got, kv[l][p, pos]):
                        test.fail("layer %d plane %d token %d differs" % (l, p, pos))

    def shutdown(self):
        self.worker.shutdown()
        if self.sched is not None:
            self.sched.shutdown()


def prompt(seed, n):
    r = random.Random(seed)
    return [r.randrange(1, 32000) for _ in range(n)]


class Tiers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="kvt-vllm-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def base(self, **kw):
        kw.setdefault("max_local_cpu_size", "32MiB")
        kw.setdefault("dram_prefault", False)
        kw.setdefault("dram_lock_memory", False)
        return kw

    def save_then_load(self, extra, layout="flash_attn", same_time=False):
        """Engine A computes a prompt and saves it; engine B (alive at the
        same time, or started after A shut down) loads it.  Returns B and
        what it saw, for the caller to check."""
        p = prompt(1, 3 * CHUNK + 20)  # 3 whole chunks and a tail
        a = Engine(extra, layout)
        ra = Request("a-1", p)
        ext, blocks_a, inv, kv = a.run_prefill(ra)
        self.assertEqual((ext, inv), (0, set()))
        a.finish(ra, blocks_a)
        if not same_time:
            a.shutdown()
        b = Engine(extra, layout)
        rb = Request("b-1", p)
        ext, blocks_b, inv, kv_b = b.run_prefill(rb)
        self.assertTrue(torch.equal(kv[0], kv_b[0]))
        if same_time:
            a.shutdown()
        return b, rb, ext, blocks_b, inv, kv

    def roundtrip(self, extra, layout="flash_attn", same_time=False):
        b, rb, ext, blocks, inv, kv = self.save_then_load(extra, layout, same_time)
        try:
            self.assertEqual(ext, 3 * CHUNK)  # the tail is recomputed
            self.assertEqual(inv, set())
            b.check(self, blocks, kv, 0, len(rb.prompt_token_ids))
            # A second prompt sharing the first two chunks hits those only,
            # and a full hit of a chunk-aligned prompt loads one token fewer.
            p2 = rb.prompt_token_ids[:2 * CHUNK] + prompt(2, 50)
            r2 = Request("b-2", p2)
            ext2, blocks2, inv2, kv2 = b.run_prefill(r2)
            self.assertEqual((ext2, inv2), (2 * CHUNK, set()))
            b.finish(r2, blocks2)
            r3 = Request("b-3", rb.prompt_token_ids[:3 * CHUNK])
            ext3, blocks3, inv3, _ = b.run_prefill(r3)
            self.assertEqual((ext3, inv3), (3 * CHUNK - 1, set()))
            b.check(self, blocks3, kv, 0, 3 * CHUNK)
            b.finish(r3, blocks3)
        finally:
            b.shutdown()

    def test_dram(self):
        self.roundtrip(self.base(connector_threads=1), same_time=True)

    def test_chunked_prefill_and_prefix_hits(self):
        """A prompt computed 40 tokens a step saves each chunk in the step
        that completes it; a vLLM prefix hit inside a chunk loads from that
        chunk's start, one on a chunk boundary leaves vLLM's blocks alone."""
        extra = self.base()
        a, b = Engine(extra), Engine(extra)
        try:
            p = prompt(5, 3 * CHUNK + 20)
            ra = Request("p-1", p)
            self.assertEqual(a.run_prefill(ra, budget=40)[0], 0)
            ext, blocks, inv, kv = b.run_prefill(Request("p-2", p), budget=50)
            self.assertEqual((ext, inv), (3 * CHUNK, set()))
            b.check(self, blocks, kv, 0, len(p))
            ext, blocks, inv, kv = b.run_prefill(Request("p-3", p), local_hit=2 * BS)
            self.assertEqual((ext, inv), (3 * CHUNK - 2 * BS, set()))
            b.check(self, blocks, kv, 0, len(p))
            mark = [torch.full_like(t, 0.5) for t in kv]
            ext, blocks, inv, kv = b.run_prefill(Request("p-4", p), local_hit=CHUNK,
                                                 local_kv=mark)
            self.assertEqual((ext, inv), (2 * CHUNK, set()))
            b.check(self, blocks, mark, 0, CHUNK)
            b.check(self, blocks, kv, CHUNK, len(p))
        finally:
            a.shutdown()
            b.shutdown()

    def test_scheduler_in_a_process_of_its_own(self):
        """With no worker in its process (vLLM's multiprocess executors) the
        scheduler looks up in a read-only store over the lower tiers; with
        none configured it finds nothing and says why once."""
        d = os.path.join(self.root, "nvme-sched")
        extra = self.base(local_disk=d, max_local_disk_size="64MiB")
        a = Engine(extra)
        p = prompt(6, 2 * CHUNK + 7)
        ra = Request("s-1", p)
        _, blocks, _, _ = a.run_prefill(ra)
        a.finish(ra, blocks)
        a.shutdown()
        sched_only = KvtierConnector(a.worker._vllm_config, KVConnectorRole.SCHEDULER,
                                     a.worker._kv_cache_config)
        try:
            self.assertEqual(sched_only.get_num_new_matched_tokens(Request("s-2", p), 0),
                             (2 * CHUNK, False))
            st = sched_only._store
            self.assertEqual([t["name"] for t in st.stats()], ["nvme"])
            self.assertEqual(st.stats(0)["read_only"], 1)
        finally:
            sched_only.shutdown()
        dram_only = KvtierConnector(a.worker._vllm_config.__class__(
            **dict(vars(a.worker._vllm_config), kv_transfer_config=NS(
                kv_role="kv_both", kv_connector_extra_config=self.base(chunk_size=CHUNK)))),
            KVConnectorRole.SCHEDULER, a.worker._kv_cache_config)
        with self.assertLogs("kvtier.vllm", "WARNING"):
            self.assertEqual(dram_only.get_num_new_matched_tokens(Request("s-3", p), 0),
                             (0, False))
        dram_only.shutdown()

    def test_tensor_parallel(self):
        """Two TP ranks store their own shards under their own namespaces;
        the scheduler counts a chunk only when every rank's shard is there,
        and each rank gets its own bytes back."""
        extra = self.base()
        a0, a1 = Engine(extra, tp=(0, 2)), Engine(extra, tp=(1, 2))
        a0.ranks = [a1]
        b0, b1 = Engine(extra, tp=(0, 2)), Engine(extra, tp=(1, 2))
        b0.ranks = [b1]
        try:
            p = prompt(8, 3 * CHUNK + 9)
            ra = Request("t-1", p)
            self.assertEqual(a0.run_prefill(ra)[0], 0)
            ns1 = a1.worker._ns
            self.assertNotEqual(ns1, a0.worker._ns)
            self.assertTrue(a1.worker._store.delete(
                ns1, ns1.key_from_engine_hash(ra.block_hashes[3 * (CHUNK // BS) - 1])))
            ext, blocks, inv, kv = b0.run_prefill(Request("t-2", p))
            self.assertEqual((ext, inv), (2 * CHUNK, set()))
            b0.check(self, blocks, kv, 0, len(p))
            b1.check(self, blocks, truth(p, rank=1), 0, len(p))
        finally:
            for e in (a0, a1, b0, b1):
                e.shutdown()

    def test_dram_layouts(self):
        for layout in ("flash_attn_hnd", "flashinfer", "mla", "cross_layer"):
            with self.subTest(layout=layout):
                self.roundtrip(self.base(), layout, same_time=True)

    def test_nvme(self):
        d = os.path.join(self.root, "nvme")
        self.roundtrip(self.base(local_disk=d, max_local_disk_size="64MiB"))

    def test_shared_fs(self):
        d = os.path.join(self.root, "shared")
        self.roundtrip(self.base(shared_fs=d, max_shared_fs_size="64MiB"))

    def test_s3(self):
        src = os.environ.get("KVT_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
        script = os.path.join(src, "tests", "s3", "server.js")
        if not os.path.exists(os.path.join(src, "tests", "s3", "node_modules")):
            self.fail("tests/s3/node_modules missing: run scripts/install-deps.sh")
        data = os.path.join(self.root, "s3data")
        os.makedirs(data)
        srv = subprocess.Popen(["node", script, data, "kvt"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        try:
            line = srv.stdout.readline().split()
            self.assertEqual(line[0], "PORT", "the S3 test server did not start")
            os.environ["AWS_ACCESS_KEY_ID"] = "kvtier-test"
            os.environ["AWS_SECRET_ACCESS_KEY"] = "kvtier-test-secret"
            self.roundtrip(self.base(remote_url="s3://kvt/vllm/",
                                     s3_endpoint="http://127.0.0.1:%s" % line[1],
                                     s3_region="us-east-1", s3_admission="always"))
        finally:
            srv.stdin.close()
            srv.wait(10)
            srv.stdout.close()

    def corrupt_one(self, extra, directory):
        """A byte of chunk 1 flipped on disk: exactly that chunk's blocks
        come back from get_block_ids_with_load_errors."""
        p = prompt(3, 3 * CHUNK + 5)
        a = Engine(extra)
        ra = Request("c-1", p)
        _, blocks_a, _, kv = a.run_prefill(ra)
        a.finish(ra, blocks_a)
        a.shutdown()
        ns_probe = kvtier.Store(**dict(extra, read_only=True, local_cpu=False))
        lay = kvtier.Layout(L, H, D, "bf16", block_size=BS, chunk_tokens=CHUNK)
        ns = ns_probe.namespace("test/tiny-llama", lay, tp_size=1, pp_size=1)
        key = ns.key_from_engine_hash(ra.block_hashes[2 * (CHUNK // BS) - 1])
        ns_probe.close()
        files = glob.glob(os.path.join(directory, "**", "*%s*" % key.hex()), recursive=True)
        self.assertEqual(len(files), 1, files)
        with open(files[0], "r+b") as f:
            f.seek(4096 + 3 * (2 * CHUNK * H * D * 2) + 100)  # inside layer 3
            x = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([x[0] ^ 0x40]))
        b = Engine(extra)
        rb = Request("c-2", p)
        ext, blocks, inv, _ = b.run_prefill(rb)
        try:
            self.assertEqual(ext, 3 * CHUNK)  # the lookup is from memory: a hit
            bpc = CHUNK // BS
            self.assertEqual(inv, set(blocks[bpc:2 * bpc]))
            b.check(self, blocks, kv, 0, CHUNK)
            b.check(self, blocks, kv, 2 * CHUNK, len(p))
        finally:
            b.shutdown()

    def test_corrupt_nvme(self):
        d = os.path.join(self.root, "nvme-bad")
        self.corrupt_one(self.base(local_cpu=False, local_disk=d,
                                   max_local_disk_size="64MiB"), d)

    def test_corrupt_shared_fs(self):
        d = os.path.join(self.root, "shared-bad")
        self.corrupt_one(self.base(local_cpu=False, shared_fs=d,
                                   max_shared_fs_size="64MiB"), d)


class SecondaryTier(unittest.TestCase):
    """KvtierSecondaryTier driven as vLLM's tiered offloading manager does:
    submit_store of pinned primary slots, get_finished polled until the job
    is reported, lookup, submit_load into other slots."""

    SLOT, SLOTS = 16384, 12

    def poll(self, tier, job):
        for _ in range(2000):
            for r in tier.get_finished():
                if r.job_id == job:
                    return r.success
            time.sleep(0.005)
        self.fail("job %d never finished" % job)

    def run_tier(self, extra, restart):
        from kvtier.vllm.connector import JobMetadata, KvtierSecondaryTier
        from vllm.v1.kv_offload.base import LookupResult
        primary = torch.zeros(self.SLOTS, self.SLOT, dtype=torch.uint8)
        view = memoryview(primary.numpy())
        spec = NS(vllm_config=NS(model_config=NS(model="test/tiny-llama")))
        tier = KvtierSecondaryTier(spec, view, "kvtier", **extra)
        keys = [bytes([7, i]) * 16 for i in range(4)]
        data = torch.randint(0, 256, (4, self.SLOT), dtype=torch.uint8)
        primary[[1, 3, 5, 7]] = data
        tier.submit_store(JobMetadata(1, keys, np.array([1, 3, 5, 7]), False, None))
        self.assertTrue(self.poll(tier, 1))
        if restart:
            # The factory's other form (vllm_config=...) names the same chunks.
            tier.shutdown()
            tier = KvtierSecondaryTier(vllm_config=spec.vllm_config, primary_kv_view=view,
                                       tier_type="kvtier", **extra)
        primary.zero_()
        self.assertEqual([tier.lookup(k, None) for k in keys + [b"x" * 32]],
                         [LookupResult.HIT] * 4 + [LookupResult.MISS])
        tier.submit_load(JobMetadata(2, keys, np.array([11, 10, 9, 8]), True, None))
        self.assertTrue(self.poll(tier, 2))
        self.assertTrue(torch.equal(primary[[11, 10, 9, 8]], data))
        self.assertFalse(primary[:8].any())
        tier.submit_load(JobMetadata(3, [keys[0], b"x" * 32], np.array([0, 2]), True, None))
        self.assertFalse(self.poll(tier, 3))  # a miss fails the job
        with self.assertRaises(kvtier.InvalidArgument):
            tier.submit_store(JobMetadata(4, [b"y" * 32], np.array([self.SLOTS]), False, None))
        tier.shutdown()

    def test_dram(self):
        self.run_tier({"max_local_cpu_size": "16MiB", "dram_prefault": False}, False)

    def test_nvme_across_a_restart(self):
        d = tempfile.mkdtemp(prefix="kvt-vllm-off-")
        try:
            self.run_tier({"max_local_cpu_size": "16MiB", "dram_prefault": False,
                           "local_disk": d, "max_local_disk_size": "64MiB"}, True)
        finally:
            shutil.rmtree(d)


class Contract(unittest.TestCase):
    def test_roles(self):
        """kv_consumer loads and never saves; kv_producer saves and never
        loads."""
        extra = {"max_local_cpu_size": "16MiB", "dram_prefault": False}
        p = prompt(9, 2 * CHUNK + 3)
        cons = Engine(extra, kv_role="kv_consumer")
        prod = Engine(extra, kv_role="kv_producer")
        both = Engine(extra)
        try:
            self.assertEqual(cons.run_prefill(Request("r-1", p))[0], 0)
            probe = Request("r-2", p)
            self.assertEqual(both.sched.get_num_new_matched_tokens(probe, 0), (0, False))
            self.assertEqual(prod.run_prefill(Request("r-3", p))[0], 0)  # saves
            self.assertEqual(both.sched.get_num_new_matched_tokens(probe, 0),
                             (2 * CHUNK, False))
            self.assertEqual(prod.run_prefill(Request("r-4", p))[0], 0)  # never loads
            ext, blocks, inv, kv = cons.run_prefill(Request("r-5", p))
            self.assertEqual((ext, inv), (2 * CHUNK, set()))
            cons.check(self, blocks, kv, 0, len(p))
        finally:
            for e in (cons, prod, both):
                e.shutdown()

    def test_layout_without_kv_cache_config(self):
        """vLLM before 0.11 gives no kv_cache_config: the model config's
        per-rank figures make the same namespace."""
        mc = NS(model="test/tiny-llama", revision=None, dtype=torch.bfloat16, use_mla=False,
                get_num_layers=lambda pc: L, get_num_kv_heads=lambda pc: H,
                get_head_size=lambda: D)
        cfg = NS(kv_transfer_config=NS(kv_role="kv_both", kv_connector_extra_config={
                     "max_local_cpu_size": "16MiB", "dram_prefault": False,
                     "chunk_size": CHUNK}),
                 cache_config=NS(block_size=BS, cache_dtype="auto"), model_config=mc,
                 parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=1))
        old = KvtierConnector(cfg, KVConnectorRole.WORKER, None)
        new = Engine({"max_local_cpu_size": "16MiB", "dram_prefault": False})
        try:
            self.assertEqual(old._ns, new.worker._ns)
        finally:
            old.shutdown()
            new.shutdown()

    def test_names_and_errors(self):
        from kvtier.vllm import connector as vllm
        for m in ("get_num_new_matched_tokens", "update_state_after_alloc",
                  "build_connector_meta", "request_finished", "update_connector_output",
                  "take_events", "register_kv_caches", "register_cross_layers_kv_cache",
                  "start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
                  "get_finished", "get_block_ids_with_load_errors", "shutdown",
                  "bind_connector_metadata", "clear_connector_metadata"):
            self.assertTrue(callable(getattr(vllm.KvtierConnector, m)), m)
        self.assertTrue(issubclass(vllm.KvtierConnector, vllm.KVConnectorBase_V1))
        with self.assertRaises(kvtier.InvalidArgument) as e:
            Engine({"max_local_cpu_size": "16MiB", "dram_prefault": False,
                    "chunk_size": 40})
        self.assertIn("block_size", str(e.exception))
        with self.assertRaises(kvtier.ConfigError) as e:
            Engine({"max_local_cpu_size": "lots"})
        self.assertIn("max_local_cpu_size", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=1)
