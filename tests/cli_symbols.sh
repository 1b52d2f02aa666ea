#!/usr/bin/env bash
# The shared library exports its public API and nothing else: every symbol
# `nm -D` lists as defined is a function include/kvtier.h, the parts it
# includes or kvtier/units.h declares with KVT_API, and every one of those
# is there.  The planner's calls (kvtier/plan.h) are not: they are its own
# library's.
set -u
kvtier=${1:?usage: cli_symbols.sh path/to/kvtier}
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
build=$(cd "$(dirname "$kvtier")" && pwd)
work=$(mktemp -d /tmp/kvt-symbols-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

lib=$build/libkvtier.so
[ -e "$lib" ] || { bad "$lib not built"; exit 1; }
command -v nm >/dev/null || { bad "nm absent (binutils, installed with build-essential)"; exit 1; }
nm -D --defined-only "$lib" | awk '$2 ~ /^[TWiV]$/ || $2 ~ /^[BDR]$/ {print $3}' | sed 's/@.*//' |
	sort -u >"$work/exported"
sed -n 's/^KVT_API .*[ *]\(kvt_[a-z0-9_]*\)(.*/\1/p' "$src/include/kvtier.h" "$src"/include/kvtier/*.h |
	sort -u >"$work/declared"
if nm -D --defined-only "$lib" | grep -q ' kvt_plan_' || grep -q '^KVT_API' "$src/include/kvtier/plan.h"; then
	bad "the planner's calls are in libkvtier.so's exports or marked KVT_API"
else
	ok "the planner's calls are its own library's, not libkvtier.so's"
fi
ldd "$lib" | grep -q libjansson && bad "libkvtier.so links jansson (the planner's)" ||
	ok "libkvtier.so does not link jansson"
[ "$(wc -l <"$work/declared")" -ge 40 ] && ok "$(wc -l <"$work/declared") functions declared KVT_API" ||
	bad "too few KVT_API declarations found: $(wc -l <"$work/declared")"
extra=$(comm -23 "$work/exported" "$work/declared")
missing=$(comm -13 "$work/exported" "$work/declared")
[ -z "$extra" ] && ok "no internal symbol is exported" ||
	bad "exported but not public: $(echo $extra | head -c 600)"
[ -z "$missing" ] && ok "every public function is exported" ||
	bad "declared but not exported: $(echo $missing)"
echo "cli_symbols: $fails failure(s)"
[ "$fails" -eq 0 ]
