package sdk

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// laneSleep bounds the futex sleeps of a lane with work about (an
// assisting goroutine holds the ring; the host has not yet freed room
// for a completion). An idle lane sleeps with no bound (ring.SleepIdle):
// stopIntake's Wake ends that sleep, and it costs no wakeup while idle.
const laneSleep = time.Second

// pauseRun is the most descriptors a run taken in a stream holds for the
// lane to pause after it (see lane.pause).
const pauseRun = 16

// pauseBytes is the most bytes each descriptor of such a run moves: a
// copy this small costs less than the lane's own work per descriptor
// (take it, check it, post its completion, spin for the next), so that
// the spinning is what a pause saves. The work of larger descriptors
// would only be put off by a pause, from beside the submitter's to after
// it: 128 writes of 4 KiB then waited on took a quarter longer.
const pauseBytes = 1 << 10

// lane is the plugin side of one submission/completion ring pair: one
// goroutine drains the submission ring into Transport.Submit; completions
// come back from any goroutine through Complete.
type lane struct {
	id   uint32
	impl Transport
	spin time.Duration
	// spinSmall is the spin after a run of small descriptors (at most
	// SmallBatch bytes in all): the next small request of a caller waiting
	// on its last one comes within a round trip.
	spinSmall time.Duration
	// pause is how long the lane leaves the submission ring alone after
	// a short run (under pauseRun descriptors, each of at most pauseBytes)
	// that it took without sleeping, in a stream: when the host had not
	// yet reaped the completions posted before the run came (it streams
	// rather than waits on each), no descriptor of the run was high
	// priority, and the host has nobody waiting on the lane
	// (ring.NapUnlessWaited). What arrives meanwhile is drained as one
	// run. A stream of one-descriptor submissions otherwise keeps the
	// lane spinning on a core and taking them one by one, a ring round
	// trip each, while on a small machine the submitter needs that core.
	// A caller that submits one request and waits for it (or polls its
	// status, which reaps) before the next never meets a pause. 0: never
	// (a host that predates it sends none).
	pause time.Duration
	// gen is the host's number for this run of the plugin, stamped into
	// the Flags of every completion: the host drops completions that carry
	// another run's number.
	gen uint32

	sqMap, cqMap *shm.Mapping
	sq, cq       *ring.Ring

	cqMu   sync.Mutex // the completion ring has one producer: whoever holds cqMu
	closed bool       // under cqMu: the rings are unmapped

	// coalesce: the transport serves descriptors on the lane's goroutine
	// or on goroutines of its own that never block (SpinsAlone), so a
	// run it drains ends within its copies, and its completions may wait
	// for the run's end to be published together (holdRun). holding
	// says a run holds them now, held how many are enqueued on cq and
	// not yet published; both under cqMu.
	coalesce bool
	holding  bool
	held     int

	// runs: the transport takes a run in one call (RunSubmitter). inRun
	// are the completions CompleteInRun buffered, nInRun of them, posted
	// under one lock holdRun at a time; only the token's holder (the
	// goroutine in SubmitRun) touches them.
	runs   RunSubmitter
	inRun  [holdRun]ring.Descriptor
	nInRun int

	stopping atomic.Bool
	done     chan struct{}

	submitted atomic.Uint64 // descriptors handed to the transport
	completed atomic.Uint64 // completions posted (Complete)
	assisted  atomic.Uint64 // descriptors taken by an assisting goroutine
	sleeps    atomic.Uint64
	pauses    atomic.Uint64 // pauses taken (see pause)

	// now is the wall clock (unix ns) read once when the run being
	// drained was dequeued, 0 between runs: the deadline checks of the
	// run's descriptors use it (see Now) instead of reading the clock per
	// descriptor, which cost more than a 4 KiB copy on some machines.
	now atomic.Int64

	token   atomic.Int32 // tokenFree, tokenHeld or tokenRetired
	assists atomic.Bool  // the transport calls Assist
	small   atomic.Bool  // the last run drained was small (Assist stands in after small runs only)
	buf     []ring.Descriptor
	abuf    []ring.Descriptor // Assist's
}

func attachLane(impl Transport, id, gen uint32, sqFD, cqFD int, sqBytes, cqBytes uint64, spin, spinSmall, pause time.Duration, handoff bool) (*lane, error) {
	switch {
	case spin == 0: // a host that sends none
		spin = DefaultSpin
	case spin < 0: // a host's spin = "0s": sleep at once
		spin = 0
	}
	spinSmall = min(max(spinSmall, spin), MaxSpin)
	pause = min(max(pause, 0), MaxStreamPause)
	if sqBytes == 0 || cqBytes == 0 || sqBytes > 1<<30 || cqBytes > 1<<30 {
		return nil, fmt.Errorf("ring sizes %d and %d out of range", sqBytes, cqBytes)
	}
	sqMap, err := shm.Map(sqFD, 0, int(sqBytes), true)
	if err != nil {
		return nil, fmt.Errorf("map submission ring: %w", err)
	}
	cqMap, err := shm.Map(cqFD, 0, int(cqBytes), true)
	if err != nil {
		sqMap.Close()
		return nil, fmt.Errorf("map completion ring: %w", err)
	}
	sq, err := ring.Attach(sqMap.Mem())
	if err == nil {
		var cq *ring.Ring
		cq, err = ring.Attach(cqMap.Mem())
		if err == nil {
			alone := false
			if a, ok := impl.(SpinsAlone); ok && a.SpinsAlone() {
				alone = true
				sq.SetSpinGosched(SpinAloneGosched)
			}
			sq.SetSleepHandoff(handoff)
			cq.SetSleepHandoff(handoff)
			runs, _ := impl.(RunSubmitter)
			return &lane{id: id, impl: impl, spin: spin, spinSmall: spinSmall, pause: pause, gen: gen, sqMap: sqMap, cqMap: cqMap, sq: sq, cq: cq, done: make(chan struct{}), coalesce: alone,
				runs: runs, buf: make([]ring.Descriptor, 64), abuf: make([]ring.Descriptor, 64)}, nil
		}
	}
	sqMap.Close()
	cqMap.Close()
	return nil, fmt.Errorf("attach rings: %w", err)
}

func (l *lane) start() { go l.run() }

// The submission ring has one consumer at a time: whoever holds the lane's
// token. Mostly that is the lane goroutine; while it sleeps with small
// work of the transport on the wire, a transport goroutine that finished
// such work may hold it for a while (Assist).
const (
	tokenFree = iota
	tokenHeld
	tokenRetired // stopIntake ran: nobody takes the ring any more
)

// run drains the submission ring. Between runs it spins for the budget
// drain returns, then sleeps on the ring.
func (l *lane) run() {
	defer close(l.done)
	spin := l.spin
	hot := false // the ring had work when we last looked, or it came while we spun
	for !l.stopping.Load() {
		if !l.token.CompareAndSwap(tokenFree, tokenHeld) {
			// A transport goroutine assists. It wakes us if it leaves
			// work behind; while it still has the ring, let it run.
			if l.sq.Sleep(laneSleep) {
				runtime.Gosched()
			}
			hot = false
			continue
		}
		if n := l.sq.Dequeue(l.buf); n > 0 {
			// A short run, taken in a stream, and the host has not yet
			// reaped the completions we posted before it came: the host
			// is streaming, not waiting on them (see pause). That is
			// asked after the run is served, off its latency.
			var posted uint64
			short := hot && n < pauseRun && l.pause > 0
			if short {
				posted = l.cq.Tail()
			}
			var pausable bool
			spin, pausable = l.drain(l.buf[:n])
			l.token.Store(tokenFree)
			if short && pausable && spin > 0 && !l.cq.Consumed(posted) && l.sq.NapUnlessWaited(l.pause) {
				l.pauses.Add(1)
			}
			hot = true
			continue
		}
		got := spin > 0 && l.sq.Wait(spin, 0)
		l.token.Store(tokenFree)
		hot = got
		if !got && !l.sq.SleepIdle(l.stopping.Load) {
			l.sleeps.Add(1)
		}
	}
}

// drain hands a run of descriptors to the transport, the holder of the
// token calling. It validates each descriptor copy (the ring is memory
// another process writes) before the transport sees it. It returns how
// long to spin for the next run: the plain budget after a large run,
// spinSmall after a small one, and not at all while small work is on the
// wire of a transport that assists: its goroutine that completes the work
// looks for the next descriptor (Assist), and meanwhile this goroutine's
// CPU is better left to the far side, which on a small machine needs it
// to answer.
//
// pausable says whether the run is one the lane may pause after (see
// lane.pause): no descriptor of it is high priority or moves more than
// pauseBytes.
func (l *lane) drain(ds []ring.Descriptor) (spin time.Duration, pausable bool) {
	var run uint64
	deadlines, high := false, false
	pausable = true
	for i := range ds {
		run += ds[i].Length
		deadlines = deadlines || ds[i].Deadline != 0
		high = high || ds[i].Prio == uint8(PriorityHigh)
		pausable = pausable && ds[i].Prio != uint8(PriorityHigh) && ds[i].Length <= pauseBytes
	}
	hold := l.coalesce && len(ds) > 1 && run <= SmallBatch && !high
	if hold {
		l.holdCompletions(true)
	}
	if deadlines {
		l.now.Store(wallNanos())
		defer l.now.Store(0)
	}
	l.submitted.Add(uint64(len(ds)))
	k := 0 // the run's descriptors for the transport, moved to ds[:k] (runs)
	for i := range ds {
		d := &ds[i]
		if err := d.Validate(); err != nil || d.Op == ring.OpCompletion {
			l.Complete(d.Token, ring.StatusInvalid, 0)
			continue
		}
		if d.Op == ring.OpNop {
			// Answered here, not by the transport: the host probes
			// whether the ring is still drained.
			l.Complete(d.Token, ring.StatusOK, 0)
			continue
		}
		if l.runs == nil {
			l.impl.Submit(d, l)
			continue
		}
		if k != i {
			ds[k] = *d
		}
		k++
	}
	if k > 0 {
		l.runs.SubmitRun(ds[:k], l)
		l.postInRun()
	}
	if hold {
		l.holdCompletions(false)
	}
	l.small.Store(run <= SmallBatch)
	switch {
	case run > SmallBatch:
		return l.spin, false
	case l.assists.Load() && l.outstanding():
		return 0, pausable
	}
	return l.spinSmall, pausable
}

// outstanding reports whether descriptors were submitted and not yet
// completed.
func (l *lane) outstanding() bool { return l.completed.Load() < l.submitted.Load() }

// Assist implements Assister. When nothing is outstanding, the last run
// of descriptors was small and the lane goroutine sleeps, the caller
// stands in for it for up to the spin budget: it takes the host's next
// descriptors from the ring and submits them on its own goroutine, on a
// thread that runs anyway, and returns once its submissions are out (or
// the budget passed). A host waiting on a small request answers its
// completion with the next request within microseconds; without the
// stand-in that request would wait for the lane goroutine's wakeup. After
// a large run the lane goroutine spins and sleeps as usual and Assist
// stays out of the way: standing in there cost the two-rail namespace
// test 15% of its throughput.
func (l *lane) Assist() {
	if !l.assists.Load() {
		l.assists.Store(true)
	}
	if !l.small.Load() || l.outstanding() || !l.token.CompareAndSwap(tokenFree, tokenHeld) {
		return
	}
	// The lane goroutine sleeps on the ring (or is about to): withdraw
	// its sleep from what the host checks, so the host publishes without
	// a wakeup while we look.
	l.sq.Cover()
	start := time.Now()
	for i := 1; !l.stopping.Load(); i++ {
		if n := l.sq.Dequeue(l.abuf); n > 0 {
			l.assisted.Add(uint64(n))
			l.drain(l.abuf[:n])
			if l.outstanding() {
				break // our submissions are out; back to the caller's work
			}
			continue
		}
		// No runtime.Gosched between looks: it wakes an idle runtime
		// thread to take the goroutine (wakep), and on a small machine
		// that thread took the CPU from the far side. The budget is a
		// few microseconds.
		if i%64 == 0 && time.Since(start) >= l.spin {
			break
		}
	}
	l.sq.Uncover()
	// What the host published while we covered woke nobody. Looked at
	// before the token goes back: once it is free the lane may be
	// stopped (stopIntake retires the token) and its rings unmapped, and
	// a transport's Stop need not wait for the goroutines that assist.
	// The lane goroutine, woken, takes the token as soon as it is free.
	if l.sq.Pending() {
		l.sq.Wake()
	}
	l.token.Store(tokenFree)
}

// runNow returns the time the run being drained was dequeued, 0 between
// runs; see Now.
func (l *lane) runNow() int64 { return l.now.Load() }

// holdRun is the most completions a run holds (see holdCompletions)
// before it publishes them.
const holdRun = 8

// holdCompletions starts (on) or ends a run's hold on its completions:
// while a run of small descriptors (SmallBatch bytes in all, none high
// priority) is drained, each completion is enqueued on the completion
// ring and published with the next, holdRun at a time, and what is left
// when the run ends is published then. The host's waiter then takes a
// run's completions in a few looks at the ring's tail, not one look
// (and one line crossing between the cores) each, and the lane pays one
// barrier a few completions. A completion waits at most for the rest of
// its run's copies: SmallBatch bytes. Only a transport that SpinsAlone
// holds: another's completions come from goroutines that may block
// (tcp's readers), and one held behind a blocked send would wait for it.
//
// 4 KiB shm writes in batches of 128 (ferry bench, interleaved, the
// vCPUs' line round trip 930-980 ns): 12.3-12.6 GB/s without, 12.4-13.1
// with (4 rounds each); in an earlier sitting whose runs without sat in
// their slow mode (8.4-9.1 GB/s, the engine switching 0.003-0.011 times
// a request), a first version of it made 9.8-10.1 and halved the
// engine's switches.
func (l *lane) holdCompletions(on bool) {
	l.cqMu.Lock()
	l.holding = on
	if !on {
		if l.held > 0 && !l.closed {
			l.cq.Publish()
		}
		l.held = 0
	}
	l.cqMu.Unlock()
}

// Complete posts one completion. It implements Completer.
func (l *lane) Complete(token uint64, st ring.Status, bytes uint64) {
	d := l.completion(token, st, bytes)
	l.cqMu.Lock()
	defer l.cqMu.Unlock()
	l.completed.Add(1)
	l.postLocked(&d)
}

// CompleteInRun implements RunCompleter: while the run's completions
// are held (holdCompletions), it buffers them and posts each holdRun
// under one lock; otherwise it is Complete.
func (l *lane) CompleteInRun(token uint64, st ring.Status, bytes uint64) {
	// holding is written only by the token's holder, which we are.
	if !l.holding {
		l.Complete(token, st, bytes)
		return
	}
	l.inRun[l.nInRun] = l.completion(token, st, bytes)
	l.nInRun++
	if l.nInRun == holdRun {
		l.postInRun()
	}
}

// completion is the completion ring's entry for token: its status, the
// bytes moved, and the lane's generation (Flags).
func (l *lane) completion(token uint64, st ring.Status, bytes uint64) ring.Descriptor {
	return ring.Descriptor{Token: token, Op: ring.OpCompletion, Status: st, Flags: l.gen, Length: bytes}
}

// postInRun posts what CompleteInRun buffered: at holdRun, and when the
// run's SubmitRun returned.
func (l *lane) postInRun() {
	n := l.nInRun
	if n == 0 {
		return
	}
	l.nInRun = 0
	l.cqMu.Lock()
	defer l.cqMu.Unlock()
	l.completed.Add(uint64(n))
	for i := range n {
		l.postLocked(&l.inRun[i])
	}
}

// postLocked enqueues completion d, under cqMu: held while the run holds
// its completions (published with the holdRun-th), published otherwise.
func (l *lane) postLocked(d *ring.Descriptor) {
	if l.holding && !l.closed && l.held < holdRun-1 && l.cq.Enqueue(d) {
		l.held++
		return
	}
	for !l.closed {
		if l.cq.Push(d) { // published with what is held
			l.held = 0
			return
		}
		// The host is not draining; wait for room, but never forever: a
		// host that stopped reaping is gone or stopping. WaitSpace
		// publishes what is held first: the host frees only slots it
		// sees.
		room := l.cq.WaitSpace(l.spin, laneSleep)
		l.held = 0
		if !room && l.stopping.Load() {
			return
		}
	}
}

// stopIntake stops the lane goroutine and waits for it and for an
// assisting goroutine: after it, nothing takes descriptors from the ring
// or submits them.
func (l *lane) stopIntake() {
	l.stopping.Store(true)
	l.sq.Wake()
	<-l.done
	// An assisting goroutine sees stopping and gives the ring back
	// within its current Submit.
	for !l.token.CompareAndSwap(tokenFree, tokenRetired) && l.token.Load() != tokenRetired {
		runtime.Gosched()
	}
}

// close unmaps the rings; later completions are dropped.
func (l *lane) close() {
	l.cqMu.Lock()
	l.closed = true
	l.cqMu.Unlock()
	l.sqMap.Close()
	l.cqMap.Close()
}
