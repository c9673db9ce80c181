package remotes

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

// countingTransport counts OpenPeer calls.
type countingTransport struct {
	*fakeTransport
	opens int
}

func (c *countingTransport) OpenPeer(ctx context.Context, p sdk.Peer) error {
	c.opens++
	return c.fakeTransport.OpenPeer(ctx, p)
}

// openMovable opens segment "b" (incarnation 7) in tcp and shm, shm at
// "shm-ep1", and returns the table, the transports and the descriptor
// of the same life with shm moved to "shm-ep2".
func openMovable(t *testing.T, ctx context.Context) (tb *Table, tcp, shm *countingTransport, ts []Transport, next *segment.Descriptor) {
	t.Helper()
	tcp, shm = &countingTransport{fakeTransport: newTransport("tcp")}, &countingTransport{fakeTransport: newTransport("shm")}
	ts = []Transport{tcp, shm}
	tb = New("m", time.Second)
	d := desc(7, 0x1000)
	d.Transports["shm"] = []byte("shm-ep1")
	if _, err := tb.Open(ctx, "b", "segments/b", d, ts); err != nil {
		t.Fatal(err)
	}
	next = desc(7, 0x1000)
	next.Transports["shm"] = []byte("shm-ep2")
	return tb, tcp, shm, ts, next
}

// TestRefreshReopensMovedEndpoint: a refreshed descriptor of the same life
// whose shm endpoint moved (the peer's shm plugin restarted on a new
// socket) re-opens the peer in shm at the new endpoint, leaves tcp (whose
// endpoint did not move) alone, and a transport that refuses the new
// endpoint no longer counts as open.
func TestRefreshReopensMovedEndpoint(t *testing.T) {
	ctx := context.Background()
	tb, tcp, shm, ts, next := openMovable(t, ctx)
	if got := tb.Apply(ctx, "segments/b", Change{Desc: next}, ts, time.Now()); !slices.Equal(got, []Action{Refresh}) {
		t.Fatalf("Apply = %v, want [refresh]", got)
	}
	if p, ok := shm.open(1); !ok || string(p.Endpoint) != "shm-ep2" || p.Incarnation != 7 || shm.opens != 2 {
		t.Fatalf("shm holds peer %+v (%v) after %d opens; want it re-opened at shm-ep2", p, ok, shm.opens)
	}
	if tcp.opens != 1 {
		t.Fatalf("tcp opened the peer %d times; its endpoint did not move, want 1", tcp.opens)
	}
	if h := tb.Get(1); !h.Opened[0] || !h.Opened[1] {
		t.Fatalf("opened %v, want both", h.Opened)
	}

	shm.refuse = true
	moved := desc(7, 0x1000)
	moved.Transports["shm"] = []byte("shm-ep3")
	tb.Apply(ctx, "segments/b", Change{Desc: moved}, ts, time.Now())
	if h := tb.Get(1); !h.Opened[0] || h.Opened[1] {
		t.Fatalf("opened %v after shm refused the new endpoint, want tcp only", h.Opened)
	}
}

// TestOpenSameLifeReopensMovedEndpoint: opening a segment again while its
// handle is open on the same life, with a descriptor whose shm endpoint
// moved (read by the application's OpenSegment before the watch reported
// the change), re-opens the peer in shm at the new endpoint; the watch's
// refresh of that same descriptor then changes nothing, and the plugin is
// not left on the old endpoint.
func TestOpenSameLifeReopensMovedEndpoint(t *testing.T) {
	ctx := context.Background()
	tb, tcp, shm, ts, next := openMovable(t, ctx)
	h, err := tb.Open(ctx, "b", "segments/b", next, ts)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := shm.open(1); !ok || string(p.Endpoint) != "shm-ep2" || shm.opens != 2 {
		t.Fatalf("shm holds peer %+v (%v) after %d opens; want it re-opened at shm-ep2", p, ok, shm.opens)
	}
	if tcp.opens != 1 || !h.Opened[0] || !h.Opened[1] {
		t.Fatalf("tcp opens %d, opened %v; want tcp left alone and both open", tcp.opens, h.Opened)
	}
	if got := tb.Apply(ctx, "segments/b", Change{Desc: next}, ts, time.Now()); !slices.Equal(got, []Action{Keep}) {
		t.Fatalf("Apply = %v, want [keep]", got)
	}
	if shm.opens != 2 {
		t.Fatalf("shm opened %d times; the watch's refresh of the same descriptor should change nothing", shm.opens)
	}
}

// TestReplayOpensAtMovedEndpoint: a restarted transport replays each
// handle's peer at the endpoint moved gives for it (the engine's own
// segment, whose new endpoint the engine knows before the metastore
// does), and at its descriptor's for the others; the handle then
// records the moved endpoint, so that the refresh the republished
// descriptor brings re-opens nothing.
func TestReplayOpensAtMovedEndpoint(t *testing.T) {
	ctx := context.Background()
	tb, _, _, ts, next := openMovable(t, ctx)
	other := desc(9, 0x3000)
	other.Name = "c"
	other.Transports["shm"] = []byte("shm-c")
	if _, err := tb.Open(ctx, "c", "segments/c", other, ts); err != nil {
		t.Fatal(err)
	}
	fresh := &countingTransport{fakeTransport: newTransport("shm")}
	moved := func(h *Handle) ([]byte, bool) { return []byte("shm-ep2"), h.Name == "b" }
	if err := tb.Replay(ctx, 1, "shm", fresh.OpenPeer, moved); err != nil {
		t.Fatal(err)
	}
	if p, ok := fresh.open(1); !ok || string(p.Endpoint) != "shm-ep2" || p.Incarnation != 7 {
		t.Fatalf("replayed b as %+v (%v), want it at shm-ep2", p, ok)
	}
	if p, ok := fresh.open(2); !ok || string(p.Endpoint) != "shm-c" {
		t.Fatalf("replayed c as %+v (%v), want it at its descriptor's shm-c", p, ok)
	}
	if h := tb.Get(1); string(h.Desc.Transports["shm"]) != "shm-ep2" || string(h.Desc.Transports["tcp"]) != "ep" || !h.Opened[0] || !h.Opened[1] {
		t.Fatalf("b's handle after the replay: endpoints %q, opened %v; want shm at shm-ep2, tcp as it was, both open", h.Desc.Transports, h.Opened)
	}
	if h := tb.Get(2); string(h.Desc.Transports["shm"]) != "shm-c" {
		t.Fatalf("c's handle after the replay: shm at %q, want shm-c", h.Desc.Transports["shm"])
	}
	ts[1] = fresh // the restarted transport
	if got := tb.Apply(ctx, "segments/b", Change{Desc: seqd(next, 5)}, ts, time.Now()); !slices.Equal(got, []Action{Refresh}) {
		t.Fatalf("Apply = %v, want [refresh]", got)
	}
	if fresh.opens != 2 {
		t.Fatalf("shm opened peers %d times; the refresh to the endpoint the replay used should re-open nothing, want 2", fresh.opens)
	}
	if h := tb.Get(1); h.Desc.Seq != 5 || !h.Opened[1] {
		t.Fatalf("b's handle after the refresh: seq %d, opened %v; want the published descriptor, shm open", h.Desc.Seq, h.Opened)
	}
}
