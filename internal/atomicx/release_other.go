//go:build (!amd64 && !arm64) || race

package atomicx

import "sync/atomic"

// StoreRelease32 is a sequentially consistent store here: on other
// architectures, and under the race detector (see the package doc).
func StoreRelease32(p *atomic.Uint32, v uint32) { p.Store(v) }

// StoreRelease64 is StoreRelease32 for a 64-bit word.
func StoreRelease64(p *atomic.Uint64, v uint64) { p.Store(v) }

// fenceWord is what Fence adds to.
var fenceWord atomic.Uint32

// Fence is an atomic add here, a full barrier in Go's memory model.
func Fence() { fenceWord.Add(1) }
