package shm_test

import (
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// run hands ds to SubmitRun as one run, with tokens of its own, and
// returns their completions, in ds's order.
func (e *engine) run(t testing.TB, ds ...ring.Descriptor) []plugintest.Completion {
	t.Helper()
	for i := range ds {
		e.next++
		ds[i].Token = e.next
	}
	e.tr.SubmitRun(ds, e.col)
	out := make([]plugintest.Completion, len(ds))
	for i := range ds {
		out[i] = e.col.Wait(ds[i].Token)
	}
	return out
}

// TestSubmitRun: a run's descriptors each get what Submit would give
// them: copies inline (the run's small ones) and on the workers (the
// large ones), in both directions, each byte where it belongs; a run to
// a region not mapped yet waits for it; every refusal with its status;
// and a region its owner unregistered is not copied to by a later run.
func TestSubmitRun(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	local := a.region(t, 1, 4<<20, sdk.PermLocal, "a-local")
	rw := b.region(t, 1, 4<<20, sdk.PermRemoteReadWrite, "b-rw")
	b.region(t, 3, 1<<16, sdk.PermLocal, "b-priv")
	a.open(t, 1, b)
	fill(local, 1)
	fill(rw, 2)
	w := func(off, n uint64) ring.Descriptor {
		return ring.Descriptor{Op: ring.OpWrite, Peer: 1, LocalRegion: 1, LocalOffset: off, RemoteRegion: 1, RemoteOffset: off, Length: n}
	}

	// A fresh peer: its region is mapped when the first descriptors ask.
	for i, c := range a.run(t, w(0, 4096), w(4096, 4096), w(8192, 100)) {
		if c.Status != ring.StatusOK {
			t.Fatalf("first run, descriptor %d: %v", i, c.Status)
		}
	}
	plugintest.MustEqual(t, "first run", rw[:8192+100], local[:8192+100])

	before := a.stats(t)
	wantRead := append([]byte(nil), rw[64<<10:68<<10]...)
	cases := []struct {
		name string
		d    ring.Descriptor
		want ring.Status
	}{
		{"inline write", w(16<<10, 4096), ring.StatusOK},
		{"inline read", ring.Descriptor{Op: ring.OpRead, Peer: 1, LocalRegion: 1, LocalOffset: 64 << 10, RemoteRegion: 1, RemoteOffset: 64 << 10, Length: 4096}, ring.StatusOK},
		{"pooled write", w(1<<20, 2<<20), ring.StatusOK},
		{"remote out of bounds", w(4<<20-5, 10), ring.StatusOutOfBounds},
		{"local-only region", ring.Descriptor{Op: ring.OpRead, Peer: 1, LocalRegion: 1, RemoteRegion: 3, Length: 10}, ring.StatusPermission},
		{"unknown peer", ring.Descriptor{Op: ring.OpWrite, Peer: 9, LocalRegion: 1, RemoteRegion: 1, Length: 10}, ring.StatusPeerUnknown},
		{"unknown local region", ring.Descriptor{Op: ring.OpWrite, Peer: 1, LocalRegion: 8, RemoteRegion: 1, Length: 10}, ring.StatusNotRegistered},
		{"deadline passed", ring.Descriptor{Op: ring.OpWrite, Peer: 1, LocalRegion: 1, RemoteRegion: 1, Length: 10, Deadline: 1}, ring.StatusTimeout},
		{"another inline write", w(20<<10, 4096), ring.StatusOK},
	}
	ds := make([]ring.Descriptor, len(cases))
	for i, c := range cases {
		ds[i] = c.d
	}
	got := a.run(t, ds...)
	for i, c := range cases {
		n := uint64(0)
		if c.want == ring.StatusOK {
			n = c.d.Length
		}
		if got[i].Status != c.want || got[i].N != n {
			t.Errorf("%s: %v, %d bytes; want %v, %d", c.name, got[i].Status, got[i].N, c.want, n)
		}
	}
	for _, c := range cases {
		if c.want != ring.StatusOK {
			continue
		}
		lo, hi := c.d.LocalOffset, c.d.LocalOffset+c.d.Length
		if c.d.Op == ring.OpRead {
			plugintest.MustEqual(t, c.name, local[lo:hi], wantRead)
		} else {
			plugintest.MustEqual(t, c.name, rw[lo:hi], local[lo:hi])
		}
	}
	after := a.stats(t)
	for k, want := range map[string]uint64{"copies_inline": 3, "copies_pooled": 1, "bytes_written": 4096*2 + 2<<20, "bytes_read": 4096, "ops_completed": 4, "ops_failed": 5, "ops_timed_out": 1} {
		if d := after[k] - before[k]; d != want {
			t.Errorf("%s went up by %d, want %d", k, d, want)
		}
	}

	// The owner unregisters the region: a's mapping is revoked, and a
	// later run's write to it is refused, not copied.
	if err := b.tr.UnregisterMemory(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	fill(local[:4096], 3)
	keep := append([]byte(nil), rw[:4096]...)
	if c := a.run(t, w(0, 4096))[0]; c.Status != ring.StatusNotRegistered {
		t.Fatalf("write after the owner unregistered the region: %v, want %v", c.Status, ring.StatusNotRegistered)
	}
	plugintest.MustEqual(t, "the unregistered region", rw[:4096], keep)
}
