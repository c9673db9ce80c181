//go:build linux

package sdk

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

func lowerThread(nice int) (func(), error) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	old, back, err := lowerLocked(tid, nice)
	if back == nil {
		return runtime.UnlockOSThread, err
	}
	addProc(1)
	return func() {
		addProc(-1)
		attrs.Lock()
		back()
		ok := unix.Setpriority(unix.PRIO_PROCESS, tid, old) == nil
		attrs.Unlock()
		if ok {
			runtime.UnlockOSThread()
		}
		// Refused (no CAP_SYS_NICE): the thread stays locked and ends
		// with its goroutine.
	}, nil
}

// lowerLocked raises thread tid's niceness to nice and gives it
// BulkSlice, under attrs. It returns the old niceness and what puts the
// slice back, or a nil back when the thread was left as it was (already
// at nice or above, or an error).
func lowerLocked(tid, nice int) (old int, back func(), err error) {
	attrs.Lock()
	defer attrs.Unlock()
	// The system call answers 20 - nice (1 to 40), so that no answer
	// looks like an error.
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, nil, fmt.Errorf("bulk thread %d: getpriority: %w", tid, err)
	}
	old = 20 - raw
	if old >= nice {
		return old, nil, nil
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		return old, nil, fmt.Errorf("bulk thread %d: setpriority to nice %d: %w", tid, nice, err)
	}
	return old, attrs.own(tid, uint64(BulkSlice)), nil
}

// attrs serialises this process's changes to its threads' scheduling
// attributes. sched_setattr sets a fair thread's niceness together with
// its slice, so a slice written from a read made before another goroutine
// changed that thread's niceness put the old niceness back: a walk of
// requestSlice beside a bulk thread's start or end left an unlocked
// runtime thread at the bulk niceness, or a locked bulk thread at the
// normal one. Under the lock no such read goes stale.
//
// A thread that LowerThread or LatencyThread holds has a slice of its own
// (BulkSlice, LatencySlice): requestSlice leaves it alone, and the hold's
// end gives it what the process asked meanwhile, or else its old slice.
var attrs = threadAttrs{held: make(map[int]struct{})}

type threadAttrs struct {
	sync.Mutex
	held map[int]struct{} // threads with a slice of their own
	// asked counts requestSlice's calls, and slice is the last one's: a
	// hold that saw asked change gives its thread slice at its end.
	asked uint64
	slice uint64
}

// own gives thread tid a slice of d until the returned func, which puts
// back the slice the thread is due then. Both run under a.
func (a *threadAttrs) own(tid int, d uint64) (back func()) {
	attr, _ := fairAttr(tid)
	if attr == nil {
		return func() {}
	}
	old := attr.Runtime
	a.held[tid] = struct{}{}
	_ = setSlice(tid, d)
	asked := a.asked
	return func() {
		delete(a.held, tid)
		if a.asked != asked {
			old = a.slice
		}
		_ = setSlice(tid, old)
	}
}

// fairAttr reads thread tid's scheduling attributes; nil, and no error,
// for a thread under another policy than SCHED_NORMAL or SCHED_BATCH (an
// operator's real-time setting), which is left as it is, or one that is
// gone.
func fairAttr(tid int) (*unix.SchedAttr, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, nil
		}
		return nil, fmt.Errorf("thread %d: sched_getattr: %w", tid, err)
	}
	if a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH {
		return nil, nil
	}
	return a, nil
}

// setSlice asks the kernel for a scheduler slice of d for thread tid, its
// niceness as it is now, if its policy is a fair one (fairAttr); a thread
// that is gone is no error. The caller holds attrs.
func setSlice(tid int, d uint64) error {
	a, err := fairAttr(tid)
	if a == nil || a.Runtime == d {
		return err
	}
	a.Size, a.Flags, a.Runtime = unix.SizeofSchedAttr, 0, d
	if err := unix.SchedSetAttr(tid, a, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("thread %d: sched_setattr: %w", tid, err)
	}
	return nil
}

func latencyThread() func() {
	runtime.LockOSThread()
	tid := unix.Gettid()
	attrs.Lock()
	back := attrs.own(tid, uint64(LatencySlice))
	attrs.Unlock()
	addProc(1)
	return func() {
		addProc(-1)
		attrs.Lock()
		back()
		attrs.Unlock()
		runtime.UnlockOSThread()
	}
}
