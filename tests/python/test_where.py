"""`kvtier where` (docs/WHERE.md): a fleet's KV events read by the kvtier
command, which answers which node holds a prompt's longest prefix, on which
medium, and how many tokens.

Publishers are the real ones: vLLM's own ZmqEventPublisher (from the
installed vLLM, with bytes and integer block hashes) and kvtierd with
kv_events on, three of them on loopback, chunks put through the binding
as a client of each.  A node started after `where`, a gap (the stream cut
and joined again) and malformed payloads and replay answers are all
exercised; `--serve` is asked over HTTP.

Run through <build>/pytest.sh (KVT_KVTIERD names kvtierd; the kvtier
command is the one beside it).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import msgspec
import zmq
from vllm.distributed.kv_events import (BlockRemoved, BlockStored, KVEventBatch,
                                        ZmqEventPublisher)
from vllm.utils.hashing import sha256_cbor
from vllm.v1.core import kv_cache_utils as kcu

import kvtier
import tier_env

MODEL = "tiny"  # kvtier's preset: 2 layers x 2 KV heads x 16 dims
CHUNK = 16
END = (-1).to_bytes(8, "big", signed=True)
ENC = msgspec.msgpack.Encoder()


def kvtier_bin():
    d = os.environ.get("KVT_KVTIERD")
    if not d:
        raise unittest.SkipTest("KVT_KVTIERD is not set (run through <build>/pytest.sh)")
    path = os.path.join(os.path.dirname(d), "kvtier")
    if not os.access(path, os.X_OK):
        raise RuntimeError("no kvtier command beside %s" % d)
    return path


def where(args, timeout=60):
    """`kvtier where ARGS --json`: its answer, parsed, and its stderr."""
    p = subprocess.run([kvtier_bin(), "where", *args, "--json"], capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode:
        raise AssertionError("kvtier where %s: exit %d: %s" % (args, p.returncode, p.stderr))
    return json.loads(p.stdout), p.stderr


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def by_node(answer):
    return {n["node"]: n for n in answer["nodes"]}


class Serve:
    """`kvtier where --serve 0 ...`, its port read from its first line."""

    def __init__(self, args, stderr_path):
        self.err = open(stderr_path, "w")
        self.p = subprocess.Popen([kvtier_bin(), "where", "--serve", "0", *args],
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.p.stdout.readline()
        if "serving http://" not in line:
            self.p.kill()
            raise AssertionError("kvtier where --serve did not start: %r" % line)
        self.base = line.split("serving ")[1].split("/where")[0]

    def get(self, path):
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def post(self, body, path="/where"):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def wait(self, cond, what, timeout=20):
        """Poll until cond() holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(0.05)
        self.err.flush()
        with open(self.err.name) as f:
            log = f.read()[-2000:]
        raise AssertionError("timed out waiting for %s; /stats %s; stderr: %s"
                             % (what, self.get("/stats")[1], log))

    def stats(self, node):
        return {n["node"]: n for n in self.get("/stats")[1]["nodes"]}[node]

    def close(self):
        """Stop it with SIGTERM; it must exit 0 (it never crashed)."""
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(20)
        self.p.stdout.close()
        self.err.close()
        return rc


class Relay:
    """A node's PUB stream re-published on a PUB of its own: what `where`
    subscribes to where a test takes the stream away (cut) and gives it
    back (join).  Pumped by the test, so nothing runs behind its back."""

    def __init__(self, upstream):
        self.ctx = zmq.Context.instance()
        self.port = tier_env.free_port()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind("tcp://127.0.0.1:%d" % self.port)
        self.upstream = upstream
        self.sub = None
        self.seqs = []

    @property
    def endpoint(self):
        return "tcp://127.0.0.1:%d" % self.port

    def join(self):
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(self.upstream)
        time.sleep(0.4)  # ZeroMQ's slow joiner

    def cut(self):
        self.sub.close(0)
        self.sub = None

    def pump(self, n, timeout=10):
        """Forward until n more batches have gone through and nothing more
        comes for 200 ms."""
        want = len(self.seqs) + n
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sub.poll(200):
                fr = self.sub.recv_multipart()
                self.pub.send_multipart(fr)
                self.seqs.append(int.from_bytes(fr[1], "big"))
            elif len(self.seqs) >= want:
                return
        raise AssertionError("the relay saw %d batches, not %d" % (len(self.seqs), want))

    def close(self):
        if self.sub is not None:
            self.sub.close(0)
        self.pub.close(0)


def vllm_hashes(tokens, bs=16):
    """vLLM's own block hashes of `tokens` (its sha256_cbor, its NONE_HASH)."""
    kcu.init_none_hash(sha256_cbor)
    out, parent = [], None
    for b in range(len(tokens) // bs):
        parent = kcu.hash_block_tokens(sha256_cbor, parent, tokens[b * bs:(b + 1) * bs], None)
        out.append(bytes(parent))
    return out


def as_int(h):
    return int.from_bytes(h, "big") & ((1 << 64) - 1)


class VllmPublisher(unittest.TestCase):
    """vLLM's own ZmqEventPublisher feeding `kvtier where --vllm`."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvt-where-vllm-")
        self.pubs = {}

    def tearDown(self):
        for p in self.pubs.values():
            p.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    def publisher(self, name):
        pub, rep = tier_env.free_port(), tier_env.free_port()
        self.pubs[name] = ZmqEventPublisher(0, endpoint="tcp://*:%d" % pub,
                                            replay_endpoint="tcp://*:%d" % rep)
        return "%s=tcp://127.0.0.1:%d" % (name, pub), "tcp://127.0.0.1:%d" % rep

    def stored(self, name, hashes, medium, block_size=16, parent=None):
        self.pubs[name].publish(KVEventBatch(ts=time.time(), events=[BlockStored(
            block_hashes=hashes, parent_block_hash=parent, token_ids=[0] * (16 * len(hashes)),
            block_size=block_size, lora_id=None, medium=medium, lora_name=None)]))

    def test_int_and_bytes_hashes_from_vllms_publisher(self):
        tokens = list(range(5000, 5100))  # six whole 16-token blocks
        h = vllm_hashes(tokens)
        subs, reps = zip(*(self.publisher(n) for n in ("bytes", "ints", "other")))
        # "bytes": blocks 0-3 on GPU, block 4 on CPU (vLLM's offload);
        # "ints": all six on GPU, as VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
        # publishes them; "other": the same hashes published with another
        # block size (another model's stream), which must never match.
        self.stored("bytes", h[:4], "GPU")
        self.stored("bytes", h[4:5], "CPU", parent=h[3])
        self.stored("bytes", h[2:3], "CPU", parent=h[1])  # a copy below GPU too
        self.stored("ints", [as_int(x) for x in h], "GPU")
        self.stored("other", h, "GPU", block_size=32)
        time.sleep(0.3)  # the publishers' threads send (and buffer) them
        tok = write(os.path.join(self.dir, "tokens.json"), json.dumps(tokens))
        seed = kcu.get_none_hash_seed()
        args = ["--subscribe", ",".join(subs), "--replay", ",".join(reps), "--tokens", tok,
                "--vllm", "--seed", seed, "--block-size", "16", "--wait-ms", "200"]
        a, _ = where(args)
        n = by_node(a)
        self.assertEqual(a["best"]["node"], "ints")
        self.assertEqual((a["best"]["tokens"], a["best"]["tier"], a["best"]["hashes"]),
                         (96, "GPU", "vllm_int"))
        self.assertEqual((n["bytes"]["tokens"], n["bytes"]["blocks"], n["bytes"]["tier"],
                          n["bytes"]["hashes"]), (80, 5, "CPU", "vllm"))
        self.assertEqual(n["bytes"]["media"], {"GPU": 4, "CPU": 1})
        self.assertEqual(n["other"]["tokens"], 0)
        st = {s["node"]: s for s in a["stats"]["nodes"]}
        self.assertEqual(st["bytes"]["batches"], 3)
        self.assertEqual(st["bytes"]["data_parallel_rank"], 0)
        self.assertEqual(a["stats"]["index"]["blocks"], 4 + 1 + 6 + 6)  # (node, hash, size)
        self.assertLessEqual(a["stats"]["index"]["bytes_per_block_at_capacity"], 64)

        # vLLM evicts block 2 from its GPU: "ints" now holds two blocks
        # alone, and "bytes" keeps its CPU copy of it.
        self.pubs["ints"].publish(KVEventBatch(ts=time.time(), events=[
            BlockRemoved(block_hashes=[as_int(h[2])], medium="GPU")]))
        self.pubs["bytes"].publish(KVEventBatch(ts=time.time(), events=[
            BlockRemoved(block_hashes=[h[2]], medium="GPU")]))
        time.sleep(0.3)
        a, _ = where(args)
        n = by_node(a)
        self.assertEqual(n["ints"]["tokens"], 32)
        self.assertEqual((a["best"]["node"], a["best"]["tokens"]), ("bytes", 80))
        self.assertEqual(n["bytes"]["media"], {"GPU": 3, "CPU": 2})


class Fleet(unittest.TestCase):
    """Three kvtierd nodes on loopback, events on, each holding another
    prefix of the same prompts."""

    @classmethod
    def setUpClass(cls):
        kvtier_bin()
        cls.dir = tempfile.mkdtemp(prefix="kvt-where-")
        cls.nodes = [cls.start_node("n%d" % i) for i in range(3)]

    @classmethod
    def tearDownClass(cls):
        for n in cls.nodes:
            cls.stop_node(n)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def start_node(cls, name):
        pub, rep = tier_env.free_port(), tier_env.free_port()
        sock = os.path.join(cls.dir, name + ".sock")
        proc = tier_env.start_kvtierd(sock, [
            "--set", "kv_events_publisher=zmq", "--set", "kv_events_endpoint=tcp://*:%d" % pub,
            "--set", "kv_events_replay_endpoint=tcp://*:%d" % rep,
            # The events' block_size is the store's chunk size; 4 KiB
            # pages: 2,048 of these 6 KiB chunks in 16 MiB, not 256.
            "--set", "chunk_size=%d" % CHUNK, "--set", "dram_page_size=4KiB"])
        st = kvtier.Store(daemon="unix://" + sock)
        lay = kvtier.Layout.preset(MODEL, chunk_tokens=CHUNK)
        model = kvtier.lib.kvt_model_preset_find(MODEL.encode()).contents.model_id.decode()
        ns = st.namespace(model, lay)
        return dict(name=name, proc=proc, st=st, ns=ns,
                    sub="%s=tcp://127.0.0.1:%d" % (name, pub), pub="tcp://127.0.0.1:%d" % pub,
                    rep="tcp://127.0.0.1:%d" % rep)

    @staticmethod
    def stop_node(n):
        n["st"].close()
        n["proc"].send_signal(signal.SIGTERM)
        n["proc"].wait(20)

    @staticmethod
    def put(node, tokens, chunks):
        """Put the prompt's first `chunks` chunks into `node`; their keys."""
        ns = node["ns"]
        keys = ns.key_chain(tokens)[:chunks]
        for k in keys:
            node["st"].put(ns, k, bytes(ns.payload_bytes))
        return keys

    def prompt(self, base, n_chunks):
        return list(range(base, base + n_chunks * CHUNK + 7))  # and a partial tail

    def tokens_file(self, tokens):
        return write(os.path.join(self.dir, "t%d.json" % tokens[0]), json.dumps(tokens))

    def fleet_args(self, nodes=None):
        nodes = nodes or self.nodes
        return ["--subscribe", ",".join(n["sub"] for n in nodes),
                "--replay", ",".join(n["rep"] for n in nodes)]

    def ns_args(self):
        return ["--model", MODEL, "--chunk-tokens", str(CHUNK)]

    def test_keys_are_kvtier_hashs(self):
        """The binding's keys of the namespace are `kvtier hash`'s: what
        `where --tokens` computes is what the nodes publish."""
        tokens = self.prompt(100, 3)
        p = subprocess.run([kvtier_bin(), "hash", *self.ns_args(), self.tokens_file(tokens)],
                           capture_output=True, text=True, check=True)
        cli = [line.split()[1] for line in p.stdout.splitlines() if not line.startswith("#")]
        self.assertEqual(cli, [str(k) for k in self.nodes[0]["ns"].key_chain(tokens)])

    def test_longest_prefix_node_and_tokens(self):
        tokens = self.prompt(1000, 6)
        self.put(self.nodes[0], tokens, 2)
        self.put(self.nodes[1], tokens, 5)
        self.put(self.nodes[2], tokens, 3)
        self.put(self.nodes[2], self.prompt(90000, 6), 6)  # another prompt
        a, _ = where([*self.fleet_args(), "--tokens", self.tokens_file(tokens), *self.ns_args(),
                      "--wait-ms", "300"])
        n = by_node(a)
        self.assertEqual((a["best"]["node"], a["best"]["tokens"], a["best"]["blocks"],
                          a["best"]["tier"]), ("n1", 5 * CHUNK, 5, "DRAM"))
        self.assertEqual([n[x]["tokens"] for x in ("n0", "n1", "n2")],
                         [2 * CHUNK, 5 * CHUNK, 3 * CHUNK])
        self.assertEqual(a["prompt_tokens"], len(tokens))
        self.assertEqual(n["n1"]["media"], {"DRAM": 5})
        for s in a["stats"]["nodes"]:
            self.assertEqual((s["rejected"], s["malformed"], s["lost_batches"]), (0, 0, 0))

        # The same through --hashes (the keys in hex, as kvtier hash prints them).
        keys = self.nodes[0]["ns"].key_chain(tokens)
        hx = write(os.path.join(self.dir, "hashes.txt"), "\n".join(str(k) for k in keys) + "\n")
        a, _ = where([*self.fleet_args(), "--hashes", hx, "--block-size", str(CHUNK),
                      "--wait-ms", "300"])
        self.assertEqual((a["best"]["node"], a["best"]["tokens"]), ("n1", 5 * CHUNK))

        # A delete on n1 (kvtierd's BlockRemoved) cuts its prefix at chunk 1.
        self.assertTrue(self.nodes[1]["st"].delete(self.nodes[1]["ns"], keys[1]))
        time.sleep(0.3)
        a, _ = where([*self.fleet_args(), "--tokens", self.tokens_file(tokens), *self.ns_args(),
                      "--wait-ms", "300"])
        self.assertEqual((a["best"]["node"], a["best"]["tokens"]), ("n2", 3 * CHUNK))
        self.assertEqual(by_node(a)["n1"]["tokens"], CHUNK)

    def test_serve_answers_over_http(self):
        tokens = self.prompt(20000, 4)
        keys = self.put(self.nodes[2], tokens, 4)
        self.put(self.nodes[0], tokens, 1)
        srv = Serve([*self.fleet_args(), *self.ns_args()], os.path.join(self.dir, "serve.err"))
        try:
            srv.wait(lambda: srv.get("/health")[1]["replaying"] is False, "the replays")
            code, h = srv.get("/health")
            self.assertEqual((code, h["status"], h["nodes"]), (200, "ok", 3))
            hx = ",".join(str(k) for k in keys)
            code, a = srv.get("/where?hashes=%s&block_size=%d" % (hx, CHUNK))
            self.assertEqual(code, 200)
            self.assertEqual((a["best"]["node"], a["best"]["tokens"], a["best"]["tier"]),
                             ("n2", 4 * CHUNK, "DRAM"))
            self.assertEqual(by_node(a)["n0"]["tokens"], CHUNK)
            code, a = srv.post({"hashes": [str(k) for k in keys[:2]]})  # any block size
            self.assertEqual((code, a["best"]["node"], a["best"]["tokens"]), (200, "n2", 2 * CHUNK))
            code, a = srv.post({"tokens": tokens})
            self.assertEqual((code, a["best"]["node"], a["best"]["tokens"]), (200, "n2", 4 * CHUNK))
            self.assertLess(a["lookup_us"], 10000)
            # A chunk put now shows up without a restart.
            more = self.prompt(20000, 6)
            self.put(self.nodes[0], more, 6)
            srv.wait(lambda: srv.post({"tokens": more})[1]["best"]["node"] == "n0",
                     "n0's new chunks")
            # Refusals name what was wrong.
            code, e = srv.get("/where?hashes=zz")
            self.assertEqual(code, 400)
            self.assertIn("'z' is not a hex digit", e["error"])
            code, e = srv.post({"tokens": [1, -2]})
            self.assertEqual(code, 400)
            self.assertIn("tokens[1]", e["error"])
            code, e = srv.get("/nowhere")
            self.assertEqual(code, 404)
            code, s = srv.get("/stats")
            self.assertEqual(code, 200)
            self.assertEqual(len(s["nodes"]), 3)
            self.assertGreater(s["index"]["blocks"], 0)
        finally:
            self.assertEqual(srv.close(), 0)

    def test_late_node_is_caught_up_through_replay(self):
        """A node `where` names before it runs: what it published before
        its stream reached `where` comes from its replay socket."""
        pub, rep = tier_env.free_port(), tier_env.free_port()
        relay = Relay("tcp://127.0.0.1:%d" % pub)
        srv = Serve(["--subscribe", self.nodes[0]["sub"] + ",late=" + relay.endpoint,
                     "--replay", self.nodes[0]["rep"] + ",tcp://127.0.0.1:%d" % rep,
                     *self.ns_args(), "--replay-timeout-ms", "500"],
                    os.path.join(self.dir, "late.err"))
        late = None
        try:
            time.sleep(0.3)
            sock = os.path.join(self.dir, "late.sock")
            proc = tier_env.start_kvtierd(sock, [
                "--set", "kv_events_publisher=zmq",
                "--set", "kv_events_endpoint=tcp://*:%d" % pub,
                "--set", "kv_events_replay_endpoint=tcp://*:%d" % rep,
                "--set", "chunk_size=%d" % CHUNK])
            st = kvtier.Store(daemon="unix://" + sock)
            late = dict(proc=proc, st=st, ns=st.namespace(
                kvtier.lib.kvt_model_preset_find(MODEL.encode()).contents.model_id.decode(),
                kvtier.Layout.preset(MODEL, chunk_tokens=CHUNK)))
            tokens = self.prompt(30000, 5)
            keys = late["ns"].key_chain(tokens)
            for k in keys[:4]:  # published while nobody's stream reaches `where`
                st.put(late["ns"], k, bytes(late["ns"].payload_bytes))
            time.sleep(0.3)  # out of the node before the relay joins
            relay.join()
            st.put(late["ns"], keys[4], bytes(late["ns"].payload_bytes))
            relay.pump(1)
            a = srv.wait(lambda: (lambda r: r if r["best"] and r["best"]["tokens"] == 5 * CHUNK
                                  else None)(srv.post({"tokens": tokens})[1]),
                         "the late node's five chunks (the relay forwarded %s)" % relay.seqs)
            self.assertEqual(a["best"]["node"], "late")
            s = srv.stats("late")
            self.assertGreaterEqual(s["replayed_batches"], 1)
            self.assertEqual(s["lost_batches"], 0)
        finally:
            self.assertEqual(srv.close(), 0)
            relay.close()
            if late:
                self.stop_node(late)

    def test_gap_is_filled_through_replay(self):
        """The stream is cut (the SUB closed), the node publishes, the
        stream comes back: the batches in between come from the replay."""
        node = self.nodes[1]
        relay = Relay(node["pub"])
        relay.join()
        srv = Serve(["--subscribe", "gap=" + relay.endpoint, "--replay", node["rep"],
                     *self.ns_args()], os.path.join(self.dir, "gap.err"))
        try:
            srv.wait(lambda: srv.get("/health")[1]["replaying"] is False, "the first replay")
            tokens = self.prompt(40000, 3)
            keys = node["ns"].key_chain(tokens)
            put = lambda k: node["st"].put(node["ns"], k, bytes(node["ns"].payload_bytes))
            put(keys[0])
            relay.pump(1)
            srv.wait(lambda: srv.post({"tokens": tokens})[1]["best"], "chunk 0")
            relay.cut()
            put(keys[1])  # never reaches `where` live
            time.sleep(0.3)  # out of the node before the relay joins again
            relay.join()
            put(keys[2])
            relay.pump(1)
            a = srv.wait(lambda: (lambda r: r if r["best"] and r["best"]["tokens"] == 3 * CHUNK
                                  else None)(srv.post({"tokens": tokens})[1]),
                         "chunks 0-2, the middle one replayed")
            self.assertEqual(a["best"]["node"], "gap")
            s = srv.stats("gap")
            self.assertGreaterEqual(s["gaps"], 1)
            self.assertGreaterEqual(s["replayed_batches"], 1)
            self.assertEqual((s["lost_batches"], s["rejected"]), (0, 0))
        finally:
            self.assertEqual(srv.close(), 0)
            relay.close()

    def test_replay_past_the_publishers_high_water_mark(self):
        """A replay of more batches than the node's ROUTER queues for one
        peer (ZeroMQ's default high-water mark, 1,000; the ROUTER drops
        the rest, its end marker too, when its I/O thread falls behind)
        still brings every batch: `where` asks again from where each
        answer stopped."""
        node = self.start_node("hwm")
        try:
            tokens = list(range(50000, 50000 + 1500 * CHUNK))
            keys = node["ns"].key_chain(tokens)
            for k in keys:  # a batch each: the publisher is idle between puts
                node["st"].put(node["ns"], k, bytes(node["ns"].payload_bytes))
                time.sleep(0.002)
            time.sleep(0.3)
            a, _ = where(["--subscribe", node["sub"], "--replay", node["rep"],
                          "--tokens", self.tokens_file(tokens), *self.ns_args(), "--wait-ms", "200"])
            s = a["stats"]["nodes"][0]
            self.assertGreater(s["batches"], 1000)
            self.assertEqual(s["lost_batches"], 0)
            self.assertEqual(a["best"]["blocks"], 1500, a["stats"])
        finally:
            self.stop_node(node)

    def test_bad_options_are_refused_by_name(self):
        p = subprocess.run([kvtier_bin(), "where", "--subscribe", "tcp://127.0.0.1:1,tcp://127.0.0.1:2",
                            "--replay", "tcp://127.0.0.1:3", "--hashes", "/dev/null"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--replay names 1 endpoints for 2 nodes", p.stderr)
        bad = write(os.path.join(self.dir, "bad.txt"), "abcd\nxyz\n")
        p = subprocess.run([kvtier_bin(), "where", "--subscribe", "tcp://127.0.0.1:1",
                            "--hashes", bad], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn("line 2", p.stderr)


class FakeNode:
    """A publisher that misbehaves on purpose: its PUB and its replay
    ROUTER send what the test scripts, valid batches among malformed ones.
    The ROUTER is served by a thread of its own (its socket is its alone)."""

    def __init__(self, first_answer):
        self.ctx = zmq.Context.instance()
        self.pub_port, self.rep_port = tier_env.free_port(), tier_env.free_port()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind("tcp://127.0.0.1:%d" % self.pub_port)
        self.batches = {}  # seq -> payload, what a later replay request gets
        self.first_answer = first_answer
        self.requests = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        r = self.ctx.socket(zmq.ROUTER)
        r.bind("tcp://127.0.0.1:%d" % self.rep_port)
        try:
            while not self.stop.is_set():
                if not r.poll(50):
                    continue
                ident, *rest = r.recv_multipart()
                start = int.from_bytes(rest[-1], "big")
                self.requests.append(start)
                if len(self.requests) == 1:
                    for fr in self.first_answer:
                        r.send_multipart([ident, *fr])
                    continue
                for seq in sorted(self.batches):
                    if seq >= start:
                        r.send_multipart([ident, b"", b"", seq.to_bytes(8, "big"),
                                          self.batches[seq]])
                r.send_multipart([ident, b"", b"", END, b""])
        finally:
            r.close(0)

    def send(self, *frames):
        self.pub.send_multipart(list(frames))

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.pub.close(0)


def stored_payload(hashes, medium="DRAM", block_size=CHUNK):
    return ENC.encode(KVEventBatch(ts=time.time(), events=[BlockStored(
        block_hashes=hashes, parent_block_hash=None, token_ids=[], block_size=block_size,
        lora_id=None, medium=medium, lora_name=None)]))


class Malformed(unittest.TestCase):
    """Malformed replay answers and event payloads: refused with a message
    naming what was wrong, counted, and `where` goes on answering."""

    def setUp(self):
        kvtier_bin()
        self.dir = tempfile.mkdtemp(prefix="kvt-where-bad-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_refused_counted_and_nothing_crashes(self):
        h = [bytes([i]) * 32 for i in range(1, 6)]
        seq = lambda n: n.to_bytes(8, "big")
        good1 = stored_payload([h[0]])
        first = [
            [b"", b"", b"\0" * 7, good1],                    # a 7-byte sequence
            [b"x", b"", seq(0), good1],                      # no empty delimiter
            [b"", b""],                                      # two frames
            [b"", b"", seq(0), b"\xc1 not msgpack"],         # batch 0: refused
            [b"", b"", seq(1), good1],                       # batch 1: h0 stored
            [b"", b"", END, b"replay: something went wrong"],  # the end, with an error
        ]
        node = FakeNode(first)
        node.batches = {0: first[3][3], 1: good1}
        err = os.path.join(self.dir, "where.err")
        srv = Serve(["--subscribe", "fake=tcp://127.0.0.1:%d" % node.pub_port,
                     "--replay", "tcp://127.0.0.1:%d" % node.rep_port,
                     "--replay-timeout-ms", "1000"], err)
        try:
            srv.wait(lambda: srv.stats("fake")["replays"] >= 1 and
                     srv.get("/health")[1]["replaying"] is False, "the first replay")
            time.sleep(0.5)  # the SUB has joined the fake PUB by now
            ask = lambda hs: srv.post({"hashes": [x.hex() for x in hs]})[1]
            self.assertEqual(ask(h)["best"]["tokens"], CHUNK)
            # Live: garbage, a message of two frames, a valid batch, a
            # 40-byte hash, a block size of 0, a valid batch again.
            bad_hash = ENC.encode([1.0, [{"type": "BlockStored", "block_hashes": [b"x" * 40],
                                          "block_size": 16}]])
            bad_bs = ENC.encode([1.0, [{"type": "BlockStored", "block_hashes": [h[3]],
                                        "block_size": 0}]])
            live = [(2, b"\x92\xcb\x00"), (3, stored_payload([h[1]])), (4, bad_hash),
                    (5, bad_bs), (6, stored_payload([h[2]]))]
            for s, p in live:
                node.batches[s] = p
            node.send(b"", seq(2), live[0][1])
            node.send(b"", live[1][1])  # two frames: no sequence
            for s, p in live[1:]:
                node.send(b"", seq(s), p)
            srv.wait(lambda: ask(h)["best"]["tokens"] == 3 * CHUNK, "h0..h2")
            s = srv.stats("fake")
            self.assertEqual(s["rejected"], 4)      # batches 0, 2, 4, 5
            self.assertGreaterEqual(s["malformed"], 4)  # three replay answers, one live
            self.assertEqual(s["replay_errors"], 1)
            self.assertEqual(s["lost_batches"], 0)
            self.assertEqual(srv.get("/health")[0], 200)
        finally:
            self.assertEqual(srv.close(), 0)
            node.close()
        with open(err) as f:
            text = f.read()
        for msg in ("replay answer refused: 4 frames with a sequence not 8 bytes",
                    "replay answer refused: 4 frames with a first frame not empty",
                    "replay answer refused: 2 frames",
                    "refused by the node: replay: something went wrong",
                    "batch 0 refused: byte 0: 0xc1, a byte msgpack never uses",
                    "batch 2 refused: truncated",
                    "live message refused: 2 frames",
                    "batch 4 refused: event 0: block_hashes[0]: a bin of 40 bytes (1..32)",
                    "batch 5 refused: event 0: block_size: 0, expected an int 1..4294967295"):
            self.assertIn(msg, text)


class ExampleRouter(unittest.TestCase):
    """contrib/kv_router.py, as docs/WHERE.md runs it: on the shipped trace
    the node `kvtier where` names holds more of each prompt than round
    robin's does."""

    def test_router_beats_round_robin(self):
        kvtierd = os.environ["KVT_KVTIERD"]
        kv = os.path.join(os.path.dirname(kvtierd), "kvtier")
        src = os.environ.get("KVT_SRC") or os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))
        p = subprocess.run([sys.executable, os.path.join(src, "contrib", "kv_router.py"),
                            "--kvtierd", kvtierd, "--kvtier", kv, "--requests", "400"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        row = [l for l in p.stdout.splitlines() if l.startswith("prompt tokens found")][0]
        rr, where = (float(x.rstrip("%")) for x in row.split()[-2:])
        self.assertGreater(where, rr * 1.3, p.stdout)


if __name__ == "__main__":
    unittest.main()
