package failover

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// The runner: the driver of Decide. A failed attempt that Take (or
// TakeUnsupported) takes is handed to a goroutine the runner owns, which
// asks Decide until it says something other than wait, waiting between
// questions for a plugin to go down or come back, for the segment's
// descriptor to change, or for the wait's end, and then for a retry's
// backoff; then the engine acts on the decision (Port.Resume). The facts
// come from the engine (Port.Facts); the runner holds no lock while it
// waits or while the engine resumes the task.

// Job is one failed attempt: what the decider is told of it, and the
// engine's own record of the task (T), which the runner hands back.
type Job[T any] struct {
	Token   uint64 // the task's ring token at the failed attempt
	Cause   error  // the plugin died or refused the slices; nil: see Status
	Status  ring.Status
	Rail    int   // of the first failed slice, -1 if none
	From    int32 // the transport of the failed attempt
	Attempt int   // the failed attempt's number, from 0
	Blame   Blame
	// Pinned: the request pins its transport; Deadline is its deadline
	// (unix ns, 0 = none); History is what its attempts taught, the first
	// failure's time recorded into it by the runner.
	Pinned   bool
	Deadline int64
	History  History
	Task     T
}

// Port is what the runner asks of the engine.
type Port[T any] interface {
	// Changed returns channels closed at the next change of the plugins'
	// states and of the open segments' descriptors; the runner takes
	// them before it asks for the facts, so that a change after those
	// wakes its wait.
	Changed() (plugins, segments <-chan struct{})
	// Facts fills in what Decide needs to know now of job j: the time,
	// every transport's state, the segment, the selector's plan, whether
	// the target moved.
	Facts(in *Input, j *Job[T])
	// Resume acts on the decision: the task's next attempt, or its end.
	Resume(j *Job[T], d Decision)
}

// Settings are a runner's: the configured attempts, backoff and budget,
// and where the jitter comes from.
type Settings struct {
	Attempts int
	Backoff  time.Duration
	// Budget bounds the waits for a transport to come back and the
	// retries after the first failure (transfer.retry_budget).
	Budget time.Duration
	Jitter func() float64
}

// Runner runs failovers, a goroutine each, until Close.
type Runner[T any] struct {
	port Port[T]
	set  Settings
	quit <-chan struct{}

	mu     sync.Mutex // guards closed and the Add of running
	closed bool
	run    sync.WaitGroup
}

// NewRunner returns a runner that acts through port; quit, when closed,
// makes waiting failovers give up (Fail: "the engine is closing").
func NewRunner[T any](port Port[T], s Settings, quit <-chan struct{}) *Runner[T] {
	return &Runner[T]{port: port, set: s, quit: quit}
}

// Offer takes job j for failover when another attempt could fix it
// (Take, TakeUnsupported) and the runner is not closed, and reports
// whether it did. It never blocks: the work is done in a goroutine.
func (r *Runner[T]) Offer(j Job[T]) bool {
	died := j.Cause != nil
	taken := Take(j.Attempt, r.set.Attempts, died, j.Blame)
	if j.Status == ring.StatusUnsupported && !died {
		taken = TakeUnsupported(j.Attempt, r.set.Attempts)
	}
	if !taken {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.run.Add(1)
	go func() {
		defer r.run.Done()
		d := r.decide(&j)
		r.port.Resume(&j, d)
	}()
	return true
}

// Close takes no more jobs and waits for the running ones, which give
// up their waits once quit is closed.
func (r *Runner[T]) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.run.Wait()
}

// closing is the decision of a failover the engine's close ended.
var closing = Decision{Kind: Fail, Transport: -1, Reason: "the engine is closing"}

// decide asks Decide about j until it says something other than wait,
// waiting between questions, and then for a retry's backoff. It records
// the task's first failure in j's history.
func (r *Runner[T]) decide(j *Job[T]) Decision {
	in := Input{
		From: j.From, Rail: j.Rail, PathFault: j.Blame == BlamePath, TargetFault: j.Blame == BlameTarget, Pinned: j.Pinned,
		Unsupported: j.Status == ring.StatusUnsupported && j.Cause == nil,
		History:     j.History, Deadline: j.Deadline, MaxWait: r.set.Budget,
		Retry: j.Attempt, Backoff: r.set.Backoff, Budget: r.set.Budget, Jitter: r.set.Jitter(),
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	wait := func(d time.Duration) <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d) // Reset drops a stale tick (go >= 1.23 timers)
		}
		return timer.C
	}
	for {
		plugins, segments := r.port.Changed() // before the facts: a change after them wakes the wait
		r.port.Facts(&in, j)
		if in.History.FirstFailed == 0 {
			in.History.FirstFailed = in.Now
			j.History.FirstFailed = in.Now
		}
		d := Decide(&in)
		if d.Kind == Fail {
			return d
		}
		if d.Kind != WaitRestart && d.Kind != WaitTarget {
			if d.At <= in.Now {
				return d
			}
			select { // the backoff: the task stays PENDING; a cancel or its deadline is seen by the retry
			case <-wait(time.Duration(d.At - in.Now)):
				return d
			case <-r.quit:
				return closing
			}
		}
		in.WaitUntil = d.Until
		select {
		case <-plugins:
		case <-segments: // WaitTarget's end; a WaitRestart asks again and waits on
		case <-wait(time.Duration(d.Until - in.Now)):
		case <-r.quit:
			return closing
		}
	}
}
