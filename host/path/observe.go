package path

import (
	"sync/atomic"

	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/failover"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/slicer"
	"github.com/ferrydev/ferry/host/trace"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The request path. A request passes these stages, each a package that
// owns its decision; the engine only connects them (transfer.go, and
// retry.go for failover):
//
//	validate  host/validate   known op, length, open segment, both ranges
//	admit     host/admission  now, later or never; with a qos block, the queue (admit.go)
//	select    host/selector   policy -> ordered transports
//	plan      host/slicer     slice size, slice count, rail mask
//	submit    host/progress   descriptors onto a lane's ring
//	complete  host/progress   completions folded into task state
//	retry     host/failover   another rail, next transport, wait, fail
//
// A prepared block list (host/blocks.go) enters the path after validate:
// host/blocks checked its layouts once and cuts its pairs into runs, and
// each run is admitted, sliced and submitted as one task; its runs go onto
// a lane in chunks (put, cut) rather than one request at a time.
//
// One observe.Observer, attached with WithObserver, sees every stage
// transition of every task. The metrics do not go through it: with
// metrics on, the path adds to a metrics.Meter at the same transitions,
// plain atomic counters with no event built, no interface called and no
// lock taken (the observer's events cost about a microsecond a request
// on two cores). Nor does the meter read the clock per request: a task
// is queued at its Submit call's time (read once per call, and the one
// the default deadline is computed from) and settles and ends at its
// reaped run's (read once per run of completions, progress.Hook); only
// the tasks the meter samples (metrics.SampleEvery) read it at admission
// and submission.

// requestPath is what the engine keeps for the request path's stages.
type requestPath struct {
	// obs sees every transition; nil when nobody listens, and then the
	// path does nothing for it.
	obs observe.Observer
	// meter counts and times every task when metrics are on; nil
	// otherwise.
	meter *metrics.Meter
	// admit is asked about every request; nil is the pass-through, which
	// is not called at all.
	admit admission.Admitter
	// later holds the requests admit said Later of, and asks it again;
	// nil without an admitter.
	later *admission.Asker
	// qos is the qos block's admission queue, nil without one; see
	// admit.go.
	qos *qosQueue
	// records holds each task's request and failover history, beside its
	// batch: records[b.Slot()].tasks[i] is task i of batch b.
	records []*batchRecords
}

// Options are the request path's listeners and stages an application
// may set (host.WithObserver, host.WithAdmitter, metrics, traces).
type Options struct {
	Observer observe.Observer
	Meter    *metrics.Meter
	Admit    admission.Admitter
	Trace    *trace.Recorder
	// Stages are added to the request path, in this order, after
	// admission (Stage).
	Stages []Stage
}

// wirePath connects the request path's stages; New calls it before the
// first batch is allocated.
func (e *Executor) wirePath(o Options) {
	e.trace, e.stages = o.Trace, o.Stages
	if o.Trace != nil {
		if o.Observer == nil {
			o.Observer = o.Trace
		} else {
			o.Observer = teeObserver{o.Observer, o.Trace}
		}
	}
	e.path.obs, e.path.meter, e.path.admit = o.Observer, o.Meter, o.Admit
	if _, ok := o.Admit.(admission.PassThrough); ok {
		e.path.admit = nil
	}
	if e.path.admit != nil {
		e.path.later = admission.NewAsker(e.path.admit, e.tracker, laterPort{e}, e.quit)
	}
	e.path.records = make([]*batchRecords, e.tracker.Slots())
	if e.path.watched() {
		e.tracker.Hook(pathWatcher{e}.hook())
	}
}

// taskRecord is what the engine keeps of a task: its request, to route
// it again, and what its failed attempts taught.
type taskRecord struct {
	req  Request
	hist failover.History
	// sent is the segment handle the current attempt was sent against
	// (dispatch): a failover after a fault of the target waits for a
	// newer one, which the target's next descriptor brings.
	sent *remote
	// defaultDeadline: req.Deadline is transfer.default_deadline's, the
	// request set none.
	defaultDeadline bool
}

type batchRecords struct {
	tasks []taskRecord
	// stamps[i] is when task i passed the stages its latencies are timed
	// between; kept while an observer or the meter listens.
	stamps []taskStamps
	// grants[i] is what task i holds of the qos queue's budgets; kept
	// with a qos block (admit.go). Apart from tasks, which failover
	// copies.
	grants []admission.TaskGrant
}

// taskStamps are a task's observe.Clock times: queued; for a task timed
// at every stage (requestPath.timed), the start of its current attempt
// (admitted, or retried) and that attempt's submission; and its
// request's op and priority (kind), for the completion side. Only the
// submitter writes them (a reaper reads them, with no lock between when
// only the meter listens: atomic), so that the completion side writes
// nothing to the cache lines the submitter is writing.
type taskStamps struct {
	// queued holds the queued time and the kind in one word, so that
	// queuing a task costs one atomic store (a full fence on amd64), not
	// two: the time above kindBits (Clock nanoseconds fit in 60 bits for
	// 36 years), and below them kindRead for a read and the priority (0,
	// as normal, for one the meter has no label for). See queuedAt and
	// kindOf.
	queued          atomic.Int64
	mark, submitted atomic.Int64
}

// The low bits of taskStamps.queued.
const (
	kindBits = 3
	kindRead = 1 << 2
	kindPrio = kindRead - 1
)

// queuedAt returns the task's queued time (0: none stamped).
func (ts *taskStamps) queuedAt() int64 { return ts.queued.Load() >> kindBits }

// recordPools keeps the records of freed batches for the next ones, by
// size class (progress.SizeClass), as the tracker keeps its batches: a
// batch gets a new slot each time (the oldest free one), so records kept
// per slot would be allocated anew for every batch.
var recordPools progress.ClassPools

// attach gives b's slot the records for its tasks, reusing those of a
// freed batch. The slot is b's alone until detach; a freed slot is not
// reused while a failover holds it.
func (p *requestPath) attach(b *progress.Batch) {
	n := b.Cap()
	_, size := progress.SizeClass(n)
	r, _ := recordPools.Get(n).(*batchRecords)
	if r == nil {
		r = &batchRecords{}
	}
	if cap(r.tasks) < n {
		r.tasks = make([]taskRecord, size)
	}
	r.tasks = r.tasks[:n]
	if p.watched() {
		if cap(r.stamps) < n {
			r.stamps = make([]taskStamps, size)
		}
		r.stamps = r.stamps[:n]
	}
	if p.qos != nil && p.qos.grants {
		if cap(r.grants) < n {
			r.grants = make([]admission.TaskGrant, size)
		}
		r.grants = r.grants[:n]
	}
	p.records[b.Slot()] = r
}

// detach gives back the records of the batch of n tasks freed from slot.
func (p *requestPath) detach(slot, n int) {
	r := p.records[slot]
	p.records[slot] = nil
	if r != nil {
		clear(r.tasks[:n]) // drop the requests' references to the caller's memory
		// A grant not given back (a plugin held the task past FreeBatch's
		// bound) stays charged, and is never given back twice.
		clear(r.grants[:min(n, len(r.grants))])
		recordPools.Put(cap(r.tasks), r)
	}
}

// watched reports whether an observer or the meter listens.
func (p *requestPath) watched() bool { return p.obs != nil || p.meter != nil }

func (p *requestPath) record(b *progress.Batch, i int) *taskRecord {
	return &p.records[b.Slot()].tasks[i]
}

// lookup is record for a reader that may come after the batch was freed:
// nil then.
func (p *requestPath) lookup(b *progress.Batch, i int) *taskRecord {
	r := p.records[b.Slot()]
	if r == nil || i >= len(r.tasks) {
		return nil
	}
	return &r.tasks[i]
}

// capsOf is what a transport declares of its slices in Describe. A
// plugin of protocol 1 declares nothing: the engine's slice_size applies.
func capsOf(info sdk.Info) slicer.Caps {
	return slicer.Caps{MaxSlice: info.MaxSlice, PreferredSlice: info.PreferredSlice}
}

// note tells the meter and the observer, if any, that task i of b made
// transition st on transport tr (-1: none yet). It costs two nil checks
// when nobody listens; for the meter alone, a task it does not time at
// st costs no call either (the meter counts Queued in noteQueued, a
// retry in noteRetried, the rest in pathWatcher, and times only
// Admitted and Submitted here).
func (e *Executor) note(b *progress.Batch, i int, st observe.Stage, tr int32, slices int64, err error) {
	if e.path.obs != nil || e.path.meter != nil && (st == observe.Admitted || st == observe.Submitted) && e.path.timed(b, i) {
		e.noteTask(b, i, st, tr, slices, err, 0)
	}
}

// noteQueued is note for task i's Queued, at the time of its Submit
// call (sc's: one clock read per call, not per request). The meter's
// count goes into sc's tally, which the call adds to the meter once, at
// its end (flushQueued).
func (e *Executor) noteQueued(b *progress.Batch, i int, sc *submitCtx) {
	if e.path.watched() { // inlined: nobody listening costs no call
		e.noteQueuedWatched(b, i, sc)
	}
}

// noteQueuedWatched is noteQueued when an observer or the meter listens.
func (e *Executor) noteQueuedWatched(b *progress.Batch, i int, sc *submitCtx) {
	switch {
	case e.path.obs != nil:
		e.noteTask(b, i, observe.Queued, -1, 0, nil, sc.clock())
		if e.path.meter != nil {
			sc.queued.Queued(e.path.kind(b, i))
		}
	case e.path.meter != nil: // the stamps alone: the meter counts the rest at the end
		sc.queued.Queued(e.path.stampQueued(b, i, sc.clock()))
	}
}

// flushQueued adds the requests a Submit call queued (sc's tally) to the
// meter; the call ends with it.
func (e *Executor) flushQueued(sc *submitCtx) {
	if e.path.qos != nil {
		e.path.qos.d.Count(&sc.admitted) // and to the qos queue's tenants, those it let go
	}
	if e.path.meter != nil {
		e.path.meter.AddQueued(&sc.queued)
	}
}

// noteTask is note at now (0: read the clock if st is timed).
func (e *Executor) noteTask(b *progress.Batch, i int, st observe.Stage, tr int32, slices int64, err error, now int64) {
	at, since := e.path.stamp(b, i, st, now)
	if m := e.path.meter; m != nil && since != 0 && !b.Task(i).State().Terminal() {
		op, pr := e.path.kind(b, i)
		switch st { // Queued is counted by noteQueued
		case observe.Admitted:
			m.Time(metrics.SpanQueuedAdmitted, -1, op, pr, at-since)
		case observe.Submitted:
			m.Time(metrics.SpanAdmittedSubmitted, tr, op, pr, at-since)
		}
	}
	if e.path.obs == nil {
		return
	}
	if b.Noting(i) {
		ev := e.event(b, i, st, at, since)
		ev.Transport, ev.Slices, ev.Err = e.transportName(tr), slices, err
		e.path.obs.Observe(ev)
	}
	b.Noted(i)
}

// noteRetried is note for a Retried transition: the attempt on
// transport from failed (cause, a word: observe.Event.Cause; why), and
// the next one goes to transport to.
func (e *Executor) noteRetried(b *progress.Batch, i int, from, to int32, cause string, why error) {
	if !e.path.watched() {
		return
	}
	at, since := e.path.stamp(b, i, observe.Retried, 0)
	if m := e.path.meter; m != nil && !b.Task(i).State().Terminal() {
		m.Retried(from, to, cause)
	}
	if e.path.obs == nil {
		return
	}
	if b.Noting(i) {
		ev := e.event(b, i, observe.Retried, at, since)
		ev.Transport, ev.From, ev.Cause, ev.Err = e.transportName(to), e.transportName(from), cause, why
		e.path.obs.Observe(ev)
	}
	b.Noted(i)
}

// stamp is the time of transition st of task i of b: now, or when now is
// 0 the clock, read only if the task is timed at st. It keeps it in the
// task's stamps where a later stage is timed from it, and returns it (at)
// with the time of the stage st is timed from (since; 0 when st is not
// timed from one). Routed and Sliced follow Admitted or Retried at once
// and are not timed: 0, 0, and a clock read saved; so are Admitted and
// Submitted of a task the meter does not sample.
func (p *requestPath) stamp(b *progress.Batch, i int, st observe.Stage, now int64) (at, since int64) {
	if now == 0 {
		if st == observe.Routed || st == observe.Sliced || st != observe.Retried && !p.timed(b, i) {
			return 0, 0
		}
		now = observe.Clock()
	}
	return p.stampAt(b, i, st, now)
}

// timed reports whether task i of b is timed at each of its stages: every
// task while an observer listens (its events carry every stage's time);
// for the meter alone, one task in metrics.SampleEvery of each batch and
// every later attempt (a retry). The meter times the others end to end
// only, from times the path reads anyway.
func (p *requestPath) timed(b *progress.Batch, i int) bool {
	return p.obs != nil || i%metrics.SampleEvery == 0 || b.Attempt(i) > 0
}

// stampAt is stamp at a time the caller read.
func (p *requestPath) stampAt(b *progress.Batch, i int, st observe.Stage, at int64) (int64, int64) {
	var since int64
	r := p.records[b.Slot()]
	if r == nil || i >= len(r.stamps) {
		return at, 0
	}
	ts := &r.stamps[i]
	switch st {
	case observe.Queued:
		p.stampQueued(b, i, at)
	case observe.Admitted:
		since = ts.queuedAt()
		ts.mark.Store(at)
	case observe.Retried:
		ts.mark.Store(at)
	case observe.Submitted:
		since = ts.since(ts.mark.Load())
		ts.submitted.Store(at)
	case observe.Completed:
		since = ts.since(ts.submitted.Load())
	case observe.Ended:
		since = ts.queuedAt()
	}
	return at, since
}

// stampQueued stamps task i of b queued at at, with its request's kind,
// and returns that kind (a write of normal priority when the batch keeps
// no stamps).
func (p *requestPath) stampQueued(b *progress.Batch, i int, at int64) (ring.Op, sdk.Priority) {
	r := p.records[b.Slot()]
	if r == nil || i >= len(r.stamps) {
		return ring.OpWrite, sdk.PriorityNormal
	}
	ts, req := &r.stamps[i], &r.tasks[i].req
	op, pr, k := ring.OpWrite, req.Priority, int64(0)
	if req.Op == Read {
		op, k = ring.OpRead, kindRead
	}
	if pr <= sdk.PriorityLow {
		k |= int64(pr)
	}
	ts.queued.Store(at<<kindBits | k) // what the stamps hold from before (a freed batch's task) is older: not timed from
	return op, pr
}

// since returns stamp t if the task took it, 0 if it is older than the
// task's Queued: left by the task the record held before.
func (ts *taskStamps) since(t int64) int64 {
	if t < ts.queuedAt() {
		return 0
	}
	return t
}

// kind returns task i's request's op and priority, as its Queued stamp
// kept them (a write of normal priority before).
func (p *requestPath) kind(b *progress.Batch, i int) (ring.Op, sdk.Priority) {
	return p.stamps(b, i).kindOf()
}

// stamps returns task i's stamps, nil when its batch keeps none (freed).
func (p *requestPath) stamps(b *progress.Batch, i int) *taskStamps {
	r := p.records[b.Slot()]
	if r == nil || i >= len(r.stamps) {
		return nil
	}
	return &r.stamps[i]
}

// kindOf is kind of the task ts stamps (nil: none).
func (ts *taskStamps) kindOf() (ring.Op, sdk.Priority) {
	if ts == nil {
		return ring.OpWrite, sdk.PriorityNormal
	}
	k := ts.queued.Load()
	op := ring.OpWrite
	if k&kindRead != 0 {
		op = ring.OpRead
	}
	return op, sdk.Priority(k & kindPrio)
}

// event is what every event of task i of b carries, stamped at (since:
// see stamp). It is called under b.Noting(i), with an observer attached.
func (e *Executor) event(b *progress.Batch, i int, st observe.Stage, at, since int64) observe.Event {
	ev := observe.Event{Stage: st, Batch: b.ID(), Task: i, Attempt: b.Attempt(i), Length: b.Task(i).Length, At: at, Since: since}
	r := e.path.records[b.Slot()]
	if r == nil || i >= len(r.stamps) {
		return ev
	}
	req := &r.tasks[i].req
	ev.Op, ev.Priority = ring.OpWrite, req.Priority
	if req.Op == Read {
		ev.Op = ring.OpRead
	}
	if e.trace != nil { // only with a trace block: the story wants every stage's time and the route's reasons
		ev.Trace = req.Trace
		if ev.At == 0 {
			ev.At = observe.Clock()
		}
		if st == observe.Routed && e.trace.Tracing(ev.Batch, i) {
			ev.Reasons, _ = e.Explain(*req)
		}
	}
	return ev
}

func (e *Executor) transportName(tr int32) string {
	if tr < 0 || int(tr) >= len(e.plugins) {
		return ""
	}
	return e.plugins[tr].name
}

// pathWatcher passes the tracker's transitions (an attempt's slices all
// back, a task's end) to the meter and the observer. They happen at the
// time the tracker hands it (its reaped run's), else now.
type pathWatcher struct{ e *Executor }

// meterWatcher is pathWatcher for the meter alone, which the tracker
// calls without the task's hold (progress.Hook.Unordered). A task that
// ends in a lane poller's run of completions is counted with one call,
// RunEnded, into the run's tally (metrics.RunTally), which the poller
// flushes into the meter at the run's end (Flush).
type meterWatcher struct{ pathWatcher }

// hook is w as the tracker's hook: the observer's, called under the
// task's hold, which orders what it is told of the task; without an
// observer, the meter's, which only counts: no order to keep, no lock to
// take, and a run's ends counted in its tally.
func (w pathWatcher) hook() progress.Hook {
	if w.e.path.obs != nil {
		return progress.Hook{Settled: w.Settled, Ended: w.Ended}
	}
	m := meterWatcher{w}
	return progress.Hook{Unordered: true, Settled: w.Settled, Ended: w.Ended, RunEnded: m.RunEnded, Flush: m.Flush}
}

// RunEnded counts task i's end (s) in run r's tally, timed end to end
// at the run's time; settled, the attempt settled in r as well, which
// the meter times (submitted_completed) for the tasks it samples.
func (w meterWatcher) RunEnded(r *progress.Run, b *progress.Batch, i int, s progress.State, settled bool) {
	p := &w.e.path
	t := b.Task(i)
	tr := t.Transport()
	ts := p.stamps(b, i)
	op, pr := ts.kindOf()
	e2e := int64(-1)
	if ts != nil && r.At != 0 {
		if q := ts.queuedAt(); q != 0 {
			e2e = r.At - q
		}
		if settled && p.timed(b, i) {
			if sub := ts.since(ts.submitted.Load()); sub != 0 {
				p.meter.Time(metrics.SpanSubmittedCompleted, tr, op, pr, r.At-sub)
			}
		}
	}
	p.meter.RunTally(r).Ended(tr, op, pr, s, t.Length, e2e)
}

// Flush adds run r's tally to the meter.
func (w meterWatcher) Flush(r *progress.Run) {
	if t, ok := r.Tally.(*metrics.RunTally); ok {
		t.Flush()
	}
}

func (w pathWatcher) Settled(b *progress.Batch, i int, st ring.Status, at int64) {
	p := &w.e.path
	if !p.timed(b, i) {
		return // the meter does not time this one's attempt (and no observer listens)
	}
	tr := b.Task(i).Transport()
	if at == 0 {
		at = observe.Clock()
	}
	at, since := p.stampAt(b, i, observe.Completed, at)
	if p.meter != nil && since != 0 {
		op, pr := p.kind(b, i)
		p.meter.Time(metrics.SpanSubmittedCompleted, tr, op, pr, at-since)
	}
	if p.obs != nil {
		ev := w.e.event(b, i, observe.Completed, at, since)
		ev.Transport, ev.Status = w.e.transportName(tr), st
		p.obs.Observe(ev)
	}
}

func (w pathWatcher) Ended(b *progress.Batch, i int, s progress.State, at int64) {
	p := &w.e.path
	t := b.Task(i)
	tr := t.Transport()
	if at == 0 {
		at = observe.Clock()
	}
	at, since := p.stampAt(b, i, observe.Ended, at)
	if p.meter != nil {
		op, pr := p.kind(b, i)
		p.meter.Ended(tr, op, pr, s, t.Length)
		if since != 0 {
			p.meter.Time(metrics.SpanEndToEnd, tr, op, pr, at-since)
		}
	}
	if p.obs != nil {
		ev := w.e.event(b, i, observe.Ended, at, since)
		ev.Transport, ev.State, ev.Err = w.e.transportName(tr), s, t.Err()
		p.obs.Observe(ev)
	}
}

// teeObserver passes each event to two observers: the application's and
// the trace recorder.
type teeObserver [2]observe.Observer

func (t teeObserver) Observe(ev observe.Event) {
	t[0].Observe(ev)
	t[1].Observe(ev)
}
