#!/usr/bin/env bash
# Install the Debian 12 packages kvtier's build, tests and benchmarks need.
# Idempotent: packages already present are left alone.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config clang libclang-rt-dev
  libssl-dev libxxhash-dev libyaml-dev liburing-dev libcurl4-openssl-dev libzstd-dev
  fio python3 python3-cbor2
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
