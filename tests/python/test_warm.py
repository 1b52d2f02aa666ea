"""Warm starts (docs/DAEMON_OPS.md, "Warm starts"): a node remembers what
its first tier held, most recently used first, and a restarted one loads
those chunks from its disk tier before /ready says yes (/health says yes
all along); without --warm-start it comes back cold; a damaged hot list is
refused by name and the node starts cold."""

import os
import socket
import subprocess
import time
import unittest
import urllib.error
import urllib.request

import redis

import kvtier
import tier_env

LAYOUT = kvtier.Layout(2, 2, 64, "bf16", chunk_tokens=256)  # 256 KiB chunks


def http(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class InProcess(unittest.TestCase):

    def test_hot_list_round_trip_and_damage(self):
        env = tier_env.Env()
        try:
            st = kvtier.Store(env.config("nvme", "warm", dram="2MiB"))
            ns = st.namespace("m", LAYOUT)
            keys = ns.key_chain(list(range(256 * 12)))
            for k in keys:
                st.put(ns, k, os.urandom(ns.payload_bytes))
            st.flush(10000)
            for k in keys[:3]:  # read last: the most recently used
                st.get(ns, k)
            st.flush(10000)  # the reads' promotions into DRAM have landed
            path = os.path.join(env.root, "hot.keys")
            st.hot_save(path)
            st.close()
            st = kvtier.Store(env.config("nvme", "warm", dram="2MiB"))
            self.assertEqual(st.lookup(ns, keys[:1], tiers=True), (1, [1]))  # on NVMe only
            got = st.warm(path)
            self.assertEqual(got["finished"], 1)
            self.assertGreaterEqual(got["loaded"], 3)
            self.assertEqual(got["failed"], 0)
            for k in keys[:3]:
                self.assertEqual(st.lookup(ns, [k], tiers=True), (1, [0]))  # in DRAM now
            # A budget stops it; a bandwidth slows it.
            st.close()
            st = kvtier.Store(env.config("nvme", "warm", dram="2MiB"))
            t = time.monotonic()
            got = st.warm(path, budget_bytes=2 * (4096 + ns.payload_bytes),
                          bytes_per_s=1 << 20)
            self.assertEqual(got["loaded"], 2)
            self.assertGreaterEqual(time.monotonic() - t, 0.4)  # 0.5 MiB at 1 MiB/s
            # Damage is refused by name; nothing is loaded.
            with open(path, "r+b") as f:
                f.seek(20)
                b = f.read(1)
                f.seek(20)
                f.write(bytes([b[0] ^ 1]))
            with self.assertRaisesRegex(kvtier.Error, "hot list: checksum mismatch"):
                st.warm(path)
            with open(path, "r+b") as f:
                f.truncate(30)
            with self.assertRaisesRegex(kvtier.Error, "hot list: 30 bytes for"):
                st.warm(path)
            with self.assertRaises(kvtier.NotFound):
                st.warm(os.path.join(env.root, "none"))
            st.close()
        finally:
            env.close()


class Daemon(unittest.TestCase):

    def setUp(self):
        self.env = tier_env.Env()
        self.data = os.path.join(self.env.root, "data")
        self.sock = os.path.join(self.env.root, "kvtierd.sock")
        self.port, self.mport = tier_env.free_port(), tier_env.free_port()
        self.proc = None

    def tearDown(self):
        self.stop()
        self.env.close()

    def start(self, *extra):
        self.log = os.path.join(self.env.root, "kvtierd.log")
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [os.environ["KVT_KVTIERD"], "--port", str(self.port), "--local", self.sock,
                 "--data-dir", self.data, "--metrics-port", str(self.mport), "--threads", "2",
                 "--set", "max_local_cpu_size=4MiB", "--set", "dram_prefault=false",
                 "--set", "dram_lock_memory=false", *extra],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.mport), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("kvtierd did not start: " + open(self.log).read())
                time.sleep(0.05)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc = None

    def client(self):
        c = kvtier.Config()
        c.set("daemon", "unix://" + self.sock)
        st = kvtier.Store(c)
        return st, st.namespace("m", LAYOUT)

    def dram_chunks(self):
        info = redis.Redis(port=self.port).execute_command("KVTIER.WHY", *self.hot)
        return sum(1 for r in info if r[0] == b"hit" and r[1] == b"dram")

    def test_restart_warm_and_cold(self):
        self.start()
        st, ns = self.client()
        keys = ns.key_chain(list(range(256 * 40)))  # 10 MiB: most only on disk
        for k in keys:
            st.put(ns, k, os.urandom(ns.payload_bytes))
        st.flush(10000)
        for k in keys[:8]:  # the working set: read last
            st.get(ns, k)
        st.close()
        self.hot = [bytes(k) for k in keys[:8]]
        deadline = time.monotonic() + 10  # the reads' promotions land in the background
        while self.dram_chunks() != 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.dram_chunks(), 8)
        self.stop()  # saves the hot list
        self.assertTrue(os.path.exists(os.path.join(self.data, "hot.keys")))

        # Cold: ready at once, the working set on disk only.
        self.start()
        self.assertEqual(http(self.mport, "/ready")[0], 200)
        self.assertEqual(self.dram_chunks(), 0)
        self.stop()

        # Warm, at 1 MiB/s: healthy but not ready while it loads, then
        # ready with the working set in DRAM.
        self.start("--warm-start", "3MiB", "--warm-bandwidth", "1MiB")
        code, text = http(self.mport, "/ready")
        self.assertEqual(code, 503, text)
        self.assertIn("warming the first tier", text)
        self.assertEqual(http(self.mport, "/health")[0], 200)
        deadline = time.monotonic() + 30
        while http(self.mport, "/ready")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(http(self.mport, "/ready"), (200, "ready\n"))
        self.assertEqual(self.dram_chunks(), 8)
        self.stop()

        # A damaged list: said in the log, and the node starts cold.
        path = os.path.join(self.data, "hot.keys")
        with open(path, "r+b") as f:
            f.truncate(10)
        self.start("--warm-start", "3MiB")
        deadline = time.monotonic() + 10
        while http(self.mport, "/ready")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(http(self.mport, "/ready")[0], 200)
        self.stop()
        self.assertIn("hot list: 10 bytes, shorter than its header: starting cold",
                      open(self.log).read())

    def test_warm_start_needs_a_list(self):
        p = subprocess.run([os.environ["KVT_KVTIERD"], "--port", "0", "--warm-start", "1GiB"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--warm-start needs a hot list", p.stderr)
        p = subprocess.run([os.environ["KVT_KVTIERD"], "--port", "0", "--warm-start", "lots"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--warm-start lots", p.stderr)


if __name__ == "__main__":
    unittest.main()
