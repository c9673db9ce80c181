//go:build (!amd64 && !arm64) || race

package ring

import "sync/atomic"

// storeRelease is a sequentially consistent store where the ring has no
// release store of its own, and under the race detector, which sees the
// atomic store as the synchronisation it is (it cannot see assembly's).
func storeRelease(p *atomic.Uint64, v uint64) { p.Store(v) }
