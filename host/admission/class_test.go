package admission

import (
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

// TestClassMapping pins Ferry's priorities to TENT's classes: the C ABI
// passes TENT's numbers (PRIO_HIGH=0, PRIO_MEDIUM=1, PRIO_LOW=2).
func TestClassMapping(t *testing.T) {
	for _, c := range []struct {
		p    sdk.Priority
		c    Class
		tent uint8
		name string
	}{
		{sdk.PriorityHigh, ClassHigh, 0, "high"},
		{sdk.PriorityNormal, ClassMedium, 1, "medium"},
		{sdk.PriorityLow, ClassLow, 2, "low"},
	} {
		if got := ClassOf(c.p); got != c.c || uint8(got) != c.tent || got.String() != c.name {
			t.Errorf("ClassOf(%v) = %v (%d), want %s (%d)", c.p, got, uint8(got), c.name, c.tent)
		}
		if got := c.c.Priority(); got != c.p {
			t.Errorf("%v.Priority() = %v, want %v", c.c, got, c.p)
		}
		if got, ok := ParseClass(c.name); !ok || got != c.c {
			t.Errorf("ParseClass(%q) = %v, %v", c.name, got, ok)
		}
	}
	if got := ClassOf(9); got != ClassMedium {
		t.Errorf("ClassOf(9) = %v, want medium", got)
	}
	if _, ok := ParseClass("urgent"); ok {
		t.Error(`ParseClass("urgent") succeeded`)
	}
}
