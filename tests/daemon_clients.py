"""kvtierd against redis-py and raw sockets (run by daemon_clients.sh with
Debian's /usr/bin/python3): LMCache's exact key and command sequence over a
pool of connections with MB values, replies compared byte for byte, and
hostile clients that must cost their own connection and nothing else.

Usage: daemon_clients.py PORT PID"""
import hashlib
import os
import resource
import socket
import sys
import threading
import time

import redis

PORT, PID = int(sys.argv[1]), int(sys.argv[2])
# Under ThreadSanitizer the daemon's resident memory is mostly shadow
# memory: the figures below that bound it are not checked then.
MEMORY = os.environ.get("KVT_DAEMON_TSAN") != "1"
fails = 0


def check(what, cond, detail=""):
    global fails
    if cond:
        print("ok  ", what)
    else:
        fails += 1
        print("FAIL", what, detail)


def conn():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.settimeout(10)
    return s


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            break
        b += k
    return b


def recv_until(s, suffix):
    b = b""
    while not b.endswith(suffix):
        k = s.recv(4096)
        if not k:
            break
        b += k
    return b


def still_open(s):
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    finally:
        s.setblocking(True)


def exchange(s, data, n):
    s.sendall(data)
    return recv_exact(s, n)


def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def closed(s):
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return False


def rss_kib():
    with open("/proc/%d/status" % PID) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --- byte-exact replies (LMCache's native client compares them) -----------
s = conn()
for what, req, want in [
    ("SET +OK", cmd("SET", "a", "b"), b"+OK\r\n"),
    ("EXISTS :1", cmd("EXISTS", "a"), b":1\r\n"),
    ("EXISTS :0", cmd("EXISTS", "zz"), b":0\r\n"),
    ("GET $n", cmd("GET", "a"), b"$1\r\nb\r\n"),
    ("GET $-1", cmd("GET", "zz"), b"$-1\r\n"),
    ("empty value", cmd("SET", "e", ""), b"+OK\r\n"),
    ("GET empty value", cmd("GET", "e"), b"$0\r\n\r\n"),
    ("DEL :1", cmd("DEL", "a"), b":1\r\n"),
    ("DEL :0", cmd("DEL", "a"), b":0\r\n"),
    ("SET NX nil", cmd("SET", "e", "x", "NX"), b"$-1\r\n"),
    ("MGET", cmd("MGET", "e", "zz"), b"*2\r\n$0\r\n\r\n$-1\r\n"),
    ("inline PING", b"PING\r\n", b"+PONG\r\n"),
    ("unknown command keeps the connection",
     cmd("NOPE"), b"-ERR unknown command 'NOPE', with args beginning with: \r\n"),
    ("still open", cmd("PING"), b"+PONG\r\n"),
]:
    got = exchange(s, req, len(want))
    check("reply " + what, got == want, repr(got))

# pipelining, fed one byte at a time
pipe = cmd("SET", "p", "12345") + cmd("GET", "p") + cmd("EXISTS", "p", "p") + cmd("DEL", "p")
want = b"+OK\r\n$5\r\n12345\r\n:2\r\n:1\r\n"
for i in range(len(pipe)):
    s.send(pipe[i:i + 1])
    time.sleep(0.0005)
check("pipeline dribbled byte by byte", recv_exact(s, len(want)) == want)
s.sendall(pipe * 50)
check("pipeline of 200 in one send", recv_exact(s, len(want) * 50) == want * 50)
s.sendall(cmd("HELLO", "3") + cmd("GET", "zz"))
got = recv_until(s, b"_\r\n")
check("RESP3: HELLO map, then null as _", got.startswith(b"%7\r\n") and got.endswith(b"_\r\n"),
      repr(got[-20:]))
s.close()

# --- LMCache's connector: its keys, its sequence, MB values, a pool -------
r = redis.Redis(port=PORT, max_connections=150)


def lmcache_worker(w, errors):
    try:
        for i in range(6):
            h = hashlib.sha256(b"%d-%d" % (w, i)).hexdigest()
            key = "Qwen/Qwen3-8B@1@0@%s@bfloat16" % h
            kv = os.urandom(3 * 1024 * 1024 + w)
            meta = os.urandom(28)
            assert r.set(key + "kv_bytes", kv) is True
            assert r.set(key + "metadata", meta) is True
            assert r.exists(key + "metadata") == 1
            assert r.get(key + "metadata") == meta
            assert r.get(key + "kv_bytes") == kv
            if i % 2:
                assert r.delete(key + "metadata") == 1
                assert r.exists(key + "metadata") == 0
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append("%s: %r" % (w, e))


errors = []
threads = [threading.Thread(target=lmcache_worker, args=(w, errors)) for w in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("LMCache sequence from 16 threads over one pool, 3 MB values", not errors, errors[:3])
check("the pool used many connections", len(r.connection_pool._available_connections) > 1)
check("redis-py CLIENT SETINFO / SETNAME", r.client_setname("lmcache") is True)
check("redis-py INFO parses", r.info()["redis_version"] == "7.0.0")
check("redis-py SCAN", len(list(r.scan_iter(match="Qwen/*metadata", count=100))) == 48)
r3 = redis.Redis(port=PORT, protocol=3) if "protocol" in redis.Redis.__init__.__code__.co_varnames else None
if r3:
    check("redis-py RESP3", r3.set("r3", b"x") and r3.get("r3") == b"x")

# --- hostile clients --------------------------------------------------------
base = rss_kib()
s = conn()
got = exchange(s, b"*1\r\n+PING\r\n", 64)
check("bad RESP: error then close",
      got.startswith(b"-ERR Protocol error: expected '$', got '+'\r\n") and closed(s), repr(got))
s = conn()
got = exchange(s, b"*1\r\n$99999999999\r\n", 64)
check("absurd bulk length: error then close",
      got == b"-ERR Protocol error: invalid bulk length\r\n" and closed(s), repr(got))
s = conn()
got = exchange(s, b"*99999999\r\n", 64)
check("absurd argument count: error then close",
      got == b"-ERR Protocol error: invalid multibulk length\r\n" and closed(s), repr(got))
s = conn()
s.sendall(b"x" * (66 * 1024))
got = recv_exact(s, 64)
check("an endless inline line: error then close", got.startswith(b"-ERR Protocol error") and closed(s))

# 512 MiB announced, 16 MiB sent, then the client dies mid-transfer
victims = []
for _ in range(4):
    s = conn()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$536870912\r\n")
    s.sendall(b"z" * (16 * 1024 * 1024))
    victims.append(s)
time.sleep(0.3)
mid = rss_kib()
for s in victims:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
time.sleep(0.5)
after = rss_kib()
check("four 512 MiB values announced: memory is what was sent (%d MiB)" % ((mid - base) // 1024),
      mid - base < 200 * 1024 or not MEMORY)
check("killed mid-transfer: the memory goes back (%d MiB left)" % ((after - base) // 1024),
      after - base < 64 * 1024 or not MEMORY)
check("killed mid-transfer: nothing stored", r.exists("big") == 0)

# a value received in place (straight into the DRAM tier) whose client dies
# mid-transfer: the space it held goes back, nothing is stored
used0 = r.info("kvtier")["tier0"]["used_bytes"]
victims = []
for i in range(3):
    s = conn()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$5\r\nplace\r\n$8388608\r\n" + b"p" * (1 << 20))
    victims.append(s)
time.sleep(0.3)
held = r.info("kvtier")["tier0"]["used_bytes"]
for s in victims:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
time.sleep(0.3)
check("values received in place hold their DRAM space (%d MiB)" % ((held - used0) >> 20),
      held - used0 >= 3 * 8 << 20)
check("killed mid-transfer: the DRAM space goes back",
      r.info("kvtier")["tier0"]["used_bytes"] == used0)
check("killed mid-transfer: no value", r.exists("place") == 0)

# half-closed: the commands sent are answered, then the connection closes
s = conn()
s.sendall(cmd("SET", "h", "1") + cmd("GET", "h"))
s.shutdown(socket.SHUT_WR)
check("half-closed: replies, then EOF", recv_exact(s, 12) == b"+OK\r\n$1\r\n1\r\n" and closed(s))

# a command left half-sent is closed after --client-timeout (1 s here)
s = conn()
s.sendall(b"*2\r\n$3\r\nGET\r\n$10\r\nabc")
t0 = time.time()
dead = closed(s)
check("a stalled half-sent command is dropped (%.1f s)" % (time.time() - t0), dead)

# 1000 idle connections cost their buffers alone
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 1200:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
before = rss_kib()
idle = []
for _ in range(1000):
    c = socket.create_connection(("127.0.0.1", PORT))
    idle.append(c)
time.sleep(0.5)
check("1000 idle connections: a busy client goes on",
      r.set("busy", b"v" * 100000) and r.get("busy") == b"v" * 100000)
info = r.info("clients")
check("1000 idle connections: all held (%d)" % info["connected_clients"],
      info["connected_clients"] >= 1000)
grown = rss_kib() - before
check("1000 idle connections: %d KiB of memory (< 200 MiB)" % grown,
      grown < 200 * 1024 or not MEMORY)
time.sleep(1.5)
check("idle connections are not timed out", all(still_open(c) for c in idle[:50]))
for c in idle:
    c.close()
check("the daemon still answers", r.ping() is True)

print("all passed" if not fails else "%d failed" % fails)
sys.exit(1 if fails else 0)
