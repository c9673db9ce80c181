#!/usr/bin/env bash
# Compares BenchmarkRequestPath (host/path_bench_test.go: 4 KiB writes,
# one at a time and 128 at a time, over shm and tcp) between an old
# revision and the working tree: builds host's test binary for each (the
# old one from `git archive REV`, with this tree's benchmark file copied
# in, so that both run the same benchmark), runs them interleaved (old,
# new, new, old, ...: each first in every other round) and prints, per
# row, the median and min-max of ns/request, of the test process's
# cpu-ns/request, of its context switches a request and of the plugins'
# cpu-ns/request, for each build, and the per-round ratio old/new of
# ns/request (above 1: the tree is faster).
#
#   scripts/path-compare.sh [--old REV] [--runs 3] [--bench 'RequestPath/transport='] [--benchtime 2s]
#
# Both builds link the plugins of bin/ (`make build`; FERRY_TEST_BINARIES),
# so only the host differs. Run it on a quiet machine (the load average
# is printed with each run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=HEAD runs=3 bench='RequestPath/transport=' benchtime=2s
. "$root/scripts/ab-build.sh"
ab_options "$@"
[ -x "$root/bin/ferry-plugin-shm" ] || { echo "path-compare: run make build first (bin/ holds the plugins both builds use)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ab_build "$root" "$old" "$tmp" host/path_bench_test.go # both run this tree's benchmark
AB_ENV="FERRY_TEST_BINARIES=$root/bin" ab_runs "$root" "$tmp" "$runs" "$bench" "$benchtime"
for f in "$tmp"/out.*; do
	r=${f#"$tmp"/out.}
	awk -v b="${r#*.}" -v r="${r%%.*}" '/^Benchmark/ { row = $1; sub(/-[0-9]+$/, "", row); delete v; for (i = 3; i < NF; i++) v[$(i+1)] = $i; print b, r, row, v["ns/op"], v["cpu-ns/op"], (("csw/op" in v) ? v["csw/op"] : "nan"), (("plugin-cpu-ns/op" in v) ? v["plugin-cpu-ns/op"] : "nan") }' "$f" >>"$tmp/rows"
done
python3 - "$tmp/rows" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    b, r, row, ns, cpu, csw, pcpu = line.split()
    rows.setdefault(row, {}).setdefault(b, {})[r] = (float(ns), float(cpu), float(csw), float(pcpu))
def med(v, f="%.1f"):
    v = sorted(x for x in v if x == x)
    if not v:
        return "-"
    return (f + " [" + f + "-" + f + "]") % (v[(len(v) - 1) // 2], v[0], v[-1])
for row, by in rows.items():
    for b in ("old", "new"):
        if b in by:
            x = list(by[b].values())
            print("%-40s %s  ns/req %-22s cpu-ns/req %-22s csw/req %-24s plugin-cpu-ns/req %s" % (
                row, b, med([y[0] for y in x]), med([y[1] for y in x]), med([y[2] for y in x], "%.3f"), med([y[3] for y in x])))
    if "old" in by and "new" in by:
        ratios = [by["old"][r][0] / by["new"][r][0] for r in by["old"] if r in by["new"]]
        print("%-40s old/new ns per request %s" % (row, med(ratios, "%.3f")))
PY
