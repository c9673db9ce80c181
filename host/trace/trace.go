package trace

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/observe"
)

// Step is one stage of a traced task.
type Step struct {
	Stage string `json:"stage"`
	// At is when, in microseconds since the task was queued.
	At        float64 `json:"at_us"`
	Attempt   int     `json:"attempt"`
	Transport string  `json:"transport,omitempty"`
	Slices    int64   `json:"slices,omitempty"`
	// Status is a Completed step's first failing slice status ("" when
	// all slices were OK); State an Ended step's terminal state.
	Status string `json:"status,omitempty"`
	State  string `json:"state,omitempty"`
	// From and Cause are a Retried step's failed transport and why.
	From  string `json:"from,omitempty"`
	Cause string `json:"cause,omitempty"`
	Err   string `json:"error,omitempty"`
	// Reasons is a Routed step's selector explanation: why this
	// transport, and why not each other.
	Reasons string `json:"reasons,omitempty"`
}

// Story is the trace of one task, from Queued to Ended.
type Story struct {
	Batch    uint64    `json:"batch"`
	Task     int       `json:"task"`
	Op       string    `json:"op"`
	Length   uint64    `json:"length"`
	Priority string    `json:"priority"`
	Started  time.Time `json:"started"`
	// Done says the task ended; Took is how long from Queued to Ended.
	Done  bool    `json:"done"`
	Took  float64 `json:"took_us,omitempty"`
	Steps []Step  `json:"steps"`
	start int64   // observe.Clock at Queued
}

// maxSteps bounds one story: a task that keeps failing over adds steps
// per attempt, and the engine's attempts are bounded, but the story is
// bounded on its own too.
const maxSteps = 64

type key struct {
	batch uint64
	task  int
}

// Recorder is an observe.Observer that keeps the stories of traced tasks.
// The zero value is not usable; use New.
type Recorder struct {
	keep  int
	every uint64

	mu     sync.Mutex
	seen   uint64 // Queued events, for sampling
	active map[key]*Story
	done   []Story // a ring of the finished stories
	next   int     // where the next finished story goes
	total  uint64  // stories finished
}

// New returns a Recorder that keeps the last keep finished stories (and
// at most keep in progress) and, when every > 0, traces one task in
// every besides those that ask.
func New(keep, every int) *Recorder {
	return &Recorder{keep: max(keep, 1), every: uint64(max(every, 0)), active: make(map[key]*Story)}
}

// Observe records ev when its task is traced.
func (r *Recorder) Observe(ev observe.Event) {
	k := key{ev.Batch, ev.Task}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.active[k]
	if ev.Stage == observe.Queued {
		r.seen++
		if !ev.Trace && (r.every == 0 || r.seen%r.every != 0) {
			return
		}
		if len(r.active) >= r.keep {
			return // as many in progress as kept: the newest is not traced
		}
		s = &Story{Batch: ev.Batch, Task: ev.Task, Op: opName(ev), Length: ev.Length, Priority: ev.Priority.String(),
			Started: time.Now(), start: ev.At}
		r.active[k] = s
	}
	if s == nil {
		return
	}
	if len(s.Steps) < maxSteps || ev.Stage == observe.Ended {
		s.Steps = append(s.Steps, step(ev, s.start))
	}
	if ev.Stage != observe.Ended {
		return
	}
	delete(r.active, k)
	s.Done = true
	if ev.At != 0 && s.start != 0 {
		s.Took = float64(ev.At-s.start) / 1e3
	}
	if len(r.done) < r.keep {
		r.done = append(r.done, *s)
	} else {
		r.done[r.next] = *s
	}
	r.next = (r.next + 1) % r.keep
	r.total++
}

func step(ev observe.Event, start int64) Step {
	st := Step{Stage: ev.Stage.String(), Attempt: ev.Attempt, Transport: ev.Transport, Slices: ev.Slices,
		From: ev.From, Cause: ev.Cause, Reasons: ev.Reasons}
	if ev.At != 0 && start != 0 {
		st.At = float64(ev.At-start) / 1e3
	}
	switch ev.Stage {
	case observe.Completed:
		if ev.Status != 0 {
			st.Status = ev.Status.String()
		}
	case observe.Ended:
		st.State = ev.State.String()
	}
	if ev.Err != nil {
		st.Err = ev.Err.Error()
	}
	return st
}

func opName(ev observe.Event) string {
	if ev.Op == 0 {
		return ""
	}
	return ev.Op.String()
}

// Stories returns the finished stories, newest first, and those still in
// progress after them.
func (r *Recorder) Stories() []Story {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Story, 0, len(r.done)+len(r.active))
	for j := 1; j <= len(r.done); j++ {
		out = append(out, cloneStory(r.done[(r.next-j+len(r.done)*2)%len(r.done)]))
	}
	for _, s := range r.active {
		out = append(out, cloneStory(*s))
	}
	return out
}

func cloneStory(s Story) Story {
	s.Steps = append([]Step(nil), s.Steps...)
	return s
}

// Tracing reports whether task of batch is being traced now.
func (r *Recorder) Tracing(batch uint64, task int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[key{batch, task}] != nil
}
