//go:build race

package memcpy

import (
	"runtime"
	"unsafe"
)

// raceCopy tells the race detector that a copy of src into dst is about
// to run in assembly (repCopy), which it does not see by itself.
func raceCopy(dst, src []byte) {
	runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(src)), len(src))
	runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}
