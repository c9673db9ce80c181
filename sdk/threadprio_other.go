//go:build !linux

package sdk

import "runtime"

func lowerThread(int) (func(), error) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread, nil
}
