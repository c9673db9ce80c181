package remotes

import (
	"reflect"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/internal/enum"
)

// Action is what a metastore change does to an open handle.
type Action int

const (
	// Keep: nothing changed that the handle holds.
	Keep Action = iota
	// Refresh: the same life of the peer published a new descriptor (it
	// registered or unregistered memory, or a plugin of its restarted):
	// the handle takes the new descriptor and stays open.
	Refresh
	// Retire: the peer restarted (a new incarnation): the handle stays
	// bound to the previous life and refuses requests before anything is
	// sent; opening the segment again reaches the new life.
	Retire
	// Gone: the descriptor left the metastore (the peer closed, or its
	// lease expired). Requests still go out, since the peer may only have
	// lost the metastore; a failure then says the peer looks down.
	Gone
)

var actionNames = [...]string{Keep: "keep", Refresh: "refresh", Retire: "retire", Gone: "gone"}

func (a Action) String() string { return enum.String(a, actionNames[:], "Action") }

// Change is one metastore change to a handle's key, decoded: Desc is the
// new descriptor for a put, nil for a delete.
type Change struct {
	Deleted bool
	Desc    *segment.Descriptor
	// Ordered says that Desc's Seq was verified under the cluster
	// secret, so that one older than the handle's is a replay and is
	// kept out (segment.Older).
	Ordered bool
}

// Decide returns what c does to a live handle that caches cached and is
// marked gone or not. An ordered descriptor older than cached changes
// nothing, even of another incarnation: a peer never goes back to an
// earlier publication than the newest it has seen.
func Decide(cached *segment.Descriptor, gone bool, c Change) Action {
	switch {
	case c.Deleted:
		if gone {
			return Keep
		}
		return Gone
	case c.Desc == nil:
		return Keep
	case c.Ordered && segment.Older(c.Desc, cached):
		// A replay of an earlier publication (of this life or a
		// previous one): the handle keeps the newest it has; the
		// owner's guard writes its newest back.
		return Keep
	case c.Desc.Incarnation != cached.Incarnation:
		return Retire
	case gone || !reflect.DeepEqual(c.Desc, cached):
		return Refresh
	}
	return Keep
}
