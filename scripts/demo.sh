#!/usr/bin/env bash
# kvtier's main job on its embedded default configuration, as a node runs
# it: kvtierd serving DRAM and a local-disk tier under a data directory;
# an engine-shaped client (kvtier demo: a prompt's KV chunks stored, a
# second prompt sharing its system prompt, the first found and reloaded)
# through the library's `daemon` key, its images in the daemon's shared
# memory; redis-cli over the Redis protocol; then a clean stop (SIGTERM).
# Usage: scripts/demo.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build=${1:-build}
for b in kvtierd kvtier; do
	[ -x "$build/$b" ] || { echo "demo: $build/$b missing: build first (cmake --build $build)" >&2; exit 1; }
done
command -v redis-cli >/dev/null || { echo "demo: redis-cli missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
run=$(mktemp -d /tmp/kvtier-demo-XXXXXX)
log=$run/kvtierd.log
"$build/kvtierd" --port 0 --data-dir "$run/data" --local "$run/kvtierd.sock" \
	--set max_local_cpu_size=256MiB >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$run"' EXIT
for _ in $(seq 100); do
	grep -q "listening on" "$log" && break
	kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
	sleep 0.1
done
port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$log")
[ -n "$port" ] || { cat "$log" >&2; exit 1; }
echo "== kvtierd: DRAM, and a disk tier under $run/data/disk (removed at the end)"
grep -E "listening on|tier [0-9]:" "$log" | sed 's/^.*kvtierd /kvtierd /'
echo
echo "== an engine-shaped client, through the library's daemon key (daemon: unix://$run/kvtierd.sock)"
"$build/kvtier" demo --set "daemon=unix://$run/kvtierd.sock"
echo
echo "== redis-cli -p $port"
echo "> set greeting hello: $(redis-cli -p "$port" set greeting hello)"
echo "> get greeting: $(redis-cli -p "$port" get greeting)"
echo "> info kvtier: kvtierd's own figures, per tier (the greeting is one more object and hit;"
echo "  the write kvtierd reserved ahead for the client's next put was freed when it left)"
redis-cli -p "$port" info kvtier | tr -d '\r' | awk -F'[:,=]' '
	/^tier[0-9]+:/ {
		for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
		printf "  %s %-4s %3d objects, %7.1f MiB of %.1f MiB; %d hits, %d misses, %d evictions, %d promotions\n",
			$1, v["name"], v["objects"], v["used_bytes"] / 1048576, v["capacity_bytes"] / 1048576,
			v["hits"], v["misses"], v["evictions"], v["promotions"]
	}'
echo
kill -TERM "$pid"
wait "$pid" && echo "== kvtierd stopped cleanly (SIGTERM)"
rm -rf "$run"
trap - EXIT
echo "== removed $run (kvtierd's data directory, its disk tier's files and its socket)"
