package sdk

import (
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/wallclock"
)

// Precheck is what every transport's Submit decides before it looks at
// regions or peers: a NOP completes at once (StatusOK), an unknown op or a
// zero length is StatusInvalid, a descriptor whose deadline (unix ns) has
// passed is StatusTimeout. It reports done=true with the status to
// complete with, or done=false when the transport should go on. The SDK's
// lane already rejects malformed descriptors; Precheck keeps a transport
// safe when it is driven directly (in-process tests, wrappers).
// The clock is read only for a descriptor that has a deadline; Admit
// reads it through Now.
func Precheck(d *ring.Descriptor) (st ring.Status, done bool) {
	return precheck(d, wallNanos)
}

func wallNanos() int64 { return wallclock.Now() }

// runClock is implemented by the SDK's lane, the Completer a transport's
// Submit is handed.
type runClock interface{ runNow() int64 }

// Now returns the time (unix ns) to check the deadline of a descriptor
// that completes through c against: when c is the SDK's lane and the
// descriptor's run is being handed to the transport, the time the run was
// dequeued, read once for the run; otherwise the wall clock. A deadline
// check against it is late by at most the time the lane takes to hand
// one run of descriptors to the transport; reading the clock for every
// descriptor instead cost more than a 4 KiB copy on some machines, and
// since transfer.default_deadline every descriptor has a deadline.
func Now(c Completer) int64 {
	if rc, ok := c.(runClock); ok {
		if n := rc.runNow(); n != 0 {
			return n
		}
	}
	return wallNanos()
}

func precheck(d *ring.Descriptor, now func() int64) (st ring.Status, done bool) {
	switch d.Op {
	case ring.OpNop:
		return ring.StatusOK, true
	case ring.OpWrite, ring.OpRead:
	default:
		return ring.StatusInvalid, true
	}
	if d.Length == 0 {
		return ring.StatusInvalid, true
	}
	if d.Deadline != 0 && now() >= d.Deadline {
		return ring.StatusTimeout, true
	}
	return ring.StatusOK, false
}
