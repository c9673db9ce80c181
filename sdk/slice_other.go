//go:build !linux

package sdk

import "time"

const pluginSlice = 20 * time.Millisecond

// requestSlice is Linux only.
func requestSlice(time.Duration) error { return nil }
