package observetest

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/host/observe"
)

// Key names one task.
type Key struct {
	Batch uint64
	Task  int
}

// Recorder keeps every event it observes, per task, in arrival order.
type Recorder struct {
	mu    sync.Mutex
	tasks map[Key][]observe.Event
	order []Key // tasks in order of their first event
}

// New returns an empty recorder.
func New() *Recorder { return &Recorder{tasks: map[Key][]observe.Event{}} }

// Observe records ev.
func (r *Recorder) Observe(ev observe.Event) {
	k := Key{ev.Batch, ev.Task}
	r.mu.Lock()
	if _, ok := r.tasks[k]; !ok {
		r.order = append(r.order, k)
	}
	r.tasks[k] = append(r.tasks[k], ev)
	r.mu.Unlock()
}

// Tasks returns every task seen, in order of its first event, with its
// events.
func (r *Recorder) Tasks() ([]Key, map[Key][]observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[Key][]observe.Event, len(r.tasks))
	for k, v := range r.tasks {
		m[k] = append([]observe.Event(nil), v...)
	}
	return append([]Key(nil), r.order...), m
}

// Summary counts, over every task, the stages seen and the terminal
// states.
type Summary struct {
	Tasks   int
	Stages  map[observe.Stage]int
	Ended   map[string]int // terminal state name -> tasks
	Retried int            // tasks with at least one Retried
}

// Check verifies every task's events and returns what it counted, with
// one error per task that breaks a rule:
//   - the task begins Queued, then Admitted (or Ended, refused by
//     validation), at attempt 0, once each;
//   - it has exactly one Ended, its last event, with a terminal state;
//   - within an attempt, each stage comes at most once and in the order
//     Routed < Sliced < Submitted < Completed;
//   - a later attempt begins with Retried, numbered one above the
//     previous attempt, and then goes Routed, Sliced, ...
func (r *Recorder) Check() (Summary, []error) {
	keys, tasks := r.Tasks()
	s := Summary{Tasks: len(keys), Stages: map[observe.Stage]int{}, Ended: map[string]int{}}
	var errs []error
	for _, k := range keys {
		evs := tasks[k]
		for _, ev := range evs {
			s.Stages[ev.Stage]++
		}
		if err := checkTask(evs); err != nil {
			errs = append(errs, fmt.Errorf("batch %#x task %d: %w; events: %s", k.Batch, k.Task, err, Format(evs)))
			continue
		}
		last := evs[len(evs)-1]
		s.Ended[last.State.String()]++
		if evs[len(evs)-1].Attempt > 0 {
			s.Retried++
		}
	}
	return s, errs
}

func checkTask(evs []observe.Event) error {
	if len(evs) < 2 || evs[0].Stage != observe.Queued {
		return fmt.Errorf("does not begin queued")
	}
	if len(evs) == 2 && evs[1].Stage == observe.Ended {
		return nil // refused before admission (validation)
	}
	if len(evs) < 3 || evs[1].Stage != observe.Admitted {
		return fmt.Errorf("does not go queued, admitted")
	}
	ends := 0
	for _, ev := range evs {
		if ev.Stage == observe.Ended {
			ends++
		}
	}
	if ends != 1 {
		return fmt.Errorf("ended %d times, want exactly once", ends)
	}
	last := evs[len(evs)-1]
	if last.Stage != observe.Ended {
		return fmt.Errorf("%v after ended", last.Stage)
	}
	if !last.State.Terminal() {
		return fmt.Errorf("ended in non-terminal state %v", last.State)
	}
	attempt := 0
	prev := observe.Admitted // the last stage of the current attempt
	for _, ev := range evs[2 : len(evs)-1] {
		switch {
		case ev.Stage == observe.Queued || ev.Stage == observe.Admitted:
			return fmt.Errorf("%v again at attempt %d", ev.Stage, ev.Attempt)
		case ev.Stage == observe.Retried:
			if ev.Attempt != attempt+1 {
				return fmt.Errorf("retried into attempt %d after attempt %d", ev.Attempt, attempt)
			}
			attempt, prev = ev.Attempt, observe.Retried
			continue
		case ev.Attempt != attempt:
			return fmt.Errorf("%v of attempt %d during attempt %d", ev.Stage, ev.Attempt, attempt)
		}
		if !follows(prev, ev.Stage) {
			return fmt.Errorf("%v after %v in attempt %d", ev.Stage, prev, attempt)
		}
		prev = ev.Stage
	}
	if last.Attempt != attempt {
		return fmt.Errorf("ended at attempt %d, its last attempt was %d", last.Attempt, attempt)
	}
	return nil
}

// follows reports whether stage next may come right after prev within
// one attempt: the path goes forward, one stage at a time from Routed
// on. Admitted and Retried both lead to Routed.
func follows(prev, next observe.Stage) bool {
	switch next {
	case observe.Routed:
		return prev == observe.Admitted || prev == observe.Retried
	case observe.Sliced:
		return prev == observe.Routed
	case observe.Submitted:
		return prev == observe.Sliced
	case observe.Completed:
		return prev == observe.Submitted
	}
	return false
}

// Format writes events as "stage@attempt" words, for failure messages.
func Format(evs []observe.Event) string {
	w := make([]string, len(evs))
	for i, ev := range evs {
		w[i] = fmt.Sprintf("%v@%d", ev.Stage, ev.Attempt)
		if ev.Stage == observe.Ended {
			w[i] += "(" + ev.State.String() + ")"
		}
	}
	return strings.Join(w, " ")
}

// String prints a summary with its maps in a stable order.
func (s Summary) String() string {
	var st []string
	for k, v := range s.Stages {
		st = append(st, fmt.Sprintf("%v=%d", k, v))
	}
	sort.Strings(st)
	var en []string
	for k, v := range s.Ended {
		en = append(en, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(en)
	return fmt.Sprintf("%d tasks (%d retried); stages %s; ended %s", s.Tasks, s.Retried, strings.Join(st, " "), strings.Join(en, " "))
}
