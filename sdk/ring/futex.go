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
//
// With handoff, a sleep that lasts past handoffAfter goes on as a
// blocking call (blockingSyscall6), which hands the goroutine's P to the
// scheduler: see Ring.SetSleepHandoff.
func futexWait(word *atomic.Uint32, val uint32, d time.Duration, handoff bool) {
	first := d
	if handoff && d > handoffAfter {
		first = handoffAfter
	}
	// tsp is the call's timeout: nil, no bound, for Forever.
	var ts unix.Timespec
	var tsp *unix.Timespec
	if first != Forever {
		ts, tsp = unix.NsecToTimespec(int64(first)), &ts
	}
	_, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(tsp)), 0, 0)
	if errno == unix.ETIMEDOUT && first != d {
		tsp = nil
		if d != Forever {
			ts, tsp = unix.NsecToTimespec(int64(d-first)), &ts
		}
		_, _, e := blockingSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val),
			uintptr(unsafe.Pointer(tsp)), 0, 0)
		errno = unix.Errno(e)
	}
	switch errno {
	case 0, unix.EAGAIN, unix.ETIMEDOUT, unix.EINTR:
	default:
		// The kernel refused the futex (a seccomp filter, say): keep the
		// time bound without burning the CPU; callers re-check anyway.
		time.Sleep(min(d, time.Millisecond))
	}
}

// handoffAfter is how long a sleep with handoff keeps its goroutine's P
// (futexWait): one that a completion ends sooner (a waiter's) is woken
// where it slept. Handing the P over at once at every sleep woke a thread
// to take it, a context switch each way.
var handoffAfter = 50 * time.Microsecond // a variable for the tests

// futexWake wakes up to n waiters on word.
func futexWake(word *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakeOp, uintptr(n), 0, 0, 0)
}
