package progress

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/sdk/ring"
)

// TestWaiterSeesACompletionAnotherReaped: a caller asleep on its lane's
// completion ring is woken by its completion, but another goroutine (a
// second caller of the lane, the reaper, a status poll) is draining the
// ring and applies it. The caller must see its task done once that
// goroutine is through, not go back to sleep on the emptied ring, which
// nobody wakes for it: it slept out its wait slice (5 ms). Here the slice
// is an hour, so a caller that sleeps again hangs.
func TestWaiterSeesACompletionAnotherReaped(t *testing.T) {
	override(t, &waitSlice, time.Hour)
	l, err := NewLane(0, 64, 10*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(false) })
	l.smallWait.Store(int64(10 * time.Millisecond)) // a slow lane: its small waits sleep at once
	pe := newPluginEnd(t, l)
	tr := NewTracker(4)
	b, err := tr.Allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	i := b.Reserve(1, 0)
	b.SetSlices(i, 1)
	d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 1}
	l.Begin()
	if err := l.Put(&d, b, i); err != nil {
		t.Fatal(err)
	}
	l.EndWaited()
	b.Cut(i)
	if got := pe.take(); len(got) != 1 {
		t.Fatalf("the plugin took %d descriptors, want 1", len(got))
	}

	out := make(chan bool, 1)
	go func() { out <- l.WaitOn(tr, b.Done, nil, 0, true, false) }()
	until(t, "the caller sleeps on the completion ring", l.cq.ConsumerSleeping)

	// The ring's count of the sleeps its consumers began (header word
	// at 264, sdk/ring's layout).
	sleeps := (*atomic.Uint32)(unsafe.Pointer(&l.CQ.Mem()[264]))
	slept := sleeps.Load()
	l.reapMu.Lock()            // another goroutine drains the ring
	pe.complete(d.Token, 0, 1) // wakes the caller
	// Give the woken caller the time to look and, as it did, sleep
	// again; one that keeps looking never does.
	for limit := time.Now().Add(200 * time.Millisecond); sleeps.Load() == slept && time.Now().Before(limit); {
		time.Sleep(time.Millisecond) // poll interval
	}
	if n := l.pollLocked(tr); n != 1 {
		t.Errorf("the other goroutine reaped %d completions, want 1", n)
	}
	l.reapMu.Unlock()
	select {
	case done := <-out:
		if !done {
			t.Error("WaitOn returned with its task not done")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller sleeps on with its task done by another goroutine's reaping")
	}
	tr.Free(b)
}
