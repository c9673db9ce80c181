package progress

import (
	"testing"
	"time"
)

// On a slow lane a small batch's waiter sleeps on the completion ring at
// once: with spin_small an hour, a waiter that spun would never get there.
func TestSmallWaiterSleepsOnASlowLane(t *testing.T) {
	l, err := NewLane(0, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	l.SetSpinSmall(time.Hour)
	l.smallWait.Store(int64(time.Millisecond))
	stop := make(chan struct{})
	ended := make(chan bool)
	go func() { ended <- l.WaitOn(NewTracker(4), func(int64) bool { return false }, stop, 0, true, false) }()
	give := time.Now().Add(10 * time.Second)
	for !l.cq.ConsumerSleeping() { // no reaper runs: the waiter sleeps on the ring
		if time.Now().After(give) {
			t.Fatal("10 s on, the small waiter on a slow lane does not sleep on the completion ring")
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if <-ended {
		t.Fatal("WaitOn reported done for a batch that never completed")
	}
}
