#!/usr/bin/python3
"""TLS clients that make kvtierd's TLS reads wait to send (daemon_tls.sh).

Usage: daemon_tls_client.py keyupdate PORT CAFILE VALUE_FILE DAEMON_PID ROUNDS
       daemon_tls_client.py handshake PORT CAFILE COUNT

keyupdate: openssl s_client is the client: a line "K" on its standard
input sends a TLS 1.3 KeyUpdate that asks the server to update its keys
too.  The client asks for a GET of the value (already SET as key "big", a
few MiB) and leaves the reply unread, so the daemon's socket is full with
output still queued; sends the KeyUpdate; asks for another GET and a PING
and still reads nothing for a second; then reads everything.  Checked: the
daemon spends next to no CPU in that second (no spin on input it cannot act
on yet), every reply is whole and the value byte for byte, in order, within
a bound of time (no stall), and the session serves on.  ROUNDS repeats it
on new connections.

handshake: the daemon's certificate chain is large (about 90 KB) and this
client's TCP window tiny (a 2 KiB receive buffer, the smallest segment
size), so the daemon's first read, which runs the handshake, cannot write
its flight whole: it must wait for the socket to be writable with no reply
queued.  Checked, on COUNT connections one after the other (the daemon's
workers take them in turn): the handshake completes and PING answers.

Prints one line per check, "ok ..." or "FAIL ..."; exits 1 on any failure.
"""
import os
import select
import socket
import ssl
import subprocess
import sys
import time


mode, port, cafile = sys.argv[1:4]
fails = 0


def check(what, good, detail=""):
    global fails
    print(("ok   " if good else "FAIL ") + what + ("" if good else ": " + detail))
    if not good:
        fails += 1


def cpu_s():
    """The daemon's user and system CPU time, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_err(p, err, text, until):
    """Read the client's stderr into err until it holds text, or until."""
    while text not in err and time.monotonic() < until:
        r, _, _ = select.select([p.stderr], [], [], 0.1)
        if r:
            chunk = os.read(p.stderr.fileno(), 4096)
            if not chunk:
                break
            err += chunk
    return err


def handshake(n):
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 88)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.settimeout(5)
    s.connect(("127.0.0.1", int(port)))
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    t0 = time.monotonic()
    try:
        with ctx.wrap_socket(s) as t:
            check("connection %d: a handshake whose flight outgrows the socket" % n, True)
            t.sendall(b"PING\r\n")
            got = t.recv(64)
            check("connection %d: then PING (%.2f s in all)" % (n, time.monotonic() - t0),
                  got == b"+PONG\r\n", repr(got))
    except (OSError, ssl.SSLError) as e:
        check("connection %d: a handshake whose flight outgrows the socket" % n, False,
              "%s after %.1f s" % (e, time.monotonic() - t0))


def one_round(n):
    p = subprocess.Popen(
        ["openssl", "s_client", "-connect", "127.0.0.1:" + port, "-CAfile", cafile,
         "-verify_return_error", "-tls1_3", "-crlf", "-brief"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = wait_err(p, b"", b"Verification: OK", time.monotonic() + 10)
    if b"Protocol version: TLSv1.3" not in err:
        check("round %d: a TLS 1.3 session" % n, False, err.decode(errors="replace"))
        p.kill()
        p.wait()
        return
    p.stdin.write(b"GET big\n")
    p.stdin.flush()
    time.sleep(0.3)  # the reply left unread: the daemon's socket fills
    p.stdin.write(b"K\n")  # on a line of its own: s_client's command
    p.stdin.flush()
    err = wait_err(p, err, b"KEYUPDATE", time.monotonic() + 5)
    time.sleep(0.2)
    # The daemon reads the KeyUpdate with its socket full: its answer
    # waits for room, and the commands behind it wait in the socket.
    p.stdin.write(b"GET big\nPING\n")
    p.stdin.flush()
    c0 = cpu_s()
    time.sleep(1.0)
    held = cpu_s() - c0
    check("round %d: a full socket and commands waiting: %.2f s of CPU in 1 s" % (n, held),
          held < 0.3, "a spin")

    want = reply * 2 + b"+PONG\r\n"
    got = bytearray()
    deadline = time.monotonic() + 20
    while len(got) < len(want) and time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            chunk = os.read(p.stdout.fileno(), 256 << 10)
            if not chunk:
                break
            got += chunk
    check("round %d: s_client sent the KeyUpdate" % n, b"KEYUPDATE" in err,
          err.decode(errors="replace"))
    check("round %d: two %d-byte replies and the PONG, whole and in order (%d bytes)"
          % (n, len(value), len(got)), bytes(got) == want,
          "got %d of %d bytes; first difference at %s" % (
              len(got), len(want),
              next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                   min(len(got), len(want)))))
    c1 = cpu_s()
    time.sleep(0.5)
    idle = cpu_s() - c1
    check("round %d: then idle: %.2f s of CPU in 0.5 s" % (n, idle), idle < 0.2, "a spin")
    p.stdin.write(b"PING\n")
    p.stdin.flush()
    more = b""
    until = time.monotonic() + 5
    while b"+PONG\r\n" not in more and time.monotonic() < until:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            more += chunk
    check("round %d: the session serves on" % n, more == b"+PONG\r\n", repr(more[:80]))
    p.stdin.close()
    p.wait(timeout=10)


if mode == "handshake":
    for i in range(1, int(sys.argv[4]) + 1):
        handshake(i)
else:
    vfile, pid, rounds = sys.argv[4:7]
    pid, rounds = int(pid), int(rounds)
    value = open(vfile, "rb").read()
    reply = b"$%d\r\n" % len(value) + value + b"\r\n"
    for i in range(1, rounds + 1):
        one_round(i)
sys.exit(1 if fails else 0)
