package host_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/observe"
)

// countingObserver counts transitions per stage: about the least a
// listening observer (a metrics counter) does.
type countingObserver struct {
	n [observe.Ended + 1]atomic.Uint64
}

func (c *countingObserver) Observe(ev observe.Event) { c.n[ev.Stage].Add(1) }

// BenchmarkRequestPath measures the engine's whole request path for 4 KiB
// writes in batches of 128 through the shm plugin, to the engine's own
// segment (no peer process): validate, admit, select, plan, submit, reap,
// wait. It runs without an observer and with a counting one, so that the
// cost of nobody listening, and of one listening, can be read off.
// -benchmem must show 0 allocs/op without an observer.
func BenchmarkRequestPath(b *testing.B) {
	for _, withObs := range []bool{false, true} {
		name := "observer=none"
		if withObs {
			name = "observer=counting"
		}
		b.Run(name, func(b *testing.B) {
			var obs *countingObserver
			var opts []host.Option
			if withObs {
				obs = &countingObserver{}
				opts = append(opts, host.WithObserver(obs))
			}
			benchRequestPath(b, opts...)
			if obs != nil && obs.n[observe.Ended].Load() < uint64(b.N) {
				b.Fatalf("observer saw %d ends of %d requests", obs.n[observe.Ended].Load(), b.N)
			}
		})
	}
}

func benchRequestPath(b *testing.B, opts ...host.Option) {
	const size, batch = 4 << 10, 128
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("bench-%d", b.N))
	cfg.PluginDir = binDir
	e, err := host.New(ctx, cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(2 * batch * size)
	if err != nil {
		b.Fatal(err)
	}
	src, dst := mem[:batch*size], mem[batch*size:]
	for i := range src {
		src[i] = byte(i * 7)
	}
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		b.Fatal(err)
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]host.Request, batch)
	for k := range reqs {
		reqs[k] = host.Request{Op: host.Write, Local: src[k*size : (k+1)*size], Segment: seg.ID, Remote: base + uint64(k*size), Transport: "shm"}
	}
	id, err := e.AllocateBatch(batch)
	if err != nil {
		b.Fatal(err)
	}
	run := func(n int) {
		if err := e.Submit(id, reqs[:n]...); err != nil {
			b.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			b.Fatal(err)
		}
		if bs, _ := e.BatchStatus(id); bs.Completed != n {
			b.Fatalf("batch %+v, want %d completed", bs, n)
		}
		e.FreeBatch(id)
		if id, err = e.AllocateBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
	run(batch) // warm: lanes, rails, pools
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		run(min(batch, b.N-done))
	}
	b.StopTimer()
	e.FreeBatch(id)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
