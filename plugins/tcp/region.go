package tcp

import (
	"sync"
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
)

// region is registered memory with a reference count. The table holds one
// reference; every operation that touches the memory holds another from
// the moment it is accepted until it is done with the bytes. Unregister
// drops the table's reference and waits for drained.
type region struct {
	id   uint32
	mem  []byte
	perm sdk.Perm

	refs    atomic.Int64
	removed atomic.Bool   // set by Unregister before it drops the table's reference
	drained chan struct{} // closed when refs reaches zero
}

func newRegion(r sdk.Region) *region {
	g := &region{id: r.ID, mem: r.Mem, perm: r.Perm, drained: make(chan struct{})}
	g.refs.Store(1)
	return g
}

// acquire takes a reference unless the region is already being removed.
// The loop retries only when another goroutine changed the count between
// the load and the swap, so it ends after a bounded number of rounds.
func (r *region) acquire() bool {
	for {
		n := r.refs.Load()
		if n <= 0 {
			return false
		}
		if r.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (r *region) release() {
	if r.refs.Add(-1) == 0 {
		close(r.drained)
	}
}

// dead reports whether the region is being unregistered: work not yet
// started on it is dropped rather than started.
func (r *region) dead() bool { return r.removed.Load() }

// regionTable maps region ids to regions. Readers (every descriptor, every
// incoming frame) load an immutable map without locking; writers (register,
// unregister: control plane, rare) copy it.
type regionTable struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[uint32]*region]
}

func (t *regionTable) lookup(id uint32) *region {
	m := t.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[id]
}

// acquire returns the region with a reference held, or nil.
func (t *regionTable) acquire(id uint32) *region {
	r := t.lookup(id)
	if r == nil || !r.acquire() {
		return nil
	}
	return r
}

// add inserts r; it reports false when the id is taken.
func (t *regionTable) add(r *region) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m.Load()
	n := make(map[uint32]*region, 1+mapLen(old))
	if old != nil {
		for k, v := range *old {
			n[k] = v
		}
	}
	if _, ok := n[r.id]; ok {
		return false
	}
	n[r.id] = r
	t.m.Store(&n)
	return true
}

// remove takes the region out of the table; it returns nil when the id is
// not there.
func (t *regionTable) remove(id uint32) *region {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m.Load()
	if old == nil {
		return nil
	}
	r, ok := (*old)[id]
	if !ok {
		return nil
	}
	n := make(map[uint32]*region, len(*old))
	for k, v := range *old {
		if k != id {
			n[k] = v
		}
	}
	t.m.Store(&n)
	return r
}

func mapLen[K comparable, V any](m *map[K]V) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
