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
for want in "listening on 127.0.0.1:" "the store is kvtierd's, its DRAM tier of 256.0 MiB" \
	"lookup: 16 of 48 chunks cached" "kvtierd keeps every chunk on its disk tier too" \
	"every byte verified" "came from the disk" "get greeting: hello" "tier1 nvme" \
	"stopped cleanly" "== removed /tmp/kvtier-demo-"; do
	grep -qF -- "$want" "$work/out" && ok "prints: $want" || bad "no \"$want\" in: $(tail -5 "$work/out")"
done
# The client's figures of kvtierd's DRAM are the daemon's own (INFO's).
demo=$(sed -n "s/^kvtierd's DRAM tier: .* \([0-9]*\) misses, \([0-9]*\) evictions$/\1 \2/p" "$work/out")
info=$(sed -n 's/^  tier0 dram .* \([0-9]*\) misses, \([0-9]*\) evictions, .*/\1 \2/p' "$work/out")
[ -n "$demo" ] && [ "$demo" = "$info" ] && ok "misses and evictions agree with INFO: $demo" ||
	bad "the demo says \"$demo\", kvtierd's INFO \"$info\""
# Where the data went is said, and it is gone afterwards.
run=$(sed -n 's/^== removed \(\/tmp\/kvtier-demo-[A-Za-z0-9]*\) .*/\1/p' "$work/out")
[ -n "$run" ] && [ ! -e "$run" ] && ok "its data directory is gone" || bad "left behind: $run"
echo "daemon_demo: $fails failure(s)"
[ "$fails" -eq 0 ]
