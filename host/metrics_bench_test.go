package host_test

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/host"
)

var metricsRounds = flag.Int("metrics.rounds", 9, "BenchmarkRequestPathMetrics: rounds of metrics off, on and off again (A/A), rotated")

// BenchmarkRequestPathMetrics is the metrics' cost on the request path:
// BenchmarkRequestPath's workload (4 KiB writes in batches of 128 through
// the shm plugin to the engine's own segment) on three engines alive side
// by side: one with metrics off, one with them on, and one with them off
// again (aa, the A/A arm: the noise between two identical engines in the
// same run, against which the gap is read). They run in rounds
// (-metrics.rounds, 9 by default) whose order rotates, so that each
// engine goes first, second and third equally often; b.N requests in
// all. It reports, per request, the median over the rounds of each
// engine's wall time (off-ns/req, on-ns/req, aa-ns/req), the gap
// (gap-ns/req: on − off) and the A/A gap (aa-gap-ns/req: aa − off); the
// process's CPU time (user and system: the engine's, not its plugin's; a
// spinning waiter's counts, so it follows the wall time) and voluntary
// context switches (how often its goroutines parked: the lanes'
// spin-then-sleep); and mallocs (the engine's background goroutines' few
// included: far below one per request, and 0 allocs/op from the request
// path). The log has each figure's min-max. One command, for a quiet
// machine:
//
//	go test -run '^$' -bench RequestPathMetrics -benchtime 270000x ./host
//
// scripts/metrics-cost.sh runs it for a base revision and this tree,
// alternated.
func BenchmarkRequestPathMetrics(b *testing.B) {
	rounds := max(1, *metricsRounds)
	const arms = 3 // off, on, aa (off again)
	var engines [arms]*pathBench
	for v := range engines {
		var opts []host.Option
		if v == 1 {
			opts = append(opts, host.WithMetricsRegistry(prometheus.NewRegistry()))
		}
		engines[v] = newPathBench(b, nil, opts...)
		defer engines[v].close()
	}
	per := max(pathBenchBatch, b.N/(arms*rounds)/pathBenchBatch*pathBenchBatch) // requests per engine per round
	var wall, cpu, vcsw, mallocs [arms][]float64
	var ms runtime.MemStats
	for _, pb := range engines { // warm: what an engine does in its first moments is not the path's
		pb.requests(per)
	}
	b.ResetTimer()
	for r := range rounds {
		for k := range arms {
			v := (r + k) % arms // each engine first in one round of three
			runtime.ReadMemStats(&ms)
			m0 := ms.Mallocs
			u0 := rusage(b)
			t0 := time.Now()
			engines[v].requests(per)
			dt := time.Since(t0)
			u1 := rusage(b)
			runtime.ReadMemStats(&ms)
			n := float64(per)
			wall[v] = append(wall[v], float64(dt.Nanoseconds())/n)
			cpu[v] = append(cpu[v], float64(cpuNs(u1)-cpuNs(u0))/n)
			vcsw[v] = append(vcsw[v], float64(u1.Nvcsw-u0.Nvcsw)/n)
			mallocs[v] = append(mallocs[v], float64(ms.Mallocs-m0)/n)
		}
	}
	b.StopTimer()
	names := [arms]string{"off", "on", "aa"}
	for v := range arms {
		b.ReportMetric(median(wall[v]), names[v]+"-ns/req")
		b.ReportMetric(median(cpu[v]), names[v]+"-cpu-ns/req")
		b.ReportMetric(median(vcsw[v]), names[v]+"-vcsw/req")
		b.ReportMetric(median(mallocs[v]), names[v]+"-allocs/req")
	}
	b.ReportMetric(median(wall[1])-median(wall[0]), "gap-ns/req")
	b.ReportMetric(median(cpu[1])-median(cpu[0]), "gap-cpu-ns/req")
	b.ReportMetric(median(wall[2])-median(wall[0]), "aa-gap-ns/req")
	b.ReportMetric(median(cpu[2])-median(cpu[0]), "aa-gap-cpu-ns/req")
	var log strings.Builder
	fmt.Fprintf(&log, "%d rounds of %d requests per engine; median [min-max]:", rounds, per)
	for v := range arms {
		fmt.Fprintf(&log, "\n  metrics %-3s wall %s ns/req, cpu %s ns/req, vcsw %s /req, mallocs %s /req",
			names[v], spread(wall[v]), spread(cpu[v]), spread(vcsw[v]), spread(mallocs[v]))
	}
	b.Log(log.String())
}

func rusage(b *testing.B) syscall.Rusage {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return u
}

func cpuNs(u syscall.Rusage) int64 { return u.Utime.Nano() + u.Stime.Nano() }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(xs []float64) string {
	return fmt.Sprintf("%.4g [%.4g-%.4g]", median(xs), slices.Min(xs), slices.Max(xs))
}
