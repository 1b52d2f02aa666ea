#!/bin/bash
# kvtierd against redis-py and raw sockets: tests/daemon_clients.py.
# Usage: daemon_clients.sh path/to/kvtierd
set -u
KVTIERD=$1
/usr/bin/python3 -c "import redis" 2>/dev/null ||
	{ echo "SKIP: Debian's python3-redis missing (scripts/install-deps.sh)"; exit 77; }
work=$(mktemp -d)
trap 'daemon_stop KILL; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_daemon.sh"
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# A ThreadSanitizer build (scripts/test.sh runs the daemon tests under it).
if ldd "$KVTIERD" 2>/dev/null | grep -q libtsan; then export KVT_DAEMON_TSAN=1; fi
daemon_start --data-dir "$work/data" --client-timeout 1 --set max_local_cpu_size=512MiB || exit 1
/usr/bin/python3 "$(dirname "$0")/daemon_clients.py" "$daemon_port" "$daemon_pid"
rc=$?
daemon_stop TERM
[ "$daemon_rc" = 0 ] || { echo "FAIL kvtierd exited $daemon_rc"; cat "$work/daemon.err" | tail; rc=1; }
exit $rc
