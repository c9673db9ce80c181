package trace

import (
	"errors"
	"testing"

	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

func run(r *Recorder, batch uint64, trace bool, at int64) {
	for _, ev := range []observe.Event{
		{Stage: observe.Queued, Trace: trace, At: at, Op: ring.OpWrite, Length: 4096},
		{Stage: observe.Routed, Transport: "shm", Reasons: "shm: taken", At: at + 1000},
		{Stage: observe.Completed, Transport: "shm", Status: ring.StatusIO, At: at + 2000},
		{Stage: observe.Retried, Transport: "tcp", From: "shm", Cause: "io", Err: errors.New("boom"), Attempt: 1, At: at + 3000},
		{Stage: observe.Ended, State: progress.Completed, At: at + 5000},
	} {
		ev.Batch = batch
		r.Observe(ev)
	}
}

func TestRecorderKeepsAskedAndSampled(t *testing.T) {
	r := New(2, 0)
	run(r, 1, false, 1e6)
	if got := r.Stories(); len(got) != 0 {
		t.Fatalf("untraced task kept: %+v", got)
	}
	run(r, 2, true, 1e6)
	got := r.Stories()
	if len(got) != 1 || !got[0].Done() || got[0].Started.IsZero() || len(got[0].Events) != 5 {
		t.Fatalf("stories %+v", got)
	}
	if e := got[0].Events; e[0].Batch != 2 || e[1].Reasons != "shm: taken" || e[4].Stage != observe.Ended {
		t.Errorf("events %+v", e)
	}
	// A ring of 2: the third traced task pushes out the first, newest first.
	run(r, 3, true, 1e6)
	run(r, 4, true, 1e6)
	got = r.Stories()
	if len(got) != 2 || got[0].Events[0].Batch != 4 || got[1].Events[0].Batch != 3 {
		t.Errorf("after 3 stories with keep 2: batches %d, %d; want 4, 3", got[0].Events[0].Batch, got[1].Events[0].Batch)
	}

	sampled := New(8, 3) // one in 3 besides those that ask
	for b := uint64(1); b <= 9; b++ {
		run(sampled, b, false, 1e6)
	}
	if got := sampled.Stories(); len(got) != 3 {
		t.Errorf("sample_every 3 over 9 tasks kept %d stories, want 3", len(got))
	}
}

func TestRecorderBoundsWhatIsInProgress(t *testing.T) {
	r := New(2, 0)
	for b := uint64(1); b <= 5; b++ {
		r.Observe(observe.Event{Stage: observe.Queued, Batch: b, Trace: true, At: 1})
	}
	if got := r.Stories(); len(got) != 2 || got[0].Done() {
		t.Fatalf("5 tasks in progress with keep 2: %d stories kept", len(got))
	}
	if !r.Tracing(1, 0) || r.Tracing(5, 0) {
		t.Errorf("Tracing: the first two are traced, the fifth is not")
	}
	one := uint64(1)
	for range 2 * maxSteps {
		r.Observe(observe.Event{Stage: observe.Submitted, Batch: one, At: 2})
	}
	r.Observe(observe.Event{Stage: observe.Ended, Batch: one, At: 3})
	for _, s := range r.Stories() {
		if s.Events[0].Batch == one && (len(s.Events) != maxSteps+1 || !s.Done()) {
			t.Errorf("a long story has %d steps, want %d ending with ended", len(s.Events), maxSteps+1)
		}
	}
}
