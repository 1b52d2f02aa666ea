#!/usr/bin/env bash
# The README's main command after its build: scripts/demo.sh on this build
# (kvtierd beside the given path) must start the daemon, say where it
# listens, run the engine-shaped client through the daemon key to the
# end, answer redis-cli, and stop clean.
set -u
kvtierd=${1:?usage: daemon_demo.sh path/to/kvtierd}
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/kvt-demo-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$src/tests/lib_cli.sh"
expect "scripts/demo.sh runs to the end" timeout 120 "$src/scripts/demo.sh" "$(dirname "$kvtierd")"
for want in "listening on 127.0.0.1:" "tier 0 is daemon" "lookup: 16 of 48 chunks cached" \
	"every byte verified" "get greeting: hello" "tier1:name=nvme" "stopped cleanly"; do
	grep -qF -- "$want" "$work/out" && ok "prints: $want" || bad "no \"$want\" in: $(tail -5 "$work/out")"
done
echo "daemon_demo: $fails failure(s)"
[ "$fails" -eq 0 ]
