package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/stall"
)

// supervise watches run r of p until the run ends or the set quits:
// every Stall.Interval it feeds the run's lane counters to a
// stall.Detector (unless stall detection is off) and its completion
// contract violations to the Contract's window, and carries out what
// they decide. A stalled or faulty run is killed; its watcher then has
// its tasks failed and restarts it as after any exit. Violations are
// logged here, at most once a look: that is their rate limit. While the
// run has nothing in flight and nothing is being judged it stops looking
// (rest) until its lanes get work or a violation: an idle engine pays no
// tick.
func (s *Set) supervise(p *Plugin, r *Run) {
	defer s.wg.Done()
	sv := s.cfg.Stall
	det := stall.New(stall.Config{After: sv.After, ProbeTimeout: sv.ProbeTimeout}, len(r.Lanes))
	win := contractWindow{rule: s.cfg.Contract}
	var logged progress.Violations
	tick := time.NewTicker(sv.Interval)
	defer tick.Stop()

	// At most one control call is out at a time; it ends within the
	// probe timeout, or at once when this goroutine returns.
	ctx, cancel := context.WithCancel(context.Background())
	var call sync.WaitGroup
	defer func() { cancel(); call.Wait() }()
	answered := make(chan bool, 1)
	calling := false

	obs := make([]stall.Lane, len(r.Lanes))
	for {
		select {
		case <-tick.C:
		case ok := <-answered:
			calling = false
			det.ControlAnswered(ok)
			continue
		case <-r.Proc.Exited():
			return
		case <-s.quit:
			return
		}
		if err := ringErr(r.Lanes); err != nil {
			s.killBroken(p, r, err)
			return
		}
		if v := violations(r.Lanes); v != logged {
			now := time.Now()
			in, faulty := win.observe(now, v.Total())
			s.log.Warn("plugin broke the completion contract; its completions were dropped", "plugin", p.name,
				"pid", r.Proc.PID(), "unknown_tokens", v.Unknown-logged.Unknown, "duplicates", v.Duplicate-logged.Duplicate,
				"overlong", v.Overlong-logged.Overlong, "run_total", v.Total(), "within_window", in)
			logged = v
			if faulty {
				s.killFaulty(p, r, in)
				return
			}
		} else if logged.Total() > 0 {
			win.observe(time.Now(), v.Total())
		}
		if v := s.overdue(p); v != nil {
			p.stalls.Add(1)
			s.kill(p, r, "plugin holds slices of ended tasks past the grace period; killing it", v.String())
			return
		}
		if !sv.Off {
			for i, l := range r.Lanes {
				obs[i] = stall.Lane{InFlight: l.InFlight(), Completed: l.Completed(), ProbeSent: l.ProbeSent(), ProbeAck: l.ProbeAck()}
			}
			d := det.Observe(time.Now(), obs)
			for _, pr := range d.Probes {
				r.Lanes[pr.Lane].Probe(pr.Seq) // refused now, asked again at the next look
			}
			if d.CheckControl && !calling {
				calling = true
				call.Add(1)
				go func() {
					defer call.Done()
					cctx, c := context.WithTimeout(ctx, sv.ProbeTimeout)
					_, err := r.Proc.Client.Stats(cctx)
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
				s.killStalled(p, r, d.Stalled)
				return
			}
		}
		if !calling && !det.Probing() && s.idle(r, logged) && !s.rest(r, logged, tick) {
			return
		}
	}
}

// idle reports whether run r gives its supervisor nothing to look at:
// nothing in flight on its lanes, no violation since logged, and no task
// held past its end by any plugin (held slices are in flight on some
// lane, whose supervisor looks at them).
func (s *Set) idle(r *Run, logged progress.Violations) bool {
	if s.cfg.EndGrace > 0 && s.cfg.Tracker != nil && s.cfg.Tracker.Held() != 0 {
		return false
	}
	for _, l := range r.Lanes {
		if l.InFlight() > 0 || l.RingErr() != nil {
			return false
		}
	}
	return violations(r.Lanes) == logged
}

// ringErr returns the first error of a ring a run's plugin broke.
func ringErr(lanes []*progress.Lane) error {
	for _, l := range lanes {
		if err := l.RingErr(); err != nil {
			return err
		}
	}
	return nil
}

// rest stops the ticks of an idle run's supervisor until work goes in
// flight on one of its lanes or a completion breaks the contract (the
// lanes' Watch), and restarts them: the next look comes an interval
// later, as it would have. It reports false when the run exited or the
// set quit meanwhile. The lanes are watched before they are looked at
// again, so work that came since the last look is not slept through.
func (s *Set) rest(r *Run, logged progress.Violations, tick *time.Ticker) bool {
	wake := make(chan struct{}, 1)
	for _, l := range r.Lanes {
		l.Watch(wake)
	}
	defer func() {
		for _, l := range r.Lanes {
			l.Unwatch()
		}
	}()
	if !s.idle(r, logged) {
		return true
	}
	tick.Stop()
	defer tick.Reset(s.cfg.Stall.Interval)
	select {
	case <-wake:
		return true
	case <-r.Proc.Exited():
		return false
	case <-s.quit:
		return false
	}
}

// overdue asks host/stall whether p's run has held slices of ended tasks
// for the grace period; nil when not (or when no grace is set).
func (s *Set) overdue(p *Plugin) *stall.HeldVerdict {
	if s.cfg.EndGrace <= 0 || s.cfg.Tracker == nil || s.cfg.Tracker.Held() == 0 {
		return nil
	}
	n, since := s.cfg.Tracker.HeldBy(int32(p.index))
	return stall.Overdue(time.Now(), stall.Held{Tasks: n, Since: time.Unix(0, since)}, s.cfg.EndGrace)
}

// killFaulty kills a run that broke the completion contract n times
// within the rule's window, as killStalled does a stalled one.
func (s *Set) killFaulty(p *Plugin, r *Run, n uint64) {
	reason := fmt.Sprintf("faulty: it broke the completion contract %d times within %s (tokens naming no slice sent, duplicates, over-long byte counts; supervise { contract_violations = %d, contract_window = %q }): fix the plugin's completions, or raise contract_violations",
		n, s.cfg.Contract.Within, s.cfg.Contract.Violations, s.cfg.Contract.Within.String())
	p.faulty.Add(1)
	s.kill(p, r, "plugin is faulty; killing it", reason)
}

// killBroken kills a run whose plugin wrote an impossible index into a
// ring it shares with the engine (progress.Lane.RingErr): the lane is
// down and nothing on it can complete; its tasks fail over.
func (s *Set) killBroken(p *Plugin, r *Run, err error) {
	p.faulty.Add(1)
	s.kill(p, r, "plugin broke a ring it shares with the engine; killing it",
		fmt.Sprintf("faulty: %v (an index no correct plugin writes: a bug in the plugin or its SDK; report it to its vendor)", err))
}

// killStalled kills a stalled run at once (SIGKILL: a stalled plugin
// would not honour a graceful stop) and leaves the rest to its watcher.
func (s *Set) killStalled(p *Plugin, r *Run, v *stall.Verdict) {
	p.stalls.Add(1)
	s.kill(p, r, "plugin stalled; killing it", v.String())
}

// kill records reason as why run r ended (its watcher reports it) and
// kills the run's process at once, logging msg.
func (s *Set) kill(p *Plugin, r *Run, msg, reason string) {
	r.stalled.Store(&reason)
	s.log.Error(msg, "plugin", p.name, "pid", r.Proc.PID(), "reason", reason)
	if err := r.Proc.Abort(); err != nil {
		s.log.Warn("plugin did not take SIGKILL; stopping it the slow way", "plugin", p.name, "error", err)
		r.Proc.Kill()
	}
}
