package observe

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

func TestStageNames(t *testing.T) {
	want := []string{"queued", "admitted", "routed", "sliced", "submitted", "completed", "retried", "ended"}
	for i, w := range want {
		if got := Stage(i + 1).String(); got != w {
			t.Errorf("Stage(%d) = %q, want %q", i+1, got, w)
		}
	}
	if got := Stage(0).String(); got != "stage(0)" {
		t.Errorf("Stage(0) = %q", got)
	}
}

func TestStatusCause(t *testing.T) {
	seen := map[string]ring.Status{}
	for st := ring.StatusOK; st.Valid(); st++ {
		c := StatusCause(st)
		if c == "" || c == "unknown" || strings.ContainsAny(c, " -") {
			t.Errorf("StatusCause(%v) = %q: want one word for every known status", st, c)
		}
		if prev, dup := seen[c]; dup {
			t.Errorf("StatusCause(%v) = StatusCause(%v) = %q", st, prev, c)
		}
		seen[c] = st
	}
	if got := StatusCause(ring.Status(99)); got != "unknown" {
		t.Errorf("StatusCause(99) = %q, want unknown", got)
	}
	if got := StatusCause(ring.Status(-1)); got != "unknown" {
		t.Errorf("StatusCause(-1) = %q, want unknown", got)
	}
}
