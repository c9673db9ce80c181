package progress

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// endWatch counts each task's Ended, to check "exactly once".
type endWatch struct {
	mu    sync.Mutex
	ended map[int][]State
}

func (w *endWatch) Settled(*Batch, int, ring.Status, int64) {}
func (w *endWatch) Ended(_ *Batch, i int, s State, _ int64) {
	w.mu.Lock()
	w.ended[i] = append(w.ended[i], s)
	w.mu.Unlock()
}

// A task canceled while its slices are out is not ended until the last
// of them is back: it reads PENDING (and Stopping) meanwhile, the batch
// is not done, the tracker counts it held and tells the hold hook once;
// its slices' completions, successful or not, then end it CANCELED, once.
func TestCancelWaitsForSlicesOut(t *testing.T) {
	tr := NewTracker(4)
	w := &endWatch{ended: map[int][]State{}}
	tr.Hook(Hook{Settled: w.Settled, Ended: w.Ended})
	var holds []int
	tr.Hook(Hook{Held: func(b *Batch, i int) { holds = append(holds, i) }})
	b, _ := tr.Allocate(2)
	i := b.Reserve(3<<20, 0)
	b.SetSlices(i, 3)
	b.Task(i).SetTransport(1)
	b.Cut(i)
	tr.Complete(b.Token(i), ring.StatusOK, 1<<20) // one back before the cancel

	if !b.Finish(i, Canceled, nil) {
		t.Fatal("Finish(CANCELED) of a pending task did not decide its end")
	}
	if s := b.State(i, Now()); s != Pending || !b.Stopping(i, Now()) || b.Done(Now()) {
		t.Fatalf("canceled with 2 slices out: %v, stopping %v, done %v; want PENDING, stopping, not done", s, b.Stopping(i, Now()), b.Done(Now()))
	}
	if s, at := b.Ending(i); s != Canceled || at == 0 {
		t.Fatalf("Ending = %v at %d, want CANCELED with a time", s, at)
	}
	if n, since := tr.HeldBy(1); tr.Held() != 1 || n != 1 || since == 0 {
		t.Fatalf("held %d, by transport 1: %d since %d; want 1, 1, a time", tr.Held(), n, since)
	}
	if n, _ := tr.HeldBy(2); n != 0 {
		t.Fatalf("transport 2 holds %d tasks, want 0", n)
	}
	if b.Finish(i, Timeout, nil) || b.Finish(i, Failed, errors.New("x")) {
		t.Fatal("a second end was taken for a task whose end was decided")
	}
	if b.Retry(i) {
		t.Fatal("Retry of a canceled task")
	}
	tr.Complete(b.Token(i), ring.StatusOK, 1<<20)
	if b.State(i, Now()) != Pending {
		t.Fatal("ended with a slice still out")
	}
	tr.Complete(b.Token(i), ring.StatusCanceled, 0) // the plugin aborted it
	if s := b.State(i, Now()); s != Canceled || !b.Done(Now()) || tr.Held() != 0 {
		t.Fatalf("after the last slice: %v, done %v, held %d; want CANCELED, done, 0", s, b.Done(Now()), tr.Held())
	}
	if len(holds) != 1 || holds[0] != i {
		t.Fatalf("hold hook told of %v, want task %d once", holds, i)
	}
	if got := w.ended[i]; len(got) != 1 || got[0] != Canceled {
		t.Fatalf("Ended reported %v, want CANCELED once", got)
	}
	// A task that completed first stays COMPLETED; a cancel changes nothing.
	j := b.Reserve(1, 0)
	b.SetSlices(j, 1)
	tr.Complete(b.Token(j), ring.StatusOK, 1)
	if b.Finish(j, Canceled, nil) || b.State(j, Now()) != Completed {
		t.Fatalf("cancel of a completed task: %v", b.State(j, Now()))
	}
}

// With nothing out (not sliced yet, or between attempts), a cancel ends
// the task at once; a submitter that cuts it afterwards sees it stopping
// and gives its slices up.
func TestCancelWithNothingOut(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(1)
	i := b.Reserve(10, 0)
	if !b.Finish(i, Canceled, nil) || b.State(i, Now()) != Canceled || tr.Held() != 0 {
		t.Fatalf("cancel before slicing: %v, held %d", b.State(i, Now()), tr.Held())
	}
	b.SetSlices(i, 2) // a submitter racing the cancel
	if !b.Stopping(i, Now()) {
		t.Fatal("a canceled task is not stopping")
	}
	b.Unsent(i, 2)
	if b.State(i, Now()) != Canceled {
		t.Fatal("state changed")
	}
}

// A held task whose plugin dies is released in its decided state, not
// FAILED and not offered for failover: nothing touches its memory now.
// A timed-out one that nobody looked at is decided and released at once.
func TestFailTransportReleasesHeld(t *testing.T) {
	tr := NewTracker(4)
	offered := 0
	tr.Hook(Hook{Failed: func(*Batch, int, error) bool { offered++; return true }})
	b, _ := tr.Allocate(2)
	i := b.Reserve(10, 0)
	j := b.Reserve(10, Now()-1)
	for _, k := range []int{i, j} {
		b.SetSlices(k, 1)
		b.Task(k).SetTransport(3)
		b.Cut(k)
	}
	b.Finish(i, Canceled, nil)
	if n := tr.FailTransport(3, errors.New("plugin killed")); n != 2 {
		t.Fatalf("FailTransport ended %d tasks, want 2", n)
	}
	if s := b.Task(i).State(); s != Canceled {
		t.Fatalf("held task after its plugin died: %v, want CANCELED", s)
	}
	if s := b.Task(j).State(); s != Timeout {
		t.Fatalf("expired task after its plugin died: %v, want TIMEOUT", s)
	}
	if offered != 0 || tr.Held() != 0 || !b.Done(Now()) {
		t.Fatalf("offered %d, held %d, done %v; want 0, 0, done", offered, tr.Held(), b.Done(Now()))
	}
	if tr.Complete(b.Token(i), ring.StatusOK, 10) && b.Task(i).State() != Canceled {
		t.Fatal("a late completion changed a released task")
	}
}

// Freeing a batch whose tasks are still held (its owner gave up waiting)
// takes them off the held count.
func TestFreeForgetsHeld(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(1)
	i := b.Reserve(10, 0)
	b.SetSlices(i, 1)
	b.Cancel()
	if tr.Held() != 1 {
		t.Fatalf("held %d, want 1", tr.Held())
	}
	if !tr.Live(b) {
		t.Fatal("an allocated batch is not live")
	}
	tr.Free(b)
	if tr.Held() != 0 || tr.Live(b) {
		t.Fatalf("after Free: held %d, live %v", tr.Held(), tr.Live(b))
	}
}

// cutBatch allocates a batch of tasks tasks from tr, each of slices
// bytes in as many slices and cut, as its submitter leaves it.
func cutBatch(t *testing.T, tr *Tracker, tasks, slices int) *Batch {
	t.Helper()
	b, err := tr.Allocate(tasks)
	if err != nil {
		t.Fatal(err)
	}
	for range tasks {
		i := b.Reserve(uint64(slices), 0)
		b.SetSlices(i, int64(slices))
		b.Cut(i)
	}
	return b
}

// Cancels racing completions: every task ends exactly once, in a state
// that one of them explains, and the held count returns to 0.
func TestCancelRacesCompletions(t *testing.T) {
	const tasks, slices = 64, 4
	for round := range 50 {
		tr := NewTracker(4)
		w := &endWatch{ended: map[int][]State{}}
		tr.Hook(Hook{Settled: w.Settled, Ended: w.Ended})
		var holds atomic.Int64
		tr.Hook(Hook{Held: func(*Batch, int) { holds.Add(1) }})
		b := cutBatch(t, tr, tasks, slices)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range tasks {
				for range slices {
					tr.Complete(b.Token(i), ring.StatusOK, 1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := tasks - 1; i >= 0; i-- {
				b.Finish(i, Canceled, nil)
			}
		}()
		wg.Wait()
		if !b.Done(Now()) || tr.Held() != 0 {
			t.Fatalf("round %d: done %v, held %d", round, b.Done(Now()), tr.Held())
		}
		for i := range tasks {
			got := w.ended[i]
			if len(got) != 1 || (got[0] != Canceled && got[0] != Completed) || got[0] != b.Task(i).State() {
				t.Fatalf("round %d task %d: Ended %v, state %v; want one CANCELED or COMPLETED", round, i, got, b.Task(i).State())
			}
		}
	}
}

// A task whose failed attempt failover took while slices of it were
// still out (its lane went down under them), then canceled, reads
// Failing and held; once its plugin's fence is confirmed, FailToken
// releases it CANCELED although failover took it: no later attempt
// will, and none of its slices will come back.
func TestFailTokenReleasesEndedFailoverTask(t *testing.T) {
	tr := NewTracker(4)
	tr.Hook(Hook{Failed: func(*Batch, int, error) bool { return true }}) // failover takes it, and waits
	b, _ := tr.Allocate(1)
	i := b.Reserve(2<<20, 0)
	b.SetSlices(i, 2)
	b.Task(i).SetTransport(3)
	b.Cut(i)
	b.Fail(i, errors.New("lane down while cutting")) // two slices out on the dead lane
	if !b.Failing(i) {
		t.Fatal("an attempt failover took does not read Failing")
	}
	b.Finish(i, Canceled, nil)
	if s := b.State(i, Now()); s != Pending || tr.Held() != 1 {
		t.Fatalf("canceled with slices out: %v, held %d; want PENDING, 1", s, tr.Held())
	}
	b.Detach(i)
	if !tr.FailToken(b.Token(i), errors.New("plugin killed")) {
		t.Fatal("FailToken left a canceled task that failover had taken")
	}
	if s := b.State(i, Now()); s != Canceled || tr.Held() != 0 || !b.Done(Now()) {
		t.Fatalf("after FailToken: %v, held %d, done %v; want CANCELED, 0, done", s, tr.Held(), b.Done(Now()))
	}
	// One still failover's (its end not decided) is left to it.
	j, _ := tr.Allocate(1)
	k := j.Reserve(1<<20, 0)
	j.SetSlices(k, 1)
	j.Task(k).SetTransport(3)
	j.Cut(k)
	j.Fail(k, errors.New("lane down"))
	j.Detach(k)
	if tr.FailToken(j.Token(k), errors.New("plugin killed")) || j.State(k, Now()) != Pending {
		t.Fatalf("FailToken ended a task failover owns: %v", j.State(k, Now()))
	}
}
