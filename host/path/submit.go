package path

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/credit"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/host/slicer"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Submission: a request becomes a task (submitOne) and enters the stage
// sequence (stages.go); what the stages call to admit (the Admitter and
// its Asker), to put slices on a lane and to cut the attempt.

// Submit is host.Engine.Submit, which documents it.
func (e *Executor) Submit(id BatchID, reqs ...Request) error {
	return e.submit(id, reqs, submitCtx{})
}

// submit is Submit with sc's settings (Transfer's: a caller's context
// with a deadline bounds the requests, and the default deadline does not
// apply).
func (e *Executor) submit(id BatchID, reqs []Request, sc submitCtx) error {
	b := id.b
	if b == nil {
		return fmt.Errorf("%w: submit: zero BatchID", ErrInvalid)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if b.Len()+len(reqs) > b.Cap() {
		return fmt.Errorf("%w: submit %d requests: batch holds %d of %d", ErrInvalid, len(reqs), b.Len(), b.Cap())
	}
	for k := 0; k < len(reqs); {
		if n := e.submitRun(b, reqs[k:], &sc); n > 0 {
			k += n
			continue
		}
		sc.more = k < len(reqs)-1
		e.submitOne(b, &reqs[k], &sc)
		k++
	}
	sc.publishHeld()
	e.flushQueued(&sc)
	return nil
}

// submitCtx is what one Submit call carries from request to request: the
// time, read once, when a request needs it (the clock is a noticeable
// share of a small request's cost on some machines).
type submitCtx struct {
	wall time.Time
	unix int64 // wall in unix ns, once read (unixNow)
	// bounded: the caller's context has a deadline, which ends the
	// requests without one; transfer.default_deadline is not given them.
	bounded bool
	// queued counts the requests the call queued, for the meter
	// (flushQueued).
	queued metrics.Tally
	// admitted counts the requests the qos queue let go at once, for
	// their tenants (admit.go's hold; flushQueued).
	admitted admission.Tally
	// route is the previous request's route (routeMemo).
	route routeMemo
	// waiter: the caller waits on the batch's lanes itself right after
	// the call (runBatch's Wait of a small batch enters them), so its
	// publications leave a reaper standing by (Lane.EndWaited).
	waiter bool
	// more: requests of the call follow this one, so its put may leave
	// its descriptors unpublished (held): a later put on the lane, or
	// publishHeld at the call's end, publishes them with its own.
	more bool
	// held is the lane with descriptors the call put and has not
	// published yet (Lane.EndLater), nHeld how many, or has exposed
	// only (Lane.EndExposed; nHeld 0): either way the call's end
	// publishes on it.
	held  *progress.Lane
	nHeld int
	// picked: the bytes the call put on single-rail sets, counted there
	// before each publication (rails.Picked).
	picked rails.Picked
	// credit: the receiver credit a run of the call took at once
	// (takeRunCredit), which its tasks draw on (put).
	credit credit.Run
	// lane is the lane the call's last put went on (laneFor), a lane
	// of run laneRun for class laneClass, and laneBytes what the call
	// put there since it took it.
	lane      *progress.Lane
	laneRun   *pluginRun
	laneClass admission.Class
	laneBytes uint64
}

// publishBurst is how many requests a Submit call puts on a lane before
// it publishes them: one barrier and one look of the plugin at the
// ring's tail a burst, at the price of the plugin starting on a burst's
// first request a few puts later. With a dense batch's waiter entering
// its lanes (host/waiting), 4 KiB shm writes in batches of 128 ran about
// 8% faster in bursts of 8 than one at a time (BenchmarkRequestPath).
const publishBurst = 8

// asleepBurst is publishBurst for a lane whose plugin sleeps: each
// publication to it wakes it, a system call here and a thread's wakeup
// there (tens of microseconds on a small VM), so a call holds more
// before it publishes. tcp's lanes sleep between runs (their transport's
// goroutines look for the next descriptor instead): 4 KiB tcp writes in
// batches of 128, ferry bench, 3 interleaved runs: 0.57-0.61 GB/s with
// a wakeup every 8 requests, 0.65-0.70 every 32, 0.79-0.81 every 128;
// 64 and 128 alike in a second sitting (0.72-0.75). shm's lanes spin
// while requests come and keep bursts of 8.
const asleepBurst = 64

// end releases lane l, which the caller holds after a put: its
// descriptors stay unpublished while more requests of the call follow,
// the burst (publishBurst, asleepBurst while l's plugin sleeps) is not
// full and no other lane holds any; a full burst with more to follow is
// exposed to a plugin that polls (Lane.EndExposed: without the full
// barrier, which on far-apart cores cost a 4 KiB shm write in batches
// of 128 about 25 ns); otherwise l's are published, then
// another lane's held ones, once l is let go (taking a lane while
// holding another would deadlock against a submitter going the other
// way: TestSubmitBurstsOnTwoLanesDoNotDeadlock).
func (c *submitCtx) end(l *progress.Lane) { c.endRun(l, 1) }

// endRun is end after n requests were put on l.
func (c *submitCtx) endRun(l *progress.Lane, n int) {
	if c.more && (c.held == nil || c.held == l) && (c.nHeld+n < publishBurst || c.nHeld+n < asleepBurst && l.PluginAsleep()) {
		l.EndLater()
		c.held = l
		c.nHeld += n
		return
	}
	c.picked.Count()
	if c.more && (c.held == nil || c.held == l) && !l.PluginAsleep() {
		// A full burst with more to come, to a plugin that polls:
		// visible now, fenced (and its plugin woken, should it have
		// gone to sleep) by the call's last publication.
		l.EndExposed()
		c.held, c.nHeld = l, 0
		return
	}
	c.publish(l)
	if c.held == l {
		c.held, c.nHeld = nil, 0
	}
	c.publishHeld()
}

// publishHeld publishes what the call holds (see end): at its end, and
// before anything it waits on.
func (c *submitCtx) publishHeld() {
	if l := c.held; l != nil {
		c.picked.Count()
		l.Begin()
		c.publish(l)
		c.held, c.nHeld = nil, 0
	}
}

// publish publishes what lane l (held) carries and releases it, leaving
// its reaper standing by when the caller waits next (EndWaited).
func (c *submitCtx) publish(l *progress.Lane) {
	if c.waiter {
		l.EndWaited()
	} else {
		l.End()
	}
}

// now returns the time the first request that needed it was submitted.
func (c *submitCtx) now() time.Time {
	if c.wall.IsZero() {
		c.wall = time.Now()
	}
	return c.wall
}

// unixNow is now in unix nanoseconds.
func (c *submitCtx) unixNow() int64 {
	if c.unix == 0 { // inlined: a read time costs no call
		c.readUnix()
	}
	return c.unix
}

// readUnix sets unix from now.
func (c *submitCtx) readUnix() { c.unix = c.now().UnixNano() }

// clock is now as a progress.Clock time: when the call's requests are
// queued.
func (c *submitCtx) clock() int64 { return progress.ClockOf(c.now()) }

// submitOne adds one request to b as a task (queued) and runs it
// through the stage sequence.
func (e *Executor) submitOne(b *progress.Batch, r *Request, sc *submitCtx) {
	deadline := r.deadline()
	dflt := deadline == 0 && e.cfg.Transfer.DefaultDeadline > 0 && !sc.bounded
	if dflt {
		deadline = sc.now().Add(e.cfg.Transfer.DefaultDeadline).UnixNano()
	}
	i := b.Reserve(uint64(len(r.Local)), deadline)
	if i < 0 {
		return // checked by Submit
	}
	rec := e.path.record(b, i)
	*rec = taskRecord{req: *r}
	if dflt { // on the engine's copy, which every later stage reads, not on the caller's
		rec.req.Deadline, rec.defaultDeadline = time.Unix(0, deadline), true
	}
	e.noteQueued(b, i, sc)
	t := task{b: b, i: i, rec: rec, rem: e.remote(r.Segment), wait: true}
	e.run(&t, sc, stageValidate, nil)
}

// awaitPin takes task i (request r to rem, valid and admitted, which
// the selector could not route: err) for failover when r pins a plugin
// that is down and being restarted (not failed for good), or one that
// runs here but that the target does not offer now (its own plugin
// restarting: its descriptor left it out, or it was opened while it
// did): not INVALID, but a first attempt that failover waits out, within
// the deadline and the retry budget, as if the plugin had died under it
// (or, for the target, until its next descriptor). It reports whether it
// took the task.
func (e *Executor) awaitPin(b *progress.Batch, i int, r *Request, rem *remote, rec *taskRecord, err error) bool {
	if r.Transport == "" {
		return false
	}
	for _, ps := range e.plugins {
		if ps.name != r.Transport || ps.err != nil {
			continue
		}
		var cause error
		switch {
		case ps.down():
			cause = fmt.Errorf("%w: plugin %q, which the request pins, is restarting", ErrPluginFailed, ps.name)
		case errors.Is(err, selector.ErrUnreachable) && ps.usable() && !rem.Opened[ps.idx]:
			cause = fmt.Errorf("%w: %w", err, errTargetAway)
		default:
			return false
		}
		rec.hist.Tried = 1 << ps.idx
		rec.sent = rem
		b.Task(i).SetTransport(ps.idx)
		e.note(b, i, observe.Routed, ps.idx, 0, nil)
		b.Cut(i)
		b.Fail(i, cause)
		return true
	}
	return false
}

// errTargetAway marks a pinned request's first attempt that awaitPin
// failed because the target does not offer the pinned transport now:
// failover waits for the target's next descriptor (failover.BlameTarget).
var errTargetAway = errors.New("waiting for the target to offer it again")

// admit asks the application's Admitter about t (none: the
// pass-through, which is not even called). It reports whether t goes on
// now: Later holds it back (the Asker asks again), Reject ends it
// INVALID.
func (e *Executor) admit(t *task, sc *submitCtx) bool {
	if e.path.admit == nil || t.asked {
		return true
	}
	r := &t.rec.req
	ar := admission.Request{
		Length: uint64(len(r.Local)), Priority: r.Priority, Deadline: r.deadline(), Intent: r.Intent, Segment: t.rem.Name, Tenant: r.Tenant,
	}
	now := sc.now().UnixNano()
	d := e.path.admit.Admit(ar, now)
	switch d.Verdict {
	case admission.Now:
		return true
	case admission.Later:
		// Should its deadline pass while held, it ends TIMEOUT saying why.
		why := fmt.Errorf("%w: segment %q: admission held the request back (%s) until its deadline", ErrDeadlineExceeded, t.rem.Name, d.Reason)
		e.path.later.Hold(admission.Held{B: t.b, ID: t.b.ID(), I: int32(t.i)}, ar, now, t.b.Blame(t.i, why))
		return false
	}
	e.refuse(t, admitErr(t.rem.Name, d))
	return false
}

// admitErr is the error of a request admission refused.
func admitErr(segment string, d admission.Decision) error {
	return fmt.Errorf("%w: segment %q: admission refused the request (%s)", ErrInvalid, segment, d.Reason)
}

// laterPort is the executor as the Asker takes held tasks on or ends
// them through it.
type laterPort struct{ e *Executor }

// Go takes held task h on: the Admitter said Now. It is validated again
// (its memory may have been unregistered while it waited) and offered to
// the qos queue, if any.
func (p laterPort) Go(h admission.Held) {
	p.e.resume(task{b: h.B, i: int(h.I), asked: true})
}

// Refuse ends held task h: the Admitter said Reject.
func (p laterPort) Refuse(h admission.Held, d admission.Decision) {
	name := ""
	if rem := p.e.remote(p.e.path.record(h.B, int(h.I)).req.Segment); rem != nil {
		name = rem.Name
	}
	h.B.Cut(int(h.I))
	h.B.Finish(int(h.I), progress.Invalid, admitErr(name, d))
}

// Abandon ends held task h: the engine closed.
func (p laterPort) Abandon(h admission.Held) {
	h.B.Cut(int(h.I))
	h.B.Finish(int(h.I), progress.Failed, fmt.Errorf("%w: engine %q closed while the request was held back by admission", ErrClosed, p.e.name))
}

// putResult is what put did with a task's slices, for cut.
type putResult struct {
	i            int
	sent, slices int64
	err          error
}

// put enqueues t's slices on l, a lane of t's plugin run (held by the
// caller, between Begin and End), each taking receiver credit first
// where the transport is two-sided, and leaves in res what it did. The
// caller publishes them (End), then calls cut with res.
func (e *Executor) put(t *task, l *progress.Lane, sc *submitCtx, res *putResult) {
	b, i, r, rem, rt := t.b, t.i, &t.rec.req, t.rem, &t.rt
	d := &t.d
	if !t.described {
		describe(d, r.Op, r.Priority, rem.ID, b.Task(i).Deadline)
	}
	n := uint64(len(r.Local))
	if t.plan.Slices == 1 && !e.path.watched() {
		switch {
		case e.credit == nil || !t.prun.p.Info.TwoSided:
			putOne(t, l, sc, res)
			return
		case t.credited: // its run took its credit (takeRunCredit)
			if h := e.credit.keeper.BeginTaken(&sc.credit, b, i, n); h != nil {
				if putOne(t, l, sc, res); res.sent == 0 {
					e.credit.keeper.Unsent(h, n)
				}
				return
			}
		}
	}
	ps := rt.ps
	plan := &t.plan
	d.LocalRegion, d.RemoteRegion = rt.lreg, rt.rreg
	var now int64 // 0: no deadline to check
	if d.Deadline != 0 {
		now = sc.unixNow()
	}
	*res = putResult{i: i, slices: plan.Slices}
	token := b.Token(i)
	e.note(b, i, observe.Submitted, ps.idx, plan.Slices, nil) // before any slice is visible to the plugin
	var hold *credit.Hold                                     // receiver credit: a two-sided transport's slices take some
	pc := e.creditFor(t.prun, rem)
	if pc != nil {
		hold = e.credit.keeper.Begin(b, i, pc, plan.Slice)
	}
	for off := uint64(0); off < n; off += plan.Slice {
		if b.Stopping(i, now) { // canceled or expired while being cut: the rest never leaves
			break
		}
		d.LocalOffset, d.RemoteOffset, d.Length = rt.loff+off, rt.roff+off, min(plan.Slice, n-off)
		if hold != nil {
			sc.picked.Count() // Take may publish (Lane.End) while it waits
			if !e.credit.keeper.Take(hold, pc, d.Length, r.Priority == PriorityHigh, b, i, l) {
				break // it stopped, or the engine closed, while waiting for credit
			}
		}
		if sent, err := putSlice(d, b, i, token, plan.Rails, l, t.prun.rails, ps, sc); !sent {
			if hold != nil {
				e.credit.keeper.Unsent(hold, d.Length)
			}
			res.err = err
			break
		}
		res.sent++
	}
}

// putOne is put of a task of one slice, nobody listening, no receiver
// credit: the lean path of a block run, or of a small request, is the
// slice alone.
func putOne(t *task, l *progress.Lane, sc *submitCtx, res *putResult) {
	b, i, rt, d := t.b, t.i, &t.rt, &t.d
	*res = putResult{i: i, slices: 1}
	var now int64 // 0: no deadline to check
	if d.Deadline != 0 {
		now = sc.unixNow()
	}
	if b.Stopping(i, now) {
		return
	}
	d.LocalRegion, d.RemoteRegion = rt.lreg, rt.rreg
	d.LocalOffset, d.RemoteOffset, d.Length = rt.loff, rt.roff, uint64(len(t.rec.req.Local))
	if sent, err := putSlice(d, b, i, b.Token(i), t.plan.Rails, l, t.prun.rails, rt.ps, sc); sent {
		res.sent = 1
	} else {
		res.err = err
	}
}

// describe sets in d what every slice of a task shares: the op, the
// priority, the peer and the deadline.
func describe(d *ring.Descriptor, op Op, prio Priority, peer uint32, deadline int64) {
	d.Op, d.Prio, d.Peer, d.Deadline = ring.OpWrite, uint8(prio), peer, deadline
	if op == Read {
		d.Op = ring.OpRead
	}
}

// putSlice puts slice d of task i of b (token its task's token) on lane
// l, on the rail rs picks among allowed, and reports whether it went.
// One that did not is taken back from its rail; err then says why, nil
// when the task ended meanwhile (canceled, expired) rather than plugin
// ps failing.
func putSlice(d *ring.Descriptor, b *progress.Batch, i int, token, allowed uint64, l *progress.Lane, rs *rails.Set, ps *Plugin, sc *submitCtx) (sent bool, err error) {
	rail := rs.PickFor(&sc.picked, d.Length, allowed, sc.now)
	d.Token, d.Rail = progress.WithRail(token, rail), uint16(rail)
	if err := l.Put(d, b, i); err != nil {
		rs.UnsentFor(&sc.picked, rail, d.Length)
		if errors.Is(err, progress.ErrTaskEnded) {
			return false, nil
		}
		return false, fmt.Errorf("%w: plugin %q: %w", ErrPluginFailed, ps.name, err)
	}
	return true, nil
}

// plan is how the slicer cuts n bytes on run's rails that policy
// allows, keeping off those in avoid.
func (e *Executor) plan(run *pluginRun, policy int, n, avoid uint64) slicer.Plan {
	rs := run.rails
	return slicer.Cut(slicer.Input{
		Length: n, Configured: e.sliceSize, Caps: capsOf(run.p.Info),
		Allowed: rs.Allowed(policy), Every: rs.All(0), Avoid: avoid,
	})
}

// cut marks the attempt put enqueued on l (of plugin ps) cut, once its
// slices are published. The order matters: the attempt is marked cut
// before the lane is looked at, and failed (or handed to failover) before
// its unsent slices are given up, which could otherwise settle it
// COMPLETED.
func (e *Executor) cut(b *progress.Batch, l *progress.Lane, ps *Plugin, c putResult) {
	b.Cut(c.i)
	e.cutDone(b, l, ps, c)
}

// cutRun is cut for the attempts a run put on l: they are marked cut
// together, with one barrier (progress.Batch.CutRun), then each goes on
// as in cut.
func (e *Executor) cutRun(b *progress.Batch, l *progress.Lane, ps *Plugin, cs []putResult) {
	var is [publishBurst]int32
	for len(cs) > 0 {
		k := min(len(cs), len(is))
		for j := range k {
			is[j] = int32(cs[j].i)
		}
		b.CutRun(is[:k])
		for _, c := range cs[:k] {
			e.cutDone(b, l, ps, c)
		}
		cs = cs[k:]
	}
}

// cutDone is the rest of cut, once attempt c is marked cut.
func (e *Executor) cutDone(b *progress.Batch, l *progress.Lane, ps *Plugin, c putResult) {
	i := c.i
	if c.err == nil && l.Down() {
		// The plugin died while the slices were being cut: its watcher
		// may have passed over this task, still being cut.
		c.err = fmt.Errorf("%w: plugin %q exited", ErrPluginFailed, ps.name)
	}
	if c.err != nil {
		b.Fail(i, c.err)
		if s, _ := b.Ending(i); s != progress.Pending {
			// Its end was decided while it was being cut, and its lane
			// went down under the slices it sent: nothing ends it else.
			e.endOrphan(b, i, ps)
		}
	}
	if c.sent < c.slices {
		b.Unsent(i, c.slices-c.sent)
	}
}

// SubmitWithNotify is Submit, then pend for the tasks [start, end) it
// added to the batch (host.Engine.SubmitWithNotify: the notification
// that goes out once they all completed).
func (e *Executor) SubmitWithNotify(id BatchID, reqs []Request, pend func(b *progress.Batch, start, end int) error) error {
	if id.b == nil {
		return fmt.Errorf("%w: submit: zero BatchID", ErrInvalid)
	}
	start := id.b.Len()
	if err := e.Submit(id, reqs...); err != nil {
		return err
	}
	return pend(id.b, start, id.b.Len())
}
