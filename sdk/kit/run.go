package kit

import (
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Run is Accept for the descriptors of one run (sdk.RunSubmitter): the
// peer and the local region its descriptors share are looked up once,
// and the region's reference is taken once, for the run, not once a
// descriptor. Begin it with Base.BeginRun at the top of SubmitRun and
// End it before SubmitRun returns; it lives on SubmitRun's stack and is
// used by one goroutine.
type Run[R Region, P Peer] struct {
	b *Base[R, P]

	peer   P
	peerID uint32

	reg   R // the run's reference held; the zero R: none
	regID uint32

	ok uint64 // descriptors the run completed StatusOK (Done), counted at End
}

// BeginRun starts a run's lookups.
func (b *Base[R, P]) BeginRun() Run[R, P] { return Run[R, P]{b: b} }

// Accept is Base.Accept for a descriptor of the run, with one
// difference: the region's reference belongs to the run and ends with
// it. A caller that uses the region after End (a copy handed to another
// goroutine, a descriptor parked until its peer answers) takes a
// reference of its own (R.Acquire, which cannot fail while the run holds
// one). The run's later descriptors do not see a region unregistered
// during the run (UnregisterMemory waits for the run's reference) or a
// peer closed during it: the transport's own state for that peer (a
// closed flag, references it holds) decides what becomes of them.
func (u *Run[R, P]) Accept(d *ring.Descriptor, c sdk.Completer) (P, R, []byte, bool) {
	var zp P
	var zr R
	b := u.b
	if !b.Outcomes.Admit(d, c, b.stopped.Load()) {
		return zp, zr, nil, false
	}
	if u.peer == zp || d.Peer != u.peerID {
		p, ok := b.peer(d, c)
		if !ok {
			return zp, zr, nil, false
		}
		u.peer, u.peerID = p, d.Peer
	}
	if u.reg == zr || d.LocalRegion != u.regID {
		u.releaseRegion()
		r, ok := b.region(d, c)
		if !ok {
			return zp, zr, nil, false
		}
		u.reg, u.regID = r, d.LocalRegion
	}
	mem, ok := b.localBytes(u.reg, d, c)
	if !ok {
		return zp, zr, nil, false
	}
	return u.peer, u.reg, mem, true
}

// Done counts one descriptor of the run that completed StatusOK (in
// ops_completed, at End); other outcomes are counted as they happen
// (Base.Fail, Outcomes.Count).
func (u *Run[R, P]) Done() { u.ok++ }

// End releases what the run holds and counts what it completed.
func (u *Run[R, P]) End() {
	u.releaseRegion()
	u.b.Outcomes.CountOK(u.ok)
	u.ok = 0
	var zp P
	u.peer = zp
}

func (u *Run[R, P]) releaseRegion() {
	var zr R
	if u.reg != zr {
		u.reg.Release()
		u.reg = zr
	}
}
