#!/bin/bash
# SIGHUP puts a changed configuration's policies in force in a running
# kvtierd: the disk tier's admission and write policy, the DRAM tier's
# eviction policy and the store's TTL change without a restart; a key that
# needs one (a capacity) is named in the log as waiting for the next
# start; a configuration with a fault is refused whole and the policies in
# force stay.
# Usage: daemon_reload.sh path/to/kvtierd
set -u
KVTIERD=$1
work=$(mktemp -d)
trap 'daemon_stop KILL; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"
. "$(dirname "$0")/lib_daemon.sh"
need_tools redis-cli curl

nvme_puts() { scrape; val 'kvtier_tier_puts_total{tier="nvme"}'; }
wait_puts() { # until the disk tier has taken $1 puts (background copies), 10 s at most
	for _ in $(seq 1 200); do [ "$(nvme_puts)" = "$1" ] && return 0; sleep 0.05; done
	return 1
}
hup() { # SIGHUP, then wait for its log line
	local n
	n=$(grep -c "SIGHUP" "$work/daemon.err")
	kill -HUP "$daemon_pid"
	for _ in $(seq 1 100); do
		[ "$(grep -c "SIGHUP" "$work/daemon.err")" -gt "$n" ] && { sleep 0.1; return 0; }
		sleep 0.05
	done
}
set_values() { # first last
	for i in $(seq "$1" "$2"); do rc set "k$i" "value $i" >/dev/null; done
}

cat >"$work/kvtier.yaml" <<'EOF2'
nvme_admission: never
dram_eviction: lru
EOF2
daemon_start --config "$work/kvtier.yaml" --data-dir "$work/data" --durability cached \
	--metrics-port 0 || exit 1
metrics_port

set_values 1 5
sleep 0.5
is "admission never: no value reached the disk" "0" nvme_puts

cat >"$work/kvtier.yaml" <<'EOF2'
nvme_admission: always
dram_eviction: s3fifo
max_local_disk_size: 8GiB
EOF2
hup
grep -q "SIGHUP: tier policies and ttl reloaded" "$work/daemon.err" &&
	ok "the reload is logged" || bad "no reload line: $(tail -3 "$work/daemon.err")"
grep -q "in force at the next start only: max_local_disk_size" "$work/daemon.err" &&
	ok "a capacity is named as waiting for the next start" ||
	bad "no next-start line: $(tail -3 "$work/daemon.err")"
set_values 6 10
wait_puts 5 && ok "admission always: the next five values reached the disk" ||
	bad "disk puts after the reload: $(nvme_puts)"
is "values stored before the reload are still there" "value 1" rc get k1
is "and after it (DRAM's policy now S3-FIFO)" "value 10" rc get k10

printf 'nvme_admission: sometimes\n' >"$work/kvtier.yaml"
hup
grep -q "is not valid (above): the policies in force stay" "$work/daemon.err" &&
	ok "a bad configuration is refused, saying so" || bad "bad config: $(tail -3 "$work/daemon.err")"
grep -q "nvme_admission" "$work/daemon.err" && ok "the log names the key that is wrong" ||
	bad "the key is not named: $(tail -4 "$work/daemon.err")"
set_values 11 12
wait_puts 7 && ok "the policies in force stayed (admission always)" ||
	bad "disk puts after the refused reload: $(nvme_puts)"

printf 'nvme_admission: always\nttl: 1s\n' >"$work/kvtier.yaml"
hup
sleep 2
is "a TTL reloaded makes values older than it misses" "" rc get k1
set_values 13 13
is "a new value is served" "value 13" rc get k13
kill -0 "$daemon_pid" && ok "kvtierd is still running" || bad "kvtierd exited"
daemon_stop TERM
is "it stops clean" "0" echo "$daemon_rc"
echo "daemon_reload: $fails failure(s)"
[ "$fails" -eq 0 ]
