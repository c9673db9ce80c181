package progress

import "github.com/ferrydev/ferry/sdk/ring"

// Hook is one link of the tracker's chain of hooks (Tracker.Hook): what
// one part of the engine (failover, aborts, admission, the metrics and
// the observer, rails and credit) is told of the tracker's tasks and of
// the completions its lanes reap. Every func may be nil, and is then
// never called; an event that no hook takes costs the tracker a nil
// check. The hooks that take an event are called in the order they were
// registered. None may block, nor report an event of the task it is told
// of (the task's hold may be taken: see Unordered).
//
// at, where a func is handed it, is when the transition was seen, in
// Clock nanoseconds, when the caller read the time anyway: a lane's
// poller reads it once per run of completions it reaps (ApplyAt,
// ApplyEach), and a task that ends as its last slice comes back ends at
// its settling's time. 0: nobody read it (a Finish, a plugin's end); a
// hook that needs the time reads Clock.
type Hook struct {
	// Unordered says the hook needs no order against a task's other
	// reports: it only counts (the meter), or settles who acts with a
	// compare-and-swap (admission giving a grant back). Its Settled,
	// Ended and RunEnded are called without the task's hold
	// (Batch.Noting), a lock per call. A hook without it is called under
	// the hold, so that it hears of nothing after the task's Ended; when
	// one hook of an event needs the hold, every hook of that event is
	// called under one hold, in order. Settled still comes only while the
	// task is pending, and Ended once.
	Unordered bool

	// Failed is offered an attempt of task i that failed (a slice
	// reported an error, err nil; or its plugin died, err says so), once
	// per attempt, before the task is ended FAILED. The first hook that
	// returns true takes it and the hooks after it are not asked: the
	// task stays pending and the taker calls Batch.Retry and resubmits,
	// or ends the task (failover). Called without the task's hold.
	Failed func(b *Batch, i int, err error) bool
	// Held is told of each task whose end (canceled, timed out) was
	// decided while a plugin still holds slices of it (Batch.Finish):
	// the engine asks the plugin to abort them. It is called from
	// whoever ended the task (a Cancel, a State that expired it), without
	// the task's hold.
	Held func(b *Batch, i int)

	// Settled is told that an attempt's slices all came back while the
	// task was pending, with the first failing status (ring.StatusOK:
	// none). A failed attempt's settling comes before Failed is offered
	// it.
	Settled func(b *Batch, i int, st ring.Status, at int64)
	// Ended is told of task i's end, once, with its terminal state.
	Ended func(b *Batch, i int, s State, at int64)
	// RunEnded, when set, is told instead of Ended of a task that ends
	// in a poller's run of completions (Tracker.ApplyEach), so that the
	// hook counts a run's ends in a tally of its own (Run.Tally) and
	// publishes it once per run, with Flush (the engine's meter: plain
	// adds in the run, atomic ones at its end). When the task ends as
	// its attempt settles with no failure (settled), RunEnded stands for
	// Settled too, which this hook is not told: one call a task. A failed
	// attempt's settling is still told with Settled. Tasks that end
	// outside a run (a Finish, a plugin's end) are told with Ended.
	RunEnded func(r *Run, b *Batch, i int, s State, settled bool)
	// Flush is told at the end of each run (Tracker.FlushRun), and before
	// the end that completes a batch is counted in a run, so that a
	// batch's waiter finds its batch's ends flushed when the batch reaped
	// on one lane (tasks of one batch reaped on other lanes at the same
	// time are flushed at their runs' ends).
	Flush func(r *Run)

	// Reaped sees each run of completions a lane reaps (Lane.Poll),
	// before the tracker folds them into tasks: the engine feeds its
	// rail set (a completion's token names its rail) and receiver credit
	// from it. The lane's Owner says whose lane it is. It is called with
	// the lane's reap lock held: never concurrently for one lane, but
	// concurrently for different lanes. It reads the clock itself, if it
	// needs it: the clock is a noticeable cost on some machines.
	Reaped func(l *Lane, ds []ring.Descriptor)
}

// Run is one run of completions that a lane's poller reaps (Lane.Poll):
// the Clock time it read for them (At, 0 when none), and what a hook
// with RunEnded keeps of the tasks they end until the run is over
// (Tally: the hook's, set by it; the lane keeps it from run to run). A
// Run is its poller's alone: the lane's reaper lock covers it.
type Run struct {
	At    int64
	Tally any
}

// hooks is the tracker's chain as each event calls it: per event, the
// funcs of the hooks that take it, in order, and whether one of them
// needs the task's hold. Tracker.Hook builds it afresh; every batch
// shares it (nil: no hook).
type hooks struct {
	failed []func(*Batch, int, error) bool
	held   []func(*Batch, int)
	// settled: an attempt settled outside a run, or failed in one;
	// settledRun: an attempt settled in a run and ended its task, which
	// the hooks with RunEnded hear of with it, so only the others.
	settled, settledRun         []func(*Batch, int, ring.Status, int64)
	settledHeld, settledRunHeld bool
	ended                       []func(*Batch, int, State, int64)
	endedRun                    []endInRun
	endedHeld, endedRunHeld     bool
	flush                       []func(*Run)
	reaped                      []func(*Lane, []ring.Descriptor)
	// timed: a hook is told of transitions, with their times. ends: a
	// hook is told of ends (Ended, RunEnded or Flush), so that a chain
	// of failover and aborts alone costs a task's end one branch.
	timed, ends bool
}

// endInRun is one hook's end of a task in a run: its RunEnded, else its
// Ended.
type endInRun struct {
	run func(*Run, *Batch, int, State, bool)
	end func(*Batch, int, State, int64)
}

// chainOf compiles hs, in order, into what each event calls; nil when no
// hook takes any event.
func chainOf(hs []Hook) *hooks {
	c := &hooks{}
	for _, h := range hs {
		held := !h.Unordered
		if h.Failed != nil {
			c.failed = append(c.failed, h.Failed)
		}
		if h.Held != nil {
			c.held = append(c.held, h.Held)
		}
		if h.Settled != nil {
			c.settled = append(c.settled, h.Settled)
			c.settledHeld = c.settledHeld || held
			if h.RunEnded == nil {
				c.settledRun = append(c.settledRun, h.Settled)
				c.settledRunHeld = c.settledRunHeld || held
			}
		}
		if h.Ended != nil {
			c.ended = append(c.ended, h.Ended)
			c.endedHeld = c.endedHeld || held
		}
		if h.RunEnded != nil || h.Ended != nil {
			c.endedRun = append(c.endedRun, endInRun{h.RunEnded, h.Ended})
			c.endedRunHeld = c.endedRunHeld || held
		}
		if h.Flush != nil {
			c.flush = append(c.flush, h.Flush)
		}
		if h.Reaped != nil {
			c.reaped = append(c.reaped, h.Reaped)
		}
	}
	c.timed = len(c.settled)+len(c.endedRun) > 0
	c.ends = len(c.endedRun)+len(c.flush) > 0
	if len(c.failed)+len(c.held)+len(c.settled)+len(c.endedRun)+len(c.flush)+len(c.reaped) == 0 {
		return nil
	}
	return c
}

// Hook adds h at the end of the tracker's chain: for each event, the
// hooks registered before h are called before it. Register every hook
// before the first Allocate (Hook panics after it) and before a lane
// polls with the tracker: the chain is read without a lock.
func (t *Tracker) Hook(h Hook) {
	if t.used.Load() != 0 {
		panic("progress: Tracker.Hook after the first Allocate")
	}
	t.chain = append(t.chain, h)
	t.hooks = chainOf(t.chain)
}

// Timed reports whether a hook wants the times of completions (one is
// told of settlings or ends), so that a poller reads the clock only then.
func (t *Tracker) Timed() bool { return t.hooks != nil && t.hooks.timed }
