//go:build !linux

package cpuslice

import "time"

// Current is the calling thread's slice: unknown off Linux.
func Current() (time.Duration, error) { return 0, ErrUnsupported }
