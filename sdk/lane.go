package sdk

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// laneSleep bounds one futex sleep of an idle lane, so that a lane notices
// a stop even if a wakeup is lost. Idle cost: one wakeup per laneSleep.
const laneSleep = time.Second

// smallRun is the most bytes a drained run of descriptors holds for the
// lane to spin spinSmall after it.
const smallRun = 256 << 10

// maxSpinSmall bounds spinSmall whatever the host asks.
const maxSpinSmall = 10 * time.Millisecond

// defaultSpin is the spin budget when the host sends none.
const defaultSpin = 20 * time.Microsecond

// lane is the plugin side of one submission/completion ring pair: one
// goroutine drains the submission ring into Transport.Submit; completions
// come back from any goroutine through Complete.
type lane struct {
	id   uint32
	impl Transport
	spin time.Duration
	// spinSmall is the spin after a run of small descriptors (at most
	// smallRun bytes in all): the next small request of a caller waiting
	// on its last one comes within a round trip.
	spinSmall time.Duration
	// gen is the host's number for this run of the plugin, stamped into
	// the Flags of every completion: the host drops completions that carry
	// another run's number.
	gen uint32

	sqMap, cqMap *shm.Mapping
	sq, cq       *ring.Ring

	cqMu   sync.Mutex // the completion ring has one producer: whoever holds cqMu
	closed bool       // under cqMu: the rings are unmapped

	stopping atomic.Bool
	done     chan struct{}

	submitted atomic.Uint64
	sleeps    atomic.Uint64
}

func attachLane(impl Transport, id, gen uint32, sqFD, cqFD int, sqBytes, cqBytes uint64, spin, spinSmall time.Duration) (*lane, error) {
	if spin <= 0 {
		spin = defaultSpin
	}
	spinSmall = min(max(spinSmall, spin), maxSpinSmall)
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
			return &lane{id: id, impl: impl, spin: spin, spinSmall: spinSmall, gen: gen, sqMap: sqMap, cqMap: cqMap, sq: sq, cq: cq, done: make(chan struct{})}, nil
		}
	}
	sqMap.Close()
	cqMap.Close()
	return nil, fmt.Errorf("attach rings: %w", err)
}

func (l *lane) start() { go l.run() }

// run drains the submission ring. It validates each descriptor copy (the
// ring is memory another process writes) before the transport sees it.
func (l *lane) run() {
	defer close(l.done)
	buf := make([]ring.Descriptor, 64)
	spin := l.spin
	for !l.stopping.Load() {
		n := l.sq.Dequeue(buf)
		if n == 0 {
			if !l.sq.Wait(spin, laneSleep) {
				l.sleeps.Add(1)
			}
			continue
		}
		var run uint64
		for i := range buf[:n] {
			run += buf[i].Length
		}
		spin = l.spin
		if run <= smallRun {
			spin = l.spinSmall
		}
		l.submitted.Add(uint64(n))
		for i := range buf[:n] {
			d := &buf[i]
			if err := d.Validate(); err != nil || d.Op == ring.OpCompletion {
				l.Complete(d.Token, ring.StatusInvalid, 0)
				continue
			}
			if d.Op == ring.OpNop {
				// Answered here, not by the transport: the host probes
				// whether this goroutine still drains the ring.
				l.Complete(d.Token, ring.StatusOK, 0)
				continue
			}
			l.impl.Submit(d, l)
		}
	}
}

// Complete posts one completion. It implements Completer.
func (l *lane) Complete(token uint64, st ring.Status, bytes uint64) {
	d := ring.Descriptor{Token: token, Op: ring.OpCompletion, Status: st, Flags: l.gen, Length: bytes}
	l.cqMu.Lock()
	defer l.cqMu.Unlock()
	for !l.closed {
		if l.cq.Push(&d) {
			return
		}
		// The host is not draining; wait for room, but never forever: a
		// host that stopped reaping is gone or stopping.
		if !l.cq.WaitSpace(l.spin, laneSleep) && l.stopping.Load() {
			return
		}
	}
}

// stopIntake stops the lane goroutine and waits for it.
func (l *lane) stopIntake() {
	l.stopping.Store(true)
	l.sq.Wake()
	<-l.done
}

// close unmaps the rings; later completions are dropped.
func (l *lane) close() {
	l.cqMu.Lock()
	l.closed = true
	l.cqMu.Unlock()
	l.sqMap.Close()
	l.cqMap.Close()
}
