package path

import (
	"context"
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
	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Op is what a request does.
type Op uint8

const (
	// Read copies from the remote segment into local memory.
	Read Op = 1
	// Write copies from local memory into the remote segment.
	Write Op = 2
)

var opNames = [...]string{Read: "read", Write: "write"}

func (o Op) String() string { return enum.String(o, opNames[:], "op") }

// Priority orders requests under load; the SDK's type, which the ring
// descriptor carries.
type Priority = sdk.Priority

const (
	PriorityNormal = sdk.PriorityNormal
	PriorityHigh   = sdk.PriorityHigh
	PriorityLow    = sdk.PriorityLow
)

// Request is one transfer between local memory and a remote segment.
type Request struct {
	Op Op
	// Local is the local range: registered memory of this engine. Its
	// length is the transfer's length.
	Local []byte
	// Segment is a handle from OpenSegment.
	Segment SegmentID
	// Remote is the address in the remote segment, as listed in its
	// descriptor (the owner's virtual address).
	Remote   uint64
	Priority Priority
	// Deadline, when set, ends the task TIMEOUT if it has not completed by
	// then. A request that sets none gets transfer.default_deadline from
	// its Submit (30 s unless configured; "0s" leaves it without one),
	// except in a Transfer whose context has a deadline: that one bounds
	// it.
	Deadline time.Time
	// Transport pins the transport (a plugin name) of the first attempt;
	// "" lets the engine choose. A hint that cannot reach the segment
	// makes the task INVALID: the engine never falls back silently.
	Transport string
	// Intent says what the request is for, one of the Intent constants or
	// ""; policies match on it.
	Intent Intent
	// Tenant names who the request is for, for the qos block's fair
	// shares and budgets; "" is the default tenant. Without a qos block
	// it is not read.
	Tenant string
	// Policy, when set, names the configured policy that chooses the
	// transports, whatever its match conditions say.
	Policy string
	// Trace asks the engine to keep this task's story (every stage, its
	// times, transports, retries and the selector's reasons) for
	// Engine.Traces and `ferry status --traces`, when the configuration
	// has a trace block; without one it does nothing.
	Trace bool
}

// deadline returns Deadline in unix nanoseconds, 0 for none.
func (r *Request) deadline() int64 {
	if r.Deadline.IsZero() {
		return 0
	}
	return r.Deadline.UnixNano()
}

// BatchID names a batch from AllocateBatch.
type BatchID struct {
	b *progress.Batch
	// id is the batch's progress.Batch.ID when it was allocated: a freed
	// batch's record is reused, and its next life has another.
	id uint64
}

// live returns the batch id names, or an error saying why there is none
// (a zero BatchID, or one already freed); what says which call asked.
func (e *Executor) live(id BatchID, what string) (*progress.Batch, error) {
	if id.b == nil {
		return nil, fmt.Errorf("%w: %s: zero BatchID", ErrInvalid, what)
	}
	if id.b.ID() != id.id || !e.tracker.Live(id.b) {
		return nil, fmt.Errorf("%w: %s: the batch was freed (FreeBatch); its tasks are gone", ErrInvalid, what)
	}
	return id.b, nil
}

// TaskStatus is one task's state.
type TaskStatus struct {
	State State
	Bytes uint64 // bytes transferred so far, by the current attempt
	Err   error  // why, when the state is not COMPLETED or PENDING
	// Attempts is how many attempts the task has had, 1 unless it was
	// failed over (see host/failover).
	Attempts int
}

// BatchStatus sums a batch.
type BatchStatus struct {
	Tasks     int
	Pending   int
	Completed int
	Failed    int // FAILED, CANCELED, TIMEOUT and INVALID together
	Bytes     uint64
}

// Done reports whether every task of the batch has ended.
func (s BatchStatus) Done() bool { return s.Pending == 0 }

// AllocateBatch is host.Engine.AllocateBatch, which documents it.
func (e *Executor) AllocateBatch(capacity int) (BatchID, error) {
	if e.closed.Load() {
		return BatchID{}, ErrClosed
	}
	b, err := e.tracker.Allocate(capacity)
	if err != nil {
		return BatchID{}, fmt.Errorf("%w: allocate batch: %w", ErrInvalid, err)
	}
	e.path.attach(b)
	return BatchID{b: b, id: b.ID()}, nil
}

// FreeBatch is host.Engine.FreeBatch, which documents it.
func (e *Executor) FreeBatch(id BatchID) error {
	if id.b == nil {
		return fmt.Errorf("%w: free batch: zero BatchID", ErrInvalid)
	}
	if _, err := e.live(id, "free batch"); err != nil {
		return nil // freed already
	}
	if !id.b.Done(0) {
		id.b.Cancel()
		if err := e.awaitEnded(id.b); err != nil {
			e.log.Warn("batch freed while a plugin still holds slices of its tasks", "error", err)
		}
	}
	e.settleNotifies(id.b)                      // decide its SubmitWithNotify submissions before reuse
	e.forgetHeld(id.b)                          // none of its tasks held back by admission is taken on after this
	e.tracker.AwaitUnpinned(id.b, e.endBound()) // a failover or QoS resume still at one of its tasks lets go
	slot, n := id.b.Slot(), id.b.Len()
	e.creditFree(slot, n)
	if e.tracker.Free(id.b) {
		e.path.detach(slot, n)
	}
	return nil
}

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
	for k := range reqs {
		e.submitOne(b, &reqs[k], &sc)
	}
	e.flushQueued(&sc)
	return nil
}

// submitCtx is what one Submit call carries from request to request: the
// time, read once, when a request needs it (the clock is a noticeable
// share of a small request's cost on some machines).
type submitCtx struct {
	wall time.Time
	// bounded: the caller's context has a deadline, which ends the
	// requests without one; transfer.default_deadline is not given them.
	bounded bool
	// queued counts the requests the call queued, for the meter
	// (flushQueued).
	queued metrics.Tally
	// admitted counts the requests the qos queue let go at once, for
	// their tenants (admit.go's hold; flushQueued).
	admitted admission.Tally
	// waiter: the caller waits on the batch's lanes itself right after
	// the call (runBatch's Wait of a small batch enters them), so its
	// publications leave a reaper standing by (Lane.EndWaited).
	waiter bool
}

// now returns the time the first request that needed it was submitted.
func (c *submitCtx) now() time.Time {
	if c.wall.IsZero() {
		c.wall = time.Now()
	}
	return c.wall
}

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
	t := task{b: b, i: i, rec: rec, rem: e.remote(r.Segment), sc: sc, wait: true}
	e.run(&t, stageValidate)
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
func (e *Executor) admit(t *task) bool {
	if e.path.admit == nil || t.asked {
		return true
	}
	r := &t.rec.req
	ar := admission.Request{
		Length: uint64(len(r.Local)), Priority: r.Priority, Deadline: r.deadline(), Intent: r.Intent, Segment: t.rem.Name, Tenant: r.Tenant,
	}
	now := t.sc.now().UnixNano()
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
	e := p.e
	b, i := h.B, int(h.I)
	rec := e.path.record(b, i)
	var sc submitCtx
	t := task{b: b, i: i, rec: rec, rem: e.remote(rec.req.Segment), sc: &sc, asked: true}
	e.run(&t, stageValidate)
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
// where the transport is two-sided. The caller publishes them (End),
// then calls cut with the result.
func (e *Executor) put(t *task, l *progress.Lane) putResult {
	b, i, r, rem, rt := t.b, t.i, &t.rec.req, t.rem, &t.rt
	deadline := r.deadline()
	n := uint64(len(r.Local))
	ps := rt.ps
	plan := &t.plan
	op := ring.OpWrite
	if r.Op == Read {
		op = ring.OpRead
	}
	token := b.Token(i)
	d := ring.Descriptor{
		Op: op, Prio: uint8(r.Priority),
		LocalRegion: rt.lreg, Peer: rem.ID, RemoteRegion: rt.rreg,
		Deadline: deadline,
	}
	var now int64 // 0: no deadline to check
	if deadline != 0 {
		now = t.sc.now().UnixNano()
	}
	e.note(b, i, observe.Submitted, ps.idx, plan.Slices, nil) // before any slice is visible to the plugin
	res := putResult{i: i, slices: plan.Slices}
	var hold *credit.Hold // receiver credit: a two-sided transport's slices take some
	pc := e.creditFor(t.prun, rem)
	if pc != nil {
		hold = e.credit.keeper.Begin(b, i, pc, plan.Slice)
	}
	for off := uint64(0); off < n; off += plan.Slice {
		if b.Stopping(i, now) { // canceled or expired while being cut: the rest never leaves
			break
		}
		d.LocalOffset, d.RemoteOffset, d.Length = rt.loff+off, rt.roff+off, min(plan.Slice, n-off)
		if hold != nil && !e.credit.keeper.Take(hold, pc, d.Length, r.Priority == PriorityHigh, b, i, l) {
			break // it stopped, or the engine closed, while waiting for credit
		}
		if sent, err := putSlice(&d, b, i, token, plan.Rails, l, t.prun.rails, ps, t.sc); !sent {
			if hold != nil {
				e.credit.keeper.Unsent(hold, d.Length)
			}
			res.err = err
			break
		}
		res.sent++
	}
	return res
}

// putSlice puts slice d of task i of b (token its task's token) on lane
// l, on the rail rs picks among allowed, and reports whether it went.
// One that did not is taken back from its rail; err then says why, nil
// when the task ended meanwhile (canceled, expired) rather than plugin
// ps failing.
func putSlice(d *ring.Descriptor, b *progress.Batch, i int, token, allowed uint64, l *progress.Lane, rs *rails.Set, ps *Plugin, sc *submitCtx) (sent bool, err error) {
	rail := rs.Pick(d.Length, allowed, sc.now)
	d.Token, d.Rail = progress.WithRail(token, rail), uint16(rail)
	if err := l.Put(d, b, i); err != nil {
		rs.Unsent(rail, d.Length)
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
	i := c.i
	b.Cut(i)
	if c.err == nil && l.Down() {
		// The plugin died while the slices were being cut: its watcher
		// may have passed over this task, still being cut.
		c.err = fmt.Errorf("%w: plugin %q exited", ErrPluginFailed, ps.name)
	}
	if c.err != nil {
		b.Fail(i, c.err)
	}
	if c.sent < c.slices {
		b.Unsent(i, c.slices-c.sent)
	}
}

// TaskStatus is host.Engine.TaskStatus, which documents it.
func (e *Executor) TaskStatus(id BatchID, i int) (TaskStatus, error) {
	if id.b == nil || i < 0 || i >= id.b.Len() {
		return TaskStatus{}, fmt.Errorf("%w: task %d: no such task", ErrInvalid, i)
	}
	if _, err := e.live(id, "task status"); err != nil {
		return TaskStatus{}, err
	}
	now := progress.Now()
	if id.b.State(i, now) == progress.Pending && e.reapTask(id.b, i) {
		now = progress.Now()
	}
	return e.taskStatus(id.b, i, now), nil
}

// reapTask polls the completion rings of the plugin that carries task i
// of b, so that a caller polling a task's status drives its completion
// rather than waiting for the lane's reaper (which pauses after short
// runs nobody waits for: progress.Lane.SetReapPause). It reports whether
// it reaped anything. It never blocks: a ring another goroutine reaps is
// skipped.
func (e *Executor) reapTask(b *progress.Batch, i int) bool {
	idx := b.Task(i).Transport()
	if idx < 0 || int(idx) >= len(e.plugins) {
		return false
	}
	run := e.plugins[idx].run()
	if run == nil {
		return false
	}
	n := 0
	for _, l := range run.lanes {
		n += l.Poll(e.tracker)
	}
	return n > 0
}

// reapBatch is reapTask for the lanes of every plugin that carries a task
// of b (waitLanes).
func (e *Executor) reapBatch(b *progress.Batch) {
	var inline [8]*progress.Lane
	for _, l := range e.waitLanes(b, inline[:0]) {
		l.Poll(e.tracker)
	}
}

func (e *Executor) taskStatus(b *progress.Batch, i int, now int64) TaskStatus {
	t := b.Task(i)
	st := TaskStatus{State: b.State(i, now), Bytes: t.Bytes(), Attempts: b.Attempt(i) + 1}
	st.Err = e.taskErr(b, i, st.State)
	return st
}

// TaskStatusList is host.Engine.TaskStatusList, which documents it.
func (e *Executor) TaskStatusList(id BatchID, first int, out []TaskStatus) (int, error) {
	b, err := e.live(id, "task status list")
	if err != nil {
		return 0, err
	}
	if first < 0 || first > b.Len() {
		return 0, fmt.Errorf("%w: task status list: first task %d is outside the batch's %d tasks", ErrInvalid, first, b.Len())
	}
	n := min(len(out), b.Len()-first)
	now := progress.Now()
	for k := range n {
		if b.State(first+k, now) == progress.Pending {
			e.reapBatch(b) // the caller polls: see reapTask
			now = progress.Now()
			break
		}
	}
	for k := range n {
		out[k] = e.taskStatus(b, first+k, now)
	}
	return n, nil
}

// CancelTask is host.Engine.CancelTask, which documents it.
func (e *Executor) CancelTask(id BatchID, i int) error {
	b, err := e.live(id, "cancel task")
	if err != nil {
		return fmt.Errorf("task %d: %w", i, err)
	}
	if i < 0 || i >= b.Len() {
		return fmt.Errorf("%w: cancel task %d: no such task; the batch holds %d", ErrInvalid, i, b.Len())
	}
	b.Finish(i, progress.Canceled, nil)
	return nil
}

func (e *Executor) taskErr(b *progress.Batch, i int, s State) error {
	t := b.Task(i)
	switch s {
	case progress.Pending, progress.Completed:
		return nil
	case progress.Timeout:
		if err := t.Err(); err != nil && errors.Is(err, ErrDeadlineExceeded) {
			return err // it said why it waited (a fence: awaitGate)
		}
		if rec := e.path.lookup(b, i); rec != nil && rec.defaultDeadline {
			return fmt.Errorf("%w: the default deadline (transfer.default_deadline = %s; the request set none) passed after %d of %d bytes; set Request.Deadline, or raise default_deadline (\"0s\": none)",
				ErrDeadlineExceeded, e.cfg.Transfer.DefaultDeadline, t.Bytes(), t.Length)
		}
		return fmt.Errorf("%w: deadline passed after %d of %d bytes", ErrDeadlineExceeded, t.Bytes(), t.Length)
	case progress.Canceled:
		return fmt.Errorf("%w after %d of %d bytes", ErrCanceled, t.Bytes(), t.Length)
	}
	if err := t.Err(); err != nil {
		return err
	}
	return statusErr(t.SliceStatus())
}

// BatchStatus is host.Engine.BatchStatus, which documents it.
func (e *Executor) BatchStatus(id BatchID) (BatchStatus, error) {
	if id.b == nil {
		return BatchStatus{}, fmt.Errorf("%w: zero BatchID", ErrInvalid)
	}
	now := progress.Now()
	if !id.b.Done(now) {
		e.reapBatch(id.b) // the caller polls: see reapTask
		now = progress.Now()
	}
	var s BatchStatus
	s.Tasks = id.b.Len()
	for i := range s.Tasks {
		t := id.b.Task(i)
		s.Bytes += t.Bytes()
		switch id.b.State(i, now) {
		case progress.Pending:
			s.Pending++
		case progress.Completed:
			s.Completed++
		default:
			s.Failed++
		}
	}
	return s, nil
}

// Cancel is host.Engine.Cancel, which documents it.
func (e *Executor) Cancel(id BatchID) error {
	if id.b == nil {
		return fmt.Errorf("%w: zero BatchID", ErrInvalid)
	}
	id.b.Cancel()
	return nil
}

// Wait is host.Engine.Wait, which documents it.
func (e *Executor) Wait(ctx context.Context, id BatchID) error {
	b := id.b
	if b == nil {
		return fmt.Errorf("%w: zero BatchID", ErrInvalid)
	}
	small := b.TotalBytes() <= sdk.SmallBatch
	ps, run, l := e.soleLane()
	if l == nil && small {
		ps, run, l = e.batchLane(b)
	}
	if l != nil {
		// One lane carries everything, or every task of a small batch:
		// wait on its completion ring directly, so the plugin's wakeup
		// lands here. (A task of it that fails over to another plugin
		// meanwhile is reaped there; WaitOn sees the batch done within
		// its sleep's bound.)
		done := func() bool { return b.Done(deadlineClock(b)) }
		for !l.WaitOn(e.tracker, done, ctx.Done(), b.MinDeadline(), small, e.lockedCallers) {
			if ctx.Err() != nil {
				return e.abandon(ctx, b)
			}
			if !ps.usable() || ps.run() != run {
				break // the plugin died: its tasks are failed; wait for that below
			}
		}
		if done() {
			return nil
		}
	}
	if b.Done(progress.Now()) {
		return nil
	}
	var inline [8]*progress.Lane
	w := waiting.Input{Spin: e.cfg.Transfer.Spin, SpinSmall: e.cfg.Transfer.SpinSmall, Small: small, Locked: e.lockedCallers}
	if err := e.tracker.WaitBatch(ctx, b, e.waitLanes(b, inline[:0]), w); err != nil {
		return e.abandon(ctx, b)
	}
	return nil
}

// deadlineClock returns the time for b.Done: now when a task of b has a
// deadline, else 0, sparing the clock read (a noticeable share of a
// small request's cost on some machines).
func deadlineClock(b *progress.Batch) int64 {
	if b.MinDeadline() == 0 {
		return 0
	}
	return progress.Now()
}

// heldPoll is how often a waiter looks at the deadlines of a batch whose
// earliest deadline has passed.
const heldPoll = waiting.HeldPoll

// abandon ends the batch's pending tasks because ctx ended: TIMEOUT if
// its deadline passed, else CANCELED. It returns once they have ended
// (awaitEnded), with ctx's error.
func (e *Executor) abandon(ctx context.Context, b *progress.Batch) error {
	s := progress.Canceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		s = progress.Timeout
	}
	for i := range b.Len() {
		b.Finish(i, s, nil)
	}
	if err := e.awaitEnded(b); err != nil {
		return fmt.Errorf("%w; %w", ctx.Err(), err)
	}
	return ctx.Err()
}

// awaitEnded waits for every task of b, whose ends were all decided, to
// end: for the slices plugins hold to come back, or for the plugin that
// holds them past supervise.end_grace to be killed (the supervisor does
// that). It gives up after endBound, with an error that says how many
// tasks a plugin still holds; they stay PENDING.
func (e *Executor) awaitEnded(b *progress.Batch) error {
	if b.Done(0) {
		return nil
	}
	bound := e.endBound()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	poll := time.NewTicker(heldPoll) // the last task's end wakes b; this covers a wake taken by another waiter
	defer poll.Stop()
	for !b.Done(0) {
		select {
		case <-b.Wake():
		case <-poll.C:
			e.pollLanes()
		case <-timer.C:
			held := 0
			for i := range b.Len() {
				if !b.State(i, 0).Terminal() {
					held++
				}
			}
			return fmt.Errorf("%w: %d tasks did not end within %s: their plugin still holds slices of them (and was not killed in time); their buffers are not safe to reuse", ErrPluginFailed, held, bound)
		}
	}
	return nil
}

// pollLanes reaps what every running plugin's completion rings hold, for
// a waiter whose completions no reaper may be taking (the supervisor
// starts reapers; a waiter also takes them itself).
func (e *Executor) pollLanes() {
	for _, ps := range e.plugins {
		if ps.usable() {
			for _, l := range ps.run().lanes {
				l.Poll(e.tracker)
			}
		}
	}
}

// endBound is how long awaitEnded waits: the grace a plugin has to give
// back an ended task's slices, then the supervisor's next looks, which
// kill a plugin that did not, and its exit.
func (e *Executor) endBound() time.Duration {
	sv := e.cfg.Supervise.WithDefaults()
	return 2*sv.EndGrace + 3*sv.Interval + ControlTimeout
}

// soleLane returns the only lane of the only running plugin, or nil when
// there are several (or none).
func (e *Executor) soleLane() (*Plugin, *pluginRun, *progress.Lane) {
	var owner *Plugin
	var run *pluginRun
	for _, ps := range e.plugins {
		if !ps.usable() {
			continue
		}
		r := ps.run()
		if owner != nil || len(r.lanes) != 1 {
			return nil, nil, nil
		}
		owner, run = ps, r
	}
	if owner == nil {
		return nil, nil, nil
	}
	return owner, run, run.lanes[0]
}

// waitLanes appends the lanes Wait polls for b to lanes: those that
// carry b's tasks, so that a 4 KiB write over shm does not also take the
// tcp lane from its reaper, nor a HIGH read on a lane of its own (qos
// lanes = "per_class") the bulk lanes from theirs (Enter, and Leave's
// hand-back, two thread wakeups a call, and their completions reaped on
// the waiter's thread). A task not yet put on a lane brings every lane
// of its plugin. A batch of more than waitLanesTasks tasks, or one with
// a task on a plugin past the 64th, gets every running plugin's lanes,
// as before. Only where the waiter looks changes: a task that fails over
// to another plugin meanwhile is reaped there by that lane's reaper,
// which wakes b.
func (e *Executor) waitLanes(b *progress.Batch, lanes []*progress.Lane) []*progress.Lane {
	var on, whole uint64 // bit i: plugin i carries a task of b; of which one not on a lane yet
	type onLane struct{ plugin, lane int32 }
	var seen [8]onLane
	ns := 0
	if n := b.Len(); n <= waitLanesTasks {
	tasks:
		for i := range n {
			t := b.Task(i)
			idx := t.Transport()
			if idx >= 64 {
				on = 0
				break
			}
			if idx < 0 {
				continue
			}
			on |= 1 << idx
			ln := t.Lane()
			if ln < 0 {
				whole |= 1 << idx
				continue
			}
			for _, s := range seen[:ns] {
				if s == (onLane{idx, ln}) {
					continue tasks
				}
			}
			if ns == len(seen) {
				whole |= 1 << idx
				continue
			}
			seen[ns] = onLane{idx, ln}
			ns++
		}
	}
	for i, ps := range e.plugins {
		if !ps.usable() || on != 0 && (i >= 64 || on&(1<<i) == 0) {
			continue
		}
		run := ps.run()
		if on == 0 || whole&(1<<i) != 0 {
			lanes = append(lanes, run.lanes...)
			continue
		}
		for _, s := range seen[:ns] {
			if int(s.plugin) == i && int(s.lane) < len(run.lanes) {
				lanes = append(lanes, run.lanes[s.lane])
			}
		}
	}
	return lanes
}

// batchLane returns the lane that carries every task of b, and its
// plugin and run, when b is of at most waitLanesTasks tasks all put on
// one lane of one running plugin; else nils.
func (e *Executor) batchLane(b *progress.Batch) (*Plugin, *pluginRun, *progress.Lane) {
	n := b.Len()
	if n == 0 || n > waitLanesTasks {
		return nil, nil, nil
	}
	t0 := b.Task(0)
	idx, ln := t0.Transport(), t0.Lane()
	if idx < 0 || int(idx) >= len(e.plugins) || ln < 0 {
		return nil, nil, nil
	}
	for i := 1; i < n; i++ {
		if t := b.Task(i); t.Transport() != idx || t.Lane() != ln {
			return nil, nil, nil
		}
	}
	ps := e.plugins[idx]
	if !ps.usable() {
		return nil, nil, nil
	}
	run := ps.run()
	if int(ln) >= len(run.lanes) {
		return nil, nil, nil
	}
	return ps, run, run.lanes[ln]
}

// waitLanesTasks bounds the tasks waitLanes looks at: past it, looking
// costs more than the lanes it could leave out.
const waitLanesTasks = 64

// taskResult is one task's terminal state as Transfer reports it.
type taskResult struct {
	state     State
	err       error
	transport int32
	recheck   bool // the plugin failed it; recheck the peer
	status    ring.Status
	attempts  int
}

// Transfer is host.Engine.Transfer, which documents it.
func (e *Executor) Transfer(ctx context.Context, reqs ...Request) error {
	res, werr := e.runBatch(ctx, reqs)
	if res == nil {
		return werr
	}
	var errs []error
	checked := map[SegmentID]string{} // recheck's findings, once per segment
	for i, tr := range res {
		if tr.state == progress.Completed {
			continue
		}
		r := &reqs[i]
		te := &TransferError{Task: i, Op: r.Op, Remote: r.Remote, Length: uint64(len(r.Local)), State: tr.state, Err: tr.err}
		if rem := e.remote(r.Segment); rem != nil {
			te.Segment = rem.Name
			if tr.recheck {
				te.Err = e.recheck(ctx, rem, tr.status, te.Err, checked)
			}
		}
		if tr.transport >= 0 {
			te.Transport = e.plugins[tr.transport].name
		}
		if tr.attempts > 1 {
			te.Err = fmt.Errorf("%w (after %d attempts)", te.Err, tr.attempts)
		}
		errs = append(errs, te)
	}
	if len(errs) == 0 {
		return nil
	}
	if werr != nil {
		errs = append(errs, werr)
	}
	return errors.Join(errs...)
}

// runBatch runs reqs as one batch and reports each task's end. It returns
// a nil slice only when the batch could not be submitted.
func (e *Executor) runBatch(ctx context.Context, reqs []Request) ([]taskResult, error) {
	id, err := e.AllocateBatch(max(len(reqs), 1))
	if err != nil {
		return nil, err
	}
	defer e.FreeBatch(id)
	_, bounded := ctx.Deadline()
	var total uint64
	for k := range reqs {
		total += uint64(len(reqs[k].Local))
	}
	// Wait enters the lanes of a small batch and reaps them itself.
	waiter := total <= sdk.SmallBatch
	if err := e.submit(id, reqs, submitCtx{bounded: bounded, waiter: waiter}); err != nil {
		return nil, err
	}
	werr := e.Wait(ctx, id)
	out := make([]taskResult, len(reqs))
	now := progress.Now()
	for i := range id.b.Len() {
		t := id.b.Task(i)
		s := id.b.State(i, now)
		out[i] = taskResult{state: s, transport: t.Transport(), attempts: id.b.Attempt(i) + 1}
		if s != progress.Completed {
			out[i].err = e.taskErr(id.b, i, s)
			out[i].recheck = t.Err() == nil && s == progress.Failed
			out[i].status = t.SliceStatus()
		}
	}
	return out, werr
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

// Number is the number observer events give the batch
// (observe.Event.Batch), 0 for a zero BatchID.
func (id BatchID) Number() uint64 {
	if id.b == nil {
		return 0
	}
	return id.b.ID()
}

// WaitLanes returns the lanes a waiter on id polls (waitLanes).
func (e *Executor) WaitLanes(id BatchID) []*progress.Lane { return e.waitLanes(id.b, nil) }
