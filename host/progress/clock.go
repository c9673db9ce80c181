package progress

import (
	"time"

	"github.com/ferrydev/ferry/sdk/wallclock"
)

// Now is the clock tasks use: the wall clock in Unix nanoseconds, the
// unit of deadlines (a plugin compares a descriptor's deadline with its
// own wall clock), read as wallclock.Now reads it: one clock read, not
// time.Now's two.
func Now() int64 { return wallclock.Now() }

// epoch is where Clock counts from.
var epoch = time.Now()

// Clock is the engine's monotonic clock, in nanoseconds since the
// process started (observe.Clock is the same clock): the times a Hook
// is handed. A wall clock's steps do not move it.
func Clock() int64 { return int64(time.Since(epoch)) }

// ClockOf is Clock at t, a time.Now reading (its monotonic part): a
// caller that read the wall clock anyway gets the Clock time without a
// second read.
func ClockOf(t time.Time) int64 { return int64(t.Sub(epoch)) }
