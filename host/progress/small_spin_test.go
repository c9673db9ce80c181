package progress

import (
	"strings"
	"testing"
	"time"
)

// A small batch's waiter spins on a lane whose small waits are short and
// sleeps at once on one whose median wait is past spinWorth, but for one
// wait in probeEvery, which spins a little to keep measuring; the median
// follows the lane back when it gets fast, and a tail of slow waits does
// not move it.
func TestSmallSpinFollowsTheLanesMedianWait(t *testing.T) {
	l, err := NewLane(0, 64, 20*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	l.SetSpinSmall(time.Millisecond)
	if got := l.smallSpin(); got != time.Millisecond {
		t.Fatalf("a new lane's small spin is %v, want spin_small (1ms)", got)
	}

	// A round trip of 200 us (tcp's): the median passes spinWorth.
	for range 100 {
		l.noteSmallWait(int64(200 * time.Microsecond))
	}
	probes := 0
	for i := range 10 * probeEvery {
		switch got := l.smallSpin(); got {
		case 0:
		case 2 * spinWorth:
			probes++
		default:
			t.Fatalf("wait %d on a slow lane spins %v, want 0 or a probe's %v", i, got, 2*spinWorth)
		}
	}
	if probes != 10 {
		t.Fatalf("%d of %d waits on a slow lane probed, want one in %d", probes, 10*probeEvery, probeEvery)
	}

	// The lane gets fast (3 us, shm's) with a slow tail of a third of
	// the waits: the median comes down and waiters spin again.
	for i := range 300 {
		d := 3 * time.Microsecond
		if i%3 == 0 {
			d = 5 * time.Millisecond
		}
		l.noteSmallWait(int64(d))
	}
	if m := time.Duration(l.smallWait.Load()); m > spinWorth {
		t.Fatalf("median wait %v after waits of 3us with a third at 5ms, want at most %v", m, spinWorth)
	}
	if got := l.smallSpin(); got != time.Millisecond {
		t.Fatalf("a fast lane's small spin is %v, want 1ms", got)
	}
}

// waiterIn reports whether the goroutine in Lane.WaitOn is in fn.
func waiterIn(fn string) bool {
	return strings.Contains(stackOf("progress.(*Lane).WaitOn("), fn)
}

// On a slow lane a small batch's waiter sleeps on the completion ring at
// once: with spin_small an hour, a waiter that spun would never get there.
func TestSmallWaiterSleepsOnASlowLane(t *testing.T) {
	l, err := NewLane(0, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	l.SetSpinSmall(time.Hour)
	for range 100 {
		l.noteSmallWait(int64(time.Millisecond))
	}
	stop := make(chan struct{})
	ended := make(chan bool)
	go func() { ended <- l.WaitOn(NewTracker(4), func() bool { return false }, stop, 0, true, false) }()
	give := time.Now().Add(10 * time.Second)
	for !waiterIn("sdk/ring.(*Ring).Sleep(") {
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
