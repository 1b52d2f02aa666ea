# Shared by the tests/daemon_*.sh scripts (sourced): start and stop a
# kvtierd of the build on a free port with its data under $work.  The
# caller sets $work and $KVTIERD (the daemon's path).
daemon_pid=
daemon_port=
daemon_start() { # extra options...
	: >"$work/daemon.out"
	"$KVTIERD" --port 0 --threads 2 --set max_local_cpu_size=128MiB \
		--set dram_prefault=false --log-level info "$@" \
		>"$work/daemon.out" 2>>"$work/daemon.err" &
	daemon_pid=$!
	for _ in $(seq 1 200); do
		daemon_port=$(sed -n 's/^kvtierd: listening on [0-9.]*:\([0-9]*\).*/\1/p' "$work/daemon.out")
		[ -n "$daemon_port" ] && return 0
		kill -0 "$daemon_pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "kvtierd did not start:"; cat "$work/daemon.err"; return 1
}
daemon_stop() { # signal (default TERM); waits for the exit
	[ -n "$daemon_pid" ] || return 0
	kill -"${1:-TERM}" "$daemon_pid" 2>/dev/null
	wait "$daemon_pid" 2>/dev/null
	daemon_rc=$?
	daemon_pid=
}
rc() { redis-cli -p "$daemon_port" "$@"; }
is() { # description, expected output, command...: its output must be exactly that
	local d=$1 want=$2; shift 2
	local got
	got=$("$@" 2>&1)
	if [ "$got" == "$want" ]; then ok "$d"; else bad "$d: got [$got], want [$want]"; fi
}
need_tools() { # commands the test runs: a missing one skips it (exit 77)
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "SKIP: $t missing (scripts/install-deps.sh)"; exit 77; }
	done
}
# /metrics of a daemon started with --metrics-port 0: metrics_port reads
# the port it printed into $mport; scrape fetches the text into $work/m;
# val prints one series as written (name{labels}) from it, or "absent".
metrics_port() {
	mport=$(sed -n 's|^kvtierd: metrics on http://[0-9.]*:\([0-9]*\)/metrics$|\1|p' "$work/daemon.out")
}
scrape() { curl -s "http://127.0.0.1:$mport/metrics" >"$work/m"; }
val() { awk -v s="$1" '$1 == s { print $2; f = 1 } END { if (!f) print "absent" }' "$work/m"; }
