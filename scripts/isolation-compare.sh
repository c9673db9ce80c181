#!/usr/bin/env bash
# isolation-compare.sh: issue 13's isolation check, `ferry bench --qos
# default` over tcp and shm, for two or more arms run alternated (A B A B
# A B), printing per arm and transport the HIGH 4 KiB p99 alone and mixed,
# the leakage (mixed p99 / alone p99, the median of each run's rounds) and
# LOW's GB/s beside it, each as median [min-max] over the runs.
#
#   scripts/isolation-compare.sh [RUNS]           # default 3 runs per arm
#
# Arms (ARMS, space-separated NAME=BIN:CONFIG[:ENV], BIN a directory
# holding ferry and its plugins, CONFIG the engines' config for both the
# initiator and the target, ENV optional VAR=VALUE settings, separated by
# commas, for the run's environment, e.g. GOMAXPROCS=4). By default two:
#   before  BASE's binaries (git revision, default main; built into a
#           temporary directory) on BASE's bench/scenarios/engines/isolation.hcl
#   after   this tree's bin/ (run `make build` first) on its isolation.hcl
#   poller  the same with the tcp plugin's priority_thread = false (its
#           priority readers wait in the Go runtime's poller, as before)
#   nobuf   the same as after without the tcp plugin's bulk_buffer (the
#           kernel sizes the bulk connections' socket buffers)
# e.g. a config-only comparison on this tree's binaries:
#   ARMS="off=bin:/tmp/off.hcl on=bin:bench/scenarios/engines/isolation.hcl" \
#     scripts/isolation-compare.sh 5
#
# SCENARIO (default "default") is passed to --qos. Each run's JSON rows
# stay in OUT (default a temporary directory, printed at the end). Say the
# load average (printed before and after) next to the figures.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
base=${BASE:-main}
scenario=${SCENARIO:-default}
out=${OUT:-$(mktemp -d /tmp/isolation-compare.XXXXXX)}
mkdir -p "$out"

if [ -z "${ARMS:-}" ]; then
	bdir="$out/base"
	if [ ! -x "$bdir/bin/ferry" ]; then
		rm -rf "$bdir" && mkdir -p "$bdir/bin"
		git -C "$root" archive "$base" | tar -x -C "$bdir"
		(cd "$bdir" && for p in ferry plugins/tcp/cmd/ferry-plugin-tcp plugins/shm/cmd/ferry-plugin-shm; do
			if [ "$p" = ferry ]; then go build -o bin/ferry ./cmd/ferry; else go build -o "bin/$(basename "$p")" "./$p"; fi
		done)
	fi
	sed '/^plugin "tcp"/,/^}/ s/^  config {/  config {\n    priority_thread = false/' \
		"$root/bench/scenarios/engines/isolation.hcl" >"$out/poller.hcl"
	sed '/^plugin "tcp"/,/^}/ {/^    bulk_buffer /d}' \
		"$root/bench/scenarios/engines/isolation.hcl" >"$out/nobuf.hcl"
	ARMS="before=$bdir/bin:$bdir/bench/scenarios/engines/isolation.hcl after=$root/bin:$root/bench/scenarios/engines/isolation.hcl poller=$root/bin:$out/poller.hcl nobuf=$root/bin:$out/nobuf.hcl"
fi

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= runs; i++)); do
	for arm in $ARMS; do
		name=${arm%%=*}
		spec=${arm#*=}
		bin=${spec%%:*}
		cfg=${spec#*:}
		envs=
		if [[ $cfg == *:* ]]; then
			envs=${cfg#*:}
			cfg=${cfg%%:*}
		fi
		case $bin in /*) ;; *) bin="$root/$bin" ;; esac
		case $cfg in /*) ;; *) cfg="$root/$cfg" ;; esac
		f="$out/$name.$i.json"
		if ! env ${envs//,/ } "$bin/ferry" bench --qos "$scenario" --config "$cfg" --target-config "$cfg" --json >"$f" 2>"$out/$name.$i.err"; then
			echo "run $i of arm $name failed: see $out/$name.$i.err" >&2
			tail -3 "$out/$name.$i.err" >&2
			continue
		fi
		echo "run $i $name done (load $(cut -d' ' -f1 /proc/loadavg))"
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" $ARMS <<'EOF'
import glob, json, statistics, sys
out, arms = sys.argv[1], [a.split("=", 1)[0] for a in sys.argv[2:]]
def fmt(xs, f="%.3g"):
    if not xs:
        return "-"
    return (f + " [" + f + "-" + f + "]") % (statistics.median(xs), min(xs), max(xs))
print("| transport | arm | runs | HIGH p99 alone us | HIGH p99 mixed us | leakage | LOW GB/s |")
print("|---|---|---|---|---|---|---|")
for tr in ("tcp", "shm"):
    for arm in arms:
        alone, mixed, leak, low = [], [], [], []
        for f in sorted(glob.glob(f"{out}/{arm}.*.json")):
            for line in open(f):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if r.get("transport") != tr or "isolation" not in r:
                    continue
                iso = r["isolation"]
                alone.append(statistics.median(iso["alone_p99_us"]))
                mixed.append(statistics.median(iso["mixed_p99_us"]))
                leak.append(iso["leakage_median"])
                low += [c["gbps"] for c in r["classes"] if c["class"] == "low"]
        print(f"| {tr} | {arm} | {len(leak)} | {fmt(alone)} | {fmt(mixed)} | {fmt(leak)} | {fmt(low)} |")
print(f"(JSON rows in {out})")
EOF
