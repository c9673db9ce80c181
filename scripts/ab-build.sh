# ab-build.sh: sourced by the scripts that compare a benchmark of host's
# between a base revision and the working tree (metrics-cost.sh,
# qos-cost.sh, block-submit-compare.sh).
#
#   ab_build ROOT REV TMP [FILE...]
#
# extracts REV (git archive) into TMP/base, copies each FILE (a path in
# ROOT, e.g. host/metrics_bench_test.go) over it, so that both builds run
# the same benchmark, and builds host's test binary of each: TMP/base.test
# from the base and TMP/tree.test from ROOT's working tree. A benchmark
# binary runs from its own tree's host directory: TMP/base/host or
# ROOT/host (ab_dir).
ab_build() {
	local root=$1 rev=$2 tmp=$3 f
	shift 3
	mkdir "$tmp/base"
	git -C "$root" archive "$rev" | tar -x -C "$tmp/base"
	for f in "$@"; do
		cp "$root/$f" "$tmp/base/$f"
	done
	(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./host)
	(cd "$root" && go test -c -o "$tmp/tree.test" ./host)
}

# ab_dir ROOT TMP BUILD prints the host directory BUILD (base or tree)
# runs in.
ab_dir() {
	if [ "$3" = base ]; then echo "$2/base/host"; else echo "$1/host"; fi
}

# ab_options "$@" parses --old REV, --runs N, --bench RE and --benchtime
# T into old, runs, bench and benchtime (the caller sets their defaults
# first); any other argument ends the script.
ab_options() {
	while [ $# -gt 0 ]; do
		case $1 in
		--old) old=$2; shift 2 ;;
		--runs) runs=$2; shift 2 ;;
		--bench) bench=$2; shift 2 ;;
		--benchtime) benchtime=$2; shift 2 ;;
		*) echo "$(basename "$0"): unknown argument $1; see the comment at its top" >&2; exit 2 ;;
		esac
	done
}

# ab_runs ROOT TMP RUNS BENCH BENCHTIME runs BENCH of both builds RUNS
# times, interleaved (old first in odd rounds, new first in even ones),
# and leaves each run's output in TMP/out.ROUND.BUILD (BUILD old or new).
# AB_ENV, when set, is a VAR=VALUE the runs get in their environment.
# The engines' logs go to TMP/log, shown only when a run fails.
ab_runs() {
	local root=$1 tmp=$2 runs=$3 bench=$4 benchtime=$5 r b order dir test
	for r in $(seq "$runs"); do
		order="old new"
		[ $((r % 2)) = 0 ] && order="new old"
		for b in $order; do
			test=tree
			[ "$b" = old ] && test=base
			dir=$(ab_dir "$root" "$tmp" "$test")
			echo "run $r $b: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
			if ! (cd "$dir" && env ${AB_ENV:-} "$tmp/$test.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime") >"$tmp/out.$r.$b" 2>"$tmp/log"; then
				tail -n 40 "$tmp/log" >&2
				cat "$tmp/out.$r.$b" >&2
				exit 1
			fi
		done
	done
}
