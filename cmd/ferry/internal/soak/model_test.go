package soak

import (
	"encoding/binary"
	"strings"
	"testing"
)

const testKey = 0x5eed

// write is one write of a scenario: n blocks at block off, ending
// COMPLETED or not.
type write struct {
	off, n    int64
	completed bool
}

// TestModelCheck: what a COMPLETED read of block 0..3 may show, after a
// history of writes, when it shows the bytes of write "shows" (an index
// into the history, -1 for zeroes, -2 for garbage) in block 1.
func TestModelCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []write
		reset   int // Reset before history[reset]; -1 for none
		shows   int
		older   bool
		other   bool
	}{
		{"fresh buffer holds zeroes", nil, -1, -1, false, false},
		{"the completed write", []write{{0, 4, true}}, -1, 0, false, false},
		{"zeroes under a completed write are lost, not older", []write{{0, 4, true}}, -1, -1, false, true},
		{"garbage", []write{{0, 4, true}}, -1, -2, false, true},
		{"newest of two completed", []write{{0, 4, true}, {1, 1, true}}, -1, 1, false, false},
		{"older of two completed is stale", []write{{0, 4, true}, {1, 1, true}}, -1, 0, true, false},
		{"timed-out write may have landed", []write{{0, 4, true}, {1, 2, false}}, -1, 1, false, false},
		{"or not", []write{{0, 4, true}, {1, 2, false}}, -1, 0, false, false},
		{"two failed writes after a completed one: either", []write{{0, 4, true}, {1, 1, false}, {0, 4, false}}, -1, 1, false, false},
		{"unknown range still refuses what is older than the newest completed", []write{{0, 4, true}, {0, 4, true}, {1, 1, false}}, -1, 0, true, false},
		{"a failed write, then a completed one: the failed one is stale", []write{{0, 4, true}, {1, 1, false}, {0, 4, true}}, -1, 1, true, false},
		{"a write to other blocks is other here", []write{{0, 4, true}, {3, 1, true}}, -1, 1, false, true},
		{"after a reset, zeroes", []write{{0, 4, true}}, 1, -1, false, false},
		{"after a reset, a write of the old epoch is older", []write{{0, 4, true}, {0, 4, true}}, 1, 0, true, false},
		{"after a reset, the new write", []write{{0, 4, true}, {0, 4, true}}, 1, 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel(8*Block, testKey)
			var ids []uint32
			for i, w := range tc.history {
				if i == tc.reset {
					m.Reset()
				}
				id, ep := m.Begin(w.off*Block, w.n*Block)
				m.End(id, ep, w.off*Block, w.n*Block, w.completed)
				ids = append(ids, id)
			}
			if tc.reset == len(tc.history) {
				m.Reset()
			}
			// Block 1 as the read sees it; blocks 0, 2, 3 as the model
			// expects them, so that only block 1 can be wrong.
			buf := make([]byte, 4*Block)
			expect := func(b int64) []byte { return expected(m, b) }
			copy(buf[0:], expect(0))
			copy(buf[2*Block:], expect(2))
			copy(buf[3*Block:], expect(3))
			blk := buf[Block : 2*Block]
			switch tc.shows {
			case -1:
				clear(blk)
			case -2:
				Poison(blk)
			default:
				Fill(blk, testKey, ids[tc.shows], Block)
			}
			v, ok := m.Check(m.Epoch(), 0, buf)
			if !ok {
				t.Fatal("Check refused a read of this epoch")
			}
			if (v.Older > 0) != tc.older || (v.Other > 0) != tc.other {
				t.Fatalf("verdict %+v; want older %v, other %v", v, tc.older, tc.other)
			}
			if v.Wrong() > 0 && (v.Wrong() != Block || v.OK != 3*Block || !strings.Contains(v.First, "offset 4096:")) {
				t.Fatalf("verdict %+v: want one wrong block at offset 4096", v)
			}
			if v.Wrong() == 0 && v.First != "" {
				t.Fatalf("no wrong byte but First = %q", v.First)
			}
		})
	}
}

// expected is block b as the model says a COMPLETED read shows it: the
// newest completed write's pattern.
func expected(m *Model, b int64) []byte {
	out := make([]byte, Block)
	if id := m.blocks[b].newest; id != 0 {
		Fill(out, m.key, id, uint64(b*Block))
	}
	return out
}

// TestModelMixedWords: an unknown block may hold a mix of words, each
// judged on its own; one stale word in a known block counts 8 bytes.
func TestModelMixedWords(t *testing.T) {
	m := NewModel(2*Block, testKey)
	a, ep := m.Begin(0, 2*Block)
	m.End(a, ep, 0, 2*Block, true)
	b, ep := m.Begin(0, Block)
	m.End(b, ep, 0, Block, false)
	buf := make([]byte, 2*Block)
	Fill(buf[:Block/2], testKey, a, 0)
	Fill(buf[Block/2:Block], testKey, b, Block/2)
	Fill(buf[Block:], testKey, a, Block)
	if v, _ := m.Check(ep, 0, buf); v.Wrong() != 0 || v.OK != 2*Block {
		t.Fatalf("mix of the completed and the timed-out write: %+v", v)
	}
	c, ep := m.Begin(Block, Block)
	m.End(c, ep, Block, Block, true)
	Fill(buf[Block:], testKey, c, Block)
	binary.LittleEndian.PutUint64(buf[Block+64:], word(testKey, a, Block+64))
	v, _ := m.Check(ep, 0, buf)
	if v.Older != 8 || v.Other != 0 || !strings.Contains(v.First, "write 1's bytes where write 3 COMPLETED last (known)") {
		t.Fatalf("one stale word: %+v", v)
	}
}

// TestModelEpochs: outcomes of an older epoch change nothing, and reads
// of one are not judged.
func TestModelEpochs(t *testing.T) {
	m := NewModel(Block, testKey)
	id, ep := m.Begin(0, Block)
	m.Reset()
	m.End(id, ep, 0, Block, true)
	if m.blocks[0].newest != 0 {
		t.Fatal("a write of the old epoch completed into the new one")
	}
	if _, ok := m.Check(ep, 0, make([]byte, Block)); ok {
		t.Fatal("a read of the old epoch was judged")
	}
	if v, ok := m.Check(m.Epoch(), 0, make([]byte, Block)); !ok || v.Wrong() != 0 {
		t.Fatalf("zeroes after the reset: %+v %v", v, ok)
	}
}

func TestDecode(t *testing.T) {
	for _, off := range []uint64{0, 8, 4096, 16 << 20, 1 << 34} {
		for _, id := range []uint32{1, 2, 77, MaxID} {
			got, ok := Decode(testKey, off, word(testKey, id, off))
			if !ok || got != id {
				t.Fatalf("Decode(word(%d, %d)) = %d, %v", id, off, got, ok)
			}
			if _, ok := Decode(testKey, off+8, word(testKey, id, off)); ok {
				t.Fatalf("a word of offset %d decodes at offset %d", off, off+8)
			}
			if _, ok := Decode(testKey+1, off, word(testKey, id, off)); ok {
				t.Fatalf("a word of another run's key decodes")
			}
		}
	}
}
