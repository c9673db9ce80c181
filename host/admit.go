package host

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/progress"
)

// The qos block's admission queue, wired into the request path. Without
// the block none of this runs: e.path.qos is nil and the path costs a nil
// check. With it, every validated request is offered to the queue: it
// goes on at once when its class, tenant and total budgets fit and
// nothing of its class or above is held back; otherwise it is held, and
// one goroutine the engine owns (runQoS) takes it on when the queue says
// its turn came: a completion freed a budget, a rate cap refilled, or a
// deadline brought a promotion. A held task has sent nothing: canceled
// or past its deadline it ends at once (it holds no plugin), and the
// dispatcher drops it when it comes up.
//
// The unloaded path takes no lock and hands nothing to the dispatcher:
// a request that nothing binds is let go by the queue's Admit on the
// submitting goroutine (atomics only), and its end gives its in-flight
// budgets back with Release, also lock-free. Only when a bound is full,
// a cap or a queue is in the way, or reject_late is on, does a request
// take the lock (Offer). A qos block that bounds nothing in flight and
// does not reject late keeps no grant at all and adds no watcher to the
// tracker: its path costs the off path plus one Admit.

// ErrBusy is a request refused because the qos block's queue is full
// (qos.max_queued) and qos.busy is "error": submit it again later.
var ErrBusy = errors.New("ferry: admission queue full")

// qosQueue is the engine's admission queue and what its dispatcher
// needs.
type qosQueue struct {
	mu sync.Mutex // guards q
	q  *admission.Queue[heldTask]
	// No lock is held while a task taken from the queue is dispatched
	// (a dispatch may wait for credit or ring space): the dispatcher
	// pins the task's batch under mu as Next gives it
	// (progress.Tracker.PinBatch), so that a FreeBatch meanwhile never
	// hands the batch to a new owner; FreeBatch waits for the pin
	// (awaitUnpinned) after forgetHeld.
	// wake tells the dispatcher to look at the queue; room tells a
	// submitter waiting on a full queue that a place freed.
	wake, room chan struct{}
	block      bool // qos.busy = "block"
	// perClass: qos.lanes = "per_class": the high class alone on each
	// plugin's first lane.
	perClass bool
	// held counts the requests held back so far (Engine.QoS).
	held atomic.Uint64
	// grants: a grant holds something to give back (the queue is
	// Counted), so tasks keep theirs and the tracker's watcher gives
	// them back; measured: that is Done, under mu, with the time.
	grants, measured bool
}

// heldTask is a task held in the queue: its batch (and that batch's id,
// for a batch freed and reused meanwhile) and index.
type heldTask struct {
	b  *progress.Batch
	id uint64
	i  int32
}

// wireQoS builds the admission queue of the qos block, if there is one,
// and has the tracker tell it of every task's end; New calls it before
// wirePath (a task's grant goes back before the meter and the observer
// hear of its end), before the first batch is allocated.
func (e *Engine) wireQoS() error {
	qc := e.cfg.QoS
	if !qc.On {
		return nil
	}
	cfg := qosConfig(&qc)
	q, err := admission.New[heldTask](cfg, func(t heldTask, now int64) bool {
		return t.b.ID() != t.id || t.b.Stopping(int(t.i), now)
	})
	if err != nil {
		return fmt.Errorf("%w: qos: %w", ErrInvalid, err)
	}
	e.path.qos = &qosQueue{q: q, wake: make(chan struct{}, 1), room: make(chan struct{}, 1), block: qc.Busy != config.QoSError,
		perClass: qc.Lanes == config.QoSLanesPerClass, grants: q.Counted(), measured: q.Measured()}
	if e.path.qos.grants {
		e.tracker.Hook(e.qosHook())
	}
	return nil
}

// qosHook is the tracker's hook with a qos block: it gives each task's
// budgets back at its end. Giving a grant back needs no order against
// the task's other reports (granted and giveBack settle who gives it
// back with one compare-and-swap), so it is Unordered: a task's end
// takes no lock for admission's sake. It has no RunEnded: in a lane's
// run of completions it is told with Ended, and the meter after it still
// counts the run's ends in its tally, once per run.
func (e *Engine) qosHook() progress.Hook {
	return progress.Hook{Unordered: true, Ended: func(b *progress.Batch, i int, s progress.State, _ int64) {
		if tg := e.path.grantOf(b, i); tg != nil && tg.held.Load() != 0 {
			e.giveBack(tg, s == progress.Completed)
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
func (e *Engine) startQoS() {
	if e.path.qos == nil {
		return
	}
	e.wg.Add(1)
	go e.runQoS()
}

func (qq *qosQueue) kick() {
	select {
	case qq.wake <- struct{}{}:
	default:
	}
}

func (qq *qosQueue) freed() {
	select {
	case qq.room <- struct{}{}:
	default:
	}
}

// hold offers task i of b (request r, validated, for segment rem) to the
// queue. It reports whether the task does not go on now: held back (the
// dispatcher resumes it), or refused and ended here. sc's time is the
// request's; wait, false, fails a full queue at once whatever qos.busy
// says (a block submission holds a lane, which the dispatcher may need).
func (e *Engine) hold(b *progress.Batch, i int, r *Request, rem *remote, sc *submitCtx, wait bool) bool {
	qq := e.path.qos
	ar := admission.Request{
		Length: uint64(len(r.Local)), Priority: r.Priority, Deadline: r.deadline(), Intent: r.Intent, Segment: rem.Name, Tenant: r.Tenant,
	}
	now := sc.now().UnixNano()
	if g, ok := qq.q.Admit(&ar, now, &sc.admitted); ok {
		if qq.grants {
			e.granted(b, i, g)
		}
		return false // counted for its tenant at the call's end (flushQueued)
	}
	qq.q.Count(&sc.admitted) // before the queue orders anything
	for {
		qq.mu.Lock()
		g, v, err := qq.q.Offer(heldTask{b: b, id: b.ID(), i: int32(i)}, ar, now)
		qq.mu.Unlock()
		if err == nil && v == admission.Now {
			if qq.grants {
				e.granted(b, i, g)
			}
			return false
		}
		if err == nil {
			qq.held.Add(1)
			qq.kick()
			return true
		}
		if errors.Is(err, admission.ErrBusy) && qq.block && wait {
			if e.awaitRoom(b, i, ar.Deadline) {
				now = progress.Now()
				continue
			}
			if b.Stopping(i, progress.Now()) {
				return true // canceled or past its deadline while it waited: ended
			}
			err = fmt.Errorf("%w: engine %q closed", ErrClosed, e.name)
		}
		b.Cut(i)
		switch {
		case errors.Is(err, admission.ErrTenant):
			b.Finish(i, progress.Invalid, fmt.Errorf("%w: segment %q: %w", ErrInvalid, rem.Name, err))
		case errors.Is(err, admission.ErrLate):
			b.Finish(i, progress.Failed, fmt.Errorf("%w: segment %q: admission refused the request early: %w", ErrDeadlineExceeded, rem.Name, err))
		case errors.Is(err, admission.ErrBusy):
			b.Finish(i, progress.Failed, fmt.Errorf("%w: segment %q: %w", ErrBusy, rem.Name, err))
		default:
			b.Finish(i, progress.Failed, err)
		}
		return true
	}
}

// awaitRoom waits, for a submitter of task i of b whose queue is full,
// until a place frees; false when the task ended meanwhile (canceled, or
// its deadline, unix ns, passed) or the engine closed.
func (e *Engine) awaitRoom(b *progress.Batch, i int, deadline int64) bool {
	qq := e.path.qos
	var tc <-chan time.Time
	if deadline != 0 {
		t := time.NewTimer(time.Duration(deadline - progress.Now()))
		defer t.Stop()
		tc = t.C
	}
	poll := time.NewTicker(heldPoll) // a cancel does not wake this; look at the task now and then
	defer poll.Stop()
	for {
		select {
		case <-qq.room:
			qq.freed() // pass it on: several may wait, and room is one signal
			return true
		case <-poll.C:
			if b.Stopping(i, progress.Now()) {
				return false
			}
		case <-tc:
			b.State(i, progress.Now()) // expire it
			return false
		case <-e.quit:
			return false
		}
	}
}

// taskGrant is what a task holds of the queue's budgets, while held is
// 1.
type taskGrant struct {
	grant admission.Grant
	held  atomic.Uint32
}

// grantOf returns task i's grant record, nil when b was freed.
func (p *requestPath) grantOf(b *progress.Batch, i int) *taskGrant {
	r := p.records[b.Slot()]
	if r == nil || i >= len(r.grants) {
		return nil
	}
	return &r.grants[i]
}

// granted records that task i of b holds g of the queue's budgets, given
// back when the task ends (qosHook). A task that ended before the
// grant was recorded (canceled while held, say) gives it back here.
func (e *Engine) granted(b *progress.Batch, i int, g admission.Grant) {
	tg := e.path.grantOf(b, i)
	tg.grant = g
	tg.held.Store(1)
	if b.State(i, 0).Terminal() {
		e.giveBack(tg, false)
	}
}

// giveBack returns the budgets tg held, once: sent says whether its
// bytes moved (for the bandwidth the queue measures).
func (e *Engine) giveBack(tg *taskGrant, sent bool) {
	if !tg.held.CompareAndSwap(1, 0) {
		return
	}
	qq := e.path.qos
	if qq.measured {
		qq.mu.Lock()
		qq.q.Done(tg.grant, sent, progress.Now())
		qq.mu.Unlock()
	} else {
		qq.q.Release(tg.grant)
	}
	// The budget freed may let one go; with none held the dispatcher
	// sleeps on. A request held after this look was kicked for by its
	// own Offer, and Next sees the budget Release gave back.
	if qq.q.Held() {
		qq.kick()
	}
}

// sweepEvery is how often the dispatcher, while tasks are held, drops
// those that ended while held.
const sweepEvery = 100 * time.Millisecond

// runQoS is the dispatcher: it takes held tasks on as the queue lets
// them go, until the engine closes; then it ends the tasks still held.
func (e *Engine) runQoS() {
	defer e.wg.Done()
	qq := e.path.qos
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		swept := false
		select {
		case <-e.quit:
			e.endHeld()
			return
		case <-qq.wake:
		case <-timer.C:
			swept = true
		}
		for {
			now := progress.Now()
			qq.mu.Lock()
			t, g, ok := qq.q.Next(now)
			pinned := ok && e.tracker.PinBatch(t.b, t.id)
			var at int64
			if !ok {
				if swept {
					qq.q.Sweep(now) // held tasks canceled or expired behind a budget that is still full
				}
				at = qq.q.Wake(now)
				if qq.q.Len() > 0 && (at == 0 || at-now > int64(sweepEvery)) {
					at = now + int64(sweepEvery)
				}
			}
			qq.mu.Unlock()
			if !ok {
				if at != 0 {
					timer.Reset(time.Duration(at - now))
				}
				break
			}
			qq.freed()
			if !pinned {
				continue // its batch was freed meanwhile
			}
			e.resume(t, g)
			e.tracker.Unpin(t.b)
		}
	}
}

// resume takes held task t on from admission, with grant g: validated
// again (its memory may have been unregistered while it waited), routed
// and dispatched, as submitOne does a request admitted at once.
func (e *Engine) resume(t heldTask, g admission.Grant) {
	b, i := t.b, int(t.i)
	if e.path.qos.grants {
		e.granted(b, i, g)
	}
	rec := e.path.record(b, i)
	if b.Stopping(i, progress.Now()) {
		return // ended before it was granted: given back above, or by its end
	}
	r := &rec.req
	rem := e.remote(r.Segment)
	var sc submitCtx
	rt, err := e.validate(r, rem)
	e.goOn(b, i, r, rem, rt, rec, &sc, err)
}

// endHeld ends the tasks still held when the engine closes: they never
// reached a plugin.
func (e *Engine) endHeld() {
	qq := e.path.qos
	closeErr := fmt.Errorf("%w: engine %q closed while the request was held back by admission", ErrClosed, e.name)
	qq.mu.Lock()
	defer qq.mu.Unlock()
	qq.q.Drain(func(t heldTask) {
		if t.b.ID() == t.id {
			t.b.Cut(int(t.i))
			t.b.Finish(int(t.i), progress.Failed, closeErr)
		}
	})
}

// forgetHeld drops the held tasks of b, which is being freed (FreeBatch
// ended them), so that the dispatcher never takes one on.
func (e *Engine) forgetHeld(b *progress.Batch) {
	qq := e.path.qos
	if qq == nil {
		return
	}
	// b's tasks were offered by Submit calls that returned before
	// FreeBatch (the caller's order), so Held sees them unless the
	// dispatcher took them: it pinned b then, and FreeBatch waits for
	// that pin.
	if !qq.q.Held() {
		return
	}
	qq.mu.Lock()
	qq.q.Remove(func(t heldTask) bool { return t.b == b })
	qq.mu.Unlock()
	qq.freed()
}

// QoSStatus is what the admission queue of the qos block reports.
type QoSStatus struct {
	// On: the configuration has a qos block.
	On bool
	// Held is how many requests are held back now; HeldTotal how many
	// were held back since the engine started.
	Held      int
	HeldTotal uint64
	// Dropped counts held-back requests that ended while held (canceled,
	// past their deadline) and were never dispatched.
	Dropped uint64
	// Bandwidth is the measured bandwidth, bytes per second; 0 before
	// any. With reject_late, that of completions while something is in
	// flight; otherwise that of the bytes admitted since the last call
	// at least 10 ms before (admission.Queue.Bandwidth).
	Bandwidth float64
	// Tenants are each tenant's counters, the default tenant's included.
	Tenants []admission.TenantStats
}

// QoS returns the admission queue's counters; On false without a qos
// block.
func (e *Engine) QoS() QoSStatus {
	qq := e.path.qos
	if qq == nil {
		return QoSStatus{}
	}
	qq.mu.Lock()
	defer qq.mu.Unlock()
	now := progress.Now()
	qq.q.Sweep(now)
	return QoSStatus{On: true, Held: qq.q.Len(), HeldTotal: qq.held.Load(), Dropped: qq.q.Dropped,
		Bandwidth: qq.q.Bandwidth(now), Tenants: qq.q.Tenants(nil)}
}

// laneOf returns the lane of run (of plugin ps) a request of priority p
// goes on: with qos.lanes = "per_class" and several lanes, the high
// class has the first lane to itself and the others share the rest, so
// that a HIGH slice never waits in a ring behind LOW ones; otherwise any
// lane, round robin.
func (e *Engine) laneOf(run *pluginRun, ps *pluginState, p Priority) *progress.Lane {
	qq := e.path.qos
	if qq == nil || !qq.perClass || len(run.lanes) < 2 {
		return run.lane(ps)
	}
	if admission.ClassOf(p) == admission.ClassHigh {
		return run.lanes[0]
	}
	return run.lanes[1+int(ps.next.Add(1))%(len(run.lanes)-1)]
}

// qosMetrics is QoS for the metrics exporter.
func (e *Engine) qosMetrics() (metrics.QoS, bool) {
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
