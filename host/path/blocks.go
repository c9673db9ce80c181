package path

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/blocks"
	"github.com/ferrydev/ferry/host/failover"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/slicer"
	"github.com/ferrydev/ferry/host/validate"
	"github.com/ferrydev/ferry/sdk/wallclock"
)

// Prepared block lists: the request path for many fixed-size blocks (a
// KV cache's), named by index. An application describes each side's
// layout once (PrepareBlocks), where its bounds are checked, and then
// submits (local index, remote index) pairs or ranges (SubmitBlocks,
// SubmitBlockRange), checked per index only against the block counts.
//
// A task of a block submission is a run: consecutive pairs of the call
// whose blocks follow each other on both sides (in one registered buffer
// on each side) move as one range, one task with its own TaskStatus;
// with BlockRequest.NoMerge every pair is its own task. The tasks of one
// call are added to the batch in the order of its pairs, and
// BlockList.RunStarts says which pairs each covers.

// BlockLayout describes where a side's blocks lie, from the address of
// block 0 of layer 0: BlockSize, Blocks per layer, Stride between blocks
// (0: packed), Layers (0: one) and LayerStride (0: packed layers). Block
// i is block i%Blocks of layer i/Blocks.
type BlockLayout = blocks.Layout

// BlockPair is one block transfer: a local block index and a remote one.
type BlockPair = blocks.Pair

// BlockList is a prepared pair of layouts: local memory and a remote
// segment's. It is safe for concurrent submissions.
type BlockList struct {
	e        *Executor
	seg      SegmentID
	name     string // the segment's, for errors
	inc      uint64 // the incarnation it was prepared against
	local    []byte
	localArg BlockLayout
	side     blocks.Side // local, fitted once
	extent   uint64      // side's extent: the bytes from its block 0 to its end
	remote   uint64
	rlayout  BlockLayout
	// bound is the list against the segment handle it was last checked
	// against: a handle is replaced (never changed) when the segment's
	// descriptor changes, and a replaced one is checked again.
	bound atomic.Pointer[boundBlocks]
	// routes[op&1] is the route the last submission of op took, and what
	// it was chosen from (blockRoute).
	routes [2]atomic.Pointer[blockRoute]
}

// boundBlocks is a block list fitted against one descriptor.
type boundBlocks struct {
	h           *remote
	list        *blocks.List
	read, write bool // every buffer the remote layout lies in allows it
}

// BlockRequest is what a block submission applies to each of its tasks:
// a Request's fields but the ranges.
type BlockRequest struct {
	Op        Op
	Priority  Priority
	Deadline  time.Time // as Request.Deadline
	Transport string    // as Request.Transport
	Intent    Intent
	Tenant    string // as Request.Tenant
	Policy    string
	// NoMerge makes each pair its own task, even where its blocks follow
	// the previous pair's on both sides.
	NoMerge bool
}

// blockChunk is how many runs a block submission puts on a lane before
// it publishes them.
const blockChunk = 64

// BlockTasks names the tasks a block submission added to its batch:
// First up to First+Count, in the order of the pairs (when no other
// goroutine submits to the same batch meanwhile).
type BlockTasks struct {
	First, Count int
}

// PrepareBlocks is host.Engine.PrepareBlocks, which documents it.
func (e *Executor) PrepareBlocks(seg SegmentID, local []byte, ll BlockLayout, remote uint64, rl BlockLayout) (*BlockList, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	rem := e.remote(seg)
	if rem == nil {
		return nil, fmt.Errorf("%w: prepare blocks: segment handle %d is not open", ErrSegmentNotFound, seg)
	}
	if rem.Retired != "" {
		return nil, fmt.Errorf("%w: prepare blocks: %s", ErrSegmentNotFound, rem.Retired)
	}
	l := &BlockList{e: e, seg: seg, name: rem.Name, inc: rem.Desc.Incarnation, local: local, localArg: ll, remote: remote, rlayout: rl}
	base := uint64(addr(local))
	side, err := blocks.Fit(ll, base, func(p, n uint64) (blocks.Place, error) {
		if p-base+n > uint64(len(local)) {
			return blocks.Place{}, fmt.Errorf("%w: %#x+%d runs past the end of the %d bytes of local memory given", ErrOutOfBounds, p, n, len(local))
		}
		reg, off, ok := e.lookupLocal(p, n)
		if !ok {
			return blocks.Place{}, fmt.Errorf("%w: %#x+%d is not inside one registered buffer; register it with Engine.Register", ErrNotRegistered, p, n)
		}
		return blocks.Place{Region: reg, Offset: off}, nil
	})
	if err != nil {
		return nil, blocksErr("local layout", err)
	}
	l.side, l.extent = side, side.Layout.Extent()
	if _, err := l.bind(rem); err != nil {
		return nil, err
	}
	return l, nil
}

// bind fits l's remote layout against rem's descriptor, unless it was
// fitted against rem already.
func (l *BlockList) bind(rem *remote) (*boundBlocks, error) {
	if bb := l.bound.Load(); bb != nil && bb.h == rem {
		return bb, nil
	}
	if rem.Name != l.name || rem.Desc.Incarnation != l.inc {
		return nil, fmt.Errorf("%w: block list for segment %q (incarnation %#x): handle %d is now segment %q (incarnation %#x); prepare the blocks again",
			ErrSegmentNotFound, l.name, l.inc, l.seg, rem.Name, rem.Desc.Incarnation)
	}
	bb := &boundBlocks{h: rem, read: true, write: true}
	bufs := rem.Desc.Buffers
	side, err := blocks.Fit(l.rlayout, l.remote, func(p, n uint64) (blocks.Place, error) {
		i := segment.Find(bufs, p)
		if i < 0 {
			return blocks.Place{}, fmt.Errorf("%w: segment %q has no registered buffer at %#x", ErrOutOfBounds, rem.Name, p)
		}
		b := &bufs[i]
		if p+n > b.Base+b.Length {
			return blocks.Place{}, fmt.Errorf("%w: %#x+%d runs past the end of the buffer at %#x (%d bytes) in segment %q", ErrOutOfBounds, p, n, b.Base, b.Length, rem.Name)
		}
		bb.read = bb.read && b.Perm != segment.PermLocal
		bb.write = bb.write && b.Perm == segment.PermRemoteReadWrite
		return blocks.Place{Region: b.Region, Offset: p - b.Base}, nil
	})
	if err != nil {
		return nil, blocksErr("remote layout", err)
	}
	if bb.list, err = blocks.New(l.side, side); err != nil {
		return nil, blocksErr("block list", err)
	}
	l.bound.Store(bb)
	return bb, nil
}

// blocksErr puts an error of a block layout under the public taxonomy.
func blocksErr(what string, err error) error {
	switch {
	case errors.Is(err, blocks.ErrLayout):
		return asKind(ErrInvalid, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, blocks.ErrIndex):
		return asKind(ErrOutOfBounds, fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// RunStarts appends to dst the index of the first pair of each task
// SubmitBlocks(…, br, pairs) would add, as the list stands now.
func (l *BlockList) RunStarts(br BlockRequest, pairs []BlockPair, dst []int) ([]int, error) {
	src := blocks.Pairs(pairs)
	bb, _, err := l.check()
	if err != nil {
		return dst, err
	}
	if _, err := bb.list.Check(&src, !br.NoMerge); err != nil {
		return dst, blocksErr("blocks", err)
	}
	for k := 0; k < src.Len(); {
		dst = append(dst, k)
		k += bb.list.Next(&src, k, !br.NoMerge).N
	}
	return dst, nil
}

// check returns l bound to its segment as it is now.
func (l *BlockList) check() (*boundBlocks, *remote, error) {
	rem := l.e.remote(l.seg)
	if rem == nil {
		return nil, nil, fmt.Errorf("%w: blocks of segment %q: segment handle %d is not open (closed?); open it and prepare the blocks again", ErrSegmentNotFound, l.name, l.seg)
	}
	if rem.Retired != "" {
		return nil, nil, fmt.Errorf("%w: blocks of segment %q: %s", ErrSegmentNotFound, l.name, rem.Retired)
	}
	bb, err := l.bind(rem)
	return bb, rem, err
}

// SubmitBlocks is host.Engine.SubmitBlocks, which documents it; br is
// the caller's, read during the call (a copy is a noticeable share of
// a call of one pair).
func (e *Executor) SubmitBlocks(id BatchID, l *BlockList, br *BlockRequest, pairs []BlockPair) (BlockTasks, error) {
	src := blocks.Pairs(pairs)
	return e.submitBlocks(id, l, br, &src)
}

// SubmitBlockRange is host.Engine.SubmitBlockRange, which documents it;
// br as SubmitBlocks's.
func (e *Executor) SubmitBlockRange(id BatchID, l *BlockList, br *BlockRequest, local, remote uint32, n int) (BlockTasks, error) {
	src := blocks.Range(local, remote, n)
	return e.submitBlocks(id, l, br, &src)
}

func (e *Executor) submitBlocks(id BatchID, l *BlockList, br *BlockRequest, src *blocks.Source) (BlockTasks, error) {
	b := id.b
	switch {
	case b == nil:
		return BlockTasks{}, fmt.Errorf("%w: submit blocks: zero BatchID", ErrInvalid)
	case l == nil || l.e != e:
		return BlockTasks{}, fmt.Errorf("%w: submit blocks: the BlockList is nil or another engine's", ErrInvalid)
	case e.closed.Load():
		return BlockTasks{}, ErrClosed
	}
	size := l.side.Layout.BlockSize
	if f := validate.Basic(validate.Op(br.Op), size, true); f != validate.OK {
		return BlockTasks{}, fmt.Errorf("%w: submit blocks: %v (op %d)", ErrInvalid, f, br.Op)
	}
	bb, rem, err := l.check()
	if err != nil {
		return BlockTasks{}, err
	}
	if (br.Op == Write && !bb.write) || (br.Op == Read && !bb.read) {
		return BlockTasks{}, fmt.Errorf("%w: blocks of segment %q at %#x: a buffer they lie in does not allow a %s", ErrPermission, l.name, l.remote, br.Op)
	}
	merge := !br.NoMerge
	runs, err := bb.list.Check(src, merge)
	if err != nil {
		return BlockTasks{}, blocksErr(fmt.Sprintf("blocks of segment %q", l.name), err)
	}
	if b.Len()+runs > b.Cap() {
		return BlockTasks{}, fmt.Errorf("%w: submit blocks: %d tasks (%d pairs): batch holds %d of %d", ErrInvalid, runs, src.Len(), b.Len(), b.Cap())
	}
	out := BlockTasks{First: b.Len(), Count: runs}
	if runs == 0 {
		return out, nil
	}
	// Built in place, field by field: a composite literal is built aside
	// and copied, a noticeable share of a call of one pair.
	var c blockCall
	c.l, c.bb, c.rem, c.merge, c.local.base = l, bb, rem, merge, uint64(addr(l.local))
	// The local memory may have been unregistered since the list was
	// prepared: it is looked up again, as any request's is; once for the
	// call where one registered buffer holds the whole local side (as
	// PrepareBlocks found it), else run by run.
	c.local.lreg, c.local.loff, c.local.whole = e.lookupLocal(c.local.base, l.extent)
	// A call of a few runs works in small arrays: zeroing the chunk's
	// arrays is a noticeable share of a call of one pair.
	if runs <= smallChunk {
		var a chunkArrays[[smallChunk]blocks.Run, [smallChunk]uint64, [smallChunk]slicer.Plan, [smallChunk]int64, [smallChunk]putResult]
		err = e.putBlocks(&c, b, src, br, chunk{a.todo[:], a.lengths[:], a.plans[:], a.slices[:], a.slice[:], a.put[:]})
	} else {
		var a chunkArrays[[blockChunk]blocks.Run, [blockChunk]uint64, [blockChunk]slicer.Plan, [blockChunk]int64, [blockChunk]putResult]
		err = e.putBlocks(&c, b, src, br, chunk{a.todo[:], a.lengths[:], a.plans[:], a.slices[:], a.slice[:], a.put[:]})
	}
	if err != nil {
		return BlockTasks{}, err
	}
	e.flushQueued(&c.sc)
	return out, nil
}

// chunk is the arrays a block submission puts its runs through, len(todo)
// at a time: each run, and its length, plan, slice count, first slice's
// length and what put did with it.
type chunk struct {
	todo    []blocks.Run
	lengths []uint64
	plans   []slicer.Plan
	slices  []int64
	slice   []uint64
	put     []putResult
}

// chunkArrays holds a chunk's arrays, all of one length, on the
// submitter's stack.
type chunkArrays[R, U, P, I, Q any] struct {
	todo    R
	lengths U
	plans   P
	slices  I
	slice   U
	put     Q
}

// putBlocks routes c (source src, request br), gives its tasks their
// deadline and puts its runs (putRuns, through ch); an error means
// nothing was added.
func (e *Executor) putBlocks(c *blockCall, b *progress.Batch, src *blocks.Source, br *BlockRequest, ch chunk) error {
	first := &ch.todo[0] // the first chunk's first run: putRuns takes it from there
	c.bb.list.NextIn(first, src, 0, c.merge)
	// One route for the call: the selector is asked about its first
	// block, or the list's last answer is taken while nothing it was
	// chosen from changed (blockRoute).
	if err := e.routeBlocks(c, br, first); err != nil {
		return fmt.Errorf("submit blocks: %w", err)
	}
	deadline := c.req.deadline()
	c.dflt = deadline == 0 && e.cfg.Transfer.DefaultDeadline > 0
	if c.dflt {
		now := wallclock.Now()
		c.sc.wall = time.Unix(0, now)
		deadline = now + int64(e.cfg.Transfer.DefaultDeadline)
		c.req.Deadline = time.Unix(0, deadline)
	}
	c.deadline = deadline
	if br.Op == Write && e.fences.Closed(c.rem.Name) {
		// A fence of an ended run is unconfirmed at the target: no task
		// is made until it is, or the request's deadline passes.
		if err := e.fences.Wait(c.rem.Name, deadline, heldPoll, func() bool { return e.closed.Load() }); err != nil {
			return fmt.Errorf("submit blocks: %w: %w", ErrDeadlineExceeded, err)
		}
	}
	e.putRuns(c, b, src, ch)
	return nil
}

// smallChunk is the most runs a block submission puts in its small
// arrays.
const smallChunk = 4

// blockCall is one block submission as its stages pass it on: the list,
// its binding, the request every task copies, the route and the local
// buffer looked up for the call. It points at nothing on the caller's
// stack (the BlockRequest, the pairs), which would move that to the heap:
// the request's fields reach the engine's task records.
type blockCall struct {
	l        *BlockList
	bb       *boundBlocks
	rem      *remote
	merge    bool
	local    blockLocal
	req      Request // the first block's; each task copies it
	route    *blockRoute
	deadline int64
	dflt     bool
	sc       submitCtx
}

// record fills rec, the record of the task of run: the call's request
// for run's ranges, no history yet.
func (c *blockCall) record(rec *taskRecord, run *blocks.Run) {
	rec.req = c.req
	rec.req.Local = c.l.localAt(run.LocalOff, run.Length)
	rec.req.Remote = c.l.remote + run.RemoteOff
	rec.hist = failover.History{}
	rec.defaultDeadline = c.dflt
	rec.sent = c.rem
}

// localAt returns the local bytes [off, off+n) of l, capped at their end.
func (l *BlockList) localAt(off, n uint64) []byte { return l.local[off : off+n : off+n] }

// blockLocal is where a block call's local side lies: from base, the
// address of its block 0; whole: one registered buffer, region lreg from
// offset loff, holds it from base to its end (looked up for the call).
type blockLocal struct {
	base  uint64
	whole bool
	lreg  uint32
	loff  uint64
}

// blockLocal returns where the local bytes [base+off, base+off+n) of a
// block call's list (lying as c says) are registered now.
func (e *Executor) blockLocal(c *blockLocal, off, n uint64) (uint32, uint64, bool) {
	if c.whole {
		return c.lreg, c.loff + off, true
	}
	return e.lookupLocal(c.base+off, n)
}

// putRuns puts c's runs on its plugin's lane: len(ch.todo) at a time,
// published together (a plugin is woken once per chunk, not once per
// run), the chunk's tasks reserved with one call (one lock, one
// publication of the batch's count). ch.todo[0] holds the first run.
func (e *Executor) putRuns(c *blockCall, b *progress.Batch, src *blocks.Source, ch chunk) {
	l, bb, ps := c.l, c.bb, c.route.ps
	size := l.side.Layout.BlockSize
	todo, lengths, plans := ch.todo, ch.lengths, ch.plans
	// What the call's tasks share is set once, field by field (a
	// composite literal is built aside and copied); each run sets its
	// own below, and each chunk its run and lane (the stages leave
	// nothing else of one task behind).
	var t task
	t.b, t.rem, t.valid, t.block, t.blk, t.rt.ps, t.rt.policy, t.described = b, c.rem, true, true, c.local, ps, c.route.policy, true
	t.rt.staged = c.route.staged
	describe(&t.d, c.req.Op, c.req.Priority, c.rem.ID, c.deadline)
	for k := 0; k < src.Len(); {
		nr := 0
		for ; nr < len(todo) && k < src.Len(); nr++ {
			if k > 0 { // the first run is in todo[0] already
				bb.list.NextIn(&todo[nr], src, k, c.merge)
			}
			lengths[nr] = todo[nr].Length
			k += todo[nr].N
		}
		pr := ps.run()
		ln := e.laneFor(&c.sc, pr, ps, c.req.Priority, lengths[:nr]...)
		// Nothing can stop these tasks before their slices are put (no
		// admission, no qos queue, the local side registered whole):
		// they are reserved routed and cut (ReserveRouted), their plans
		// made here; a run of one block takes the plan the route keeps
		// for it.
		preset := c.local.whole && e.path.qos == nil && e.path.admit == nil && len(e.stages) == 0 && !c.route.staged
		var rt progress.Route
		if preset {
			rt = progress.Route{Transport: ps.idx, Slices: ch.slices[:nr], Slice: ch.slice[:nr], Lane: ln.ID, Run: ln.Run}
			for j := range todo[:nr] {
				if lengths[j] == size && c.route.run == pr {
					plans[j] = c.route.plan
				} else {
					plans[j] = e.plan(pr, c.route.policy, lengths[j], 0)
				}
				rt.Slices[j], rt.Slice[j] = plans[j].Slices, min(plans[j].Slice, lengths[j])
			}
			if pr.rails.Single() {
				rt.Rails = 1 // rail 0: Pick's only answer
			}
		}
		ln.Begin()
		var at, got int
		if preset {
			// The tasks' records are written before the batch counts
			// them (see ReserveRouted).
			at, got = b.ReserveRouted(lengths[:nr], c.deadline, &rt, func(at, got int) {
				for j := range got {
					rec := e.path.record(b, at+j)
					c.record(rec, &todo[j])
					rec.hist.Tried = 1 << ps.idx
				}
			})
		} else {
			at, got = b.ReserveRun(lengths[:nr], c.deadline)
		}
		if got < nr {
			k = src.Len() // checked above, unless another submitter filled the batch meanwhile
		}
		nc := 0
		t.prun, t.lane, t.planned, t.recorded = pr, ln, preset, preset
		t.credited = preset && e.takeRunCredit(&c.sc, e.creditFor(pr, c.rem), lengths[:got], plans[:got], c.req.Priority)
		t.passes = e.passes(&t)
		for j := range todo[:got] {
			i := at + j
			run := &todo[j]
			rec := e.path.record(b, i)
			if !preset {
				c.record(rec, run)
			}
			e.noteQueued(b, i, &c.sc)
			t.i, t.rec, t.boff, t.blen = i, rec, run.LocalOff, run.Length
			t.rt.rreg, t.rt.roff = run.Remote.Region, run.Remote.Offset
			if preset {
				t.plan = plans[j]
			}
			if e.run(&t, &c.sc, stageValidate, &ch.put[nc]) {
				nc++
			}
		}
		if t.credited {
			e.credit.keeper.EndRun(&c.sc.credit) // what its tasks did not draw
		}
		c.sc.picked.Count()
		ln.End()
		e.cutRun(b, ln, ps, ch.put[:nc])
	}
}

// blockRoute is the route a block list's submissions of one op took, with
// what the selector chose it from: the segment's handle (which a change
// of its descriptor or of the transports that opened it replaces), the
// regions of the first block on each side (their memory kinds), the
// request's routing fields and the plugins' states and runs, as the
// supervisor's epoch stood (a plugin going down, or coming back with a
// new run, changes it). A submission whose own facts are these takes
// the route without asking the selector again: what the selector would
// answer is a function of them.
type blockRoute struct {
	rem        *remote
	lreg, rreg uint32
	lok        bool
	prio       Priority
	transport  string
	intent     Intent
	policyName string
	epoch      uint64
	// The route: plugin ps under policy; run is ps's run when it was
	// chosen, and plan the slicer's plan of one block on run (kept for
	// the runs of one block, which most block submissions are).
	ps     *Plugin
	policy int
	run    *pluginRun
	plan   slicer.Plan
	// staged: no transport reaches the blocks' memory (device memory);
	// ps carries each run's network hop, staged (staged.go).
	staged bool
}

// routeBlocks sets c's request, br for the first block of run first, and
// its route: the list's last route for c's op when it was chosen from
// the same facts, else the selector's answer, which the list keeps.
func (e *Executor) routeBlocks(c *blockCall, br *BlockRequest, first *blocks.Run) error {
	l, size := c.l, c.l.side.Layout.BlockSize
	r := &c.req // field by field, in place (see submitBlocks)
	r.Op, r.Local, r.Segment, r.Remote = br.Op, l.localAt(first.LocalOff, size), l.seg, l.remote+first.RemoteOff
	r.Priority, r.Deadline, r.Transport, r.Intent, r.Tenant, r.Policy = br.Priority, br.Deadline, br.Transport, br.Intent, br.Tenant, br.Policy
	lreg, _, lok := e.blockLocal(&c.local, first.LocalOff, size)
	epoch := e.supervisor.Epoch() // before the selector looks at the plugins
	slot := &l.routes[br.Op&1]
	if was := slot.Load(); was != nil && was.epoch == epoch && was.rem == c.rem && was.lreg == lreg && was.lok == lok && was.rreg == first.Remote.Region &&
		was.prio == br.Priority && was.transport == br.Transport && was.intent == br.Intent && was.policyName == br.Policy {
		c.route = was
		return nil
	}
	ps, policy, staged, err := e.chooseOrStage(r, c.rem, size)
	if err != nil {
		return err
	}
	now := &blockRoute{rem: c.rem, lreg: lreg, rreg: first.Remote.Region, lok: lok, prio: br.Priority, transport: br.Transport, intent: br.Intent, policyName: br.Policy,
		epoch: epoch, ps: ps, policy: policy, run: ps.run(), staged: staged}
	if now.run != nil {
		now.plan = e.plan(now.run, policy, size, 0)
	}
	c.route = now
	if e.supervisor.Epoch() == epoch {
		// No plugin changed while the selector looked: its answer is the
		// one for these facts.
		slot.Store(now)
	}
	return nil
}
