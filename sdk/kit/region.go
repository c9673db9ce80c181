package kit

import (
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/regtable"
)

// Region is what a plugin keeps for one registered region: a pointer to
// its own type, which embeds RegionBase (or regtable.Ref, with a Bytes
// method of its own).
type Region interface {
	comparable
	Acquire() bool
	Release()
	// Bytes is the region's memory, as sdk.Region.Mem delivered it.
	Bytes() []byte
}

// RegionBase is the part of a registered region every plugin keeps: the
// reference count that lets UnregisterMemory wait for the operations
// still using the memory, and what the SDK said about it. Embed it in the
// plugin's region type and call Init.
type RegionBase struct {
	regtable.Ref
	ID   uint32
	Mem  []byte // mapped by the SDK; nil for foreign memory
	Perm sdk.Perm
	// Foreign is memory of the host process the plugin reaches by
	// cross-memory attach (CopyIn, CopyOut); nil for mapped memory.
	Foreign *sdk.Foreign
}

// Init takes r's id, memory and permission and sets the reference count
// to one, the table's.
func (g *RegionBase) Init(r sdk.Region) {
	g.ID, g.Mem, g.Perm, g.Foreign = r.ID, r.Mem, r.Perm, r.Foreign
	g.Ref.Init()
}

// Bytes is the region's memory.
func (g *RegionBase) Bytes() []byte { return g.Mem }
