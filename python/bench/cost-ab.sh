#!/usr/bin/env bash
# cost-ab.sh: cost.py against two builds of the repository, alternated
# (A B A B ...), so that a change to the call path is measured against its
# base in one campaign on one machine's load.
#
#   python/bench/cost-ab.sh A_DIR B_DIR [RUNS] [cost.py arguments...]
#
# Each DIR is a checkout with `make build` done (bin/libferry.so, the
# plugins); its own python/bench/cost.py and python/ferry run against its
# own library and plugins, and its gocost is built from its own host
# package (into DIR/bin/gocost), so each side is that build whole. RUNS
# (default 3) runs of each; the cost.py arguments default to
# "--rounds 30 --calls 5000". For the base of a branch:
#
#   git archive BASE | tar -x -C /tmp/base && make -C /tmp/base build
#   python/bench/cost-ab.sh /tmp/base . 3 --rounds 30 --calls 5000
#
# It prints each run's summary lines, then, per build, the median and the
# min-max over its runs of python-go, raw-go and python-raw (each run's
# figure is the median of its paired rounds), with the load average.
set -euo pipefail

a=$(cd "$1" && pwd)
b=$(cd "$2" && pwd)
runs=${3:-3}
shift 2
[ $# -gt 0 ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--rounds 30 --calls 5000)

for d in "$a" "$b"; do
	[ -f "$d/bin/libferry.so" ] || { echo "cost-ab.sh: $d/bin/libferry.so is missing; run make build in $d" >&2; exit 2; }
	(cd "$d" && go build -o bin/gocost ./python/bench/gocost)
done

# The summary lines of cost.py's modes (transfer, batch, percall).
lines='^(go|python|raw|python-go|python-raw|raw-go)( (mean|p10|p50))?( ?, rounds both fast)? +median|^context'
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$runs"); do
	for side in A B; do
		d=$a
		[ $side = B ] && d=$b
		echo "== run $r, $side ($d), load $(cut -d' ' -f1-3 /proc/loadavg)"
		FERRY_LIB=$d/bin/libferry.so FERRY_PLUGIN_DIR=$d/bin FERRY_LOG_LEVEL=${FERRY_LOG_LEVEL:-error} \
			/usr/bin/python3 "$d/python/bench/cost.py" --gocost "$d/bin/gocost" "${args[@]}" >"$out/$side.$r" 2>&1 ||
			{ cat "$out/$side.$r"; exit 1; }
		grep -E "$lines" "$out/$side.$r"
	done
done

echo "== summary: per build, median [min-max] over $runs runs of each run's median of paired rounds (ns per call)"
for side in A B; do
	cat "$out/$side".* | grep -E "$lines" | grep -v '^context' | sed 's/ *median */|/' | awk -F'|' -v side=$side '
		{ split($2, f, " "); k = $1; v[k] = v[k] " " f[1] }
		END { for (k in v) print side "|" k "|" v[k] }' | sort | while IFS='|' read -r s k vs; do
		printf '%s %-32s %s\n' "$s" "$k" "$(printf '%s\n' $vs | sort -g | awk '{ x[NR] = $1 } END { m = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2; printf "%8.0f [%.0f..%.0f] (%d runs)", m, x[1], x[NR], NR }')"
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
