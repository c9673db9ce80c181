package path

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk"
)

// Waiting for a batch, and the status reads that drive completion for a
// caller that polls instead (they reap the rings of the plugins that
// carry the batch): the lanes a waiter looks at, the waiting policy's
// drivers (host/waiting, progress.Tracker.WaitBatch), and the bound on
// the wait for ended tasks' slices.

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
	var now int64 // read only when a task is pending: Done(0) expires nothing
	if !id.b.Done(0) {
		if now = progress.Now(); !id.b.Done(now) {
			e.reapBatch(id.b) // the caller polls: see reapTask
			now = progress.Now()
		}
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
		for !l.WaitOn(e.tracker, b.Done, ctx.Done(), b.MinDeadline(), small, e.lockedCallers) {
			if ctx.Err() != nil {
				return e.abandon(ctx, b)
			}
			if !ps.usable() || ps.run() != run || l.Down() {
				// The plugin died (its tasks are failed), or broke the
				// lane's ring (its run is about to be killed for it):
				// wait for that below, not on a lane WaitOn leaves at once.
				break
			}
		}
	}
	if b.Done(0) || b.Done(progress.Now()) {
		return nil
	}
	var inline [8]*progress.Lane
	w := waiting.Input{Spin: e.cfg.Transfer.Spin, SpinSmall: e.cfg.Transfer.SpinSmall, Small: small, Locked: e.lockedCallers,
		Dense: !small && waiting.IsDense(b.Len(), b.TotalBytes())}
	// A larger batch on one lane spins as long as that lane's larger
	// batches take, within waiting.BulkSpinMax (waiting.BulkSpin).
	var bulk *progress.Lane
	if !small {
		if _, _, bulk = e.batchLane(b); bulk != nil {
			w.BulkWait = bulk.BulkWait()
		}
	}
	start := progress.Now()
	if err := e.tracker.WaitBatch(ctx, b, e.waitLanes(b, inline[:0]), w); err != nil {
		return e.abandon(ctx, b)
	}
	if bulk != nil {
		bulk.NoteBulkWait(progress.Now() - start)
	}
	return nil
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

// WaitLanes returns the lanes a waiter on id polls (waitLanes).
func (e *Executor) WaitLanes(id BatchID) []*progress.Lane { return e.waitLanes(id.b, nil) }
