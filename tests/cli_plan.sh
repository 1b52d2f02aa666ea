#!/usr/bin/env bash
# kvtier plan against the plain reference (tests/plan_reference.py) on the
# shipped Mooncake trace: identical hit blocks for LRU at 1k/5k/20k/unbounded,
# the speed of both measured side by side (printed, not asserted), a 50-
# configuration grid, machine outputs, and a report directory with charts.
set -u
kvtier=${1:?usage: cli_plan.sh path/to/kvtier}
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
trace="$src/tests/data/traces/conversation_trace.jsonl"
if [ ! -f "$trace" ]; then
	echo "FAIL: $trace missing: the repository ships it"
	exit 1
fi
py=$(command -v python3 || true)
if [ -z "$py" ]; then
	echo "FAIL: python3 absent (scripts/install-deps.sh installs it; the reference is a Python script)"
	exit 1
fi
work=$(mktemp -d /tmp/kvt-plan-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# --- exactness and speed, side by side ------------------------------------
caps="1000 5000 20000 inf"
PLAN_REPEAT=3 "$py" "$src/tests/plan_reference.py" "$trace" $caps >"$work/ref.txt" ||
	bad "reference script failed"
"$kvtier" plan "$trace" --dram "$(echo $caps | tr ' ' ,)" --policy lru --threads 1 \
	--repeat 3 --json --quiet >"$work/plan.json" 2>"$work/err" || bad "plan failed: $(cat "$work/err")"
"$py" - "$work/ref.txt" "$work/plan.json" <<'PY' || fails=$((fails + 1))
import json, sys
ref = [l.split() for l in open(sys.argv[1])]
plan = json.load(open(sys.argv[2]))
by_cap = {c["dram_blocks"]: c for c in plan["configs"]}
bad = 0
ref_s = plan_s = 0.0
for cap, hits, blocks, secs in ref:
    c = by_cap[cap]
    same = int(hits) == c["hit_blocks"] and int(blocks) == c["blocks"]
    print(f"{'ok  ' if same else 'FAIL'} LRU {cap:>6}: reference {hits} hit blocks, plan {c['hit_blocks']} "
          f"of {blocks}; reference {float(secs)*1e3:.1f} ms, plan {c['sim_seconds']*1e3:.1f} ms "
          f"({float(secs)/c['sim_seconds']:.1f}x)")
    bad += not same
    ref_s += float(secs)
    plan_s += c["sim_seconds"]
acc = sum(c["blocks"] for c in plan["configs"])
print(f"speed: plan {acc/plan_s/1e6:.1f} M block accesses/s on one core, {ref_s/plan_s:.1f}x the reference "
      f"({acc/ref_s/1e6:.1f} M/s); the issue asks for >= 10x and >= 10 M/s (printed, not asserted)")
want = {"1000": 12831, "5000": 31840, "20000": 82939, "inf": 105710}
for cap, n in want.items():
    if by_cap[cap]["hit_blocks"] != n:
        print(f"FAIL LRU {cap}: {by_cap[cap]['hit_blocks']} hit blocks, the issue says {n}")
        bad += 1
sys.exit(1 if bad else 0)
PY

# --- kvtier-bench plan: the same comparison as one command ---------------
# (the benchmarks' own program, next to kvtier; its reference script is the
# copy the build put in bench-data/, never the source tree's)
if (cd "$work" && env -u KVT_SRC "$(dirname "$kvtier")/kvtier-bench" plan "$trace" --repeat 1 --json) \
	>"$work/bench.json" 2>"$work/err"; then
	"$py" - "$work/bench.json" <<'PY' || fails=$((fails + 1))
import json, sys
b = json.load(open(sys.argv[1]))
q, g = b["queueing"], b["grid"]
ok = b["exact"] and q["exact"] and b["ratio_vs_reference"] > 0 and b["accesses_per_s_per_core"] > 0
print(f"{'ok  ' if ok else 'FAIL'} bench plan: {b['ratio_vs_reference']:.1f}x the reference (simulation only), "
      f"{b['accesses_per_s_per_core']/1e6:.1f} M accesses/s per core; end to end "
      f"{b['end_to_end']['ratio_vs_reference']:.1f}x; in time {q['ratio_vs_python']:.1f}x, TTFT percentiles "
      f"{'equal' if q['exact'] else 'DIFFERENT'}; 100-configuration grid {g['seconds']:.2f} s (printed, not asserted)")
sys.exit(0 if ok else 1)
PY
else
	bad "bench plan failed: $(cat "$work/err")"
fi

# --- a 50-configuration grid on every core --------------------------------
t0=$(date +%s.%N)
if "$kvtier" plan "$trace" --dram 1000,5000,20000,50000,inf \
	--nvme 0,20000,50000 --policy lru,s3fifo --admit none,seen2 --csv --quiet >"$work/grid.csv" 2>"$work/err"; then
	t1=$(date +%s.%N)
	rows=$(($(wc -l <"$work/grid.csv") - 1))
	[ "$rows" -eq 50 ] && ok "grid: $rows configurations in $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s on $(nproc) core(s)" ||
		bad "grid: $rows rows, want 50"
else
	bad "grid failed: $(cat "$work/err")"
fi

# --- a fleet, the table, a recommendation ---------------------------------
if "$kvtier" plan "$trace" --dram 2000,10000 --shared 0,inf --shared-tier s3 --nodes 4 --route affinity \
	--policy lru --target-hit 0.3 >"$work/table.txt" 2>"$work/err"; then
	grep -q "^recommendation (cheapest meeting" "$work/table.txt" && ok "fleet table with a recommendation" ||
		bad "no recommendation: $(cat "$work/table.txt")"
else
	bad "fleet plan failed: $(cat "$work/err")"
fi
"$kvtier" plan "$trace" --dram 1000 --model NoSuchModel >/dev/null 2>"$work/err" &&
	bad "unknown model accepted" || { grep -q "unknown model" "$work/err" && ok "unknown model refused" ||
	bad "unknown model: $(cat "$work/err")"; }
cat >"$work/cat.txt" <<'CAT'
# a custom model and GPU
model Tiny-1B params=1.2e9 layers=16 d_model=2048 kv_heads=8 head_dim=64
gpu L4 tflops=121 mfu=0.4 usd_hour=0.8
CAT
"$kvtier" plan "$trace" --catalog "$work/cat.txt" --model Tiny-1B --gpu L4 --dram 1000 --limit 500 --quiet \
	>"$work/out" 2>"$work/err" && ok "catalog file extends the tables" || bad "catalog: $(cat "$work/err")"

# --- the report directory --------------------------------------------------
if "$kvtier" plan "$trace" --dram 1000,5000,20000,inf --policy lru,s3fifo --report "$work/report" \
	--quiet >"$work/out" 2>"$work/err"; then
	for f in index.html plan.json plan.csv; do
		[ -s "$work/report/$f" ] && ok "report has $f" || bad "report lacks $f"
	done
	"$py" -c "import json,sys; json.load(open(sys.argv[1]))" "$work/report/plan.json" &&
		ok "plan.json parses" || bad "plan.json does not parse"
	if command -v gnuplot >/dev/null; then
		for f in hitrate.svg ttft.svg; do
			grep -q "<svg" "$work/report/$f" 2>/dev/null && ok "chart $f" || bad "chart $f missing"
		done
		grep -q 'src="hitrate.svg"' "$work/report/index.html" && ok "index.html links the charts" ||
			bad "index.html does not link the charts"
	else
		bad "gnuplot absent (scripts/install-deps.sh installs it): no charts to check"
	fi
else
	bad "report failed: $(cat "$work/err")"
fi

# --- the page in a real browser ------------------------------------------
if [ -s "$work/report/hitrate.svg" ]; then
	"$py" "$src/tests/plan_browser.py" "$work/report"
	case $? in
	0) ok "report renders in headless chromium" ;;
	77) bad "headless browser check: chromium absent (scripts/install-deps.sh installs it)" ;;
	*) bad "report does not render in headless chromium" ;;
	esac
fi

# --- replay through a real store agrees with plan --------------------------
# A DRAM tier of exactly 1,000 chunk images, LRU, the first 2,000 requests,
# one thread: the same hit blocks as the simulation.
if "$kvtier" replay "$trace" --limit 2000 --dram-blocks 1000 --block-bytes 64KiB --json \
	>"$work/replay.json" 2>"$work/err"; then
	"$kvtier" plan "$trace" --limit 2000 --dram 1000 --policy lru --json --quiet >"$work/p2.json"
	"$py" - "$work/replay.json" "$work/p2.json" <<'PY' || fails=$((fails + 1))
import json, sys
r = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["configs"][0]
same = r["hit_blocks"] == p["hit_blocks"] and r["blocks"] == p["blocks"]
print(f"{'ok  ' if same else 'FAIL'} replay {r['hit_blocks']} hit blocks, plan {p['hit_blocks']} "
      f"(of {r['blocks']}); replay loads at {r['get_gbps']:.2f} GB/s, stores at {r['put_gbps']:.2f} GB/s")
sys.exit(0 if same and r["bad"] == 0 else 1)
PY
else
	bad "replay failed: $(cat "$work/err")"
fi

# The same for S3-FIFO with libCacheSim's promotion threshold, set in the
# store's configuration and in plan: per-access hits agree too.
if "$kvtier" replay "$trace" --limit 2000 --dram-blocks 1000 --block-bytes 4KiB --json \
	--set dram_eviction=s3fifo --set dram_s3fifo_promote=2 --set dram_s3fifo_small=20 \
	>"$work/replay3.json" 2>"$work/err"; then
	"$kvtier" plan "$trace" --limit 2000 --dram 1000 --policy s3fifo --s3fifo-promote 2 \
		--s3fifo-small 20 --json --quiet >"$work/p3.json"
	"$py" - "$work/replay3.json" "$work/p3.json" <<'PY' || fails=$((fails + 1))
import json, sys
r = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["configs"][0]
same = (r["hit_blocks"], r["access_hits"]) == (p["hit_blocks"], p["access_hits"][0]) and \
    p["s3fifo"] == {"small_pct": 20, "promote": 2, "fill_main": False}
print(f"{'ok  ' if same else 'FAIL'} S3-FIFO (20%, promote after 2): replay {r['hit_blocks']} "
      f"prefix / {r['access_hits']} per-access hits, plan {p['hit_blocks']} / {p['access_hits'][0]}")
sys.exit(0 if same and r["bad"] == 0 else 1)
PY
else
	bad "replay (S3-FIFO) failed: $(cat "$work/err")"
fi
if "$kvtier" plan "$trace" --limit 10 --s3fifo-promote 4 >/dev/null 2>"$work/err"; then
	bad "plan accepted --s3fifo-promote 4"
elif grep -q "s3fifo-promote.*1..3" "$work/err"; then
	ok "plan refuses --s3fifo-promote 4, naming its range"
else
	bad "plan --s3fifo-promote 4: $(cat "$work/err")"
fi

# --- JSON output escapes what a path holds -----------------------------------
# A trace whose name has a quote, a backslash and a newline, and a model
# name with a quote (from a catalog): the JSON of plan and replay still
# parses, and gives the names back as they are.
odd="$work/a\"b\\c
d.jsonl"
head -300 "$trace" >"$odd"
printf 'model Q"uote params=1.2e9 layers=16 d_model=2048 kv_heads=8 head_dim=64\n' >"$work/qcat.txt"
if "$kvtier" plan "$odd" --catalog "$work/qcat.txt" --model 'Q"uote' --dram 100,inf --json --quiet \
	>"$work/odd.json" 2>"$work/err" &&
	"$py" -m json.tool "$work/odd.json" >/dev/null &&
	"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["trace"]["path"] != sys.argv[2] or d["model"] != "Q\"uote")' \
		"$work/odd.json" "$odd"; then
	ok "plan --json escapes a path with a quote, backslash and newline"
else
	bad "plan --json with an odd path: $(head -c 300 "$work/odd.json") $(cat "$work/err")"
fi
if "$kvtier" replay "$odd" --limit 50 --block-bytes 4KiB --json >"$work/oddr.json" 2>"$work/err" &&
	"$py" -m json.tool "$work/oddr.json" >/dev/null &&
	"$py" -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["trace"] != sys.argv[2])' \
		"$work/oddr.json" "$odd"; then
	ok "replay --json escapes a path with a quote, backslash and newline"
else
	bad "replay --json with an odd path: $(head -c 300 "$work/oddr.json") $(cat "$work/err")"
fi

# Default settings: one accelerator for the whole trace, which queues for
# days; plan says so and names the flags that size the fleet.  A fleet
# that keeps up is not warned about.
"$kvtier" plan "$trace" --quiet --policy lru --dram 1000 >"$work/ovl.out" 2>"$work/ovl.err"
grep -q "warning: 1 node(s) of 1 accelerator(s) are overloaded .* --target-ttft-ms MS .* --nodes N" \
	"$work/ovl.err" && ok "an overloaded fleet is warned about, with the flags that size it" ||
	bad "no overload warning: $(cat "$work/ovl.err")"
"$kvtier" plan "$trace" --quiet --policy lru --dram 1000 --nodes 8 >"$work/ovl.out" 2>"$work/ovl.err"
grep -q "overloaded" "$work/ovl.err" && bad "8 nodes warned about: $(cat "$work/ovl.err")" ||
	ok "8 nodes at 24% utilisation: no warning"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
