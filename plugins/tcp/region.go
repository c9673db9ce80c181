package tcp

import (
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/regtable"
)

// region is registered memory with a reference count. The table holds one
// reference; every operation that touches the memory holds another from
// the moment it is accepted until it is done with the bytes. Unregister
// drops the table's reference and waits for drained.
type region struct {
	regtable.Ref
	id      uint32
	mem     []byte
	perm    sdk.Perm
	removed atomic.Bool // set by Unregister before it drops the table's reference
}

func newRegion(r sdk.Region) *region {
	g := &region{id: r.ID, mem: r.Mem, perm: r.Perm}
	g.Init()
	return g
}

// dead reports whether the region is being unregistered: work not yet
// started on it is dropped rather than started.
func (r *region) dead() bool { return r.removed.Load() }

// Bytes is the region's memory (kit.Region).
func (r *region) Bytes() []byte { return r.mem }
