package cpuslice

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	// Min and Max bound the slice the kernel takes; it clamps others.
	Min = 100 * time.Microsecond
	Max = 100 * time.Millisecond
)

// ErrUnsupported: the kernel does not take a fair thread's own slice
// (Linux before 6.12, or not Linux).
var ErrUnsupported = errors.New("the kernel takes no per-thread time slice (Linux 6.12 and later do)")

// Result is what Hold did.
type Result struct {
	Slice time.Duration // the slice asked for
	// Set is how many threads took it; Kept how many were left alone (a
	// real-time or idle class, or a slice already at most as long).
	Set, Kept int
}

// String reads "100µs on 12 threads (2 left alone)".
func (r Result) String() string {
	s := fmt.Sprintf("%v on %d threads", r.Slice, r.Set)
	if r.Kept > 0 {
		s += fmt.Sprintf(" (%d left alone)", r.Kept)
	}
	return s
}

// holds counts the Holds not yet released, and slice is theirs: the first
// Hold sets it, the last Release clears it, so that several engines in
// one process share one setting.
var (
	mu    sync.Mutex
	holds int
	held  time.Duration
)

// Hold asks for slice d (clamped to [Min, Max]) on every thread of the
// process; a later Hold while one is held keeps the first's slice. Each
// Hold that returns no error is paired with one Release. The error says
// which thread refused and why; threads set before it keep the slice
// until Release.
func Hold(d time.Duration) (Result, error) {
	d = min(max(d, Min), Max)
	mu.Lock()
	defer mu.Unlock()
	if holds > 0 {
		holds++
		return Result{Slice: held}, nil
	}
	r, err := apply(d)
	if err != nil {
		// What was set stays set: a partial Hold is still released.
		if r.Set > 0 {
			revert(d)
		}
		return r, err
	}
	holds, held = 1, d
	return r, nil
}

// Release ends a Hold: the last one returns the threads that still carry
// the held slice to the kernel's default.
func Release() {
	mu.Lock()
	defer mu.Unlock()
	if holds == 0 {
		return
	}
	if holds--; holds == 0 {
		revert(held)
		held = 0
	}
}
