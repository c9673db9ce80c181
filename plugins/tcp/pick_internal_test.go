package tcp

import "testing"

// TestPickKeepsToFirst: a rail's first connection takes every frame
// while its load is under spillLoad; past it, frames go to the least
// loaded connection.
func TestPickKeepsToFirst(t *testing.T) {
	p := &peer{conns: 3, nrails: 1, slots: []*slot{{}, {}, {}}}
	s0, s1, s2 := p.slots[0], p.slots[1], p.slots[2]
	for i := range 10 {
		s0.load.Store(int64(i) * (spillLoad / 10))
		if got := p.pick(0); got != s0 {
			t.Fatalf("load %d on the first connection: picked another", s0.load.Load())
		}
	}
	s0.load.Store(spillLoad)
	s1.load.Store(spillLoad / 2)
	s2.load.Store(spillLoad / 4)
	for range 6 {
		if got := p.pick(0); got != s2 {
			t.Fatalf("the first connection full: picked a connection of load %d, want the least loaded (%d)", got.load.Load(), s2.load.Load())
		}
	}
	one := &peer{conns: 1, nrails: 1, slots: []*slot{{}}}
	one.slots[0].load.Store(4 * spillLoad)
	if one.pick(0) != one.slots[0] {
		t.Fatal("a rail of one connection picked none")
	}
}
