package progress

import "testing"

// TestCutRunMarksItsTasksCut: CutRun marks the tasks it is given cut
// (their plugin's death now fails them over) and no others; Retry makes
// a cut task's next attempt one being cut again. (Its barrier, which
// orders the marks before the submitter's look at the lane, is not
// tested here: on these machines a store waits in the store buffer for
// less time than a line takes between cores, and a stress of the two
// sides did not fail without it.)
func TestCutRunMarksItsTasksCut(t *testing.T) {
	tr := NewTracker(4)
	b, err := tr.Allocate(8)
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		b.Reserve(4096, 0)
	}
	b.CutRun([]int32{1, 3, 4})
	for i := range 8 {
		want := i != 1 && i != 3 && i != 4
		if got := b.Cutting(i); got != want {
			t.Errorf("task %d: Cutting = %v after CutRun of 1, 3 and 4; want %v", i, got, want)
		}
	}
	if !b.Retry(3) || !b.Cutting(3) {
		t.Error("a retried task's new attempt is not being cut")
	}
}
