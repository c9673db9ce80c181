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
