#!/usr/bin/env bash
# Runs `ferry bench` for 2 or 3 builds over issue 10's main rows (tcp and
# shm; 4KiB, 64KiB, 1MiB, 64MiB; batch 1 and 128; threads 1 and 2),
# interleaved, and prints median and min–max per build and row. The raw
# JSON lines go to --out (default bench-compare-<time>.jsonl here).
#
#   scripts/bench-compare.sh --bin old=/tmp/base/bin --bin new=bin \
#       [--runs 3] [--duration 2s] [--rows 'shm/.*/64MiB'] [--ops write,read] [--plan]
#
# Each PATH is a directory holding ferry and its plugins (`make build`
# leaves them in bin/). Rows that cannot fit in memory are skipped with the
# reason printed. Run it on a quiet machine: it takes about 9 s per run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/bench-compare" ./scripts/bench-compare)
"$tmp/bench-compare" "$@"
