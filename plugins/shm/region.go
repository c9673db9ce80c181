package shmtransport

import (
	"sync"
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
)

// refcount is a reference count that starts at one (the owning table's)
// and closes drained when it reaches zero. Once at zero it stays there:
// acquire fails, so nothing new starts on memory that is going away.
type refcount struct {
	refs    atomic.Int64
	drained chan struct{}
}

func (r *refcount) init() {
	r.refs.Store(1)
	r.drained = make(chan struct{})
}

// acquire takes a reference unless the count already reached zero. The
// loop retries only when another goroutine changed the count in between.
func (r *refcount) acquire() bool {
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

func (r *refcount) release() {
	if r.refs.Add(-1) == 0 {
		close(r.drained)
	}
}

// region is this engine's registered memory: used locally by our own
// descriptors (refs) and offered to peers through its fd (gen).
type region struct {
	refcount
	id   uint32
	mem  []byte
	perm sdk.Perm
	fd   int    // the SDK's memfd; -1 when there is none to share
	off  uint64 // offset of mem in fd
	gen  uint64 // registration generation, unique within this plugin
}

// regionTable maps region ids to regions; readers load an immutable map,
// writers (control plane, rare) copy it.
type regionTable struct {
	mu sync.Mutex
	m  atomic.Pointer[map[uint32]*region]
}

func (t *regionTable) lookup(id uint32) *region {
	m := t.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[id]
}

func (t *regionTable) acquire(id uint32) *region {
	r := t.lookup(id)
	if r == nil || !r.acquire() {
		return nil
	}
	return r
}

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

func (t *regionTable) all() []*region {
	m := t.m.Load()
	if m == nil {
		return nil
	}
	out := make([]*region, 0, len(*m))
	for _, r := range *m {
		out = append(out, r)
	}
	return out
}

func mapLen[K comparable, V any](m *map[K]V) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
