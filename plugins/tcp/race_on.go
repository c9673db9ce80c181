//go:build race

package tcp

import (
	"runtime"
	"unsafe"
)

// The race detector sees read(2) and write(2) as synchronising through the
// socket but not writev(2), which carries every frame here. Two engines in
// one process (the tests) would then look racy: one writes memory, sends
// a frame, the other reads it after receiving the answer. These calls give
// the detector the edge the socket really provides. They exist only in race
// builds.

var wireSync byte

func raceReleaseWire() { runtime.RaceReleaseMerge(unsafe.Pointer(&wireSync)) }
func raceAcquireWire() { runtime.RaceAcquire(unsafe.Pointer(&wireSync)) }

// raceWriteRange reports bytes that readv(2) stored, which the detector
// does not see by itself (it does see read(2)).
func raceWriteRange(a, b []byte, n int) {
	if m := min(n, len(a)); m > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&a[0]), m)
	}
	if m := n - len(a); m > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&b[0]), m)
	}
}
