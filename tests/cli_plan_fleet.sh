#!/usr/bin/env bash
# kvtier plan in time: queueing against the plain reference (the same TTFT
# percentiles to the microsecond), the fleet search for a TTFT target
# (the cheapest fleet meets it, one node less does not, what it saves
# against accelerators only adds up), the bandwidth table, a measured
# catalog named as such, and the report's pictures in headless Chromium.
set -u
kvtier=${1:?usage: cli_plan_fleet.sh path/to/kvtier}
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
trace="$src/tests/data/traces/conversation_trace.jsonl"
py=/usr/bin/python3
[ -f "$trace" ] || { echo "FAIL $trace missing: the repository ships it"; exit 1; }
[ -x "$py" ] || { echo "FAIL $py absent (scripts/install-deps.sh installs it)"; exit 1; }
work=$(mktemp -d /tmp/kvt-planf-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# --- queueing: the same percentiles as the reference ----------------------
# 4 nodes round-robin, LRU per node, at 1x and 3x the trace's rate: the
# reference computes the same model (prefill, loads at the DRAM tier's 25
# GB/s after 5 us overlapped layer by layer, FIFO per node) on its own.
head -3000 "$trace" >"$work/t.jsonl"
for rate in 1 3; do
	PLAN_QUEUE="4 $rate 8.03e9 32 4096 131072 494.5e12 25 5e-6" "$py" "$src/tests/plan_reference.py" \
		"$work/t.jsonl" 500 2000 >"$work/qref.txt" || bad "queue reference failed"
	"$kvtier" plan "$work/t.jsonl" --dram 500,2000 --nodes 4 --policy lru --rate $rate --json --quiet \
		>"$work/q.json" 2>"$work/err" || bad "plan --rate $rate: $(cat "$work/err")"
	"$py" - "$work/qref.txt" "$work/q.json" $rate <<'PY' || fails=$((fails + 1))
import json, sys
ref = {l.split()[0]: [float(v) for v in l.split()[1:5]] for l in open(sys.argv[1])}
d = json.load(open(sys.argv[2]))
bad = 0
for c in d["configs"]:
    t = c["timing"]
    got = [t["ttft_ms"]["p50"], t["ttft_ms"]["p90"], t["ttft_ms"]["p99"], t["queue_ms"]["p90"]]
    want = ref[c["dram_blocks"]]
    same = all(abs(a - b) <= 1e-3 + 1e-6 * b for a, b in zip(got, want))
    print(f"{'ok  ' if same else 'FAIL'} rate {sys.argv[3]}x, 4 nodes x {c['dram_blocks']} blocks: TTFT p50/p90/p99 "
          f"{got[0]:.1f}/{got[1]:.1f}/{got[2]:.1f} ms, queue p90 {got[3]:.1f} (reference {want[0]:.1f}/{want[1]:.1f}/"
          f"{want[2]:.1f}, {want[3]:.1f}); utilisation {t['utilisation']:.2f}")
    bad += not same
sys.exit(1 if bad else 0)
PY
done

# --- the fleet search --------------------------------------------------------
lim=4000
if "$kvtier" plan "$trace" --limit $lim --target-ttft-ms 1000 >"$work/fleet.txt" 2>"$work/err" &&
	"$kvtier" plan "$trace" --limit $lim --target-ttft-ms 1000 --json --quiet >"$work/fleet.json" 2>>"$work/err"; then
	grep -q "^  cheapest fleet: " "$work/fleet.txt" && ok "the table names the cheapest fleet" ||
		bad "no cheapest fleet: $(tail -12 "$work/fleet.txt")"
	grep -q "against accelerators only it saves [0-9]* accelerator(s) and \$[0-9]*/month" "$work/fleet.txt" &&
		ok "and what it saves against accelerators only" || bad "no saving line: $(tail -12 "$work/fleet.txt")"
	grep -Eq "^    pcie +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ " "$work/fleet.txt" &&
		ok "the bandwidth table has the PCIe link" || bad "no bandwidth table: $(tail -8 "$work/fleet.txt")"
	"$py" - "$work/fleet.json" >"$work/check.txt" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
f = d["fleet"]
c = f["cheapest"]
cfg = d["configs"][c["index"]]
t = c["timing"]
bad = 0
def check(cond, what):
    global bad
    print(("ok   " if cond else "FAIL ") + what)
    bad += not cond
check(t["ttft_ms"]["p90"] <= 1000, f"cheapest fleet meets the target: TTFT p90 {t['ttft_ms']['p90']:.1f} ms")
check(cfg["target_met"] is True, "its row is marked met")
a = f["accelerators_only"]["timing"]
if f["accelerators_only"]["met"]:
    check(f["saves"]["accelerators"] == a["accelerators"] - t["accelerators"],
          f"saves {f['saves']['accelerators']} = {a['accelerators']} - {t['accelerators']} accelerators")
    check(abs(f["saves"]["usd_month"] - (a["usd_fleet_month"] - t["usd_fleet_month"])) < 0.05,
          f"saves ${f['saves']['usd_month']:.0f}/month")
cheapest = min(x["timing"]["usd_fleet_month"] for x in d["configs"] if x["target_met"])
check(abs(cheapest - t["usd_fleet_month"]) < 0.01, "no met row is cheaper")
for x in d["configs"]:
    if x["target_met"] and x["timing"]["ttft_ms"]["p90"] > 1000:
        check(False, f"row {x} marked met above the target")
for s in d["figures"]:
    if s["measured"]:
        check(False, f"{s['name']} measured without a catalog")
print(f"NODES {t['nodes']} {cfg['route']} {cfg['dram_blocks']} {cfg['nvme_blocks']} {cfg['shared_blocks']} "
      f"{cfg['shared_tier']} {t['tp']}")
sys.exit(1 if bad else 0)
PY
	grep -v ^NODES "$work/check.txt"
	# One node less than the search found misses the target.
	read -r _ n route d0 d1 ds st tp < <(grep ^NODES "$work/check.txt")
	if [ "${n:-1}" -gt 1 ]; then
		"$kvtier" plan "$trace" --limit $lim --nodes $((n - 1)) --route "$route" --policy lru --dram "$d0" \
			--nvme "$d1" --shared "$ds" --shared-tier "$st" --tp "$tp" --json --quiet >"$work/less.json" &&
			"$py" -c 'import json,sys; p=json.load(open(sys.argv[1]))["configs"][0]["timing"]["ttft_ms"]["p90"]; print(p); sys.exit(p <= 1000)' \
				"$work/less.json" >"$work/p90" && ok "one node less misses it (TTFT p90 $(cat "$work/p90") ms)" ||
			bad "one node less still meets the target ($(cat "$work/p90") ms): the search is not the fewest"
	fi
else
	bad "fleet search failed: $(cat "$work/err")"
fi

# --- starvation: a slow shared tier is flagged with the bandwidth it needs --
"$kvtier" plan "$work/t.jsonl" --dram 200 --shared inf --shared-tier fs --nodes 2 --policy lru \
	>"$work/slow.txt" 2>"$work/err" || bad "slow tier plan: $(cat "$work/err")"
grep -Eq "^    shared .* fix: [0-9.]+ GB/s per fleet \(now [0-9.]+\) = [0-9.]+ TiB of fs" "$work/slow.txt" &&
	ok "a starving file system is flagged with the TiB that fix it" ||
	bad "no starvation line: $(grep -A6 bandwidth "$work/slow.txt")"

# --- a measured catalog is named as such ------------------------------------
printf '# measured\ngpu H100 tflops=700 mfu=0.6\ntier dram gbps=12 latency_us=20\nlink pcie gbps=40\n' >"$work/m.cat"
"$kvtier" plan "$work/t.jsonl" --catalog "$work/m.cat" --dram 1000 --policy lru --json --quiet >"$work/m.json" &&
	"$py" - "$work/m.json" <<'PY' && ok "catalog figures are reported as measured, the rest as built-in" || fails=$((fails + 1))
import json, sys
src = {(s["kind"], s["name"]): s for s in json.load(open(sys.argv[1]))["figures"]}
want = {("gpu", "H100"): "m.cat:2", ("tier", "dram"): "m.cat:3", ("link", "pcie"): "m.cat:4"}
bad = 0
for k, v in want.items():
    if src[k]["source"] != v or not src[k]["measured"]:
        print(f"FAIL {k}: {src[k]}"); bad += 1
for k in (("tier", "nvme"), ("link", "nic"), ("model", "Llama-3.1-8B")):
    if src[k]["source"] != "built-in" or src[k]["measured"]:
        print(f"FAIL {k}: {src[k]}"); bad += 1
sys.exit(1 if bad else 0)
PY
"$kvtier" plan "$work/t.jsonl" --rate 0 >/dev/null 2>"$work/err" && bad "--rate 0 accepted" ||
	{ grep -q -- "--rate" "$work/err" && ok "--rate 0 refused" || bad "--rate 0: $(cat "$work/err")"; }
"$kvtier" plan "$work/t.jsonl" --route sideways >/dev/null 2>"$work/err" && bad "--route sideways accepted" ||
	{ grep -q "sideways" "$work/err" && ok "an unknown route refused by name" || bad "--route: $(cat "$work/err")"; }

# --- the report: frontier, bandwidth, queueing ------------------------------
if "$kvtier" plan "$trace" --limit 2000 --target-ttft-ms 1500 --dram 256GiB --nvme 0,4TiB --shared 0 \
	--tp 2,4 --report "$work/report" --quiet >/dev/null 2>"$work/err"; then
	for f in frontier.svg bandwidth.svg queue.svg; do
		grep -q "<svg" "$work/report/$f" 2>/dev/null && ok "chart $f" || bad "chart $f missing"
	done
	grep -q 'id="fleet"' "$work/report/index.html" && ok "the page states the fleet" || bad "no fleet in index.html"
	"$py" "$src/tests/plan_browser.py" "$work/report" frontier.svg bandwidth.svg queue.svg
	case $? in
	0) ok "report with the fleet pictures renders in headless chromium" ;;
	77) bad "headless browser check: chromium absent (scripts/install-deps.sh installs it)" ;;
	*) bad "report does not render in headless chromium" ;;
	esac
else
	bad "report failed: $(cat "$work/err")"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
