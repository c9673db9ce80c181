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
// own, all but equally fresh.
func reanchor() int64 {
	t := time.Now()
	a := &anchored{unix: t.UnixNano(), mono: int64(t.Sub(epoch))}
	anchor.Store(a)
	return a.unix
}
