package host_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// BenchmarkQoSCost compares the unloaded 4 KiB path with admission off
// (no qos block) and on (a qos block that bounds nothing, qosOn) in one
// run: both engines are up at once, and the arms take turns in rounds
// (off, on, on, off, off, on, ...), so that drift on a loaded machine
// falls on both alike. Two shapes: batch128 (4 KiB writes over shm in
// batches of 128, as BenchmarkRequestPath) and transfer (one 4 KiB
// Transfer at a time).
//
// b.N requests go through each arm; ns/op is the two arms together. The
// figures to read:
//
//	off-ns/req, on-ns/req      wall time per request of each arm
//	on/off                     the median over rounds of on's time / off's
//	off-cpu-ns/req, on-cpu-ns/req
//	                           this process's CPU time (user + system)
//	                           per request during each arm's turns: the
//	                           host's side, which admission adds to
//
// Run it as
//
//	go test -run '^$' -bench BenchmarkQoSCost -benchtime 2s -count 3 ./host/
func BenchmarkQoSCost(b *testing.B) {
	for _, shape := range []string{"batch128", "transfer"} {
		b.Run(shape, func(b *testing.B) { benchQoSCost(b, shape) })
	}
}

// costRounds is how many turns each arm takes per run of the benchmark.
const costRounds = 32

func benchQoSCost(b *testing.B, shape string) {
	off := newCostArm(b, shape, "off", func(*config.Config) {})
	defer off.close()
	on := newCostArm(b, shape, "on", qosOn)
	defer on.close()
	arms := [2]*costArm{off, on}
	for _, a := range arms { // warm: lanes, rails, pools
		a.step(1024)
	}
	per := max(b.N/costRounds, 1)
	var wall, cpu [2]time.Duration
	ratios := make([]float64, 0, costRounds)
	b.ReportAllocs()
	b.ResetTimer()
	for r, done := 0, 0; done < b.N; r++ {
		n := min(per, b.N-done)
		var took [2]time.Duration
		order := [2]int{0, 1}
		if r%2 == 1 {
			order = [2]int{1, 0}
		}
		for _, k := range order {
			c0 := cpuTime()
			t0 := time.Now()
			arms[k].step(n)
			took[k] = time.Since(t0)
			wall[k] += took[k]
			cpu[k] += cpuTime() - c0
		}
		if took[0] > 0 {
			ratios = append(ratios, float64(took[1])/float64(took[0]))
		}
		done += n
	}
	b.StopTimer()
	reqs := float64(b.N)
	b.ReportMetric(float64(wall[0].Nanoseconds())/reqs, "off-ns/req")
	b.ReportMetric(float64(wall[1].Nanoseconds())/reqs, "on-ns/req")
	b.ReportMetric(float64(cpu[0].Nanoseconds())/reqs, "off-cpu-ns/req")
	b.ReportMetric(float64(cpu[1].Nanoseconds())/reqs, "on-cpu-ns/req")
	if len(ratios) > 0 {
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "on/off")
	}
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// costArm is one engine of BenchmarkQoSCost and how it moves n 4 KiB
// requests to its own segment over shm.
type costArm struct {
	e    *host.Engine
	step func(n int)
}

func (a *costArm) close() { a.e.Close() }

func newCostArm(b *testing.B, shape, name string, tune func(*config.Config)) *costArm {
	const size, batch = 4 << 10, 128
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("bench-cost-%s-%s-%d", shape, name, b.N))
	cfg.PluginDir = binDir
	tune(cfg)
	// Quiet: two engines a run print their start-up warnings otherwise.
	e, err := host.New(ctx, cfg, host.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		b.Fatal(err)
	}
	a := &costArm{e: e}
	mem, err := e.Allocate(2 * batch * size)
	if err != nil {
		e.Close()
		b.Fatal(err)
	}
	src, dst := mem[:batch*size], mem[batch*size:]
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		e.Close()
		b.Fatal(err)
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		e.Close()
		b.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		e.Close()
		b.Fatal(err)
	}
	reqs := make([]host.Request, batch)
	for k := range reqs {
		reqs[k] = host.Request{Op: host.Write, Local: src[k*size : (k+1)*size], Segment: seg.ID, Remote: base + uint64(k*size), Transport: "shm"}
	}
	switch shape {
	case "transfer":
		a.step = func(n int) {
			for range n {
				if err := e.Transfer(ctx, reqs[0]); err != nil {
					b.Fatal(err)
				}
			}
		}
	default:
		a.step = func(n int) {
			for done := 0; done < n; done += batch {
				k := min(batch, n-done)
				id, err := e.AllocateBatch(batch)
				if err != nil {
					b.Fatal(err)
				}
				if err := e.Submit(id, reqs[:k]...); err != nil {
					b.Fatal(err)
				}
				if err := e.Wait(ctx, id); err != nil {
					b.Fatal(err)
				}
				if bs, _ := e.BatchStatus(id); bs.Completed != k {
					b.Fatalf("%s: batch %+v, want %d completed", name, bs, k)
				}
				e.FreeBatch(id)
			}
		}
	}
	return a
}
