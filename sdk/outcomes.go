package sdk

import (
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk/ring"
)

// Outcomes counts what a transport reported for its descriptors, under the
// counter names every plugin exports: ops_completed (StatusOK), ops_failed
// (any other status) and ops_timed_out (StatusTimeout, counted in
// ops_failed too). A transport embeds it in its statistics, reports every
// outcome through Count, and starts its Submit with Admit.
type Outcomes struct {
	completed, failed, timedOut atomic.Uint64
}

// Count records one descriptor's outcome.
func (o *Outcomes) Count(st ring.Status) {
	if st == ring.StatusOK {
		o.completed.Add(1)
		return
	}
	o.failed.Add(1)
	if st == ring.StatusTimeout {
		o.timedOut.Add(1)
	}
}

// CountOK records n descriptors that completed with StatusOK: a run's
// successes counted once (kit.Run).
func (o *Outcomes) CountOK(n uint64) {
	if n > 0 {
		o.completed.Add(n)
	}
}

// Admit makes the checks every transport's Submit starts with: a stopped
// transport completes d with StatusShutdown, and Precheck's verdicts (a
// NOP, an unknown op, a zero length, a passed deadline) complete it at
// once, counted. It reports whether d still needs the transport.
func (o *Outcomes) Admit(d *ring.Descriptor, c Completer, stopped bool) bool {
	st, done := ring.StatusShutdown, stopped
	if !done {
		st, done = precheck(d, func() int64 { return Now(c) })
	}
	if done {
		o.Count(st)
		c.Complete(d.Token, st, 0)
	}
	return !done
}

// Export adds the counters to m.
func (o *Outcomes) Export(m map[string]uint64) {
	m["ops_completed"] = o.completed.Load()
	m["ops_failed"] = o.failed.Load()
	m["ops_timed_out"] = o.timedOut.Load()
}
