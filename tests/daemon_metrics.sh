#!/bin/bash
# kvtierd's /metrics and /health scraped with curl, and `kvtier stat
# --daemon` / `kvtier top` reading them: the per-tier families move with
# known traffic (hits, misses, bytes, chunks, the latency histogram), the
# tenants' usage stands against their quotas, the daemon counts its
# clients and commands, and the text is what a Prometheus scraper takes.
# Usage: daemon_metrics.sh path/to/kvtierd (kvtier is beside it)
set -u
KVTIERD=$1
KVTIER=$(dirname "$KVTIERD")/kvtier
work=$(mktemp -d)
trap 'daemon_stop KILL; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"
. "$(dirname "$0")/lib_daemon.sh"
need_tools redis-cli curl

sha() { printf '%s' "$1" | sha256sum | cut -c1-64; }

cat >"$work/acl" <<EOF2
user default tenant default nopass
user alice tenant a sha256:$(sha alicepw)
quota a dram 32MiB reserve 8MiB
EOF2
daemon_start --data-dir "$work/data" --metrics-port 0 --acl "$work/acl" \
	--set tenants=a=000102030405060708090a0b0c0d0e0f || exit 1
metrics_port
[ -n "$mport" ] && ok "the metrics port is printed" || { bad "no metrics line"; cat "$work/daemon.out"; }

scrape
hits0=$(val 'kvtier_tier_hits_total{tier="dram"}')
cmds0=$(val kvtierd_commands_total)
is "/metrics serves the DRAM tier" "0" val 'kvtier_tier_chunks{tier="dram"}'
is "and the disk tier" "0" val 'kvtier_tier_chunks{tier="nvme"}'
rc set k1 v1 >/dev/null
rc set k2 v2 >/dev/null
for _ in 1 2 3; do rc get k1 >/dev/null; done
rc get nope >/dev/null
head -c 1048576 /dev/urandom >"$work/v"
redis-cli -p "$daemon_port" --user alice --pass alicepw --no-auth-warning -x set big <"$work/v" >/dev/null
scrape
is "chunks in DRAM" "3" val 'kvtier_tier_chunks{tier="dram"}'
is "DRAM hits: the three GETs" "$((hits0 + 3))" val 'kvtier_tier_hits_total{tier="dram"}'
is "keyspace misses: the GET of a key never set" "1" val kvtierd_keyspace_misses_total
is "commands counted (alice's AUTH too)" "$((cmds0 + 8))" val kvtierd_commands_total
is "the histogram counts the reads served" "$(val 'kvtier_tier_hits_total{tier="dram"}')" \
	val 'kvtier_tier_get_latency_seconds_count{tier="dram"}'
is "its +Inf bucket is its count" "$(val 'kvtier_tier_get_latency_seconds_count{tier="dram"}')" \
	val 'kvtier_tier_get_latency_seconds_bucket{tier="dram",le="+Inf"}'
read_b=$(val 'kvtier_tier_read_bytes_total{tier="dram"}')
[ "$read_b" -gt 0 ] 2>/dev/null && ok "bytes read counted ($read_b)" || bad "bytes read: $read_b"
written=$(val 'kvtier_tier_written_bytes_total{tier="dram"}')
[ "$written" -ge 1048576 ] 2>/dev/null && ok "bytes written counted ($written)" || bad "bytes written: $written"
# Tenants are labelled by an id the operator's log maps to a name: whoever
# scrapes learns no tenant's name.
la=$(sed -n 's/.*tenant a: \/metrics label \(t[0-9a-f]\{12\}\)$/\1/p' "$work/daemon.err")
[ -n "$la" ] && ok "the log gives tenant a's label ($la)" || bad "no label for a in the log: $(cat "$work/daemon.err")"
grep -q 'tenant="a"' "$work/m" && bad "tenant a named in /metrics" || ok "tenant a's name is not in /metrics"
abytes=$(val "kvtier_tenant_bytes{tenant=\"$la\",tier=\"dram\"}")
[ "$abytes" -ge 1048576 ] 2>/dev/null && [ "$abytes" -lt 2097152 ] && ok "tenant a holds its 1 MiB value ($abytes)" \
	|| bad "tenant a bytes: $abytes"
is "tenant a's quota" "33554432" val "kvtier_tenant_quota_bytes{tenant=\"$la\",tier=\"dram\"}"
is "tenant a's reservation" "8388608" val "kvtier_tenant_reserve_bytes{tenant=\"$la\",tier=\"dram\"}"
is "the default tenant's two keys" "2" val 'kvtier_tenant_chunks{tenant="default",tier="dram"}'
# Every sample's family was declared (TYPE) before it, once.
bad_lines=$(awk '/^# TYPE /{ if ($3 in t) print "twice: " $3; t[$3] = 1; next } /^#/ { next }
	{ n = $1; sub(/\{.*/, "", n); b = n; sub(/_(bucket|sum|count)$/, "", b)
	  if (!(n in t) && !(b in t)) print "undeclared: " $0
	  if ($2 !~ /^[0-9.e+-]+$/) print "not a number: " $0 }' "$work/m")
[ -z "$bad_lines" ] && ok "the text is Prometheus' format" || bad "format: $bad_lines"

# A held connection is counted while it lasts.
exec 3<>/dev/tcp/127.0.0.1/"$daemon_port"
printf 'PING\r\n' >&3
read -r -t 5 pong <&3
scrape
[ "$(val kvtierd_connections)" -ge 1 ] && ok "a connected client is counted (${pong%$'\r'})" \
	|| bad "connections: $(val kvtierd_connections)"
exec 3<&-

is "/health" "ok" curl -s "http://127.0.0.1:$mport/health"
is "/health's status" "200" curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/health"
is "another path" "404" curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/other"

# The CLI reads the same figures.
"$KVTIER" stat --daemon "127.0.0.1:$mport" >"$work/stat" 2>&1
grep -q '^dram .* 3 chunks; hits' "$work/stat" && ok "kvtier stat --daemon: the DRAM tier" \
	|| bad "kvtier stat: $(cat "$work/stat")"
grep -q "^tenant $la  *dram .* of quota 32.0 MiB, reserved 8.00 MiB" "$work/stat" \
	&& ok "kvtier stat --daemon: tenant a against its quota" || bad "kvtier stat: $(cat "$work/stat")"
"$KVTIER" stat --daemon "127.0.0.1:$mport" --json >"$work/stat.json"
is "kvtier stat --daemon --json" "3" /usr/bin/python3 -c \
	"import json,sys; d=json.load(open('$work/stat.json')); print(int([t for t in d['tiers'] if t['name']=='dram'][0]['chunks']))"
( sleep 0.3; for _ in $(seq 1 50); do echo "GET k1"; done | rc >/dev/null ) &
gets=$!
"$KVTIER" top --daemon "127.0.0.1:$mport" --interval 0.8 --count 1 >"$work/top" 2>&1
wait $gets
awk '$1 == "dram" && $2 >= 40 { f = 1 } END { exit !f }' "$work/top" \
	&& ok "kvtier top shows the GETs of the interval as hits/s" || bad "kvtier top: $(cat "$work/top")"
expect_fail "kvtier top without a daemon there" "cannot connect" \
	"$KVTIER" top --daemon "127.0.0.1:1" --count 1

# A metrics port already taken keeps the daemon from starting, with the reason.
expect_fail "a metrics port in use" "cannot serve metrics on 127.0.0.1:$mport" \
	"$KVTIERD" --port 0 --set max_local_cpu_size=8MiB --set dram_prefault=false --metrics-port "$mport"
daemon_stop
[ "$daemon_rc" -eq 0 ] && ok "SIGTERM: a clean exit with the HTTP server running" || bad "exit $daemon_rc"

# The same secret gives the same label after a restart; an operator who
# wants names asks for them.
daemon_start --data-dir "$work/data" --metrics-port 0 --acl "$work/acl" \
	--set tenants=a=000102030405060708090a0b0c0d0e0f || exit 1
metrics_port
scrape
is "tenant a's label after a restart" "33554432" val "kvtier_tenant_quota_bytes{tenant=\"$la\",tier=\"dram\"}"
daemon_stop
daemon_start --data-dir "$work/data" --metrics-port 0 --acl "$work/acl" --metrics-tenant-names \
	--set tenants=a=000102030405060708090a0b0c0d0e0f || exit 1
metrics_port
scrape
is "--metrics-tenant-names: tenant a by name" "33554432" val 'kvtier_tenant_quota_bytes{tenant="a",tier="dram"}'
daemon_stop

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
