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
import subprocess
import tempfile

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

    def config(self, tier, name, dram="4MiB"):
        """A kvtier.Config: a DRAM tier of `dram`, and below it `tier`
        (none for "dram"), its medium named `name` (the same name opens the
        same medium again: a restart)."""
        c = kvtier.Config()
        c.set("max_local_cpu_size", dram)
        c.set("dram_page_size", "4KiB")
        c.set("dram_lock_memory", False)
        c.set("dram_prefault", False)
        c.set("verify_dram_reads", True)
        if tier == "nvme":
            c.set("local_disk", self.medium(tier, name))
            c.set("max_local_disk_size", "64MiB")
        elif tier == "shared_fs":
            c.set("shared_fs", self.medium(tier, name))
            c.set("max_shared_fs_size", "64MiB")
        elif tier == "s3":
            self.start_s3()
            c.set("remote_url", "s3://%s/%s/" % (BUCKET, name))
            c.set("s3_endpoint", self.endpoint)
            c.set("s3_region", "us-east-1")
            c.set("s3_admission", "always")
        elif tier != "dram":
            raise ValueError("no tier %r" % tier)
        return c


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
            with open(p, "r+b") as fp:
                fp.seek(4096 + 100)
                b = fp.read(1)
                fp.seek(4096 + 100)
                fp.write(bytes([b[0] ^ 0x5A]))
            n += 1
    return n
