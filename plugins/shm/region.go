package shm

import (
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/regtable"
)

// region is this engine's registered memory: used locally by our own
// descriptors (refs) and offered to peers through its fd (gen).
type region struct {
	regtable.Ref
	id   uint32
	mem  []byte
	perm sdk.Perm
	fd   int    // the SDK's memfd; -1 when there is none to share
	off  uint64 // offset of mem in fd
	gen  uint64 // registration generation, unique within this plugin
}

// Bytes is the region's memory (kit.Region).
func (r *region) Bytes() []byte { return r.mem }
