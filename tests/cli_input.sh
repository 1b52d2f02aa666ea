#!/usr/bin/env bash
# Wrong input refused as a user meets it: configuration values and files,
# numeric options of every subcommand, files that are not what they claim
# (/dev/zero, directories), traces and token files, and objects signed for
# a shared tier.  Every error must name what was wrong (the key or option,
# the value, the file and line) and what is accepted; nothing may be read
# without a bound.
set -u
kvtier=${1:?usage: cli_input.sh path/to/kvtier}
work=$(mktemp -d /tmp/kvt-input-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

# Reading /dev/zero without a bound would take all the memory there is:
# cap what a command may map (not under ASan, which reserves terabytes),
# and its time.
limit=""
if (ulimit -v 2000000 && "$kvtier" --version) >/dev/null 2>&1; then
	limit="ulimit -v 2000000;"
fi
bounded() { # command...: run with the memory cap and 20 s at most
	bash -c "$limit"' exec timeout 20 "$@"' bounded "$@"
}

# --- A. sizes take the documented forms only -------------------------------
expect "max_local_cpu_size: 40 is 40 GiB (LMCache)" "$kvtier" stat --set max_local_cpu_size=40
grep -q "capacity 42949672960 " "$work/out" && ok "bare number read as GiB" || bad "40: $(cat "$work/out")"
for v in 0x10 010 -1 1e3 nan inf 4096.5B 0.5B 99999999999999999999 17179869184GiB "1.1234567GiB"; do
	expect_fail "max_local_cpu_size=$v refused" "max_local_cpu_size: \"$v\"" \
		"$kvtier" stat --set "max_local_cpu_size=$v"
done
expect_fail "the error lists the accepted forms" "units B, KiB, MiB, GiB" "$kvtier" stat --set max_local_cpu_size=0x10
expect_fail "a bare number is GiB, says the error" "a bare number is GiB" "$kvtier" stat --set max_local_cpu_size=0x10
expect_fail "chunk_size=010 refused" "chunk_size: \"010\" is not a whole number" "$kvtier" stat --set chunk_size=010
KVTIER_MAX_LOCAL_CPU_SIZE=0x10 expect_fail "environment 0x10 refused" "KVTIER_MAX_LOCAL_CPU_SIZE" "$kvtier" stat

# --- B. TTL bounded --------------------------------------------------------
expect_fail "ttl that wraps refused" "ttl: \"213503982334601d\" is too long: at most 36500d" \
	"$kvtier" stat --set ttl=213503982334601d
expect_fail "ttl 1e300d refused" "ttl: \"1e300d\" is not a duration" "$kvtier" stat --set ttl=1e300d
expect_fail "ttl -1 refused" "ttl: \"-1\"" "$kvtier" stat --set ttl=-1
printf 'ttl: 1e300d\n' >"$work/ttl.yaml"
expect_fail "ttl in a file: file, line, key" "ttl.yaml:1: ttl: \"1e300d\"" "$kvtier" stat --config "$work/ttl.yaml"
expect "ttl 36500d accepted" "$kvtier" stat --set ttl=36500d

# --- C. configuration files ------------------------------------------------
printf 'chunk_size: 128\nlocal_cpu: true\nchunk_size: 512\n' >"$work/dup.yaml"
expect_fail "duplicate key: file:line" "dup.yaml:3: chunk_size: given twice (first on line 1)" \
	"$kvtier" stat --config "$work/dup.yaml"
printf 'chunk_size: 128\n---\nchunk_size: 512\n' >"$work/two.yaml"
expect_fail "two documents: file:line" "two.yaml:2: a second YAML document" "$kvtier" stat --config "$work/two.yaml"
expect_fail "--config /dev/null refused" "/dev/null: a character device" "$kvtier" stat --config /dev/null
expect_fail "--config DIR refused" "a directory, not a configuration file" "$kvtier" stat --config "$work"
mkfifo "$work/fifo"
expect_fail "--config FIFO refused without waiting" "a pipe" bounded "$kvtier" stat --config "$work/fifo"
: >"$work/empty.yaml"
expect "an empty file is every default" "$kvtier" stat --config "$work/empty.yaml"
expect_fail "s3_endpoint ftp:// refused" "s3_endpoint: \"ftp://minio:9000\": expected http://host" \
	"$kvtier" stat --set s3_endpoint=ftp://minio:9000

# --- D. numbers on the command line ----------------------------------------
# A trace of three requests; option errors come before the trace is read.
printf '{"timestamp": 0, "input_length": 1024, "hash_ids": [1, 2]}\n{"timestamp": 5, "input_length": 1024, "hash_ids": [1, 3]}\n{"timestamp": 9, "hash_ids": [1, 2]}\n' \
	>"$work/t.jsonl"
expect "plan of a small trace" "$kvtier" plan "$work/t.jsonl" --dram 1,inf --policy lru --quiet
plan_bad() { # pattern, options...
	local pat=$1; shift
	expect_fail "plan $* refused" "$pat" "$kvtier" plan "$work/t.jsonl" --quiet "$@"
}
plan_bad '--repeat "-1": expected a whole number 1..1000' --repeat -1
plan_bad '--repeat "0"' --repeat 0
plan_bad '--nodes "1abc": expected a whole number 1..1024' --nodes 1abc
plan_bad '--limit "abc": expected a whole number 1..' --limit abc
plan_bad '--limit "-5"' --limit -5
plan_bad '--limit "1e20"' --limit 1e20
plan_bad '--block-tokens "-1": expected a whole number 1..1048576' --block-tokens -1
plan_bad '--dram "1e400"' --dram 1e400
plan_bad '--dram "nan"' --dram nan
plan_bad '--dram "1000,,2000": an empty element' --dram 1000,,2000
plan_bad '--nvme "-1"' --nvme -1
plan_bad '--shared "5q"' --shared 5q
plan_bad '--target-hit "abc": expected a decimal number 0..1' --target-hit abc
plan_bad '--target-hit "1.5": out of range 0..1' --target-hit 1.5
plan_bad '--target-ttft-ms "nan"' --target-ttft-ms nan
plan_bad '--threads "0"' --threads 0
plan_bad '--policy "": an empty element' --policy ''
plan_bad 'more than 8 elements' --policy lru,lru,lru,lru,lru,lru,lru,lru,s3fifo
plan_bad '--policy "lfu": expected a comma list of lru, s3fifo' --policy lfu
plan_bad '--admit seenN "2x"' --admit seen2x
plan_bad '--admit prefixN ""' --admit prefix

replay_bad() { # pattern, options...
	local pat=$1; shift
	expect_fail "replay $* refused" "$pat" "$kvtier" replay "$work/t.jsonl" "$@"
}
replay_bad '--block-bytes: "0.5" is not a whole number of bytes' --block-bytes 0.5
replay_bad '--block-bytes "0": out of range' --block-bytes 0
replay_bad '--pace "abc": expected a decimal number' --pace abc
replay_bad '--pace "0": out of range' --pace 0
replay_bad '--dram-blocks "-1": expected a whole number 1..' --dram-blocks -1
replay_bad '--limit "1e20"' --limit 1e20
replay_bad '--block-tokens "abc"' --block-tokens abc
expect "replay of a small trace" "$kvtier" replay "$work/t.jsonl" --block-bytes 4KiB

echo "1 2 3 4" >"$work/tok.txt"
expect_fail "hash --block-size -1" 'hash: --block-size "-1": expected a whole number 1..1048576' \
	"$kvtier" hash --block-size -1 "$work/tok.txt"
expect_fail "--chunk-tokens 1abc" '--chunk-tokens "1abc": expected a whole number 1..1048576' \
	"$kvtier" hash --chunk-tokens 1abc "$work/tok.txt"
expect_fail "gc --ttl that wraps" 'gc: --ttl: "213503982334601d" is too long' \
	"$kvtier" gc --dir "$work/gc" --ttl 213503982334601d
expect_fail "gc --tmp-grace 1e300d" 'gc: --tmp-grace: "1e300d" is not a duration' \
	"$kvtier" gc --dir "$work/gc" --tmp-grace 1e300d
expect_fail "gc --budget 0x10" 'gc: --budget: "0x10" is not a size' "$kvtier" gc --dir "$work/gc" --budget 0x10

# --- E. reads are bounded ----------------------------------------------------
expect_fail "inspect /dev/zero: header only" "bad magic" bounded "$kvtier" inspect /dev/zero
expect_fail "plan /dev/zero: first read" "/dev/zero:1: a NUL byte" bounded "$kvtier" plan /dev/zero
expect_fail "replay /dev/zero: first read" "/dev/zero:1: a NUL byte" bounded "$kvtier" replay /dev/zero
expect_fail "hash /dev/zero: first byte" "/dev/zero:1: unexpected byte 0x00" bounded "$kvtier" hash /dev/zero
expect_fail "hash of an endless stream stops at the bound" "larger than 64 MiB, the bound on a token file" \
	bounded bash -c 'yes 12345 | "$1" hash -' hash "$kvtier"
expect_fail "plan of a line past the bound" "longer than 16 MiB, the bound on a trace line" \
	bounded bash -c 'yes 12345 | tr -d "\n" | "$1" plan --quiet -' plan "$kvtier"
expect_fail "inspect DIR" "a directory, not an object file" "$kvtier" inspect "$work"
expect_fail "plan DIR" "a directory, not a trace" "$kvtier" plan "$work"
expect_fail "hash DIR" "is a directory" "$kvtier" hash "$work"

# --- F. traces and token files: file, line, field; never "object header" -----
trace_bad() { # description, trace text, pattern
	printf "$2" >"$work/bad.jsonl"
	expect_fail "$1" "$3" "$kvtier" plan "$work/bad.jsonl" --quiet
	if grep -qi "object header" "$work/err"; then bad "$1: called an object header"; fi
}
trace_bad "empty trace" '' "bad.jsonl: no requests: an empty trace gives nothing to plan from"
trace_bad "blank trace" '\n\n' "no requests"
trace_bad "id past 64 bits" '{"hash_ids": [1]}\n{"hash_ids": [18446744073709551616]}\n' \
	"bad.jsonl:2: hash_ids: element 1 exceeds 64 bits"
trace_bad "non-integer id" '{"hash_ids": [1, x]}\n' "bad.jsonl:1: hash_ids: element 2 is not a non-negative integer"
trace_bad "NaN timestamp" '{"timestamp": NaN, "hash_ids": [1]}\n' 'bad.jsonl:1: timestamp: "NaN" is not a number'
trace_bad "huge timestamp" '{"timestamp": 1e300, "hash_ids": [1]}\n' "bad.jsonl:1: timestamp: 1.*out of range"
trace_bad "negative timestamp" '{"timestamp": -3, "hash_ids": [1]}\n' "bad.jsonl:1: timestamp: -3 is out of range"
trace_bad "timestamps out of order" '{"timestamp": 9, "hash_ids": [1]}\n{"timestamp": 3, "hash_ids": [1]}\n' \
	"bad.jsonl:2: timestamp: 3 is before"
trace_bad "negative length" '{"input_length": -1, "hash_ids": [1]}\n' "bad.jsonl:1: input_length: -1 is not a token count"
trace_bad "huge length" '{"output_length": 1e12, "hash_ids": [1]}\n' "bad.jsonl:1: output_length: 1000000000000 is not a token count"
trace_bad "no whole block" '{"hash_ids": []}\n' "not one whole block"
trace_bad "bad token id" '1 2 3\n4 x 6\n' "bad.jsonl:2: 'x' is not a token id"
printf '4 x 6\n' >"$work/bad.txt"
expect_fail "replay: bad token log" "bad.txt:1: 'x' is not a token id" "$kvtier" replay "$work/bad.txt" --format tokens
if grep -qi "object header" "$work/err"; then bad "replay token log: called an object header"; fi

# --- G. objects signed for a shared tier --------------------------------------
key=000102030405060708090a0b0c0d0e0f
other=ff0102030405060708090a0b0c0d0e0f
python3 -c "import os,sys; open(sys.argv[1],'w').write(' '.join(str(i) for i in range(64))); open(sys.argv[2],'wb').write(os.urandom(16384))" \
	"$work/prompt.txt" "$work/kv.bin"
expect "put to an authenticated shared tier" "$kvtier" put --model tiny --chunk-tokens 64 --set "shared_fs=$work/sfs" \
	--set "object_auth_key=$key" --durability power-safe --tokens "$work/prompt.txt" "$work/kv.bin"
obj=$(find "$work/sfs" -name '*.kvt' | head -1)
if [ -z "$obj" ]; then
	bad "no object in the shared tier"
else
	expect "inspect a signed object without the key" "$kvtier" inspect "$obj"
	grep -q "signed (32-byte HMAC trailer), key not given" "$work/out" && ok "says signed, key not given" ||
		bad "signed object: $(cat "$work/out")"
	expect "inspect a signed object with the key" "$kvtier" inspect --set "object_auth_key=$key" "$obj"
	grep -q "signed, HMAC verified" "$work/out" && ok "HMAC verified" || bad "with key: $(cat "$work/out")"
	KVTIER_OBJECT_AUTH_KEY=$key expect "the key from the environment" "$kvtier" inspect --json "$obj"
	grep -q '"signed": true, "signature": "verified"' "$work/out" && ok "JSON says verified" || bad "json: $(cat "$work/out")"
	expect_fail "inspect with another key" "HMAC tag does not verify" "$kvtier" inspect --set "object_auth_key=$other" "$obj"
	cp "$obj" "$work/trail.kvt"
	printf 'abc' >>"$work/trail.kvt"
	expect_fail "trailing bytes counted" "file is 20515 bytes, header says 20480 (trailing bytes: 35 bytes after the declared object)" \
		"$kvtier" inspect "$work/trail.kvt"
	if grep -qi "malformed" "$work/err"; then bad "trailing bytes called malformed"; fi
	expect_fail "trailing bytes from a pipe" "more than 32 bytes after the declared object" \
		bash -c 'cat "$1" | "$2" inspect -' x "$work/trail.kvt" "$kvtier"
	head -c 20480 "$obj" >"$work/plain.kvt"
	expect "an unsigned object with a key given" "$kvtier" inspect --set "object_auth_key=$key" "$work/plain.kvt"
	grep -q "unsigned (no HMAC trailer" "$work/out" && ok "says unsigned" || bad "unsigned: $(cat "$work/out")"
	expect "inspect from a pipe" bash -c 'cat "$1" | "$2" inspect -' x "$obj" "$kvtier"
	head -c 20000 "$obj" >"$work/short.kvt"
	expect_fail "truncated payload" "file is 20000 bytes, header says 20480 (truncated: 480 bytes short)" "$kvtier" inspect "$work/short.kvt"
fi

# --- options: one parser (getopt_long), one message for each mistake ------
expect_fail "an unknown option is named" 'kvtier put: unknown option "--frobnicate"' "$kvtier" put --frobnicate x
expect_fail "an option without its value" 'kvtier get: option "--key" needs a value' "$kvtier" get --key
expect_fail "a common option without its value" 'option "--config" needs a value' "$kvtier" stat --config
expect_fail "a second positional argument" 'unexpected argument "b"' "$kvtier" put --key 00 a b
expect_fail "gc takes no positional argument" 'unexpected argument "extra"' "$kvtier" gc --dir "$work" extra
seq 0 127 >"$work/opt-tokens.txt"
expect "--opt=value is accepted" "$kvtier" hash --model=tiny --block-size=64 "$work/opt-tokens.txt"
[ "$(grep -vc "^#" "$work/out")" -eq 2 ] && ok "--block-size=64 keys two blocks" || bad "hash --block-size=64: $(cat "$work/out")"

echo "cli_input: $fails failure(s)"
[ "$fails" -eq 0 ]
