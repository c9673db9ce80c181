//go:build !linux

package sdk

import "runtime"

func lowerThread(int) (func(), error) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread, nil
}

func latencyThread() func() {
	runtime.LockOSThread()
	addProc(1)
	return func() {
		addProc(-1)
		runtime.UnlockOSThread()
	}
}
