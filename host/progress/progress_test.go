package progress

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/sdk/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoPlugin is a fake plugin for these tests only: it completes every
// descriptor of a lane's submission ring OK with its full length, in this
// process. The real plugins are exercised in host/ and plugins/.
func echoPlugin(l *Lane, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	sq, _ := ring.Attach(l.SQ.Mem())
	cq, _ := ring.Attach(l.CQ.Mem())
	go func() {
		defer close(done)
		buf := make([]ring.Descriptor, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := sq.Dequeue(buf)
			if n == 0 {
				sq.Wait(10*time.Microsecond, 5*time.Millisecond)
				continue
			}
			for i := range buf[:n] {
				c := ring.Descriptor{Token: buf[i].Token, Op: ring.OpCompletion, Length: buf[i].Length}
				for !cq.Enqueue(&c) {
					cq.WaitSpace(10*time.Microsecond, 5*time.Millisecond)
				}
			}
			cq.Publish()
		}
	}()
	return done
}

type rig struct {
	t    *Tracker
	l    *Lane
	stop chan struct{}
	echo <-chan struct{}
}

func newRig(tb testing.TB) *rig {
	l, err := NewLane(0, 1024, 10*time.Microsecond)
	if err != nil {
		tb.Fatal(err)
	}
	r := &rig{t: NewTracker(64), l: l, stop: make(chan struct{})}
	r.echo = echoPlugin(l, r.stop)
	go l.Reap(r.t)
	tb.Cleanup(func() {
		close(r.stop)
		l.sq.Wake()
		<-r.echo
		l.Close(true)
	})
	return r
}

// submit cuts one task of n bytes into slices of slice bytes.
func (r *rig) submit(b *Batch, n, slice uint64, deadline int64) int {
	i := b.Reserve(n, deadline)
	ns := int64((n + slice - 1) / slice)
	b.SetSlices(i, ns)
	r.l.Begin()
	d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite}
	for off := uint64(0); off < n; off += slice {
		d.Length = min(slice, n-off)
		if err := r.l.Put(&d, nil, 0); err != nil {
			panic(err)
		}
	}
	r.l.End()
	b.Cut(i)
	return i
}

func wait(tb testing.TB, b *Batch) {
	for !b.Done(Now()) {
		select {
		case <-b.Wake():
		case <-time.After(10 * time.Second):
			tb.Fatal("batch did not finish")
		}
	}
}

func TestSlicesFoldIntoOneTerminalState(t *testing.T) {
	r := newRig(t)
	b, err := r.t.Allocate(8)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{1, 1 << 20, 5<<20 + 3} {
		r.submit(b, n, 1<<20, 0)
	}
	wait(t, b)
	for i, want := range []uint64{1, 1 << 20, 5<<20 + 3} {
		tk := b.Task(i)
		if b.State(i, Now()) != Completed || tk.Bytes() != want {
			t.Fatalf("task %d: %v with %d bytes, want COMPLETED with %d", i, b.State(i, Now()), tk.Bytes(), want)
		}
	}
	if b.Finish(0, Failed, nil) {
		t.Fatal("a completed task could be finished again")
	}
	r.t.Free(b)
	if r.t.Complete(b.Token(0), ring.StatusOK, 1) {
		t.Fatal("a completion for a freed batch was applied")
	}
}

func TestFailedSliceFailsTask(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(1)
	i := b.Reserve(3<<20, 0)
	b.SetSlices(i, 3)
	tr.Complete(b.Token(i), ring.StatusOK, 1<<20)
	tr.Complete(b.Token(i), ring.StatusOutOfBounds, 0)
	if b.State(i, Now()) != Pending {
		t.Fatal("task ended before its last slice")
	}
	tr.Complete(b.Token(i), ring.StatusOK, 1<<20)
	if s := b.State(i, Now()); s != Failed || b.Task(i).SliceStatus() != ring.StatusOutOfBounds || !b.Done(Now()) {
		t.Fatalf("state %v status %v, want FAILED out of bounds", s, b.Task(i).SliceStatus())
	}
}

func TestDeadlineCancelAndUnsent(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(3)
	past := Now() - 1
	i := b.Reserve(10, past)
	b.SetSlices(i, 1)
	// Its slice is out: the task is decided TIMEOUT but not over until the
	// slice comes back (a plugin could still be touching its memory).
	if s := b.State(i, Now()); s != Pending || !b.Stopping(i, Now()) || tr.Held() != 1 {
		t.Fatalf("expired task with a slice out is %v (stopping %v, held %d), want PENDING, stopping, held", s, b.Stopping(i, Now()), tr.Held())
	}
	tr.Complete(b.Token(i), ring.StatusOK, 10) // late completion
	if s := b.State(i, Now()); s != Timeout || b.Task(i).Bytes() != 10 || tr.Held() != 0 {
		t.Fatalf("after its late completion the task is %v (held %d), want TIMEOUT", s, tr.Held())
	}
	j := b.Reserve(10, 0)
	b.SetSlices(j, 4)
	if b.Cancel() != 1 || b.State(j, Now()) != Pending || !b.Stopping(j, Now()) {
		t.Fatal("cancel did not decide the end of the pending task")
	}
	b.Unsent(j, 4) // its submitter gives up the slices it had not sent
	if b.State(j, Now()) != Canceled {
		t.Fatal("cancel did not end the pending task once no slice was out")
	}
	k := b.Reserve(10, 0)
	b.SetSlices(k, 2)
	b.Finish(k, Failed, errors.New("plugin gone"))
	b.Unsent(k, 2)
	if s := b.State(k, Now()); s != Failed || b.Task(k).Err() == nil {
		t.Fatalf("task with unsent slices is %v", s)
	}
	if !b.Done(Now()) {
		t.Fatal("batch not done")
	}
}

func TestTrackerSlots(t *testing.T) {
	tr := NewTracker(2)
	b1, _ := tr.Allocate(1)
	b2, _ := tr.Allocate(1)
	if _, err := tr.Allocate(1); !errors.Is(err, ErrTooManyBatches) {
		t.Fatalf("third batch: %v", err)
	}
	stale := b1.Token(0)
	tr.Free(b1)
	b3, err := tr.Allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	i := b3.Reserve(1, 0)
	b3.SetSlices(i, 1)
	// A token from the freed batch in the same slot must not reach b3.
	if tr.Complete(stale, ring.StatusOK, 1) || b3.Task(i).Bytes() != 0 {
		t.Fatal("stale generation applied")
	}
	tr.Free(b2)
	tr.Free(b3)
	if _, err := tr.Allocate(0); err == nil {
		t.Fatal("zero capacity accepted")
	}
}

// BenchmarkSubmitComplete measures the host's per-request work: reserve a
// task, cut it, publish it, reap its completion. The plugin side is the
// in-process echo fake, so this is the host's cost alone. -benchmem must
// show 0 allocs/op.
func BenchmarkSubmitComplete(b *testing.B) { benchSubmitComplete(b, newRig(b)) }

// benchSubmitComplete submits and reaps b.N requests on r in batches of
// 128, reporting allocations and requests per second.
func benchSubmitComplete(b *testing.B, r *rig) {
	const batch = 128
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		bt, _ := r.t.Allocate(batch)
		for range n {
			r.submit(bt, 4096, 1<<20, 0)
		}
		for !bt.Done(Now()) {
			<-bt.Wake()
		}
		r.t.Free(bt)
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// TestWaitersAndReaperShareTheCompletionRing has several goroutines drain
// the completion ring through Poll while the reaper runs, as Engine.Wait
// does. The ring must never see two consumers at once (it would flag
// itself corrupt and stop) and every task must end.
func TestWaitersAndReaperShareTheCompletionRing(t *testing.T) {
	r := newRig(t)
	const workers, rounds = 4, 2000
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for k := range rounds {
				b, err := r.t.Allocate(4)
				if err != nil {
					errs <- err
					return
				}
				for range 4 {
					r.submit(b, uint64(1+k%5000), 1<<20, 0)
				}
				give := time.Now().Add(10 * time.Second)
				for !b.Done(Now()) {
					if time.Now().After(give) {
						errs <- fmt.Errorf("worker %d round %d: a completion was lost", w, k)
						return
					}
					if r.l.Poll(r.t) == 0 {
						select {
						case <-b.Wake():
						case <-time.After(time.Millisecond):
						}
					}
				}
				for i := range 4 {
					if s := b.State(i, Now()); s != Completed {
						errs <- fmt.Errorf("worker %d round %d task %d: %v", w, k, i, s)
						return
					}
				}
				r.t.Free(b)
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := r.l.cq.Err(); err != nil {
		t.Fatalf("completion ring: %v", err)
	}
}

// TestWaitOn: a waiter reaps its own completions while the reaper stands
// by, a closed stop channel ends the wait, and once the last waiter leaves
// the reaper takes over again.
func TestWaitOn(t *testing.T) {
	r := newRig(t)
	b, _ := r.t.Allocate(2)
	r.submit(b, 8192, 4096, 0)
	if !r.l.WaitOn(r.t, func(int64) bool { return b.Done(Now()) }, nil, 0, false, false) {
		t.Fatal("WaitOn returned before the batch was done")
	}
	stop := make(chan struct{})
	close(stop)
	b2, _ := r.t.Allocate(1)
	i := b2.Reserve(10, 0)
	b2.SetSlices(i, 1) // never sent: nothing will complete it
	if r.l.WaitOn(r.t, func(int64) bool { return b2.Done(Now()) }, stop, 0, true, false) {
		t.Fatal("WaitOn reported an unfinished batch done")
	}
	if r.l.waiters.Load() != 0 {
		t.Fatal("waiter count not restored")
	}
	// Nobody waits now: the reaper must apply this completion by itself.
	b3, _ := r.t.Allocate(1)
	r.submit(b3, 10, 4096, 0)
	select {
	case <-b3.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("the reaper did not resume after the waiters left")
	}
	r.t.Free(b)
	r.t.Free(b2)
	r.t.Free(b3)
}

// A freed slot goes to the back of the queue: a late completion of a
// freed batch meets a slot reused as rarely as the table allows.
func TestTrackerReusesOldestSlot(t *testing.T) {
	tr := NewTracker(3)
	seen := map[uint32]int{}
	for range 9 {
		b, err := tr.Allocate(1)
		if err != nil {
			t.Fatal(err)
		}
		seen[b.slot]++
		tr.Free(b)
	}
	if len(seen) != 3 || seen[0] != 3 || seen[1] != 3 || seen[2] != 3 {
		t.Fatalf("9 allocate/free cycles over 3 slots used %v, want each slot 3 times", seen)
	}
}

// A full ring that nobody drains (a stalled plugin) holds a submitter
// only until its task ends: its deadline passes, or it is canceled.
func TestPutGivesUpWhenTaskEnds(t *testing.T) {
	l, err := NewLane(0, 2, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	tr := NewTracker(4)
	b, err := tr.Allocate(2)
	if err != nil {
		t.Fatal(err)
	}
	deadline := Now() + int64(50*time.Millisecond)
	i := b.Reserve(1<<20, deadline)
	b.SetSlices(i, 4)
	d := ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 1}
	l.Begin()
	var errs []error
	for range 4 {
		errs = append(errs, l.Put(&d, b, i))
	}
	l.End()
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrTaskEnded) {
		t.Fatalf("Put on a ring of 2 that nobody drains: %v; want two nil, then ErrTaskEnded", errs)
	}
	// Two slices sit on the ring: the task is TIMEOUT only once they are
	// back (here the plugin completes them without carrying them).
	if s := b.State(i, Now()); s != Pending || !b.Stopping(i, Now()) {
		t.Fatalf("task is %v, want PENDING and stopping while two slices are on the ring", s)
	}
	b.Unsent(i, 2)
	tr.Complete(b.Token(i), ring.StatusCanceled, 0)
	tr.Complete(b.Token(i), ring.StatusCanceled, 0)
	if s := b.State(i, Now()); s != Timeout {
		t.Fatalf("task is %v, want TIMEOUT", s)
	}

	j := b.Reserve(1, 0) // no deadline: only a cancel frees the submitter
	b.SetSlices(j, 1)
	d.Token = b.Token(j)
	done := make(chan error)
	go func() {
		l.Begin()
		defer l.End()
		done <- l.Put(&d, b, j)
	}()
	b.Cancel()
	if err := <-done; !errors.Is(err, ErrTaskEnded) {
		t.Fatalf("Put for a canceled task = %v, want ErrTaskEnded", err)
	}
}

// A failed attempt is offered to the Failed hook once and, taken, leaves
// the task pending; after Retry, completions of the earlier attempt are
// dropped and the task ends once, with the new attempt's bytes.
func TestRetryDropsEarlierAttempt(t *testing.T) {
	tr := NewTracker(4)
	offered := 0
	tr.Hook(Hook{Failed: func(b *Batch, i int, err error) bool { offered++; return true }})
	b, err := tr.Allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	i := b.Reserve(100, 0)
	b.SetSlices(i, 2)
	b.Cut(i)
	old := b.Token(i)
	tr.Complete(old, ring.StatusIO, 0)
	tr.Complete(old, ring.StatusOK, 50)
	if s := b.Task(i).State(); s != Pending || offered != 1 {
		t.Fatalf("after a failed attempt: %v, offered %d times; want PENDING, offered once", s, offered)
	}
	if !b.Retry(i) || b.Attempt(i) != 1 {
		t.Fatalf("Retry refused or attempt %d", b.Attempt(i))
	}
	b.SetSlices(i, 1)
	b.Cut(i)
	if tr.Complete(old, ring.StatusOK, 100) {
		t.Fatal("a completion of attempt 0 was applied to attempt 1")
	}
	if s := b.Task(i).State(); s != Pending {
		t.Fatalf("a stale completion moved the task to %v", s)
	}
	tr.Complete(b.Token(i), ring.StatusOK, 100)
	if s, n := b.Task(i).State(), b.Task(i).Bytes(); s != Completed || n != 100 || !b.Done(Now()) {
		t.Fatalf("after the retry: %v with %d bytes, want COMPLETED with 100", s, n)
	}
	if b.Retry(i) {
		t.Fatal("Retry of an ended task")
	}
}
