package stall

import (
	"fmt"
	"strings"
	"time"
)

// Config is how patient a Detector is.
type Config struct {
	// After is how long a lane may hold outstanding descriptors without a
	// completion before it is probed.
	After time.Duration
	// ProbeTimeout is how long a probe may go unanswered before the
	// plugin is declared stalled.
	ProbeTimeout time.Duration
}

// Lane is what the supervisor sees of one lane at one instant.
type Lane struct {
	InFlight  int64  // descriptors submitted and not completed
	Completed uint64 // completions reaped so far; only ever grows
	ProbeSent uint64 // number of the latest probe put on the lane's ring
	ProbeAck  uint64 // number of the latest probe the lane answered
}

// Probe asks for a NOP with probe number Seq on lane Lane.
type Probe struct {
	Lane int
	Seq  uint64
}

// Decision is what the supervisor is to do after an observation.
type Decision struct {
	// Probes are NOPs to put on lanes: new ones, and ones that could not
	// be put on the ring yet (Lane.ProbeSent is behind).
	Probes []Probe
	// CheckControl asks for one call on the plugin's control connection,
	// bounded by ProbeTimeout; report it with ControlAnswered.
	CheckControl bool
	// Stalled is set when the plugin is stalled: kill it.
	Stalled *Verdict
}

// Verdict says why a plugin was found stalled.
type Verdict struct {
	Lane        int           // the lane that stopped
	Idle        time.Duration // since its last completion (or since work arrived)
	Outstanding int64         // descriptors it holds
	NOP         bool          // the NOP on Lane went unanswered
	Control     bool          // the control call went unanswered
	Waited      time.Duration // how long the probes had
}

// String is the reason operators see: in the plugin's status and logs.
func (v *Verdict) String() string {
	var what []string
	if v.NOP {
		what = append(what, fmt.Sprintf("NOP on lane %d", v.Lane))
	}
	if v.Control {
		what = append(what, "control call")
	}
	return fmt.Sprintf("stalled: no completion for %s with %d descriptors outstanding; liveness probe unanswered (%s, for %s)",
		v.Idle.Round(100*time.Millisecond), v.Outstanding, strings.Join(what, " and "), v.Waited.Round(time.Millisecond))
}

type controlState uint8

const (
	controlPending controlState = iota
	controlAnswered
	controlSilent
)

// laneState is what the detector remembers of a lane.
type laneState struct {
	seen      bool
	busy      bool // it held descriptors at the last look
	completed uint64
	since     time.Time // of its last completion, or when work arrived
}

// round is one probe of the plugin: NOPs on the suspect lanes and one
// control call, all started at at.
type round struct {
	at      time.Time
	probes  []Probe
	control controlState
}

// Detector decides whether one run of a plugin is stalled. Not safe for
// concurrent use: one supervisor goroutine owns it.
type Detector struct {
	cfg   Config
	lanes []laneState
	seq   uint64
	round *round
}

// New returns a detector for a plugin run with the given number of lanes.
func New(cfg Config, lanes int) *Detector {
	return &Detector{cfg: cfg, lanes: make([]laneState, lanes)}
}

// ControlAnswered reports the end of the control call a Decision asked
// for: answered says whether the plugin answered it (with anything) within
// ProbeTimeout.
func (d *Detector) ControlAnswered(answered bool) {
	if d.round == nil || d.round.control != controlPending {
		return
	}
	if answered {
		d.round.control = controlAnswered
	} else {
		d.round.control = controlSilent
	}
}

// Probing reports whether a probe round is out.
func (d *Detector) Probing() bool { return d.round != nil }

// Observe takes what the lanes show at now (one entry per lane, in the
// order given to New) and says what to do.
func (d *Detector) Observe(now time.Time, lanes []Lane) Decision {
	for i, o := range lanes {
		l := &d.lanes[i]
		// Work that arrived since the last look starts the clock now:
		// an idle lane owes nothing.
		if !l.seen || !l.busy || o.Completed != l.completed {
			l.since = now
		}
		l.seen, l.busy, l.completed = true, o.InFlight > 0, o.Completed

	}
	if d.round != nil {
		return d.judge(now, lanes)
	}
	var probes []Probe
	for i, o := range lanes {
		if o.InFlight > 0 && now.Sub(d.lanes[i].since) >= d.cfg.After {
			d.seq++
			probes = append(probes, Probe{Lane: i, Seq: d.seq})
		}
	}
	if len(probes) == 0 {
		return Decision{}
	}
	d.round = &round{at: now, probes: probes}
	return Decision{Probes: probes, CheckControl: true}
}

// judge looks at the round in flight: over when every probed lane
// completed something since it began, or answered its NOP while the
// control call was answered; stalled when ProbeTimeout passed first.
func (d *Detector) judge(now time.Time, lanes []Lane) Decision {
	r := d.round
	var resend []Probe
	nopLane := -1     // the first probed lane whose NOP is unanswered
	controlLane := -1 // the first that answered its NOP but waits on the control call
	for _, p := range r.probes {
		if d.lanes[p.Lane].since.After(r.at) {
			continue // it completed work: alive, whatever the probes say
		}
		o := lanes[p.Lane]
		if o.ProbeAck >= p.Seq {
			if r.control != controlAnswered && controlLane < 0 {
				controlLane = p.Lane
			}
			continue
		}
		if nopLane < 0 {
			nopLane = p.Lane
		}
		if o.ProbeSent < p.Seq {
			resend = append(resend, p)
		}
	}
	if nopLane < 0 && controlLane < 0 {
		// Alive. Start the clock again so that a plugin that is slow
		// but alive is probed once per After, not at every look.
		for _, p := range r.probes {
			d.lanes[p.Lane].since = now
		}
		d.round = nil
		return Decision{}
	}
	if now.Sub(r.at) < d.cfg.ProbeTimeout {
		return Decision{Probes: resend}
	}
	v := &Verdict{Lane: nopLane, NOP: nopLane >= 0, Control: r.control != controlAnswered, Waited: now.Sub(r.at)}
	if nopLane < 0 {
		v.Lane = controlLane
	}
	v.Idle = now.Sub(d.lanes[v.Lane].since)
	v.Outstanding = lanes[v.Lane].InFlight
	return Decision{Stalled: v}
}
