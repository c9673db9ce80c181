package host

import (
	"context"
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/stall"
)

// supervise watches one run of a plugin for a stall until the run ends or
// the engine closes: it feeds the run's lane counters to a stall.Detector
// every supervise interval and carries out what it decides. A stalled run
// is killed; its watcher (watchPlugin) then fails its tasks and restarts
// it as after any exit.
func (e *Engine) supervise(ps *pluginState, r *pluginRun) {
	defer e.wg.Done()
	sv := e.cfg.Supervise.WithDefaults()
	det := stall.New(stall.Config{After: sv.StallAfter, ProbeTimeout: sv.ProbeTimeout}, len(r.lanes))
	tick := time.NewTicker(sv.Interval)
	defer tick.Stop()

	// At most one control call is out at a time; it ends within the
	// probe timeout, or at once when this goroutine returns.
	ctx, cancel := context.WithCancel(context.Background())
	var call sync.WaitGroup
	defer func() { cancel(); call.Wait() }()
	answered := make(chan bool, 1)
	calling := false

	obs := make([]stall.Lane, len(r.lanes))
	for {
		select {
		case <-tick.C:
		case ok := <-answered:
			calling = false
			det.ControlAnswered(ok)
			continue
		case <-r.p.Exited():
			return
		case <-e.quit:
			return
		}
		for i, l := range r.lanes {
			obs[i] = stall.Lane{InFlight: l.InFlight(), Completed: l.Completed(), ProbeSent: l.ProbeSent(), ProbeAck: l.ProbeAck()}
		}
		d := det.Observe(time.Now(), obs)
		for _, p := range d.Probes {
			r.lanes[p.Lane].Probe(p.Seq) // refused now, asked again at the next look
		}
		if d.CheckControl && !calling {
			calling = true
			call.Add(1)
			go func() {
				defer call.Done()
				cctx, c := context.WithTimeout(ctx, sv.ProbeTimeout)
				_, err := r.p.Client.Stats(cctx)
				// Any answer in time shows the control connection lives;
				// an error from the plugin is still an answer.
				ok := err == nil || cctx.Err() == nil
				c()
				select {
				case answered <- ok:
				case <-ctx.Done():
				}
			}()
		}
		if d.Stalled != nil {
			e.killStalled(ps, r, d.Stalled)
			return
		}
	}
}

// killStalled kills a stalled run at once (SIGKILL: a stalled plugin
// would not honour a graceful stop) and leaves the rest to its watcher.
func (e *Engine) killStalled(ps *pluginState, r *pluginRun, v *stall.Verdict) {
	reason := v.String()
	r.stalled.Store(&reason)
	ps.stalls.Add(1)
	e.log.Error("plugin stalled; killing it", "plugin", ps.name, "pid", r.p.PID(), "reason", reason)
	if err := r.p.Abort(); err != nil {
		e.log.Warn("plugin did not take SIGKILL; stopping it the slow way", "plugin", ps.name, "error", err)
		r.p.Kill()
	}
}
