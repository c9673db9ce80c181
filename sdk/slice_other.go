//go:build !linux

package sdk

import "time"

// requestSlice is Linux only.
func requestSlice(time.Duration) error { return nil }
