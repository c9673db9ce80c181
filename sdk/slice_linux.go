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

// pluginSlice is the scheduler slice a plugin process asks for its
// threads (ServeTransport).
//
// Measured on a two-vCPU VM with `ferry bench --transport tcp --op write
// --size 4KiB`, where the host's waiter spins on one CPU while the two TCP
// plugins take turns on the other: with the kernel's default slice the
// latency ratio against raw TCP was 1.92 and 2.24 (medians of 6 and 7
// runs, up to 2.90), with 20 ms 1.37 and 1.37 (every run at most 1.64).
// Why, exactly, is not established; a longer slice gives a plugin thread a
// later virtual deadline under EEVDF, so a plugin thread that wakes does
// not preempt a spinning waiter whose next step it is waiting for, and
// one that runs finishes its burst.
const pluginSlice = 20 * time.Millisecond

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
