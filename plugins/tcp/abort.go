package tcp

import (
	"context"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

var _ sdk.Aborter = (*Transport)(nil)

// Abort gives back early the descriptors this transport holds whose
// tokens are listed (sdk.Aborter): the host canceled their task, or it
// timed out, and reports it ended only once nothing touches its memory.
//
//   - A queued descriptor (not yet on the wire) is taken off its slot's
//     queue and completes StatusCanceled: it never leaves.
//   - A read in flight is marked: its reader writes no more of the local
//     memory, reads what is left of the payload into scratch memory (the
//     connection stays in step) and completes it StatusCanceled.
//   - A write in flight cannot be called back: it completes as the peer
//     answers, and may have partly or wholly landed.
//
// It returns how many descriptors it found to give back.
func (t *Transport) Abort(_ context.Context, tokens []uint64) (int, error) {
	if len(tokens) == 0 {
		return 0, nil
	}
	set := make(map[uint64]struct{}, len(tokens))
	for _, tok := range tokens {
		set[tok] = struct{}{}
	}
	n := 0
	for _, p := range t.base.Peers.List() {
		for _, s := range p.slots {
			n += s.abortQueued(set)
			n += s.abortReads(set)
		}
	}
	return n, nil
}

// abortQueued completes StatusCanceled the queued ops whose tokens are in
// set, and returns how many.
func (s *slot) abortQueued(set map[uint64]struct{}) int {
	out, n := s.takeIf(func(o *op) bool { _, ok := set[o.token]; return ok })
	s.t.stats.opsAborted.Add(uint64(n))
	s.t.completeList(out, ring.StatusCanceled)
	return n
}

// abortReads marks the reads in flight on the slot's connection whose
// tokens are in set (see readPayload), and returns how many. An op in the
// connection's FIFO is the reader's until it leaves the FIFO, under the
// same lock, so the mark never lands on an op already completed.
func (s *slot) abortReads(set map[uint64]struct{}) int {
	s.mu.Lock()
	cc := s.cur
	s.mu.Unlock()
	if cc == nil {
		return 0
	}
	n := 0
	cc.mu.Lock()
	for o := cc.head; o != nil; o = o.next {
		if _, ok := set[o.token]; ok && o.kind == ring.OpRead && !o.aborted.Load() {
			o.aborted.Store(true)
			n++
		}
	}
	cc.mu.Unlock()
	if n > 0 && cc.link.raw != nil {
		// A read system call that looked at the mark just before it was
		// set may still be writing the op's memory: wait it out, so that
		// nothing is written there once Abort returns.
		cc.link.raw.quiesce()
	}
	return n
}

// discard reads n payload bytes into the connection's scratch memory
// and, with the last of them, whatever of next is already there, as
// readFullNext does; it returns how many bytes of next it got.
func (cc *clientConn) discard(n int, next []byte) (int, error) {
	if cc.scratch == nil {
		cc.scratch = make([]byte, scratchBytes)
	}
	for n > len(cc.scratch) {
		if err := cc.link.readFull(cc.scratch); err != nil {
			return 0, err
		}
		n -= len(cc.scratch)
	}
	if n == 0 {
		return 0, nil
	}
	if len(next) == 0 {
		return 0, cc.link.readFull(cc.scratch[:n])
	}
	return cc.link.readFullNext(cc.scratch[:n], next)
}

// scratchBytes is the size of a connection's scratch memory, allocated
// at its first aborted read.
const scratchBytes = 64 << 10
