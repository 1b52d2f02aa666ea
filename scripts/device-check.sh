#!/usr/bin/env bash
# The checks that need a GPU, in one script for a GPU machine with CUDA's
# nvcc and a CUDA build of torch (nothing is downloaded): under 8 minutes.
#   1. kvtier built with its CUDA backend (-Werror), in build-cuda/;
#   2. test_connector_cuda: the CUDA gather/scatter against the CPU path,
#      and loads through a store into device blocks (DRAM and the device
#      tier in spare device memory);
#   3. the tier contract and the connector tests of the same build;
#   4. tests/python/test_cuda.py: the Python binding over CUDA tensors, a
#      save issued right after a kernel writes the block on the engine's
#      stream storing the written bytes, a load complete when wait_layer
#      returns;
#   5. kvtier-bench connector --device: a 32 MiB chunk between device
#      blocks and pinned host memory against cudaMemcpy (ratio_vs_cudamemcpy,
#      target 0.9 both ways).
# Every step runs; the last line counts them.  Usage: scripts/device-check.sh
set -u
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 4)
passed=0
failed=0
step() { # name, command...
	local name=$1
	shift
	echo "== $name"
	if "$@"; then
		echo "ok   $name"
		passed=$((passed + 1))
	else
		echo "FAIL $name"
		failed=$((failed + 1))
	fi
}

nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
[ -n "$nvcc" ] || { echo "device-check: no nvcc on this machine"; exit 1; }
python=$(command -v python3)
"$python" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda,
	"devices", torch.cuda.device_count()); sys.exit(not torch.cuda.is_available())' ||
	{ echo "device-check: torch sees no CUDA device"; exit 1; }

step "build with CUDA ($nvcc)" bash -c "cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release \
	-DKVT_WERROR=ON -DCMAKE_CUDA_COMPILER=$nvcc -DKVT_BENCH_PYTHON=$python >/dev/null &&
	cmake --build build-cuda -j$jobs && grep -q 'KVT_CUDART_STATIC:FILEPATH=/' build-cuda/CMakeCache.txt"
# Run directly: exit 77 (skipped: no device) is a failure here.
step "test_connector_cuda" bash -c "cd build-cuda && ./test_connector_cuda"
step "connector and tier contract tests" bash -c \
	"cd build-cuda && ctest --output-on-failure -R '^(test_connector|test_connector_load|test_tier_contract)$'"
step "Python binding over CUDA tensors" env KVTIER_LIB="$PWD/build-cuda/libkvtier.so" \
	PYTHONPATH="$PWD/python" "$python" -m pytest -q -p no:cacheprovider tests/python/test_cuda.py -rs
step "kvtier-bench connector --device" bash -c "build-cuda/kvtier-bench connector --device --json |
	tee build-cuda/connector-device.json && $python - build-cuda/connector-device.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for op, f in d['figures'].items():
    print(op, 'ratio_vs_cudamemcpy', round(f['ratio_vs_cudamemcpy']['median'], 3))
PY"
echo
echo "device-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
