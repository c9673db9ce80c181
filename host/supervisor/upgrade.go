package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

// A live upgrade (Set.Upgrade) replaces a running plugin's binary with no
// restart of the engine. Who does what:
//
//   - The caller's goroutine launches the new run beside the current one
//     (launch, from the new loader.Spec: sha256 checked, protocol
//     negotiated, started, lanes attached), has the engine replay
//     registrations and peers into it (Hooks.Replay, as for a restart)
//     and commits it under the set's mu: Hooks.Up makes it the run the
//     request path uses, the old run is marked retired and kept in
//     Plugin.retiring, the plugin's spec becomes the new one (a later
//     crash restarts the new binary), the state stays Running (the
//     Upgraded event). No lock is held across a plugin call or a wait;
//     the commit holds the set's mu only for those stores.
//   - Any failure before the commit (the binary missing, a wrong
//     sha256, a crash at start, a protocol the host does not speak, a
//     replay refused) discards the new run and leaves the old one
//     serving, untouched; the reason is in Status's Upgrade.
//   - A goroutine of the set's (retire) drains the old run: the
//     plugin's Drain where it implements sdk.Drainer, then waiting until
//     its lanes hold no descriptor (its reapers still run, so its
//     completions are reaped), within the bound. Then Hooks.Retiring,
//     its lanes marked down, Stop, and its process released.
//   - The old run's watcher sees its exit and, the run being retired,
//     calls Hooks.Retired (the engine fails over what it still held,
//     fencing its writes) instead of Down and a restart, then closes its
//     lanes.

// ErrUpgradeBusy is returned when an upgrade of the plugin is under way
// (its new run starting, or its old run draining).
var ErrUpgradeBusy = errors.New("an upgrade of the plugin is under way")

// ErrNotRunning is returned when an upgrade is asked of a plugin that
// does not run now (failed at start, or restarting).
var ErrNotRunning = errors.New("the plugin is not running")

// UpgradeStatus is what the latest upgrade of a plugin did, for status.
type UpgradeStatus struct {
	// State is "starting" (the new run is being launched and replayed),
	// "draining" (the new run serves; the old one finishes its work),
	// "done" or "failed" (the old run still serves; Reason says why).
	State  string `json:"state"`
	From   string `json:"from"`             // the old binary's path
	To     string `json:"to"`               // the new one's
	SHA256 string `json:"sha256,omitempty"` // the new binary's, as started
	Reason string `json:"reason,omitempty"`
	// OldPID is the old run's process; NewPID the new one's, 0 when it
	// did not start.
	OldPID int `json:"old_pid"`
	NewPID int `json:"new_pid,omitempty"`
	// Drain says how the old run was drained: "drain" (the plugin's
	// Drain), "waited" (no new work, then its lanes waited for),
	// "bound" (past the bound its remaining work was failed over).
	Drain string `json:"drain,omitempty"`
	// Held is how many descriptors the old run still held when it was
	// stopped (failed over, past the bound); 0 when it drained.
	Held    int64     `json:"held,omitempty"`
	Started time.Time `json:"started"`
	Done    time.Time `json:"done,omitempty"`
}

// UpgradeResult is an upgrade's outcome as Set.Upgrade's caller sees it.
const (
	UpgradeOK     = "ok"
	UpgradeFailed = "failed"
)

// Upgrade replaces p's running binary and start configuration with
// spec's (the caller starts from Plugin.Spec and changes what the
// operator changed: the binary, the plugin's config block): see the comment at
// the top of this file. It returns once the old run has ended, or ctx
// ended (the drain then goes on; Status says when it is done), or the
// upgrade failed, which leaves the old run serving. bound limits the
// old run's drain; past it, what it still holds is failed over as if it
// had died.
func (s *Set) Upgrade(ctx context.Context, p *Plugin, spec Spec, bound time.Duration) error {
	if p.err != nil || p.State() != Running {
		return fmt.Errorf("plugin %q: %w (state %s)", p.name, ErrNotRunning, p.State())
	}
	if !p.upgrading.CompareAndSwap(false, true) {
		return fmt.Errorf("plugin %q: %w", p.name, ErrUpgradeBusy)
	}
	spec.Loader.Name = p.name
	old := p.Run()
	st := &UpgradeStatus{State: "starting", From: old.Proc.Path, To: spec.Loader.Path, OldPID: old.Proc.PID(), Started: time.Now()}
	p.upgrade.Store(st)
	s.log.Info("plugin upgrade: starting the new binary beside the old", "plugin", p.name, "from", st.From, "to", spec.Loader.Path)
	r, err := s.startUpgrade(ctx, p, old, spec)
	if err != nil {
		p.refused.Add(1)
		f := *st
		f.State, f.Reason, f.Done = "failed", err.Error(), time.Now()
		p.upgrade.Store(&f)
		p.upgrading.Store(false)
		s.log.Error("plugin upgrade failed; the old binary still serves", "plugin", p.name, "from", st.From, "to", spec.Loader.Path, "error", err)
		return fmt.Errorf("plugin %q: upgrade to %s: %w", p.name, spec.Loader.Path, err)
	}
	p.upgraded.Add(1)
	d := *st
	d.State, d.SHA256, d.NewPID = "draining", r.Proc.SHA256, r.Proc.PID()
	p.upgrade.Store(&d)
	if p.hooks.Restarted != nil {
		rctx, cancel := context.WithTimeout(context.Background(), s.cfg.ControlTimeout)
		p.hooks.Restarted(rctx, r) // republish: the endpoint may differ
		cancel()
	}
	s.log.Info("plugin upgraded; draining the old run", "plugin", p.name, "pid", r.Proc.PID(), "old_pid", d.OldPID, "path", spec.Loader.Path)
	s.wg.Add(1)
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		s.retire(p, old, bound, d)
	}()
	select {
	case <-fin:
	case <-ctx.Done():
	case <-s.quit:
	}
	return nil
}

// startUpgrade launches a run of p from spec, replays it and commits it
// in place of old. On error nothing of the new run is left.
func (s *Set) startUpgrade(ctx context.Context, p *Plugin, old *Run, spec Spec) (*Run, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*s.cfg.ControlTimeout)
	defer cancel()
	r, err := s.launch(ctx, p, spec)
	if err != nil {
		if r != nil {
			r.Proc.Kill()
		}
		return nil, err
	}
	var why error
	committed := false
	commit := func() bool {
		why = s.commitUpgrade(p, r, old, spec)
		committed = why == nil
		return committed
	}
	if p.hooks.Replay != nil {
		err = p.hooks.Replay(ctx, r, commit)
	}
	if err == nil && !committed && !commit() {
		err = why
	}
	if committed {
		if err != nil {
			s.log.Warn("plugin upgrade: replay reported an error after committing", "plugin", p.name, "error", err)
		}
		return r, nil
	}
	s.discard(r)
	if errors.Is(err, ErrStopped) && why != nil {
		err = why
	}
	if err == nil {
		err = errors.New("not committed")
	}
	return nil, err
}

// commitUpgrade makes r p's current run in place of old, which it
// retires; it refuses when the set is stopping or old is no longer the
// running run (it exited meanwhile).
func (s *Set) commitUpgrade(p *Plugin, r, old *Run, spec Spec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrStopped
	}
	if p.cur.Load() != old || p.State() != Running {
		return fmt.Errorf("the running process (pid %d) exited during the upgrade; it is being restarted from the old binary: try again", old.Proc.PID())
	}
	old.retired.Store(true)
	p.retiring = append(p.retiring, old)
	p.mu.Lock()
	p.spec = spec
	p.mu.Unlock()
	if p.hooks.Up != nil {
		p.hooks.Up(r)
	}
	p.cur.Store(r)
	p.to(Upgraded)
	s.startRun(p, r)
	return nil
}

// drainPoll is how often retire looks at the old run's lanes.
const drainPoll = 2 * time.Millisecond

// peerQuiet is how long a replaced run with peers must go without a
// change in its counters before it is stopped, and peerPoll how often
// they are read.
const (
	peerQuiet = time.Second
	peerPoll  = 100 * time.Millisecond
)

// linger keeps old serving its peers until its counters have not
// changed for peerQuiet, or ctx ends; false when the set quits.
func (s *Set) linger(ctx context.Context, old *Run) bool {
	stats := func() map[string]uint64 {
		sctx, cancel := context.WithTimeout(ctx, s.cfg.ControlTimeout)
		defer cancel()
		m, err := old.Proc.Client.Stats(sctx)
		if err != nil {
			return nil
		}
		// Its lanes' counters are the host's own traffic (drained, but
		// an idle lane still counts its wakeups): only the plugin's own
		// say whether peers still use it.
		maps.DeleteFunc(m, func(k string, _ uint64) bool { return strings.HasPrefix(k, "lane") })
		return m
	}
	last, since := stats(), time.Now()
	tick := time.NewTicker(peerPoll)
	defer tick.Stop()
	for time.Since(since) < peerQuiet {
		select {
		case <-tick.C:
		case <-old.Proc.Exited():
			return true
		case <-ctx.Done():
			return true
		case <-s.quit:
			return false
		}
		if now := stats(); !maps.Equal(now, last) {
			last, since = now, time.Now()
		}
	}
	return true
}

// retire drains old, a run an upgrade replaced, within bound, then stops
// it; its watcher does the rest (retiredExit). st is the upgrade's
// status, finished here.
func (s *Set) retire(p *Plugin, old *Run, bound time.Duration, st UpgradeStatus) {
	defer s.wg.Done()
	defer p.upgrading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	st.Drain = "waited"
	if old.Proc.Implements(sdk.InterfaceDrainer) {
		// The plugin finishes what it holds and completes anything new
		// with StatusShutdown (failed over to the new run). The call is
		// cut short when the set quits; it ends before retire goes on.
		done := make(chan error, 1)
		go func() { done <- old.Proc.Client.Drain(ctx) }()
		var err error
		select {
		case err = <-done:
		case <-s.quit:
			cancel()
			<-done
			return // Close kills it and closes its lanes
		}
		if err == nil {
			st.Drain = "drain"
		} else {
			s.log.Warn("plugin upgrade: the old run's Drain failed; waiting for its lanes instead", "plugin", p.name, "error", err)
		}
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
wait:
	for held(old) > 0 {
		select {
		case <-tick.C:
		case <-old.Proc.Exited():
			break wait
		case <-ctx.Done():
			break wait
		case <-s.quit:
			return // Close kills it and closes its lanes
		}
	}
	if held(old) == 0 && len(old.Endpoint) > 0 {
		// Its own work is done, but peers may still be sending to it:
		// they reach the new run once they read the descriptor the
		// upgrade republished. It serves them until it has been quiet
		// (its counters still) for peerQuiet, within the bound.
		if !s.linger(ctx, old) {
			return // the set quits: Close kills it
		}
	}
	if st.Held = held(old); st.Held > 0 {
		st.Drain = "bound"
		s.log.Warn("plugin upgrade: the old run did not drain within its bound; failing its work over", "plugin", p.name,
			"pid", old.Proc.PID(), "bound", bound, "descriptors", st.Held)
	}
	if p.hooks.Retiring != nil {
		p.hooks.Retiring(old)
	}
	for _, l := range old.Lanes {
		l.MarkDown()
	}
	if st.Held == 0 {
		// Nothing of it is held: a clean stop. (Past the bound it is
		// killed instead: a Stop would complete what it holds with
		// StatusShutdown, failed attempts, where its exit makes them a
		// dead run's, failed over to the new run once fenced.)
		sctx, scancel := context.WithTimeout(context.Background(), s.cfg.ControlTimeout)
		if err := old.Proc.Client.Stop(sctx); err != nil {
			s.log.Debug("plugin upgrade: the old run's stop failed; killing it", "plugin", p.name, "error", err)
		}
		scancel()
	}
	old.Proc.Kill() // its watcher sees the exit: retiredExit
	select {
	case <-old.gone:
	case <-s.quit:
		return
	}
	st.State, st.Done = "done", time.Now()
	p.upgrade.Store(&st)
	s.log.Info("plugin upgrade done: the old run stopped", "plugin", p.name, "old_pid", st.OldPID, "drain", st.Drain, "held", st.Held)
}

// held returns how many descriptors r's lanes hold.
func held(r *Run) int64 {
	var n int64
	for _, l := range r.Lanes {
		n += l.InFlight()
	}
	return n
}

// retiredExit is the watcher's end of a retired run r: its lanes
// refuse work, the engine fails over what it held (Hooks.Retired), its
// process and lanes are released, and it leaves p's retiring runs.
func (s *Set) retiredExit(p *Plugin, r *Run, why string) {
	for _, l := range r.Lanes {
		l.MarkDown()
	}
	if p.hooks.Retired != nil {
		p.hooks.Retired(r, why)
	}
	r.Proc.Kill()
	s.closeLanes(r)
	p.mu.Lock()
	p.past = p.past.Add(violations(r.Lanes))
	p.mu.Unlock()
	s.mu.Lock()
	p.retiring = slices.DeleteFunc(p.retiring, func(x *Run) bool { return x == r })
	s.mu.Unlock()
	close(r.gone)
}

// retiringRuns returns the runs upgrades replaced that have not ended.
// Retiring returns the runs upgrades replaced that still run (draining,
// or serving peers that have not moved): what the application
// unregisters must leave them too.
func (p *Plugin) Retiring() []*Run { return p.retiringRuns() }

func (p *Plugin) retiringRuns() []*Run {
	p.set.mu.Lock()
	defer p.set.mu.Unlock()
	return slices.Clone(p.retiring)
}
