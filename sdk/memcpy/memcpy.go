package memcpy

import (
	"runtime"
	"sync"
	"unsafe"
)

// ntFrom is the size from which runtime.memmove on amd64 copies with
// non-temporal stores (its AVX path; runtime/memmove_amd64.s). Go's other
// architectures have no such path: there Copy is copy.
const ntFrom = 1 << 20

// piece is the size Copy cuts a cached copy into: under ntFrom, and a
// multiple of the page so that every piece's destination keeps the first
// one's alignment (memmove's REP MOVS path wants it 16-byte aligned).
const piece = ntFrom - 4096

// repFrom is the size from which a copy that stays in the cache is one
// REP MOVSB where the CPU's is fast (useRep). On an AMD EPYC (Zen 5)
// guest it beat memmove's AVX loop from 24 KiB, about even at 16 KiB and
// a little behind at 4 KiB, where memmove stays (BenchmarkInterleaved,
// 2026-12-06, doc.go).
const repFrom = 32 << 10

// useRep says whether cached copies from repFrom up use REP MOVSB
// (repFast). A variable so that the tests take both paths.
var useRep = repFast()

// defaultLLC is the last-level cache assumed where its size cannot be
// read: small enough that a copy Copy keeps in cache fits in any server
// CPU's.
const defaultLLC = 16 << 20

// maxCached bounds CachedMax whatever the cache reports. A VM reports its
// host's whole last-level cache (480 MiB on the Xeon guest Ferry is
// measured on), which its vCPUs share with every other guest: there a
// 64 MiB copy gained nothing from cached stores over non-temporal ones,
// while 4 to 16 MiB copies on memmove's AVX path ran twice as fast
// (BenchmarkInterleaved). Above
// it, copies stay as memmove makes them.
const maxCached = 32 << 20

// Copy copies min(len(dst), len(src)) bytes from src to dst and returns
// that count, as copy does. A copy of up to CachedMax bytes leaves dst in
// the cache; a larger one uses memmove's non-temporal stores. Overlapping
// ranges are allowed (they are copied by copy itself).
func Copy(dst, src []byte) int { return Piece(dst, src, min(len(dst), len(src))) }

// Piece copies one piece of a copy of whole bytes that the caller split
// over several goroutines, as Copy would copy it: whether its stores stay
// in the cache is decided by whole, the bytes all pieces put there
// together, not by the piece's own length.
func Piece(dst, src []byte, whole int) int {
	if min(len(dst), len(src)) < repFrom { // the data path's small copies: no more than copy
		return copy(dst, src)
	}
	return copyIn(dst, src, whole, CachedMax())
}

// Routine says how Copy copies on this machine (for diagnostics: ferry
// doctor).
type Routine struct {
	// CachedMax is CachedMax(): copies up to it stay in the cache,
	// larger ones use memmove's non-temporal stores. 0: Copy is copy.
	CachedMax int
	// Rep says that cached copies of RepFrom bytes or more are one REP
	// MOVSB (the CPU reports ERMS and FSRM); else they are memmove's, in
	// pieces under 1 MiB.
	Rep     bool
	RepFrom int
}

// Current returns how Copy copies here.
func Current() Routine {
	max := CachedMax()
	return Routine{CachedMax: max, Rep: useRep && max > 0, RepFrom: repFrom}
}

// CachedMax is the largest copy Copy keeps in the cache: half the
// last-level cache, as the source passes through it too, and at most
// maxCached. It is read once; 0 on architectures where Copy is copy.
func CachedMax() int {
	if runtime.GOARCH != "amd64" {
		return 0
	}
	return cachedMax()
}

var cachedMax = sync.OnceValue(func() int {
	llc := lastLevelCache()
	if llc <= 0 {
		llc = defaultLLC
	}
	return min(llc/2, maxCached)
})

// copyIn copies dst and src as Copy does for a copy of whole bytes and a
// cache bound of max.
func copyIn(dst, src []byte, whole, max int) int {
	n := min(len(dst), len(src))
	if runtime.GOARCH != "amd64" || whole > max || overlap(dst, src, n) {
		return copy(dst, src)
	}
	switch {
	case useRep && n >= repFrom:
		repCopy(dst[:n:n], src[:n:n])
		return n
	case n < ntFrom:
		return copy(dst, src)
	}
	return chunked(dst[:n:n], src[:n:n], piece)
}

// chunked copies len(dst) == len(src) bytes forward in pieces of at most
// size bytes. Forward is why overlapping ranges must not come here.
func chunked(dst, src []byte, size int) int {
	n := len(dst)
	for off := 0; off < n; off += size {
		end := min(off+size, n)
		copy(dst[off:end:end], src[off:end:end])
	}
	return n
}

// overlap reports whether the first n bytes of a and b share memory.
func overlap(a, b []byte, n int) bool {
	if n == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(n) && pb < pa+uintptr(n)
}
