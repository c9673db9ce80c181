//go:build !(linux && (amd64 || arm64))

package ring

import "golang.org/x/sys/unix"

// blockingSyscall6 is unix.Syscall6 here: the P is left in the call for
// the runtime to take (Ring.SetSleepHandoff does nothing).
func blockingSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2, errno uintptr) {
	r1, r2, e := unix.Syscall6(trap, a1, a2, a3, a4, a5, a6)
	return r1, r2, uintptr(e)
}
