package sdk

import (
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
	const depth = 16
	sqr, err := shm.Create("lane-test-sq", ring.Size(depth))
	if err != nil {
		t.Fatal(err)
	}
	cqr, err := shm.Create("lane-test-cq", ring.Size(depth))
	if err != nil {
		t.Fatal(err)
	}
	sq, err := ring.Init(sqr.Mem(), depth)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ring.Init(cqr.Mem(), depth)
	if err != nil {
		t.Fatal(err)
	}
	l, err := attachLane(impl, 0, gen, sqr.FD(), cqr.FD(), uint64(sqr.Size()), uint64(cqr.Size()), time.Microsecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.start()
	t.Cleanup(func() {
		l.stopIntake()
		l.close()
		sqr.Close()
		cqr.Close()
	})
	return &laneRig{l: l, sq: sq, cq: cq}
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
