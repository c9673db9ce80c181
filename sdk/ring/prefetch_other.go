//go:build !amd64 && !arm64

package ring

import "unsafe"

// prefetchWrite does nothing where the ring has no prefetch instruction
// for it.
func prefetchWrite(unsafe.Pointer) {}
