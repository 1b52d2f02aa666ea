"""kvtier-bench connector --device: the connector's CUDA backend moving one
chunk between a GPU's paged blocks and pinned host memory, against
cudaMemcpy of the same bytes (torch's copy between a pinned host tensor and
a device tensor), rounds interleaved.

Shape: Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16), vLLM
FlashAttention NHD blocks of 16 tokens, a chunk of 256 tokens (32 MiB)
scattered over shuffled blocks.  scatter = H2D (a load), gather = D2H (a
save).  ratio_vs_cudamemcpy = kvtier's bandwidth / cudaMemcpy's; target
0.9.  Prints JSON with --json.
"""

import json
import random
import statistics
import sys
import time

import torch

import kvtier

L, H, D, BS, CHUNK, NB = 32, 8, 128, 16, 256, 256


def timed(fn, n):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n


def main():
    js = "--json" in sys.argv
    rounds = 3 if "--quick" in sys.argv else 7
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "connector-device", "error": "no CUDA device"}))
        return 1
    kv = [torch.randn(2, NB, BS, H, D, device="cuda").to(torch.bfloat16) for _ in range(L)]
    st = kvtier.Store(max_local_cpu_size="256MiB", dram_prefault=False)
    lay = kvtier.Layout(L, H, D, "bf16", block_size=BS, chunk_tokens=CHUNK)
    ns = st.namespace("bench/cuda", lay)
    conn = st.connector(ns, kvtier.paged_flash_attn(kv))
    blocks = random.Random(7).sample(range(NB), CHUNK // BS)
    layer_bytes = ns.layer_bytes
    host = torch.empty(layer_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(layer_bytes, dtype=torch.uint8, device="cuda")

    def k_gather():
        for l in range(L):
            conn.gather(l, blocks, CHUNK, host)

    def k_scatter():
        for l in range(L):
            conn.scatter(l, blocks, CHUNK, host)

    def m_d2h():
        for _ in range(L):
            host.copy_(dev, non_blocking=True)

    def m_h2d():
        for _ in range(L):
            dev.copy_(host, non_blocking=True)

    out = {}
    for op, ours, bound in (("gather_d2h", k_gather, m_d2h), ("scatter_h2d", k_scatter, m_h2d)):
        ours()
        bound()
        r, gb_k, gb_b = [], [], []
        for i in range(rounds):
            pair = [(ours, gb_k), (bound, gb_b)]
            if i % 2:
                pair.reverse()
            for fn, acc in pair:
                acc.append(L * layer_bytes / timed(fn, 5) / 1e9)
            r.append(gb_k[-1] / gb_b[-1])
        out[op] = {"kvtier_gbps": statistics.median(gb_k), "cudamemcpy_gbps": statistics.median(gb_b),
                   "ratio_vs_cudamemcpy": {"median": statistics.median(r), "min": min(r),
                                           "max": max(r)}, "target": 0.9}
    conn.close()
    st.close()
    doc = {"bench": "connector-device", "device": torch.cuda.get_device_name(0),
           "chunk_bytes": L * layer_bytes, "rounds": rounds, "figures": out}
    if js:
        print(json.dumps(doc, indent=1))
    else:
        for op, f in out.items():
            print("%-12s kvtier %.1f GB/s, cudaMemcpy %.1f GB/s: %.2fx" %
                  (op, f["kvtier_gbps"], f["cudamemcpy_gbps"], f["ratio_vs_cudamemcpy"]["median"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
