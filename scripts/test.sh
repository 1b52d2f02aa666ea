#!/usr/bin/env bash
# The whole test suite, as CI runs it (scripts/install-deps.sh first):
#   1. a Release build (-Werror) and every test: the C and shell tests
#      under ctest, the Python tests under pytest in the project's venv;
#   2. the other build types and compilers, warning-free (-Werror): gcc
#      Debug and MinSizeRel, clang Release (gcc RelWithDebInfo is step 4's
#      build); and the library alone (DRAM and NVMe: no S3, planner,
#      kvtierd, CLI, events or configuration files) with its unit tests;
#   3. an AddressSanitizer + UndefinedBehaviorSanitizer build and every test;
#   4. a ThreadSanitizer build and the multi-threaded tests;
#   5. a bounded libFuzzer run of each fuzz target over its committed corpus:
#      KVT_FUZZ_TOTAL_SECONDS (default 150) shared among the targets, at
#      least 10 s each, or KVT_FUZZ_SECONDS per target if that is set.
# The last line counts every test: N passed, N failed, N skipped.
# Usage: scripts/test.sh [--quick]   (--quick: step 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_secs=${KVT_FUZZ_SECONDS:-}
passed=0
failed=0
skipped=0

run_ctest() { # build dir, label, ctest arguments...
	local dir=$1 label=$2 log line total fails skips
	shift 2
	log=$(mktemp)
	(cd "$dir" && ctest --output-on-failure -j"$jobs" "$@") 2>&1 | tee "$log" || true
	line=$(grep -E '^[0-9]+% tests passed' "$log" || true)
	total=$(sed -nE 's/.* out of ([0-9]+).*/\1/p' <<<"$line")
	fails=$(sed -nE 's/.*, ([0-9]+) tests failed.*/\1/p' <<<"$line")
	# ctest counts a skipped test (exit 77) as passed; it lists it apart.
	skips=$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$log" || true)
	rm -f "$log"
	[ -n "$total" ] || { echo "$label: ctest did not run"; failed=$((failed + 1)); return; }
	passed=$((passed + total - fails - skips))
	failed=$((failed + fails))
	skipped=$((skipped + skips))
}

run_pytest() { # build dir, label, pytest arguments...: the Python tests, each counted
	local dir=$1 label=$2 xml counts
	shift 2
	xml=$(mktemp --suffix=.xml)
	"$dir/pytest.sh" -q -rfEs --junitxml="$xml" "$@" tests/python || true
	counts=$(python3 - "$xml" <<'PY' || echo "0 1 0"
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
n = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skip = sum(int(s.get("skipped", 0)) for s in suites)
print(n - bad - skip, bad, skip)
PY
)
	rm -f "$xml"
	read -r p f s <<<"$counts"
	echo "$label: pytest $p passed, $f failed, $s skipped"
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
}

build() { # dir, cmake arguments...: configure and build; fails the step on an error
	local dir=$1
	shift
	cmake -S . -B "$dir" -DKVT_WERROR=ON "$@" >/dev/null && cmake --build "$dir" -j"$jobs"
}

echo "== Release build"
build build -DCMAKE_BUILD_TYPE=Release
run_ctest build release -LE python
run_pytest build release

if [ "${1:-}" != "--quick" ]; then
	echo "== other build types and compilers, -Werror"
	# The library, programs and benchmarks (no tests: step 1 built those);
	# the CUDA backend is compiled by step 1, once.  gcc RelWithDebInfo is
	# the ThreadSanitizer build below, with -Werror and every target.
	for bt in "gcc Debug" "gcc MinSizeRel" "clang Release"; do
		read -r cc type <<<"$bt"
		if CC=$cc build "build-$cc-$type" -DCMAKE_BUILD_TYPE="$type" -DBUILD_TESTING=OFF \
			-DKVT_CUDA=OFF; then
			echo "build $cc $type: no warning"
			passed=$((passed + 1))
		else
			echo "build $cc $type: FAILED"
			failed=$((failed + 1))
		fi
	done

	echo "== the library alone: DRAM and NVMe, no S3, planner, kvtierd, CLI, events or files"
	# What a user embedding the node-local tiers builds, configured through
	# kvt_config_set: its own unit tests run, and libkvtier.so links
	# liburing, xxHash and libcrypto only.
	build build-minimal -DCMAKE_BUILD_TYPE=Release -DKVT_CUDA=OFF -DKVT_S3=OFF -DKVT_PLANNER=OFF \
		-DKVT_DAEMON=OFF -DKVT_CLI=OFF -DKVT_EVENTS=OFF -DKVT_YAML=OFF
	run_ctest build-minimal minimal
	extra=$(ldd build-minimal/libkvtier.so | awk '{print $1}' |
		grep -vE '^(linux-vdso|/lib64/ld-linux|libc\.|libcrypto|libxxhash|liburing)' || true)
	if [ -z "$extra" ]; then
		echo "minimal libkvtier.so: no other library"
		passed=$((passed + 1))
	else
		echo "minimal libkvtier.so also links: $extra"
		failed=$((failed + 1))
	fi

	echo "== ASan + UBSan build"
	# -O1: sanitized code at -O0 runs two to three times slower, and the
	# suite is meant to stay well under 30 minutes on two cores.
	build build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DKVT_SANITIZE=ON
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
	run_ctest build-asan sanitizers -LE python
	# The engine tests (real vLLM processes, which preload their own
	# allocator) run in step 1 only; the instrumented library is exercised
	# by the binding's tests here.
	run_pytest build-asan sanitizers -m "not engine"
	unset ASAN_OPTIONS UBSAN_OPTIONS

	echo "== ThreadSanitizer build (the multi-threaded tests)"
	build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVT_TSAN=ON
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		run_ctest build-tsan tsan -R 'test_dram|test_store|test_hier|test_fsdir|test_nvme|test_sharedfs|test_plan|test_connector|test_local|daemon_cli|daemon_clients|daemon_tls|daemon_reload'

	echo "== fuzz smoke"
	CC=clang build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVT_FUZZ=ON -DKVT_SANITIZE=ON \
		-DBUILD_TESTING=OFF
	# One time budget for the whole step, however many targets there are.
	if [ -z "$fuzz_secs" ]; then
		n_fuzz=$(find build-fuzz -maxdepth 1 -name 'fuzz_*' -type f -executable | wc -l)
		fuzz_secs=$(( ${KVT_FUZZ_TOTAL_SECONDS:-150} / (n_fuzz > 0 ? n_fuzz : 1) ))
		[ "$fuzz_secs" -ge 10 ] || fuzz_secs=10
	fi
	echo "fuzzing ${fuzz_secs}s per target"
	for f in build-fuzz/fuzz_*; do
		[ -x "$f" ] || continue
		name=$(basename "$f")
		corpus="fuzz/corpus/${name#fuzz_}"
		work=$(mktemp -d)
		if "$f" -max_total_time="$fuzz_secs" -print_final_stats=0 -artifact_prefix="$work/" \
			"$work" "$corpus" >"$work/log" 2>&1; then
			echo "$name: no crash in ${fuzz_secs}s ($(ls "$corpus" | wc -l) seeds)"
			passed=$((passed + 1))
		else
			tail -40 "$work/log"
			echo "$name: FAILED; reproducer in $work"
			failed=$((failed + 1))
		fi
	done
fi

echo
echo "kvtier: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
