package progress

import (
	"errors"
	"testing"
)

// TestFailRunSeparatesRuns puts one task on a lane of run 1 and one on a
// lane of run 2 of the same transport (an upgrade's old and new runs),
// and one not yet on a lane: the retired run fails only its own, and a
// dying run the rest, never the retiring run's.
func TestFailRunSeparatesRuns(t *testing.T) {
	tr := NewTracker(8)
	b, err := tr.Allocate(4)
	if err != nil {
		t.Fatal(err)
	}
	put := func(run uint32) int {
		i := b.Reserve(4096, 0)
		b.Task(i).SetTransport(0)
		b.SetSlices(i, 1)
		if run != 0 {
			b.sent(i, 0, 4096, 3, run)
		}
		b.Cut(i)
		return i
	}
	old, cur, none := put(1), put(2), put(0)
	if got := b.Task(old).Lane(); got != 3 {
		t.Fatalf("lane %d, want 3", got)
	}
	if got := b.Task(cur).Run(); got != 2 {
		t.Fatalf("run %d, want 2", got)
	}
	boom := errors.New("gone")
	if n := tr.FailRetired(0, 1, boom, nil); n != 1 || b.State(old, 0) != Failed || b.State(cur, 0) != Pending || b.State(none, 0) != Pending {
		t.Fatalf("retired run 1 ended %d tasks; states %v %v %v", n, b.State(old, 0), b.State(cur, 0), b.State(none, 0))
	}
	if n := tr.FailRunExcept(0, 2, boom, nil); n != 2 || b.State(cur, 0) != Failed || b.State(none, 0) != Failed {
		t.Fatalf("run 2's death ended %d tasks; states %v %v", n, b.State(cur, 0), b.State(none, 0))
	}
}
