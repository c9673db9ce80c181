package progress

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// contractRig is one batch of two tasks in a fresh tracker: task 0 of 2
// MiB cut into two 1 MiB slices put on rail 2, task 1 of 1 MiB in one
// slice on rail 2, both sent as a lane's Put records them.
func contractRig(t *testing.T) (*Tracker, *Batch) {
	t.Helper()
	tr := NewTracker(64)
	b, err := tr.Allocate(4)
	if err != nil {
		t.Fatal(err)
	}
	i := b.Reserve(2<<20, 0)
	b.SetSlices(i, 2)
	b.sent(i, 2, 1<<20, 0, 0)
	b.sent(i, 2, 1<<20, 0, 0)
	b.Cut(i)
	j := b.Reserve(1<<20, 0)
	b.SetSlices(j, 1)
	b.sent(j, 2, 1<<20, 0, 0)
	b.Cut(j)
	return tr, b
}

// TestTokenBitFlipsAreRefused flips each bit of a real token in turn: no
// flip may be applied to any task, and the task whose token was flipped
// must not complete from it.
func TestTokenBitFlipsAreRefused(t *testing.T) {
	for bit := range 64 {
		tr, b := contractRig(t)
		tok := WithRail(b.Token(1), 2)
		bad := tok ^ 1<<bit
		v := tr.Apply(bad, ring.StatusOK, 1<<20)
		// Flipping bit 0 names task 0, which has slices outstanding and
		// the same rail: the token cannot tell the two apart, and that
		// completion is task 0's as far as the host can know. Every other
		// flip names something never sent.
		if bit == 0 {
			if v != Applied {
				t.Fatalf("bit 0: %v, want applied to task 0", v)
			}
			continue
		}
		// Flipping an attempt bit up names an attempt not yet made
		// (Unknown); every flip here is of a value that never existed.
		if v != Unknown && !(v == Misrouted && bit >= 40 && bit < 46) {
			t.Errorf("bit %d: flipped token %#x %v", bit, bad, v)
		}
		if s := b.Task(1).State(); s == Completed {
			t.Errorf("bit %d: task 1 COMPLETED from a flipped token", bit)
		}
		if b.Task(0).Bytes() != 0 {
			t.Errorf("bit %d: task 0 got %d bytes from a flipped token", bit, b.Task(0).Bytes())
		}
	}
}

// TestTheVendorTrialsFlips are the three flips a vendor trial found, in a
// batch of one task, as a plugin on one rail sends them.
func TestTheVendorTrialsFlips(t *testing.T) {
	for _, c := range []struct {
		bit  int
		want Verdict
	}{{0, Unknown}, {40, Misrouted}, {63, Unknown}} {
		tr := NewTracker(64)
		b, _ := tr.Allocate(1)
		i := b.Reserve(4096, 0)
		b.SetSlices(i, 1)
		b.sent(i, 0, 4096, 0, 0)
		b.Cut(i)
		if v := tr.Apply(b.Token(i)^1<<c.bit, ring.StatusOK, 4096); v != c.want {
			t.Errorf("bit %d: %v, want %v", c.bit, v, c.want)
		}
		s := b.Task(i).State()
		switch c.bit {
		case 40:
			// The token names the task but another rail: its slice fails,
			// so that the attempt fails over rather than waiting.
			if s != Failed || b.Task(i).SliceStatus() != ring.StatusProtocol {
				t.Errorf("bit 40: task %v status %v, want FAILED with a protocol error", s, b.Task(i).SliceStatus())
			}
		default:
			if s != Pending {
				t.Errorf("bit %d: task %v, want it still pending", c.bit, s)
			}
		}
	}
}

func TestDuplicateCompletionIsRefused(t *testing.T) {
	tr, b := contractRig(t)
	tok := WithRail(b.Token(1), 2)
	if v := tr.Apply(tok, ring.StatusOK, 1<<20); v != Applied {
		t.Fatalf("first completion: %v", v)
	}
	if v := tr.Apply(tok, ring.StatusOK, 1<<20); v != Duplicate {
		t.Fatalf("second completion: %v, want duplicate", v)
	}
	if tk := b.Task(1); tk.State() != Completed || tk.Bytes() != 1<<20 {
		t.Fatalf("task %v with %d bytes after a duplicate", tk.State(), tk.Bytes())
	}
	// A duplicate of a task that ended by deadline or cancel is refused
	// too, while a late completion it was still owed is not.
	b.Cancel()
	tok0 := WithRail(b.Token(0), 2)
	for k, want := range []Verdict{Applied, Applied, Duplicate} {
		if v := tr.Apply(tok0, ring.StatusOK, 1<<20); v != want {
			t.Fatalf("canceled task's completion %d: %v, want %v", k, v, want)
		}
	}
}

func TestOverlongCompletionFailsItsSlice(t *testing.T) {
	tr, b := contractRig(t)
	tok := WithRail(b.Token(0), 2)
	// More than the slice, though not more than the task.
	if v := tr.Apply(tok, ring.StatusOK, 1<<20+1); v != Overlong {
		t.Fatalf("slice+1 bytes: %v, want overlong", v)
	}
	if v := tr.Apply(tok, ring.StatusOK, 1<<20); v != Applied {
		t.Fatalf("the other slice: %v", v)
	}
	tk := b.Task(0)
	if tk.State() != Failed || tk.SliceStatus() != ring.StatusProtocol || tk.Bytes() != 1<<20 {
		t.Fatalf("task %v status %v bytes %d, want FAILED, protocol error, 1 MiB", tk.State(), tk.SliceStatus(), tk.Bytes())
	}
	// Without a slice length recorded (no lane put it), the task's
	// length bounds what its completions add up to.
	b2, _ := tr.Allocate(1)
	i := b2.Reserve(100, 0)
	b2.SetSlices(i, 2)
	tr.Apply(b2.Token(i), ring.StatusOK, 60)
	if v := tr.Apply(b2.Token(i), ring.StatusOK, 60); v != Overlong {
		t.Fatalf("120 of 100 bytes: %v, want overlong", v)
	}
	if s := b2.Task(i).State(); s != Failed {
		t.Fatalf("over-reported task is %v, want FAILED", s)
	}
}

func TestLateCompletionsAreNotViolations(t *testing.T) {
	tr, b := contractRig(t)
	old := WithRail(b.Token(1), 2)
	if !b.Retry(1) {
		t.Fatal("retry refused")
	}
	b.SetSlices(1, 1)
	if v := tr.Apply(old, ring.StatusOK, 1<<20); v != Late {
		t.Fatalf("earlier attempt: %v, want late", v)
	}
	tr.Free(b)
	if v := tr.Apply(old, ring.StatusOK, 1<<20); v != Late {
		t.Fatalf("freed batch: %v, want late", v)
	}
}
