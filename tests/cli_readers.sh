#!/usr/bin/env bash
# Readers never destroy, and every success the tool reports is true.  Each
# block reproduces a way acknowledged chunks used to be lost or misreported:
# a node without the fleet's auth key, a smaller capacity on an inspection
# command, verify without --repair, a TTL that wrapped, a put that printed
# "stored" for chunks that never reached the disk, a read-only mount.
set -u
kvtier=${1:?usage: cli_readers.sh path/to/kvtier}
work=$(mktemp -d /var/tmp/kvt-readers-XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

py=/usr/bin/python3
[ -x $py ] || py=python3
# tiny model: 2 layers x 2 heads x 16 dims x 64 tokens x bf16 x K,V = 16 KiB a chunk
$py - "$work" <<'PY'
import os, sys
w = sys.argv[1]
open(w + "/prompt.txt", "w").write(" ".join(str((i * 7 + 3) % 50000) for i in range(20 * 64)))
open(w + "/kv.bin", "wb").write(os.urandom(20 * 16384))
open(w + "/prompt100.txt", "w").write(" ".join(str((i * 11 + 5) % 50000) for i in range(100 * 64)))
open(w + "/kv100.bin", "wb").write(os.urandom(100 * 16384))
PY
m=(--model tiny --chunk-tokens 64)
files() { find "$1" -path "$1/quarantine" -prune -o -name '*.kvt' -print | wc -l; }
key=$(printf 'ab%.0s' $(seq 32))
authkey=$(printf '5a%.0s' $(seq 32))

# --- 1. a node without the auth key reads a signed shared directory --------
D=$work/shared1
expect "signed put to a shared directory" "$kvtier" put "${m[@]}" --set shared_fs="$D" \
	--set object_auth_key="$authkey" --tokens "$work/prompt.txt" --durability crash-safe "$work/kv.bin"
[ "$(files "$D")" -eq 20 ] && ok "20 signed objects published" || bad "published $(files "$D")"
for cmd in ls stat; do
	expect "$cmd without the key" "$kvtier" $cmd "${m[@]}" --set shared_fs="$D"
done
grep -q "fsdir holds 20 bad object(s), not served" "$work/out" && ok "stat says 20 objects are held but not served" ||
	bad "stat: $(cat "$work/out")"
expect "lookup without the key" "$kvtier" lookup "${m[@]}" --set shared_fs="$D" --tokens "$work/prompt.txt"
grep -q "^0 of 20" "$work/out" && ok "lookup without the key finds nothing it can serve" || bad "lookup: $(cat "$work/out")"
expect_fail "get without the key is a miss" "" "$kvtier" get "${m[@]}" --set shared_fs="$D" --key "$key" -o "$work/x"
expect_fail "verify without the key reports them" "" "$kvtier" verify "${m[@]}" --set shared_fs="$D"
grep -q "20 bad (20 only unverifiable here)" "$work/out" && ok "verify: 20 unverifiable, named so" || bad "verify: $(tail -2 "$work/out")"
grep -q "no object_auth_key is configured here" "$work/out" && ok "verify says why (signed, no key)" || bad "verify reason: $(head -2 "$work/out")"
expect_fail "verify --repair without the key" "" "$kvtier" verify "${m[@]}" --set shared_fs="$D" --repair
grep -q "0 moved to quarantine" "$work/out" && ok "repair leaves what it cannot verify" || bad "repair: $(tail -1 "$work/out")"
[ "$(files "$D")" -eq 20 ] && ok "all 20 signed objects still there" || bad "only $(files "$D") left"
expect "get with the key" "$kvtier" get "${m[@]}" --set shared_fs="$D" --set object_auth_key="$authkey" \
	--tokens "$work/prompt.txt" -o "$work/back.bin"
cmp -s "$work/kv.bin" "$work/back.bin" && ok "the fleet's chunks load bit-exact" || bad "payload differs"

# --- 2. a smaller capacity on an inspection command evicts nothing ---------
for tier in "shared_fs max_shared_fs_size" "local_disk max_local_disk_size"; do
	set -- $tier
	D=$work/cap-$1
	expect "$1: put 100 power-safe chunks (1.6 MiB)" "$kvtier" put "${m[@]}" --set "$1=$D" \
		--tokens "$work/prompt100.txt" --durability power-safe "$work/kv100.bin"
	for cmd in ls stat verify; do
		expect "$1: $cmd with $2=1MiB" "$kvtier" $cmd "${m[@]}" --set "$1=$D" --set "$2=1MiB"
	done
	expect "$1: lookup with $2=1MiB" "$kvtier" lookup "${m[@]}" --set "$1=$D" --set "$2=1MiB" \
		--tokens "$work/prompt100.txt"
	[ "$(files "$D")" -eq 100 ] && ok "$1: all 100 chunks still on disk" || bad "$1: $(files "$D") of 100 left"
done

# --- 3. verify without --repair changes nothing, and reports every bad one -
for tier in shared_fs local_disk; do
	D=$work/bad-$tier
	"$kvtier" put "${m[@]}" --set "$tier=$D" --tokens "$work/prompt.txt" --durability crash-safe \
		"$work/kv.bin" >/dev/null 2>&1
	objs=($(find "$D" -name '*.kvt' | sort))
	truncate -s 100 "${objs[0]}"                          # truncated
	printf 'XXXX' | dd of="${objs[1]}" conv=notrunc 2>/dev/null   # bad magic
	flip_byte "${objs[2]}" 5000                            # a payload byte
	sums=$(md5sum "${objs[@]}" | md5sum)
	for cmd in ls stat; do
		"$kvtier" $cmd "${m[@]}" --set "$tier=$D" >/dev/null 2>&1
	done
	"$kvtier" lookup "${m[@]}" --set "$tier=$D" --tokens "$work/prompt.txt" >/dev/null 2>&1
	"$kvtier" get "${m[@]}" --set "$tier=$D" --tokens "$work/prompt.txt" -o "$work/x" >/dev/null 2>&1
	expect_fail "$tier: verify finds the damage" "" "$kvtier" verify "${m[@]}" --set "$tier=$D"
	grep -q "20 object(s) checked, 3 bad" "$work/out" && ok "$tier: verify reports 3 bad of 20, exit 1" ||
		bad "$tier: verify: $(cat "$work/out")"
	grep -q "BAD: .*$(basename "${objs[0]}"): .*100 bytes" "$work/out" && ok "$tier: verify names the truncated file" ||
		bad "$tier: verify lines: $(cat "$work/out")"
	[ "$sums" = "$(md5sum "${objs[@]}" | md5sum)" ] && ok "$tier: ls, stat, lookup, get, verify changed no byte" ||
		bad "$tier: a read-only command changed the files"
	expect_fail "$tier: verify --repair" "" "$kvtier" verify "${m[@]}" --set "$tier=$D" --repair
	want=3
	[ "$tier" = shared_fs ] && want=2 # bad magic: maybe another format; not ours to remove
	grep -q "$want moved to quarantine" "$work/out" && ok "$tier: repair quarantines $want" ||
		bad "$tier: repair: $(cat "$work/out")"
	[ "$(ls "$D/quarantine"/*.why 2>/dev/null | wc -l)" -eq $want ] && ok "$tier: each with a .why" ||
		bad "$tier: quarantine: $(ls "$D/quarantine" 2>&1)"
	if [ "$tier" = local_disk ]; then
		expect "$tier: put again replaces what is bad" "$kvtier" put "${m[@]}" --set "$tier=$D" \
			--tokens "$work/prompt.txt" --durability crash-safe "$work/kv.bin"
		expect "$tier: get after the rewrite" "$kvtier" get "${m[@]}" --set "$tier=$D" --tokens "$work/prompt.txt" -o "$work/back.bin"
		cmp -s "$work/kv.bin" "$work/back.bin" && ok "$tier: all 20 back bit-exact" || bad "$tier: payload differs"
	else
		# The bad-magic file may be another node's newer format: the
		# put keeps it (first version wins) and says it cannot serve it.
		expect_fail "$tier: put again" "" "$kvtier" put "${m[@]}" --set "$tier=$D" \
			--tokens "$work/prompt.txt" --durability crash-safe "$work/kv.bin"
		[ "$(grep -c "in no tier that can serve it" "$work/out")" -eq 1 ] &&
			ok "$tier: put names the one chunk it cannot serve" || bad "$tier: put: $(cat "$work/out")"
		expect_fail "$tier: verify after the rewrite" "" "$kvtier" verify "${m[@]}" --set "$tier=$D"
		grep -q "20 object(s) checked, 1 bad (1 only unverifiable here)" "$work/out" &&
			ok "$tier: the two damaged ones were rewritten" || bad "$tier: verify: $(cat "$work/out")"
	fi
done

# --- 4. a TTL past the largest time is refused; a get deletes nothing -------
D=$work/ttl
"$kvtier" put "${m[@]}" --dir "$D" --key "$key" --durability crash-safe <(head -c 16384 "$work/kv.bin") >/dev/null 2>&1
expect_fail "ttl=213503982334601d is refused" "ttl" "$kvtier" get "${m[@]}" --dir "$D" --set ttl=213503982334601d --key "$key" -o "$work/x"
expect_fail "ttl: 1e300d is refused" "ttl" "$kvtier" get "${m[@]}" --dir "$D" --set ttl=1e300d --key "$key" -o "$work/x"
sleep 2.1
expect_fail "get past a 1 s TTL is a miss" "" "$kvtier" get "${m[@]}" --dir "$D" --set ttl=1s --key "$key" -o "$work/x"
[ "$(files "$D")" -eq 1 ] && ok "the expired chunk is still on disk" || bad "get deleted it"

# --- 5. put says where each chunk is, and fails when a disk tier did not take it
D=$work/full
mkdir -p "$D"
"$kvtier" put "${m[@]}" --dir "$D" --key "$key" <(head -c 16384 "$work/kv.bin") >/dev/null 2>&1 # creates the tree
chmod -R a-w "$D"
if [ "$(id -u)" -ne 0 ] || ! touch "$D/probe" 2>/dev/null; then
	expect_fail "cached put to a read-only disk tier fails" "nvme" "$kvtier" put "${m[@]}" --set local_cpu=true \
		--dir "$D" --tokens "$work/prompt.txt" "$work/kv.bin"
else
	ok "root ignores permissions: read-only disk case skipped (covered below by a full disk)"
	rm -f "$D/probe"
fi
chmod -R u+w "$D"
expect "cached put with DRAM and NVMe" "$kvtier" put "${m[@]}" --set local_cpu=true --dir "$work/both" \
	--tokens "$work/prompt.txt" "$work/kv.bin"
[ "$(grep -c "stored: dram (this process's memory only), nvme (crash-safe)" "$work/out")" -eq 20 ] &&
	ok "put reports dram and nvme for each chunk" || bad "put output: $(head -3 "$work/out")"
[ "$(files "$work/both")" -eq 20 ] && ok "all 20 written through to disk before exit" || bad "$(files "$work/both") on disk"
# A disk tier whose fan-out directories cannot be made (files stand where
# they go): every write-through fails, whoever runs the test.
mkdir -p "$work/tiny"
for i in $(seq 0 255); do : >"$work/tiny/$(printf %02x $i)"; done
expect_fail "cached put to a disk tier that cannot take it" "not in the nvme tier" "$kvtier" put "${m[@]}" \
	--set local_cpu=true --dir "$work/tiny" --tokens "$work/prompt.txt" "$work/kv.bin"
[ "$(files "$work/tiny")" -eq 0 ] && ok "and nothing was claimed stored there" || bad "tiny: $(files "$work/tiny")"
grep -q "nvme FAILED" "$work/out" && ok "the failing tier is named per chunk" || bad "put output: $(head -2 "$work/out")"

# --- 12. a read-only mount (simulated: a directory root cannot write to is
# not available, so read_only: true stands in) serves reads --------------
expect "read_only store serves a get" "$kvtier" get "${m[@]}" --dir "$work/both" --set read_only=true \
	--tokens "$work/prompt.txt" -o "$work/back.bin"
cmp -s "$work/kv.bin" "$work/back.bin" && ok "read-only get bit-exact" || bad "read-only payload differs"
expect_fail "read_only store refuses a put" "read-only" "$kvtier" put "${m[@]}" --dir "$work/both" --set read_only=true \
	--key "$key" <(head -c 16384 "$work/kv.bin")
expect_fail "inspection of a missing directory creates nothing" "" "$kvtier" ls "${m[@]}" --dir "$work/nowhere"
[ ! -e "$work/nowhere" ] && ok "no directory was created" || bad "ls created $work/nowhere"
# An object with trailing bytes is treated alike by NVMe, verify and inspect.
D=$work/trail
"$kvtier" put "${m[@]}" --dir "$D" --key "$key" --durability crash-safe <(head -c 16384 "$work/kv.bin") >/dev/null 2>&1
obj=$(find "$D" -name '*.kvt' | head -1)
printf '0123456789abcdef0123456789abcdef' >>"$obj"
expect_fail "get of an object with 32 trailing bytes is a miss" "" "$kvtier" get "${m[@]}" --dir "$D" --key "$key" -o "$work/x"
expect_fail "verify reports the trailing bytes" "" "$kvtier" verify "${m[@]}" --dir "$D"
grep -q "32 bytes after the declared object" "$work/out" && ok "verify: 32 trailing bytes named" || bad "verify: $(cat "$work/out")"

# put reads at most what the chunks it stores hold (one byte more says "too long").
expect_fail "put of /dev/zero is refused, bounded" "larger than 16385 bytes" timeout 20 "$kvtier" put "${m[@]}" \
	--dir "$work/zero" --key "$key" /dev/zero

echo "cli_readers: $fails failure(s)"
[ "$fails" -eq 0 ]
