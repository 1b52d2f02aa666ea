#!/bin/bash
# kvtierd's deletions against the background copy (docs/DAEMON.md, "How
# values are stored"): with --durability cached a SET is acknowledged in
# DRAM and copied to the disk tier later; the disk tier's background
# bandwidth is made slow here, so that every DEL, UNLINK, FLUSHDB and
# EXPIRE into the past below comes while the deleted version's copy is
# still queued, and many of those copies land after the deletion.  Then
# kill -9 and a restart: no deleted key comes back, every key that does
# holds the value last acknowledged for it (or, under cached, the one
# before when the last SET's copy was lost with the process).  The same under crash-safe:
# every acknowledged key is back too.  After a clean stop no tombstone or
# orphan copy is left on disk.  Usage: daemon_tombstones.sh path/to/kvtierd
set -u
KVTIERD=$1
work=$(mktemp -d)
trap 'daemon_stop KILL; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"
. "$(dirname "$0")/lib_daemon.sh"
need_tools redis-cli

slow="--set nvme_background_bandwidth=512KiB"
val=$(head -c 600 /dev/zero | tr '\0' v)
objects() { find "$work/data/disk" -name '*.kvt' | wc -l; }

# Round r: 40 keys set, then a FLUSHDB (which takes the rounds before
# too), then 60 keys set and deleted (by DEL, UNLINK and PEXPIRE into the
# past), 30 set and left, 30 set twice: 60 acknowledged keys live after.
load() { # round
	local r=$1
	{
		for i in $(seq 1 40); do echo "SET f:$r:$i $val"; done
		echo "FLUSHDB"
		for i in $(seq 1 60); do
			echo "SET d:$r:$i $val$i"
			case $((i % 3)) in
			0) echo "DEL d:$r:$i" ;;
			1) echo "UNLINK d:$r:$i" ;;
			2) echo "PEXPIRE d:$r:$i -1" ;;
			esac
			[ $((i % 2)) = 0 ] && echo "SET l:$r:$i live$r:$i"
			[ $((i % 2)) = 1 ] && echo "SET o:$r:$i old" && echo "SET o:$r:$i new$r:$i"
		done
	} | rc >"$work/replies"
}

# Every key back is one no deletion removed (those of round r but the
# deleted ones), and holds its last value.
check() { # what, round, durability
	local what=$1 r=$2 n v
	rc --scan | grep -v "^[lo]:$r:" >"$work/back"
	n=$(wc -l <"$work/back")
	[ "$n" = 0 ] && ok "$what: no deleted key came back" ||
		bad "$what: $n deleted keys came back: $(head -5 "$work/back" | tr '\n' ' ')"
	local wrong=0 k
	for k in $(rc --scan --pattern "l:*"); do
		[ "$(rc get "$k")" = "live${k#l:}" ] || wrong=$((wrong + 1))
	done
	# Set twice: the second value, or under cached the first when the
	# second was lost with its copy (what cached promises of a SET).
	for k in $(rc --scan --pattern "o:*"); do
		v=$(rc get "$k")
		[ "$v" = "new${k#o:}" ] || { [ "$3" = cached ] && [ "$v" = old ]; } ||
			wrong=$((wrong + 1))
	done
	[ "$wrong" = 0 ] && ok "$what: every key back holds its last value" ||
		bad "$what: $wrong keys hold another value"
}

# Cached, copies slow: the rounds' copies queue behind each other and land
# while later rounds delete; a pause lets many land after their deletion.
daemon_start --data-dir "$work/data" --durability cached $slow || exit 1
for r in 1 2 3; do
	load $r
	[ $r = 3 ] || sleep 1
done
daemon_stop KILL # round 3's copies still landing, its tombstones not collected
grep -qv "^\(OK\|1\|0\)$" "$work/replies" && bad "a command failed: $(grep -v '^\(OK\|1\|0\)$' "$work/replies" | head -3)"
on_disk=$(objects)
tombs=$(grep -rl KVTDDEL2 "$work/data/disk" | wc -l)
[ "$on_disk" -gt 0 ] && ok "copies reached the disk before kill -9 ($on_disk objects)" ||
	bad "no copy reached the disk: the race was not run"
[ "$tombs" -gt 0 ] && ok "deletions left tombstones for the restart ($tombs)" ||
	bad "no tombstone on disk at the kill: the deletions raced no copy"
daemon_start --data-dir "$work/data" --durability cached || exit 1
check "cached, after kill -9" 3 cached
survived=$(rc dbsize)
echo "     ($survived acknowledged keys of 180 made it to the disk before the kill)"

# A clean stop flushes the copies: every acknowledged key is back, and no
# tombstone or late copy is left beside them.
rc flushdb >/dev/null
daemon_stop TERM
daemon_start --data-dir "$work/data" --durability cached $slow || exit 1
load 4
daemon_stop TERM
daemon_start --data-dir "$work/data" --durability cached || exit 1
check "cached, after SIGTERM" 4 crash-safe
is "cached, after SIGTERM: every acknowledged key is back" "60" rc dbsize
daemon_stop TERM
is "no tombstone or stale copy left on disk" "60" objects

# Crash-safe: kill -9 keeps every acknowledged key as well.
daemon_start --data-dir "$work/data" --durability crash-safe $slow || exit 1
rc flushdb >/dev/null
load 5
daemon_stop KILL
daemon_start --data-dir "$work/data" --durability crash-safe || exit 1
check "crash-safe, after kill -9" 5 crash-safe
is "crash-safe, after kill -9: every acknowledged key is back" "60" rc dbsize
daemon_stop TERM

echo "daemon_tombstones: $fails failure(s)"
[ "$fails" -eq 0 ]
