package soak

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// Model is what the remote buffer may hold, per Block, given the writes
// submitted to it and how each ended. Writes to one block never overlap
// in time (each soak worker owns its range and waits for each batch), so
// for every block two numbers say it all:
//
//   - newest: the id of the newest write to it that ended COMPLETED (0:
//     none since the buffer was registered; it holds zeroes);
//   - touched: the id of the newest write to it, however it ended.
//
// The block is known when touched == newest: a COMPLETED read must show
// exactly write newest's bytes. Otherwise the writes after newest ended
// TIMEOUT, CANCELED or FAILED (or are in flight): each of their bytes may
// or may not have landed, so any of them, or newest's, is right. Bytes of
// a write older than newest are a stale write, whatever else is known:
// they landed after a newer write had COMPLETED over them.
//
// Ids grow over the whole run, across Reset; a Reset (the target restarted
// with fresh memory) starts a new epoch, and outcomes of writes and reads
// submitted before it are ignored.
type Model struct {
	mu     sync.Mutex
	key    uint64
	blocks []blockState
	nextID uint32
	// epoch counts Resets; epochStart is the first id of this epoch.
	epoch      uint64
	epochStart uint32
}

type blockState struct{ newest, touched uint32 }

// NewModel is the model of a remote buffer of size bytes (a multiple of
// Block) that holds zeroes, under pattern key key.
func NewModel(size int64, key uint64) *Model {
	return &Model{key: key, blocks: make([]blockState, size/Block), nextID: 1, epochStart: 1}
}

// Key is the pattern key of the run.
func (m *Model) Key() uint64 { return m.key }

// Epoch is the current epoch: pass it back to End and Check.
func (m *Model) Epoch() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// Begin records a write of n bytes at off about to be submitted and
// returns its id and the epoch it belongs to.
func (m *Model) Begin(off, n int64) (id uint32, epoch uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id = m.nextID
	if id >= MaxID {
		panic("soak: more writes than a pattern can name")
	}
	m.nextID++
	for b := off / Block; b < (off+n)/Block; b++ {
		m.blocks[b].touched = id
	}
	return id, m.epoch
}

// End records how write id (from Begin, in epoch) ended.
func (m *Model) End(id uint32, epoch uint64, off, n int64, completed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch != m.epoch || !completed {
		return
	}
	for b := off / Block; b < (off+n)/Block; b++ {
		if m.blocks[b].newest < id {
			m.blocks[b].newest = id
		}
	}
}

// Reset says the remote buffer was registered afresh (zeroes) and starts
// a new epoch.
func (m *Model) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.blocks)
	m.epoch++
	m.epochStart = m.nextID
}

// Verdict is what a COMPLETED read showed, in bytes.
type Verdict struct {
	OK    uint64
	Older uint64 // bytes of a write older than the newest COMPLETED one
	Other uint64 // bytes of no write that may be there
	// First describes the first wrong word, "" when none.
	First string
}

// Wrong is Older + Other.
func (v Verdict) Wrong() uint64 { return v.Older + v.Other }

// Check classifies b, which a read submitted in epoch returned COMPLETED
// from remote offset off (a multiple of 8). A read of an older epoch is
// not judged: ok is false.
func (m *Model) Check(epoch uint64, off int64, b []byte) (v Verdict, ok bool) {
	m.mu.Lock()
	if epoch != m.epoch {
		m.mu.Unlock()
		return v, false
	}
	first, last := off/Block, (off+int64(len(b))+Block-1)/Block
	states := append([]blockState(nil), m.blocks[first:last]...)
	epochStart := m.epochStart
	m.mu.Unlock()
	for i := 0; i+8 <= len(b); i += 8 {
		at := uint64(off) + uint64(i)
		st := states[int64(at)/Block-first]
		id, dec := Decode(m.key, at, binary.LittleEndian.Uint64(b[i:]))
		c := classOther
		if dec {
			c = classify(st, id, epochStart)
		}
		switch c {
		case classOK:
			v.OK += 8
			continue
		case classOlder:
			v.Older += 8
		case classOther:
			v.Other += 8
		}
		if v.First == "" {
			known := "known"
			if st.touched != st.newest {
				known = fmt.Sprintf("unknown: writes %d..%d did not complete", st.newest+1, st.touched)
			}
			found := fmt.Sprintf("write %d's bytes", id)
			if !dec {
				found = fmt.Sprintf("bytes of no write (%#016x)", binary.LittleEndian.Uint64(b[i:]))
			}
			v.First = fmt.Sprintf("offset %d: %s where write %d COMPLETED last (%s)", at, found, st.newest, known)
		}
	}
	return v, true
}

type class int

const (
	classOK class = iota
	classOlder
	classOther
)

// classify judges one word of write id in a block in state st; ids from
// epochStart on were issued in this epoch.
func classify(st blockState, id, epochStart uint32) class {
	switch {
	case id == st.newest:
		return classOK
	case id > st.newest && id <= st.touched:
		return classOK // a write that did not complete may have landed
	case id == 0:
		// Zeroes under a COMPLETED write: it never arrived, nothing
		// older came back.
		return classOther
	case id < st.newest:
		return classOlder
	case id < epochStart:
		// Issued before the target restarted, to this offset: an old
		// write that landed in the new buffer.
		return classOlder
	}
	// Issued in this epoch but never to this block, or never issued.
	return classOther
}
