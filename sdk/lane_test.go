package sdk

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// gatedTransport completes every write OK once gate lets Submit through;
// the other Transport methods are not called by a lane.
type gatedTransport struct {
	Transport
	gate chan struct{}
}

func (g *gatedTransport) Submit(d *ring.Descriptor, c Completer) {
	<-g.gate
	c.Complete(d.Token, ring.StatusOK, d.Length)
}

// laneRig is a lane attached to rings this test holds the host's side of.
type laneRig struct {
	l      *lane
	sq, cq *ring.Ring
}

func newLaneRig(t *testing.T, impl Transport, gen uint32) *laneRig {
	t.Helper()
	return newLaneRigSpin(t, impl, gen, time.Microsecond)
}

// newLaneRigSpin is newLaneRig with the lane's spin budget (which is
// also how long Assist looks for the host's next descriptor).
func newLaneRigSpin(t *testing.T, impl Transport, gen uint32, spin time.Duration) *laneRig {
	t.Helper()
	return newLaneRigWith(t, impl, gen, spin, func(*lane) {})
}

// newLaneRigWith is newLaneRigSpin with set called on the lane before
// it starts.
func newLaneRigWith(t *testing.T, impl Transport, gen uint32, spin time.Duration, set func(*lane)) *laneRig {
	t.Helper()
	return newLaneRigDepth(t, impl, gen, spin, 16, set)
}

// newLaneRigDepth is newLaneRigWith with a completion ring cqDepth deep.
func newLaneRigDepth(t *testing.T, impl Transport, gen uint32, spin time.Duration, cqDepth int, set func(*lane)) *laneRig {
	t.Helper()
	sqr, cqr, sq, cq := newTestRingsDepth(t, 16, cqDepth)
	l, err := attachLane(impl, 0, gen, sqr.FD(), cqr.FD(), uint64(sqr.Size()), uint64(cqr.Size()), spin, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	set(l)
	l.start()
	t.Cleanup(func() { // before newTestRings' own: the lane stops before its rings go
		l.stopIntake()
		l.close()
	})
	return &laneRig{l: l, sq: sq, cq: cq}
}

// newTestRings creates a lane's two rings, 16 deep, in memfds the test
// closes at its end; it returns the regions and the host's view of each
// ring.
func newTestRings(t *testing.T) (sqr, cqr *shm.Region, sq, cq *ring.Ring) {
	t.Helper()
	return newTestRingsDepth(t, 16, 16)
}

// newTestRingsDepth is newTestRings with the rings sqDepth and cqDepth
// deep.
func newTestRingsDepth(t *testing.T, sqDepth, cqDepth int) (sqr, cqr *shm.Region, sq, cq *ring.Ring) {
	t.Helper()
	var err error
	if sqr, err = shm.Create("lane-test-sq", ring.Size(sqDepth)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqr.Close() })
	if cqr, err = shm.Create("lane-test-cq", ring.Size(cqDepth)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cqr.Close() })
	if sq, err = ring.Init(sqr.Mem(), sqDepth); err != nil {
		t.Fatal(err)
	}
	if cq, err = ring.Init(cqr.Mem(), cqDepth); err != nil {
		t.Fatal(err)
	}
	return sqr, cqr, sq, cq
}

func (r *laneRig) submit(t *testing.T, ds ...ring.Descriptor) {
	t.Helper()
	for i := range ds {
		if !r.sq.Push(&ds[i]) {
			t.Fatal("submission ring full")
		}
	}
}

// next waits for one completion.
func (r *laneRig) next(t *testing.T) ring.Descriptor {
	t.Helper()
	buf := make([]ring.Descriptor, 1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if r.cq.Dequeue(buf) == 1 {
			return buf[0]
		}
		r.cq.Wait(time.Microsecond, 10*time.Millisecond)
	}
	t.Fatal("no completion within 10s")
	return ring.Descriptor{}
}

// TestLaneStampsGeneration: every completion a lane posts, the ones the
// lane answers itself (NOP, invalid) and the transport's, carries the
// generation the host attached the lane with.
func TestLaneStampsGeneration(t *testing.T) {
	for _, gen := range []uint32{0, 1, 1<<32 - 1} {
		g := &gatedTransport{gate: make(chan struct{})}
		close(g.gate)
		r := newLaneRig(t, g, gen)
		r.submit(t,
			ring.Descriptor{Token: 1, Op: ring.OpNop},
			ring.Descriptor{Token: 2, Op: ring.OpWrite, Length: 10},
			ring.Descriptor{Token: 3, Op: ring.OpWrite}, // zero length: invalid
		)
		want := map[uint64]ring.Status{1: ring.StatusOK, 2: ring.StatusOK, 3: ring.StatusInvalid}
		for range 3 {
			c := r.next(t)
			if c.Flags != gen || c.Op != ring.OpCompletion || c.Status != want[c.Token] {
				t.Fatalf("generation %d: completion %+v; want flags %d, status %v", gen, c, gen, want[c.Token])
			}
			delete(want, c.Token)
		}
	}
}

// TestStuckLaneAnswersNoNop is what the host's liveness probe relies on:
// a NOP is answered by the lane goroutine, so while that goroutine is
// stuck in the transport the NOP stays unanswered, and once it is free
// the NOP is answered.
func TestStuckLaneAnswersNoNop(t *testing.T) {
	g := &gatedTransport{gate: make(chan struct{})}
	r := newLaneRig(t, g, 5)
	r.submit(t, ring.Descriptor{Token: 1, Op: ring.OpWrite, Length: 1})
	r.submit(t, ring.Descriptor{Token: 2, Op: ring.OpNop})
	// The lane takes both descriptors in one dequeue or the NOP stays on
	// the ring; either way nothing may complete while Submit is stuck.
	// This bounded look can miss a wrong answer, never invent one.
	if r.cq.Wait(time.Microsecond, 50*time.Millisecond) {
		t.Fatalf("a completion arrived while the lane goroutine was stuck: %+v", r.next(t))
	}
	close(g.gate)
	if c := r.next(t); c.Token != 1 {
		t.Fatalf("first completion %+v, want the write's", c)
	}
	if c := r.next(t); c.Token != 2 || c.Flags != 5 {
		t.Fatalf("second completion %+v, want the NOP's with generation 5", c)
	}
}

// heldTransport keeps every descriptor it is given, with its Completer and
// whether an assisting goroutine submitted it (Assist on the stack), for
// the test to complete.
type heldTransport struct {
	Transport
	got chan submitted
}

type submitted struct {
	d        ring.Descriptor
	c        Completer
	assisted bool
}

func (h *heldTransport) Submit(d *ring.Descriptor, c Completer) {
	buf := make([]byte, 8<<10)
	buf = buf[:runtime.Stack(buf, false)]
	h.got <- submitted{*d, c, bytes.Contains(buf, []byte(").Assist("))}
}

func (h *heldTransport) next(t *testing.T) submitted {
	t.Helper()
	select {
	case s := <-h.got:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the transport got no descriptor within 10s")
		return submitted{}
	}
}

// until polls cond (a state another goroutine reaches) for up to 10s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		runtime.Gosched()
	}
}

// TestAssistTakesTheNextRequest is the closed loop of a small request: the
// transport completes the only outstanding descriptor and assists; the
// host's next descriptor is then submitted by that goroutine, without a
// wakeup of the sleeping lane goroutine (the publish finds no sleeper to
// wake), and once it is out the assisting goroutine returns.
func TestAssistTakesTheNextRequest(t *testing.T) {
	h := &heldTransport{got: make(chan submitted, 4)}
	r := newLaneRigSpin(t, h, 1, 10*time.Second)
	r.l.assists.Store(true) // as after the transport's first Assist
	for attempt := 0; ; attempt++ {
		r.submit(t, ring.Descriptor{Token: 1, Op: ring.OpWrite, Length: 10})
		first := h.next(t)
		if first.assisted {
			t.Fatal("the first descriptor came through Assist; nobody assisted")
		}
		// With its small write on the wire the lane goroutine sleeps
		// instead of spinning.
		until(t, "the lane goroutine sleeps", r.sq.ConsumerSleeping)
		done := make(chan struct{})
		go func() {
			defer close(done)
			first.c.Complete(first.d.Token, ring.StatusOK, first.d.Length)
			first.c.(Assister).Assist()
		}()
		until(t, "the assisting goroutine covers the lane's sleep", func() bool { return !r.sq.ConsumerSleeping() })
		r.submit(t, ring.Descriptor{Token: 2, Op: ring.OpWrite, Length: 10})
		second := h.next(t)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Assist did not return once its submission was out")
		}
		if c := r.next(t); c.Token != 1 || c.Status != ring.StatusOK {
			t.Fatalf("completion %+v, want token 1 OK", c)
		}
		second.c.Complete(second.d.Token, ring.StatusOK, second.d.Length)
		if c := r.next(t); c.Token != 2 {
			t.Fatalf("completion %+v, want token 2", c)
		}
		if second.assisted {
			if n := r.l.assisted.Load(); n != 1 {
				t.Fatalf("lane counts %d assisted descriptors, want 1", n)
			}
			return
		}
		// The lane goroutine's one-second sleep ended in the gap and it
		// took the ring first; rare, try again.
		if attempt == 2 {
			t.Fatal("three times the lane goroutine, not the assisting one, submitted the next descriptor")
		}
	}
}

// TestAssistWithWorkOutstanding: Assist returns at once while another
// descriptor of the lane is outstanding (its completion will come, and the
// host may be waiting for it rather than about to send).
func TestAssistWithWorkOutstanding(t *testing.T) {
	h := &heldTransport{got: make(chan submitted, 4)}
	r := newLaneRigSpin(t, h, 1, 10*time.Second)
	r.l.assists.Store(true)
	r.submit(t, ring.Descriptor{Token: 1, Op: ring.OpWrite, Length: 10},
		ring.Descriptor{Token: 2, Op: ring.OpWrite, Length: 10})
	a, b := h.next(t), h.next(t)
	a.c.Complete(a.d.Token, ring.StatusOK, a.d.Length)
	a.c.(Assister).Assist() // would spin 10s if it took the ring
	if r.l.token.Load() != tokenFree && r.l.token.Load() != tokenHeld {
		t.Fatalf("token %d after Assist", r.l.token.Load())
	}
	b.c.Complete(b.d.Token, ring.StatusOK, b.d.Length)
	for range 2 {
		if c := r.next(t); c.Status != ring.StatusOK {
			t.Fatalf("completion %+v", c)
		}
	}
}

// TestStopIntakeEndsAssist: stopping the lane ends an assisting goroutine's
// look at the ring, and afterwards Assist never takes it again, so the
// ring can be unmapped under it.
func TestStopIntakeEndsAssist(t *testing.T) {
	h := &heldTransport{got: make(chan submitted, 4)}
	r := newLaneRigSpin(t, h, 1, time.Hour)
	r.l.assists.Store(true)
	r.submit(t, ring.Descriptor{Token: 1, Op: ring.OpWrite, Length: 10})
	first := h.next(t)
	until(t, "the lane goroutine sleeps", r.sq.ConsumerSleeping)
	first.c.Complete(first.d.Token, ring.StatusOK, first.d.Length)
	done := make(chan struct{})
	go func() {
		defer close(done)
		first.c.(Assister).Assist() // looks for an hour unless stopped
	}()
	until(t, "the assisting goroutine holds the ring", func() bool { return !r.sq.ConsumerSleeping() })
	stopped := make(chan struct{})
	go func() {
		r.l.stopIntake()
		close(stopped)
	}()
	for _, ch := range []chan struct{}{done, stopped} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("stopIntake and Assist did not both return within 10s")
		}
	}
	if r.l.token.Load() != tokenRetired {
		t.Fatalf("token %d after stopIntake, want retired", r.l.token.Load())
	}
	first.c.(Assister).Assist() // returns at once: the ring is retired
	r.submit(t, ring.Descriptor{Token: 2, Op: ring.OpWrite, Length: 10})
	select {
	case s := <-h.got:
		t.Fatalf("descriptor %+v submitted after stopIntake", s.d)
	default:
	}
}

// clockTransport records the run clock its Submit sees through Now.
type clockTransport struct {
	Transport
	seen chan int64
}

func (c *clockTransport) Submit(d *ring.Descriptor, cm Completer) {
	n := int64(0)
	if rc, ok := cm.(runClock); ok {
		n = rc.runNow()
	}
	c.seen <- n
	cm.Complete(d.Token, ring.StatusOK, d.Length)
}

// TestLaneReadsTheClockOncePerRun: while a run with deadlines is handed
// to the transport, the lane offers the time it was dequeued (Now), one
// reading for the whole run; a run without deadlines reads no clock.
func TestLaneReadsTheClockOncePerRun(t *testing.T) {
	ct := &clockTransport{seen: make(chan int64, 8)}
	r := newLaneRig(t, ct, 0)
	before := time.Now().UnixNano()
	r.sq.Enqueue(&ring.Descriptor{Token: 1, Op: ring.OpWrite, Length: 1, Deadline: before + int64(time.Hour)})
	r.sq.Enqueue(&ring.Descriptor{Token: 2, Op: ring.OpWrite, Length: 1, Deadline: before + int64(time.Hour)})
	r.sq.Publish()
	a, b := <-ct.seen, <-ct.seen
	if a < before || a != b {
		t.Fatalf("the run's descriptors saw the clock at %d and %d (published at %d); want one reading, after it", a, b, before)
	}
	r.next(t)
	r.next(t)
	r.submit(t, ring.Descriptor{Token: 3, Op: ring.OpWrite, Length: 1})
	if n := <-ct.seen; n != 0 {
		t.Fatalf("a run without deadlines read the clock: %d", n)
	}
	r.next(t)
	if n := r.l.runNow(); n != 0 {
		t.Fatalf("between runs the lane still offers %d", n)
	}
}

// pauseRig is a lane that spins long (so that what the test submits is
// taken in a stream) and pauses for an hour: only a wake ends a pause.
func pauseRig(t *testing.T) *laneRig {
	t.Helper()
	g := &gatedTransport{gate: make(chan struct{})}
	close(g.gate)
	return newLaneRigWith(t, g, 0, 10*time.Second, func(l *lane) { l.pause = time.Hour })
}

// untilCompleted yields until the lane has posted n completions.
func (r *laneRig) untilCompleted(t *testing.T, n uint64) {
	t.Helper()
	for give := time.Now().Add(10 * time.Second); r.l.completed.Load() < n; runtime.Gosched() {
		if time.Now().After(give) {
			t.Fatalf("%d completions posted after 10s, want %d", r.l.completed.Load(), n)
		}
	}
}

// untilPausing yields until the lane goroutine sits in its pause's futex
// wait.
func untilPausing(t *testing.T) {
	t.Helper()
	for give := time.Now().Add(10 * time.Second); ; {
		buf := make([]byte, 1<<16)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "ring.(*Ring).NapUnlessWaited(") && strings.Contains(g, "[syscall") {
				return
			}
		}
		if time.Now().After(give) {
			t.Fatal("the lane did not pause within 10s")
		}
		runtime.Gosched()
	}
}

// TestLanePausesInAStream: a short run taken in a stream, with the
// completions posted before it not yet reaped, makes the lane pause; a
// host that starts waiting ends the pause, and what came meanwhile is
// taken.
func TestLanePausesInAStream(t *testing.T) {
	r := pauseRig(t)
	r.submit(t, ring.Descriptor{Token: 1, Op: ring.OpWrite, Length: 8})
	r.untilCompleted(t, 1)                                              // nothing of ours was unreaped when it came: no pause
	r.submit(t, ring.Descriptor{Token: 2, Op: ring.OpWrite, Length: 8}) // taken while the lane spins, 1 unreaped
	untilPausing(t)
	r.submit(t, ring.Descriptor{Token: 3, Op: ring.OpWrite, Length: 8})
	r.sq.AddWaiting(1) // the host waits: the pause ends
	for want := uint64(1); want <= 3; want++ {
		if c := r.next(t); c.Token != want {
			t.Fatalf("completion %+v, want token %d", c, want)
		}
	}
	if n := r.l.pauses.Load(); n != 1 {
		t.Fatalf("%d pauses, want 1", n)
	}
}

// TestLaneDoesNotPause: after a run that would make the lane pause
// otherwise (TestLanePausesInAStream's second), a host with a caller
// waiting, a high-priority descriptor, a descriptor of more than
// pauseBytes, and a host that reaped each completion before it submitted
// the next each keep the lane taking the next descriptor at once, not
// after an hour-long pause.
func TestLaneDoesNotPause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting bool
		prio    uint8
		length  uint64
		reap    bool
	}{
		{name: "waited", waiting: true},
		{name: "high", prio: uint8(PriorityHigh)},
		{name: "large", length: pauseBytes + 1},
		{name: "reaped", reap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pauseRig(t)
			if tc.waiting {
				r.sq.AddWaiting(1)
			}
			var got []uint64
			for tok := uint64(1); tok <= 3; tok++ {
				prio, length := uint8(0), uint64(8)
				if tok == 2 {
					prio, length = tc.prio, max(length, tc.length)
				}
				r.submit(t, ring.Descriptor{Token: tok, Op: ring.OpWrite, Length: length, Prio: prio})
				if tc.reap {
					got = append(got, r.next(t).Token)
					continue
				}
				r.untilCompleted(t, tok)
			}
			for len(got) < 3 {
				got = append(got, r.next(t).Token)
			}
			if got[0] != 1 || got[1] != 2 || got[2] != 3 {
				t.Fatalf("completions %v, want 1 2 3", got)
			}
		})
	}
}

// TestLaneSpinBudgets: a spin budget the host did not send (0) is the
// SDK's default; a negative one, the host's spin = "0s", is none: the
// lane sleeps at once; the small budget is at least the plain one.
func TestLaneSpinBudgets(t *testing.T) {
	for _, c := range []struct{ sent, want time.Duration }{{0, DefaultSpin}, {-1, 0}, {5 * time.Microsecond, 5 * time.Microsecond}} {
		r := newLaneRigSpin(t, &clockTransport{}, 0, c.sent)
		if r.l.spin != c.want || r.l.spinSmall < r.l.spin {
			t.Errorf("sent %v: the lane spins %v (small %v), want %v", c.sent, r.l.spin, r.l.spinSmall, c.want)
		}
	}
}

// aloneTransport is gatedTransport declaring that its lanes spin alone
// (SpinsAlone).
type aloneTransport struct{ *gatedTransport }

func (aloneTransport) SpinsAlone() bool { return true }

// TestSpinsAloneKeepsThePWhileSpinning: the lane of a transport that
// SpinsAlone spins on its submission ring keeping its P for
// SpinAloneGosched; any other transport's lane yields it from the first
// look. Both lanes serve what they are given.
func TestSpinsAloneKeepsThePWhileSpinning(t *testing.T) {
	for _, alone := range []bool{false, true} {
		g := &gatedTransport{gate: make(chan struct{})}
		close(g.gate)
		var impl Transport = g
		want := time.Duration(0)
		if alone {
			impl, want = aloneTransport{g}, SpinAloneGosched
		}
		r := newLaneRig(t, impl, 1)
		if got := r.l.sq.SpinGosched(); got != want {
			t.Fatalf("SpinsAlone %v: the submission ring's spin keeps its P for %v, want %v", alone, got, want)
		}
		r.submit(t, ring.Descriptor{Token: 7, Op: ring.OpWrite, Length: 10})
		if c := r.next(t); c.Token != 7 || c.Status != ring.StatusOK {
			t.Fatalf("SpinsAlone %v: completion %+v, want token 7 OK", alone, c)
		}
	}
}

// TestAttachLaneSleepHandoff: the host's handoff_sleeps, sent at
// AttachLane, reaches both of the lane's rings, and its absence leaves
// them as they were.
func TestAttachLaneSleepHandoff(t *testing.T) {
	for _, on := range []bool{false, true} {
		sqr, cqr, _, _ := newTestRings(t)
		l, err := attachLane(&gatedTransport{gate: make(chan struct{})}, 0, 0, sqr.FD(), cqr.FD(), uint64(sqr.Size()), uint64(cqr.Size()), DefaultSpin, 0, 0, on)
		if err != nil {
			t.Fatal(err)
		}
		if l.sq.SleepHandoff() != on || l.cq.SleepHandoff() != on {
			t.Errorf("handoff %v sent: submission ring %v, completion ring %v", on, l.sq.SleepHandoff(), l.cq.SleepHandoff())
		}
		l.close()
	}
}
