package progress

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
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

// TestPluginTimeoutEndsTaskTimeout: a slice the plugin reports
// StatusTimeout (its deadline passed before it was sent) ends the task
// TIMEOUT, not FAILED; whether the host or the plugin noticed the
// deadline first must not change the task's state. Found by the host's
// chaos test: a batch task with a deadline ended FAILED with "deadline
// exceeded: plugin reported deadline exceeded".
func TestPluginTimeoutEndsTaskTimeout(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(2)
	far := Now() + int64(time.Hour)
	i := b.Reserve(2<<20, far)
	b.SetSlices(i, 2)
	tr.Complete(b.Token(i), ring.StatusOK, 1<<20)
	tr.Complete(b.Token(i), ring.StatusTimeout, 0)
	if s := b.State(i, Now()); s != Timeout {
		t.Fatalf("task whose slice the plugin timed out is %v, want TIMEOUT", s)
	}
	j := b.Reserve(1, far)
	b.SetSlices(j, 1)
	tr.Complete(b.Token(j), ring.StatusIO, 0)
	if s := b.State(j, Now()); s != Failed {
		t.Fatalf("task with an I/O error is %v, want FAILED", s)
	}
}
