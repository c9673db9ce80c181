package metastore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Rewatch keeps a watch for its owner's whole life: Watch is retried
// with backoff while it fails (at the start too: a metastore that is down
// or busy when the engine starts), and started again when its channel
// closes while the owner still wants it. Each new start after a failure
// or a break is followed by a Resync, so the receiver re-reads what it
// caches. The owner runs Run in a goroutine it owns and ends it through
// its context; Events is closed when Run returns.
type Rewatch struct {
	// Name says what the watch is for, in State and logs ("segments",
	// "own descriptor").
	Name   string
	Prefix string
	W      Watcher
	// OnError, when not nil, is told of each failed start (to log it).
	OnError func(err error)
	// Min and Max bound the backoff; 0 means 200ms and 10s.
	Min, Max time.Duration
	// ResyncFirst sends Resync after the first start too: for an owner
	// that must not miss a change made after it decided to watch and
	// before the watch ran (the guard of an engine's own key, which is
	// written before its watch starts).
	ResyncFirst bool

	once   sync.Once
	events chan Event

	mu    sync.Mutex
	state WatchState
}

// WatchState is what a Rewatch is doing, for status and metrics.
type WatchState struct {
	Name   string
	Prefix string
	// Watching is true while a watch runs; false while it is retried
	// (or before the first start).
	Watching bool
	// Since is when the watch started, or when it began to fail.
	Since time.Time
	// Err is the last failure while retrying; nil while watching.
	Err error
	// Retries counts failed starts since the Rewatch began.
	Retries uint64
}

// String says the state in a line: "watching since T" or "retrying since
// T (N tries): last error".
func (s WatchState) String() string {
	since := s.Since.UTC().Format(time.RFC3339)
	switch {
	case s.Watching:
		return "watching since " + since
	case s.Since.IsZero():
		return "not started"
	}
	return fmt.Sprintf("retrying since %s (%d failed starts): %v", since, s.Retries, s.Err)
}

func (r *Rewatch) init() { r.once.Do(func() { r.events = make(chan Event, watchBuffer) }) }

// Events returns the channel of the watch's events.
func (r *Rewatch) Events() <-chan Event {
	r.init()
	return r.events
}

// State returns what the watch is doing now.
func (r *Rewatch) State() WatchState {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state
	s.Name, s.Prefix = r.Name, r.Prefix
	return s
}

func (r *Rewatch) set(watching bool, err error, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if watching != r.state.Watching || r.state.Since.IsZero() {
		r.state.Since = now
	}
	r.state.Watching, r.state.Err = watching, err
	if err != nil {
		r.state.Retries++
	}
}

// Run watches until ctx ends, then closes Events.
func (r *Rewatch) Run(ctx context.Context) {
	r.init()
	defer close(r.events)
	bo := backoff{min: r.Min, max: r.Max}
	if bo.min <= 0 {
		bo.min = 200 * time.Millisecond
	}
	if bo.max <= 0 {
		bo.max = 10 * time.Second
	}
	first := true
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		events, err := r.W.Watch(wctx, r.Prefix)
		if err != nil {
			cancel()
			r.set(false, err, time.Now())
			if r.OnError != nil {
				r.OnError(err)
			}
			first = false
			if !sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		r.set(true, nil, time.Now())
		// Changes since the last watch (or, after a failed first start,
		// since the owner began) may have been missed.
		if (!first || r.ResyncFirst) && !sendEvent(ctx, r.events, Event{Kind: Resync}) {
			cancel()
			return
		}
		first = false
		start := time.Now()
		for {
			ev, ok := Next(ctx, events)
			if !ok {
				break
			}
			if !sendEvent(ctx, r.events, ev) {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		// The watch ended under us (its store closed, or it broke for
		// good): start again, after a pause unless it ran a while.
		r.set(false, fmt.Errorf("the watch of %q ended", r.Prefix), time.Now())
		if time.Since(start) > bo.max {
			bo.reset()
		}
		if !sleep(ctx, bo.next()) {
			return
		}
	}
}
