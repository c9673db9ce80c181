package admission_test

import (
	"sync/atomic"
	"testing"

	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/progress"
)

// scripted answers each request by its length: a script of verdicts,
// the last repeated.
type scripted struct {
	asked  atomic.Int32
	script map[uint64][]admission.Verdict
	n      map[uint64]*atomic.Int32
}

func (s *scripted) Admit(r admission.Request, now int64) admission.Decision {
	s.asked.Add(1)
	k := int(s.n[r.Length].Add(1)) - 1
	v := s.script[r.Length]
	return admission.Decision{Verdict: v[min(k, len(v)-1)], Reason: "scripted"}
}

type askPort struct {
	went, refused, abandoned chan admission.Held
}

func (p *askPort) Go(h admission.Held)                           { p.went <- h }
func (p *askPort) Refuse(h admission.Held, d admission.Decision) { p.refused <- h }
func (p *askPort) Abandon(h admission.Held)                      { p.abandoned <- h }

// TestAskerAsksAgain: a request held back goes on once the admitter,
// asked again, says Now; one it rejects is refused; one still held when
// the engine closes is abandoned; a freed batch's are forgotten.
func TestAskerAsksAgain(t *testing.T) {
	tr := progress.NewTracker(4)
	b, _ := tr.Allocate(8)
	for range 4 {
		b.Reserve(4096, 0)
	}
	a := &scripted{script: map[uint64][]admission.Verdict{
		1: {admission.Later, admission.Later, admission.Now},
		2: {admission.Later, admission.Reject},
		3: {admission.Later},
	}, n: map[uint64]*atomic.Int32{1: {}, 2: {}, 3: {}}}
	port := &askPort{went: make(chan admission.Held, 4), refused: make(chan admission.Held, 4), abandoned: make(chan admission.Held, 4)}
	quit := make(chan struct{})
	k := admission.NewAsker(a, tr, port, quit)
	done := make(chan struct{})
	go func() { k.Run(); close(done) }()
	unblamed := false
	now := progress.Now()
	k.Hold(held(b, 0), admission.Request{Length: 1}, now, func() { unblamed = true })
	k.Hold(held(b, 1), admission.Request{Length: 2}, now, func() {})
	k.Hold(held(b, 2), admission.Request{Length: 3}, now, func() {})
	if h := <-port.went; h.I != 0 {
		t.Fatalf("task %d went on, want 0", h.I)
	}
	if !unblamed {
		t.Error("the task went on with the reason of its hold still recorded")
	}
	if h := <-port.refused; h.I != 1 {
		t.Fatalf("task %d refused, want 1", h.I)
	}
	if n := a.n[1].Load(); n != 3 {
		t.Errorf("task 0 asked about %d times, want 3", n)
	}
	close(quit)
	<-done
	if h := <-port.abandoned; h.I != 2 {
		t.Fatalf("task %d abandoned, want 2", h.I)
	}
	if k.Held() != 0 {
		t.Errorf("%d still held after Run returned", k.Held())
	}
}

// TestAskerForgets: the held tasks of a batch being freed are dropped.
func TestAskerForgets(t *testing.T) {
	tr := progress.NewTracker(4)
	b, _ := tr.Allocate(8)
	b.Reserve(4096, 0)
	k := admission.NewAsker(&scripted{}, tr, &askPort{}, make(chan struct{}))
	k.Hold(held(b, 0), admission.Request{Length: 1}, progress.Now(), func() {})
	k.Forget(b)
	if k.Held() != 0 {
		t.Fatalf("%d held after Forget, want 0", k.Held())
	}
}
