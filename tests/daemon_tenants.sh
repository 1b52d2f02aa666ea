#!/bin/bash
# kvtierd's tenants against redis-cli and redis-benchmark: AUTH through the
# access list; tenant B can neither read, probe, list, delete nor flush
# tenant A's keys, and its replies for A's key are those of a key nobody
# set; a shared prefix is read by all and written by its own tenant; B's flood leaves A's reservation in DRAM intact (and, without one,
# takes tenant C's keys); a quota bounds a tenant; SIGHUP rereads the list
# (a bad one is refused whole); TLS with redis-cli --tls --cacert.
# Usage: daemon_tenants.sh path/to/kvtierd
set -u
KVTIERD=$1
work=$(mktemp -d)
trap 'daemon_stop KILL; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"
. "$(dirname "$0")/lib_daemon.sh"
need_tools redis-cli redis-benchmark openssl

sha() { printf '%s' "$1" | sha256sum | cut -c1-64; }
as() { # user password redis-cli arguments...
	local u=$1 p=$2; shift 2
	redis-cli -p "$daemon_port" --user "$u" --pass "$p" --no-auth-warning "$@"
}
wait_log() { # pattern: the daemon logged it (within 5 s)
	for _ in $(seq 1 100); do
		grep -q -- "$1" "$work/daemon.err" && return 0
		sleep 0.05
	done
	return 1
}

secrets="a=000102030405060708090a0b0c0d0e0f,b=f0e0d0c0b0a090807060504030201000"
secrets="$secrets,c=00112233445566778899aabbccddeeff,d=ffeeddccbbaa99887766554433221100"
secrets="$secrets,public=0f0e0d0c0b0a09080706050403020100"
write_acl() { # bob's password
	cat >"$work/acl" <<-EOF
	# node test: four tenants
	user alice tenant a sha256:$(sha alicepw)
	user bob tenant b sha256:$(sha "$1")
	user carol tenant c sha256:$(sha carolpw)
	user dave tenant d sha256:$(sha davepw)
	user ops tenant public sha256:$(sha opspw)
	shared sys: tenant public
	quota a dram none reserve 16MiB
	quota d dram 4MiB
	EOF
}
write_acl bobpw

# --- a bad list is refused at start, with the reason -------------------------
small="--set max_local_cpu_size=8MiB --set dram_prefault=false"
printf 'user eve tenant e sha256:%s\n' "$(sha x)" >"$work/acl_e"
expect_fail "a list naming a tenant the store lacks" "tenant e" \
	"$KVTIERD" --port 0 $small --set tenants="$secrets" --acl "$work/acl_e"
printf 'quota a gpu 1GiB\n' >"$work/acl_tier"
expect_fail "a quota in a tier the store lacks, with the tiers it has" "no tier named gpu (this store has dram)" \
	"$KVTIERD" --port 0 $small --set tenants="$secrets" --acl "$work/acl_tier"
printf 'quota a dram none reserve 6MiB\nquota b dram none reserve 6MiB\n' >"$work/acl_res"
expect_fail "reservations beyond the tier's policy" "reservations would total" \
	"$KVTIERD" --port 0 $small --set tenants="$secrets" --acl "$work/acl_res"
printf 'user eve tenant a secret\n' >"$work/acl_bad"
expect_fail "--check-config names the bad line" "acl_bad:1: user eve" \
	"$KVTIERD" --check-config --acl "$work/acl_bad"
expect_fail "--acl and --requirepass together" "give one" \
	"$KVTIERD" --port 0 $small --set tenants="$secrets" --acl "$work/acl" --requirepass x

# DRAM only: a chunk pushed out of it is gone, so a GET shows who lost what.
daemon_start --set max_local_cpu_size=64MiB --set tenants="$secrets" --acl "$work/acl" || exit 1

# --- AUTH ----------------------------------------------------------------------
is "no command before AUTH" "NOAUTH Authentication required." rc get k
is "wrong password" "WRONGPASS invalid username-password pair or user is disabled." \
	rc auth alice bobpw
is "unknown user: the same answer" "WRONGPASS invalid username-password pair or user is disabled." \
	rc auth mallory alicepw
is "AUTH password: no default user in the list" \
	"WRONGPASS invalid username-password pair or user is disabled." rc auth alicepw
is "AUTH user password" "PONG" as alice alicepw ping

# --- isolation -------------------------------------------------------------------
is "alice sets" "OK" as alice alicepw set prompt:42 "alice's prefix"
is "alice reads" "alice's prefix" as alice alicepw get prompt:42
bob_view() { # what bob sees of key $1
	as bob bobpw get "$1"
	as bob bobpw exists "$1"
	as bob bobpw ttl "$1"
	as bob bobpw pttl "$1"
	as bob bobpw mget "$1" "$1"
	as bob bobpw expire "$1" 100
	as bob bobpw del "$1"
	as bob bobpw unlink "$1"
}
cold=$(bob_view never:set)
is "bob probing alice's exact key answers as a cold key" "$cold" bob_view prompt:42
is "bob's GET of it is nil" "" as bob bobpw get prompt:42
is "bob's EXISTS of it is 0" "0" as bob bobpw exists prompt:42
before=$(as bob bobpw scan 0 count 1000; as bob bobpw dbsize)
for i in $(seq 1 50); do echo "SET k$i v$i"; done | as alice alicepw >/dev/null
is "bob's SCAN and DBSIZE do not move when alice writes" "$before" \
	sh -c "redis-cli -p $daemon_port --user bob --pass bobpw --no-auth-warning scan 0 count 1000;
	       redis-cli -p $daemon_port --user bob --pass bobpw --no-auth-warning dbsize"
is "bob's DBSIZE" "0" as bob bobpw dbsize
is "bob's FLUSHDB" "OK" as bob bobpw flushdb
is "alice's key outlives bob's FLUSHDB and DEL" "alice's prefix" as alice alicepw get prompt:42
is "alice's DBSIZE" "51" as alice alicepw dbsize
is "bob writes the same name" "OK" as bob bobpw set prompt:42 "bob's"
is "alice still reads hers" "alice's prefix" as alice alicepw get prompt:42
is "bob reads his" "bob's" as bob bobpw get prompt:42

# --- the shared namespace ------------------------------------------------------
bob_n=$(as bob bobpw dbsize)
is "its tenant writes a shared key" "OK" as ops opspw set sys:prompt "You are helpful."
is "alice reads it" "You are helpful." as alice alicepw get sys:prompt
is "bob reads it" "You are helpful." as bob bobpw get sys:prompt
is "bob sees its TTL" "-1" as bob bobpw ttl sys:prompt
noperm="NOPERM this user has no permissions to access one of the keys used as arguments"
is "alice cannot overwrite it" "$noperm" as alice alicepw set sys:prompt "evil"
is "nor delete it" "$noperm" as alice alicepw del sys:prompt
is "nor expire it" "$noperm" as alice alicepw expire sys:prompt 1
is "an MSET touching it is refused whole" "$noperm" as alice alicepw mset mine 1 sys:prompt 2
is "and set nothing" "" as alice alicepw get mine
is "the shared value stands" "You are helpful." as bob bobpw get sys:prompt
is "a key outside the prefix is alice's own" "OK" as alice alicepw set sysx 1
is "bob does not see it" "" as bob bobpw get sysx
is "shared keys are in no other tenant's DBSIZE" "$bob_n" as bob bobpw dbsize

# --- reservations under a flood ---------------------------------------------------
head -c 1048576 /dev/urandom >"$work/v"
for i in 1 2 3 4 5 6 7 8; do
	as alice alicepw -x set big$i <"$work/v" >/dev/null
	as carol carolpw -x set big$i <"$work/v" >/dev/null
done
# 200 MiB of distinct keys from bob into a 64 MiB DRAM tier.
timeout 60 redis-benchmark -p "$daemon_port" --user bob -a bobpw -t set -n 200 -d 1048576 \
	-r 1000000 -c 2 -q >/dev/null 2>&1
served() { # user password: how many of big1..8 come back whole
	local n=0
	for i in 1 2 3 4 5 6 7 8; do
		as "$1" "$2" --raw get big$i | head -c 1048576 | cmp -s - "$work/v" && n=$((n + 1))
	done
	echo $n
}
is "alice's reserved 8 MiB all survive bob's flood" "8" served alice alicepw
is "carol, with no reservation, lost hers to it" "0" served carol carolpw

# --- a quota bounds a tenant ----------------------------------------------------------
for i in 1 2 3 4 5 6 7 8; do as dave davepw -x set big$i <"$work/v" >/dev/null; done
n=$(served dave davepw)
if [ "$n" -ge 2 ] && [ "$n" -le 3 ]; then ok "dave's 4 MiB quota keeps $n of 8 values"; else bad "dave kept $n of 8 values under a 4 MiB quota"; fi
is "the newest is among them" "ok" sh -c "redis-cli -p $daemon_port --user dave --pass davepw \
	--no-auth-warning --raw get big8 | head -c 1048576 | cmp -s - $work/v && echo ok"

# --- SIGHUP -------------------------------------------------------------------------------
write_acl bobpw2
kill -HUP "$daemon_pid"
wait_log "access list reloaded" && ok "SIGHUP reloads" || bad "no reload in the log"
is "bob's old password is refused" "WRONGPASS invalid username-password pair or user is disabled." \
	rc auth bob bobpw
is "bob's new password" "OK" as bob bobpw2 set after:hup yes
printf 'user bob tenant b sha256:short\n' >"$work/acl"
kill -HUP "$daemon_pid"
wait_log "the access list in force stays: .*acl:1: user bob" && ok "a bad list is refused, with its line" \
	|| bad "bad list: $(tail -2 "$work/daemon.err")"
is "the list in force stays whole" "yes" as bob bobpw2 get after:hup
is "alice too" "alice's prefix" as alice alicepw get prompt:42
daemon_stop

# --- TLS ---------------------------------------------------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" -days 1 \
	-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$work/other.pem" 2>/dev/null
expect_fail "a key that is not the certificate's" "mismatch" \
	"$KVTIERD" --check-config --tls-cert "$work/cert.pem" --tls-key "$work/other.pem"
expect_fail "a key file that is no key" "TLS key $work/acl" \
	"$KVTIERD" --check-config --tls-cert "$work/cert.pem" --tls-key "$work/acl"
write_acl bobpw
daemon_start --set tenants="$secrets" --acl "$work/acl" --tls-cert "$work/cert.pem" \
	--tls-key "$work/key.pem" || exit 1
tls() { redis-cli --tls --cacert "$work/cert.pem" -p "$daemon_port" --user alice --pass alicepw \
	--no-auth-warning "$@"; }
is "PING over TLS" "PONG" tls ping
tls -x set big <"$work/v" >/dev/null
is "1 MiB over TLS and back" "ok" sh -c "redis-cli --tls --cacert $work/cert.pem -p $daemon_port \
	--user alice --pass alicepw --no-auth-warning --raw get big | head -c 1048576 | cmp -s - $work/v && echo ok"
out=$(redis-cli -p "$daemon_port" ping 2>&1)
if [ "$out" != "PONG" ]; then ok "plain RESP to the TLS port gets nothing"; else bad "plain PING answered"; fi
is "the daemon still serves TLS after it" "PONG" tls ping
daemon_stop

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
