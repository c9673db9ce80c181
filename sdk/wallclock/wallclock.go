// Package wallclock reads the wall clock, in Unix nanoseconds (the unit
// of a descriptor's deadline), for a caller that reads it per request.
//
// time.Now reads two clocks, the wall clock and the monotonic one: two
// vDSO calls, and on a KVM guest whose clock source is kvm-clock each
// costs about 25 ns. Now reads the monotonic clock alone and adds it to
// an anchor, a reading of both taken at most Every ago. A step of the
// wall clock (settimeofday, an NTP step) reaches Now within Every; NTP's
// slewing moves both clocks alike.
package wallclock

import (
	"sync/atomic"
	"time"
)

// Every is how often Now reads the wall clock again.
const Every = 100 * time.Millisecond

// anchored is a wall clock reading and the monotonic one taken with it
// (nanoseconds since epoch).
type anchored struct{ unix, mono int64 }

var (
	epoch  = time.Now()
	anchor atomic.Pointer[anchored]
)

// Now returns the wall clock in Unix nanoseconds, from the monotonic
// clock and an anchor at most Every old.
func Now() int64 {
	m := int64(time.Since(epoch))
	a := anchor.Load()
	if a == nil || m-a.mono >= int64(Every) {
		return reanchor()
	}
	return a.unix + (m - a.mono)
}

// reanchor reads both clocks, publishes them as Now's anchor and returns
// the wall clock's reading. Goroutines that race here each publish their
// own, all but equally fresh. time.Now reads the wall clock and then the
// monotonic one: a thread descheduled between the two (a vCPU's steal)
// would pair a wall reading with a later monotonic one, and every Now
// would run that much behind until the next anchor. So the monotonic
// clock is read around it too, and a reading that took longer than
// anchorSkew is used for this call only.
func reanchor() int64 {
	before := time.Since(epoch)
	t := time.Now()
	if time.Since(epoch)-before > anchorSkew {
		return t.UnixNano()
	}
	a := &anchored{unix: t.UnixNano(), mono: int64(t.Sub(epoch))}
	anchor.Store(a)
	return a.unix
}

// anchorSkew is the longest reading of both clocks an anchor is taken
// from: an anchor is off by at most about this much.
const anchorSkew = 20 * time.Microsecond
