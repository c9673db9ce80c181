//go:build (amd64 || arm64) && !race

package ring

import "sync/atomic"

// storeRelease stores v at p with release ordering and no more (amd64:
// a plain MOV, which TSO orders after the stores before it; arm64:
// STLR), where atomic.Uint64.Store is sequentially consistent (amd64:
// XCHG, a full barrier). In assembly so that the compiler neither
// reorders nor elides it.
//
//go:noescape
func storeRelease(p *atomic.Uint64, v uint64)
