package shm

import "github.com/ferrydev/ferry/sdk/kit"

// region is this engine's registered memory: used locally by our own
// descriptors (refs) and offered to peers through its fd (gen).
type region struct {
	kit.RegionBase
	fd  int    // the SDK's memfd; -1 when there is none to share
	off uint64 // offset of Mem in fd
	gen uint64 // registration generation, unique within this plugin
	// exact: fd holds exactly the region (offset 0, file size = length),
	// so handing it to a peer hands over nothing else. Only such a region
	// is shared; the host carves every page-aligned region peers may use
	// into its own memfd.
	exact bool
	// ro is fd reopened O_RDONLY, what a peer gets for a remote-read
	// region; -1 until first asked for. Under Transport.mu.
	ro int
}
