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
	first, n := b.ReserveRouted([]uint64{8192, 4096}, 0, &Route{Transport: 3, Slices: []int64{2, 1}, Slice: []uint64{4096, 4096}}, nil)
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

// TestReserveRoutedPresetsSliceAndRails: a task reserved with its first
// slice's length and its rails (a plugin of one rail) checks its
// completions against them before any Lane.Put recorded them: more bytes
// than the slice is Overlong, another rail is Misrouted, and the slice's
// own completion completes it.
func TestReserveRoutedPresetsSliceAndRails(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(3)
	r := &Route{Transport: 0, Slices: []int64{1, 1, 2}, Slice: []uint64{4096, 4096, 4096}, Rails: 1}
	if _, n := b.ReserveRouted([]uint64{4096, 4096, 8192}, 0, r, nil); n != 3 {
		t.Fatalf("reserved %d tasks, want 3", n)
	}
	for i := range 3 {
		b.Cut(i)
	}
	if v := tr.Apply(WithRail(b.Token(0), 0), ring.StatusOK, 4096); v != Applied {
		t.Fatalf("task 0, its slice on rail 0: %v, want applied", v)
	}
	if s := b.State(0, Now()); s != Completed {
		t.Fatalf("task 0 %v, want COMPLETED", s)
	}
	if v := tr.Apply(WithRail(b.Token(1), 1), ring.StatusOK, 4096); v != Misrouted {
		t.Fatalf("task 1, a completion on rail 1: %v, want misrouted", v)
	}
	if s := b.State(1, Now()); s != Failed {
		t.Fatalf("task 1 %v after its misrouted completion, want FAILED", s)
	}
	// Task 2 has 8192 bytes in two slices of 4096: one completion of
	// all 8192 fits the task but not the slice.
	if v := tr.Apply(WithRail(b.Token(2), 0), ring.StatusOK, 8192); v != Overlong {
		t.Fatalf("task 2, 8192 bytes for a slice of 4096: %v, want overlong", v)
	}
	if v := tr.Apply(WithRail(b.Token(2), 0), ring.StatusOK, 4096); v != Applied {
		t.Fatalf("task 2, its second slice: %v, want applied", v)
	}
	if s := b.State(2, Now()); s != Failed {
		t.Fatalf("task 2 %v after an overlong completion, want FAILED", s)
	}
}
