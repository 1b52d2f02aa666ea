# Shared by the tests/cli_*.sh scripts (sourced; named so that CMake does
# not take it for a test): outcome lines and the two
# ways a command is expected to end.  The caller sets $work (a scratch
# directory) and reads $fails at the end.
fails=0
ok()   { echo "ok   $*"; }
bad()  { echo "FAIL $*"; fails=$((fails + 1)); }
expect() { # description, command...: must succeed
	local d=$1; shift
	if "$@" >"$work/out" 2>"$work/err"; then ok "$d"; else bad "$d: $(cat "$work/err")"; fi
}
flip_byte() { # file, offset: invert the byte there (writing a fixed value
	# changes nothing when the byte already holds it: one time in 256)
	local b
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
expect_fail() { # description, pattern stderr must contain ("" = any; any case), command...
	local d=$1 pat=$2; shift 2
	if "$@" >"$work/out" 2>"$work/err"; then bad "$d: succeeded"; return; fi
	if [ -z "$pat" ] || grep -qi -- "$pat" "$work/err"; then ok "$d"; else bad "$d: error was: $(cat "$work/err")"; fi
}
