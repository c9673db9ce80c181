package progress

import (
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// timesWatcher keeps the times a tracker hands its hook, per task.
type timesWatcher struct {
	settled, ended map[int]int64
}

func (w *timesWatcher) Settled(_ *Batch, i int, _ ring.Status, at int64) { w.settled[i] = at }
func (w *timesWatcher) Ended(_ *Batch, i int, _ State, at int64)         { w.ended[i] = at }

// TestWatcherGetsTheReapTime: a completion applied with a reap time hands
// that time to the hook, for the settling and for the end it makes
// (the metrics read no clock of their own per task), including an end
// decided while the slice was out; an end nobody read the time for (a
// Finish, a completion applied without one) hands 0.
func TestWatcherGetsTheReapTime(t *testing.T) {
	w := &timesWatcher{settled: map[int]int64{}, ended: map[int]int64{}}
	tr := NewTracker(2)
	tr.Hook(Hook{Unordered: true, Settled: w.Settled, Ended: w.Ended})
	if !tr.Timed() {
		t.Fatal("a tracker with a hook told of ends reports that it wants no times")
	}
	b, err := tr.Allocate(4)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.SetSlices(b.Reserve(100, 0), 2)
	}
	b.Reserve(100, 0) // task 3, never cut
	// Task 0: two slices reaped in two runs; the second run's time is
	// the settling's and the end's.
	tr.ApplyAt(b.Token(0), ring.StatusOK, 50, 1000)
	tr.ApplyAt(b.Token(0), ring.StatusOK, 50, 2000)
	// Task 1: without a reap time.
	tr.Apply(b.Token(1), ring.StatusOK, 50)
	tr.Apply(b.Token(1), ring.StatusOK, 50)
	// Task 2: canceled with a slice out; it ends when that slice is reaped.
	tr.ApplyAt(b.Token(2), ring.StatusOK, 50, 3000)
	b.Finish(2, Canceled, nil)
	tr.ApplyAt(b.Token(2), ring.StatusOK, 50, 4000)
	// Task 3: canceled before it was cut.
	b.Finish(3, Canceled, nil)

	for _, c := range []struct {
		i              int
		settled, ended int64
		settles        bool
	}{
		{0, 2000, 2000, true}, {1, 0, 0, true}, {2, 0, 4000, false}, {3, 0, 0, false},
	} {
		if at, ok := w.settled[c.i]; ok != c.settles || at != c.settled {
			t.Errorf("task %d: settled at %d (told: %v), want %d (told: %v)", c.i, at, ok, c.settled, c.settles)
		}
		if at, ok := w.ended[c.i]; !ok || at != c.ended {
			t.Errorf("task %d: ended at %d (told: %v), want %d", c.i, at, ok, c.ended)
		}
	}
	if NewTracker(1).Timed() {
		t.Error("a tracker without a hook reports that it wants times")
	}
	tr = NewTracker(1)
	tr.Hook(Hook{Failed: func(*Batch, int, error) bool { return false }, Held: func(*Batch, int) {}})
	if tr.Timed() {
		t.Error("a tracker whose hooks are told of no settling or end reports that it wants times")
	}
}

// TestClockOfIsClock: the Clock time of a time.Now reading lies between
// Clock readings taken around it.
func TestClockOfIsClock(t *testing.T) {
	before := Clock()
	at := ClockOf(time.Now())
	after := Clock()
	if at < before || at > after || before <= 0 {
		t.Errorf("ClockOf(now) = %d, not within Clock's %d..%d", at, before, after)
	}
}
