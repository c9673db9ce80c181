package tcp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// stallWrite opens a raw connection to e and leaves a write to region
// half sent, so that e's listener holds the region.
func stallWrite(t *testing.T, e *engine, region uint32) net.Conn {
	c := dialRaw(t, e)
	goodHello(t, c, e)
	mustWrite(t, c, header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: e.incarnation, Region: region, Length: 1000}))
	mustWrite(t, c, make([]byte, 10))
	return c
}

func TestUnregisterWithStalledPeer(t *testing.T) {
	t.Run("io_timeout ends the frame", func(t *testing.T) {
		e := startEngine(t, "e", 1, `io_timeout = "100ms"`)
		mem := make([]byte, 4096)
		e.register(t, 1, mem, sdk.PermRemoteReadWrite)
		c := stallWrite(t, e, 1)
		if err := e.tr.UnregisterMemory(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		dropped(t, c)
		// The connection's goroutine counts the stall after its read
		// fails, which can be after the socket's close shows here.
		for deadline := time.Now().Add(waitLimit); e.stat(t, "errors") == 0; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("the stalled connection was not counted within %s", waitLimit)
			}
		}
	})
	t.Run("a canceled unregister closes the connection", func(t *testing.T) {
		e := startEngine(t, "e", 1, "") // io_timeout 30s: the test would notice
		mem := make([]byte, 4096)
		e.register(t, 1, mem, sdk.PermRemoteReadWrite)
		// Usually the listener holds the region by now and the canceled
		// unregister closes its connection; if the header is still on its
		// way, the region is gone before the listener looks and the frame
		// is refused. Either way the call returns at once.
		c := stallWrite(t, e, 1)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		if err := e.tr.UnregisterMemory(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("unregister took %s", d)
		}
		c.Close()
	})
}

// silentPeer accepts connections, answers the hello and then reads
// everything and answers nothing.
type silentPeer struct {
	ln net.Listener
}

func newSilentPeer(t *testing.T, segment string, incarnation uint64) *silentPeer {
	t.Helper()
	return &silentPeer{ln: serveLoopback(t, func(c net.Conn, _ func(net.Conn) bool) {
		var h [tcp.HelloSize + 64]byte
		if _, err := io.ReadFull(c, h[:tcp.HelloSize+len(segment)]); err != nil {
			return
		}
		var r [tcp.HelloReplySize]byte
		tcp.EncodeHelloReply(r[:], tcp.HelloReply{Version: tcp.ProtocolVersion, Incarnation: incarnation, MaxFrame: 1 << 20})
		if _, err := c.Write(r[:]); err != nil {
			return
		}
		io.Copy(io.Discard, c)
	})}
}

// openSilentPeer opens a silent peer (segment "mute", incarnation 5) as
// peer 1 of a.
func openSilentPeer(t *testing.T, a *engine) {
	t.Helper()
	sp := newSilentPeer(t, "mute", 5)
	ep := sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q]}`, sp.ln.Addr().String()))
	if err := a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 1, Segment: "mute", Incarnation: 5, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
}

// TestSilentPeerTimesOut: reads and writes to a peer that never answers
// end after io_timeout, on a bulk connection and on a priority one,
// although a priority connection's reader waits on its own thread (whose
// waits end at the read deadline).
func TestSilentPeerTimesOut(t *testing.T) {
	for _, prio := range []sdk.Priority{sdk.PriorityNormal, sdk.PriorityHigh} {
		t.Run(fmt.Sprint("prio=", prio), func(t *testing.T) {
			a := startEngine(t, "a", 1, `io_timeout = "100ms"`)
			mem := make([]byte, 1<<16)
			a.register(t, 1, mem, sdk.PermLocal)
			openSilentPeer(t, a)
			col := plugintest.NewCollector(t)
			for i := range uint64(4) {
				d := ring.Descriptor{Token: i, Op: ring.OpWrite + ring.Op(i%2), Peer: 1, LocalRegion: 1, Length: 4096, Prio: uint8(prio)}
				a.tr.Submit(&d, col)
			}
			for i := range uint64(4) {
				if got := col.Wait(i); got.Status != ring.StatusPeerUnreachable {
					t.Fatalf("token %d: %v, want %v", i, got.Status, ring.StatusPeerUnreachable)
				}
			}
			if prio == sdk.PriorityHigh {
				if got := a.stat(t, "ops_priority"); got != 4 {
					t.Errorf("ops_priority = %d, want 4", got)
				}
			}
		})
	}
}

func TestUnregisterAbortsInitiatorFrames(t *testing.T) {
	a := startEngine(t, "a", 1, "") // io_timeout 30s: only the abort ends the frames quickly
	mem := make([]byte, 1<<20)
	a.register(t, 1, mem, sdk.PermLocal)
	openSilentPeer(t, a)
	col := plugintest.NewCollector(t)
	for i := range uint64(8) {
		d := ring.Descriptor{Token: i, Op: ring.OpWrite + ring.Op(i%2), Peer: 1, LocalRegion: 1, LocalOffset: i << 16, Length: 1 << 16}
		a.tr.Submit(&d, col)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := a.tr.UnregisterMemory(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("unregister took %s", d)
	}
	for i := range uint64(8) {
		switch got := col.Wait(i); got.Status {
		case ring.StatusPeerUnreachable, ring.StatusNotRegistered:
		default:
			t.Errorf("token %d: %v", i, got.Status)
		}
	}
}
