"""kvtier.sglang.KvtierStorage driven as SGLang's HiCache drives a storage
backend: created by the dynamic backend factory from the extra config,
given the host pool, then the controller's storage paths -- prefetch
(_storage_hit_query: batch_exists over page hashes; _page_transfer:
batch_get_v1 into host indices) and backup (_page_backup: batch_set_v1) --
with torch CPU host pools in SGLang's layouts, through every tier.  Restored
pages must be byte-identical to the pages backed up.

SGLang cannot be installed here: its host pools are stood in for by
HostPool below (the tensor shapes, page accessors and slot allocator of
MHATokenToKVPoolHost and MLATokenToKVPoolHost), its page hash by
get_hash_str (SHA-256 over the parent hash and the page's token ids).
"""

import hashlib
import importlib
import logging
import os
import random
import unittest

import torch

import kvtier
import tier_env
from kvtier import sglang as ksg

STORAGE_BATCH_SIZE = 128  # SGLang's pages per storage call
P, L, H, D = 4, 3, 2, 8   # page tokens, layers, KV heads, head dim
LORA, ROPE = 12, 4        # MLA: kv_lora_rank, qk_rope_head_dim


def get_hash_str(token_ids, prior_hash=None):
    """SGLang's page hash (mem_cache/utils.py)."""
    h = hashlib.sha256()
    if prior_hash:
        h.update(bytes.fromhex(prior_hash))
    for t in token_ids:
        h.update(t.to_bytes(4, byteorder="little", signed=False))
    return h.hexdigest()


def page_hashes(tokens):
    out, last = [], None
    for i in range(0, len(tokens) - P + 1, P):
        last = get_hash_str(tokens[i:i + P], last)
        out.append(last)
    return out


class HostPool:
    """SGLang's host KV pool: kv_buffer in its layout, a page's flat
    accessors, and the slot allocator (token slots handed out a page at a
    time)."""

    def __init__(self, layout, pages=48, mla=False, dtype=torch.bfloat16, seed=0):
        self.layout, self.page_size, self.dtype = layout, P, dtype
        self.size, self.page_num, self.layer_num = pages * P, pages, L
        g = torch.Generator().manual_seed(seed)
        if mla:
            self.kv_lora_rank, self.qk_rope_head_dim = LORA, ROPE
            dims = {"layer_first": (L, self.size, 1, LORA + ROPE),
                    "page_first": (self.size, L, 1, LORA + ROPE),
                    "page_first_direct": (pages, L, P, 1, LORA + ROPE)}[layout]
        else:
            self.head_num, self.head_dim = H, D
            dims = {"layer_first": (2, L, self.size, H, D),
                    "page_first": (2, self.size, L, H, D),
                    "page_first_direct": (2, pages, L, P, H, D)}[layout]
        self.mla = mla
        self.kv_buffer = torch.randn(dims, generator=g, dtype=torch.float32).to(dtype)
        # Free pages in a shuffled order: a page's slots are never the
        # slots of the same page of another pool.
        order = list(range(pages))
        random.Random(seed).shuffle(order)
        self.free_slots = torch.tensor([p * P + t for p in order for t in range(P)])

    def alloc(self, need):
        assert need % P == 0
        out, self.free_slots = self.free_slots[:need], self.free_slots[need:]
        return out

    def clear_data(self):
        self.kv_buffer.zero_()

    def get_data_page(self, index, flat=True):
        if self.mla:
            if self.layout == "layer_first":
                page = self.kv_buffer[:, index:index + P]
            elif self.layout == "page_first":
                page = self.kv_buffer[index:index + P]
            else:
                page = self.kv_buffer[index // P:index // P + 1]
        elif self.layout == "layer_first":
            page = self.kv_buffer[:, :, index:index + P]
        elif self.layout == "page_first":
            page = self.kv_buffer[:, index:index + P]
        else:
            page = self.kv_buffer[:, index // P:index // P + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        n = (L * P * (LORA + ROPE)) if self.mla else (2 * L * P * H * D)
        return torch.zeros(n, dtype=self.dtype)

    def set_from_flat_data_page(self, index, data_page):
        page = self.get_data_page(index, flat=False)
        page.copy_(data_page.reshape(page.shape))

    def page_kv(self, index):
        """Page `index` (a first slot) as (layer, plane, token, head, dim):
        what must come back, whatever the layout."""
        page = self.get_data_page(index, flat=False)
        if self.mla:
            if self.layout == "page_first":
                page = page.permute(1, 0, 2, 3)
            return page.reshape(L, 1, P, 1, LORA + ROPE)
        if self.layout == "page_first":
            page = page.permute(2, 0, 1, 3, 4)
        else:
            page = page.reshape(2, L, P, H, D).permute(1, 0, 2, 3, 4)
        return page.contiguous()


def create_dynamic_backend(storage_config, kwargs=None):
    """StorageBackendFactory._create_dynamic_backend: the class named by the
    extra config, checked to be a HiCacheStorage, made with (config, kwargs)."""
    extra = storage_config.extra_config
    for f in ("backend_name", "module_path", "class_name"):
        if f not in extra:
            raise ValueError("Missing required field '%s'" % f)
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    if not issubclass(cls, ksg.HiCacheStorage):
        raise TypeError("not a HiCacheStorage")
    return cls(storage_config, kwargs if kwargs is not None else {})


class Controller:
    """HiCacheController's storage side: attach (factory, then
    register_mem_pool_host), the hit query, the page transfer and the
    backup, in batches of STORAGE_BATCH_SIZE pages, zero-copy (batch_get_v1,
    batch_set_v1) when the extra config says interface_v1, else the generic
    page get and set through flat pages."""

    def __init__(self, pool, extra, tp_rank=0, tp_size=1, mla=False, kwargs=None,
                 metrics=False):
        cfg = ksg.HiCacheStorageConfig(
            tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
            attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=metrics,
            is_page_first_layout=pool.layout == "page_first",
            model_name="kvtier-test/sglang-tiny", extra_config=dict(
                {"backend_name": "kvtier", "module_path": "kvtier.sglang",
                 "class_name": "KvtierStorage", "interface_v1": 1}, **extra))
        self.pool = pool
        self.backend = create_dynamic_backend(cfg, kwargs)
        self.backend.register_mem_pool_host(pool)
        self.zero_copy = bool(cfg.extra_config.get("interface_v1", 0))

    def close(self):
        self.backend.close()

    def storage_hit_query(self, tokens):
        hashes, hit = page_hashes(tokens), []
        for s in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[s:s + STORAGE_BATCH_SIZE]
            n = self.backend.batch_exists(batch, ksg.HiCacheStorageExtraInfo())
            hit.extend(batch[:n])
            if n < len(batch):
                break
        return hit

    def page_transfer(self, hashes, host_indices):
        done = 0
        for s in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[s:s + STORAGE_BATCH_SIZE]
            idx = host_indices[s * P:(s + len(batch)) * P]
            extra = ksg.HiCacheStorageExtraInfo(prefix_keys=None)
            if self.zero_copy:
                res = self.backend.batch_get_v1(batch, idx, extra)
            else:
                dst = [self.pool.get_dummy_flat_data_page() for _ in batch]
                data = self.backend.batch_get(batch, dst)
                res = []
                for i, d in enumerate(data):
                    if d is not None:
                        self.pool.set_from_flat_data_page(int(idx[i * P]), d)
                    res.append(d is not None)
            hit = res.index(False) if False in res else len(res)
            done += hit
            if hit < len(batch):
                break
        return done

    def page_backup(self, hashes, host_indices):
        done = 0
        for s in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[s:s + STORAGE_BATCH_SIZE]
            idx = host_indices[s * P:(s + len(batch)) * P]
            if self.zero_copy:
                ok = all(self.backend.batch_set_v1(batch, idx,
                                                   ksg.HiCacheStorageExtraInfo()))
            else:
                ok = self.backend.batch_set(
                    batch, [self.pool.get_data_page(int(idx[i * P])) for i in range(len(batch))])
            if not ok:
                break
            done += len(batch)
        return done


def tokens_for(pages, seed):
    r = random.Random(seed)
    return [r.randrange(1 << 17) for _ in range(pages * P + 3)]  # and a partial page


class SGLangTiers(unittest.TestCase):
    """Backup and prefetch through every tier; the disk tiers across a
    restart of the store (a fresh DRAM tier: the pages come from below)."""

    @classmethod
    def setUpClass(cls):
        cls.env = tier_env.Env()

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def check_pages(self, src, src_idx, dst, dst_idx, n):
        for i in range(n):
            a = src.page_kv(int(src_idx[i * P])).view(torch.uint8)
            b = dst.page_kv(int(dst_idx[i * P])).view(torch.uint8)
            self.assertTrue(torch.equal(a, b), "page %d differs" % i)

    def roundtrip(self, tier, save_layout, load_layout, pages, mla=False,
                  dtype=torch.bfloat16, corrupt=True):
        name = "%s-%s-%s-%s" % (tier, save_layout, load_layout, "mla" if mla else "mha")
        durability = "cached" if tier == "dram" else "crash_safe"
        extra = {"kvtier_durability": durability}
        st = kvtier.Store(self.env.config(tier, name))
        src = HostPool(save_layout, pages=pages + 8, mla=mla, dtype=dtype, seed=1)
        tokens = tokens_for(pages, seed=len(name))
        hashes = page_hashes(tokens)
        self.assertEqual(len(hashes), pages)

        # Backup: the pages SGLang wrote to its host pool go to storage.
        c = Controller(src, extra, mla=mla, kwargs={"store": st})
        self.assertEqual(c.storage_hit_query(tokens), [])
        src_idx = src.alloc(pages * P)
        self.assertEqual(c.page_backup(hashes, src_idx), pages)
        c.close()
        if tier != "dram":
            st.close()
            st = kvtier.Store(self.env.config(tier, name))   # a restart

        # Prefetch into another pool, of another layout: a longer prompt
        # hits as far as its stored pages go.
        dst = HostPool(load_layout, pages=pages + 8, mla=mla, dtype=dtype, seed=2)
        dst.clear_data()
        c = Controller(dst, extra, mla=mla, kwargs={"store": st})
        longer = tokens + tokens_for(2, seed=99)
        hit = c.storage_hit_query(longer)
        self.assertEqual(hit, hashes)
        dst_idx = dst.alloc(pages * P)
        self.assertEqual(c.page_transfer(hit, dst_idx), pages)
        self.check_pages(src, src_idx, dst, dst_idx, pages)
        lower = st.stats(st.tiers - 1)
        if tier != "dram":
            self.assertGreaterEqual(lower["hits"], pages, lower)
        key = c.backend._key(hashes[1])
        c.close()
        st.close()
        if tier == "dram" or not corrupt:
            return

        # A page damaged on the tier's medium: detected, never restored;
        # the prefetch stops at it.  Backed up again, it heals.
        self.assertEqual(tier_env.flip_payload_byte(self.env, tier, name, key), 1)
        st = kvtier.Store(self.env.config(tier, name))
        dst2 = HostPool(load_layout, pages=pages + 8, mla=mla, dtype=dtype, seed=3)
        dst2.clear_data()
        c = Controller(dst2, extra, mla=mla, kwargs={"store": st})
        self.assertEqual(len(c.storage_hit_query(tokens)), pages)  # indexes: no I/O
        idx = dst2.alloc(pages * P)
        self.assertEqual(c.page_transfer(hashes, idx), 1)
        self.check_pages(src, src_idx, dst2, idx, 1)
        self.assertEqual(c.storage_hit_query(tokens), hashes[:1])
        c.close()
        c = Controller(src, extra, mla=mla, kwargs={"store": st})
        self.assertEqual(c.page_backup(hashes, src_idx), pages)
        c.close()
        c = Controller(dst2, extra, mla=mla, kwargs={"store": st})
        dst2.clear_data()
        self.assertEqual(c.page_transfer(c.storage_hit_query(tokens), idx), pages)
        self.check_pages(src, src_idx, dst2, idx, pages)
        c.close()
        st.close()

    def test_dram(self):
        # 130 pages: two storage batches.
        self.roundtrip("dram", "page_first", "layer_first", 130)
        self.roundtrip("dram", "layer_first", "page_first_direct", 5, dtype=torch.float16)

    def test_nvme(self):
        self.roundtrip("nvme", "page_first", "layer_first", 6)
        self.roundtrip("nvme", "page_first_direct", "page_first", 4, mla=True,
                       corrupt=False)

    def test_shared_fs(self):
        self.roundtrip("shared_fs", "layer_first", "page_first", 6)

    def test_s3(self):
        self.roundtrip("s3", "page_first", "layer_first", 5, dtype=torch.float16)


class SGLangContract(unittest.TestCase):
    """The rest of HiCacheStorage over one DRAM store."""

    def setUp(self):
        self.env = tier_env.Env()
        self.st = kvtier.Store(self.env.config("dram", "contract"))

    def tearDown(self):
        self.st.close()
        self.env.close()

    def test_generic_page_get_and_set(self):
        # Without interface_v1 SGLang moves flat pages; they are the same
        # chunks, so zero-copy reads them back.
        src = HostPool("page_first", seed=4)
        tokens = tokens_for(5, seed=5)
        hashes = page_hashes(tokens)
        c = Controller(src, {"interface_v1": 0}, kwargs={"store": self.st})
        self.assertFalse(c.zero_copy)
        idx = src.alloc(5 * P)
        self.assertEqual(c.page_backup(hashes, idx), 5)
        for layout, v1 in (("layer_first", 0), ("page_first_direct", 1)):
            dst = HostPool(layout, seed=6)
            dst.clear_data()
            d = Controller(dst, {"interface_v1": v1}, kwargs={"store": self.st})
            didx = dst.alloc(5 * P)
            self.assertEqual(d.page_transfer(d.storage_hit_query(tokens), didx), 5)
            for i in range(5):
                self.assertTrue(torch.equal(src.page_kv(int(idx[i * P])),
                                            dst.page_kv(int(didx[i * P]))))
            self.assertTrue(d.backend.exists(hashes[0]))
            self.assertIsNone(d.backend.get(get_hash_str([1, 2, 3, 4]),
                                            dst.get_dummy_flat_data_page()))
            d.close()
        c.close()

    def test_tensor_parallel_ranks_are_namespaces(self):
        tokens = tokens_for(3, seed=7)
        hashes = page_hashes(tokens)
        pools = [HostPool("page_first", seed=10 + r) for r in range(2)]
        ranks = [Controller(pools[r], {}, tp_rank=r, tp_size=2, kwargs={"store": self.st})
                 for r in range(2)]
        idx = [p.alloc(3 * P) for p in pools]
        self.assertEqual(ranks[0].page_backup(hashes, idx[0]), 3)
        # Rank 1 has not backed its shard up: the same page hashes miss.
        self.assertEqual(ranks[1].storage_hit_query(tokens), [])
        self.assertEqual(ranks[1].page_backup(hashes, idx[1]), 3)
        for r in range(2):
            dst = HostPool("layer_first", seed=20 + r)
            dst.clear_data()
            d = Controller(dst, {}, tp_rank=r, tp_size=2, kwargs={"store": self.st})
            didx = dst.alloc(3 * P)
            self.assertEqual(d.page_transfer(d.storage_hit_query(tokens), didx), 3)
            for i in range(3):
                self.assertTrue(torch.equal(pools[r].page_kv(int(idx[r][i * P])),
                                            dst.page_kv(int(didx[i * P]))), (r, i))
            d.close()
        for c in ranks:
            c.close()

    def test_mla_ranks_share_one_copy(self):
        tokens = tokens_for(2, seed=8)
        hashes = page_hashes(tokens)
        src = HostPool("page_first", mla=True, seed=30)
        r0 = Controller(src, {}, tp_rank=0, tp_size=2, mla=True, kwargs={"store": self.st})
        idx = src.alloc(2 * P)
        self.assertEqual(r0.page_backup(hashes, idx), 2)
        dst = HostPool("layer_first", mla=True, seed=31)
        dst.clear_data()
        r1 = Controller(dst, {}, tp_rank=1, tp_size=2, mla=True, kwargs={"store": self.st})
        didx = dst.alloc(2 * P)
        self.assertEqual(r1.page_transfer(r1.storage_hit_query(tokens), didx), 2)
        for i in range(2):
            self.assertTrue(torch.equal(src.page_kv(int(idx[i * P])),
                                        dst.page_kv(int(didx[i * P]))))
        r0.close()
        r1.close()

    def test_rank_namespaces(self):
        # Which ranks name the same pages: MLA's TP ranks share one copy,
        # anything else (MHA's TP ranks, PP stages, CP slices, also MLA's)
        # is a shard of its own; attention-DP replicas share.
        def digest(mla=False, **ranks):
            r = dict(tp_rank=0, tp_size=4, pp_rank=0, pp_size=2, attn_cp_rank=0,
                     attn_cp_size=1, dp_rank=0)
            r.update(ranks)
            cfg = ksg.HiCacheStorageConfig(
                is_mla_model=mla, enable_storage_metrics=False, is_page_first_layout=True,
                model_name="m", extra_config={}, **r)
            b = ksg.KvtierStorage(cfg, {"store": self.st})
            b.register_mem_pool_host(HostPool("page_first", pages=2, mla=mla))
            d = b.ns.digest
            b.close()
            return d

        base = digest()
        self.assertNotEqual(base, digest(tp_rank=1))
        self.assertNotEqual(base, digest(pp_rank=1))
        self.assertNotEqual(base, digest(attn_cp_size=2))
        self.assertNotEqual(digest(attn_cp_size=2), digest(attn_cp_size=2, attn_cp_rank=1))
        self.assertEqual(base, digest(dp_rank=1))
        mla = digest(mla=True)
        self.assertEqual(mla, digest(mla=True, tp_rank=3))
        self.assertNotEqual(mla, digest(mla=True, pp_rank=1))
        self.assertNotEqual(digest(mla=True, attn_cp_size=2),
                            digest(mla=True, attn_cp_size=2, attn_cp_rank=1))

    def test_rank_config_files(self):
        # One extra config for every rank; {tp_rank} names each rank's YAML,
        # here each its own NVMe directory, as ranks on one node need.
        for r in range(2):
            with open("%s/rank%d.yaml" % (self.env.root, r), "w") as f:
                f.write("max_local_cpu_size: 1MiB\ndram_lock_memory: false\n"
                        "local_disk: %s/disk%d\nmax_local_disk_size: 8MiB\n" %
                        (self.env.root, r))
        extra = {"kvtier_config": self.env.root + "/rank{tp_rank}.yaml",
                 "kvtier_durability": "crash_safe"}
        tokens = tokens_for(2, seed=9)
        for r in range(2):
            pool = HostPool("page_first", seed=60 + r)
            c = Controller(pool, extra, tp_rank=r, tp_size=2)
            self.assertEqual(c.page_backup(page_hashes(tokens), pool.alloc(2 * P)), 2)
            c.close()
        for r in range(2):
            files = [f for _, _, fs in os.walk("%s/disk%d" % (self.env.root, r)) for f in fs
                     if f.endswith(".kvt")]
            self.assertEqual(len(files), 2, (r, files))

    def test_stats(self):
        src = HostPool("page_first", seed=40)
        c = Controller(src, {}, kwargs={"store": self.st}, metrics=True)
        tokens = tokens_for(4, seed=41)
        idx = src.alloc(4 * P)
        c.page_backup(page_hashes(tokens), idx)
        c.page_transfer(page_hashes(tokens), src.alloc(4 * P))
        m = c.backend.get_stats()
        self.assertEqual(sum(m.backup_pgs), 4)
        self.assertEqual(sum(m.prefetch_pgs), 4)
        self.assertTrue(all(b > 0 for b in m.prefetch_bandwidth + m.backup_bandwidth))
        self.assertEqual(sum(c.backend.get_stats().prefetch_pgs), 0)  # reset by the call
        c.close()

    def test_bad_input(self):
        src = HostPool("page_first", seed=50)
        with self.assertRaisesRegex(ValueError, "kvtier_durability 'always'"):
            Controller(src, {"kvtier_durability": "always"}, kwargs={"store": self.st})
        with self.assertRaisesRegex(ValueError, "unknown extra-config key.s. kvtier_confg"):
            Controller(src, {"kvtier_confg": "/etc/kvtier.yaml"}, kwargs={"store": self.st})
        c = Controller(src, {}, kwargs={"store": self.st})
        idx = src.alloc(2 * P)
        logging.disable(logging.CRITICAL)
        try:
            self.assertEqual(c.backend.batch_set_v1(["not-a-hash", get_hash_str([1])], idx),
                             [False, True])
            self.assertFalse(c.backend.exists("not-a-hash"))
            self.assertEqual(c.backend.batch_exists(["zz", get_hash_str([1])]), 0)
        finally:
            logging.disable(logging.NOTSET)
        with self.assertRaisesRegex(ValueError, "3 keys and 8 host indices"):
            c.backend.batch_get_v1(["aa", "bb", "cc"], idx)
        c.close()
        cfg = ksg.HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m",
                                       extra_config={})
        with self.assertRaisesRegex(RuntimeError, "register_mem_pool_host"):
            ksg.KvtierStorage(cfg, {"store": self.st}).exists(get_hash_str([1]))


if __name__ == "__main__":
    unittest.main()
