package path

import (
	"time"

	"github.com/ferrydev/ferry/host/credit"
	"github.com/ferrydev/ferry/host/failover"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/slicer"
)

// A Submit call's requests, taken a run at a time. When nothing can
// stop a request before its slices are put (no Admitter, no qos queue,
// no added stage, nobody listening, no fence gate closed, and receiver
// credit, where the transport takes it, for the whole run at once),
// consecutive requests that share their segment, op, priority, deadline
// and route are validated, routed and planned first, then
// reserved in their batch together, routed and cut (ReserveRouted), and
// put on one lane held once for the run: one lock and one publication a
// run for the batch and for the lane, not one a request, as a block
// list's runs are (putRuns). Each request still passes the one stage
// sequence (run), whose stages then pass it at the cost of their flags.
// A request that does not fit (invalid, another route, staged) ends the
// run and goes through submitOne, which says what is wrong with it.

// submitRun submits a run of the leading requests of reqs, at most a
// publication burst of them, and returns how many it took: 0 when the
// first cannot go this way (submitOne takes it). It leaves the lane's
// descriptors held, as end does, while the call has more requests and a
// sleeping plugin's burst is not full.
func (e *Executor) submitRun(b *progress.Batch, reqs []Request, sc *submitCtx) int {
	if !e.unhindered() {
		return 0
	}
	var rn leanRun
	first := &reqs[0]
	rem := e.remote(first.Segment)
	rt := &rn.rts[0]
	if !e.leanRoute(first, rem, rt, sc) {
		return 0
	}
	ps := rt.ps
	pr := ps.run()
	pc := e.creditFor(pr, rem)
	limit := min(len(reqs), len(rn.rts))
	deadline, dflt := first.deadline(), false
	if deadline == 0 && e.cfg.Transfer.DefaultDeadline > 0 && !sc.bounded {
		deadline, dflt = sc.now().Add(e.cfg.Transfer.DefaultDeadline).UnixNano(), true
	}
	n := 0
	for ; n < limit; n++ {
		r := &reqs[n]
		if n > 0 {
			if r.Segment != first.Segment || r.Op != first.Op || r.Priority != first.Priority || r.deadline() != first.deadline() {
				break
			}
			if !e.leanRoute(r, rem, &rn.rts[n], sc) || rn.rts[n].ps != ps {
				break
			}
		}
		rn.lengths[n] = uint64(len(r.Local))
		rn.plans[n] = e.plan(pr, rn.rts[n].policy, rn.lengths[n], 0)
		if pc != nil && rn.plans[n].Slices != 1 {
			break // receiver credit is taken for a run of one-slice tasks
		}
		rn.slices[n], rn.slice[n] = rn.plans[n].Slices, min(rn.plans[n].Slice, rn.lengths[n])
	}
	// A two-sided transport's run takes its receiver credit at once, or
	// its requests take theirs one at a time (submitOne), waiting as
	// they must.
	if n == 0 || pc != nil && !e.takeRunCredit(sc, pc, rn.lengths[:n], rn.plans[:n], first.Priority) {
		return 0
	}
	ln := e.laneFor(sc, pr, ps, first.Priority, rn.lengths[:n]...)
	if sc.held != ln {
		sc.publishHeld() // what the call holds on another lane goes first: one lane held at a time
	}
	route := progress.Route{Transport: ps.idx, Slices: rn.slices[:n], Slice: rn.slice[:n], Lane: ln.ID, Run: ln.Run}
	if pr.rails.Single() {
		route.Rails = 1 // rail 0: Pick's only answer
	}
	at, got := b.ReserveRouted(rn.lengths[:n], deadline, &route, func(at, got int) {
		for j := range got {
			rec := e.path.record(b, at+j)
			*rec = taskRecord{req: reqs[j], hist: failover.History{Tried: 1 << ps.idx}, sent: rem}
			if dflt { // on the engine's copy, which every later stage reads, not on the caller's
				rec.req.Deadline, rec.defaultDeadline = time.Unix(0, deadline), true
			}
		}
	})
	for j := range got {
		e.noteQueued(b, at+j, sc)
	}
	var t task
	t.b, t.rem, t.valid, t.planned, t.recorded, t.prun, t.lane = b, rem, true, true, true, pr, ln
	t.credited = pc != nil
	describe(&t.d, first.Op, first.Priority, rem.ID, deadline)
	t.described = true
	nc := 0
	ln.Begin()
	for j := range got {
		t.i, t.rec, t.rt, t.plan = at+j, e.path.record(b, at+j), rn.rts[j], rn.plans[j]
		if e.run(&t, sc, stageValidate, &rn.put[nc]) {
			nc++
		}
	}
	if pc != nil {
		e.credit.keeper.EndRun(&sc.credit) // what the run's tasks did not draw (got < n, a task stopped)
	}
	sc.more = n < len(reqs)
	sc.endRun(ln, n)
	e.cutRun(b, ln, ps, rn.put[:nc])
	return n // those past got: the batch filled meanwhile, as Submit checked
}

// takeRunCredit takes the receiver credit of a run of tasks at pc (their
// receiver's, creditFor) at once, their lengths and plans given, into
// sc.credit, which their puts then draw on (task.credited): false when
// pc is nil (the plugin takes no credit), a task is of more than one
// slice, or the window does not hold the run now; its tasks then take
// their own a slice at a time.
func (e *Executor) takeRunCredit(sc *submitCtx, pc *credit.Peer, lengths []uint64, plans []slicer.Plan, prio Priority) bool {
	if pc == nil || len(lengths) == 0 {
		return false
	}
	var bytes uint64
	for j, p := range plans {
		if p.Slices != 1 {
			return false
		}
		bytes += lengths[j]
	}
	return e.credit.keeper.TakeRun(&sc.credit, pc, bytes, len(lengths), prio == PriorityHigh)
}

// leanRoute validates request r to rem into rt and routes it, the
// previous request's route when the facts are the same; false when it is
// invalid, cannot be routed, or is staged: submitOne then takes it.
func (e *Executor) leanRoute(r *Request, rem *remote, rt *routed, sc *submitCtx) bool {
	if rem == nil {
		return false
	}
	v, err := e.validate(r, rem)
	if err != nil {
		return false
	}
	*rt = v
	return e.route(r, rem, rt, sc) == nil && !rt.staged
}

// route sets rt's route for request r to rem, whose regions rt holds:
// the route its call's previous request took when the facts are the
// same (routeMemo), else the engine's shared route when they are too and
// no plugin changed since (sharedRoute), else the selector's answer,
// which both then remember.
func (e *Executor) route(r *Request, rem *remote, rt *routed, sc *submitCtx) error {
	if sc.route.take(r, rem, rt) {
		return nil
	}
	epoch := e.supervisor.Epoch() // before the selector looks at the plugins
	if last := e.lastRoute.Load(); last != nil && last.epoch == epoch && last.take(r, rem, rt) {
		sc.route = last.routeMemo
		return nil
	}
	ps, policy, staged, err := e.chooseOrStage(r, rem, uint64(len(r.Local)))
	if err != nil {
		return err
	}
	rt.ps, rt.policy, rt.staged = ps, policy, staged
	sc.route.keep(r, rem, rt)
	if e.supervisor.Epoch() == epoch {
		// No plugin changed while the selector looked: its answer is the
		// one for these facts, for later calls too.
		e.lastRoute.Store(&sharedRoute{routeMemo: sc.route, epoch: epoch})
	}
	return nil
}

// sharedRoute is the route the selector chose for the last request of a
// Submit call whose route was not remembered, and the facts it was
// chosen on (routeMemo) with the plugins' epoch (supervisor.Set.Epoch)
// when it was: a later call's request with the same facts, while no
// plugin changed, takes it without asking again, as a block list's runs
// take their list's (blockRoute). One request at a time (Transfer of
// one 4 KiB write over shm) spent about 190 ns of its 2.4 us in the
// selector (BenchmarkRequestPath/transport=shm/batch=1's profile).
type sharedRoute struct {
	routeMemo
	epoch uint64
}

// leanRun is what submitRun works out for each request of a run before
// it puts any: at most a publication burst of them (a lane whose plugin
// sleeps holds several runs before it publishes: submitCtx.endRun).
type leanRun struct {
	rts     [publishBurst]routed
	lengths [publishBurst]uint64
	plans   [publishBurst]slicer.Plan
	slices  [publishBurst]int64
	slice   [publishBurst]uint64
	put     [publishBurst]putResult
}
