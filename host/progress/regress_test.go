package progress

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestNoBatchFreedUnderAWalk frees a batch while Each (which FailTransport
// walks the batches with) holds it: Free must wait for the walk, or the
// pool hands the batch to a new owner whose Allocate and Reserve rewrite it
// under the walker. Found by the host's chaos test, where the race
// detector caught a plugin crash's FailTransport reading a Transfer batch
// that another goroutine had freed and was allocating again.
func TestNoBatchFreedUnderAWalk(t *testing.T) {
	tr := NewTracker(4)
	b, err := tr.Allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	b.SetSlices(b.Reserve(1, 0), 1)
	var freed atomic.Bool
	done := make(chan struct{})
	walked := 0
	tr.Each(func(x *Batch) {
		walked++
		go func() {
			defer close(done)
			tr.Free(x)
			freed.Store(true)
		}()
		// A Free that does not wait for the walk returns within a few
		// yields; one that does returns only after Each.
		for i := 0; i < 10000 && !freed.Load(); i++ {
			runtime.Gosched()
		}
		if freed.Load() {
			t.Error("Free returned while Each held the batch")
		}
	})
	<-done
	if walked != 1 {
		t.Fatalf("Each visited %d batches, want 1", walked)
	}
	if !freed.Load() {
		t.Fatal("Free did not finish after the walk")
	}
}
