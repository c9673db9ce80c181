package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrPoolExhausted is what Get returns when no slot came free before the
// caller's context ended.
var ErrPoolExhausted = errors.New("staging pool exhausted")

// Slot is one slot of a Pool: Mem is its memory, Off its offset in the
// pool's memory (what a peer addresses, added to the pool's base).
type Slot struct {
	Index int
	Off   uint64
	Mem   []byte
}

// Pool is a bounded set of equal slots over one piece of host memory.
// Its zero value is not usable; NewPool makes one.
type Pool struct {
	mem      []byte
	slotSize uint64

	mu    sync.Mutex
	free  []int
	taken []bool // by index: the slot is out
	// wake is closed and replaced whenever a slot comes back, so that
	// every waiter looks again; a waiter holds no lock while it waits.
	wake chan struct{}
	used int
	// waits counts the Gets that found no slot free and waited.
	waits uint64
}

// NewPool cuts mem into slots of slotSize bytes (the last partial one is
// left out).
func NewPool(mem []byte, slotSize uint64) (*Pool, error) {
	if slotSize == 0 || uint64(len(mem)) < slotSize {
		return nil, fmt.Errorf("staging pool of %d bytes cannot hold one slot of %d bytes", len(mem), slotSize)
	}
	n := uint64(len(mem)) / slotSize
	p := &Pool{mem: mem, slotSize: slotSize, wake: make(chan struct{}), taken: make([]bool, n)}
	for i := int(n) - 1; i >= 0; i-- {
		p.free = append(p.free, i)
	}
	return p, nil
}

// SlotSize is the size of every slot.
func (p *Pool) SlotSize() uint64 { return p.slotSize }

// Slots is how many slots the pool has.
func (p *Pool) Slots() int { return len(p.mem) / int(p.slotSize) }

// Mem is the pool's memory.
func (p *Pool) Mem() []byte { return p.mem }

// PoolStats is what a pool did.
type PoolStats struct {
	Slots, Used int
	Waits       uint64 // Gets that found the pool empty and waited
}

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Slots: p.Slots(), Used: p.used, Waits: p.waits}
}

// TryGet takes a free slot without waiting.
func (p *Pool) TryGet() (Slot, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.take()
}

func (p *Pool) take() (Slot, bool) {
	n := len(p.free)
	if n == 0 {
		return Slot{}, false
	}
	i := p.free[n-1]
	p.free = p.free[:n-1]
	p.taken[i] = true
	p.used++
	return p.slot(i), true
}

func (p *Pool) slot(i int) Slot {
	off := uint64(i) * p.slotSize
	return Slot{Index: i, Off: off, Mem: p.mem[off : off+p.slotSize : off+p.slotSize]}
}

// Get takes a free slot, waiting for one until ctx ends; then it returns
// an error wrapping ErrPoolExhausted and ctx's error.
func (p *Pool) Get(ctx context.Context) (Slot, error) {
	counted := false
	for {
		p.mu.Lock()
		s, ok := p.take()
		wake := p.wake
		if !ok && !counted {
			p.waits++
			counted = true
		}
		p.mu.Unlock()
		if ok {
			return s, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return Slot{}, fmt.Errorf("%w: all %d slots of %d bytes are in use: %w", ErrPoolExhausted, p.Slots(), p.slotSize, context.Cause(ctx))
		}
	}
}

// ByOffset returns the slot at off, for a Server that names slots by
// their offset on the wire.
func (p *Pool) ByOffset(off uint64) (Slot, bool) {
	if off%p.slotSize != 0 || off >= uint64(p.Slots())*p.slotSize {
		return Slot{}, false
	}
	return p.slot(int(off / p.slotSize)), true
}

// Put gives s back. A slot that is not out (put back twice, or never
// taken) is ignored and reported false: it is never handed to two users.
func (p *Pool) Put(s Slot) bool {
	p.mu.Lock()
	if s.Index < 0 || s.Index >= len(p.taken) || !p.taken[s.Index] {
		p.mu.Unlock()
		return false
	}
	p.taken[s.Index] = false
	p.free = append(p.free, s.Index)
	p.used--
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	return true
}
