package progress

import (
	"fmt"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestReaperPausesInAStreamOfShortRuns: a reaper with no waiter that
// reaped a short run while it spun after the run before (completions
// stream in) leaves the ring alone for its pause, so a completion posted
// meanwhile stays on the ring for whoever polls (here the test, as a
// status call does); Close ends the pause. The pause and the lane's spin
// are an hour: a reaper that did not pause would reap the third
// completion itself, one that paused after the first run (which followed
// no other) would not reap the second, and one whose pause Close did not
// end would hold the test until its timeout.
func TestReaperPausesInAStreamOfShortRuns(t *testing.T) {
	l, err := NewLane(0, 8, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l.SetReapPause(time.Hour)
	p := newPluginEnd(t, l)
	tr := NewTracker(4)
	b, _ := tr.Allocate(3)
	var tasks [3]int
	for k := range tasks {
		tasks[k] = b.Reserve(4096, 0)
		b.SetSlices(tasks[k], 1)
	}
	go l.Reap(tr)
	closed := false
	defer func() {
		if !closed {
			l.Close(true)
		}
	}()
	l.Begin()
	for _, i := range tasks {
		d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 4096}
		if err := l.Put(&d, b, i); err != nil {
			t.Fatal(err)
		}
	}
	l.End()
	if got := p.take(); len(got) != 3 {
		t.Fatalf("the plugin's ring holds %d descriptors, want 3", len(got))
	}

	// until waits for task i to complete and the reaper to do then what
	// it does.
	until := func(i int, what waiting.Act) {
		t.Helper()
		untilReaper(t, l, fmt.Sprintf("task %d completes and the reaper goes to %v", i, what), func(a waiting.Act) bool {
			return a == what && b.State(i, Now()) == Completed
		})
	}
	p.complete(b.Token(tasks[0]), 0, 4096)
	until(tasks[0], waiting.Spin)
	p.complete(b.Token(tasks[1]), 0, 4096)
	until(tasks[1], waiting.Nap)

	p.complete(b.Token(tasks[2]), 0, 4096)
	if !l.cq.Pending() || b.State(tasks[2], Now()) != Pending {
		t.Fatal("the pausing reaper took the third completion")
	}
	if n := l.Poll(tr); n != 1 {
		t.Fatalf("a caller's poll during the pause reaped %d completions, want 1", n)
	}
	if s := b.State(tasks[2], Now()); s != Completed {
		t.Fatalf("third task %v after the caller's poll, want COMPLETED", s)
	}
	l.Close(true) // returns once the reaper left its hour's pause
	closed = true
}

// TestWaitMarksAfterClose: a waiter that enters or leaves a lane, or
// begins or ends a wait on it, after the lane closed (its plugin's run
// ended meanwhile) touches none of its unmapped ring memory.
func TestWaitMarksAfterClose(t *testing.T) {
	l, err := NewLane(0, 8, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	l.WaitBegin()
	l.Enter()
	if !l.Waited() {
		t.Fatal("a waiting caller is not marked in the ring header")
	}
	l.Close(false)
	l.WaitEnd() // each of these faulted on the unmapped header
	l.Leave()
	l.Enter()
	l.WaitBegin()
	if l.Waited() {
		t.Fatal("a closed lane reports a waiter")
	}
}
