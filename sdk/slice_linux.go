//go:build linux

package sdk

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// requestSlice asks the kernel for a scheduler slice of d for each thread
// of this process whose policy is SCHED_NORMAL or SCHED_BATCH; threads
// the runtime starts later inherit it from the thread that starts them.
// Other policies (an operator's real-time setting) and nice values are
// left as they are. Kernels before 6.12 (no EEVDF custom slices) ignore
// the request. It returns the first error, after trying every thread.
func requestSlice(d time.Duration) error {
	attrs.Lock()
	defer attrs.Unlock()
	attrs.asked++
	attrs.slice = uint64(d)
	// A thread started during the walk by one not yet visited inherits
	// the old slice: list the threads again until a listing shows none
	// unvisited (a few rounds at most: the runtime starts threads rarely).
	seen := make(map[int]bool)
	var first error
	for round := 0; round < 8; round++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || seen[tid] {
				continue
			}
			seen[tid], fresh = true, true
			if _, held := attrs.held[tid]; held {
				continue // a slice of its own until its hold ends (attrs.own)
			}
			if err := setSlice(tid, uint64(d)); err != nil && first == nil {
				first = err
			}
		}
		if !fresh {
			break
		}
	}
	return first
}
