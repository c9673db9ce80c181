package regtable

import (
	"sync"
	"testing"
)

type reg struct {
	Ref
	mem []byte
}

func newReg() *reg {
	r := &reg{mem: make([]byte, 8)}
	r.Init()
	return r
}

func TestTableAndRefs(t *testing.T) {
	var tab Table[*reg]
	a := newReg()
	if !tab.Add(1, a) || tab.Add(1, newReg()) {
		t.Fatal("Add: first must succeed, a duplicate id must not")
	}
	if tab.Lookup(2) != nil || tab.Acquire(2) != nil {
		t.Fatal("a missing id returned a region")
	}
	got := tab.Acquire(1)
	if got != a || tab.Len() != 1 {
		t.Fatal("Acquire did not return the region")
	}
	if tab.Remove(1) != a || tab.Remove(1) != nil || tab.Lookup(1) != nil {
		t.Fatal("Remove")
	}
	a.Release() // the table's reference
	select {
	case <-a.Drained():
		t.Fatal("drained while a reference is held")
	default:
	}
	got.Release()
	<-a.Drained()
	if a.Acquire() {
		t.Fatal("Acquire succeeded on a drained region")
	}
}

// TestDrainWaitsForEveryHolder races acquirers against removal: every
// successful Acquire is released before Drained closes.
func TestDrainWaitsForEveryHolder(t *testing.T) {
	var tab Table[*reg]
	r := newReg()
	tab.Add(7, r)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if g := tab.Acquire(7); g != nil {
					mu.Lock()
					held++
					mu.Unlock()
					mu.Lock()
					held--
					mu.Unlock()
					g.Release()
				}
			}
		}()
	}
	tab.Remove(7)
	r.Release()
	<-r.Drained()
	mu.Lock()
	if held != 0 {
		t.Fatalf("drained with %d holders", held)
	}
	mu.Unlock()
	wg.Wait()
}

// Ids that share a shard, ids of every shard and the edges of the id
// space are kept apart; Lookup allocates nothing.
func TestTableManyIDs(t *testing.T) {
	var tab Table[*reg]
	ids := []uint32{0, 1, shards, shards + 1, 2 * shards, ^uint32(0), ^uint32(0) - shards}
	for i := uint32(2); i < 3000; i += 7 {
		ids = append(ids, i)
	}
	regs := map[uint32]*reg{}
	for _, id := range ids {
		if _, dup := regs[id]; dup {
			continue
		}
		regs[id] = newReg()
		if !tab.Add(id, regs[id]) {
			t.Fatalf("Add(%d) refused", id)
		}
	}
	if tab.Len() != len(regs) {
		t.Fatalf("Len = %d, want %d", tab.Len(), len(regs))
	}
	for id, r := range regs {
		if tab.Lookup(id) != r {
			t.Fatalf("Lookup(%d) is another region", id)
		}
	}
	if n := testing.AllocsPerRun(100, func() { tab.Lookup(shards + 1) }); n != 0 {
		t.Fatalf("Lookup allocates %v times", n)
	}
	for id := range regs {
		if id%2 == 0 && tab.Remove(id) != regs[id] {
			t.Fatalf("Remove(%d)", id)
		}
	}
	for id, r := range regs {
		if want := map[bool]*reg{true: nil, false: r}[id%2 == 0]; tab.Lookup(id) != want {
			t.Fatalf("after removing the even ids, Lookup(%d) = %v", id, tab.Lookup(id))
		}
	}
}
