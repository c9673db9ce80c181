//go:build !linux

package cpuslice

import "time"

func apply(d time.Duration) (Result, error) { return Result{Slice: d}, ErrUnsupported }

func revert(time.Duration) {}

// Current is the calling thread's slice: unknown off Linux.
func Current() (time.Duration, error) { return 0, ErrUnsupported }
