package credit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The keeper: the driver of the sender's side (docs/credit.md). It keeps
// an Account per receiver, the credit each task's current attempt holds
// (taken per slice before the slice reaches its lane, given back as the
// slice's completion is reaped), and a goroutine that asks each receiver
// in use for a new grant every interval. While no receiver is in use
// that goroutine sleeps until a slice takes credit: an idle engine pays
// no tick. It holds no lock across a wait or a call to a receiver.

// Asker asks a receiver for a grant (the engine's control client).
type Asker interface {
	// Ask sends r to the receiver at control address addr (name, of
	// incarnation inc). It returns ErrNoGrants when the receiver grants
	// none (an older engine, or credit off there) and ErrGone when it is
	// gone or another life of it answers.
	Ask(ctx context.Context, addr, name string, inc uint64, r Report) (Grant, error)
}

// The errors an Asker classifies its receiver's answers with.
var (
	ErrNoGrants = errors.New("the receiver grants no credit")
	ErrGone     = errors.New("the receiver is gone")
)

// Lane is the lane a slice waits for credit on: its submitter holds it
// (Begin..End) and lets go while it waits, and polls it, since the
// completions that give credit back come through it and no reaper may
// be taking them. *progress.Lane is one.
type Lane interface {
	Begin()
	End()
	Down() bool
	Poll(t *progress.Tracker) int
}

// KeeperConfig is a keeper's: its limits, how often it asks, who it is,
// and the ports it works through.
type KeeperConfig struct {
	Limits      Limits
	Interval    time.Duration
	Name        string // the sender engine's, in its asks
	Incarnation uint64
	Tracker     *progress.Tracker // whose batches' tasks hold credit
	Asker       Asker
	Log         hclog.Logger
	Quit        <-chan struct{} // closed when the engine closes: waits and the keeper end
}

// Keeper is an engine's receiver credit as a sender. Safe for concurrent
// use.
type Keeper struct {
	cfg KeeperConfig

	mu    sync.RWMutex
	peers map[string]*Peer // by segment name

	// holds[slot] is what the tasks of the batch in that slot hold.
	holds []atomic.Pointer[slotHolds]
	// active counts the slices holding credit: a completion is looked up
	// only while there are some.
	active atomic.Int64

	// idle says Run sleeps on kick: at its last look no receiver was in
	// use (see Peer.due). A slice that takes credit or waits for it
	// wakes it (busy).
	idle atomic.Bool
	kick chan struct{}
}

// Peer is the sender's credit at one receiver.
type Peer struct {
	name string
	acct *Account

	// The keeper's, and the fields it asks with (under mu). mu is never
	// held across the ask (the request path takes it when the receiver
	// changed lives); asking serialises the keeper's asks.
	asking    sync.Mutex
	mu        sync.Mutex
	control   string // the receiver's control address
	inc       uint64 // its incarnation, as the handle holds it
	noGrants  bool   // it answered ErrNoGrants: the initial credit stays
	lastWaits uint64
	warned    time.Time
}

type slotHolds struct{ tasks []Hold }

// Hold is the credit one task's current attempt holds. Its fields are
// atomics: completions are reaped concurrently with the submitter.
type Hold struct {
	token  atomic.Uint64 // the attempt's token with rail 0; 0: none
	peer   atomic.Pointer[Peer]
	ticket atomic.Uint64
	slice  atomic.Uint64 // the plan's slice length
	held   atomic.Uint64 // bytes
	n      atomic.Int64  // slices
}

// NewKeeper returns a keeper; Run is its goroutine.
func NewKeeper(cfg KeeperConfig) *Keeper {
	return &Keeper{cfg: cfg, peers: make(map[string]*Peer), holds: make([]atomic.Pointer[slotHolds], cfg.Tracker.Slots()),
		kick: make(chan struct{}, 1)}
}

// Peer returns the credit at receiver name, whose handle is of
// incarnation inc and publishes control address addr. A handle of a new
// incarnation of the receiver resets the old one's credit.
func (k *Keeper) Peer(name string, inc uint64, addr string) *Peer {
	k.mu.RLock()
	pc := k.peers[name]
	k.mu.RUnlock()
	if pc == nil {
		k.mu.Lock()
		if pc = k.peers[name]; pc == nil {
			pc = &Peer{name: name, acct: NewAccount(k.cfg.Limits, inc), control: addr, inc: inc}
			k.peers[name] = pc
		}
		k.mu.Unlock()
	}
	if pc.acct.Epoch() != inc {
		pc.mu.Lock()
		if pc.inc != inc {
			pc.inc, pc.control, pc.noGrants = inc, addr, false
			pc.acct.Reset(inc)
		}
		pc.mu.Unlock()
	}
	return pc
}

// Begin readies task i's hold for an attempt whose slices take credit
// at pc, giving back what an earlier attempt still held.
func (k *Keeper) Begin(b *progress.Batch, i int, pc *Peer, slice uint64) *Hold {
	h := k.hold(b, i)
	h.peer.Store(pc)
	h.slice.Store(slice)
	h.token.Store(progress.WithRail(b.Token(i), 0))
	return h
}

// hold returns task i's hold, what an earlier attempt held given back.
func (k *Keeper) hold(b *progress.Batch, i int) *Hold {
	slot := b.Slot()
	hs := k.holds[slot].Load()
	if hs == nil || len(hs.tasks) < b.Cap() {
		hs = &slotHolds{tasks: make([]Hold, b.Cap())}
		if old := k.holds[slot].Swap(hs); old != nil {
			for j := range old.tasks {
				k.release(&old.tasks[j])
			}
		}
	}
	h := &hs.tasks[i]
	if h.token.Load() != 0 || h.n.Load() != 0 || h.held.Load() != 0 {
		k.release(h)
	}
	return h
}

// Take takes credit at pc for one slice of n bytes of task i, waiting
// for it, with the lane l (held by the caller) let go meanwhile. It
// reports false when the task stopped (canceled, its deadline passed),
// the lane went down or the engine closed first: a receiver that stops
// granting holds a sender up to its deadline, never longer.
func (k *Keeper) Take(h *Hold, pc *Peer, n uint64, high bool, b *progress.Batch, i int, l Lane) bool {
	tk, ok := takeClass(pc.acct, n, high)
	k.busy()
	if !ok {
		l.End() // what is enqueued goes now, and others use the lane while this waits
		ok = k.wait(pc, n, high, b, i, l, &tk)
		l.Begin()
		if !ok {
			return false
		}
	}
	h.ticket.Store(tk)
	h.held.Add(n)
	h.n.Add(1)
	k.active.Add(1)
	return true
}

// Run is credit taken at once for a run of single-slice tasks to one
// receiver (TakeRun): a run of small requests (a Submit call's, a block
// list's chunk) draws on it a task at a time (BeginTaken), one lock of
// the account for the run rather than one a request, and gives back
// what it did not draw (EndRun).
type Run struct {
	pc     *Peer
	ticket uint64
	bytes  uint64 // not drawn yet
	slices uint32 // not drawn yet
}

// TakeRun takes credit at pc for slices single-slice tasks of n bytes
// in all, high or not, without waiting: false when the account has too
// little now, and the run's tasks then take theirs a slice at a time
// (Begin, Take), waiting as they must.
func (k *Keeper) TakeRun(r *Run, pc *Peer, n uint64, slices int, high bool) bool {
	tk, ok := pc.acct.TakeRun(n, uint32(slices), high)
	if !ok {
		return false
	}
	*r = Run{pc: pc, ticket: tk, bytes: n, slices: uint32(slices)}
	k.active.Add(int64(slices))
	k.busy()
	return true
}

// BeginTaken is Begin and Take for task i of b, of one slice of n bytes
// at r's receiver, drawing on r: nil when r has too little left (the
// task then takes its own: Begin, Take).
func (k *Keeper) BeginTaken(r *Run, b *progress.Batch, i int, n uint64) *Hold {
	if r.slices == 0 || r.bytes < n {
		return nil
	}
	r.slices--
	r.bytes -= n
	h := k.hold(b, i)
	h.peer.Store(r.pc)
	h.slice.Store(n)
	h.ticket.Store(r.ticket)
	h.held.Store(n)
	h.n.Store(1)
	h.token.Store(progress.WithRail(b.Token(i), 0)) // last: Reaped matches it first
	return h
}

// EndRun gives back what r's tasks did not draw.
func (k *Keeper) EndRun(r *Run) {
	if r.slices > 0 {
		k.active.Add(-int64(r.slices))
		r.pc.acct.Untake(r.ticket, r.bytes, r.slices)
	}
	*r = Run{}
}

// takeClass takes credit for a slice of n bytes at a: a high-priority
// slice may use the high class's reserve of the window, any other leaves
// it (Account.TakeBulk), so that a HIGH read never waits for credit that
// LOW writes hold.
func takeClass(a *Account, n uint64, high bool) (uint64, bool) {
	if high {
		return a.Take(n)
	}
	return a.TakeBulk(n)
}

// waitPoll is how often a slice waiting for credit looks at its task's
// deadline and cancel.
const waitPoll = 10 * time.Millisecond

// wait waits for credit for n bytes at pc, polling lane l for the
// completions that bring it back.
func (k *Keeper) wait(pc *Peer, n uint64, high bool, b *progress.Batch, i int, l Lane, tk *uint64) bool {
	timer := time.NewTimer(waitPoll)
	defer timer.Stop()
	for {
		w := pc.acct.Wait()
		var ok bool
		*tk, ok = takeClass(pc.acct, n, high) // what came back before Wait
		k.busy()                              // a failed take is a wait to report
		if ok {
			return true
		}
		if b.Stopping(i, progress.Now()) || k.closed() || l.Down() {
			return false // the caller's cut fails the attempt over when the lane is down
		}
		select {
		case <-w:
		case <-timer.C:
			timer.Reset(waitPoll) // for the task's deadline and cancel
		case <-k.cfg.Quit:
			return false
		}
		l.Poll(k.cfg.Tracker)
	}
}

func (k *Keeper) closed() bool {
	select {
	case <-k.cfg.Quit:
		return true
	default:
		return false
	}
}

// Unsent gives back the credit of a slice taken for h that never left
// (its lane refused it).
func (k *Keeper) Unsent(h *Hold, n uint64) {
	if h.n.Add(-1) < 0 {
		h.n.Add(1)
		return
	}
	h.held.Add(^(n - 1))
	k.active.Add(-1)
	if pc := h.peer.Load(); pc != nil {
		pc.acct.Give(h.ticket.Load(), n)
	}
}

// release gives back everything h holds and forgets its attempt.
func (k *Keeper) release(h *Hold) {
	h.token.Store(0)
	n := h.n.Swap(0)
	held := h.held.Swap(0)
	if n <= 0 {
		return
	}
	k.active.Add(-n)
	if pc := h.peer.Load(); pc != nil {
		pc.acct.GiveBack(h.ticket.Load(), held, uint32(n))
	}
}

// Reaped gives back the credit of each completed slice that holds some:
// one slice's worth (the plan's slice, or what is left) per completion.
// It costs an atomic load while no slice holds credit.
//
// What completions of one attempt's run give back goes back to its
// account together, one lock of it for the run.
func (k *Keeper) Reaped(ds []ring.Descriptor) {
	if k.active.Load() <= 0 {
		return
	}
	var g give
	var freed int64
	for j := range ds {
		tok := ds[j].Token
		slot, i := progress.TokenTask(tok)
		if slot >= len(k.holds) {
			continue
		}
		hs := k.holds[slot].Load()
		if hs == nil || i >= len(hs.tasks) {
			continue
		}
		h := &hs.tasks[i]
		if h.token.Load() != progress.WithRail(tok, 0) {
			continue // not a slice holding credit, or of an earlier attempt
		}
		n := h.n.Load()
		for n > 0 && !h.n.CompareAndSwap(n, n-1) {
			n = h.n.Load()
		}
		if n <= 0 {
			continue
		}
		held := h.held.Load()
		bytes := min(h.slice.Load(), held)
		for !h.held.CompareAndSwap(held, held-bytes) {
			held = h.held.Load()
			bytes = min(h.slice.Load(), held)
		}
		freed++
		if pc := h.peer.Load(); pc != nil {
			g.add(pc, h.ticket.Load(), bytes)
		}
	}
	g.flush()
	k.active.Add(-freed)
}

// give is what consecutive completions give back to one account under
// one ticket (Reaped).
type give struct {
	pc     *Peer
	ticket uint64
	bytes  uint64
	slices uint32
}

func (g *give) add(pc *Peer, ticket, bytes uint64) {
	if pc != g.pc || ticket != g.ticket {
		g.flush()
		g.pc, g.ticket = pc, ticket
	}
	g.bytes += bytes
	g.slices++
}

func (g *give) flush() {
	if g.slices > 0 {
		g.pc.acct.GiveBack(g.ticket, g.bytes, g.slices)
	}
	g.bytes, g.slices = 0, 0
}

// Free gives back what the tasks of the batch of n tasks freed from
// slot still hold (slices whose completions never came: their plugin
// died, say).
func (k *Keeper) Free(slot, n int) {
	// The slot's holds go with the batch: slots are handed out oldest
	// freed first, so holds kept per slot grew with every slot ever used
	// (ferry soak's heap profile: +10 MiB in 3 minutes). A completion
	// still being reaped keeps the old holds alive until it is done; the
	// slot's next batch gets its own (Begin).
	hs := k.holds[slot].Swap(nil)
	if hs == nil {
		return
	}
	for i := range min(n, len(hs.tasks)) {
		k.release(&hs.tasks[i])
	}
}

// Down returns the credit every receiver holds for this engine when a
// two-sided plugin's run ended: the slices it had in flight never
// complete, and the peers' plugins dropped what they held of its
// connections.
func (k *Keeper) Down() {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, pc := range k.peers {
		pc.acct.Reset(pc.acct.Epoch())
	}
}

// Run asks every receiver that credit is used at for a new grant, every
// interval, until Quit. After a look that found nothing to ask it sleeps
// until a slice takes or waits for credit, and asks an interval later.
func (k *Keeper) Run() {
	t := time.NewTimer(k.cfg.Interval)
	defer t.Stop()
	var peers []*Peer
	for {
		select {
		case <-k.cfg.Quit:
			return
		case <-t.C:
		}
		peers = k.snapshot(peers[:0])
		asked := false
		for _, pc := range peers {
			asked = k.ask(pc) || asked
		}
		if !asked && !k.rest(peers) {
			return
		}
		t.Reset(k.cfg.Interval)
	}
}

// snapshot appends the peers to ps.
func (k *Keeper) snapshot(ps []*Peer) []*Peer {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, pc := range k.peers {
		ps = append(ps, pc)
	}
	return ps
}

// rest sleeps, Run having found no receiver to ask, until a slice takes
// or waits for credit (busy); false at Quit. idle is set before the
// receivers are looked at again and a taker changes its account before
// it looks at idle (Take, under the account's lock): one of the two sees
// the other.
func (k *Keeper) rest(peers []*Peer) bool {
	k.idle.Store(true)
	for _, pc := range k.snapshot(peers[:0]) {
		pc.mu.Lock()
		_, due := pc.due()
		pc.mu.Unlock()
		if due {
			// Leave idle to whoever set it false: a busy that did also
			// kicked, which costs one early look at most.
			k.idle.CompareAndSwap(true, false)
			return true
		}
	}
	select {
	case <-k.kick:
		return true
	case <-k.cfg.Quit:
		return false
	}
}

// busy wakes Run from rest: a slice took credit, or found none.
func (k *Keeper) busy() {
	if k.idle.Load() && k.idle.CompareAndSwap(true, false) {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
}

// askTimeout bounds one ask.
func (k *Keeper) askTimeout() time.Duration { return max(4*k.cfg.Interval, 500*time.Millisecond) }

// due reports whether pc's receiver is to be asked: credit is in use
// there or a slice waited for it since the last ask, and it grants. pc.mu
// is held.
func (pc *Peer) due() (AccountStats, bool) {
	if pc.noGrants || pc.control == "" {
		return AccountStats{}, false
	}
	st := pc.acct.Stats()
	return st, st.InUse != 0 || st.Waits != pc.lastWaits
}

// ask asks pc's receiver for a grant when it is due, and reports whether
// it asked. A receiver that is gone has the credit returned (Reset); one
// that grants no credit leaves the initial credit.
func (k *Keeper) ask(pc *Peer) bool {
	pc.asking.Lock()
	defer pc.asking.Unlock()
	pc.mu.Lock()
	st, due := pc.due()
	if !due {
		pc.mu.Unlock()
		return false
	}
	pc.lastWaits = st.Waits
	addr, inc := pc.control, pc.inc
	r := pc.acct.Request()
	pc.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), k.askTimeout())
	g, err := k.cfg.Asker.Ask(ctx, addr, pc.name, inc, r)
	cancel()

	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.inc != inc {
		return true // the receiver changed lives meanwhile: the answer was the old one's
	}
	switch {
	case err == nil:
		err = pc.acct.Accept(g)
		if errors.Is(err, ErrStaleEpoch) {
			pc.acct.Reset(pc.inc) // it restarted: the handle is retired soon; its credit is back
		}
	case errors.Is(err, ErrNoGrants):
		pc.noGrants = true
		k.cfg.Log.Info("the receiver grants no credit (an older engine, or credit off there); its initial credit stays", "segment", pc.name)
		return true
	case errors.Is(err, ErrGone):
		// Gone, or another life of it: what was in flight there is not
		// waited for, and the window starts again from the initial one.
		pc.acct.Reset(pc.inc)
	}
	if err != nil && time.Since(pc.warned) > time.Minute {
		pc.warned = time.Now()
		k.cfg.Log.Warn("receiver credit: no grant from the receiver; the current credit stays", "segment", pc.name, "error", err)
	}
	return true
}

// PeerStats is the sender's credit at one receiver.
type PeerStats struct {
	Segment string
	AccountStats
}

// Stats returns the credit at each receiver the engine sent to, in no
// order.
func (k *Keeper) Stats() []PeerStats {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]PeerStats, 0, len(k.peers))
	for _, pc := range k.peers {
		out = append(out, PeerStats{Segment: pc.name, AccountStats: pc.acct.Stats()})
	}
	return out
}
