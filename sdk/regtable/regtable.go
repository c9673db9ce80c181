package regtable

import (
	"sync"
	"sync/atomic"
)

// Ref is a reference count that starts at one (the owner's, usually the
// table's) and closes Drained when it reaches zero. Once at zero it stays
// there: Acquire fails, so nothing new starts on memory that is going away.
// Embed it in a region type; call Init before use.
type Ref struct {
	refs    atomic.Int64
	drained chan struct{}
}

// Init sets the count to one.
func (r *Ref) Init() {
	r.refs.Store(1)
	r.drained = make(chan struct{})
}

// Acquire takes a reference unless the count already reached zero. The
// loop retries only when another goroutine changed the count in between,
// so it ends after a bounded number of rounds.
func (r *Ref) Acquire() bool {
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

// Release drops a reference; the last one closes Drained.
func (r *Ref) Release() {
	if r.refs.Add(-1) == 0 {
		close(r.drained)
	}
}

// Drained is closed once every reference, the owner's included, is gone.
func (r *Ref) Drained() <-chan struct{} { return r.drained }

// Acquirer is what a Table holds: a pointer to a type that embeds Ref.
type Acquirer interface {
	comparable
	Acquire() bool
}

// Table maps region ids to regions. Readers (every descriptor, every
// incoming frame) load an immutable map without locking; writers
// (register, unregister: the control plane) copy it. The ids are spread
// over shards, each its own immutable map, so that a writer copies one
// shard, not the table: registering 10,000 regions one by one copies
// about 10,000²/2/shards entries rather than 10,000²/2. Methods return
// the zero T (nil) for an id that is not there.
type Table[T Acquirer] struct {
	mu     sync.Mutex // serialises writers
	n      int        // regions held; mu
	shards [shards]atomic.Pointer[map[uint32]T]
}

// shards is how many maps a Table spreads its ids over; host region ids
// are sequential, so id%shards spreads them evenly.
const shards = 256

func (t *Table[T]) shard(id uint32) *atomic.Pointer[map[uint32]T] { return &t.shards[id%shards] }

// Lookup returns the region id, without taking a reference.
func (t *Table[T]) Lookup(id uint32) T {
	var zero T
	m := t.shard(id).Load()
	if m == nil {
		return zero
	}
	return (*m)[id]
}

// Acquire returns region id with a reference held, or the zero T when it
// is missing or being removed.
func (t *Table[T]) Acquire(id uint32) T {
	var zero T
	r := t.Lookup(id)
	if r == zero || !r.Acquire() {
		return zero
	}
	return r
}

// Add inserts r as id; it reports false when the id is taken.
func (t *Table[T]) Add(id uint32, r T) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	sh := t.shard(id)
	old := sh.Load()
	var n map[uint32]T
	if old != nil {
		if _, ok := (*old)[id]; ok {
			return false
		}
		n = make(map[uint32]T, 1+len(*old))
		for k, v := range *old {
			n[k] = v
		}
	} else {
		n = make(map[uint32]T, 1)
	}
	n[id] = r
	sh.Store(&n)
	t.n++
	return true
}

// Remove takes region id out of the table and returns it, or the zero T.
// The caller then drops the table's reference and waits for Drained.
func (t *Table[T]) Remove(id uint32) T {
	var zero T
	t.mu.Lock()
	defer t.mu.Unlock()
	sh := t.shard(id)
	old := sh.Load()
	if old == nil {
		return zero
	}
	r, ok := (*old)[id]
	if !ok {
		return zero
	}
	n := make(map[uint32]T, len(*old))
	for k, v := range *old {
		if k != id {
			n[k] = v
		}
	}
	sh.Store(&n)
	t.n--
	return r
}

// Len returns how many regions the table holds.
func (t *Table[T]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}
