#!/usr/bin/env bash
# Compares BenchmarkBlockSubmit (host/path_bench_test.go) between an old
# revision and the working tree: builds host's test binary for each (the
# old one from `git archive REV`, with this tree's benchmark file copied
# in, so that both run the same benchmark), runs them interleaved (each
# first in every other round) and prints, per row, the median and min-max of ns/request, of
# the submitting thread's cpu-ns/request and of done-ns/request (until the
# batch completed), with allocs/request, for each build.
#
#   scripts/block-submit-compare.sh [--old REV] [--runs 3] [--bench 'BlockSubmit/shm/'] [--benchtime 20x]
#
# Run it on a quiet machine (the load average is printed with each run):
# a run of the shm rows takes about 15 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=7c8dce7 runs=3 bench='BlockSubmit/shm/' benchtime=20x
. "$root/scripts/ab-build.sh"
ab_options "$@"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ab_build "$root" "$old" "$tmp" host/path_bench_test.go # both run this tree's benchmark
ab_runs "$root" "$tmp" "$runs" "$bench" "$benchtime"
for f in "$tmp"/out.*; do
	r=${f#"$tmp"/out.}
	awk -v b="${r#*.}" '/^Benchmark/ { row = $1; sub(/-[0-9]+$/, "", row); delete v; for (i = 3; i < NF; i++) v[$(i+1)] = $i; print b, row, v["ns/request"], v["cpu-ns/request"], v["allocs/request"], (("done-ns/request" in v) ? v["done-ns/request"] : "-") }' "$f" >>"$tmp/rows"
done
python3 - "$tmp/rows" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    b, row, ns, cpu, allocs, done = line.split()
    rows.setdefault(row, {}).setdefault(b, []).append((float(ns), float(cpu), float(allocs), float("nan") if done == "-" else float(done)))
def med(v):
    v = sorted(x for x in v if x == x)
    if not v:
        return "-"
    return "%.1f [%.1f-%.1f]" % (v[(len(v) - 1) // 2], v[0], v[-1])
for row in rows:
    for b in ("old", "new"):
        if b in rows[row]:
            r = rows[row][b]
            print("%-46s %s  ns/request %-24s cpu-ns/request %-24s done-ns/request %-24s allocs/request max %g" % (
                row, b, med([x[0] for x in r]), med([x[1] for x in r]), med([x[3] for x in r]), max(x[2] for x in r)))
PY
