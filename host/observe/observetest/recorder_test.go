package observetest

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
)

// feed records one task's events, given as stage@attempt pairs, ending
// with state.
func feed(r *Recorder, task int, state progress.State, evs ...observe.Event) {
	for _, ev := range evs {
		ev.Batch, ev.Task = 1, task
		if ev.Stage == observe.Ended {
			ev.State = state
		}
		r.Observe(ev)
	}
}

func ev(s observe.Stage, attempt int) observe.Event { return observe.Event{Stage: s, Attempt: attempt} }

func TestCheckAcceptsGoodRuns(t *testing.T) {
	r := New()
	feed(r, 0, progress.Completed, ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0), ev(observe.Sliced, 0),
		ev(observe.Submitted, 0), ev(observe.Completed, 0), ev(observe.Ended, 0))
	feed(r, 1, progress.Completed, ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0), ev(observe.Sliced, 0),
		ev(observe.Submitted, 0), ev(observe.Retried, 1), ev(observe.Routed, 1), ev(observe.Sliced, 1), ev(observe.Submitted, 1),
		ev(observe.Completed, 1), ev(observe.Ended, 1))
	feed(r, 2, progress.Invalid, ev(observe.Queued, 0), ev(observe.Ended, 0))
	feed(r, 3, progress.Canceled, ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0), ev(observe.Sliced, 0),
		ev(observe.Submitted, 0), ev(observe.Ended, 0))
	s, errs := r.Check()
	if len(errs) != 0 {
		t.Fatalf("good runs refused: %v", errs)
	}
	if s.Tasks != 4 || s.Retried != 1 || s.Ended["COMPLETED"] != 2 || s.Stages[observe.Routed] != 4 {
		t.Errorf("summary %v", s)
	}
}

func TestCheckCatchesBadRuns(t *testing.T) {
	for _, c := range []struct {
		name  string
		state progress.State
		evs   []observe.Event
		want  string
	}{
		{"never ended", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0)}, "ended 0 times"},
		{"ended twice", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Ended, 0), ev(observe.Ended, 0)}, "ended 2 times"},
		{"event after ended", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Ended, 0), ev(observe.Sliced, 0)}, "after ended"},
		{"sliced before routed", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Sliced, 0), ev(observe.Ended, 0)}, "sliced after admitted"},
		{"stage twice in an attempt", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0), ev(observe.Sliced, 0), ev(observe.Sliced, 0), ev(observe.Ended, 0)}, "sliced after sliced"},
		{"retry skips an attempt", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0), ev(observe.Retried, 2), ev(observe.Ended, 2)}, "retried into attempt 2"},
		{"retried attempt not routed first", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 0), ev(observe.Retried, 1), ev(observe.Sliced, 1), ev(observe.Ended, 1)}, "sliced after retried"},
		{"queued again", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Queued, 0), ev(observe.Ended, 0)}, "queued again"},
		{"not begun queued", progress.Completed, []observe.Event{ev(observe.Admitted, 0), ev(observe.Ended, 0)}, "does not begin queued"},
		{"ended pending", progress.Pending, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Ended, 0)}, "non-terminal"},
		{"wrong attempt", progress.Completed, []observe.Event{ev(observe.Queued, 0), ev(observe.Admitted, 0), ev(observe.Routed, 1), ev(observe.Ended, 0)}, "routed of attempt 1 during attempt 0"},
	} {
		r := New()
		feed(r, 0, c.state, c.evs...)
		_, errs := r.Check()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%s: errors %v, want one saying %q", c.name, errs, c.want)
		}
	}
}
