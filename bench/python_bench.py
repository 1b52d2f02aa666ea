"""The Python side of `kvtier-bench python` (bench/python.c runs it).

A coprocess: it builds, through the Python binding, the same engine as the
C side (vLLM FlashAttention NHD per-layer torch tensors, a block table
shuffled by the same generator, a prefaulted DRAM store of the same size), answers
READY, and then runs the operations the C side asks for on stdin, one line
each, answering the wall seconds on stdout:

    save N   N saves of the request's blocks, each under fresh keys:
             save_keys, save_layer per layer, wait, end
    load N   N loads of the request's chunks (held in the DRAM tier) into
             its blocks: load_keys, wait_layer per layer, end
    quit

argv: layers heads head_dim chunks dram_size.  Before READY it checks that a
save and a load through the binding restore the blocks byte for byte.
"""

import mmap
import sys
import time

import torch

import kvtier

BT, CT = 16, 256


def shuffled(n, seed=7):
    """The C side's block table: the same LCG Fisher-Yates shuffle."""
    t = list(range(n))
    for i in range(n - 1, 0, -1):
        seed = (seed * 1103515245 + 12345) & 0xFFFFFFFF
        j = seed % (i + 1)
        t[i], t[j] = t[j], t[i]
    return t


def main():
    layers, heads, dim, chunks = (int(a) for a in sys.argv[1:5])
    dram = sys.argv[5]
    nb = chunks * (CT // BT)
    st = kvtier.Store(max_local_cpu_size=dram, dram_lock_memory=False)
    lay = kvtier.Layout(layers, heads, dim, "bf16", block_size=BT, chunk_tokens=CT)
    ns = st.namespace("bench/python", lay)
    # The KV cache in memory of the C side's kind: one anonymous mapping
    # advised for huge pages (bench_buffer's), every layer's (2, blocks, 16,
    # heads, head_dim) tensor a view of it, so that neither side pays TLB
    # costs the other does not.
    size = layers * 2 * nb * BT * heads * dim * 2
    mem = mmap.mmap(-1, size)
    mem.madvise(mmap.MADV_HUGEPAGE)
    pool = torch.frombuffer(mem, dtype=torch.bfloat16).view(layers, 2, nb, BT, heads, dim)
    pool.view(torch.int16).copy_(torch.randint(-30000, 30000, pool.shape, dtype=torch.int16,
                                               generator=torch.Generator().manual_seed(42)))
    kv = [pool[l] for l in range(layers)]
    conn = st.connector(ns, kvtier.paged_flash_attn(kv), threads=1)
    table = shuffled(nb)
    seq = [0]

    def fresh_keys():
        seq[0] += 1
        return [ns.key_from_engine_hash(seq[0].to_bytes(8, "little") + i.to_bytes(24, "little"))
                for i in range(chunks)]

    def save(keys, req):
        if conn.save_keys(req, keys, table) != chunks:
            raise SystemExit("save stored less than every chunk")
        for l in range(layers):
            conn.save_layer(req, l)
        conn.wait(req)
        conn.end(req)

    def load(keys, req):
        conn.load_keys(req, keys, table, chunks * CT)
        for l in range(layers):
            if conn.wait_layer(req, l):
                raise SystemExit("load left blocks invalid")
        conn.end(req)

    # The chunks the loads read, and a check that they are the blocks.
    held = fresh_keys()
    save(held, 1)
    for k in held:  # the saves' new chunks must not evict what the loads read
        st.pin(ns, k)
    ref = [t.clone() for t in kv]
    for t in kv:
        t.zero_()
    load(held, 2)
    if not all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(kv, ref)):
        raise SystemExit("the blocks loaded are not the blocks saved")
    del ref
    print("READY", flush=True)
    req = 10
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        n = int(cmd[1])
        t0 = time.perf_counter()
        for _ in range(n):
            req += 1
            if cmd[0] == "save":
                save(fresh_keys(), req)
            else:
                load(held, req)
        print("%.9f" % (time.perf_counter() - t0), flush=True)
    conn.close()
    st.close()
    del kv, pool
    mem.close()


if __name__ == "__main__":
    main()
