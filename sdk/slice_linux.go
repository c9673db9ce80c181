//go:build linux

package sdk

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// requestSlice asks the kernel for a scheduler slice of d for each thread
// of this process whose policy is SCHED_NORMAL or SCHED_BATCH; threads
// the runtime starts later inherit it from the thread that starts them.
// Other policies (an operator's real-time setting) and nice values are
// left as they are. Kernels before 6.12 (no EEVDF custom slices) ignore
// the request. It returns the first error, after trying every thread.
func requestSlice(d time.Duration) error {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("list threads: %w", err)
	}
	var first error
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			if !errors.Is(err, unix.ESRCH) && first == nil { // ESRCH: the thread is gone
				first = fmt.Errorf("thread %d: sched_getattr: %w", tid, err)
			}
			continue
		}
		if a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH {
			continue
		}
		a.Size = unix.SizeofSchedAttr
		a.Flags = 0
		a.Runtime = uint64(d)
		if err := unix.SchedSetAttr(tid, a, 0); err != nil && !errors.Is(err, unix.ESRCH) && first == nil {
			first = fmt.Errorf("thread %d: sched_setattr: %w", tid, err)
		}
	}
	return first
}
