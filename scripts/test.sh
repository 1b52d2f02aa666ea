#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. a release build (-Werror) and every test,
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build and every test,
#   3. a ThreadSanitizer build and the multi-threaded tests,
#   4. a bounded libFuzzer run of each fuzz target over its committed corpus:
#      KVT_FUZZ_TOTAL_SECONDS (default 150) shared among the targets, at
#      least 10 s each, or KVT_FUZZ_SECONDS per target if that is set.
# Usage: scripts/test.sh [--quick]   (--quick: step 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_secs=${KVT_FUZZ_SECONDS:-}
passed=0
failed=0

run_ctest() { # build dir, label [, test name regex]
	local log line total fails
	log=$(mktemp)
	(cd "$1" && ctest --output-on-failure -j"$jobs" -R "${3:-.}") 2>&1 | tee "$log" || true
	line=$(grep -E '^[0-9]+% tests passed' "$log" || true)
	total=$(sed -nE 's/.* out of ([0-9]+).*/\1/p' <<<"$line")
	fails=$(sed -nE 's/.*, ([0-9]+) tests failed.*/\1/p' <<<"$line")
	rm -f "$log"
	[ -n "$total" ] || { echo "$2: ctest did not run"; failed=$((failed + 1)); return; }
	passed=$((passed + total - fails))
	failed=$((failed + fails))
}

echo "== release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
run_ctest build release

if [ "${1:-}" != "--quick" ]; then
	echo "== ASan + UBSan build"
	# -O1: sanitized code at -O0 runs two to three times slower, and the
	# suite is meant to stay well under 15 minutes on two cores.
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
		-DKVT_SANITIZE=ON >/dev/null
	cmake --build build-asan -j"$jobs"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		run_ctest build-asan sanitizers

	echo "== ThreadSanitizer build (the multi-threaded tests)"
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVT_TSAN=ON >/dev/null
	cmake --build build-tsan -j"$jobs"
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		run_ctest build-tsan tsan 'test_dram|test_store|test_hier|test_fsdir|test_nvme|test_sharedfs|test_plan|test_connector|test_local|daemon_cli|daemon_clients|daemon_tls|daemon_reload'

	echo "== fuzz smoke"
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVT_FUZZ=ON \
		-DKVT_SANITIZE=ON -DBUILD_TESTING=OFF >/dev/null
	cmake --build build-fuzz -j"$jobs"
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
echo "kvtier: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
