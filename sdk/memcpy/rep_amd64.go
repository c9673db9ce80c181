package memcpy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// repMovsb copies n bytes forward from src to dst with REP MOVSB. The
// ranges must not overlap with dst above src.
//
//go:noescape
func repMovsb(dst, src unsafe.Pointer, n uintptr)

// cpuid7EDX returns EDX of CPUID leaf 7, subleaf 0. Call it only where
// leaf 7 exists (cpu.X86.HasERMS says so: that flag is in leaf 7 too).
func cpuid7EDX() uint32

// fsrmBit is FSRM (fast short REP MOV) in CPUID leaf 7's EDX.
const fsrmBit = 1 << 4

// repFast says whether the CPU's REP MOVSB is the fast kind: ERMS
// (enhanced REP MOVSB) and FSRM (fast short REP MOV), which recent Intel
// and AMD server CPUs report (this package was measured on a Zen 5
// guest that does). CPUs with ERMS alone are left to memmove, whose AVX
// loop was not measured against their REP MOVSB.
func repFast() bool { return cpu.X86.HasERMS && cpuid7EDX()&fsrmBit != 0 }

// repCopy copies min(len(dst), len(src)) bytes with REP MOVSB; the
// ranges must not overlap.
func repCopy(dst, src []byte) {
	n := min(len(dst), len(src))
	if n == 0 {
		return
	}
	raceCopy(dst[:n], src[:n])
	repMovsb(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uintptr(n))
}
