package plugintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// The cases beyond round trips and rejections: declared memory kinds,
// rails and lanes, deadlines, and work in flight when the host
// unregisters, aborts, drains, fences or stops, or when the peer dies.

// burst submits n descriptors of size bytes from A to B (writes and
// reads as the plugin carries them), deadline set on each when not 0.
func (s *suite) burst(fx *fixture, n, size int, deadline int64) ([]ring.Descriptor, []chan ring.Descriptor) {
	if n*size > len(fx.rw) {
		n = len(fx.rw) / size
	}
	ds := make([]ring.Descriptor, n)
	for i := range ds {
		off := uint64(i * size)
		ds[i] = ring.Descriptor{Token: token(), Op: s.op(i), LocalRegion: regLocal, LocalOffset: off, Peer: peerB, RemoteRegion: regRW, RemoteOffset: off, Length: uint64(size), Deadline: deadline}
	}
	return ds, fx.a.Submit(ds...)
}

// collect waits for every completion of a burst and fails, naming it, a
// status outside allowed or a byte count that is not the descriptor's
// (a success) or 0..its length (a failure). It returns how many
// completed with each status.
func collect(t TB, in *Instance, ds []ring.Descriptor, chs []chan ring.Descriptor, allowed ...ring.Status) map[ring.Status]int {
	t.Helper()
	got := map[ring.Status]int{}
	for i, ch := range chs {
		c := in.waitFor(t, ch, ds[i].Token)
		got[c.Status]++
		if !slices.Contains(allowed, c.Status) {
			t.Errorf("descriptor %d (%v of %d bytes): %v, want one of %v", i, ds[i].Op, ds[i].Length, c.Status, allowed)
		}
		if c.Status == ring.StatusOK && c.Length != ds[i].Length {
			t.Errorf("descriptor %d: StatusOK with %d bytes, its descriptor carried %d", i, c.Length, ds[i].Length)
		}
	}
	return got
}

func needKinds(s *suite) string {
	for _, k := range s.summary.MemoryKinds {
		if k != sdk.MemoryCPU {
			return ""
		}
	}
	return "the plugin declares host memory (cpu) only, which every case uses"
}

// memoryKinds registers a region of each declared kind other than cpu,
// on both sides, and moves bytes into and out of it: a kind the plugin
// declares and cannot serve is named. Device kinds need device memory,
// which only `ferry gpu-check` has.
func memoryKinds(t Reporter, s *suite, fx *fixture) {
	for _, k := range s.summary.MemoryKinds {
		if k == sdk.MemoryCPU {
			continue
		}
		t.Run(string(k), func(t Reporter) {
			if k == sdk.MemoryCUDA || k == sdk.MemoryROCm {
				if !s.summary.Implements(sdk.InterfaceDeviceImporter) {
					t.Fatalf("declares memory kind %q but does not implement sdk.DeviceImporter, the only way a host registers device memory", k)
				}
				t.Skipf("memory kind %q needs device memory: run `ferry gpu-check`", k)
			}
			const n = 1 << 16
			reg := func(in *Instance, perm sdk.Perm) []byte {
				r, err := shm.Create(fmt.Sprintf("%s-kind-%s", in.name, k), n)
				if err != nil {
					t.Fatalf("%v", err)
				}
				t.Cleanup(func() { r.Close() })
				if err := in.proc.Client.RegisterMemory(context.Background(), regKind, r.FD(), 0, n, perm, k); err != nil {
					t.Fatalf("declares memory kind %q but cannot serve it: registering a %d-byte region of it on %s fails: %v%s", k, n, in.name, err, in.Died())
				}
				t.Cleanup(func() { in.proc.Client.UnregisterMemory(context.Background(), regKind) })
				return r.Mem()
			}
			remote := reg(fx.b, sdk.PermRemoteReadWrite)
			local := reg(fx.a, sdk.PermLocal)
			if s.summary.Carries(ring.OpWrite) {
				fill(local, 5)
				c := fx.a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regKind, Peer: peerB, RemoteRegion: regKind, Length: n})
				if c.Status != ring.StatusOK || !bytes.Equal(local, remote) {
					t.Fatalf("declares memory kind %q but cannot serve it: a write between two regions of it completed %v, bytes equal %v", k, c.Status, bytes.Equal(local, remote))
				}
			}
			if s.summary.Carries(ring.OpRead) {
				fill(remote, 6)
				c := fx.a.do(t, ring.Descriptor{Token: token(), Op: ring.OpRead, LocalRegion: regKind, Peer: peerB, RemoteRegion: regKind, Length: n})
				if c.Status != ring.StatusOK || !bytes.Equal(local, remote) {
					t.Fatalf("declares memory kind %q but cannot serve it: a read between two regions of it completed %v, bytes equal %v", k, c.Status, bytes.Equal(local, remote))
				}
			}
		})
	}
}

func needRails(s *suite) string {
	if n := len(s.summary.Rails); n < 2 {
		return fmt.Sprintf("the plugin's probe lists %d rail(s) with this config: one rail is what every case uses", n)
	}
	return ""
}

// rails sends a descriptor on each rail the probe lists.
func rails(t Reporter, s *suite, fx *fixture) {
	for i, r := range s.summary.Rails {
		op := s.op(0)
		off := i * 8192
		fill(fx.local[off:off+8192], uint64(i+40))
		fill(fx.rw[off:off+8192], uint64(i+80))
		c := fx.a.do(t, ring.Descriptor{Token: token(), Op: op, Rail: uint16(i), LocalRegion: regLocal, LocalOffset: uint64(off), Peer: peerB, RemoteRegion: regRW, RemoteOffset: uint64(off), Length: 8192})
		if c.Status != ring.StatusOK || !bytes.Equal(fx.local[off:off+8192], fx.rw[off:off+8192]) {
			t.Errorf("rail %d (%s): %v of 8 KiB completed %v, bytes equal %v", i, r.Name, op, c.Status, bytes.Equal(fx.local[off:off+8192], fx.rw[off:off+8192]))
		}
	}
}

// twoLanes attaches a second lane to A and runs work on both at once:
// each descriptor completes exactly once, on its own lane's ring.
func twoLanes(t Reporter, s *suite, fx *fixture) {
	const depth, size = 256, 16 << 10
	n := min(200, len(fx.rw)/2/size)
	if n == 0 {
		t.Skipf("the test region holds no 16 KiB descriptor per lane")
	}
	sqr, err := shm.Create("conformance-a-sq1", ring.Size(depth))
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer sqr.Close()
	cqr, err := shm.Create("conformance-a-cq1", ring.Size(depth))
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer cqr.Close()
	sq, _ := ring.Init(sqr.Mem(), depth)
	cq, _ := ring.Init(cqr.Mem(), depth)
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	if _, err := fx.a.proc.Client.AttachLane(ctx, 1, 0, sqr, cqr, pluginclient.LaneTiming{Spin: sdk.DefaultSpin}); err != nil {
		t.Fatalf("attach a second lane: %v%s", err, fx.a.Died())
	}
	// Lane 0 runs a burst in the lower half of the regions, lane 1 one
	// in the upper half.
	ds0, chs0 := s.burst(fx, n, size, 0)
	half := uint64(len(fx.rw) / 2)
	want := map[uint64]uint64{}
	for i := range n {
		d := ring.Descriptor{Token: token(), Op: s.op(i + 1), LocalRegion: regLocal, LocalOffset: half + uint64(i*size), Peer: peerB, RemoteRegion: regRW, RemoteOffset: half + uint64(i*size), Length: size}
		want[d.Token] = d.Length
		for !sq.Enqueue(&d) {
			sq.Publish()
			sq.WaitSpace(sdk.DefaultSpin, 10*time.Millisecond)
		}
	}
	sq.Publish()
	buf := make([]ring.Descriptor, 64)
	until := time.Now().Add(s.wait)
	for len(want) > 0 && time.Now().Before(until) && !fx.a.Gone() {
		k := cq.Dequeue(buf)
		if k == 0 {
			cq.Wait(sdk.DefaultSpin, 10*time.Millisecond)
			continue
		}
		for _, c := range buf[:k] {
			l, ok := want[c.Token]
			switch {
			case !ok:
				t.Errorf("lane 1: stray or duplicate completion token %#x", c.Token)
			case c.Status != ring.StatusOK || c.Length != l:
				t.Errorf("lane 1: token %#x: %v, %d bytes, want StatusOK, %d", c.Token, c.Status, c.Length, l)
			}
			delete(want, c.Token)
		}
	}
	if len(want) > 0 {
		t.Errorf("lane 1: %d of %d descriptors never completed within %v%s", len(want), n, s.wait, fx.a.Died())
	}
	collect(t, fx.a, ds0, chs0, ring.StatusOK)
}

// deadlines: descriptors whose deadline passes inside the plugin (or
// had passed when submitted) complete StatusTimeout, or complete.
func deadlines(t Reporter, s *suite, fx *fixture) {
	past := time.Now().Add(-time.Second).UnixNano()
	d := ring.Descriptor{Token: token(), Op: s.op(0), LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 4096, Deadline: past}
	if c := fx.a.do(t, d); c.Status != ring.StatusTimeout && c.Status != ring.StatusOK {
		t.Errorf("a descriptor whose deadline had passed: %v, want %v (or %v)", c.Status, ring.StatusTimeout, ring.StatusOK)
	}
	ds, chs := s.burst(fx, 128, 64<<10, time.Now().Add(time.Millisecond).UnixNano())
	got := collect(t, fx.a, ds, chs, ring.StatusOK, ring.StatusTimeout)
	t.Logf("128 descriptors with a 1ms deadline: %d ok, %d timed out", got[ring.StatusOK], got[ring.StatusTimeout])
	if c := fx.a.do(t, ring.Descriptor{Token: token(), Op: s.op(0), LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 4096}); c.Status != ring.StatusOK {
		t.Errorf("a descriptor without a deadline after them: %v", c.Status)
	}
}

// unregisterInFlight unregisters A's local region with work on it in
// flight: UnregisterMemory returns, every descriptor completes exactly
// once (any status), and the plugin lives on.
func unregisterInFlight(t Reporter, s *suite, fx *fixture) {
	ds, chs := s.burst(fx, 256, 64<<10, 0)
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	if err := fx.a.proc.Client.UnregisterMemory(ctx, regLocal); err != nil {
		t.Errorf("unregister with %d descriptors in flight: %v%s", len(ds), err, fx.a.Died())
	}
	got := collect(t, fx.a, ds, chs, ring.StatusOK, ring.StatusNotRegistered, ring.StatusCanceled, ring.StatusShutdown, ring.StatusIO, ring.StatusPeerUnreachable)
	t.Logf("after unregister: %v", got)
	if c := fx.a.do(t, ring.Descriptor{Token: token(), Op: s.op(0), LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 10}); c.Status != ring.StatusNotRegistered {
		t.Errorf("a descriptor on the unregistered region: %v, want %v", c.Status, ring.StatusNotRegistered)
	}
}

// abort aborts a burst in flight: Abort finds at most what it was given,
// and every descriptor completes exactly once, aborted or done.
func abort(t Reporter, s *suite, fx *fixture) {
	ds, chs := s.burst(fx, 256, 64<<10, 0)
	toks := make([]uint64, len(ds))
	for i := range ds {
		toks[i] = ds[i].Token
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	n, err := fx.a.proc.Client.Abort(ctx, toks)
	if err != nil {
		t.Errorf("abort %d tokens in flight: %v%s", len(toks), err, fx.a.Died())
	}
	if n > len(toks) {
		t.Errorf("abort of %d tokens found %d", len(toks), n)
	}
	got := collect(t, fx.a, ds, chs, ring.StatusOK, ring.StatusCanceled)
	t.Logf("abort found %d of %d: %d canceled, %d completed", n, len(toks), got[ring.StatusCanceled], got[ring.StatusOK])
	if n, err := fx.a.proc.Client.Abort(ctx, []uint64{token(), token()}); err != nil || n != 0 {
		t.Errorf("abort of tokens it never saw: found %d, %v; want 0, nil", n, err)
	}
}

// drain: Drain returns once everything submitted before it completed,
// and completes what comes after it with StatusShutdown.
func drain(t Reporter, s *suite, fx *fixture) {
	ds, chs := s.burst(fx, 256, 64<<10, 0)
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	if err := fx.a.proc.Client.Drain(ctx); err != nil {
		t.Fatalf("drain with %d descriptors in flight: %v%s", len(ds), err, fx.a.Died())
	}
	// The completions were posted before Drain returned; the reaper
	// takes them off the ring a moment later.
	if left := fx.a.Drain(time.Second); len(left) > 0 {
		t.Errorf("drain returned with %d descriptors submitted before it not completed (first token %#x)", len(left), left[0])
	}
	collect(t, fx.a, ds, chs, ring.StatusOK)
	if c := fx.a.do(t, ring.Descriptor{Token: token(), Op: s.op(0), LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 10}); c.Status != ring.StatusShutdown {
		t.Errorf("a descriptor after Drain: %v, want %v", c.Status, ring.StatusShutdown)
	}
}

// fence: B fences A's run (the integrity issue's "ended means ended at
// both ends"): no write of that run lands in B's memory afterwards, and
// another engine may not fence it.
func fence(t Reporter, s *suite, fx *fixture) {
	if !s.summary.Carries(ring.OpWrite) {
		t.Skipf("the plugin carries no writes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	// A write, so that B serves a connection of A's run.
	fill(fx.local[:4096], 11)
	if c := fx.a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 4096}); c.Status != ring.StatusOK {
		t.Fatalf("write before the fence: %v", c.Status)
	}
	if _, err := fx.b.proc.Client.Fence(ctx, "conformance-x", fx.a.run); err == nil {
		t.Errorf("engine conformance-x fenced the run of conformance-a: want an error (sdk.ErrFenceNotYours)")
	}
	r, err := fx.b.proc.Client.Fence(ctx, fx.a.name, fx.a.run)
	if err != nil {
		t.Fatalf("fence of %s's run %#x: %v%s", fx.a.name, fx.a.run, err, fx.b.Died())
	}
	if !r.Known {
		t.Errorf("fence of %s's run %#x, whose write B just applied: known = false", fx.a.name, fx.a.run)
	}
	before := bytes.Clone(fx.rw[:1<<16])
	fill(fx.local[:1<<16], 12)
	c := fx.a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 1 << 16})
	if !bytes.Equal(fx.rw[:1<<16], before) {
		t.Errorf("a write of the fenced run landed in the target's memory (completed %v)", c.Status)
	}
	if c.Status == ring.StatusOK {
		t.Errorf("a write of the fenced run completed %v", c.Status)
	}
}

// stopInFlight: Stop with work in flight returns, and everything
// outstanding completed (StatusShutdown, or done) before it did.
func stopInFlight(t Reporter, s *suite, fx *fixture) {
	ds, chs := s.burst(fx, 256, 64<<10, 0)
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	err := fx.a.proc.Client.Stop(ctx)
	fx.a.noStop = true
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop with %d descriptors in flight did not return within %v", len(ds), s.wait)
	}
	if err != nil {
		t.Errorf("stop with %d descriptors in flight: %v%s", len(ds), err, fx.a.Died())
	}
	// The SDK stops taking descriptors off the ring before it stops the
	// transport: those still on it were never the plugin's (the host
	// fails them itself). Every one it took completes before Stop
	// returns.
	untaken := fx.a.sq.Cap() - fx.a.sq.Free()
	taken := len(ds) - untaken
	fx.a.forget(ds[taken:])
	if left := fx.a.Drain(time.Second); len(left) > 0 {
		t.Errorf("stop returned with %d of the %d descriptors the plugin had taken not completed (first token %#x): Stop completes outstanding descriptors with StatusShutdown before it returns", len(left), taken, left[0])
	}
	got := collect(t, fx.a, ds[:taken], chs[:taken], ring.StatusOK, ring.StatusShutdown)
	t.Logf("stop with %d descriptors submitted: %d never taken off the ring, %v", len(ds), untaken, got)
}

// peerDeath kills the peer's plugin process (SIGKILL) with writes to it
// in flight: every descriptor completes exactly once, and the initiator
// lives on and fails new work to the dead peer instead of hanging.
func peerDeath(t Reporter, s *suite, fx *fixture) {
	ds, chs := s.burst(fx, 256, 256<<10, 0)
	if err := fx.b.proc.Abort(); err != nil {
		t.Fatalf("kill the peer: %v", err)
	}
	<-fx.b.proc.Exited()
	fx.b.noStop = true
	got := collect(t, fx.a, ds, chs, ring.StatusOK, ring.StatusPeerUnreachable, ring.StatusIO, ring.StatusCanceled, ring.StatusShutdown, ring.StatusTimeout, ring.StatusProtocol)
	t.Logf("after the peer died: %v", got)
	c := fx.a.do(t, ring.Descriptor{Token: token(), Op: s.op(0), LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 4096})
	t.Logf("a descriptor to the dead peer: %v", c.Status)
	if d := fx.a.Died(); d != "" {
		t.Errorf("the initiator died with its peer:%s", d)
	}
}
