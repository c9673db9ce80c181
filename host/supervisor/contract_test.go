package supervisor

import (
	"testing"
	"time"
)

// TestContractWindow drives the rule with a simulated clock: 3
// violations within 10s make a run faulty, spread wider they do not, and
// a rule of 0 never does.
func TestContractWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w := contractWindow{rule: Contract{Violations: 3, Within: 10 * time.Second}}
	for _, step := range []struct {
		sec    int
		total  uint64
		in     uint64
		faulty bool
	}{
		{1, 1, 1, false},  // the run's first: counted from 0
		{5, 2, 2, false},  //
		{12, 2, 1, false}, // the look at 1s (total 1) is now the window's start
		{16, 3, 1, false}, // base: the look at 5s (total 2)
		{20, 4, 2, false}, //
		{21, 5, 3, true},  // three since the look at 5s, the window's start
	} {
		in, faulty := w.observe(at(step.sec), step.total)
		if in != step.in || faulty != step.faulty {
			t.Fatalf("at %ds total %d: %d within the window, faulty %v; want %d, %v", step.sec, step.total, in, faulty, step.in, step.faulty)
		}
	}
	if len(w.samples) > 5 { // 5s, 12s, 16s, 20s, 21s
		t.Fatalf("%d samples kept; only the window's are needed", len(w.samples))
	}
	off := contractWindow{rule: Contract{Within: time.Second}}
	if _, faulty := off.observe(t0, 1000); faulty {
		t.Fatal("a rule of 0 violations made a run faulty")
	}
	burst := contractWindow{rule: Contract{Violations: 10, Within: 10 * time.Second}}
	if in, faulty := burst.observe(t0, 10); in != 10 || !faulty {
		t.Fatalf("10 at once: %d, %v; want faulty", in, faulty)
	}
}
