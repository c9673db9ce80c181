package progress

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk/ring"
)

// A waiter's spin that loses its CPU marks the process busy (Busy), so
// that its next small waits on slow lanes sleep: here the whole test
// process is stopped (SIGSTOP, by a child) for 50 ms while a spin runs,
// and the completion comes as it gets its CPU back.
func TestSpinThatLosesItsCPUMarksTheProcessBusy(t *testing.T) {
	t.Cleanup(func() { preemptedAt.Store(0) })
	l, err := NewLane(0, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	for attempt := 1; ; attempt++ {
		preemptedAt.Store(0)
		if Busy() {
			t.Fatal("Busy before any spin lost its CPU")
		}
		start, stoppedAt, end := spinThroughAStop(t, l)
		if stoppedAt < start {
			// The child stopped the process before the spin began (the
			// goroutine that started it ran first): no spin lost its
			// CPU. Try again.
			if attempt == 5 {
				t.Fatal("in 5 attempts the process was stopped before the spin began every time")
			}
			continue
		}
		if end-stoppedAt < int64(50*time.Millisecond) {
			t.Fatalf("the spin ended %v after the stop began, want it stopped 50ms", time.Duration(end-stoppedAt))
		}
		if !Busy() {
			t.Fatal("a spin that lost its CPU for 50 ms left the process not Busy")
		}
		break
	}
	// It lasts busyFor from the lost CPU, then clears.
	preemptedAt.Store(Now() - int64(busyFor))
	if Busy() || preemptedAt.Load() != 0 {
		t.Fatalf("Busy %v (preemptedAt %d) busyFor after the lost CPU, want it cleared", Busy(), preemptedAt.Load())
	}
}

// spinThroughAStop spins on l's completion ring as a waiter does while a
// child stops the process for 50 ms and a completion comes after; it
// returns when the spin began and ended and when the child stopped the
// process (unix ns; the stop came just after stoppedAt).
func spinThroughAStop(t *testing.T, l *Lane) (start, stoppedAt, end int64) {
	t.Helper()
	out := make(chan string, 1)
	go func() {
		pid := strconv.Itoa(os.Getpid())
		b, err := exec.Command("sh", "-c", "date +%s%N; kill -STOP "+pid+"; sleep 0.05; kill -CONT "+pid).Output()
		if err != nil {
			b = []byte(fmt.Sprintf("error: %v", err))
		}
		d := ring.Descriptor{Token: 1, Op: ring.OpNop} // ends the spin
		if !l.cq.Push(&d) {
			b = []byte("completion ring full")
		}
		out <- string(b)
	}()
	start = Now()
	arrived, look := l.spinUntil(waiting.Decision{Act: waiting.Spin, Until: start + int64(time.Minute), Yield: waiting.YieldNone}, start, start, false, nil)
	if !arrived {
		t.Fatal("the spin ran out, want it ended by the completion")
	}
	// The completion may have come as the spin got its CPU back, before
	// it looked at the clock again: as WaitOn does, tell the lost CPU
	// from the spin's last look.
	end = Now()
	notePreempted(look, end)
	var buf [1]ring.Descriptor
	l.cq.Dequeue(buf[:])
	s := <-out
	stoppedAt, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("the child that stops the process: %q", s)
	}
	return start, stoppedAt, end
}
