package progress

import (
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
)

// override sets *v, one of the package's variables for the tests, to
// val until the test ends.
func override[T any](t testing.TB, v *T, val T) {
	old := *v
	*v = val
	t.Cleanup(func() { *v = old })
}

// untilReaper waits up to 10 s for cond, given what l's reaper does now
// (reaperAt), and fails the test with what after that.
func untilReaper(t *testing.T, l *Lane, what string, cond func(waiting.Act) bool) {
	t.Helper()
	give := time.Now().Add(10 * time.Second)
	for a := waiting.Act(l.reaperAct.Load()); !cond(a); a = waiting.Act(l.reaperAct.Load()) {
		if time.Now().After(give) {
			t.Fatalf("not within 10 s: %s (the reaper's last act: %v)", what, a)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReaperStopsSpinningWhenAWaiterEnters: a reaper spinning on an empty
// ring stands by as soon as a waiter enters, instead of spinning out its
// budget next to the waiter, which reaps from then on: on a machine of
// two cores a reaper spinning after every synchronous call took one of
// the two the caller and the plugin need. The spin here is an hour, so a
// reaper that spins it out never stands by. (The decision is
// waiting.Decide's; this is the reaper's spin ending on it.)
func TestReaperStopsSpinningWhenAWaiterEnters(t *testing.T) {
	l, err := NewLane(0, 64, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(4)
	go l.Reap(tr)
	defer l.Close(true)
	untilReaper(t, l, "the reaper starts its spin", func(a waiting.Act) bool { return a == waiting.Spin })
	l.Enter()
	defer l.Leave()
	untilReaper(t, l, "the reaper stands by once a waiter entered", func(a waiting.Act) bool {
		return a == waiting.Standby && l.standing.Load()
	})
}
