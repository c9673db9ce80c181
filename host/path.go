package host

import (
	"sync"

	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/failover"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/slicer"
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
// transition of every task.

// requestPath is what the engine keeps for the request path's stages.
type requestPath struct {
	// obs sees every transition; nil when nobody listens, and then the
	// path does nothing for it.
	obs observe.Observer
	// admit is asked about every request; nil is the pass-through, which
	// is not called at all.
	admit admission.Admitter
	// qos is the qos block's admission queue, nil without one; see
	// admit.go.
	qos *qosQueue
	// records holds each task's request and failover history, beside its
	// batch: records[b.Slot()].tasks[i] is task i of batch b.
	records []*batchRecords
}

// pathOptions are the request path's Options.
type pathOptions struct {
	obs   observe.Observer
	admit admission.Admitter
}

// WithObserver attaches o to the request path: it sees every stage
// transition of every task (see observe.Stage). An engine has one
// observer; one that fans out to several is the caller's.
func WithObserver(o observe.Observer) Option { return func(op *options) { op.path.obs = o } }

// WithAdmitter puts a in the request path's admission stage, in place of
// the pass-through that admits every request now.
func WithAdmitter(a admission.Admitter) Option { return func(op *options) { op.path.admit = a } }

// wirePath connects the request path's stages; New calls it before the
// first batch is allocated.
func (e *Engine) wirePath(o pathOptions) {
	e.path.obs, e.path.admit = o.obs, o.admit
	if _, ok := o.admit.(admission.PassThrough); ok {
		e.path.admit = nil
	}
	e.path.records = make([]*batchRecords, e.tracker.Slots())
	if o.obs != nil {
		e.tracker.Watch(pathWatcher{e})
	}
}

// taskRecord is what the engine keeps of a task: its request, to route
// it again, and what its failed attempts taught.
type taskRecord struct {
	req  Request
	hist failover.History
	// defaultDeadline: req.Deadline is transfer.default_deadline's, the
	// request set none.
	defaultDeadline bool
}

type batchRecords struct {
	tasks []taskRecord
	// stamps[i] is when task i passed the stages its latencies are timed
	// between; kept while an observer listens, under the task's Noting.
	stamps []taskStamps
	// grants[i] is what task i holds of the qos queue's budgets; kept
	// with a qos block (admit.go). Apart from tasks, which failover
	// copies.
	grants []taskGrant
}

// taskStamps are a task's observe.Clock times: queued, the start of its
// current attempt (admitted, or retried), and that attempt's submission.
type taskStamps struct{ queued, mark, submitted int64 }

// recordPool keeps the records of freed batches for the next ones: a
// batch gets a new slot each time (the oldest free one), so records kept
// per slot would be allocated anew for every batch.
var recordPool sync.Pool

// attach gives b's slot the records for its tasks, reusing those of a
// freed batch. The slot is b's alone until detach; a freed slot is not
// reused while a failover holds it.
func (p *requestPath) attach(b *progress.Batch) {
	r, _ := recordPool.Get().(*batchRecords)
	if r == nil {
		r = &batchRecords{}
	}
	if cap(r.tasks) < b.Cap() {
		r.tasks = make([]taskRecord, b.Cap())
	}
	r.tasks = r.tasks[:b.Cap()]
	if p.obs != nil {
		if cap(r.stamps) < b.Cap() {
			r.stamps = make([]taskStamps, b.Cap())
		}
		r.stamps = r.stamps[:b.Cap()]
	}
	if p.qos != nil {
		if cap(r.grants) < b.Cap() {
			r.grants = make([]taskGrant, b.Cap())
		}
		r.grants = r.grants[:b.Cap()]
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
		recordPool.Put(r)
	}
}

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

// note tells the observer, if any, that task i of b made transition st
// on transport tr (-1: none yet). It costs a nil check when nobody
// listens.
func (e *Engine) note(b *progress.Batch, i int, st observe.Stage, tr int32, slices int64, err error) {
	if e.path.obs != nil {
		e.noteTask(b, i, st, tr, slices, err)
	}
}

func (e *Engine) noteTask(b *progress.Batch, i int, st observe.Stage, tr int32, slices int64, err error) {
	if b.Noting(i) {
		ev := e.event(b, i, st)
		ev.Transport, ev.Slices, ev.Err = e.transportName(tr), slices, err
		e.path.obs.Observe(ev)
	}
	b.Noted(i)
}

// noteRetried is note for a Retried transition: the attempt on
// transport from failed (cause, a word: observe.Event.Cause; why), and
// the next one goes to transport to.
func (e *Engine) noteRetried(b *progress.Batch, i int, from, to int32, cause string, why error) {
	if e.path.obs == nil {
		return
	}
	if b.Noting(i) {
		ev := e.event(b, i, observe.Retried)
		ev.Transport, ev.From, ev.Cause, ev.Err = e.transportName(to), e.transportName(from), cause, why
		e.path.obs.Observe(ev)
	}
	b.Noted(i)
}

// event is what every event of task i of b carries, stamped now; the
// times its latencies are measured from are kept in its record. It is
// called under b.Noting(i), with an observer attached.
func (e *Engine) event(b *progress.Batch, i int, st observe.Stage) observe.Event {
	ev := observe.Event{Stage: st, Batch: b.ID(), Task: i, Attempt: b.Attempt(i), Length: b.Task(i).Length}
	if st != observe.Routed && st != observe.Sliced { // nothing is timed from or to these: a clock read saved
		ev.At = observe.Clock()
	}
	r := e.path.records[b.Slot()]
	if r == nil || i >= len(r.stamps) {
		return ev
	}
	req, ts := &r.tasks[i].req, &r.stamps[i]
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
	switch st {
	case observe.Queued:
		*ts = taskStamps{queued: ev.At}
	case observe.Admitted:
		ev.Since, ts.mark = ts.queued, ev.At
	case observe.Retried:
		ts.mark = ev.At
	case observe.Submitted:
		ev.Since, ts.submitted = ts.mark, ev.At
	case observe.Completed:
		ev.Since = ts.submitted
	case observe.Ended:
		ev.Since = ts.queued
	}
	return ev
}

func (e *Engine) transportName(tr int32) string {
	if tr < 0 || int(tr) >= len(e.plugins) {
		return ""
	}
	return e.plugins[tr].name
}

// pathWatcher passes the tracker's transitions (an attempt's slices all
// back, a task's end) to the observer.
type pathWatcher struct{ e *Engine }

func (w pathWatcher) Settled(b *progress.Batch, i int, st ring.Status) {
	ev := w.e.event(b, i, observe.Completed)
	ev.Transport, ev.Status = w.e.transportName(b.Task(i).Transport()), st
	w.e.path.obs.Observe(ev)
}

func (w pathWatcher) Ended(b *progress.Batch, i int, s progress.State) {
	t := b.Task(i)
	ev := w.e.event(b, i, observe.Ended)
	ev.Transport, ev.State, ev.Err = w.e.transportName(t.Transport()), s, t.Err()
	w.e.path.obs.Observe(ev)
}
