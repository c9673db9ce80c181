package credit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/credit"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// fakeLane counts Begin and End and says when the slice waits: it is the
// lane a slice waiting for credit lets go of.
type fakeLane struct {
	begins, ends, polls atomic.Int32
	waiting             chan struct{} // a send per End: the taker let go and waits
}

func (l *fakeLane) Begin()                     { l.begins.Add(1) }
func (l *fakeLane) End()                       { l.ends.Add(1); l.waiting <- struct{}{} }
func (l *fakeLane) Down() bool                 { return false }
func (l *fakeLane) Poll(*progress.Tracker) int { l.polls.Add(1); return 0 }

// fakeAsker answers asks with err, counting them.
type fakeAsker struct {
	err   error
	asked atomic.Int32
}

func (a *fakeAsker) Ask(context.Context, string, string, uint64, credit.Report) (credit.Grant, error) {
	a.asked.Add(1)
	return credit.Grant{}, a.err
}

func newKeeper(t *testing.T, asker credit.Asker, quit chan struct{}) (*credit.Keeper, *progress.Tracker) {
	tr := progress.NewTracker(4)
	k := credit.NewKeeper(credit.KeeperConfig{Limits: lim, Interval: time.Millisecond, Name: "sender", Incarnation: 1, Tracker: tr,
		Asker: asker, Log: hclog.NewNullLogger(), Quit: quit})
	return k, tr
}

// TestKeeperTakeWaitsOffTheLane: a slice that finds no credit lets go of
// its lane while it waits, and takes the credit a reaped completion
// gives back; the lane is held again when Take returns.
func TestKeeperTakeWaitsOffTheLane(t *testing.T) {
	k, tr := newKeeper(t, &fakeAsker{}, make(chan struct{}))
	b, err := tr.Allocate(8)
	if err != nil {
		t.Fatal(err)
	}
	pc := k.Peer("receiver", 7, "127.0.0.1:1")
	var holds []*credit.Hold
	for i := range 5 {
		b.Reserve(1<<20, 0)
		holds = append(holds, k.Begin(b, i, pc, 256<<10))
	}
	l := &fakeLane{waiting: make(chan struct{}, 1)}
	for i := range 4 { // the initial window: 4 requests
		if !k.Take(holds[i], pc, 256<<10, true, b, i, l) {
			t.Fatalf("slice %d found no credit in the initial window", i)
		}
	}
	took := make(chan bool)
	go func() { took <- k.Take(holds[4], pc, 256<<10, true, b, 4, l) }()
	<-l.waiting // it let go of the lane
	// The first slice's completion comes back: its credit is given back.
	k.Reaped([]ring.Descriptor{{Token: progress.WithRail(b.Token(0), 0)}})
	if !<-took {
		t.Fatal("Take gave up although a completion brought credit back")
	}
	if l.begins.Load() != 1 || l.ends.Load() != 1 {
		t.Fatalf("lane begun %d, ended %d times around the wait; want 1 and 1", l.begins.Load(), l.ends.Load())
	}
	if st := k.Stats(); len(st) != 1 || st[0].Segment != "receiver" {
		t.Fatalf("stats %+v, want the one receiver", st)
	}
}

// TestKeeperTakeEndsWithTheTask: a slice waiting for credit gives up when
// its task is canceled, and when the engine closes.
func TestKeeperTakeEndsWithTheTask(t *testing.T) {
	quit := make(chan struct{})
	k, tr := newKeeper(t, &fakeAsker{}, quit)
	b, _ := tr.Allocate(8)
	pc := k.Peer("receiver", 7, "")
	l := &fakeLane{waiting: make(chan struct{}, 1)}
	for i := range 4 {
		b.Reserve(1<<20, 0)
		k.Take(k.Begin(b, i, pc, 256<<10), pc, 256<<10, true, b, i, l)
	}
	i := b.Reserve(1<<20, 0)
	h := k.Begin(b, i, pc, 256<<10)
	took := make(chan bool)
	go func() { took <- k.Take(h, pc, 256<<10, true, b, i, l) }()
	<-l.waiting
	b.Finish(i, progress.Canceled, nil)
	if <-took {
		t.Fatal("Take took credit for a canceled task")
	}
	j := b.Reserve(1<<20, 0)
	h = k.Begin(b, j, pc, 256<<10)
	go func() { took <- k.Take(h, pc, 256<<10, true, b, j, l) }()
	<-l.waiting
	close(quit)
	if <-took {
		t.Fatal("Take took credit after the engine closed")
	}
	// Freeing the batch gives back what its tasks held: the window is whole.
	k.Free(b.Slot(), b.Len())
	if st := k.Stats(); st[0].InUse != 0 {
		t.Fatalf("%d bytes still in use after the batch was freed", st[0].InUse)
	}
}

// TestKeeperAsks: the keeper asks a receiver where credit is in use; a
// receiver that grants none is not asked again, and one that is gone
// has its credit returned (and, nothing in use there now, is not asked
// again either).
func TestKeeperAsks(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		inUse0 bool // its credit returned
	}{
		{"no grants", credit.ErrNoGrants, false},
		{"gone", credit.ErrGone, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			quit := make(chan struct{})
			a := &fakeAsker{err: errors.Join(c.err, errors.New("rpc error"))}
			k, tr := newKeeper(t, a, quit)
			b, _ := tr.Allocate(8)
			pc := k.Peer("receiver", 7, "127.0.0.1:1")
			b.Reserve(1<<20, 0)
			k.Take(k.Begin(b, 0, pc, 256<<10), pc, 256<<10, true, b, 0, &fakeLane{})
			done := make(chan struct{})
			go func() { k.Run(); close(done) }()
			deadline := time.Now().Add(10 * time.Second)
			for a.asked.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if c.inUse0 {
				for k.Stats()[0].InUse != 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if k.Stats()[0].InUse != 0 {
					t.Error("a gone receiver's credit was not returned")
				}
			}
			time.Sleep(20 * time.Millisecond) // 20 intervals: asks there would be seen below
			close(quit)
			<-done
			// Many intervals passed: one ask, and none after it.
			if n := a.asked.Load(); n != 1 {
				t.Errorf("asked %d times, want once", n)
			}
		})
	}
}

// TestKeeperRunCredit: a run's credit is taken at once; its tasks draw
// on it until it is spent; completions reaped together give it back;
// what the run did not draw goes back at its end.
func TestKeeperRunCredit(t *testing.T) {
	k, tr := newKeeper(t, &fakeAsker{}, make(chan struct{}))
	b, err := tr.Allocate(8)
	if err != nil {
		t.Fatal(err)
	}
	pc := k.Peer("receiver", 7, "127.0.0.1:1")
	var r credit.Run
	if !k.TakeRun(&r, pc, 12<<10, 3, true) {
		t.Fatal("a run of 3 found no credit in the initial window")
	}
	if k.TakeRun(new(credit.Run), pc, 8<<10, 2, true) {
		t.Fatal("a second run passed a window of 4 requests with 3 taken")
	}
	var ds []ring.Descriptor
	for i := range 2 {
		b.Reserve(4<<10, 0)
		if k.BeginTaken(&r, b, i, 4<<10) == nil {
			t.Fatalf("task %d drew nothing from its run's credit", i)
		}
		ds = append(ds, ring.Descriptor{Token: progress.WithRail(b.Token(i), 0)})
	}
	if k.BeginTaken(&r, b, 2, 8<<10) != nil {
		t.Fatal("a task drew 8 KiB from a run with 4 KiB left")
	}
	if s := k.Stats()[0]; s.InUse != 12<<10 || s.InFlight != 3 {
		t.Fatalf("during the run: %+v, want 12 KiB and 3 requests in use", s)
	}
	k.EndRun(&r)
	if s := k.Stats()[0]; s.InUse != 8<<10 || s.InFlight != 2 {
		t.Fatalf("after the run's end: %+v, want the 2 drawn (8 KiB) in use", s)
	}
	k.Reaped(ds)
	k.Reaped(ds) // again: a hold gives back once
	if s := k.Stats()[0]; s.InUse != 0 || s.InFlight != 0 {
		t.Fatalf("after the completions: %+v, want nothing in use", s)
	}
}
