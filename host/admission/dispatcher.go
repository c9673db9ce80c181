package admission

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/progress"
)

// The dispatcher: the driver of a Queue in an engine. Every request the
// queue does not let go at once is held (Hold), and one goroutine
// (Dispatcher.Run) takes held tasks on as the queue says their turn came:
// a completion freed a budget, a rate cap refilled, or a deadline
// brought a promotion. A held task has sent nothing: canceled or past
// its deadline it ends at once (it holds no plugin), and the dispatcher
// drops it when it comes up.
//
// The unloaded path takes no lock and hands nothing to the dispatcher:
// a request that nothing binds is let go by the queue's Admit on the
// submitting goroutine (atomics only), and its end gives its in-flight
// budgets back with Release, also lock-free. Only when a bound is full,
// a cap or a queue is in the way, or reject_late is on, does a request
// take the lock (Offer).
//
// No lock is held while a task taken from the queue is resumed (the
// resume may wait for credit or ring space): the dispatcher pins the
// task's batch under its lock as Next gives it (progress.Tracker.
// PinBatch), so that a FreeBatch meanwhile never hands the batch to a
// new owner; FreeBatch waits for the pin after Forget.

// Held is a task held in the queue: its batch, that batch's ID when the
// task was held (a batch freed and reused meanwhile has another), and its
// index.
type Held struct {
	B  *progress.Batch
	ID uint64
	I  int32
}

// ResumePort is what the dispatcher does with held tasks.
type ResumePort interface {
	// Resume takes held task h on, granted g: the rest of the request
	// path. Its batch is pinned while it runs.
	Resume(h Held, g Grant)
	// Abandon ends held task h, never dispatched: the engine closed.
	Abandon(h Held)
}

// ErrStopped is a submitter's wait for room in a full queue that the
// engine's close ended.
var ErrStopped = errors.New("the engine closed while the request waited for room in the admission queue")

// DispatcherConfig is a dispatcher's: its queue's, whether a full queue
// blocks its submitters, and its ports.
type DispatcherConfig struct {
	Queue Config
	// Block: a submitter whose queue is full waits for room (qos.busy =
	// "block") rather than fail at once.
	Block   bool
	Tracker *progress.Tracker
	Port    ResumePort
	Quit    <-chan struct{} // closed when the engine closes
}

// Dispatcher drives a Queue of held tasks. Safe for concurrent use.
type Dispatcher struct {
	cfg DispatcherConfig
	mu  sync.Mutex // guards q
	q   *Queue[Held]
	// wake tells the dispatcher to look at the queue; room tells a
	// submitter waiting on a full queue that a place freed.
	wake, room chan struct{}
	held       atomic.Uint64 // requests held back so far
	// grants: a grant holds something to give back (the queue is
	// Counted), so tasks keep theirs and give them back at their end;
	// measured: that is Done, under mu, with the time.
	grants, measured bool
}

// NewDispatcher builds the queue of cfg; Run is its goroutine.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	q, err := New[Held](cfg.Queue, func(h Held, now int64) bool {
		return h.B.ID() != h.ID || h.B.Stopping(int(h.I), now)
	})
	if err != nil {
		return nil, err
	}
	return &Dispatcher{cfg: cfg, q: q, wake: make(chan struct{}, 1), room: make(chan struct{}, 1), grants: q.Counted(), measured: q.Measured()}, nil
}

// Grants reports whether admitted tasks hold grants to give back at
// their end (TaskGrant).
func (d *Dispatcher) Grants() bool { return d.grants }

func (d *Dispatcher) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) freed() {
	select {
	case d.room <- struct{}{}:
	default:
	}
}

// roomPoll is how often a submitter waiting for room looks at its task
// (a cancel does not wake it).
const roomPoll = 10 * time.Millisecond

// Hold offers held task h (request r, at now) to the queue. go_ says it
// goes on now, with grant g; otherwise it was held back (the dispatcher
// resumes it), or ended while its submitter waited for room (its state
// says why), or, with err, refused: ErrTenant, ErrLate, ErrBusy, or
// ErrStopped. tl counts the requests let go for their tenants (Count);
// wait false fails a full queue at once whatever Block says (a submitter
// that holds a lane, which a resume may need).
func (d *Dispatcher) Hold(h Held, r *Request, now int64, tl *Tally, wait bool) (g Grant, goOn bool, err error) {
	if g, ok := d.q.Admit(r, now, tl); ok {
		return g, true, nil // counted for its tenant at the call's end (Count)
	}
	d.q.Count(tl) // before the queue orders anything
	for {
		d.mu.Lock()
		g, v, err := d.q.Offer(h, *r, now)
		d.mu.Unlock()
		if err == nil && v == Now {
			return g, true, nil
		}
		if err == nil {
			d.held.Add(1)
			d.kick()
			return Grant{}, false, nil
		}
		if !errors.Is(err, ErrBusy) || !d.cfg.Block || !wait {
			return Grant{}, false, err
		}
		if d.awaitRoom(h, r.Deadline) {
			now = progress.Now()
			continue
		}
		if h.B.Stopping(int(h.I), progress.Now()) {
			return Grant{}, false, nil // canceled or past its deadline while it waited: ended
		}
		return Grant{}, false, ErrStopped
	}
}

// awaitRoom waits, for held task h whose queue is full, until a place
// frees; false when the task ended meanwhile (canceled, or its deadline,
// unix ns, passed) or the engine closed.
func (d *Dispatcher) awaitRoom(h Held, deadline int64) bool {
	var tc <-chan time.Time
	if deadline != 0 {
		t := time.NewTimer(time.Duration(deadline - progress.Now()))
		defer t.Stop()
		tc = t.C
	}
	poll := time.NewTicker(roomPoll)
	defer poll.Stop()
	for {
		select {
		case <-d.room:
			d.freed() // pass it on: several may wait, and room is one signal
			return true
		case <-poll.C:
			if h.B.Stopping(int(h.I), progress.Now()) {
				return false
			}
		case <-tc:
			h.B.State(int(h.I), progress.Now()) // expire it
			return false
		case <-d.cfg.Quit:
			return false
		}
	}
}

// Count adds the requests a submission let go (tl) to their tenants.
func (d *Dispatcher) Count(tl *Tally) { d.q.Count(tl) }

// TaskGrant is what a task holds of the queue's budgets, while held is
// 1; the engine keeps one per task beside its batch.
type TaskGrant struct {
	grant Grant
	held  atomic.Uint32
}

// Holding reports whether tg holds a grant not given back yet.
func (tg *TaskGrant) Holding() bool { return tg.held.Load() != 0 }

// Granted records that the task of tg holds g, given back at its end
// (GiveBack). ended says the task ended before the grant was recorded
// (canceled while held, say): it is given back here.
func (d *Dispatcher) Granted(tg *TaskGrant, g Grant, ended bool) {
	tg.grant = g
	tg.held.Store(1)
	if ended {
		d.GiveBack(tg, false)
	}
}

// GiveBack returns the budgets tg holds, once: sent says whether its
// bytes moved (for the bandwidth the queue measures).
func (d *Dispatcher) GiveBack(tg *TaskGrant, sent bool) {
	if !tg.held.CompareAndSwap(1, 0) {
		return
	}
	var freed bool
	if d.measured {
		d.mu.Lock()
		freed = d.q.Done(tg.grant, sent, progress.Now())
		d.mu.Unlock()
	} else {
		freed = d.q.Release(tg.grant)
	}
	// The room freed may let one go; with none held the dispatcher
	// sleeps on. A request held after this look was kicked for by its
	// own Offer, and Next sees the budget Release gave back. A grant
	// that no in-flight bound counted frees no room (a high-priority
	// request beside a capped low class): the dispatcher's wakeup would
	// only take a core from the request's own threads.
	if freed && d.q.Held() {
		d.kick()
	}
}

// sweepEvery is how often the dispatcher, while tasks are held, drops
// those that ended while held.
const sweepEvery = 100 * time.Millisecond

// Run takes held tasks on as the queue lets them go, until Quit; then it
// abandons the tasks still held.
func (d *Dispatcher) Run() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		swept := false
		select {
		case <-d.cfg.Quit:
			d.mu.Lock()
			d.q.Drain(func(h Held) {
				if h.B.ID() == h.ID {
					d.cfg.Port.Abandon(h)
				}
			})
			d.mu.Unlock()
			return
		case <-d.wake:
		case <-timer.C:
			swept = true
		}
		for {
			now := progress.Now()
			d.mu.Lock()
			h, g, ok := d.q.Next(now)
			pinned := ok && d.cfg.Tracker.PinBatch(h.B, h.ID)
			var at int64
			if !ok {
				if swept {
					d.q.Sweep(now) // held tasks canceled or expired behind a budget that is still full
				}
				at = d.q.Wake(now)
				if d.q.Len() > 0 && (at == 0 || at-now > int64(sweepEvery)) {
					at = now + int64(sweepEvery)
				}
			}
			d.mu.Unlock()
			if !ok {
				if at != 0 {
					timer.Reset(time.Duration(at - now))
				}
				break
			}
			d.freed()
			if !pinned {
				continue // its batch was freed meanwhile
			}
			d.cfg.Port.Resume(h, g)
			d.cfg.Tracker.Unpin(h.B)
		}
	}
}

// Forget drops the held tasks of b, which is being freed (its tasks
// ended), so that the dispatcher never takes one on.
func (d *Dispatcher) Forget(b *progress.Batch) {
	// b's tasks were offered by Submit calls that returned before
	// FreeBatch (the caller's order), so Held sees them unless the
	// dispatcher took them: it pinned b then, and FreeBatch waits for
	// that pin.
	if !d.q.Held() {
		return
	}
	d.mu.Lock()
	d.q.Remove(func(h Held) bool { return h.B == b })
	d.mu.Unlock()
	d.freed()
}

// DispatcherStats is what a dispatcher reports.
type DispatcherStats struct {
	// Held is how many requests are held back now; HeldTotal how many
	// were held back since the engine started.
	Held      int
	HeldTotal uint64
	// Dropped counts held-back requests that ended while held (canceled,
	// past their deadline) and were never dispatched.
	Dropped uint64
	// Bandwidth is the measured bandwidth, bytes per second; 0 before
	// any (Queue.Bandwidth).
	Bandwidth float64
	// Tenants are each tenant's counters, the default tenant's included.
	Tenants []TenantStats
}

// Stats returns the dispatcher's counters, dropping the held tasks that
// ended first.
func (d *Dispatcher) Stats() DispatcherStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := progress.Now()
	d.q.Sweep(now)
	return DispatcherStats{Held: d.q.Len(), HeldTotal: d.held.Load(), Dropped: d.q.Dropped, Bandwidth: d.q.Bandwidth(now), Tenants: d.q.Tenants(nil)}
}
