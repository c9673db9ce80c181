#!/usr/bin/env bash
# Compares admission's cost on the unloaded 4 KiB path between a base
# revision and this tree: BenchmarkQoSCost (an engine without a qos block
# and one with a qos block that bounds nothing, side by side, their rounds
# alternated in one run) for each build, the builds alternated too (base,
# tree, base, tree...). The base gets this tree's benchmark file, so that
# both run the same benchmark.
#
#   scripts/qos-cost.sh [--base REV] [--runs 3] [--benchtime 2s]
#
# Each run prints the benchmark's lines (on/off is the median over its
# rounds of on's wall time over off's, off2/off the same for a second
# engine without a qos block: the A/A arm, what noise makes of two
# identical arms; *-cpu-ns/req is the process's CPU per request during
# each arm's turns). The end prints, per build and shape, the median
# [min-max] over runs of on/off, of off2/off, and of the on-off and
# off2-off CPU gaps per request. Run it on a quiet machine: a run takes
# about a minute and a half.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=main runs=3 benchtime=2s
while [ $# -gt 0 ]; do
	case $1 in
	--base) base=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--benchtime) benchtime=$2; shift 2 ;;
	*) echo "qos-cost.sh: unknown argument $1; see the comment at the top of $0" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/scripts/ab-build.sh"
ab_build "$root" "$base" "$tmp" host/qos_cost_bench_test.go host/qos_bench_test.go
for r in $(seq "$runs"); do
	for v in base tree; do
		dir=$(ab_dir "$root" "$tmp" "$v")
		echo "== $v ($( [ "$v" = base ] && echo "$base" || echo "working tree")), run $r of $runs, load $(cut -d' ' -f1-3 /proc/loadavg)"
		(cd "$dir" && "$tmp/$v.test" -test.run '^$' -test.bench 'QoSCost' -test.benchtime "$benchtime" 2>&1) |
			grep -E '^BenchmarkQoSCost/' | tee -a "$tmp/$v.out"
	done
done
echo "== summary over $runs runs: median [min-max]"
for v in base tree; do
	awk -v build="$v" '
	function med(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return sprintf("%.4g [%.4g-%.4g]", (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2, a[1], a[n])
	}
	{
		shape = $1; sub(/^BenchmarkQoSCost\//, "", shape); sub(/-[0-9]+$/, "", shape)
		for (i = 2; i < NF; i++) { m[$(i+1)] = $i }
		k = ++n[shape]
		ratio[shape, k] = m["on/off"]; gap[shape, k] = m["on-cpu-ns/req"] - m["off-cpu-ns/req"]
		offns[shape, k] = m["off-ns/req"]; onns[shape, k] = m["on-ns/req"]
		# The A/A arm; a base whose benchmark has none reads 0.
		aa[shape, k] = m["off2/off"] + 0; aagap[shape, k] = m["off2-cpu-ns/req"] - m["off-cpu-ns/req"]
	}
	END {
		for (s in n) {
			delete a; delete b; delete c; delete d; delete e; delete f
			for (k = 1; k <= n[s]; k++) { a[k] = ratio[s, k]; b[k] = gap[s, k]; c[k] = offns[s, k]; d[k] = onns[s, k]; e[k] = aa[s, k]; f[k] = aagap[s, k] }
			printf "%s %-8s on/off %s  off2/off (A/A) %s  off ns/req %s  on ns/req %s  on-off cpu ns/req %s  off2-off cpu ns/req %s\n", build, s, med(a, n[s]), med(e, n[s]), med(c, n[s]), med(d, n[s]), med(b, n[s]), med(f, n[s])
		}
	}' "$tmp/$v.out"
done
