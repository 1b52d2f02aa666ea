#!/usr/bin/env bash
# Every line of the README's quick tour, run as written: a scratch copy of
# the repository's layout (build/kvtier, build/kvtier-bench and tests/data
# linked in), each command in order, each must succeed.  A README example that rots fails
# here.
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
cd "$repo"
while IFS= read -r line; do
	case "${line#"${line%%[! ]*}"}" in "" | \#*) continue ;; esac
	if bash -c "set -o pipefail; $line" >"$work/out" 2>"$work/err"; then
		ok "${line%%  #*}"
	else
		bad "${line%%  #*}: $(tail -3 "$work/err")"
	fi
done <"$work/tour.sh"
echo "cli_readme: $fails failure(s)"
[ "$fails" -eq 0 ]
