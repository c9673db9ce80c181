//go:build (amd64 || arm64) && !race

package atomicx

import "sync/atomic"

// StoreRelease32 stores v at p with release ordering: every load and
// store before it in program order is visible to another thread before
// it is (amd64: a plain MOV, which TSO orders so; arm64: STLRW). It is
// not ordered before later loads: pair it with Fence where it must be.
//
//go:noescape
func StoreRelease32(p *atomic.Uint32, v uint32)

// StoreRelease64 is StoreRelease32 for a 64-bit word (arm64: STLR).
//
//go:noescape
func StoreRelease64(p *atomic.Uint64, v uint64)

// Fence is a full barrier: every load and store before it is ordered
// before every load and store after it (amd64: a locked OR of zero on
// the stack, as the kernel's smp_mb; arm64: DMB ISH).
func Fence()
