package observe

import "testing"

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
