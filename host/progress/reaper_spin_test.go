package progress

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// stackOf returns the stack of a goroutine running fn (a frame such as
// "progress.(*Lane).Reap("), "" when there is none.
func stackOf(fn string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			return g
		}
	}
	return ""
}

// reaperStack returns the stack of the goroutine running l.Reap, "" when
// there is none.
func reaperStack() string { return stackOf("progress.(*Lane).Reap(") }

// reaperState returns the scheduling state of the goroutine running
// l.Reap ("running", "runnable", "select", ...), "" when there is none,
// and whether it is in its spin.
func reaperState() (string, bool) {
	g := reaperStack()
	if g == "" {
		return "", false
	}
	head, _, _ := strings.Cut(g, "\n")
	_, st, _ := strings.Cut(head, "[")
	st, _, _ = strings.Cut(st, "]")
	st, _, _ = strings.Cut(st, ",")
	return st, strings.Contains(g, "progress.(*Lane).spinPending(")
}

// TestReaperStopsSpinningWhenAWaiterEnters: a reaper spinning on an empty
// ring stands by as soon as a waiter enters, instead of spinning out its
// budget next to the waiter, which reaps from then on: on a machine of
// two cores a reaper spinning after every synchronous call took one of
// the two the caller and the plugin need. The spin here is an hour, so a
// reaper that spins it out never stands by.
func TestReaperStopsSpinningWhenAWaiterEnters(t *testing.T) {
	l, err := NewLane(0, 64, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(4)
	go l.Reap(tr)
	defer l.Close(true)
	give := time.Now().Add(10 * time.Second)
	for _, spinning := reaperState(); !spinning; _, spinning = reaperState() {
		if time.Now().After(give) {
			t.Fatal("the reaper did not start its spin within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	l.Enter()
	defer l.Leave()
	give = time.Now().Add(10 * time.Second)
	for st, _ := reaperState(); st != "select"; st, _ = reaperState() {
		if time.Now().After(give) {
			t.Fatalf("10 s after a waiter entered, the reaper is %q, not standing by (select)", st)
		}
		time.Sleep(time.Millisecond)
	}
}
