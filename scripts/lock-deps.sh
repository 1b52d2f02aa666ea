#!/usr/bin/env bash
# Resolve requirements/dev.in into requirements/dev.lock (exact versions and
# sha256 hashes, for Linux x86_64 and Python 3.11), and the bootstrap lock
# of uv itself.  Run after changing dev.in, overrides.txt or excludes.txt;
# scripts/install-deps.sh installs what the locks say.
set -euo pipefail
cd "$(dirname "$0")/../requirements"
uv=${UV:-$(command -v uv || echo ../.venv/bin/uv)}
common=(--python-version 3.11 --python-platform x86_64-manylinux_2_36 --generate-hashes --quiet)
"$uv" pip compile dev.in --overrides overrides.txt --excludes excludes.txt "${common[@]}" -o dev.lock
"$uv" pip compile bootstrap.in "${common[@]}" -o bootstrap.txt
echo "lock-deps: $(grep -c '^[a-z0-9]' dev.lock) packages in requirements/dev.lock"
