package fault

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// Transport is the fault-injecting wrapper around a TCP transport. The
// zero value is not usable; call New.
type Transport struct {
	tcp  *tcp.Transport
	log  hclog.Logger
	exit func(code int) // os.Exit; tests of the package replace it

	plan atomic.Pointer[plan] // set once by Start; nil: inject nothing
	seen atomic.Uint64        // descriptors numbered so far

	stalled atomic.Bool
	unstall chan struct{} // closed by Stop; a stalled plugin never gets there
	stopOne sync.Once

	// regions holds the regions a corrupt fault may flip a byte in: in
	// the mapping, or through the host for foreign memory and sealed
	// regions (mapped read-only). A flip holds regMu for reading, and
	// UnregisterMemory forgets the region under regMu before the SDK
	// unmaps it.
	regMu   sync.RWMutex
	regions map[uint32]sdk.Region

	// Delayed completions not yet delivered; Stop delivers them at once.
	delayMu  sync.Mutex
	stopping bool
	pending  map[*delayed]struct{}
	delayWG  sync.WaitGroup

	// Descriptors a hold fault keeps before TCP carries them; Abort
	// takes them back, Stop completes them.
	holdMu  sync.Mutex
	holding map[*held]struct{}

	dropped, delayedN, corrupted, stalledN atomic.Uint64
	flipped, duplicated, overreported      atomic.Uint64
	// heldN counts descriptors a hold fault kept, heldDone those of them
	// whose completion was delivered (carried late, or aborted: see
	// heldAborted): a test waits for heldDone to reach heldN to know that
	// nothing of them will touch memory any more.
	heldN, heldDone, heldAborted atomic.Uint64
}

var (
	_ sdk.Transport = (*Transport)(nil)
	_ sdk.Aborter   = (*Transport)(nil)
)

// New returns a fault transport wrapping a new TCP transport.
func New() *Transport {
	log := kit.Logger("fault")
	return &Transport{
		tcp:     tcp.New(tcp.WithLogger(log.Named("tcp"))),
		log:     log,
		exit:    os.Exit,
		unstall: make(chan struct{}),
		regions: make(map[uint32]sdk.Region),
		pending: make(map[*delayed]struct{}),
		holding: make(map[*held]struct{}),
	}
}

// Describe names the plugin "fault"; its capabilities (ops, MaxSlice =
// max_frame) are TCP's, since TCP carries every descriptor. It is a test
// tool: `ferry plugins` hides it unless asked (--all).
func (t *Transport) Describe(ctx context.Context) (sdk.Info, error) {
	info, err := t.tcp.Describe(ctx)
	if err != nil {
		return sdk.Info{}, err
	}
	info.Name, info.Version, info.TestTool = "fault", Version, true
	return info, nil
}

// Probe is TCP's.
func (t *Transport) Probe(ctx context.Context) (sdk.ProbeResult, error) { return t.tcp.Probe(ctx) }

// Start decodes the fault blocks and starts the TCP transport with the
// tcp block's body.
func (t *Transport) Start(ctx context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	p, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	ep, err := t.tcp.Start(ctx, p.tcpConfig)
	if err != nil {
		return nil, err
	}
	for _, f := range p.faults {
		t.log.Warn("fault injection armed: this plugin is a test tool", "fault", f.kind, "after", f.after,
			"every", f.every, "rate", f.rate, "seed", f.seed, "status", f.status.String(), "delay", f.delay,
			"bit", f.bit, "extra", f.extra)
	}
	t.plan.Store(&p)
	return ep, nil
}

// RegisterMemory registers r with TCP and remembers its mapping.
func (t *Transport) RegisterMemory(ctx context.Context, r sdk.Region) error {
	if err := t.tcp.RegisterMemory(ctx, r); err != nil {
		return err
	}
	t.regMu.Lock()
	t.regions[r.ID] = r
	t.regMu.Unlock()
	return nil
}

// UnregisterMemory forgets the mapping first, so that no flip can touch
// it once TCP has let go of it.
func (t *Transport) UnregisterMemory(ctx context.Context, id uint32) error {
	t.regMu.Lock()
	delete(t.regions, id)
	t.regMu.Unlock()
	return t.tcp.UnregisterMemory(ctx, id)
}

// OpenPeer is TCP's.
func (t *Transport) OpenPeer(ctx context.Context, p sdk.Peer) error { return t.tcp.OpenPeer(ctx, p) }

// ClosePeer is TCP's.
func (t *Transport) ClosePeer(ctx context.Context, id uint32) error { return t.tcp.ClosePeer(ctx, id) }

// Submit numbers the descriptor, applies the faults that choose it and
// hands the rest to TCP.
func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
	if t.stalled.Load() {
		t.stall()
		return
	}
	p := t.plan.Load()
	if p == nil || len(p.faults) == 0 {
		t.tcp.Submit(d, c)
		return
	}
	i := t.seen.Add(1) - 1
	var drop, corrupt, twice, noAbort bool
	var dropStatus ring.Status
	var delay, hold time.Duration
	var flip, extra uint64
	for k := range p.faults {
		f := &p.faults[k]
		if !f.chooses(i, d.Rail) {
			continue
		}
		switch f.kind {
		case Crash:
			t.log.Error("fault injection: crashing", "descriptor", i, "exit_code", ExitCode)
			t.exit(ExitCode)
			return
		case BreakRing:
			err := breakRings()
			t.log.Error("fault injection: wrote an impossible tail into the completion rings", "descriptor", i, "error", err)
			return // never completed: the engine must give up on the lane
		case Stall:
			if t.stalled.CompareAndSwap(false, true) {
				t.log.Error("fault injection: stalling: no more completions, no more draining", "descriptor", i)
			}
			t.stall()
			return
		case Drop:
			drop, dropStatus = true, f.status
		case Corrupt:
			corrupt = true
		case Delay:
			delay = f.delay
		case Hold:
			hold, noAbort = f.delay, f.noAbort
		case Flip:
			flip ^= 1 << f.bit
		case Duplicate:
			twice = true
		case Overreport:
			extra = uint64(f.extra)
		}
	}
	if hold > 0 {
		t.hold(*d, c, hold, noAbort, func(d *ring.Descriptor, c sdk.Completer) {
			t.carry(d, c, drop, dropStatus, corrupt, delay, flip, twice, extra)
		})
		return
	}
	t.carry(d, c, drop, dropStatus, corrupt, delay, flip, twice, extra)
}

// carry applies the faults that chose d (as Submit found them) and hands
// it to TCP.
func (t *Transport) carry(d *ring.Descriptor, c sdk.Completer, drop bool, dropStatus ring.Status, corrupt bool,
	delay time.Duration, flip uint64, twice bool, extra uint64) {
	w := &wrapped{t: t, c: c, delay: delay, flip: flip, twice: twice, extra: extra}
	switch {
	case drop:
		t.dropped.Add(1)
		w.Complete(d.Token, dropStatus, 0)
	case corrupt:
		w.corrupt, w.op, w.region, w.offset = true, d.Op, d.LocalRegion, d.LocalOffset
		t.tcp.Submit(d, w)
	case delay > 0 || flip != 0 || twice || extra > 0:
		t.tcp.Submit(d, w)
	default:
		t.tcp.Submit(d, c)
	}
}

// stall blocks the lane goroutine calling Submit, so the SDK stops
// draining the submission ring. Only Stop releases it, and the SDK calls
// Stop only after the lanes have stopped: a stalled plugin has to be
// killed, which is the point.
func (t *Transport) stall() {
	t.stalledN.Add(1)
	<-t.unstall
}

// wrapped is the Completer TCP sees for a descriptor a corrupt or delay
// fault chose.
type wrapped struct {
	t       *Transport
	c       sdk.Completer
	delay   time.Duration
	corrupt bool
	op      ring.Op
	region  uint32
	offset  uint64
	// The contract faults: flip is xored into the token, extra added to
	// the bytes, and twice delivers the completion a second time.
	flip  uint64
	extra uint64
	twice bool
}

func (w *wrapped) Complete(token uint64, st ring.Status, n uint64) {
	t := w.t
	if t.stalled.Load() {
		t.stalledN.Add(1) // withheld: a stalled plugin completes nothing
		return
	}
	if w.corrupt && st == ring.StatusOK {
		if w.op == ring.OpRead && n > 0 {
			t.regMu.RLock()
			if r, ok := t.regions[w.region]; ok && w.offset < r.Len() {
				flip(r, w.offset)
			}
			t.regMu.RUnlock()
		}
		t.corrupted.Add(1)
		st = ring.StatusIO
	}
	if w.flip != 0 {
		token ^= w.flip
		t.flipped.Add(1)
	}
	if w.extra > 0 {
		n += w.extra
		t.overreported.Add(1)
	}
	if w.twice {
		t.duplicated.Add(1)
		w.deliver(token, st, n)
	}
	w.deliver(token, st, n)
}

// deliver hands one completion on, through the delay queue when a delay
// fault chose the descriptor.
func (w *wrapped) deliver(token uint64, st ring.Status, n uint64) {
	if w.delay > 0 {
		w.t.later(w.delay, w.c, token, st, n)
		return
	}
	w.c.Complete(token, st, n)
}

// delayed is one completion held back by a delay fault.
type delayed struct {
	c     sdk.Completer
	token uint64
	st    ring.Status
	n     uint64
	timer *time.Timer
}

func (t *Transport) later(d time.Duration, c sdk.Completer, token uint64, st ring.Status, n uint64) {
	t.delayedN.Add(1)
	t.delayMu.Lock()
	if t.stopping {
		t.delayMu.Unlock()
		c.Complete(token, st, n)
		return
	}
	p := &delayed{c: c, token: token, st: st, n: n}
	t.pending[p] = struct{}{}
	t.delayWG.Add(1)
	p.timer = time.AfterFunc(d, func() {
		defer t.delayWG.Done()
		if t.take(p) {
			p.c.Complete(p.token, p.st, p.n)
		}
	})
	t.delayMu.Unlock()
}

// take removes p from the pending set and reports whether it was there:
// whoever takes it delivers it.
func (t *Transport) take(p *delayed) bool { return takeFrom(&t.delayMu, t.pending, p) }

// takeFrom removes k from set, under mu, and reports whether it was
// there.
func takeFrom[K comparable](mu *sync.Mutex, set map[K]struct{}, k K) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := set[k]
	delete(set, k)
	return ok
}

// held is one descriptor a hold fault keeps.
type held struct {
	d       ring.Descriptor
	c       sdk.Completer // counts heldDone, then the real one
	noAbort bool
	timer   *time.Timer
}

// heldCompleter counts the completion of a held descriptor, then passes
// it on.
type heldCompleter struct {
	t *Transport
	c sdk.Completer
}

func (h heldCompleter) Complete(token uint64, st ring.Status, n uint64) {
	h.t.heldDone.Add(1)
	h.c.Complete(token, st, n)
}

// hold keeps d for wait, then carries it with carry, unless Abort or Stop
// takes it first.
func (t *Transport) hold(d ring.Descriptor, c sdk.Completer, wait time.Duration, noAbort bool, carry func(*ring.Descriptor, sdk.Completer)) {
	t.heldN.Add(1)
	h := &held{d: d, c: heldCompleter{t: t, c: c}, noAbort: noAbort}
	t.holdMu.Lock()
	t.holding[h] = struct{}{}
	t.delayWG.Add(1)
	h.timer = time.AfterFunc(wait, func() {
		defer t.delayWG.Done()
		if t.takeHeld(h) {
			carry(&h.d, h.c)
		}
	})
	t.holdMu.Unlock()
}

// takeHeld removes h from the held set and reports whether it was there:
// whoever takes it completes it.
func (t *Transport) takeHeld(h *held) bool { return takeFrom(&t.holdMu, t.holding, h) }

// Abort (sdk.Aborter) takes back the held descriptors with those tokens,
// which complete StatusCanceled without being carried (unless their
// hold fault says abort = false), and passes the tokens on to TCP for
// the descriptors it carries.
// Fence is the wrapped tcp transport's (sdk.Fencer): the fault plugin
// listens with it, so it fences what peers' runs sent to it the same way.
func (t *Transport) Fence(ctx context.Context, from string, run uint64) (sdk.FenceResult, error) {
	return t.tcp.Fence(ctx, from, run)
}

func (t *Transport) Abort(ctx context.Context, tokens []uint64) (int, error) {
	set := make(map[uint64]struct{}, len(tokens))
	for _, tok := range tokens {
		set[tok] = struct{}{}
	}
	var back []*held
	t.holdMu.Lock()
	for h := range t.holding {
		if _, ok := set[h.d.Token]; ok && !h.noAbort {
			delete(t.holding, h)
			back = append(back, h)
		}
	}
	t.holdMu.Unlock()
	for _, h := range back {
		if h.timer.Stop() {
			t.delayWG.Done()
		}
		t.heldAborted.Add(1)
		h.c.Complete(h.d.Token, ring.StatusCanceled, 0)
	}
	n, err := t.tcp.Abort(ctx, tokens)
	return len(back) + n, err
}

// Stats returns TCP's counters and the fault counters.
func (t *Transport) Stats(ctx context.Context) (map[string]uint64, error) {
	s, err := t.tcp.Stats(ctx)
	if err != nil {
		return nil, err
	}
	if s == nil {
		s = map[string]uint64{}
	}
	s["descriptors"] = t.seen.Load()
	s["dropped"] = t.dropped.Load()
	s["delayed"] = t.delayedN.Load()
	s["corrupted"] = t.corrupted.Load()
	s["stalled"] = t.stalledN.Load()
	s["flipped"] = t.flipped.Load()
	s["duplicated"] = t.duplicated.Load()
	s["overreported"] = t.overreported.Load()
	s["held"] = t.heldN.Load()
	s["held_done"] = t.heldDone.Load()
	s["held_aborted"] = t.heldAborted.Load()
	if p := t.plan.Load(); p != nil {
		for _, f := range p.faults {
			if f.kind == Crash {
				s["crashed_after"] = uint64(f.after)
			}
		}
	}
	return s, nil
}

// Stop stops TCP (which completes what it holds, some of it through the
// delay queue), then delivers every delayed completion at once.
func (t *Transport) Stop(ctx context.Context) error {
	t.stopOne.Do(func() { close(t.unstall) })
	t.holdMu.Lock()
	var kept []*held
	for h := range t.holding {
		kept = append(kept, h)
		delete(t.holding, h)
	}
	t.holdMu.Unlock()
	for _, h := range kept {
		if h.timer.Stop() {
			t.delayWG.Done()
		}
		h.c.Complete(h.d.Token, ring.StatusShutdown, 0)
	}
	err := t.tcp.Stop(ctx)
	t.delayMu.Lock()
	t.stopping = true
	var now []*delayed
	for p := range t.pending {
		now = append(now, p)
		delete(t.pending, p)
	}
	t.delayMu.Unlock()
	for _, p := range now {
		if p.timer.Stop() {
			t.delayWG.Done()
		}
		p.c.Complete(p.token, p.st, p.n)
	}
	t.delayWG.Wait()
	if err != nil {
		return fmt.Errorf("fault: %w", err)
	}
	return nil
}

// flip inverts the byte at off of r: in its mapping, or through the host
// where the plugin may not write the mapping (foreign memory, a sealed
// region).
func flip(r sdk.Region, off uint64) {
	if r.Foreign == nil {
		r.Mem[off] ^= 0xff
		return
	}
	var b [1]byte
	if kit.CopyIn(r.Foreign, off, b[:]) == nil {
		b[0] ^= 0xff
		kit.CopyOut(r.Foreign, off, b[:])
	}
}

// breakRings writes a tail no ring can have into each completion ring
// this process maps (the engine's memfds named ferry-cq-N, found in
// /proc/self/maps), through /proc/self/mem, as a buggy plugin writing its
// ring's header would.
func breakRings() error {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], 1<<40)
	n := 0
	for _, line := range strings.Split(string(maps), "\n") {
		if !strings.Contains(line, "/memfd:ferry-cq-") {
			continue
		}
		lo, _, ok := strings.Cut(line, "-")
		addr, err := strconv.ParseUint(lo, 16, 64)
		if !ok || err != nil {
			return fmt.Errorf("/proc/self/maps: %q", line)
		}
		if _, err := mem.WriteAt(tail[:], int64(addr)+128); err != nil { // sdk/ring: the tail's offset
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no completion ring in this process's mappings")
	}
	return nil
}
