package rails

import (
	"fmt"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// at returns a clock for Pick that reads t.
func at(t time.Time) func() time.Time { return func() time.Time { return t } }

// done is the completion of a slice on rail with status st.
func done(rail int, st ring.Status, n uint64) ring.Descriptor {
	d := ring.Descriptor{Token: progress.WithRail(0, rail), Status: st}
	if st == ring.StatusOK {
		d.Length = n
	}
	return d
}

func TestSetFromProbeBlocksAndPolicies(t *testing.T) {
	node := 1
	probed := []sdk.Rail{{Name: "eth0", NUMANode: 0, BandwidthGbps: 10}, {Name: "eth1", NUMANode: 0, BandwidthGbps: 10}, {Name: "eth2", NUMANode: -1}}
	blocks := []Block{
		{Name: "fast", Transport: "tcp", Device: "eth1", NUMANode: &node, BandwidthGbps: 100},
		{Name: "other", Transport: "shm", Device: "eth0", BandwidthGbps: 1}, // another transport's
	}
	policyRails := [][]string{{"fast", "eth2", "nosuch"}, nil}
	s := NewSet("tcp", probed, blocks, policyRails)

	want := []Status{
		{Transport: "tcp", Index: 0, Name: "eth0", NUMANode: 0, NominalGbps: 10},
		{Transport: "tcp", Index: 1, Name: "eth1", Label: "fast", NUMANode: 1, NominalGbps: 100},
		{Transport: "tcp", Index: 2, Name: "eth2", NUMANode: -1},
	}
	if got := s.Rails(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Rails() = %+v, want %+v", got, want)
	}
	for name, has := range map[string]bool{"eth0": true, "fast": true, "eth1": true, "other": false, "tcp": false} {
		if s.Has(name) != has {
			t.Errorf("Has(%q) = %v, want %v", name, !has, has)
		}
	}
	if m := s.Allowed(0); m != 0b110 {
		t.Errorf("Allowed(policy 0) = %b, want 110 (fast and eth2; nosuch is no rail)", m)
	}
	if m := s.Allowed(1); m != 0 {
		t.Errorf("Allowed(policy without rails) = %b, want 0 (all)", m)
	}
	if m := s.Allowed(-1); m != 0 {
		t.Errorf("Allowed(no policy) = %b, want 0 (all)", m)
	}
	if m := s.All(0); m != 0b111 {
		t.Errorf("All(0) = %b, want 111", m)
	}
	if m := s.All(0b10); m != 0b10 {
		t.Errorf("All(10) = %b, want 10", m)
	}
	if !s.SameRails([]sdk.Rail{{Name: "eth0"}, {Name: "eth1"}, {Name: "eth2"}}) {
		t.Error("SameRails(the same names) = false")
	}
	if s.SameRails([]sdk.Rail{{Name: "eth0"}, {Name: "eth1"}}) || s.SameRails(nil) {
		t.Error("SameRails(fewer rails) = true")
	}

	none := NewSet("shm", nil, nil, nil)
	if r := none.Rails(); len(r) != 1 || r[0].Name != "shm" || r[0].NUMANode != -1 {
		t.Errorf("a plugin reporting no rail: Rails() = %+v, want one named shm on NUMA node -1", r)
	}
	if !none.SameRails(nil) {
		t.Error("SameRails(nil) on a set built from no probe = false")
	}

	many := make([]sdk.Rail, progress.MaxRails+3)
	for i := range many {
		many[i].Name = fmt.Sprint("r", i)
	}
	if n := len(NewSet("tcp", many, nil, nil).Rails()); n != progress.MaxRails {
		t.Errorf("%d rails probed: set has %d, want %d (what a token can name)", len(many), n, progress.MaxRails)
	}
}

func TestSetCountsWhatCompletes(t *testing.T) {
	s := NewSet("tcp", []sdk.Rail{{Name: "a", NUMANode: -1, BandwidthGbps: 10}, {Name: "b", NUMANode: -1, BandwidthGbps: 10}}, nil, nil)
	now := t0
	for k := 0; k < 4; k++ {
		if i := s.Pick(MiB, 0b10, at(now)); i != 1 {
			t.Fatalf("Pick among rail 1 only = %d", i)
		}
	}
	s.Unsent(1, MiB)
	if st := s.Status(now)[1]; st.InFlight != 3*MiB {
		t.Fatalf("after 4 picks and 1 unsent: in flight %d, want %d", st.InFlight, 3*MiB)
	}
	now = now.Add(time.Millisecond)
	s.reapedAt([]ring.Descriptor{
		done(1, ring.StatusOK, MiB),
		done(1, ring.StatusIO, 0),                     // the rail's fault
		done(1, ring.StatusOutOfBounds, 0),            // the request's
		done(0, ring.StatusOK, MiB),                   // nothing was sent on rail 0
		done(progress.MaxRails-1, ring.StatusOK, MiB), // no such rail
	}, now)
	st := s.Status(now)
	if st[1].InFlight != 0 || st[1].Bytes != MiB || st[1].Slices != 1 || st[1].Errors != 1 {
		t.Errorf("rail 1 = %+v, want nothing in flight, 1 MiB in 1 slice, 1 error", st[1].RailStats)
	}
	if st[0].Bytes != 0 || st[0].InFlight != 0 {
		t.Errorf("rail 0 = %+v, want untouched", st[0].RailStats)
	}

	s.Pick(MiB, 0b10, at(now))
	s.Pick(MiB, 0b01, at(now))
	s.ForgetAll()
	for i, r := range s.Status(now) {
		if r.InFlight != 0 {
			t.Errorf("after ForgetAll rail %d has %d in flight", i, r.InFlight)
		}
	}
	s.reapedAt([]ring.Descriptor{done(1, ring.StatusOK, MiB)}, now) // sent before the reset
	if st := s.Status(now)[1]; st.Bytes != MiB {
		t.Errorf("a completion of a forgotten slice counted: rail 1 bytes %d, want %d", st.Bytes, MiB)
	}
}

func TestSetAllPausedStillSends(t *testing.T) {
	s := NewSet("tcp", []sdk.Rail{{Name: "a", NUMANode: -1}, {Name: "b", NUMANode: -1}, {Name: "c", NUMANode: -1}}, nil, nil)
	now := t0
	// Three path faults in a row pause a rail; rail 1 first, then rail 0.
	for _, rail := range []int{1, 0} {
		for k := 0; k < 3; k++ {
			if s.Pick(MiB, 1<<rail, at(now)) != rail {
				t.Fatalf("Pick among rail %d only chose another", rail)
			}
			s.reapedAt([]ring.Descriptor{done(rail, ring.StatusPeerUnreachable, 0)}, now)
		}
		now = now.Add(time.Second)
	}
	st := s.Status(now)
	if !st[0].Paused || !st[1].Paused || st[2].Paused {
		t.Fatalf("paused = %v %v %v, want rails 0 and 1", st[0].Paused, st[1].Paused, st[2].Paused)
	}
	if !st[1].PausedUntil.Before(st[0].PausedUntil) {
		t.Errorf("rail 1 paused until %v, rail 0 until %v: want rail 1's pause to end first", st[1].PausedUntil, st[0].PausedUntil)
	}
	if i := s.Pick(MiB, 0b011, at(now)); i != 1 {
		t.Errorf("every allowed rail paused: Pick = %d, want 1 (its pause ends first)", i)
	}
	if i := s.Pick(MiB, 0, at(now)); i != 2 {
		t.Errorf("Pick among all = %d, want 2 (the one not paused)", i)
	}
}

func TestSetOneRail(t *testing.T) {
	s := NewSet("shm", []sdk.Rail{{Name: "mem", NUMANode: -1}}, nil, nil)
	never := func() time.Time { t.Fatal("a set of one rail read the clock to pick"); return time.Time{} }
	for k := 0; k < 4; k++ {
		if i := s.Pick(MiB, 0, never); i != 0 {
			t.Fatalf("Pick = %d on one rail", i)
		}
	}
	s.Unsent(0, MiB)
	s.Reaped([]ring.Descriptor{done(0, ring.StatusOK, MiB), done(0, ring.StatusTimeout, 0)})
	st := s.Status(t0)[0]
	// The failed slice is taken as the mean of those that succeeded.
	if st.Name != "mem" || st.Bytes != MiB || st.Slices != 1 || st.Errors != 1 || st.InFlight != MiB {
		t.Errorf("status = %+v, want 1 MiB in 1 slice, 1 error, 1 MiB in flight", st.RailStats)
	}
	s.Reaped([]ring.Descriptor{done(0, ring.StatusPermission, 0)})
	if st := s.Status(t0)[0]; st.Errors != 1 || st.InFlight != 0 {
		t.Errorf("a refusal of the request: status = %+v, want still 1 error, nothing in flight", st.RailStats)
	}
	s.Pick(MiB, 0, never)
	s.ForgetAll()
	if st := s.Status(t0)[0]; st.InFlight != 0 {
		t.Errorf("after ForgetAll %d in flight", st.InFlight)
	}
	// Bandwidth: the rate of bytes between two reads of the status.
	s.Pick(MiB, 0, never)
	s.Reaped([]ring.Descriptor{done(0, ring.StatusOK, 125e6)})
	if st := s.Status(t0.Add(time.Second)); st[0].EWMAGbps != 1 {
		t.Errorf("125 MB in the second between two reads: %v Gb/s, want 1", st[0].EWMAGbps)
	}
}

func TestPathFault(t *testing.T) {
	for st := ring.StatusOK; st <= ring.StatusShutdown; st++ {
		want := st == ring.StatusPeerUnreachable || st == ring.StatusIO || st == ring.StatusTimeout || st == ring.StatusProtocol
		if PathFault(st) != want {
			t.Errorf("PathFault(%v) = %v, want %v", st, !want, want)
		}
	}
}

func TestSetNoAllocations(t *testing.T) {
	probed := []sdk.Rail{{Name: "a", NUMANode: 0, BandwidthGbps: 100}, {Name: "b", NUMANode: 0, BandwidthGbps: 100}, {Name: "c", NUMANode: 1, BandwidthGbps: 100}, {Name: "d", NUMANode: 1, BandwidthGbps: 100}}
	for _, tc := range []struct {
		name   string
		probed []sdk.Rail
	}{{"four rails", probed}, {"one rail", probed[:1]}} {
		s := NewSet("tcp", tc.probed, nil, nil)
		now := t0
		clock := func() time.Time { return now }
		ds := make([]ring.Descriptor, 1)
		n := testing.AllocsPerRun(1000, func() {
			i := s.Pick(MiB, 0, clock)
			now = now.Add(100 * time.Microsecond)
			ds[0] = done(i, ring.StatusOK, MiB)
			if s.single {
				s.Reaped(ds)
			} else {
				s.reapedAt(ds, now)
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per Pick+Reaped, want 0", tc.name, n)
		}
	}
}

// BenchmarkSetPickReaped is the engine's per-slice rail work: a pick on
// submit, a reap on completion, with 16 slices in flight.
func BenchmarkSetPickReaped(b *testing.B) {
	for _, rails := range []int{1, 8} {
		b.Run(fmt.Sprint("rails=", rails), func(b *testing.B) {
			probed := make([]sdk.Rail, rails)
			for i := range probed {
				probed[i] = sdk.Rail{Name: fmt.Sprint("r", i), NUMANode: i % 2, BandwidthGbps: 100}
			}
			s := NewSet("tcp", probed, nil, nil)
			now := t0
			clock := func() time.Time { return now }
			var inflight [16]ring.Descriptor
			ds := make([]ring.Descriptor, 1)
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				slot := &inflight[k%len(inflight)]
				if k >= len(inflight) {
					ds[0] = *slot
					if s.single {
						s.Reaped(ds)
					} else {
						s.reapedAt(ds, now)
					}
				}
				i := s.Pick(MiB, 0, clock)
				*slot = done(i, ring.StatusOK, MiB)
				now = now.Add(10 * time.Microsecond)
			}
		})
	}
}

// TestPickedCountsOnceAPublication: a single-rail set's bytes picked
// with a Picked are in flight once Counted, not before; a slice taken
// back (UnsentFor) is not counted; a pick on another set counts what
// was held for the first; a set of several rails counts at Pick, as
// before.
func TestPickedCountsOnceAPublication(t *testing.T) {
	now := time.Now()
	inFlight := func(s *Set) uint64 { return s.Status(now)[0].InFlight }
	a, b := NewSet("shm", nil, nil, nil), NewSet("shm", nil, nil, nil)
	var p Picked
	for range 3 {
		if r := a.PickFor(&p, 4096, 0, time.Now); r != 0 {
			t.Fatalf("a single-rail set picked rail %d", r)
		}
	}
	a.UnsentFor(&p, 0, 4096)
	if got := inFlight(a); got != 0 {
		t.Fatalf("in flight before Count: %d bytes, want 0", got)
	}
	p.Count()
	if got := inFlight(a); got != 2*4096 {
		t.Fatalf("in flight after Count: %d bytes, want %d", got, 2*4096)
	}
	p.Count() // nothing held
	a.PickFor(&p, 100, 0, time.Now)
	b.PickFor(&p, 7, 0, time.Now) // another set: the first's count goes now
	if got := inFlight(a); got != 2*4096+100 {
		t.Fatalf("in flight on the first set after a pick on another: %d bytes, want %d", got, 2*4096+100)
	}
	if got := inFlight(b); got != 0 {
		t.Fatalf("in flight on the second set before Count: %d bytes, want 0", got)
	}
	p.Count()
	if got := inFlight(b); got != 7 {
		t.Fatalf("in flight on the second set after Count: %d bytes, want 7", got)
	}

	two := NewSet("tcp", []sdk.Rail{{Name: "r0"}, {Name: "r1"}}, nil, nil)
	var q Picked
	r := two.PickFor(&q, 4096, 0, time.Now)
	if got := two.Status(now)[r].InFlight; got != 4096 {
		t.Fatalf("a set of two rails: %d bytes in flight on the rail picked, want 4096 at Pick", got)
	}
}
