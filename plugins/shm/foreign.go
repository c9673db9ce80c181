package shm

import (
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Memory the application allocated itself (a local region with Foreign
// set: a Go slice, C malloc, an anonymous mapping) is not mapped here,
// and it has no memfd to share. shm reaches it on this side only: a
// descriptor on it copies with cross-memory attach straight between the
// host process and the peer's region mapped here (process_vm_readv for a
// write, process_vm_writev for a read). That call replaces the memcpy a
// memfd region gets, so the extra copy is none. The copies split over the
// workers as memcpys do, and the local region's reference is held across
// them, so UnregisterMemory still returns only when nothing touches the
// memory. A copy that faults (the application freed registered memory)
// fails the descriptor with StatusIO and touches nothing else.
//
// A peer cannot reach such memory through shm: there is nothing to hand
// it, and a query for the region is answered StatusUnsupported. The
// plugin says so in Describe (ForeignLocalOnly), and the host routes a
// request whose target is such memory to a transport that serves it.

// runForeign copies o, whose local side is foreign, to or from mapped, the
// remote range: inline when small, on the worker pool otherwise. The
// remote side has been checked (run).
func (t *Transport) runForeign(o *op, mapped []byte) {
	if o.n <= t.set.inlineMax {
		t.stats.copiesInline.Add(1)
		st := ring.StatusOK
		if !t.copyForeign(o, mapped, 0) {
			st = ring.StatusIO
		}
		t.finish(o, st)
		return
	}
	t.pool.dispatch(t, o, mapped, nil)
}

// copyForeign copies the part of o at offset off (len(mapped) bytes)
// between the host process and mapped, the peer's memory: out of the
// host for a write, into it for a read. It reports false when the copy
// failed, counted.
func (t *Transport) copyForeign(o *op, mapped []byte, off uint64) bool {
	var err error
	if o.kind == ring.OpWrite {
		err = kit.CopyIn(o.lf, o.lOff+off, mapped)
	} else {
		err = kit.CopyOut(o.lf, o.lOff+off, mapped)
	}
	if err != nil {
		t.stats.foreignFaults.Add(1)
		return false
	}
	t.stats.foreignCopied.Add(uint64(len(mapped)))
	return true
}
