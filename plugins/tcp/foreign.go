package tcp

import (
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Memory the application allocated itself (a region with Foreign set) is
// not mapped here. tcp moves it with one extra copy through a bounce
// buffer: a write's payload is read out of the host process before it is
// queued, a read's payload lands in the bounce buffer and is written into
// the host process before the descriptor completes; on the serving side a
// peer's write is received into a bounce buffer and then written into the
// host, and a peer's read is answered from a bounce buffer filled from the
// host. The region's reference is held across the copies, so
// UnregisterMemory still returns only when nothing touches the memory.
// A copy that faults (the application freed registered memory) fails the
// descriptor with StatusIO and touches nothing else.

// stage gives o, a descriptor on foreign region r at offset off, its
// bounce buffer, filled from the host for a write. It reports false, and
// completes nothing, when the copy failed.
func (t *Transport) stage(o *op, r *region, off, n uint64) bool {
	b := kit.GetBounce(int(n))
	if o.kind == ring.OpWrite {
		if err := kit.CopyIn(r.Foreign, off, b.B); err != nil {
			b.Put()
			t.stats.foreignFaults.Add(1)
			return false
		}
		t.stats.foreignCopied.Add(n)
	}
	o.bounce, o.lOffset, o.mem = b, off, b.B
	return true
}

// unstage ends o's bounce buffer: a read that succeeded is written into
// the host first. It returns the status o completes with.
func (t *Transport) unstage(o *op, st ring.Status, n uint64) ring.Status {
	if o.bounce == nil {
		return st
	}
	if st == ring.StatusOK && o.kind == ring.OpRead {
		if err := kit.CopyOut(o.local.Foreign, o.lOffset, o.mem[:n]); err != nil {
			t.stats.foreignFaults.Add(1)
			st = ring.StatusIO
		} else {
			t.stats.foreignCopied.Add(n)
		}
	}
	o.bounce.Put()
	o.bounce = nil
	return st
}

// serveForeignWrite receives a peer's write of h.Length bytes for foreign
// region r into a bounce buffer and writes it into the host. It returns
// the status to answer.
func (sc *serverConn) serveForeignWrite(r *region, h *Header) (ring.Status, error) {
	if err := sc.stage(h.Length); err != nil {
		return ring.StatusIO, err
	}
	sc.cur.Store(r) // a flush in stage cleared it
	defer sc.t.recv.release(h.Length)
	b := kit.GetBounce(int(h.Length))
	defer b.Put()
	if err := sc.recv(b.B); err != nil {
		return ring.StatusIO, err
	}
	if err := kit.CopyOut(r.Foreign, h.Offset, b.B); err != nil {
		sc.t.stats.foreignFaults.Add(1)
		return ring.StatusIO, nil
	}
	sc.t.stats.foreignCopied.Add(h.Length)
	return ring.StatusOK, nil
}

// foreignPayload fills a bounce buffer from foreign region r for a peer's
// read, within the receive budget (released with the held response); nil
// when the copy failed, or the budget could not be had (err says why
// when the connection must end).
func (sc *serverConn) foreignPayload(r *region, h *Header) (*kit.Bounce, error) {
	if err := sc.stage(h.Length); err != nil {
		return nil, err
	}
	b := kit.GetBounce(int(h.Length))
	if err := kit.CopyIn(r.Foreign, h.Offset, b.B); err != nil {
		sc.t.recv.release(h.Length)
		b.Put()
		sc.t.stats.foreignFaults.Add(1)
		return nil, nil
	}
	sc.t.stats.foreignCopied.Add(h.Length)
	return b, nil
}
