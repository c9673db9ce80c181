package stall

import (
	"strings"
	"testing"
	"time"
)

// A run holding ended tasks' slices is killed once the earliest end is
// grace old, not before; holding nothing is never a reason.
func TestOverdue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	grace := 2 * time.Second
	cases := []struct {
		name string
		now  time.Time
		h    Held
		kill bool
	}{
		{"nothing held", t0.Add(time.Hour), Held{}, false},
		{"within grace", t0.Add(grace - time.Millisecond), Held{Tasks: 3, Since: t0}, false},
		{"at grace", t0.Add(grace), Held{Tasks: 3, Since: t0}, true},
		{"past grace", t0.Add(time.Minute), Held{Tasks: 1, Since: t0}, true},
	}
	for _, c := range cases {
		v := Overdue(c.now, c.h, grace)
		if (v != nil) != c.kill {
			t.Fatalf("%s: verdict %v, want kill %v", c.name, v, c.kill)
		}
		if v == nil {
			continue
		}
		if v.Tasks != c.h.Tasks || v.For != c.now.Sub(t0) || v.Grace != grace {
			t.Fatalf("%s: verdict %+v", c.name, v)
		}
		if s := v.String(); !strings.Contains(s, "end_grace") || !strings.Contains(s, "ended") {
			t.Fatalf("%s: reason %q does not say what was held and which setting bounds it", c.name, s)
		}
	}
}
