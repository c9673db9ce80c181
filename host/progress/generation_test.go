package progress

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// pluginEnd is the plugin's side of a lane's rings, driven by hand.
type pluginEnd struct {
	tb     testing.TB
	sq, cq *ring.Ring
}

func newPluginEnd(tb testing.TB, l *Lane) *pluginEnd {
	tb.Helper()
	sq, err := ring.Attach(l.SQ.Mem())
	if err != nil {
		tb.Fatal(err)
	}
	cq, err := ring.Attach(l.CQ.Mem())
	if err != nil {
		tb.Fatal(err)
	}
	return &pluginEnd{tb: tb, sq: sq, cq: cq}
}

// take returns the descriptors waiting on the submission ring.
func (p *pluginEnd) take() []ring.Descriptor {
	buf := make([]ring.Descriptor, 64)
	return buf[:p.sq.Dequeue(buf)]
}

// complete posts one completion stamped with gen.
func (p *pluginEnd) complete(token uint64, gen uint32, length uint64) {
	p.tb.Helper()
	d := ring.Descriptor{Token: token, Op: ring.OpCompletion, Flags: gen, Length: length}
	if !p.cq.Push(&d) {
		p.tb.Fatal("completion ring full")
	}
}

// seen records the tokens a lane's Reaped hooks are shown: the lane's
// Owner, as the engine's rail set is.
type seen struct{ tokens []uint64 }

// seeReaped is the Reaped hook that feeds each lane's seen.
var seeReaped = Hook{Reaped: func(l *Lane, ds []ring.Descriptor) {
	s, ok := l.Owner.(*seen)
	if !ok {
		return // a lane of another test's
	}
	for _, d := range ds {
		s.tokens = append(s.tokens, d.Token)
	}
}}

func newTestLane(tb testing.TB, gen uint32) *Lane {
	tb.Helper()
	l, err := NewLane(0, 8, 0)
	if err != nil {
		tb.Fatal(err)
	}
	l.SetGeneration(gen)
	l.Owner = &seen{}
	tb.Cleanup(func() { l.Close(false) })
	return l
}

// oneTask is a tracker with one batch of one task of length bytes, cut
// into one slice: b.Token(i) is the token its completion carries.
func oneTask(length uint64) (tr *Tracker, b *Batch, i int) {
	tr = NewTracker(4)
	tr.Hook(seeReaped)
	b, _ = tr.Allocate(1)
	i = b.Reserve(length, 0)
	b.SetSlices(i, 1)
	return tr, b, i
}

// TestStaleGenerationDropped: a completion stamped with another run's
// generation is dropped and counted, whether it comes before or after the
// task's own; the task ends exactly once, with its own completion's bytes.
func TestStaleGenerationDropped(t *testing.T) {
	const gen = 7
	l := newTestLane(t, gen)
	p := newPluginEnd(t, l)
	tr, b, i := oneTask(100)
	l.Begin()
	if err := l.Put(&ring.Descriptor{Token: b.Token(i), Op: ring.OpWrite, Length: 100}, nil, 0); err != nil {
		t.Fatal(err)
	}
	l.End()

	p.complete(b.Token(i), gen-1, 100) // left behind by the previous run
	l.Poll(tr)
	if s := b.State(i, Now()); s != Pending || l.Stale() != 1 || l.InFlight() != 1 || l.Completed() != 0 {
		t.Fatalf("after a stale completion: task %v, stale %d, in flight %d, completed %d; want PENDING, 1, 1, 0", s, l.Stale(), l.InFlight(), l.Completed())
	}

	p.complete(b.Token(i), gen, 100)
	l.Poll(tr)
	if s := b.State(i, Now()); s != Completed || b.Task(i).Bytes() != 100 || l.InFlight() != 0 || l.Completed() != 1 {
		t.Fatalf("after its own completion: task %v with %d bytes, in flight %d, completed %d", s, b.Task(i).Bytes(), l.InFlight(), l.Completed())
	}

	p.complete(b.Token(i), gen+1, 100) // a later stale one, same token
	l.Poll(tr)
	if l.Stale() != 2 || b.Task(i).Bytes() != 100 || b.done.Load() != 1 || l.InFlight() != 0 {
		t.Fatalf("a second completion reached the task: stale %d, bytes %d, tasks ended %d, in flight %d", l.Stale(), b.Task(i).Bytes(), b.done.Load(), l.InFlight())
	}
	if got := l.Owner.(*seen).tokens; len(got) != 1 || got[0] != b.Token(i) {
		t.Fatalf("the observer saw %#x, want only the task's own completion", got)
	}
}

// TestGenerationZeroChecksNothing: a lane of a plugin that does not stamp
// its completions takes them all.
func TestGenerationZeroChecksNothing(t *testing.T) {
	l := newTestLane(t, 0)
	p := newPluginEnd(t, l)
	tr, b, i := oneTask(1)
	p.complete(b.Token(i), 0, 1)
	l.Poll(tr)
	if s := b.State(i, Now()); s != Completed || l.Stale() != 0 {
		t.Fatalf("task %v, stale %d", s, l.Stale())
	}
}

// TestProbe: a probe goes on the ring as a NOP with a token no task has;
// its answer moves ProbeAck and touches neither the tracker nor the
// lane's task counters. A probe answered by another run does not count.
func TestProbe(t *testing.T) {
	const gen = 3
	l := newTestLane(t, gen)
	p := newPluginEnd(t, l)
	tr, b, i := oneTask(1)

	if !l.Probe(1) || l.ProbeSent() != 1 {
		t.Fatalf("probe not sent: sent %d", l.ProbeSent())
	}
	ds := p.take()
	if len(ds) != 1 || ds[0].Op != ring.OpNop || ds[0].Token != ProbeToken(1) {
		t.Fatalf("submission ring holds %+v, want one NOP with the probe token", ds)
	}
	if tr.Complete(ds[0].Token, ring.StatusOK, 0) {
		t.Fatal("the tracker took a probe token")
	}
	p.complete(ds[0].Token, gen-1, 0)
	l.Poll(tr)
	if l.ProbeAck() != 0 {
		t.Fatal("a probe answer of another run counted")
	}
	p.complete(ds[0].Token, gen, 0)
	l.Poll(tr)
	if l.ProbeAck() != 1 || l.InFlight() != 0 || l.Completed() != 0 || b.State(i, Now()) != Pending {
		t.Fatalf("probe ack %d, in flight %d, completed %d, task %v; want 1, 0, 0, PENDING", l.ProbeAck(), l.InFlight(), l.Completed(), b.State(i, Now()))
	}
	if got := l.Owner.(*seen).tokens; len(got) != 0 {
		t.Fatalf("the observer saw probe answers %#x", got)
	}
}

// TestProbeNeverWaits: a probe is refused, not queued, while a submitter
// holds the ring, while the ring is full and once the lane is down.
func TestProbeNeverWaits(t *testing.T) {
	l := newTestLane(t, 1)
	l.Begin()
	if l.Probe(1) {
		t.Fatal("probe sent while a submitter holds the ring")
	}
	for k := range 8 {
		if err := l.Put(&ring.Descriptor{Token: uint64(k), Op: ring.OpWrite, Length: 1}, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	l.End()
	if l.Probe(2) {
		t.Fatal("probe sent on a full ring")
	}
	p := newPluginEnd(t, l)
	p.take()
	l.MarkDown()
	if l.Probe(3) || l.ProbeSent() != 0 {
		t.Fatalf("probe sent on a lane that is down (sent %d)", l.ProbeSent())
	}
}

// TestProbeTokensAreNoTasks: no tracker has the slot probe tokens name,
// however large it is asked to be.
func TestProbeTokensAreNoTasks(t *testing.T) {
	for _, n := range []int{maxSlots, reservedSlot + 1, 1 << 30} {
		if got := len(NewTracker(n).slots); got > reservedSlot {
			t.Fatalf("NewTracker(%d) has %d slots; slot %d is reserved for probes", n, got, reservedSlot)
		}
	}
	for _, seq := range []uint64{1, 2, probeSeqMask} {
		if s, ok := probeSeq(ProbeToken(seq)); !ok || s != seq {
			t.Fatalf("probe %d: token %#x reads back as %d, %v", seq, ProbeToken(seq), s, ok)
		}
	}
	b := &Batch{slot: reservedSlot - 1, gen: 1<<32 - 1, tasks: make([]Task, MaxTasks)} // the highest slot a tracker has
	b.tasks[MaxTasks-1].attempt.Store(1<<tokenAttemptBits - 1)
	if _, ok := probeSeq(WithRail(b.Token(MaxTasks-1), MaxRails-1)); ok {
		t.Fatal("the last slot's last task token reads as a probe")
	}
}

// TestFailTransportKeepsDeadlines: when a plugin is failed, a task whose
// deadline already passed ends TIMEOUT, one whose deadline has not ends
// FAILED with the plugin's error, and tasks on other plugins go on.
func TestFailTransportKeepsDeadlines(t *testing.T) {
	tr := NewTracker(4)
	b, _ := tr.Allocate(3)
	expired := b.Reserve(1, Now()-int64(time.Millisecond))
	later := b.Reserve(1, Now()+int64(time.Hour))
	other := b.Reserve(1, 0)
	for _, i := range []int{expired, later, other} {
		b.SetSlices(i, 1)
		b.Cut(i)
	}
	b.Task(expired).SetTransport(1)
	b.Task(later).SetTransport(1)
	b.Task(other).SetTransport(2)
	gone := errors.New("plugin gone")
	if n := tr.FailTransport(1, gone); n != 2 {
		t.Fatalf("FailTransport ended %d tasks, want 2", n)
	}
	if s := b.Task(expired).State(); s != Timeout {
		t.Fatalf("expired task is %v, want TIMEOUT", s)
	}
	if s := b.Task(later).State(); s != Failed || !errors.Is(b.Task(later).Err(), gone) {
		t.Fatalf("task with a later deadline is %v (%v), want FAILED with the plugin's error", s, b.Task(later).Err())
	}
	if s := b.Task(other).State(); s != Pending {
		t.Fatalf("task on another plugin is %v", s)
	}
}
