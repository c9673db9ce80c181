package admission_test

import (
	"errors"
	"testing"

	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/progress"
)

// fakeResume records what the dispatcher resumes and abandons, and
// checks each resumed task's batch is pinned while it runs.
type fakeResume struct {
	tr        *progress.Tracker
	resumed   chan admission.Held
	abandoned chan admission.Held
	unpinned  bool // a resumed task's batch was not pinned
}

func (f *fakeResume) Resume(h admission.Held, g admission.Grant) {
	if !f.tr.Pinned(h.B) {
		f.unpinned = true
	}
	f.resumed <- h
}

func (f *fakeResume) Abandon(h admission.Held) { f.abandoned <- h }

func newDispatcher(t *testing.T, maxQueued int) (*admission.Dispatcher, *fakeResume, *progress.Batch, chan struct{}) {
	t.Helper()
	tr := progress.NewTracker(4)
	b, err := tr.Allocate(8)
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		b.Reserve(4096, 0)
	}
	port := &fakeResume{tr: tr, resumed: make(chan admission.Held, 8), abandoned: make(chan admission.Held, 8)}
	quit := make(chan struct{})
	d, err := admission.NewDispatcher(admission.DispatcherConfig{
		Queue: admission.Config{Total: admission.Limits{InflightRequests: 1}, MaxQueued: maxQueued}, Tracker: tr, Port: port, Quit: quit,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d, port, b, quit
}

func held(b *progress.Batch, i int) admission.Held {
	return admission.Held{B: b, ID: b.ID(), I: int32(i)}
}

// TestDispatcherResumesWhenABudgetFrees: with one request in flight
// allowed, the second is held; the first's end gives its grant back and
// the dispatcher resumes the second, its batch pinned meanwhile.
func TestDispatcherResumesWhenABudgetFrees(t *testing.T) {
	d, port, b, quit := newDispatcher(t, 0)
	done := make(chan struct{})
	go func() { d.Run(); close(done) }()
	defer func() { close(quit); <-done }()
	var tl admission.Tally
	r := admission.Request{Length: 4096}
	g, goOn, err := d.Hold(held(b, 0), &r, progress.Now(), &tl, true)
	if !goOn || err != nil {
		t.Fatalf("the first request: go %v, err %v; want it let go", goOn, err)
	}
	var tg admission.TaskGrant
	d.Granted(&tg, g, false)
	if _, goOn, err := d.Hold(held(b, 1), &r, progress.Now(), &tl, true); goOn || err != nil {
		t.Fatalf("the second request: go %v, err %v; want it held", goOn, err)
	}
	if st := d.Stats(); st.Held != 1 || st.HeldTotal != 1 {
		t.Fatalf("stats %+v, want one held", st)
	}
	d.GiveBack(&tg, true)
	if tg.Holding() {
		t.Fatal("the grant is still held after GiveBack")
	}
	if h := <-port.resumed; h.I != 1 {
		t.Fatalf("resumed task %d, want 1", h.I)
	}
	if port.unpinned {
		t.Fatal("a task was resumed with its batch not pinned")
	}
}

// TestDispatcherForgetsAndAbandons: the held tasks of a batch being
// freed are dropped, never resumed; those still held at the engine's
// close are abandoned.
func TestDispatcherForgetsAndAbandons(t *testing.T) {
	d, port, b, quit := newDispatcher(t, 0)
	var tl admission.Tally
	r := admission.Request{Length: 4096}
	d.Hold(held(b, 0), &r, progress.Now(), &tl, true) // in flight
	d.Hold(held(b, 1), &r, progress.Now(), &tl, true) // held
	d.Forget(b)
	if st := d.Stats(); st.Held != 0 {
		t.Fatalf("%d held after Forget, want none", st.Held)
	}
	d.Hold(held(b, 2), &r, progress.Now(), &tl, true) // held again
	close(quit)
	d.Run() // returns at quit, abandoning what is held
	if h := <-port.abandoned; h.I != 2 {
		t.Fatalf("abandoned task %d, want 2", h.I)
	}
	select {
	case h := <-port.resumed:
		t.Fatalf("task %d was resumed", h.I)
	default:
	}
}

// TestDispatcherBusy: a full queue refuses at once a submitter that may
// not wait, with ErrBusy.
func TestDispatcherBusy(t *testing.T) {
	d, _, b, _ := newDispatcher(t, 1)
	var tl admission.Tally
	r := admission.Request{Length: 4096}
	d.Hold(held(b, 0), &r, progress.Now(), &tl, false) // in flight
	d.Hold(held(b, 1), &r, progress.Now(), &tl, false) // held: the queue's one place
	if _, goOn, err := d.Hold(held(b, 2), &r, progress.Now(), &tl, false); goOn || !errors.Is(err, admission.ErrBusy) {
		t.Fatalf("a third request: go %v, err %v; want ErrBusy", goOn, err)
	}
}
