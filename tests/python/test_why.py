"""Why a prompt missed (docs/WHY.md): each reason kvt_why can give is made
to happen to a chunk, and the answer names it — with the tier, the time and
the namespace field where the reason has one — through the Python binding,
kvtierd's KVTIER.WHY and `kvtier why`; misses are counted by reason."""

import json
import os
import socket
import subprocess
import time
import unittest
import urllib.request

import redis

import kvtier
import tier_env

LAYOUT = kvtier.Layout(2, 2, 64, "bf16", chunk_tokens=256)  # 256 KiB chunks


def tokens(n_chunks, seed=0):
    return [(seed * 7919 + i) % 50000 for i in range(256 * n_chunks)]


class Reasons(unittest.TestCase):

    def setUp(self):
        self.env = tier_env.Env()

    def tearDown(self):
        self.env.close()

    def store(self, tier="nvme", name="why", dram="1MiB", **extra):
        c = self.env.config(tier, name, dram=dram)
        for k, v in extra.items():
            c.set(k, v)
        return kvtier.Store(c)

    def fill(self, st, ns, keys):
        for k in keys:
            st.put(ns, k, os.urandom(ns.payload_bytes))
        st.flush(10000)

    def test_hit_prefix_never(self):
        st = self.store()
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(4))
        self.fill(st, ns, [keys[0], keys[1], keys[3]])
        got = st.why(ns, keys)
        self.assertEqual([g["reason"] for g in got], ["hit", "hit", "never", "prefix"])
        self.assertIn("served from the dram tier", got[0]["detail"])
        self.assertIn("chunk 2 before it is missing", got[3]["detail"])
        self.assertIn("never stored under this namespace", got[2]["detail"])
        st.close()

    def test_evicted_names_the_tier_and_time(self):
        st = self.store(tier="dram", dram="1MiB")
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(8))
        t0 = time.time()
        self.fill(st, ns, keys)
        got = st.why(ns, keys[:1])[0]
        self.assertEqual((got["reason"], got["tier"]), ("evicted", 0))
        self.assertLessEqual(t0 - 1, got["when"])
        self.assertLessEqual(got["when"], time.time() + 1)
        self.assertRegex(got["detail"], r"evicted from the dram tier .* at 20\d\d-")
        # The miss is counted by reason, tier and tenant.
        self.assertEqual(st.misses("evicted", 0), 0)
        with self.assertRaises(kvtier.NotFound):
            st.get(ns, keys[0])
        self.assertEqual(st.misses("evicted", 0), 1)
        self.assertEqual(st.lookup(ns, keys), 0)
        self.assertEqual(st.misses("evicted", 0), 2)
        st.close()

    def test_deleted(self):
        st = self.store()
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(1))
        self.fill(st, ns, keys)
        st.delete(ns, keys[0])
        got = st.why(ns, keys)[0]
        self.assertEqual(got["reason"], "deleted")
        self.assertIn("deleted from the", got["detail"])
        st.close()

    def test_corrupt(self):
        st = self.store(dram="1MiB")
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(6))
        self.fill(st, ns, keys)  # 1 MiB of DRAM: the first chunks are on NVMe alone
        self.assertEqual(tier_env.flip_payload_byte(self.env, "nvme", "why", keys[0]), 1)
        with self.assertRaises(kvtier.Error):
            st.get(ns, keys[0])
        got = st.why(ns, keys[:1])[0]
        self.assertEqual((got["reason"], got["tier"]), ("corrupt", 1))
        self.assertIn("nvme tier: it failed its checks", got["detail"])
        st.close()

    def test_expired(self):
        st = self.store(tier="dram", dram="4MiB", ttl="1")
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(1))
        self.fill(st, ns, keys)
        self.assertEqual(st.why(ns, keys)[0]["reason"], "hit")
        time.sleep(2.2)
        got = st.why(ns, keys)[0]
        self.assertEqual(got["reason"], "expired")
        self.assertIn("past the TTL of 1 s", got["detail"])
        st.close()

    def test_deadline(self):
        st = self.store(dram="1MiB")
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(8))
        self.fill(st, ns, keys)  # the first 5 are on NVMe alone
        op = st.prefetch(ns, keys, deadline_ms=0)
        op.wait()
        op.close()
        got = st.why(ns, keys[:1])[0]
        self.assertEqual((got["reason"], got["tier"]), ("deadline", 1))
        self.assertIn("not loaded from the nvme tier by its deadline", got["detail"])
        st.close()

    def test_tier_down(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]  # nothing listens there once closed
        st = self.store(tier="dram", dram="4MiB", peers="127.0.0.1:%d" % dead,
                        peer_timeout_ms="200")
        ns = st.namespace("m", LAYOUT)
        keys = ns.key_chain(tokens(2))
        self.assertEqual(st.lookup(ns, keys), 0)  # asks the peer, which does not answer
        got = st.why(ns, keys)
        self.assertEqual([g["reason"] for g in got], ["tier_down", "tier_down"])
        self.assertIn("peer tier does not answer", got[0]["detail"])
        st.close()

    def test_namespace_names_the_field_that_differs(self):
        st = self.store(tier="dram", dram="8MiB")
        ns_a = st.namespace("org/model", LAYOUT)
        ns_b = st.namespace("org/model", kvtier.Layout(2, 2, 64, "f16", chunk_tokens=256))
        ns_c = st.namespace("org/model-v2", LAYOUT)
        toks = tokens(3)
        self.fill(st, ns_a, ns_a.key_chain(toks))
        got = st.why_tokens(ns_b, toks)
        self.assertEqual([g["reason"] for g in got], ["namespace"] * 3)
        self.assertRegex(got[0]["detail"], r"dtype \d+ here, \d+ there")
        got = st.why_tokens(ns_c, toks)
        self.assertIn("model 'org/model-v2' here, 'org/model' there", got[0]["detail"])
        self.assertEqual([g["reason"] for g in st.why_tokens(ns_a, toks)], ["hit"] * 3)
        st.close()

    def test_another_tenants_namespace_is_never_named(self):
        secret = "ab" * 32
        st = self.store(tier="dram", dram="8MiB", tenants="acme=" + secret)
        mine = st.namespace("org/model", LAYOUT)
        theirs = st.namespace("org/model", kvtier.Layout(2, 2, 64, "f16", chunk_tokens=256),
                              tenant="acme")
        toks = tokens(2)
        self.fill(st, theirs, theirs.key_chain(toks))
        got = st.why_tokens(mine, toks)
        self.assertEqual([g["reason"] for g in got], ["never", "never"])
        st.close()


class ThroughTheDaemon(unittest.TestCase):
    """KVTIER.WHY over RESP (the caller's own keys), and `kvtier why`."""

    def test_resp_and_cli(self):
        env = tier_env.Env()
        sock = os.path.join(env.root, "kvtierd.sock")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            mport = s.getsockname()[1]
        d = tier_env.start_kvtierd(sock, extra=["--port", str(port), "--metrics-port",
                                                str(mport)], dram="1MiB")
        try:
            c = kvtier.Config()
            c.set("daemon", "unix://" + sock)
            st = kvtier.Store(c)
            # The CLI's "tiny" preset, so that `kvtier why --model tiny`
            # computes the same keys: 64 KiB chunks, 1 MiB of DRAM.
            ns = st.namespace("kvtier/tiny-test-model",
                              kvtier.Layout(2, 2, 16, "bf16", chunk_tokens=256))
            toks = tokens(40)
            keys = ns.key_chain(toks)
            for k in keys:
                st.put(ns, k, os.urandom(ns.payload_bytes))
            st.flush(10000)
            r = redis.Redis(port=port)
            out = r.execute_command("KVTIER.WHY", bytes(keys[0]), str(keys[39]).encode(),
                                    b"\x00" * 32)
            # The keys are a chain: one held after a missing one is not served.
            self.assertEqual([o[0] for o in out], [b"evicted", b"prefix", b"never"])
            self.assertEqual(r.execute_command("KVTIER.WHY", bytes(keys[39]))[0][0], b"hit")
            self.assertEqual(out[0][1], b"dram")
            self.assertGreater(float(out[0][2]), 0)
            self.assertIn(b"evicted from the dram tier", out[0][3])
            with self.assertRaises(redis.ResponseError) as e:
                r.execute_command("KVTIER.WHY", b"short")
            self.assertIn("32 bytes", str(e.exception))
            # The binding, as the daemon's client, asks the daemon.
            self.assertEqual(st.why(ns, keys[:1])[0]["reason"], "evicted")
            # An engine's lookup that stops at the evicted chunk is counted.
            self.assertEqual(st.lookup(ns, keys), 0)
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport) as m:
                text = m.read().decode()
            self.assertIn('kvtier_misses_total{reason="evicted",tenant="default",tier="dram"} 1',
                          text)
            # The command line tool, on the same daemon.
            path = os.path.join(env.root, "prompt.txt")
            with open(path, "w") as f:
                f.write(" ".join(map(str, toks)))
            kv = os.path.join(os.path.dirname(os.environ["KVT_KVTIERD"]), "kvtier")
            p = subprocess.run([kv, "why", "--set", "daemon=unix://" + sock, "--model", "tiny",
                                "--chunk-tokens", "256", "--tokens", path, "--json"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            rows = json.loads(p.stdout)["chunks"]
            self.assertEqual(len(rows), 40)
            self.assertEqual((rows[0]["reason"], rows[39]["reason"]), ("evicted", "prefix"))
            p = subprocess.run([kv, "why", "--set", "daemon=unix://" + sock, "--model", "tiny",
                                "--chunk-tokens", "256", "--tokens", path],
                               capture_output=True, text=True)
            self.assertIn("evicted from the dram tier", p.stdout)
            st.close()
        finally:
            d.terminate()
            d.wait(10)
            env.close()


if __name__ == "__main__":
    unittest.main()
