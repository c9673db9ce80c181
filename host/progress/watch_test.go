package progress

import (
	"sync"
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// countingWatcher counts what a tracker reports, per task.
type countingWatcher struct {
	mu      sync.Mutex
	settled map[[2]uint64]int
	ended   map[[2]uint64]State
	ends    int
	// held counts the calls made while the task's hold was taken.
	held int
}

// holding reports whether task i's hold is taken.
func holding(b *Batch, i int) bool {
	if b.tasks[i].noting.TryLock() {
		b.tasks[i].noting.Unlock()
		return false
	}
	return true
}

func newCountingWatcher() *countingWatcher {
	return &countingWatcher{settled: map[[2]uint64]int{}, ended: map[[2]uint64]State{}}
}

func (w *countingWatcher) Settled(b *Batch, i int, st ring.Status, _ int64) {
	w.mu.Lock()
	w.settled[[2]uint64{b.ID(), uint64(i)}]++
	if holding(b, i) {
		w.held++
	}
	w.mu.Unlock()
}

func (w *countingWatcher) Ended(b *Batch, i int, s State, _ int64) {
	w.mu.Lock()
	w.ended[[2]uint64{b.ID(), uint64(i)}] = s
	w.ends++
	if holding(b, i) {
		w.held++
	}
	w.mu.Unlock()
}

// TestWatcherSeesSettleAndEndOnce runs tasks that complete, one that is
// canceled before its slices come back, and one that fails, and checks
// that the hook hears one Ended per task with its terminal state, a
// Settled only for attempts whose slices came back while the task was
// pending, and that Noting refuses an ended task; the same for an
// Unordered hook, which is called without the task's hold (and a hook
// that is not Unordered, with it).
func TestWatcherSeesSettleAndEndOnce(t *testing.T) {
	for _, unheld := range []bool{false, true} {
		t.Run(map[bool]string{false: "held", true: "unheld"}[unheld], func(t *testing.T) { testWatcherSeesSettleAndEndOnce(t, unheld) })
	}
}

func testWatcherSeesSettleAndEndOnce(t *testing.T, unheld bool) {
	w := newCountingWatcher()
	tr := NewTracker(4)
	tr.Hook(Hook{Unordered: unheld, Settled: w.Settled, Ended: w.Ended})
	b, err := tr.Allocate(3)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		i := b.Reserve(100, 0)
		b.SetSlices(i, 2)
	}
	key := func(i int) [2]uint64 { return [2]uint64{b.ID(), uint64(i)} }

	// Task 0 completes: both slices OK.
	tr.Complete(b.Token(0), ring.StatusOK, 50)
	tr.Complete(b.Token(0), ring.StatusOK, 50)
	// Task 1 is canceled with a slice out; its late slices change nothing.
	tr.Complete(b.Token(1), ring.StatusOK, 50)
	b.Finish(1, Canceled, nil)
	tr.Complete(b.Token(1), ring.StatusOK, 50)
	// Task 2 fails on its second slice (no retry hook: it ends FAILED).
	tr.Complete(b.Token(2), ring.StatusOK, 50)
	tr.Complete(b.Token(2), ring.StatusIO, 0)

	want := map[int]State{0: Completed, 1: Canceled, 2: Failed}
	for i, s := range want {
		if got := w.ended[key(i)]; got != s {
			t.Errorf("task %d: watcher saw it end %v, want %v", i, got, s)
		}
	}
	if w.ends != 3 {
		t.Errorf("watcher heard %d ends, want 3 (one per task)", w.ends)
	}
	if w.settled[key(0)] != 1 || w.settled[key(2)] != 1 {
		t.Errorf("settled counts %v: tasks 0 and 2 settle once each", w.settled)
	}
	if w.settled[key(1)] != 0 {
		t.Errorf("task 1 settled after it was canceled: %v", w.settled)
	}
	if b.Noting(1) {
		t.Error("Noting reports an ended task as pending")
	}
	b.Noted(1)
	// A second Finish of an ended task reports nothing.
	b.Finish(0, Failed, nil)
	if w.ends != 3 {
		t.Errorf("watcher heard %d ends after a second Finish, want 3", w.ends)
	}
	if calls := w.ends + w.settled[key(0)] + w.settled[key(2)]; unheld && w.held != 0 || !unheld && w.held != calls {
		t.Errorf("%d of %d calls made under the task's hold (unheld watcher: %v)", w.held, calls, unheld)
	}
	tr.Free(b)
}

// TestBatchIDsDiffer checks that a slot reused by a later batch gets a
// new ID, so an observer never mixes two batches' tasks.
func TestBatchIDsDiffer(t *testing.T) {
	tr := NewTracker(1)
	seen := map[uint64]bool{}
	for range 5 {
		b, err := tr.Allocate(1)
		if err != nil {
			t.Fatal(err)
		}
		if seen[b.ID()] {
			t.Fatalf("batch ID %#x handed out twice", b.ID())
		}
		seen[b.ID()] = true
		if b.Slot() >= tr.Slots() {
			t.Fatalf("slot %d not below Slots() %d", b.Slot(), tr.Slots())
		}
		tr.Free(b)
	}
}

// nopWatcher is a hook that does nothing: what a listening observer
// costs the tracker, less the observer's own work.
type nopWatcher struct{}

func (nopWatcher) Settled(*Batch, int, ring.Status, int64) {}
func (nopWatcher) Ended(*Batch, int, State, int64)         {}

func (w nopWatcher) hook() Hook { return Hook{Settled: w.Settled, Ended: w.Ended} }

// BenchmarkSubmitCompleteWatched is BenchmarkSubmitComplete with a
// hook set: the per-task lock and the two calls. -benchmem must show
// 0 allocs/op.
func BenchmarkSubmitCompleteWatched(b *testing.B) {
	r := newRig(b)
	r.t.Hook(nopWatcher{}.hook())
	benchSubmitComplete(b, r)
}

// BenchmarkTaskLifecycle is one task's bookkeeping without a lane or a
// goroutine: reserve, cut into one slice, complete it, settle and end.
// It isolates what a hook adds (nothing without one: a nil check) from
// the scheduling noise of the ring benchmarks. -benchmem: 0 allocs/op.
func BenchmarkTaskLifecycle(b *testing.B) {
	for _, w := range []struct {
		name string
		w    *Hook
	}{{"watcher=none", nil}, {"watcher=nop", &Hook{Settled: nopWatcher{}.Settled, Ended: nopWatcher{}.Ended}}} {
		b.Run(w.name, func(b *testing.B) {
			tr := NewTracker(64)
			if w.w != nil {
				tr.Hook(*w.w)
			}
			benchLifecycle(b, tr)
		})
	}
}

func benchLifecycle(b *testing.B, tr *Tracker) {
	const batch = 128
	b.ReportAllocs()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		bt, err := tr.Allocate(batch)
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			i := bt.Reserve(4096, 0)
			bt.SetSlices(i, 1)
			tr.Complete(bt.Token(i), ring.StatusOK, 4096)
		}
		if !bt.Done(0) {
			b.Fatal("tasks did not end")
		}
		tr.Free(bt)
		done += n
	}
}
