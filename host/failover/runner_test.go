package failover

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakePort is a Port of fixed facts: transports, the selector's plan,
// and change channels the test closes. It records what Resume got.
type fakePort struct {
	mu       sync.Mutex
	facts    func(in *Input)
	changed  chan struct{}
	asked    chan struct{} // a question to Decide was answered with facts
	resumed  chan Decision
	segments chan struct{}
}

func newFakePort(facts func(in *Input)) *fakePort {
	return &fakePort{facts: facts, changed: make(chan struct{}), asked: make(chan struct{}, 16), resumed: make(chan Decision, 1), segments: make(chan struct{})}
}

func (p *fakePort) Changed() (<-chan struct{}, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed, p.segments
}

func (p *fakePort) Facts(in *Input, j *Job[string]) {
	p.mu.Lock()
	in.Now = 100 * sec
	in.Transports = transports()
	in.Plan = []int{0, 1}
	p.facts(in)
	p.mu.Unlock()
	p.asked <- struct{}{}
}

func (p *fakePort) Resume(j *Job[string], d Decision) { p.resumed <- d }

// change sets new facts and wakes the waiting failover.
func (p *fakePort) change(facts func(in *Input)) {
	p.mu.Lock()
	p.facts = facts
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

var settings = Settings{Attempts: 3, Budget: 5 * time.Second, Jitter: func() float64 { return 0 }}

func died(attempt int) Job[string] {
	return Job[string]{Token: 1, Cause: errors.New("plugin exited"), Rail: -1, From: 0, Attempt: attempt, Blame: BlameRequest, Task: "task"}
}

// TestRunnerResumesWithTheDecision: a failover Decide answers at once is
// resumed with that decision, on the runner's goroutine.
func TestRunnerResumesWithTheDecision(t *testing.T) {
	p := newFakePort(func(in *Input) { in.History.Tried = 0b1 })
	r := NewRunner[string](p, settings, make(chan struct{}))
	defer r.Close()
	if !r.Offer(died(0)) {
		t.Fatal("a first attempt whose plugin died was not taken")
	}
	if d := <-p.resumed; d.Kind != NextTransport || d.Transport != 1 {
		t.Fatalf("resumed with %+v, want the next transport, 1", d)
	}
}

// TestRunnerRefusesWhatTakeRefuses: the last attempt, and any job after
// Close, is not taken, and nothing is resumed.
func TestRunnerRefusesWhatTakeRefuses(t *testing.T) {
	p := newFakePort(func(in *Input) {})
	r := NewRunner[string](p, settings, make(chan struct{}))
	if r.Offer(died(2)) {
		t.Error("the last of 3 attempts was taken for failover")
	}
	r.Close()
	if r.Offer(died(0)) {
		t.Error("a job offered after Close was taken")
	}
	select {
	case d := <-p.resumed:
		t.Fatalf("a refused job was resumed with %+v", d)
	default:
	}
}

// TestRunnerWaitsForAChange: while every transport was tried and one is
// restarting, the failover waits; a change of the plugins wakes it, and
// it resumes with what the new facts decide.
func TestRunnerWaitsForAChange(t *testing.T) {
	p := newFakePort(func(in *Input) { in.History.Tried = 0b111 })
	r := NewRunner[string](p, settings, make(chan struct{}))
	defer r.Close()
	j := died(0)
	j.History.Tried = 0b111
	if !r.Offer(j) {
		t.Fatal("not taken")
	}
	<-p.asked // it decided to wait
	select {
	case d := <-p.resumed:
		t.Fatalf("resumed with %+v while every transport was tried and one restarting", d)
	default:
	}
	p.change(func(in *Input) {
		in.History.Tried = 0b11
		in.Transports[2] = Transport{Usable: true, Rails: 1}
		in.Plan = []int{0, 1, 2}
	})
	if d := <-p.resumed; d.Kind != NextTransport || d.Transport != 2 {
		t.Fatalf("after the restart: resumed with %+v, want transport 2", d)
	}
}

// TestRunnerGivesUpAtQuit: a waiting failover ends with a Fail decision
// once quit is closed, and Close returns after it.
func TestRunnerGivesUpAtQuit(t *testing.T) {
	p := newFakePort(func(in *Input) { in.History.Tried = 0b111 })
	quit := make(chan struct{})
	r := NewRunner[string](p, settings, quit)
	j := died(0)
	j.History.Tried = 0b111
	r.Offer(j)
	<-p.asked
	close(quit)
	if d := <-p.resumed; d.Kind != Fail || d.Reason != "the engine is closing" {
		t.Fatalf("at quit: resumed with %+v, want Fail, the engine is closing", d)
	}
	r.Close()
}
