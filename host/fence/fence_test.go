package fence

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// port is a Port whose answers the test sets: refusing (a target that
// cannot be reached) until open is called.
type port struct {
	mu    sync.Mutex
	ok    bool
	calls []string
	asked chan struct{}
}

func newPort() *port { return &port{asked: make(chan struct{}, 64)} }

func (p *port) Fence(ctx context.Context, t Target, transport string, run uint64) error {
	p.mu.Lock()
	p.calls = append(p.calls, t.Name)
	ok := p.ok
	p.mu.Unlock()
	select {
	case p.asked <- struct{}{}:
	default:
	}
	if !ok {
		return errors.New("connection refused")
	}
	return nil
}

func (p *port) open() {
	p.mu.Lock()
	p.ok = true
	p.mu.Unlock()
}

// TestGateOpensOnConfirmation: a closed gate holds writes to its target
// only (Closed, Wait), is asked again after a refusal, and opens once the
// target confirms; the confirmation's channel is closed then.
func TestGateOpensOnConfirmation(t *testing.T) {
	p := newPort()
	g := New(p, time.Second)
	defer g.Stop()
	done := g.Close(Target{Name: "b", Incarnation: 1}, "tcp", 7)
	if !g.Closed("b") || g.Closed("c") {
		t.Fatal("only b's gate should be closed")
	}
	<-p.asked // refused once
	err := g.Wait("b", time.Now().Add(10*time.Millisecond).UnixNano(), time.Millisecond, func() bool { return false })
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), `segment "b"`) || !strings.Contains(err.Error(), "tcp run 0x7") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("wait on a closed gate: %v", err)
	}
	if st := g.Statuses(); len(st) != 1 || st[0].Segment != "b" || st[0].Runs != 1 || st[0].Tries == 0 {
		t.Fatalf("statuses: %+v", st)
	}
	p.open()
	if err := g.Wait("b", time.Now().Add(time.Minute).UnixNano(), time.Millisecond, func() bool { return false }); err != nil {
		t.Fatalf("wait after the target confirmed: %v", err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the confirmation's channel was not closed")
	}
	if g.Closed("b") || len(g.Statuses()) != 0 {
		t.Fatal("the gate stayed closed after the confirmation")
	}
}

// TestGateWaitStops: a waiter whose task ended meanwhile leaves at once
// with the reason, the gate staying closed.
func TestGateWaitStops(t *testing.T) {
	p := newPort()
	g := New(p, time.Second)
	defer g.Stop()
	g.Close(Target{Name: "b", Incarnation: 1}, "tcp", 7)
	if err := g.Wait("b", 0, time.Millisecond, func() bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("a stopped waiter: %v", err)
	}
	if !g.Closed("b") {
		t.Fatal("the gate opened without a confirmation")
	}
}

// TestGateNewLife: a fence for a newer life of the target replaces the
// older life's gate; the older one's fences count as done (its plugins
// died with it).
func TestGateNewLife(t *testing.T) {
	p := newPort()
	g := New(p, time.Second)
	defer g.Stop()
	old := g.Close(Target{Name: "b", Incarnation: 1}, "tcp", 7)
	g.Close(Target{Name: "b", Incarnation: 2}, "tcp", 8)
	select {
	case <-old:
	case <-time.After(time.Minute):
		t.Fatal("the older life's fence was not let go")
	}
	if st := g.Statuses(); len(st) != 1 || st[0].Incarnation != 2 {
		t.Fatalf("statuses: %+v", st)
	}
}

// TestGateStop: Stop ends the goroutines of gates still closed and the
// waiters at them.
func TestGateStop(t *testing.T) {
	p := newPort()
	g := New(p, time.Second)
	g.Close(Target{Name: "b", Incarnation: 1}, "tcp", 7)
	errc := make(chan error, 1)
	go func() { errc <- g.Wait("b", 0, time.Hour, func() bool { return false }) }()
	<-p.asked
	g.Stop()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("a waiter at Stop: %v", err)
	}
}

// TestEndAfter: end is told confirmed once every fence is, not
// confirmed when the bound passes first, and at once after Stop.
func TestEndAfter(t *testing.T) {
	p := newPort()
	g := New(p, time.Second)
	done := g.Close(Target{Name: "b", Incarnation: 1}, "tcp", 7)
	got := make(chan bool, 1)
	g.EndAfter([]<-chan struct{}{done}, time.Millisecond, func(ok bool) { got <- ok })
	if <-got {
		t.Fatal("confirmed before the target answered")
	}
	p.open()
	g.EndAfter([]<-chan struct{}{done}, time.Minute, func(ok bool) { got <- ok })
	if !<-got {
		t.Fatal("not confirmed after the target answered")
	}
	g.Stop()
	g.EndAfter([]<-chan struct{}{make(chan struct{})}, time.Minute, func(ok bool) { got <- ok })
	if <-got {
		t.Fatal("confirmed after Stop")
	}
}
