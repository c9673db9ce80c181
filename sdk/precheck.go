package sdk

import (
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// Precheck is what every transport's Submit decides before it looks at
// regions or peers: a NOP completes at once (StatusOK), an unknown op or a
// zero length is StatusInvalid, a descriptor whose deadline (unix ns) has
// passed is StatusTimeout. It reports done=true with the status to
// complete with, or done=false when the transport should go on. The SDK's
// lane already rejects malformed descriptors; Precheck keeps a transport
// safe when it is driven directly (in-process tests, wrappers).
// The clock is read only for a descriptor that has a deadline.
func Precheck(d *ring.Descriptor) (st ring.Status, done bool) {
	return precheck(d, wallNanos)
}

func wallNanos() int64 { return time.Now().UnixNano() }

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
