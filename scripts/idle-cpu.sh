#!/usr/bin/env bash
# Measures what an idle engine and its plugins cost: starts `ferry run`
# (an engine with its TCP plugin and 64 MiB exposed), lets it settle, then
# reads the CPU time (utime+stime from /proc/<pid>/stat) of the engine and
# every child over a window. Prints the percentage of one core.
#
#   scripts/idle-cpu.sh [seconds]      (default 10; needs `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-10}
tick=$(getconf CLK_TCK)
coproc ENGINE { exec ./bin/ferry run --name idle-probe-$$ --expose 64MiB --control-stdin; }
read -r ready <&"${ENGINE[0]}"
pid=$ENGINE_PID
sleep 2
pids() { echo "$pid" $(pgrep -P "$pid" || true); }
cpu() { local s=0; for p in $(pids); do set -- $(cut -d')' -f2 "/proc/$p/stat"); s=$((s + ${12} + ${13})); done; echo $s; }
before=$(cpu)
sleep "$window"
after=$(cpu)
for p in $(pids); do echo "  pid $p $(tr "\0" " " < /proc/$p/cmdline | cut -c1-60)"; done
echo "processes: $(pids | wc -w) (engine + plugins); window ${window}s"
awk -v d=$((after - before)) -v t="$tick" -v w="$window" 'BEGIN { printf "idle CPU: %.3f%% of one core (%d ticks of 1/%ds)\n", 100*d/t/w, d, t }'
eval "exec ${ENGINE[1]}>&-"
wait "$pid"
