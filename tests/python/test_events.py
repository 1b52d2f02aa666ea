"""KV events in vLLM's format (docs/EVENTS.md), read the way a fleet's
router reads a vLLM engine's: a ZeroMQ SUB socket, vLLM's own msgspec
KVEventBatch decoder from the installed vLLM, and a DEALER on the replay
socket.  A store in this process and kvtierd publish; every event of a
put / promote / evict / delete / damaged-read / restart sequence is
decoded, with sequence numbers gapless, and what a subscriber missed comes
back from the replay socket.
"""

import os
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

import msgspec
import redis
import zmq
from vllm.distributed.kv_events import (AllBlocksCleared, BlockRemoved, BlockStored,
                                        KVEventBatch)

import kvtier
import tier_env

DECODE = msgspec.msgpack.Decoder(type=KVEventBatch)
LAYOUT_SMALL = kvtier.Layout(1, 1, 16, "bf16", chunk_tokens=256)  # 16 KiB chunks
END = (-1).to_bytes(8, "big", signed=True)


class Subscriber:
    """A router's side: SUB on `endpoint`, decoding every batch with vLLM's
    own decoder; `seqs` and `events` in arrival order."""

    def __init__(self, endpoint, topic=b""):
        self.ctx = zmq.Context.instance()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(endpoint)
        self.seqs, self.events, self.payloads = [], [], {}

    def pump(self, quiet_ms=300, until=None, timeout=20.0):
        """Read until nothing came for quiet_ms (and `until(self)` holds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sub.poll(quiet_ms):
                topic, seq, payload = self.sub.recv_multipart()
                n = int.from_bytes(seq, "big")
                batch = DECODE.decode(payload)  # raises on anything vLLM would refuse
                self.seqs.append(n)
                self.payloads[n] = payload
                self.events.extend(batch.events)
            elif until is None or until(self):
                return
        raise AssertionError("no quiet point in %gs" % timeout)

    def close(self):
        self.sub.close(0)


def replay(endpoint, frames):
    """Send `frames` to the replay socket from a DEALER; every reply up to
    and including the end marker, as (topic, seq, payload)."""
    d = zmq.Context.instance().socket(zmq.DEALER)
    d.connect(endpoint)
    try:
        d.send_multipart(frames)
        out = []
        while True:
            if not d.poll(10000):
                raise AssertionError("no reply from the replay socket")
            fr = d.recv_multipart()
            assert fr[0] == b"", fr
            out.append((fr[1], int.from_bytes(fr[2], "big", signed=True), fr[3]))
            if fr[2] == END:
                return out
    finally:
        d.close(0)


def stored(events, medium):
    return [bytes(e.block_hashes[0]) for e in events
            if isinstance(e, BlockStored) and e.medium == medium]


def removed(events, medium):
    return [bytes(h) for e in events if isinstance(e, BlockRemoved) and e.medium == medium
            for h in e.block_hashes]


class InProcess(unittest.TestCase):
    """A store opened in this process (as the connector opens one)."""

    def setUp(self):
        self.env = tier_env.Env()
        self.pub = "ipc://" + os.path.join(self.env.root, "pub")
        self.rep = "ipc://" + os.path.join(self.env.root, "replay")
        self.subs = []

    def tearDown(self):
        for s in self.subs:
            s.close()
        self.env.close()

    def open(self, dram="1MiB", topic="kvtier"):
        c = self.env.config("nvme", "ev", dram=dram)
        for k, v in (("kv_events_publisher", "zmq"), ("kv_events_endpoint", self.pub),
                     ("kv_events_replay_endpoint", self.rep), ("kv_events_topic", topic)):
            c.set(k, v)
        st = kvtier.Store(c)
        self.ns = st.namespace("m", kvtier.Layout(2, 2, 64, "bf16", chunk_tokens=256))
        return st

    def subscribe(self, topic=b""):
        s = Subscriber(self.pub, topic)
        self.subs.append(s)
        time.sleep(0.3)  # ZeroMQ's slow joiner: a SUB misses what precedes its join
        return s

    def test_every_tier_publishes_in_vllms_format(self):
        st = self.open()
        sub = self.subscribe()
        keys = self.ns.key_chain(list(range(256 * 8)))
        data = [os.urandom(self.ns.payload_bytes) for _ in keys]
        for k, d in zip(keys, data):
            self.assertTrue(st.put(self.ns, k, d))
        st.flush(10000)
        sub.pump()
        raw = [bytes(k) for k in keys]
        # Each put lands in DRAM and, written through, on NVMe; 1 MiB of
        # DRAM holds 3 of these 260 KiB chunks, so 5 leave it again.
        self.assertEqual(stored(sub.events, "DRAM"), raw)
        self.assertEqual(sorted(stored(sub.events, "NVME")), sorted(raw))
        self.assertEqual(removed(sub.events, "DRAM"), raw[:5])
        for e in sub.events:
            if isinstance(e, BlockStored):
                self.assertEqual((e.block_size, e.parent_block_hash, e.token_ids, e.lora_id),
                                 (256, None, [], None))
                self.assertEqual(len(e.block_hashes[0]), 32)
        # Gapless from 1: batch 0, AllBlocksCleared, went out as the store
        # opened, before this subscriber joined (it replays it below).
        self.assertEqual(sub.seqs, list(range(1, len(sub.seqs) + 1)))
        first = replay(self.rep, [b"", bytes(8)])[0]
        self.assertEqual(first[1], 0)
        self.assertEqual([type(e) for e in DECODE.decode(first[2]).events], [AllBlocksCleared])

        # A read of an NVMe-only chunk promotes it: DRAM gains it.
        n0 = len(sub.events)
        self.assertEqual(bytes(st.get(self.ns, keys[0])), data[0])
        st.flush(10000)
        sub.pump()
        self.assertIn(raw[0], stored(sub.events[n0:], "DRAM"))

        # A delete leaves every tier.
        n0 = len(sub.events)
        st.delete(self.ns, keys[7])
        sub.pump()
        self.assertIn(raw[7], removed(sub.events[n0:], "DRAM"))
        self.assertIn(raw[7], removed(sub.events[n0:], "NVME"))
        self.assertEqual(sub.seqs, list(range(1, len(sub.seqs) + 1)))
        ev = st.events_stats()
        self.assertEqual((ev["enabled"], ev["dropped"], ev["last_seq"]),
                         (1, 0, sub.seqs[-1]))
        st.close()

    def test_chunks_named_by_vllms_block_hashes(self):
        # The connector names each chunk it saves by vLLM's blocks: the
        # events then carry vLLM's hashes, parent and block size, bytes or
        # (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) ints, as vLLM's own do.
        st = self.open(dram="4MiB")
        sub = self.subscribe()
        parent = kvtier.vllm_none_hash("42")
        blocks = []
        for b in range(8):  # two 4-block chunks of vLLM's 64-token blocks
            parent = kvtier.vllm_block_hash(parent, list(range(64 * b, 64 * b + 64)))
            blocks.append(parent)
        keys = [self.ns.key_from_engine_hash(blocks[3]), self.ns.key_from_engine_hash(blocks[7])]
        st.name_chunk(keys[0], blocks[:4], None, 64)
        ints = [int.from_bytes(h[-8:], "big") for h in blocks]
        st.name_chunk(keys[1], ints[4:], ints[3], 64)
        for k in keys:
            st.put(self.ns, k, os.urandom(self.ns.payload_bytes))
        st.flush(10000)
        sub.pump()
        ev = [e for e in sub.events if isinstance(e, BlockStored) and e.medium == "DRAM"]
        self.assertEqual([list(e.block_hashes) for e in ev], [blocks[:4], ints[4:]])
        self.assertEqual([(e.parent_block_hash, e.block_size) for e in ev],
                         [(None, 64), (ints[3], 64)])
        st.delete(self.ns, keys[0])
        sub.pump()
        self.assertEqual(removed(sub.events, "DRAM"), blocks[:4])
        with self.assertRaisesRegex(kvtier.Error, "1..16 block hashes"):
            st.name_chunk(keys[0], blocks * 3)
        st.close()

    def test_shared_directory_and_s3_publish_their_medium(self):
        for tier, medium in (("shared_fs", "SHARED_FS"), ("s3", "S3")):
            c = self.env.config(tier, "ev-" + tier, dram="4MiB")
            for k, v in (("kv_events_publisher", "zmq"),
                         ("kv_events_endpoint", self.pub + tier),
                         ("kv_events_replay_endpoint", self.rep + tier)):
                c.set(k, v)
            st = kvtier.Store(c)
            ns = st.namespace("m", LAYOUT_SMALL)
            sub = Subscriber(self.pub + tier)
            self.subs.append(sub)
            time.sleep(0.3)
            keys = ns.key_chain(list(range(256 * 2)))
            for k in keys:
                st.put(ns, k, os.urandom(ns.payload_bytes), durability="crash_safe")
            st.flush(20000)
            sub.pump(until=lambda s: len(stored(s.events, medium)) >= 2)
            self.assertEqual(sorted(stored(sub.events, medium)), sorted(bytes(k) for k in keys))
            st.delete(ns, keys[0])
            sub.pump(until=lambda s: removed(s.events, medium))
            self.assertEqual(removed(sub.events, medium), [bytes(keys[0])])
            st.close()

    def test_damaged_chunk_is_removed(self):
        st = self.open(dram="1MiB")
        sub = self.subscribe()
        keys = self.ns.key_chain(list(range(256 * 5)))
        for k in keys:
            st.put(self.ns, k, os.urandom(self.ns.payload_bytes))
        st.flush(10000)
        sub.pump()
        self.assertEqual(tier_env.flip_payload_byte(self.env, "nvme", "ev", keys[0]), 1)
        n0 = len(sub.events)
        with self.assertRaises(kvtier.Error):
            st.get(self.ns, keys[0])
        sub.pump()
        self.assertEqual(removed(sub.events[n0:], "NVME"), [bytes(keys[0])])
        st.close()

    def test_restart_publishes_what_the_tiers_hold(self):
        st = self.open(dram="4MiB")
        keys = self.ns.key_chain(list(range(256 * 4)))
        for k in keys:
            st.put(self.ns, k, os.urandom(self.ns.payload_bytes))
        st.flush(10000)
        st.close()
        # The node comes back: what it holds is published as it opens,
        # before any subscriber can have joined (ZeroMQ's slow joiner), so
        # a router catches up through the replay socket from 0.
        st = self.open(dram="4MiB")
        st.flush(10000)
        deadline = time.monotonic() + 10
        while st.events_stats()["queued"] and time.monotonic() < deadline:
            time.sleep(0.05)
        got = replay(self.rep, [b"", bytes(8)])
        self.assertEqual([s for _, s, _ in got[:-1]], list(range(len(got) - 1)))
        events = [e for _, _, p in got[:-1] for e in DECODE.decode(p).events]
        self.assertEqual(sorted(stored(events, "NVME")), sorted(bytes(k) for k in keys))
        st.close()

    def test_replay_fills_a_gap(self):
        st = self.open(dram="4MiB")
        sub = self.subscribe()
        keys = self.ns.key_chain(list(range(256 * 6)))
        for k in keys[:3]:
            st.put(self.ns, k, os.urandom(self.ns.payload_bytes))
        st.flush(10000)
        sub.pump()
        seen = len(sub.seqs)
        sub.close()  # the router goes away...
        for k in keys[3:]:
            st.put(self.ns, k, os.urandom(self.ns.payload_bytes))
        st.flush(10000)
        time.sleep(0.3)
        # ...and asks for everything from the first sequence it missed.
        got = replay(self.rep, [b"", seen.to_bytes(8, "big")])
        self.assertEqual(got[-1], (b"", -1, b""))
        seqs = [s for _, s, _ in got[:-1]]
        self.assertEqual(seqs, list(range(seen, seen + len(seqs))))
        self.assertTrue(all(t == b"kvtier" for t, _, _ in got[:-1]))
        events = [e for _, _, p in got[:-1] for e in DECODE.decode(p).events]
        self.assertEqual(stored(events, "DRAM"), [bytes(k) for k in keys[3:]])
        # From 0: what the subscriber saw, byte for byte.
        again = {s: p for _, s, p in replay(self.rep, [b"", bytes(8)])[:-1]}
        for s, p in sub.payloads.items():
            self.assertEqual(again[s], p)
        st.close()

    def test_malformed_replay_requests_get_an_error_and_nothing_else(self):
        st = self.open()
        for frames, why in (([b"", b"abc"], b"8 bytes"),
                            ([b"x", bytes(8)], b"empty delimiter"),
                            ([b"", bytes(8), b"more"], b"two frames"),
                            ([b"", b"\xff" * 8], b"negative")):
            got = replay(self.rep, frames)
            self.assertEqual(len(got), 1, frames)
            topic, seq, msg = got[0]
            self.assertEqual((topic, seq), (b"", -1))
            self.assertIn(why, msg)
        self.assertEqual(st.events_stats()["replay_errors"], 4)
        # The socket still serves a good request.
        self.assertEqual(replay(self.rep, [b"", bytes(8)])[-1], (b"", -1, b""))
        st.close()

    def test_a_subscriber_that_never_reads_does_not_stop_puts(self):
        st = self.open(dram="8MiB")
        stuck = zmq.Context.instance().socket(zmq.SUB)
        stuck.setsockopt(zmq.RCVHWM, 1)
        stuck.setsockopt(zmq.RCVBUF, 4096)
        stuck.setsockopt(zmq.SUBSCRIBE, b"")
        stuck.connect(self.pub)
        try:
            ns = st.namespace("small", kvtier.Layout(1, 1, 8, "bf16", chunk_tokens=16))
            keys = ns.key_chain(list(range(16 * 3000)))
            for k in keys:
                st.put(ns, k, bytes(ns.payload_bytes))
            st.flush(10000)
            deadline = time.monotonic() + 10
            while st.events_stats()["queued"] and time.monotonic() < deadline:
                time.sleep(0.05)
            ev = st.events_stats()
            self.assertEqual(ev["queued"], 0)  # the publisher kept draining
            self.assertGreaterEqual(ev["events"] + ev["dropped"], 3000)
        finally:
            stuck.close(0)
        st.close()

    def test_bad_configuration_is_refused_by_name(self):
        c = self.env.config("dram", "bad")
        with self.assertRaisesRegex(kvtier.Error, "kv_events_publisher.*zmq or null"):
            c.set("kv_events_publisher", "kafka")
        c.set("kv_events_publisher", "zmq")
        c.set("kv_events_endpoint", "nonsense://x")
        with self.assertRaisesRegex(kvtier.Error, "kv_events: cannot .*nonsense://x"):
            kvtier.Store(c)
        with self.assertRaisesRegex(kvtier.Error, 'unknown key "kv_events_colour"'):
            kvtier.Config.parse("max_local_cpu_size: 4MiB\n"
                                "kv_events:\n  publisher: zmq\n  colour: red\n")


class Daemon(unittest.TestCase):
    """kvtierd as a node runs it: --data-dir, the events configured in its
    YAML the way vLLM's --kv-events-config reads, SETs from redis-py."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kvt-ev-")
        self.bin = os.environ.get("KVT_KVTIERD")
        if not self.bin:
            raise RuntimeError("KVT_KVTIERD is not set (run through <build>/pytest.sh)")
        self.pub = "ipc://" + os.path.join(self.root, "pub")
        self.rep = "ipc://" + os.path.join(self.root, "replay")
        self.cfg = os.path.join(self.root, "kvtier.yaml")
        with open(self.cfg, "w") as f:
            f.write("max_local_cpu_size: 8MiB\ndram_prefault: false\ndram_lock_memory: false\n"
                    "max_local_disk_size: 64MiB\n"
                    "kv_events:\n  publisher: zmq\n  endpoint: %s\n  replay_endpoint: %s\n"
                    "  topic: node1\n" % (self.pub, self.rep))
        self.port, self.mport = tier_env.free_port(), tier_env.free_port()
        self.proc = None

    def tearDown(self):
        self.stop()
        subprocess.run(["rm", "-rf", self.root])

    def start(self):
        self.proc = tier_env.start_kvtierd_tcp(
            [self.bin, "--port", str(self.port), "--config", self.cfg, "--data-dir",
             os.path.join(self.root, "data"), "--threads", "2", "--metrics-port",
             str(self.mport)], self.port, os.path.join(self.root, "kvtierd.log"))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.proc = None

    def test_a_client_names_chunks_for_the_daemon(self):
        sock = os.path.join(self.root, "kvtierd.sock")
        sub = Subscriber(self.pub)
        d = tier_env.start_kvtierd(sock, extra=["--config", self.cfg])
        try:
            time.sleep(0.3)
            c = kvtier.Config()
            c.set("daemon", "unix://" + sock)
            st = kvtier.Store(c)
            ns = st.namespace("m", kvtier.Layout(2, 2, 64, "bf16", chunk_tokens=256))
            h = [bytes([i]) * 32 for i in range(4)]
            key = ns.key_from_engine_hash(h[-1])
            st.name_chunk(key, h, bytes(32), 64)
            st.put(ns, key, os.urandom(ns.payload_bytes))
            st.flush(10000)
            sub.pump(until=lambda s: stored(s.events, "DRAM"))
            e = [e for e in sub.events if isinstance(e, BlockStored)][0]
            self.assertEqual((list(e.block_hashes), e.parent_block_hash), (h, bytes(32)))
            st.close()
        finally:
            sub.close()
            d.terminate()
            d.wait(10)

    def test_sets_restart_and_metrics(self):
        sub = Subscriber(self.pub, b"node1")
        try:
            self.start()
            time.sleep(0.3)
            r = redis.Redis(port=self.port)
            for i in range(6):
                r.set("doc:%d" % i, os.urandom(1 << 20))
            sub.pump(until=lambda s: len(stored(s.events, "NVME")) >= 6)
            self.assertGreaterEqual(len(stored(sub.events, "DRAM")), 6)
            self.assertEqual(sub.seqs, list(range(sub.seqs[0], sub.seqs[0] + len(sub.seqs))))
            # An overwrite publishes the new version and removes the old.
            n0 = len(sub.events)
            r.set("doc:0", os.urandom(1 << 20))
            sub.pump(until=lambda s: removed(s.events[n0:], "DRAM"))
            before = set(stored(sub.events, "NVME"))
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport) as m:
                text = m.read().decode()
            self.assertRegex(text, r"\nkvtier_events_total [1-9]")
            self.assertIn("\nkvtier_events_dropped_total 0\n", text)
            r.close()
            # Restarted, the node says what its disk holds (published as
            # it opens: a router catches up from the replay socket).
            self.stop()
            self.start()
            time.sleep(0.5)
            got = replay(self.rep, [b"", bytes(8)])
            events = [e for _, _, p in got[:-1] for e in DECODE.decode(p).events]
            now = set(stored(events, "NVME"))
            self.assertTrue(now <= before and len(now) >= 6, (len(now), len(before)))
            # A new life starts with AllBlocksCleared, at sequence 0.
            self.assertEqual(got[0][1], 0)
            self.assertIsInstance(events[0], AllBlocksCleared)
            self.assertEqual(sum(isinstance(e, AllBlocksCleared) for e in events), 1)
        finally:
            sub.close()


if __name__ == "__main__":
    unittest.main()
