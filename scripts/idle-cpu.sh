#!/usr/bin/env bash
# Measures what an idle engine and its plugins cost: starts `ferry run`
# (an engine with its tcp and shm plugins and 64 MiB exposed), lets it
# settle, then reads over a window, for the engine and every child, the
# CPU time (utime+stime from /proc/<pid>/stat) and the context switches
# (voluntary and involuntary, summed over /proc/<pid>/task/*). It prints
# each process's share of one core and its switches a second, and their
# totals. With several runs (a fresh engine each) it reports the median
# total: on a busy machine the CPU figure is noisy, the switches are not.
# It fails (exit 1) when the median total CPU reaches IDLE_CPU_LIMIT
# percent of a core (default 0.5).
#
#   scripts/idle-cpu.sh [seconds [runs]]   (default 10 s, 1 run; needs `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-10}
runs=${2:-1}
limit=${IDLE_CPU_LIMIT:-0.5}
tick=$(getconf CLK_TCK)

# sample prints "pid ticks switches name" for each process of the engine.
sample() {
	local p name
	for p in "$1" $(pgrep -P "$1" || true); do
		name=engine
		[ "$p" != "$1" ] && name=$(tr '\0' ' ' <"/proc/$p/cmdline" | awk '{ n = $1; sub(".*/", "", n); sub("^ferry-(plugin|device)-", "", n); print n }')
		set -- "$1" $(cut -d')' -f2 "/proc/$p/stat")
		echo "$p $((${13} + ${14})) $(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }') $name"
	done
}

totals=()
for run in $(seq "$runs"); do
	coproc ENGINE { exec ./bin/ferry run --name "idle-probe-$$-$run" --expose 64MiB --control-stdin --log-level error; }
	read -r _ <&"${ENGINE[0]}"
	pid=$ENGINE_PID
	sleep 2
	before=$(sample "$pid")
	sleep "$window"
	after=$(sample "$pid")
	echo "run $run of $runs, window ${window}s:"
	total=$(join <(echo "$before" | sort) <(echo "$after" | sort) | awk -v t="$tick" -v w="$window" '
		{ cpu = 100 * ($5 - $2) / t / w; cs = ($6 - $3) / w; C += cpu; S += cs
		  printf "  %-8s pid %-7d CPU %6.3f%% of a core  %7.1f context switches/s\n", $7, $1, cpu, cs > "/dev/stderr" }
		END { printf "  %-8s %11s CPU %6.3f%% of a core  %7.1f context switches/s\n", "total", "", C, S > "/dev/stderr"; printf "%.3f %.1f\n", C, S }')
	totals+=("$total")
	eval "exec ${ENGINE[1]}>&-"
	wait "$pid"
done 2>&1
cpus=$(printf '%s\n' "${totals[@]}" | awk '{ print $1 }' | sort -n)
css=$(printf '%s\n' "${totals[@]}" | awk '{ print $2 }' | sort -n)
m=$(((runs + 1) / 2))
cpu=$(echo "$cpus" | sed -n "${m}p")
cs=$(echo "$css" | sed -n "${m}p")
ok=$(awk -v c="$cpu" -v l="$limit" 'BEGIN { print (c < l) ? "yes" : "NO" }')
echo "idle CPU: $cpu% of one core, $cs context switches/s (median of $runs runs of ${window}s; CPU of each run: $(echo $cpus)); under $limit%: $ok"
[ "$ok" = yes ]
