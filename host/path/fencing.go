package path

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/fence"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/supervisor"
	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
)

// Fencing: the engine's wiring of host/fence (its package comment has
// the why). When a run of a two-sided plugin ends with writes in
// flight, Down closes the gate of each target those writes went to and
// leaves the writes pending; they are ended (failed over, failed, or
// released as the tracker decided) once their target confirmed the
// fence, or after the retry budget when it cannot be reached. While a
// gate is closed no write to that target is put on any transport.

// fencePort asks targets over their control services (fence.Port).
type fencePort struct{ e *Executor }

func (p fencePort) Fence(ctx context.Context, t fence.Target, transport string, run uint64) error {
	e := p.e
	if t.Control == "" || e.hc == nil {
		return fmt.Errorf("segment %q publishes no control service to ask", t.Name)
	}
	cl, err := e.hc.Client(t.Control)
	if err != nil {
		return err
	}
	_, err = cl.Fence(ctx, control.FenceAsk{From: e.name, FromIncarnation: e.incarnation, To: t.Name, ToIncarnation: t.Incarnation,
		Transport: transport, Run: run})
	switch status.Code(errors.Unwrap(err)) {
	case codes.OK:
		return err // nil, or not a gRPC status
	case codes.FailedPrecondition:
		// Another life of the target answers: its plugins, and the old
		// run's connections to them, died with the life that held them.
		return nil
	case codes.NotFound:
		return nil // the target runs no such plugin: nothing of the run can land through it
	case codes.Unimplemented:
		e.log.Warn("the target engine cannot fence (an older engine): a write of an ended plugin run may still land there",
			"segment", t.Name, "plugin", transport, "run", run)
		return nil
	}
	return err
}

// FenceServer answers peers' fences with this engine's plugins
// (control.Fencer).
type FenceServer struct{ e *Executor }

// FenceServer returns what answers peers' fences (control.Fencer).
func (e *Executor) FenceServer() FenceServer { return FenceServer{e} }

func (f FenceServer) Fence(ctx context.Context, a control.FenceAsk) (control.FenceResult, error) {
	ps := f.e.byName[a.Transport]
	if ps == nil {
		return control.FenceResult{}, control.ErrFenceUnknownTransport
	}
	run := ps.run()
	if run == nil || run.p == nil || !ps.usable() {
		// No run of the plugin is up: whichever run held the peer's
		// connections has exited, and they with it. (A restart replays
		// no connection; the next run is fenced through a later call
		// if the peer asks again.)
		return control.FenceResult{}, nil
	}
	if !run.p.Implements(sdk.InterfaceFencer) {
		return control.FenceResult{}, fmt.Errorf("plugin %q (%s) does not implement sdk.Fencer, so what a peer's ended run sent may still land here; upgrade it", ps.name, run.p.Path)
	}
	r, err := run.p.Client.Fence(ctx, a.From, a.Run)
	if err != nil {
		if status.Code(errors.Unwrap(err)) == codes.PermissionDenied || errors.Is(err, sdk.ErrFenceNotYours) {
			return control.FenceResult{}, fmt.Errorf("%w: %v", control.ErrFenceNotYours, err)
		}
		var ue *pluginclient.UnimplementedError
		if errors.As(err, &ue) {
			return control.FenceResult{}, err
		}
		return control.FenceResult{}, err
	}
	return control.FenceResult{Connections: r.Connections, Known: r.Known}, nil
}

// fenceDown is the part of Down for a run r of two-sided plugin ps: it
// closes the gate of every target that a write in flight on r went to,
// and returns the keep function FailTransportExcept leaves those writes
// alone with, and the end to run after it (nil when nothing was kept).
func (e *Executor) fenceDown(ps *Plugin, r *supervisor.Run) (keep func(b *progress.Batch, i int) bool, end func(err error)) {
	if !r.Proc.Info.TwoSided {
		return nil, nil
	}
	ps.deadRun.Store(r.ID)
	var tokens []uint64
	var dones []<-chan struct{}
	seen := map[string]bool{}
	keep = func(b *progress.Batch, i int) bool {
		if b.Cutting(i) {
			// Its submitter may still be writing its record, and fails it
			// over itself: the retry fences this run at its target first
			// (fenceMoved).
			return false
		}
		rec := e.path.lookup(b, i)
		if rec == nil || rec.req.Op != Write {
			return false
		}
		rem := e.remote(rec.req.Segment)
		if rem == nil {
			return false
		}
		if !seen[rem.Name] {
			seen[rem.Name] = true
			dones = append(dones, e.fences.Close(fenceTarget(rem), ps.name, r.ID))
		}
		tokens = append(tokens, b.Token(i))
		b.Detach(i) // no longer the next run's to hold or fail
		return true
	}
	end = func(err error) {
		if len(tokens) == 0 {
			return
		}
		e.log.Warn("writes in flight on an ended plugin run: fencing their targets before they end", "plugin", ps.name, "run", r.ID,
			"targets", len(dones), "tasks", len(tokens))
		e.endAfterFence(ps, dones, tokens, err)
	}
	return keep, end
}

// endAfterFence ends the detached writes of tokens (FailToken, with err)
// once the fences in dones, of plugin ps's ended run, are confirmed, or
// after the retry budget: a target that cannot be reached keeps its gate
// closed, and they end anyway, the contract's one exception.
func (e *Executor) endAfterFence(ps *Plugin, dones []<-chan struct{}, tokens []uint64, err error) {
	e.fences.EndAfter(dones, e.retryBudget(), func(confirmed bool) {
		if !confirmed {
			e.log.Warn("a target did not confirm the fence of an ended plugin run in time; its writes end now, and new writes to it wait for the fence",
				"plugin", ps.name, "tasks", len(tokens))
		}
		for _, tk := range tokens {
			e.tracker.FailToken(tk, err)
		}
	})
}

// endOrphan ends task i of b, carried by plugin ps, whose end (canceled,
// timed out) was decided while slices of its attempt were out on a lane
// that went down: they will never come back, so nothing else would end
// it, and its plugin's next run would be blamed for holding it
// (supervise.end_grace). It is released in its decided state; a write
// on a two-sided plugin once its target confirmed the fence of the
// lane's run, as Down ends the writes it kept, since what that run sent
// may still land. A lane whose run's Down has not run yet is left to
// it: the task is cut, so Down keeps it and ends it so.
func (e *Executor) endOrphan(b *progress.Batch, i int, ps *Plugin) {
	rec := e.path.lookup(b, i)
	cur := ps.run()
	if rec == nil || rec.req.Op != Write || cur == nil || cur.p == nil || !cur.p.Info.TwoSided {
		b.Release(i)
		return
	}
	run := ps.deadRun.Load()
	for _, l := range cur.lanes {
		if int32(l.ID) == b.Task(i).Lane() {
			if run != cur.sv.ID {
				return // its run's Down is yet to come
			}
			break
		}
	}
	rem := e.remote(rec.req.Segment)
	if run == 0 || rem == nil {
		b.Release(i)
		return
	}
	done := e.fences.Close(fenceTarget(rem), ps.name, run)
	b.Detach(i) // no longer the next run's to hold
	err := fmt.Errorf("%w: plugin %q: its run ended under the task's slices", ErrPluginFailed, ps.name)
	e.endAfterFence(ps, []<-chan struct{}{done}, []uint64{b.Token(i)}, err)
}

// fenceMoved closes rem's gate for the last ended run of two-sided
// plugin ps (a no-op when it is confirmed already, but for one round
// trip), for a write that failover moves away from that run: one whose
// submitter was still cutting it when the run ended, which Down left to
// it. The dispatch that follows waits at the gate.
func (e *Executor) fenceMoved(ps *Plugin, r *Request, rem *remote) {
	run := ps.deadRun.Load()
	if run == 0 || r.Op != Write || rem == nil {
		return
	}
	e.fences.Close(fenceTarget(rem), ps.name, run)
}

// fenceTarget is the segment of handle rem as its gate knows it.
func fenceTarget(rem *remote) fence.Target {
	return fence.Target{Name: rem.Name, Incarnation: rem.Desc.Incarnation, Control: rem.Desc.Control}
}

// awaitGate holds a write of task i of b to rem while rem's gate is
// closed (a fence of an ended run is unconfirmed there), up to the
// task's deadline; a task that ends meanwhile is ended with the reason,
// and the put after it sends nothing.
func (e *Executor) awaitGate(b *progress.Batch, i int, r *Request, rem *remote) {
	deadline := r.deadline()
	// Should its deadline pass meanwhile, whoever sees it ends the task
	// TIMEOUT with this reason.
	why := fmt.Errorf("%w: the write waited for segment %q to confirm the fence of an ended plugin run (%w), until its deadline", ErrDeadlineExceeded, rem.Name, fence.ErrClosed)
	unblame := b.Blame(i, why)
	err := e.fences.Wait(rem.Name, deadline, heldPoll, func() bool { return b.Stopping(i, progress.Now()) })
	if err == nil {
		unblame()
		return
	}
	if b.Stopping(i, progress.Now()) && (deadline == 0 || progress.Now() < deadline) {
		return // canceled: its state says so
	}
	b.Finish(i, progress.Timeout, fmt.Errorf("%w: %w", ErrDeadlineExceeded, err))
}
