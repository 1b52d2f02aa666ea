#!/bin/bash
# kvtierd's INFO is the caller's tenant's: with redis-cli as two tenants,
# bob's INFO does not move when alice stores 50 values, alice's does (her
# keys, her share of the DRAM tier against her quota and reservation, her
# hits and misses); an access list's +admin user sees the node (tier
# capacity, every tenant's use, the clients and commands); /metrics, the
# operator's port, stays the node's; a nopass default user starts as its
# tenant, or as the node with +admin (taken at start: SIGHUP says a change
# waits for a restart); without an access list INFO is the node's.
# Usage: daemon_info.sh path/to/kvtierd
set -u
KVTIERD=$1
work=$(mktemp -d)
trap 'daemon_stop KILL; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"
. "$(dirname "$0")/lib_daemon.sh"
need_tools redis-cli curl

sha() { printf '%s' "$1" | sha256sum | cut -c1-64; }
as() { # user password redis-cli arguments...
	local u=$1 p=$2; shift 2
	redis-cli -p "$daemon_port" --user "$u" --pass "$p" --no-auth-warning "$@"
}
field() { # user password section field: the field's value in that user's INFO
	as "$1" "$2" info "$3" | tr -d '\r' | sed -n "s/^$4://p"
}
sub() { # key=value list, key: the value
	tr ',' '\n' <<<"$1" | sed -n "s/^$2=//p"
}
# Everything bob's INFO says but the clock.
bob_info() { as bob bobpw info | tr -d '\r' | grep -v '^uptime_in_seconds:'; }

cat >"$work/acl" <<EOF
user alice tenant a sha256:$(sha alicepw)
user bob tenant b sha256:$(sha bobpw)
user root tenant default +admin sha256:$(sha rootpw)
user default tenant default nopass
quota a dram 8MiB reserve 1MiB
EOF
secrets="a=000102030405060708090a0b0c0d0e0f,b=f0e0d0c0b0a090807060504030201000"
daemon_start --metrics-port 0 --set tenants="$secrets" --acl "$work/acl" || exit 1
metrics_port

is "bob's INFO is scoped to his tenant" "tenant" field bob bobpw kvtier scope
is "and names it" "b" field bob bobpw kvtier tenant
as bob bobpw set mine 1 >/dev/null
as bob bobpw get mine >/dev/null
as bob bobpw get none >/dev/null
before=$(bob_info)
head -c 4096 /dev/urandom >"$work/v"
for i in $(seq 1 50); do as alice alicepw -x set k$i <"$work/v" >/dev/null; done
for i in 1 2 3; do as alice alicepw get k$i >/dev/null; done
as alice alicepw get nothing >/dev/null
after=$(bob_info)
if [ "$before" == "$after" ]; then
	ok "bob's INFO does not change when alice stores 50 values and reads 4"
else
	bad "bob's INFO moved: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -6)"
fi
is "bob's own keys" "db0:keys=1,expires=0,avg_ttl=0" sh -c "redis-cli -p $daemon_port --user bob \
	--pass bobpw --no-auth-warning info keyspace | tr -d '\r' | grep ^db0"
is "bob's own hits" "1" field bob bobpw stats keyspace_hits
is "bob's own misses" "1" field bob bobpw stats keyspace_misses
for f in capacity_bytes= connected_clients: total_commands_processed: total_connections_received:; do
	as bob bobpw info | grep -q "$f" && bad "bob's INFO shows the node's $f" || ok "no node-wide $f for bob"
done

a0=$(field alice alicepw kvtier tier0)
is "alice's DRAM share: her 50 values" "50" sub "$a0" objects
used=$(sub "$a0" used_bytes)
if [ "${used:-0}" -ge $((50 * 4096)) ] && [ "$used" -le $((8 << 20)) ]; then
	ok "alice's DRAM bytes ($used) hold her values, under her quota"
else
	bad "alice's DRAM bytes: $a0"
fi
is "against her quota" "$((8 << 20))" sub "$a0" quota_bytes
is "and her reservation" "$((1 << 20))" sub "$a0" reserve_bytes
is "alice's keys" "db0:keys=50,expires=0,avg_ttl=0" sh -c "redis-cli -p $daemon_port --user alice \
	--pass alicepw --no-auth-warning info keyspace | tr -d '\r' | grep ^db0"
is "alice's hits" "3" field alice alicepw stats keyspace_hits
is "alice's misses" "1" field alice alicepw stats keyspace_misses
is "bob's share of DRAM: his one value" "1" sub "$(field bob bobpw kvtier tier0)" objects

# --- the admin sees the node -----------------------------------------------------
is "root's INFO is the node's" "node" field root rootpw kvtier scope
r0=$(field root rootpw kvtier tier0)
is "root sees every tenant's chunks" "51" sub "$r0" objects
cap=$(sub "$r0" capacity_bytes)
[ "${cap:-0}" -gt 0 ] && ok "and the tier's capacity ($cap)" || bad "root's tier line: $r0"
is "the node's hits" "4" field root rootpw stats keyspace_hits
is "the node's misses" "2" field root rootpw stats keyspace_misses
n=$(field root rootpw clients connected_clients)
[ "${n:-0}" -ge 1 ] && ok "the node's clients ($n)" || bad "root: no connected_clients"

# --- /metrics is the operator's: the node's ------------------------------------------
scrape
is "/metrics counts every tenant's hits" "kvtierd_keyspace_hits_total 4" grep '^kvtierd_keyspace_hits_total ' "$work/m"
is "and the DRAM tier's chunks" 'kvtier_tier_chunks{tier="dram"} 51' grep '^kvtier_tier_chunks{tier="dram"} ' "$work/m"
is "a connection as the nopass default user sees its tenant" "tenant" \
	sh -c "redis-cli -p $daemon_port info kvtier | tr -d '\r' | sed -n 's/^scope://p'"
sed -i 's/^user default tenant default nopass$/user default tenant default +admin nopass/' "$work/acl"
kill -HUP "$daemon_pid"
for _ in $(seq 1 100); do grep -q "or is +admin, changed" "$work/daemon.err" && break; sleep 0.05; done
grep -q "or is +admin, changed" "$work/daemon.err" && ok "SIGHUP says the default user's +admin waits for a restart" \
	|| bad "no warning: $(tail -2 "$work/daemon.err")"
is "AUTH as root after the reload: still the node" "node" field root rootpw kvtier scope
daemon_stop
daemon_start --set tenants="$secrets" --acl "$work/acl" || exit 1
is "after a restart, a +admin nopass default user starts as the node's" "node" \
	sh -c "redis-cli -p $daemon_port info kvtier | tr -d '\r' | sed -n 's/^scope://p'"
is "and alice still sees her tenant" "tenant" field alice alicepw kvtier scope
daemon_stop

# --- no access list: one tenant, the node's INFO -----------------------------------
daemon_start || exit 1
rc set k v >/dev/null
is "without --acl INFO is the node's" "node" sh -c "redis-cli -p $daemon_port info kvtier | tr -d '\r' | sed -n 's/^scope://p'"
rc info | grep -q '^connected_clients:' && ok "with its clients" || bad "no connected_clients without --acl"
daemon_stop

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
