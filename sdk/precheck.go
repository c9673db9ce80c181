package sdk

import (
	"github.com/ferrydev/ferry/sdk/ring"
)

// Precheck is what every transport's Submit decides before it looks at
// regions or peers: a NOP completes at once (StatusOK), an unknown op or a
// zero length is StatusInvalid, a descriptor whose deadline (unix ns) is at
// or before now is StatusTimeout. It reports done=true with the status to
// complete with, or done=false when the transport should go on. The SDK's
// lane already rejects malformed descriptors; Precheck keeps a transport
// safe when it is driven directly (in-process tests, wrappers).
func Precheck(d *ring.Descriptor, now int64) (st ring.Status, done bool) {
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
	if d.Deadline != 0 && now >= d.Deadline {
		return ring.StatusTimeout, true
	}
	return ring.StatusOK, false
}
