package progress

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// A lane is closed with its run (issue 26.3), while a submitter or a
// waiter that took it from the run before may still call it: every call
// then finds the lane closed, and none touches the unmapped rings (which
// would fault). Close waits for a waiter inside WaitOn to leave first,
// and a second Close does nothing.
func TestLaneUsableAfterClose(t *testing.T) {
	l, err := NewLane(0, 4, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(4)
	go l.Reap(tr)

	// A waiter inside WaitOn when Close begins: Close waits for it, and
	// it leaves within a wait slice.
	b, err := tr.Allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	i := b.Reserve(1, 0)
	b.SetSlices(i, 1) // never sent: nothing completes it
	in, out := make(chan struct{}), make(chan bool)
	go func() {
		close(in)
		out <- l.WaitOn(tr, func(int64) bool { return b.Done(Now()) }, nil, 0, false, false)
	}()
	<-in
	for l.users.Load() == 0 { // inside WaitOn
		time.Sleep(time.Millisecond) // poll interval
	}
	closed := make(chan struct{})
	go func() { l.Close(true); close(closed) }()
	select {
	case done := <-out:
		if done {
			t.Fatal("WaitOn reported an unfinished task done")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter inside WaitOn did not leave the closing lane")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the waiter left")
	}
	if l.SQ.FD() >= 0 || l.CQ.FD() >= 0 {
		t.Fatalf("rings' memfds still open after Close: %d, %d", l.SQ.FD(), l.CQ.FD())
	}

	// Every call after Close.
	d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 1}
	l.Begin()
	if err := l.Put(&d, nil, 0); !errors.Is(err, ErrLaneDown) {
		t.Errorf("Put on a closed lane: %v, want ErrLaneDown", err)
	}
	if l.PluginAsleep() { // the caller holds the lane, as a submitter does
		t.Error("a closed lane reports its plugin asleep")
	}
	l.End()
	l.Begin()
	l.EndExposed()
	l.Begin()
	l.EndLater()
	l.Begin()
	l.EndWaited()
	if l.WaitOn(tr, func(int64) bool { return false }, nil, 0, true, false) {
		t.Error("WaitOn on a closed lane reported done")
	}
	if n := l.Poll(tr); n != 0 {
		t.Errorf("Poll on a closed lane reaped %d", n)
	}
	if l.Probe(1) {
		t.Error("Probe on a closed lane was put on the ring")
	}
	l.Enter()
	l.Leave()
	l.WaitBegin()
	l.WaitEnd()
	if l.Waited() {
		t.Error("a closed lane reports a waiter")
	}
	l.MarkDown()
	if !l.Down() || l.InFlight() != 0 {
		t.Errorf("closed lane: down %v, in flight %d", l.Down(), l.InFlight())
	}
	l.Close(true) // again: nothing to do, and no reaper to wait for twice
	tr.Free(b)
}
