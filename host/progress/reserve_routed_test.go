package progress

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// TestReserveRoutedSetsRouteAndCut: tasks reserved routed carry their
// plugin and their slice counts as SetTransport and SetSlices would set
// them: a task of two slices completes on its second completion, not its
// first, a third is a duplicate, and a task of one on its one.
func TestReserveRoutedSetsRouteAndCut(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(2)
	first, n := b.ReserveRouted([]uint64{8192, 4096}, 0, &Route{Transport: 3, Slices: []int64{2, 1}, Slice: []uint64{4096, 4096}})
	if first != 0 || n != 2 {
		t.Fatalf("reserved %d tasks from %d, want 2 from 0", n, first)
	}
	for i := range 2 {
		if got := b.Task(i).Transport(); got != 3 {
			t.Fatalf("task %d carried by plugin %d, want 3", i, got)
		}
	}
	for i, want := range []struct{ slices int }{{2}, {1}} {
		b.Cut(i)
		for k := range want.slices {
			if s := b.State(i, Now()); s != Pending {
				t.Fatalf("task %d %v after %d of its %d completions, want PENDING", i, s, k, want.slices)
			}
			if v := tr.Apply(b.Token(i), ring.StatusOK, 4096); v != Applied {
				t.Fatalf("task %d completion %d: %v, want applied", i, k, v)
			}
		}
		if s := b.State(i, Now()); s != Completed {
			t.Fatalf("task %d %v after its %d completions, want COMPLETED", i, s, want.slices)
		}
		if v := tr.Apply(b.Token(i), ring.StatusOK, 4096); v != Duplicate {
			t.Fatalf("task %d: a completion past its slices was %v, want a duplicate", i, v)
		}
	}
}
