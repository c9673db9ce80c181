package ring

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations. x/sys/unix exports SYS_FUTEX but not these. They are
// used without FUTEX_PRIVATE_FLAG on purpose: the word lives in memory
// shared between processes, so the kernel must key it by (inode, offset),
// not by this process's address space.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *word == val, for at most d, or with no time
// bound when d is Forever. Every outcome (woken, timeout, *word != val,
// signal) returns; the caller re-checks its condition.
func futexWait(word *atomic.Uint32, val uint32, d time.Duration) {
	var errno unix.Errno
	if d == Forever {
		_, _, errno = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val), 0, 0, 0)
	} else {
		ts := unix.NsecToTimespec(int64(d))
		_, _, errno = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val),
			uintptr(unsafe.Pointer(&ts)), 0, 0)
	}
	switch errno {
	case 0, unix.EAGAIN, unix.ETIMEDOUT, unix.EINTR:
	default:
		// The kernel refused the futex (a seccomp filter, say): keep the
		// time bound without burning the CPU; callers re-check anyway.
		time.Sleep(min(d, time.Millisecond))
	}
}

// futexWake wakes up to n waiters on word.
func futexWake(word *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakeOp, uintptr(n), 0, 0, 0)
}
