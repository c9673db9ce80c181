package kit

import (
	"sync"
	"sync/atomic"
)

// Peers is the table of open peers: Submit reads it without locks (Get),
// OpenPeer and ClosePeer (the control plane, rare) copy it. After
// CloseAll it stays empty. The zero value is ready to use.
type Peers[P comparable] struct {
	mu     sync.Mutex // serialises writers
	closed bool
	m      atomic.Pointer[map[uint32]P]
}

type addResult int

const (
	added addResult = iota
	addOpen
	addClosed
)

// Get returns peer id, or the zero P.
func (s *Peers[P]) Get(id uint32) P {
	var zero P
	m := s.m.Load()
	if m == nil {
		return zero
	}
	return (*m)[id]
}

// List returns the open peers, in no order.
func (s *Peers[P]) List() []P {
	m := s.m.Load()
	if m == nil {
		return nil
	}
	out := make([]P, 0, len(*m))
	for _, p := range *m {
		out = append(out, p)
	}
	return out
}

func (s *Peers[P]) add(id uint32, p P, start func()) addResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return addClosed
	}
	old := s.m.Load()
	n := 1
	if old != nil {
		if _, ok := (*old)[id]; ok {
			return addOpen
		}
		n += len(*old)
	}
	m := make(map[uint32]P, n)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[id] = p
	if start != nil {
		start()
	}
	s.m.Store(&m)
	return added
}

// Remove takes peer id out and returns it; false when it was not open.
func (s *Peers[P]) Remove(id uint32) (P, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero P
	old := s.m.Load()
	if old == nil {
		return zero, false
	}
	p, ok := (*old)[id]
	if !ok {
		return zero, false
	}
	m := make(map[uint32]P, len(*old))
	for k, v := range *old {
		if k != id {
			m[k] = v
		}
	}
	s.m.Store(&m)
	return p, true
}

// CloseAll empties the table for good and returns what it held: Stop
// closes those, and no peer can be added after.
func (s *Peers[P]) CloseAll() []P {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	out := s.List()
	s.m.Store(nil)
	return out
}
