#!/usr/bin/env bash
# Install the Debian 12 packages kvtier's build, tests and benchmarks need.
# Idempotent: packages already present are left alone.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config clang libclang-rt-dev
  libssl-dev libxxhash-dev libyaml-dev liburing-dev libcurl4-openssl-dev libjansson-dev libexpat1-dev
  fio python3 python3-cbor2 nodejs npm awscli gnuplot-nox chromium
  python3-dev python3-numpy python3-torch python3-redis redis-server redis-tools libmicrohttpd-dev
  openssl curl
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
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The S3 tests' server: an S3-compatible server that checks SigV4
# signatures (tests/s3/package.json), from the npm registry.
here=$(cd "$(dirname "$0")/.." && pwd)
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
