package path

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ferrydev/ferry/host/failover"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Failover: the engine's side. A task whose attempt failed, because a
// slice came back with an error that blames its path or because its
// plugin died or could not take it, is not ended FAILED while it has
// attempts left (transfer.attempts, default 3, the first included). It
// stays PENDING and host/failover decides where it goes next (its
// package comment has the rules); the engine gathers the facts, acts on
// the decision, and for a wait blocks on the plugins' change signal.
//
// Every attempt moves the same bytes between the same ranges, so this is
// safe for reads and writes alike. Completions of an earlier attempt are
// dropped (the ring token carries the attempt), so a task ends once. The
// batch API and Transfer both get this; the task's state and error are its
// last attempt's.

// failoverWait bounds how long a failover waits for a transport to come
// back (a restarting plugin) when every usable one was tried already,
// when the configuration sets no retry budget (a Config built in Go).
const failoverWait = 5 * time.Second

// retryBudget is the configured transfer.retry_budget, failoverWait when
// it is 0.
func (e *Executor) retryBudget() time.Duration {
	if b := e.cfg.Transfer.RetryBudget; b > 0 {
		return b
	}
	return failoverWait
}

// retryJob is one failed attempt handed to a failover goroutine.
type retryJob struct {
	token   uint64 // the task's, at the failed attempt
	i       int
	cause   error // the plugin died or refused the slices; nil: see status
	status  ring.Status
	rail    int   // of the first failed slice, -1 if none
	from    int32 // the transport of the failed attempt
	attempt int   // the failed attempt's number, from 0
	blame   failover.Blame
	rec     taskRecord
}

// onFailure is the tracker's failure hook: it takes a failed attempt for
// failover when failover.Take says another attempt could fix it. It must
// not block: the work is done in a goroutine.
func (e *Executor) onFailure(b *progress.Batch, i int, cause error) (retried bool) {
	defer func() { e.noteFailure(b, i, cause, retried) }()
	t := b.Task(i)
	st := t.SliceStatus()
	blame := e.blame(t.Transport(), st, cause)
	taken := failover.Take(b.Attempt(i), e.cfg.Transfer.Attempts, cause != nil, blame)
	if st == ring.StatusUnsupported && cause == nil {
		taken = failover.TakeUnsupported(b.Attempt(i), e.cfg.Transfer.Attempts)
	}
	if !taken {
		return false
	}
	e.retryMu.Lock()
	defer e.retryMu.Unlock()
	if e.retryClosed {
		return false
	}
	e.retrying.Add(1)
	job := retryJob{token: b.Token(i), i: i, cause: cause, status: st, rail: t.FailedRail(), from: t.Transport(), attempt: b.Attempt(i), blame: blame, rec: *e.path.record(b, i)}
	go e.failover(job)
	return true
}

// blame classifies a failed attempt on transport from: its slices'
// status st, or, when the attempt failed with cause (its plugin died, or
// could not take it), the target when the cause is that the target does
// not offer the transport now (errTargetAway).
func (e *Executor) blame(from int32, st ring.Status, cause error) failover.Blame {
	if cause != nil {
		if errors.Is(cause, errTargetAway) {
			return failover.BlameTarget
		}
		return failover.BlameRequest // died: Take and Decide see the cause
	}
	same := false
	if from >= 0 && int(from) < len(e.plugins) {
		if p := e.plugins[from].proc(); p != nil {
			same = p.Info.SameMachineOnly
		}
	}
	return failover.Classify(st, same)
}

// failover runs the next attempt of a task, or ends it, as the failover
// decider says.
func (e *Executor) failover(j retryJob) {
	defer e.retrying.Done()
	r := &j.rec.req
	why := j.cause
	if why == nil {
		why = statusErr(j.status)
	}
	d := e.decideFailover(&j)
	// A pin, not the tracker's lock: the dispatch below may wait for
	// credit or ring space, and a lock held across that wait would stop
	// every completion and FreeBatch (the lock order is in
	// host/progress's doc).
	b, i := e.tracker.Pin(j.token)
	if b == nil {
		return // the batch was freed, or the task moved on
	}
	defer e.tracker.Unpin(b)
	if d.Kind == failover.Fail {
		if d.Expired && b.State(i, progress.Now()).Terminal() {
			return // its deadline passed while it waited: TIMEOUT
		}
		b.Finish(i, progress.Failed, why)
		return
	}
	var sc submitCtx
	t := task{b: b, i: i, rec: e.path.record(b, i), rem: e.remote(r.Segment), sc: &sc, avoid: d.Avoid,
		retry: &retryStep{job: &j, d: d, why: why, to: d.Transport}}
	e.run(&t, stageValidate) // validated again: the segment may have changed under a restarted peer
}

// retryStep is a failover's next attempt as the stages see it: the
// failed attempt, the decision and its cause.
type retryStep struct {
	job *retryJob
	d   failover.Decision
	why error
	to  int32
}

// retryRoute is the route stage of a failover's attempt: the decider's
// transport, checked to reach the segment now, then the attempt's start
// (Batch.Retry) and what it learnt in the task's history.
func (e *Executor) retryRoute(t *task) bool {
	s, r, b, i := t.retry, &t.rec.req, t.b, t.i
	j, to := s.job, s.to
	pinned := *r
	pinned.Transport = e.plugins[to].name
	ps, policy, err := e.choose(&pinned, t.rem, uint64(len(r.Local)))
	if err != nil {
		e.refuse(t, err)
		return false
	}
	t.rt.ps, t.rt.policy = ps, policy
	if !b.Retry(i) {
		return false // canceled or timed out meanwhile
	}
	rec := t.rec
	rec.hist.Tried |= 1 << to
	rec.hist.Avoid = s.d.Avoid
	rec.hist.FirstFailed = j.rec.hist.FirstFailed
	cause := observe.CausePluginFailed
	if j.cause == nil {
		cause = observe.StatusCause(j.status)
	}
	if j.cause != nil && j.from >= 0 && int(j.from) < len(e.plugins) {
		e.fenceMoved(e.plugins[j.from], r, t.rem) // its plugin died: what it sent may still land
	}
	e.noteRetried(b, i, j.from, to, cause, s.why)
	e.note(b, i, observe.Routed, to, 0, nil)
	e.log.Warn("task failed; trying it again", "segment", t.rem.Name, "from", e.plugins[j.from].name, "failed_rail", j.rail,
		"to", e.plugins[to].name, "decision", s.d.Kind, "attempt", b.Attempt(i)+1, "of", e.cfg.Transfer.Attempts, "error", s.why)
	return true
}

// decideFailover asks the failover decider about job j until it says
// something other than wait, waiting between questions for a plugin to
// go down or come back, or for the segment's descriptor to change (or for
// the wait's end), and then for a retry's backoff. It records the task's
// first failure in j's history.
func (e *Executor) decideFailover(j *retryJob) failover.Decision {
	r := &j.rec.req
	budget := e.retryBudget()
	in := failover.Input{
		From: j.from, Rail: j.rail, PathFault: j.blame == failover.BlamePath, TargetFault: j.blame == failover.BlameTarget, Pinned: r.Transport != "",
		Unsupported: j.status == ring.StatusUnsupported && j.cause == nil,
		History:     j.rec.hist, Deadline: r.deadline(), MaxWait: budget,
		Retry: j.attempt, Backoff: e.cfg.Transfer.RetryBackoff, Budget: budget, Jitter: e.jitter(),
		Transports: make([]failover.Transport, len(e.plugins)),
	}
	var cands []selector.Transport
	if !in.Pinned {
		cands = make([]selector.Transport, len(e.plugins))
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		changed := e.supervisor.Changed() // before the facts: a change after them wakes the wait
		moved := e.segs.Changed()
		e.failoverFacts(&in, r, cands)
		// The target published again since the attempt was sent (its
		// handle is replaced on every descriptor change).
		in.TargetMoved = e.remote(r.Segment) != j.rec.sent
		if in.History.FirstFailed == 0 {
			in.History.FirstFailed = in.Now
			j.rec.hist.FirstFailed = in.Now
		}
		d := failover.Decide(&in)
		if d.Kind == failover.Fail {
			return d
		}
		if d.Kind != failover.WaitRestart && d.Kind != failover.WaitTarget {
			if d.At <= in.Now {
				return d
			}
			if timer == nil {
				timer = time.NewTimer(time.Duration(d.At - in.Now))
			} else {
				timer.Reset(time.Duration(d.At - in.Now))
			}
			select { // the backoff: the task stays PENDING; a cancel or its deadline is seen by Retry
			case <-timer.C:
				return d
			case <-e.quit:
				return failover.Decision{Kind: failover.Fail, Transport: -1, Reason: "the engine is closing"}
			}
		}
		in.WaitUntil = d.Until
		wait := time.Duration(d.Until - in.Now)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-changed: // Reset drops a stale tick (go >= 1.23 timers)
		case <-moved: // WaitTarget's end; a WaitRestart asks again and waits on
		case <-timer.C:
		case <-e.quit:
			return failover.Decision{Kind: failover.Fail, Transport: -1, Reason: "the engine is closing"}
		}
	}
}

// failoverFacts fills in what the decider needs to know now: the time,
// every plugin's state, whether the segment is still there and, for an
// unpinned request, the selector's plan with the hint left out.
func (e *Executor) failoverFacts(in *failover.Input, r *Request, cands []selector.Transport) {
	in.Now = progress.Now()
	for k, ps := range e.plugins {
		t := failover.Transport{Usable: ps.usable(), Restarting: ps.err == nil && ps.down()}
		if rs := ps.rails.Load(); rs != nil {
			t.Rails = rs.All(0)
		}
		in.Transports[k] = t
	}
	rem := e.remote(r.Segment)
	in.SegmentGone = rem == nil || rem.Retired != ""
	in.Plan = nil
	if in.Pinned || in.SegmentGone {
		return
	}
	sr := e.selectorFacts(r, rem, uint64(len(r.Local)), cands)
	sr.Hint = ""
	if p, err := e.sel.Select(&sr, cands); err == nil {
		in.Plan = p.Index
	}
}

// jitter draws the failover decider's jitter, in [0, 1): tasks that
// failed together do not retry together.
func (e *Executor) jitter() float64 { return rand.Float64() }
