"""What the adapter tests (test_sglang.py, test_lmcache.py) share: a store
configuration per tier (DRAM alone; NVMe, the shared directory and S3 each
below a small DRAM tier), the S3 test server of tests/s3 (SigV4-checking
s3rver behind its fault proxy, on ports it picks itself), and damage done to
a chunk where a tier keeps it.

The server needs node and tests/s3/node_modules (scripts/install-deps.sh);
a test that does not find them fails, as the C tests do.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import kvtier

TIERS = ("dram", "nvme", "shared_fs", "s3")
SRC = os.environ.get("KVT_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BUCKET = "kvt"
ACCESS_KEY, SECRET_KEY = "kvtier-test", "kvtier-test-secret"


class Env:
    """A scratch directory, and the S3 server once a test asks for it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="kvt-pyad-")
        self.s3 = None
        self.endpoint = None

    def close(self):
        if self.s3 is not None:
            self.s3.stdin.close()
            self.s3.terminate()
            self.s3.wait(10)
            self.s3.stdout.close()
            self.s3 = None
        shutil.rmtree(self.root, ignore_errors=True)

    def start_s3(self):
        if self.s3 is not None:
            return
        script = os.path.join(SRC, "tests", "s3", "server.js")
        mods = os.path.join(SRC, "tests", "s3", "node_modules", "@20minutes", "s3rver")
        if shutil.which("node") is None:
            raise RuntimeError("node is not installed (scripts/install-deps.sh installs it)")
        if not os.path.isdir(mods):
            raise RuntimeError("%s missing: run scripts/install-deps.sh" % mods)
        data = os.path.join(self.root, "s3data")
        os.makedirs(data)
        self.s3 = subprocess.Popen(["node", script, data, BUCKET], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        line = self.s3.stdout.readline().split()
        if len(line) != 3 or line[0] != "PORT":
            raise RuntimeError("the S3 test server did not start (no PORT line)")
        self.endpoint = "http://127.0.0.1:%s" % line[1]
        os.environ["AWS_ACCESS_KEY_ID"] = ACCESS_KEY
        os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET_KEY

    def medium(self, tier, name):
        """Where tier `tier` of configuration `name` keeps its chunks."""
        if tier == "s3":
            return os.path.join(self.root, "s3data", BUCKET, name)
        return os.path.join(self.root, "%s-%s" % (tier, name))

    def settings(self, tier, name, dram="4MiB"):
        """The configuration keys of a DRAM tier of `dram` and below it
        `tier` (none for "dram"), its medium named `name` (the same name
        opens the same medium again: a restart), as (key, value) pairs."""
        kv = [("max_local_cpu_size", dram), ("dram_page_size", "4KiB"),
              ("dram_lock_memory", "false"), ("dram_prefault", "false"),
              ("verify_dram_reads", "true")]
        if tier == "nvme":
            kv += [("local_disk", self.medium(tier, name)), ("max_local_disk_size", "64MiB")]
        elif tier == "shared_fs":
            kv += [("shared_fs", self.medium(tier, name)), ("max_shared_fs_size", "64MiB")]
        elif tier == "s3":
            self.start_s3()
            kv += [("remote_url", "s3://%s/%s/" % (BUCKET, name)),
                   ("s3_endpoint", self.endpoint), ("s3_region", "us-east-1"),
                   ("s3_admission", "always")]
        elif tier != "dram":
            raise ValueError("no tier %r" % tier)
        return kv

    def config(self, tier, name, dram="4MiB"):
        """settings() as a kvtier.Config."""
        c = kvtier.Config()
        for k, v in self.settings(tier, name, dram):
            c.set(k, v)
        return c

    def yaml(self, tier, name, dram="4MiB", daemon=None):
        """settings() as a YAML file, for an engine that opens its store
        from a path (or, with `daemon`, a store that is the client of the
        kvtierd on that socket); its path."""
        kv = [("daemon", "unix://" + daemon)] if daemon else self.settings(tier, name, dram)
        path = os.path.join(self.root, "%s-%s.yaml" % (tier, name))
        with open(path, "w") as f:
            f.writelines("%s: %s\n" % pair for pair in kv)
        return path


def free_port():
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_kvtierd_tcp(argv, port, log, timeout=30):
    """kvtierd run as `argv` (its path first), its output appended to the
    file `log`; returns the process once 127.0.0.1:`port` takes a
    connection, or raises with the log if it exits or `timeout` s pass."""
    with open(log, "a") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                with open(log) as f:
                    raise RuntimeError("kvtierd did not start:\n" + f.read())
            time.sleep(0.05)


def start_kvtierd(sock, extra=(), dram="16MiB", bin_=None):
    """kvtierd (`bin_`, else KVT_KVTIERD, set by <build>/pytest.sh) serving
    the node's processes on the Unix socket `sock`, `extra` arguments after
    kvtier's own; returns once it takes a connection (10 s at most)."""
    bin_ = bin_ or os.environ.get("KVTIER_KVTIERD") or os.environ.get("KVT_KVTIERD")
    if not bin_ or not os.access(bin_, os.X_OK):
        raise RuntimeError("KVT_KVTIERD names no kvtierd (run through <build>/pytest.sh)")
    p = subprocess.Popen([bin_, "--port", "0", "--local", sock, "--threads", "2",
                          "--set", "max_local_cpu_size=" + dram, "--set", "dram_prefault=false",
                          "--set", "dram_lock_memory=false", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(sock)
            return p
        except OSError:
            if p.poll() is not None:
                raise RuntimeError("kvtierd exited at start")
            time.sleep(0.025)
        finally:
            s.close()
    p.kill()
    raise RuntimeError("kvtierd did not listen on " + sock)


def flip_byte(path, at=4096 + 100):
    """Flip one byte of the file at `path` (by default a payload byte of a
    chunk image: past its 4 KiB header)."""
    with open(path, "r+b") as fp:
        fp.seek(at)
        b = fp.read(1)
        fp.seek(at)
        fp.write(bytes([b[0] ^ 0x5A]))


def flip_payload_byte(env, tier, name, key):
    """Flip one payload byte of every file of `key` (a kvtier.Key) on the
    medium of `tier`; how many were damaged."""
    hexkey = str(key)
    n = 0
    for dirpath, _, files in os.walk(env.medium(tier, name)):
        for f in files:
            if hexkey not in f or "metadata" in f or "md5" in f:
                continue
            p = os.path.join(dirpath, f)
            if os.path.getsize(p) < 4096 + 200:
                continue
            flip_byte(p)
            n += 1
    return n
