package credit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/progress"
)

// countingAsker answers every ask with an error that keeps the credit as
// it is, counting the asks.
type countingAsker struct{ asked atomic.Int32 }

func (a *countingAsker) Ask(context.Context, string, string, uint64, Report) (Grant, error) {
	a.asked.Add(1)
	return Grant{}, errors.New("no answer (test)")
}

type idleLane struct{}

func (idleLane) Begin()                     {}
func (idleLane) End()                       {}
func (idleLane) Down() bool                 { return false }
func (idleLane) Poll(*progress.Tracker) int { return 0 }

// until waits up to 10 s for cond, failing the test with what.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
	}
}

// TestKeeperRestsWhileIdle: with no credit in use the keeper stops
// looking (it rests: an idle engine pays no tick), a slice that takes
// credit wakes it and it asks every interval while the credit is held,
// and rests again once it came back. Repeated, so that a take racing the
// keeper's way into rest would show as a keeper asleep with credit in
// use (no ask within the bound).
func TestKeeperRestsWhileIdle(t *testing.T) {
	quit := make(chan struct{})
	tr := progress.NewTracker(4)
	a := &countingAsker{}
	k := NewKeeper(KeeperConfig{Limits: Limits{InitialBytes: 1 << 20, MaxBytes: 8 << 20, InitialRequests: 4, MaxRequests: 32},
		Interval: time.Millisecond, Name: "sender", Incarnation: 1, Tracker: tr, Asker: a, Log: hclog.NewNullLogger(), Quit: quit})
	done := make(chan struct{})
	go func() { k.Run(); close(done) }()
	defer func() { close(quit); <-done }()
	pc := k.Peer("receiver", 7, "127.0.0.1:1")
	until(t, "the keeper never rested with no credit in use", k.idle.Load)
	for round := range 200 {
		b, err := tr.Allocate(1)
		if err != nil {
			t.Fatal(err)
		}
		i := b.Reserve(1<<20, 0)
		before := a.asked.Load()
		if !k.Take(k.Begin(b, i, pc, 256<<10), pc, 256<<10, true, b, i, idleLane{}) {
			t.Fatal("a slice found no credit in an empty window")
		}
		until(t, "credit in use, and the keeper asked nothing: it slept through the take", func() bool { return a.asked.Load() >= before+2 })
		k.Free(b.Slot(), b.Len())
		tr.Free(b)
		// Every other round takes again at once: while the keeper is on
		// its way into rest, not in it.
		if round%2 == 0 {
			until(t, "the keeper never rested after the credit came back", k.idle.Load)
		}
	}
	until(t, "the keeper never rested after the credit came back", k.idle.Load)
	// Resting: many intervals pass without an ask.
	n := a.asked.Load()
	time.Sleep(20 * time.Millisecond)
	if m := a.asked.Load(); m != n || !k.idle.Load() {
		t.Fatalf("asked %d times while no credit was in use (idle %v)", m-n, k.idle.Load())
	}
}
