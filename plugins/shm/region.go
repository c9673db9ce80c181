package shm

import "github.com/ferrydev/ferry/sdk/kit"

// region is this engine's registered memory: used locally by our own
// descriptors (refs) and offered to peers through its fd (gen).
type region struct {
	kit.RegionBase
	fd  int    // the SDK's memfd; -1 when there is none to share
	off uint64 // offset of Mem in fd
	gen uint64 // registration generation, unique within this plugin
}
