package cpuslice

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

const (
	// Min and Max bound the slice the kernel takes; it clamps others.
	Min = 100 * time.Microsecond
	Max = 100 * time.Millisecond
)

// ErrUnsupported: the kernel keeps no fair thread's own slice (Linux
// before 6.12, or not Linux).
var ErrUnsupported = errors.New("the kernel takes no per-thread time slice (Linux 6.12 and later do)")

// holds counts the Holds not yet released and held is their slice: the
// first Hold sets it, the last Release clears it, so that several
// engines in one process share one setting.
var (
	mu    sync.Mutex
	holds int
	held  time.Duration
)

// Hold asks for slice d (clamped to [Min, Max]) on every thread of the
// process (sdk.RequestSlice: real-time threads are left alone); a Hold
// while another is held keeps the first one's slice. Each Hold that
// returns nil is paired with one Release.
func Hold(d time.Duration) error {
	d = min(max(d, Min), Max)
	mu.Lock()
	defer mu.Unlock()
	if holds > 0 {
		holds++
		return nil
	}
	err := sdk.RequestSlice(d)
	if err == nil {
		// A kernel without custom slices takes the request and keeps
		// nothing: it reads back 0.
		if got, gerr := Current(); gerr != nil || got == 0 {
			err = ErrUnsupported
		}
	}
	if err != nil {
		_ = sdk.RequestSlice(0) // what was set goes back
		return fmt.Errorf("cpuslice: %w", err)
	}
	holds, held = 1, d
	return nil
}

// Release ends a Hold: the last one returns every fair-class thread of
// the process to the kernel's default slice.
func Release() {
	mu.Lock()
	defer mu.Unlock()
	if holds == 0 {
		return
	}
	if holds--; holds == 0 {
		_ = sdk.RequestSlice(0)
		held = 0
	}
}

// Held is the slice held, 0 for none.
func Held() time.Duration {
	mu.Lock()
	defer mu.Unlock()
	return held
}
