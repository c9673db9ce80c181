//go:build amd64 || arm64

package ring

import "unsafe"

// prefetchWrite asks for the cache line at p for writing (amd64:
// PREFETCHW; arm64: PRFM PSTL1KEEP): a hint that does not wait for the
// line, fault or change memory.
//
//go:noescape
func prefetchWrite(p unsafe.Pointer)
