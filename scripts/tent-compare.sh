#!/usr/bin/env bash
# tent-compare.sh: Ferry against Mooncake's TENT (tebench), side by side on
# one machine, over issue 31's rows, interleaved, N rounds; prints per row
# the median and min–max of GB/s for each, and of the per-round Ferry/TENT
# ratio, with Ferry's p50/p99 and context switches per request.
#
#   scripts/tent-compare.sh [--tebench PATH] [--rounds 3] [--duration 3]
#       [--threads 1] [--op write] [--rows REGEX] [--classic] [--contention]
#       [--out DIR] [--plan]
#
# --tebench   tebench built by scripts/tebench-build.sh (default
#             /work/tebench-src/build/mooncake-transfer-engine/benchmark/tebench,
#             or $TEBENCH).
# --rounds    rounds; each round runs every row once for each side, the
#             side that goes first alternating from round to round.
# --duration  measured seconds per run (whole seconds: tebench's unit).
#             tebench adds 1 s of warm-up; ferry bench gets --warmup 500ms
#             and its --duration split in its two rounds, as it does.
# --threads   submitting threads on both sides (tebench --start/max_num_threads,
#             ferry bench --threads).
# --rows      only the rows whose name matches this extended regex, as a
#             search ('shm-4k' picks both 4 KiB shm rows; anchor with ^$).
# --classic   also run classic Transfer Engine (tebench --backend=classic;
#             it picks tcp itself on a machine without RDMA) on the tcp rows.
# --contention  run the 4 KiB rows quiet and then beside one busy process
#             per online CPU, in the same round: each is `taskset -c CPU
#             sh -c 'while :; do :; done'` at the bench's own priority
#             (nice 0), a pure user-space spin that never sleeps or makes a
#             syscall. Prints each side's contended/quiet throughput ratio
#             and Ferry's p50/p99 quiet and contended.
# --out       directory for the raw results (results.tsv, every run's log);
#             default a new tent-compare-<time> directory under /tmp.
# --plan      print the runs and exit.
#
# Before each row of each round it measures the machine's core-to-core
# latency, a cache line's round trip between two threads (sdk/ring's
# BenchmarkLinePingPong, built with `go test -c`), prints it and sums it
# up at the end: on a KVM guest it moves when the host moves the vCPUs,
# and Ferry's small rows, whose requests cross from one process to
# another, move with it while TENT's do not.
#
# Rows (name transport size batch): shm-4k-b1, shm-4k-b128, shm-64k,
# shm-1m, tcp-4k-b1, tcp-4k-b128, tcp-64k, and the large ones shm-64m,
# tcp-64m, tcp-1m. Ops are write on both sides (tebench --op_type,
# ferry bench --op). For tcp-4k-b1 ferry bench also runs its raw-socket
# baseline (raw-go-tcp: one Go TCP stream to a peer process, one round
# trip per batch), and the summary puts Ferry's p50 beside it; the other
# rows run --no-baseline. tebench reports no p50: its "Avg Tx" (mean
# per-batch latency) and "P99 Tx" are shown for TENT instead.
#
# Each tebench run starts its own target (`tebench --backend=B
# --xport_type=T`, p2p metadata: the target prints the segment name the
# initiator dials), runs the initiator, then stops the target, so no
# TENT process runs beside a Ferry run. ferry bench starts and stops its
# own target engine likewise. Needs bin/ from `make build`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

tebench=${TEBENCH:-/work/tebench-src/build/mooncake-transfer-engine/benchmark/tebench}
rounds=3 duration=3 threads=1 op=write rowre=. classic=0 contention=0 out="" plan=0
while (($#)); do
  case $1 in
    --tebench) tebench=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --rows) rowre=$2; shift 2 ;;
    --classic) classic=1; shift ;;
    --contention) contention=1; shift ;;
    --out) out=$2; shift 2 ;;
    --plan) plan=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "tent-compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $duration =~ ^[1-9][0-9]*$ ]] || { echo "tent-compare: --duration is whole seconds (tebench's --duration), got $duration" >&2; exit 2; }
ferry=$root/bin/ferry
[[ -x $ferry ]] || { echo "tent-compare: $ferry missing: run make build" >&2; exit 1; }
[[ -x $tebench ]] || { echo "tent-compare: no tebench at $tebench: build it with scripts/tebench-build.sh, or pass --tebench" >&2; exit 1; }

all_rows=(
  "shm-4k-b1 shm 4096 1"
  "shm-4k-b128 shm 4096 128"
  "shm-64k shm 65536 1"
  "shm-1m shm 1048576 1"
  "tcp-4k-b1 tcp 4096 1"
  "tcp-4k-b128 tcp 4096 128"
  "tcp-64k tcp 65536 1"
  "shm-64m shm 67108864 1"
  "tcp-64m tcp 67108864 1"
  "tcp-1m tcp 1048576 1"
)
rows=()
for r in "${all_rows[@]}"; do
  name=${r%% *}
  if ((contention)) && [[ $name != *-4k-* ]]; then continue; fi
  [[ $name =~ $rowre ]] && rows+=("$r")
done
((${#rows[@]})) || { echo "tent-compare: no row matches --rows $rowre" >&2; exit 2; }

conds=(quiet)
((contention)) && conds=(quiet busy)
sides=(tent ferry)
((classic)) && sides=(tent classic ferry)

if ((plan)); then
  for ((round = 1; round <= rounds; round++)); do
    for r in "${rows[@]}"; do
      read -r name tr size batch <<<"$r"
      for cond in "${conds[@]}"; do
        for side in "${sides[@]}"; do
          [[ $side == classic && $tr != tcp ]] && continue
          echo "round $round $name $cond $side"
        done
      done
    done
  done
  exit 0
fi

[[ -n $out ]] || out=$(mktemp -d "/tmp/tent-compare-$(date +%Y%m%d-%H%M%S)-XXXX")
mkdir -p "$out"
out=$(cd "$out" && pwd) # absolute: the line probe is built from the repository's root
results=$out/results.tsv
printf 'round\trow\tcond\tside\tgbps\tp50_us\tp99_us\tavg_us\tbase_p50_us\tbase_gbps\tcsw_per_req\tcsw_detail\n' >"$results"

spinners=()
tgt_pid=""
cleanup() {
  stop_spinners
  stop_target
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_spinners() {
  local cpu
  for cpu in $(seq 0 $(($(nproc) - 1))); do
    taskset -c "$cpu" sh -c 'while :; do :; done' &
    spinners+=($!)
  done
}
stop_spinners() {
  local p
  for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${spinners[@]}"; do wait "$p" 2>/dev/null || true; done
  spinners=()
}

stop_target() {
  [[ -n $tgt_pid ]] || return 0
  kill -INT "$tgt_pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$tgt_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$tgt_pid" 2>/dev/null || true
  wait "$tgt_pid" 2>/dev/null || true
  tgt_pid=""
}

# run_tebench BACKEND TRANSPORT SIZE BATCH LOG: one tebench pair; prints
# "gbps avg_us p99_us" of its result line.
run_tebench() {
  local backend=$1 tr=$2 size=$3 batch=$4 log=$5
  local buf=$((size * batch * threads))
  ((buf < 64 << 20)) && buf=$((64 << 20))
  local xport=(--xport_type="$tr")
  [[ $backend == classic ]] && xport=()
  "$tebench" --backend="$backend" "${xport[@]}" --seg_type=DRAM --total_buffer_size="$buf" >"$log.target" 2>&1 &
  tgt_pid=$!
  local seg="" _
  for _ in $(seq 300); do
    seg=$(sed 's/\x1b\[[0-9;]*m//g' "$log.target" | grep -o -- '--target_seg_name=[^ ]*' | head -1 | cut -d= -f2 || true)
    [[ -n $seg ]] && break
    kill -0 "$tgt_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $seg ]]; then
    echo "tent-compare: the $backend tebench target printed no segment name (log $log.target)" >&2
    stop_target
    return 1
  fi
  local rc=0
  "$tebench" --backend="$backend" "${xport[@]}" --seg_type=DRAM --target_seg_name="$seg" \
    --op_type="$op" --total_buffer_size="$buf" \
    --start_block_size="$size" --max_block_size="$size" \
    --start_batch_size="$batch" --max_batch_size="$batch" \
    --start_num_threads="$threads" --max_num_threads="$threads" \
    --duration="$duration" >"$log" 2>&1 || rc=$?
  stop_target
  # The result line follows the dashes: BlkSize Batch BW AvgInst AvgLat AvgTx P99 P999.
  local line
  line=$(awk -v s="$size" -v b="$batch" '$1 == s && $2 == b && NF >= 8 { print $3, $6, $7 }' "$log" | tail -1)
  if ((rc != 0)) || [[ -z $line ]]; then
    echo "tent-compare: tebench $backend $tr size $size batch $batch failed (exit $rc, log $log)" >&2
    return 1
  fi
  echo "$line"
}

# run_ferry TRANSPORT SIZE BATCH BASELINE LOG: one ferry bench; prints its
# JSON row.
run_ferry() {
  local tr=$1 size=$2 batch=$3 baseline=$4 log=$5
  local nb=(--no-baseline)
  ((baseline)) && nb=()
  "$ferry" bench --transport "$tr" --op "$op" --size "$size" --batch "$batch" --threads "$threads" \
    --duration "${duration}s" --warmup 500ms --json "${nb[@]}" >"$log" 2>"$log.stderr" || {
    echo "tent-compare: ferry bench $tr size $size batch $batch failed (log $log.stderr)" >&2
    return 1
  }
  tail -1 "$log"
}

record() { # round row cond side gbps p50 p99 avg base_p50 base_gbps csw detail
  local IFS=$'\t'
  echo "$*" >>"$results"
}

# The machine's core-to-core latency, before each row: on a KVM guest the
# host may move the vCPUs, and a cache line's round trip between them was
# seen to change from about 950 ns to 225 ns and back within minutes on
# the same 2-vCPU AMD EPYC guest, changing Ferry's small rows (two
# processes hand each request over) by up to half while TENT's, which run
# in one thread, did not move. sdk/ring's BenchmarkLinePingPong measures
# it (two threads, one word each way); its test binary is built once.
probe=$out/ring.test
linert=$out/linert.tsv
if ! (cd "$(dirname "$0")/.." && go test -c -o "$probe" ./sdk/ring) >/dev/null 2>&1; then
  echo "tent-compare: could not build sdk/ring's test binary (go test -c ./sdk/ring): no line round trips" >&2
  probe=
fi
printf 'round\trow\tns\n' >"$linert"
line_rt() { # round row: prints the line round trip in ns, records it
  [[ -n $probe ]] || return 0
  local ns
  # A probe that fails costs its figure, not the campaign (set -e).
  ns=$("$probe" -test.run '^$' -test.bench '^BenchmarkLinePingPong$' -test.benchtime 300ms 2>/dev/null |
    awk '!n && $1 ~ /^BenchmarkLinePingPong/ {print $3; n = 1}') || true
  [[ -n $ns ]] || return 0
  printf '%s\t%s\t%s\n' "$1" "$2" "$ns" >>"$linert"
  printf '  round %d %-12s line round trip %s ns\n' "$1" "$2" "$ns"
}

echo "tent-compare: $rounds round(s), ${duration}s per run, $threads thread(s), op $op, $(nproc) CPUs; load now: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tent-compare: tebench $tebench; ferry $ferry; raw results in $out"
((contention)) && echo "tent-compare: contention: one 'taskset -c CPU sh -c \"while :; do :; done\"' per CPU ($(nproc)), nice 0, beside the busy runs"
n=0
for ((round = 1; round <= rounds; round++)); do
  for r in "${rows[@]}"; do
    read -r name tr size batch <<<"$r"
    line_rt "$round" "$name"
    order=("${sides[@]}")
    if ((round % 2 == 0)); then # the other side first in even rounds
      order=()
      for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done
    fi
    for cond in "${conds[@]}"; do
      [[ $cond == busy ]] && start_spinners
      for side in "${order[@]}"; do
        [[ $side == classic && $tr != tcp ]] && continue
        n=$((n + 1))
        log=$out/r$round-$name-$cond-$side.log
        case $side in
          tent | classic)
            if res=$(run_tebench "$side" "$tr" "$size" "$batch" "$log"); then
              read -r gbps avg p99 <<<"$res"
              record "$round" "$name" "$cond" "$side" "$gbps" "" "$p99" "$avg" "" "" "" ""
              printf '  round %d %-12s %-5s %-7s %8.3f GB/s  avg %s us  p99 %s us\n' "$round" "$name" "$cond" "$side" "$gbps" "$avg" "$p99"
            fi
            ;;
          ferry)
            base=0
            [[ $name == tcp-4k-b1 ]] && base=1
            if js=$(run_ferry "$tr" "$size" "$batch" "$base" "$log"); then
              fields=$(python3 -c '
import json, sys
r = json.loads(sys.argv[1])
c = r.get("ctx_switches_per_req") or {}
detail = ",".join("%s=%.3g" % (k, v) for k, v in sorted(c.items()))
print("|".join(str(x) for x in (r["gbps"], r["p50_us"], r["p99_us"], "", r.get("baseline_p50_us") or "",
      r.get("baseline_gbps") or "", "%.4g" % sum(c.values()) if c else "", detail, r["verified"])))' "$js")
              IFS='|' read -r gbps p50 p99 _avg bp50 bgbps csw detail verified <<<"$fields"
              if [[ $verified != True ]]; then
                echo "tent-compare: ferry bench $name was not verified (log $log)" >&2
              fi
              record "$round" "$name" "$cond" ferry "$gbps" "$p50" "$p99" "" "$bp50" "$bgbps" "$csw" "$detail"
              printf '  round %d %-12s %-5s %-7s %8.3f GB/s  p50 %.1f us  p99 %.1f us  csw/req %s%s\n' "$round" "$name" "$cond" ferry "$gbps" "$p50" "$p99" "$csw" \
                "$([[ -n $bp50 ]] && printf '  raw-go-tcp p50 %.1f us' "$bp50")"
            fi
            ;;
        esac
      done
      [[ $cond == busy ]] && stop_spinners
    done
  done
done

python3 - "$results" "$contention" "$linert" <<'EOF'
import csv, statistics, sys
from collections import defaultdict

path, contention, linert = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
runs = list(csv.DictReader(open(path), delimiter="\t"))
order = []
by = defaultdict(list)  # (row, cond, side) -> [run]
for r in runs:
    if r["row"] not in order:
        order.append(r["row"])
    by[(r["row"], r["cond"], r["side"])].append(r)

def f(x):
    return float(x) if x not in ("", None) else None

def stat(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    if len(xs) == 1:
        return "%.3g" % xs[0]
    return "%.3g [%.3g–%.3g]" % (statistics.median(xs), min(xs), max(xs))

def ratio_by_round(row, cond, num, den):
    a = {r["round"]: f(r["gbps"]) for r in by[(row, cond, num)]}
    b = {r["round"]: f(r["gbps"]) for r in by[(row, cond, den)]}
    return [a[k] / b[k] for k in a if k in b and b[k]]

print()
print("Median [min–max] over rounds; GB/s = 10^9 B/s; Ferry/TENT ratio per round, then its median.")
cols = ["row", "cond", "TENT GB/s", "Ferry GB/s", "Ferry/TENT", "Ferry p50 us", "Ferry p99 us", "TENT avg/p99 us", "Ferry csw/req"]
has_classic = any(k[2] == "classic" for k in by)
if has_classic:
    cols[3:3] = ["classic GB/s"]
    cols.insert(6, "Ferry/classic")
table = [cols]
conds = ["quiet", "busy"] if contention else ["quiet"]
for row in order:
    for cond in conds:
        t, fe, cl = by[(row, cond, "tent")], by[(row, cond, "ferry")], by[(row, cond, "classic")]
        line = [row, cond, stat([f(r["gbps"]) for r in t]), stat([f(r["gbps"]) for r in fe]),
                stat(ratio_by_round(row, cond, "ferry", "tent")),
                stat([f(r["p50_us"]) for r in fe]), stat([f(r["p99_us"]) for r in fe]),
                "%s / %s" % (stat([f(r["avg_us"]) for r in t]), stat([f(r["p99_us"]) for r in t])),
                stat([f(r["csw_per_req"]) for r in fe])]
        if has_classic:
            line[3:3] = [stat([f(r["gbps"]) for r in cl])]
            line.insert(6, stat(ratio_by_round(row, cond, "ferry", "classic")))
        table.append(line)
w = [max(len(l[i]) for l in table) for i in range(len(cols))]
for l in table:
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)).rstrip())

for cond in conds:
    fe = by[("tcp-4k-b1", cond, "ferry")]
    if fe:
        p50 = [f(r["p50_us"]) for r in fe]
        bp50 = [f(r["base_p50_us"]) for r in fe]
        rat = [a / b for a, b in zip(p50, bp50) if a is not None and b]
        print("\ntcp-4k-b1 %s: Ferry p50 %s us, raw-go-tcp baseline p50 %s us (same ferry bench run), Ferry/raw p50 %s (target: at most 2)"
              % (cond, stat(p50), stat(bp50), stat(rat)))

if contention:
    print("\nUnder contention (busy/quiet throughput, per round, then median [min–max]; target: at least 0.5):")
    for row in order:
        for side in ("tent", "ferry"):
            q = {r["round"]: f(r["gbps"]) for r in by[(row, "quiet", side)]}
            b = {r["round"]: f(r["gbps"]) for r in by[(row, "busy", side)]}
            rs = [b[k] / q[k] for k in b if k in q and q[k]]
            extra = ""
            if side == "ferry":
                extra = "  p50/p99 quiet %s / %s us, busy %s / %s us" % (
                    stat([f(r["p50_us"]) for r in by[(row, "quiet", side)]]), stat([f(r["p99_us"]) for r in by[(row, "quiet", side)]]),
                    stat([f(r["p50_us"]) for r in by[(row, "busy", side)]]), stat([f(r["p99_us"]) for r in by[(row, "busy", side)]]))
            print("  %-12s %-5s %s%s" % (row, side, stat(rs), extra))

rts = list(csv.DictReader(open(linert), delimiter="\t"))
if rts:
    print("\nLine round trip between the two threads of sdk/ring's BenchmarkLinePingPong, before each row (ns):")
    print("  all rows: %s; per round: %s" % (stat([f(r["ns"]) for r in rts]),
          ", ".join("%s: %s" % (k, stat([f(r["ns"]) for r in rts if r["round"] == k])) for k in sorted({r["round"] for r in rts}, key=int))))

print("\nFerry's context switches per request, per process (median over rounds):")
for row in order:
    for cond in conds:
        per = defaultdict(list)
        for r in by[(row, cond, "ferry")]:
            for kv in filter(None, r["csw_detail"].split(",")):
                k, v = kv.split("=")
                per[k].append(float(v))
        if per:
            print("  %-12s %-5s %s" % (row, cond, " ".join("%s=%.3g" % (k, statistics.median(v)) for k, v in sorted(per.items()))))
EOF
echo "tent-compare: raw results in $results"
