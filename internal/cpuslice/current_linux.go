package cpuslice

import (
	"time"

	"golang.org/x/sys/unix"
)

// Current is the calling thread's slice as the kernel reports it: its
// default for a thread that asked none, 0 on a kernel without custom
// slices.
func Current() (time.Duration, error) {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return 0, err
	}
	return time.Duration(a.Runtime), nil
}
