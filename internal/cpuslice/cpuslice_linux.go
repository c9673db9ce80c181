package cpuslice

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Scheduling classes sched_getattr reports (linux/sched.h).
const (
	schedNormal = 0 // SCHED_OTHER
	schedBatch  = 3
	// schedFlagResetOnFork is the one flag a thread keeps across Hold.
	schedFlagResetOnFork = 0x01
)

// apply sets slice d on every fair-class thread of the process whose
// slice is longer. A thread started during the walk by one not yet set
// would miss it, so the walk repeats until a pass sets nothing (a few
// passes at most: threads start rarely).
func apply(d time.Duration) (Result, error) {
	r := Result{Slice: d}
	seen := map[int]bool{}
	for pass := 0; pass < 4; pass++ {
		tids, err := threads()
		if err != nil {
			return r, err
		}
		fresh := 0
		for _, tid := range tids {
			if seen[tid] {
				continue
			}
			seen[tid] = true
			fresh++
			set, err := setThread(tid, uint64(d))
			switch {
			case errors.Is(err, unix.ESRCH): // the thread ended meanwhile
			case err != nil:
				return r, fmt.Errorf("cpuslice: thread %d: %w", tid, err)
			case set:
				r.Set++
			default:
				r.Kept++
			}
		}
		if fresh == 0 {
			break
		}
	}
	return r, nil
}

// setThread gives thread tid slice ns unless it is outside the fair
// classes or already carries a slice at most ns; it reports whether it
// set it. A kernel that keeps no slice of the thread's own reads back
// its default: ErrUnsupported.
func setThread(tid int, ns uint64) (bool, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, err
	}
	if a.Policy != schedNormal && a.Policy != schedBatch {
		return false, nil
	}
	if a.Runtime == 0 { // a kernel that reports no fair thread's slice
		return false, ErrUnsupported
	}
	if a.Runtime <= ns {
		return false, nil
	}
	b := *a
	b.Size = unix.SizeofSchedAttr
	b.Flags &= schedFlagResetOnFork
	b.Runtime, b.Deadline, b.Period = ns, 0, 0
	if err := unix.SchedSetAttr(tid, &b, 0); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			return false, ErrUnsupported
		}
		return false, err
	}
	if c, err := unix.SchedGetAttr(tid, 0); err == nil && c.Runtime != ns {
		return false, ErrUnsupported
	}
	return true, nil
}

// revert returns every fair-class thread that carries slice d to the
// kernel's default (a runtime of 0); errors are ignored, since a thread
// left with the short slice loses nothing.
func revert(d time.Duration) {
	tids, _ := threads()
	for _, tid := range tids {
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil || (a.Policy != schedNormal && a.Policy != schedBatch) || a.Runtime != uint64(d) {
			continue
		}
		b := *a
		b.Size = unix.SizeofSchedAttr
		b.Flags &= schedFlagResetOnFork
		b.Runtime, b.Deadline, b.Period = 0, 0, 0
		unix.SchedSetAttr(tid, &b, 0)
	}
}

// threads lists the process's thread IDs.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("cpuslice: list threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// Current is the calling thread's slice, as the kernel reports it.
func Current() (time.Duration, error) {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return 0, err
	}
	return time.Duration(a.Runtime), nil
}
