package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host"
)

// roundSeeds returns the pattern seeds of a bench round: sources hold src,
// destinations are filled with dst before the clock starts, so that a
// destination that a round did not reach still differs from its source.
// Both carry the run's nonce: no earlier run, and no earlier round, left
// the bytes that this round's sources hold anywhere. No seed is 0.
func roundSeeds(o benchOpts, round int) (src, dst uint64) {
	return o.nonce<<8 | uint64(2*round+1), o.nonce<<8 | uint64(2*round+2)
}

// fillPattern writes seed's pattern into b. The words are an xorshift64
// sequence: none is zero, neighbours differ, and two seeds give two
// different fillings. It runs at memory speed, so a fill of the largest
// bench buffers costs a fraction of a second, off the clock.
func fillPattern(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 | 1
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	n := len(b) &^ 7
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], next())
	}
	if n < len(b) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], next())
		copy(b[n:], tail[:])
	}
}

// ferryLayout is the shape of Ferry's side of a run: thread th owns
// requests th*batch .. th*batch+batch-1, request i covers bytes
// i*size .. (i+1)*size of the local buffer and of the remote one.
type ferryLayout struct {
	e          *host.Engine
	seg        host.SegmentID
	remoteBase uint64
	o          benchOpts
	policy     string
}

// requests returns thread th's batch of op over local.
func (l ferryLayout) requests(op host.Op, local []byte, th int) []host.Request {
	var reqs []host.Request
	for k := range l.o.batch {
		off := (int64(th)*int64(l.o.batch) + int64(k)) * l.o.size
		reqs = append(reqs, host.Request{Op: op, Local: local[off : off+l.o.size], Segment: l.seg,
			Remote: l.remoteBase + uint64(off), Transport: l.o.transport, Policy: l.policy})
	}
	return reqs
}

// run submits one batch on id and waits for it; it returns the bytes the
// batch moved or the first task's error. With split, it adds the time
// the batch spent in Submit and then in Wait there.
func (l ferryLayout) run(ctx context.Context, id host.BatchID, reqs []host.Request, split *batchSplit) (uint64, error) {
	var t0, t1 time.Time
	if split != nil {
		t0 = time.Now()
	}
	if err := l.e.Submit(id, reqs...); err != nil {
		return 0, err
	}
	if split != nil {
		t1 = time.Now()
	}
	if err := l.e.Wait(ctx, id); err != nil {
		return 0, err
	}
	if split != nil {
		split.submit = append(split.submit, t1.Sub(t0))
		split.wait = append(split.wait, time.Since(t1))
	}
	st, err := l.e.BatchStatus(id)
	if err != nil {
		return 0, err
	}
	if st.Failed > 0 {
		for i := range st.Tasks {
			if ts, _ := l.e.TaskStatus(id, i); ts.Err != nil {
				return 0, ts.Err
			}
		}
		return 0, fmt.Errorf("%s %s: %d of %d tasks failed without an error", l.o.transport, opName(l.o.op), st.Failed, len(reqs))
	}
	return st.Bytes, nil
}

// move does op once over the whole of local (every thread's batch, one
// after the other), off the clock.
func (l ferryLayout) move(ctx context.Context, op host.Op, local []byte) error {
	for th := range l.o.threads {
		id, err := l.e.AllocateBatch(l.o.batch)
		if err != nil {
			return err
		}
		_, err = l.run(ctx, id, l.requests(op, local, th), nil)
		l.e.FreeBatch(id)
		if err != nil {
			return fmt.Errorf("%s of the remote buffer, thread %d's range: %w", opName(op), th, err)
		}
	}
	return nil
}

func opName(op host.Op) string {
	if op == host.Read {
		return "read"
	}
	return "write"
}

// remoteMem is the far engine's buffer as the bench reaches it outside
// the measured transfers: to fill it before a round, as the source of
// reads or the destination of writes, and to checksum it after the last.
type remoteMem interface {
	fillSource(seed uint64) error
	fillDest(seed uint64) error
	sum() ([sha256.Size]byte, error)
}

// targetMem is the buffer of the target engine that bench started: its
// stdin control lines fill it and hash it in its own process, so the
// check does not go through Ferry.
type targetMem struct {
	t *target
	n int64
}

func (m targetMem) fillSource(seed uint64) error { return m.fill(seed) }
func (m targetMem) fillDest(seed uint64) error   { return m.fill(seed) }

func (m targetMem) fill(seed uint64) error {
	ans, err := m.t.ask(fmt.Sprintf("fill %d", seed))
	if err != nil {
		return fmt.Errorf("fill the target's buffer: %w", err)
	}
	if ans != "ok" {
		return fmt.Errorf("fill the target's buffer: it answered %q, want ok", ans)
	}
	return nil
}

func (m targetMem) sum() ([sha256.Size]byte, error) { return targetSum(m.t, 0, m.n) }

// ferryMem is a remote engine that bench did not start (--target): Ferry
// itself writes the pattern there from a scratch buffer and reads it back
// into that buffer, first poisoned with a pattern of its own.
type ferryMem struct {
	lay     ferryLayout
	scratch []byte
}

// fillDest writes nothing: every round's source pattern is new to this
// run (roundSeeds), so the far buffer differs from it until the round's
// transfers reach it, and its pages are the far engine's Allocate, mapped
// populated and written by each round's warm-up before the clock. Filling
// it through Ferry would add a second write of the whole buffer per round
// to the rails' statistics (tests compare rail shares).
func (m ferryMem) fillDest(uint64) error { return nil }

func (m ferryMem) fillSource(seed uint64) error {
	fillPattern(m.scratch, seed)
	if err := m.lay.move(context.Background(), host.Write, m.scratch); err != nil {
		return fmt.Errorf("fill the remote buffer through Ferry: %w", err)
	}
	return nil
}

func (m ferryMem) sum() ([sha256.Size]byte, error) {
	fillPattern(m.scratch, 0) // no round uses seed 0
	if err := m.lay.move(context.Background(), host.Read, m.scratch); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("read the remote buffer back through Ferry: %w", err)
	}
	return sha256.Sum256(m.scratch), nil
}

// ferrySide is Ferry's part of a run: one batch per thread, built once.
type ferrySide struct {
	ctx    context.Context
	lay    ferryLayout
	local  []byte
	remote remoteMem
	reqs   [][]host.Request
	ids    []host.BatchID
	splits []batchSplit // each thread's, since resetSplits
	counts []uint64     // each thread's batches, for splitEvery
}

// splitEvery: one batch in this many is split (batchSplit). The clock
// costs about 50 ns a reading on a VM, three a split, against 2 us for a
// 4 KiB shm write: split every batch, the figure would move the one it
// explains.
const splitEvery = 16

// batchSplit is where the batches of one thread spent their time: in
// Submit, and from its return until Wait's. A batch whose time is mostly
// Submit is bound by the engine's per-request work on the submitting
// thread; one whose Wait takes long after a quick Submit, by what comes
// after (the plugins, the wire, the peer).
type batchSplit struct {
	submit, wait []time.Duration
}

// resetSplits forgets the splits noted so far (a warm-up's).
func (f *ferrySide) resetSplits() {
	for th := range f.splits {
		f.splits[th].submit, f.splits[th].wait = f.splits[th].submit[:0], f.splits[th].wait[:0]
	}
}

// addSplits adds every thread's splits to r.
func (f *ferrySide) addSplits(r *result) {
	for th := range f.splits {
		r.submit = append(r.submit, f.splits[th].submit...)
		r.wait = append(r.wait, f.splits[th].wait...)
	}
}

func newFerrySide(ctx context.Context, lay ferryLayout, local []byte, remote remoteMem) (*ferrySide, error) {
	f := &ferrySide{ctx: ctx, lay: lay, local: local, remote: remote, splits: make([]batchSplit, lay.o.threads), counts: make([]uint64, lay.o.threads)}
	for th := range lay.o.threads {
		f.reqs = append(f.reqs, lay.requests(lay.o.op, local, th))
		id, err := lay.e.AllocateBatch(lay.o.batch)
		if err != nil {
			return nil, err
		}
		f.ids = append(f.ids, id)
	}
	return f, nil
}

func (f *ferrySide) work(th int) (uint64, error) {
	var split *batchSplit
	if f.counts[th]%splitEvery == 0 {
		split = &f.splits[th]
	}
	f.counts[th]++
	n, err := f.lay.run(f.ctx, f.ids[th], f.reqs[th], split)
	if err != nil {
		return 0, err
	}
	f.lay.e.FreeBatch(f.ids[th])
	if f.ids[th], err = f.lay.e.AllocateBatch(f.lay.o.batch); err != nil {
		return 0, err
	}
	return n, nil
}

// fill writes round's source pattern where Ferry reads and another one
// where it writes.
func (f *ferrySide) fill(round int) error {
	src, dst := roundSeeds(f.lay.o, round)
	if f.lay.o.op == host.Write {
		fillPattern(f.local, src)
		return f.remote.fillDest(dst)
	}
	fillPattern(f.local, dst)
	return f.remote.fillSource(src)
}

// verify checks that the local buffer and the remote one hold the same
// bytes after round: fill made them differ, so only Ferry's transfers of
// that round can have made them equal.
func (f *ferrySide) verify(round int) error {
	local := sha256.Sum256(f.local)
	remote, err := f.remote.sum()
	if err != nil {
		return fmt.Errorf("verify Ferry's %s %s: %w", f.lay.o.transport, opName(f.lay.o.op), err)
	}
	if local != remote {
		return fmt.Errorf("verify Ferry's %s %s: after round %d the local buffer (sha256 %x) and the remote one (sha256 %x) differ over %d bytes: "+
			"the transfers reported success but did not deliver the bytes; rerun with --log-level debug and report it against the %s plugin",
			f.lay.o.transport, opName(f.lay.o.op), round+1, local[:8], remote[:8], len(f.local), f.lay.o.transport)
	}
	return nil
}
