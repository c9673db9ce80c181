#!/usr/bin/env bash
# Compares the metrics' cost on the request path between a base revision
# and this tree: BenchmarkRequestPathMetrics (metrics off, on, and off
# again on three engines side by side, in rotated rounds, one run; median
# per engine, the gap on - off and the A/A gap aa - off, the noise between
# two identical engines) for each build, the builds alternated too (base,
# tree, base, tree...). The base gets this tree's benchmark files, so that
# both run the same benchmark.
#
#   scripts/metrics-cost.sh [--base REV] [--runs 3] [--benchtime 270000x] [--rounds 9]
#
# Each run prints the engines' medians and min-max per request (wall,
# CPU of the engine process, voluntary context switches, mallocs) and the
# benchmark line with the gaps. The first block of each run is Go's
# one-iteration probe of the benchmark; read the second. At the end, per
# build: the gap and the A/A gap over the runs, median [min-max]. The gap
# is within noise when it lies inside the A/A gap's spread. Run it on a
# quiet machine: a run takes about half a minute.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=main runs=3 benchtime=270000x rounds=9
while [ $# -gt 0 ]; do
	case $1 in
	--base) base=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--benchtime) benchtime=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	*) echo "metrics-cost.sh: unknown argument $1; see the comment at the top of $0" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/scripts/ab-build.sh"
ab_build "$root" "$base" "$tmp" host/metrics_bench_test.go host/path_bench_test.go
for r in $(seq "$runs"); do
	for v in base tree; do
		dir=$(ab_dir "$root" "$tmp" "$v")
		echo "== $v ($( [ "$v" = base ] && echo "$base" || echo "working tree")), run $r of $runs, load $(cut -d' ' -f1-3 /proc/loadavg)"
		(cd "$dir" && "$tmp/$v.test" -test.run '^$' -test.bench 'RequestPathMetrics$' -test.benchtime "$benchtime" \
			-metrics.rounds "$rounds" -test.v 2>&1) | grep -E '^BenchmarkRequestPathMetrics-|rounds of|metrics (off|on|aa) ' | tee -a "$tmp/$v.out"
	done
done
# The benchmark line's "value unit" pairs: median [min-max] of each gap
# over the runs, per build.
summary() {
	awk -v unit="$2" '/^BenchmarkRequestPathMetrics-/ { for (i = 3; i < NF; i++) if ($(i+1) == unit) print $i }' "$1" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) { print "none"; exit } m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.0f [%.0f-%.0f] (%d runs)\n", m, v[1], v[NR], NR }'
}
echo "== summary, ns per request: median [min-max] over the runs"
for v in base tree; do
	for u in gap-ns/req aa-gap-ns/req gap-cpu-ns/req aa-gap-cpu-ns/req; do
		printf '%-4s %-18s %s\n' "$v" "$u" "$(summary "$tmp/$v.out" "$u")"
	done
done
