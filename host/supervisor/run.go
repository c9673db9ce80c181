package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/internal/pluginclient"
)

// launch starts one run of p's process from spec: loader.Start, Probe,
// Start with spec's start config, and its lanes attached and stamped with the run's
// generation. On error the returned run, if any, holds only the process
// (killed) and its probe, for Status to describe.
func (s *Set) launch(ctx context.Context, p *Plugin, spec Spec) (*Run, error) {
	lp, err := loader.Start(ctx, spec.Loader, s.log)
	if err != nil {
		return nil, err
	}
	r := &Run{Proc: lp, Gen: p.lives.Add(1), ID: newRunID(), gone: make(chan struct{})}
	fail := func(reason string, err error) (*Run, error) {
		for _, l := range r.Lanes {
			l.Close(false)
		}
		r.Lanes = nil
		lp.Kill()
		return r, &loader.Error{Name: p.name, Path: spec.Loader.Path, Reason: reason, Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ControlTimeout)
	defer cancel()
	if r.Probe, err = lp.Client.Probe(cctx); err != nil {
		// No run: a run's zero probe would read as "unavailable" (no
		// hardware), which a strict engine forgives; a plugin whose probe
		// fails or is refused (out of bounds) has failed.
		lp.Kill()
		return nil, &loader.Error{Name: p.name, Path: spec.Loader.Path, Reason: "probe failed", Err: err}
	}
	if !r.Probe.Available {
		return fail("unavailable: "+r.Probe.Reason, nil)
	}
	start := spec.Start
	start.Run = r.ID
	r.Endpoint, err = lp.Client.Start(cctx, start)
	if err != nil {
		return fail("start failed", err)
	}
	// Rails depend on the plugin's configuration, which it has now.
	if pr, err := lp.Client.Probe(cctx); err == nil && pr.Available {
		r.Probe.Rails = pr.Rails
	}
	// So do its limits (tcp's max_frame is Info.MaxSlice).
	if err := lp.Describe(cctx); err != nil {
		return fail("describe after start failed", err)
	}
	if p.hooks.Owner != nil {
		r.Owner = p.hooks.Owner(r.Probe)
	}
	for id := range s.cfg.Lanes {
		l, err := progress.NewLane(uint32(id), s.cfg.RingDepth, s.cfg.Spin)
		if err != nil {
			return fail("cannot create lane", err)
		}
		l.Owner = r.Owner
		l.Run = r.Gen
		l.SetSpinSmall(s.cfg.SpinSmall)
		l.SetReapPause(s.cfg.StreamPause)
		l.SetSleepHandoff(s.cfg.HandoffSleeps)
		r.Lanes = append(r.Lanes, l)
		stamped, err := lp.Client.AttachLane(cctx, uint32(id), r.Gen, l.SQ, l.CQ, pluginclient.LaneTiming{Spin: s.cfg.Spin, SpinSmall: s.cfg.SpinSmall, Pause: s.cfg.StreamPause,
			HandoffSleeps: s.cfg.HandoffSleeps})
		if err != nil {
			return fail(fmt.Sprintf("attach lane %d failed", id), err)
		}
		switch stamped {
		case r.Gen:
			l.SetGeneration(r.Gen)
		case 0: // a plugin from before generations: its completions carry none
		default:
			return fail(fmt.Sprintf("attach lane %d: the plugin stamps generation %d, not %d", id, stamped, r.Gen), nil)
		}
	}
	return r, nil
}

// watch waits for r's process to exit; then it marks p down, has the
// engine fail r's work (Hooks.Down) and restarts p with backoff until it
// runs again or the set quits.
func (s *Set) watch(p *Plugin, r *Run) {
	defer s.wg.Done()
	select {
	case <-r.Proc.Exited():
	case <-s.quit:
		return
	}
	select {
	case <-s.quit: // both were ready: closing wins
		return
	default:
	}
	why := "the plugin process exited"
	if m := r.stalled.Load(); m != nil {
		why = *m + "; killed"
	} else if st := r.Proc.ExitState(exitStateWait); st != "" {
		// What ended it (an exit status, a signal) says where to look:
		// the plugin's own log for an exit status, the kernel's for a
		// signal such as an OOM kill.
		why += " (" + st + ")"
	}
	// Under the set's lock, so that an upgrade's commit (which retires r
	// under it) and this exit are ordered: either r was retired first
	// and ends as a retired run, or the plugin is Down before the
	// upgrade could commit, which then refuses.
	s.mu.Lock()
	retired := r.retired.Load()
	if !retired {
		p.lastExit.Store(&why) // before Down: "restarting" always has its reason
		p.to(Exited)
	}
	s.mu.Unlock()
	if retired {
		s.retiredExit(p, r, why)
		return
	}
	for _, l := range r.Lanes {
		l.MarkDown()
	}
	if p.hooks.Down != nil {
		p.hooks.Down(r, why)
	}
	r.Proc.Kill() // releases the dead process's client, pidfd and fd socket
	// Nothing completes on r's lanes any more and its tasks were failed:
	// the lanes go with the run (reapers, rings, memfds), not at Close.
	s.closeLanes(r)
	sch := s.cfg.Backoff.Start(time.Now())
	for {
		t := time.NewTimer(time.Until(sch.Due()))
		select {
		case <-t.C:
		case <-s.quit:
			t.Stop()
			return
		}
		if s.restart(p, r) {
			return
		}
		sch.Failed(time.Now())
	}
}

// exitStateWait bounds how long the supervisor waits for an exited
// plugin's process to be reaped, to say how it ended.
const exitStateWait = 100 * time.Millisecond

// restart attempts the next run of p and brings it to where old was
// (Hooks.Replay). It reports whether it is done: p runs again, or the set
// is stopping.
func (s *Set) restart(p *Plugin, old *Run) bool {
	p.to(Attempt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*s.cfg.ControlTimeout)
	defer cancel()
	r, err := s.launch(ctx, p, p.Spec())
	if err != nil {
		s.attemptFailed(p, err)
		return false
	}
	committed := false
	commit := func() bool {
		committed = s.commit(p, r, old)
		return committed
	}
	if p.hooks.Replay != nil {
		err = p.hooks.Replay(ctx, r, commit)
	}
	if err == nil && !committed && !commit() {
		err = ErrStopped
	}
	switch {
	case errors.Is(err, ErrStopped):
		if !committed {
			s.discard(r)
		}
		return true
	case err != nil:
		if committed { // a hook that committed and then failed: r runs
			s.log.Warn("plugin restart: replay reported an error after committing", "plugin", p.name, "error", err)
			break
		}
		s.discard(r)
		s.attemptFailed(p, err)
		return false
	}
	if p.hooks.Restarted != nil {
		p.hooks.Restarted(ctx, r)
	}
	s.log.Info("plugin restarted", "plugin", p.name, "pid", r.Proc.PID(), "restarts", p.restarts.Load())
	return true
}

func (s *Set) attemptFailed(p *Plugin, err error) {
	msg := err.Error()
	p.lastErr.Store(&msg)
	p.to(AttemptFailed)
	s.log.Warn("plugin restart failed; retrying", "plugin", p.name, "error", err)
}

// newRunID draws a run's ID: random, never 0, so that a peer's fence of
// one run never reaches another (of this plugin, of this engine's other
// lives, or of another engine).
func newRunID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}
