package host

import (
	"testing"

	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// BenchmarkObservationPath is the request path's observation cost alone,
// per request, without plugins or lanes, so that it reads the same on a
// loaded machine: a request's transitions (queued to submitted, as the
// submitter notes them) and its completion through the tracker (which
// calls the watcher), in batches of 128, with nobody listening, with the
// metrics' Meter, and with the metrics fed by events through an
// observer (how the engine fed them before the Meter) or a no-op
// observer. -benchmem must show 0 allocs/op for each.
func BenchmarkObservationPath(b *testing.B) {
	names := []string{"shm"}
	for _, c := range []struct {
		name string
		opts pathOptions
	}{
		{"none", pathOptions{}},
		{"meter", pathOptions{meter: metrics.NewMeter(names, nil)}},
		{"events", pathOptions{obs: metrics.NewObserver(names, nil)}},
		{"noop-observer", pathOptions{obs: noopObserver{}}},
	} {
		b.Run(c.name, func(b *testing.B) { benchObservation(b, c.opts) })
	}
}

type noopObserver struct{}

func (noopObserver) Observe(observe.Event) {}

func benchObservation(b *testing.B, o pathOptions) {
	const batch, size = 128, 4 << 10
	e := &Engine{tracker: progress.NewTracker(4), plugins: []*pluginState{{idx: 0, name: "shm"}}}
	e.wirePath(o)
	local := make([]byte, size)
	req := Request{Op: Write, Local: local, Transport: "shm"}
	run := func(n int) {
		bt, err := e.tracker.Allocate(batch)
		if err != nil {
			b.Fatal(err)
		}
		e.path.attach(bt)
		for range n {
			i := bt.Reserve(size, 0)
			*e.path.record(bt, i) = taskRecord{req: req}
			e.note(bt, i, observe.Queued, -1, 0, nil)
			e.note(bt, i, observe.Admitted, -1, 0, nil)
			bt.Task(i).SetTransport(0)
			e.note(bt, i, observe.Routed, 0, 0, nil)
			bt.SetSlices(i, 1)
			e.note(bt, i, observe.Sliced, 0, 1, nil)
			e.note(bt, i, observe.Submitted, 0, 1, nil)
			bt.Cut(i)
			if v := e.tracker.Apply(bt.Token(i), ring.StatusOK, size); v != progress.Applied {
				b.Fatalf("completion of task %d: %v", i, v)
			}
		}
		if !bt.Done(0) {
			b.Fatal("batch not done")
		}
		slot := bt.Slot()
		e.tracker.Free(bt)
		e.path.detach(slot, n)
	}
	run(batch)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		run(min(batch, b.N-done))
	}
}
