package tcp

import (
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
)

// region is registered memory with a reference count. The table holds one
// reference; every operation that touches the memory holds another from
// the moment it is accepted until it is done with the bytes. Unregister
// drops the table's reference and waits for drained.
type region struct {
	kit.RegionBase
	removed atomic.Bool // set by Unregister before it drops the table's reference
}

func newRegion(r sdk.Region) *region {
	g := &region{}
	g.Init(r)
	return g
}

// dead reports whether the region is being unregistered: work not yet
// started on it is dropped rather than started.
func (r *region) dead() bool { return r.removed.Load() }
