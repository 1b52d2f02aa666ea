#!/usr/bin/env bash
# The kvtier command as a user drives it: hashes that line up with vLLM,
# chunks stored by one process and loaded by another through a disk tier,
# lookups, inspection of good and damaged objects, and clear errors.
set -u
kvtier=${1:?usage: cli_basic.sh path/to/kvtier}
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d /tmp/kvt-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

# --- hash: vLLM's published block hashes from its own KV events ---------
py=/usr/bin/python3
[ -x $py ] || py=python3
$py - "$src/tests/data/vllm/kv_event_lora.json" "$work" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
open(sys.argv[2] + "/tokens.json", "w").write(json.dumps(d["token_ids"]))
open(sys.argv[2] + "/want.txt", "w").write("\n".join(str(h) for h in d["block_hashes"]) + "\n")
PY
expect "hash sha256_cbor runs" "$kvtier" hash --scheme sha256_cbor --block-size 16 --seed 42 --lora Alice "$work/tokens.json"
grep -q '^# vLLM sha256_cbor block hashes, 16-token blocks, PYTHONHASHSEED "42", LoRA Alice:' "$work/out" &&
	ok "hash sha256_cbor labels its lines" || bad "hash sha256_cbor header: $(head -1 "$work/out")"
awk '!/^#/ {print $3}' "$work/out" >"$work/got.txt"
if cmp -s "$work/got.txt" "$work/want.txt"; then ok "hash sha256_cbor matches vLLM's KV events (25 blocks)"; else bad "hash sha256_cbor differs from vLLM"; fi
tr ',[]' '   ' <"$work/tokens.json" | "$kvtier" hash --scheme sha256_cbor --seed 42 --lora Alice - | awk '!/^#/ {print $3}' >"$work/got2.txt"
cmp -s "$work/got2.txt" "$work/want.txt" && ok "hash reads whitespace-separated stdin" || bad "hash from stdin differs"
expect "hash sha256 chain" "$kvtier" hash --model tiny --block-size 16 "$work/tokens.json"
[ "$(grep -vc '^#' "$work/out")" -eq 25 ] && ok "25 whole chunks keyed" || bad "expected 25 keys, got $(wc -l <"$work/out")"
grep -q '^# kvtier chain keys (sha256) of .*(preset tiny), 16-token chunks, tenant default' "$work/out" &&
	ok "hash names the model its keys belong to" || bad "hash header: $(head -1 "$work/out")"
expect_fail "hash rejects a bad scheme" "expected sha256, xxh3 or sha256_cbor" "$kvtier" hash --scheme md5 "$work/tokens.json"
echo "[1, 2, x]" >"$work/badtok.json"
expect_fail "hash rejects bad tokens" "unexpected 'x'" "$kvtier" hash "$work/badtok.json"

# --- put in one process, get in another, through the disk tier ----------
$py - "$work" <<'PY'
import os, sys
w = sys.argv[1]
open(w + "/prompt.txt", "w").write(" ".join(str((i * 7 + 3) % 50000) for i in range(4 * 64 + 10)))
# tiny model: 2 layers x 2 heads x 16 dims x 64 tokens x bf16 x K,V = 16 KiB a chunk
open(w + "/kv.bin", "wb").write(os.urandom(4 * 16384))
PY
common=(--model tiny --chunk-tokens 64 --dir "$work/store")
expect "put 4 chunks (power-safe)" "$kvtier" put "${common[@]}" --tokens "$work/prompt.txt" --durability power-safe "$work/kv.bin"
[ "$(grep -c stored "$work/out")" -eq 4 ] && ok "4 chunks stored" || bad "put output: $(cat "$work/out")"
grep -q '^# 4 chunk(s) of .*(preset tiny), 64-token chunks of 16.0 KiB' "$work/out" &&
	ok "put names the model" || bad "put header: $(head -1 "$work/out")"
# hash, put and lookup agree on which model a key belongs to: the keys
# hash prints for --model tiny are the ones put stored under.
grep -v '^#' "$work/out" | cut -d' ' -f1 >"$work/put-keys"
"$kvtier" hash "${common[@]}" "$work/prompt.txt" | grep -v '^#' | cut -d' ' -f2 >"$work/hash-keys"
cmp -s "$work/put-keys" "$work/hash-keys" && ok "hash --model gives the keys put stored" ||
	bad "hash and put disagree: $(paste "$work/put-keys" "$work/hash-keys" | head -2)"
expect "put again" "$kvtier" put "${common[@]}" --tokens "$work/prompt.txt" "$work/kv.bin"
[ "$(grep -c exists "$work/out")" -eq 4 ] && ok "second put: first version kept" || bad "second put: $(cat "$work/out")"
expect "lookup from a new process" "$kvtier" lookup "${common[@]}" --tokens "$work/prompt.txt" --json
grep -q '"hit_chunks": 4' "$work/out" && ok "lookup finds 4 chunks" || bad "lookup: $(cat "$work/out")"
expect "get from a new process" "$kvtier" get "${common[@]}" --tokens "$work/prompt.txt" -o "$work/back.bin"
cmp -s "$work/kv.bin" "$work/back.bin" && ok "payload back bit-exact" || bad "payload differs"
expect "ls" "$kvtier" ls "${common[@]}"
[ "$(grep -c "^nvme .* 16384$" "$work/out")" -eq 4 ] && ok "ls lists 4 objects in the NVMe tier" || bad "ls: $(cat "$work/out")"
expect "stat --json" "$kvtier" stat "${common[@]}" --json
grep -q '"name": "nvme", "capacity_bytes": [0-9]*, "used_bytes": [0-9]*, "chunks": 4' "$work/out" && ok "stat counts 4 chunks" || bad "stat: $(cat "$work/out")"
expect_fail "put of a wrong-size payload" "need" "$kvtier" put "${common[@]}" --tokens "$work/prompt.txt" "$work/tokens.json"
expect_fail "other tenant is refused without a secret" "tenant \"bob\" is not configured" "$kvtier" lookup "${common[@]}" --tenant bob --tokens "$work/prompt.txt"

# --- inspect good and damaged objects -----------------------------------
obj=$(find "$work/store" -name '*.kvt' | head -1)
expect "inspect a stored object" "$kvtier" inspect "$obj"
grep -q "verified" "$work/out" && ok "inspect verifies" || bad "inspect: $(cat "$work/out")"
cp "$obj" "$work/flip.kvt"
flip_byte "$work/flip.kvt" 5000
expect_fail "inspect a flipped payload byte" "checksum mismatch" "$kvtier" inspect "$work/flip.kvt"
head -c 3000 "$obj" >"$work/short.kvt"
expect_fail "inspect a truncated object" "truncated" "$kvtier" inspect "$work/short.kvt"
head -c 8192 /dev/urandom >"$work/junk.kvt"
expect_fail "inspect garbage" "bad magic" "$kvtier" inspect "$work/junk.kvt"

# --- verify (fsck) finds a damaged chunk on disk and repairs ---------------
expect "verify a healthy store" "$kvtier" verify "${common[@]}"
grep -q "nvme: 4 object(s) checked, 0 bad" "$work/out" && ok "verify checks 4 chunks" || bad "verify: $(cat "$work/out")"
flip_byte "$obj" 6000
expect_fail "verify finds the flipped byte" "" "$kvtier" verify "${common[@]}"
grep -q "BAD: .*layer 0 checksum mismatch" "$work/out" && ok "verify names the bad chunk" || bad "verify: $(cat "$work/out")"
"$kvtier" verify "${common[@]}" --json >"$work/v.json" 2>"$work/err"
$py - "$work/v.json" <<'PY' && ok "verify --json lists the bad object with its reason" || bad "verify --json: $(cat "$work/v.json")"
import json, sys
t = json.load(open(sys.argv[1]))["tiers"]
nv = [x for x in t if x["name"] == "nvme"][0]
assert nv["bad"] == 1 and len(nv["bad_objects"]) == 1, nv
b = nv["bad_objects"][0]
assert b["class"] == "bad" and "layer 0 checksum mismatch" in b["why"] and len(b["key"]) == 64, b
PY
expect_fail "verify --repair still reports it" "" "$kvtier" verify "${common[@]}" --repair
grep -q "1 moved to quarantine" "$work/out" && ok "repair moves it into the quarantine" || bad "repair: $(cat "$work/out")"
expect "verify after repair" "$kvtier" verify "${common[@]}" --json
grep -q '"checked": 3, "bad": 0' "$work/out" && ok "repaired: 3 good chunks left" || bad "verify after repair: $(cat "$work/out")"
[ -e "$obj" ] && bad "repair left the bad file" || ok "repair removed the bad file"

# --- gc --json: a path with a quote, a backslash and a newline stays JSON --
odd="$work/sh\"ar\\ed
dir"
mkdir -p "$odd"
expect "gc --json over an odd path" "$kvtier" gc --dir "$odd" --ttl 1d --json
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["dir"]==sys.argv[2] and d["files"]==0, d' "$work/out" "$odd" \
	&& ok "gc --json escapes the path" || bad "gc --json: $(cat "$work/out")"

# --- configuration errors name file, line and what was expected ---------
printf 'chunk_size: 256\nmax_local_cpu_size: 4 parsecs\n' >"$work/bad.yaml"
expect_fail "bad config value" "bad.yaml:2" "$kvtier" stat --config "$work/bad.yaml"
printf 'chunk_size: 256\nlocal_cpus: true\n' >"$work/bad2.yaml"
expect_fail "unknown config key" "unknown key \"local_cpus\"" "$kvtier" stat --config "$work/bad2.yaml"
KVTIER_CHUNK_SIZE=zero expect_fail "bad environment override" "KVTIER_CHUNK_SIZE" "$kvtier" stat

# --- the main job --------------------------------------------------------
expect "demo runs on the embedded config" "$kvtier" demo
grep -q "every byte verified" "$work/out" && ok "demo reloads and verifies" || bad "demo: $(cat "$work/out")"
expect_fail "kvtier bench names the benchmarks' own program" "kvtier-bench" "$kvtier" bench dram
expect "help" "$kvtier" --help
for c in demo hash put get lookup ls stat inspect verify; do
	"$kvtier" "$c" --help >/dev/null 2>&1 && ok "$c --help" || bad "$c --help"
done

echo "cli_basic: $fails failure(s)"
[ "$fails" -eq 0 ]
