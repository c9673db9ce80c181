package path

import (
	"runtime"
	"syscall"
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
// calls the watcher), in batches of 128 (submitted, then reaped in runs
// of reapRun, each flushed at its end as a lane's poller does), with
// nobody listening, with the metrics' Meter, and with the metrics fed by
// events through an observer (how the engine fed them before the Meter)
// or a no-op observer. -benchmem must show 0 allocs/op for each.
func BenchmarkObservationPath(b *testing.B) {
	names := []string{"shm"}
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"none", Options{}},
		{"meter", Options{Meter: metrics.NewMeter(names, nil)}},
		{"events", Options{Observer: metrics.NewObserver(names, nil)}},
		{"noop-observer", Options{Observer: noopObserver{}}},
	} {
		b.Run(c.name, func(b *testing.B) { benchObservation(b, c.opts) })
	}
}

// reapRun is how many completions BenchmarkObservationPath reaps per
// clock read: the lanes' runs, which vary with how fast the plugin posts
// and the poller looks, are a few completions long or more.
const reapRun = 4

type noopObserver struct{}

func (noopObserver) Observe(observe.Event) {}

func benchObservation(b *testing.B, o Options) {
	const batch, size = 128, 4 << 10
	e := &Executor{tracker: progress.NewTracker(4), plugins: []*Plugin{{idx: 0, name: "shm"}}}
	e.wirePath(o)
	local := make([]byte, size)
	req := Request{Op: Write, Local: local, Transport: "shm"}
	var reaped progress.Run // a lane's, kept from run to run
	run := func(n int) {
		bt, err := e.tracker.Allocate(batch)
		if err != nil {
			b.Fatal(err)
		}
		e.path.attach(bt)
		var sc submitCtx // one Submit call
		for range n {
			i := bt.Reserve(size, 0)
			*e.path.record(bt, i) = taskRecord{req: req}
			e.noteQueued(bt, i, &sc)
			e.note(bt, i, observe.Admitted, -1, 0, nil)
			bt.Task(i).SetTransport(0)
			e.note(bt, i, observe.Routed, 0, 0, nil)
			bt.SetSlices(i, 1)
			e.note(bt, i, observe.Sliced, 0, 1, nil)
			e.note(bt, i, observe.Submitted, 0, 1, nil)
			bt.Cut(i)
		}
		// Reaped in runs of reapRun, each read the clock once and
		// flushed at its end, as a lane's poller does.
		for i := range n {
			if i%reapRun == 0 {
				if i > 0 {
					e.tracker.FlushRun(&reaped)
				}
				reaped.At = 0
				if e.tracker.Timed() {
					reaped.At = progress.Clock()
				}
			}
			if v := e.tracker.ApplyRun(bt.Token(i), ring.StatusOK, size, &reaped); v != progress.Applied {
				b.Fatalf("completion of task %d: %v", i, v)
			}
		}
		e.tracker.FlushRun(&reaped)
		if !bt.Done(0) {
			b.Fatal("batch not done")
		}
		slot := bt.Slot()
		e.tracker.Free(bt)
		e.path.detach(slot, n)
	}
	run(batch)
	// The thread's CPU time per request (cpu-ns/op) reads the same on a
	// loaded machine, where the wall time also counts the waits for a CPU.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		run(min(batch, b.N-done))
	}
	b.StopTimer()
	b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// threadCPU is the calling thread's CPU time (user and system), in
// nanoseconds.
func threadCPU(b *testing.B) int64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &u); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return u.Utime.Nano() + u.Stime.Nano()
}

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1
