//go:build linux && (amd64 || arm64)

package ring

import (
	_ "unsafe" // go:linkname
)

// blockingSyscall6 is unix.Syscall6 for a system call expected to block
// (a long futex sleep): the goroutine's P is handed to the scheduler as
// the call begins, as the runtime does for its own blocking calls, rather
// than left in the call for the runtime's monitor thread to take
// (Ring.SetSleepHandoff says why that matters). It is written in
// assembly for each architecture (blocking_linux_amd64.s,
// blocking_linux_arm64.s); the arm64 one was run under qemu-aarch64
// (user mode) only.
//
//go:noescape
func blockingSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2, errno uintptr)

// The runtime exports these two for such calls (go.dev/issue/67401);
// gVisor's netstack makes its blocking ppoll the same way.
//
//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// The forwarders are called from blockingSyscall6's assembly, whose frame
// cannot be grown or moved, and run between entersyscallblock and
// exitsyscall, where the goroutine must not be preempted: nosplit.

//go:nosplit
func callEntersyscallblock() { entersyscallblock() }

//go:nosplit
func callExitsyscall() { exitsyscall() }
