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
// run: the engines are up at once, and the arms take turns in rounds,
// each round in another order of the arms, so that drift on a loaded
// machine falls on all alike. A third arm, off2, is a second engine
// without a qos block (A/A): its gap to off is what noise alone makes of
// two identical arms, the yardstick for on's. Two shapes: batch128 (4 KiB
// writes over shm in batches of 128, as BenchmarkRequestPath) and
// transfer (one 4 KiB Transfer at a time).
//
// b.N requests go through each arm; ns/op is the arms together. The
// figures to read:
//
//	off-ns/req, on-ns/req, off2-ns/req
//	                           wall time per request of each arm
//	on/off, off2/off           the median over rounds of on's (off2's)
//	                           time / off's
//	off-cpu-ns/req, on-cpu-ns/req, off2-cpu-ns/req
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
const costRounds = 36

// costOrders are the orders the arms (off, on, off2) take their turns
// in, one per round in rotation: each arm goes first, second and third
// equally often, each after each other arm.
var costOrders = [...][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}, {0, 2, 1}, {1, 0, 2}}

func benchQoSCost(b *testing.B, shape string) {
	off := newCostArm(b, shape, "off", func(*config.Config) {})
	defer off.close()
	on := newCostArm(b, shape, "on", qosOn)
	defer on.close()
	off2 := newCostArm(b, shape, "off2", func(*config.Config) {})
	defer off2.close()
	arms := [3]*costArm{off, on, off2}
	for _, a := range arms { // warm: lanes, rails, pools
		a.step(1024)
	}
	per := max(b.N/costRounds, 1)
	var wall, cpu [3]time.Duration
	onRatios := make([]float64, 0, costRounds)
	aaRatios := make([]float64, 0, costRounds)
	b.ReportAllocs()
	b.ResetTimer()
	for r, done := 0, 0; done < b.N; r++ {
		n := min(per, b.N-done)
		var took [3]time.Duration
		for _, k := range costOrders[r%len(costOrders)] {
			c0 := cpuTime()
			t0 := time.Now()
			arms[k].step(n)
			took[k] = time.Since(t0)
			wall[k] += took[k]
			cpu[k] += cpuTime() - c0
		}
		if took[0] > 0 {
			onRatios = append(onRatios, float64(took[1])/float64(took[0]))
			aaRatios = append(aaRatios, float64(took[2])/float64(took[0]))
		}
		done += n
	}
	b.StopTimer()
	reqs := float64(b.N)
	for k, name := range []string{"off", "on", "off2"} {
		b.ReportMetric(float64(wall[k].Nanoseconds())/reqs, name+"-ns/req")
		b.ReportMetric(float64(cpu[k].Nanoseconds())/reqs, name+"-cpu-ns/req")
	}
	if len(onRatios) > 0 {
		slices.Sort(onRatios)
		slices.Sort(aaRatios)
		b.ReportMetric(onRatios[len(onRatios)/2], "on/off")
		b.ReportMetric(aaRatios[len(aaRatios)/2], "off2/off")
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
	fillRandom(mem) // written memory on both sides, no zero pages
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
