package shm

import (
	"sync"
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/memcpy"
	"github.com/ferrydev/ferry/sdk/ring"
)

// op is one accepted descriptor on its way through the plugin.
type op struct {
	token    uint64
	kind     ring.Op
	c        sdk.Completer
	local    *region      // reference held from Submit to finish
	lmem     []byte       // the local range; nil for foreign memory (lf)
	n        uint64       // the descriptor's length
	lf       *sdk.Foreign // the local region's foreign memory, or nil
	lOff     uint64       // the local offset, for lf
	rRegion  uint32
	rOff     uint64
	deadline int64
	low      bool     // the descriptor's Prio is low: bulk work (bulk_nice)
	remote   *mapping // reference held from run to finish

	pending atomic.Int32 // chunks not done yet
	status  atomic.Int32 // first failure of a chunk, 0 while none
}

// run checks the remote side of o against the mapping m (a reference is
// held and now belongs to o) and copies, inline when small, on the worker
// pool otherwise. Every check happens before any byte is touched.
func (t *Transport) run(o *op, m *mapping) {
	o.remote = m
	n := o.n
	rmem, st := remoteRange(m, o.kind, o.rOff, n, o.deadline, o.c)
	if st != ring.StatusOK {
		t.finish(o, st)
		return
	}
	if o.lf != nil {
		t.runForeign(o, rmem)
		return
	}
	dst, src := rmem, o.lmem
	if o.kind == ring.OpRead {
		dst, src = src, dst
	}
	switch {
	case t.inline(n, o.low):
		t.stats.copiesInline.Add(1)
		memcpy.Copy(dst, src)
		t.finish(o, ring.StatusOK)
	case t.toBulk(n, o.low):
		t.stats.copiesBulk.Add(1)
		t.bulk.dispatch(t, o, dst, src)
	default:
		t.pool.dispatch(t, o, dst, src)
	}
}

// remoteRange checks a copy's remote side, n bytes at off of mapping m
// for op kind, and returns its bytes: every check happens before any
// byte is touched.
func remoteRange(m *mapping, kind ring.Op, off, n uint64, deadline int64, c sdk.Completer) ([]byte, ring.Status) {
	end := off + n
	if end < off || end > uint64(len(m.mem)) {
		return nil, ring.StatusOutOfBounds
	}
	// The mapping itself enforces this too (a remote-read region is
	// mapped PROT_READ), but a fault would kill the plugin: refuse first.
	if kind == ring.OpWrite && !m.perm.AllowsRemoteWrite() || kind == ring.OpRead && !m.perm.AllowsRemoteRead() {
		return nil, ring.StatusPermission
	}
	if deadline != 0 && sdk.Now(c) >= deadline {
		return nil, ring.StatusTimeout
	}
	return m.mem[off:end:end], ring.StatusOK
}

// inline reports whether a copy of n bytes (low: of a low-priority
// descriptor) runs on the lane's goroutine: up to inline_max, unless it
// is bulk work for the nice workers (toBulk).
func (t *Transport) inline(n uint64, low bool) bool {
	return n <= t.set.inlineMax && !t.toBulk(n, low)
}

// toBulk reports whether such a copy runs on the nice workers: bulk
// work above bulkInlineMax, when bulk_nice is on, even where inline_max
// would copy it inline (see bulk_nice).
func (t *Transport) toBulk(n uint64, low bool) bool {
	return low && t.set.bulkNice > 0 && n > bulkInlineMax
}

// bulkInlineMax is the largest low-priority copy that runs inline when
// bulk_nice is on: below it a hop to a worker costs more than the copy.
const bulkInlineMax = 64 << 10

// finish releases what o holds and reports its outcome, exactly once.
func (t *Transport) finish(o *op, st ring.Status) {
	n := o.n
	if o.remote != nil {
		if st == ring.StatusOK {
			o.remote.dc.moved(o.kind, 1, n)
		}
		o.remote.Release()
	}
	if o.local != nil {
		o.local.Release()
	}
	t.base.Outcomes.Count(st)
	if st == ring.StatusOK {
		if o.kind == ring.OpWrite {
			t.stats.bytesWritten.Add(n)
		} else {
			t.stats.bytesRead.Add(n)
		}
	} else {
		n = 0
	}
	c, tok := o.c, o.token
	o.c, o.local, o.lmem, o.remote, o.lf = nil, nil, nil, nil, nil
	t.opPool.Put(o)
	c.Complete(tok, st, n)
}

// chunk is a piece of a copy that one worker runs.
type chunk struct {
	o        *op
	dst, src []byte
	off      uint64 // of dst in the copy: where a foreign copy starts in lf
}

// worker is one copy goroutine with its own queue, so that the pieces of
// one split copy land on different workers (and so on different cores
// when they are free), not on whichever worker wakes first.
type worker struct {
	q      chan chunk
	chunks atomic.Uint64
}

// workerQueue is how many chunks a worker holds before dispatch waits:
// backpressure on the lane when the plugin is saturated.
const workerQueue = 256

// pool runs copies too large to do inline.
type pool struct {
	mu       sync.RWMutex // dispatch holds it shared; close exclusively
	closed   bool
	workers  []*worker
	rr       atomic.Uint32
	splitMin uint64
	// nice, when above 0, is the niceness of the workers' threads
	// (sdk.LowerThread): the pool that runs low-priority copies.
	nice int
	wg   sync.WaitGroup
}

func (p *pool) start(t *Transport, n int, splitMin uint64, nice int) {
	p.splitMin = splitMin
	p.nice = nice
	p.workers = make([]*worker, n)
	for i := range p.workers {
		w := &worker{q: make(chan chunk, workerQueue)}
		p.workers[i] = w
		p.wg.Add(1)
		go p.work(t, w)
	}
}

// dispatch hands o's copy to the workers: in one piece, or, from
// split_min, cut into page-aligned chunks of at least minChunk spread over
// consecutive workers.
func (p *pool) dispatch(t *Transport, o *op, dst, src []byte) {
	n := uint64(len(dst))
	k := uint64(1)
	if n >= p.splitMin {
		k = min(uint64(len(p.workers)), n/minChunk)
		k = max(k, 1)
	}
	per := (n + k - 1) / k
	per = (per + 4095) &^ 4095
	k = (n + per - 1) / per
	o.pending.Store(int32(k))
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		t.finish(o, ring.StatusShutdown)
		return
	}
	if k > 1 {
		t.stats.copiesSplit.Add(1)
	} else {
		t.stats.copiesPooled.Add(1)
	}
	first := p.rr.Add(uint32(k)) - uint32(k)
	for i := range k {
		lo, hi := i*per, min((i+1)*per, n)
		w := p.workers[(first+uint32(i))%uint32(len(p.workers))]
		c := chunk{o: o, dst: dst[lo:hi:hi], off: lo}
		if src != nil {
			c.src = src[lo:hi:hi]
		}
		w.q <- c
	}
}

func (p *pool) work(t *Transport, w *worker) {
	defer p.wg.Done()
	if p.nice > 0 {
		restore, err := sdk.LowerThread(p.nice)
		defer restore()
		if err != nil {
			t.niceLog.Do(func() {
				t.log.Warn("low-priority copies run at the normal niceness; high-priority latency may suffer under bulk load", "bulk_nice", p.nice, "error", err)
			})
		}
	}
	for c := range w.q {
		o := c.o
		switch {
		case t.base.Stopped():
			o.status.CompareAndSwap(0, int32(ring.StatusShutdown))
		case o.remote.revoked.Load() != 0:
			// The mapping left the table while this piece waited (its
			// owner unregistered the region, the connection was lost,
			// the peer closed): do not start on it.
			o.status.CompareAndSwap(0, o.remote.revoked.Load())
		case o.lf != nil:
			if !t.copyForeign(o, c.dst, c.off) {
				o.status.CompareAndSwap(0, int32(ring.StatusIO))
			}
			w.chunks.Add(1)
			t.stats.chunks.Add(1)
		default:
			// The whole copy, not this piece, decides whether the
			// stores stay in cache: the pieces land there together.
			memcpy.Piece(c.dst, c.src, int(o.n))
			w.chunks.Add(1)
			t.stats.chunks.Add(1)
		}
		if o.pending.Add(-1) == 0 {
			t.finish(o, ring.Status(o.status.Load()))
		}
	}
}

// close stops the workers after they finished (or skipped) every queued
// chunk.
func (p *pool) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, w := range p.workers {
			close(w.q)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}
