package admission

import "testing"

func TestPassThroughAdmitsEverything(t *testing.T) {
	var a Admitter = PassThrough{}
	for _, r := range []Request{
		{Length: 1},
		{Length: 64 << 20, Priority: 2, Deadline: 1, Intent: "checkpoint", Segment: "b"},
	} {
		if d := a.Admit(r, 0); d.Verdict != Now || d.Reason != "" {
			t.Errorf("PassThrough.Admit(%+v) = %+v, want now", r, d)
		}
	}
}

func TestVerdictNames(t *testing.T) {
	for v, want := range map[Verdict]string{Now: "now", Later: "later", Reject: "reject", 9: "verdict(9)"} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", uint8(v), got, want)
		}
	}
}

func TestPassThroughAllocatesNothing(t *testing.T) {
	var a Admitter = PassThrough{}
	r := Request{Length: 4096, Intent: "foreground_get", Segment: "peer"}
	if n := testing.AllocsPerRun(100, func() { _ = a.Admit(r, 1) }); n != 0 {
		t.Errorf("Admit allocates %v times per call", n)
	}
}
