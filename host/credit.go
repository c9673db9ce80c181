package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/credit"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Receiver credit (host/credit decides, this file wires it; see
// docs/credit.md). As a receiver the engine answers its peers' Credit
// calls on the control service with its Grantor. As a sender it keeps an
// Account per remote segment: every slice for a two-sided transport
// (Info.TwoSided: tcp) takes credit before it reaches the plugin's lane,
// waiting (up to its task's deadline) when there is none, and gives it
// back as its completion is reaped. A keeper goroutine asks each receiver
// in use for a new grant every credit interval.

// creditState is the engine's receiver credit; nil when credit is off.
type creditState struct {
	e        *Engine
	interval time.Duration
	lim      credit.Limits

	gmu     sync.Mutex // serialises the Grantor
	grantor *credit.Grantor

	mu    sync.RWMutex
	peers map[string]*peerCredit // by segment name

	// holds[slot] is what the tasks of the batch in that slot hold.
	holds []atomic.Pointer[slotHolds]
	// active counts the slices holding credit: a completion is looked up
	// only while there are some.
	active atomic.Int64
}

// peerCredit is this engine's credit at one receiver.
type peerCredit struct {
	name string
	acct *credit.Account

	// The keeper's, and the fields it asks with (under mu). mu is never
	// held across the Credit call (the request path takes it when the
	// receiver changed lives); asking serialises the keeper's asks.
	asking    sync.Mutex
	mu        sync.Mutex
	control   string // the receiver's control address
	inc       uint64 // its incarnation, as the handle holds it
	noGrants  bool   // it answered Unimplemented: the initial credit stays
	lastWaits uint64
	warned    time.Time
}

type slotHolds struct{ tasks []taskHold }

// taskHold is the credit one task's current attempt holds. Its fields are
// atomics: completions are reaped concurrently with the submitter.
type taskHold struct {
	token  atomic.Uint64 // the attempt's token with rail 0; 0: none
	peer   atomic.Pointer[peerCredit]
	ticket atomic.Uint64
	slice  atomic.Uint64 // the plan's slice length
	held   atomic.Uint64 // bytes
	n      atomic.Int64  // slices
}

// newCredit returns the engine's receiver credit when the configuration
// has it on (the default), else nil; New sets it before the first
// plugin's lanes are observed.
func newCredit(e *Engine) *creditState {
	cfg := e.cfg.QoS.Credit
	if !cfg.On() {
		return nil
	}
	cfg = cfg.WithDefaults()
	c := &creditState{
		e: e, interval: cfg.Interval,
		lim: credit.Limits{
			InitialBytes: uint64(cfg.InitialBytes), MaxBytes: uint64(cfg.MaxBytes),
			InitialRequests: uint32(cfg.InitialRequests), MaxRequests: uint32(cfg.MaxRequests),
		},
		peers: make(map[string]*peerCredit),
		holds: make([]atomic.Pointer[slotHolds], e.tracker.Slots()),
	}
	c.grantor = credit.NewGrantor(c.lim, cfg.TargetDelay, e.incarnation)
	return c
}

// startCredit starts the keeper, once the control service runs; Close
// stops it (e.quit, e.wg).
func (e *Engine) startCredit() {
	if e.credit != nil {
		e.wg.Add(1)
		go e.credit.keep()
	}
}

// creditGranter is what the control service grants credit with; nil
// (Unimplemented to peers) when credit is off.
func (e *Engine) creditGranter() control.Granter {
	if e.credit == nil {
		return nil
	}
	return e.credit
}

// Grant answers a peer's Credit call (control.Granter).
func (c *creditState) Grant(a control.CreditAsk) (control.CreditGrant, error) {
	c.gmu.Lock()
	g, err := c.grantor.Grant(credit.Sender{Name: a.From, Incarnation: a.FromIncarnation},
		credit.Report{Seq: a.Seq, Drained: a.Drained, InUse: a.InUse, Limited: a.Limited}, time.Now().UnixNano())
	c.gmu.Unlock()
	if err != nil {
		return control.CreditGrant{}, err
	}
	return control.CreditGrant{Epoch: g.Epoch, Seq: g.Seq, Bytes: g.Bytes, Requests: g.Requests}, nil
}

// creditFor returns the credit of the receiver rem over the plugin run,
// or nil when the plugin is one-sided or credit is off. A handle of a
// new incarnation of the receiver returns the old one's credit.
func (e *Engine) creditFor(run *pluginRun, rem *remote) *peerCredit {
	c := e.credit
	if c == nil || !run.p.Info.TwoSided || rem.Desc == nil {
		return nil
	}
	c.mu.RLock()
	pc := c.peers[rem.Name]
	c.mu.RUnlock()
	inc := rem.Desc.Incarnation
	if pc == nil {
		c.mu.Lock()
		if pc = c.peers[rem.Name]; pc == nil {
			pc = &peerCredit{name: rem.Name, acct: credit.NewAccount(c.lim, inc), control: rem.Desc.Control, inc: inc}
			c.peers[rem.Name] = pc
		}
		c.mu.Unlock()
	}
	if pc.acct.Epoch() != inc {
		pc.mu.Lock()
		if pc.inc != inc {
			pc.inc, pc.control, pc.noGrants = inc, rem.Desc.Control, false
			pc.acct.Reset(inc)
		}
		pc.mu.Unlock()
	}
	return pc
}

// begin readies task i's hold for an attempt whose slices take credit
// at pc, giving back what an earlier attempt still held.
func (c *creditState) begin(b *progress.Batch, i int, pc *peerCredit, slice uint64) *taskHold {
	slot := b.Slot()
	hs := c.holds[slot].Load()
	if hs == nil || len(hs.tasks) < b.Cap() {
		hs = &slotHolds{tasks: make([]taskHold, b.Cap())}
		if old := c.holds[slot].Swap(hs); old != nil {
			for k := range old.tasks {
				c.release(&old.tasks[k])
			}
		}
	}
	h := &hs.tasks[i]
	c.release(h)
	h.peer.Store(pc)
	h.slice.Store(slice)
	h.token.Store(progress.WithRail(b.Token(i), 0))
	return h
}

// take takes credit at pc for one slice of n bytes of task i, waiting
// for it, with the lane l (held by the caller) released meanwhile. It
// reports false when the task stopped (canceled, its deadline passed) or
// the engine closed first: a receiver that stops granting holds a sender
// up to its deadline, never longer.
func (c *creditState) take(h *taskHold, pc *peerCredit, n uint64, high bool, b *progress.Batch, i int, l *progress.Lane) bool {
	tk, ok := takeClass(pc.acct, n, high)
	if !ok {
		l.End() // what is enqueued goes now, and others use the lane while this waits
		ok = c.wait(pc, n, high, b, i, l, &tk)
		l.Begin()
		if !ok {
			return false
		}
	}
	h.ticket.Store(tk)
	h.held.Add(n)
	h.n.Add(1)
	c.active.Add(1)
	return true
}

// takeClass takes credit for a slice of n bytes at a: a high-priority
// slice may use the high class's reserve of the window, any other leaves
// it (credit.Account.TakeBulk), so that a HIGH read never waits for
// credit that LOW writes hold.
func takeClass(a *credit.Account, n uint64, high bool) (uint64, bool) {
	if high {
		return a.Take(n)
	}
	return a.TakeBulk(n)
}

// wait waits for credit for n bytes at pc, polling lane l for the
// completions that bring it back (no reaper may be taking them).
func (c *creditState) wait(pc *peerCredit, n uint64, high bool, b *progress.Batch, i int, l *progress.Lane, tk *uint64) bool {
	timer := time.NewTimer(heldPoll)
	defer timer.Stop()
	for {
		w := pc.acct.Wait()
		var ok bool
		if *tk, ok = takeClass(pc.acct, n, high); ok { // what came back before Wait
			return true
		}
		if b.Stopping(i, progress.Now()) || c.e.closed.Load() || l.Down() {
			return false // the caller's cut fails the attempt over when the lane is down
		}
		select {
		case <-w:
		case <-timer.C:
			timer.Reset(heldPoll) // for the task's deadline and cancel
		case <-c.e.quit:
			return false
		}
		l.Poll(c.e.tracker)
	}
}

// unsent gives back the credit of a slice taken for h that never left
// (its lane refused it).
func (c *creditState) unsent(h *taskHold, n uint64) {
	if h.n.Add(-1) < 0 {
		h.n.Add(1)
		return
	}
	h.held.Add(^(n - 1))
	c.active.Add(-1)
	if pc := h.peer.Load(); pc != nil {
		pc.acct.Give(h.ticket.Load(), n)
	}
}

// release gives back everything h holds and forgets its attempt.
func (c *creditState) release(h *taskHold) {
	h.token.Store(0)
	n := h.n.Swap(0)
	held := h.held.Swap(0)
	if n <= 0 {
		return
	}
	c.active.Add(-n)
	if pc := h.peer.Load(); pc != nil {
		pc.acct.GiveBack(h.ticket.Load(), held, uint32(n))
	}
}

// reaped gives back the credit of each completed slice that holds some:
// one slice's worth (the plan's slice, or what is left) per completion.
func (c *creditState) reaped(ds []ring.Descriptor) {
	for k := range ds {
		tok := ds[k].Token
		slot, i := progress.TokenTask(tok)
		if slot >= len(c.holds) {
			continue
		}
		hs := c.holds[slot].Load()
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
		c.active.Add(-1)
		if pc := h.peer.Load(); pc != nil {
			pc.acct.Give(h.ticket.Load(), bytes)
		}
	}
}

// creditFree gives back what the tasks of the batch of n tasks freed
// from slot still hold (slices whose completions never came: their
// plugin died, say).
func (e *Engine) creditFree(slot, n int) {
	c := e.credit
	if c == nil {
		return
	}
	// The slot's holds go with the batch: slots are handed out oldest
	// freed first, so holds kept per slot grew with every slot ever used
	// (ferry soak's heap profile: +10 MiB in 3 minutes). A completion
	// still being reaped keeps the old holds alive until it is done; the
	// slot's next batch gets its own (begin).
	hs := c.holds[slot].Swap(nil)
	if hs == nil {
		return
	}
	for i := range min(n, len(hs.tasks)) {
		c.release(&hs.tasks[i])
	}
}

// creditDown returns the credit every receiver holds for this engine
// when a two-sided plugin's run ended (Hooks.Down): the slices it had in
// flight never complete, and the peers' plugins dropped what they held
// of its connections.
func (e *Engine) creditDown(twoSided bool) {
	c := e.credit
	if c == nil || !twoSided {
		return
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, pc := range c.peers {
		pc.acct.Reset(pc.acct.Epoch())
	}
}

// keep asks every receiver that credit is used at for a new grant, every
// interval, until the engine closes.
func (c *creditState) keep() {
	defer c.e.wg.Done()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	var peers []*peerCredit
	for {
		select {
		case <-c.e.quit:
			return
		case <-t.C:
		}
		peers = peers[:0]
		c.mu.RLock()
		for _, pc := range c.peers {
			peers = append(peers, pc)
		}
		c.mu.RUnlock()
		for _, pc := range peers {
			c.ask(pc)
		}
	}
}

// askTimeout bounds one Credit call.
func (c *creditState) askTimeout() time.Duration { return max(4*c.interval, 500*time.Millisecond) }

// ask asks pc's receiver for a grant when credit is in use there or a
// slice waited for it since the last ask. A receiver whose control
// service is gone has the credit returned (Reset); one that grants no
// credit (an older engine, or credit off) leaves the initial credit.
func (c *creditState) ask(pc *peerCredit) {
	pc.asking.Lock()
	defer pc.asking.Unlock()
	pc.mu.Lock()
	st := pc.acct.Stats()
	if pc.noGrants || pc.control == "" || (st.InUse == 0 && st.Waits == pc.lastWaits) || c.e.hc == nil {
		pc.mu.Unlock()
		return
	}
	pc.lastWaits = st.Waits
	addr, inc := pc.control, pc.inc
	r := pc.acct.Request()
	pc.mu.Unlock()

	cl, err := c.e.hc.Client(addr)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.askTimeout())
	g, err := cl.Credit(ctx, control.CreditAsk{From: c.e.name, FromIncarnation: c.e.incarnation, To: pc.name, ToIncarnation: inc,
		Seq: r.Seq, Drained: r.Drained, InUse: r.InUse, Limited: r.Limited})
	cancel()

	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.inc != inc {
		return // the receiver changed lives meanwhile: the answer was the old one's
	}
	if err == nil {
		err = pc.acct.Accept(credit.Grant{Epoch: g.Epoch, Seq: g.Seq, Bytes: g.Bytes, Requests: g.Requests})
		if errors.Is(err, credit.ErrStaleEpoch) {
			pc.acct.Reset(pc.inc) // it restarted: the handle is retired soon; its credit is back
		}
	} else {
		switch status.Code(err) {
		case codes.Unimplemented:
			pc.noGrants = true
			c.e.log.Info("the receiver grants no credit (an older engine, or credit off there); its initial credit stays", "segment", pc.name)
			return
		case codes.Unavailable, codes.DeadlineExceeded, codes.FailedPrecondition:
			// Gone, or another life of it: what was in flight there is not
			// waited for, and the window starts again from the initial one.
			pc.acct.Reset(pc.inc)
		}
	}
	if err != nil && time.Since(pc.warned) > time.Minute {
		pc.warned = time.Now()
		c.e.log.Warn("receiver credit: no grant from the receiver; the current credit stays", "segment", pc.name, "error", err)
	}
}

// reapedHook is the tracker's hook for the completions every lane
// reaps: they go to the rail set of the plugin run that owns the lane
// (progress.Lane.Owner, which pluginHooks sets), and to receiver credit
// when it is on.
func (e *Engine) reapedHook() progress.Hook {
	c := e.credit
	return progress.Hook{Reaped: func(l *progress.Lane, ds []ring.Descriptor) {
		if rs, ok := l.Owner.(*rails.Set); ok {
			rs.Reaped(ds)
		}
		if c != nil && c.active.Load() > 0 {
			c.reaped(ds)
		}
	}}
}

// CreditStats is this engine's receiver credit at one receiver, as a
// sender.
type CreditStats struct {
	Segment string
	credit.AccountStats
}

// CreditStats returns the engine's credit at each receiver it sent to
// over a two-sided transport, in no order; nil when credit is off.
func (e *Engine) CreditStats() []CreditStats {
	c := e.credit
	if c == nil {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]CreditStats, 0, len(c.peers))
	for _, pc := range c.peers {
		out = append(out, CreditStats{Segment: pc.name, AccountStats: pc.acct.Stats()})
	}
	return out
}

// Credit reports the engine's receiver credit to the metrics collector
// (metrics.CreditSource), summed over the receivers.
func (s metricsSource) Credit() (metrics.Credit, bool) {
	if s.e.credit == nil {
		return metrics.Credit{}, false
	}
	var m metrics.Credit
	for _, st := range s.e.CreditStats() {
		m.Receivers++
		m.WindowBytes += st.Window
		m.InUseBytes += st.InUse
		m.Grants += st.Grants
		m.Refused += st.Refused
		m.Waits += st.Waits
		m.Resets += st.Resets
	}
	return m, true
}
