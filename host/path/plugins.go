package path

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/host/supervisor"
	"github.com/ferrydev/ferry/sdk"
)

// Around a plugin's runs: the one place where a plugin's life meets the
// request path (rails, tasks in flight, receiver credit, fences). The
// engine adds what is its own (replaying registrations and open peers,
// republishing) through Lifecycle.

// Lifecycle is the engine's part of a plugin's restart: Replay brings a
// new run to where the last one was (registered memory, open peers)
// before commit makes it current; Restarted follows a restart.
type Lifecycle struct {
	Replay    func(ctx context.Context, ps *Plugin, r *supervisor.Run, commit func() bool) error
	Restarted func(ctx context.Context, ps *Plugin, r *supervisor.Run)
}

// StartPlugin has the supervisor start one plugin, appended to the
// executor's. A plugin that cannot run is kept with its reason, so that
// the engine still runs on the others and status can say why. Call it
// before Start.
func (e *Executor) StartPlugin(ctx context.Context, name string, spec supervisor.Spec, lc Lifecycle) *Plugin {
	ps := &Plugin{idx: int32(len(e.plugins)), name: name}
	ps.sv = e.supervisor.Start(ctx, spec, e.hooks(ps, lc))
	if ps.err = ps.sv.Err(); ps.err != nil {
		if r := ps.sv.Run(); r != nil { // for status and tests' PluginPID
			rs := railsOf(r.Owner)
			ps.cur.Store(&pluginRun{sv: r, p: r.Proc, endpoint: r.Endpoint, rails: rs})
			ps.rails.Store(rs)
		}
	}
	e.plugins = append(e.plugins, ps)
	e.byName[name] = ps
	return ps
}

// hooks is what happens around each run of ps.
func (e *Executor) hooks(ps *Plugin, lc Lifecycle) supervisor.Hooks {
	blocks, policyRails := railFacts(e.cfg)
	return supervisor.Hooks{
		Owner: func(probe sdk.ProbeResult) any {
			if rs := ps.rails.Load(); rs != nil && rs.SameRails(probe.Rails) {
				return rs
			}
			return rails.NewSet(ps.name, probe.Rails, blocks, policyRails)
		},
		Up: func(r *supervisor.Run) {
			rs := railsOf(r.Owner) // Owner built it
			ps.cur.Store(&pluginRun{sv: r, p: r.Proc, lanes: r.Lanes, endpoint: r.Endpoint, rails: rs})
			ps.rails.Store(rs)
		},
		Down: func(r *supervisor.Run, why string) {
			err := fmt.Errorf("%w: plugin %q (%s): %s", ErrPluginFailed, ps.name, r.Proc.Path, why)
			keep, fenced := e.fenceDown(ps, r) // writes it may still carry end once their targets fenced it
			// Its own tasks, and those not on a lane yet: a run an upgrade
			// replaced, still draining, ends its own (Retired).
			n := e.tracker.FailRunExcept(ps.idx, r.Gen, err, keep)
			if fenced != nil {
				fenced(err)
			}
			railsOf(r.Owner).ForgetAll()
			e.creditDown(r.Proc.Info.TwoSided)
			e.log.Error("plugin down; its in-flight tasks failed; restarting it", "plugin", ps.name, "pid", r.Proc.PID(), "reason", why, "tasks", n)
		},
		Replay: func(ctx context.Context, r *supervisor.Run, commit func() bool) error {
			return lc.Replay(ctx, ps, r, commit)
		},
		Restarted: func(ctx context.Context, r *supervisor.Run) { lc.Restarted(ctx, ps, r) },
		Retiring: func(r *supervisor.Run) {
			if r.Proc.Info.TwoSided {
				// A write a submitter still puts on its lanes now fails
				// over, and fences this run at its target first.
				ps.deadRun.Store(r.ID)
			}
		},
		Retired: func(r *supervisor.Run, why string) {
			// A live upgrade's old run, stopped once drained (or past its
			// bound), or dead while it drained: what it still holds is
			// failed over to the new run as after a death, its writes
			// once their targets fenced it. Its rail set and receiver
			// credit are the new run's too: nothing is forgotten.
			err := fmt.Errorf("%w: plugin %q (%s), replaced by an upgrade: %s", ErrPluginFailed, ps.name, r.Proc.Path, why)
			keep, fenced := e.fenceDown(ps, r)
			n := e.tracker.FailRetired(ps.idx, r.Gen, err, keep)
			if fenced != nil {
				fenced(err)
			}
			if n > 0 {
				e.log.Warn("plugin upgrade: the old run ended with tasks in flight; they fail over to the new run", "plugin", ps.name,
					"pid", r.Proc.PID(), "reason", why, "tasks", n)
			}
		},
	}
}

// Upgrade replaces plugin ps's binary while it runs (supervisor.Set.Upgrade):
// a new run from bin beside the current one, started with block's
// config body (nil: the running one's), replayed as after a restart
// (lc.Replay), then the old run drained within bound and stopped.
func (e *Executor) Upgrade(ctx context.Context, ps *Plugin, bin loader.Spec, block *config.Plugin, bound time.Duration) error {
	if e.closed.Load() {
		return e.closeErr()
	}
	spec := ps.sv.Spec()
	spec.Loader = bin
	if block != nil {
		st := &spec.Start
		st.Config, st.ConfigFile, st.ConfigLine, st.ConfigColumn, st.ConfigByte = block.Body, block.BodyFile, block.BodyLine, block.BodyColumn, block.BodyByte
	}
	return e.supervisor.Upgrade(ctx, ps.sv, spec, bound)
}

// railFacts is what rails.NewSet reads of the configuration: the rail
// blocks, and each policy's rails in policy order.
func railFacts(cfg *config.Config) ([]rails.Block, [][]string) {
	blocks := make([]rails.Block, len(cfg.Rails))
	for i, b := range cfg.Rails {
		blocks[i] = rails.Block{Name: b.Name, Transport: b.Transport, Device: b.Device, NUMANode: b.NUMANode, BandwidthGbps: b.BandwidthGbps}
	}
	policyRails := make([][]string, len(cfg.Policies))
	for i, p := range cfg.Policies {
		policyRails[i] = p.Rails
	}
	return blocks, policyRails
}

// RailStatuses reports every rail of every running transport of ps.
func RailStatuses(ps []*Plugin) []rails.Status {
	var out []rails.Status
	now := time.Now()
	for _, p := range ps {
		if rs := p.Rails(); rs != nil && p.Err() == nil {
			out = append(out, rs.Status(now)...)
		}
	}
	return out
}
