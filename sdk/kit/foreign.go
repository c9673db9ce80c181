package kit

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/xmem"
)

// Memory the application allocated itself (sdk.Region.Foreign) is not
// mapped in the plugin: a copying transport stages it in a bounce buffer,
// one extra copy. CopyIn fills a bounce buffer from the host before the
// bytes are sent; CopyOut moves received bytes into the host. A transport
// opts in with Base.ForeignMemory and Info.ForeignMemory.

// ForeignRegion is implemented by a region that can hold foreign memory;
// RegionBase does.
type ForeignRegion interface {
	// ForeignMem is the region's foreign memory, or nil for a mapped one.
	ForeignMem() *sdk.Foreign
}

// ForeignMem is the region's foreign memory, or nil when the SDK mapped
// it (Mem).
func (g *RegionBase) ForeignMem() *sdk.Foreign { return g.Foreign }

// Len is the region's length, mapped or foreign.
func (g *RegionBase) Len() uint64 {
	if g.Foreign != nil {
		return g.Foreign.Length
	}
	return uint64(len(g.Mem))
}

// foreignOf returns r's foreign memory, or nil.
func foreignOf[R Region](r R) *sdk.Foreign {
	if f, ok := any(r).(ForeignRegion); ok {
		return f.ForeignMem()
	}
	return nil
}

// CopyIn copies len(dst) bytes at offset off of f into dst. The caller
// checked the range against f.Length (Base.Local does).
func CopyIn(f *sdk.Foreign, off uint64, dst []byte) error {
	if off+uint64(len(dst)) > f.Length || off+uint64(len(dst)) < off {
		return fmt.Errorf("copy in %d bytes at offset %d: past the region's %d bytes", len(dst), off, f.Length)
	}
	return xmem.Read(f.PID, f.Addr+off, dst)
}

// CopyOut copies src to offset off of f.
func CopyOut(f *sdk.Foreign, off uint64, src []byte) error {
	if off+uint64(len(src)) > f.Length || off+uint64(len(src)) < off {
		return fmt.Errorf("copy out %d bytes at offset %d: past the region's %d bytes", len(src), off, f.Length)
	}
	return xmem.Write(f.PID, f.Addr+off, src)
}

// Bounce buffers come in power-of-two classes from 4 KiB to 64 MiB, each
// class a sync.Pool; a larger one is allocated and dropped. A pooled
// buffer costs no allocation once the pool is warm.
const (
	bounceMinShift = 12
	bounceMaxShift = 26
)

var bouncePools [bounceMaxShift - bounceMinShift + 1]sync.Pool

// Bounce is a staging buffer for one operation on foreign memory. Get it
// with GetBounce, use B, give it back with Put once nothing reads or
// writes B any more.
type Bounce struct {
	B     []byte // len is what GetBounce was asked for
	class int    // -1: not pooled
}

func bounceClass(n int) int {
	if n <= 1<<bounceMinShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - bounceMinShift
	if c > bounceMaxShift-bounceMinShift {
		return -1
	}
	return c
}

// GetBounce returns a staging buffer of n bytes.
func GetBounce(n int) *Bounce {
	c := bounceClass(n)
	if c < 0 {
		return &Bounce{B: make([]byte, n), class: -1}
	}
	if b, ok := bouncePools[c].Get().(*Bounce); ok {
		b.B = b.B[:n]
		return b
	}
	return &Bounce{B: make([]byte, n, 1<<(c+bounceMinShift)), class: c}
}

// Put gives b back; b must not be used afterwards.
func (b *Bounce) Put() {
	if b == nil || b.class < 0 {
		return
	}
	bouncePools[b.class].Put(b)
}
