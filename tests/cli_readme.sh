#!/usr/bin/env bash
# Every line of the README's quick tour, run as written: a scratch copy of
# the repository's layout (build/kvtier, build/kvtier-bench and tests/data
# linked in), each command in order in one shell, each must succeed, and
# the repository must be left as it was (the tour works in a scratch
# directory of its own).  A README example that rots fails here.
set -u
kvtier=${1:?usage: cli_readme.sh path/to/kvtier}
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d /var/tmp/kvt-readme-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

repo=$work/repo # the tour runs here; the harness keeps its files in $work
mkdir -p "$repo/build" "$repo/tests"
ln -s "$(cd "$(dirname "$kvtier")" && pwd)/$(basename "$kvtier")" "$repo/build/kvtier"
# the benchmarks' own program, built next to kvtier (it finds its data from its real path)
ln -s "$(cd "$(dirname "$kvtier")" && pwd)/kvtier-bench" "$repo/build/kvtier-bench"
ln -s "$src/tests/data" "$repo/tests/data"
awk '/^## A quick tour/ {t = 1} t && /^```sh/ {c = 1; next} c && /^```/ {exit} c' \
	"$src/README.md" >"$work/tour.sh"
n=$(grep -c . "$work/tour.sh")
[ "$n" -ge 10 ] || { bad "README tour not found ($n lines)"; exit 1; }
# One shell runs the whole tour (its `cd` holds for the lines after it),
# each line on a line of its own (its comment is a comment), each line's
# outcome reported.
{
	echo 'set -o pipefail; fails=0'
	while IFS= read -r line; do
		case "${line#"${line%%[! ]*}"}" in "" | \#*) continue ;; esac
		desc=$(printf '%q' "$(sed 's/  *#.*$//; s/ *$//' <<<"${line%%  #*}")")
		printf '{\n%s\n} >"$KVT_TOUR_LOG" 2>&1\n' "$line"
		printf 'if [ $? -eq 0 ]; then echo "ok   "%s; else echo "FAIL "%s": $(tail -3 "$KVT_TOUR_LOG")"; fails=$((fails + 1)); fi\n' "$desc" "$desc"
	done <"$work/tour.sh"
	echo 'exit $fails'
} >"$work/run.sh"
(cd "$repo" && find . | sort) >"$work/before"
(cd "$repo" && KVT_TOUR_LOG=$work/line.log bash "$work/run.sh")
fails=$?
(cd "$repo" && find . | sort) >"$work/after"
cmp -s "$work/before" "$work/after" && ok "the tour left the repository as it was" ||
	bad "the tour left files in the repository: $(diff "$work/before" "$work/after" | head -5)"
echo "cli_readme: $fails failure(s)"
[ "$fails" -eq 0 ]
