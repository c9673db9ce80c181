package kit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

// Fences keeps a two-sided transport's promise to fence (sdk.Fencer): it
// knows which peer run each served connection belongs to, refuses frames
// and connections of fenced runs, and answers a Fence once no frame of
// the run is being applied. A transport's listener calls Open after a
// connection's hello, Begin and End around applying each frame that
// writes memory, and Close when the connection ends; its Fence method
// calls Fences.Fence.
//
// The zero value is ready to use.
type Fences struct {
	// Cut is how long a frame being applied when a fence arrives may
	// take to finish before its connection is cut off (the cut function
	// given to Open); 0 means DefaultFenceCut.
	Cut time.Duration

	mu     sync.Mutex
	conns  map[fenceKey]map[*FenceConn]struct{}
	owner  map[uint64]string // run -> the engine whose connections carried it
	fenced map[fenceKey]struct{}
	order  []fenceKey // fenced, oldest first, for the bound
}

// DefaultFenceCut is Fences.Cut's default.
const DefaultFenceCut = 200 * time.Millisecond

// MaxFenced bounds how many fenced runs a Fences remembers (oldest
// forgotten first), and how many runs it remembers the owner of.
const MaxFenced = 4096

type fenceKey struct {
	from string
	run  uint64
}

// FenceConn is one served connection in a Fences.
type FenceConn struct {
	f      *Fences
	key    fenceKey
	epoch  uint64 // the dialer's number for this connection in its run
	cut    func()
	fenced atomic.Bool
	// applying is set between Begin and End; ended is signalled by an End
	// that finds the connection fenced.
	applying atomic.Bool
	ended    chan struct{}
}

// Open records a connection whose authenticated hello named engine from,
// its plugin run and the connection's epoch in that run. It returns nil
// and false when that run is fenced: the connection must be refused. cut
// shuts the connection down so that a frame stuck half applied ends (it
// is called at most once, from a fence). A run of 0 (a dialer that sends
// none) is never fenced.
func (f *Fences) Open(from string, run, epoch uint64, cut func()) (*FenceConn, bool) {
	c := &FenceConn{f: f, key: fenceKey{from, run}, epoch: epoch, cut: cut, ended: make(chan struct{}, 1)}
	if run == 0 {
		return c, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.fenced[c.key]; ok {
		return nil, false
	}
	if f.conns == nil {
		f.conns = make(map[fenceKey]map[*FenceConn]struct{})
		f.owner = make(map[uint64]string)
	}
	set := f.conns[c.key]
	if set == nil {
		set = make(map[*FenceConn]struct{})
		f.conns[c.key] = set
	}
	set[c] = struct{}{}
	if _, ok := f.owner[run]; !ok && len(f.owner) >= MaxFenced {
		for k := range f.owner { // forget one run that has no connection
			if len(f.conns[fenceKey{f.owner[k], k}]) == 0 {
				delete(f.owner, k)
				break
			}
		}
	}
	f.owner[run] = from
	return c, true
}

// Begin is called before a frame of the connection is applied to
// memory; false: the run is fenced, so the frame must not be applied
// (discard it and close the connection). Pair a true with End.
func (c *FenceConn) Begin() bool {
	c.applying.Store(true)
	if c.fenced.Load() {
		c.applying.Store(false)
		c.signal()
		return false
	}
	return true
}

// End ends a Begin: the frame is applied, or its application stopped.
func (c *FenceConn) End() {
	c.applying.Store(false)
	if c.fenced.Load() {
		c.signal()
	}
}

// Fenced reports whether the connection's run is fenced.
func (c *FenceConn) Fenced() bool { return c.fenced.Load() }

func (c *FenceConn) signal() {
	select {
	case c.ended <- struct{}{}:
	default:
	}
}

// Close forgets the connection; call it when the connection ended.
func (c *FenceConn) Close() {
	if c == nil || c.key.run == 0 {
		return
	}
	f := c.f
	f.mu.Lock()
	if set := f.conns[c.key]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(f.conns, c.key)
		}
	}
	f.mu.Unlock()
	c.End() // a Fence waiting for it is done with it
}

// Fence fences engine from's plugin run: no frame of its connections is
// applied from now on, and no connection of it is accepted. It returns
// once no frame of the run is being applied (a frame still being applied
// after Cut has its connection cut, and is waited for until ctx ends).
// A run whose connections another engine opened is not fenced: the
// error wraps sdk.ErrFenceNotYours.
func (f *Fences) Fence(ctx context.Context, from string, run uint64) (sdk.FenceResult, error) {
	return f.fence(ctx, from, run, 0)
}

// FenceEpoch fences one connection of engine from's run: the one whose
// hello gave epoch (the dialer gave it up with writes unanswered). It
// returns as Fence does. A later connection of the run goes on.
func (f *Fences) FenceEpoch(ctx context.Context, from string, run, epoch uint64) (sdk.FenceResult, error) {
	if epoch == 0 {
		return sdk.FenceResult{}, fmt.Errorf("fence: the request names no connection (epoch 0 is none)")
	}
	return f.fence(ctx, from, run, epoch)
}

// fence fences the connections of from's run, those of epoch only when
// it is not 0 (else the whole run, remembered).
func (f *Fences) fence(ctx context.Context, from string, run, epoch uint64) (sdk.FenceResult, error) {
	if from == "" || run == 0 {
		return sdk.FenceResult{}, fmt.Errorf("fence: the request names no engine or no run (run 0 is no run)")
	}
	key := fenceKey{from, run}
	f.mu.Lock()
	if owner, ok := f.owner[run]; ok && owner != from {
		f.mu.Unlock()
		return sdk.FenceResult{}, fmt.Errorf("fence of run %#x asked by engine %q: %w (%q); only that engine may fence them", run, from, sdk.ErrFenceNotYours, owner)
	}
	_, known := f.owner[run]
	if _, ok := f.fenced[key]; !ok && epoch == 0 {
		if f.fenced == nil {
			f.fenced = make(map[fenceKey]struct{})
		}
		if len(f.order) >= MaxFenced {
			delete(f.fenced, f.order[0])
			f.order = f.order[1:]
		}
		f.fenced[key] = struct{}{}
		f.order = append(f.order, key)
	}
	var conns []*FenceConn
	for c := range f.conns[key] {
		if epoch == 0 || c.epoch == epoch {
			conns = append(conns, c)
		}
	}
	f.mu.Unlock()
	res := sdk.FenceResult{Connections: len(conns), Known: known}
	for _, c := range conns {
		c.fenced.Store(true)
	}
	cut := f.Cut
	if cut <= 0 {
		cut = DefaultFenceCut
	}
	timer := time.NewTimer(cut)
	defer timer.Stop()
	for _, c := range conns {
		cutDone := false
		for c.applying.Load() {
			select {
			case <-c.ended:
			case <-timer.C:
				// The frame did not finish promptly (a stopped or slow
				// sender): cut the connection, so that its read ends.
				timer.Reset(cut)
				if !cutDone && c.cut != nil {
					cutDone = true
					c.cut()
				}
			case <-ctx.Done():
				return res, fmt.Errorf("fence of engine %q's run %#x: a frame is still being applied: %w", from, run, ctx.Err())
			}
		}
		if !cutDone && c.cut != nil {
			c.cut() // a fenced connection carries nothing more
		}
	}
	return res, nil
}
