package sdk

import (
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

func TestPrecheck(t *testing.T) {
	cases := []struct {
		name string
		d    ring.Descriptor
		st   ring.Status
		done bool
	}{
		{"nop", ring.Descriptor{Op: ring.OpNop}, ring.StatusOK, true},
		{"write", ring.Descriptor{Op: ring.OpWrite, Length: 1}, ring.StatusOK, false},
		{"read before deadline", ring.Descriptor{Op: ring.OpRead, Length: 1, Deadline: 101}, ring.StatusOK, false},
		{"deadline now", ring.Descriptor{Op: ring.OpRead, Length: 1, Deadline: 100}, ring.StatusTimeout, true},
		{"zero length", ring.Descriptor{Op: ring.OpWrite}, ring.StatusInvalid, true},
		{"unknown op", ring.Descriptor{Op: 42, Length: 1}, ring.StatusInvalid, true},
		{"completion op", ring.Descriptor{Op: ring.OpCompletion, Length: 1}, ring.StatusInvalid, true},
	}
	for _, c := range cases {
		if st, done := precheck(&c.d, func() int64 { return 100 }); st != c.st || done != c.done {
			t.Errorf("%s: Precheck = %v, %v; want %v, %v", c.name, st, done, c.st, c.done)
		}
	}
}

// clockCompleter is a Completer that offers a run clock, as the SDK's
// lane does, and records what was completed.
type clockCompleter struct {
	now  int64
	done []ring.Status
}

func (c *clockCompleter) runNow() int64 { return c.now }
func (c *clockCompleter) Complete(_ uint64, st ring.Status, _ uint64) {
	c.done = append(c.done, st)
}

// TestAdmitChecksDeadlinesAgainstTheRun: a descriptor handed over by the
// lane is checked against the time its run was dequeued, not a clock read
// of its own; outside a run (0) and for other completers it is the wall
// clock.
func TestAdmitChecksDeadlinesAgainstTheRun(t *testing.T) {
	var o Outcomes
	c := &clockCompleter{now: 100}
	if !o.Admit(&ring.Descriptor{Op: ring.OpWrite, Length: 1, Deadline: 101}, c, false) || len(c.done) != 0 {
		t.Fatalf("a deadline after the run's time was refused (%v): Admit read a clock of its own", c.done)
	}
	if o.Admit(&ring.Descriptor{Op: ring.OpWrite, Length: 1, Deadline: 100}, c, false) || len(c.done) != 1 || c.done[0] != ring.StatusTimeout {
		t.Fatalf("a deadline at the run's time: completed %v, want StatusTimeout", c.done)
	}
	c.now = 0 // between runs
	if o.Admit(&ring.Descriptor{Op: ring.OpWrite, Length: 1, Deadline: 101}, c, false) || c.done[1] != ring.StatusTimeout {
		t.Fatalf("outside a run a deadline of 101 ns after the epoch was admitted (%v): want the wall clock's verdict", c.done)
	}
	before := time.Now().UnixNano()
	if n := Now(&clockCompleter{}); n < before {
		t.Fatalf("Now outside a run = %d, before the wall clock's %d", n, before)
	}
	if n := Now(&clockCompleter{now: 7}); n != 7 {
		t.Fatalf("Now in a run = %d, want the run's 7", n)
	}
}

type nopCompleter struct{}

func (nopCompleter) Complete(uint64, ring.Status, uint64) {}

// BenchmarkAdmitDeadline is the per-descriptor cost of the checks every
// transport's Submit starts with, for a descriptor with a deadline (as
// every descriptor has since transfer.default_deadline): through the
// lane's run clock, and through a Completer without one (a clock read).
func BenchmarkAdmitDeadline(b *testing.B) {
	d := ring.Descriptor{Op: ring.OpWrite, Length: 4096, Deadline: time.Now().Add(time.Hour).UnixNano()}
	for _, c := range []struct {
		name string
		c    Completer
	}{{"clock=run", &clockCompleter{now: 1}}, {"clock=wall", nopCompleter{}}} {
		b.Run(c.name, func(b *testing.B) {
			var o Outcomes
			for range b.N {
				if !o.Admit(&d, c.c, false) {
					b.Fatal("refused")
				}
			}
		})
	}
}
