package supervisor

import (
	"context"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
)

// Status is what the set knows of one plugin, for Engine.Status.
type Status struct {
	// State is the operator's word: "running", "restarting" (its process
	// exited; it is being started again), "unavailable" (its probe says
	// it cannot run here), "failed" or "starting"; Reason says why.
	State    string
	Reason   string
	Path     string
	SHA256   string
	Version  string
	Protocol int
	Restarts uint64 // runs started after the first
	Stalls   uint64 // runs found stalled and killed
	Faulty   uint64 // runs found faulty (see Contract) and killed
	// Violations are the completion contract violations of every run of
	// the plugin.
	Violations progress.Violations
	PID        int // of the current run; 0 when none runs
	// Outstanding is how many descriptors the current run holds:
	// submitted to its lanes and not completed.
	Outstanding int64
	LastExit    string // why the previous run ended; "" while the first runs
	Rails       []sdk.Rail
	Counters    map[string]uint64 // the plugin's own, when it answers
	// Upgrade is the latest live upgrade (Set.Upgrade), nil before any;
	// Upgrades and UpgradesFailed count those committed and those whose
	// new binary did not start (the old one kept serving).
	Upgrade                  *UpgradeStatus
	Upgrades, UpgradesFailed uint64
	// Draining is how many descriptors the runs an upgrade replaced
	// still hold, while they drain.
	Draining int64
}

// Status reports p; for a running plugin it asks the plugin for its
// counters, within the set's control timeout.
func (p *Plugin) Status(ctx context.Context) Status {
	st, r := p.status()
	if r != nil {
		cctx, cancel := context.WithTimeout(ctx, p.set.cfg.ControlTimeout)
		c, err := r.Proc.Client.Stats(cctx)
		cancel()
		if err == nil {
			st.Counters = c
		}
	}
	return st
}

// Peek is Status without asking the plugin anything: Counters is nil.
func (p *Plugin) Peek() Status {
	st, _ := p.status()
	return st
}

// status is Status but for the counters, and the run to ask for them
// (nil when none runs).
func (p *Plugin) status() (Status, *Run) {
	st := Status{State: "running", Restarts: p.restarts.Load(), Stalls: p.stalls.Load(), Faulty: p.faulty.Load(),
		Upgrade: p.upgrade.Load(), Upgrades: p.upgraded.Load(), UpgradesFailed: p.refused.Load()}
	for _, r := range p.retiringRuns() {
		st.Draining += held(r)
	}
	p.mu.Lock()
	st.Violations = p.past
	p.mu.Unlock()
	if m := p.lastExit.Load(); m != nil {
		st.LastExit = *m
	}
	r := p.Run()
	if r != nil {
		st.Violations = st.Violations.Add(violations(r.Lanes))
		st.Rails = r.Probe.Rails
		st.Path, st.SHA256, st.Version, st.Protocol = r.Proc.Path, r.Proc.SHA256, r.Proc.Info.Version, r.Proc.Protocol
	}
	switch {
	case p.err != nil:
		st.State, st.Reason = "failed", p.err.Error()
		if r != nil && !r.Probe.Available && r.Probe.Reason != "" {
			st.State = "unavailable"
		}
	case p.Down():
		st.State, st.Reason = "restarting", st.LastExit
		if m := p.lastErr.Load(); m != nil {
			st.Reason += "; last restart attempt: " + *m
		}
	case r == nil || p.State() != Running:
		st.State = p.State().String()
	default:
		st.PID = r.Proc.PID()
		for _, l := range r.Lanes {
			st.Outstanding += l.InFlight()
		}
		return st, r
	}
	return st, nil
}
