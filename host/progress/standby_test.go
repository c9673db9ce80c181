package progress

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestLeaveWakesTheReaperOnlyForWorkInFlight: the last waiter to leave
// wakes a reaper that stands by only when something is still in flight;
// a publication wakes it when no waiter is there to reap (End, Probe),
// never when its submitter waits next (EndWaited) or a waiter is in.
// The reaper is not running: standing is set by hand, and a wakeup is the
// token on standby.
func TestLeaveWakesTheReaperOnlyForWorkInFlight(t *testing.T) {
	l := newTestLane(t, 0)
	woken := func() bool {
		select {
		case <-l.standby:
			return true
		default:
			return false
		}
	}
	l.standing.Store(true)

	l.Enter()
	l.Leave()
	if woken() {
		t.Fatal("a waiter leaving with nothing in flight woke the reaper")
	}

	_, b, i := oneTask(4096)
	d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 4096}
	l.Begin()
	if err := l.Put(&d, b, i); err != nil {
		t.Fatal(err)
	}
	l.EndWaited()
	if woken() {
		t.Fatal("EndWaited woke the reaper: its submitter reaps")
	}
	l.Enter()
	l.Leave()
	if !woken() {
		t.Fatal("a waiter leaving with a descriptor in flight did not wake the reaper")
	}

	l.Enter()
	l.Begin()
	l.End()
	if woken() {
		t.Fatal("a publication with a waiter in woke the reaper")
	}
	l.Leave()
	if !woken() {
		t.Fatal("the waiter left work in flight and did not wake the reaper")
	}
	// On a fast lane (its small waits spin) a publication with no
	// waiter wakes the reaper at once.
	l.Begin()
	l.End()
	if !woken() {
		t.Fatal("a publication with no waiter left the reaper of a fast lane standing by")
	}
	// On a lane whose small waits sleep it owes the reaper a wakeup: the
	// submitter's own wait usually reaps it (Enter), else the grace, a
	// second publication or a waiter that leaves the reaping to the
	// reaper (Pay) wakes it. The grace is an hour while the test looks
	// whether a wakeup came at once (at its 20 us a loaded machine's
	// scheduler can let it run out first: CI under -race did), then
	// short, to see it run out.
	override(t, &kickGrace, time.Hour)
	l.smallWait.Store(int64(2 * waiting.FastLane))
	l.Begin()
	l.End()
	if woken() {
		t.Fatal("a publication with no waiter woke the reaper at once; its submitter may wait next")
	}
	l.Enter() // reaps what was owed: no wakeup left to come
	l.Leave() // with work in flight: wakes the reaper
	if !woken() {
		t.Fatal("the waiter left work in flight and did not wake the reaper")
	}
	kickGrace = time.Millisecond
	l.Begin()
	l.End()
	select {
	case <-l.standby:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody waited, and the grace did not wake the reaper")
	}
	kickGrace = time.Hour
	l.Begin()
	l.End()
	l.Begin()
	l.End()
	if !woken() {
		t.Fatal("a second publication while the first's wakeup was owed left the reaper standing by")
	}
	l.Begin()
	l.End()
	l.Pay()
	if !woken() {
		t.Fatal("Pay did not wake the reaper a publication owed")
	}
	l.Begin()
	l.End()
	l.Enter()
	if l.owed.Load() {
		t.Fatal("a waiter entered and the reaper is still owed a wakeup (the grace would wake it for nothing)")
	}
	l.Leave()
	if !woken() {
		t.Fatal("the waiter left work in flight and did not wake the reaper")
	}
	if !l.Probe(1) || !woken() {
		t.Fatal("a probe with no waiter left the reaper standing by")
	}
	l.standing.Store(false)
	l.Begin()
	l.End()
	if woken() {
		t.Fatal("a publication woke a reaper that was not standing by")
	}
}

// TestStandingReaperReapsAPublication: a reaper left standing by after a
// waiter left with nothing in flight reaps the next publication's
// completion. Its standby timer is an hour here, so a reaper that waited
// for the timer would not reap it within the test's 10 s.
func TestStandingReaperReapsAPublication(t *testing.T) {
	override(t, &standbySleep, time.Hour)
	l, err := NewLane(0, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := newPluginEnd(t, l)
	tr, b, i := oneTask(4096)
	go l.Reap(tr)
	defer l.Close(true)

	l.Enter()
	untilReaper(t, l, "the reaper stands by once a waiter entered", func(a waiting.Act) bool {
		return a == waiting.Standby && l.standing.Load()
	})
	l.Leave()

	d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 4096}
	l.Begin()
	if err := l.Put(&d, b, i); err != nil {
		t.Fatal(err)
	}
	l.End()
	if got := p.take(); len(got) != 1 {
		t.Fatalf("the plugin's ring holds %d descriptors, want 1", len(got))
	}
	p.complete(b.Token(i), 0, 4096)
	select {
	case <-b.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("the reaper standing by did not reap the completion of a publication made with no waiter")
	}
	if s := b.State(i, Now()); s != Completed {
		t.Fatalf("task state %v, want COMPLETED", s)
	}
}

// TestEnterWakesTheRingOnlyForASleepingReaper: a waiter's Enter wakes the
// completion ring to send a reaper asleep there to stand by, and only
// then: another caller's waiter asleep on the ring is marked as its
// consumer the same way, and is not woken by each waiter that comes in.
// The reaper is not running: the sleeping marks are set by hand (Cover
// marks a consumer asleep, asleep says it is the reaper), and a wakeup
// is a step of the ring's wake sequence (its header word at 260,
// sdk/ring's layout).
func TestEnterWakesTheRingOnlyForASleepingReaper(t *testing.T) {
	l := newTestLane(t, 0)
	seq := (*atomic.Uint32)(unsafe.Pointer(&l.CQ.Mem()[260]))
	l.cq.Cover() // a waiter asleep on the ring
	before := seq.Load()
	l.Enter()
	l.Leave()
	if seq.Load() != before {
		t.Fatal("Enter woke the ring with only a waiter asleep on it")
	}
	l.asleep.Store(true) // the reaper sleeps there too
	l.Enter()
	l.Leave()
	if seq.Load() == before {
		t.Fatal("Enter did not wake the ring with the reaper asleep on it")
	}
	l.asleep.Store(false)
	l.cq.Uncover()
}
