package trace

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/observe"
)

// Story is the trace of one task: its events from Queued on (at most
// maxSteps, and its Ended), and when it was queued by the wall clock.
// The engine's status formats it (host.TaskTrace).
type Story struct {
	Started time.Time
	Events  []observe.Event
}

// Done reports whether the story's task ended.
func (s *Story) Done() bool {
	n := len(s.Events)
	return n > 0 && s.Events[n-1].Stage == observe.Ended
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
		s = &Story{Started: time.Now()}
		r.active[k] = s
	}
	if s == nil {
		return
	}
	if len(s.Events) < maxSteps || ev.Stage == observe.Ended {
		s.Events = append(s.Events, ev)
	}
	if ev.Stage != observe.Ended {
		return
	}
	delete(r.active, k)
	if len(r.done) < r.keep {
		r.done = append(r.done, *s)
	} else {
		r.done[r.next] = *s
	}
	r.next = (r.next + 1) % r.keep
	r.total++
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
	s.Events = append([]observe.Event(nil), s.Events...)
	return s
}

// Tracing reports whether task of batch is being traced now.
func (r *Recorder) Tracing(batch uint64, task int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[key{batch, task}] != nil
}
