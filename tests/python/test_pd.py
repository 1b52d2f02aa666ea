"""Prefill and decode on two nodes: two kvtierd processes, each its own
node (its own DRAM and disk tier).  An engine on the prefill node stores a
prompt's chunks through its daemon; an engine on the decode node, asking
its own daemon, finds them and loads them byte for byte:

- through a shared file system directory both nodes mount (the shared
  tier's index picks up the other node's objects);
- straight from the prefill node's daemon over TCP (the decode node lists
  it in `peers`, the prefill node runs with --serve-peers), with nothing
  shared;
- with both paths open, from whichever the decode node's cost model has
  measured to be faster: the prefill node behind a slow link (a proxy
  that delays what it forwards) loses to the shared directory.

Run by ctest (py_pd) with Debian's /usr/bin/python3, KVTIER_LIB and
KVT_KVTIERD set.
"""

import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
import unittest
import urllib.request

import torch

import kvtier
import tier_env
from test_local import LAYOUT, start_daemon


def fake_peer(on_fetch, stop):
    """A "peer" on a free loopback port: it claims every key a KVTIER.PEEK
    names, and hands the connection of each KVTIER.FETCH to on_fetch(conn),
    one FETCH a connection, until `stop` is set.  Returns its listening
    socket (close it to end)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)

    def serve():
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            buf = b""
            with c:
                try:
                    while not stop.is_set():
                        data = c.recv(65536)
                        if not data:
                            break
                        buf += data
                        if b"KVTIER.PEEK" in buf and buf.endswith(b"\r\n"):
                            c.sendall(b":%d\r\n" % buf.count(b"$64\r\n"))
                            buf = b""
                        elif b"KVTIER.FETCH" in buf and buf.endswith(b"\r\n") \
                                and len(buf) > 90:
                            on_fetch(c)
                            break
                except OSError:
                    pass
    threading.Thread(target=serve, daemon=True).start()
    return lsock


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


def metrics(port):
    """The daemon's /metrics as {(name, tier or None): value}."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    out = {}
    for line in text.decode().splitlines():
        m = re.match(r'^(\w+)(?:\{tier="(\w+)"\})? (\S+)$', line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


class SlowLink:
    """A TCP proxy to `port` that holds every piece it forwards from the
    server for `delay` seconds: a link far slower than the loopback."""

    def __init__(self, port, delay):
        self.port, self.delay = port, delay
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.listen_port = self.lsock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _pipe(self, a, b, delay):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if delay:
                    time.sleep(delay)
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=self._pipe, args=(c, u, 0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, self.delay), daemon=True).start()

    def close(self):
        self.stop = True
        self.lsock.close()


class Peers(unittest.TestCase):
    """The decode node reading the prefill node's daemon directly."""

    def setUp(self):
        self.bin = os.environ.get("KVT_KVTIERD")
        if not self.bin or not os.access(self.bin, os.X_OK):
            raise unittest.SkipTest("KVT_KVTIERD does not name kvtierd (ctest sets it)")
        self.dir = tempfile.mkdtemp(prefix="kvt-py-peer-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
            p.wait(20)
        shutil.rmtree(self.dir, ignore_errors=True)

    def node(self, name, extra):
        sock = os.path.join(self.dir, name + ".sock")
        mport = tier_env.free_port()
        self.procs.append(start_daemon(self.bin, os.path.join(self.dir, name), sock,
                                       ["--metrics-port", str(mport), *extra]))
        return "unix://" + sock, mport

    def prefill(self, url, n_chunks, seed):
        with kvtier.Store(daemon=url) as p:
            ns = p.namespace("py/peer", kvtier.Layout(**BIG))
            torch.manual_seed(seed)
            tokens = [seed * 7919 + i for i in range(BIG["chunk_tokens"] * n_chunks)]
            keys = ns.key_chain(tokens)
            data = [torch.randn(ns.payload_bytes // 2).to(torch.bfloat16) for _ in keys]
            for k, x in zip(keys, data):
                self.assertTrue(p.put(ns, k, x, durability="crash_safe"))
            return tokens, data

    def decode(self, url, tokens, data):
        with kvtier.Store(daemon=url) as q:
            ns = q.namespace("py/peer", kvtier.Layout(**BIG))
            keys = ns.key_chain(tokens)
            self.assertEqual(q.lookup(ns, keys), len(keys))
            for k, x in zip(keys, data):
                out = torch.empty_like(x)
                q.get(ns, k, out)
                self.assertTrue(torch.equal(out.view(torch.int16), x.view(torch.int16)))

    def test_decode_node_fetches_from_the_prefill_node(self):
        port_a = tier_env.free_port()
        url_a, m_a = self.node("prefill", ["--serve-peers", "--port", str(port_a)])
        url_b, m_b = self.node("decode", ["--set", "peers=127.0.0.1:%d" % port_a])
        tokens, data = self.prefill(url_a, 8, 1)
        with kvtier.Store(daemon=url_b) as q:  # nothing is shared: only the peer has it
            ns = q.namespace("py/peer", kvtier.Layout(**BIG))
            other = ns.key_chain([t + 1 for t in tokens])
            self.assertEqual(q.lookup(ns, other), 0)
        self.decode(url_b, tokens, data)
        a, b = metrics(m_a), metrics(m_b)
        self.assertEqual(a[("kvtierd_peer_fetches_total", None)], 8)
        self.assertEqual(b[("kvtier_tier_hits_total", "peer")], 8)
        self.assertEqual(b[("kvtier_tier_promotions_total", "peer")], 8)
        # read again: from the decode node's own DRAM now, not the network
        self.decode(url_b, tokens, data)
        self.assertEqual(metrics(m_a)[("kvtierd_peer_fetches_total", None)], 8)

    def test_a_restarted_prefill_node_is_read_again_at_once(self):
        """The decode node's idle connection to the prefill node dies with
        that node's restart: the next read reconnects, it does not fail."""
        port_a = tier_env.free_port()
        url_a, _ = self.node("prefill", ["--serve-peers", "--port", str(port_a)])
        url_b, m_b = self.node("decode", ["--set", "peers=127.0.0.1:%d" % port_a])
        tokens, data = self.prefill(url_a, 4, 5)
        with kvtier.Store(daemon=url_b) as q:
            ns = q.namespace("py/peer", kvtier.Layout(**BIG))
            keys = ns.key_chain(tokens)
            out = torch.empty_like(data[0])
            q.get(ns, keys[0], out)  # leaves a connection idle
            p = self.procs.pop(0)
            p.send_signal(signal.SIGTERM)
            p.wait(20)
            sock = os.path.join(self.dir, "prefill.sock")
            self.procs.append(start_daemon(self.bin, os.path.join(self.dir, "prefill"), sock,
                                           ["--serve-peers", "--port", str(port_a)]))
            for k, x in zip(keys[1:], data[1:]):  # from the prefill node's disk now
                q.get(ns, k, out)
                self.assertTrue(torch.equal(out.view(torch.int16), x.view(torch.int16)))
        self.assertEqual(metrics(m_b)[("kvtier_tier_read_errors_total", "peer")], 0)

    def test_a_prefill_node_without_serve_peers_refuses(self):
        port_a = tier_env.free_port()
        url_a, _ = self.node("prefill", ["--port", str(port_a)])
        url_b, m_b = self.node("decode", ["--set", "peers=127.0.0.1:%d" % port_a])
        tokens, data = self.prefill(url_a, 2, 2)
        with kvtier.Store(daemon=url_b) as q:
            ns = q.namespace("py/peer", kvtier.Layout(**BIG))
            keys = ns.key_chain(tokens)
            self.assertEqual(q.lookup(ns, keys), 0)
            with self.assertRaises(kvtier.Error):
                q.get(ns, keys[0], torch.empty_like(data[0]))
        b = metrics(m_b)
        self.assertGreaterEqual(b[("kvtier_tier_read_errors_total", "peer")], 1)

    def test_peers_authenticate_as_an_admin_user(self):
        import hashlib
        acl = os.path.join(self.dir, "acl.txt")
        with open(acl, "w") as f:
            f.write("user node tenant default +admin sha256:%s\n"
                    % hashlib.sha256(b"n0de-pass").hexdigest())
            f.write("user app tenant default sha256:%s\n" % hashlib.sha256(b"app-pass").hexdigest())
        port_a = tier_env.free_port()
        url_a, m_a = self.node("prefill", ["--serve-peers", "--port", str(port_a), "--acl", acl])
        peer = ["--set", "peers=127.0.0.1:%d" % port_a]
        url_app, _ = self.node("decode-app", [*peer, "--set", "peer_user=app",
                                              "--set", "peer_password=app-pass"])
        url_bad, _ = self.node("decode-bad", [*peer, "--set", "peer_user=node",
                                              "--set", "peer_password=wrong"])
        url_node, _ = self.node("decode-node", [*peer, "--set", "peer_user=node",
                                                "--set", "peer_password=n0de-pass"])
        tokens, data = self.prefill(url_a, 2, 4)
        for url in (url_app, url_bad):  # not an admin; a wrong password
            with kvtier.Store(daemon=url) as q:
                ns = q.namespace("py/peer", kvtier.Layout(**BIG))
                self.assertEqual(q.lookup(ns, ns.key_chain(tokens)), 0)
        self.decode(url_node, tokens, data)
        self.assertEqual(metrics(m_a)[("kvtierd_peer_fetches_total", None)], 2)

    def test_a_lying_peer_is_not_believed(self):
        """A "peer" that claims every chunk and answers FETCH with bytes that
        are no image, then with one announcing more than the node could
        hold: the decode node serves neither and says what was wrong."""
        answers = [b"$4100\r\n" + os.urandom(4100) + b"\r\n", b"$99999999999\r\n"]
        stop = threading.Event()

        def fetch(c):
            c.sendall(answers.pop(0))
            if not answers:
                stop.set()
        lsock = fake_peer(fetch, stop)
        url_b, m_b = self.node("decode", ["--set", "peers=127.0.0.1:%d" % lsock.getsockname()[1]])
        try:
            with kvtier.Store(daemon=url_b) as q:
                ns = q.namespace("py/peer", kvtier.Layout(**BIG))
                keys = ns.key_chain(list(range(BIG["chunk_tokens"] * 2)))
                self.assertEqual(q.lookup(ns, keys), 2)  # it claims them
                out = torch.empty(ns.payload_bytes // 2, dtype=torch.bfloat16)
                for _ in range(2):
                    with self.assertRaises(kvtier.Error):
                        q.get(ns, keys[0], out)
                    time.sleep(1.1)  # past the second a failed peer is skipped
            b = metrics(m_b)
            self.assertGreaterEqual(b[("kvtier_tier_corrupt_total", "peer")], 1)
            self.assertGreaterEqual(b[("kvtier_tier_read_errors_total", "peer")], 1)
            self.assertEqual(b[("kvtier_tier_chunks", "dram")], 0)
        finally:
            lsock.close()

    def test_a_drip_feeding_peer_is_cut_off(self):
        """A "peer" that claims a chunk and answers its FETCH a byte every
        0.3 s: peer_timeout_ms bounds the whole reply, not each wait (a 4 kB
        reply at that pace held the read for 20 minutes), and the peer is then
        failed like one that does not answer."""
        stop = threading.Event()

        def fetch(c):
            c.sendall(b"$4100\r\n")
            while not stop.wait(0.3):
                c.sendall(b"x")
        lsock = fake_peer(fetch, stop)
        url_b, m_b = self.node("decode", ["--set", "peers=127.0.0.1:%d" % lsock.getsockname()[1],
                                          "--set", "peer_timeout_ms=1000"])
        try:
            with kvtier.Store(daemon=url_b) as q:
                ns = q.namespace("py/peer", kvtier.Layout(**BIG))
                keys = ns.key_chain(list(range(BIG["chunk_tokens"])))
                self.assertEqual(q.lookup(ns, keys), 1)  # it claims it
                out = torch.empty(ns.payload_bytes // 2, dtype=torch.bfloat16)
                t0 = time.monotonic()
                with self.assertRaises(kvtier.Error):
                    q.get(ns, keys[0], out)
                took = time.monotonic() - t0
                self.assertLess(took, 5, "a drip-fed reply held the read %.1f s" % took)
                # failed: skipped for a second, so a lookup does not ask it
                self.assertEqual(q.lookup(ns, keys), 0)
            b = metrics(m_b)
            self.assertGreaterEqual(b[("kvtier_tier_read_errors_total", "peer")], 1)
        finally:
            stop.set()
            lsock.close()

    def test_cost_model_picks_the_faster_source(self):
        shared = os.path.join(self.dir, "shared")
        os.mkdir(shared)
        fs = ["--set", "shared_fs=" + shared, "--set", "shared_fs_refresh_ms=100"]
        port_a = tier_env.free_port()
        url_a, _ = self.node("prefill", ["--serve-peers", "--port", str(port_a), *fs])
        slow = SlowLink(port_a, 0.02)
        try:
            url_b, m_b = self.node("decode", ["--set", "peers=127.0.0.1:%d" % slow.listen_port,
                                              *fs])
            tokens, data = self.prefill(url_a, 12, 3)
            with kvtier.Store(daemon=url_b) as q:
                ns = q.namespace("py/peer", kvtier.Layout(**BIG))
                keys = ns.key_chain(tokens)
                deadline = time.monotonic() + 20  # until the shared index has them
                while time.monotonic() < deadline:
                    if metrics(m_b).get(("kvtier_tier_chunks", "fsdir"), 0) >= len(keys):
                        break
                    time.sleep(0.05)
            self.decode(url_b, tokens, data)
            b = metrics(m_b)
            peer, fsdir = b[("kvtier_tier_hits_total", "peer")], b[("kvtier_tier_hits_total", "fsdir")]
            # The planning figures put the peer first; once it measures slow,
            # the shared directory serves the rest.
            self.assertGreaterEqual(peer, 1)
            self.assertLessEqual(peer, 3)
            self.assertEqual(peer + fsdir, 12)
            self.assertLess(b[("kvtier_tier_read_bandwidth_bytes_per_second", "peer")],
                            b[("kvtier_tier_read_bandwidth_bytes_per_second", "fsdir")])
        finally:
            slow.close()


# chunks of 1 MiB, as engines store them
BIG = dict(num_layers=8, num_kv_heads=8, head_dim=128, dtype="bf16", chunk_tokens=32,
           block_size=16)


if __name__ == "__main__":
    unittest.main()
