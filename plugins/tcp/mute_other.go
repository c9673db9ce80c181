//go:build !linux

package tcp

// muteInput is Linux only (mute_linux.go): readers wait in the poller
// elsewhere, and there is nothing to mute.
func muteInput(nc interface{}) (restore func()) { return func() {} }
