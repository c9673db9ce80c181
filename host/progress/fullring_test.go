package progress

import (
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestFullRingWakesAStandingReaper: a reaper left standing by (the last
// waiter left with nothing in flight) must be woken when a submitter
// fills the ring: the plugin's completions then fill the completion ring,
// the plugin stops draining, and the submitter, holding the lane, waits
// for room only reaping makes. Before, nothing woke the reaper but its
// stand-by timer (50 ms); here the timer is an hour, so a missing wakeup
// hangs the submitter.
func TestFullRingWakesAStandingReaper(t *testing.T) {
	override(t, &standbySleep, time.Hour)
	l, err := NewLane(0, 8, 10*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(4)
	stop := make(chan struct{})
	echo := echoPlugin(l, stop)
	go l.Reap(tr)
	t.Cleanup(func() {
		close(stop)
		l.kick() // a reaper still standing by (the test failed) reaps what holds the fake plugin
		l.sq.Wake()
		l.cq.WakeProducer()
		<-echo
		l.Close(true)
	})
	l.Enter()
	untilReaper(t, l, "the reaper stands by for the waiter", func(a waiting.Act) bool { return a == waiting.Standby && l.standing.Load() })
	l.Leave() // nothing in flight: the reaper stands on

	const n = 40 // five rings' worth
	b, err := tr.Allocate(n)
	if err != nil {
		t.Fatal(err)
	}
	put := make(chan error, 1)
	go func() {
		l.Begin()
		defer l.End()
		for range n {
			i := b.Reserve(1, 0)
			b.SetSlices(i, 1)
			d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 1}
			if err := l.Put(&d, nil, 0); err != nil {
				put <- err
				return
			}
			b.Cut(i)
		}
		put <- nil
	}()
	select {
	case err := <-put:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a submitter filling the ring waits for room with the reaper standing by")
	}
	wait(t, b)
	tr.Free(b)
}
