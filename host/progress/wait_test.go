package progress

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk/ring"
)

// batchRig is two lanes with no reaper (the test reaps, or the waiter
// does) and a batch of one task put on the first.
type batchRig struct {
	tr    *Tracker
	lanes []*Lane
	p     *pluginEnd // the first lane's plugin side
	b     *Batch
	i     int
}

func newBatchRig(t *testing.T, deadline int64) *batchRig {
	t.Helper()
	r := &batchRig{tr: NewTracker(4)}
	for range 2 {
		r.lanes = append(r.lanes, newTestLane(t, 0))
	}
	r.p = newPluginEnd(t, r.lanes[0])
	r.b, _ = r.tr.Allocate(1)
	r.i = r.b.Reserve(4096, deadline)
	r.b.SetSlices(r.i, 1)
	l := r.lanes[0]
	l.Begin()
	if err := l.Put(&ring.Descriptor{Token: r.b.Token(r.i), Op: ring.OpWrite, Length: 4096}, r.b, r.i); err != nil {
		t.Fatal(err)
	}
	l.EndWaited()
	return r
}

// wait runs WaitBatch in a goroutine; its error comes on the channel.
func (r *batchRig) wait(ctx context.Context, w waiting.Input) <-chan error {
	out := make(chan error, 1)
	go func() { out <- r.tr.WaitBatch(ctx, r.b, r.lanes, w) }()
	return out
}

// until polls cond (a state the waiter reaches) for up to 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for give := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(give) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// ended waits up to 10 s for the waiter's error.
func ended(t *testing.T, out <-chan error) error {
	t.Helper()
	select {
	case err := <-out:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("WaitBatch did not return within 10 s")
		return nil
	}
}

// marked reports how the lanes are held: entered (waiters) and waited
// (the ring header's mark that plugins read).
func (r *batchRig) marked() (entered, waited int) {
	for _, l := range r.lanes {
		entered += int(l.waiters.Load())
		if l.Waited() {
			waited++
		}
	}
	return entered, waited
}

// A small batch's waiter enters every lane it waits on while it spins, so
// that their reapers stand by, and reaps its completion itself (no reaper
// runs here); it leaves them as it returns.
func TestWaitBatchSmallSpinsEntered(t *testing.T) {
	r := newBatchRig(t, 0)
	out := r.wait(context.Background(), waiting.Input{Spin: 0, SpinSmall: time.Hour, Small: true})
	until(t, "the small batch's waiter enters both lanes", func() bool {
		e, w := r.marked()
		return e == 2 && w == 2
	})
	r.p.complete(r.b.Token(r.i), 0, 4096)
	if err := ended(t, out); err != nil {
		t.Fatal(err)
	}
	if s := r.b.State(r.i, Now()); s != Completed {
		t.Fatalf("task %v, want COMPLETED", s)
	}
	if e, w := r.marked(); e != 0 || w != 0 {
		t.Fatalf("after the wait %d lanes entered, %d marked waited; want none", e, w)
	}
}

// Spun out, a small batch's waiter leaves its lanes to their reapers and
// sleeps on the batch's wake: a completion a reaper takes (here the test)
// ends the wait.
func TestWaitBatchSmallSleepsLeft(t *testing.T) {
	r := newBatchRig(t, 0)
	out := r.wait(context.Background(), waiting.Input{Spin: 0, SpinSmall: 200 * time.Millisecond, Small: true})
	until(t, "the small batch's waiter enters both lanes", func() bool {
		e, _ := r.marked()
		return e == 2
	})
	until(t, "the small batch's waiter leaves both lanes once spun out", func() bool {
		e, w := r.marked()
		return e == 0 && w == 0
	})
	r.p.complete(r.b.Token(r.i), 0, 4096)
	select {
	case err := <-out:
		t.Fatalf("the waiter returned (%v) while asleep, with nobody reaping", err)
	case <-time.After(10 * time.Millisecond):
	}
	r.lanes[0].Poll(r.tr) // as the lane's reaper
	if err := ended(t, out); err != nil {
		t.Fatal(err)
	}
}

// A large batch's waiter tells the plugins that a caller waits (WaitBegin)
// for the whole wait, spinning or asleep, and never enters the lanes; a
// context that ends ends the wait with its error, the task left pending.
func TestWaitBatchLargeBeginsAndStopsOnContext(t *testing.T) {
	r := newBatchRig(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	out := r.wait(ctx, waiting.Input{Spin: time.Millisecond, SpinSmall: time.Hour})
	until(t, "the large batch's waiter marks both lanes waited", func() bool {
		e, w := r.marked()
		return e == 0 && w == 2
	})
	time.Sleep(20 * time.Millisecond) // asleep now
	if e, w := r.marked(); e != 0 || w != 2 {
		t.Fatalf("asleep, a large batch's waiter holds %d lanes entered, %d waited; want 0 and 2", e, w)
	}
	cancel()
	if err := ended(t, out); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitBatch = %v, want context.Canceled", err)
	}
	if s := r.b.State(r.i, Now()); s != Pending {
		t.Fatalf("task %v after the wait gave up, want PENDING (the caller cancels)", s)
	}
	if e, w := r.marked(); e != 0 || w != 0 {
		t.Fatalf("after the wait %d lanes entered, %d marked waited; want none", e, w)
	}
}

// An asleep waiter wakes at the batch's deadline, with nothing to wake
// it: the task, not cut yet (no slice of it out), expires then (TIMEOUT)
// and the wait ends.
func TestWaitBatchWakesAtTheDeadline(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(1)
	i := b.Reserve(4096, time.Now().Add(30*time.Millisecond).UnixNano())
	start := time.Now()
	if err := tr.WaitBatch(context.Background(), b, nil, waiting.Input{Spin: 20 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	if s := b.State(i, Now()); s != Timeout {
		t.Fatalf("task %v, want TIMEOUT", s)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("the wait ended after %v, before the deadline", d)
	}
}
