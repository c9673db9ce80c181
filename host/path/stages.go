package path

import (
	"fmt"

	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/slicer"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The stage sequence. A task enters run once it exists (reserved in its
// batch, its record written, Queued noted) and passes the stages in this
// order; each either passes it on, or ends it (INVALID, FAILED), holds it
// back (the qos queue) or hands it on (failover waiting out a pinned
// transport). A stage whose outcome is known before (a block run was
// validated with its list, and routed and planned with its call; a QoS
// resume and a failover were admitted at their first pass) passes at the
// cost of a flag's test, so that every entry runs the one sequence:
//
//	Submit            run(validate)                        transfer.go
//	a block run       run(validate), valid, routed, maybe planned  blocks.go
//	a QoS resume      run(validate), admitted              admit.go
//	a failover        run(validate), admitted, retry       retry.go
//
// The stages after put (complete, retry, end) are the reapers' and the
// tracker's: a completion settles the attempt, a failed one goes to the
// hook chain's failover, which enters run again.

// stage is one step of the sequence, in order.
type stage uint8

const (
	stageValidate stage = iota // host/validate: op, length, segment, both ranges
	stageAdmit                 // host/admission: now, later (the qos queue holds it), never
	stageAdded                 // the engine's added stages (Options.Stages)
	stageRoute                 // host/selector; a failover's: the decider's transport
	stageGate                  // host/fence: a write waits while its target's fence is unconfirmed
	stagePlan                  // host/slicer: slice size and count, rails
	stagePut                   // host/credit per slice, then the lane's ring
)

// task is one task as the stages pass it on: where it is, what the
// stages decided so far, and how it entered.
type task struct {
	b   *progress.Batch
	i   int
	rec *taskRecord // its request is rec.req, the engine's copy
	rem *remote
	rt  routed // both ranges once valid; rt.ps once routed

	valid    bool // validated already: its ranges are in rt
	admitted bool // admitted already (a QoS resume): Admitted is still noted
	asked    bool // the Admitter said Now already (it had said Later)
	wait     bool // a full qos queue blocks the submitter (qos.busy = "block")

	// block: a block run (its local bytes boff, blen from the call's
	// block 0; its remote range in rt already) of a call whose local
	// side lies as blk says: the list was checked when it was prepared
	// and the call's route chosen for it (valid, rt.ps set); validate
	// looks its local range up again.
	block      bool
	blk        blockLocal
	boff, blen uint64

	plan    slicer.Plan
	planned bool // plan is set: a block run reserved routed and cut
	// recorded: its record's route (hist.Tried, sent) was written when
	// it was reserved routed, before the batch counted it
	// (ReserveRouted's fill); the stages do not write it again.
	recorded bool
	passes   bool // every stage before put passes it (Executor.passes)
	// credited: its receiver credit is drawn from what its run took at
	// once (sc.credit: submitRun, putRuns) while that lasts.
	credited bool

	// d is the descriptor put fills for each slice; described: what
	// the tasks of a block chunk share (op, priority, peer, deadline)
	// is set in it already, once for the chunk.
	d         ring.Descriptor
	described bool

	avoid uint64     // the rails to keep off: a failover's
	retry *retryStep // a failover's next attempt; nil for a first one

	// lane, when set, is a lane of prun that the caller holds (a block
	// chunk, between Begin and End): put enqueues on it and run returns
	// its result for the caller to cut after End. Otherwise put takes a
	// lane of the route's plugin and cuts.
	//
	// A task points at nothing on its caller's stack (the submission's
	// context is run's argument, sc): the stages hand its fields to the
	// tracker, and escape analysis would move what it points at to the
	// heap, an allocation per call.
	prun *pluginRun
	lane *progress.Lane
}

// run takes t, of the submission sc, through the stages from from on.
// It is the only place that calls them in order. It reports whether the
// task reached put (its slices, or some, were enqueued, or put found it
// ended); for a task on a lane its caller holds, what put did is left in
// out, for the caller to cut after End. A staged task (staged.go) is
// handed to its own driver and reports false: nothing of it is on a lane.
//
// Each stage is entered only when it has something to do: what makes it
// a pass (a fact decided before, nobody listening, no gate closed) is
// tested here, so that the lean path (a block run, nothing listening)
// costs flag tests, not calls.
func (e *Executor) run(t *task, sc *submitCtx, from stage, out *putResult) bool {
	if t.passes && !e.fences.Any() {
		// Every stage before put passes it (passes, asked once for its
		// chunk; a gate that closed since is looked at for each task):
		// what their passes do, then put.
		t.rt.lreg, t.rt.loff = t.blk.lreg, t.blk.loff+t.boff
		if !t.recorded {
			t.rec.hist.Tried = 1 << t.rt.ps.idx
		}
		if t.plan.Slices == 1 {
			putOne(t, t.lane, sc, out)
		} else {
			e.put(t, t.lane, sc, out)
		}
		return true
	}
	watched := e.path.watched()
	if from <= stageValidate {
		if t.block && t.blk.whole { // the call found one buffer holding the whole local side
			t.rt.lreg, t.rt.loff = t.blk.lreg, t.blk.loff+t.boff
		} else if (t.block || !t.valid) && !e.validateStage(t) {
			return false
		}
	}
	if from <= stageAdmit && t.retry == nil && (e.path.admit != nil || e.path.qos != nil || watched) && !e.admitStage(t, sc) {
		return false
	}
	if from <= stageAdded && len(e.stages) != 0 && !e.addedStages(t) {
		return false
	}
	if from <= stageRoute {
		if t.retry != nil || t.rt.ps == nil || watched {
			if !e.routeStage(t, sc) {
				return false
			}
		} else if !t.recorded {
			t.rec.hist.Tried = 1 << t.rt.ps.idx
		}
	}
	if t.rt.staged {
		// Its hops are requests of their own, which pass gate, plan and
		// put; nothing is left on the caller's lane to cut.
		e.stagedStage(t)
		return false
	}
	if from <= stageGate {
		if e.fences.Any() {
			e.gateStage(t, sc)
		}
		if !t.recorded {
			t.rec.sent = t.rem
		}
	}
	if from <= stagePlan {
		if t.prun == nil {
			t.prun = t.rt.ps.run()
		}
		if !t.planned || watched {
			e.planStage(t)
		}
	}
	if t.lane != nil {
		e.put(t, t.lane, sc, out)
	} else {
		e.putStage(t, sc)
	}
	return true
}

// passes reports whether every stage before put passes t, and every
// task of a block chunk like it, at the cost of its flags: its local
// side is one registered buffer looked up for its call, its route and
// plan were its call's, no admission or qos queue asks, no stage was
// added, nothing listens, no gate is closed (run looks again for each
// task: a gate may close meanwhile), and its plugin takes no receiver
// credit or its run took it already (credited). A caller of many such
// tasks (putRuns) asks once and sets task.passes; run then does only
// what the stages' passes do.
func (e *Executor) passes(t *task) bool {
	return t.block && t.blk.whole && t.rt.ps != nil && t.planned && t.lane != nil && t.retry == nil &&
		e.unhindered() && (t.credited || e.creditFor(t.prun, t.rem) == nil)
}

// unhindered reports whether no stage before put can hold or refuse a
// request for what the engine is set up with now: no admission or qos
// queue asks, no stage was added, nothing listens, no gate is closed.
// What is left to ask is the request's own (its plugin's receiver
// credit: creditFor).
func (e *Executor) unhindered() bool {
	return e.path.admit == nil && e.path.qos == nil && len(e.stages) == 0 && !e.path.watched() && !e.fences.Any()
}

// resume takes task t (its batch, index and how it enters) on outside a
// submitter's call: a QoS resume, an Admitter's Now after Later, a
// failover. It runs the whole sequence from validate, since its memory
// or its segment may have changed while it waited, with a submission
// context of its own.
func (e *Executor) resume(t task) {
	t.rec = e.path.record(t.b, t.i)
	t.rem = e.remote(t.rec.req.Segment)
	var sc submitCtx
	e.run(&t, &sc, stageValidate, nil)
}

// refuse ends t because a stage before put refused it: INVALID, with
// err; a failover's next attempt ends FAILED with the first failure's
// cause and why the failover could not go on.
func (e *Executor) refuse(t *task, err error) {
	if s := t.retry; s != nil {
		t.b.Finish(t.i, progress.Failed, fmt.Errorf("%w; failover to %q: %w", s.why, e.plugins[s.to].name, err))
		return
	}
	t.b.Cut(t.i)
	t.b.Finish(t.i, progress.Invalid, err)
}

// validateStage translates both ranges (host/validate), or for a block
// run looks its local range up again: it may have been unregistered
// since the list was prepared.
func (e *Executor) validateStage(t *task) bool {
	if t.block {
		lreg, loff, ok := e.blockLocal(&t.blk, t.boff, t.blen)
		if !ok {
			e.refuse(t, fmt.Errorf("%w: local blocks %#x+%d are no longer inside one registered buffer; register them again", ErrNotRegistered, t.blk.base+t.boff, t.blen))
			return false
		}
		t.rt.lreg, t.rt.loff = lreg, loff
		return true
	}
	rt, err := e.validate(&t.rec.req, t.rem)
	if err != nil {
		e.refuse(t, err)
		return false
	}
	t.rt.lreg, t.rt.loff, t.rt.rreg, t.rt.roff = rt.lreg, rt.loff, rt.rreg, rt.roff
	t.valid = true
	return true
}

// admitStage asks admission (the application's Admitter, then the qos
// block's queue) about t; run does not enter it for a failover's
// attempt, admitted with the task's first.
func (e *Executor) admitStage(t *task, sc *submitCtx) bool {
	if !t.admitted {
		r := &t.rec.req
		if !e.admit(t, sc) {
			return false // held back (the Asker asks again), or refused
		}
		if e.path.qos != nil && e.hold(t.b, t.i, r, t.rem, sc, t.wait) {
			return false // held back (the queue's dispatcher resumes it), or refused
		}
	}
	e.note(t.b, t.i, observe.Admitted, -1, 0, nil)
	return true
}

// routeStage picks t's plugin (host/selector), unless its call routed
// it; a failover's attempt goes to the decider's transport. A request
// whose facts are the previous one's in the same call takes that one's
// route (routeMemo), or, while no plugin changed, the route a previous
// call chose on the same facts (sharedRoute).
func (e *Executor) routeStage(t *task, sc *submitCtx) bool {
	r := &t.rec.req
	if t.retry != nil {
		return e.retryRoute(t)
	}
	if t.rt.ps == nil {
		if err := e.route(r, t.rem, &t.rt, sc); err != nil {
			if !e.awaitPin(t.b, t.i, r, t.rem, t.rec, err) {
				e.refuse(t, err)
			}
			return false
		}
	}
	t.rec.hist.Tried = 1 << t.rt.ps.idx
	e.note(t.b, t.i, observe.Routed, t.rt.ps.idx, 0, nil)
	return true
}

// gateStage holds a write while its target's gate is closed (a fence of
// an ended plugin run is unconfirmed there; host/fence), letting go of
// a lane the caller holds, and publishing what its call holds,
// meanwhile. A task that ends while it waits
// puts nothing.
func (e *Executor) gateStage(t *task, sc *submitCtx) {
	r := &t.rec.req
	if r.Op == Write && e.fences.Closed(t.rem.Name) {
		if t.lane != nil {
			sc.picked.Count()
			t.lane.End() // what is enqueued goes now; no lane is held across the wait
			e.awaitGate(t.b, t.i, r, t.rem)
			t.lane.Begin()
		} else {
			sc.publishHeld() // what the call put before goes now, too
			e.awaitGate(t.b, t.i, r, t.rem)
		}
	}
}

// planStage cuts t into slices (host/slicer) on its plugin's current
// run, unless its call planned it.
func (e *Executor) planStage(t *task) {
	ps := t.rt.ps
	if !t.planned {
		t.b.Task(t.i).SetTransport(ps.idx)
		t.plan = e.plan(t.prun, t.rt.policy, uint64(len(t.rec.req.Local)), t.avoid)
		t.b.SetSlices(t.i, t.plan.Slices)
	}
	e.note(t.b, t.i, observe.Sliced, ps.idx, t.plan.Slices, nil)
}

// putStage puts t's slices on a lane of its plugin's run, each taking
// receiver credit first where the transport is two-sided (a task on a
// lane its caller holds goes to put directly: run).
func (e *Executor) putStage(t *task, sc *submitCtx) {
	// A request's slices are published together with those of the
	// requests its call put before, a burst at a time (submitCtx.end):
	// the plugin works on one burst while the next is cut (holding the
	// lane over a whole batch measured slower on two cores: the plugin
	// idled until the end).
	l := e.laneFor(sc, t.prun, t.rt.ps, t.rec.req.Priority, uint64(len(t.rec.req.Local)))
	l.Begin()
	var c putResult
	e.put(t, l, sc, &c)
	sc.end(l)
	e.cut(t.b, l, t.rt.ps, c)
}

// Stage is a step an engine adds to the request path (host.WithStage):
// staging through host memory, device copies and file I/O are to be
// ones. Pass sees each task once, admitted and before it is routed (a
// failover's next attempt does not pass again); an error ends the task
// INVALID with it. Pass must not block for long: it runs on the
// submitter's goroutine (or the qos dispatcher's, for a held task).
type Stage interface {
	Name() string
	Pass(t Task) error
}

// Task is what an added Stage sees of a task.
type Task struct {
	Batch   uint64 // the batch's number (BatchID.Number)
	Index   int    // in its batch
	Op      Op
	Length  uint64
	Segment string // the remote segment's name
}

// addedStages passes t through the engine's added stages, in order.
func (e *Executor) addedStages(t *task) bool {
	if t.retry != nil {
		return true
	}
	r := &t.rec.req
	v := Task{Batch: t.b.ID(), Index: t.i, Op: r.Op, Length: uint64(len(r.Local)), Segment: t.rem.Name}
	for _, s := range e.stages {
		if err := s.Pass(v); err != nil {
			e.refuse(t, fmt.Errorf("%w: stage %s refused the request: %w", ErrInvalid, s.Name(), err))
			return false
		}
	}
	return true
}
