#!/usr/bin/env bash
# Each folder of src/ is a layer (ARCHITECTURE.md), and a file reaches only
# its own layer and the ones below it.  From the top:
#
#   bench                kvtier-bench, which also uses the CLI's helpers
#   cli, daemon          the programs (neither reaches into the other)
#   engine               the connector
#   plan                 the capacity planner
#   store                one store over its tiers
#   policy               eviction and admission
#   tier                 the tiers
#   proto                the wire: the local protocol, RESP
#   key                  keys and namespaces
#   format               the object format, layouts, models
#   common               errors, I/O, logging, units
#
# Checked two ways: the folder each #include names, and, in the objects of
# the build, the folder that defines each symbol an object calls or reads.
set -u
kvtier=${1:?usage: cli_layers.sh path/to/kvtier}
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
build=$(cd "$(dirname "$kvtier")" && pwd)
work=$(mktemp -d /tmp/kvt-layers-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

command -v nm >/dev/null || { bad "nm absent (binutils, installed with build-essential)"; exit 1; }

# the layers, top first; programs share the top rank
ranks='bench 10
cli 9
daemon 9
engine 8
plan 7
store 6
policy 5
tier 4
proto 3
key 2
format 1
common 0'
echo "$ranks" >"$work/ranks"

# A violation is a reach from folder $1 into folder $2 above it, or into
# another program.
cat >"$work/judge.awk" <<'EOF'
FNR == NR { rank[$1] = $2; next }
{
	from = $1; to = $2
	if (!(from in rank) || !(to in rank) || from == to) next
	if (rank[to] > rank[from] || (rank[to] == 9 && rank[from] == 9)) print
}
EOF

# --- includes: "<folder> <included folder> <file>:<line> <header>" -----------
(
	cd "$src" || exit 1
	grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' \
		src/*/*.c src/*/*.h src/*/*.cu bench/*.c bench/*.h 2>/dev/null |
	sed -E 's|^(src/)?([a-z_]+)/([^:]+):([0-9]+):[^"]*"([a-z_]+)/([^"]+)".*|\2 \5 \1\2/\3:\4 \5/\6|'
) >"$work/includes"
[ "$(wc -l <"$work/includes")" -ge 100 ] && ok "$(wc -l <"$work/includes") includes of a folder read" ||
	bad "too few includes found: $(wc -l <"$work/includes")"
awk -f "$work/judge.awk" "$work/ranks" "$work/includes" >"$work/up_includes"
[ ! -s "$work/up_includes" ] && ok "no file includes a layer above its own" ||
	bad "includes up a layer: $(awk '{print $3, "includes", $4}' "$work/up_includes" | head -20 | tr '\n' ';')"

# --- what a layer keeps to itself ---------------------------------------------
# A folder's private header (*_int.h) is included from that folder alone.
awk '{split($4, h, "/"); if (h[2] ~ /_int\.h$/ && $1 != $2) print}' "$work/includes" >"$work/private"
[ ! -s "$work/private" ] && ok "no file includes another folder's private header" ||
	bad "private headers included from outside: $(awk '{print $3, "includes", $4}' "$work/private" | tr '\n' ';')"
# Above tier/, only the registry of tier kinds (store/tiers.c) names a kind's
# own module; everything else goes through the vtable (tier/tier.h).  The
# benchmarks measure kinds one by one and may name them.
awk '$2 == "tier" && $1 != "tier" && $1 != "bench" && $3 !~ /^src\/store\/tiers\.c:/ &&
	$4 !~ /^tier\/(tier|speeds)\.h$/' "$work/includes" >"$work/kinds"
[ ! -s "$work/kinds" ] && ok "above tier/, only the registry names a tier kind" ||
	bad "a tier kind named above tier/: $(awk '{print $3, "includes", $4}' "$work/kinds" | tr '\n' ';')"

# --- symbols: who defines, who uses -----------------------------------------
# Objects are CMakeFiles/<target>.dir/<source path>.o; a source built into
# several targets counts once.
find "$build/CMakeFiles" -name '*.o' | grep -E '\.dir/(src/[a-z_]+|bench)/' |
	sed -E 's|^(.*\.dir/)((src/)?([a-z_]+)/[^/]+)\.o$|\4 \2 \0|' | sort -u -k2,2 >"$work/objects"
[ "$(wc -l <"$work/objects")" -ge 50 ] && ok "$(wc -l <"$work/objects") objects of the build read" ||
	bad "too few objects under $build/CMakeFiles: $(wc -l <"$work/objects")"
while read -r folder source obj; do
	[ -e "$src/$source" ] || continue # left in the build by a source since gone
	nm -g --defined-only "$obj" 2>/dev/null | awk -v f="$folder" -v s="$source" \
		'NF == 3 && $2 ~ /^[TDBRVWGS]$/ {print $3, f, s}' >>"$work/defined"
	nm -u "$obj" 2>/dev/null | awk -v f="$folder" -v s="$source" \
		'{print $NF, f, s}' >>"$work/used"
done <"$work/objects"
sort -u -k1,1 "$work/defined" -o "$work/defined"
sort -k1,1 "$work/used" -o "$work/used"
# "<user folder> <definer folder> <user source> <symbol> <definer source>"
join -j 1 "$work/used" "$work/defined" | awk '{print $2, $4, $3, $1, $5}' >"$work/calls"
[ "$(wc -l <"$work/calls")" -ge 500 ] && ok "$(wc -l <"$work/calls") references between objects" ||
	bad "too few references found: $(wc -l <"$work/calls")"
awk -f "$work/judge.awk" "$work/ranks" "$work/calls" >"$work/up_calls"
[ ! -s "$work/up_calls" ] && ok "no object calls into a layer above its own" ||
	bad "calls up a layer: $(awk '{print $3, "->", $4, "of", $5}' "$work/up_calls" | sort -u | head -20 | tr '\n' ';')"

echo "cli_layers: $fails failure(s)"
[ "$fails" -eq 0 ]
