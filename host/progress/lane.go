package progress

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// ErrLaneDown is returned when a lane's plugin is gone.
var ErrLaneDown = errors.New("lane is down: its plugin exited")

// ErrTaskEnded is returned by Put when the task it was submitting for
// ended (canceled or timed out) while it waited for room.
var ErrTaskEnded = errors.New("task ended while waiting for room on the ring")

// Lane is the host side of one plugin lane: the submission ring the host
// produces into and the completion ring it reaps.
type Lane struct {
	ID uint32
	// Run numbers the plugin run the lane belongs to (the supervisor's
	// generation, whether or not the plugin stamps its completions), set
	// before the lane is used: a task records it with the lane's ID, so
	// that two runs of one plugin (a live upgrade's) can tell their
	// tasks apart.
	Run    uint32
	SQ, CQ *shm.Region // handed to the plugin by fd
	sq, cq *ring.Ring
	spin   time.Duration
	// spinSmall is how long a waiter for a small batch spins.
	spinSmall time.Duration
	// smallWait follows the median time (ns) a waiter for a small batch
	// waits on this lane (of the waits that spun), and smallWaits counts
	// the small batches' waits; see waiting.SmallSpin.
	smallWait  atomic.Int64
	smallWaits atomic.Uint32
	// bulkWait follows the median time (ns) a waiter for a batch that is
	// not small waits on this lane; see waiting.BulkSpin.
	bulkWait atomic.Int64
	// reapPause is how long (ns) the reaper pauses after a short run with
	// no waiter; see SetReapPause.
	reapPause atomic.Int64
	mu        sync.Mutex // one producer at a time on sq
	// wmu keeps the rings mapped while a waiter marks itself in their
	// headers (Enter, Leave, WaitBegin, WaitEnd): a waiter may start or
	// end its wait after the lane closed, and Close unmaps the rings
	// under wmu.
	wmu     sync.Mutex
	reapMu  sync.Mutex // one consumer at a time on cq: the reaper or a waiter
	down    atomic.Bool
	closing atomic.Bool
	reaped  chan struct{}
	// users counts the goroutines in WaitOn, which read the completion
	// ring's memory without a lock; Close unmaps the rings only once
	// none is left, and a WaitOn that starts after Close began leaves at
	// once. drained is signalled by the last one out of a closing lane.
	users     atomic.Int32
	drained   chan struct{}
	closeOnce sync.Once
	inFlight  atomic.Int64
	// unpublished counts the descriptors Put enqueued since the last
	// publication; they join inFlight as they are published, with one
	// atomic add per publication rather than one per descriptor (a line
	// the reaper writes too). Held under mu.
	unpublished int64

	// gen is the generation (run) of the plugin the lane belongs to;
	// Poll drops completions stamped with another. 0: not checked. Set
	// before the lane is used, read by whoever polls.
	gen uint32
	// Counters the plugin's supervisor reads.
	completed atomic.Uint64 // task completions reaped
	stale     atomic.Uint64 // completions dropped for a wrong generation
	// Completions the tracker refused as contract violations; see
	// Violations.
	unknown, duplicate, overlong atomic.Uint64
	probeSent                    atomic.Uint64 // latest probe number put on the ring
	probeAck                     atomic.Uint64 // latest probe number answered

	// waiters counts goroutines in WaitOn: while there are any, they reap
	// and the reaper stands by, so that a completion wakes the goroutine
	// that wants it and nobody hands it over.
	waiters atomic.Int32
	standby chan struct{}
	// standing: the reaper stands by (or is about to), waiting on
	// standby. A waiter that leaves with nothing in flight lets it stand
	// on rather than wake it (a thread wakeup per synchronous call, which
	// a caller from C pays in full: the woken reaper lands on the P the C
	// thread holds and waits for another thread to steal it); whoever
	// then gives it work wakes it: a publication with no waiter (End,
	// Probe), a waiter leaving work in flight, Close.
	standing atomic.Bool
	// asleep: the reaper sleeps on the completion ring (or is about to),
	// marked there as its consumer. Enter wakes the ring only then: a
	// waiter asleep on it is marked the same way, and was woken for
	// nothing by each waiter that came in (two callers of one lane, 4
	// KiB tcp writes one at a time: a fifth of the engine's context
	// switches).
	asleep atomic.Bool
	// owed: a publication with no waiter found the reaper standing by
	// and did not wake it (End): the goroutine that published usually
	// waits next (Submit, then Wait), and its Enter reaps instead,
	// clearing owed. Should no waiter come within kickGrace, grace
	// fires and wakes the reaper; a second publication while owed (a
	// stream of submissions nobody waits for) wakes it at once, and so
	// does a waiter that leaves the reaping to the reaper (Pay). The
	// kick cost the synchronous call a thread wakeup or two: on tcp,
	// 2.2-2.8 context switches a 4 KiB write in the engine, 1.3-1.5 with
	// the grace. Only a lane whose small waits sleep owes (End).
	owed  atomic.Bool
	grace *time.Timer
	// reaperAct is what the reaper does now, a waiting.Act (reaperAt).
	reaperAct atomic.Uint32
	// watcher, when set (Watch), is nudged when work goes in flight on
	// the lane from none, and when a completion breaks the contract.
	watcher atomic.Pointer[chan struct{}]
	// ringErr is the first error of a ring the plugin broke (RingErr).
	ringErr atomic.Pointer[error]

	// buf receives completions; whoever holds reapMu uses it. A buffer
	// of the caller's would escape to the heap through the Reaped hooks,
	// on every wait.
	buf [64]ring.Descriptor
	// run is the run of completions being reaped, for the tracker's
	// hooks (Tracker.ApplyEach); whoever holds reapMu uses it.
	run Run

	// Owner is whose lane it is, for the tracker's Reaped hooks (see
	// Hook): the engine sets its plugin run's rail set, which its hook
	// feeds each run of completions the lane reaps. Set it before the
	// lane is reaped or polled.
	Owner any
}

// NewLane creates the two rings of a lane in sealed memfds.
func NewLane(id uint32, depth int, spin time.Duration) (*Lane, error) {
	sqr, err := shm.Create(fmt.Sprintf("ferry-sq-%d", id), ring.Size(depth))
	if err != nil {
		return nil, fmt.Errorf("lane %d submission ring: %w", id, err)
	}
	cqr, err := shm.Create(fmt.Sprintf("ferry-cq-%d", id), ring.Size(depth))
	if err != nil {
		sqr.Close()
		return nil, fmt.Errorf("lane %d completion ring: %w", id, err)
	}
	sq, err := ring.Init(sqr.Mem(), depth)
	if err == nil {
		var cq *ring.Ring
		if cq, err = ring.Init(cqr.Mem(), depth); err == nil {
			l := &Lane{ID: id, SQ: sqr, CQ: cqr, sq: sq, cq: cq, spin: spin, reaped: make(chan struct{}), standby: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
			l.grace = time.AfterFunc(time.Hour, l.payGrace)
			l.grace.Stop()
			l.reapPause.Store(int64(sdk.DefaultStreamPause)) // a plugin lane's default, until SetReapPause
			return l, nil
		}
	}
	sqr.Close()
	cqr.Close()
	return nil, fmt.Errorf("lane %d: %w", id, err)
}

// Begin takes the lane's producer side. Pair with End.
func (l *Lane) Begin() { l.mu.Lock() }

// Put enqueues one descriptor, publishing what is pending and waiting for
// room when the ring is full. Only between Begin and End.
//
// While the ring is full Put also gives up, with ErrTaskEnded, once task i
// of b (when b is not nil) has ended or is ending: canceled, or its
// deadline passed. A
// plugin that stopped draining its ring must not hold a submitter past its
// task's deadline.
func (l *Lane) Put(d *ring.Descriptor, b *Batch, i int) error {
	if b != nil {
		b.sent(i, TokenRail(d.Token), d.Length, l.ID, l.Run)
	}
	if l.closing.Load() { // the rings are unmapped, or about to be (see Close)
		return ErrLaneDown
	}
	for !l.sq.Enqueue(d) {
		l.publish()
		if err := l.sq.Err(); err != nil {
			l.broken("submission", err)
		}
		if l.down.Load() || l.closing.Load() {
			return ErrLaneDown
		}
		if b != nil && b.Stopping(i, Now()) {
			return ErrTaskEnded
		}
		// Room comes as the plugin drains, which it stops doing once its
		// completions fill their ring: a reaper standing by with no
		// waiter must reap them (a submitter of more than a ring's worth
		// after a synchronous call waited for its stand-by timer).
		l.kickIdle()
		l.sq.WaitSpace(l.spin, 10*time.Millisecond)
	}
	l.unpublished++
	return nil
}

// End publishes what was enqueued and releases the producer side; a
// reaper standing by with no waiter is woken, or, on a lane whose small
// waits sleep (tcp's), owed a wakeup (see owed): the next waiter that
// enters reaps instead, or, within kickGrace, the reaper is woken to
// reap it.
func (l *Lane) End() {
	l.publish()
	l.mu.Unlock()
	if l.standing.Load() && l.waiters.Load() == 0 {
		if l.smallWait.Load() <= int64(waiting.FastLane) {
			// A fast lane (its small waits spin): kicks come often
			// enough that the runtime keeps a thread spinning to take
			// the reaper, and a kick costs less than the grace timer's
			// Reset and Stop (about 65 ns a 4 KiB shm write).
			l.kick()
			return
		}
		if l.owed.Swap(true) {
			l.Pay() // owed already: nobody waited for the last one either
		} else {
			l.grace.Reset(kickGrace)
		}
	}
}

// kickGrace is how long a publication with no waiter leaves a standing
// reaper asleep (see owed): what a synchronous call takes from its
// Submit's publication to its Wait's Enter, with room to spare. A
// completion nobody waits for is reaped at most this much later; on a
// lane slower than this (tcp's round trip) not later at all. A variable
// for the tests.
var kickGrace = 20 * time.Microsecond

// Pay wakes the reaper now if a publication owes it a wakeup: the
// caller waits for what the lane carries but leaves the reaping to the
// reaper (a large batch's waiter).
func (l *Lane) Pay() {
	if l.owed.Swap(false) {
		l.grace.Stop()
		l.kick()
	}
}

// payGrace is grace's: no waiter came within kickGrace.
func (l *Lane) payGrace() {
	if l.owed.Swap(false) {
		l.kick()
	}
}

// EndWaited is End for a submitter that waits on the lane itself next
// (Enter, Poll): it leaves a reaper standing by, as the waiter reaps.
// The waiter must Enter; if it leaves with its work in flight, Leave
// wakes the reaper.
func (l *Lane) EndWaited() {
	l.publish()
	l.mu.Unlock()
}

// PluginAsleep reports whether the plugin's side of the submission ring
// sleeps (or is about to): the next publication wakes it with a system
// call, where one to a plugin that polls costs none. Only between Begin
// and an End: a closed lane's rings are unmapped (Close unmaps them
// under the producer side), and its plugin is not asleep there.
func (l *Lane) PluginAsleep() bool { return !l.closing.Load() && l.sq.ConsumerSleeping() }

// EndLater releases the producer side and leaves what was enqueued
// unpublished: the plugin does not see it yet. The caller publishes it
// (Begin, then End or EndWaited, which publish everything enqueued,
// whoever enqueued it) before it returns or waits on anything: a
// submitter of many small requests publishes them a burst at a time,
// one full barrier on the in-flight count and on the ring's tail, and
// one look of the plugin at the tail, a burst instead of a request.
func (l *Lane) EndLater() { l.mu.Unlock() }

// EndExposed is EndLater for a full burst in the middle of a call: what
// was enqueued is counted in flight and made visible to a plugin that
// polls its ring (ring.Ring.Expose: no full barrier, no wakeup), then
// the producer side is released. The caller still publishes (Begin,
// then End or EndWaited) before it returns or waits on anything, which
// wakes a plugin that went to sleep meanwhile.
func (l *Lane) EndExposed() {
	if l.count() {
		l.sq.Expose()
	}
	l.mu.Unlock()
}

// publish counts what Put enqueued in flight, then makes it visible to
// the plugin: a descriptor is counted before its completion can come.
// l.mu held. On a closed lane (a submitter that took it after its run
// was retired) there is nothing to publish, and no ring to publish to.
func (l *Lane) publish() {
	if l.count() {
		l.sq.Publish()
	}
}

// count counts what Put enqueued in flight, before it is published, and
// reports whether the lane has a ring to publish to. l.mu held.
func (l *Lane) count() bool {
	if l.closing.Load() {
		l.unpublished = 0
		return false
	}
	if l.unpublished != 0 {
		if n := l.inFlight.Add(l.unpublished); n <= l.unpublished {
			l.nudge() // in flight from none: a resting supervisor looks again
		}
		l.unpublished = 0
	}
	return true
}

// Watch has the lane send on ch (without blocking) when work next goes
// in flight from none, or a completion breaks the completion contract
// (Violations), until Unwatch. It is for the plugin's supervisor, which
// has nothing to look at while its lanes are idle: it watches, then
// looks at InFlight and Violations again, and rests until ch. The lane
// counts in flight (or a violation) before it looks for a watcher, so
// the two cannot miss each other.
func (l *Lane) Watch(ch chan struct{}) { l.watcher.Store(&ch) }

// Unwatch ends Watch.
func (l *Lane) Unwatch() { l.watcher.Store(nil) }

// nudge tells the watcher, if any, to look at the lane.
func (l *Lane) nudge() {
	if w := l.watcher.Load(); w != nil {
		select {
		case *w <- struct{}{}:
		default:
		}
	}
}

// InFlight returns descriptors submitted and not yet reaped.
func (l *Lane) InFlight() int64 { return l.inFlight.Load() }

// SetGeneration makes Poll accept only completions whose Flags carry gen,
// the generation of the plugin run the lane was attached to, so that
// nothing another run left on the ring completes a task. 0 turns the
// check off (a plugin that does not stamp its completions). Call before
// the lane is reaped or submitted to.
func (l *Lane) SetGeneration(gen uint32) { l.gen = gen }

// Generation returns what SetGeneration set.
func (l *Lane) Generation() uint32 { return l.gen }

// Completed returns how many task completions the lane has reaped.
func (l *Lane) Completed() uint64 { return l.completed.Load() }

// Stale returns how many completions Poll dropped because they carried
// another generation than the lane's.
func (l *Lane) Stale() uint64 { return l.stale.Load() }

// Violations counts the completions of one lane (or plugin) that broke
// the completion contract; see Verdict.
type Violations struct {
	Unknown   uint64 `json:"unknown"`   // tokens naming no slice the host sent (Misrouted included)
	Duplicate uint64 `json:"duplicate"` // completions of a task with nothing outstanding
	Overlong  uint64 `json:"overlong"`  // more bytes than the slice carried
}

// Total returns the sum of the counts.
func (v Violations) Total() uint64 { return v.Unknown + v.Duplicate + v.Overlong }

// Add returns v plus w.
func (v Violations) Add(w Violations) Violations {
	return Violations{v.Unknown + w.Unknown, v.Duplicate + w.Duplicate, v.Overlong + w.Overlong}
}

// Violations returns the contract violations Poll has seen on the lane.
func (l *Lane) Violations() Violations {
	return Violations{Unknown: l.unknown.Load(), Duplicate: l.duplicate.Load(), Overlong: l.overlong.Load()}
}

// Probe puts a NOP with probe number seq (> 0) on the submission ring, for
// the plugin's lane to answer; ProbeAck reports the answer. It never
// waits: it reports false when a submitter holds the ring, the ring is
// full or the lane is down, and the caller tries again later. A plugin
// whose lane goroutine is stuck answers no probe.
func (l *Lane) Probe(seq uint64) bool {
	if !l.mu.TryLock() {
		return false
	}
	defer l.mu.Unlock()
	if l.down.Load() || l.closing.Load() {
		return false
	}
	d := ring.Descriptor{Token: ProbeToken(seq), Op: ring.OpNop}
	if !l.sq.Enqueue(&d) {
		return false
	}
	l.sq.Publish()
	l.probeSent.Store(seq)
	l.kickIdle() // its answer is reaped like a completion
	return true
}

// ProbeSent returns the number of the latest probe put on the ring.
func (l *Lane) ProbeSent() uint64 { return l.probeSent.Load() }

// ProbeAck returns the number of the latest probe answered.
func (l *Lane) ProbeAck() uint64 { return l.probeAck.Load() }

// MarkDown records that the plugin behind the lane is gone: producers stop
// waiting for room (a submitter asleep in Put waiting for it is woken).
func (l *Lane) MarkDown() {
	l.down.Store(true)
	l.wmu.Lock()
	if !l.closing.Load() { // the rings are still mapped (see wmu)
		l.sq.Wake()
		l.sq.WakeProducer()
	}
	l.wmu.Unlock()
}

// Down reports whether MarkDown was called, or a ring of the lane broke
// (RingErr).
func (l *Lane) Down() bool { return l.down.Load() }

// RingErr returns nil, or the error of a ring of the lane that stopped
// when the plugin wrote an impossible index into it (wrapping
// ring.ErrCorrupt). Such a lane is down: nothing more is put on it or
// reaped from it, and the supervisor kills the plugin's run.
func (l *Lane) RingErr() error {
	if p := l.ringErr.Load(); p != nil {
		return *p
	}
	return nil
}

// broken records that the lane's ring (which names it: "submission",
// "completion") stopped on err, marks the lane down and tells the
// watcher; the first error stays.
func (l *Lane) broken(which string, err error) {
	err = fmt.Errorf("lane %d: %s ring: %w", l.ID, which, err)
	if l.ringErr.CompareAndSwap(nil, &err) {
		l.MarkDown()
		l.nudge()
	}
}

// Reap drains the completion ring into t until Close. The engine runs it
// in a goroutine it owns; it is the only one that sleeps on the ring.
// Waiters drain it too (Poll), so Reap takes the ring only under reapMu and
// spins and sleeps on the shared indices alone. What it does between polls
// is waiting.Decide's (role Reaper): stand by while a waiter is in, nap
// after a short run in a stream, spin, sleep.
func (l *Lane) Reap(t *Tracker) {
	defer close(l.reaped)
	idle := time.NewTimer(standbySleep) // reset before each use (standBy)
	defer idle.Stop()
	in := waiting.Input{Role: waiting.Reaper, Spin: l.spin}
	for !l.closing.Load() {
		if l.ringErr.Load() != nil {
			// A ring the plugin broke reads empty and never sleeps:
			// stand by until Close (it kicks) rather than spin.
			l.reaperAt(waiting.Standby)
			<-l.standby
			continue
		}
		// A lane a waiter is in is the waiter's to poll.
		in.Reaped = 0
		if in.Waiters = l.waiters.Load() > 0; !in.Waiters {
			l.reaperAt(waiting.Poll)
			in.Reaped = l.Poll(t)
			in.Waiters = l.waiters.Load() > 0
			in.Pause, in.Waited = time.Duration(l.reapPause.Load()), l.sq.Waiting()
			if in.Reaped == 0 && !in.Waiters {
				in.Now = Now()
				if in.SpinFrom == 0 {
					in.SpinFrom = in.Now
				}
			}
		}
		d := waiting.Decide(in)
		l.reaperAt(d.Act)
		switch d.Act {
		case waiting.Standby:
			l.standBy(idle)
			in.Hot = false
		case waiting.Nap:
			l.cq.Nap(in.Pause) // see SetReapPause
			in.Hot = true
		case waiting.Poll:
			in.Hot = true // the next run, if it comes at once, streams in
		case waiting.Spin:
			if arrived, _ := l.spinUntil(d, in.SpinFrom, 0, true, nil); !arrived {
				continue // spun out: the next decision sleeps
			}
		case waiting.Sleep:
			in.Hot = false
			// No time bound: a completion, Close (closing, then Wake) or a
			// waiter's Enter (waiters, then ConsumerSleeping) ends it, so
			// that an idle lane costs no wakeup.
			l.asleep.Store(true)
			l.cq.SleepIdle(l.reaperQuit)
			l.asleep.Store(false)
		}
		in.SpinFrom = 0
	}
}

// reaperQuit ends the reaper's idle sleep: the lane closes, or a waiter
// came in to reap it.
func (l *Lane) reaperQuit() bool { return l.closing.Load() || l.waiters.Load() > 0 }

// standBy leaves the lane to its waiters until the last one leaves with
// work in flight, or somebody publishes with no waiter (kick). The timer
// only bounds the wait should a waiter be stuck, or a wakeup be lost.
// standing is set before in-flight work and waiters are looked at again,
// and publishers add in-flight work before they look at standing: one of
// the two sees the other.
func (l *Lane) standBy(idle *time.Timer) {
	l.standing.Store(true)
	if l.waiters.Load() > 0 || l.inFlight.Load() == 0 {
		idle.Reset(standbySleep)
		select {
		case <-l.standby:
		case <-idle.C:
		}
	}
	l.standing.Store(false)
}

// reaperAt records what the reaper does now, for the tests (and a
// debugger): a store only when it changes.
func (l *Lane) reaperAt(a waiting.Act) {
	if waiting.Act(l.reaperAct.Load()) != a {
		l.reaperAct.Store(uint32(a))
	}
}

// SetReapPause sets how long the reaper pauses (ring.Nap; the kernel's
// timer slack adds up to 50 us) after it reaped a short run (under
// waiting.ShortRun completions) that came while it spun after the run before,
// with nobody waiting on the lane (Enter, WaitBegin); 0 turns the pause
// off. It takes effect from the reaper's next pause.
//
// The pause is for a stream of small asynchronous submissions (a block
// list submitted a pair at a time): without it the reaper reaps them one
// completion per look, each look a run of its own, and spins between
// them. On two cores that made a third busy thread beside the submitter
// and the plugin: it took a third of a core and half the submitter's wall
// time (BenchmarkBlockSubmit, n=1). Completions that arrive during the
// pause are reaped together at its end. Nobody waits for them: a waiter
// that enters reaps them itself (it polls), and so does a caller polling
// a task's status (the engine's TaskStatus, TaskStatusList and
// BatchStatus poll the task's lanes); what the pause delays is only what
// nobody looks at yet. A sparse stream (bulk slices, one completion in
// hundreds of microseconds) has the reaper sleep between its completions,
// and is never paused. The reaper does not mark itself asleep while it
// pauses, so the plugin posts without a wakeup; Close ends the pause.
func (l *Lane) SetReapPause(d time.Duration) { l.reapPause.Store(int64(d)) }

// SetSleepHandoff has every sleep on the lane's rings (the reaper's, a
// waiter's, a submitter's waiting for room) that lasts past 50 us hand
// its P over (ring.Ring.SetSleepHandoff); config.Transfer.HandoffSleeps.
// Call it before the lane is used.
func (l *Lane) SetSleepHandoff(on bool) {
	l.cq.SetSleepHandoff(on)
	l.sq.SetSleepHandoff(on)
}

// standbySleep bounds how long the reaper leaves a lane to its waiters
// without looking.
var standbySleep = 50 * time.Millisecond // a variable for the tests

// Enter registers the calling goroutine as a waiter that polls the lane
// itself: the reaper stands by until the last waiter leaves, so that the
// plugin does not wake it (a system call on every completion) while
// somebody polls anyway. Pair with Leave.
func (l *Lane) Enter() {
	l.waiters.Add(1)
	if l.owed.Swap(false) { // we reap what the publication left the reaper asleep for
		l.grace.Stop()
	}
	l.wmu.Lock()
	if !l.closing.Load() { // the rings are still mapped (see wmu)
		l.sq.AddWaiting(1) // as WaitBegin
		// A reaper asleep on the ring would share our wakeups; send it
		// to stand by. (One that is about to sleep checks waiters first:
		// it marks itself asleep, then sleeping on the ring, then looks
		// at waiters; we count ourselves in, then look at the two.)
		if l.asleep.Load() && l.cq.ConsumerSleeping() {
			l.cq.Wake()
		}
	}
	l.wmu.Unlock()
}

// Leave ends Enter; the last waiter to leave hands the lane back to the
// reaper when something is still in flight. With nothing in flight the
// reaper stands on (see standing), and the next publication with no
// waiter wakes it: back-to-back synchronous calls (EndWaited) then wake
// it never.
func (l *Lane) Leave() {
	l.WaitEnd()
	if l.waiters.Add(-1) == 0 && l.inFlight.Load() != 0 {
		l.kick()
	}
}

// WaitBegin tells the plugin that a caller waits for what the lane
// carries, until WaitEnd: meanwhile its lane does not pause on the
// submission ring after short runs (ring.NapUnlessWaited), and a pause
// it is in ends. Enter includes it; a waiter that leaves the reaping to
// the reaper (a large batch's) calls it alone.
func (l *Lane) WaitBegin() { l.addWaiting(1) }

// WaitEnd ends WaitBegin. After Close it does nothing.
func (l *Lane) WaitEnd() { l.addWaiting(-1) }

// addWaiting adds delta to the ring header's count of waiters, unless
// the lane is closing (its rings are, or are about to be, unmapped).
func (l *Lane) addWaiting(delta int32) {
	l.wmu.Lock()
	if !l.closing.Load() {
		l.sq.AddWaiting(delta)
	}
	l.wmu.Unlock()
}

// Waited reports whether a caller waits for what the lane carries
// (WaitBegin), as the plugin sees it; false once the lane closed.
func (l *Lane) Waited() bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return !l.closing.Load() && l.sq.Waiting()
}

// kick wakes the reaper from standing by.
func (l *Lane) kick() {
	select {
	case l.standby <- struct{}{}:
	default:
	}
}

// kickIdle wakes a reaper that stands by with no waiter left to reap for
// it; after a publication.
func (l *Lane) kickIdle() {
	if l.standing.Load() && l.waiters.Load() == 0 {
		l.kick()
	}
}

// BulkWait returns the median time (ns) a wait for a batch that is not
// small took on this lane (waiting.BulkSpin); NoteBulkWait counts one
// such wait of d ns taken elsewhere (a Batch waiter whose tasks were all
// on this lane).
func (l *Lane) BulkWait() int64 { return l.bulkWait.Load() }

// NoteBulkWait: see BulkWait.
func (l *Lane) NoteBulkWait(d int64) { l.bulkWait.Store(waiting.Median(l.bulkWait.Load(), d)) }

// SetSpinSmall sets how long WaitOn spins for a small batch; before use.
func (l *Lane) SetSpinSmall(d time.Duration) { l.spinSmall = d }

// WaitOn lets the calling goroutine reap the lane until done reports true,
// ctx-like stop is closed, or its bound passes: deadline (unix ns, 0 =
// none), or, when that has passed already, waiting.HeldPoll after the
// wait began. It polls, then sleeps on the completion ring itself, so
// that the plugin's wakeup lands on the goroutine that waits. It returns
// done's answer. What it does between polls is waiting.Decide's (role
// Lane).
//
// done is given the wait's latest clock reading (unix ns, as Now; 0
// before the wait read the clock), with which it may expire the tasks
// whose deadline passed; it may be a few microseconds old, and the wait
// gives done a fresh one when it ends at its bound.
//
// small says the batch waited for is small: WaitOn then spins for the
// lane's small-batch budget (SetSpinSmall) before it sleeps, provided the
// lane answers small batches quickly enough (the median wait is at most
// waiting.SpinWorth, or waiting.SpinWorthBusy while the process's spins
// lose their CPU: Busy); on a lane that does not, it sleeps at once
// (waiting.SmallSpin).
// locked says the calling goroutine is locked to its OS thread (a call
// from C): its spin then does not yield (waiting.YieldNone), and keeps
// its P.
func (l *Lane) WaitOn(t *Tracker, done func(now int64) bool, stop <-chan struct{}, deadline int64, small, locked bool) bool {
	in := waiting.Input{Role: waiting.Lane, Spin: l.spin, SpinSmall: l.spinSmall, Small: small, Deadline: deadline, Locked: locked}
	timed := false // the wait counts in the lane's median small (or bulk) wait
	median := &l.smallWait
	if small {
		in.SmallWait, in.SmallWaits, in.Busy = l.smallWait.Load(), l.smallWaits.Add(1), Busy()
		timed = in.Budget() > 0
	} else {
		median, in.BulkWait, timed = &l.bulkWait, l.bulkWait.Load(), true
	}
	// now is the wait's latest clock reading, what done is given: the
	// clock is read where the wait needs the time anyway (a timed wait's
	// start, an empty poll), not for each look at done (on a KVM guest a
	// read is about 40 ns, and a 4 KiB shm write's wait looked three
	// times).
	var now int64
	if timed {
		in.Start = Now()
		now = in.Start
	}
	if !l.use() {
		return done(Now())
	}
	defer l.unuse()
	l.Enter() // a Lane waiter always reaps the lane itself (waiting.Enter)
	defer l.Leave()
	fresh := timed // now was read just before this look: an empty poll may take it
	// look is the last spin's last look at the clock, 0 after a sleep: a
	// spin that lost its CPU and found its completion when it got it back
	// tells it here (see notePreempted).
	var look int64
	for {
		if done(now) {
			if timed {
				end := Now()
				notePreempted(look, end)
				// Waiters on one lane may race here and lose an update;
				// the figure only steers a spin.
				median.Store(waiting.Median(median.Load(), end-in.Start))
			}
			return true
		}
		if l.closing.Load() || l.down.Load() {
			return done(Now())
		}
		select {
		case <-stop:
			return done(Now())
		default:
		}
		var busy bool
		if in.Reaped, busy = l.poll(t); busy {
			// Another goroutine is reaping the ring, this wait's
			// completion perhaps: look at done again once it is through,
			// rather than spin on the emptied ring or sleep on it.
			if !locked {
				runtime.Gosched()
			}
			now, fresh = Now(), true // done expires the batch's deadlines by it
			continue
		}
		if in.Reaped == 0 {
			if !fresh {
				now = Now()
			}
			in.Now = now
			if in.Start == 0 {
				in.Start = in.Now
			}
			if in.SpinFrom == 0 {
				in.SpinFrom = in.Now
			}
		}
		fresh = false
		d := waiting.Decide(in)
		switch d.Act {
		case waiting.Return:
			return done(in.Now)
		case waiting.Spin:
			var arrived bool
			if arrived, look = l.spinUntil(d, in.SpinFrom, in.Now, false, done); !arrived {
				continue // spun out: the next decision sleeps
			}
		case waiting.Sleep:
			sleep := waitSlice
			if d.Until != 0 {
				sleep = min(sleep, time.Duration(d.Until-in.Now))
			}
			// Another waiter or the reaper may have reaped this wait's
			// completion since the look at done: nobody wakes the ring
			// for that.
			if now = Now(); done(now) {
				look = 0
				continue
			}
			l.cq.Sleep(sleep)
			look = 0
		}
		in.SpinFrom = 0 // it reaped, slept or something came: the next empty poll spins afresh
	}
}

// waitSlice bounds one sleep of a waiter, so that it notices its stop
// channel; cancellation is seen within this. A variable for the tests.
var waitSlice = 5 * time.Millisecond

// spinUntil peeks at the completion ring's indices until something is
// there or d.Until passes, reading the clock every spinLooks looks and
// giving way then as d.Yield says (from is when the spin began); it
// reports whether something arrived, or the lane is closing. A waiter
// passes last, its latest clock reading, and gets back the spin's last
// look at the clock (0 if a yield came after it), so that it can tell a
// spin that lost its CPU just before its completion came; a reaper
// passes 0.
//
// reaper says the reaper spins: it then also stops, reporting true, as
// soon as a waiter entered (Enter), which reaps from then on. Spinning
// on would only take a core from the waiter and the plugin (on a
// machine of two, one of the two they need) for the rest of the spin,
// after every synchronous call, since a reaper starts its spin when the
// waiter leaves. (A reaper yields from its first look, waiting.YieldCPU:
// a reaper woken by the plugin lands on the CPU the submitter runs on, as
// often as not; spinning there it held the submitter off for its whole
// spin, BenchmarkBlockSubmit n=1: about 2,600 preemptions a second of
// 35-40 us each, 9% of the submitter's time, perf sched.)
func (l *Lane) spinUntil(d waiting.Decision, from, last int64, reaper bool, done func(int64) bool) (bool, int64) {
	// prev is the spin's last look at the clock (after any yield), or
	// its caller's latest reading: two looks preemptGap apart say the
	// spin lost its CPU between them (notePreempted). A reaper, which
	// yields its CPU at each look, does not tell.
	prev := last
	for i := 0; ; i++ {
		if l.cq.Pending() || l.closing.Load() || reaper && l.waiters.Load() > 0 {
			return true, prev
		}
		if i%spinLooks == spinLooks-1 {
			now := Now()
			notePreempted(prev, now)
			if now >= d.Until {
				return false, prev
			}
			if done != nil && done(now) {
				return true, prev // another goroutine reaped it
			}
			prev = now
			switch {
			case reaper:
				yield(d.Yield)
				prev = 0 // it gave its CPU away
			case d.Yield == waiting.YieldSpun && time.Duration(now-from) >= goschedAfter:
				// Other goroutines may run a while: no lost CPU. Read
				// the clock again to go on telling (a look past
				// goschedAfter: the spin is long already).
				yield(d.Yield)
				prev = Now()
			}
		}
	}
}

// goschedAfter is how long a Lane waiter's spin runs before it lets
// other goroutines have its P at each look (a reaper yields from its
// first). A runtime.Gosched costs a trip through the scheduler (its run
// queue's lock, the timers, often a wakeup of an idle thread to take the
// goroutine), and a completion that comes during it waits for it: a 4
// KiB shm write one at a time spent a sixth of its round trip there
// (BenchmarkRequestPath). The Lane waiter reaps its lane itself, so no
// goroutine of this process is needed for it to end; one queued behind
// it meanwhile is taken by an idle P, or waits at most this long. Spins
// that need another goroutine to make progress (a Batch waiter's, whose
// lanes the reapers may reap; a plugin's) yield at every look, as
// before: taking this from the plugin's spins as well (ring.Yield) cost
// tcp 1 MiB writes a tenth of their throughput, the plugin's context
// switches a request 4.2-6.2 -> 9.7-9.9.
const goschedAfter = 20 * time.Microsecond

// spinLooks is how many looks at the ring a spin makes between looks at
// the clock.
const spinLooks = 64

// yield gives way as y says.
func yield(y waiting.Yield) {
	switch y {
	case waiting.YieldCPU:
		ring.Yield(ring.YieldAfter)
	case waiting.YieldSpun:
		runtime.Gosched()
	}
}

// Poll drains what the completion ring holds now into t, unless another
// goroutine is draining it; it never blocks. What t refuses as breaking
// the completion contract is counted (Violations); an unknown or
// duplicate completion completes nothing the lane holds, so it does not
// lower InFlight or raise Completed. A waiter calls it to see its
// completions without waiting for the reaper to wake and hand them over.
func (l *Lane) Poll(t *Tracker) int {
	n, _ := l.poll(t)
	return n
}

// poll is Poll, reporting also whether another goroutine was draining
// the ring (busy: nothing was reaped).
func (l *Lane) poll(t *Tracker) (int, bool) {
	if !l.reapMu.TryLock() {
		return 0, true
	}
	defer l.reapMu.Unlock()
	return l.pollLocked(t), false
}

// pollLocked drains the completion ring into t; reapMu held.
func (l *Lane) pollLocked(t *Tracker) int {
	buf := &l.buf
	total := 0
	for !l.closing.Load() {
		n := l.cq.Dequeue(buf[:])
		if n == 0 {
			if err := l.cq.Err(); err != nil {
				l.broken("completion", err)
			}
			break
		}
		total += n
		// Keep the task completions, at the front of buf: what another
		// run left behind is dropped, probe answers are the lane's own.
		k := 0
		for i := range buf[:n] {
			d := &buf[i]
			if l.gen != 0 && d.Flags != l.gen {
				l.stale.Add(1)
				continue
			}
			if seq, ok := probeSeq(d.Token); ok {
				if seq > l.probeAck.Load() {
					l.probeAck.Store(seq) // one consumer: reapMu
				}
				continue
			}
			buf[k] = *d
			k++
		}
		tasks := int64(k)
		if h := t.hooks; h != nil && k > 0 {
			for _, f := range h.reaped {
				f(l, buf[:k])
			}
		}
		// One clock read for the run, after it was dequeued (every
		// completion of it came back before this time), for the tracker's
		// hooks: the metrics time each task's settling and end from it
		// rather than read the clock per task, and a hook with RunEnded
		// counts the run's ends in its tally, flushed at the run's end.
		run := &l.run
		run.At = 0
		if k > 0 && t.Timed() {
			run.At = Clock()
		}
		if k > 0 {
			v := t.ApplyEach(buf[:k], run)
			if v.Broke() {
				// An unknown token or a duplicate completes nothing in
				// flight; a misrouted one failed the slice it mangled.
				l.unknown.Add(uint64(v.Unknown + v.Misrouted))
				l.duplicate.Add(uint64(v.Duplicate))
				l.overlong.Add(uint64(v.Overlong))
				tasks -= int64(v.Unknown + v.Duplicate)
				l.nudge()
			}
			t.FlushRun(run)
		}
		l.inFlight.Add(-tasks)
		l.completed.Add(uint64(tasks))
	}
	return total
}

// use registers a goroutine about to read the rings without a lock
// (WaitOn); false, and nothing registered, once the lane is closing.
// users is raised before closing is read, and Close sets closing before
// it reads users: one of the two sees the other.
func (l *Lane) use() bool {
	l.users.Add(1)
	if l.closing.Load() {
		l.unuse()
		return false
	}
	return true
}

// unuse ends use; the last user out of a closing lane tells Close.
func (l *Lane) unuse() {
	if l.users.Add(-1) == 0 && l.closing.Load() {
		select {
		case l.drained <- struct{}{}:
		default:
		}
	}
}

// Close stops the reaper (if it runs), waits for the goroutines in WaitOn
// to leave (they see closing within waitSlice) and unmaps the rings,
// closing their memfds. started says whether Reap was started. The lane
// may still be called afterwards, by a submitter or waiter that took it
// before its run was retired: Put fails with ErrLaneDown, Poll and WaitOn
// find nothing, and the counters keep their last values. Only the first
// call does anything; a later one returns once the first is done.
func (l *Lane) Close(started bool) {
	l.closeOnce.Do(func() { l.close(started) })
}

func (l *Lane) close(started bool) {
	l.closing.Store(true)
	l.cq.Wake()
	l.grace.Stop()
	l.kick()
	if started {
		<-l.reaped
	}
	for l.users.Load() > 0 {
		l.cq.Wake() // a waiter asleep on the ring wakes and sees closing
		t := time.NewTimer(waitSlice)
		select {
		case <-l.drained:
		case <-t.C:
		}
		t.Stop()
	}
	l.mu.Lock()
	l.reapMu.Lock()
	l.wmu.Lock()
	l.SQ.Close()
	l.CQ.Close()
	l.wmu.Unlock()
	l.reapMu.Unlock()
	l.mu.Unlock()
}
