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

// retryTask is what a failover keeps of its task while it decides: the
// record as the failed attempt left it (the batch may be freed and
// reused meanwhile), and the selector's facts, reused from question to
// question.
type retryTask struct {
	rec   taskRecord
	cands []selector.Transport
}

type retryJob = failover.Job[retryTask]

// newRetries is the executor's failover runner (host/failover), which
// acts through failoverPort.
func (e *Executor) newRetries() *failover.Runner[retryTask] {
	return failover.NewRunner[retryTask](failoverPort{e}, failover.Settings{
		Attempts: e.cfg.Transfer.Attempts, Backoff: e.cfg.Transfer.RetryBackoff, Budget: e.retryBudget(), Jitter: rand.Float64,
	}, e.quit)
}

// onFailure is the tracker's failure hook: it offers a failed attempt to
// the failover runner, which takes it when another attempt could fix it.
// It must not block.
func (e *Executor) onFailure(b *progress.Batch, i int, cause error) (retried bool) {
	defer func() { e.noteFailure(b, i, cause, retried) }()
	t := b.Task(i)
	st := t.SliceStatus()
	rec := e.path.record(b, i)
	return e.retries.Offer(retryJob{Token: b.Token(i), Cause: cause, Status: st, Rail: t.FailedRail(), From: t.Transport(), Attempt: b.Attempt(i),
		Blame: e.blame(t.Transport(), st, cause), Pinned: rec.req.Transport != "", Deadline: rec.req.deadline(), History: rec.hist,
		Task: retryTask{rec: *rec}})
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

// failoverPort is the executor as the failover runner sees it.
type failoverPort struct{ e *Executor }

func (p failoverPort) Changed() (plugins, segments <-chan struct{}) {
	return p.e.supervisor.Changed(), p.e.segs.Changed()
}

// Facts fills in what the decider needs to know now: the time, every
// plugin's state, whether the segment is still there or moved (the
// target published again since the attempt was sent: its handle is
// replaced on every descriptor change) and, for an unpinned request, the
// selector's plan with the hint left out.
func (p failoverPort) Facts(in *failover.Input, j *retryJob) {
	e, r := p.e, &j.Task.rec.req
	in.Now = progress.Now()
	if in.Transports == nil {
		in.Transports = make([]failover.Transport, len(e.plugins))
	}
	for k, ps := range e.plugins {
		t := failover.Transport{Usable: ps.usable(), Restarting: ps.err == nil && ps.down()}
		if rs := ps.rails.Load(); rs != nil {
			t.Rails = rs.All(0)
		}
		in.Transports[k] = t
	}
	rem := e.remote(r.Segment)
	in.TargetMoved = rem != j.Task.rec.sent
	in.SegmentGone = rem == nil || rem.Retired != ""
	if in.TargetFault && !in.TargetMoved && !in.SegmentGone {
		e.chase(rem) // a target nothing watches: read it again
	}
	in.Plan = nil
	if in.Pinned || in.SegmentGone {
		return
	}
	if j.Task.cands == nil {
		j.Task.cands = make([]selector.Transport, len(e.plugins))
	}
	sr := e.selectorFacts(r, rem, uint64(len(r.Local)), j.Task.cands)
	sr.Hint = ""
	if pl, err := e.sel.Select(&sr, j.Task.cands); err == nil {
		in.Plan = pl.Index
	}
}

// Resume runs the task's next attempt through the stage sequence, or
// ends it, as the decider said.
func (p failoverPort) Resume(j *retryJob, d failover.Decision) {
	e := p.e
	why := j.Cause
	if why == nil {
		why = statusErr(j.Status)
	}
	// A pin, not the tracker's lock: the stages below may wait for
	// credit or ring space, and a lock held across that wait would stop
	// every completion and FreeBatch (the lock order is in
	// host/progress's doc).
	b, i := e.tracker.Pin(j.Token)
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
	e.resume(task{b: b, i: i, avoid: d.Avoid, retry: &retryStep{job: j, d: d, why: why, to: d.Transport}})
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
	rec.hist.FirstFailed = j.History.FirstFailed
	cause := observe.CausePluginFailed
	if j.Cause == nil {
		cause = observe.StatusCause(j.Status)
	}
	if j.Cause != nil && j.From >= 0 && int(j.From) < len(e.plugins) {
		e.fenceMoved(e.plugins[j.From], r, t.rem) // its plugin died: what it sent may still land
	}
	e.noteRetried(b, i, j.From, to, cause, s.why)
	e.note(b, i, observe.Routed, to, 0, nil)
	e.log.Warn("task failed; trying it again", "segment", t.rem.Name, "from", e.plugins[j.From].name, "failed_rail", j.Rail,
		"to", e.plugins[to].name, "decision", s.d.Kind, "attempt", b.Attempt(i)+1, "of", e.cfg.Transfer.Attempts, "error", s.why)
	return true
}
