#!/usr/bin/env bash
# kvtier-bench, the benchmarks' own program, as a user runs it from a build
# directory: it sits next to kvtier, finds what it needs in bench-data/ next
# to itself (never in the source tree: here it runs from a scratch directory
# with KVT_SRC unset), prints every figure with its ratio, and is not
# installed.
set -u
kvtier=${1:?usage: cli_bench.sh path/to/kvtier}
build=$(cd "$(dirname "$kvtier")" && pwd -P)
bench=$build/kvtier-bench
work=$(mktemp -d /tmp/kvt-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"
py=/usr/bin/python3
[ -x $py ] || py=python3
unset KVT_SRC
cd "$work"

[ -x "$bench" ] && ok "kvtier-bench is built next to kvtier" || { bad "$bench missing"; exit 1; }
for f in traces/conversation_trace.jsonl plan_reference.py s3/server.js s3/faultproxy.js; do
	[ -r "$build/bench-data/$f" ] && ok "bench-data/$f" || bad "bench-data/$f missing"
done

expect "dram --json --quick" "$bench" dram --json --quick
$py - "$work/out" <<'PY' && ok "dram JSON carries every ratio" || bad "dram JSON: $(head -c 400 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
ops = {r["op"] for r in d["results"]}
assert {"get_copy", "put", "get_zero_copy"} <= ops, ops
assert all(r["ratio_vs_memcpy"] > 0 for r in d["results"])
assert d["lookup"]["ratio_vs_hash"] > 0
PY

asan_rt=$(ldd "$bench" 2>/dev/null | awk '/libasan/ { print $3 }')
# plan runs libCacheSim beside the library in a Python process: under ASan
# that process needs the runtime first, as the python benchmark's does.
expect "plan --repeat 1 --json (its trace and reference from bench-data)" \
	env ${asan_rt:+LD_PRELOAD=$asan_rt ASAN_OPTIONS=detect_leaks=0} \
	"$bench" plan --repeat 1 --rounds 1 --scale 2 --json
$py - "$work/out" "$build" <<'PY' && ok "plan agrees with the reference to the block" || bad "plan JSON: $(head -c 400 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["exact"] and d["ratio_vs_reference"] > 0, d
assert d["trace"].startswith(sys.argv[2] + "/bench-data/"), d["trace"]
lcs = d["libcachesim"]  # libCacheSim in the venv: per-access hits equal
assert "error" not in lcs and lcs["exact"], lcs
assert {(c["policy"], c["capacity_blocks"]) for c in lcs["configs"]} == \
    {(p, n) for p in ("lru", "s3fifo") for n in (1000, 5000, 20000)}, lcs
assert all(c["ratio_vs_libcachesim"] > 0 for c in lcs["configs"]), lcs
PY

# Paths reach the JSON escaped (jansson), whatever their characters.
odd="$work/a \"quoted\" \\ dir"
mkdir -p "$odd"
expect "sharedfs --quick --json under a directory whose name JSON must escape" \
	"$bench" sharedfs --quick --json --dir "$odd"
$py - "$work/out" "$odd" <<'PY' && ok "sharedfs JSON names that directory as it is, with every ratio" || bad "sharedfs JSON: $(head -c 400 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dir"] == sys.argv[2], d["dir"]
assert d["sizes"] and all(s[op]["ratio_vs_raw"]["median"] > 0
			  for s in d["sizes"] for op in ("write", "read")), d["sizes"]
PY
[ -z "$(ls -A "$odd")" ] && ok "sharedfs removed its scratch directory" || bad "left in $odd: $(ls -A "$odd")"

expect_fail "an unknown benchmark" "unknown benchmark" "$bench" frobnicate
expect_fail "no benchmark named" "usage" "$bench"
expect "--help" "$bench" --help
expect "connector --json --quick" "$bench" connector --json --quick
# The Python binding's benchmark: its Python side and the package come from
# bench-data, the library from the build directory.  In a sanitized build
# the interpreter loads an instrumented library: the ASan runtime goes
# first (leaks are the C tests' to check).
if [ -n "$asan_rt" ]; then
	expect "python --json --quick" env LD_PRELOAD="$asan_rt" \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "$bench" python --json --quick
else
	expect "python --json --quick" "$bench" python --json --quick
fi
$py - "$work/out" <<'PY' && ok "python JSON carries both ratios" || bad "python JSON: $(head -c 400 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert [r["op"] for r in d["results"]] == ["save", "load"], d
assert all(r["ratio_vs_c_connector"] > 0 and r["target"] == 0.8 for r in d["results"])
PY
expect_fail "python: a bad option" "unknown option" "$bench" python --frobnicate
# LMCache's own server and Redis connectors with kvtier beside them: every
# ratio is there, measured or null with the part's error (exit 1 then).
# Not under ASan: three LMCache servers and an instrumented kvtierd on two
# cores outrun LMCache's connector timeouts; the release build runs it.
if [ -n "$asan_rt" ]; then
	echo "ok   lmcache --json --quick: left to the uninstrumented build"
else
	expect "lmcache --json --quick" "$bench" lmcache --json --quick
	$py - "$work/out" <<'PY' && ok "lmcache JSON carries every ratio" || bad "lmcache JSON: $(head -c 600 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["bench"] == "lmcache" and d["quick"], d
for s in ("llama-3.1-8b", "qwen2.5-0.5b"):
	for op in ("store", "retrieve"):
		x = d["l2"]["shapes"][s][op]
		assert "ratio_vs_lmcache_disk" in x and x["target"] == 1.0 and "pass" in x, x
	for c in ("redis", "resp"):
		for op in ("put", "get"):
			x = d["remote"]["shapes"][s][c][op]
			assert "ratio_vs_redis" in x and x["target"] == 1.2 and "pass" in x, x
assert set(d["ratio_vs_lmcache_disk"]) == {"store", "retrieve"}, d["ratio_vs_lmcache_disk"]
assert len(d["ratio_vs_redis"]) == 4, d["ratio_vs_redis"]
PY
fi
expect_fail "lmcache: a bad option" "unknown option" "$bench" lmcache --frobnicate
# The same work through each store's own client (kvtierd two ways, redis,
# Mooncake, LMCache): every store has its figures, or says why not.
if [ -n "$asan_rt" ]; then
	expect "peers --json --quick" env LD_PRELOAD="$asan_rt" \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "$bench" peers --json --quick
else
	expect "peers --json --quick" "$bench" peers --json --quick
fi
$py - "$work/out" <<'PY' && ok "peers JSON: every store measured or its error named" || bad "peers JSON: $(head -c 600 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
peers = ["kvtier_local", "kvtierd_resp", "redis", "mooncake", "mooncake_shm", "lmcache"]
assert d["bench"] == "peers" and d["quick"] and sorted(d["peers"]) == sorted(peers), d["peers"]
# 1 and 4 clients, put and get; a cell the machine's free memory cannot
# hold now is left out, named in "skipped".
rows = {(r["clients"], r["op"]) for r in d["results"]}
assert d["results"] and rows <= {(c, op) for c in (1, 4) for op in ("put", "get")}, rows
for c in (1, 4):
	assert {(c, "put"), (c, "get")} <= rows or \
		any("by %d clients left out" % c in s for s in d["skipped"]), (c, d["skipped"])
for p in peers:
	err = d["peers"][p].get("error")
	figs = [r["peers"][p] for r in d["results"] if "gb_per_s" in r["peers"][p]]
	assert figs or (isinstance(err, str) and err), (p, d["peers"][p])
	for f in figs:
		assert f["gb_per_s"]["median"] > 0 and f["p99_ms"]["median"] >= f["p50_ms"]["median"] > 0
		assert f["server_cpu_ms_per_req"]["median"] >= 0
	lk = d["lookup"]["peers"][p]
	assert ("us" in lk and lk["us"]["median"] > 0) or lk.get("error"), (p, lk)
# kvtierd itself always runs: its two paths are what the ratios are of.
assert not d["peers"]["kvtier_local"].get("error") and not d["peers"]["kvtierd_resp"].get("error")
for r in d["results"]:
	for peer, path in (("redis", "kvtierd_resp"), ("mooncake", "kvtier_local"),
			   ("mooncake_shm", "kvtier_local"), ("lmcache", "kvtier_local")):
		x = r["ratio_vs_" + peer]
		assert x["kvtier_path"] == path and x["target"] == 1.2 and isinstance(x["pass"], bool)
		assert ("median" in x and x["median"] > 0) or x.get("error"), (peer, x)
for peer in ("redis", "mooncake", "mooncake_shm", "lmcache"):
	x = d["lookup"]["ratio_vs_" + peer]
	assert x["target"] == 10 and (("median" in x and x["median"] > 0) or x.get("error")), x
PY
expect_fail "peers: a bad option" "unknown option" "$bench" peers --frobnicate
# A decode node's store fetching from a prefill node's kvtierd (the peer tier).
expect "daemon-peer --json --quick" "$bench" daemon-peer --json --quick
$py - "$work/out" <<'PY' && ok "daemon-peer JSON carries its ratio" || bad "daemon-peer JSON: $(head -c 400 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
f = d["fetch"]
assert f["ratio_vs_tcp"] > 0 and f["fetch_gbps"]["median"] > 0 and f["target"] == 0.5, d
PY
# KV events against none, both stores in this process, a subscriber reading.
expect "events --json --quick" "$bench" events --json --quick
$py - "$work/out" <<'PY' && ok "events JSON carries its ratios" || bad "events JSON: $(head -c 400 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
for shape in ("64KiB", "qwen2.5-0.5b"):
    r = d[shape]["ratio_vs_put_rate"]
    assert 0 < r["min"] <= r["median"] <= r["max"], d
assert d["batches_published"] > 0 and d["events_dropped"] == 0, d
assert 0 < d["batches_received"] <= d["batches_published"], d
PY
expect_fail "events: a bad option" "unknown option" "$bench" events --frobnicate
for c in dram nvme sharedfs s3 plan hierarchy daemon daemon-peer daemon-rebuild python peers lmcache events warm; do
	"$bench" "$c" --help >"$work/out" 2>&1 && grep -q "kvtier-bench $c" "$work/out" &&
		ok "$c --help" || bad "$c --help: $(head -3 "$work/out")"
done
expect_fail "hierarchy: a bad option" "unknown option" "$bench" hierarchy --frobnicate

# Not installed, and none of it in kvtier (cli_symbols.sh checks the library).
if cmake --install "$build" --prefix "$work/prefix" >"$work/log" 2>&1; then
	[ -e "$work/prefix/bin/kvtier" ] && ok "kvtier installed" || bad "kvtier not installed"
	[ -e "$work/prefix/bin/kvtier-bench" ] && bad "kvtier-bench installed" || ok "kvtier-bench not installed"
else
	bad "install: $(tail -3 "$work/log")"
fi
if nm --defined-only "$kvtier" | grep -E ' T bench_'; then
	bad "kvtier holds benchmark code (above)"
else
	ok "kvtier holds no benchmark code"
fi

echo "cli_bench: $fails failure(s)"
[ "$fails" -eq 0 ]
