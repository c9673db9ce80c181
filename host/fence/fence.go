// Package fence is the initiating engine's half of "ended means ended at
// both ends": a write's bytes can outlive the plugin run that sent them
// (queued in a kernel's send buffer on a slow link, or unread in the
// socket of a receiving plugin that was stopped), so when a two-sided
// plugin run (tcp) ends with writes in flight, the engine asks each
// target engine to fence that run (host/control's Fence, which the
// target's plugin keeps with sdk/kit.Fences) before it reports those
// writes ended or sends any newer write to that target.
//
// Gates holds, per target segment, the fences still unconfirmed. While a
// target has one, its gate is closed: no write to it is put on any
// transport (Wait), since it could land before the old run's bytes and
// be overwritten by them. Each closed gate has one goroutine that asks
// the target until every fence is confirmed (or the target answers as
// another life, whose plugins never held the old run's connections),
// backing off between tries, for as long as the engine runs: a target
// that cannot be reached keeps its gate closed, and writes to it wait
// within their own deadlines and say why.
//
// It owns those goroutines (Stop ends them) and the gates' state. It
// must not touch plugins or tasks: the engine ends the tasks a fence
// held back (Confirmed) and asks the target through the Port.
package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Target is a segment whose gate a fence closes.
type Target struct {
	Name        string // the segment's name: its gate's key
	Incarnation uint64 // the life whose plugins may hold the run's bytes
	Control     string // its control service's address, for the Port
}

// Port is how a gate's goroutine reaches the target.
type Port interface {
	// Fence asks t to fence run (of plugin transport) and returns nil
	// once t confirmed it, or once t is known to be another life than
	// t.Incarnation (its plugins died with the old one, and the old
	// run's connections with them). It returns by ctx's end.
	Fence(ctx context.Context, t Target, transport string, run uint64) error
}

// Backoff bounds: the first retry of an unconfirmed fence, and the
// longest pause between tries.
const (
	FirstRetry = 50 * time.Millisecond
	MaxRetry   = 2 * time.Second
)

// Gates are the engine's fence gates. The zero value is not usable; call
// New.
type Gates struct {
	port    Port
	timeout time.Duration // one Fence call's bound

	closed  atomic.Int32 // gates closed now: Closed's fast path
	mu      sync.Mutex
	gates   map[string]*gate
	stopped bool // Stop began: no goroutine starts (under mu)
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

type gate struct {
	t       Target
	pending []pend
	open    chan struct{} // closed when the gate opens
	since   time.Time
	tries   int
	lastErr error
	done    map[pend]chan struct{} // closed when that fence is confirmed
}

type pend struct {
	transport string
	run       uint64
}

// New returns gates whose goroutines ask through port, each call bounded
// by timeout.
func New(port Port, timeout time.Duration) *Gates {
	ctx, stop := context.WithCancel(context.Background())
	return &Gates{port: port, timeout: timeout, gates: make(map[string]*gate), ctx: ctx, stop: stop}
}

// Close closes t's gate until run (of plugin transport) is fenced at t,
// and starts asking t if nobody does yet. It returns a channel closed
// once that fence is confirmed.
func (g *Gates) Close(t Target, transport string, run uint64) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := pend{transport, run}
	gt := g.gates[t.Name]
	if gt == nil || gt.t.Incarnation != t.Incarnation {
		if gt != nil { // an older life's gate: its goroutine sees it replaced
			g.openLocked(gt)
			for _, ch := range gt.done { // that life's plugins died with it
				close(ch)
			}
			gt.done = nil
		}
		gt = &gate{t: t, open: make(chan struct{}), since: time.Now(), done: make(map[pend]chan struct{})}
		g.gates[t.Name] = gt
		g.closed.Add(1)
		if !g.stopped { // else the engine is closing: nobody asks
			g.wg.Add(1)
			go g.drive(gt)
		}
	}
	ch, ok := gt.done[p]
	if !ok {
		ch = make(chan struct{})
		gt.done[p] = ch
		gt.pending = append(gt.pending, p)
	}
	return ch
}

// Closed reports whether the gate of the segment named name is closed;
// one atomic load while no gate is.
func (g *Gates) Closed(name string) bool {
	if !g.Any() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gates[name] != nil
}

// Any reports whether any gate is closed: one atomic load.
func (g *Gates) Any() bool { return g.closed.Load() != 0 }

// ErrClosed is what Wait returns (wrapped, with the target and why) when
// it gave up before the gate opened.
var ErrClosed = errors.New("the target has not confirmed the fence of an ended plugin run")

// Wait waits until the gate of the segment named name is open, until at
// most deadline (unix ns; 0: no bound), polling stop every poll (a task
// canceled meanwhile). It returns nil once open, else an error wrapping ErrClosed
// that names the target, the fences and the last answer.
func (g *Gates) Wait(name string, deadline int64, poll time.Duration, stop func() bool) error {
	var until time.Time
	if deadline != 0 {
		until = time.Unix(0, deadline)
	}
	var timer *time.Timer
	for {
		g.mu.Lock()
		gt := g.gates[name]
		g.mu.Unlock()
		if gt == nil {
			return nil
		}
		wait := poll
		if !until.IsZero() {
			left := time.Until(until)
			if left <= 0 || stop() {
				return g.err(gt)
			}
			wait = min(wait, left)
		} else if stop() {
			return g.err(gt)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-gt.open:
		case <-timer.C:
		case <-g.ctx.Done():
			return fmt.Errorf("%w: the engine is closing", ErrClosed)
		}
	}
}

func (g *Gates) err(gt *gate) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	runs := make([]string, 0, len(gt.pending))
	for _, p := range gt.pending {
		runs = append(runs, fmt.Sprintf("%s run %#x", p.transport, p.run))
	}
	why := "no answer yet"
	if gt.lastErr != nil {
		why = gt.lastErr.Error()
	}
	return fmt.Errorf("%w: writes to segment %q wait until it confirms that nothing of %v can still land there (asked %d times since %s; last: %s)",
		ErrClosed, gt.t.Name, runs, gt.tries, gt.since.Format(time.RFC3339), why)
}

// drive asks gt's target until every fence of it is confirmed, then
// opens it.
func (g *Gates) drive(gt *gate) {
	defer g.wg.Done()
	backoff := FirstRetry
	var timer *time.Timer
	for {
		g.mu.Lock()
		if g.gates[gt.t.Name] != gt {
			g.mu.Unlock()
			return // replaced by a newer life's gate
		}
		if len(gt.pending) == 0 {
			g.openLocked(gt)
			delete(g.gates, gt.t.Name)
			g.mu.Unlock()
			return
		}
		p := gt.pending[0]
		g.mu.Unlock()

		ctx, cancel := context.WithTimeout(g.ctx, g.timeout)
		err := g.port.Fence(ctx, gt.t, p.transport, p.run)
		cancel()

		g.mu.Lock()
		gt.tries++
		if err == nil {
			gt.pending = gt.pending[1:]
			if ch := gt.done[p]; ch != nil {
				close(ch)
				delete(gt.done, p)
			}
			backoff = FirstRetry
			g.mu.Unlock()
			continue
		}
		gt.lastErr = err
		g.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(backoff)
			defer timer.Stop()
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-timer.C:
		case <-g.ctx.Done():
			return
		}
		backoff = min(2*backoff, MaxRetry)
	}
}

// openLocked opens gt; g.mu held.
func (g *Gates) openLocked(gt *gate) {
	select {
	case <-gt.open:
		return
	default:
	}
	close(gt.open)
	g.closed.Add(-1)
}

// Status is one closed gate, for status and metrics.
type Status struct {
	Segment     string
	Incarnation uint64
	Runs        int       // fences not yet confirmed
	Since       time.Time // when the gate closed
	Tries       int
	LastError   string
}

// Statuses returns the closed gates.
func (g *Gates) Statuses() []Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Status, 0, len(g.gates))
	for _, gt := range g.gates {
		s := Status{Segment: gt.t.Name, Incarnation: gt.t.Incarnation, Runs: len(gt.pending), Since: gt.since, Tries: gt.tries}
		if gt.lastErr != nil {
			s.LastError = gt.lastErr.Error()
		}
		out = append(out, s)
	}
	return out
}

// EndAfter calls end, in a goroutine the gates own, once every channel
// of dones (from Close) is closed, or bound has passed, or the gates
// stop first; confirmed says whether every fence was. It is how the
// writes a fence holds back are ended.
func (g *Gates) EndAfter(dones []<-chan struct{}, bound time.Duration, end func(confirmed bool)) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		end(false)
		return
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		timer := time.NewTimer(bound)
		defer timer.Stop()
		for _, d := range dones {
			select {
			case <-d:
			case <-timer.C:
				end(false)
				return
			case <-g.ctx.Done():
				end(false)
				return
			}
		}
		end(true)
	}()
}

// Stop ends every gate's goroutine and waits for them; the gates stay
// as they are (the engine is closing).
func (g *Gates) Stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.stop()
	g.wg.Wait()
}
