package progress

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// runWatcher records what a tracker tells a hook with RunEnded.
type runWatcher struct {
	settled  map[int]ring.Status
	ended    map[int]State // told with Ended
	runEnded map[int]runEnd
	flushes  []flush
	last     *Batch
}

type runEnd struct {
	s       State
	settled bool
	at      int64
}

type flush struct {
	run     *Run
	ends    int  // RunEnded calls before it
	allDone bool // the batch was done when it came
}

func (w *runWatcher) Settled(_ *Batch, i int, st ring.Status, _ int64) { w.settled[i] = st }
func (w *runWatcher) Ended(_ *Batch, i int, s State, _ int64)          { w.ended[i] = s }
func (w *runWatcher) RunEnded(r *Run, b *Batch, i int, s State, settled bool) {
	w.runEnded[i] = runEnd{s, settled, r.At}
	w.last = b
}
func (w *runWatcher) Flush(r *Run) {
	w.flushes = append(w.flushes, flush{r, len(w.runEnded), w.last != nil && w.last.Done(0)})
}

// hook is w as the meter registers: unordered, with RunEnded and Flush.
func (w *runWatcher) hook() Hook {
	return Hook{Unordered: true, Settled: w.Settled, Ended: w.Ended, RunEnded: w.RunEnded, Flush: w.Flush}
}

// TestRunWatcherOneCallPerEnd: a hook with RunEnded is told of each task that
// ends in a run of completions (ApplyRun) with one RunEnded, which stands
// for the settling too when the attempt did not fail (a failed one is
// still told with Settled first, as the Failed hooks come after it); of
// the run's end with Flush, and with a Flush before the end that
// completes the batch is counted (the batch's waiter must find its ends
// flushed); and of an end outside a run with Ended.
func TestRunWatcherOneCallPerEnd(t *testing.T) {
	w := &runWatcher{settled: map[int]ring.Status{}, ended: map[int]State{}, runEnded: map[int]runEnd{}}
	tr := NewTracker(2)
	tr.Hook(w.hook())
	b, err := tr.Allocate(5)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		b.SetSlices(b.Reserve(100, 0), int64(1+k/3)) // task 3 has two slices
	}
	b.Reserve(100, 0) // task 4, never cut
	b.Finish(4, Canceled, nil)

	r1, r2, r3 := &Run{At: 1000}, &Run{At: 2000}, &Run{At: 1500}
	tr.ApplyRun(b.Token(0), ring.StatusOK, 100, r1)
	tr.ApplyRun(b.Token(1), ring.StatusIO, 0, r1)
	tr.FlushRun(r1)
	tr.ApplyRun(b.Token(2), ring.StatusOK, 100, r3)
	tr.FlushRun(r3)
	tr.ApplyRun(b.Token(3), ring.StatusOK, 50, r2)
	tr.ApplyRun(b.Token(3), ring.StatusOK, 50, r2) // the batch's last end
	tr.FlushRun(r2)

	want := map[int]runEnd{
		0: {Completed, true, 1000}, 1: {Failed, false, 1000}, 2: {Completed, true, 1500}, 3: {Completed, true, 2000},
	}
	for i, e := range want {
		if got, ok := w.runEnded[i]; !ok || got != e {
			t.Errorf("task %d: RunEnded %+v (told: %v), want %+v", i, got, ok, e)
		}
	}
	if len(w.settled) != 1 || w.settled[1] != ring.StatusIO {
		t.Errorf("Settled told of %v, want only task 1's failed attempt (StatusIO)", w.settled)
	}
	if len(w.ended) != 1 || w.ended[4] != Canceled {
		t.Errorf("Ended told of %v, want only task 4, CANCELED outside a run", w.ended)
	}
	wantFlushes := []flush{{r1, 2, false}, {r3, 3, false}, {r2, 4, false}, {r2, 4, true}}
	if len(w.flushes) != len(wantFlushes) {
		t.Fatalf("flushes %+v, want %+v", w.flushes, wantFlushes)
	}
	for k, f := range wantFlushes {
		if w.flushes[k] != f {
			t.Errorf("flush %d: %+v, want %+v (all: %+v)", k, w.flushes[k], f, w.flushes)
		}
	}
}

// TestRunWatcherEndDecidedWhileOut: a task canceled while its slice was
// out ends when that slice comes back in a run: RunEnded with the
// decided state, and not as settled (its attempt's settling is not told).
func TestRunWatcherEndDecidedWhileOut(t *testing.T) {
	w := &runWatcher{settled: map[int]ring.Status{}, ended: map[int]State{}, runEnded: map[int]runEnd{}}
	tr := NewTracker(1)
	tr.Hook(w.hook())
	b, err := tr.Allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	b.SetSlices(b.Reserve(100, 0), 1)
	b.Finish(0, Canceled, nil)
	r := &Run{At: 3000}
	tr.ApplyRun(b.Token(0), ring.StatusOK, 100, r)
	tr.FlushRun(r)
	if got := w.runEnded[0]; got != (runEnd{Canceled, false, 3000}) || len(w.settled) != 0 || len(w.ended) != 0 {
		t.Errorf("RunEnded %+v, Settled %v, Ended %v; want RunEnded CANCELED, not settled, at 3000, and nothing else", got, w.settled, w.ended)
	}
	if len(w.flushes) != 2 || !w.flushes[1].allDone || w.flushes[0].allDone {
		t.Errorf("flushes %+v, want one before the batch's last end is counted and the run's", w.flushes)
	}
}
