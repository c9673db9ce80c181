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
	addProc(1)
	return func() {
		addProc(-1)
		if unix.Setpriority(unix.PRIO_PROCESS, tid, old) == nil {
			runtime.UnlockOSThread()
		}
		// Refused (no CAP_SYS_NICE): the thread stays locked and ends
		// with its goroutine.
	}, nil
}
