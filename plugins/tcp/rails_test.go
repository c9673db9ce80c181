package tcp_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// twoRails gives an engine rail 0 on 127.0.0.1 and rail 1 on 127.0.0.2
// (all of 127/8 is loopback on Linux; the kernel picks 127.0.0.1 as the
// source for either unless the socket is bound), one connection per
// (peer, rail).
const twoRails = `listen = ["127.0.0.1:0", "127.0.0.2:0"]
connections_per_peer = 1`

func needSecondLoopback(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	ln.Close()
}

func onRail(d ring.Descriptor, r uint16) ring.Descriptor { d.Rail = r; return d }

// TestRails moves bytes on both rails of two two-rail engines and checks,
// through both engines' per-rail counters, that each descriptor used the
// connection of its rail and arrived on the peer's matching address.
func TestRails(t *testing.T) {
	needSecondLoopback(t)
	w := newWorld(t, 1<<20, twoRails)
	fill(w.src, 21)
	fill(w.rw, 22)
	type step struct {
		d    ring.Descriptor
		rail uint16
	}
	steps := []step{
		{write(aSrc, 0, bRW, 0, 1000), 0},
		{write(aSrc, 4096, bRW, 4096, 3000), 1},
		{read(aDst, 0, bRW, 100000, 5000), 0},
		{read(aDst, 10000, bRW, 200000, 7000), 1},
	}
	for _, s := range steps {
		if got := w.do(t, onRail(s.d, s.rail)); got.Status != ring.StatusOK || got.N != s.d.Length {
			t.Fatalf("%v of %d bytes on rail %d: %v, %d bytes", s.d.Op, s.d.Length, s.rail, got.Status, got.N)
		}
	}
	plugintest.MustEqual(t, "write on rail 0", w.rw[0:1000], w.src[0:1000])
	plugintest.MustEqual(t, "write on rail 1", w.rw[4096:7096], w.src[4096:7096])
	plugintest.MustEqual(t, "read on rail 0", w.dst[0:5000], w.rw[100000:105000])
	plugintest.MustEqual(t, "read on rail 1", w.dst[10000:17000], w.rw[200000:207000])

	for _, bad := range []uint16{2, 3, 0xffff} {
		if got := w.do(t, onRail(write(aSrc, 0, bRW, 0, 10), bad)); got.Status != ring.StatusInvalid {
			t.Errorf("rail %d: %v, want %v", bad, got.Status, ring.StatusInvalid)
		}
	}

	// Counters that move before a completion can arrive.
	expect := func(e *engine, who string, want map[string]uint64) {
		t.Helper()
		for k, v := range want {
			if got := e.stat(t, k); got != v {
				t.Errorf("%s %s = %d, want %d", who, k, got, v)
			}
		}
	}
	expect(w.a, "A", map[string]uint64{
		"ops_bad_rail":          3,
		"rail.0.requests":       2,
		"rail.1.requests":       2,
		"rail.0.bytes_sent":     1000,
		"rail.1.bytes_sent":     3000,
		"rail.0.bytes_received": 5000,
		"rail.1.bytes_received": 7000,
		"rail.0.conns_dialed":   1,
		"rail.1.conns_dialed":   1,
		"rail.0.connections":    1,
		"rail.1.connections":    1,
		"rail.0.errors":         0,
		"rail.1.errors":         0,
		"rail.0.conns_accepted": 0,
		"rail.1.conns_accepted": 0,
	})
	// B's rail i accepted exactly A's rail i's connection: rail 1 paired
	// with B's 127.0.0.2 and rail 0 with B's 127.0.0.1.
	expect(w.b, "B", map[string]uint64{
		"rail.0.conns_accepted": 1,
		"rail.1.conns_accepted": 1,
		"rail.0.bytes_received": 1000,
		"rail.1.bytes_received": 3000,
		"rail.0.conns_dialed":   0,
		"rail.1.conns_dialed":   0,
	})
	// B counts a read's bytes once its answer is written, which may be
	// after A has the answer; Stop waits for that.
	if err := w.b.tr.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect(w.b, "B after stop", map[string]uint64{
		"rail.0.bytes_sent": 5000,
		"rail.1.bytes_sent": 7000,
	})
}

// TestRailSourceAddress puts a recording proxy in front of each of B's
// addresses, advertised in the opposite order to B's rails, and checks that
// A's rail i dials the proxy on its own IP from its own IP.
func TestRailSourceAddress(t *testing.T) {
	needSecondLoopback(t)
	w := newWorld(t, 1<<16, twoRails)
	fill(w.src, 31)
	var bEP struct{ Addrs []string }
	if err := jsonUnmarshal(w.b.ep, &bEP); err != nil || len(bEP.Addrs) != 2 {
		t.Fatalf("B endpoint %s: %v", w.b.ep, err)
	}
	px1 := newProxyAt(t, "127.0.0.1:0", bEP.Addrs[0])
	px2 := newProxyAt(t, "127.0.0.2:0", bEP.Addrs[1])
	ep := sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q,%q]}`, px2.ln.Addr(), px1.ln.Addr()))
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 20, Segment: "engine-b", Incarnation: 200, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	via := func(d ring.Descriptor) ring.Descriptor { d.Peer = 20; return d }

	if got := w.do(t, via(onRail(write(aSrc, 0, bRW, 0, 500), 0))); got.Status != ring.StatusOK {
		t.Fatalf("write on rail 0: %v", got.Status)
	}
	if got, want := px1.from(), []string{"127.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("after rail 0: proxy on 127.0.0.1 saw connections from %q, want %q", got, want)
	}
	if got := px2.from(); len(got) != 0 {
		t.Errorf("after rail 0: proxy on 127.0.0.2 saw connections from %q, want none", got)
	}

	if got := w.do(t, via(onRail(write(aSrc, 500, bRW, 500, 700), 1))); got.Status != ring.StatusOK {
		t.Fatalf("write on rail 1: %v", got.Status)
	}
	if got, want := px2.from(), []string{"127.0.0.2"}; !slices.Equal(got, want) {
		t.Errorf("after rail 1: proxy on 127.0.0.2 saw connections from %q, want %q", got, want)
	}
	if got := px1.from(); len(got) != 1 {
		t.Errorf("after rail 1: proxy on 127.0.0.1 saw connections from %q, want one", got)
	}
	plugintest.MustEqual(t, "written through both rails", w.rw[:1200], w.src[:1200])
}

// TestRailsThroughRings drives two two-rail plugin processes the way the
// host does (descriptors through the shared-memory rings): the descriptor's
// Rail reaches the plugin and picks the connection.
func TestRailsThroughRings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and launches the plugin binary")
	}
	needSecondLoopback(t)
	bin := plugintest.BuildPlugin(t, "github.com/ferrydev/ferry/plugins/tcp/cmd/ferry-plugin-tcp")
	a := plugintest.Launch(t, bin, "rails-a", 1, []byte(twoRails))
	b := plugintest.Launch(t, bin, "rails-b", 2, []byte(twoRails))
	local := a.Region(1, 1<<16, sdk.PermLocal)
	remote := b.Region(1, 1<<16, sdk.PermRemoteReadWrite)
	a.OpenPeer(1, b, 2)
	fill(local[:8192], 41)
	fill(remote[32768:], 42)

	desc := func(tok uint64, op ring.Op, rail uint16, off, n uint64) ring.Descriptor {
		return ring.Descriptor{Token: tok, Op: op, Rail: rail, Peer: 1, LocalRegion: 1, LocalOffset: off, RemoteRegion: 1, RemoteOffset: off, Length: n}
	}
	for _, d := range []ring.Descriptor{
		desc(1, ring.OpWrite, 0, 0, 4096),
		desc(2, ring.OpWrite, 1, 4096, 4096),
		desc(3, ring.OpRead, 0, 32768, 1000),
		desc(4, ring.OpRead, 1, 40000, 2000),
	} {
		if c := a.Do(d); c.Status != ring.StatusOK || c.Length != d.Length {
			t.Fatalf("%v on rail %d: %v, %d bytes", d.Op, d.Rail, c.Status, c.Length)
		}
	}
	plugintest.MustEqual(t, "writes on both rails", remote[:8192], local[:8192])
	plugintest.MustEqual(t, "read on rail 0", local[32768:33768], remote[32768:33768])
	plugintest.MustEqual(t, "read on rail 1", local[40000:42000], remote[40000:42000])
	if c := a.Do(desc(5, ring.OpWrite, 2, 0, 10)); c.Status != ring.StatusInvalid {
		t.Fatalf("rail 2: %v, want %v", c.Status, ring.StatusInvalid)
	}

	as, bs := a.Stats(), b.Stats()
	for k, want := range map[string]uint64{
		"rail.0.requests": 2, "rail.1.requests": 2,
		"rail.0.bytes_sent": 4096, "rail.1.bytes_sent": 4096,
		"rail.0.bytes_received": 1000, "rail.1.bytes_received": 2000,
		"ops_bad_rail": 1,
	} {
		if as[k] != want {
			t.Errorf("A %s = %d, want %d", k, as[k], want)
		}
	}
	for k, want := range map[string]uint64{
		"rail.0.conns_accepted": 1, "rail.1.conns_accepted": 1,
		"rail.0.bytes_received": 4096, "rail.1.bytes_received": 4096,
	} {
		if bs[k] != want {
			t.Errorf("B %s = %d, want %d", k, bs[k], want)
		}
	}
}
