package kit_test

import (
	"context"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestRunAccept: a run's Accept makes Accept's checks and verdicts for
// each descriptor; the run takes one reference on a region its
// descriptors share and gives it back at End (or when a descriptor names
// another region), so UnregisterMemory waits for the run; its successes
// are counted at End.
func TestRunAccept(t *testing.T) {
	b := started(t)
	mem5, mem6 := make([]byte, 100), make([]byte, 100)
	for id, mem := range map[uint32][]byte{5: mem5, 6: mem6} {
		if err := b.RegisterMemory(sdk.Region{ID: id, Mem: mem, Perm: sdk.PermLocal}, newRegion); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint32{1, 2} {
		if err := b.AddPeer(id, &peer{id: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	w := func(tok uint64, f func(*ring.Descriptor)) ring.Descriptor {
		d := ring.Descriptor{Token: tok, Op: ring.OpWrite, Peer: 1, LocalRegion: 5, LocalOffset: 10, Length: 20}
		f(&d)
		return d
	}
	var c completions
	u := b.BeginRun()
	for _, tc := range []struct {
		name string
		d    ring.Descriptor
		want ring.Status
	}{
		{"zero length", w(2, func(d *ring.Descriptor) { d.Length = 0 }), ring.StatusInvalid},
		{"passed deadline", w(3, func(d *ring.Descriptor) { d.Deadline = 1 }), ring.StatusTimeout},
		{"unknown peer", w(4, func(d *ring.Descriptor) { d.Peer = 3 }), ring.StatusPeerUnknown},
		{"unknown region", w(5, func(d *ring.Descriptor) { d.LocalRegion = 7 }), ring.StatusNotRegistered},
		{"past the end", w(6, func(d *ring.Descriptor) { d.LocalOffset = 90 }), ring.StatusOutOfBounds},
	} {
		d := tc.d
		if _, _, _, ok := u.Accept(&d, &c); ok {
			t.Fatalf("%s: accepted", tc.name)
		}
		if got := c.status(t, d.Token); got != tc.want {
			t.Fatalf("%s: status %v, want %v", tc.name, got, tc.want)
		}
	}
	// Accepted: the peer and the bytes each descriptor names, the
	// region the one the run holds.
	for _, tc := range []struct {
		peer, region uint32
		off          uint64
		mem          []byte
	}{{1, 5, 10, mem5}, {2, 5, 30, mem5}, {2, 6, 40, mem6}, {1, 5, 0, mem5}} {
		d := w(10, func(d *ring.Descriptor) { d.Peer, d.LocalRegion, d.LocalOffset = tc.peer, tc.region, tc.off })
		p, r, got, ok := u.Accept(&d, &c)
		if !ok || p.id != tc.peer || r.ID != tc.region || len(got) != 20 || cap(got) != 20 || &got[0] != &tc.mem[tc.off] {
			t.Fatalf("peer %d region %d: ok %v peer %v region %d len %d cap %d", tc.peer, tc.region, ok, p, r.ID, len(got), cap(got))
		}
		u.Done()
	}
	// The run holds region 5 (it went back to 5 last) and not 6.
	r6, err := b.UnregisterMemory(6)
	if err != nil {
		t.Fatal(err)
	}
	r6.Release()
	<-r6.Drained()
	r5, err := b.UnregisterMemory(5)
	if err != nil {
		t.Fatal(err)
	}
	r5.Release()
	select {
	case <-r5.Drained():
		t.Fatal("region 5 drained while the run holds it")
	default:
	}
	m := map[string]uint64{}
	b.Outcomes.Export(m)
	if m["ops_completed"] != 0 || m["ops_failed"] != 5 {
		t.Fatalf("outcomes before End: %v", m)
	}
	u.End()
	<-r5.Drained()
	b.Outcomes.Export(m)
	if m["ops_completed"] != 4 {
		t.Fatalf("outcomes after End: %v", m)
	}

	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	u = b.BeginRun()
	d := w(11, func(*ring.Descriptor) {})
	if _, _, _, ok := u.Accept(&d, &c); ok || c.status(t, 11) != ring.StatusShutdown {
		t.Fatal("accepted after stop")
	}
	u.End()
}

// TestRunAllocatesNothing: a run's Accept is on every descriptor's path.
func TestRunAllocatesNothing(t *testing.T) {
	b := ready(t)
	d := ring.Descriptor{Token: 1, Op: ring.OpRead, Peer: 1, LocalRegion: 1, Length: 64}
	var c sdk.Completer = nopCompleter{}
	if n := testing.AllocsPerRun(1000, func() {
		u := b.BeginRun()
		for range 8 {
			if _, _, _, ok := u.Accept(&d, c); ok {
				u.Done()
			}
		}
		u.End()
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRunAccept is BenchmarkAccept for descriptors of a run of 8.
func BenchmarkRunAccept(b *testing.B) {
	k := ready(b)
	d := ring.Descriptor{Token: 1, Op: ring.OpRead, Peer: 1, LocalRegion: 1, Length: 64}
	var c sdk.Completer = nopCompleter{}
	b.ReportAllocs()
	for b.Loop() {
		u := k.BeginRun()
		for range 8 {
			if _, _, _, ok := u.Accept(&d, c); ok {
				u.Done()
			}
		}
		u.End()
	}
}
