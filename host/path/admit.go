package path

import (
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/progress"
)

// The qos block's admission queue, wired into the request path: the
// queue and its dispatcher are host/admission's (Dispatcher); here are
// the admit stage's hold, the resume that enters the stage sequence, the
// grants kept beside each batch and given back at each task's end, and
// the lane a class goes on. Without the block none of this runs:
// e.path.qos is nil and the path costs a nil check. A qos block that
// bounds nothing in flight and does not reject late keeps no grant at
// all and adds no watcher to the tracker.

// ErrBusy is a request refused because the qos block's queue is full
// (qos.max_queued) and qos.busy is "error": submit it again later.
var ErrBusy = errors.New("ferry: admission queue full")

// qosQueue is the engine's admission dispatcher, and how lanes are
// shared between classes.
type qosQueue struct {
	d *admission.Dispatcher
	// perClass: qos.lanes = "per_class": the high class alone on each
	// plugin's first lane.
	perClass bool
	grants   bool // d.Grants()
}

// wireQoS builds the admission queue of the qos block, if there is one,
// and has the tracker tell it of every task's end; New calls it before
// wirePath (a task's grant goes back before the meter and the observer
// hear of its end), before the first batch is allocated.
func (e *Executor) wireQoS() error {
	qc := e.cfg.QoS
	if !qc.On {
		return nil
	}
	d, err := admission.NewDispatcher(admission.DispatcherConfig{Queue: qosConfig(&qc), Block: qc.Busy != config.QoSError,
		Tracker: e.tracker, Port: qosPort{e}, Quit: e.quit})
	if err != nil {
		return fmt.Errorf("%w: qos: %w", ErrInvalid, err)
	}
	e.path.qos = &qosQueue{d: d, perClass: qc.Lanes == config.QoSLanesPerClass, grants: d.Grants()}
	if e.path.qos.grants {
		e.tracker.Hook(e.qosHook())
	}
	return nil
}

// qosHook is the tracker's hook with a qos block: it gives each task's
// budgets back at its end. Giving a grant back needs no order against
// the task's other reports (Granted and GiveBack settle who gives it
// back with one compare-and-swap), so it is Unordered: a task's end
// takes no lock for admission's sake. It has no RunEnded: in a lane's
// run of completions it is told with Ended, and the meter after it still
// counts the run's ends in its tally, once per run.
func (e *Executor) qosHook() progress.Hook {
	return progress.Hook{Unordered: true, Ended: func(b *progress.Batch, i int, s progress.State, _ int64) {
		if tg := e.path.grantOf(b, i); tg != nil && tg.Holding() {
			e.path.qos.d.GiveBack(tg, s == progress.Completed)
		}
	}}
}

// qosConfig converts the qos block to the queue's settings.
func qosConfig(qc *config.QoS) admission.Config {
	lim := func(l config.QoSLimits) admission.Limits {
		return admission.Limits{Rate: float64(l.Rate), Burst: uint64(l.Burst), InflightBytes: uint64(l.InflightBytes), InflightRequests: l.InflightRequests}
	}
	cfg := admission.Config{
		Total: lim(qc.QoSLimits), Default: qc.DefaultTenant, Promotion: qc.Promotion,
		RejectLate: qc.RejectLate, MaxQueued: qc.MaxQueued,
	}
	for _, c := range qc.Classes {
		if k, ok := admission.ParseClass(c.Name); ok {
			cfg.Classes[k] = lim(c.QoSLimits)
		}
	}
	for _, t := range qc.Tenants {
		cfg.Tenants = append(cfg.Tenants, admission.Tenant{Name: t.Name, Weight: t.Weight, Limits: lim(t.QoSLimits)})
	}
	return cfg
}

// startQoS starts the dispatcher; it ends with the engine (quit).
func (e *Executor) startQoS() {
	if e.path.qos == nil {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.path.qos.d.Run()
	}()
}

// hold offers task i of b (request r, validated, for segment rem) to the
// queue. It reports whether the task does not go on now: held back (the
// dispatcher resumes it), or refused and ended here. sc's time is the
// request's; wait, false, fails a full queue at once whatever qos.busy
// says (a block submission holds a lane, which the dispatcher may need).
func (e *Executor) hold(b *progress.Batch, i int, r *Request, rem *remote, sc *submitCtx, wait bool) bool {
	qq := e.path.qos
	ar := admission.Request{
		Length: uint64(len(r.Local)), Priority: r.Priority, Deadline: r.deadline(), Intent: r.Intent, Segment: rem.Name, Tenant: r.Tenant,
	}
	g, goOn, err := qq.d.Hold(admission.Held{B: b, ID: b.ID(), I: int32(i)}, &ar, sc.now().UnixNano(), &sc.admitted, wait)
	if goOn {
		if qq.grants {
			e.granted(b, i, g)
		}
		return false
	}
	if err == nil {
		return true // held back, or ended while it waited for room
	}
	b.Cut(i)
	switch {
	case errors.Is(err, admission.ErrTenant):
		b.Finish(i, progress.Invalid, fmt.Errorf("%w: segment %q: %w", ErrInvalid, rem.Name, err))
	case errors.Is(err, admission.ErrLate):
		b.Finish(i, progress.Failed, fmt.Errorf("%w: segment %q: admission refused the request early: %w", ErrDeadlineExceeded, rem.Name, err))
	case errors.Is(err, admission.ErrBusy):
		b.Finish(i, progress.Failed, fmt.Errorf("%w: segment %q: %w", ErrBusy, rem.Name, err))
	case errors.Is(err, admission.ErrStopped):
		b.Finish(i, progress.Failed, e.closeErr())
	default:
		b.Finish(i, progress.Failed, err)
	}
	return true
}

// grantOf returns task i's grant record, nil when b was freed.
func (p *requestPath) grantOf(b *progress.Batch, i int) *admission.TaskGrant {
	r := p.records[b.Slot()]
	if r == nil || i >= len(r.grants) {
		return nil
	}
	return &r.grants[i]
}

// granted records that task i of b holds g of the queue's budgets, given
// back when the task ends (qosHook).
func (e *Executor) granted(b *progress.Batch, i int, g admission.Grant) {
	e.path.qos.d.Granted(e.path.grantOf(b, i), g, b.State(i, 0).Terminal())
}

// qosPort is the executor as the dispatcher resumes and abandons held
// tasks through it.
type qosPort struct{ e *Executor }

// Resume takes held task h on from admission, with grant g, through the
// rest of the stage sequence.
func (p qosPort) Resume(h admission.Held, g admission.Grant) {
	e := p.e
	b, i := h.B, int(h.I)
	if e.path.qos.grants {
		e.granted(b, i, g)
	}
	if b.Stopping(i, progress.Now()) {
		return // ended before it was granted: given back above, or by its end
	}
	e.resume(task{b: b, i: i, admitted: true})
}

// Abandon ends a task still held when the engine closes: it never
// reached a plugin.
func (p qosPort) Abandon(h admission.Held) {
	h.B.Cut(int(h.I))
	h.B.Finish(int(h.I), progress.Failed, fmt.Errorf("%w: engine %q closed while the request was held back by admission", ErrClosed, p.e.name))
}

// forgetHeld drops the held tasks of b, which is being freed (FreeBatch
// ended them), so that the dispatcher never takes one on.
func (e *Executor) forgetHeld(b *progress.Batch) {
	if qq := e.path.qos; qq != nil {
		qq.d.Forget(b)
	}
	if l := e.path.later; l != nil {
		l.Forget(b)
	}
}

// QoSStatus is what the admission queue of the qos block reports.
type QoSStatus struct {
	// On: the configuration has a qos block.
	On bool
	admission.DispatcherStats
}

// QoS is host.Engine.QoS, which documents it.
func (e *Executor) QoS() QoSStatus {
	qq := e.path.qos
	if qq == nil {
		return QoSStatus{}
	}
	return QoSStatus{On: true, DispatcherStats: qq.d.Stats()}
}

// laneOf returns the lane of run (of plugin ps) a request of priority p
// goes on: with qos.lanes = "per_class" and several lanes, the high
// class has the first lane to itself and the others share the rest, so
// that a HIGH slice never waits in a ring behind LOW ones; otherwise any
// lane (pickLane).
func (e *Executor) laneOf(run *pluginRun, ps *Plugin, p Priority) *progress.Lane {
	qq := e.path.qos
	if qq == nil || !qq.perClass || len(run.lanes) < 2 {
		return run.lane(ps)
	}
	if admission.ClassOf(p) == admission.ClassHigh {
		return run.lanes[0]
	}
	return pickLane(run.lanes[1:], &ps.next)
}

// stickBytes is how many bytes of one call's requests keep to the lane
// the first of them took (laneFor).
const stickBytes = 1 << 20

// laneFor returns the lane the call's next requests, of lengths, go on,
// of run (of plugin ps) and for priority p: the lane the call's put before took,
// while it is of the same run and class and the call has put less than
// stickBytes there; else laneOf's. A batch of small requests stays on
// one lane, its plugin goroutine and its waiter's ring; a large one
// spreads over idle lanes a MiB at a time. Picked a burst at a time, a
// batch of 128 writes of 4 KiB went half on each of two lanes, each
// with a plugin goroutine and a reaper of its own, and ran at 0.7-1.2
// GB/s against 9-12 on one lane (transfer.lanes = 2; 2-vCPU guest).
func (e *Executor) laneFor(sc *submitCtx, run *pluginRun, ps *Plugin, p Priority, lengths ...uint64) *progress.Lane {
	class := admission.ClassOf(p)
	if l := sc.lane; l == nil || sc.laneRun != run || sc.laneClass != class || sc.laneBytes >= stickBytes {
		sc.lane, sc.laneRun, sc.laneClass, sc.laneBytes = e.laneOf(run, ps, p), run, class, 0
	}
	for _, n := range lengths {
		sc.laneBytes += n
	}
	return sc.lane
}

// QoSMetrics is QoS for the metrics exporter.
func (e *Executor) QoSMetrics() (metrics.QoS, bool) {
	q := e.QoS()
	if !q.On {
		return metrics.QoS{}, false
	}
	m := metrics.QoS{Held: q.Held, HeldTotal: q.HeldTotal, Dropped: q.Dropped, Bandwidth: q.Bandwidth}
	for _, t := range q.Tenants {
		m.Tenants = append(m.Tenants, metrics.QoSTenant{Name: t.Name, Admitted: t.Admitted, Rejected: t.Rejected, Bytes: t.Bytes, Queued: t.Queued})
	}
	return m, true
}
