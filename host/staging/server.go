package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Copier is what a Server needs of the engine's device memory: copies
// between a slot and the device memory registered at a device address,
// with the access asked checked (a land writes device memory, so the
// range must be registered for remote writes; a fetch reads it).
type Copier interface {
	// ToDevice copies n bytes from the slot into device memory at addr.
	ToDevice(ctx context.Context, slot Slot, addr, n uint64) error
	// FromDevice copies n bytes of device memory at addr into the slot.
	FromDevice(ctx context.Context, addr uint64, slot Slot, n uint64) error
}

// Server is the receiving engine's half of staged requests: it lends
// its pool's slots to peers, one reservation at a time, and lands them
// into device memory or fills them from it. A slot a peer reserved is
// that peer's until it releases it or its lease ends (a peer that died
// does not hold slots forever).
type Server struct {
	pool  *Pool
	base  uint64 // the pool's address in this engine's segment
	copy  Copier
	lease time.Duration
	now   func() time.Time

	mu     sync.Mutex
	leases map[int]loan // by slot index
}

type loan struct {
	from  string
	slot  Slot
	until time.Time
}

// ErrNotYourSlot is what a land or release of a slot the peer does not
// hold gets.
var ErrNotYourSlot = errors.New("the slot is not reserved by this peer")

// NewServer serves pool's slots, whose memory is at base in the engine's
// segment, landing and fetching through c. A reservation lasts until
// released, or lease after it was made (or after the request's deadline,
// whichever is later).
func NewServer(pool *Pool, base uint64, c Copier, lease time.Duration) *Server {
	return &Server{pool: pool, base: base, copy: c, lease: lease, now: time.Now, leases: make(map[int]loan)}
}

// Reserve lends a slot of at least n bytes to peer from, waiting for one
// within ctx, and returns its address.
func (s *Server) Reserve(ctx context.Context, from string, n uint64) (uint64, error) {
	if n == 0 || n > s.pool.SlotSize() {
		return 0, fmt.Errorf("a staging slot holds 1 to %d bytes; %d asked", s.pool.SlotSize(), n)
	}
	slot, ok := s.pool.TryGet()
	if !ok {
		s.expire()
		var err error
		if slot, err = s.pool.Get(ctx); err != nil {
			return 0, err
		}
	}
	until := s.now().Add(s.lease)
	if d, ok := ctx.Deadline(); ok && d.Add(s.lease).After(until) {
		until = d.Add(s.lease)
	}
	s.mu.Lock()
	s.leases[slot.Index] = loan{from: from, slot: slot, until: until}
	s.mu.Unlock()
	return s.base + slot.Off, nil
}

// held returns the slot at addr if from holds it.
func (s *Server) held(from string, addr uint64) (Slot, error) {
	slot, ok := s.pool.ByOffset(addr - s.base)
	if addr < s.base || !ok {
		return Slot{}, fmt.Errorf("%#x is not a staging slot of this engine: %w", addr, ErrNotYourSlot)
	}
	s.mu.Lock()
	l, ok := s.leases[slot.Index]
	s.mu.Unlock()
	if !ok || l.from != from {
		return Slot{}, fmt.Errorf("slot %#x: %w", addr, ErrNotYourSlot)
	}
	return slot, nil
}

// Land copies n bytes of the slot at addr, which from holds, into device
// memory at dst. The slot stays from's.
func (s *Server) Land(ctx context.Context, from string, addr, dst, n uint64) error {
	slot, err := s.held(from, addr)
	if err != nil {
		return err
	}
	if n > uint64(len(slot.Mem)) {
		return fmt.Errorf("land %d bytes from a slot of %d", n, len(slot.Mem))
	}
	return s.copy.ToDevice(ctx, slot, dst, n)
}

// Fetch reserves a slot for from and fills it with n bytes of device
// memory at src; it returns the slot's address. A failed copy gives the
// slot back.
func (s *Server) Fetch(ctx context.Context, from string, src, n uint64) (uint64, error) {
	addr, err := s.Reserve(ctx, from, n)
	if err != nil {
		return 0, err
	}
	slot, _ := s.held(from, addr)
	if err := s.copy.FromDevice(ctx, src, slot, n); err != nil {
		s.Release(from, addr)
		return 0, err
	}
	return addr, nil
}

// Release gives back the slot at addr that from holds.
func (s *Server) Release(from string, addr uint64) error {
	slot, err := s.held(from, addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.leases, slot.Index)
	s.mu.Unlock()
	s.pool.Put(slot)
	return nil
}

// expire takes back the slots whose lease ended.
func (s *Server) expire() {
	now := s.now()
	var back []Slot
	s.mu.Lock()
	for i, l := range s.leases {
		if now.After(l.until) {
			back = append(back, l.slot)
			delete(s.leases, i)
		}
	}
	s.mu.Unlock()
	for _, sl := range back {
		s.pool.Put(sl)
	}
}

// Leased returns how many slots peers hold.
func (s *Server) Leased() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}
