//go:build linux

package sdk

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

func lowerThread(nice int) (func(), error) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	// The system call answers 20 - nice (1 to 40), so that no answer
	// looks like an error.
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return runtime.UnlockOSThread, fmt.Errorf("bulk thread %d: getpriority: %w", tid, err)
	}
	old := 20 - raw
	if old >= nice {
		return runtime.UnlockOSThread, nil
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		return runtime.UnlockOSThread, fmt.Errorf("bulk thread %d: setpriority to nice %d: %w", tid, nice, err)
	}
	restoreSlice := setSlice(tid, uint64(BulkSlice))
	addProc(1)
	return func() {
		addProc(-1)
		restoreSlice()
		if unix.Setpriority(unix.PRIO_PROCESS, tid, old) == nil {
			runtime.UnlockOSThread()
		}
		// Refused (no CAP_SYS_NICE): the thread stays locked and ends
		// with its goroutine.
	}, nil
}

// setSlice asks the kernel for a scheduler slice of d for thread tid and
// returns what puts the old one back. A thread under another policy than
// SCHED_NORMAL or SCHED_BATCH (an operator's real-time setting), or a
// kernel that refuses, is left as it is.
func setSlice(tid int, d uint64) (restore func()) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil || (a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH) || a.Runtime == d {
		return func() {}
	}
	old := a.Runtime
	a.Size, a.Flags, a.Runtime = unix.SizeofSchedAttr, 0, d
	if unix.SchedSetAttr(tid, a, 0) != nil {
		return func() {}
	}
	return func() {
		a.Runtime = old
		_ = unix.SchedSetAttr(tid, a, 0)
	}
}

func latencyThread() func() {
	runtime.LockOSThread()
	restoreSlice := setSlice(unix.Gettid(), uint64(LatencySlice))
	addProc(1)
	return func() {
		addProc(-1)
		restoreSlice()
		runtime.UnlockOSThread()
	}
}
