package kit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/regtable"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Peer is what a plugin keeps for one open peer: a pointer to its own
// type.
type Peer interface {
	comparable
	// Close ends the peer's work: what is queued or in flight to it
	// completes (StatusShutdown) and its goroutines end before Close
	// returns. It is also called on a peer that AddPeer refused, whose
	// goroutines never started.
	Close()
}

// Base is what every transport has: the lifecycle (Start once, Stop
// once, nothing after Stop), the engine it was started for, the region
// table, the open peers, the goroutines Stop waits for, the outcome
// counters and the checks Submit starts with. A plugin holds one as a
// field and sets Name (and MaxNameLen, MemoryKinds) before use; R is its
// region type, P its per-peer state, both pointers.
//
// Lock order: a plugin's own control lock is taken inside the callbacks
// of Start and Stop, so it must never be held while calling Start, Stop
// or CheckPeer.
type Base[R Region, P Peer] struct {
	// Name starts every error ("tcp: region 3 not registered").
	Name string
	// MaxNameLen bounds engine and segment names; 0: no bound.
	MaxNameLen int
	// MemoryKinds are the region kinds RegisterMemory accepts besides ""
	// (which means sdk.MemoryCPU); nil means just sdk.MemoryCPU.
	MemoryKinds []sdk.MemoryKind
	// ForeignMemory: RegisterMemory takes regions of memory the
	// application allocated itself (sdk.Region.Foreign), which the
	// transport stages with CopyIn and CopyOut. Declare it in
	// Info.ForeignMemory too.
	ForeignMemory bool

	// Regions are the registered regions. The data path reads it without
	// locks (Acquire, Lookup); RegisterMemory and UnregisterMemory write it.
	Regions regtable.Table[R]
	// Peers are the open peers.
	Peers Peers[P]
	// Outcomes counts every descriptor's outcome; Stats exports it.
	Outcomes sdk.Outcomes
	// Goroutines holds every goroutine of the transport that Stop waits
	// for. Add to it from a goroutine it already holds, in the callbacks
	// of Start and AddPeer, or where Stopped was false under a lock that
	// the sweep Stop runs also takes: then Stop cannot miss it.
	Goroutines sync.WaitGroup

	mu          sync.Mutex // serialises Start, Stop and CheckPeer
	started     atomic.Bool
	stopped     atomic.Bool
	engine      string // set by Start, before the plugin's start runs
	incarnation uint64
}

// Start runs start, the plugin's own start (decode the configuration,
// listen, start goroutines), once, and returns a copy of the endpoint it
// returned: it refuses a transport that was stopped or already started
// and an engine name that is empty or longer than MaxNameLen. Engine and
// Incarnation hold cfg's values while start runs; the transport counts as
// started once start returns without an error.
func (b *Base[R, P]) Start(cfg sdk.StartConfig, start func() (sdk.Endpoint, error)) (sdk.Endpoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopped.Load():
		return nil, fmt.Errorf("%s: start after stop", b.Name)
	case b.started.Load():
		return nil, fmt.Errorf("%s: already started", b.Name)
	case cfg.Engine == "":
		return nil, fmt.Errorf("%s: start: empty engine name", b.Name)
	case b.MaxNameLen > 0 && len(cfg.Engine) > b.MaxNameLen:
		return nil, fmt.Errorf("%s: start: engine name longer than %d bytes", b.Name, b.MaxNameLen)
	}
	b.engine, b.incarnation = cfg.Engine, cfg.Incarnation
	ep, err := start()
	if err != nil {
		return nil, err
	}
	b.started.Store(true)
	return append(sdk.Endpoint(nil), ep...), nil
}

// Started reports whether Start succeeded (Stop does not reset it).
func (b *Base[R, P]) Started() bool { return b.started.Load() }

// Stopped reports whether Stop was called.
func (b *Base[R, P]) Stopped() bool { return b.stopped.Load() }

// Engine is the engine name Start was given: set before the plugin's
// start runs, and not written again once Started.
func (b *Base[R, P]) Engine() string { return b.engine }

// Incarnation is the engine incarnation Start was given.
func (b *Base[R, P]) Incarnation() uint64 { return b.incarnation }

// Stop marks the transport stopped, runs sweep (close listeners and
// connections, CloseAll the peers) on the first call only, and waits for
// Goroutines until ctx ends. It may be called more than once; a Start
// under way finishes first.
func (b *Base[R, P]) Stop(ctx context.Context, sweep func()) error {
	b.mu.Lock()
	first := !b.stopped.Swap(true)
	b.mu.Unlock()
	if first && sweep != nil {
		sweep()
	}
	done := make(chan struct{})
	go func() { // ends with the last goroutine of the transport
		b.Goroutines.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: stop: %w", b.Name, ctx.Err())
	}
}

// RegisterMemory checks r (a known permission, a memory kind the plugin
// takes, not empty) and adds build(r) to Regions under r.ID.
func (b *Base[R, P]) RegisterMemory(r sdk.Region, build func(sdk.Region) R) error {
	if b.stopped.Load() {
		return fmt.Errorf("%s: register after stop", b.Name)
	}
	switch r.Perm {
	case sdk.PermLocal, sdk.PermRemoteRead, sdk.PermRemoteReadWrite:
	default:
		return fmt.Errorf("%s: region %d: unknown permission %d", b.Name, r.ID, r.Perm)
	}
	if !b.takesKind(r.Kind) {
		return fmt.Errorf("%s: region %d: memory kind %q is not supported (%s only)", b.Name, r.ID, r.Kind, kindList(b.kinds()))
	}
	if r.Foreign != nil && !b.ForeignMemory {
		return fmt.Errorf("%s: region %d: memory the application allocated itself is not supported: this transport maps the memory it moves; allocate it through the engine", b.Name, r.ID)
	}
	if r.Len() == 0 {
		return fmt.Errorf("%s: region %d: empty", b.Name, r.ID)
	}
	if !b.Regions.Add(r.ID, build(r)) {
		return fmt.Errorf("%s: region %d already registered", b.Name, r.ID)
	}
	return nil
}

func (b *Base[R, P]) kinds() []sdk.MemoryKind {
	if len(b.MemoryKinds) == 0 {
		return []sdk.MemoryKind{sdk.MemoryCPU}
	}
	return b.MemoryKinds
}

func (b *Base[R, P]) takesKind(k sdk.MemoryKind) bool {
	k = k.OrCPU()
	for _, want := range b.kinds() {
		if k == want {
			return true
		}
	}
	return false
}

// UnregisterMemory takes region id out of Regions and returns it; the
// caller then stops what uses it, drops the table's reference (Release)
// and waits for Drained.
func (b *Base[R, P]) UnregisterMemory(id uint32) (R, error) {
	r := b.Regions.Remove(id)
	var zero R
	if r == zero {
		return zero, fmt.Errorf("%s: region %d not registered", b.Name, id)
	}
	return r, nil
}

// CheckPeer is what OpenPeer checks before it builds anything: the
// transport runs (a Start under way finishes first) and the segment name
// fits MaxNameLen.
func (b *Base[R, P]) CheckPeer(p sdk.Peer) error {
	b.mu.Lock()
	running := b.started.Load() && !b.stopped.Load()
	b.mu.Unlock()
	if !running {
		return fmt.Errorf("%s: open peer: transport not running", b.Name)
	}
	if b.MaxNameLen > 0 && len(p.Segment) > b.MaxNameLen {
		return fmt.Errorf("%s: peer %d: segment name longer than %d bytes", b.Name, p.ID, b.MaxNameLen)
	}
	return nil
}

// PeerError reports that p's endpoint (or another part of it) is unusable.
func (b *Base[R, P]) PeerError(p sdk.Peer, err error) error {
	return fmt.Errorf("%s: peer %d (%s): %w", b.Name, p.ID, p.Segment, err)
}

// AddPeer adds p as peer id unless that id is open or the transport
// stopped. start, when not nil, runs before p becomes visible, where Stop
// cannot miss what it starts: add its goroutines to Goroutines there
// (start runs under the Peers lock: it must not call into Peers). A
// refused p is closed, its start never run.
func (b *Base[R, P]) AddPeer(id uint32, p P, start func()) error {
	var err error
	switch b.Peers.add(id, p, start) {
	case addOpen:
		err = fmt.Errorf("%s: peer %d already open", b.Name, id)
	case addClosed:
		err = fmt.Errorf("%s: open peer: transport stopped", b.Name)
	default:
		return nil
	}
	p.Close()
	return err
}

// ClosePeer takes peer id out of Peers and closes it.
func (b *Base[R, P]) ClosePeer(id uint32) error {
	p, ok := b.Peers.Remove(id)
	if !ok {
		return fmt.Errorf("%s: peer %d not open", b.Name, id)
	}
	p.Close()
	return nil
}

// Admit is how Submit starts: it completes d at once, counted, when the
// transport stopped (StatusShutdown), when sdk.Precheck decides it (a NOP,
// an unknown op, a zero length, a passed deadline) or when d.Peer is not
// open (StatusPeerUnknown). Otherwise it returns the peer and true.
// It allocates nothing.
func (b *Base[R, P]) Admit(d *ring.Descriptor, c sdk.Completer) (P, bool) {
	var zero P
	if !b.Outcomes.Admit(d, c, b.stopped.Load()) {
		return zero, false
	}
	return b.peer(d, c)
}

// peer returns d's peer, or completes d with StatusPeerUnknown, counted,
// when it is not open.
func (b *Base[R, P]) peer(d *ring.Descriptor, c sdk.Completer) (P, bool) {
	p := b.Peers.Get(d.Peer)
	var zero P
	if p == zero {
		b.Fail(d, c, ring.StatusPeerUnknown)
		return zero, false
	}
	return p, true
}

// region returns d's local region with a reference held, or completes d
// with StatusNotRegistered, counted, when it is not registered.
func (b *Base[R, P]) region(d *ring.Descriptor, c sdk.Completer) (R, bool) {
	r := b.Regions.Acquire(d.LocalRegion)
	var zero R
	if r == zero {
		b.Fail(d, c, ring.StatusNotRegistered)
		return zero, false
	}
	return r, true
}

// Local resolves d's local side: the region with a reference held (the
// caller releases it when done with the bytes) and the bytes d names; for
// a foreign region (a transport with ForeignMemory) the range is checked
// and the bytes are nil: the caller stages them (CopyIn, CopyOut). A
// sealed region (foreign and mapped read-only) gives its mapped bytes to
// a write, which only reads them, and nil to a read, which stages. It
// completes d, counted, with StatusNotRegistered for a region that is not
// registered, and StatusOutOfBounds for a local range outside it or a
// remote offset+length that overflows. It allocates nothing.
func (b *Base[R, P]) Local(d *ring.Descriptor, c sdk.Completer) (R, []byte, bool) {
	var zero R
	r, ok := b.region(d, c)
	if !ok {
		return zero, nil, false
	}
	mem, ok := b.localBytes(r, d, c)
	if !ok {
		r.Release()
		return zero, nil, false
	}
	return r, mem, true
}

// localBytes is Local's checks of d against r, whose reference the
// caller holds.
func (b *Base[R, P]) localBytes(r R, d *ring.Descriptor, c sdk.Completer) ([]byte, bool) {
	mem := r.Bytes()
	size := uint64(len(mem))
	f := foreignOf(r)
	if f != nil {
		size = f.Length
	}
	end := d.LocalOffset + d.Length
	if end < d.LocalOffset || end > size || d.RemoteOffset+d.Length < d.RemoteOffset {
		b.Fail(d, c, ring.StatusOutOfBounds)
		return nil, false
	}
	if f != nil && (len(mem) == 0 || d.Op != ring.OpWrite) {
		// The caller stages it: CopyIn, CopyOut. A sealed region (mapped
		// read-only, sdk.Region.Foreign) is read in place when the
		// descriptor only reads it (a write sends it), and written
		// through the host otherwise.
		return nil, true
	}
	return mem[d.LocalOffset:end:end], true
}

// Accept is Admit and then Local, for a transport that checks nothing
// between the two.
func (b *Base[R, P]) Accept(d *ring.Descriptor, c sdk.Completer) (P, R, []byte, bool) {
	var r R
	p, ok := b.Admit(d, c)
	if !ok {
		return p, r, nil, false
	}
	r, mem, ok := b.Local(d, c)
	return p, r, mem, ok
}

// Fail completes d with st, 0 bytes, counted.
func (b *Base[R, P]) Fail(d *ring.Descriptor, c sdk.Completer, st ring.Status) {
	b.Outcomes.Count(st)
	c.Complete(d.Token, st, 0)
}

// Logger is the logger a plugin writes to unless told otherwise:
// sdk.NewLogger, JSON on stderr at the host's level, which go-plugin
// forwards to the host under the plugin's name.
func Logger(name string) hclog.Logger { return sdk.NewLogger(name) }

// kindList joins kinds for an error message.
func kindList(kinds []sdk.MemoryKind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
